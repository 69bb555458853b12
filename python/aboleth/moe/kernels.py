"""The low-latency mode's kernels: Triton, with ``aboleth.language`` for the communication.

Five kernels, four per layer (one of the two packs): ``aboleth/moe/buffer.py`` launches them,
``aboleth/moe/layout.py`` says where each part of the pool is.

- :func:`pack_tokens` (plain Triton): each (token, k) copies the token's row to where its k-th
  expert's tokens are packed: this rank's ``dispatch_send`` block of that expert, or, for an
  expert of this rank, straight into ``dispatch_tokens`` (no communication for local experts);
  :func:`pack_tokens_fp8` (one program per token) quantizes the row to e4m3 with a scale per
  128 channels once, and writes it and its scales to the same places;
- :func:`dispatch_send` (one program per peer): per local expert of the peer, one put of that
  expert's packed rows (their number loaded from memory: no command for a token that does not
  go to the peer), one put of the row of counts, one signal carrying the epoch and the
  configuration's fingerprint. The compiler sees a constant loop of puts and a signal on one
  endpoint: one batch, one doorbell per peer on the queue transports;
- :func:`dispatch_receive` (a few programs looping over (local expert, source rank, chunk of
  rows)): waits
  for every peer's signal (bounded), checks the fingerprint, and copies its rows into the
  output compacted per expert, sources in rank order (deterministic), and for FP8 the scales
  into DeepEP's column-major scale tensor (float32, or UE8M0 bytes packed four to a word);
- :func:`combine_send` (one program per peer): per local expert, one put of the rows of that
  peer's tokens back to the peer's ``combine_tokens`` block of the expert, then one signal;
- :func:`combine_reduce` (a few programs looping over (token, chunk of hidden)): waits for every
  peer's
  combine signal, then sums ``weight * output`` over the token's top-k in k order in FP32, the
  weight rounded to BF16 first so that each product is exact and the sum is the same with or
  without fused multiply-adds (bit-exact against ``aboleth.moe.reference``).

The kernels take the pool (a ``uint8`` tensor), the layout offsets as constexprs, and for the
communicating ones the endpoint table, the pool's region table and its key.
"""

import triton
import triton.language as tl

import aboleth.language as aboleth


@triton.jit
def pack_tokens(x, topk_idx, positions, pool, K: tl.constexpr, RANK: tl.constexpr, RANKS: tl.constexpr,
                LOCAL_EXPERTS: tl.constexpr, MAX_TOKENS: tl.constexpr, HIDDEN: tl.constexpr,
                DISPATCH_TOKENS: tl.constexpr, DISPATCH_SEND: tl.constexpr, BLOCK_HIDDEN: tl.constexpr):
    entry = tl.program_id(0)
    token = entry // K
    expert = tl.load(topk_idx + entry)
    if expert >= 0:
        position = tl.load(positions + entry).to(tl.int64)
        owner = expert // LOCAL_EXPERTS
        local = expert % LOCAL_EXPERTS
        rows = pool.to(tl.pointer_type(tl.bfloat16))
        if owner == RANK:
            row = DISPATCH_TOKENS // 2 + ((local * RANKS + RANK) * MAX_TOKENS + position) * HIDDEN
        else:
            row = DISPATCH_SEND // 2 + (expert * MAX_TOKENS + position) * HIDDEN
        source = x + token.to(tl.int64) * HIDDEN
        for start in range(0, HIDDEN, BLOCK_HIDDEN):
            columns = start + tl.arange(0, BLOCK_HIDDEN)
            mask = columns < HIDDEN
            tl.store(rows + row + columns, tl.load(source + columns, mask=mask), mask=mask)


@triton.jit
def _power_of_two_at_least(value):
    """The smallest power of two >= ``value`` (a positive normal float32), exactly: the
    exponent, one up when any mantissa bit is set."""
    bits = value.to(tl.int32, bitcast=True)
    exponent = (bits >> 23) + ((bits & 0x7FFFFF) != 0).to(tl.int32)
    return (exponent << 23).to(tl.float32, bitcast=True)


@triton.jit
def pack_tokens_fp8(x, topk_idx, positions, pool, K: tl.constexpr, RANK: tl.constexpr, RANKS: tl.constexpr,
                    LOCAL_EXPERTS: tl.constexpr, MAX_TOKENS: tl.constexpr, HIDDEN: tl.constexpr,
                    ROW_BYTES: tl.constexpr, DISPATCH_TOKENS: tl.constexpr, DISPATCH_SEND: tl.constexpr,
                    ROUND_SCALE: tl.constexpr, BLOCK_GROUPS: tl.constexpr):
    """Program ``token``: quantizes the token's BF16 row to e4m3 once, per group of 128 channels
    ``scale = max(amax, 1e-4) / 448`` (with ``ROUND_SCALE`` the power of two at or above it)
    and ``q = x / scale``, both correctly rounded (``div_rn``, as torch divides a tensor by a
    tensor: the reference is bit-exact), then writes the row (``q``, then the float32 scales)
    to where each of its top-k experts' tokens are packed, as ``pack_tokens`` does for BF16."""
    token = tl.program_id(0).to(tl.int64)
    groups_per_row: tl.constexpr = HIDDEN // 128
    channels = tl.arange(0, 128)
    for first in range(0, groups_per_row, BLOCK_GROUPS):
        groups = first + tl.arange(0, BLOCK_GROUPS)
        group_mask = groups < groups_per_row
        columns = groups[:, None] * 128 + channels[None, :]
        mask = group_mask[:, None] & (channels < 128)[None, :]
        values = tl.load(x + token * HIDDEN + columns, mask=mask, other=0.0).to(tl.float32)
        amax = tl.maximum(tl.max(tl.abs(values), axis=1), 1e-4)
        scale = tl.math.div_rn(amax, tl.full(amax.shape, 448.0, tl.float32))
        if ROUND_SCALE:
            scale = _power_of_two_at_least(scale)
        quantized = tl.math.div_rn(values, tl.broadcast_to(scale[:, None], values.shape)).to(tl.float8e4nv)
        for k in tl.static_range(K):
            expert = tl.load(topk_idx + token * K + k)
            if expert >= 0:
                position = tl.load(positions + token * K + k).to(tl.int64)
                owner = expert // LOCAL_EXPERTS
                local = expert % LOCAL_EXPERTS
                own = DISPATCH_TOKENS + ((local * RANKS + RANK) * MAX_TOKENS + position) * ROW_BYTES
                sent = DISPATCH_SEND + (expert * MAX_TOKENS + position) * ROW_BYTES
                row = tl.where(owner == RANK, own, sent)
                tl.store((pool + row).to(tl.pointer_type(tl.float8e4nv)) + columns, quantized, mask=mask)
                tl.store((pool + row + HIDDEN).to(tl.pointer_type(tl.float32)) + groups, scale, mask=group_mask)


@triton.jit
def _peer_and_part(RANK: tl.constexpr, PARTS: tl.constexpr):
    """Program ``pid`` serves peer ``pid // PARTS`` (skipping this rank) and part ``pid % PARTS``
    of its experts. With one part the peer is ``pid + (pid >= RANK)``: strictly increasing in
    the program id, so the compiler gives each program its queue (no reservation atomics)."""
    pid = tl.program_id(0)
    if PARTS == 1:
        index = pid
        part = pid * 0
    else:
        index = pid // PARTS
        part = pid % PARTS
    return index + (index >= RANK).to(tl.int32), part


@triton.jit
def dispatch_send(endpoints, regions, pool, pool_key, RANK: tl.constexpr, RANKS: tl.constexpr,
                  LOCAL_EXPERTS: tl.constexpr, MAX_TOKENS: tl.constexpr, TOKEN_BYTES: tl.constexpr,
                  PARTS: tl.constexpr, DISPATCH_FLAGS: tl.constexpr, DISPATCH_COUNTS: tl.constexpr,
                  SEND_COUNTS: tl.constexpr, DISPATCH_TOKENS: tl.constexpr, DISPATCH_SEND: tl.constexpr):
    peer, part = _peer_and_part(RANK, PARTS)
    ep = aboleth.endpoint(endpoints, peer)
    peer_pool = aboleth.remote(regions, peer)
    peer_words = aboleth.remote(regions, peer, tl.int64)
    words = pool.to(tl.pointer_type(tl.int64))
    block_bytes = MAX_TOKENS * TOKEN_BYTES
    row_words = LOCAL_EXPERTS + 1  # the counts, then the configuration's fingerprint
    for local in range(part, LOCAL_EXPERTS, PARTS):
        expert = peer * LOCAL_EXPERTS + local
        count = tl.load(words + SEND_COUNTS // 8 + peer * row_words + local)
        destination = DISPATCH_TOKENS + (local * RANKS + RANK).to(tl.int64) * block_bytes
        source = pool + DISPATCH_SEND + expert.to(tl.int64) * block_bytes
        aboleth.put(ep, peer_pool.at(destination), source, count * TOKEN_BYTES, source_key=pool_key)
    counts_source = pool + SEND_COUNTS + peer.to(tl.int64) * (row_words * 8)
    aboleth.put(ep, peer_pool.at(DISPATCH_COUNTS + RANK * (row_words * 8)), counts_source, row_words * 8,
                source_key=pool_key, predicate=part == 0)
    # One add per part: the receiver waits for epoch * PARTS.
    aboleth.signal(ep, peer_words.at(DISPATCH_FLAGS // 8 + RANK), 1, op="add")
    aboleth.drain(ep)  # the send block is rewritten by the next dispatch


@triton.jit
def _wait_for_every_peer(endpoints, words, flags_word, target, counts_word, errors_word, epoch,
                         RANK: tl.constexpr, RANKS: tl.constexpr, ROW_WORDS: tl.constexpr,
                         FINGERPRINT: tl.constexpr, CHECK: tl.constexpr, LOG_ENDPOINT: tl.constexpr = True):
    """Bounded waits for every peer's flag to reach ``target``; with ``CHECK``, a peer whose
    counts row ends in another fingerprint is recorded in the error words (rank + 1, what it
    sent, the epoch). ``LOG_ENDPOINT``: take an endpoint first, for the waits' bound and failure
    log (a kernel that already took one passes False: another endpoint op naming a peer's queue
    would make the compiler treat that queue as shared)."""
    if LOG_ENDPOINT:
        aboleth.endpoint(endpoints, (RANK + 1) % RANKS)
    for source in range(RANKS):
        if source != RANK:
            aboleth.wait_signal(words + flags_word + source, target)
            if CHECK:
                sent = tl.load(words + counts_word + source * ROW_WORDS + ROW_WORDS - 1, volatile=True)
                if sent != FINGERPRINT:
                    nothing = epoch * 0  # an i64 zero: atomic_cas takes the word's type
                    if tl.atomic_cas(words + errors_word, nothing, nothing + source + 1) == 0:
                        tl.store(words + errors_word + 1, sent)
                        tl.store(words + errors_word + 2, epoch)


@triton.jit
def dispatch_receive(endpoints, pool, packed_x, packed_scales, packed_count, layout_range, RANK: tl.constexpr,
                     RANKS: tl.constexpr, RANKS_POW2: tl.constexpr, LOCAL_EXPERTS: tl.constexpr,
                     MAX_TOKENS: tl.constexpr, X_WORDS: tl.constexpr, SCALE_GROUPS: tl.constexpr,
                     GROUPS_POW2: tl.constexpr, UE8M0: tl.constexpr, FINGERPRINT: tl.constexpr,
                     ERRORS: tl.constexpr, EPOCHS: tl.constexpr, DISPATCH_FLAGS: tl.constexpr,
                     DISPATCH_COUNTS: tl.constexpr, DISPATCH_TOKENS: tl.constexpr, BLOCK_TOKENS: tl.constexpr,
                     BLOCK_WORDS: tl.constexpr, PARTS: tl.constexpr):
    """Rows move as int32 words: ``X_WORDS`` of hidden state (BF16 or e4m3) into ``packed_x``
    (an int32 view of ``recv_x``), then, for FP8, the row's ``SCALE_GROUPS`` float32 scales into
    ``packed_scales`` (int32 view) in DeepEP's layout, ``[local_experts, groups, ranks *
    max_tokens]`` in memory (``recv_x_scales`` is its transpose): as they are, or with
    ``UE8M0`` each scale's exponent byte, four groups to a word (group ``4 w + i`` in byte ``i``
    of word ``w``; the scales are powers of two)."""
    words = pool.to(tl.pointer_type(tl.int64))
    epoch = tl.load(words + EPOCHS // 8)
    row_words: tl.constexpr = LOCAL_EXPERTS + 1
    _wait_for_every_peer(endpoints, words, DISPATCH_FLAGS // 8, epoch * PARTS, DISPATCH_COUNTS // 8, ERRORS // 8,
                         epoch, RANK, RANKS, row_words, FINGERPRINT, True)
    # A few programs loop over the (local expert, source, chunk of rows) items: every program
    # spins in its waits, and spinning programs must leave SMs to the peers' kernels when ranks
    # share a GPU.
    chunks: tl.constexpr = (MAX_TOKENS + BLOCK_TOKENS - 1) // BLOCK_TOKENS
    token_words: tl.constexpr = X_WORDS + SCALE_GROUPS  # a received row
    slots: tl.constexpr = RANKS * MAX_TOKENS  # an expert's rows in the output
    received = pool.to(tl.pointer_type(tl.int32)) + DISPATCH_TOKENS // 4
    sources = tl.arange(0, RANKS_POW2)
    for item in range(tl.program_id(0), LOCAL_EXPERTS * RANKS * chunks, tl.num_programs(0)):
        local = item // (RANKS * chunks)
        source = (item // chunks) % RANKS
        chunk = item % chunks
        counts = tl.load(words + DISPATCH_COUNTS // 8 + sources * row_words + local, mask=sources < RANKS, other=0)
        # A count past the rows a source owns would write past them: clamp (a peer with another
        # configuration is reported through the fingerprint).
        counts = tl.minimum(tl.maximum(counts, 0), MAX_TOKENS)
        offset = tl.sum(tl.where(sources < source, counts, 0))
        count = tl.sum(tl.where(sources == source, counts, 0))
        if chunk == 0:
            tl.store(layout_range + local * RANKS + source, offset * (1 << 32) + count)
            if source == 0:
                tl.store(packed_count + local, tl.sum(counts).to(tl.int32))
        rows = chunk * BLOCK_TOKENS + tl.arange(0, BLOCK_TOKENS)
        row_mask = rows < count
        received_rows = ((local * RANKS + source) * MAX_TOKENS + rows).to(tl.int64) * token_words
        packed = (local * slots + offset + rows).to(tl.int64)
        for start in range(0, X_WORDS, BLOCK_WORDS):
            columns = start + tl.arange(0, BLOCK_WORDS)
            mask = row_mask[:, None] & (columns < X_WORDS)[None, :]
            values = tl.load(received + received_rows[:, None] + columns[None, :], mask=mask)
            tl.store(packed_x + packed[:, None] * X_WORDS + columns[None, :], values, mask=mask)
        if SCALE_GROUPS > 0:
            groups = tl.arange(0, GROUPS_POW2)
            mask = row_mask[:, None] & (groups < SCALE_GROUPS)[None, :]
            scales = tl.load(received + received_rows[:, None] + X_WORDS + groups[None, :], mask=mask, other=0)
            # The row's slot within its expert, in each group's (or word's) column.
            slot = (offset + rows).to(tl.int64)
            if UE8M0:
                exponents = (scales >> 23) & 0xFF
                shifts = (groups % 4) * 8
                packed_words = tl.sum(tl.reshape(exponents << shifts[None, :], [BLOCK_TOKENS, GROUPS_POW2 // 4, 4]),
                                      axis=2)
                word_index = tl.arange(0, GROUPS_POW2 // 4)
                word_mask = row_mask[:, None] & (word_index < SCALE_GROUPS // 4)[None, :]
                destination = local.to(tl.int64) * (SCALE_GROUPS // 4) * slots + word_index[None, :] * slots
                tl.store(packed_scales + destination + slot[:, None], packed_words, mask=word_mask)
            else:
                destination = local.to(tl.int64) * SCALE_GROUPS * slots + groups[None, :] * slots
                tl.store(packed_scales + destination + slot[:, None], scales, mask=mask)


@triton.jit
def combine_send(endpoints, regions, pool, pool_key, layout_range, RANK: tl.constexpr, RANKS: tl.constexpr,
                 LOCAL_EXPERTS: tl.constexpr, MAX_TOKENS: tl.constexpr, TOKEN_BYTES: tl.constexpr,
                 PARTS: tl.constexpr, COMBINE_FLAGS: tl.constexpr, COMBINE_TOKENS: tl.constexpr,
                 COMBINE_SEND: tl.constexpr):
    peer, part = _peer_and_part(RANK, PARTS)  # the peer is the tokens' home rank
    ep = aboleth.endpoint(endpoints, peer)
    peer_pool = aboleth.remote(regions, peer)
    peer_words = aboleth.remote(regions, peer, tl.int64)
    block_bytes = MAX_TOKENS * TOKEN_BYTES
    for local in range(part, LOCAL_EXPERTS, PARTS):
        packed = tl.load(layout_range + local * RANKS + peer)
        offset = packed // (1 << 32)
        count = packed % (1 << 32)
        destination = COMBINE_TOKENS + (RANK * LOCAL_EXPERTS + local).to(tl.int64) * block_bytes
        source = pool + COMBINE_SEND + ((local * RANKS).to(tl.int64) * MAX_TOKENS + offset) * TOKEN_BYTES
        aboleth.put(ep, peer_pool.at(destination), source, count * TOKEN_BYTES, source_key=pool_key)
    aboleth.signal(ep, peer_words.at(COMBINE_FLAGS // 8 + RANK), 1, op="add")
    aboleth.drain(ep)  # the combine buffer is rewritten by the next layer


@triton.jit
def combine_reduce(endpoints, pool, topk_idx, topk_weights, positions, layout_range, out, tokens,
                   K: tl.constexpr, RANK: tl.constexpr, RANKS: tl.constexpr, LOCAL_EXPERTS: tl.constexpr,
                   MAX_TOKENS: tl.constexpr, HIDDEN: tl.constexpr, FINGERPRINT: tl.constexpr,
                   ERRORS: tl.constexpr, EPOCHS: tl.constexpr, COMBINE_FLAGS: tl.constexpr,
                   COMBINE_TOKENS: tl.constexpr, COMBINE_SEND: tl.constexpr, BLOCK_HIDDEN: tl.constexpr,
                   PARTS: tl.constexpr):
    words = pool.to(tl.pointer_type(tl.int64))
    epoch = tl.load(words + EPOCHS // 8 + 1)
    _wait_for_every_peer(endpoints, words, COMBINE_FLAGS // 8, epoch * PARTS, 0, ERRORS // 8, epoch, RANK, RANKS,
                         1, FINGERPRINT, False)
    rows = pool.to(tl.pointer_type(tl.bfloat16))
    chunks: tl.constexpr = (HIDDEN + BLOCK_HIDDEN - 1) // BLOCK_HIDDEN
    # A few programs loop over (token, chunk of hidden): see dispatch_receive.
    for item in range(tl.program_id(0), tokens * chunks, tl.num_programs(0)):
        token = item // chunks
        columns = (item % chunks) * BLOCK_HIDDEN + tl.arange(0, BLOCK_HIDDEN)
        column_mask = columns < HIDDEN
        total = tl.zeros([BLOCK_HIDDEN], dtype=tl.float32)
        for k in tl.static_range(K):
            entry = token.to(tl.int64) * K + k
            expert = tl.load(topk_idx + entry)
            valid = expert >= 0
            safe_expert = tl.maximum(expert, 0)
            position = tl.load(positions + entry).to(tl.int64)
            local = safe_expert % LOCAL_EXPERTS
            owner = safe_expert // LOCAL_EXPERTS
            # This rank's own experts: their outputs never left combine_send.
            own_offset = tl.load(layout_range + local * RANKS + RANK) // (1 << 32)
            own_row = COMBINE_SEND // 2 + ((local * RANKS).to(tl.int64) * MAX_TOKENS + own_offset + position) * HIDDEN
            sent_row = COMBINE_TOKENS // 2 + (safe_expert.to(tl.int64) * MAX_TOKENS + position) * HIDDEN
            row = tl.where(owner == RANK, own_row, sent_row)
            value = tl.load(rows + row + columns, mask=column_mask & valid, other=0.0).to(tl.float32)
            weight = tl.load(topk_weights + entry).to(tl.bfloat16).to(tl.float32)
            total += tl.where(valid, weight * value, 0.0)
        tl.store(out + token.to(tl.int64) * HIDDEN + columns, total.to(tl.bfloat16), mask=column_mask)
