"""``AbolethAll2AllManager``: vLLM's ``All2AllManagerBase`` for ``--all2all-backend aboleth`` and
``aboleth_low_latency``, and :func:`world_for_group`, the ``aboleth.World`` of a vLLM EP group.

vLLM makes one manager per EP group (``cuda_communicator.py``, patched) and asks it, per MoE
layer configuration, for a handle (``get_handle``): here an ``aboleth.moe.Buffer`` whose pool is
sized for that configuration, cached, all of them over one ``World`` (each Buffer exchanges its
own pool region). The dispatch and combine themselves run in the prepare/finalize classes
(``aboleth/integrations/vllm/prepare_finalize.py``); the manager's own ``dispatch``/``combine``
(vLLM's naive all-gather path) are not built and raise saying so.

Fault tolerance (``--enable-fault-tolerance``; the patch adds both backends to vLLM's
fault-tolerant set): ``query_active_mask`` marks the ranks this rank's bounded waits gave up on
(``Buffer.failed_peers`` over every Buffer of the manager), ``query_fault`` says whether any
is marked, and ``clean_buffers`` restarts every Buffer (``Buffer.restart``: collective, as
vLLM's retry calls it on every worker). What differs from DeepEP's masked low-latency mode: a
marked rank is not skipped by later calls; a Buffer whose wait gave up stops, and its next
eager call raises naming the peer, epoch and experts (a replayed CUDA graph does not raise:
vLLM's per-step fault check is what stops it). Elastic EP (``stage_ep_size``,
``commit_ep_size``, ``mask_remote_ranks``) is not built: the base class's no-ops stay.

The World's rendezvous: vLLM's workers have no MASTER_ADDR/MASTER_PORT of their own for the EP
group, so rank 0 of the group picks a free port on its address (``ABOLETH_VLLM_HOST`` overrides
the address vLLM reports for the node) and publishes both over the group's CPU (gloo) process
group; every rank then joins ``TcpStoreBootstrap.connect``. The transport is ``ABOLETH_TRANSPORT``
(default ``auto``: p2p when the peers' GPUs are reachable, the proxy otherwise).
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Any, Dict, Optional, Tuple

import torch
import torch.distributed as dist
from vllm.distributed.device_communicators.base_device_communicator import All2AllManagerBase

import aboleth
from aboleth.moe import Buffer

#: The ``--all2all-backend`` names the patch adds, and the aboleth.moe mode each runs.
BACKENDS = {"aboleth": "normal", "aboleth_low_latency": "low_latency"}


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind((host, 0))
        return listener.getsockname()[1]


def _node_address() -> str:
    if os.environ.get("ABOLETH_VLLM_HOST"):
        return os.environ["ABOLETH_VLLM_HOST"]
    try:
        from vllm.utils.network_utils import get_ip
        return get_ip()
    except ImportError:  # the helper moved: fall back to the host name
        return socket.gethostbyname(socket.gethostname())


def _fault_tolerance_enabled() -> bool:
    """vLLM's ``parallel_config.enable_fault_tolerance`` of the current configuration (False
    outside one, as in a bare test)."""
    try:
        from vllm.config import get_current_vllm_config
        return bool(get_current_vllm_config().parallel_config.enable_fault_tolerance)
    except Exception:  # noqa: BLE001 - no configuration set: vLLM's default is off
        return False


def world_for_group(cpu_group: Any, transport: Optional[str] = None) -> Any:
    """A connected ``aboleth.World`` whose ranks are ``cpu_group``'s (a torch.distributed CPU
    process group, as vLLM's communicators hold): rank 0 publishes a rendezvous address over
    the group, every rank joins it. Collective over the group."""
    rank, size = cpu_group.rank(), cpu_group.size()
    address = [None, None]
    if rank == 0:
        host = _node_address()
        address = [host, _free_port(host)]
    dist.broadcast_object_list(address, group=cpu_group, group_src=0)
    bootstrap = aboleth.TcpStoreBootstrap.connect(address[0], int(address[1]), rank, size)
    world = aboleth.World(rank, size, device=torch.cuda.current_device(), bootstrap=bootstrap)
    world.connect_all(transport or os.environ.get("ABOLETH_TRANSPORT", "auto"))
    return world


class AbolethAll2AllManager(All2AllManagerBase):
    """vLLM's all-to-all manager over ``aboleth.moe``, in the mode of its backend name (see the
    module docstring)."""

    def __init__(self, cpu_group: Any, tcp_store_group: Any = None, all2all_backend: str = "aboleth") -> None:
        if all2all_backend not in BACKENDS:
            raise ValueError(f"aboleth: unknown all2all backend {all2all_backend!r}; the aboleth backends are "
                             f"{sorted(BACKENDS)}")
        super().__init__(cpu_group, tcp_store_group)
        self.mode = BACKENDS[all2all_backend]
        self._world: Any = None
        self._buffers: Dict[Tuple[Tuple[str, Any], ...], Buffer] = {}
        self._lock = threading.RLock()
        self.num_sms: Optional[int] = None
        self._mask: Any = None  # query_active_mask's device tensor, made on first use
        self.support_fault_tolerance = _fault_tolerance_enabled()

    @property
    def world(self) -> Any:
        """The EP group's ``aboleth.World``, made on first use (collective over the group)."""
        with self._lock:
            if self._world is None:
                self._world = world_for_group(self.cpu_group)
            return self._world

    def get_handle(self, kwargs: Dict[str, Any]) -> Buffer:
        """The ``aboleth.moe.Buffer`` for one layer configuration: ``max_num_tokens_per_rank``,
        ``hidden``, ``num_topk``, ``num_experts`` (what ``make_prepare_finalize`` passes), made
        once per configuration with a pool the mode's size hint asks for. Collective over the EP
        group the first time a configuration is seen."""
        required = ("max_num_tokens_per_rank", "hidden", "num_topk", "num_experts")
        missing = [name for name in required if name not in kwargs]
        if missing:
            raise ValueError(f"aboleth: AbolethAll2AllManager.get_handle needs {list(required)}; missing {missing}")
        key = tuple(sorted(kwargs.items()))
        with self._lock:
            buffer = self._buffers.get(key)
            if buffer is None:
                buffer = self._make_buffer(**kwargs)
                self._buffers[key] = buffer
            return buffer

    def _make_buffer(self, max_num_tokens_per_rank: int, hidden: int, num_topk: int, num_experts: int) -> Buffer:
        ranks = self.world_size
        if num_experts % ranks:
            raise ValueError(f"aboleth: {num_experts} experts do not divide over the {ranks} ranks of the EP group")
        if self.mode == "low_latency":
            pool_bytes = Buffer.get_low_latency_rdma_size_hint(max_num_tokens_per_rank, hidden, ranks, num_experts)
            buffer = Buffer(num_rdma_bytes=pool_bytes, low_latency_mode=True, world=self.world)
        else:
            # BF16 rows are the larger: the pool then holds an FP8 dispatch too.
            pool_bytes = Buffer.get_normal_size_hint(max_num_tokens_per_rank, hidden, ranks, num_topk, num_experts)
            buffer = Buffer(num_nvl_bytes=pool_bytes, world=self.world)
        if self.num_sms is not None:
            buffer.set_num_sms(self.num_sms)
        return buffer

    def set_num_sms(self, num_sms: int) -> None:
        """The receiving kernels' program count of every Buffer (``Buffer.set_num_sms``)."""
        with self._lock:
            self.num_sms = int(num_sms)
            for buffer in self._buffers.values():
                buffer.set_num_sms(self.num_sms)

    def max_sms_used(self) -> Optional[int]:
        # The copying kernels are grids that finish and leave; only the one-program waits spin.
        return None

    def _not_built(self, what: str) -> NotImplementedError:
        return NotImplementedError(
            f"aboleth: AbolethAll2AllManager.{what} is not built: the aboleth backends dispatch and combine "
            "through their prepare/finalize (maybe_make_prepare_finalize); use another --all2all-backend for "
            "vLLM's naive all-gather path")

    def dispatch_router_logits(self, hidden_states: Any, router_logits: Any, is_sequence_parallel: bool = False,
                               extra_tensors: Any = None) -> Any:
        raise self._not_built("dispatch_router_logits")

    def dispatch(self, hidden_states: Any, topk_weights: Any, topk_ids: Any, is_sequence_parallel: bool = False,
                 extra_tensors: Any = None) -> Any:
        raise self._not_built("dispatch")

    def combine(self, hidden_states: Any, is_sequence_parallel: bool = False) -> Any:
        raise self._not_built("combine")

    def query_active_mask(self) -> Any:
        """vLLM's liveness mask: an int32 tensor of one word per EP rank on this rank's device, 1
        for a rank one of this rank's waits (in any of the manager's Buffers) gave up on, 0 for
        the others. A host read of the World's failure records and one small copy to the device
        on the current stream; no synchronization, so a wait still running is not counted yet."""
        with self._lock:
            failed = set()
            for buffer in self._buffers.values():
                failed.update(buffer.failed_peers())
            values = torch.tensor([int(rank in failed) for rank in range(self.world_size)], dtype=torch.int32)
            if self._mask is None:
                self._mask = torch.zeros(self.world_size, dtype=torch.int32,
                                         device=torch.device("cuda", torch.cuda.current_device()))
            self._mask.copy_(values)
            return self._mask

    def query_fault(self) -> Any:
        """A scalar bool tensor on the device: whether any rank is marked in
        ``query_active_mask``. The baseline vLLM compares against, the mask at the last recovery
        point, is all zeros here: ``clean_buffers`` clears every record."""
        return self.query_active_mask().ne(0).any()

    def clean_buffers(self) -> None:
        """After a fault: restarts every Buffer of the manager (``Buffer.restart``: synchronize,
        barrier, zero the error words, epochs and counters, forget the World's failed waits,
        barrier), in the same order on every rank. Collective over the EP group, unlike
        DeepEP's rank-local clean: every rank's counters start again together (vLLM's retry
        calls it on every worker). A rank that died cannot join: its barriers then give up with
        the bootstrap's error."""
        with self._lock:
            for _, buffer in sorted(self._buffers.items(), key=lambda item: repr(item[0])):
                buffer.restart()
            if self._mask is not None:
                self._mask.zero_()

    def destroy(self) -> None:
        with self._lock:
            self._buffers.clear()
            if self._world is not None:
                self._world.close()
                self._world = None
