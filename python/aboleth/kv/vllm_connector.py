"""vLLM's KV connector over ``aboleth.kv.Transfer`` (experimental): a push design for
disaggregated serving, written against vLLM 0.33.0's ``KVConnectorBase_V1``.

Load it with ``--kv-transfer-config '{"kv_connector": "AbolethKVConnector",
"kv_connector_module_path": "aboleth.kv.vllm_connector", "kv_role": "kv_producer" | "kv_consumer",
"kv_connector_extra_config": {"aboleth_store": "HOST:PORT", "aboleth_blocks_store": "HOST:PORT2"}}'``
on a prefill engine (the producer) and a decode engine (the consumer) with the same
tensor-parallel size ``tp``. Their workers form one ``aboleth.World`` of ``2 * tp`` ranks
(producer worker ``i`` is rank ``i``, consumer worker ``i`` rank ``tp + i``), bootstrapped
through ``aboleth_store`` (``aboleth.TcpStoreBootstrap.connect``: the producer's worker 0 hosts
it), and producer worker ``i`` pushes to consumer worker ``i``. The schedulers exchange block
tables through a PyTorch ``TCPStore`` at ``aboleth_blocks_store``, hosted by the consumer's
scheduler.

A request goes to both engines, with ``kv_transfer_params = {"aboleth_request": KEY,
"do_remote_prefill": True}`` to the consumer and ``{"aboleth_request": KEY, "do_remote_decode":
True}`` to the producer (a router or the client sets them; KEY names the request on both):

1. the consumer's scheduler reports the prompt's tokens but the last as loadable (synchronously,
   so that the request runs in the step the blocks are allocated), and publishes the blocks it
   allocated for them in the store under KEY;
2. the producer's scheduler does not schedule the request until they are published (past
   ``aboleth_store_timeout_s`` it prefills it without pushing, and logs why), then gives its
   workers the request's own blocks and the peer's;
3. the producer's workers, in ``save_kv_layer``, push each layer's blocks right after the
   layer's attention wrote them, with one signal per layer; the consumer's workers, in
   ``wait_for_layer_load``, make the layer's attention wait (bounded) for that layer's signal:
   decode computes the early layers while later ones are still being prefilled and sent.

The layer flags count transfers: the producer must push requests in the order the consumer
loads them (both follow the router's order; requests that reach the engines in different
orders would let one request's signal stand for another's). A wait that gives up is reported by
``get_block_ids_with_load_errors`` (the step's received blocks, for vLLM to recompute; a step
that received synchronizes the device there), and the missing transfer is forgotten. CUDA graphs run piecewise (the waits and sends are calls between
layers).

What it does not do: chunked prefill of a pushed request (the whole prompt must be prefilled in
one step: ``ValueError`` otherwise), pipeline parallelism, a peer engine with another
tensor-parallel size, or hybrid models (more than one KV-cache group: refused).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1, KVConnectorMetadata,
                                                                KVConnectorRole)

logger = logging.getLogger(__name__)

#: The store's key of a request's destination blocks.
STORE_PREFIX = "aboleth/kv/request/"


@dataclass
class PushedRequest:
    """One request's blocks for one step: ``source_blocks`` on the producer, the consumer's
    ``destination_blocks`` (the same length) on both."""

    request_id: str
    source_blocks: List[int]
    destination_blocks: List[int]


@dataclass
class AbolethKVConnectorMetadata(KVConnectorMetadata):
    """What the scheduler tells its workers for one step: requests to push (producer) and to
    receive (consumer)."""

    sends: List[PushedRequest] = field(default_factory=list)
    receives: List[PushedRequest] = field(default_factory=list)


def _blocks_for_tokens(first_token: int, tokens: int, block_size: int) -> Tuple[int, int]:
    """The block range ``[first, end)`` that holds tokens ``[first_token, first_token + tokens)``."""
    return first_token // block_size, -(-(first_token + tokens) // block_size)


class AbolethKVConnector(KVConnectorBase_V1):
    """The connector (see the module docstring)."""

    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        config = self._kv_transfer_config
        self.block_size = vllm_config.cache_config.block_size
        self.tensor_parallel_size = vllm_config.parallel_config.tensor_parallel_size
        self.is_producer = bool(config.is_kv_producer)
        self.is_consumer = bool(config.is_kv_consumer)
        if self.is_producer == self.is_consumer:
            raise ValueError("aboleth.kv.vllm_connector: kv_role must be kv_producer (prefill) or kv_consumer "
                             f"(decode), got {config.kv_role!r}: a push design sends one way")
        self.store_host, self.store_port = self._address(config, "aboleth_store", "the World's rendezvous, hosted by "
                                                         "the producer's worker 0")
        self.blocks_host, self.blocks_port = self._address(config, "aboleth_blocks_store", "the block tables' store, "
                                                           "hosted by the consumer's scheduler")
        self.store_timeout_s = float(config.get_from_extra_config("aboleth_store_timeout_s", 60.0))
        self._store: Any = None
        # Scheduler state.
        self._requests: Dict[str, Any] = {}  # request id -> Request, until its step is built
        self._receives: List[PushedRequest] = []
        self._waiting_since: Dict[str, float] = {}  # producer: requests whose blocks are not published
        self._abandoned: set = set()  # producer: requests prefilled without pushing
        if role == KVConnectorRole.SCHEDULER and self.is_consumer:
            self._store_client()  # host the block tables' store before the producer asks
        # Worker state.
        self.world: Any = None
        self.transfer: Any = None
        self._plans: Optional[Dict[str, Any]] = None  # this step's sends, made at its first save
        self._receiving = False
        self._received_blocks: List[int] = []  # consumer: destination blocks since the last check

    @staticmethod
    def _address(config: Any, key: str, what: str) -> Tuple[str, int]:
        address = config.get_from_extra_config(key, None)
        host, _, port = str(address or "").rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"aboleth.kv.vllm_connector: set kv_connector_extra_config.{key} to HOST:PORT ({what}; "
                             f"both engines must reach it), got {address!r}")
        return host, int(port)

    # ---- the side channel ----------------------------------------------------------------------

    def _store_client(self) -> Any:
        """The block tables' store: the consumer's scheduler hosts it, the producer's joins."""
        if self._store is None:
            from datetime import timedelta

            import torch.distributed as distributed
            self._store = distributed.TCPStore(self.blocks_host, self.blocks_port, is_master=self.is_consumer,
                                               timeout=timedelta(seconds=self.store_timeout_s))
        return self._store

    @staticmethod
    def _params(request: Any) -> Dict[str, Any]:
        return getattr(request, "kv_transfer_params", None) or {}

    # ---- scheduler side ------------------------------------------------------------------------

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Tuple[Optional[int], bool]:
        params = self._params(request)
        key = params.get("aboleth_request")
        if self.is_producer and params.get("do_remote_decode") and key:
            # Not scheduled until the consumer has published where the blocks go (None: ask
            # again later); past the store's timeout, prefilled without pushing.
            if self._store_client().check([STORE_PREFIX + str(key)]):
                self._waiting_since.pop(request.request_id, None)
                return 0, False
            first_asked = self._waiting_since.setdefault(request.request_id, time.monotonic())
            if time.monotonic() - first_asked < self.store_timeout_s:
                return None, False
            self._waiting_since.pop(request.request_id, None)
            self._abandoned.add(request.request_id)
            logger.warning("aboleth.kv.vllm_connector: the consumer never published the blocks of request %s (%s) "
                           "within %s s: prefilling it without pushing", request.request_id, key,
                           self.store_timeout_s)
            return 0, False
        if not (self.is_consumer and params.get("do_remote_prefill") and key):
            return 0, False
        # Every prompt token but the last comes from the producer; decode computes the last.
        loadable = len(request.prompt_token_ids or []) - 1 - num_computed_tokens
        return max(loadable, 0), False

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        params = self._params(request)
        if self.is_producer and params.get("do_remote_decode") and params.get("aboleth_request"):
            if request.request_id in self._abandoned:
                self._abandoned.discard(request.request_id)  # prefilled without pushing
            else:
                self._requests[request.request_id] = request
            return
        if not (self.is_consumer and num_external_tokens > 0):
            return
        block_ids = blocks.get_block_ids()[0]
        # The loaded tokens end one before the prompt's end (decode computes the last); they
        # start after the local prefix-cache hit, which vLLM has not yet added to the request's
        # num_computed_tokens at this call.
        first_token = len(request.prompt_token_ids or []) - 1 - num_external_tokens
        first, end = _blocks_for_tokens(first_token, num_external_tokens, self.block_size)
        destination = list(block_ids[first:end])
        key = params["aboleth_request"]
        self._store_client().set(STORE_PREFIX + str(key),
                                 json.dumps({"first_block": first, "blocks": destination}))
        self._receives.append(PushedRequest(request.request_id, [], destination))

    def build_connector_meta(self, scheduler_output: Any) -> AbolethKVConnectorMetadata:
        metadata = AbolethKVConnectorMetadata(receives=self._receives)
        self._receives = []
        for new in scheduler_output.scheduled_new_reqs:
            request = self._requests.pop(new.req_id, None)
            if request is None:
                continue
            prompt = len(request.prompt_token_ids or [])
            scheduled = scheduler_output.num_scheduled_tokens.get(new.req_id, 0)
            if new.num_computed_tokens + scheduled < prompt:
                raise ValueError(f"aboleth.kv.vllm_connector: request {new.req_id} prefills {scheduled} of its "
                                 f"{prompt - new.num_computed_tokens} prompt tokens in this step, and a pushed request "
                                 "must be prefilled in one step: disable chunked prefill "
                                 "(--no-enable-chunked-prefill) or raise --max-num-batched-tokens")
            key = STORE_PREFIX + str(self._params(request)["aboleth_request"])
            store = self._store_client()
            published = json.loads(store.get(key))  # there: get_num_new_matched_tokens checked
            first = published["first_block"]
            destination = published["blocks"]
            source = list(new.block_ids[0][first:first + len(destination)])
            metadata.sends.append(PushedRequest(new.req_id, source, destination[:len(source)]))
            store.delete_key(key)
        return metadata

    def request_finished(self, request: Any, block_ids: List[int]) -> Tuple[bool, Optional[Dict[str, Any]]]:
        # Sends finish in the step that prefills the request (stream-ordered before any reuse
        # of its blocks), so vLLM may free them at once.
        self._requests.pop(request.request_id, None)
        return False, None

    # ---- worker side ---------------------------------------------------------------------------

    def register_kv_caches(self, kv_caches: Dict[str, Any]) -> None:
        import aboleth
        from aboleth.kv import Transfer
        from vllm.distributed import get_tensor_model_parallel_rank
        size = 2 * self.tensor_parallel_size
        rank = get_tensor_model_parallel_rank() + (self.tensor_parallel_size if self.is_consumer else 0)
        bootstrap = aboleth.TcpStoreBootstrap.connect(self.store_host, self.store_port, rank, size)
        device = next(iter(kv_caches.values())).device
        self.world = aboleth.World(rank, size, device=device.index, bootstrap=bootstrap)
        self.world.connect_all("auto")
        groups = getattr(self._kv_cache_config, "kv_cache_groups", None) or []
        if len(groups) > 1:
            raise ValueError(f"aboleth.kv.vllm_connector: this model has {len(groups)} KV-cache groups (a hybrid "
                             "model); the connector moves one group's blocks only")
        first = next(iter(kv_caches.values()))
        planes = 2 if first.dim() >= 2 and first.shape[0] == 2 else 1
        self.transfer = Transfer(self.world, kv_caches, planes=planes)

    def _peer(self) -> int:
        """The rank this worker pushes to or receives from."""
        tensor_parallel_rank = self.world.rank % self.tensor_parallel_size
        return tensor_parallel_rank + (self.tensor_parallel_size if self.is_producer else 0)

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        metadata = self._get_connector_metadata()
        self._receiving = bool(self.is_consumer and metadata.receives)
        for receive in metadata.receives if self._receiving else []:
            self.transfer.expect(self._peer())
            self._received_blocks.extend(receive.destination_blocks)

    def wait_for_layer_load(self, layer_name: str) -> None:
        if self._receiving:
            self.transfer.wait_layer(layer_name, self._peer())

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        if not self.is_producer:
            return
        if self._plans is None:
            # At the step's first layer: vLLM calls start_load_kv before the forward only when
            # a load is pending, so the sends are planned here, once per step.
            metadata = self._get_connector_metadata()
            self._plans = {send.request_id: self.transfer.prepare(self._peer(), send.source_blocks,
                                                                  send.destination_blocks)
                           for send in metadata.sends}
        for plan in self._plans.values():
            self.transfer.send_layer(plan, layer_name)

    def wait_for_save(self) -> None:
        # Each layer's send drained before its kernel ended, in stream order before whatever
        # reuses the source blocks: nothing is left to wait for.
        self._plans = None
        self._receiving = False

    def get_block_ids_with_load_errors(self) -> set:
        """The destination blocks received in this step when one of its layer waits gave up
        (logged with the layer and the peer), so that vLLM recomputes them. A step that received
        synchronizes the device here (its waits have ended, passed or given up, once it is done);
        other steps cost nothing."""
        if self.transfer is None or not self.is_consumer or not self._received_blocks:
            return set()
        import torch
        torch.cuda.synchronize()
        failed = self.transfer.failed_layers()
        for message in failed:
            logger.error("%s", message)
        blocks = set(self._received_blocks) if failed else set()
        self._received_blocks = []
        return blocks

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: Dict[str, Any]) -> bool:
        # The waits and sends are Python calls between layers: a full CUDA graph would replay
        # the layers without them.
        return True

    def shutdown(self) -> None:
        if self.world is not None:
            self.world.close()
            self.world = None
