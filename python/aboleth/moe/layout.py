"""Where everything of the low-latency MoE mode lives in a :class:`aboleth.moe.Buffer`'s pool.

One registered CUDA tensor per rank (the pool), exchanged as one region named ``pool``: every
rank computes the same byte offsets from the same configuration, so a kernel reaches a peer's
copy of any part as ``remote(pool, peer).at(offset + ...)``. Nothing here touches the GPU; the
kernels (``aboleth/moe/kernels.py``) take these offsets as constexprs.

The parts, for ``ranks`` ranks, ``experts`` experts (``local_experts = experts // ranks`` on
each rank), at most ``max_tokens`` tokens per rank and ``token_bytes`` bytes per token row:

- ``errors``: 8 int64 words this rank's kernels record failures in (a peer's mismatched
  configuration); read by ``Buffer.check_errors()``;
- ``epochs``: 2 int64 words, the dispatch and combine epochs, incremented on the device before
  each call (graph replays advance them too);
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
from typing import Dict, Tuple

#: Every part starts at a multiple of this (16-byte vectors, and room to spare).
ALIGNMENT_BYTES = 256
#: Error words at the start of the pool.
ERROR_WORDS = 8
#: Bits of the configuration fingerprint that ends each counts row, which the receiver checks (a
#: peer with another ``max_tokens`` would otherwise write into the wrong rows unnoticed).
FINGERPRINT_BITS = 24


def _align(offset: int) -> int:
    return (offset + ALIGNMENT_BYTES - 1) // ALIGNMENT_BYTES * ALIGNMENT_BYTES


@dataclass(frozen=True)
class LowLatencyLayout:
    """The pool layout of the low-latency mode for one configuration."""

    ranks: int
    experts: int
    max_tokens: int
    hidden: int
    element_bytes: int = 2  # BF16

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

    @property
    def local_experts(self) -> int:
        return self.experts // self.ranks

    @property
    def token_bytes(self) -> int:
        return self.hidden * self.element_bytes

    @property
    def fingerprint(self) -> int:
        """What ends each counts row: a hash of the configuration every rank must share
        (``FINGERPRINT_BITS`` bits; never 0)."""
        value = (self.max_tokens * 1_000_003 + self.hidden * 10_007 + self.experts * 101 + self.element_bytes) \
            % ((1 << FINGERPRINT_BITS) - 1)
        return value + 1

    def parts(self) -> Dict[str, Tuple[int, int]]:
        """Each part's (offset, length) in bytes, in pool order."""
        rows = self.token_bytes
        # The parts whose place depends only on the ranks and experts come first.
        sizes = [
            ("errors", ERROR_WORDS * 8),
            ("epochs", 2 * 8),
            ("dispatch_flags", self.ranks * 8),
            ("combine_flags", self.ranks * 8),
            ("dispatch_counts", self.ranks * (self.local_experts + 1) * 8),
            ("send_counts", self.ranks * (self.local_experts + 1) * 8),
            # From here on the places depend on max_tokens and hidden too.
            ("dispatch_tokens", self.local_experts * self.ranks * self.max_tokens * rows),
            ("dispatch_send", self.experts * self.max_tokens * rows),
            ("combine_tokens", self.experts * self.max_tokens * rows),
            ("combine_send", self.local_experts * self.ranks * self.max_tokens * rows),
        ]
        parts, offset = {}, 0
        for name, length in sizes:
            parts[name] = (offset, length)
            offset = _align(offset + length)
        return parts

    def offset(self, part: str) -> int:
        return self.parts()[part][0]

    @property
    def pool_bytes(self) -> int:
        """Bytes the pool needs (what ``Buffer.get_low_latency_rdma_size_hint`` returns)."""
        offset, length = list(self.parts().values())[-1]
        return _align(offset + length)
