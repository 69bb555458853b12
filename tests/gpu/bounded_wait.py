"""A GPU wait that never completes is bounded: the generated code gives up after
ABOLETH_WAIT_TIMEOUT_MS, records rank, flag, expected and seen values in the rank's wait-failure
log, the program exits, and the host raises it as a Python exception (World.check_waits()).

    ABOLETH_WAIT_TIMEOUT_MS=200 torchrun --nproc-per-node 2 tests/gpu/bounded_wait.py OUT_DIR

Each rank launches a kernel (compiled for p2p and for proxy) that waits for its own flag to reach
an epoch no peer ever sends; the kernel must finish within a few seconds and check_waits() must
raise a RuntimeError naming this rank, the flag's address, the value waited for (7) and the value
seen (0). Writes OUT_DIR/bounded_wait-rank{R}.json; exit status 0 when every check passed.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
import traceback

import torch
import triton
import triton.language as tl

import aboleth
import aboleth.language as al

NEVER_SENT_EPOCH = 7


@triton.jit
def wait_for_nobody(endpoints, my_flags, epoch, RANK: tl.constexpr, RANKS: tl.constexpr):
    ep = al.endpoint(endpoints, (RANK + 1) % RANKS)  # the handle brings the wait-failure log
    al.wait_signal(my_flags, epoch)
    al.drain(ep)


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "/tmp")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    boot = aboleth.TcpStoreBootstrap.from_env()
    n = boot.world_size
    report = {"rank": boot.rank, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "timeout_ms": os.environ.get("ABOLETH_WAIT_TIMEOUT_MS"), "checks": {}, "passed": False}
    transport = os.environ.get("ABOLETH_TRANSPORT", "p2p")
    try:
        world = aboleth.World(boot.rank, n, device=torch.cuda.current_device(), bootstrap=boot)
        world.connect_all(transport)
        buf = torch.zeros(8 * n, dtype=torch.uint8, device="cuda")
        reg = world.register(buf)
        table = world.exchange_regions({"flags": world.region("flags", reg, offset=0, length=8 * n)})
        my_flags = buf.view(torch.int64)
        started = time.monotonic()
        with world.compilation():
            kernel = wait_for_nobody[(1,)](table.endpoint_handles.view(torch.int64), my_flags, NEVER_SENT_EPOCH,
                                          RANK=boot.rank, RANKS=n)
        torch.cuda.synchronize()
        seconds = time.monotonic() - started
        report["checks"]["kernel_finished_seconds"] = round(seconds, 3)
        summary = kernel.metadata.aboleth
        summary = json.loads(summary) if isinstance(summary, str) else summary
        report["checks"]["wait_sites"] = summary.get("waits")
        try:
            world.check_waits()
            report["checks"]["check_waits"] = "did not raise"
        except RuntimeError as error:
            message = str(error)
            report["checks"]["check_waits"] = message
            report["passed"] = (f"rank {boot.rank}" in message and f">= {NEVER_SENT_EPOCH}" in message
                                and "last saw 0" in message and seconds < 30)
        world.close()
    except Exception:
        report["error"] = traceback.format_exc()
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"bounded_wait-rank{report['rank']}.json"), "w") as file:
        json.dump(report, file, indent=1)
    print(f"rank {report['rank']}: {'PASSED' if report['passed'] else 'FAILED'}: {report['checks']}"
          f"{report.get('error', '')}", flush=True)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
