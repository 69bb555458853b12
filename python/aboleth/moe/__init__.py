"""Compiled MoE dispatch and combine: DeepEP's ``Buffer`` API over Aboleth kernels.

``from aboleth.moe import Buffer`` in place of ``from deep_ep import Buffer``. Built: the
normal (throughput) mode (``get_dispatch_layout``, ``dispatch`` in BF16 or FP8 with scales,
cached with a handle, ``num_worst_tokens``; ``combine`` with its bias; ``get_normal_size_hint``)
and the low-latency mode (``low_latency_dispatch`` in BF16 or FP8 with float or UE8M0 scales,
``low_latency_combine``, ``get_next_low_latency_combine_buffer``,
``get_low_latency_rdma_size_hint``), and DeepEP's helpers that move no data (``Config``,
``get_dispatch_config``, ``capture``, ``get_local_buffer_tensor``, ...: ``aboleth/moe/compat.py``).
Not yet: LogFMT. Needs torch and Triton;
docs/COMPILED_MOE.md is the manual.
"""

from .buffer import Buffer, EventOverlap, LowLatencyHandle
from .compat import Config
from .layout import LowLatencyLayout, NormalLayout
from .normal import NormalHandle

__all__ = ["Buffer", "Config", "EventOverlap", "LowLatencyHandle", "LowLatencyLayout", "NormalHandle", "NormalLayout"]
