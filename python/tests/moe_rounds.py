"""aboleth.moe's sending kernels followed by the receivers' waits, as one kernel each, for the
simulator (test_moe.py): ``dispatch_round`` is ``dispatch_send`` then the bounded waits of
``dispatch_receive``; ``combine_round`` is ``combine_send`` then those of ``combine_reduce``.
The copies the receiving kernels do after their waits are plain Triton (not simulated); the
communication is the package's code, inlined."""

import triton
import triton.language as tl

from aboleth.moe.kernels import _wait_for_every_peer, combine_send, dispatch_send


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
