"""The seed's host example, verbatim, on real GPUs over p2p, then checked and timed.

Run one process per GPU on one host (tests/gpu/run_all.sh does this):

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
        torchrun --nproc-per-node 2 tests/gpu/seed_alltoall.py OUT_DIR

Steps, each rank:
1. ``seed``: the seed's host example (shared/seed/aboleth-overview.txt) with BYTES = 256 and
   ``world.connect_all("p2p")``, launching the seed's tier-2 all-to-all (examples/triton/alltoall.py, verbatim)
   once with epoch 1; then every peer's flag must read 1.
2. ``api``: the API's error paths and tables on the GPU: register() of a CPU tensor and of a
   non-contiguous view (TypeError), a region past the end of its registration and an unknown
   region name (ValueError), the table tensors alias the runtime's device tables and hold the
   bytes of their host copies.
3. ``rounds``: 1000 rounds with epochs 2..1001 and fresh random payloads (each rank derives every
   rank's payload from a seed, so it knows what it must receive), checked bit-exact every round:
   every peer's slice, this rank's own untouched slice, and the flags.
4. ``sizes``: a second registration for 8 B .. 4 MiB per peer (BYTES a constexpr, grid n - 1):
   per size, 5 checked rounds with fresh payloads, then 16 untimed and 50 timed launches back to
   back (CUDA events around each; a launch includes waiting for the peers' signals, so its time
   is a round's latency including the ranks' skew), then the data checked again.

Rounds are separated by a barrier after the receive buffer was poisoned, so no peer writes into
it while this rank still checks the previous round. Generated code has no bounded waits yet, so
the host waits on an event with a deadline instead of synchronizing: a kernel that does not
finish is reported (with the flags it sees) and the process exits without hanging.

Each rank writes OUT_DIR/seed_alltoall-rank{R}.json; run_all.sh merges them. Exit status 0 when
every step passed on this rank.
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
import sys
import time
import traceback
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import aboleth  # noqa: E402
from seed_kernels import alltoall  # noqa: E402

ROUNDS = 1000
SIZES = [1 << shift for shift in range(3, 23)]  # 8 B .. 4 MiB per peer
CHECKED_ROUNDS_PER_SIZE = 5
TIMED_LAUNCHES_PER_SIZE = 50
WARMUP_LAUNCHES = 16
KERNEL_DEADLINE_S = 30.0  # the first launch of a size includes compiling on every rank


class KernelDidNotFinish(Exception):
    """A launch did not complete within the deadline."""


def wait_for(event: Any, what: str, my_flags: Any, deadline_s: float = KERNEL_DEADLINE_S) -> None:
    """Polls ``event`` until the work before it finished; after ``deadline_s`` reads the flags on
    a side stream (the hung kernel holds the default one) and raises KernelDidNotFinish."""
    start = time.monotonic()
    while not event.query():
        if time.monotonic() - start > deadline_s:
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                host = torch.empty(my_flags.shape, dtype=my_flags.dtype, pin_memory=True)
                host.copy_(my_flags, non_blocking=True)
            side.synchronize()
            raise KernelDidNotFinish(f"{what}: the kernel did not finish within {deadline_s:.0f} s; "
                                     f"this rank's flags read {host.tolist()}")
        time.sleep(0.0002)


def payload(round_seed: int, source_rank: int, nbytes: int) -> Any:
    """Rank ``source_rank``'s send buffer in round ``round_seed``: ``nbytes`` random bytes that
    every rank can regenerate (Philox on the GPU, seeded)."""
    generator = torch.Generator(device="cuda")
    generator.manual_seed(round_seed * 1_000_003 + source_rank * 7919 + nbytes)
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda", generator=generator)


#: The transport the run connects with (ABOLETH_TRANSPORT): "p2p" (the seed's line), "proxy",
#: "rdma" (mlx5 over the software NIC, with ABOLETH_RDMA_DEVICE=soft), or "ionic" (experimental:
#: Ionic queues on the software NIC, with ABOLETH_RDMA_DEVICE=soft).
TRANSPORT = os.environ.get("ABOLETH_TRANSPORT", "p2p")


def seed_example(BYTES: int) -> Dict[str, Any]:
    # ---- The seed's host example, verbatim but for the transport name (TRANSPORT). ----
    import torch, aboleth
    boot = aboleth.TcpStoreBootstrap.from_env() # MASTER_ADDR, RANK, WORLD_SIZE
    n = boot.world_size
    world = aboleth.World(boot.rank, n, device=torch.cuda.current_device(),
                          bootstrap=boot)
    world.connect_all(TRANSPORT) # or "p2p", "proxy", "auto"
    buf = torch.zeros(2 * n * BYTES + 8 * n, dtype=torch.uint8, device="cuda")
    reg = world.register(buf)
    table = world.exchange_regions({
        "send": world.region("send", reg, offset=0, length=n * BYTES),
        "recv": world.region("recv", reg, offset=n * BYTES, length=n * BYTES),
        "flags": world.region("flags", reg, offset=2 * n * BYTES, length=8 * n),
    })
    send = table.local("send")
    my_flags = buf[2 * n * BYTES:].view(torch.int64)
    with world.compilation():
        alltoall[(n - 1,)](table.endpoint_handles.view(torch.int64),
                           table.regions("recv"), table.regions("flags"),
                           send.address, send.lkey, my_flags, 1,
                           BYTES=BYTES, RANK=boot.rank)
    # ---- End of the seed's example. ----
    return dict(boot=boot, n=n, world=world, buf=buf, reg=reg, table=table, send=send, my_flags=my_flags)


class Buffers:
    """One registration laid out as the seed's: send | recv | flags, for ``capacity`` bytes per
    peer; ``bytes_per_peer`` is what the kernel moves (its BYTES)."""

    def __init__(self, world: Any, table: Any, buf: Any, n: int, capacity: int) -> None:
        self.world, self.table, self.buf, self.n, self.capacity = world, table, buf, n, capacity
        self.send_all = buf[:n * capacity]
        self.recv_all = buf[n * capacity:2 * n * capacity]
        self.my_flags = buf[2 * n * capacity:2 * n * capacity + 8 * n].view(torch.int64)
        self.local_send = table.local("send")

    @classmethod
    def register(cls, world: Any, n: int, capacity: int) -> "Buffers":
        """A fresh buffer laid out as the seed's, registered and exchanged as its regions."""
        buf = torch.zeros(2 * n * capacity + 8 * n, dtype=torch.uint8, device="cuda")
        reg = world.register(buf)
        table = world.exchange_regions({
            "send": world.region("send", reg, offset=0, length=n * capacity),
            "recv": world.region("recv", reg, offset=n * capacity, length=n * capacity),
            "flags": world.region("flags", reg, offset=2 * n * capacity, length=8 * n),
        })
        return cls(world, table, buf, n, capacity)

    def launch(self, epoch: int, bytes_per_peer: int) -> None:
        n, rank = self.n, self.world.rank
        alltoall[(n - 1,)](self.table.endpoint_handles.view(torch.int64),
                           self.table.regions("recv"), self.table.regions("flags"),
                           self.local_send.address, self.local_send.lkey, self.my_flags, epoch,
                           BYTES=bytes_per_peer, RANK=rank)

    def prepare(self, round_seed: int, bytes_per_peer: int, poison: int) -> None:
        """Fills this rank's send slices with its payload, poisons recv, waits, then barriers:
        after the barrier every rank has poisoned and stopped reading its recv."""
        n, rank = self.n, self.world.rank
        size = n * bytes_per_peer
        self.send_all[:size].copy_(payload(round_seed, rank, size))
        self.recv_all[:size].fill_(poison)
        torch.cuda.synchronize()
        self.world.barrier()

    def check(self, round_seed: int, bytes_per_peer: int, epoch: int, poison: int) -> List[str]:
        """Every peer's slice bit-exact, this rank's own slice still poison, peers' flags = epoch."""
        n, rank = self.n, self.world.rank
        errors = []
        for peer in range(n):
            got = self.recv_all[peer * bytes_per_peer:(peer + 1) * bytes_per_peer]
            if peer == rank:
                expected = torch.full_like(got, poison)
            else:
                expected = payload(round_seed, peer, n * bytes_per_peer)[rank * bytes_per_peer:(rank + 1) * bytes_per_peer]
            if not torch.equal(got, expected):
                wrong = (got != expected).nonzero()
                errors.append(f"slice from rank {peer}: {wrong.numel()} of {bytes_per_peer} bytes differ, first at "
                              f"byte {int(wrong[0])}: got {int(got[wrong[0]])}, expected {int(expected[wrong[0]])}")
        flags = self.my_flags.tolist()
        for peer in range(n):
            if peer != rank and flags[peer] != epoch:
                errors.append(f"flag of rank {peer} reads {flags[peer]}, expected {epoch}")
        return errors


def run_rounds(buffers: Buffers, first_epoch: int, count: int, bytes_per_peer: int, seed_base: int) -> Dict[str, Any]:
    """``count`` checked rounds; returns the epochs used, failures (first 10) and timings."""
    failures: List[str] = []
    launch_ms: List[float] = []
    epoch = first_epoch
    for index in range(count):
        round_seed = seed_base + index
        poison = (37 * index + 11) & 0xFF
        buffers.prepare(round_seed, bytes_per_peer, poison)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        buffers.launch(epoch, bytes_per_peer)
        end.record()
        wait_for(end, f"round {index} (epoch {epoch}, {bytes_per_peer} B per peer)", buffers.my_flags)
        launch_ms.append(start.elapsed_time(end))
        errors = buffers.check(round_seed, bytes_per_peer, epoch, poison)
        if errors and len(failures) < 10:
            failures.append(f"round {index} epoch {epoch}: " + "; ".join(errors))
        elif errors:
            failures.append("...")
        epoch += 1
    return {"rounds": count, "first_epoch": first_epoch, "last_epoch": epoch - 1, "failed_rounds": len(failures),
            "failures": failures[:11], "launch_ms_median": statistics.median(launch_ms),
            "launch_ms_first": launch_ms[0], "next_epoch": epoch}


def time_launches(buffers: Buffers, first_epoch: int, count: int, bytes_per_peer: int) -> Dict[str, Any]:
    """``count`` launches back to back (no barriers; waits are >= epoch, so a fast rank does not
    confuse a slow one), each between two CUDA events, after WARMUP_LAUNCHES untimed ones (16
    consecutive epochs: Triton specializes an int argument on divisibility by 16, so both
    variants are compiled before the timed launches)."""
    buffers.world.barrier()
    for _ in range(WARMUP_LAUNCHES):
        buffers.launch(first_epoch, bytes_per_peer)
        first_epoch += 1
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(count)]
    epoch = first_epoch
    for start, end in events:
        start.record()
        buffers.launch(epoch, bytes_per_peer)
        end.record()
        epoch += 1
    wait_for(events[-1][1], f"timed launches ({bytes_per_peer} B per peer)", buffers.my_flags)
    times_us = sorted(start.elapsed_time(end) * 1000.0 for start, end in events)
    median_us = statistics.median(times_us)
    moved = (buffers.n - 1) * bytes_per_peer
    return {"launches": count, "median_us": round(median_us, 3), "min_us": round(times_us[0], 3),
            "p90_us": round(times_us[int(0.9 * (count - 1))], 3),
            "sent_bytes_per_launch": moved, "send_gb_per_s_at_median": round(moved / (median_us * 1e3), 3),
            "last_epoch": epoch - 1, "next_epoch": epoch}


def api_checks(state: Dict[str, Any]) -> Dict[str, Any]:
    """The API's error paths and tables on the GPU; returns {check: "ok" or what went wrong}."""
    world, table, reg, n = state["world"], state["table"], state["reg"], state["n"]
    results: Dict[str, Any] = {}

    def expect(name: str, exception: type, needle: str, call: Any) -> None:
        try:
            call()
        except exception as error:
            results[name] = "ok" if needle in str(error) else f"wrong message: {error}"
            return
        except Exception as error:  # the wrong class
            results[name] = f"raised {type(error).__name__}: {error}"
            return
        results[name] = "did not raise"

    expect("register_cpu_tensor_is_TypeError", TypeError, "GPU memory",
           lambda: world.register(torch.zeros(64, dtype=torch.uint8)))
    square = torch.zeros(16, 16, dtype=torch.uint8, device="cuda")
    expect("register_non_contiguous_view_is_TypeError", TypeError, "contiguous",
           lambda: world.register(square[:, ::2]))
    expect("region_past_the_end_is_ValueError", ValueError, "exceeds its registration",
           lambda: world.region("past", reg, offset=reg.length_bytes - 8, length=16))
    expect("unknown_region_name_is_ValueError", ValueError, "no region named",
           lambda: table.local("nope"))
    expect("second_connect_all_is_RuntimeError", RuntimeError, "already called",
           lambda: world.connect_all("p2p"))
    for name in ("recv", "flags"):
        tensor = table.regions(name)
        device_table = table.device_table(name)
        aliased = tensor.data_ptr() == device_table.address and tuple(tensor.shape) == (n, device_table.entry_bytes // 8)
        same = tensor.cpu().numpy().tobytes() == table.region_table_bytes(name)
        results[f"regions_{name}_aliases_the_device_table"] = "ok" if aliased and same else \
            f"aliased={aliased} same_bytes={same} shape={tuple(tensor.shape)} device={tensor.device}"
    endpoints = table.endpoint_handles
    same = endpoints.cpu().numpy().tobytes() == table.endpoint_handle_bytes()
    aliased = endpoints.data_ptr() == table.device_table().address
    results["endpoint_handles_alias_the_device_table"] = "ok" if aliased and same else f"aliased={aliased} same={same}"
    results["verify_device_copies"] = "ok" if table.verify_device_copies() else "device tables differ from host copies"
    results["transports"] = world.transports
    results["compilation_target"] = world.compilation_target()
    return results


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "/tmp")
    local_rank = int(os.environ["LOCAL_RANK"])
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(local_rank % torch.cuda.device_count())  # ranks may share a GPU (MPS)
    report: Dict[str, Any] = {
        "rank": rank, "local_rank": local_rank, "device": torch.cuda.get_device_name(torch.cuda.current_device()),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__, "aboleth": aboleth.__version__, "steps": {}, "passed": False,
    }
    path = os.path.join(out_dir, f"seed_alltoall-rank{rank}.json")

    def save() -> None:
        with open(path, "w") as file:
            json.dump(report, file, indent=1)

    step = "seed"
    try:
        started = time.monotonic()
        state = seed_example(BYTES=256)
        world, n, my_flags = state["world"], state["n"], state["my_flags"]
        done = torch.cuda.Event()
        done.record()
        wait_for(done, "the seed example's launch (epoch 1)", my_flags)
        flags = my_flags.tolist()
        seed_ok = all(flags[peer] == 1 for peer in range(n) if peer != rank)
        report["steps"]["seed"] = {"passed": seed_ok, "bytes": 256, "world_size": n, "flags": flags,
                                   "transports": world.transports, "seconds": round(time.monotonic() - started, 3)}
        save()

        step = "api"
        checks = api_checks(state)
        api_ok = all(value == "ok" for key, value in checks.items() if key not in ("transports", "compilation_target"))
        report["steps"]["api"] = {"passed": api_ok, **checks}
        save()

        step = "rounds"
        buffers = Buffers(world, state["table"], state["buf"], n, 256)
        started = time.monotonic()
        with world.compilation():
            rounds = run_rounds(buffers, first_epoch=2, count=ROUNDS, bytes_per_peer=256, seed_base=10_000)
        rounds["seconds"] = round(time.monotonic() - started, 3)
        report["steps"]["rounds"] = {"passed": rounds["failed_rounds"] == 0, **rounds}
        save()

        step = "sizes"
        capacity = SIZES[-1]
        big = torch.zeros(2 * n * capacity + 8 * n, dtype=torch.uint8, device="cuda")
        big_reg = world.register(big)
        big_table = world.exchange_regions({
            "send": world.region("send", big_reg, offset=0, length=n * capacity),
            "recv": world.region("recv", big_reg, offset=n * capacity, length=n * capacity),
            "flags": world.region("flags", big_reg, offset=2 * n * capacity, length=8 * n),
        })
        big_buffers = Buffers(world, big_table, big, n, capacity)
        epoch = rounds["next_epoch"]
        per_size = []
        with world.compilation():
            for index, size in enumerate(SIZES):
                started = time.monotonic()
                checked = run_rounds(big_buffers, epoch, CHECKED_ROUNDS_PER_SIZE, size, seed_base=100_000 + 100 * index)
                epoch = checked["next_epoch"]
                timing = time_launches(big_buffers, epoch, TIMED_LAUNCHES_PER_SIZE, size)
                epoch = timing["next_epoch"]
                # The send buffer still holds the last checked round's payload: check again.
                last_seed = 100_000 + 100 * index + CHECKED_ROUNDS_PER_SIZE - 1
                after = big_buffers.check(last_seed, size, timing["last_epoch"], (37 * (CHECKED_ROUNDS_PER_SIZE - 1) + 11) & 0xFF)
                big_buffers.world.barrier()
                entry = {"bytes_per_peer": size, "passed": checked["failed_rounds"] == 0 and not after,
                         "checked_rounds": checked["rounds"], "failures": checked["failures"] + after,
                         "first_launch_ms_incl_compile": round(checked["launch_ms_first"], 3),
                         "seconds": round(time.monotonic() - started, 3),
                         **{key: value for key, value in timing.items() if key != "next_epoch"}}
                per_size.append(entry)
                report["steps"]["sizes"] = {"passed": all(item["passed"] for item in per_size), "results": per_size}
                save()
                print(f"rank {rank}: {size:>8} B per peer: {'ok' if entry['passed'] else 'FAILED'} "
                      f"median {timing['median_us']:.2f} us", flush=True)

        step = "close"
        world.check_waits()
        # Over rdma with the software NIC: what its thread executed (None on other transports).
        report["soft_nic"] = world.soft_nic_statistics()
        world.close()
        report["steps"]["close"] = {"passed": True}
        report["passed"] = all(value.get("passed") for value in report["steps"].values())
        save()
        print(f"rank {rank}: {'PASSED' if report['passed'] else 'FAILED'}", flush=True)
        return 0 if report["passed"] else 1
    except KernelDidNotFinish as error:
        report["steps"][step] = {"passed": False, "hang": str(error)}
        save()
        print(f"rank {rank}: HANG in step {step}: {error}", flush=True)
        os._exit(3)  # the kernel still runs: leave without waiting for it
    except Exception as error:
        report["steps"][step] = {"passed": False, "error": f"{type(error).__name__}: {error}",
                                 "traceback": traceback.format_exc()}
        save()
        print(f"rank {rank}: FAILED in step {step}: {type(error).__name__}: {error}", flush=True)
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main())
