"""Whether a kernel's first launch, queued behind kernels of the same process that wait for the
proxy thread, deadlocks until the bounded waits give up (seen in experiments/bench/per_launch.py's
first runs), and whether ``CUDA_MODULE_LOADING`` changes it.

    torchrun --nproc-per-node 2 tests/gpu/proxy_first_launch.py OUT_DIR   (run_proxy_first_launch.sh)

Each trial uses its own BYTES (a fresh pair of binaries: the seed's ``epoch`` is specialized on
divisibility by 16), compiles both with Triton's ``warmup`` (no load), loads the binary of epochs
not divisible by 16 on an idle device (one launch, synchronized), then queues QUEUED launches without synchronizing whose epochs cross a
multiple of 16: that launch is the other binary's first, issued while the earlier launches run
and wait for the proxy. A trial "hangs" when a wait gave up (``check_waits`` raises: the bound is
ABOLETH_WAIT_TIMEOUT_MS, set short by the script); otherwise its last round is checked bit-exact.
Writes OUT_DIR/proxy_first_launch-rank{R}.json with the loading mode and each trial's outcome.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import traceback
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import aboleth  # noqa: E402
from seed_alltoall import Buffers  # noqa: E402
from seed_kernels import alltoall  # noqa: E402

TRIAL_BYTES = [8, 24, 40, 56, 72, 88]
QUEUED = 24


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "/tmp")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank % torch.cuda.device_count())  # ranks may share a GPU (MPS)
    boot = aboleth.TcpStoreBootstrap.from_env()
    n = boot.world_size
    report: Dict[str, Any] = {
        "rank": boot.rank, "ranks": n, "module_loading": os.environ.get("CUDA_MODULE_LOADING", "(unset: LAZY)"),
        "wait_timeout_ms": os.environ.get("ABOLETH_WAIT_TIMEOUT_MS"), "queued_launches": QUEUED,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "trials": []}
    trials: List[Dict[str, Any]] = report["trials"]
    try:
        world = aboleth.World(boot.rank, n, device=torch.cuda.current_device(), bootstrap=boot)
        world.connect_all(os.environ.get("ABOLETH_TRANSPORT", "proxy"))
        buffers = Buffers.register(world, n, max(TRIAL_BYTES))
        table = buffers.table
        epoch = 17
        for index, bytes_per_peer in enumerate(TRIAL_BYTES):
            while epoch % 16 in (0, 15) or epoch == 1:
                epoch += 1
            buffers.prepare(index, bytes_per_peer, poison=(index * 29 + 3) & 0xFF)
            with world.compilation():
                # Both binaries compiled without being loaded (Triton's warmup), as a program that
                # warmed its kernels up has them: only the load is left for the first launch.
                for specialized in (3, 16):
                    alltoall.warmup(table.endpoint_handles.view(torch.int64), table.regions("recv"),
                                    table.regions("flags"), buffers.local_send.address, buffers.local_send.lkey,
                                    buffers.my_flags, specialized, BYTES=bytes_per_peer, RANK=boot.rank,
                                    grid=(n - 1,))
                buffers.launch(epoch, bytes_per_peer)  # loads the non-divisible binary
                epoch += 1
                torch.cuda.synchronize()
                world.check_waits()
                # The queued launches: the first multiple of 16 among them loads the other binary.
                while epoch % 16 != 8:
                    epoch += 1
                first = epoch
                for _ in range(QUEUED):
                    buffers.launch(epoch, bytes_per_peer)
                    epoch += 1
            torch.cuda.synchronize()
            trial: Dict[str, Any] = {"bytes_per_peer": bytes_per_peer, "first_epoch": first, "last_epoch": epoch - 1}
            try:
                world.check_waits()
                errors = buffers.check(index, bytes_per_peer, epoch - 1, (index * 29 + 3) & 0xFF)
                trial.update(hung=False, errors=errors[:3])
            except RuntimeError as error:
                trial.update(hung=True, error=str(error)[:400])
                world.clear_waits()
                epoch += 64  # past whatever the other rank reached
            trials.append(trial)
            print(f"rank {boot.rank}: {bytes_per_peer} B: {'HUNG' if trial['hung'] else 'ok'}", flush=True)
            world.barrier()
        world.close()
        report["passed"] = all(not trial["hung"] and not trial["errors"] for trial in trials)
    except Exception:  # noqa: BLE001 - the report says what failed
        report["error"] = traceback.format_exc()
        report["passed"] = False
    with open(os.path.join(out_dir, f"proxy_first_launch-rank{boot.rank}.json"), "w") as file:
        json.dump(report, file, indent=2)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
