"""Compiled MoE dispatch and combine (issue 15): DeepEP's ``Buffer`` API over Aboleth kernels.

``from aboleth.moe import Buffer`` in place of ``from deep_ep import Buffer``. Built: the
low-latency mode (``low_latency_dispatch``, ``low_latency_combine``,
``get_next_low_latency_combine_buffer``, ``get_low_latency_rdma_size_hint``), BF16. Not yet:
the normal mode, FP8. Needs torch and Triton; docs/COMPILED_MOE.md is the manual.
"""

from .buffer import Buffer, EventOverlap, LowLatencyHandle
from .layout import LowLatencyLayout

__all__ = ["Buffer", "EventOverlap", "LowLatencyHandle", "LowLatencyLayout"]
