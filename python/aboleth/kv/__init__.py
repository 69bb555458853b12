"""KV-cache transfer (experimental): paged blocks from one rank's cache into another's, layer
by layer, with one signal per layer (``aboleth/kv/transfer.py``); the kernels are
``aboleth/kv/kernels.py``, the host-side planning ``aboleth/kv/plan.py``. docs/KV_CACHE.md."""

from .plan import block_runs, cache_geometry
from .transfer import Transfer, TransferPlan

__all__ = ["Transfer", "TransferPlan", "block_runs", "cache_geometry"]
