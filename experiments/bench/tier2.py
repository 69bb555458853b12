"""The all-to-all suite's Aboleth rows: the seed's tier-2 all-to-all (examples/triton/alltoall.py)
with ROUNDS rounds inside one launch, compiled by Aboleth for this World's transport, passes on,
passes off, and (BENCH_ABLATE=1) each planning pass disabled in turn.

Run one process per rank under torchrun (run.sh does, with MPS when ranks share a GPU):

    torchrun --nproc-per-node 2 experiments/bench/tier2.py OUT_DIR --transport p2p

Per configuration and size (common.measure_rounds): one warm-up launch (it compiles on every
rank), then TIMED_LAUNCHES launches, each after the receive buffer was poisoned and the ranks met
at a barrier, each between CUDA events inside the ``world.compilation(...)`` block; ``round_us`` is the median launch time divided by ROUNDS. Every launch is
checked bit-exact afterwards (every peer's slice, this rank's own slice untouched, the flags at
the last round's epoch); a row is ``checked: true`` only when all its launches were right.
Each configuration compiles for real: a different ``world.compilation(...)`` configuration is a
different kernel (the per-configuration caches of the front door; tests/gpu/config_recompile.py)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import aboleth  # noqa: E402
from kernels import alltoall_rounds  # noqa: E402
from common import RegisteredBuffers, log, measure_rounds, rank_environment, row, sizes, write_rank_report  # noqa: E402

#: The planning passes BENCH_ABLATE=1 disables one at a time (those that act on p2p and proxy).
ABLATED_PASSES = ["eliminate-dead-communication", "size-buffers", "inline-small-payloads",
                  "choose-signal-publication", "plan-completions", "elide-epochs", "assign-queue-owners",
                  "order-publications", "batch-commands", "coalesce-doorbells", "choose-doorbell-scope"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--transport", default="p2p", choices=["p2p", "proxy"])
    parser.add_argument("--num-warps", type=int, action="append", help="repeatable; default 1 and 4")
    arguments = parser.parse_args()
    environment = rank_environment()
    boot = aboleth.TcpStoreBootstrap.from_env()
    rank, n = boot.rank, boot.world_size
    world = aboleth.World(rank, n, device=torch.cuda.current_device(), bootstrap=boot)
    world.connect_all(arguments.transport)
    capacity = max(sizes())
    buffers = RegisteredBuffers(world, n, capacity)
    table, send, send_all, recv_all, my_flags = (buffers.table, buffers.send, buffers.send_all, buffers.recv_all,
                                                 buffers.my_flags)
    configurations: List[Dict[str, Any]] = [{"variant": "passes-on"}, {"variant": "passes-off", "passes_off": True}]
    if os.environ.get("BENCH_ABLATE") == "1":
        configurations += [{"variant": f"without-{name}", "disabled_passes": [name]} for name in ABLATED_PASSES]
    rows: List[Dict[str, Any]] = []
    epoch = 1
    failures: List[str] = []
    for num_warps in arguments.num_warps or [1, 4]:
        for configuration in configurations:
            options = {key: value for key, value in configuration.items() if key != "variant"}
            for bytes_per_peer in sizes():
                def launch(first_epoch: int, rounds: int) -> None:
                    alltoall_rounds[(n - 1,)](table.endpoint_handles.view(torch.int64), table.regions("recv"),
                                              table.regions("flags"), send.address, send.lkey, my_flags,
                                              first_epoch, BYTES=bytes_per_peer, RANK=rank, ROUNDS=rounds,
                                              num_warps=num_warps)

                result = measure_rounds(rank, n, launch, world.barrier, send_all, recv_all, my_flags,
                                        bytes_per_peer, epoch, context=lambda: world.compilation(**options),
                                        after=world.check_waits)
                epoch, errors, rounds = result["next_epoch"], result["errors"], result["rounds"]
                checked = not errors
                if errors:
                    failures.append(f"{configuration['variant']} {bytes_per_peer} B num_warps={num_warps}: "
                                    + "; ".join(errors[:3]))
                launch_median = result["launch_us"]
                rows.append(row("alltoall", "aboleth", f"{arguments.transport}", configuration["variant"], n,
                                bytes_per_peer, num_warps, launch_median / rounds, launch_median, checked,
                                rounds_per_launch=rounds, placement=os.environ.get("BENCH_PLACEMENT", ""),
                                round_us_min=result["launch_us_min"] / rounds, launch_us_min=result["launch_us_min"]))
                log(rank, f"aboleth {arguments.transport} {configuration['variant']} num_warps={num_warps} "
                          f"{bytes_per_peer} B: {launch_median / rounds:.3f} us/round ({rounds} rounds) "
                          f"{'checked' if checked else 'WRONG'}")
    write_rank_report(arguments.out_dir, f"alltoall-aboleth-{arguments.transport}", rank, rows,
                      failures=failures, environment=environment, when=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    world.barrier()
    world.close()
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
