#!/usr/bin/env bash
# Runs every GPU-side check of the Python host API on one host and writes one JSON report.
#
#   tests/gpu/run_all.sh [OUT_DIR]          (from the repository root, on the GPU machine)
#
# Installs the aboleth wheel built on the CPU machine (WHEEL_DIR, default target-carry/wheels;
# `maturin build --release` there) into a private directory with pip --no-deps and puts it on
# PYTHONPATH (the machine's own torch and triton 3.6.0 are used), then runs
# tests/gpu/seed_alltoall.py under torchrun, one process per GPU (NPROC, default 2), bounded by
# `timeout` so that a hung kernel costs seconds. Writes OUT_DIR/seed_alltoall-rank*.json, the log,
# and the merged report OUT_DIR/<date>-seed-alltoall-<machine>.json (also copied to
# tests/gpu/results/). Exit status: 0 when every rank passed.
set -u
# NVLink multicast stays off on the shared GPU machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out_dir=${1:-${OUT:-/tmp/aboleth-gpu}}
wheel_dir=${WHEEL_DIR:-target-carry/wheels}
site=${ABOLETH_SITE:-/tmp/aboleth-site}
nproc=${NPROC:-2}
machine=${MACHINE:-nvidia-h200-x$nproc}
transport=${ABOLETH_TRANSPORT:-p2p}
export ABOLETH_TRANSPORT=$transport
port=${MASTER_PORT:-29633}
mkdir -p "$out_dir"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
    "$wheel_dir"/aboleth-*.whl || { echo "cannot install the aboleth wheel from $wheel_dir"; exit 2; }
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
# CUDA IPC cannot export cuMemCreate allocations (expandable segments).
unset PYTORCH_CUDA_ALLOC_CONF
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$(mktemp -d /tmp/aboleth-triton-XXXXXX)}
# A rank that dies makes the others fail within a minute, not the bootstrap's default 300 s.
export ABOLETH_BOOTSTRAP_TIMEOUT_S=${ABOLETH_BOOTSTRAP_TIMEOUT_S:-60}
export PYTHONUNBUFFERED=1
# torchrun, or the module it runs where the entry point is not on PATH.
launcher=torchrun
command -v torchrun >/dev/null || launcher="python3 -m torch.distributed.run"
command="ABOLETH_TRANSPORT=$transport NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 timeout 300 $launcher --nproc-per-node $nproc --master-addr 127.0.0.1 --master-port $port tests/gpu/seed_alltoall.py $out_dir"
echo "+ $command"
started=$(date +%s.%N)
timeout 300 $launcher --nproc-per-node "$nproc" --master-addr 127.0.0.1 --master-port "$port" \
    tests/gpu/seed_alltoall.py "$out_dir" 2>&1 | tee "$out_dir/seed_alltoall.log"
status=${PIPESTATUS[0]}
finished=$(date +%s.%N)
TRANSPORT=$transport STATUS=$status STARTED=$started FINISHED=$finished COMMAND="$command" MACHINE_KIND=$machine NPROC=$nproc \
python3 - "$out_dir" <<'PY'
import datetime, glob, json, os, platform, subprocess, sys
out_dir = sys.argv[1]
def run(*args):
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as error:
        return f"unavailable: {error}"
ranks = []
for path in sorted(glob.glob(os.path.join(out_dir, "seed_alltoall-rank*.json"))):
    with open(path) as file:
        ranks.append(json.load(file))
status = int(os.environ["STATUS"])
nproc = int(os.environ["NPROC"])
date = datetime.datetime.now(datetime.timezone.utc)
report = {
    "test": f"tests/gpu/seed_alltoall.py: the seed's host example verbatim over {os.environ['TRANSPORT']}, 1000 checked rounds, 8 B..4 MiB per peer",
    "transport": os.environ["TRANSPORT"],
    "command": os.environ["COMMAND"],
    "date": date.isoformat(timespec="seconds"),
    "machine": {
        "kind": os.environ["MACHINE_KIND"],
        "host": platform.node(),
        "gpus": run("nvidia-smi", "--query-gpu=index,name,pci.bus_id,driver_version,memory.total", "--format=csv,noheader"),
        "topology": run("nvidia-smi", "topo", "-m"),
        "python": platform.python_version(),
    },
    "exit_status": status,
    "wall_seconds": round(float(os.environ["FINISHED"]) - float(os.environ["STARTED"]), 3),
    "ranks": ranks,
    "passed": status == 0 and len(ranks) == nproc and all(rank.get("passed") for rank in ranks),
}
suffix = "" if os.environ["TRANSPORT"] == "p2p" else f"-{os.environ['TRANSPORT']}"
name = f"{date:%Y-%m-%d}-seed-alltoall{suffix}-{os.environ['MACHINE_KIND']}.json"
text = json.dumps(report, indent=1)
for directory in (out_dir, "tests/gpu/results"):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "w") as file:
        file.write(text + "\n")
print(f"report: {os.path.join(out_dir, name)}: {'PASSED' if report['passed'] else 'FAILED'} "
      f"(exit status {status}, {len(ranks)} rank report(s), {report['wall_seconds']} s)")
PY
exit $status
