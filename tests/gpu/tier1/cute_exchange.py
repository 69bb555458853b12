"""The seed's exchange as a CuTe DSL kernel through ``aboleth.frontends.cute``, for
``tests/gpu/tier1_exchange.py``'s ``cute`` step (imported only there, where nvidia-cutlass-dsl
is importable). Kept apart from that script because CuTe DSL reads the kernels' annotations as
values, which ``from __future__ import annotations`` would turn into strings."""

import cutlass.cute as cute
from cutlass import Int32, Uint32, Uint64

from aboleth.frontends import cute as tier1_cute

#: The kernel's argument types, in order.
TYPES = (Uint64, Uint32, Uint32, Int32, Uint64, Uint64, Uint64, Uint32, Uint64, Uint64, Uint64, Uint64, Uint64)


def compile_exchange(transport: str, architecture: str):
    """cute.compile of the exchange (one block of 128 threads: put_signal, quiet, wait_signal,
    block forms) for ``transport``'s bitcode and ``architecture`` (``sm_90a``)."""
    lib = tier1_cute.library(transport)

    @cute.kernel
    def exchange(handles: Uint64, rank: Uint32, world_size: Uint32, peer: Int32, recv: Uint64, dst_offset: Uint64,
                 send: Uint64, send_key: Uint32, nbytes: Uint64, flags: Uint64, flag_offset: Uint64, my_flag: Uint64,
                 epoch: Uint64):
        lib.put_signal(handles, rank, world_size, peer, recv, dst_offset, send, send_key, nbytes, flags, flag_offset,
                       epoch)
        lib.quiet(handles, rank, world_size, peer)
        lib.wait_signal(handles, rank, world_size, my_flag, epoch)

    @cute.jit
    def launch(handles: Uint64, rank: Uint32, world_size: Uint32, peer: Int32, recv: Uint64, dst_offset: Uint64,
               send: Uint64, send_key: Uint32, nbytes: Uint64, flags: Uint64, flag_offset: Uint64, my_flag: Uint64,
               epoch: Uint64):
        exchange(handles, rank, world_size, peer, recv, dst_offset, send, send_key, nbytes, flags, flag_offset,
                 my_flag, epoch).launch(grid=(1, 1, 1), block=(128, 1, 1))

    return cute.compile(launch, *typed([0] * len(TYPES)), options=f"--gpu-arch {architecture}")


def typed(values):
    return [kind(value) for kind, value in zip(TYPES, values)]
