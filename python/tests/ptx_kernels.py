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


@triton.jit
def gemm_after_waits(my_flags, a_pointer, b_pointer, c_pointer, epoch, K: tl.constexpr, GUARDED: tl.constexpr):
    """A K loop whose A and B tiles arrive from peers: with GUARDED, each step waits for its
    tile's flag before loading it (the loads must not be prefetched above the wait)."""
    offsets = tl.arange(0, 64)
    k_offsets = tl.arange(0, 32)
    acc = tl.zeros([64, 64], dtype=tl.float32)
    for k in range(0, K, 32):
        if GUARDED:
            aboleth.wait_signal(my_flags + k // 32, epoch)
        a = tl.load(a_pointer + offsets[:, None] * K + (k + k_offsets)[None, :])
        b = tl.load(b_pointer + (k + k_offsets)[:, None] * 64 + offsets[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_pointer + offsets[:, None] * 64 + offsets[None, :], acc)


GEMM_SIGNATURE = {"my_flags": "*i64", "a_pointer": "*fp16", "b_pointer": "*fp16", "c_pointer": "*fp32",
                  "epoch": "i64", "K": "constexpr", "GUARDED": "constexpr"}
# 16-byte-aligned pointers, as Triton's JIT specializes them for torch tensors.
GEMM_ATTRIBUTES = {(index,): [["tt.divisibility", 16]] for index in range(4)}


@triton.jit
def stream_loop(endpoints, recv, flags, send, send_key, epoch, CHUNK: tl.constexpr, N: tl.constexpr,
                RANK: tl.constexpr):
    """N put+signal chains to this program's peer in a loop (one program per peer, so each
    queue has one owner): the batch the doorbell-scope pass spreads over a warp (N <= 32) or
    the whole program (N > 32)."""
    pid = tl.program_id(0)
    peer = pid + (pid >= RANK).to(tl.int32)
    ep = aboleth.endpoint(endpoints, peer)
    dst = aboleth.remote(recv, peer)
    flag = aboleth.remote(flags, peer, tl.int64)
    src = send.to(tl.pointer_type(tl.int8))
    for i in range(N):
        t = aboleth.put(ep, dst.at((RANK * N + i) * CHUNK), src + (peer * N + i) * CHUNK, CHUNK,
                        source_key=send_key)
        aboleth.signal(ep, flag.at(RANK * N + i), epoch, after=t)
    aboleth.drain(ep)


STREAM_LOOP_SIGNATURE = {"endpoints": "*i64", "recv": "*i64", "flags": "*i64", "send": "i64", "send_key": "i32",
                         "epoch": "i64", "CHUNK": "constexpr", "N": "constexpr", "RANK": "constexpr"}


@triton.jit
def count_arrivals(endpoints, recv, counters, send, send_key, my_counters, epoch, CHUNK: tl.constexpr,
                   RANK: tl.constexpr):
    """One program per other rank: 4 puts to the peer, each followed by `add 1` on the peer's
    counter for this rank (a small constant: a write-with-immediate signal with
    immediate_signals on mlx5), then a wait for 4 per launch from that peer."""
    pid = tl.program_id(0)
    peer = pid + (pid >= RANK).to(tl.int32)
    ep = aboleth.endpoint(endpoints, peer)
    dst = aboleth.remote(recv, peer)
    counter = aboleth.remote(counters, peer, tl.int64)
    src = send.to(tl.pointer_type(tl.int8))
    for i in range(4):
        t = aboleth.put(ep, dst.at((RANK * 4 + i) * CHUNK), src + (peer * 4 + i) * CHUNK, CHUNK,
                        source_key=send_key)
        aboleth.signal(ep, counter.at(RANK), 1, op="add", after=t)
    aboleth.wait_signal(my_counters + peer, 4 * epoch)
    aboleth.drain(ep)


COUNT_ARRIVALS_SIGNATURE = {"endpoints": "*i64", "recv": "*i64", "counters": "*i64", "send": "i64",
                            "send_key": "i32", "my_counters": "*i64", "epoch": "i64", "CHUNK": "constexpr",
                            "RANK": "constexpr"}


@triton.jit
def chains_and_waits(endpoints, recv, flags, send, send_key, my_flags, epoch, CHUNK: tl.constexpr,
                     RANK: tl.constexpr, RANKS: tl.constexpr):
    """Four put+set chains to the next rank, then the four flags the previous rank sets here."""
    peer = (RANK + 1) % RANKS
    ep = aboleth.endpoint(endpoints, peer)
    dst = aboleth.remote(recv, peer)
    flag = aboleth.remote(flags, peer, tl.int64)
    src = send.to(tl.pointer_type(tl.int8))
    for i in tl.static_range(4):
        t = aboleth.put(ep, dst.at(i * CHUNK), src + i * CHUNK, CHUNK, source_key=send_key)
        aboleth.signal(ep, flag.at(i), epoch, after=t)
    for i in tl.static_range(4):
        aboleth.wait_signal(my_flags + i, epoch)
    aboleth.drain(ep)


CHAINS_AND_WAITS_SIGNATURE = {"endpoints": "*i64", "recv": "*i64", "flags": "*i64", "send": "i64",
                              "send_key": "i32", "my_flags": "*i64", "epoch": "i64", "CHUNK": "constexpr",
                              "RANK": "constexpr", "RANKS": "constexpr"}
