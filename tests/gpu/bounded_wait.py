"""A GPU wait that never completes is bounded: the generated code gives up after
ABOLETH_WAIT_TIMEOUT_MS, records rank, flag, expected and seen values in the rank's wait-failure
log, the program exits, and the host raises it as a Python exception (World.check_waits()).

    ABOLETH_WAIT_TIMEOUT_MS=200 torchrun --nproc-per-node 2 tests/gpu/bounded_wait.py OUT_DIR

Each rank launches a kernel (compiled for p2p and for proxy) that waits for its own flag to reach
an epoch no peer ever sends; the kernel must finish within a few seconds and check_waits() must
raise a RuntimeError naming this rank, the flag's address, the value waited for (7) and the value
seen (0). Then a kernel with four such waits in a row (after World.clear_waits()) must end after
about one bound, not four: the first wait that gives up sets the log's abort_requested and the
others give up at once. Writes OUT_DIR/bounded_wait-rank{R}.json; exit status 0 when every check passed.
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


SEQUENTIAL_WAITS = 4


@triton.jit
def wait_for_nobody(endpoints, my_flags, epoch, RANK: tl.constexpr, RANKS: tl.constexpr):
    ep = al.endpoint(endpoints, (RANK + 1) % RANKS)  # the handle brings the wait-failure log
    al.wait_signal(my_flags, epoch)
    al.drain(ep)


@triton.jit
def wait_four_times_for_nobody(endpoints, my_flags, epoch, RANK: tl.constexpr, RANKS: tl.constexpr):
    """Four waits in a row that all fail: the first gives up after the bound and asks the others
    (through the log's abort_requested) to give up at once, so the launch lasts about one bound,
    not four."""
    ep = al.endpoint(endpoints, (RANK + 1) % RANKS)
    al.wait_signal(my_flags, epoch)
    al.wait_signal(my_flags + 1, epoch)
    al.wait_signal(my_flags + 2, epoch)
    al.wait_signal(my_flags + 3, epoch)
    al.drain(ep)


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "/tmp")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank % torch.cuda.device_count())  # ranks may share a GPU
    boot = aboleth.TcpStoreBootstrap.from_env()
    n = boot.world_size
    report = {"rank": boot.rank, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "timeout_ms": os.environ.get("ABOLETH_WAIT_TIMEOUT_MS"), "checks": {}, "passed": False}
    transport = os.environ.get("ABOLETH_TRANSPORT", "p2p")
    try:
        world = aboleth.World(boot.rank, n, device=torch.cuda.current_device(), bootstrap=boot)
        world.connect_all(transport)
        buf = torch.zeros(8 * max(n, SEQUENTIAL_WAITS), dtype=torch.uint8, device="cuda")
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
        # Four failing waits in a row: compiled (and failed) once, then timed after clear_waits.
        timeout_s = float(os.environ.get("ABOLETH_WAIT_TIMEOUT_MS", "10000")) / 1000
        durations = []
        for attempt in range(2):
            world.clear_waits()
            started = time.monotonic()
            with world.compilation():
                wait_four_times_for_nobody[(1,)](table.endpoint_handles.view(torch.int64), my_flags,
                                                 NEVER_SENT_EPOCH, RANK=boot.rank, RANKS=n)
            torch.cuda.synchronize()
            durations.append(time.monotonic() - started)
        report["checks"]["four_waits_seconds"] = [round(d, 3) for d in durations]
        report["checks"]["four_waits_bound_seconds"] = timeout_s
        try:
            world.check_waits()
            four_raised = False
        except RuntimeError:
            four_raised = True
        # One bound, not four (with room for launch overhead); and the failure is reported.
        report["checks"]["four_waits_gave_up_together"] = durations[1] < 2.5 * timeout_s and four_raised
        report["passed"] = report["passed"] and report["checks"]["four_waits_gave_up_together"]
        world.clear_waits()
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
