"""Where the proxy's round goes: the seed's all-to-all rounds kernel (kernels.alltoall_rounds) over
the proxy transport at a few sizes, with the proxy thread's host time by phase
(``World.proxy_statistics()``, per command) and host-side microbenchmarks of the CUDA driver
calls the proxy makes, on this GPU (ctypes on libcuda). Two ranks under torchrun, sharing one GPU
under CUDA MPS as run.sh starts it:

    torchrun --nproc-per-node 2 experiments/bench/proxy_breakdown.py OUT_DIR [--completion markers]

``--completion`` (markers, the default, or synchronize) sets ``ABOLETH_PROXY_COMPLETION`` before
the World is made: how the proxy completes the commands that request a completion (a marker it
polls, or ``cuStreamSynchronize``). Per size: one warm-up launch of ``--rounds`` rounds (it
compiles), then TIMED_LAUNCHES launches, each after the receive buffer was poisoned and the ranks
met at a barrier, timed by CUDA events inside ``world.compilation()``, each checked bit-exact
afterwards as tier2.py does (common.check_round); the statistics are read right before and after
each timed launch, and their deltas summed over the timed launches are divided by the commands
executed. ``round_us`` is the median launch divided by the rounds.

Rank 0 then runs the driver microbenchmarks alone (rank 1 waits at a barrier): enqueue time and
enqueue-to-complete latency of ``cuMemcpyAsync`` (device to device), of ``cuStreamWriteValue64``
(to pinned host memory, seen by a host load, and to device memory), the proxy's per-command
sequence as it runs it (copy, SET signal, completion marker to pinned host memory, host load
until the marker lands), ``cuStreamSynchronize`` of an empty stream, ``cuEventRecord`` and
``cuEventQuery``, and the proposed inline path for small puts: one ``cuStreamBatchMemOp`` of
64-bit writes (the signal and the marker; and 32 data words of a 256 B put before them). Times are ``time.perf_counter_ns`` around ctypes calls: each includes the ctypes
call's own cost, measured as ``ctypes_call_us`` (``cuDriverGetVersion``) and reported beside them.

Writes ``OUT_DIR/proxy-breakdown-<completion>-rank<R>.json`` per rank and, on rank 0,
``OUT_DIR/proxy-breakdown-<completion>.json`` with both ranks' rows and the microbenchmarks."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import aboleth  # noqa: E402
from kernels import alltoall_rounds  # noqa: E402
from common import TIMED_LAUNCHES, RegisteredBuffers, check_round, fill_send, log, median, rank_environment  # noqa: E402

#: The issue's sizes for the breakdown: a signal-sized put, the target's 256 B, and one where the
#: copy itself starts to matter.
DEFAULT_SIZES = [8, 256, 16384]
DEFAULT_ROUNDS = 2000
MICROBENCHMARK_ITERATIONS = 2000
#: Put sizes of the inline-path microbenchmark (one 64-bit write per 8 bytes, in one batch).
INLINE_SIZES = [8, 64, 256, 1024]


def statistics_delta(after: Dict[str, int], before: Dict[str, int]) -> Dict[str, int]:
    return {name: after[name] - before.get(name, 0) for name in after}


def per_command(delta: Dict[str, int]) -> Dict[str, float]:
    """Each ``*_ns`` total divided by the commands executed, and each count per command."""
    commands = max(delta.get("commands_executed", 0), 1)
    return {name: value / commands for name, value in delta.items() if name != "commands_executed"}


def measure_size(world: Any, table: Any, send: Any, rank: int, n: int, buffers: Dict[str, torch.Tensor],
                 bytes_per_peer: int, rounds: int, first_epoch: int, num_warps: int) -> Dict[str, Any]:
    send_all, recv_all, my_flags = buffers["send"], buffers["recv"], buffers["flags"]

    def launch(epoch: int) -> None:
        alltoall_rounds[(n - 1,)](table.endpoint_handles.view(torch.int64), table.regions("recv"),
                                  table.regions("flags"), send.address, send.lkey, my_flags, epoch,
                                  BYTES=bytes_per_peer, RANK=rank, ROUNDS=rounds, num_warps=num_warps)

    fill_send(send_all, rank, n, bytes_per_peer)
    epoch, launch_us, errors = first_epoch, [], []
    total: Dict[str, int] = {}
    for index in range(1 + TIMED_LAUNCHES):
        poison = (37 * index + 11) & 0xFF
        recv_all[:n * bytes_per_peer].fill_(poison)
        torch.cuda.synchronize()
        world.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with world.compilation():
            before = world.proxy_statistics()
            start.record()
            launch(epoch)
            end.record()
            end.synchronize()
            after = world.proxy_statistics()
        world.check_waits()
        world.check_proxy()
        last_epoch = epoch + rounds - 1
        errors += check_round(recv_all, my_flags, rank, n, bytes_per_peer, last_epoch, poison)
        epoch = last_epoch + 1
        if index > 0:
            launch_us.append(start.elapsed_time(end) * 1000.0)
            for name, value in statistics_delta(after, before).items():
                total[name] = total.get(name, 0) + value
    launch_median = median(launch_us)
    return {"bytes_per_peer": bytes_per_peer, "rounds": rounds, "round_us": launch_median / rounds,
            "launch_us": launch_median, "launch_us_all": launch_us, "checked": not errors, "errors": errors[:3],
            "commands_per_round": total.get("commands_executed", 0) / (rounds * TIMED_LAUNCHES),
            "statistics_delta": total, "statistics_per_command": per_command(total), "next_epoch": epoch}


# --------------------------------------------------------------------------------------------
# Driver microbenchmarks (ctypes on libcuda)
# --------------------------------------------------------------------------------------------

CU_STREAM_NON_BLOCKING = 1
CU_EVENT_DISABLE_TIMING = 2
CU_MEMHOSTALLOC_PORTABLE = 1
CU_MEMHOSTALLOC_DEVICEMAP = 2
CUDA_ERROR_NOT_READY = 600
CU_STREAM_MEM_OP_WRITE_VALUE_64 = 5
CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER = 1


class WriteValueParams(ctypes.Structure):
    """CUstreamBatchMemOpParams' writeValue member (cuda.h)."""
    _fields_ = [("operation", ctypes.c_uint32), ("address", ctypes.c_uint64), ("value64", ctypes.c_uint64),
                ("flags", ctypes.c_uint32), ("alias", ctypes.c_uint64)]


class BatchMemOpParams(ctypes.Union):
    """CUstreamBatchMemOpParams: 48 bytes (its pad member)."""
    _fields_ = [("writeValue", WriteValueParams), ("pad", ctypes.c_uint64 * 6)]


assert ctypes.sizeof(BatchMemOpParams) == 48


class Driver:
    """The few libcuda entry points the microbenchmarks call, each checked."""

    def __init__(self) -> None:
        self.library = ctypes.CDLL("libcuda.so.1")
        u64, vp = ctypes.c_uint64, ctypes.c_void_p
        signatures = {
            "cuDriverGetVersion": [ctypes.POINTER(ctypes.c_int)],
            "cuCtxGetCurrent": [ctypes.POINTER(vp)],
            "cuStreamCreate": [ctypes.POINTER(vp), ctypes.c_uint],
            "cuStreamDestroy_v2": [vp],
            "cuStreamSynchronize": [vp],
            "cuMemcpyAsync": [u64, u64, ctypes.c_size_t, vp],
            "cuStreamWriteValue64_v2": [vp, u64, u64, ctypes.c_uint],
            "cuEventCreate": [ctypes.POINTER(vp), ctypes.c_uint],
            "cuEventRecord": [vp, vp],
            "cuEventQuery": [vp],
            "cuEventDestroy_v2": [vp],
            "cuMemHostAlloc": [ctypes.POINTER(vp), ctypes.c_size_t, ctypes.c_uint],
            "cuMemHostGetDevicePointer_v2": [ctypes.POINTER(u64), vp, ctypes.c_uint],
            "cuMemFreeHost": [vp],
            "cuStreamBatchMemOp_v2": [vp, ctypes.c_uint, ctypes.POINTER(BatchMemOpParams), ctypes.c_uint],
        }
        for name, arguments in signatures.items():
            function = getattr(self.library, name)
            function.argtypes, function.restype = arguments, ctypes.c_int
            setattr(self, name, function)
        # The v1 batch entry point (it still accepts CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER), where
        # the driver exports it.
        self.has_v1_batch = hasattr(self.library, "cuStreamBatchMemOp")
        if self.has_v1_batch:
            function = self.library.cuStreamBatchMemOp
            function.argtypes = [vp, ctypes.c_uint, ctypes.POINTER(BatchMemOpParams), ctypes.c_uint]
            function.restype = ctypes.c_int
            self.cuStreamBatchMemOp = function

    @staticmethod
    def check(result: int, what: str) -> None:
        if result != 0:
            raise RuntimeError(f"{what} failed with CUresult {result}")


def summarize(samples_ns: List[int]) -> Dict[str, float]:
    ordered = sorted(samples_ns)
    return {"median_us": statistics.median(ordered) / 1000.0, "p10_us": ordered[len(ordered) // 10] / 1000.0,
            "p90_us": ordered[(9 * len(ordered)) // 10] / 1000.0, "samples": len(ordered)}


def sample(iterations: int, body: Callable[[], int]) -> Dict[str, float]:
    """``body`` returns the nanoseconds of one iteration; 10% more iterations run first, untimed."""
    for _ in range(iterations // 10):
        body()
    return summarize([body() for _ in range(iterations)])


def driver_microbenchmarks(iterations: int) -> Dict[str, Any]:
    driver = Driver()
    check = Driver.check
    clock = time.perf_counter_ns
    context = ctypes.c_void_p()
    check(driver.cuCtxGetCurrent(ctypes.byref(context)), "cuCtxGetCurrent")
    if not context.value:
        raise RuntimeError("no current CUDA context on the main thread (torch should have made its primary one current)")
    stream = ctypes.c_void_p()
    check(driver.cuStreamCreate(ctypes.byref(stream), CU_STREAM_NON_BLOCKING), "cuStreamCreate")
    source = torch.arange(1 << 14, dtype=torch.uint8, device="cuda")
    destination = torch.zeros(1 << 14, dtype=torch.uint8, device="cuda")
    device_word = torch.zeros(1, dtype=torch.int64, device="cuda")
    torch.cuda.synchronize()
    host = ctypes.c_void_p()
    check(driver.cuMemHostAlloc(ctypes.byref(host), 64, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE),
          "cuMemHostAlloc")
    host_device = ctypes.c_uint64()
    check(driver.cuMemHostGetDevicePointer_v2(ctypes.byref(host_device), host, 0), "cuMemHostGetDevicePointer")
    host_word = ctypes.c_uint64.from_address(host.value)
    host_word.value = 0
    event = ctypes.c_void_p()
    check(driver.cuEventCreate(ctypes.byref(event), CU_EVENT_DISABLE_TIMING), "cuEventCreate")
    results: Dict[str, Any] = {"iterations": iterations}
    marker = [0]

    def next_marker() -> int:
        marker[0] += 1
        return marker[0]

    def wait_for_host_word(value: int) -> None:
        while host_word.value < value:
            pass

    version = ctypes.c_int()

    def ctypes_call() -> int:
        start = clock()
        driver.cuDriverGetVersion(ctypes.byref(version))
        return clock() - start

    results["ctypes_call_us"] = sample(iterations, ctypes_call)

    def sync() -> None:
        check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize")

    for length_bytes in DEFAULT_SIZES:
        def copy_enqueue() -> int:
            start = clock()
            result = driver.cuMemcpyAsync(destination.data_ptr(), source.data_ptr(), length_bytes, stream)
            elapsed = clock() - start
            check(result, "cuMemcpyAsync")
            sync()
            return elapsed

        def copy_until_synchronized() -> int:
            start = clock()
            check(driver.cuMemcpyAsync(destination.data_ptr(), source.data_ptr(), length_bytes, stream),
                  "cuMemcpyAsync")
            sync()
            return clock() - start

        def proxy_command() -> int:
            """What the proxy does for a put+signal that requests a completion (markers)."""
            value = next_marker()
            start = clock()
            check(driver.cuMemcpyAsync(destination.data_ptr(), source.data_ptr(), length_bytes, stream),
                  "cuMemcpyAsync")
            check(driver.cuStreamWriteValue64_v2(stream, device_word.data_ptr(), value, 0), "cuStreamWriteValue64")
            check(driver.cuStreamWriteValue64_v2(stream, host_device.value, value, 0), "cuStreamWriteValue64")
            wait_for_host_word(value)
            return clock() - start

        results[f"memcpy_d2d_{length_bytes}B_enqueue"] = sample(iterations, copy_enqueue)
        results[f"memcpy_d2d_{length_bytes}B_enqueue_to_synchronized"] = sample(iterations, copy_until_synchronized)
        results[f"proxy_put_signal_marker_{length_bytes}B_enqueue_to_marker_seen"] = sample(iterations, proxy_command)

    def write_enqueue() -> int:
        value = next_marker()
        start = clock()
        result = driver.cuStreamWriteValue64_v2(stream, host_device.value, value, 0)
        elapsed = clock() - start
        check(result, "cuStreamWriteValue64")
        sync()
        return elapsed

    def write_host_until_seen() -> int:
        value = next_marker()
        start = clock()
        check(driver.cuStreamWriteValue64_v2(stream, host_device.value, value, 0), "cuStreamWriteValue64")
        wait_for_host_word(value)
        return clock() - start

    def write_device_until_synchronized() -> int:
        value = next_marker()
        start = clock()
        check(driver.cuStreamWriteValue64_v2(stream, device_word.data_ptr(), value, 0), "cuStreamWriteValue64")
        sync()
        return clock() - start

    def empty_synchronize() -> int:
        start = clock()
        sync()
        return clock() - start

    def event_record() -> int:
        start = clock()
        result = driver.cuEventRecord(event, stream)
        elapsed = clock() - start
        check(result, "cuEventRecord")
        sync()
        return elapsed

    def event_query_complete() -> int:
        start = clock()
        result = driver.cuEventQuery(event)
        elapsed = clock() - start
        check(result, "cuEventQuery")
        return elapsed

    def copy_until_event_polled() -> int:
        start = clock()
        check(driver.cuMemcpyAsync(destination.data_ptr(), source.data_ptr(), 256, stream), "cuMemcpyAsync")
        check(driver.cuEventRecord(event, stream), "cuEventRecord")
        while True:
            result = driver.cuEventQuery(event)
            if result != CUDA_ERROR_NOT_READY:
                check(result, "cuEventQuery")
                break
        return clock() - start

    def batch(writes: List[tuple]) -> Any:
        """(address, flags) per write; the values are set per call."""
        array = (BatchMemOpParams * len(writes))()
        for index, (address, flags) in enumerate(writes):
            array[index].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64
            array[index].writeValue.address = address
            array[index].writeValue.flags = flags
        return array

    def batch_until_marker_seen(array: Any, enqueue_only: bool, version: int = 2) -> Callable[[], int]:
        """The proposed inline path: the writes of one command (data words without a fence, then
        the signal and the marker with one) in one cuStreamBatchMemOp."""
        def body() -> int:
            value = next_marker()
            for index in range(len(array)):
                array[index].writeValue.value64 = value
            start = clock()
            call = driver.cuStreamBatchMemOp_v2 if version == 2 else driver.cuStreamBatchMemOp
            result = call(stream, len(array), array, 0)
            enqueued = clock()
            check(result, "cuStreamBatchMemOp")
            wait_for_host_word(value)
            return (enqueued if enqueue_only else clock()) - start
        return body

    signal_and_marker = batch([(device_word.data_ptr(), 0), (host_device.value, 0)])
    try:
        results["batch_mem_op_signal_and_marker_enqueue"] = sample(
            iterations, batch_until_marker_seen(signal_and_marker, True))
        results["batch_mem_op_signal_and_marker_enqueue_to_marker_seen"] = sample(
            iterations, batch_until_marker_seen(signal_and_marker, False))
    except RuntimeError as error:  # a driver that refuses batches: the rest still counts
        results["batch_mem_op_error"] = str(error)
    # The data words of an inlined put, then the signal and the marker. The _v2 entry point
    # refuses CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER (cuda.h: "not supported in the v2 API"; the
    # first run's CUresult 1), so every write carries the default fence; the barrier-free form
    # goes through the v1 entry point where the driver still has it.
    for length_bytes in INLINE_SIZES:
        words = [(destination.data_ptr() + 8 * word, 0) for word in range(length_bytes // 8)]
        inline = batch(words + [(device_word.data_ptr(), 0), (host_device.value, 0)])
        try:
            results[f"batch_mem_op_inline_{length_bytes}B_signal_marker_enqueue"] = sample(
                iterations, batch_until_marker_seen(inline, True))
            results[f"batch_mem_op_inline_{length_bytes}B_signal_marker_enqueue_to_marker_seen"] = sample(
                iterations, batch_until_marker_seen(inline, False))
        except RuntimeError as error:
            results[f"batch_mem_op_inline_{length_bytes}B_error"] = str(error)
        if driver.has_v1_batch:
            unfenced = batch([(address, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER) for address, _ in words]
                             + [(device_word.data_ptr(), 0), (host_device.value, 0)])
            try:
                results[f"batch_mem_op_v1_unfenced_inline_{length_bytes}B_enqueue_to_marker_seen"] = sample(
                    iterations, batch_until_marker_seen(unfenced, False, version=1))
            except RuntimeError as error:
                results[f"batch_mem_op_v1_unfenced_inline_{length_bytes}B_error"] = str(error)
    results["write_value_64_host_enqueue"] = sample(iterations, write_enqueue)
    results["write_value_64_host_enqueue_to_seen"] = sample(iterations, write_host_until_seen)
    results["write_value_64_device_enqueue_to_synchronized"] = sample(iterations, write_device_until_synchronized)
    results["stream_synchronize_empty"] = sample(iterations, empty_synchronize)
    results["event_record_enqueue"] = sample(iterations, event_record)
    results["event_query_complete"] = sample(iterations, event_query_complete)
    results["memcpy_d2d_256B_enqueue_to_event_polled"] = sample(iterations, copy_until_event_polled)
    sync()
    check(driver.cuEventDestroy_v2(event), "cuEventDestroy")
    check(driver.cuMemFreeHost(host), "cuMemFreeHost")
    check(driver.cuStreamDestroy_v2(stream), "cuStreamDestroy")
    return results


def clocksource() -> str:
    """The kernel's clock source: the proxy's accounting reads the monotonic clock a few times per
    command, a vDSO read of tens of nanoseconds with ``tsc``, a system call with some others."""
    try:
        with open("/sys/devices/system/clocksource/clocksource0/current_clocksource") as file:
            return file.read().strip()
    except OSError as error:
        return f"unknown ({error})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--completion", default="markers", choices=["markers", "synchronize"])
    parser.add_argument("--sizes", default=",".join(str(size) for size in DEFAULT_SIZES),
                        help="bytes per peer, comma-separated")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="rounds per launch")
    parser.add_argument("--num-warps", type=int, default=1)
    parser.add_argument("--microbenchmark-iterations", type=int, default=MICROBENCHMARK_ITERATIONS)
    arguments = parser.parse_args()
    os.environ["ABOLETH_PROXY_COMPLETION"] = arguments.completion
    environment = rank_environment()
    boot = aboleth.TcpStoreBootstrap.from_env()
    rank, n = boot.rank, boot.world_size
    world = aboleth.World(rank, n, device=torch.cuda.current_device(), bootstrap=boot)
    transports = world.connect_all("proxy")
    sizes = [int(value) for value in arguments.sizes.split(",") if value.strip()]
    capacity = max(sizes)
    registered = RegisteredBuffers(world, n, capacity)
    table, send = registered.table, registered.send
    buffers = {"send": registered.send_all, "recv": registered.recv_all, "flags": registered.my_flags}
    rows: List[Dict[str, Any]] = []
    failures: List[str] = []
    epoch = 1
    for bytes_per_peer in sizes:
        result = measure_size(world, table, send, rank, n, buffers, bytes_per_peer, arguments.rounds, epoch,
                              arguments.num_warps)
        epoch = result.pop("next_epoch")
        if not result["checked"]:
            failures.append(f"{bytes_per_peer} B: " + "; ".join(result["errors"]))
        rows.append(result)
        phases = result["statistics_per_command"]
        log(rank, f"proxy ({arguments.completion}) {bytes_per_peer} B: {result['round_us']:.3f} us/round "
                  f"{'checked' if result['checked'] else 'WRONG'}; per command: "
                  + ", ".join(f"{name} {phases.get(name, 0.0):.0f}" for name in
                              ["copy_ns", "signal_ns", "marker_ns", "completion_wait_ns", "completion_poll_ns",
                               "bookkeeping_ns", "idle_ns"]))
    world.barrier()
    microbenchmarks: Dict[str, Any] = {}
    if rank == 0:
        try:
            microbenchmarks = driver_microbenchmarks(arguments.microbenchmark_iterations)
        except Exception as error:  # the rows are still worth writing
            failures.append(f"driver microbenchmarks: {error}")
            microbenchmarks = {"error": str(error)}
        for name, value in microbenchmarks.items():
            if isinstance(value, dict):
                log(rank, f"{name}: median {value['median_us']:.3f} us (p90 {value['p90_us']:.3f})")
    world.barrier()
    report = {"rank": rank, "world_size": n, "completion": arguments.completion, "transports": transports,
              "clocksource": clocksource(),
              "num_warps": arguments.num_warps, "rows": rows, "driver_microbenchmarks": microbenchmarks,
              "failures": failures, "environment": environment, "device_name": torch.cuda.get_device_name(),
              "mps": bool(os.environ.get("CUDA_MPS_PIPE_DIRECTORY")),
              "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    os.makedirs(arguments.out_dir, exist_ok=True)
    name = f"proxy-breakdown-{arguments.completion}"
    with open(os.path.join(arguments.out_dir, f"{name}-rank{rank}.json"), "w") as file:
        json.dump(report, file, indent=1)
    world.barrier()
    if rank == 0:
        ranks = []
        for other in range(n):
            with open(os.path.join(arguments.out_dir, f"{name}-rank{other}.json")) as file:
                ranks.append(json.load(file))
        merged = {"completion": arguments.completion, "world_size": n, "ranks": ranks,
                  "round_us_by_size": {str(row["bytes_per_peer"]): max(r["rows"][index]["round_us"] for r in ranks)
                                       for index, row in enumerate(rows)},
                  "driver_microbenchmarks": microbenchmarks}
        with open(os.path.join(arguments.out_dir, f"{name}.json"), "w") as file:
            json.dump(merged, file, indent=1)
        log(rank, f"wrote {os.path.join(arguments.out_dir, name + '.json')}")
    world.close()
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
