"""A configuration change recompiles, on the GPU, with real launches; and what entering
``world.compilation()`` around every launch costs.

    torchrun --nproc-per-node 2 tests/gpu/config_recompile.py OUT_DIR   (run_config_recompile.sh)

Each rank runs the seed's all-to-all (BYTES = 256, ``examples/triton/alltoall.py``) launched as
the seed writes it, ``with world.compilation(...)`` around each launch:

1. ``recompile``: 10 checked rounds each under passes on, passes off, passes on again and passes
   off again, with epochs Triton does not specialize on (not 1, not a multiple of 16). The
   kernel objects Triton returns must differ between the two configurations (and their PTX), and
   coming back to a configuration must return its kernel (the in-memory cache of that
   configuration, no recompilation). Every round is checked bit-exact.
2. ``launch_cost``: per launch from Python (host wall clock over 300 back-to-back launches after
   warm-up, synchronized at the end): a plain Triton kernel with the seed's signature and no
   communication; the seed's kernel inside one ``compilation()`` block; the seed's kernel with
   the block entered around each launch. Informational (the issue's target is the third at most
   1.1x the first). Also ``compilation_enter_exit_us``: entering and leaving the block alone,
   without a launch (host only), and with ABOLETH_PROFILE_LAUNCHES=1, rank 0's cProfile of the
   block-around-each-launch loop (``launch_profile``: the top entries by cumulative time).

Writes OUT_DIR/config_recompile-rank{R}.json; exit status 0 when every check passed.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
import traceback
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import aboleth  # noqa: E402
from seed_alltoall import Buffers, wait_for  # noqa: E402
from seed_kernels import alltoall  # noqa: E402

BYTES = 256
ROUNDS_PER_CONFIGURATION = 10
TIMED_LAUNCHES = 300
WARMUP_LAUNCHES = 32


@triton.jit
def plain(endpoints, recv, flags, send, send_key, my_flags, epoch, BYTES: tl.constexpr, RANK: tl.constexpr):
    """The seed's signature, no communication: what a launch from Python costs anyway."""
    if tl.program_id(0) == 0:
        tl.store(my_flags + RANK, epoch)


def launch_in_block(buffers: Buffers, epoch: int, **configuration: Any) -> Any:
    n, rank = buffers.n, buffers.world.rank
    with buffers.world.compilation(**configuration):
        return alltoall[(n - 1,)](buffers.table.endpoint_handles.view(torch.int64),
                                  buffers.table.regions("recv"), buffers.table.regions("flags"),
                                  buffers.local_send.address, buffers.local_send.lkey, buffers.my_flags, epoch,
                                  BYTES=BYTES, RANK=rank)


def recompile_checks(buffers: Buffers, epoch: int) -> Dict[str, Any]:
    kernels: Dict[str, List[Any]] = {"passes on": [], "passes off": []}
    failures: List[str] = []
    epochs: List[int] = []
    for phase, passes_off in enumerate([False, True, False, True]):
        name = "passes off" if passes_off else "passes on"
        for index in range(ROUNDS_PER_CONFIGURATION):
            while epoch == 1 or epoch % 16 == 0:
                epoch += 1
            epochs.append(epoch)
            round_seed = 1000 * phase + index
            poison = (31 * index + 7) & 0xFF
            buffers.prepare(round_seed, BYTES, poison)
            kernels[name].append(launch_in_block(buffers, epoch, passes_off=passes_off))
            done = torch.cuda.Event()
            done.record()
            wait_for(done, f"{name} round {index}", buffers.my_flags)
            errors = buffers.check(round_seed, BYTES, epoch, poison)
            if errors:
                failures.append(f"{name} phase {phase} round {index}: " + "; ".join(errors))
            epoch += 1
    on, off = kernels["passes on"], kernels["passes off"]
    # Both phases of a configuration launch the same specialization (epochs are never 1 or a
    # multiple of 16, which Triton would specialize on), so each configuration has one kernel.
    distinct_on, distinct_off = {id(kernel) for kernel in on}, {id(kernel) for kernel in off}
    checks = {
        "rounds_checked": 4 * ROUNDS_PER_CONFIGURATION,
        "epochs": epochs,
        "failed_rounds": failures[:10],
        "kernels_differ_between_configurations": not (distinct_on & distinct_off),
        "ptx_differs_between_configurations": on[0].asm["ptx"] != off[0].asm["ptx"],
        "back_to_a_configuration_finds_its_kernel": len(distinct_on) == 1 and len(distinct_off) == 1,
        "kernel_objects_per_configuration": [len(distinct_on), len(distinct_off)],
    }
    checks["passed"] = (not failures and checks["kernels_differ_between_configurations"]
                        and checks["ptx_differs_between_configurations"]
                        and checks["back_to_a_configuration_finds_its_kernel"])
    checks["next_epoch"] = epoch
    return checks


def time_per_launch(buffers: Buffers, epoch: int, launch: Any) -> Dict[str, Any]:
    buffers.world.barrier()
    for _ in range(WARMUP_LAUNCHES):
        launch(epoch)
        epoch += 1
    torch.cuda.synchronize()
    buffers.world.barrier()
    started = time.perf_counter()
    for _ in range(TIMED_LAUNCHES):
        launch(epoch)
        epoch += 1
    done = torch.cuda.Event()
    done.record()
    wait_for(done, "timed launches", buffers.my_flags)
    seconds = time.perf_counter() - started
    return {"per_launch_us": round(seconds / TIMED_LAUNCHES * 1e6, 2), "next_epoch": epoch}


def enter_exit_cost(world: Any, repetitions: int = 5000) -> float:
    """Microseconds to enter and leave ``world.compilation()`` once, without a launch."""
    for _ in range(100):
        with world.compilation():
            pass
    started = time.perf_counter()
    for _ in range(repetitions):
        with world.compilation():
            pass
    return round((time.perf_counter() - started) / repetitions * 1e6, 2)


def profiled(launch: Any) -> Any:
    """``launch`` under cProfile; returns (the launch, a function giving the top entries)."""
    import cProfile
    import io
    import pstats

    profile = cProfile.Profile()

    def run(epoch: int) -> Any:
        profile.enable()
        try:
            return launch(epoch)
        finally:
            profile.disable()

    def top(entries: int = 30) -> str:
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(entries)
        return text.getvalue()

    return run, top


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "/tmp")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank % torch.cuda.device_count())  # ranks may share a GPU (MPS)
    boot = aboleth.TcpStoreBootstrap.from_env()
    n = boot.world_size
    report: Dict[str, Any] = {"rank": boot.rank, "ranks": n, "passed": False,
                              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                              "gpus_visible": torch.cuda.device_count()}
    try:
        world = aboleth.World(boot.rank, n, device=torch.cuda.current_device(), bootstrap=boot)
        world.connect_all(os.environ.get("ABOLETH_TRANSPORT", "p2p"))
        buffers = Buffers.register(world, n, BYTES)
        table = buffers.table
        checks = recompile_checks(buffers, epoch=1)
        report["recompile"] = checks
        epoch = checks["next_epoch"]

        def plain_launch(epoch: int) -> None:
            plain[(n - 1,)](table.endpoint_handles.view(torch.int64), table.regions("recv"),
                            table.regions("flags"), buffers.local_send.address, buffers.local_send.lkey,
                            buffers.my_flags, epoch, BYTES=BYTES, RANK=boot.rank)

        cost: Dict[str, Any] = {}
        timed = time_per_launch(buffers, epoch, plain_launch)
        cost["plain_triton_kernel_us"], epoch = timed["per_launch_us"], timed["next_epoch"]
        with world.compilation():
            timed = time_per_launch(buffers, epoch, lambda e: buffers.launch(e, BYTES))
        cost["seed_in_one_block_us"], epoch = timed["per_launch_us"], timed["next_epoch"]
        timed = time_per_launch(buffers, epoch, lambda e: launch_in_block(buffers, e))
        cost["seed_block_around_each_launch_us"], epoch = timed["per_launch_us"], timed["next_epoch"]
        cost["compilation_enter_exit_us"] = enter_exit_cost(world)
        if os.environ.get("ABOLETH_PROFILE_LAUNCHES") == "1":
            launch, top = profiled(lambda e: launch_in_block(buffers, e))
            timed = time_per_launch(buffers, epoch, launch)
            epoch = timed["next_epoch"]
            if boot.rank == 0:
                report["launch_profile"] = top()
        cost["block_around_each_launch_over_plain"] = round(
            cost["seed_block_around_each_launch_us"] / cost["plain_triton_kernel_us"], 3)
        report["launch_cost"] = cost
        report["passed"] = checks["passed"]
    except Exception:  # noqa: BLE001 - the report says what failed
        report["error"] = traceback.format_exc()
    with open(os.path.join(out_dir, f"config_recompile-rank{boot.rank}.json"), "w") as file:
        json.dump(report, file, indent=2)
    print(json.dumps(report, indent=2))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
