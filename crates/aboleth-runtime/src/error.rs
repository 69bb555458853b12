//! The errors of the GPU side of the runtime ([`RuntimeError`]) and the class of each
//! ([`ErrorKind`]), which tells the Python layer which exception to raise: a wrong argument type
//! becomes `TypeError`, a wrong value `ValueError`, anything the machine or the other ranks
//! caused `RuntimeError`.
//!
//! Every message names the thing that is wrong and, where there is one, the fix. This module
//! only defines errors; the modules that detect them build them.

use aboleth_abi::Transport;

use crate::proxy_ring::ProxyRingError;

/// Which Python exception an error maps to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The argument is of the wrong kind (host memory where GPU memory is needed): `TypeError`.
    Type,
    /// The argument has the right kind but a wrong value (bounds, length, names): `ValueError`.
    Value,
    /// The machine, the driver or another rank failed: `RuntimeError`.
    Runtime,
}

/// A failure of the CUDA driver, RDMA discovery, the bootstrap, or a caller's argument.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// `libcuda.so` cannot be loaded.
    #[error(
        "the CUDA driver library was not found (tried {tried}): the Aboleth GPU runtime needs an NVIDIA GPU and its driver; on a machine without one, run kernels in the simulator (`aboleth sim`) instead"
    )]
    CudaDriverNotFound {
        /// The library names tried, comma-separated.
        tried: String,
    },
    /// A driver call returned an error.
    #[error("{call} failed with {code} ({description}) while {doing}")]
    Cuda {
        /// The driver function.
        call: &'static str,
        /// The error's name, e.g. `CUDA_ERROR_NO_DEVICE`.
        code: String,
        /// The driver's description of the error.
        description: String,
        /// What the runtime was doing.
        doing: String,
    },
    /// An environment variable has a value the runtime cannot use.
    #[error("{variable}={value:?} is not valid: expected {expected}")]
    InvalidEnvironment {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
        /// What it must be.
        expected: &'static str,
    },
    /// The device ordinal does not exist.
    #[error(
        "device {device_ordinal} does not exist: this process sees {device_count} CUDA device(s) (check CUDA_VISIBLE_DEVICES; pass torch.cuda.current_device() or LOCAL_RANK)"
    )]
    NoSuchDevice {
        /// The ordinal asked for.
        device_ordinal: i32,
        /// Devices visible.
        device_count: i32,
    },
    /// `World::new`'s rank or size disagrees with the bootstrap's.
    #[error(
        "World(rank={rank}, size={world_size}) does not match its bootstrap (rank {bootstrap_rank} of {bootstrap_world_size}); pass bootstrap.rank and bootstrap.world_size"
    )]
    BootstrapMismatch {
        /// Rank given.
        rank: u32,
        /// Size given.
        world_size: u32,
        /// The bootstrap's rank.
        bootstrap_rank: u32,
        /// The bootstrap's world size.
        bootstrap_world_size: u32,
    },
    /// A rank-collective operation failed.
    #[error("rank {rank}: {operation} through the bootstrap failed: {source}")]
    Collective {
        /// This rank.
        rank: u32,
        /// What was exchanged.
        operation: String,
        /// The bootstrap's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Another rank sent bytes this build cannot read.
    #[error(
        "rank {rank}'s {what} record is malformed ({reason}); every rank must run the same Aboleth build"
    )]
    MalformedRecord {
        /// The sender.
        rank: u32,
        /// Which record.
        what: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// `register()` was given memory that is not on the GPU.
    #[error(
        "register() takes GPU memory, but {address:#x} is {memory}; allocate the buffer on the GPU (e.g. torch.zeros(..., device=\"cuda\"))"
    )]
    NotDeviceMemory {
        /// The pointer.
        address: u64,
        /// What it is instead.
        memory: String,
    },
    /// `register()` was given memory of another GPU.
    #[error(
        "register() was given memory of device {pointer_device_ordinal}, but this World uses device {world_device_ordinal}; allocate the buffer on the World's device"
    )]
    WrongDevice {
        /// Where the memory is.
        pointer_device_ordinal: i32,
        /// The World's device.
        world_device_ordinal: i32,
    },
    /// `register()` was given zero bytes.
    #[error("register() was given 0 bytes at {address:#x}; register a non-empty buffer")]
    EmptyRegistration {
        /// The pointer.
        address: u64,
    },
    /// `register()` was given a range that leaves its allocation.
    #[error(
        "register() was given {length_bytes} bytes at {address:#x}, but the CUDA allocation holding it spans [{allocation_base:#x}, {allocation_end:#x}); register at most the tensor's own bytes"
    )]
    RegistrationOutsideAllocation {
        /// The pointer.
        address: u64,
        /// Bytes asked for.
        length_bytes: u64,
        /// The allocation's first byte.
        allocation_base: u64,
        /// One past its last byte.
        allocation_end: u64,
    },
    /// The allocation cannot be exported with a CUDA IPC handle.
    #[error(
        "the allocation at {allocation_base:#x} cannot be shared with other processes (cuIpcGetMemHandle: {code}); allocate it with cudaMalloc or PyTorch's default allocator (with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, PyTorch allocates with cuMemCreate, which CUDA IPC cannot export: unset it)"
    )]
    NotExportable {
        /// The allocation.
        allocation_base: u64,
        /// The driver's error.
        code: String,
    },
    /// A region leaves its registration.
    #[error(
        "region '{name}' [{offset_bytes}, {end_bytes}) exceeds its registration of {registration_length_bytes} bytes"
    )]
    RegionOutOfBounds {
        /// The region.
        name: String,
        /// Its offset.
        offset_bytes: u64,
        /// Offset plus length (saturated).
        end_bytes: u128,
        /// The registration's length.
        registration_length_bytes: u64,
    },
    /// A region declared with packet slots is not whole 8-byte flags, or its staging slots do
    /// not fit in its registration.
    #[error(
        "region '{name}' cannot carry packet slots: it needs whole 8-byte flags ({length_bytes} bytes given) and {staging_bytes} bytes of staging after it, up to byte {end_bytes} of its registration, which has {registration_length_bytes}; allocate aboleth.packet_staging_bytes({length_bytes}) more bytes after the region"
    )]
    PacketSlotsDoNotFit {
        /// The region.
        name: String,
        /// Its length.
        length_bytes: u64,
        /// Staging bytes it needs after it.
        staging_bytes: u64,
        /// Where the staging would end, from the registration's start.
        end_bytes: u128,
        /// The registration's length.
        registration_length_bytes: u64,
    },
    /// A region declared with packet slots does not start 16-byte aligned.
    #[error(
        "region '{name}' cannot carry packet slots: it starts at {address:#x}, and packet slots are read with 16-byte loads; place it at a 16-byte-aligned offset of its registration"
    )]
    PacketSlotsMisaligned {
        /// The region.
        name: String,
        /// Its first byte.
        address: u64,
    },
    /// The packet staging area after a flag region overlaps another region.
    #[error(
        "the packet slots after region '{name}' ([{start:#x}, {end:#x})) overlap region '{other}'; leave aboleth.packet_staging_bytes(length) bytes after the flag region free"
    )]
    PacketSlotsOverlap {
        /// The flag region.
        name: String,
        /// Its staging area.
        start: u64,
        /// End of its staging area.
        end: u64,
        /// The region inside it.
        other: String,
    },
    /// Ranks disagree on whether a region carries packet slots.
    #[error(
        "region '{name}' carries packet slots on rank {rank} but not on rank {other_rank}: declare it the same way (world.region(..., packet_slots=True)) on every rank"
    )]
    PacketSlotsMismatch {
        /// The region.
        name: String,
        /// A rank that declared packet slots.
        rank: u32,
        /// A rank that did not.
        other_rank: u32,
    },
    /// A region has no bytes.
    #[error("region '{name}' has length 0; a region must hold at least one byte")]
    EmptyRegion {
        /// The region.
        name: String,
    },
    /// A region name is unusable.
    #[error("region name {name:?} is invalid: {reason}")]
    InvalidRegionName {
        /// The name.
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// The registration belongs to another World or was made before a close.
    #[error(
        "registration {registration_index} does not belong to this World; register the buffer with this World"
    )]
    ForeignRegistration {
        /// Its index.
        registration_index: u32,
    },
    /// `exchange_regions` got a key that differs from the region's own name.
    #[error(
        "exchange_regions: key '{key}' holds region '{name}'; use the region's name as its key"
    )]
    RegionKeyMismatch {
        /// The key.
        key: String,
        /// The region's name.
        name: String,
    },
    /// `exchange_regions` got the same name twice.
    #[error("exchange_regions: region '{name}' appears twice")]
    DuplicateRegion {
        /// The name.
        name: String,
    },
    /// The ranks exchanged different region lists.
    #[error(
        "exchange_regions: rank {rank} exchanged regions [{rank_names}] but rank {other_rank} exchanged [{other_names}]; every rank must exchange the same names in the same order (the order gives each region its index)"
    )]
    RegionListMismatch {
        /// This rank.
        rank: u32,
        /// Its names.
        rank_names: String,
        /// The disagreeing rank.
        other_rank: u32,
        /// Its names.
        other_names: String,
    },
    /// A table has no region of that name.
    #[error("no region named '{name}' was exchanged (exchanged: [{exchanged}])")]
    UnknownRegion {
        /// The name asked for.
        name: String,
        /// The names exchanged.
        exchanged: String,
    },
    /// Another rank failed its part of a collective step, so this rank stops too.
    #[error("rank {peer_rank} failed {operation}: {message}")]
    PeerFailed {
        /// The rank that failed.
        peer_rank: u32,
        /// The step.
        operation: String,
        /// Its error.
        message: String,
    },
    /// The World is not connected yet.
    #[error("{operation} needs a connected World: call connect_all(...) first")]
    NotConnected {
        /// What was attempted.
        operation: &'static str,
    },
    /// `connect_all` was called twice.
    #[error(
        "connect_all was already called (transports: {transports}); create another World to use other transports"
    )]
    AlreadyConnected {
        /// The transports in use.
        transports: String,
    },
    /// The World was closed.
    #[error("{operation} on a closed World")]
    Closed {
        /// What was attempted.
        operation: &'static str,
    },
    /// A transport name is unknown.
    #[error("unknown transport {name:?}: expected one of {expected}")]
    UnknownTransport {
        /// The name.
        name: String,
        /// The names `connect_all` accepts, quoted and comma-separated.
        expected: String,
    },
    /// The RDMA transport was requested but cannot work here.
    #[error("the rdma transport cannot be used here: {reason}")]
    RdmaUnavailable {
        /// What is missing.
        reason: String,
    },
    /// An experimental provider transport (efa, ionic) was requested: what was found of its
    /// devices and libraries, and why it cannot run yet.
    #[error("the {transport} transport cannot be used here: {reason}")]
    ProviderUnavailable {
        /// `efa` or `ionic`.
        transport: &'static str,
        /// The devices and libraries found or missing.
        reason: String,
    },
    /// A peer cannot be reached with the transport asked for.
    #[error("rank {rank} cannot reach rank {peer_rank} with {transport:?}: {reason}")]
    PeerUnreachable {
        /// This rank.
        rank: u32,
        /// The peer.
        peer_rank: u32,
        /// The transport asked for.
        transport: Transport,
        /// Why, and what to do.
        reason: String,
    },
    /// A proxy ring could not be set up.
    #[error("proxy ring for peer {peer_rank}: {source}")]
    ProxyRing {
        /// The peer.
        peer_rank: u32,
        /// The ring's error (boxed: it carries a whole ring entry).
        source: Box<ProxyRingError>,
    },
    /// The proxy thread stopped a ring.
    #[error("rank {rank}: the proxy thread stopped: {failures}")]
    ProxyStopped {
        /// This rank.
        rank: u32,
        /// Each failure, one per ring.
        failures: String,
    },
    /// The software NIC stopped, or could not be set up.
    #[error("rank {rank}: the software NIC stopped: {reason}")]
    SoftNicStopped {
        /// This rank.
        rank: u32,
        /// Why.
        reason: String,
    },
    /// A GPU wait gave up; the kernels recorded why.
    #[error("rank {rank}: {count} GPU wait(s) timed out or gave up: {first}")]
    WaitTimedOut {
        /// This rank.
        rank: u32,
        /// Failures recorded (can exceed the log's capacity).
        count: u64,
        /// The first recorded failure, described.
        first: String,
    },
}

impl RuntimeError {
    /// The Python exception class this error maps to.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::NotDeviceMemory { .. } | Self::ForeignRegistration { .. } => ErrorKind::Type,
            Self::WrongDevice { .. }
            | Self::EmptyRegistration { .. }
            | Self::RegistrationOutsideAllocation { .. }
            | Self::RegionOutOfBounds { .. }
            | Self::PacketSlotsDoNotFit { .. }
            | Self::PacketSlotsMismatch { .. }
            | Self::PacketSlotsMisaligned { .. }
            | Self::PacketSlotsOverlap { .. }
            | Self::EmptyRegion { .. }
            | Self::InvalidRegionName { .. }
            | Self::RegionKeyMismatch { .. }
            | Self::DuplicateRegion { .. }
            | Self::UnknownRegion { .. }
            | Self::UnknownTransport { .. }
            | Self::BootstrapMismatch { .. }
            | Self::InvalidEnvironment { .. }
            | Self::NoSuchDevice { .. } => ErrorKind::Value,
            Self::CudaDriverNotFound { .. }
            | Self::Cuda { .. }
            | Self::Collective { .. }
            | Self::MalformedRecord { .. }
            | Self::PeerFailed { .. }
            | Self::NotExportable { .. }
            | Self::RegionListMismatch { .. }
            | Self::NotConnected { .. }
            | Self::AlreadyConnected { .. }
            | Self::Closed { .. }
            | Self::RdmaUnavailable { .. }
            | Self::ProviderUnavailable { .. }
            | Self::PeerUnreachable { .. }
            | Self::ProxyRing { .. }
            | Self::ProxyStopped { .. }
            | Self::SoftNicStopped { .. }
            | Self::WaitTimedOut { .. } => ErrorKind::Runtime,
        }
    }
}

/// The runtime's result type.
pub type RuntimeResult<T> = Result<T, RuntimeError>;
