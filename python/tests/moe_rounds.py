"""aboleth.moe's sending kernels followed by the receivers' waits, as one kernel each, for the
simulator (test_moe.py): ``dispatch_round`` is ``dispatch_send`` then the bounded waits of
``dispatch_receive``; ``combine_round`` is ``combine_send`` then those of ``combine_reduce``.
``normal_dispatch_round`` and ``normal_combine_round`` are the normal mode's staged sending
kernels then the waits of ``normal_dispatch_wait`` / ``normal_combine_wait``;
``normal_dispatch_direct_round`` and ``normal_combine_direct_round`` its p2p sending kernels
(puts from the caller's tensors) then the same waits. The copies the receiving
kernels do after their waits are plain Triton (not simulated); the communication is the
package's code, inlined."""

import triton
import triton.language as tl

from aboleth.moe.kernels import _wait_for_every_peer, combine_send, dispatch_send
from aboleth.moe.normal_kernels import (normal_combine_direct, normal_combine_send, normal_dispatch_direct,
                                        normal_dispatch_send)


@triton.jit
def dispatch_round(endpoints, regions, pool, pool_key, epoch, RANK: tl.constexpr, RANKS: tl.constexpr,
                   LOCAL_EXPERTS: tl.constexpr, MAX_TOKENS: tl.constexpr, TOKEN_BYTES: tl.constexpr,
                   PARTS: tl.constexpr, DISPATCH_FLAGS: tl.constexpr, DISPATCH_COUNTS: tl.constexpr,
                   SEND_COUNTS: tl.constexpr, DISPATCH_TOKENS: tl.constexpr, DISPATCH_SEND: tl.constexpr):
    dispatch_send(endpoints, regions, pool, pool_key, RANK, RANKS, LOCAL_EXPERTS, MAX_TOKENS, TOKEN_BYTES, PARTS,
                  DISPATCH_FLAGS, DISPATCH_COUNTS, SEND_COUNTS, DISPATCH_TOKENS, DISPATCH_SEND)
    words = pool.to(tl.pointer_type(tl.int64))
    _wait_for_every_peer(endpoints, words, DISPATCH_FLAGS // 8, epoch * PARTS, DISPATCH_COUNTS // 8, 0, epoch,
                         RANK, RANKS, LOCAL_EXPERTS + 1, 0, False, False)


@triton.jit
def combine_round(endpoints, regions, pool, pool_key, layout_range, epoch, RANK: tl.constexpr,
                  RANKS: tl.constexpr, LOCAL_EXPERTS: tl.constexpr, MAX_TOKENS: tl.constexpr,
                  TOKEN_BYTES: tl.constexpr, PARTS: tl.constexpr, COMBINE_FLAGS: tl.constexpr,
                  COMBINE_TOKENS: tl.constexpr, COMBINE_SEND: tl.constexpr):
    combine_send(endpoints, regions, pool, pool_key, layout_range, RANK, RANKS, LOCAL_EXPERTS, MAX_TOKENS,
                 TOKEN_BYTES, PARTS, COMBINE_FLAGS, COMBINE_TOKENS, COMBINE_SEND)
    words = pool.to(tl.pointer_type(tl.int64))
    _wait_for_every_peer(endpoints, words, COMBINE_FLAGS // 8, epoch * PARTS, 0, 0, epoch, RANK, RANKS, 1, 0, False,
                         False)


@triton.jit
def normal_dispatch_round(endpoints, regions, pool, pool_key, epoch, RANK: tl.constexpr, RANKS: tl.constexpr,
                          ROW_WORDS: tl.constexpr, CAPACITY: tl.constexpr, ROW_STRIDE: tl.constexpr,
                          BLOCK_BYTES: tl.constexpr, PARTS: tl.constexpr, DISPATCH_FLAGS: tl.constexpr,
                          DISPATCH_COUNTS: tl.constexpr, SEND_COUNTS: tl.constexpr, RECV: tl.constexpr,
                          SEND: tl.constexpr):
    normal_dispatch_send(endpoints, regions, pool, pool_key, RANK, RANKS, ROW_WORDS, CAPACITY, ROW_STRIDE,
                         BLOCK_BYTES, PARTS, DISPATCH_FLAGS, DISPATCH_COUNTS, SEND_COUNTS, RECV, SEND)
    words = pool.to(tl.pointer_type(tl.int64))
    _wait_for_every_peer(endpoints, words, DISPATCH_FLAGS // 8, epoch * PARTS, DISPATCH_COUNTS // 8, 0, epoch,
                         RANK, RANKS, ROW_WORDS, 0, False, False)


@triton.jit
def normal_combine_round(endpoints, regions, pool, pool_key, recv_info, epoch, RANK: tl.constexpr,
                         RANKS: tl.constexpr, CAPACITY: tl.constexpr, ROW_STRIDE: tl.constexpr,
                         BLOCK_BYTES: tl.constexpr, PARTS: tl.constexpr, COMBINE_FLAGS: tl.constexpr,
                         RECV: tl.constexpr, SEND: tl.constexpr):
    normal_combine_send(endpoints, regions, pool, pool_key, recv_info, RANK, RANKS, CAPACITY, ROW_STRIDE,
                        BLOCK_BYTES, PARTS, COMBINE_FLAGS, RECV, SEND)
    words = pool.to(tl.pointer_type(tl.int64))
    _wait_for_every_peer(endpoints, words, COMBINE_FLAGS // 8, epoch * PARTS, 0, 0, epoch, RANK, RANKS, 1, 0, False,
                         False)


@triton.jit
def normal_dispatch_direct_round(endpoints, regions, x_words, scale_words, topk_idx, topk_weights, send_tokens, pool,
                                 pool_key, tokens, epoch, RANK: tl.constexpr, RANKS: tl.constexpr,
                                 ROW_WORDS: tl.constexpr, CAPACITY: tl.constexpr, K: tl.constexpr,
                                 X_WORDS: tl.constexpr, SCALE_WORDS: tl.constexpr, ROW_STRIDE: tl.constexpr,
                                 BLOCK_BYTES: tl.constexpr, PARTS: tl.constexpr, DISPATCH_FLAGS: tl.constexpr,
                                 DISPATCH_COUNTS: tl.constexpr, SEND_COUNTS: tl.constexpr, RECV: tl.constexpr,
                                 HAS_TOPK: tl.constexpr):
    normal_dispatch_direct(endpoints, regions, x_words, scale_words, topk_idx, topk_weights, send_tokens, pool,
                           pool_key, tokens, RANK, RANKS, ROW_WORDS, CAPACITY, K, X_WORDS, SCALE_WORDS, ROW_STRIDE,
                           BLOCK_BYTES, PARTS, DISPATCH_FLAGS, DISPATCH_COUNTS, SEND_COUNTS, RECV, HAS_TOPK)
    words = pool.to(tl.pointer_type(tl.int64))
    _wait_for_every_peer(endpoints, words, DISPATCH_FLAGS // 8, epoch * PARTS, DISPATCH_COUNTS // 8, 0, epoch,
                         RANK, RANKS, ROW_WORDS, 0, False, False)


@triton.jit
def normal_combine_direct_round(endpoints, regions, x_words, topk_weights, recv_info, pool, pool_key, epoch,
                                K: tl.constexpr, RANK: tl.constexpr, RANKS: tl.constexpr,
                                HIDDEN_WORDS: tl.constexpr, CAPACITY: tl.constexpr, ROW_STRIDE: tl.constexpr,
                                BLOCK_BYTES: tl.constexpr, PARTS: tl.constexpr, COMBINE_FLAGS: tl.constexpr,
                                SEND: tl.constexpr, HAS_WEIGHTS: tl.constexpr):
    normal_combine_direct(endpoints, regions, x_words, topk_weights, recv_info, pool_key, K, RANK, RANKS,
                          HIDDEN_WORDS, CAPACITY, ROW_STRIDE, BLOCK_BYTES, PARTS, COMBINE_FLAGS, SEND, HAS_WEIGHTS)
    words = pool.to(tl.pointer_type(tl.int64))
    _wait_for_every_peer(endpoints, words, COMBINE_FLAGS // 8, epoch * PARTS, 0, 0, epoch, RANK, RANKS, 1, 0, False,
                         False)
