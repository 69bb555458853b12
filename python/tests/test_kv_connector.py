"""aboleth.kv.vllm_connector's logic without vLLM and without a GPU: vLLM's base classes, the
block tables' store and the Transfer are stand-ins here (python/tests/test_vllm_integration.py
checks the class against the pinned vLLM's own ``KVConnectorBase_V1``). The scheduler sides of a
consumer and a producer hand one request's blocks over; the worker sides call the Transfer once
per layer; misconfigurations name the setting."""

from __future__ import annotations

import enum
import importlib
import json
import sys
import types
from typing import Any, Dict, List

import pytest


class Role(enum.Enum):
    SCHEDULER = 0
    WORKER = 1


class FakeBase:
    """What AbolethKVConnector uses of vLLM's KVConnectorBase_V1."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any) -> None:
        self._kv_transfer_config = vllm_config.kv_transfer_config
        self._role = role
        self._connector_metadata = None

    def bind_connector_metadata(self, metadata: Any) -> None:
        self._connector_metadata = metadata

    def _get_connector_metadata(self) -> Any:
        assert self._connector_metadata is not None
        return self._connector_metadata


@pytest.fixture
def connector_module(monkeypatch):
    base = types.ModuleType("vllm.distributed.kv_transfer.kv_connector.v1.base")
    base.KVConnectorBase_V1 = FakeBase
    base.KVConnectorMetadata = type("KVConnectorMetadata", (), {})
    base.KVConnectorRole = Role
    names = ["vllm", "vllm.distributed", "vllm.distributed.kv_transfer", "vllm.distributed.kv_transfer.kv_connector",
             "vllm.distributed.kv_transfer.kv_connector.v1"]
    for name in names:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, base.__name__, base)
    monkeypatch.delitem(sys.modules, "aboleth.kv.vllm_connector", raising=False)
    return importlib.import_module("aboleth.kv.vllm_connector")


class FakeStore:
    def __init__(self) -> None:
        self.values: Dict[str, str] = {}

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def get(self, key: str) -> bytes:
        return self.values[key].encode()

    def check(self, keys: List[str]) -> bool:
        return all(key in self.values for key in keys)

    def delete_key(self, key: str) -> bool:
        return self.values.pop(key, None) is not None


class TransferConfig:
    def __init__(self, role: str, extra: Dict[str, Any]) -> None:
        self.kv_role = role
        self.is_kv_producer = role in ("kv_producer", "kv_both")
        self.is_kv_consumer = role in ("kv_consumer", "kv_both")
        self.extra = extra

    def get_from_extra_config(self, key: str, default: Any) -> Any:
        return self.extra.get(key, default)


EXTRA = {"aboleth_store": "10.0.0.1:29600", "aboleth_blocks_store": "10.0.0.2:29601", "aboleth_store_timeout_s": 1}


def make(module: Any, role: str, connector_role: Role, store: FakeStore, extra: Dict[str, Any] = EXTRA) -> Any:
    config = types.SimpleNamespace(kv_transfer_config=TransferConfig(role, extra),
                                   cache_config=types.SimpleNamespace(block_size=16),
                                   parallel_config=types.SimpleNamespace(tensor_parallel_size=2))
    original = module.AbolethKVConnector._store_client
    module.AbolethKVConnector._store_client = lambda self: setattr(self, "_store", store) or store
    try:
        connector = module.AbolethKVConnector(config, connector_role, None)
    finally:
        module.AbolethKVConnector._store_client = original
    connector._store = store  # the producer's scheduler joins it on first use
    return connector


def request(params: Dict[str, Any], prompt: int = 40) -> Any:
    return types.SimpleNamespace(request_id="r1", kv_transfer_params=params, prompt_token_ids=list(range(prompt)),
                                 num_computed_tokens=0)


def blocks(ids: List[int]) -> Any:
    return types.SimpleNamespace(get_block_ids=lambda: (ids,))


def step(block_ids: List[int], scheduled: int) -> Any:
    new = types.SimpleNamespace(req_id="r1", block_ids=(block_ids,), num_computed_tokens=0)
    return types.SimpleNamespace(scheduled_new_reqs=[new], num_scheduled_tokens={"r1": scheduled})


def test_the_schedulers_hand_a_requests_blocks_from_consumer_to_producer(connector_module):
    store = FakeStore()
    consumer = make(connector_module, "kv_consumer", Role.SCHEDULER, store)
    producer = make(connector_module, "kv_producer", Role.SCHEDULER, store)
    prefill = request({"aboleth_request": "k1", "do_remote_decode": True})
    # The producer holds the request back until the consumer has published its blocks.
    assert producer.get_num_new_matched_tokens(prefill, 0) == (None, False)
    decode = request({"aboleth_request": "k1", "do_remote_prefill": True})
    # Every prompt token but the last is loaded, synchronously.
    assert consumer.get_num_new_matched_tokens(decode, 0) == (39, False)
    consumer.update_state_after_alloc(decode, blocks([7, 3, 9]), 39)
    received = consumer.build_connector_meta(step([7, 3, 9], 1))
    assert [(r.request_id, r.destination_blocks) for r in received.receives] == [("r1", [7, 3, 9])]
    assert consumer.build_connector_meta(step([], 0)).receives == []  # reset after each step
    assert producer.get_num_new_matched_tokens(prefill, 0) == (0, False)
    producer.update_state_after_alloc(prefill, blocks([1, 2, 5]), 0)
    sent = producer.build_connector_meta(step([1, 2, 5], 40))
    assert [(s.source_blocks, s.destination_blocks) for s in sent.sends] == [([1, 2, 5], [7, 3, 9])]
    assert store.values == {}  # the key is consumed
    assert producer.request_finished(prefill, [1, 2, 5]) == (False, None)


def test_a_local_prefix_hit_moves_only_the_blocks_after_it(connector_module):
    store = FakeStore()
    consumer = make(connector_module, "kv_consumer", Role.SCHEDULER, store)
    decode = request({"aboleth_request": "k3", "do_remote_prefill": True}, prompt=50)
    # 16 tokens (one block) are cached locally; vLLM has not added them to the request yet.
    assert consumer.get_num_new_matched_tokens(decode, 16) == (33, False)
    consumer.update_state_after_alloc(decode, blocks([4, 8, 6, 2]), 33)
    published = json.loads(store.values[connector_module.STORE_PREFIX + "k3"])
    assert published == {"first_block": 1, "blocks": [8, 6, 2]}


def test_a_chunked_prefill_and_a_missing_consumer_are_named(connector_module):
    store = FakeStore()
    producer = make(connector_module, "kv_producer", Role.SCHEDULER, store)
    store.set(connector_module.STORE_PREFIX + "k2", json.dumps({"first_block": 0, "blocks": [9]}))
    prefill = request({"aboleth_request": "k2", "do_remote_decode": True})
    assert producer.get_num_new_matched_tokens(prefill, 0) == (0, False)
    producer.update_state_after_alloc(prefill, blocks([1]), 0)
    with pytest.raises(ValueError, match="prefills 16 of its 40 prompt tokens.*chunked prefill"):
        producer.build_connector_meta(step([1, 2, 5], 16))
    # A consumer that never publishes: past the timeout the request is prefilled without a push.
    quick = make(connector_module, "kv_producer", Role.SCHEDULER, FakeStore(), {**EXTRA, "aboleth_store_timeout_s": 0})
    lonely = request({"aboleth_request": "k9", "do_remote_decode": True})
    assert quick.get_num_new_matched_tokens(lonely, 0) == (0, False)
    quick.update_state_after_alloc(lonely, blocks([1]), 0)
    assert quick.build_connector_meta(step([1], 40)).sends == []


@pytest.mark.parametrize("role, extra, message", [
    ("kv_both", EXTRA, "kv_role must be kv_producer"),
    ("kv_producer", {"aboleth_blocks_store": "h:1"}, "aboleth_store to HOST:PORT"),
    ("kv_consumer", {"aboleth_store": "h:1", "aboleth_blocks_store": "h"}, "aboleth_blocks_store to HOST:PORT"),
])
def test_a_bad_configuration_names_the_setting(connector_module, role, extra, message):
    with pytest.raises(ValueError, match=message):
        make(connector_module, role, Role.WORKER, FakeStore(), extra)


class FakeTransfer:
    def __init__(self, failures: List[str] = ()) -> None:
        self.calls: List[Any] = []
        self.failures = list(failures)

    def expect(self, source: int) -> None:
        self.calls.append(("expect", source))

    def wait_layer(self, layer: str, source: int) -> None:
        self.calls.append(("wait_layer", layer, source))

    def prepare(self, peer: int, sources: List[int], destinations: List[int]) -> Any:
        self.calls.append(("prepare", peer, sources, destinations))
        return ("plan", peer)

    def send_layer(self, plan: Any, layer: str) -> None:
        self.calls.append(("send_layer", plan, layer))

    def failed_layers(self) -> List[str]:
        failures, self.failures = self.failures, []
        return failures


def test_the_workers_send_and_wait_once_per_layer_in_vllms_order(connector_module, monkeypatch):
    store = FakeStore()
    module = connector_module
    assert module.AbolethKVConnector.requires_piecewise_for_cudagraph({}) is True
    for role, rank in (("kv_producer", 1), ("kv_consumer", 3)):
        worker = make(module, role, Role.WORKER, store)
        worker.world = types.SimpleNamespace(rank=rank)
        worker.transfer = FakeTransfer()
        pushed = module.PushedRequest("r1", [1, 2], [7, 3])
        metadata = module.AbolethKVConnectorMetadata(sends=[pushed] if role == "kv_producer" else [],
                                                     receives=[] if role == "kv_producer" else [pushed])
        worker.bind_connector_metadata(metadata)
        if role == "kv_consumer":
            worker.start_load_kv(None)  # vLLM calls it before the forward only for pending loads
        for layer in ("layers.0", "layers.1"):
            worker.wait_for_layer_load(layer)
            worker.save_kv_layer(layer, None, None)
        worker.wait_for_save()
        if role == "kv_producer":
            worker.start_load_kv(None)  # after the forward: plans nothing
            assert worker.transfer.calls == [("prepare", 3, [1, 2], [7, 3]), ("send_layer", ("plan", 3), "layers.0"),
                                             ("send_layer", ("plan", 3), "layers.1")]
        else:  # and rank 3 waits for rank 1
            assert worker.transfer.calls == [("expect", 1), ("wait_layer", "layers.0", 1),
                                             ("wait_layer", "layers.1", 1)]
            torch = types.ModuleType("torch")
            torch.cuda = types.SimpleNamespace(synchronize=lambda: None)
            monkeypatch.setitem(sys.modules, "torch", torch)
            assert worker.get_block_ids_with_load_errors() == set()  # the step's waits passed
            worker.start_load_kv(None)
            worker.transfer.failures = ["aboleth.kv: rank 3 gave up ... layer layers.1 from rank 1"]
            assert worker.get_block_ids_with_load_errors() == {7, 3}
            assert worker.get_block_ids_with_load_errors() == set()
