"""The normal (throughput) mode's kernels: Triton, with ``aboleth.language`` for the communication.

``aboleth/moe/normal.py`` launches them; ``NormalLayout`` in ``aboleth/moe/layout.py`` says
where each part of the pool is. Two ways to send: on p2p a put is the sending program's own
loads and stores, which may read any memory of its GPU, so rows go straight from the caller's
tensors into the peer's pool (the *direct* kernels); the queue transports (proxy, RDMA) need
registered sources, so rows are first packed into this rank's ``send`` blocks (the *staged*
kernels). Either way a rank's rows for itself are never copied into the pool: the receive and
the reduce read them from the caller's tensors. Dispatch:

- :func:`normal_prepare` (plain Triton, one program per rank): each token's place among a
  destination's tokens and its inverse (``send_tokens``: the destination's tokens in place
  order, compacted), the counts rows, the epoch;
- p2p: :func:`normal_dispatch_direct` (``parts`` programs per peer): the program's share of
  the peer's tokens, each row's puts (hidden state, top-k ids and weights, FP8 scales) from
  the caller's tensors into the peer's ``recv`` block, the counts row (one program), one
  counter add;
- staged: :func:`normal_pack` (plain, one program per token) copies the token's row to this
  rank's ``send`` block of each peer it goes to, at its place; then
  :func:`normal_dispatch_send` (``parts`` programs per peer): one put of the program's share of
  the peer's rows (their number loaded from memory), the counts row, one counter add. The
  compiler sees one put, a predicated put and an add on one endpoint: one batch, one doorbell
  per program on the queue transports;
- :func:`normal_dispatch_wait` (one program): bounded waits for every peer's counter, the
  fingerprint check, then the received layout (``recv_info``: each source's first row, the
  total, the per-expert counts rounded up to the expert alignment), the ``num_worst_tokens``
  overflow check. One program, so that spinning leaves the GPU to the peers;
- :func:`normal_dispatch_receive` (plain, one program per received row): copies row ``i`` out
  of the block of its source (sources in rank order, each source's rows in its token order),
  or this rank's own from the caller's tensors, making the top-k ids local (-1 and weight 0
  for another rank's expert), or marks a padding row (``num_worst_tokens``).

The tokens are compacted before anything is sent (``send_tokens``, or the staged blocks): no
put for a token that does not go to the peer.

Combine:

- p2p: :func:`normal_combine_direct` (``parts`` programs per peer): the program's share of the
  rows that came from the peer, each expert output and its weights put from the caller's
  tensors into the peer's ``send`` block of this rank, one counter add;
- staged: :func:`normal_combine_pack` (plain, one program per received row) copies the expert
  output and the weights of a peer's row into the ``recv`` block place it came from; then
  :func:`normal_combine_send` (``parts`` programs per peer): one put of the program's share of
  those rows back into the peer's ``send`` block of this rank, one add;
- :func:`normal_combine_wait` (one program): advances the combine epoch, then bounded waits
  for every peer's counter;
- :func:`normal_combine_reduce` (plain, one program per (token, chunk of hidden)): the sum over
  the ranks the token went to, in rank order, in FP32, then the combine's biases (none, one or
  two), rounded to BF16 once (deterministic); the weights summed the same way.

Rows are copied as int32 words (a row's hidden state and its stride are whole 16-byte vectors,
its other parts whole words: see ``NormalLayout``). The plain kernels and the sending kernels
never wait; only the two one-program wait kernels spin.
"""

import triton
import triton.language as tl

import aboleth.language as aboleth

from aboleth.moe.kernels import _peer_and_part, _wait_for_every_peer


@triton.jit
def _copy_words(destination, source, WORDS: tl.constexpr, BLOCK_WORDS: tl.constexpr):
    for start in range(0, WORDS, BLOCK_WORDS):
        columns = start + tl.arange(0, BLOCK_WORDS)
        mask = columns < WORDS
        tl.store(destination + columns, tl.load(source + columns, mask=mask), mask=mask)


@triton.jit
def normal_prepare(in_rank, positions, send_tokens, num_tokens_per_expert, pool, recv_info, tokens,
                   RANK: tl.constexpr,
                   RANKS: tl.constexpr, LOCAL_EXPERTS: tl.constexpr, LOCAL_POW2: tl.constexpr,
                   ROW_WORDS: tl.constexpr, FINGERPRINT: tl.constexpr, EPOCHS: tl.constexpr,
                   SEND_COUNTS: tl.constexpr, DISPATCH_COUNTS: tl.constexpr, INFO_WORDS: tl.constexpr,
                   INFO_POW2: tl.constexpr, BLOCK_TOKENS: tl.constexpr):
    """Program ``r``: each token's place among rank ``r``'s tokens (an exclusive scan of
    ``is_token_in_rank[:, r]``) and its inverse (``send_tokens[r, place]``: the token), the
    counts row for ``r`` (its tokens, its experts' counts from ``num_tokens_per_expert``, the
    fingerprint); this rank's program also copies its own row to
    ``dispatch_counts``, advances the dispatch epoch and zeroes ``recv_info`` (a wait that gives
    up leaves it so: the receive then copies nothing). One launch for what took eleven torch ops."""
    rank = tl.program_id(0)
    carry = tl.full([], 0, tl.int64)
    for start in range(0, tokens, BLOCK_TOKENS):
        rows = (start + tl.arange(0, BLOCK_TOKENS)).to(tl.int64)
        mask = rows < tokens
        present = (tl.load(in_rank + rows * RANKS + rank, mask=mask, other=0) != 0).to(tl.int64)
        place = carry + tl.cumsum(present, 0) - present
        tl.store(positions + rows * RANKS + rank, place, mask=mask)
        tl.store(send_tokens + rank.to(tl.int64) * tokens + place, rows, mask=mask & (present != 0))
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
                RANK: tl.constexpr, RANKS: tl.constexpr, X_WORDS: tl.constexpr, SCALE_WORDS: tl.constexpr,
                ROW_STRIDE: tl.constexpr, BLOCK_BYTES: tl.constexpr, SEND: tl.constexpr, HAS_TOPK: tl.constexpr,
                BLOCK_WORDS: tl.constexpr):
    """Program ``token`` (the staged dispatch of the queue transports): the token's row (hidden
    state, top-k ids and weights as they are, FP8 scales) into this rank's ``send`` block of
    each peer that holds one of its experts, at its place among that peer's tokens. Rows for
    this rank are not copied: the receive reads them from ``x`` (``send_tokens``)."""
    token = tl.program_id(0).to(tl.int64)
    words = pool.to(tl.pointer_type(tl.int32))
    for rank in tl.static_range(RANKS):
        if rank != RANK:
            if tl.load(in_rank + token * RANKS + rank) != 0:
                position = tl.load(positions + token * RANKS + rank)
                row = SEND + rank * BLOCK_BYTES + position * ROW_STRIDE
                _copy_words(words + row // 4, x_words + token * X_WORDS, X_WORDS, BLOCK_WORDS)
                if HAS_TOPK:
                    # ids (int64) then weights (f32): 3 K words, copied as they are (the
                    # receiver makes the ids local).
                    _copy_words(words + row // 4 + X_WORDS, topk_idx.to(tl.pointer_type(tl.int32)) + token * 2 * K,
                                2 * K, BLOCK_WORDS)
                    _copy_words(words + row // 4 + X_WORDS + 2 * K,
                                topk_weights.to(tl.pointer_type(tl.int32)) + token * K, K, BLOCK_WORDS)
                if SCALE_WORDS > 0:
                    _copy_words(words + row // 4 + X_WORDS + K * 3, scale_words + token * SCALE_WORDS, SCALE_WORDS,
                                BLOCK_WORDS)


@triton.jit
def _put_row(ep, peer_pool, pool_key, destination, x_words, scale_words, topk_idx, topk_weights, token,
             K: tl.constexpr, X_WORDS: tl.constexpr, SCALE_WORDS: tl.constexpr, HAS_TOPK: tl.constexpr):
    """The puts of one dispatch row, straight from the caller's tensors: the hidden state, the
    top-k ids and weights as they are, the FP8 scales."""
    aboleth.put(ep, peer_pool.at(destination), x_words + token * X_WORDS, X_WORDS * 4, source_key=pool_key)
    if HAS_TOPK:
        aboleth.put(ep, peer_pool.at(destination + X_WORDS * 4), topk_idx + token * K, K * 8, source_key=pool_key)
        aboleth.put(ep, peer_pool.at(destination + X_WORDS * 4 + K * 8), topk_weights + token * K, K * 4,
                    source_key=pool_key)
    if SCALE_WORDS > 0:
        aboleth.put(ep, peer_pool.at(destination + X_WORDS * 4 + K * 12), scale_words + token * SCALE_WORDS,
                    SCALE_WORDS * 4, source_key=pool_key)


@triton.jit
def _send_count(pool, peer, ROW_WORDS: tl.constexpr, CAPACITY: tl.constexpr, SEND_COUNTS: tl.constexpr):
    """The tokens this rank sends ``peer`` (its counts row's first word), clamped to a block."""
    words = pool.to(tl.pointer_type(tl.int64))
    return tl.minimum(tl.maximum(tl.load(words + SEND_COUNTS // 8 + peer * ROW_WORDS), 0), CAPACITY)


@triton.jit
def normal_dispatch_direct(endpoints, regions, x_words, scale_words, topk_idx, topk_weights, send_tokens, pool,
                           pool_key, tokens, RANK: tl.constexpr, RANKS: tl.constexpr, ROW_WORDS: tl.constexpr,
                           CAPACITY: tl.constexpr, K: tl.constexpr, X_WORDS: tl.constexpr,
                           SCALE_WORDS: tl.constexpr, ROW_STRIDE: tl.constexpr, BLOCK_BYTES: tl.constexpr,
                           PARTS: tl.constexpr, DISPATCH_FLAGS: tl.constexpr, DISPATCH_COUNTS: tl.constexpr,
                           SEND_COUNTS: tl.constexpr, RECV: tl.constexpr, HAS_TOPK: tl.constexpr):
    """The p2p dispatch (``parts`` programs per peer): the program's share of the peer's tokens
    (``send_tokens``, in place order), each row put straight from the caller's tensors into the
    peer's ``recv`` block of this rank, then the counts row (one program) and one counter add.
    Nothing is staged: on p2p a put is the program's own loads and stores, which may read any
    memory of this GPU; the queue transports need registered sources (``normal_pack``)."""
    peer, part = _peer_and_part(RANK, PARTS)
    ep = aboleth.endpoint(endpoints, peer)
    peer_pool = aboleth.remote(regions, peer)
    peer_words = aboleth.remote(regions, peer, tl.int64)
    count = _send_count(pool, peer, ROW_WORDS, CAPACITY, SEND_COUNTS)
    first = (count * part // PARTS).to(tl.int64)
    last = (count * (part + 1) // PARTS).to(tl.int64)
    block = RECV + RANK * BLOCK_BYTES
    for position in range(first, last):
        # int64 whatever stands in for send_tokens (with no tokens, the pool: never read here).
        token = tl.load(send_tokens + peer.to(tl.int64) * tokens + position).to(tl.int64)
        _put_row(ep, peer_pool, pool_key, block + position * ROW_STRIDE, x_words, scale_words, topk_idx,
                 topk_weights, token, K, X_WORDS, SCALE_WORDS, HAS_TOPK)
    counts_source = pool + SEND_COUNTS + peer.to(tl.int64) * (ROW_WORDS * 8)
    aboleth.put(ep, peer_pool.at(DISPATCH_COUNTS + RANK * (ROW_WORDS * 8)), counts_source, ROW_WORDS * 8,
                source_key=pool_key, predicate=part == 0)
    aboleth.signal(ep, peer_words.at(DISPATCH_FLAGS // 8 + RANK), 1, op="add")
    aboleth.drain(ep)  # the caller may rewrite x and the counts row once the dispatch returns


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
    count = _send_count(pool, peer, ROW_WORDS, CAPACITY, SEND_COUNTS)
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
def _received_source(recv_info, row, RANKS: tl.constexpr, RANKS_POW2: tl.constexpr):
    """Received row ``row`` (below the total): ``(source, place)``, its source the last rank whose
    first row is at most ``row`` (a source that sent nothing has the same first row as the next
    one), its place among that source's rows."""
    sources = tl.arange(0, RANKS_POW2)
    firsts = tl.load(recv_info + sources, mask=sources < RANKS, other=1 << 62)
    source = tl.sum((firsts <= row).to(tl.int32)) - 1
    first = tl.sum(tl.where(sources == source, firsts, 0))
    return source, row - first


@triton.jit
def normal_dispatch_receive(pool, recv_info, send_tokens, x_words, scale_words, topk_idx, topk_weights,
                            recv_x_words, recv_scale_words, recv_topk_idx, recv_topk_weights, tokens,
                            K: tl.constexpr, K_POW2: tl.constexpr, RANK: tl.constexpr, RANKS: tl.constexpr,
                            RANKS_POW2: tl.constexpr, LOCAL_EXPERTS: tl.constexpr, X_WORDS: tl.constexpr,
                            SCALE_WORDS: tl.constexpr, ROW_STRIDE: tl.constexpr, BLOCK_BYTES: tl.constexpr,
                            RECV: tl.constexpr, HAS_TOPK: tl.constexpr, BLOCK_WORDS: tl.constexpr):
    """Program ``row``: received row ``row`` from its source's ``recv`` block, or, for this rank's
    own tokens, from the caller's tensors (token ``send_tokens[rank, place]``); the top-k ids
    made this rank's local ids (-1 for another rank's expert, weight 0). Past the total, a
    padding row of ``num_worst_tokens``: ids -1, weights 0."""
    row = tl.program_id(0).to(tl.int64)
    ks = tl.arange(0, K_POW2)
    k_mask = ks < K
    if row < tl.load(recv_info + RANKS):
        source, place = _received_source(recv_info, row, RANKS, RANKS_POW2)
        own = source == RANK
        offset = RECV + source.to(tl.int64) * BLOCK_BYTES + place * ROW_STRIDE
        token = tl.load(send_tokens + RANK * tokens + place, mask=own, other=0).to(tl.int64)
        received = pool.to(tl.pointer_type(tl.int32)) + offset // 4
        _copy_words(recv_x_words + row * X_WORDS, tl.where(own, x_words + token * X_WORDS, received), X_WORDS,
                    BLOCK_WORDS)
        if HAS_TOPK:
            ids = tl.where(own, topk_idx + token * K, (pool + offset + X_WORDS * 4).to(tl.pointer_type(tl.int64)))
            weights = tl.where(own, topk_weights + token * K,
                               (pool + offset + X_WORDS * 4 + K * 8).to(tl.pointer_type(tl.float32)))
            expert = tl.load(ids + ks, mask=k_mask, other=-1)
            local = expert - RANK * LOCAL_EXPERTS
            mine = (expert >= 0) & (local >= 0) & (local < LOCAL_EXPERTS)
            tl.store(recv_topk_idx + row * K + ks, tl.where(mine, local, -1), mask=k_mask)
            weight = tl.load(weights + ks, mask=k_mask, other=0.0)
            tl.store(recv_topk_weights + row * K + ks, tl.where(mine, weight, 0.0), mask=k_mask)
        if SCALE_WORDS > 0:
            _copy_words(recv_scale_words + row * SCALE_WORDS,
                        tl.where(own, scale_words + token * SCALE_WORDS, received + X_WORDS + K * 3), SCALE_WORDS,
                        BLOCK_WORDS)
    else:
        if HAS_TOPK:  # a padding row of num_worst_tokens: no expert
            tl.store(recv_topk_idx + row * K + ks, tl.full([K_POW2], -1, tl.int64), mask=k_mask)
            tl.store(recv_topk_weights + row * K + ks, tl.zeros([K_POW2], tl.float32), mask=k_mask)


@triton.jit
def normal_combine_pack(pool, recv_info, x_words, topk_weights, K: tl.constexpr, K_POW2: tl.constexpr,
                        RANK: tl.constexpr, RANKS: tl.constexpr, RANKS_POW2: tl.constexpr,
                        HIDDEN_WORDS: tl.constexpr, ROW_STRIDE: tl.constexpr, BLOCK_BYTES: tl.constexpr,
                        RECV: tl.constexpr, HAS_WEIGHTS: tl.constexpr, BLOCK_WORDS: tl.constexpr):
    """Program ``row`` (the staged combine of the queue transports): the expert output and the
    weights of received row ``row`` into the ``recv`` block place the row came from; this
    rank's own rows stay where they are (the reduce reads them from ``x``)."""
    row = tl.program_id(0).to(tl.int64)
    if row < tl.load(recv_info + RANKS):
        source, place = _received_source(recv_info, row, RANKS, RANKS_POW2)
        if source != RANK:
            offset = RECV + source.to(tl.int64) * BLOCK_BYTES + place * ROW_STRIDE
            _copy_words(pool.to(tl.pointer_type(tl.int32)) + offset // 4, x_words + row * HIDDEN_WORDS,
                        HIDDEN_WORDS, BLOCK_WORDS)
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
def normal_combine_direct(endpoints, regions, x_words, topk_weights, recv_info, pool_key, K: tl.constexpr,
                          RANK: tl.constexpr, RANKS: tl.constexpr, HIDDEN_WORDS: tl.constexpr,
                          CAPACITY: tl.constexpr, ROW_STRIDE: tl.constexpr, BLOCK_BYTES: tl.constexpr,
                          PARTS: tl.constexpr, COMBINE_FLAGS: tl.constexpr, SEND: tl.constexpr,
                          HAS_WEIGHTS: tl.constexpr):
    """The p2p combine (``parts`` programs per peer): the program's share of the rows that came
    from the peer (the handle's received layout), each expert output and its weights put straight
    from the caller's tensors into the peer's ``send`` block of this rank, then one counter add."""
    peer, part = _peer_and_part(RANK, PARTS)  # the peer is the tokens' home rank
    ep = aboleth.endpoint(endpoints, peer)
    peer_pool = aboleth.remote(regions, peer)
    peer_words = aboleth.remote(regions, peer, tl.int64)
    first_row = tl.load(recv_info + peer)
    count = tl.minimum(tl.maximum(tl.load(recv_info + peer + 1) - first_row, 0), CAPACITY)
    first = count * part // PARTS
    last = count * (part + 1) // PARTS
    block = SEND + RANK * BLOCK_BYTES
    for place in range(first, last):
        row = first_row + place
        destination = block + place * ROW_STRIDE
        aboleth.put(ep, peer_pool.at(destination), x_words + row * HIDDEN_WORDS, HIDDEN_WORDS * 4,
                    source_key=pool_key)
        if HAS_WEIGHTS:
            aboleth.put(ep, peer_pool.at(destination + HIDDEN_WORDS * 4), topk_weights + row * K, K * 4,
                        source_key=pool_key)
    aboleth.signal(ep, peer_words.at(COMBINE_FLAGS // 8 + RANK), 1, op="add")
    aboleth.drain(ep)  # the caller may rewrite x once the combine returns


@triton.jit
def normal_combine_wait(endpoints, pool, RANK: tl.constexpr, RANKS: tl.constexpr, ERRORS: tl.constexpr,
                        EPOCHS: tl.constexpr, COMBINE_FLAGS: tl.constexpr, PARTS: tl.constexpr):
    """Advances the combine epoch (here rather than by a torch op before the send: one launch
    less on the host, which bounds a combine; nothing before this kernel reads it), then bounded
    waits for every peer's counter to reach ``epoch * PARTS``."""
    words = pool.to(tl.pointer_type(tl.int64))
    epoch = tl.load(words + EPOCHS // 8 + 1) + 1
    # Every thread has read the old epoch before one stores the new one: a thread reading after
    # the store would wait for the next epoch's adds.
    tl.debug_barrier()
    tl.store(words + EPOCHS // 8 + 1, epoch)
    _wait_for_every_peer(endpoints, words, COMBINE_FLAGS // 8, epoch * PARTS, 0, ERRORS // 8, epoch, RANK, RANKS, 1,
                         0, False)


@triton.jit
def normal_combine_reduce(pool, in_rank, positions, recv_info, x, topk_weights, out, out_weights, bias_0, bias_1,
                          K: tl.constexpr, K_POW2: tl.constexpr, RANK: tl.constexpr, RANKS: tl.constexpr,
                          HIDDEN: tl.constexpr, ROW_STRIDE: tl.constexpr, BLOCK_BYTES: tl.constexpr,
                          SEND: tl.constexpr, HAS_WEIGHTS: tl.constexpr, BIASES: tl.constexpr,
                          BLOCK_HIDDEN: tl.constexpr):
    """Program ``(token, chunk)``: the sum over the ranks of the token's rows, in rank order:
    a peer's from this rank's ``send`` block of the peer (where its combine put them), this
    rank's own from the combine's ``x`` and ``topk_weights`` (row ``recv_info[rank] + place``)."""
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
        if rank == RANK:
            row = tl.load(recv_info + RANK) + position
            values = x + row * HIDDEN
            weights = topk_weights + row * K
        else:
            offset = SEND + rank * BLOCK_BYTES + position * ROW_STRIDE
            values = (pool + offset).to(tl.pointer_type(tl.bfloat16))
            weights = (pool + offset + HIDDEN * 2).to(tl.pointer_type(tl.float32))
        total += tl.load(values + columns, mask=column_mask & present, other=0.0).to(tl.float32)
        if HAS_WEIGHTS:
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
