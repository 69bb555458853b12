"""The seed's tier-1 example on the GPU: its CUDA ``exchange`` kernel, verbatim, compiled against
the device library ``world.device_library()`` generated for this World's transport, launched with
arguments made from the World's tables, checked bit-exact.

Run one process per GPU, or two ranks on one GPU under CUDA MPS (tests/gpu/run_tier1_exchange.sh
starts MPS when ranks outnumber GPUs):

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 ABOLETH_TRANSPORT=p2p \\
        torchrun --nproc-per-node 2 tests/gpu/tier1_exchange.py OUT_DIR

Every rank: connects with ABOLETH_TRANSPORT (p2p, proxy, or rdma with ABOLETH_RDMA_DEVICE=soft), registers the seed's buffer (send |
recv | flags), builds the library (header and ``libaboleth_device.a``, nvcc of this machine) and
compiles ``tests/gpu/tier1/exchange.cu`` twice: header only (``nvcc -cubin``), and against the
archive (``-rdc=true -DABOLETH_DEVICE_EXTERN``, then ``nvcc -dlink -cubin`` with the archive).
Both modules are loaded with the driver API (ctypes on libcuda) and launched on torch's stream.
The ranks form pairs (rank r exchanges with r ^ 1; an odd last rank sits out).

Steps:
1. ``seed``: the seed's ``exchange`` (one thread), ROUNDS rounds at 256 B with fresh payloads,
   from the header-only module; then ROUNDS_PER_CASE rounds per size (8 B .. 1 MiB) for each of
   ``exchange`` (archive module), ``exchange_warp`` (32 threads) and ``exchange_block`` (128
   threads). Each round: fresh payload, this rank's receive slice poisoned, a barrier, one launch
   with epoch e, then the received slice must equal the peer's payload and the flag read e.
2. ``rounds``: ``exchange_rounds`` (and ``_warp``): ROUNDS_IN_KERNEL rounds inside one launch,
   timed with CUDA events (median of TIMED_LAUNCHES launches): the tier-1 round latency the
   benchmark reports; data and flag checked after each launch.
3. ``triton``: the same exchange from a stock Triton kernel through
   ``aboleth.frontends.triton.tier1`` (the bitcode linked with ``extern_libs``, no
   ``world.compilation()``), ROUNDS_PER_CASE rounds per size, checked the same way.
   ``comparisons``: the same through ``triton_exchange_compare``, whose wait compares with
   ``== epoch``, ``!= epoch - 1`` and ``> epoch - 1`` (tier 1's ``Comparison``; le and lt need a
   falling flag and are compiled, not run), ROUNDS_PER_CASE rounds at 256 B each.
4. ``mutation`` (p2p): ``exchange_snapshot`` (one block puts, another waits) copies what
   arrived right after the wait; against
   the library it must equal the peer's payload every round, and against a deliberately broken
   library (``mutation="signal-before-copy"``: each signal stored before its copy) the snapshot
   must be caught stale in some round (1 MiB from one thread: the copy takes milliseconds).
5. ``bounded``: rank 0 of each pair launches ``exchange`` for an epoch its peer never signals (the
   peer does not launch); its ``wait_signal`` must give up after ABOLETH_WAIT_TIMEOUT_MS and
   ``World.check_waits()`` must report it (this rank, the flag, the library's wait site); then
   the log is cleared and the ranks realign the flags.

Each rank writes OUT_DIR/tier1_exchange-rank{R}.json. Exit status 0 when every step passed.
"""

from __future__ import annotations

import ctypes
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import time
import traceback
from typing import Any, Dict, List

import torch
import triton
import triton.language as tl

import aboleth
from aboleth import device_library
from aboleth.frontends.triton import tier1

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "tier1", "exchange.cu")
TRANSPORT = os.environ.get("ABOLETH_TRANSPORT", "p2p")
ROUNDS = int(os.environ.get("TIER1_ROUNDS", "1000"))
ROUNDS_PER_CASE = 20
SIZES = [8, 256, 4096, 65536, 1 << 20]
ROUNDS_IN_KERNEL = 2000
TIMED_LAUNCHES = 5
KERNEL_DEADLINE_S = 60.0
ARCH = os.environ.get("TIER1_ARCH", "sm_90")


class Driver:
    """The libcuda entry points the test calls, each checked (``RuntimeError`` with the name)."""

    def __init__(self) -> None:
        self.library = ctypes.CDLL("libcuda.so.1")
        vp = ctypes.c_void_p
        for name, arguments in {
            "cuModuleLoadData": [ctypes.POINTER(vp), ctypes.c_char_p],
            "cuModuleGetFunction": [ctypes.POINTER(vp), vp, ctypes.c_char_p],
            "cuLaunchKernel": [vp, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                               ctypes.c_uint, ctypes.c_uint, vp, ctypes.POINTER(vp), ctypes.POINTER(vp)],
            "cuGetErrorString": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
        }.items():
            function = getattr(self.library, name)
            function.argtypes, function.restype = arguments, ctypes.c_int
            setattr(self, name, function)

    def check(self, result: int, what: str) -> None:
        if result != 0:
            text = ctypes.c_char_p()
            self.cuGetErrorString(result, ctypes.byref(text))
            raise RuntimeError(f"{what}: CUresult {result} ({(text.value or b'?').decode()})")


class Module:
    """A cubin loaded into torch's context, its kernels found by their C++ names."""

    def __init__(self, driver: Driver, cubin: bytes, entries: List[str]) -> None:
        self.driver = driver
        self.handle = ctypes.c_void_p()
        driver.check(driver.cuModuleLoadData(ctypes.byref(self.handle), cubin), "cuModuleLoadData")
        self.entries = entries

    def kernel(self, name: str) -> Any:
        pattern = re.compile(rf"^_Z{len(name)}{name}N7aboleth")
        matches = [entry for entry in self.entries if pattern.match(entry)]
        if len(matches) != 1:
            raise RuntimeError(f"kernel {name}: found {matches} among {self.entries}")
        function = ctypes.c_void_p()
        self.driver.check(self.driver.cuModuleGetFunction(ctypes.byref(function), self.handle,
                                                          matches[0].encode()), f"cuModuleGetFunction({name})")
        return function

    def launch(self, function: Any, threads: int, arguments: List[Any], blocks: int = 1) -> None:
        """``blocks`` blocks of ``threads`` on torch's current stream; ``arguments`` are ctypes
        objects (the by-value structs as byte buffers)."""
        pointers = (ctypes.c_void_p * len(arguments))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p)
                                                         for a in arguments])
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self.driver.check(self.driver.cuLaunchKernel(function, blocks, 1, 1, threads, 1, 1, 0, stream, pointers, None),
                          "cuLaunchKernel")


def run(command: List[str]) -> None:
    completed = subprocess.run(command, capture_output=True, text=True)
    if completed.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {completed.returncode}:\n{completed.stdout}{completed.stderr}")


def compile_modules(library: Any, nvcc: str, work: str) -> Dict[str, Any]:
    """The test's kernels built both ways; the PTX gives the kernels' mangled names."""
    include = str(library.include_dir)
    ptx = os.path.join(work, "exchange.ptx")
    run([nvcc, f"-arch={ARCH}", "-std=c++17", "-I", include, "-ptx", SOURCE, "-o", ptx])
    entries = re.findall(r"\.visible \.entry (\S+)\(", open(ptx).read())
    header_only = os.path.join(work, "exchange.cubin")
    run([nvcc, f"-arch={ARCH}", "-std=c++17", "-I", include, "-cubin", SOURCE, "-o", header_only])
    obj = os.path.join(work, "exchange.o")
    linked = os.path.join(work, "exchange_linked.cubin")
    run([nvcc, f"-arch={ARCH}", "-std=c++17", "-rdc=true", "-DABOLETH_DEVICE_EXTERN", "-I", include, "-c", SOURCE,
         "-o", obj])
    run([nvcc, f"-arch={ARCH}", "-dlink", "-cubin", obj, str(library.archive), "-o", linked])
    return {"entries": entries, "header_only": open(header_only, "rb").read(), "linked": open(linked, "rb").read()}


def payload(round_seed: int, source_rank: int, nbytes: int) -> Any:
    generator = torch.Generator(device="cuda")
    generator.manual_seed(round_seed * 1_000_003 + source_rank * 7919 + nbytes)
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda", generator=generator)


def wait_for(event: Any, what: str, deadline_s: float = KERNEL_DEADLINE_S) -> None:
    start = time.monotonic()
    while not event.query():
        if time.monotonic() - start > deadline_s:
            raise RuntimeError(f"{what}: the kernel did not finish within {deadline_s:.0f} s")
        time.sleep(0.0002)


class Exchange:
    """The seed's layout (send | recv | flags, ``capacity`` bytes per peer) and the kernel
    arguments for the exchange with ``peer``."""

    def __init__(self, world: Any, n: int, capacity: int) -> None:
        self.world, self.n, self.capacity = world, n, capacity
        self.rank = world.rank
        self.peer = self.rank ^ 1
        self.buf = torch.zeros(2 * n * capacity + 8 * n, dtype=torch.uint8, device="cuda")
        registration = world.register(self.buf)
        self.table = world.exchange_regions({
            "send": world.region("send", registration, offset=0, length=n * capacity),
            "recv": world.region("recv", registration, offset=n * capacity, length=n * capacity),
            "flags": world.region("flags", registration, offset=2 * n * capacity, length=8 * n),
        })
        self.my_flags = self.buf[2 * n * capacity:2 * n * capacity + 8 * n].view(torch.int64)

    def send_slice(self) -> Any:
        start = self.peer * self.capacity
        return self.buf[start:start + self.capacity]

    def received_slice(self) -> Any:
        start = self.n * self.capacity + self.peer * self.capacity
        return self.buf[start:start + self.capacity]

    def arguments(self, bytes_per_peer: int, epoch: int, rounds: int = 0) -> List[Any]:
        context = device_library.device_context(self.world, self.table)
        dst = device_library.remote_region(self.table, "recv", self.rank * self.capacity)
        src = device_library.local_region(self.table, "send", self.peer * self.capacity)
        flag = device_library.remote_region(self.table, "flags", self.rank * 8)
        values = [ctypes.create_string_buffer(context, len(context)), ctypes.c_int(self.peer),
                  ctypes.create_string_buffer(dst, len(dst)), ctypes.create_string_buffer(src, len(src)),
                  ctypes.c_uint32(bytes_per_peer), ctypes.create_string_buffer(flag, len(flag)),
                  ctypes.c_uint64(self.my_flags.data_ptr() + 8 * self.peer), ctypes.c_uint64(epoch)]
        if rounds:
            values.append(ctypes.c_uint32(rounds))
        return values


@triton.jit
def triton_exchange(handles, rank, world_size, peer, recv, dst_offset, send, send_key, nbytes, flags, flag_offset,
                    my_flag, epoch):
    """The seed's exchange from a stock Triton kernel, through the tier-1 bitcode."""
    tier1.put_signal(handles, rank, world_size, peer, recv, dst_offset, send, send_key, nbytes, flags, flag_offset,
                     epoch)
    tier1.quiet(handles, rank, world_size, peer)
    tier1.wait_signal(handles, rank, world_size, my_flag, epoch)


@triton.jit
def triton_exchange_compare(handles, rank, world_size, peer, recv, dst_offset, send, send_key, nbytes, flags,
                            flag_offset, my_flag, epoch, wait_value, COMPARISON: tl.constexpr):
    """The exchange waiting with another comparison: `*my_flag COMPARISON wait_value`."""
    tier1.put_signal(handles, rank, world_size, peer, recv, dst_offset, send, send_key, nbytes, flags, flag_offset,
                     epoch)
    tier1.quiet(handles, rank, world_size, peer)
    tier1.wait_signal(handles, rank, world_size, my_flag, wait_value, COMPARISON)


def comparison_launcher(comparison: str) -> Any:
    """A launcher of ``triton_exchange_compare`` whose wait holds only once this round's signal
    (the epoch) has landed: ``== epoch``, ``!= epoch - 1`` or ``> epoch - 1``."""
    def launch(exchange: "Exchange", bytes_per_peer: int, epoch: int) -> None:
        table, rank, peer, capacity = exchange.table, exchange.rank, exchange.peer, exchange.capacity
        send = table.local("send")
        wait_value = epoch if comparison == "eq" else epoch - 1
        triton_exchange_compare[(1,)](table.endpoint_handles, rank, exchange.n, peer, table.regions("recv"),
                                      rank * capacity, send.address + peer * capacity, send.lkey, bytes_per_peer,
                                      table.regions("flags"), rank * 8, exchange.my_flags[peer:], epoch, wait_value,
                                      COMPARISON=comparison, num_warps=4,
                                      extern_libs=tier1.extern_libs(exchange.world.compilation_target()))
    return launch


def launch_triton(exchange: "Exchange", bytes_per_peer: int, epoch: int) -> None:
    table, rank, peer, capacity = exchange.table, exchange.rank, exchange.peer, exchange.capacity
    send = table.local("send")
    triton_exchange[(1,)](table.endpoint_handles, rank, exchange.n, peer, table.regions("recv"), rank * capacity,
                          send.address + peer * capacity, send.lkey, bytes_per_peer, table.regions("flags"), rank * 8,
                          exchange.my_flags[peer:], epoch, num_warps=4,
                          extern_libs=tier1.extern_libs(exchange.world.compilation_target()))


class CuteExchange:
    """The same exchange from a CuTe DSL kernel through ``aboleth.frontends.cute`` (compiled once
    with cute.compile, for this GPU; launched on the default stream, torch's current one here).
    Only where nvidia-cutlass-dsl is importable (``CUTE_SITE`` on the GPU machine)."""

    def __init__(self, transport: str) -> None:
        sys.path.insert(0, os.path.join(HERE, "tier1"))
        import cute_exchange

        self.typed = cute_exchange.typed
        major, minor = torch.cuda.get_device_capability()
        self.compiled = cute_exchange.compile_exchange(transport, f"sm_{major}{minor}a")

    def __call__(self, exchange: "Exchange", bytes_per_peer: int, epoch: int) -> None:
        table, rank, peer, capacity = exchange.table, exchange.rank, exchange.peer, exchange.capacity
        send = table.local("send")
        def address(value: Any) -> int:  # a device table (a tensor) or an address
            return value.data_ptr() if hasattr(value, "data_ptr") else int(value)
        self.compiled(*self.typed([address(table.endpoint_handles), rank, exchange.n, peer,
                                   address(table.regions("recv")), rank * capacity, send.address + peer * capacity,
                                   send.lkey, bytes_per_peer, address(table.regions("flags")), rank * 8,
                                   exchange.my_flags[peer:].data_ptr(), epoch]))


def checked_rounds(exchange: Exchange, module: Any, kernel: str, threads: int, bytes_per_peer: int,
                   rounds: int, epoch: int, seed_base: int, launcher: Any = None) -> Dict[str, Any]:
    """``rounds`` checked exchanges through ``module.kernel(kernel)`` (or, with module None, the
    Triton kernel, or ``launcher(exchange, bytes_per_peer, epoch)`` when given)."""
    function = module.kernel(kernel) if module is not None else None
    failures: List[str] = []
    world = exchange.world
    for index in range(rounds):
        seed = seed_base + index
        exchange.send_slice()[:bytes_per_peer].copy_(payload(seed, exchange.rank, bytes_per_peer))
        exchange.received_slice().fill_(0xEE)
        torch.cuda.synchronize()
        world.barrier(f"tier1/{kernel}/{bytes_per_peer}/{index}")
        if launcher is not None:
            launcher(exchange, bytes_per_peer, epoch)
        elif module is None:
            launch_triton(exchange, bytes_per_peer, epoch)
        else:
            module.launch(function, threads, exchange.arguments(bytes_per_peer, epoch))
        event = torch.cuda.Event()
        event.record()
        wait_for(event, f"{kernel} {bytes_per_peer} B round {index}")
        world.check_waits()
        got = exchange.received_slice()
        expected = payload(seed, exchange.peer, bytes_per_peer)
        if not torch.equal(got[:bytes_per_peer], expected):
            wrong = int((got[:bytes_per_peer] != expected).sum())
            failures.append(f"round {index}: {wrong} of {bytes_per_peer} bytes wrong")
        if bool((got[bytes_per_peer:] != 0xEE).any()):
            failures.append(f"round {index}: bytes past the put were written")
        flag = int(exchange.my_flags[exchange.peer])
        if flag != epoch:
            failures.append(f"round {index}: the flag reads {flag}, expected {epoch}")
        epoch += 1
        if len(failures) > 3:
            break
    return {"kernel": kernel, "threads": threads, "bytes_per_peer": bytes_per_peer, "rounds": rounds,
            "passed": not failures, "failures": failures[:4], "next_epoch": epoch}


def timed_rounds(exchange: Exchange, module: Module, kernel: str, threads: int, bytes_per_peer: int,
                 epoch: int) -> Dict[str, Any]:
    function = module.kernel(kernel)
    world = exchange.world
    exchange.send_slice()[:bytes_per_peer].copy_(payload(7, exchange.rank, bytes_per_peer))
    expected = payload(7, exchange.peer, bytes_per_peer)
    launch_us: List[float] = []
    failures: List[str] = []
    for launch in range(TIMED_LAUNCHES + 1):  # the first is a warm-up
        exchange.received_slice().fill_(0xEE)
        torch.cuda.synchronize()
        world.barrier(f"tier1/timed/{kernel}/{bytes_per_peer}/{launch}")
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        module.launch(function, threads, exchange.arguments(bytes_per_peer, epoch, ROUNDS_IN_KERNEL))
        end.record()
        wait_for(end, f"{kernel} timed launch {launch}")
        world.check_waits()
        if launch:
            launch_us.append(start.elapsed_time(end) * 1000.0)
        epoch += ROUNDS_IN_KERNEL
        if not torch.equal(exchange.received_slice()[:bytes_per_peer], expected):
            failures.append(f"launch {launch}: the received data is wrong")
        flag = int(exchange.my_flags[exchange.peer])
        if flag != epoch - 1:
            failures.append(f"launch {launch}: the flag reads {flag}, expected {epoch - 1}")
    median = statistics.median(launch_us)
    return {"kernel": kernel, "threads": threads, "bytes_per_peer": bytes_per_peer,
            "rounds_per_launch": ROUNDS_IN_KERNEL, "launch_us_all": launch_us, "round_us": median / ROUNDS_IN_KERNEL,
            "round_us_min": min(launch_us) / ROUNDS_IN_KERNEL, "checked": not failures, "failures": failures[:3],
            "next_epoch": epoch}


def snapshot_rounds(exchange: Exchange, module: Module, rounds: int, epoch: int) -> Dict[str, Any]:
    """``rounds`` exchanges of 1 MiB through ``exchange_snapshot``: how many snapshots differ
    from the peer's payload."""
    function = module.kernel("exchange_snapshot")
    size = 1 << 20
    snapshot = torch.empty(size, dtype=torch.uint8, device="cuda")
    stale = 0
    for index in range(rounds):
        seed = 300_000 + epoch
        exchange.send_slice()[:size].copy_(payload(seed, exchange.rank, size))
        exchange.received_slice().fill_(0xEE)
        snapshot.fill_(0)
        torch.cuda.synchronize()
        exchange.world.barrier(f"tier1/snapshot/{epoch}")
        arguments = exchange.arguments(size, epoch) + [
            ctypes.c_uint64(exchange.received_slice().data_ptr()), ctypes.c_uint64(snapshot.data_ptr())]
        module.launch(function, 256, arguments, blocks=2)
        event = torch.cuda.Event()
        event.record()
        wait_for(event, f"exchange_snapshot round {index}")
        exchange.world.check_waits()
        if not torch.equal(snapshot, payload(seed, exchange.peer, size)):
            stale += 1
        epoch += 1
    exchange.world.barrier("tier1/snapshot/end")
    return {"rounds": rounds, "stale_snapshots": stale, "next_epoch": epoch}


def bounded_wait(exchange: Exchange, module: Module, library: Any, epoch: int) -> Dict[str, Any]:
    """Rank 0 of the pair waits for an epoch its peer never signals."""
    world = exchange.world
    world.barrier("tier1/bounded/start")
    result: Dict[str, Any] = {"role": "waiter" if exchange.rank % 2 == 0 else "silent peer"}
    if exchange.rank % 2 == 0:
        never = epoch + 1_000_000
        started = time.monotonic()
        module.launch(module.kernel("exchange"), 1, exchange.arguments(8, never))
        event = torch.cuda.Event()
        event.record()
        wait_for(event, "bounded wait", deadline_s=120.0)
        result["kernel_seconds"] = time.monotonic() - started
        try:
            world.check_waits()
            result.update(passed=False, why="check_waits() reported nothing after the wait gave up")
        except RuntimeError as error:
            message = str(error)
            sites = [site for site, variant, _ in library.wait_sites if variant == "wait_signal_thread"]
            expected_site = f"wait site {sites[0]}" if sites else "wait site"
            result.update(message=message, expected_site=expected_site,
                          passed=f"rank {exchange.rank}" in message and str(never) in message
                          and expected_site in message)
        world.clear_waits()
        # The silent peer's flag from us now reads `never`; our flag from it is unchanged.
    else:
        result["passed"] = True
    world.barrier("tier1/bounded/end")
    return result


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "/tmp/aboleth-gpu"
    os.makedirs(out_dir, exist_ok=True)
    report: Dict[str, Any] = {"transport": TRANSPORT, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                              "steps": {}}
    boot = aboleth.TcpStoreBootstrap.from_env()
    rank, n = boot.rank, boot.world_size
    report.update(rank=rank, ranks=n, gpus_visible=torch.cuda.device_count())
    passed = True
    try:
        world = aboleth.World(rank, n, device=torch.cuda.current_device(), bootstrap=boot)
        world.connect_all(TRANSPORT)
        work = os.path.join(out_dir, f"tier1-build-rank{rank}")
        os.makedirs(work, exist_ok=True)
        nvcc = device_library.find_nvcc()
        if nvcc is None:
            raise RuntimeError("no nvcc on this machine")
        started = time.monotonic()
        library = world.device_library(os.path.join(work, "library"), nvcc=nvcc, arch=ARCH)
        modules = compile_modules(library, nvcc, work)
        report["build"] = {"nvcc": nvcc, "seconds": round(time.monotonic() - started, 2),
                           "target": library.target, "operations": list(library.operations),
                           "kernels": modules["entries"]}
        torch.zeros(1, device="cuda")  # torch's context is current on this thread: the modules load into it
        driver = Driver()
        header_only = Module(driver, modules["header_only"], modules["entries"])
        linked = Module(driver, modules["linked"], modules["entries"])
        if rank ^ 1 >= n:
            report["steps"]["note"] = "odd rank out: no pair"
            world.barrier("tier1/bounded/start")
            world.barrier("tier1/bounded/end")
        else:
            exchange = Exchange(world, n, max(SIZES))
            epoch = 1
            seed_step = checked_rounds(exchange, header_only, "exchange", 1, 256, ROUNDS, epoch, 1)
            epoch = seed_step.pop("next_epoch")
            cases = [seed_step]
            for module, kernel, threads in [(linked, "exchange", 1), (header_only, "exchange_warp", 32),
                                            (header_only, "exchange_block", 128)]:
                for size in SIZES:
                    case = checked_rounds(exchange, module, kernel, threads, size, ROUNDS_PER_CASE, epoch,
                                          100_000 + epoch)
                    epoch = case.pop("next_epoch")
                    case["module"] = "archive" if module is linked else "header only"
                    cases.append(case)
            report["steps"]["seed"] = {"passed": all(case["passed"] for case in cases), "cases": cases}
            timings = []
            for kernel, threads in [("exchange_rounds", 1), ("exchange_rounds_warp", 32)]:
                for size in [8, 256, 16384, 1 << 20]:
                    row = timed_rounds(exchange, header_only, kernel, threads, size, epoch)
                    epoch = row.pop("next_epoch")
                    timings.append(row)
            report["steps"]["rounds"] = {"passed": all(row["checked"] for row in timings), "rows": timings}
            triton_cases = []
            for size in SIZES:
                case = checked_rounds(exchange, None, "triton_exchange", 128, size, ROUNDS_PER_CASE, epoch,
                                      200_000 + epoch)
                epoch = case.pop("next_epoch")
                triton_cases.append(case)
            report["steps"]["triton"] = {"passed": all(case["passed"] for case in triton_cases),
                                         "cases": triton_cases}
            comparison_cases = []
            for comparison in ("eq", "ne", "gt"):
                case = checked_rounds(exchange, None, f"triton_exchange_compare[{comparison}]", 128, 256,
                                      ROUNDS_PER_CASE, epoch, 300_000 + epoch, launcher=comparison_launcher(comparison))
                epoch = case.pop("next_epoch")
                comparison_cases.append(case)
            report["steps"]["comparisons"] = {"passed": all(case["passed"] for case in comparison_cases),
                                              "cases": comparison_cases}
            if os.environ.get("TIER1_CUTE") == "1":
                started = time.monotonic()
                cute_exchange = CuteExchange(library.target)
                compile_seconds = round(time.monotonic() - started, 2)
                cute_cases = []
                for size in SIZES:
                    case = checked_rounds(exchange, None, "cute_exchange", 128, size, ROUNDS_PER_CASE, epoch,
                                          300_000 + epoch, launcher=cute_exchange)
                    epoch = case.pop("next_epoch")
                    cute_cases.append(case)
                report["steps"]["cute"] = {"passed": all(case["passed"] for case in cute_cases),
                                           "compile_seconds": compile_seconds, "cases": cute_cases}
            if library.target == "p2p":
                correct = snapshot_rounds(exchange, header_only, 10, epoch)
                epoch = correct.pop("next_epoch")
                mutated_library = device_library.write("p2p", os.path.join(work, "mutated"),
                                                       mutation="signal-before-copy")
                mutated_cubin = os.path.join(work, "exchange_mutated.cubin")
                run([nvcc, f"-arch={ARCH}", "-std=c++17", "-I", str(mutated_library.include_dir), "-cubin", SOURCE,
                     "-o", mutated_cubin])
                mutated = snapshot_rounds(exchange, Module(driver, open(mutated_cubin, "rb").read(),
                                                           modules["entries"]), 10, epoch)
                epoch = mutated.pop("next_epoch")
                report["steps"]["mutation"] = {
                    "library": correct, "signal_before_copy": mutated,
                    "passed": correct["stale_snapshots"] == 0 and mutated["stale_snapshots"] > 0}
            report["steps"]["bounded"] = bounded_wait(exchange, header_only, library, epoch)
        passed = all(step.get("passed", True) for step in report["steps"].values() if isinstance(step, dict))
        world.close()
    except Exception as error:  # the report says what failed
        passed = False
        report["error"] = f"{type(error).__name__}: {error}"
        report["traceback"] = traceback.format_exc()
    report["passed"] = passed
    with open(os.path.join(out_dir, f"tier1_exchange-rank{rank}.json"), "w") as file:
        json.dump(report, file, indent=1)
    print(f"[rank {rank}] tier1_exchange over {TRANSPORT}: {'passed' if passed else 'FAILED'}"
          + (f" ({report.get('error')})" if not passed else ""), flush=True)
    for row in report["steps"].get("rounds", {}).get("rows", []):
        print(f"[rank {rank}] {row['kernel']} {row['bytes_per_peer']} B: {row['round_us']:.3f} us/round "
              f"(min {row['round_us_min']:.3f}) {'checked' if row['checked'] else 'WRONG'}", flush=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
