"""Shared pieces of the benchmark suites (experiments/bench/README.md): the rank's setup under
torchrun, the payload every rank can regenerate, the bit-exact check of an all-to-all round, the
choice of rounds per launch, the one timing loop every suite uses (``timed_repetitions``, and
``measure_rounds`` on top of it for the all-to-all rows), and the rows every suite writes.

A row is the README's schema: ``suite, system, transport, variant, ranks, bytes_per_peer,
num_warps, round_us, launch_us, checked`` (plus ``threads`` and ``note`` where they say
something). Each rank writes ``OUT_DIR/<suite>-<system>-rank<R>.json``; report.py merges them.
Times are CUDA events around whole repetitions (one launch, many launches, or one graph replay)."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
from typing import Any, Callable, ContextManager, Dict, List, Optional, Sequence

import torch

#: 8 B .. 4 MiB per peer, the issue's range; BENCH_SIZES (comma-separated bytes) narrows it.
DEFAULT_SIZES = [8, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304]

#: Timed launches per configuration (the median is reported) after one untimed warm-up launch.
TIMED_LAUNCHES = 5


def sizes(default: Optional[Sequence[int]] = None) -> List[int]:
    """BENCH_SIZES (comma-separated bytes per peer) when set, else ``default`` (DEFAULT_SIZES)."""
    text = os.environ.get("BENCH_SIZES", "")
    return [int(value) for value in text.split(",") if value.strip()] or list(default or DEFAULT_SIZES)


def rounds_for(bytes_per_peer: int) -> int:
    """Rounds inside one launch: enough that a launch lasts milliseconds (launch overhead and the
    ranks' start skew then cost under a percent), fewer for large payloads."""
    scale = int(os.environ.get("BENCH_ROUND_SCALE", "1"))
    return max(10, min(2000, (64 << 20) // max(bytes_per_peer, 1) // 64)) * scale


def rank_environment() -> Dict[str, int]:
    """RANK, WORLD_SIZE and LOCAL_RANK from torchrun; binds this process to its GPU (ranks share
    GPUs round-robin when there are more ranks than GPUs: run.sh starts MPS then)."""
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    device = local_rank % torch.cuda.device_count()
    torch.cuda.set_device(device)
    return {"rank": rank, "world_size": world_size, "local_rank": local_rank, "device": device}


class RegisteredBuffers:
    """One registered buffer per rank holding the all-to-all's send slices (``send_all``), receive
    slices (``recv_all``) and flags (``my_flags``, int64), ``capacity`` bytes per peer, exchanged
    as the regions "send", "recv" and "flags" of ``table``: what every suite launches against."""

    def __init__(self, world: Any, world_size: int, capacity: int, flags_bytes: Optional[int] = None) -> None:
        n = world_size
        flags_bytes = 8 * n if flags_bytes is None else flags_bytes
        self.buffer = torch.zeros(2 * n * capacity + flags_bytes, dtype=torch.uint8, device="cuda")
        registration = world.register(self.buffer)
        self.table = world.exchange_regions({
            "send": world.region("send", registration, offset=0, length=n * capacity),
            "recv": world.region("recv", registration, offset=n * capacity, length=n * capacity),
            "flags": world.region("flags", registration, offset=2 * n * capacity, length=flags_bytes),
        })
        self.send_all = self.buffer[:n * capacity]
        self.recv_all = self.buffer[n * capacity:2 * n * capacity]
        self.my_flags = self.buffer[2 * n * capacity:].view(torch.int64)
        self.send = self.table.local("send")

    def launch_arguments(self) -> tuple:
        """The seed's kernel arguments before the epoch: endpoints, recv, flags, send, send_key,
        my_flags."""
        return (self.table.endpoint_handles.view(torch.int64), self.table.regions("recv"),
                self.table.regions("flags"), self.send.address, self.send.lkey, self.my_flags)


def pattern(source_rank: int, destination_rank: int, length_bytes: int) -> torch.Tensor:
    """The bytes ``source_rank`` sends ``destination_rank``: a sequence every rank can regenerate."""
    index = torch.arange(length_bytes, device="cuda", dtype=torch.int64)
    return ((index * 7 + source_rank * 131 + destination_rank * 17 + 3) & 0xFF).to(torch.uint8)


def fill_send(send_all: torch.Tensor, rank: int, world_size: int, bytes_per_peer: int) -> None:
    for peer in range(world_size):
        send_all[peer * bytes_per_peer:(peer + 1) * bytes_per_peer].copy_(pattern(rank, peer, bytes_per_peer))


def check_round(recv_all: torch.Tensor, my_flags: torch.Tensor, rank: int, world_size: int, bytes_per_peer: int,
                epoch: int, poison: int) -> List[str]:
    """Every peer's slice bit-exact, this rank's own slice still ``poison``, every peer's flag =
    ``epoch``. Returns what is wrong (empty when the round is right)."""
    errors = []
    for peer in range(world_size):
        got = recv_all[peer * bytes_per_peer:(peer + 1) * bytes_per_peer]
        expected = torch.full_like(got, poison) if peer == rank else pattern(peer, rank, bytes_per_peer)
        if not torch.equal(got, expected):
            wrong = (got != expected).nonzero()
            errors.append(f"slice from rank {peer}: {wrong.numel()} of {bytes_per_peer} bytes differ, first at byte "
                          f"{int(wrong[0])}: got {int(got[wrong[0]])}, expected {int(expected[wrong[0]])}")
    flags = my_flags.tolist()
    for peer in range(world_size):
        if peer != rank and flags[peer] != epoch:
            errors.append(f"flag of rank {peer} reads {flags[peer]}, expected {epoch}")
    return errors


def timed_repetitions(run: Callable[[int], Any], barrier: Callable[[], Any], prepare: Callable[[int], Any],
                      check: Callable[[int], List[str]], repetitions: int, warmups: int = 1,
                      context: Callable[[], ContextManager[Any]] = contextlib.nullcontext,
                      after: Callable[[], Any] = lambda: None) -> Dict[str, Any]:
    """The suites' one timing loop: ``warmups`` untimed then ``repetitions`` timed repetitions.
    Each: ``prepare(index)`` (payload, poison, flags), a device synchronize, ``barrier()``, then
    ``run(index)`` between two CUDA events recorded inside ``context()`` (so entering
    ``world.compilation(...)`` there is not timed), the end event waited for, ``after()``
    (``check_waits``), and ``check(index)``, whose errors are collected for warm-ups too. Returns
    ``times_us`` (the timed repetitions' event times, in order) and ``errors``."""
    times_us: List[float] = []
    errors: List[str] = []
    for index in range(warmups + repetitions):
        prepare(index)
        torch.cuda.synchronize()
        barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with context():
            start.record()
            run(index)
            end.record()
        end.synchronize()
        after()
        errors += check(index)
        if index >= warmups:
            times_us.append(start.elapsed_time(end) * 1000.0)
    return {"times_us": times_us, "errors": errors}


def poison_for(index: int) -> int:
    """The byte a repetition poisons the receive buffer with (differs from one to the next)."""
    return (37 * index + 11) & 0xFF


def measure_rounds(rank: int, world_size: int, launch: Callable[[int, int], None], barrier: Callable[[], Any],
                   send_all: torch.Tensor, recv_all: torch.Tensor, my_flags: torch.Tensor, bytes_per_peer: int,
                   first_epoch: int, context: Callable[[], ContextManager[Any]] = contextlib.nullcontext,
                   after: Callable[[], Any] = lambda: None) -> Dict[str, Any]:
    """One warm-up and TIMED_LAUNCHES timed launches of ``launch(first_epoch, rounds)``
    (``timed_repetitions``): before each, this rank's payload is in place, the receive buffer
    poisoned and the ranks met at ``barrier``; the CUDA events sit inside ``context()``
    (``world.compilation(...)`` for Aboleth, so entering it is not timed); ``after()`` runs once
    the launch finished (``check_waits``); then the round is checked bit-exact. Returns the
    median and the minimum launch time (us), the rounds, the next epoch and what was wrong."""
    rounds = rounds_for(bytes_per_peer)
    fill_send(send_all, rank, world_size, bytes_per_peer)
    state = {"epoch": first_epoch}

    def prepare(index: int) -> None:
        recv_all[:world_size * bytes_per_peer].fill_(poison_for(index))

    def check(index: int) -> List[str]:
        last_epoch = state["epoch"] + rounds - 1
        state["epoch"] = last_epoch + 1
        return check_round(recv_all, my_flags, rank, world_size, bytes_per_peer, last_epoch, poison_for(index))

    timed = timed_repetitions(lambda index: launch(state["epoch"], rounds), barrier, prepare, check,
                              TIMED_LAUNCHES, context=context, after=after)
    return {"launch_us": median(timed["times_us"]), "launch_us_min": min(timed["times_us"]), "rounds": rounds,
            "next_epoch": state["epoch"], "errors": timed["errors"]}


def row(suite: str, system: str, transport: str, variant: str, ranks: int, bytes_per_peer: int,
        num_warps: Optional[int], round_us: Optional[float], launch_us: Optional[float], checked: bool,
        **extra: Any) -> Dict[str, Any]:
    result = {"suite": suite, "system": system, "transport": transport, "variant": variant, "ranks": ranks,
              "bytes_per_peer": bytes_per_peer, "num_warps": num_warps, "round_us": round_us,
              "launch_us": launch_us, "checked": checked}
    result.update(extra)
    return result


def median(values: List[float]) -> float:
    return statistics.median(values)


def write_rank_report(out_dir: str, name: str, rank: int, rows: List[Dict[str, Any]], **extra: Any) -> str:
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{name}-rank{rank}.json")
    with open(path, "w") as file:
        json.dump({"rank": rank, "rows": rows, **extra}, file, indent=1)
    return path


def log(rank: int, message: str) -> None:
    print(f"[rank {rank}] {message}", flush=True)
