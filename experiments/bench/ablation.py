"""The pass-ablation suite (README.md): streams of 1, 4 and 16 put+signal chains from each of two
ranks to the other (kernels.py's ``stream_chains``), compiled as the planning passes are added in
pipeline order (``first-K``: the first K passes on, the others disabled; ``first-0`` runs only the
lowering but, unlike ``passes-off``, keeps the declared options), every switchable pass off in
turn (``without-NAME``), the defaults (``passes-on``) and ``passes-off``. Each row reports the
GPU posting time (SM clock cycles around the posting loop, read with ``clock64`` inside the
kernel, and the same in microseconds at the SM clock of the run), the launch time (CUDA events),
and the reservations, doorbells, fences and ring entries or WQEs the stage counted for that
binary (its summary in the kernel's metadata).

    torchrun --nproc-per-node 2 experiments/bench/ablation.py OUT_DIR --transport proxy

WARMUP_LAUNCHES (2) untimed and TIMED_LAUNCHES (20) timed launches per row (common.py's
timing loop), each after the receive buffer was poisoned and the ranks met at a barrier; every
launch checked bit-exact (each chain's slice and flag). The posting time is reported as the
median (``posting_cycles``, ``posting_us``: what the report shows first) and the minimum
(``posting_cycles_min``, ``posting_us_min``) over the timed launches, and the launch time as
the median (``launch_us``) and the minimum (``launch_us_min``): a median of 3 launches on a GPU
shared by two ranks varied up to 100x between rows compiled to the same code."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import aboleth  # noqa: E402
from common import (RegisteredBuffers, log, median, pattern, poison_for, rank_environment, row, timed_repetitions,  # noqa: E402
                    write_rank_report)
from kernels import stream_chains  # noqa: E402
from tier2 import ABLATED_PASSES  # noqa: E402

CHAIN_COUNTS = [1, 4, 16]
BYTES_PER_CHAIN = 256
#: Untimed launches per row (the first compiles on every rank) and timed ones: the posting clock
#: needs more than the all-to-all suite's 3 (README, "The posting clock").
WARMUP_LAUNCHES = 2
TIMED_LAUNCHES = 20


def sm_clock_mhz() -> Optional[float]:
    try:
        return float(torch.cuda.clock_rate())
    except Exception:  # noqa: BLE001 - without NVML the row keeps cycles only
        return None


def configurations() -> List[Dict[str, Any]]:
    result: List[Dict[str, Any]] = [{"variant": "passes-off", "passes_off": True}]
    for count in range(len(ABLATED_PASSES) + 1):
        result.append({"variant": f"first-{count}", "disabled_passes": ABLATED_PASSES[count:]})
    result.append({"variant": "passes-on"})
    result += [{"variant": f"without-{name}", "disabled_passes": [name]} for name in ABLATED_PASSES]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--transport", default="proxy", choices=["p2p", "proxy", "rdma"],
                        help="rdma: mlx5 over the software NIC (ABOLETH_RDMA_DEVICE=soft)")
    arguments = parser.parse_args()
    environment = rank_environment()
    boot = aboleth.TcpStoreBootstrap.from_env()
    rank, n = boot.rank, boot.world_size
    if n != 2:
        raise SystemExit("ablation.py runs on exactly 2 ranks (each streams to the other)")
    world = aboleth.World(rank, n, device=torch.cuda.current_device(), bootstrap=boot)
    world.connect_all(arguments.transport)
    capacity = max(CHAIN_COUNTS) * BYTES_PER_CHAIN
    flags_bytes = 8 * n * max(CHAIN_COUNTS)
    buffers = RegisteredBuffers(world, n, capacity, flags_bytes)
    table, send, send_all, recv_all, my_flags = (buffers.table, buffers.send, buffers.send_all, buffers.recv_all,
                                                 buffers.my_flags)
    posting_cycles = torch.zeros(1, dtype=torch.int64, device="cuda")
    peer = 1 - rank
    clock_mhz = sm_clock_mhz()
    rows: List[Dict[str, Any]] = []
    failures: List[str] = []
    epoch = 3
    for chains in CHAIN_COUNTS:
        length = chains * BYTES_PER_CHAIN
        send_all[:length].copy_(pattern(rank, peer, length))
        for configuration in configurations():
            options = {key: value for key, value in configuration.items() if key != "variant"}
            cycles: List[int] = []
            state: Dict[str, Any] = {"epoch": epoch, "compiled": None}

            def prepare(index: int) -> None:
                recv_all.fill_(poison_for(index))

            def run(index: int) -> None:
                state["compiled"] = stream_chains[(1,)](
                    table.endpoint_handles.view(torch.int64), table.regions("recv"), table.regions("flags"),
                    send.address, send.lkey, my_flags, state["epoch"], posting_cycles, BYTES=BYTES_PER_CHAIN,
                    RANK=rank, CHAINS=chains)

            def check(index: int) -> List[str]:
                variant, errors = configuration["variant"], []
                got = recv_all[peer * chains * BYTES_PER_CHAIN:(peer + 1) * chains * BYTES_PER_CHAIN]
                if not torch.equal(got, pattern(peer, rank, length)):
                    errors.append(f"{variant} {chains} chains launch {index}: the peer's data differs")
                flags = my_flags[peer * chains:(peer + 1) * chains].tolist()
                if any(value != state["epoch"] for value in flags):
                    errors.append(f"{variant} {chains} chains launch {index}: flags {flags}, expected {state['epoch']}")
                if index >= WARMUP_LAUNCHES:
                    cycles.append(int(posting_cycles.item()))
                state["epoch"] += 1
                return errors

            nic_before = world.soft_nic_statistics()
            timed = timed_repetitions(run, world.barrier, prepare, check, TIMED_LAUNCHES, warmups=WARMUP_LAUNCHES,
                                      context=lambda: world.compilation(**options), after=world.check_waits)
            epoch, errors, launch_us = state["epoch"], timed["errors"], timed["times_us"]
            nic = {}
            if nic_before is not None:
                # Every launch waited for its peer's signals and its own last completion, and the
                # barrier for the peer's: both NICs have executed the row's WQEs.
                world.barrier()
                nic_after = world.soft_nic_statistics()
                launches = WARMUP_LAUNCHES + TIMED_LAUNCHES
                nic = {f"nic_{name}_per_launch": (nic_after[name] - nic_before[name]) / launches
                       for name in ("doorbells_observed", "wqes_executed", "wqes_failed")}
                if nic["nic_wqes_failed_per_launch"]:
                    errors.append(f"{configuration['variant']} {chains} chains: WQEs failed on the software NIC")
            summary = getattr(state["compiled"].metadata, "aboleth", None) if state["compiled"] is not None else None
            counts = json.loads(summary).get("counts") if isinstance(summary, str) else None
            failures += errors
            posting, posting_min = median(cycles), min(cycles)
            rows.append(row("ablation", "aboleth", arguments.transport, configuration["variant"], n,
                            BYTES_PER_CHAIN, 4, None, median(launch_us), not errors, chains=chains,
                            posting_cycles=posting, posting_us=posting / clock_mhz if clock_mhz else None,
                            posting_cycles_min=posting_min,
                            posting_us_min=posting_min / clock_mhz if clock_mhz else None,
                            launch_us_min=min(launch_us), timed_launches=TIMED_LAUNCHES,
                            counts=counts, disabled_passes=options.get("disabled_passes", []),
                            passes_off=options.get("passes_off", False), **nic))
            log(rank, f"{arguments.transport} {chains} chains {configuration['variant']}: {posting:.0f} cycles "
                      f"posting (min {posting_min}), {median(launch_us):.2f} us launch "
                      f"{'checked' if not errors else 'WRONG'}")
    write_rank_report(arguments.out_dir, f"ablation-aboleth-{arguments.transport}", rank, rows, failures=failures,
                      environment=environment, sm_clock_mhz=clock_mhz,
                      when=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    world.barrier()
    world.close()
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
