"""The all-to-all suite's baselines, in the same run as the Aboleth rows (README.md): the
hand-written limit (handwritten.cu: warp stores + release flag, one CTA of 32, 128 or 1024
threads per peer), NVSHMEM 3.4.5 put-with-signal (nvshmem_alltoall.cu: thread, warp and block
forms), and the GPU<->CPU flag round trip (the proxy's floor, rank 0 alone). run.sh builds the
two shared libraries with nvcc into BUILD_DIR first.

    torchrun --nproc-per-node 2 experiments/bench/baselines.py OUT_DIR BUILD_DIR

The same rounds, sizes, warm-up, timing and bit-exact checks as tier2.py (common.py). The
hand-written kernel's peers' buffers are mapped with CUDA IPC through torch (the mapping Aboleth's
p2p transport makes with its own runtime), so both write peer memory the same way. The ranks meet
through torch.distributed over gloo (NCCL refuses two ranks on one GPU)."""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.multiprocessing.reductions import reduce_tensor  # noqa: E402

from common import log, measure_rounds, rank_environment, row, sizes, write_rank_report  # noqa: E402

HANDWRITTEN_THREADS = {32: "hand-written-warp", 128: "hand-written-cta", 1024: "hand-written-cta"}
NVSHMEM_VARIANTS = {0: "nvshmem-thread", 1: "nvshmem-warp", 2: "nvshmem-block"}
# handwritten.cu's PollStyle: the probe rows (32 threads, like num_warps=1).
PROBE_POLL_STYLES = {0: "thread-zero-polls", 1: "every-thread-polls", 2: "every-thread-polls-timed",
                     3: "thread-zero-polls-timed", 4: "thread-zero-polls-quiet-sc",
                     5: "thread-zero-polls-quiet-acq-rel"}
PROBE_TIMEOUT_NANOSECONDS = 10_000_000_000
FLAG_ROUND_TRIPS = 20000


class _DeviceArray:
    """A device allocation torch did not make, seen as a uint8 tensor (``__cuda_array_interface__``)."""

    def __init__(self, address: int, length_bytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (length_bytes,), "typestr": "|u1", "data": (address, False),
                                         "version": 3}


def device_bytes(address: int, length_bytes: int) -> torch.Tensor:
    return torch.as_tensor(_DeviceArray(address, length_bytes), device="cuda")


def baseline_row(rank: int, n: int, system: str, transport: str, threads: int, bytes_per_peer: int,
                 result: Dict[str, Any], failures: List[str], what: str) -> Dict[str, Any]:
    """The row of one measured baseline configuration; records its errors in ``failures`` and
    logs the figure (``what`` names the configuration in both)."""
    if result["errors"]:
        failures.append(f"{what}: " + "; ".join(result["errors"][:3]))
    round_us = result["launch_us"] / result["rounds"]
    log(rank, f"{what}: {round_us:.3f} us/round {'checked' if not result['errors'] else 'WRONG'}")
    return row("alltoall", system, transport, f"{threads}-threads", n, bytes_per_peer, None, round_us,
               result["launch_us"], not result["errors"], threads=threads, rounds_per_launch=result["rounds"],
               round_us_min=result["launch_us_min"] / result["rounds"], launch_us_min=result["launch_us_min"])


def peer_buffers(rank: int, n: int, capacity: int) -> Dict[str, torch.Tensor]:
    """One buffer (send, receive, flags) per rank, the peers' mapped with CUDA IPC through torch:
    the device arrays of the peers' receive and flag addresses and this rank's views."""
    buffer = torch.zeros(2 * n * capacity + 8 * n, dtype=torch.uint8, device="cuda")
    handles: List[Any] = [None] * n
    dist.all_gather_object(handles, reduce_tensor(buffer))
    peers = [buffer if peer == rank else handles[peer][0](*handles[peer][1]) for peer in range(n)]
    return {
        "peer_recv": torch.tensor([tensor.data_ptr() + n * capacity for tensor in peers], dtype=torch.int64,
                                  device="cuda"),
        "peer_flags": torch.tensor([tensor.data_ptr() + 2 * n * capacity for tensor in peers], dtype=torch.int64,
                                   device="cuda"),
        "send_all": buffer[:n * capacity], "recv_all": buffer[n * capacity:2 * n * capacity],
        "my_flags": buffer[2 * n * capacity:].view(torch.int64), "peers": peers,
    }


def probe_rows(library: Any, rank: int, n: int, failures: List[str]) -> List[Dict[str, Any]]:
    """The hand-written kernel at 32 threads with each flag-wait shape of PROBE_POLL_STYLES."""
    buffers = peer_buffers(rank, n, max(sizes()))
    timeout = torch.tensor([PROBE_TIMEOUT_NANOSECONDS], dtype=torch.int64, device="cuda")
    gave_up = torch.zeros(1, dtype=torch.int32, device="cuda")
    rows, epoch = [], 1
    for style, name in PROBE_POLL_STYLES.items():
        for bytes_per_peer in sizes():
            def launch(first_epoch: int, rounds: int) -> None:
                status = library.handwritten_alltoall_probe(
                    ctypes.c_void_p(buffers["peer_recv"].data_ptr()), ctypes.c_void_p(buffers["peer_flags"].data_ptr()),
                    ctypes.c_void_p(buffers["send_all"].data_ptr()), ctypes.c_void_p(buffers["my_flags"].data_ptr()),
                    rank, n, ctypes.c_longlong(bytes_per_peer), ctypes.c_longlong(first_epoch), rounds, 32, style,
                    ctypes.c_void_p(timeout.data_ptr()), ctypes.c_void_p(gave_up.data_ptr()),
                    ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
                if status != 0:
                    raise RuntimeError(f"handwritten_alltoall_probe: cudaError {status}")

            result = measure_rounds(rank, n, launch, dist.barrier, buffers["send_all"], buffers["recv_all"],
                                    buffers["my_flags"], bytes_per_peer, epoch)
            if int(gave_up.item()) != 0:
                result["errors"].append("a wait passed its bound")
            epoch = result["next_epoch"]
            what = f"hand-written-probe {name} {bytes_per_peer} B"
            rows.append(baseline_row(rank, n, "hand-written-probe", "p2p", 32, bytes_per_peer, result, failures, what))
            rows[-1]["variant"] = name
    dist.barrier()
    return rows


def handwritten_rows(library: Any, rank: int, n: int, failures: List[str]) -> List[Dict[str, Any]]:
    buffers = peer_buffers(rank, n, max(sizes()))
    peer_recv, peer_flags = buffers["peer_recv"], buffers["peer_flags"]
    send_all, recv_all, my_flags = buffers["send_all"], buffers["recv_all"], buffers["my_flags"]
    rows, epoch = [], 1
    for threads, system in HANDWRITTEN_THREADS.items():
        for bytes_per_peer in sizes():
            def launch(first_epoch: int, rounds: int) -> None:
                status = library.handwritten_alltoall(
                    ctypes.c_void_p(peer_recv.data_ptr()), ctypes.c_void_p(peer_flags.data_ptr()),
                    ctypes.c_void_p(send_all.data_ptr()), ctypes.c_void_p(my_flags.data_ptr()), rank, n,
                    ctypes.c_longlong(bytes_per_peer), ctypes.c_longlong(first_epoch), rounds, threads,
                    ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
                if status != 0:
                    raise RuntimeError(f"handwritten_alltoall: cudaError {status}")

            result = measure_rounds(rank, n, launch, dist.barrier, send_all, recv_all, my_flags, bytes_per_peer, epoch)
            epoch = result["next_epoch"]
            rows.append(baseline_row(rank, n, system, "p2p", threads, bytes_per_peer, result, failures,
                                     f"{system} {threads} threads {bytes_per_peer} B"))
    dist.barrier()
    return rows


def nvshmem_rows(library: Any, rank: int, n: int, failures: List[str]) -> List[Dict[str, Any]]:
    capacity = max(sizes())
    unique_id = ctypes.create_string_buffer(library.bench_nvshmem_unique_id_bytes())
    if rank == 0:
        status = library.bench_nvshmem_get_unique_id(unique_id)
        if status != 0:
            raise RuntimeError(f"nvshmemx_get_uniqueid failed: {status}")
    shared = [unique_id.raw if rank == 0 else None]
    dist.broadcast_object_list(shared, src=0)
    status = library.bench_nvshmem_setup(rank, n, ctypes.c_char_p(shared[0]), ctypes.c_longlong(capacity))
    if status != 0:
        raise RuntimeError(f"nvshmem setup failed: {status}")
    addresses = (ctypes.c_ulonglong * 3)()
    library.bench_nvshmem_buffers(addresses)
    send_all = device_bytes(addresses[0], n * capacity)
    recv_all = device_bytes(addresses[1], n * capacity)
    my_flags = device_bytes(addresses[2], 8 * n).view(torch.int64)
    rows, epoch = [], 1
    for variant, system in NVSHMEM_VARIANTS.items():
        threads = 32 if variant != 2 else 128
        for bytes_per_peer in sizes():
            def launch(first_epoch: int, rounds: int) -> None:
                status = library.bench_nvshmem_alltoall(rank, n, ctypes.c_longlong(bytes_per_peer),
                                                  ctypes.c_longlong(first_epoch), rounds, variant, threads,
                                                  ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
                if status != 0:
                    raise RuntimeError(f"nvshmem_alltoall: status {status}")

            result = measure_rounds(rank, n, launch, library.bench_nvshmem_barrier, send_all, recv_all, my_flags,
                                    bytes_per_peer, epoch)
            epoch = result["next_epoch"]
            rows.append(baseline_row(rank, n, system, "nvshmem", threads, bytes_per_peer, result, failures,
                                     f"{system} {bytes_per_peer} B"))
    library.bench_nvshmem_barrier()
    library.bench_nvshmem_teardown()
    return rows


def flag_round_trip_rows(library: Any, rank: int, n: int, failures: List[str]) -> List[Dict[str, Any]]:
    rows = []
    if rank == 0:
        elapsed_us = ctypes.c_double()
        library.flag_round_trip(1000, ctypes.byref(elapsed_us))  # warm-up
        status = library.flag_round_trip(FLAG_ROUND_TRIPS, ctypes.byref(elapsed_us))
        checked = status == 0
        if not checked:
            failures.append(f"flag round trip: status {status}")
        per_trip = elapsed_us.value / FLAG_ROUND_TRIPS
        rows.append(row("alltoall", "flag-round-trip", "host", "pinned-flag", 1, 8, None, per_trip,
                        elapsed_us.value, checked, rounds_per_launch=FLAG_ROUND_TRIPS))
        log(rank, f"flag round trip: {per_trip:.3f} us")
    dist.barrier()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("build_dir")
    parser.add_argument("--systems", default="handwritten,flag,nvshmem")
    arguments = parser.parse_args()
    environment = rank_environment()
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    failures: List[str] = []
    rows: List[Dict[str, Any]] = []
    skipped: Dict[str, str] = {}
    for system in arguments.systems.split(","):
        name = {"handwritten": "libhandwritten.so", "flag": "libhandwritten.so", "probe": "libhandwritten.so",
                "nvshmem": "libnvshmem_alltoall.so"}[system]
        path = os.path.join(arguments.build_dir, name)
        if not os.path.exists(path):
            skipped[system] = f"{path} was not built (see run.sh's log)"
            log(rank, f"{system}: not run: {skipped[system]}")
            continue
        library = ctypes.CDLL(path)
        try:
            rows += {"handwritten": handwritten_rows, "flag": flag_round_trip_rows, "probe": probe_rows,
                     "nvshmem": nvshmem_rows}[system](library, rank, n, failures)
        except Exception as error:  # noqa: BLE001 - the report says which baseline did not run and why
            skipped[system] = f"{type(error).__name__}: {error}"
            log(rank, f"{system}: failed: {skipped[system]}")
    write_rank_report(arguments.out_dir, "alltoall-baselines", rank, rows, failures=failures, not_run=skipped,
                      environment=environment, when=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    dist.destroy_process_group()
    return 0 if not failures and not skipped else 1


if __name__ == "__main__":
    sys.exit(main())
