# Sourced by the tests/gpu/run_*.sh scripts: the environment every GPU check runs in, and the
# aboleth wheel built on the CPU machine (WHEEL_DIR, default target-carry/wheels) installed into
# a private directory with pip --no-deps and put on PYTHONPATH (the machine's own torch and
# triton 3.6.0 are used). Sets out_dir, nproc, machine, transport, port and launcher.
# NVLink multicast stays off on the shared GPU machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out_dir=${1:-${OUT:-/tmp/aboleth-gpu}}
wheel_dir=${WHEEL_DIR:-target-carry/wheels}
site=${ABOLETH_SITE:-/tmp/aboleth-site}
nproc=${NPROC:-2}
# The machine's name in the reports' file names: the GPU model nvidia-smi reports (an H100 or an
# H200 can answer for either 1-GPU kind), unless MACHINE names it.
gpu_model=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$gpu_model" in
    *H100*) gpu_model=nvidia-h100 ;;
    *H200*) gpu_model=nvidia-h200 ;;
    *) gpu_model=nvidia-gpu ;;
esac
machine=${MACHINE:-$gpu_model-x$nproc}
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
# Ranks outnumbering the GPUs share them under CUDA MPS: without it their kernels time-slice and
# every spin-wait measures the scheduler. Call before the launcher; MPS stops when the script ends.
mps_note=""
start_mps_if_ranks_share_gpus() {
    local gpus
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    if [ "${gpus:-0}" -ge "$nproc" ]; then
        return
    fi
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    local control=nvidia-cuda-mps-control
    [ -x /usr/local/nvidia/bin/nvidia-cuda-mps-control ] && control=/usr/local/nvidia/bin/nvidia-cuda-mps-control
    "$control" -d && trap "echo quit | $control" EXIT
    mps_note=" ($nproc ranks on $gpus GPU(s) under CUDA MPS: not NVLink)"
    machine=${MACHINE:-$gpu_model-${nproc}ranks-mps}
    echo "started CUDA MPS: $nproc ranks share $gpus GPU(s)"
}
