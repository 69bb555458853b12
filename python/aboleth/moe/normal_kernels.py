"""The normal (throughput) mode's kernels: Triton, with ``aboleth.language`` for the communication.

Nine kernels per layer (``aboleth/moe/normal.py`` launches them; ``NormalLayout`` in
``aboleth/moe/layout.py`` says where each part of the pool is). Dispatch:

- :func:`normal_prepare` (plain Triton, one program per rank): each token's place among a
  destination's tokens, the counts rows, the epoch;
- :func:`normal_pack` (plain Triton, one program per token): copies the token's row (hidden
  state, top-k ids made local to the destination, weights, FP8 scales) once to each rank that
  holds one of its experts, at the token's place among that rank's tokens: this rank's
  ``send`` block of the rank, or for this rank straight into its own ``recv`` block. The
  tokens are compacted here, before anything is sent;
- :func:`normal_dispatch_send` (``parts`` programs per peer): one put of the program's share of
  the peer's rows (their number loaded from memory), the counts row (one program), one counter
  add. The compiler sees one put, a predicated put and an add on one endpoint: one batch, one
  doorbell per program on the queue transports;
- :func:`normal_dispatch_wait` (one program): bounded waits for every peer's counter, the
  fingerprint check, then the received layout (``recv_info``: each source's first row, the
  total, the per-expert counts rounded up to the expert alignment), the ``num_worst_tokens``
  overflow check. One program, so that spinning leaves the GPU to the peers;
- :func:`normal_dispatch_receive` (plain Triton, one program per received row): copies row
  ``i`` out of the block of its source (sources in rank order, each source's rows in its token
  order), or marks a padding row (``num_worst_tokens``) with ids -1 and weights 0.

Combine:

- :func:`normal_combine_pack` (plain, one program per received row): the expert output and the
  weights of row ``i`` into the ``recv`` block place the row came from;
- :func:`normal_combine_send` (``parts`` programs per peer): one put of the program's share of
  the rows that came from the peer back into the peer's ``send`` block of this rank, one add;
- :func:`normal_combine_wait` (one program): bounded waits for every peer's counter;
- :func:`normal_combine_reduce` (plain, one program per (token, chunk of hidden)): the sum over
  the ranks the token went to, in rank order, in FP32, then the combine's biases (none, one or
  two), rounded to BF16 once (deterministic); the weights summed the same way.

Rows are copied as int32 words (a row's hidden state and its stride are whole 16-byte vectors,
its other parts whole words: see ``NormalLayout``). The plain kernels never wait; only the two one-program wait kernels spin.
"""

import triton
import triton.language as tl

import aboleth.language as aboleth

from aboleth.moe.kernels import _peer_and_part, _wait_for_every_peer


@triton.jit
def _block_of(rank, RANK: tl.constexpr, RECV: tl.constexpr, SEND: tl.constexpr, BLOCK_BYTES: tl.constexpr):
    """The byte offset of the block a token's row for ``rank`` lives in on its home rank: its
    own ``recv`` block for this rank, the ``send`` block of the rank otherwise."""
    return tl.where(rank == RANK, RECV + RANK * BLOCK_BYTES, SEND + rank.to(tl.int64) * BLOCK_BYTES)


@triton.jit
def _copy_words(destination, source, WORDS: tl.constexpr, BLOCK_WORDS: tl.constexpr):
    for start in range(0, WORDS, BLOCK_WORDS):
        columns = start + tl.arange(0, BLOCK_WORDS)
        mask = columns < WORDS
        tl.store(destination + columns, tl.load(source + columns, mask=mask), mask=mask)


@triton.jit
def normal_prepare(in_rank, positions, num_tokens_per_expert, pool, recv_info, tokens, RANK: tl.constexpr,
                   RANKS: tl.constexpr, LOCAL_EXPERTS: tl.constexpr, LOCAL_POW2: tl.constexpr,
                   ROW_WORDS: tl.constexpr, FINGERPRINT: tl.constexpr, EPOCHS: tl.constexpr,
                   SEND_COUNTS: tl.constexpr, DISPATCH_COUNTS: tl.constexpr, INFO_WORDS: tl.constexpr,
                   INFO_POW2: tl.constexpr, BLOCK_TOKENS: tl.constexpr):
    """Program ``r``: each token's place among rank ``r``'s tokens (an exclusive scan of
    ``is_token_in_rank[:, r]``), the counts row for ``r`` (its tokens, its experts' counts from
    ``num_tokens_per_expert``, the fingerprint); this rank's program also copies its own row to
    ``dispatch_counts``, advances the dispatch epoch and zeroes ``recv_info`` (a wait that gives
    up leaves it so: the receive then copies nothing). One launch for what took eleven torch ops."""
    rank = tl.program_id(0)
    carry = tl.full([], 0, tl.int64)
    for start in range(0, tokens, BLOCK_TOKENS):
        rows = (start + tl.arange(0, BLOCK_TOKENS)).to(tl.int64)
        mask = rows < tokens
        present = (tl.load(in_rank + rows * RANKS + rank, mask=mask, other=0) != 0).to(tl.int64)
        tl.store(positions + rows * RANKS + rank, carry + tl.cumsum(present, 0) - present, mask=mask)
        carry += tl.sum(present)
    words = pool.to(tl.pointer_type(tl.int64))
    experts = tl.arange(0, LOCAL_POW2)
    expert_mask = experts < LOCAL_EXPERTS
    counts = tl.load(num_tokens_per_expert + rank * LOCAL_EXPERTS + experts, mask=expert_mask, other=0).to(tl.int64)
    _store_counts_row(words + SEND_COUNTS // 8 + rank * ROW_WORDS, carry, counts, experts, expert_mask, ROW_WORDS,
                      FINGERPRINT)
    if rank == RANK:
        _store_counts_row(words + DISPATCH_COUNTS // 8 + RANK * ROW_WORDS, carry, counts, experts, expert_mask,
                          ROW_WORDS, FINGERPRINT)
        tl.store(words + EPOCHS // 8, tl.load(words + EPOCHS // 8) + 1)
        info = tl.arange(0, INFO_POW2)
        tl.store(recv_info + info, tl.zeros([INFO_POW2], tl.int64), mask=info < INFO_WORDS)


@triton.jit
def _store_counts_row(row, tokens, counts, experts, expert_mask, ROW_WORDS: tl.constexpr, FINGERPRINT: tl.constexpr):
    tl.store(row, tokens)
    tl.store(row + 1 + experts, counts, mask=expert_mask)
    tl.store(row + ROW_WORDS - 1, tokens * 0 + FINGERPRINT)


@triton.jit
def normal_pack(x_words, scale_words, topk_idx, topk_weights, in_rank, positions, pool, K: tl.constexpr,
                K_POW2: tl.constexpr, RANK: tl.constexpr, RANKS: tl.constexpr, LOCAL_EXPERTS: tl.constexpr,
                X_WORDS: tl.constexpr, SCALE_WORDS: tl.constexpr, ROW_STRIDE: tl.constexpr,
                BLOCK_BYTES: tl.constexpr, RECV: tl.constexpr, SEND: tl.constexpr, HAS_TOPK: tl.constexpr,
                BLOCK_WORDS: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    words = pool.to(tl.pointer_type(tl.int32))
    ks = tl.arange(0, K_POW2)
    k_mask = ks < K
    for rank in tl.static_range(RANKS):
        if tl.load(in_rank + token * RANKS + rank) != 0:
            position = tl.load(positions + token * RANKS + rank)
            row = _block_of(tl.full([], rank, tl.int64), RANK, RECV, SEND, BLOCK_BYTES) + position * ROW_STRIDE
            _copy_words(words + row // 4, x_words + token * X_WORDS, X_WORDS, BLOCK_WORDS)
            if HAS_TOPK:
                expert = tl.load(topk_idx + token * K + ks, mask=k_mask, other=-1)
                local = expert - rank * LOCAL_EXPERTS
                mine = (expert >= 0) & (local >= 0) & (local < LOCAL_EXPERTS)
                ids = (pool + row + X_WORDS * 4).to(tl.pointer_type(tl.int64))
                tl.store(ids + ks, tl.where(mine, local, -1), mask=k_mask)
                weight = tl.load(topk_weights + token * K + ks, mask=k_mask, other=0.0)
                weights = (pool + row + X_WORDS * 4 + K * 8).to(tl.pointer_type(tl.float32))
                tl.store(weights + ks, tl.where(mine, weight, 0.0), mask=k_mask)
            if SCALE_WORDS > 0:
                _copy_words(words + row // 4 + X_WORDS + K * 3, scale_words + token * SCALE_WORDS, SCALE_WORDS,
                            BLOCK_WORDS)


@triton.jit
def _send_rows(ep, peer_pool, pool, pool_key, count, part, source_block, destination_block,
               ROW_STRIDE: tl.constexpr, PARTS: tl.constexpr):
    """One put of rows ``[count * part / PARTS, count * (part + 1) / PARTS)`` of a block."""
    first = (count * part // PARTS).to(tl.int64)
    last = (count * (part + 1) // PARTS).to(tl.int64)
    aboleth.put(ep, peer_pool.at(destination_block + first * ROW_STRIDE), pool + source_block + first * ROW_STRIDE,
                (last - first) * ROW_STRIDE, source_key=pool_key)


@triton.jit
def normal_dispatch_send(endpoints, regions, pool, pool_key, RANK: tl.constexpr, RANKS: tl.constexpr,
                         ROW_WORDS: tl.constexpr, CAPACITY: tl.constexpr, ROW_STRIDE: tl.constexpr,
                         BLOCK_BYTES: tl.constexpr, PARTS: tl.constexpr, DISPATCH_FLAGS: tl.constexpr,
                         DISPATCH_COUNTS: tl.constexpr, SEND_COUNTS: tl.constexpr, RECV: tl.constexpr,
                         SEND: tl.constexpr):
    peer, part = _peer_and_part(RANK, PARTS)
    ep = aboleth.endpoint(endpoints, peer)
    peer_pool = aboleth.remote(regions, peer)
    peer_words = aboleth.remote(regions, peer, tl.int64)
    words = pool.to(tl.pointer_type(tl.int64))
    count = tl.minimum(tl.maximum(tl.load(words + SEND_COUNTS // 8 + peer * ROW_WORDS), 0), CAPACITY)
    _send_rows(ep, peer_pool, pool, pool_key, count, part, SEND + peer.to(tl.int64) * BLOCK_BYTES,
               RECV + RANK * BLOCK_BYTES, ROW_STRIDE, PARTS)
    counts_source = pool + SEND_COUNTS + peer.to(tl.int64) * (ROW_WORDS * 8)
    aboleth.put(ep, peer_pool.at(DISPATCH_COUNTS + RANK * (ROW_WORDS * 8)), counts_source, ROW_WORDS * 8,
                source_key=pool_key, predicate=part == 0)
    # One add per part: the receiver waits for epoch * PARTS.
    aboleth.signal(ep, peer_words.at(DISPATCH_FLAGS // 8 + RANK), 1, op="add")
    aboleth.drain(ep)  # the send block and counts row are rewritten by the next dispatch


@triton.jit
def normal_dispatch_wait(endpoints, pool, recv_info, RANK: tl.constexpr, RANKS: tl.constexpr,
                         RANKS_POW2: tl.constexpr, LOCAL_EXPERTS: tl.constexpr, LOCAL_POW2: tl.constexpr,
                         ROW_WORDS: tl.constexpr, CAPACITY: tl.constexpr, FINGERPRINT: tl.constexpr,
                         EXPERT_ALIGNMENT: tl.constexpr, NUM_WORST: tl.constexpr, ERRORS: tl.constexpr,
                         EPOCHS: tl.constexpr, DISPATCH_FLAGS: tl.constexpr, DISPATCH_COUNTS: tl.constexpr,
                         PARTS: tl.constexpr, WORST_ERROR_WORD: tl.constexpr, ERROR_WORDS: tl.constexpr):
    words = pool.to(tl.pointer_type(tl.int64))
    epoch = tl.load(words + EPOCHS // 8)
    _wait_for_every_peer(endpoints, words, DISPATCH_FLAGS // 8, epoch * PARTS, DISPATCH_COUNTS // 8, ERRORS // 8,
                         epoch, RANK, RANKS, ROW_WORDS, FINGERPRINT, True)
    sources = tl.arange(0, RANKS_POW2)
    source_mask = sources < RANKS
    counts_rows = words + DISPATCH_COUNTS // 8 + sources * ROW_WORDS
    # A count past a block's rows would read past it: clamp (a peer with another configuration
    # is reported through the fingerprint).
    counts = tl.load(counts_rows, mask=source_mask, other=0, volatile=True)
    counts = tl.minimum(tl.maximum(counts, 0), CAPACITY)
    total = tl.sum(counts)
    tl.store(recv_info + sources, tl.cumsum(counts, 0) - counts, mask=source_mask)
    tl.store(recv_info + RANKS, total)
    experts = tl.arange(0, LOCAL_POW2)
    expert_mask = experts < LOCAL_EXPERTS
    per_source = tl.load(counts_rows[:, None] + 1 + experts[None, :], mask=source_mask[:, None] & expert_mask[None, :],
                         other=0, volatile=True)
    per_expert = tl.sum(tl.minimum(tl.maximum(per_source, 0), CAPACITY), 0)
    aligned = (per_expert + EXPERT_ALIGNMENT - 1) // EXPERT_ALIGNMENT * EXPERT_ALIGNMENT
    tl.store(recv_info + RANKS + 1 + experts, aligned, mask=expert_mask)
    if NUM_WORST > 0:
        if total > NUM_WORST:
            nothing = epoch * 0
            if tl.atomic_cas(words + ERRORS // 8 + WORST_ERROR_WORD, nothing, total) == 0:
                tl.store(words + ERRORS // 8 + WORST_ERROR_WORD + 1, nothing + NUM_WORST)
                tl.store(words + ERRORS // 8 + WORST_ERROR_WORD + 2, epoch)
    # The error words after the layout, so that the host's one copy brings both (the stores
    # above come from other threads of this program: a barrier first).
    tl.debug_barrier()
    error_words = tl.arange(0, ERROR_WORDS)
    tl.store(recv_info + RANKS + 1 + LOCAL_EXPERTS + error_words,
             tl.load(words + ERRORS // 8 + error_words, volatile=True))


@triton.jit
def _received_row(recv_info, row, RANKS: tl.constexpr, RANKS_POW2: tl.constexpr, ROW_STRIDE: tl.constexpr,
                  BLOCK_BYTES: tl.constexpr, RECV: tl.constexpr):
    """Received row ``row`` (below the total): its source is the last rank whose first row is at
    most ``row`` (a source that sent nothing has the same first row as the next one); returns
    the row's byte offset in the pool."""
    sources = tl.arange(0, RANKS_POW2)
    firsts = tl.load(recv_info + sources, mask=sources < RANKS, other=1 << 62)
    source = tl.sum((firsts <= row).to(tl.int32)) - 1
    first = tl.sum(tl.where(sources == source, firsts, 0))
    return RECV + source.to(tl.int64) * BLOCK_BYTES + (row - first) * ROW_STRIDE


@triton.jit
def normal_dispatch_receive(pool, recv_info, recv_x_words, recv_scale_words, recv_topk_idx, recv_topk_weights,
                            K: tl.constexpr, K_POW2: tl.constexpr, RANKS: tl.constexpr, RANKS_POW2: tl.constexpr,
                            X_WORDS: tl.constexpr, SCALE_WORDS: tl.constexpr, ROW_STRIDE: tl.constexpr,
                            BLOCK_BYTES: tl.constexpr, RECV: tl.constexpr, HAS_TOPK: tl.constexpr,
                            BLOCK_WORDS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    ks = tl.arange(0, K_POW2)
    k_mask = ks < K
    if row < tl.load(recv_info + RANKS):
        offset = _received_row(recv_info, row, RANKS, RANKS_POW2, ROW_STRIDE, BLOCK_BYTES, RECV)
        words = pool.to(tl.pointer_type(tl.int32)) + offset // 4
        _copy_words(recv_x_words + row * X_WORDS, words, X_WORDS, BLOCK_WORDS)
        if HAS_TOPK:
            ids = (pool + offset + X_WORDS * 4).to(tl.pointer_type(tl.int64))
            tl.store(recv_topk_idx + row * K + ks, tl.load(ids + ks, mask=k_mask), mask=k_mask)
            weights = (pool + offset + X_WORDS * 4 + K * 8).to(tl.pointer_type(tl.float32))
            tl.store(recv_topk_weights + row * K + ks, tl.load(weights + ks, mask=k_mask), mask=k_mask)
        if SCALE_WORDS > 0:
            _copy_words(recv_scale_words + row * SCALE_WORDS, words + X_WORDS + K * 3, SCALE_WORDS, BLOCK_WORDS)
    else:
        if HAS_TOPK:  # a padding row of num_worst_tokens: no expert
            tl.store(recv_topk_idx + row * K + ks, tl.full([K_POW2], -1, tl.int64), mask=k_mask)
            tl.store(recv_topk_weights + row * K + ks, tl.zeros([K_POW2], tl.float32), mask=k_mask)


@triton.jit
def normal_combine_pack(pool, recv_info, x_words, topk_weights, K: tl.constexpr, K_POW2: tl.constexpr,
                        RANKS: tl.constexpr, RANKS_POW2: tl.constexpr, HIDDEN_WORDS: tl.constexpr,
                        ROW_STRIDE: tl.constexpr, BLOCK_BYTES: tl.constexpr, RECV: tl.constexpr,
                        HAS_WEIGHTS: tl.constexpr, BLOCK_WORDS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    if row < tl.load(recv_info + RANKS):
        offset = _received_row(recv_info, row, RANKS, RANKS_POW2, ROW_STRIDE, BLOCK_BYTES, RECV)
        _copy_words(pool.to(tl.pointer_type(tl.int32)) + offset // 4, x_words + row * HIDDEN_WORDS, HIDDEN_WORDS,
                    BLOCK_WORDS)
        if HAS_WEIGHTS:
            ks = tl.arange(0, K_POW2)
            k_mask = ks < K
            weights = (pool + offset + HIDDEN_WORDS * 4).to(tl.pointer_type(tl.float32))
            tl.store(weights + ks, tl.load(topk_weights + row * K + ks, mask=k_mask), mask=k_mask)


@triton.jit
def normal_combine_send(endpoints, regions, pool, pool_key, recv_info, RANK: tl.constexpr, RANKS: tl.constexpr,
                        CAPACITY: tl.constexpr, ROW_STRIDE: tl.constexpr, BLOCK_BYTES: tl.constexpr,
                        PARTS: tl.constexpr, COMBINE_FLAGS: tl.constexpr, RECV: tl.constexpr, SEND: tl.constexpr):
    peer, part = _peer_and_part(RANK, PARTS)  # the peer is the tokens' home rank
    ep = aboleth.endpoint(endpoints, peer)
    peer_pool = aboleth.remote(regions, peer)
    peer_words = aboleth.remote(regions, peer, tl.int64)
    # The rows the peer sent in the dispatch of this combine's handle (its received layout:
    # first rows per source, then the total), not the pool's latest counts row, which a later
    # dispatch (two batches in flight) may have rewritten.
    count = tl.load(recv_info + peer + 1) - tl.load(recv_info + peer)
    count = tl.minimum(tl.maximum(count, 0), CAPACITY)
    _send_rows(ep, peer_pool, pool, pool_key, count, part, RECV + peer.to(tl.int64) * BLOCK_BYTES,
               SEND + RANK * BLOCK_BYTES, ROW_STRIDE, PARTS)
    aboleth.signal(ep, peer_words.at(COMBINE_FLAGS // 8 + RANK), 1, op="add")
    aboleth.drain(ep)  # the recv block is rewritten by the peer's next dispatch


@triton.jit
def normal_combine_wait(endpoints, pool, RANK: tl.constexpr, RANKS: tl.constexpr, ERRORS: tl.constexpr,
                        EPOCHS: tl.constexpr, COMBINE_FLAGS: tl.constexpr, PARTS: tl.constexpr):
    words = pool.to(tl.pointer_type(tl.int64))
    epoch = tl.load(words + EPOCHS // 8 + 1)
    _wait_for_every_peer(endpoints, words, COMBINE_FLAGS // 8, epoch * PARTS, 0, ERRORS // 8, epoch, RANK, RANKS, 1,
                         0, False)


@triton.jit
def normal_combine_reduce(pool, in_rank, positions, out, out_weights, bias_0, bias_1, K: tl.constexpr,
                          K_POW2: tl.constexpr, RANK: tl.constexpr, RANKS: tl.constexpr, HIDDEN: tl.constexpr,
                          ROW_STRIDE: tl.constexpr, BLOCK_BYTES: tl.constexpr, RECV: tl.constexpr,
                          SEND: tl.constexpr, HAS_WEIGHTS: tl.constexpr, BIASES: tl.constexpr,
                          BLOCK_HIDDEN: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    columns = tl.program_id(1) * BLOCK_HIDDEN + tl.arange(0, BLOCK_HIDDEN)
    column_mask = columns < HIDDEN
    ks = tl.arange(0, K_POW2)
    k_mask = ks < K
    total = tl.zeros([BLOCK_HIDDEN], dtype=tl.float32)
    weight_total = tl.zeros([K_POW2], dtype=tl.float32)
    # In rank order, a rank the token did not go to adding an exact +0.0: the same sum as
    # adding only the ranks it went to (the total is never -0.0).
    for rank in tl.static_range(RANKS):
        present = tl.load(in_rank + token * RANKS + rank) != 0
        position = tl.load(positions + token * RANKS + rank)
        row = _block_of(tl.full([], rank, tl.int64), RANK, RECV, SEND, BLOCK_BYTES) + position * ROW_STRIDE
        values = (pool + row).to(tl.pointer_type(tl.bfloat16))
        total += tl.load(values + columns, mask=column_mask & present, other=0.0).to(tl.float32)
        if HAS_WEIGHTS:
            weights = (pool + row + HIDDEN * 2).to(tl.pointer_type(tl.float32))
            weight_total += tl.load(weights + ks, mask=k_mask & present, other=0.0)
    # The biases (BF16 [tokens, hidden]) after the ranks, the first then the second, still in
    # FP32: one rounding to BF16 in all.
    if BIASES > 0:
        total += tl.load(bias_0 + token * HIDDEN + columns, mask=column_mask, other=0.0).to(tl.float32)
    if BIASES > 1:
        total += tl.load(bias_1 + token * HIDDEN + columns, mask=column_mask, other=0.0).to(tl.float32)
    tl.store(out + token * HIDDEN + columns, total.to(tl.bfloat16), mask=column_mask)
    if HAS_WEIGHTS:
        if tl.program_id(1) == 0:
            tl.store(out_weights + token * K + ks, weight_total, mask=k_mask)
