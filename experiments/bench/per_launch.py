"""The per-launch suite (README.md): what one launch of the seed's all-to-all costs when launched
from Python, one round per launch, against a plain Triton kernel with the same signature and no
aboleth calls (kernels.py's ``alltoall`` and ``plain_alltoall``), over this World's transport.

    torchrun --nproc-per-node 2 experiments/bench/per_launch.py OUT_DIR --transport p2p [--nccl]

Rows per size (8 B, 256 B and 16 KiB per peer unless BENCH_SIZES says otherwise):

- ``plain-triton eager``: LAUNCHES back-to-back launches of the plain kernel;
- ``aboleth eager-one-block``: the seed's kernel, all LAUNCHES launches inside one
  ``world.compilation()`` block;
- ``aboleth eager-block-per-launch``: ``with world.compilation():`` entered around each launch, as
  the seed's host code writes it (issue 13's target: at most 1.1x the plain kernel);
- ``plain-triton graph`` and ``aboleth graph``: LAUNCHES consecutive launches (epochs e .. e +
  LAUNCHES - 1, an argument of each launch) captured in one ``torch.cuda.CUDAGraph``, replayed once
  per repetition; between replays (outside the graph) the receive buffer is poisoned, the flags
  are reset to 0 (a wait is for a flag to reach its epoch, and every replay sends the same
  epochs) and the ranks meet at a barrier. A capture that fails on any rank is a failed row (its
  ``error`` says why, on every rank), not the end of the suite;
- with ``--nccl`` (run.sh passes it to the first transport's run): NCCL's ``all_to_all_single``
  eager and graph, only with more than one GPU and one rank per GPU; otherwise it is recorded in
  ``not_run`` ("NCCL refuses two ranks on one GPU").

Timing (common.timed_repetitions): per row WARMUP_REPETITIONS untimed and REPETITIONS timed
repetitions of LAUNCHES launches (or one replay), CUDA events around the repetition; ``launch_us``
is the median repetition time / LAUNCHES (the slowest rank's, after report.py merges the ranks),
``launch_us_min`` the minimum, ``round_us`` = ``launch_us`` (one round per launch). Events time
what the GPU sees, so a launch the host issues slower than the GPU runs it is timed at the host's
pace. Before any row of a size, Triton's ``warmup`` compiles both specializations of each kernel
(the seed's ``epoch`` is specialized when it is a multiple of 16) without launching, and
WARMUP_LAUNCHES eager launches of each load both binaries, so no repetition and no capture
compiles or loads a module. The kernels' arguments are evaluated once per size, not per
launch, for every row alike.

Checks: each launch overwrites the same slices, so after every repetition the last launch is
checked bit-exact as in tier2.py (every peer's slice, this rank's own slice still the poison,
every peer's flag at the last epoch); the plain kernel communicates nothing and is checked by its
own flag (program 0 stores the epoch). After each row (and after each capture, before any
replay) the ranks gather each other's errors (torch.distributed over gloo), so a row that fails
on one rank fails on all with every rank's reason, and the next row starts together."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import traceback
from typing import Any, Callable, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import aboleth  # noqa: E402
from common import (RegisteredBuffers, check_round, fill_send, log, median, pattern, poison_for, rank_environment, row,  # noqa: E402
                    sizes, timed_repetitions, write_rank_report)
from kernels import alltoall, plain_alltoall  # noqa: E402

SUITE = "per-launch"
#: Issue 13's sizes for this suite (bytes per peer); BENCH_SIZES replaces them.
PER_LAUNCH_SIZES = [8, 256, 16384]
#: Launches per timed repetition, eager, and launches captured in one graph.
LAUNCHES = 100
REPETITIONS = 7
WARMUP_REPETITIONS = 1
#: Eager launches of each kernel before a size's rows, after Triton's ``warmup`` compiled both
#: specializations of ``epoch`` (a multiple of 16 or not): at least 16 consecutive epochs, so
#: both binaries are launched once (a binary's first launch loads its module) before any timing
#: or capture.
WARMUP_LAUNCHES = 32
#: Stream capture in thread-local mode: the proxy's host thread issues copies, stream writes and
#: stream synchronizes on its own stream; in the default (global) mode a capture on this thread
#: would forbid those "unsafe" calls on every thread while it lasts.
CAPTURE_ERROR_MODE = "thread_local"
#: Triton's default warps per program (the seed launches without num_warps).
NUM_WARPS = 4


def nccl_not_run_reason(world_size: int) -> Optional[str]:
    """Why NCCL's rows cannot run here (None when they can): NCCL needs one GPU per rank."""
    gpus = torch.cuda.device_count()
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    if gpus < 2 or gpus < local_ranks:
        return (f"NCCL refuses two ranks on one GPU ({local_ranks} ranks on {gpus} GPU(s) here: "
                "run on a machine with a GPU per rank)")
    if not dist.is_nccl_available():
        return "this torch was built without NCCL"
    return None


def every_ranks_error(error: Optional[str]) -> Optional[str]:
    """Every rank's ``error`` (None where a rank had none), gathered over gloo: None when no rank
    had one, else the errors named by rank, the same text on every rank."""
    errors: List[Optional[str]] = [None] * dist.get_world_size()
    dist.all_gather_object(errors, error)
    named = [f"rank {rank}: {text}" for rank, text in enumerate(errors) if text is not None]
    return "; ".join(named) if named else None


class FailedOnSomeRank(RuntimeError):
    """A failure every rank has raised together, its message already naming the ranks."""


def capture(launches: Callable[[], None], context: Callable[[], Any]) -> torch.cuda.CUDAGraph:
    """``launches()`` captured into a new CUDA graph, inside ``context()``; raises what capture raised."""
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.current_stream()
    torch.cuda.synchronize()
    try:
        with context():
            with torch.cuda.graph(graph, capture_error_mode=CAPTURE_ERROR_MODE):
                launches()
    finally:
        # torch.cuda.graph leaves its capture stream current when ending the capture raises.
        torch.cuda.set_stream(stream)
    torch.cuda.synchronize()
    return graph


class Rows:
    """This rank's rows, failures and not-run reasons; ``measure`` records one row, with the
    same outcome on every rank."""

    def __init__(self, rank: int, n: int, transport: str) -> None:
        self.rank, self.n, self.transport = rank, n, transport
        self.rows: List[Dict[str, Any]] = []
        self.failures: List[str] = []
        self.not_run: Dict[str, str] = {}

    def measure(self, system: str, variant: str, bytes_per_peer: int, body: Callable[[], Dict[str, Any]],
                transport: Optional[str] = None, **extra: Any) -> None:
        """Runs ``body`` (which returns ``times_us``, ``errors``, ``launches``) and records its
        row. An exception, or a failure on another rank, makes the row a failure with its reason
        in ``error``: the suite goes on with the next row."""
        transport = transport or self.transport
        num_warps = None if system == "nccl" else NUM_WARPS
        what = f"{system} {transport} {variant} {bytes_per_peer} B"
        try:
            result, error, agreed = body(), None, False
        except FailedOnSomeRank as caught:  # every rank is here, with the same message
            result, error, agreed = None, str(caught), True
            log(self.rank, f"{what}: failed: {error}")
        except Exception as caught:  # noqa: BLE001 - the row says what failed, the suite goes on
            result, error, agreed = None, f"{type(caught).__name__}: {caught}", False
            log(self.rank, f"{what}: failed:\n{traceback.format_exc()}")
        if not agreed:
            error = every_ranks_error(error)
        if error is not None:
            self.failures.append(f"{what}: {error}")
            self.rows.append(row(SUITE, system, transport, variant, self.n, bytes_per_peer, num_warps, None, None,
                                 False, error=error, **extra))
            return
        assert result is not None
        errors, launches = result["errors"], result["launches"]
        per_launch = [value / launches for value in result["times_us"]]
        launch_us = median(per_launch)
        if errors:
            self.failures.append(f"{what}: " + "; ".join(errors[:3]))
        self.rows.append(row(SUITE, system, transport, variant, self.n, bytes_per_peer, num_warps, launch_us,
                             launch_us, not errors, launch_us_min=min(per_launch), launches_per_repetition=launches,
                             repetitions=len(per_launch), rounds_per_launch=1, **extra))
        log(self.rank, f"{what}: {launch_us:.2f} us/launch (min {min(per_launch):.2f}) "
                       f"{'checked' if not errors else 'WRONG'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--transport", default="p2p", choices=["p2p", "proxy"])
    parser.add_argument("--nccl", action="store_true",
                        help="also NCCL's all_to_all_single (run.sh passes it to one transport's run)")
    arguments = parser.parse_args()
    environment = rank_environment()
    boot = aboleth.TcpStoreBootstrap.from_env()
    rank, n = boot.rank, boot.world_size
    world = aboleth.World(rank, n, device=torch.cuda.current_device(), bootstrap=boot)
    world.connect_all(arguments.transport)
    nccl_reason = nccl_not_run_reason(n) if arguments.nccl else None
    with_nccl = arguments.nccl and nccl_reason is None
    # gloo for the ranks' agreement after each row; NCCL for its own rows where it can run.
    dist.init_process_group("cpu:gloo,cuda:nccl" if with_nccl else "gloo")
    size_list = sizes(PER_LAUNCH_SIZES)
    capacity = max(size_list)
    buffers = RegisteredBuffers(world, n, capacity)
    send_all, recv_all, my_flags = buffers.send_all, buffers.recv_all, buffers.my_flags
    arguments_of_launch = buffers.launch_arguments()
    rows = Rows(rank, n, arguments.transport)
    state = {"epoch": 2}  # never 1: Triton would specialize the seed's epoch on it

    for bytes_per_peer in size_list:
        fill_send(send_all, rank, n, bytes_per_peer)

        def seed(epoch: int) -> None:
            alltoall[(n - 1,)](*arguments_of_launch, epoch, BYTES=bytes_per_peer, RANK=rank)

        def plain(epoch: int) -> None:
            plain_alltoall[(n - 1,)](*arguments_of_launch, epoch, BYTES=bytes_per_peer, RANK=rank)

        def seed_in_block(epoch: int) -> None:
            with world.compilation():
                seed(epoch)

        def warm_up() -> List[str]:
            """Loads both specializations of each kernel (the seed's epoch is specialized on
            divisibility by 16) with one launch each and the device idle in between, then
            WARMUP_LAUNCHES launches of each, the seed's checked. A binary's first launch loads
            its module, and CUDA's (lazy) loading can wait for the kernels in flight: over the
            proxy those wait for the proxy thread, whose driver calls wait for the load, until
            the waits give up (seen here with the 32 launches queued across an epoch that is a
            multiple of 16; tests/gpu/proxy_first_launch.py reproduces it, with lazy and with
            eager module loading)."""
            errors = []
            for kernel, context in ((plain_alltoall, contextlib.nullcontext), (alltoall, world.compilation)):
                launch = seed if kernel is alltoall else plain
                for divisible in (False, True):
                    while (state["epoch"] % 16 == 0) != divisible:
                        state["epoch"] += 1
                    world.barrier()
                    with context():
                        launch(state["epoch"])
                    state["epoch"] += 1
                    torch.cuda.synchronize()
                    world.check_waits()
                recv_all[:n * bytes_per_peer].fill_(poison_for(0))
                torch.cuda.synchronize()
                world.barrier()
                with context():
                    for _ in range(WARMUP_LAUNCHES):
                        launch(state["epoch"])
                        state["epoch"] += 1
                torch.cuda.synchronize()
                world.check_waits()
                if kernel is alltoall:
                    last_epoch = state["epoch"] - 1
                    errors += check_round(recv_all, my_flags, rank, n, bytes_per_peer, last_epoch, poison_for(0))
            return errors

        def prepare(index: int, reset_flags: bool = False) -> None:
            recv_all[:n * bytes_per_peer].fill_(poison_for(index))
            if reset_flags:
                my_flags.zero_()
            else:
                my_flags[rank] = 0  # the plain kernel's check can then fail

        def eager(launch: Callable[[int], None], checker: Callable[[int, int], List[str]],
                  context: Optional[Callable[[], Any]] = None) -> Dict[str, Any]:
            def run(index: int) -> None:
                for _ in range(LAUNCHES):
                    launch(state["epoch"])
                    state["epoch"] += 1

            timed = timed_repetitions(run, world.barrier, prepare, lambda index: checker(index, state["epoch"] - 1),
                                      REPETITIONS, warmups=WARMUP_REPETITIONS,
                                      context=context or contextlib.nullcontext, after=world.check_waits)
            return {**timed, "launches": LAUNCHES}

        def graph(launch: Callable[[int], None], checker: Callable[[int, int], List[str]],
                  context: Optional[Callable[[], Any]] = None) -> Dict[str, Any]:
            first = state["epoch"]
            state["epoch"] += LAUNCHES
            error = None
            try:
                captured = capture(lambda: [launch(first + index) for index in range(LAUNCHES)],
                                   context or contextlib.nullcontext)
            except Exception as caught:  # noqa: BLE001 - every rank must hear of it before replaying
                captured, error = None, f"graph capture failed: {type(caught).__name__}: {caught}"
                log(rank, f"{error}\n{traceback.format_exc()}")
            error = every_ranks_error(error)
            if error is not None:
                raise FailedOnSomeRank(error)
            assert captured is not None
            timed = timed_repetitions(lambda index: captured.replay(), world.barrier,
                                      lambda index: prepare(index, reset_flags=True),
                                      lambda index: checker(index, first + LAUNCHES - 1), REPETITIONS,
                                      warmups=WARMUP_REPETITIONS, after=world.check_waits)
            # The flags now hold the graph's last epoch, below the next eager launch's.
            return {**timed, "launches": LAUNCHES}

        def check_seed(index: int, last_epoch: int) -> List[str]:
            return check_round(recv_all, my_flags, rank, n, bytes_per_peer, last_epoch, poison_for(index))

        def check_plain(index: int, last_epoch: int) -> List[str]:
            own = int(my_flags[rank].item())
            return [] if own == last_epoch else [f"own flag reads {own}, expected {last_epoch}"]

        try:
            warm_up_errors = warm_up()
        except RuntimeError as error:  # a wait gave up: say what the proxy thread saw, skip the size
            proxy = ""
            try:
                world.check_proxy()
            except RuntimeError as proxy_error:
                proxy = f"; proxy: {proxy_error}"
            rows.failures.append(f"warm-up {bytes_per_peer} B: {error}{proxy}")
            log(rank, f"warm-up {bytes_per_peer} B failed, size skipped: {error}{proxy}")
            torch.cuda.synchronize()
            world.clear_waits()
            world.barrier()
            continue
        if warm_up_errors:
            rows.failures.append(f"warm-up {bytes_per_peer} B: " + "; ".join(warm_up_errors[:3]))
        rows.measure("plain-triton", "eager", bytes_per_peer, lambda: eager(plain, check_plain),
                     note="no communication; measured in this transport's run")
        rows.measure("aboleth", "eager-one-block", bytes_per_peer,
                     lambda: eager(seed, check_seed, context=world.compilation))
        rows.measure("aboleth", "eager-block-per-launch", bytes_per_peer, lambda: eager(seed_in_block, check_seed))
        rows.measure("plain-triton", "graph", bytes_per_peer, lambda: graph(plain, check_plain),
                     note="no communication; measured in this transport's run", capture_error_mode=CAPTURE_ERROR_MODE)
        rows.measure("aboleth", "graph", bytes_per_peer, lambda: graph(seed, check_seed, context=world.compilation),
                     capture_error_mode=CAPTURE_ERROR_MODE)

    if arguments.nccl:
        if with_nccl:
            nccl_rows(rows, size_list, world.barrier)
        else:
            rows.not_run["nccl"] = nccl_reason or ""
            log(rank, f"nccl: not run: {nccl_reason}")
    write_rank_report(arguments.out_dir, f"per-launch-aboleth-{arguments.transport}", rank, rows.rows,
                      failures=rows.failures, not_run=rows.not_run, environment=environment,
                      when=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    world.barrier()
    world.close()
    dist.destroy_process_group()
    return 0 if not rows.failures else 1


def nccl_rows(rows: Rows, size_list: List[int], barrier: Callable[[], Any]) -> None:
    """NCCL's ``all_to_all_single`` per launch, eager and graph (one GPU per rank only): the same
    repetitions and checks, every slice (this rank's own included: NCCL copies it) bit-exact."""
    rank, n = rows.rank, rows.n
    for bytes_per_peer in size_list:
        send_all = torch.empty(n * bytes_per_peer, dtype=torch.uint8, device="cuda")
        recv_all = torch.empty_like(send_all)
        fill_send(send_all, rank, n, bytes_per_peer)
        expected = torch.cat([pattern(peer, rank, bytes_per_peer) for peer in range(n)])

        def prepare(index: int) -> None:
            recv_all.fill_(poison_for(index))

        def check(index: int) -> List[str]:
            if torch.equal(recv_all, expected):
                return []
            wrong = (recv_all != expected).nonzero()
            return [f"{wrong.numel()} of {recv_all.numel()} bytes differ, first at byte {int(wrong[0])}"]

        def launches() -> None:
            for _ in range(LAUNCHES):
                dist.all_to_all_single(recv_all, send_all)

        def eager() -> Dict[str, Any]:
            timed = timed_repetitions(lambda index: launches(), barrier, prepare, check, REPETITIONS,
                                      warmups=WARMUP_REPETITIONS)
            return {**timed, "launches": LAUNCHES}

        def graph() -> Dict[str, Any]:
            # NCCL's communicator exists after the eager rows; torch's documented path captures
            # collectives in the default (global) mode, on torch's capture stream.
            captured = torch.cuda.CUDAGraph()
            torch.cuda.synchronize()
            with torch.cuda.graph(captured):
                launches()
            torch.cuda.synchronize()
            timed = timed_repetitions(lambda index: captured.replay(), barrier, prepare, check, REPETITIONS,
                                      warmups=WARMUP_REPETITIONS)
            return {**timed, "launches": LAUNCHES}

        rows.measure("nccl", "eager", bytes_per_peer, eager, transport="nccl")
        rows.measure("nccl", "graph", bytes_per_peer, graph, transport="nccl")


if __name__ == "__main__":
    sys.exit(main())
