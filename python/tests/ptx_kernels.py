"""Kernels whose PTX the tests check: 16 put+signal chains to one peer (unrolled, so each
chain is its own code and a doorbell per chain would show as 16 stores)."""

import triton
import triton.language as tl

import aboleth.language as aboleth


@triton.jit
def stream16(endpoints, recv, flags, send, send_key, epoch, CHUNK: tl.constexpr, RANK: tl.constexpr,
             RANKS: tl.constexpr):
    peer = (RANK + 1) % RANKS
    ep = aboleth.endpoint(endpoints, peer)
    dst = aboleth.remote(recv, peer)
    flag = aboleth.remote(flags, peer, tl.int64)
    src = send.to(tl.pointer_type(tl.int8))
    for i in tl.static_range(16):
        t = aboleth.put(ep, dst.at(i * CHUNK), src + i * CHUNK, CHUNK, source_key=send_key)
        aboleth.signal(ep, flag.at(i), epoch, after=t)
    aboleth.drain(ep)


STREAM16_SIGNATURE = {"endpoints": "*i64", "recv": "*i64", "flags": "*i64", "send": "i64", "send_key": "i32",
                      "epoch": "i64", "CHUNK": "constexpr", "RANK": "constexpr", "RANKS": "constexpr"}
STREAM16_CONSTEXPRS = {"CHUNK": 64, "RANK": 0, "RANKS": 2}
