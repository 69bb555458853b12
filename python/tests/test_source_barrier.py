"""A put whose source the kernel has just written (a GEMM tile from ``tl.dot``, stored with
``tl.store``, then sent with ``aboleth.put``): the generated TTIR orders the tile's stores before
the transfer reads the source. On p2p the copy's loads are spread over the program's threads,
so the lowering puts a ``gpu.barrier`` between the store and the copy; mlx5 and proxy reserve
(and write the commands) after a barrier anyway. The seed's all-to-all, whose send buffer the
host wrote, keeps its copy without a barrier."""

from __future__ import annotations

import re
from typing import List

import pytest
import triton
import triton.language as tl

import aboleth
import aboleth.language as abl
import seed_kernels
from helpers import compile_kernel
from test_language import SEED_CONSTEXPRS, SEED_SIGNATURE


@triton.jit
def gemm_tile_then_put(endpoints, recv, flags, a_pointer, b_pointer, tile_pointer, tile_key, my_flags, epoch,
                       BLOCK: tl.constexpr, RANK: tl.constexpr):
    pid = tl.program_id(0)
    peer = pid + (pid >= RANK).to(tl.int32)  # one program per peer
    ep = abl.endpoint(endpoints, peer)
    dst = abl.remote(recv, peer)
    flag = abl.remote(flags, peer, tl.int64)
    offsets = tl.arange(0, BLOCK)
    a = tl.load(a_pointer + offsets[:, None] * BLOCK + offsets[None, :])
    b = tl.load(b_pointer + offsets[:, None] * BLOCK + offsets[None, :])
    tile = tl.dot(a, b)
    tl.store(tile_pointer + offsets[:, None] * BLOCK + offsets[None, :], tile)
    t = abl.put(ep, dst.at(RANK * BLOCK * BLOCK * 4), tile_pointer, BLOCK * BLOCK * 4, source_key=tile_key)
    s = abl.signal(ep, flag.at(RANK), epoch, after=t)
    abl.wait_signal(my_flags + peer, epoch)
    abl.wait(s)


GEMM_SIGNATURE = {
    "endpoints": "*i64", "recv": "*i64", "flags": "*i64", "a_pointer": "*fp16", "b_pointer": "*fp16",
    "tile_pointer": "*fp32", "tile_key": "i32", "my_flags": "*i64", "epoch": "i64", "BLOCK": "constexpr",
    "RANK": "constexpr",
}
GEMM_CONSTEXPRS = {"BLOCK": 32, "RANK": 1}


def lines_with(ttir: str, needle: str) -> List[int]:
    return [number for number, line in enumerate(ttir.splitlines()) if needle in line]


def tile_store_line(ttir: str) -> int:
    """The line of the tile's `tl.store` (the only store of f32)."""
    stores = [number for number, line in enumerate(ttir.splitlines())
              if line.strip().startswith("tt.store") and "!tt.ptr<f32>" in line]
    assert len(stores) == 1, ttir
    return stores[0]


def copy_line(ttir: str) -> int:
    """The first load of a p2p copy loop: a one-dimensional tile of word or byte pointers (at most
    P2P_COPY_CHUNK_ELEMENTS; Triton renames the values when it parses the stage's TTIR back, so
    the op is the marker)."""
    loads = [number for number, line in enumerate(ttir.splitlines())
             if line.strip().split(" = ")[-1].startswith("tt.load")
             and re.search(r"tensor<\d+x!tt\.ptr<i(64|8)>>", line)]
    assert loads, ttir
    return loads[0]


def test_a_p2p_put_of_a_stored_tile_copies_after_a_barrier():
    aboleth.install(target="p2p")
    kernel = compile_kernel(gemm_tile_then_put, GEMM_SIGNATURE, GEMM_CONSTEXPRS)
    assert kernel.asm["cubin"]
    ttir = kernel.asm["aboleth"]
    store = tile_store_line(ttir)
    copy = copy_line(ttir)
    assert store < copy, ttir
    assert any(store < barrier < copy for barrier in lines_with(ttir, "gpu.barrier")), ttir
    # Then the signal's barrier, after the copy.
    assert any(barrier > copy for barrier in lines_with(ttir, "gpu.barrier")), ttir


def test_the_seed_alltoall_copies_its_host_written_send_buffer_without_a_barrier():
    aboleth.install(target="p2p")
    kernel = compile_kernel(seed_kernels.alltoall, SEED_SIGNATURE, SEED_CONSTEXPRS)
    ttir = kernel.asm["aboleth"]
    copy = copy_line(ttir)
    barriers = lines_with(ttir, "gpu.barrier")
    # One barrier: the signal's, after the copy.
    assert len(barriers) == 1 and copy < barriers[0], ttir
    assert ttir.count("bar.sync") == 0  # no other form of barrier either


@pytest.mark.parametrize("target", ["mlx5", "proxy"])
def test_queue_transports_post_a_stored_tile_after_a_barrier(target):
    aboleth.install(target=target)
    kernel = compile_kernel(gemm_tile_then_put, GEMM_SIGNATURE, GEMM_CONSTEXPRS)
    ttir = kernel.asm["aboleth"]
    store = tile_store_line(ttir)
    # The one-owner reservation (the leader's read-modify-write of the reservation counter).
    reservation = [line for line in lines_with(ttir, "@%ab_leader add.u64 %ab_next") if line > store]
    assert reservation, ttir
    assert any(store < barrier < reservation[0] for barrier in lines_with(ttir, "gpu.barrier")), ttir
