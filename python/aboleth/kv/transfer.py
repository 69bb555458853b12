"""``aboleth.kv.Transfer``: a request's KV-cache blocks from this rank's paged cache into a
peer's, layer by layer, with one signal per layer that the peer waits on.

Every rank builds a ``Transfer`` over its caches (one tensor per layer, the same number of
layers and the same block geometry on every rank; the number of blocks may differ). The
constructor registers each layer's cache and a flags array (``[layers, ranks]`` int64 counters)
with the World and exchanges them once (collective). Then, on the current stream, with no host
synchronization:

- the sender: ``plan = prepare(peer, source_blocks, destination_blocks)`` checks the block
  ids and uploads the request's runs once; ``send_layer(plan, layer)`` launches
  ``kernels.send_layer`` for one layer (right after the layer's attention wrote it, so that the
  peer can start on early layers while later ones are still computed); ``send(...)`` does both
  for a range of layers;
- the receiver: ``expect(source)`` counts one transfer it is owed by ``source`` (for some
  layers), ``wait_layer(layer, source)`` launches a bounded wait for all of them, so that what
  the stream runs next reads the blocks; ``check()`` synchronizes and turns a wait that gave
  up into an error naming the layer, the peer and the transfer that did not arrive.

What it does not do: move blocks within a rank, send device-resident block tables (they come
from the scheduler as host lists), or check that peers agree on the block geometry and the
number of programs per send (both follow from the model and the transport; a mismatch shows as
a wait that gives up, or as wrong blocks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from ..moe.launch import Launcher
from . import kernels
from .plan import block_runs, cache_geometry

#: Sending programs per peer on p2p (a program's threads copy the blocks; more programs move
#: them faster) and the longest run there, so that the programs share a layer's blocks evenly.
#: A queue transport's NIC or proxy moves the data: one program, runs as long as they come.
P2P_PARTS = 128
P2P_MAX_RUN_BLOCKS = 2
#: Runs per program per launch on a queue (two puts each, K and V, well inside the 1024-slot
#: queues of the proxy and the software NIC); a longer list takes several launches.
RUNS_PER_PROGRAM = 128


def _torch() -> Any:
    import torch
    return torch


@dataclass
class TransferPlan:
    """A request's blocks for one peer, uploaded once for every layer: the runs' tables on
    the device, how the launches split them (``chunks``: (first run, runs) per launch) and each
    launch's arguments that do not depend on the layer (``launches``: the tables' views from the
    chunk's first run, its run count, whether it signals)."""

    peer: int
    blocks: int
    runs: int
    run_sources: Any
    run_destinations: Any
    run_blocks: Any
    chunks: List[Tuple[int, int]]
    launches: List[Tuple[Any, Any, Any, int, bool]]
    #: The runs per launch the chunks were cut for (the kernel's bound).
    max_runs: int
    #: Per layer, its launches bound to their arguments (``Launcher.bind``), made at its first send.
    bound: Dict[int, List[Any]] = field(default_factory=dict)


class Transfer:
    """Paged KV-cache blocks to peers, layer by layer (see the module docstring).

    ``kv_caches``: one tensor per layer (a list, or a dict of layer name -> tensor, in layer
    order); ``planes``: 2 for ``[2, num_blocks, ...]`` (K then V), 1 for ``[num_blocks, ...]``.
    ``parts``: sending programs per peer and layer (default 128 on p2p, 1 on a queue transport;
    every rank must use the same). ``max_run_blocks``: the longest run of one put (default 2
    on p2p, unlimited otherwise). ``max_runs_per_launch``: runs per ``send_layer`` launch
    (default 128 per program); a longer list takes several launches.
    """

    def __init__(self, world: Any, kv_caches: Union[Sequence[Any], Mapping[str, Any]], *, planes: int = 2,
                 parts: Optional[int] = None, max_run_blocks: Optional[int] = None,
                 max_runs_per_launch: Optional[int] = None) -> None:
        torch = _torch()
        if isinstance(kv_caches, Mapping):
            self.layer_names = [str(name) for name in kv_caches]
            caches = list(kv_caches.values())
        else:
            caches = list(kv_caches)
            self.layer_names = [str(index) for index in range(len(caches))]
        if not caches:
            raise ValueError("aboleth.kv.Transfer: no layers: pass one cache tensor per layer")
        self.world = world
        self.rank = world.rank
        self.world_size = world.world_size
        self.planes = planes
        geometry = None
        for name, cache in zip(self.layer_names, caches):
            if not isinstance(cache, torch.Tensor) or not cache.is_cuda or not cache.is_contiguous():
                raise ValueError(f"aboleth.kv.Transfer: layer {name}'s cache must be a contiguous CUDA tensor, got "
                                 f"{type(cache).__name__}" + (f" on {cache.device}" if isinstance(cache, torch.Tensor)
                                                              else ""))
            this = cache_geometry(name, cache.shape, cache.element_size(), planes)
            if geometry is not None and this != geometry:
                raise ValueError(f"aboleth.kv.Transfer: layer {name} has {this[0]} blocks of {this[1]} bytes, layer "
                                 f"{self.layer_names[0]} {geometry[0]} of {geometry[1]}: every layer's cache must "
                                 "have the same shape")
            geometry = this
        assert geometry is not None
        self.num_blocks, self.block_bytes = geometry
        self.caches = caches
        self.layers = len(caches)
        self.layer_index = {name: index for index, name in enumerate(self.layer_names)}
        # The options are checked before the collective exchange: a rank refusing them later
        # would leave its peers waiting.
        p2p = world.compilation_target() == "p2p"
        self.parts = parts if parts is not None else (P2P_PARTS if p2p else 1)
        if not isinstance(self.parts, int) or self.parts < 1:
            raise ValueError(f"aboleth.kv.Transfer: parts must be a positive integer, got {self.parts!r}")
        self.max_run_blocks = max_run_blocks if max_run_blocks is not None else (P2P_MAX_RUN_BLOCKS if p2p else 0)
        self.max_runs = max_runs_per_launch if max_runs_per_launch is not None else RUNS_PER_PROGRAM * self.parts
        if not isinstance(self.max_runs, int) or self.max_runs < 1:
            raise ValueError(f"aboleth.kv.Transfer: max_runs_per_launch must be a positive integer, got {self.max_runs!r}")
        if not p2p and self.max_runs > RUNS_PER_PROGRAM * self.parts:
            raise ValueError(f"aboleth.kv.Transfer: max_runs_per_launch={self.max_runs} is more than "
                             f"{RUNS_PER_PROGRAM} runs per program ({self.parts} programs): a program's puts of one "
                             "launch must fit its 1024-slot queue")
        self.flags = torch.zeros(self.layers * self.world_size, dtype=torch.int64, device=caches[0].device)
        regions = {}
        for index, cache in enumerate(caches):
            name = f"kv.layer{index}"
            regions[name] = world.region(name, world.register(cache))
        regions["kv.flags"] = world.region("kv.flags", world.register(self.flags))
        self.table = world.exchange_regions(regions)
        self.endpoints = self.table.endpoint_handles.view(torch.int64)
        self.cache_regions = [self.table.regions(f"kv.layer{index}") for index in range(self.layers)]
        self.cache_keys = [self.table.local(f"kv.layer{index}").lkey for index in range(self.layers)]
        self.flag_regions = self.table.regions("kv.flags")
        self.peer_num_blocks = self._peer_num_blocks()
        # expected[source][layer]: the transfers of that layer this rank was told to expect.
        self.expected = [[0] * self.layers for _ in range(self.world_size)]
        self.sent = [[0] * self.layers for _ in range(self.world_size)]
        # Compiled on first use inside world.compilation(); cached launches skip the block.
        self._send = Launcher(kernels.send_layer, world.compilation)
        self._wait = Launcher(kernels.wait_layer, world.compilation)
        self._send_grid = (self.parts,)
        self._local_plane_bytes = self.num_blocks * self.block_bytes

    def _peer_num_blocks(self) -> List[int]:
        """Every rank's blocks per layer, from the region tables; ``ValueError`` for a peer whose
        cache is not a whole number of blocks of this rank's geometry."""
        from aboleth import _aboleth
        descriptor_bytes = len(_aboleth.layout_bytes("RemoteRegionDescriptor", {}))
        plane_bytes = self.planes * self.block_bytes
        counts = []
        for peer in range(self.world_size):
            blocks = None
            for index in range(self.layers):
                table = self.table.region_table_bytes(f"kv.layer{index}")
                fields = _aboleth.layout_fields("RemoteRegionDescriptor",
                                                table[peer * descriptor_bytes:(peer + 1) * descriptor_bytes])
                length = fields["length_bytes"]
                if length % plane_bytes or (blocks is not None and length // plane_bytes != blocks):
                    raise ValueError(f"aboleth.kv.Transfer: rank {peer}'s cache of layer {self.layer_names[index]} "
                                     f"is {length} bytes, not {'the same number of' if blocks else 'a whole number of'}"
                                     f" blocks of {self.planes} x {self.block_bytes} bytes as rank {self.rank}'s: "
                                     "every rank needs the same block geometry (block size, heads, head size, dtype)")
                blocks = length // plane_bytes
            counts.append(int(blocks))
        return counts

    def _layer(self, layer: Union[int, str]) -> int:
        if isinstance(layer, str):
            if layer not in self.layer_index:
                raise KeyError(f"aboleth.kv: no layer named {layer!r} (registered: {', '.join(self.layer_names)})")
            return self.layer_index[layer]
        if not isinstance(layer, int) or not 0 <= layer < self.layers:
            raise IndexError(f"aboleth.kv: layer {layer!r} is not one of the {self.layers} registered layers")
        return layer

    def _peer(self, peer: Any, what: str) -> int:
        if not isinstance(peer, int) or not 0 <= peer < self.world_size or peer == self.rank:
            raise ValueError(f"aboleth.kv: {what} must be another rank (0..{self.world_size - 1}, not {self.rank}), "
                             f"got {peer!r}")
        return peer

    def _layers(self, layers: Optional[Iterable[Union[int, str]]]) -> List[int]:
        if layers is None:
            return list(range(self.layers))
        return [self._layer(layer) for layer in layers]

    # ---- sending -------------------------------------------------------------------------------

    def prepare(self, peer: int, source_blocks: Iterable[int], destination_blocks: Iterable[int]) -> TransferPlan:
        """Checks the block ids (``ValueError`` naming the entry: see ``plan.block_runs``) and
        uploads the runs for every layer's ``send_layer``. Nothing is sent yet."""
        torch = _torch()
        peer = self._peer(peer, "peer")
        runs = block_runs(source_blocks, destination_blocks, self.num_blocks, self.peer_num_blocks[peer],
                          self.max_run_blocks, peer)
        device = self.caches[0].device
        # One pinned host table and one asynchronous copy (the caching host allocator keeps the
        # pinned buffer until the copy is done): no wait for the stream's earlier work.
        host = torch.tensor(list(zip(*runs)) if runs else [[0], [0], [0]], dtype=torch.int64).pin_memory()
        table = host.to(device, non_blocking=True)
        tables = [table[0], table[1], table[2]]
        max_runs = self.max_runs
        chunks = [(first, min(max_runs, len(runs) - first))
                  for first in range(0, len(runs), max_runs)] or [(0, 0)]
        launches = [(tables[0][first:], tables[1][first:], tables[2][first:], count, number == len(chunks) - 1)
                    for number, (first, count) in enumerate(chunks)]
        return TransferPlan(peer, sum(run[2] for run in runs), len(runs), tables[0], tables[1], tables[2], chunks,
                            launches, max_runs)

    def send_layer(self, plan: TransferPlan, layer: Union[int, str]) -> None:
        """Puts the plan's blocks of ``layer`` (index or name) into the peer's cache and adds to
        the peer's flag of (layer, this rank) once they are there; on the current stream."""
        index = self._layer(layer)
        peer = plan.peer
        launches = plan.bound.get(index)
        if launches is None:
            # Bound once per (plan, layer): later sends of this layer are driver calls alone.
            peer_plane_bytes = self.peer_num_blocks[peer] * self.block_bytes
            launches = plan.bound[index] = [self._send.bind(
                self._send_grid,
                (self.endpoints, self.cache_regions[index], self.flag_regions, self.caches[index],
                 self.cache_keys[index], run_sources, run_destinations, run_blocks, runs, peer, index,
                 self._local_plane_bytes, peer_plane_bytes),
                {"RANK": self.rank, "RANKS": self.world_size, "PLANES": self.planes, "BLOCK_BYTES": self.block_bytes,
                 "PARTS": self.parts, "MAX_RUNS": plan.max_runs, "SIGNAL": signal})
                for run_sources, run_destinations, run_blocks, runs, signal in plan.launches]
        for launch in launches:
            launch()
        self.sent[peer][index] += 1

    def send(self, peer: int, source_blocks: Iterable[int], destination_blocks: Iterable[int],
             layers: Optional[Iterable[Union[int, str]]] = None) -> TransferPlan:
        """``prepare`` then ``send_layer`` for each of ``layers`` (default: all, in order)."""
        plan = self.prepare(peer, source_blocks, destination_blocks)
        for layer in self._layers(layers):
            self.send_layer(plan, layer)
        return plan

    # ---- receiving -----------------------------------------------------------------------------

    def expect(self, source: int, layers: Optional[Iterable[Union[int, str]]] = None) -> None:
        """Counts one more transfer owed by ``source`` for each of ``layers`` (default: all):
        the next ``wait_layer`` of such a layer waits for it too."""
        source = self._peer(source, "source")
        for layer in self._layers(layers):
            self.expected[source][layer] += 1

    def wait_layer(self, layer: Union[int, str], source: Optional[int] = None) -> None:
        """Makes the current stream wait (bounded: ``ABOLETH_WAIT_TIMEOUT_MS``) until every
        transfer of ``layer`` expected from ``source`` (default: the one other rank of a
        two-rank World) has arrived. ``ValueError`` when none is expected."""
        index = self._layer(layer)
        if source is None:
            if self.world_size != 2:
                raise ValueError(f"aboleth.kv.wait_layer: name the source rank (this World has {self.world_size} "
                                 "ranks)")
            source = 1 - self.rank
        source = self._peer(source, "source")
        expected = self.expected[source][index]
        if expected == 0:
            raise ValueError(f"aboleth.kv.wait_layer: rank {self.rank} expects nothing of layer "
                             f"{self.layer_names[index]} from rank {source}: call expect({source}) for each transfer "
                             "it sends")
        self._wait[(1,)](self.endpoints, self.flags, index, source, expected * self.parts, RANKS=self.world_size,
                         num_warps=1)

    def check(self) -> None:
        """Synchronizes the device; ``TimeoutError`` naming the layer, the peer and the first
        transfer missing for every ``wait_layer`` that gave up (then the World's other
        failures, as ``World.check_waits`` reports them). Each failure is raised once, and the
        transfers that never came are forgotten (a later ``expect`` counts from what arrived)."""
        torch = _torch()
        torch.cuda.synchronize()
        failed = self.failed_layers()
        if failed:
            raise TimeoutError("; ".join(failed))

    def failed_layers(self) -> List[str]:
        """The ``wait_layer`` waits that gave up since the last call, described (layer, peer, the first
        transfer missing, the flag), without synchronizing; each is then forgotten, and so are
        the transfers that never came. ``RuntimeError`` (``World.check_waits``) for a failed wait
        that is not this Transfer's."""
        failures = self.world.wait_failures()
        if not failures:
            return []
        base = self.flags.data_ptr()
        messages: Dict[Tuple[int, int], str] = {}  # one per (layer, source): every thread of a wait records
        foreign = False
        for record in failures:
            offset = record["flag_address"] - base
            if not (0 <= offset < self.flags.numel() * 8 and offset % 8 == 0):
                foreign = True
                continue
            layer, source = divmod(offset // 8, self.world_size)
            arrived = record["observed_value"] // self.parts
            messages.setdefault((layer, source),
                f"aboleth.kv: rank {self.rank} gave up after {record['waited_nanoseconds'] / 1e6:.0f} ms waiting for "
                f"layer {self.layer_names[layer]} from rank {source}: transfer {arrived + 1} of that layer (of "
                f"{record['expected_value'] // self.parts} expected) had not arrived (its flag read "
                f"{record['observed_value']}, {self.parts} per transfer); is rank {source} alive and sending it?")
            # Forget what never came, so that the next transfer is waited for, not this one.
            self.expected[source][layer] = min(self.expected[source][layer], arrived)
        try:
            if foreign:
                self.world.check_waits()
        finally:
            self.world.clear_waits()
        return list(messages.values())

    def statistics(self) -> Dict[str, Any]:
        """Per peer and layer: transfers sent and expected so far (host counts)."""
        return {"sent": [list(row) for row in self.sent], "expected": [list(row) for row in self.expected]}
