"""The all-to-all suite's tier-1 rows: the seed's exchange pattern through the device library
(tier1_alltoall.cu against world.device_library()'s archive for the transport), thread, warp and
block forms, the same kernel shape as the NVSHMEM baseline and the same rounds, sizes, warm-up,
timing and bit-exact checks as tier2.py (common.py). run.sh builds the library and
BUILD_DIR/libtier1_<transport>.so first.

    torchrun --nproc-per-node 2 experiments/bench/tier1.py OUT_DIR BUILD_DIR --transport p2p

Rows: system "aboleth-tier1", variant "thread|warp|block", num_warps None (the thread count is
in threads: 32, 32, 128 as NVSHMEM's)."""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import aboleth  # noqa: E402
from aboleth import device_library  # noqa: E402
from common import RegisteredBuffers, log, measure_rounds, rank_environment, row, sizes, write_rank_report  # noqa: E402

#: variant code of tier1_alltoall.cu -> (name, threads): NVSHMEM's shapes.
VARIANTS = {0: ("thread", 32), 1: ("warp", 32), 2: ("block", 128)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("build_dir")
    parser.add_argument("--transport", default="p2p", choices=["p2p", "proxy"])
    arguments = parser.parse_args()
    environment = rank_environment()
    boot = aboleth.TcpStoreBootstrap.from_env()
    rank, n = boot.rank, boot.world_size
    world = aboleth.World(rank, n, device=torch.cuda.current_device(), bootstrap=boot)
    world.connect_all(arguments.transport)
    library = ctypes.CDLL(os.path.join(arguments.build_dir, f"libtier1_{arguments.transport}.so"))
    library.bench_tier1_alltoall.restype = ctypes.c_int
    library.bench_tier1_alltoall.argtypes = [ctypes.c_char_p] * 4 + [
        ctypes.c_ulonglong, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_int, ctypes.c_int,
        ctypes.c_int, ctypes.c_void_p]
    capacity = max(sizes())
    buffers = RegisteredBuffers(world, n, capacity)
    table = buffers.table
    context = device_library.device_context(world, table)
    recv = device_library.remote_region(table, "recv")
    send = device_library.local_region(table, "send")
    flags = device_library.remote_region(table, "flags")
    for which, value in enumerate([context, recv, send]):
        if library.bench_tier1_struct_bytes(which) != len(value):
            raise RuntimeError(f"tier1_alltoall.cu sees struct {which} as {library.bench_tier1_struct_bytes(which)} "
                               f"bytes, aboleth-abi as {len(value)}")
    rows: List[Dict[str, Any]] = []
    failures: List[str] = []
    epoch = 1
    for variant, (name, threads) in VARIANTS.items():
        for bytes_per_peer in sizes():
            def launch(first_epoch: int, rounds: int) -> None:
                status = library.bench_tier1_alltoall(context, recv, send, flags, buffers.my_flags.data_ptr(), n,
                                                      bytes_per_peer, first_epoch, rounds, variant, threads,
                                                      ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
                if status != 0:
                    raise RuntimeError(f"tier1 all-to-all: cudaError {status}")

            result = measure_rounds(rank, n, launch, world.barrier, buffers.send_all, buffers.recv_all,
                                    buffers.my_flags, bytes_per_peer, epoch, after=world.check_waits)
            epoch, errors, rounds = result["next_epoch"], result["errors"], result["rounds"]
            if errors:
                failures.append(f"tier1 {name} {bytes_per_peer} B: " + "; ".join(errors[:3]))
            launch_median = result["launch_us"]
            rows.append(row("alltoall", "aboleth-tier1", arguments.transport, name, n, bytes_per_peer, None,
                            launch_median / rounds, launch_median, not errors, threads=threads,
                            rounds_per_launch=rounds, round_us_min=result["launch_us_min"] / rounds,
                            launch_us_min=result["launch_us_min"]))
            log(rank, f"aboleth-tier1 {arguments.transport} {name} {bytes_per_peer} B: "
                      f"{launch_median / rounds:.3f} us/round ({rounds} rounds) {'checked' if not errors else 'WRONG'}")
    write_rank_report(arguments.out_dir, f"alltoall-tier1-{arguments.transport}", rank, rows, failures=failures,
                      environment=environment, when=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    world.barrier()
    world.close()
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
