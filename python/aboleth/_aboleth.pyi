# Generated from crates/aboleth-python by PyO3's introspection: do not edit.
# Regenerate with `make stubs` (ABOLETH_BLESS=1 cargo test -p aboleth-python --test python_stubs).
"""
The Rust side of aboleth's Triton bridge (see `docs/TRITON_BRIDGE.md`) and host runtime.
"""

from _typeshed import SupportsGetItem
from typing import SupportsIndex, final

__all__ = ["DeviceTable", "ExchangedRegions", "LocalRegion", "PipelineOptions", "Region", "Registration", "TcpStoreBootstrap", "World", "connect_kinds", "decode_mlx5_wqe_in_ring", "device_context_bytes", "device_library", "layout_bytes", "layout_fields", "local_region_bytes", "packet_staging_bytes", "remote_region_bytes", "run_command_line", "run_stage", "transports", "version"]

@final
class DeviceTable:
    """
    DeviceTable: where a table lies in GPU memory: `entry_count` entries of `entry_bytes` bytes
    at `address`, valid while the ExchangedRegions that returned it lives.
    """
    def __repr__(self, /) -> str: ...
    @property
    def address(self, /) -> int:
        """
        Device address of entry 0.
        """
    @property
    def entry_bytes(self, /) -> int:
        """
        Bytes per entry.
        """
    @property
    def entry_count(self, /) -> int:
        """
        Entries (one per rank).
        """
    @property
    def length_bytes(self, /) -> int:
        """
        Bytes of the whole table.
        """

@final
class ExchangedRegions:
    """
    ExchangedRegions: what `World.exchange_regions` returns: per region, this rank's
    LocalRegion and the GPU table of every rank's remote descriptors; and the GPU table of
    endpoint handles. Owns those GPU tables: they are freed when this object is.
    """
    def __repr__(self, /) -> str: ...
    def endpoint_handle_bytes(self, /) -> bytes:
        """
        The bytes the endpoint handle GPU table holds (its host copy).
        """
    def endpoint_handles(self, /) -> DeviceTable:
        """
        The GPU table of endpoint handles (one per rank, indexed by rank).
        """
    def local(self, /, name: str) -> LocalRegion:
        """
        This rank's region `name`. ValueError for a name that was not exchanged.
        """
    @property
    def names(self, /) -> list[str]:
        """
        Region names in exchange order (a region's index is its position).
        """
    def region_table_bytes(self, /, name: str) -> bytes:
        """
        The bytes region `name`'s GPU table holds (its host copy).
        """
    def regions(self, /, name: str) -> DeviceTable:
        """
        The GPU table of region `name` (one remote descriptor per rank, indexed by rank).
        """
    def verify_device_copies(self, /) -> bool:
        """
        Reads the GPU tables back and compares them with the host copies (GIL released).
        """

@final
class LocalRegion:
    """
    LocalRegion: this rank's view of an exchanged region: `.address` (its first byte) and
    `.lkey` (its RDMA local key; 0 without RDMA), the `src`/`source_key` arguments of kernels.
    """
    def __repr__(self, /) -> str: ...
    @property
    def address(self, /) -> int:
        """
        Local address of the region's first byte.
        """
    @property
    def lkey(self, /) -> int:
        """
        RDMA local key (0 without RDMA).
        """

@final
class PipelineOptions:
    """
    PipelineOptions(target, *, passes_off=False, disabled_passes=(), immediate_signals=False,
    packet_signals=False, plan_only=False): what the aboleth stage compiles for, checked by the
    Rust pipeline when made (ValueError naming the rule). `aboleth.Config` makes one; use that.
    `plan_only` options (any lowered target, efa included) serve `run_stage(..., plan_only=True)`
    only: statistics and lowered IR, no code.
    """
    def __new__(cls, /, target: str, *, passes_off: bool = False, disabled_passes: SupportsGetItem[int, str] = ..., immediate_signals: bool = False, packet_signals: bool = False, plan_only: bool = False) -> PipelineOptions: ...
    def __repr__(self, /) -> str:
        """
        The constructor call that makes these options.
        """
    @property
    def disabled_passes(self, /) -> list[str]:
        """
        The planning passes skipped, by flag name, sorted.
        """
    @property
    def immediate_signals(self, /) -> bool:
        """
        Whether flags are observed only through `wait_signal` (mlx5 write-with-immediate).
        """
    @property
    def packet_signals(self, /) -> bool:
        """
        Whether signals publish only their own put (p2p flag-in-data packets).
        """
    @property
    def passes_off(self, /) -> bool:
        """
        Whether only the lowering runs (the library-style baseline).
        """
    @property
    def target(self, /) -> str:
        """
        The transport ("mlx5", "proxy" or "p2p").
        """

@final
class Region:
    """
    Region: a named span of a registration, ready to be exchanged (`World.region`).
    """
    def __repr__(self, /) -> str: ...
    @property
    def address(self, /) -> int:
        """
        Local address of the first byte.
        """
    @property
    def length(self, /) -> int:
        """
        Bytes.
        """
    @property
    def name(self, /) -> str:
        """
        The region's name.
        """
    @property
    def offset(self, /) -> int:
        """
        Offset from the registration's first byte.
        """

@final
class Registration:
    """
    Registration: a registered span of GPU memory (`World.register`).
    """
    def __repr__(self, /) -> str: ...
    @property
    def address(self, /) -> int:
        """
        The first registered byte.
        """
    @property
    def index(self, /) -> int:
        """
        Position among the World's registrations.
        """
    @property
    def length_bytes(self, /) -> int:
        """
        Registered bytes.
        """

@final
class TcpStoreBootstrap:
    """
    TcpStoreBootstrap: this rank's connection to the job's rendezvous store (PyTorch's TCPStore
    protocol; under torchrun, the elastic agent's store).

    `TcpStoreBootstrap.from_env()` reads MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE (and
    optionally ABOLETH_BOOTSTRAP_TIMEOUT_S, ABOLETH_JOB_TOKEN) and waits until every rank has
    joined. One bootstrap serves one World: `World(...)` takes it over (also when creating the
    World fails, which closes it).
    """
    def __repr__(self, /) -> str: ...
    @property
    def available(self, /) -> bool:
        """
        Whether it can still be given to a World (not taken over, not closed).
        """
    def close(self, /) -> None:
        """
        Leaves the job (GIL released; rank 0, when it hosts the store, waits until the other
        ranks disconnected). Does nothing once a World took it over or after a first close.
        """
    @staticmethod
    def connect(master_address: str, master_port: SupportsIndex, rank: SupportsIndex, world_size: SupportsIndex) -> TcpStoreBootstrap:
        """
        Joins the rendezvous of a store at `master_address:master_port` (rank 0 hosts it there)
        as `rank` of `world_size`, for launchers that set no MASTER_ADDR, MASTER_PORT, RANK and
        WORLD_SIZE; the optional variables of `from_env` are still read (GIL released). Raises
        ValueError naming an invalid argument, TimeoutError naming ranks that never arrived,
        RuntimeError otherwise.
        """
    @staticmethod
    def from_env() -> TcpStoreBootstrap:
        """
        Reads the environment and joins the rendezvous (GIL released). Raises ValueError naming
        a missing or invalid variable, TimeoutError naming ranks that never arrived, RuntimeError
        otherwise.
        """
    @property
    def rank(self, /) -> int:
        """
        This rank.
        """
    @property
    def world_size(self, /) -> int:
        """
        Number of ranks.
        """

@final
class World:
    """
    World: one rank of a job on one GPU (the runtime's `World`), taking integer addresses.

    `World(rank, size, device, bootstrap)` opens the device (its primary context, shared with
    PyTorch) and takes the bootstrap over. Use `aboleth.World`, which accepts tensors.
    """
    def __new__(cls, /, rank: SupportsIndex, size: SupportsIndex, device: SupportsIndex, bootstrap: TcpStoreBootstrap) -> World:
        """
        Creates rank `rank` of `size` on CUDA device `device` (GIL released). Raises ValueError
        if `bootstrap` was already taken over or closed, or disagrees on rank and size;
        RuntimeError if the CUDA driver or the device cannot be used.
        """
    def __repr__(self, /) -> str: ...
    def barrier(self, /, name: str = "aboleth/barrier") -> None:
        """
        Returns once every rank called `barrier` with the same `name`. Collective; GIL released.
        """
    def check_proxy(self, /) -> None:
        """
        RuntimeError if the proxy thread stopped a ring, with each ring's reason.
        """
    def check_soft_nic(self, /) -> None:
        """
        RuntimeError if the software NIC ended with an error of its model.
        """
    def check_waits(self, /) -> None:
        """
        RuntimeError describing the first GPU wait that gave up, if any did.
        """
    def clear_waits(self, /) -> None:
        """
        Forgets the waits that gave up and the abort they requested (no kernel may be running).
        """
    def close(self, /) -> None:
        """
        Waits for every rank, stops the proxy thread, unmaps peers' memory and leaves the
        bootstrap. Collective; GIL released; a second close does nothing.
        """
    def connect_all(self, /, kind: str) -> list[str]:
        """
        Connects to every rank with `kind` (one of `TransportRequest::names`: "rdma", "proxy", "p2p" or "auto"); returns the
        transport to each rank, by rank (this rank's own is "p2p"). Collective; GIL released.
        """
    @property
    def device(self, /) -> int:
        """
        The CUDA device ordinal.
        """
    def exchange_regions(self, /, regions: SupportsGetItem[int, tuple[str, Region]]) -> ExchangedRegions:
        """
        Exchanges `regions` ((key, Region) pairs, keys equal to the regions' names, in the same
        order on every rank) and builds the GPU tables. Collective; GIL released.
        """
    @property
    def proxy_commands_executed(self, /) -> int:
        """
        Commands the proxy thread has executed.
        """
    def proxy_statistics(self, /) -> dict[str, int]:
        """
        The proxy thread's work and host time by phase since it started: a dict from each field
        of `aboleth_runtime::transport::proxy::ProxyStatistics` (counts, and `*_ns` totals in
        nanoseconds) to its value; zeros without a proxy thread.
        """
    @property
    def rank(self, /) -> int:
        """
        This rank.
        """
    def region(self, /, name: str, registration: Registration, offset: SupportsIndex, length: SupportsIndex, packet_slots: bool = False) -> Region:
        """
        The region `name` = `[offset, offset + length)` of `registration`, with packet staging
        slots after it when `packet_slots`. ValueError when it (or its slots) leaves the
        registration or the name is invalid. Not collective.
        """
    def register(self, /, address: SupportsIndex, length_bytes: SupportsIndex) -> Registration:
        """
        Registers `length_bytes` bytes of this World's GPU memory at `address`. Not collective.
        """
    def soft_nic_statistics(self, /) -> dict[str, int] | None:
        """
        The software NIC's counters (`doorbells_observed`, `host_doorbells_rung`,
        `wqes_executed`, `wqes_failed`, `polls`), or None when no peer is reached over rdma with
        the software NIC.
        """
    def stop_soft_nic(self, /) -> None:
        """
        Stops the software NIC's thread (kernels waiting for it then give up at their bound).
        """
    @property
    def wait_failure_log_address(self, /) -> int:
        """
        Device address of the wait-failure log (for kernels' bounded waits).
        """
    def wait_failures(self, /) -> list[dict[str, int]]:
        """
        The waits that gave up, each as its record's fields (`flag_address`, `expected_value`,
        `observed_value`, `waited_nanoseconds`, `rank`, `peer_rank`, `site_id`, `comparison`,
        `program_id`, `thread_id`), oldest first: what a library on top names a flag by.
        """
    @property
    def world_size(self, /) -> int:
        """
        Number of ranks.
        """

def connect_kinds() -> list[str]:
    """
    connect_kinds() -> list of str: what `World.connect_all(kind)` accepts
    (`aboleth_runtime::TransportRequest::names`).
    """

def decode_mlx5_wqe_in_ring(ring: bytes, ring_basic_block_count: SupportsIndex, basic_block_index: SupportsIndex) -> tuple[str, dict[str, int]]:
    """
    decode_mlx5_wqe_in_ring(ring, ring_basic_block_count, basic_block_index) -> (operation,
    fields): the WQE at that basic block of a send ring, decoded by `aboleth-abi`
    ([`aboleth_abi::mlx5::wqe::decode_wqe_in_ring`]): the operation's name (`Nop`, `RdmaWrite`,
    `RdmaWriteImmediate`, `AtomicFetchAdd`, `MaskedCompareSwap64`, or the decoder's name of any
    other) and its control and operand fields as integers. `ValueError` for bytes that are no
    WQE.
    """

def device_context_bytes(endpoint_handles_address: SupportsIndex, rank: SupportsIndex, world_size: SupportsIndex) -> bytes:
    """
    device_context_bytes(endpoint_handles_address, rank, world_size) -> bytes: an
    `aboleth::DeviceContext` ([`aboleth_abi::device_library::DeviceContext`]).
    """

def device_library(target: str, mutation: str | None = None) -> tuple[list[tuple[str, str]], list[tuple[int, str, str]], list[str]]:
    """
    device_library(target, mutation=None) -> (files, wait_sites, operations): the tier-1 CUDA
    library for transport `target` ("p2p", "proxy" or "mlx5"), deliberately broken by `mutation` when
    one is named (a GPU test's check that it is caught): `(relative path, contents)` of every file, `(site id,
    operation variant, what it waits for)` of every bounded wait, and the operations' names.
    `ValueError` for an unknown transport or a mutation of another transport's library,
    `NotImplementedError` for a transport without a device library (efa, ionic).
    """

def layout_bytes(name: str, fields: dict[str, SupportsIndex]) -> bytes:
    """
    layout_bytes(name, fields) -> bytes: the bytes of layout `name` (an `aboleth-abi` struct:
    `EndpointHandle`, `RemoteRegionDescriptor`, `WaitFailureLogHeader`, ...) with the integer
    fields in `fields` set (by their names) and every other byte zero: for GPU checks that stand
    in for a runtime this machine lacks (an mlx5 endpoint without a NIC,
    `tests/gpu/tier1_mlx5_wqes.py`).
    """

def layout_fields(name: str, data: bytes) -> dict[str, int]:
    """
    layout_fields(name, data) -> dict: the integer fields of layout `name` (see `layout_bytes`)
    read from `data` (little-endian, or big-endian for the `Be*` fields of mlx5 layouts); byte
    arrays are left out. `ValueError` when `data` is not the layout's size.
    """

def local_region_bytes(address: SupportsIndex, lkey: SupportsIndex) -> bytes:
    """
    local_region_bytes(address, lkey) -> bytes: an `aboleth::LocalRegion`
    ([`aboleth_abi::LocalRegionDescriptor`]).
    """

def packet_staging_bytes(length: SupportsIndex) -> int:
    """
    packet_staging_bytes(length) -> int: the bytes a flag region of `length` bytes needs after
    it for packet slots (`world.region(..., packet_slots=True)`).
    """

def remote_region_bytes(descriptors_address: SupportsIndex, offset_bytes: SupportsIndex) -> bytes:
    """
    remote_region_bytes(descriptors_address, offset_bytes) -> bytes: an `aboleth::RemoteRegion`
    ([`aboleth_abi::device_library::RemoteRegion`]).
    """

def run_command_line(arguments: SupportsGetItem[int, str], python_interpreter: str) -> int:
    """
    run_command_line(arguments, python_interpreter) -> int: the `aboleth` command line
    (`arguments[0]` is the program name), with Triton kernels compiled by `python_interpreter`.
    Prints to the process's standard output and error, and returns the exit status. The GIL is
    released while it runs.
    """

def run_stage(ttir_text: str, options: PipelineOptions, *, source_name: str = "<ttir>", plan_only: bool = False) -> tuple[str, str]:
    """
    run_stage(ttir_text, options, *, source_name="<ttir>", plan_only=False) -> (ttir_text,
    summary_json)

    Runs the aboleth stage on TTIR text as Triton 3.6's `module.str()` prints it, for
    `options` (a PipelineOptions); TTIR positions are reported under `source_name`. With
    `plan_only` the pipeline runs but the TTIR comes back as it was (the summary is the
    product). The GIL is released while it runs.

    A module without aboleth extern calls comes back unchanged with a JSON summary; a module with
    some comes back with the communication compiled for the target. Raises ValueError for TTIR
    that does not parse or communication that cannot be compiled (located at the kernel's Python
    line), NotImplementedError for an op code generation has no translation of.
    """

def transports() -> list[tuple[str, str, bool, bool, bool]]:
    """
    transports() -> list of (name, runtime_name, lowered, generated, has_runtime): every
    transport of `aboleth_abi::Transport`, in wire-code order (`lowered`: the pipeline lowers it,
    so a Triton kernel's statistics and lowered IR can be planned for it; `generated`: Triton
    kernels compile for it, and `aboleth.TARGETS` are those names; efa is lowered and simulated
    but not generated; `runtime_name` is what `connect_all` calls it: "rdma" for mlx5).
    """

def version() -> str:
    """
    The version of the aboleth Rust side (the `aboleth-python` crate).
    """
