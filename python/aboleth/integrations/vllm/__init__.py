"""vLLM's expert-parallel all-to-all backend over ``aboleth.moe``: ``--all2all-backend aboleth``
(the throughput mode, vLLM's Standard activation format) and ``aboleth_low_latency`` (the
low-latency mode, BatchedExperts).

vLLM picks a backend in code, not through a registry: ``integrations/vllm/0001-aboleth-all2all-
backend.patch`` (applied to vLLM 0.33.0) adds the two names and calls this package, where the
logic lives:

- ``aboleth/integrations/vllm/manager.py``: :class:`AbolethAll2AllManager`, vLLM's
  ``All2AllManagerBase``: one ``aboleth.World`` per EP group (rendezvous published over vLLM's
  CPU group) and one ``aboleth.moe.Buffer`` per layer configuration;
- ``aboleth/integrations/vllm/prepare_finalize.py``: :class:`AbolethPrepareAndFinalize` and
  :class:`AbolethLowLatencyPrepareAndFinalize`, vLLM's ``FusedMoEPrepareAndFinalizeModular``.

Importing this package imports vLLM and torch (the classes subclass vLLM's). docs/VLLM_INTEGRATION.md
says how to install, which flags to pass, and what was run where.
"""

from .manager import BACKENDS, AbolethAll2AllManager, world_for_group
from .prepare_finalize import AbolethLowLatencyPrepareAndFinalize, AbolethPrepareAndFinalize, make_prepare_finalize

__all__ = [
    "BACKENDS",
    "AbolethAll2AllManager",
    "AbolethLowLatencyPrepareAndFinalize",
    "AbolethPrepareAndFinalize",
    "make_prepare_finalize",
    "world_for_group",
]
