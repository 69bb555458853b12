"""Where everything of the MoE modes lives in a :class:`aboleth.moe.Buffer`'s pool: the
low-latency mode's :class:`LowLatencyLayout` (described here) and the normal mode's
:class:`NormalLayout` (its docstring); both put the error words, epochs and counters first, at
the same offsets (:func:`counters_span`).

One registered CUDA tensor per rank (the pool), exchanged as one region named ``pool``: every
rank computes the same byte offsets from the same configuration, so a kernel reaches a peer's
copy of any part as ``remote(pool, peer).at(offset + ...)``. Nothing here touches the GPU; the
kernels (``aboleth/moe/kernels.py``) take these offsets as constexprs.

The parts, for ``ranks`` ranks, ``experts`` experts (``local_experts = experts // ranks`` on
each rank), at most ``max_tokens`` tokens per rank, ``dispatch_row_bytes`` bytes per dispatched
token row (BF16: the hidden state; FP8: the e4m3 hidden state, then one float32 scale per 128
channels) and ``combine_row_bytes`` per combined row (BF16):

- ``errors``: 8 int64 words this rank's kernels record failures in (a peer's mismatched
  configuration); read by ``Buffer.check_errors()``;
- ``epochs``: 2 int64 words, the dispatch and combine epochs, incremented on the device by each
  call (graph replays advance them too): in the low-latency mode by torch before the call's
  kernels, in the normal mode by ``normal_prepare`` (dispatch) and ``normal_combine_wait``
  (combine);
- ``dispatch_flags`` / ``combine_flags``: one int64 per source rank, a counter each of the
  source's sending programs adds 1 to (``parts`` per call: the receiver waits for
  ``epoch * parts``);
- ``dispatch_counts``: ``[ranks, local_experts + 1]`` int64, how many tokens each source sent to
  each local expert, then the source's configuration fingerprint (the source puts its row
  before its signal; the receiver checks the fingerprint);
- ``send_counts``: ``[ranks, local_experts + 1]`` int64, this rank's rows of counts per
  destination (the source of those puts);
- ``dispatch_tokens``: ``[local_experts, ranks, max_tokens]`` rows, what each source sent to each
  local expert, compacted from row 0;
- ``dispatch_send``: ``[experts, max_tokens]`` rows, this rank's tokens packed per expert;
- ``combine_tokens``: ``[experts, max_tokens]`` rows, expert outputs sent back to this rank (the
  row of a token is where dispatch packed it);
- ``combine_send``: ``[local_experts, ranks * max_tokens]`` rows, the expert outputs in the
  dispatch's packed layout (``Buffer.get_next_low_latency_combine_buffer``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Dict, Tuple

#: Every part starts at a multiple of this (16-byte vectors, and room to spare).
ALIGNMENT_BYTES = 256
#: Error words at the start of the pool.
ERROR_WORDS = 8
#: Channels that share one FP8 scale (DeepEP's and DeepGEMM's blocks).
FP8_GROUP_CHANNELS = 128
#: Bits of the configuration fingerprint that ends each counts row, which the receiver checks (a
#: peer with another ``max_tokens`` would otherwise write into the wrong rows unnoticed).
FINGERPRINT_BITS = 24


def _align(offset: int) -> int:
    return (offset + ALIGNMENT_BYTES - 1) // ALIGNMENT_BYTES * ALIGNMENT_BYTES


def counters_span(ranks: int) -> Tuple[int, int]:
    """``(first, end)`` bytes of the epochs and both counters, which both modes' layouts place
    here (after the error words): what a switch between the modes restarts."""
    epochs = _align(ERROR_WORDS * 8)
    dispatch_flags = _align(epochs + 2 * 8)
    combine_flags = _align(dispatch_flags + ranks * 8)
    return epochs, combine_flags + ranks * 8


@dataclass(frozen=True)
class LowLatencyLayout:
    """The pool layout of the low-latency mode for one configuration."""

    ranks: int
    experts: int
    max_tokens: int
    hidden: int
    element_bytes: int = 2  # of the dispatched hidden state: 2 BF16, 1 FP8 (e4m3 with scales)

    def __post_init__(self) -> None:
        for name in ("ranks", "experts", "max_tokens", "hidden", "element_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"aboleth.moe: {name} must be a positive integer, got {value!r}")
        if self.ranks < 2:
            raise ValueError(f"aboleth.moe: the low-latency mode needs at least 2 ranks, got {self.ranks}")
        if self.experts % self.ranks:
            raise ValueError(f"aboleth.moe: num_experts ({self.experts}) must be a multiple of the number of "
                             f"ranks ({self.ranks}): each rank holds num_experts / ranks experts")
        if self.max_tokens >= 1 << 31:
            raise ValueError(f"aboleth.moe: num_max_dispatch_tokens_per_rank ({self.max_tokens}) must be below 2^31")
        if self.element_bytes not in (1, 2):
            raise ValueError(f"aboleth.moe: element_bytes must be 2 (BF16) or 1 (FP8), got {self.element_bytes}")
        if self.hidden % 2 or (self.element_bytes == 1 and self.hidden % FP8_GROUP_CHANNELS):
            raise ValueError(f"aboleth.moe: hidden ({self.hidden}) must be even, and a multiple of "
                             f"{FP8_GROUP_CHANNELS} for FP8 (one scale per {FP8_GROUP_CHANNELS} channels)")

    @property
    def local_experts(self) -> int:
        return self.experts // self.ranks

    @property
    def scale_groups(self) -> int:
        """FP8 scales per token (one per ``FP8_GROUP_CHANNELS`` channels); 0 for BF16."""
        return self.hidden // FP8_GROUP_CHANNELS if self.element_bytes == 1 else 0

    @property
    def dispatch_row_bytes(self) -> int:
        """A dispatched token's row: its hidden state, then (FP8) its float32 scales."""
        return self.hidden * self.element_bytes + self.scale_groups * 4

    @property
    def combine_row_bytes(self) -> int:
        """An expert output's row (BF16), whatever the dispatch sent."""
        return self.hidden * 2

    @cached_property
    def fingerprint(self) -> int:
        """What ends each counts row: a hash of the configuration every rank must share
        (``FINGERPRINT_BITS`` bits; never 0)."""
        value = (self.max_tokens * 1_000_003 + self.hidden * 10_007 + self.experts * 101 + self.element_bytes) \
            % ((1 << FINGERPRINT_BITS) - 1)
        return value + 1

    def parts(self) -> Dict[str, Tuple[int, int]]:
        """Each part's (offset, length) in bytes, in pool order (computed once: do not modify)."""
        return self._parts

    @cached_property
    def _parts(self) -> Dict[str, Tuple[int, int]]:
        dispatched, combined = self.dispatch_row_bytes, self.combine_row_bytes
        # The parts whose place depends only on the ranks and experts come first.
        sizes = [
            ("errors", ERROR_WORDS * 8),
            ("epochs", 2 * 8),
            ("dispatch_flags", self.ranks * 8),
            ("combine_flags", self.ranks * 8),
            ("dispatch_counts", self.ranks * (self.local_experts + 1) * 8),
            ("send_counts", self.ranks * (self.local_experts + 1) * 8),
            # From here on the places depend on max_tokens and hidden too.
            ("dispatch_tokens", self.local_experts * self.ranks * self.max_tokens * dispatched),
            ("dispatch_send", self.experts * self.max_tokens * dispatched),
            ("combine_tokens", self.experts * self.max_tokens * combined),
            ("combine_send", self.local_experts * self.ranks * self.max_tokens * combined),
        ]
        parts, offset = {}, 0
        for name, length in sizes:
            parts[name] = (offset, length)
            offset = _align(offset + length)
        return parts

    def offset(self, part: str) -> int:
        return self.parts()[part][0]

    @cached_property
    def pool_bytes(self) -> int:
        """Bytes the pool needs (what ``Buffer.get_low_latency_rdma_size_hint`` returns)."""
        offset, length = list(self.parts().values())[-1]
        return _align(offset + length)


#: Error words of the normal mode past the low-latency mode's three (source + 1, fingerprint,
#: epoch): a receive of more rows than ``num_worst_tokens`` records the rows that arrived, the
#: bound and the epoch.
WORST_ERROR_WORD = 3


@dataclass(frozen=True)
class NormalLayout:
    """The pool layout of the normal (throughput) mode for one configuration.

    A token goes once to each other rank that holds one of its experts, as one row: its hidden
    state (``hidden * element_bytes``), its top-k expert ids as the caller gave them (int64: the
    receiver makes them its local ids), its weights (f32) and, for FP8, its ``scales`` f32 words.
    A combine row is the expert output (BF16) and the k weights (f32). A rank's own tokens are
    never copied into the pool: its receive and reduce read them from the caller's tensors. The
    parts:

    - ``errors``, ``epochs`` (dispatch, combine), ``dispatch_flags`` / ``combine_flags`` (one
      counter per source): as in :class:`LowLatencyLayout`;
    - ``dispatch_counts``: ``[ranks, local_experts + 2]`` int64, what each source sent here: its
      tokens, its tokens per local expert, its configuration's fingerprint;
    - ``send_counts``: the same rows, this rank's, per destination;
    - ``recv``: ``ranks`` blocks of ``capacity`` rows, block ``s`` the rows source ``s`` sent
      (block ``rank`` unused), which the staged combine then packs the expert outputs into, row
      for row (each phase at its own stride: ``dispatch_stride``, ``combine_stride``);
    - ``send``: ``ranks`` blocks, block ``r`` this rank's tokens for rank ``r`` in token order
      (packed by the staged dispatch; the p2p direct dispatch puts from the caller's tensors and
      leaves them empty), where rank ``r``'s combine puts their outputs back.

    ``capacity`` (tokens one source may send to one rank) is the largest that fits the pool:
    every rank derives it from the same pool size, and it is part of the fingerprint.
    """

    ranks: int
    experts: int
    hidden: int
    topk: int
    pool_bytes: int
    element_bytes: int = 2  # BF16; 1 for FP8 (e4m3)
    scales: int = 0  # f32 scale words per token row (FP8: hidden / 128)

    def __post_init__(self) -> None:
        for name in ("ranks", "experts", "hidden", "topk", "pool_bytes", "element_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"aboleth.moe: {name} must be a positive integer, got {value!r}")
        if self.ranks < 2:
            raise ValueError(f"aboleth.moe: the normal mode needs at least 2 ranks, got {self.ranks}")
        if self.experts % self.ranks:
            raise ValueError(f"aboleth.moe: num_experts ({self.experts}) must be a multiple of the number of "
                             f"ranks ({self.ranks}): each rank holds num_experts / ranks experts")
        if (self.hidden * self.element_bytes) % 4:
            raise ValueError(f"aboleth.moe: a row of hidden={self.hidden} at {self.element_bytes} byte(s) per "
                             "element must be a whole number of 4-byte words")
        if self.capacity < 1:
            raise ValueError(f"aboleth.moe: a pool of {self.pool_bytes} bytes holds no token row of "
                             f"{self.row_stride} bytes for {self.ranks} ranks; size it with "
                             "Buffer.get_normal_size_hint(...)")

    @property
    def local_experts(self) -> int:
        return self.experts // self.ranks

    @property
    def row_words(self) -> int:
        """Words of a counts row: the tokens, one count per local expert, the fingerprint."""
        return self.local_experts + 2

    @property
    def x_bytes(self) -> int:
        return self.hidden * self.element_bytes

    @property
    def dispatch_row_bytes(self) -> int:
        return self.x_bytes + self.topk * 8 + self.topk * 4 + self.scales * 4

    @property
    def combine_row_bytes(self) -> int:
        return self.hidden * 2 + self.topk * 4

    @cached_property
    def dispatch_stride(self) -> int:
        """Bytes between the rows of a block while it holds a dispatch: a dispatch row in
        16-byte vectors (an FP8 row is about half a combine row: the dispatch moves only its
        own bytes)."""
        return (self.dispatch_row_bytes + 15) // 16 * 16

    @cached_property
    def combine_stride(self) -> int:
        """Bytes between the rows of a block while it holds a combine: a combine row in 16-byte
        vectors. Row ``i`` of either phase sits at ``i`` times its phase's stride."""
        return (self.combine_row_bytes + 15) // 16 * 16

    @cached_property
    def row_stride(self) -> int:
        """The larger of the two strides: what a block holds ``capacity`` rows of."""
        return max(self.dispatch_stride, self.combine_stride)

    def _header(self) -> list:
        return [
            ("errors", ERROR_WORDS * 8),
            ("epochs", 2 * 8),
            ("dispatch_flags", self.ranks * 8),
            ("combine_flags", self.ranks * 8),
            ("dispatch_counts", self.ranks * self.row_words * 8),
            ("send_counts", self.ranks * self.row_words * 8),
        ]

    def _header_bytes(self) -> int:
        offset = 0
        for _, length in self._header():
            offset = _align(offset + length)
        return offset

    @cached_property
    def capacity(self) -> int:
        """Rows per block: the most tokens one source sends one rank in a call."""
        free = self.pool_bytes - self._header_bytes()
        rows = max(free // (2 * self.ranks * self.row_stride), 0)
        # Blocks start aligned: give back rows until the aligned blocks fit.
        while rows > 0 and 2 * self.ranks * _align(rows * self.row_stride) > free:
            rows -= 1
        return rows

    @cached_property
    def block_bytes(self) -> int:
        return _align(self.capacity * self.row_stride)

    @cached_property
    def fingerprint(self) -> int:
        """A hash of what every rank must share (``FINGERPRINT_BITS`` bits; never 0)."""
        value = (self.capacity * 1_000_003 + self.hidden * 10_007 + self.experts * 101 + self.topk * 13
                 + self.element_bytes * 7 + self.scales * 3 + 1) % ((1 << FINGERPRINT_BITS) - 1)
        return value + 1

    def parts(self) -> Dict[str, Tuple[int, int]]:
        """Each part's (offset, length) in bytes, in pool order (computed once: do not modify)."""
        return self._parts

    @cached_property
    def _parts(self) -> Dict[str, Tuple[int, int]]:
        parts, offset = {}, 0
        for name, length in self._header() + [("recv", self.ranks * self.block_bytes),
                                              ("send", self.ranks * self.block_bytes)]:
            parts[name] = (offset, length)
            offset = _align(offset + length)
        return parts

    def offset(self, part: str) -> int:
        return self.parts()[part][0]

    @staticmethod
    def size_hint(max_tokens: int, hidden: int, ranks: int, topk: int, experts: int, fp8: bool = False) -> int:
        """The smallest pool whose capacity holds ``max_tokens`` tokens per source."""
        element_bytes, scales = (1, (hidden + 127) // 128) if fp8 else (2, 0)
        probe = NormalLayout(ranks, experts, hidden, topk, 1 << 40, element_bytes, scales)
        blocks = 2 * ranks * _align(max_tokens * probe.row_stride)
        return probe._header_bytes() + blocks
