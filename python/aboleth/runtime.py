"""The host API of the seed (``aboleth.World``, ``aboleth.TcpStoreBootstrap``): tensors in, device
tables out as torch tensors, and ``world.compilation()`` for this World's transport.

The Rust runtime (``aboleth._aboleth``, crates/aboleth-runtime) does the work: rendezvous, CUDA
registration and IPC export, region exchange, transports. This module only converts:

- ``World.register(tensor)`` checks that the tensor is on the GPU and contiguous (``TypeError``
  naming the rule otherwise) and passes ``data_ptr()`` and ``numel() * element_size()``; the World
  keeps a reference to every registered tensor until it is closed, since peers may write into it.
- ``RegionTable.regions(name)`` and ``RegionTable.endpoint_handles`` are int64 CUDA tensors of
  shape ``(entry_count, entry_bytes // 8)`` that alias the tables the runtime uploaded: each
  wraps an object exposing ``__cuda_array_interface__`` that holds the table, so the GPU memory
  lives as long as any such tensor (or the table) does. Nothing is copied. Host copies are
  ``RegionTable.region_table_bytes(name)`` and ``endpoint_handle_bytes()``.
- ``World.compilation()`` is ``aboleth.compilation(target=...)`` with the target this World's
  transports need: "p2p" when every peer is reached over p2p, "proxy" over the proxy, "mlx5" over
  rdma (which the runtime runs only over its software NIC, ``ABOLETH_RDMA_DEVICE=soft``: no machine
  here has an RDMA NIC). A kernel is compiled for one transport: for peers reached over several
  transports it raises ``NotImplementedError`` naming what to connect with instead.

Errors of the runtime keep their class: ``TypeError`` (wrong kind of argument), ``ValueError``
(wrong value, e.g. a region past the end of its registration), ``RuntimeError`` (driver, other
ranks), ``TimeoutError`` (ranks that never arrived at the rendezvous).

torch is imported only by the functions that need it (``World(device=None)``, the table tensors),
so ``import aboleth`` works without it. ``World.device_library()`` builds the tier-1 library for
the World's transport (``aboleth.device_library``). Not here: launching kernels (Triton does, or
the user's CUDA code), bounded waits in generated code.
"""

from __future__ import annotations

import contextlib
import numbers
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from . import _aboleth
from .hook import Config, compilation as _compilation

TcpStoreBootstrap = _aboleth.TcpStoreBootstrap
Registration = _aboleth.Registration
Region = _aboleth.Region
LocalRegion = _aboleth.LocalRegion
DeviceTable = _aboleth.DeviceTable

__all__ = [
    "TcpStoreBootstrap",
    "World",
    "RegionTable",
    "Registration",
    "Region",
    "LocalRegion",
    "DeviceTable",
    "TRANSPORT_KINDS",
    "tensor_span",
]

#: What ``connect_all`` accepts: each transport with a device library by its runtime name ("rdma" is
#: mlx5), the experimental providers "efa" and "ionic" (refused, naming the devices and libraries
#: found, except "ionic" with ABOLETH_RDMA_DEVICE=soft: Ionic queues on the software NIC), and "auto".
TRANSPORT_KINDS = tuple(_aboleth.connect_kinds())

#: Transports this runtime can run kernels over (``World.compilation`` targets).
_TRANSPORTS_WITH_RUNTIME = tuple(name for name, _runtime_name, _lowered, _generated, has_runtime
                                 in _aboleth.transports()
                                 if has_runtime)


def _check_count(name: str, value: Any) -> int:
    """``value`` as a non-negative int: ``TypeError`` for a non-integer (bools included),
    ``ValueError`` for a negative one."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"aboleth: {name} must be an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if value < 0:
        raise ValueError(f"aboleth: {name} must be >= 0, got {value}")
    return value


def tensor_span(tensor: Any, operation: str = "World.register") -> Tuple[int, int]:
    """``(address, length_bytes)`` of a contiguous CUDA tensor: ``data_ptr()`` and
    ``numel() * element_size()``.

    Raises ``TypeError`` for something that is not a tensor, a tensor that is not on a CUDA
    device, or a non-contiguous view (its elements are not one span of memory); ``ValueError``
    for an empty tensor. Does not check which GPU the tensor is on (the runtime does) and does
    not import torch (it duck-types).
    """
    required = ("data_ptr", "is_contiguous", "numel", "element_size")
    if not all(hasattr(tensor, attribute) for attribute in required):
        raise TypeError(f"aboleth: {operation}() takes a torch tensor in GPU memory, got {type(tensor).__name__}")
    if not getattr(tensor, "is_cuda", False):
        device = getattr(tensor, "device", "an unknown device")
        raise TypeError(f"aboleth: {operation}() takes a tensor in GPU memory, but this one is on {device}: "
                        "allocate it with device=\"cuda\" (peers write into registered memory over the GPU's "
                        "interconnect)")
    if not tensor.is_contiguous():
        raise TypeError(f"aboleth: {operation}() takes a contiguous tensor, but this one is a non-contiguous view "
                        "whose elements are not one span of memory: register the tensor it views (and address "
                        "parts of it with regions), or a .contiguous() copy")
    length_bytes = int(tensor.numel()) * int(tensor.element_size())
    if length_bytes == 0:
        raise ValueError(f"aboleth: {operation}() was given an empty tensor; register at least one byte")
    return int(tensor.data_ptr()), length_bytes


def _device_ordinal(device: Any) -> int:
    """A CUDA device ordinal from an int, a ``torch.device("cuda", i)``, or ``None`` (the current
    device, which imports torch)."""
    if device is None:
        import torch  # optional dependency: only this default needs it

        return int(torch.cuda.current_device())
    if hasattr(device, "type") and hasattr(device, "index") and not isinstance(device, numbers.Integral):
        if device.type != "cuda":
            raise TypeError(f"aboleth: World(device=...) must be a CUDA device, got {device}")
        if device.index is None:
            return _device_ordinal(None)
        return int(device.index)
    return _check_count("World(device=...)", device)


class _CudaArray:
    """A device table seen through ``__cuda_array_interface__`` (version 2: no stream, since the
    runtime uploaded the table synchronously): int64 words, ``(entry_count, entry_bytes // 8)``.
    Holds ``owner`` (the Rust table object) so the GPU memory outlives every tensor made from it."""

    def __init__(self, table: Any, owner: Any) -> None:
        if table.entry_bytes % 8:
            raise RuntimeError(f"aboleth: a device table entry has {table.entry_bytes} bytes, not a multiple of 8")
        self.owner = owner
        self.address = int(table.address)
        self.shape = (int(table.entry_count), int(table.entry_bytes) // 8)
        self.__cuda_array_interface__ = {
            "shape": self.shape,
            "typestr": "<i8",
            "data": (self.address, False),
            "strides": None,
            "version": 2,
        }


def _alias_tensor(table: Any, owner: Any) -> Any:
    """A torch int64 CUDA tensor aliasing ``table``'s GPU memory; ``RuntimeError`` if torch made a
    copy instead (which would leave kernels reading a table nobody updates)."""
    import torch  # optional dependency: only the table tensors need it

    view = _CudaArray(table, owner)
    tensor = torch.as_tensor(view)
    if tensor.data_ptr() != view.address or tensor.dtype != torch.int64 or not tensor.is_cuda:
        raise RuntimeError(f"aboleth: torch did not alias the device table at {view.address:#x} "
                           f"(got {tensor.dtype} at {tensor.data_ptr():#x} on {tensor.device})")
    return tensor


class RegionTable:
    """What ``World.exchange_regions`` returns.

    - ``local(name)``: this rank's region ``name`` (``.address``, ``.lkey``);
    - ``regions(name)``: the GPU table of every rank's descriptor of region ``name``, an int64
      CUDA tensor aliasing the runtime's table (see the module documentation);
    - ``endpoint_handles``: the GPU table of endpoint handles, likewise;
    - ``names``, ``region_table_bytes(name)``, ``endpoint_handle_bytes()``,
      ``verify_device_copies()``: the exchanged names and the host copies, for checks.

    The tensors are made on first use and cached. The tables stay valid while this object or
    any of its tensors lives, and the peer addresses in them until the World closes.
    """

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self._region_tensors: Dict[str, Any] = {}
        self._endpoint_tensor: Optional[Any] = None

    @property
    def names(self) -> List[str]:
        """Region names in exchange order."""
        return list(self._raw.names)

    def local(self, name: str) -> LocalRegion:
        """This rank's region ``name``: ``.address`` and ``.lkey`` (0 without RDMA).
        ``ValueError`` for a name that was not exchanged."""
        return self._raw.local(name)

    def regions(self, name: str) -> Any:
        """The GPU table of region ``name`` (one descriptor per rank, indexed by rank) as an int64
        CUDA tensor aliasing it. ``ValueError`` for a name that was not exchanged."""
        tensor = self._region_tensors.get(name)
        if tensor is None:
            tensor = _alias_tensor(self._raw.regions(name), self._raw)
            self._region_tensors[name] = tensor
        return tensor

    @property
    def endpoint_handles(self) -> Any:
        """The GPU table of endpoint handles (one per rank, indexed by rank) as an int64 CUDA
        tensor aliasing it."""
        if self._endpoint_tensor is None:
            self._endpoint_tensor = _alias_tensor(self._raw.endpoint_handles(), self._raw)
        return self._endpoint_tensor

    def device_table(self, name: Optional[str] = None) -> DeviceTable:
        """Where region ``name``'s table lies (or the endpoint table's, without a name)."""
        return self._raw.endpoint_handles() if name is None else self._raw.regions(name)

    def region_table_bytes(self, name: str) -> bytes:
        """The host copy of region ``name``'s table."""
        return self._raw.region_table_bytes(name)

    def endpoint_handle_bytes(self) -> bytes:
        """The host copy of the endpoint table."""
        return self._raw.endpoint_handle_bytes()

    def verify_device_copies(self) -> bool:
        """Reads every GPU table back and compares it with its host copy."""
        return self._raw.verify_device_copies()

    def __repr__(self) -> str:
        return f"RegionTable(names={self.names})"


class World:
    """One rank of a job on one GPU: ``World(rank, size, device=, bootstrap=)``.

    ``device`` is a CUDA ordinal or ``torch.device``; ``None`` means ``torch.cuda.current_device()``.
    ``bootstrap`` is a ``TcpStoreBootstrap`` (``TcpStoreBootstrap.from_env()``), which the World
    takes over. Then, as in the seed: ``connect_all(kind)``, ``register(tensor)``,
    ``region(name, reg, offset=, length=)``, ``exchange_regions({...})`` returning a
    :class:`RegionTable`, ``compilation()``, and ``barrier()``, ``check_waits()``, ``close()``.
    Collective calls (``connect_all``, ``exchange_regions``, ``barrier``, ``close``) must be made
    by every rank in the same order; they release the GIL while they wait.

    Usable as a context manager that closes the World on exit.
    """

    def __init__(self, rank: int, size: int, device: Any = None, bootstrap: Optional[TcpStoreBootstrap] = None) -> None:
        rank = _check_count("World(rank)", rank)
        size = _check_count("World(size)", size)
        if size == 0:
            raise ValueError("aboleth: World(size) must be at least 1")
        if rank >= size:
            raise ValueError(f"aboleth: World(rank={rank}) must be below size={size}")
        if not isinstance(bootstrap, TcpStoreBootstrap):
            raise TypeError("aboleth: World(bootstrap=...) must be an aboleth.TcpStoreBootstrap "
                            f"(aboleth.TcpStoreBootstrap.from_env()), got {type(bootstrap).__name__}")
        ordinal = _device_ordinal(device)
        self._attach(_aboleth.World(rank, size, ordinal, bootstrap))

    def _attach(self, raw: Any) -> None:
        """Wraps a raw ``aboleth._aboleth.World`` (or, in tests, a stand-in with its methods)."""
        self._world = raw
        self._transports: Optional[List[str]] = None
        # compilation_target()'s answer and compilation()'s block with the default options, once
        # connected (the seed asks for them around every launch).
        self._compilation_target: Optional[str] = None
        self._default_compilation: Optional[contextlib.AbstractContextManager[Config]] = None
        self._registered: List[Any] = []

    @property
    def rank(self) -> int:
        """This rank."""
        return self._world.rank

    @property
    def world_size(self) -> int:
        """Number of ranks."""
        return self._world.world_size

    @property
    def device(self) -> int:
        """The CUDA device ordinal."""
        return self._world.device

    @property
    def transports(self) -> Optional[List[str]]:
        """The transport to each rank, by rank, once connected (this rank's own is "p2p")."""
        return None if self._transports is None else list(self._transports)

    def connect_all(self, kind: str = "auto") -> List[str]:
        """Connects to every rank with ``kind`` (one of :data:`TRANSPORT_KINDS`: "rdma", "proxy", "p2p" or "auto"); returns the
        transport to each rank. Collective. ``ValueError`` for an unknown kind; ``RuntimeError``
        when a peer cannot be reached that way (the message says why and what to change), and
        for "efa", and "ionic" without ``ABOLETH_RDMA_DEVICE=soft``, which have no runtime on a
        device yet (the message lists the RDMA devices and the provider's libraries found).
        "rdma" and "ionic" with ``ABOLETH_RDMA_DEVICE=soft`` run mlx5 or Ionic queues on the
        software NIC (peers of this host, one process each)."""
        if not isinstance(kind, str):
            raise TypeError(f"aboleth: connect_all(kind) must be one of {', '.join(map(repr, TRANSPORT_KINDS))}, "
                            f"got {type(kind).__name__} {kind!r}")
        transports = list(self._world.connect_all(kind))
        self._transports = transports
        self._compilation_target = None
        self._default_compilation = None
        return list(transports)

    def register(self, tensor: Any) -> Registration:
        """Registers a contiguous CUDA tensor's memory (see :func:`tensor_span` for the rules) and
        keeps a reference to the tensor until the World closes. Not collective."""
        address, length_bytes = tensor_span(tensor)
        registration = self._world.register(address, length_bytes)
        self._registered.append(tensor)
        return registration

    def region(self, name: str, registration: Registration, offset: int = 0, length: Optional[int] = None,
               packet_slots: bool = False) -> Region:
        """The region ``name`` = ``[offset, offset + length)`` bytes of ``registration``
        (``length`` defaults to the rest of it). ``ValueError`` when it leaves the registration.
        With ``packet_slots=True`` it is the flag region of packet signals
        (``compilation(packet_signals=True)``): ``packet_staging_bytes(length)`` bytes of the
        registration after it hold the staging slots (``ValueError`` when they do not fit; every
        rank must declare it the same way). Not collective."""
        if not isinstance(name, str):
            raise TypeError(f"aboleth: region(name) must be a str, got {type(name).__name__}")
        if not isinstance(registration, Registration):
            raise TypeError("aboleth: region(registration) must be what World.register returned, "
                            f"got {type(registration).__name__}")
        offset = _check_count(f"region({name!r}) offset", offset)
        if length is None:
            length = max(registration.length_bytes - offset, 0)
        length = _check_count(f"region({name!r}) length", length)
        if not isinstance(packet_slots, bool):
            raise TypeError(f"aboleth: region({name!r}) packet_slots must be a bool, got {packet_slots!r}")
        return self._world.region(name, registration, offset, length, packet_slots)

    def exchange_regions(self, regions: Mapping[str, Region]) -> RegionTable:
        """Exchanges ``regions`` (a dict of name -> Region, keys equal to the regions' names, in
        the same order on every rank: the order gives each region its index) with every rank and
        returns the :class:`RegionTable`. Collective."""
        if not isinstance(regions, Mapping):
            raise TypeError("aboleth: exchange_regions() takes a dict of name -> world.region(...), "
                            f"got {type(regions).__name__}")
        items = []
        for key, region in regions.items():
            if not isinstance(key, str) or not isinstance(region, Region):
                raise TypeError("aboleth: exchange_regions() takes a dict of name -> world.region(...), "
                                f"got {key!r}: {type(region).__name__}")
            items.append((key, region))
        return RegionTable(self._world.exchange_regions(items))

    def compilation_target(self) -> str:
        """The aboleth target kernels of this World compile for: "p2p" when every peer is
        reached over p2p, "proxy" over the proxy, "mlx5" over rdma and "ionic" over ionic (both
        on the software NIC).
        ``RuntimeError`` before ``connect_all``; ``NotImplementedError`` for a mix of transports."""
        if self._compilation_target is not None:
            return self._compilation_target
        if self._transports is None:
            raise RuntimeError("aboleth: World.compilation() needs a connected World: call connect_all(...) first")
        peers = [transport for rank, transport in enumerate(self._transports) if rank != self.rank]
        kinds = sorted(set(peers)) or ["p2p"]
        described = ", ".join(f"{rank}: {transport}" for rank, transport in enumerate(self._transports))
        if len(kinds) > 1:
            raise NotImplementedError(
                f"aboleth: this World reaches its peers over several transports ({described}), and a kernel is "
                "compiled for one; per-peer transports in one kernel are not built yet: connect with a single kind")
        target = kinds[0]
        # connect_all returns mlx5 and ionic only over the software NIC (ABOLETH_RDMA_DEVICE=soft).
        if target not in _TRANSPORTS_WITH_RUNTIME and target not in ("mlx5", "ionic"):
            raise NotImplementedError(
                f"aboleth: this World reaches its peers over {target} ({described}), and the runtime has no {target} "
                "transport to run kernels yet: connect with connect_all(\"p2p\"), \"proxy\", or \"rdma\" with "
                "ABOLETH_RDMA_DEVICE=soft (mlx5 over the software NIC)")
        self._compilation_target = target
        return target

    def compilation(self, *, passes_off: bool = False, disabled_passes: Sequence[str] = (),
                    immediate_signals: bool = False,
                    packet_signals: bool = False) -> contextlib.AbstractContextManager[Config]:
        """``aboleth.compilation(target=self.compilation_target(), ...)``: kernels compiled inside
        the ``with`` block go through the aboleth stage for this World's transport. The target is
        checked when this is called (see :meth:`compilation_target`)."""
        if (passes_off is False and disabled_passes == () and immediate_signals is False
                and packet_signals is False):
            block = self._default_compilation
            if block is None:
                block = self._default_compilation = _compilation(target=self.compilation_target())
            return block
        return _compilation(target=self.compilation_target(), passes_off=passes_off, disabled_passes=disabled_passes,
                            immediate_signals=immediate_signals, packet_signals=packet_signals)

    def device_library(self, directory: Optional[Any] = None, *, archive: bool = True, nvcc: Optional[str] = None,
                       arch: str = "sm_90") -> Any:
        """The tier-1 CUDA device library for this World's transport (``aboleth.device_library.build``
        with :meth:`compilation_target`): ``include/aboleth/device.cuh``, its implementation and
        (with ``archive``) ``libaboleth_device.a`` built with nvcc, under ``directory`` (default: a
        cache). Kernel arguments: ``aboleth.device_library.device_context(world, table)``,
        ``remote_region(table, name, offset)`` and ``local_region(table, name, offset)``."""
        from . import device_library
        return device_library.build(self.compilation_target(), directory, archive=archive, nvcc=nvcc, arch=arch)

    def barrier(self, name: str = "aboleth/barrier") -> None:
        """Returns once every rank called ``barrier`` (with the same ``name``). Collective."""
        self._world.barrier(name)

    def check_waits(self) -> None:
        """``RuntimeError`` describing the first GPU wait that gave up, if any did. A wait that
        gives up also asks every other bounded wait of this rank to give up at once (the log's
        ``abort_requested``), so a failed launch ends soon; failures stay recorded until
        :meth:`clear_waits`."""
        self._world.check_waits()

    def wait_failures(self) -> List[Dict[str, int]]:
        """The GPU waits that gave up, oldest first, each as its record's fields
        (``flag_address``, ``expected_value``, ``observed_value``, ``waited_nanoseconds``,
        ``rank``, ``peer_rank`` (``2**32 - 1``: unknown), ``site_id``, ``comparison``,
        ``program_id``, ``thread_id``): for a library that names its flags by address
        (``aboleth.kv.Transfer.check``)."""
        return list(self._world.wait_failures())

    def clear_waits(self) -> None:
        """Forgets the GPU waits that gave up and clears the abort they requested. Call it after
        handling a failure, when no kernel of this World is running."""
        self._world.clear_waits()

    def check_proxy(self) -> None:
        """``RuntimeError`` if the proxy thread stopped a ring."""
        self._world.check_proxy()

    def proxy_statistics(self) -> Dict[str, int]:
        """The proxy thread's work and host time by phase since it started, every ring together
        (all zeros when no peer is reached over the proxy). Counts: ``commands_executed``,
        ``completions_published``, ``copies`` (``cuMemcpyAsync``), ``signals``
        (``cuStreamWriteValue64`` or a signal kernel), ``markers`` (completion markers),
        ``completion_waits`` (``cuStreamSynchronize``), ``completion_polls``, ``busy_turns``,
        ``idle_turns``. Nanoseconds of host time: ``copy_ns``, ``signal_ns``, ``marker_ns``,
        ``completion_wait_ns`` and ``completion_poll_ns`` in those calls, ``bookkeeping_ns``
        (the consumer's own work in turns that executed something) and ``idle_ns`` (turns that
        found nothing); each nanosecond of the thread's loop is in exactly one of them. Totals
        only grow: take two readings and subtract. Idle time lags by up to 1024 idle turns.
        ``ABOLETH_PROXY_COMPLETION=synchronize`` (read by ``World(...)``) makes the proxy wait
        for its stream on each requested completion instead of polling a marker."""
        return {name: int(value) for name, value in self._world.proxy_statistics().items()}

    def soft_nic_statistics(self) -> Optional[Dict[str, int]]:
        """The software NIC's counters since it started (``connect_all("rdma")`` with
        ``ABOLETH_RDMA_DEVICE=soft``): ``doorbells_observed`` (UAR stores it saw: at most the
        doorbells rung, two rung between two of its polls count once), ``host_doorbells_rung``
        (on the staged path, ``ABOLETH_SOFT_NIC_DOORBELL=host``: doorbell-record changes it saw
        and rang for the GPU), ``wqes_executed``,
        ``wqes_failed`` (each wrote an error CQE and stopped its queue pair) and ``polls``;
        ``None`` without a software NIC."""
        statistics = self._world.soft_nic_statistics()
        return None if statistics is None else {name: int(value) for name, value in statistics.items()}

    def check_soft_nic(self) -> None:
        """``RuntimeError`` if the software NIC's thread ended with an error of its model."""
        self._world.check_soft_nic()

    def stop_soft_nic(self) -> None:
        """Stops the software NIC's thread: WQEs posted afterwards never execute, and kernels
        waiting for their completions give up at their bound (for tests of bounded waits).
        ``RuntimeError`` without a software NIC."""
        self._world.stop_soft_nic()

    def close(self) -> None:
        """Waits for every rank, stops the proxy, unmaps peers' memory, leaves the bootstrap and
        drops the references to registered tensors. Collective; a second close does nothing."""
        try:
            self._world.close()
        finally:
            self._registered.clear()

    def __enter__(self) -> "World":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"World(rank={self.rank}, size={self.world_size}, device={self.device}, transports={self._transports})"
