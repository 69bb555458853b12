//! The proxy transport's host side: per peer a command ring in host-pinned memory mapped for the
//! GPU ([`PinnedRing`], aboleth-abi's `ProxyRingHeader` then `ProxyRingEntry` slots), and one
//! proxy thread per process ([`ProxyThread`]) that runs each ring's consumer
//! (`crate::proxy_ring::RingConsumer`) with a [`ProxyExecutor`]: it resolves a command's region
//! indices through the exchanged region table ([`ProxyRegionTable`]), refuses a put whose source
//! is not inside this rank's registered memory (the copy engine would read any other address as
//! host memory), and drives a [`CopyEngine`] — the CUDA copy engine ([`CudaCopyEngine`]) or a
//! test double.
//!
//! Execution and ordering. Each ring has its own CUDA stream; its commands are enqueued on it in
//! ticket order:
//! - a put is `cuMemcpyAsync(peer's mapped destination, local source)`, one per
//!   [`COPY_CHUNK_BYTES_MAX`] bytes of it;
//! - a SET signal is `cuStreamWriteValue64` with default flags, which the driver precedes with
//!   a system-wide memory fence; an ADD signal is a one-thread kernel doing `fence.sc.sys` then
//!   a system-scope release atomic add (CUDA 13.0 has no stream atomic), as is a SET on a device
//!   without 64-bit stream memory operations. Those kernels need a free SM: a kernel that
//!   occupies every SM while it waits for such a signal waits until its bound (copies and stream
//!   writes need no SM, which is why the data path stays off kernels);
//! - stream order starts the signal only once the put before it has completed, i.e. once the
//!   copy engine's writes have been performed at the destination; the fence in front of the
//!   signal's store or atomic then makes them visible system-wide before the signal. So a
//!   receiver that reads the new signal value with acquire also reads the data. The same holds
//!   across commands: every signal is ordered after every earlier put of its ring;
//! - completion ([`ProxyCompletion`]): by default ([`ProxyCompletion::Markers`]) a command that
//!   requests one enqueues a completion marker behind its effects, a store of `ticket + 1` to
//!   a word of pinned host memory the engine owns, made exactly as a SET signal is (so the
//!   fence in front of it orders every earlier copy of the stream before it), and returns
//!   [`Execution::Enqueued`]; the consumer asks on each poll, while the completion is
//!   outstanding, for the latest marker value the host sees (one load, no driver call) and
//!   publishes `completion_counter` up to it. The thread keeps reading entries meanwhile. With
//!   [`ProxyCompletion::Synchronize`] the executor instead waits for the stream
//!   (`cuStreamSynchronize`) before returning [`Execution::Complete`]. Either way the
//!   consumer's release of `completion_counter` follows the effects of that command and of
//!   every earlier one (one stream, in order). Commands that request none return once enqueued
//!   (the producer may not reuse their source buffers before a later completion anyway), which
//!   keeps the copy engine busy while the proxy reads the next entries. A NOP or DRAIN
//!   enqueues nothing but a requested completion marker.
//!
//! Host cost. The executor reads the region table through a cached `Arc` that it refreshes only
//! when [`SharedRegionTable::append`] (or `replace`) bumped the table's generation (one load per command, no
//! lock); the engine's calls run on the proxy thread, whose context is made current once at
//! its start, not before every call. The thread accounts its time by phase
//! ([`ProxyStatistics`]: engine calls, consumer bookkeeping, idle polling; one monotonic clock
//! read per phase boundary), published in atomics by every turn that executed a command or
//! published a completion, and every [`STATISTICS_IDLE_TURNS`] idle turns.
//!
//! Flow control on a full ring is the producer's (it waits for `consumer_head`). What this
//! module does not do: the ibverbs path (a peer on another host), cross-ring ordering, or
//! re-running a command after a failure (the ring stops, [`ProxyThread::failures`] says why).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Instant;

use aboleth_abi::RemoteRegionDescriptor;
use aboleth_abi::proxy::{ProxyCommand, ProxyRegions, SignalOperation};

use crate::cuda::{Device, PinnedHostMemory, RuntimeKernels, Stream};
use crate::error::{RuntimeError, RuntimeResult};
use crate::proxy_ring::{CommandExecutor, Execution, HostRing, RingConsumer, RingMemory, RingWord};

/// Default slots per ring.
pub const DEFAULT_PROXY_RING_CAPACITY_ENTRIES: u32 = 1024;

/// A proxy ring in pinned host memory mapped for the GPU. The host view ([`HostRing`]) is
/// dropped before the memory.
#[derive(Debug)]
pub struct PinnedRing {
    ring: HostRing,
    memory: PinnedHostMemory,
}

impl PinnedRing {
    /// Allocates and initializes an empty ring of `capacity_entries` slots on `device`.
    pub fn allocate(
        device: &Arc<Device>,
        peer_rank: u32,
        capacity_entries: u32,
    ) -> RuntimeResult<Self> {
        let header = aboleth_abi::ProxyRingHeader::new(capacity_entries).map_err(|source| {
            RuntimeError::ProxyRing {
                peer_rank,
                source: Box::new(crate::proxy_ring::ProxyRingError::InvalidCapacity(source)),
            }
        })?;
        let memory = PinnedHostMemory::allocate(device, header.ring_total_bytes())?;
        // SAFETY: the pinned allocation is page-aligned, has the ring's full extent, lives as
        // long as `self` (the ring field is dropped first), and the GPU accesses it only with
        // aligned 64-bit-or-smaller stores, loads and atomics (the ring protocol).
        let ring = unsafe { HostRing::initialize_at(memory.host_pointer(), capacity_entries) }
            .map_err(|source| RuntimeError::ProxyRing {
                peer_rank,
                source: Box::new(source),
            })?;
        Ok(Self { ring, memory })
    }

    /// The header's address for kernels (`EndpointHandle::proxy_ring_address`).
    pub fn device_address(&self) -> u64 {
        self.memory.device_address()
    }

    /// The host view.
    pub fn host_ring(&self) -> &HostRing {
        &self.ring
    }
}

impl RingMemory for PinnedRing {
    fn capacity_entries(&self) -> u32 {
        self.ring.capacity_entries()
    }
    fn load(&self, word: RingWord, ordering: Ordering) -> u64 {
        self.ring.load(word, ordering)
    }
    fn store(&self, word: RingWord, value: u64, ordering: Ordering) {
        self.ring.store(word, value, ordering);
    }
    fn fetch_add(&self, word: RingWord, value: u64, ordering: Ordering) -> u64 {
        self.ring.fetch_add(word, value, ordering)
    }
    fn fetch_max(&self, word: RingWord, value: u64, ordering: Ordering) -> u64 {
        self.ring.fetch_max(word, value, ordering)
    }
    fn wait_hint(&self) {
        self.ring.wait_hint();
    }
}

/// What a proxy executor needs from a copy engine. Operations are enqueued in call order and
/// take effect in that order; the signal operations are ordered after every earlier copy (the
/// data is visible before the signal).
pub trait CopyEngine {
    /// The engine's failure.
    type Error: std::error::Error + Send + Sync + 'static;
    /// Enqueues a copy of `length_bytes` bytes.
    fn copy(&mut self, destination: u64, source: u64, length_bytes: u64)
    -> Result<(), Self::Error>;
    /// Enqueues a store of `value` to the 8-byte word at `address`.
    fn signal_set(&mut self, address: u64, value: u64) -> Result<(), Self::Error>;
    /// Enqueues an atomic add of `value` to the 8-byte word at `address`.
    fn signal_add(&mut self, address: u64, value: u64) -> Result<(), Self::Error>;
    /// Waits until everything enqueued has taken effect.
    fn wait_until_complete(&mut self) -> Result<(), Self::Error>;
    /// Enqueues a completion marker: once everything enqueued before it has taken effect,
    /// [`Self::reached_marker`] returns `value` (or a later marker's). Values only grow.
    fn record_marker(&mut self, value: u64) -> Result<(), Self::Error>;
    /// The value of the latest marker whose predecessors have all taken effect, as far as the
    /// engine knows now (0 before any); never waits.
    fn reached_marker(&mut self) -> Result<u64, Self::Error>;
}

/// The exchanged region table as the proxy reads it: `regions[index][rank]`, addresses as this
/// rank's GPU reaches them (mapped peer memory).
///
/// `sources`: this rank's registered spans (address, bytes), where a put may read; `None` (a
/// table made for a test of the executor alone) checks no source. A World always sets them:
/// the copy engine would read any other address as host memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProxyRegionTable {
    regions: Vec<Vec<RemoteRegionDescriptor>>,
    sources: Option<Vec<(u64, u64)>>,
}

impl ProxyRegionTable {
    /// The table of an exchange (`RegionTables::remote`).
    pub fn new(regions: Vec<Vec<RemoteRegionDescriptor>>) -> Self {
        Self {
            regions,
            sources: None,
        }
    }

    /// An error unless `[address, address + length_bytes)` lies inside one registered span
    /// (or no spans are known, or the put is empty).
    pub fn check_source(&self, address: u64, length_bytes: u64) -> Result<(), ProxyExecutionError> {
        let Some(sources) = &self.sources else {
            return Ok(());
        };
        let inside = |&(start, length): &(u64, u64)| {
            address >= start
                && address
                    .checked_add(length_bytes)
                    .is_some_and(|end| end <= start.saturating_add(length))
        };
        if length_bytes == 0 || sources.iter().any(inside) {
            Ok(())
        } else {
            Err(ProxyExecutionError::UnregisteredSource {
                address,
                length_bytes,
            })
        }
    }
}

impl ProxyRegions for ProxyRegionTable {
    type Error = ProxyExecutionError;

    fn descriptor(
        &self,
        what: &'static str,
        region_index: u32,
        peer_rank: u32,
    ) -> Result<&RemoteRegionDescriptor, ProxyExecutionError> {
        self.regions
            .get(region_index as usize)
            .ok_or(ProxyExecutionError::UnknownRegion {
                what,
                region_index,
                region_count: self.regions.len(),
            })?
            .get(peer_rank as usize)
            .ok_or(ProxyExecutionError::UnknownRank {
                what,
                region_index,
                peer_rank,
            })
    }

    fn out_of_bounds(
        &self,
        what: &'static str,
        region_index: u32,
        offset_bytes: u64,
        length_bytes: u64,
        region_length_bytes: u64,
    ) -> ProxyExecutionError {
        ProxyExecutionError::OutOfBounds {
            what,
            region_index,
            offset_bytes,
            length_bytes,
            region_length_bytes,
        }
    }

    fn misaligned_signal(&self, address: u64) -> ProxyExecutionError {
        ProxyExecutionError::MisalignedSignal { address }
    }

    fn wrong_peer(&self, ring_peer_rank: u32, entry_peer_rank: u32) -> ProxyExecutionError {
        ProxyExecutionError::WrongPeer {
            ring_peer_rank,
            entry_peer_rank,
        }
    }
}

/// Why one command could not be executed.
#[derive(Debug, thiserror::Error)]
pub enum ProxyExecutionError {
    /// The entry names another peer than its ring's.
    #[error(
        "the entry is for rank {entry_peer_rank} but sits in the ring to rank {ring_peer_rank}"
    )]
    WrongPeer {
        /// The ring's peer.
        ring_peer_rank: u32,
        /// The entry's.
        entry_peer_rank: u32,
    },
    /// The region index is past the exchanged table.
    #[error(
        "{what}: region index {region_index} was not exchanged ({region_count} regions; indices follow exchange_regions' order)"
    )]
    UnknownRegion {
        /// Destination or signal.
        what: &'static str,
        /// The index.
        region_index: u32,
        /// Regions exchanged.
        region_count: usize,
    },
    /// The table has no descriptor for that rank.
    #[error("{what}: region {region_index} has no descriptor for rank {peer_rank}")]
    UnknownRank {
        /// Destination or signal.
        what: &'static str,
        /// The index.
        region_index: u32,
        /// The rank.
        peer_rank: u32,
    },
    /// The range leaves the region.
    #[error(
        "{what}: {length_bytes} bytes at offset {offset_bytes} of region {region_index} run past its {region_length_bytes} bytes"
    )]
    OutOfBounds {
        /// Destination or signal.
        what: &'static str,
        /// The index.
        region_index: u32,
        /// Offset.
        offset_bytes: u64,
        /// Length.
        length_bytes: u64,
        /// The region's length.
        region_length_bytes: u64,
    },
    /// The signal word is not 8-byte aligned.
    #[error("the signal word at {address:#x} is not 8-byte aligned")]
    MisalignedSignal {
        /// Its address.
        address: u64,
    },
    /// The put's source is not registered memory of this rank.
    #[error(
        "put source: {length_bytes} bytes at {address:#x} are not inside memory this rank registered with this World (World.register); a put reads only memory registered with the sending rank's World"
    )]
    UnregisteredSource {
        /// The source address.
        address: u64,
        /// The put's bytes.
        length_bytes: u64,
    },
    /// The copy engine failed.
    #[error("copy engine: {0}")]
    Engine(Box<dyn std::error::Error + Send + Sync>),
}

/// A region table that `exchange_regions` appends to while the proxy thread runs. Readers keep
/// the `Arc` they got and look at the generation (one atomic load) to learn of a change,
/// so the proxy takes no lock per command.
#[derive(Debug, Default)]
pub struct SharedRegionTable {
    generation: AtomicU64,
    table: RwLock<Arc<ProxyRegionTable>>,
}

impl SharedRegionTable {
    /// A shared table holding `table` (generation 0).
    pub fn new(table: ProxyRegionTable) -> Self {
        Self {
            generation: AtomicU64::new(0),
            table: RwLock::new(Arc::new(table)),
        }
    }

    /// Regions in the table (the index the next appended region gets).
    pub fn region_count(&self) -> u32 {
        self.snapshot().1.regions.len() as u32
    }

    /// Appends an exchange's regions (`regions[index][rank]`, their `region_index` counting from
    /// [`Self::region_count`]); readers see them at their next command, and every index they
    /// resolved before still names the same region.
    pub fn append(&self, regions: Vec<Vec<RemoteRegionDescriptor>>) {
        let mut guard = self
            .table
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut table = (**guard).clone();
        table.regions.extend(regions);
        *guard = Arc::new(table);
        // Release, under the lock: a reader that sees the new generation reads the new table.
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Adds registered spans (address, bytes) that puts may read; from the first call on,
    /// a put from anywhere else is refused. Readers see them at their next command.
    pub fn add_sources(&self, spans: &[(u64, u64)]) {
        let mut guard = self
            .table
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut table = (**guard).clone();
        table
            .sources
            .get_or_insert_with(Vec::new)
            .extend_from_slice(spans);
        *guard = Arc::new(table);
        // Release, under the lock: a reader that sees the new generation reads the new table.
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Replaces the table (keeping the known sources when `table` has none); readers see the
    /// new one at their next command.
    pub fn replace(&self, mut table: ProxyRegionTable) {
        let mut guard = self
            .table
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if table.sources.is_none() {
            table.sources = guard.sources.clone();
        }
        *guard = Arc::new(table);
        // Release, under the lock: a reader that sees the new generation reads the new table.
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The generation (how many appends and replacements so far).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The current table and its generation.
    pub fn snapshot(&self) -> (u64, Arc<ProxyRegionTable>) {
        let guard = self
            .table
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        (self.generation.load(Ordering::Acquire), guard.clone())
    }
}

/// How a command that requests a completion is completed (see the module comment).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProxyCompletion {
    /// A marker enqueued behind the command, polled by the thread, which keeps consuming.
    #[default]
    Markers,
    /// The thread waits for the stream (`cuStreamSynchronize`) before the next entry.
    Synchronize,
}

impl ProxyCompletion {
    /// The names `ABOLETH_PROXY_COMPLETION` takes.
    pub const NAMES: [&'static str; 2] = ["markers", "synchronize"];

    /// The mode called `name` (one of [`Self::NAMES`]).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "markers" => Some(Self::Markers),
            "synchronize" => Some(Self::Synchronize),
            _ => None,
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Markers => "markers",
            Self::Synchronize => "synchronize",
        }
    }
}

/// One executor's host time in its engine's calls, by phase (nanoseconds of the monotonic
/// clock, counts of calls). Plain numbers: the proxy thread owns the executor and publishes
/// the sum over its rings ([`ProxyStatistics`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineTimes {
    /// `copy` calls (a put of nonzero length makes one per [`COPY_CHUNK_BYTES_MAX`] bytes).
    pub copies: u64,
    /// Time in them (`cuMemcpyAsync`).
    pub copy_ns: u64,
    /// `signal_set`/`signal_add` calls.
    pub signals: u64,
    /// Time in them (`cuStreamWriteValue64` or the signal kernels' launches).
    pub signal_ns: u64,
    /// `record_marker` calls (completions requested, [`ProxyCompletion::Markers`]).
    pub markers: u64,
    /// Time in them.
    pub marker_ns: u64,
    /// `wait_until_complete` calls (completions requested with
    /// [`ProxyCompletion::Synchronize`], and the waits at a stop).
    pub completion_waits: u64,
    /// Time in them (`cuStreamSynchronize`).
    pub completion_wait_ns: u64,
    /// `reached_marker` calls (completion polls).
    pub completion_polls: u64,
    /// Time in them.
    pub completion_poll_ns: u64,
}

impl EngineTimes {
    /// Nanoseconds in engine calls, every phase together.
    pub fn total_ns(&self) -> u64 {
        self.copy_ns
            + self.signal_ns
            + self.marker_ns
            + self.completion_wait_ns
            + self.completion_poll_ns
    }

    fn add(&mut self, other: &Self) {
        let (mine, theirs) = (self.to_array(), other.to_array());
        *self = Self::from_array(std::array::from_fn(|index| mine[index] + theirs[index]));
    }

    /// The fields' names, in declaration order.
    const FIELD_NAMES: [&'static str; ENGINE_TIMES_FIELDS] = [
        "copies",
        "copy_ns",
        "signals",
        "signal_ns",
        "markers",
        "marker_ns",
        "completion_waits",
        "completion_wait_ns",
        "completion_polls",
        "completion_poll_ns",
    ];

    fn to_array(self) -> [u64; ENGINE_TIMES_FIELDS] {
        [
            self.copies,
            self.copy_ns,
            self.signals,
            self.signal_ns,
            self.markers,
            self.marker_ns,
            self.completion_waits,
            self.completion_wait_ns,
            self.completion_polls,
            self.completion_poll_ns,
        ]
    }

    fn from_array(values: [u64; ENGINE_TIMES_FIELDS]) -> Self {
        let [
            copies,
            copy_ns,
            signals,
            signal_ns,
            markers,
            marker_ns,
            completion_waits,
            completion_wait_ns,
            completion_polls,
            completion_poll_ns,
        ] = values;
        Self {
            copies,
            copy_ns,
            signals,
            signal_ns,
            markers,
            marker_ns,
            completion_waits,
            completion_wait_ns,
            completion_polls,
            completion_poll_ns,
        }
    }
}

/// Fields of [`EngineTimes`].
const ENGINE_TIMES_FIELDS: usize = 10;

/// Nanoseconds from `*last` to now; moves `*last` to now (one clock read per phase boundary).
fn lap_ns(last: &mut Instant) -> u64 {
    let now = Instant::now();
    let elapsed = now.saturating_duration_since(*last).as_nanos() as u64;
    *last = now;
    elapsed
}

/// The largest copy a [`ProxyExecutor`] enqueues in one engine call: a longer put becomes
/// consecutive copies of at most this many bytes, in order on the ring's stream (the same
/// effects, in the same order, before the same signal). Why: on the GPU machine (2026-12-03,
/// two ranks on one H200 under CUDA MPS) one `cuMemcpyAsync` of 44 MB into the peer's
/// IPC-mapped buffer blocked the proxy thread inside the call until the GPU's bounded wait gave
/// up (20 s), while one of 29.5 MB returned at once. Chunks did not remove every such stall:
/// the first tens of megabytes into a freshly exchanged peer pool still stalled at times
/// (docs/COMPILED_MOE.md, the proxy's normal-mode timing), so this bounds one call's size, it is
/// not known to be the cure.
pub const COPY_CHUNK_BYTES_MAX: u64 = 8 << 20;

/// Executes one ring's commands with a [`CopyEngine`] (see the module comment for ordering).
#[derive(Debug)]
pub struct ProxyExecutor<E> {
    peer_rank: u32,
    /// At most this many bytes per engine copy ([`COPY_CHUNK_BYTES_MAX`] unless a test says).
    copy_chunk_bytes: u64,
    regions: Arc<SharedRegionTable>,
    table: Arc<ProxyRegionTable>,
    table_generation: u64,
    engine: E,
    completion: ProxyCompletion,
    /// The last marker value recorded (the ticket after the last completion requested).
    marker_recorded: u64,
    times: EngineTimes,
}

impl<E: CopyEngine> ProxyExecutor<E> {
    /// Splits puts into engine copies of at most `bytes` bytes (default
    /// [`COPY_CHUNK_BYTES_MAX`]; tests use small ones). `bytes` must be positive.
    pub fn set_copy_chunk_bytes(&mut self, bytes: u64) {
        assert!(
            bytes > 0,
            "a copy chunk of 0 bytes would never finish a put"
        );
        self.copy_chunk_bytes = bytes;
    }

    /// The executor of the ring to `peer_rank`, completing with markers.
    pub fn new(peer_rank: u32, regions: Arc<SharedRegionTable>, engine: E) -> Self {
        Self::with_completion(peer_rank, regions, engine, ProxyCompletion::default())
    }

    /// The executor of the ring to `peer_rank`, completing as `completion` says.
    pub fn with_completion(
        peer_rank: u32,
        regions: Arc<SharedRegionTable>,
        engine: E,
        completion: ProxyCompletion,
    ) -> Self {
        let (table_generation, table) = regions.snapshot();
        Self {
            peer_rank,
            copy_chunk_bytes: COPY_CHUNK_BYTES_MAX,
            regions,
            table,
            table_generation,
            engine,
            completion,
            marker_recorded: 0,
            times: EngineTimes::default(),
        }
    }

    /// The engine.
    pub fn engine(&self) -> &E {
        &self.engine
    }

    /// How requested completions are completed.
    pub fn completion(&self) -> ProxyCompletion {
        self.completion
    }

    /// Host time in the engine's calls so far.
    pub fn engine_times(&self) -> &EngineTimes {
        &self.times
    }

    /// Waits for everything enqueued.
    pub fn wait_until_complete(&mut self) -> Result<(), ProxyExecutionError> {
        let mut clock = Instant::now();
        let result = self.engine.wait_until_complete();
        self.times.completion_waits += 1;
        self.times.completion_wait_ns += lap_ns(&mut clock);
        result.map_err(|error| ProxyExecutionError::Engine(Box::new(error)))
    }
}

impl<E: CopyEngine> CommandExecutor for ProxyExecutor<E> {
    type Error = ProxyExecutionError;

    fn execute(&mut self, command: &ProxyCommand) -> Result<Execution, ProxyExecutionError> {
        // One load per command; the lock only after `exchange_regions` changed the table.
        if self.regions.generation() != self.table_generation {
            (self.table_generation, self.table) = self.regions.snapshot();
        }
        let table = &*self.table;
        table.check_peer(command, self.peer_rank)?;
        // Resolve every address before enqueuing anything, so a bad command leaves no half of
        // itself behind.
        let (put, signal) = command.operation.parts();
        let put = match put {
            Some(put) => {
                table.check_source(put.source_address, put.length_bytes)?;
                Some((
                    table.put_destination(put, self.peer_rank)?,
                    put.source_address,
                    put.length_bytes,
                ))
            }
            None => None,
        };
        let signal = match signal {
            Some(signal) => Some((
                table.signal_address(signal, self.peer_rank)?,
                signal.value,
                signal.operation,
            )),
            None => None,
        };
        let engine_error = |error: E::Error| ProxyExecutionError::Engine(Box::new(error));
        let mut clock = Instant::now();
        if let Some((destination, source, length_bytes)) = put
            && length_bytes > 0
        {
            let mut copied = 0;
            while copied < length_bytes {
                let chunk = (length_bytes - copied).min(self.copy_chunk_bytes);
                let result = self
                    .engine
                    .copy(destination + copied, source + copied, chunk);
                self.times.copies += 1;
                result.map_err(engine_error)?;
                copied += chunk;
            }
            self.times.copy_ns += lap_ns(&mut clock);
        }
        if let Some((address, value, operation)) = signal {
            let result = match operation {
                SignalOperation::Set => self.engine.signal_set(address, value),
                SignalOperation::Add => self.engine.signal_add(address, value),
            };
            self.times.signals += 1;
            self.times.signal_ns += lap_ns(&mut clock);
            result.map_err(engine_error)?;
        }
        if !command.completion_requested {
            return Ok(Execution::Enqueued);
        }
        match self.completion {
            ProxyCompletion::Synchronize => {
                let result = self.engine.wait_until_complete();
                self.times.completion_waits += 1;
                self.times.completion_wait_ns += lap_ns(&mut clock);
                result.map_err(engine_error)?;
                Ok(Execution::Complete)
            }
            ProxyCompletion::Markers => {
                let value = command.ticket + 1;
                let result = self.engine.record_marker(value);
                self.times.markers += 1;
                self.times.marker_ns += lap_ns(&mut clock);
                result.map_err(engine_error)?;
                self.marker_recorded = value;
                Ok(Execution::Enqueued)
            }
        }
    }

    fn completions_reached(&mut self, wait: bool) -> Result<u64, ProxyExecutionError> {
        if wait {
            // Everything enqueued has taken effect, markers included.
            self.wait_until_complete()?;
            return Ok(self.marker_recorded);
        }
        let mut clock = Instant::now();
        let result = self.engine.reached_marker();
        self.times.completion_polls += 1;
        self.times.completion_poll_ns += lap_ns(&mut clock);
        result.map_err(|error| ProxyExecutionError::Engine(Box::new(error)))
    }
}

/// The CUDA copy engine: one stream per ring, signals as stream writes or one-thread kernels,
/// completion markers as SET signals to a word of pinned host memory (see the module comment).
///
/// Its copies, stream writes and waits expect the device's context to be current on the
/// calling thread and do not make it current themselves (a driver call saved per operation):
/// the proxy thread makes it current once, at its start. Elsewhere the driver refuses them
/// (`CUDA_ERROR_INVALID_CONTEXT`), which stops the ring with that reason.
#[derive(Debug)]
pub struct CudaCopyEngine {
    stream: Stream,
    kernels: Arc<RuntimeKernels>,
    stream_writes: bool,
    /// One 64-byte line of pinned host memory mapped for the GPU: word 0 is the marker.
    marker_memory: PinnedHostMemory,
}

impl CudaCopyEngine {
    /// An engine with its own stream on `device`.
    pub fn new(device: &Arc<Device>, kernels: Arc<RuntimeKernels>) -> RuntimeResult<Self> {
        let marker_memory = PinnedHostMemory::allocate(device, 64)?;
        let engine = Self {
            stream: Stream::create(device)?,
            kernels,
            stream_writes: device.supports_64_bit_stream_memory_operations(),
            marker_memory,
        };
        engine.marker_word().store(0, Ordering::Release);
        Ok(engine)
    }

    fn marker_word(&self) -> &AtomicU64 {
        // SAFETY: the pinned allocation is page-aligned, at least 8 bytes, lives as long as
        // `self`, and is accessed only atomically: by this view and by the GPU's aligned
        // 64-bit stream writes (or the set kernel's store).
        unsafe { &*self.marker_memory.host_pointer().cast::<AtomicU64>() }
    }

    /// Whether SET signals use `cuStreamWriteValue64` (else the set kernel).
    pub fn uses_stream_writes(&self) -> bool {
        self.stream_writes
    }
}

impl CopyEngine for CudaCopyEngine {
    type Error = RuntimeError;

    fn copy(&mut self, destination: u64, source: u64, length_bytes: u64) -> RuntimeResult<()> {
        self.stream
            .copy_async_in_current_context(destination, source, length_bytes)
    }

    fn signal_set(&mut self, address: u64, value: u64) -> RuntimeResult<()> {
        if self.stream_writes {
            match self
                .stream
                .write_value_64_in_current_context(address, value)
            {
                Ok(()) => return Ok(()),
                // The driver refuses at enqueue time (nothing was enqueued), e.g. for memory
                // it cannot write with stream operations: the kernel has the same ordering.
                Err(error) => {
                    tracing::warn!(%error, "cuStreamWriteValue64 refused; SET signals use the set kernel from now on");
                    self.stream_writes = false;
                }
            }
        }
        self.kernels.signal_set(&self.stream, address, value)
    }

    fn signal_add(&mut self, address: u64, value: u64) -> RuntimeResult<()> {
        self.kernels.signal_add(&self.stream, address, value)
    }

    fn wait_until_complete(&mut self) -> RuntimeResult<()> {
        self.stream.synchronize_in_current_context()
    }

    fn record_marker(&mut self, value: u64) -> RuntimeResult<()> {
        let address = self.marker_memory.device_address();
        self.signal_set(address, value)
    }

    fn reached_marker(&mut self) -> RuntimeResult<u64> {
        // Acquire: the stream wrote the marker after a system-wide fence that follows every
        // earlier copy of the stream, so their effects happen before what follows this load
        // (the consumer's release of completion_counter).
        Ok(self.marker_word().load(Ordering::Acquire))
    }
}

/// How the proxy thread waits for work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProxyThreadOptions {
    /// Commands one ring may run before the thread looks at the next ring.
    pub maximum_commands_per_turn: usize,
    /// Idle turns spent spinning before each idle turn also yields the CPU. The thread never
    /// sleeps: a GPU producer expects an answer within microseconds.
    pub spin_turns_before_yield: u32,
    /// How requested completions are completed (the World's executors; `ABOLETH_PROXY_COMPLETION`).
    pub completion: ProxyCompletion,
}

impl Default for ProxyThreadOptions {
    fn default() -> Self {
        Self {
            maximum_commands_per_turn: 64,
            spin_turns_before_yield: 4096,
            completion: ProxyCompletion::default(),
        }
    }
}

/// Idle turns between two publications of the statistics while nothing happens (a turn that
/// executed a command or published a completion always publishes): a reader sees idle time at
/// most this many turns old.
pub const STATISTICS_IDLE_TURNS: u32 = 1024;

/// The proxy thread's work and host time by phase, every ring together, since it started.
/// Every nanosecond of the thread's loop after its start lands in exactly one `*_ns` field
/// (the monotonic clock, read once per phase boundary): engine calls (`engine`'s `copy_ns`,
/// `signal_ns`, `marker_ns`, `completion_wait_ns`, `completion_poll_ns`), the consumer's own work in turns
/// that executed something (`bookkeeping_ns`: ring loads, decoding, checks, publishing), and
/// turns that found nothing (`idle_ns`, completion polls excluded).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyStatistics {
    /// Commands executed.
    pub commands_executed: u64,
    /// Stores to a ring's `completion_counter`.
    pub completions_published: u64,
    /// The engines' calls and their time, every ring together.
    pub engine: EngineTimes,
    /// Turns (one look at every ring) that executed something.
    pub busy_turns: u64,
    /// Their time outside engine calls.
    pub bookkeeping_ns: u64,
    /// Turns that executed nothing.
    pub idle_turns: u64,
    /// Their time outside engine calls (completion polls).
    pub idle_ns: u64,
}

/// Fields of [`ProxyStatistics`], the engine's flattened.
const STATISTICS_FIELDS: usize = 6 + ENGINE_TIMES_FIELDS;

impl ProxyStatistics {
    /// The fields by name, the engine's flattened, in declaration order (the Python dict's keys).
    pub fn fields(&self) -> [(&'static str, u64); STATISTICS_FIELDS] {
        let values = self.to_array();
        let mut names = ["commands_executed", "completions_published"]
            .into_iter()
            .chain(EngineTimes::FIELD_NAMES)
            .chain(["busy_turns", "bookkeeping_ns", "idle_turns", "idle_ns"]);
        std::array::from_fn(|index| (names.next().expect("one name per field"), values[index]))
    }

    fn to_array(self) -> [u64; STATISTICS_FIELDS] {
        let mut values = [self.commands_executed, self.completions_published]
            .into_iter()
            .chain(self.engine.to_array())
            .chain([
                self.busy_turns,
                self.bookkeeping_ns,
                self.idle_turns,
                self.idle_ns,
            ]);
        std::array::from_fn(|_| values.next().expect("one value per field"))
    }

    fn from_array(values: [u64; STATISTICS_FIELDS]) -> Self {
        let engine = std::array::from_fn(|index| values[2 + index]);
        let [busy_turns, bookkeeping_ns, idle_turns, idle_ns] =
            std::array::from_fn(|index| values[2 + ENGINE_TIMES_FIELDS + index]);
        Self {
            commands_executed: values[0],
            completions_published: values[1],
            engine: EngineTimes::from_array(engine),
            busy_turns,
            bookkeeping_ns,
            idle_turns,
            idle_ns,
        }
    }

    /// Nanoseconds accounted, every phase together.
    pub fn total_ns(&self) -> u64 {
        self.engine.total_ns() + self.bookkeeping_ns + self.idle_ns
    }
}

/// [`ProxyStatistics`] in atomics: written by the proxy thread alone, read by anyone. A
/// sequence lock makes a read one publication's totals, not fields of two (the writer makes
/// the sequence odd, stores, makes it even; a reader retries while it is odd or moved).
#[derive(Debug, Default)]
struct SharedStatistics {
    sequence: AtomicU64,
    fields: [AtomicU64; STATISTICS_FIELDS],
}

impl SharedStatistics {
    fn publish(&self, statistics: &ProxyStatistics) {
        let sequence = self.sequence.load(Ordering::Relaxed);
        self.sequence.store(sequence + 1, Ordering::Relaxed);
        // Release fence: a reader that sees any of the stores below also sees the odd sequence.
        std::sync::atomic::fence(Ordering::Release);
        for (cell, value) in self.fields.iter().zip(statistics.to_array()) {
            cell.store(value, Ordering::Relaxed);
        }
        self.sequence.store(sequence + 2, Ordering::Release);
    }

    fn read(&self) -> ProxyStatistics {
        loop {
            let before = self.sequence.load(Ordering::Acquire);
            let values = std::array::from_fn(|index| self.fields[index].load(Ordering::Relaxed));
            // Acquire fence: the loads above happen before the sequence is read again.
            std::sync::atomic::fence(Ordering::Acquire);
            if before.is_multiple_of(2) && self.sequence.load(Ordering::Relaxed) == before {
                return ProxyStatistics::from_array(values);
            }
            std::hint::spin_loop();
        }
    }
}

/// One ring the proxy thread serves.
pub struct ProxyRingService<M, E> {
    /// The peer.
    pub peer_rank: u32,
    /// The ring's consumer.
    pub consumer: RingConsumer<M>,
    /// Its executor.
    pub executor: ProxyExecutor<E>,
}

/// The proxy thread of a process: polls every ring in turn until stopped.
#[derive(Debug)]
pub struct ProxyThread {
    stop: Arc<AtomicBool>,
    failures: Arc<Mutex<Vec<String>>>,
    statistics: Arc<SharedStatistics>,
    handle: Option<JoinHandle<()>>,
}

impl ProxyThread {
    /// Starts the thread. `on_start` runs first on the thread (the World makes the device's
    /// context current there, which the CUDA engine's calls rely on); an error from it is
    /// reported as a failure and the thread ends.
    pub fn spawn<M, E>(
        rank: u32,
        rings: Vec<ProxyRingService<M, E>>,
        options: ProxyThreadOptions,
        on_start: impl FnOnce() -> Result<(), String> + Send + 'static,
    ) -> std::io::Result<Self>
    where
        M: RingMemory + Send + 'static,
        E: CopyEngine + Send + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let statistics = Arc::new(SharedStatistics::default());
        let handle = {
            let stop = stop.clone();
            let failures = failures.clone();
            let statistics = statistics.clone();
            std::thread::Builder::new()
                .name(format!("aboleth-proxy-{rank}"))
                .spawn(move || {
                    if let Err(failure) = on_start() {
                        failures.lock().expect("failures lock").push(failure);
                        return;
                    }
                    run_proxy(rank, rings, options, &stop, &failures, &statistics);
                })?
        };
        Ok(Self {
            stop,
            failures,
            statistics,
            handle: Some(handle),
        })
    }

    /// The failures so far, one line per stopped ring.
    pub fn failures(&self) -> Vec<String> {
        self.failures.lock().expect("failures lock").clone()
    }

    /// Commands executed so far, all rings together.
    pub fn commands_executed(&self) -> u64 {
        self.statistics().commands_executed
    }

    /// The thread's work and time by phase so far (see [`ProxyStatistics`]); once stopped, the
    /// final totals.
    pub fn statistics(&self) -> ProxyStatistics {
        self.statistics.read()
    }

    /// Runs what is already published, waits for its effects, and ends the thread.
    pub fn stop(self) -> Vec<String> {
        self.stop_with_statistics().0
    }

    /// [`Self::stop`], also returning the thread's final statistics.
    pub fn stop_with_statistics(mut self) -> (Vec<String>, ProxyStatistics) {
        self.stop_and_join();
        (self.failures(), self.statistics())
    }

    fn stop_and_join(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(handle) = self.handle.take()
            && handle.join().is_err()
        {
            self.failures
                .lock()
                .expect("failures lock")
                .push("the proxy thread panicked".to_owned());
        }
    }
}

impl Drop for ProxyThread {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

fn run_proxy<M: RingMemory, E: CopyEngine>(
    rank: u32,
    mut rings: Vec<ProxyRingService<M, E>>,
    options: ProxyThreadOptions,
    stop: &AtomicBool,
    failures: &Mutex<Vec<String>>,
    shared_statistics: &SharedStatistics,
) {
    let mut stopped = vec![false; rings.len()];
    let mut idle_turns: u32 = 0;
    let fail = |peer_rank: u32, error: &dyn std::fmt::Display| {
        tracing::error!(rank, peer_rank, %error, "proxy ring stopped");
        failures
            .lock()
            .expect("failures lock")
            .push(format!("ring to rank {peer_rank}: {error}"));
    };
    // The thread's own totals; the engines' live in the executors and are summed in when
    // published.
    let mut thread_statistics = ProxyStatistics::default();
    // Engine nanoseconds and completions published so far, every ring together.
    let progress = |rings: &[ProxyRingService<M, E>]| -> (u64, u64) {
        rings
            .iter()
            .fold((0, 0), |(engine_ns, completions), service| {
                (
                    engine_ns + service.executor.engine_times().total_ns(),
                    completions + service.consumer.completions_published(),
                )
            })
    };
    let publish = |rings: &[ProxyRingService<M, E>], thread_statistics: &ProxyStatistics| {
        let mut engine = EngineTimes::default();
        let mut completions_published = 0;
        for service in rings {
            engine.add(service.executor.engine_times());
            completions_published += service.consumer.completions_published();
        }
        shared_statistics.publish(&ProxyStatistics {
            completions_published,
            engine,
            ..*thread_statistics
        });
    };
    let mut clock = Instant::now();
    let (mut engine_ns_before, mut completions_before) = progress(&rings);
    loop {
        // Read before polling, so that commands published before `stop` was set are run by the
        // turn that follows.
        let stopping = stop.load(Ordering::Acquire);
        let mut executed_this_turn = 0;
        for (service, stopped) in rings.iter_mut().zip(&mut stopped) {
            if *stopped {
                continue;
            }
            match service
                .consumer
                .poll_batch(&mut service.executor, options.maximum_commands_per_turn)
            {
                Ok(executed) => executed_this_turn += executed,
                Err(error) => {
                    *stopped = true;
                    fail(service.peer_rank, &error);
                }
            }
        }
        // The turn's time outside the engines' calls, which the executors counted.
        let (engine_ns_after, completions_after) = progress(&rings);
        let turn_ns = lap_ns(&mut clock).saturating_sub(engine_ns_after - engine_ns_before);
        engine_ns_before = engine_ns_after;
        let completed_this_turn = completions_after != completions_before;
        completions_before = completions_after;
        if executed_this_turn > 0 {
            thread_statistics.commands_executed += executed_this_turn as u64;
            thread_statistics.busy_turns += 1;
            thread_statistics.bookkeeping_ns += turn_ns;
            publish(&rings, &thread_statistics);
            thread_statistics.bookkeeping_ns += lap_ns(&mut clock);
            idle_turns = 0;
            continue;
        }
        thread_statistics.idle_turns += 1;
        thread_statistics.idle_ns += turn_ns;
        if stopping {
            break;
        }
        idle_turns = idle_turns.saturating_add(1);
        // A turn that only published a completion publishes the statistics too, so a reader
        // that saw the completion sees it counted.
        if completed_this_turn || idle_turns.is_multiple_of(STATISTICS_IDLE_TURNS) {
            publish(&rings, &thread_statistics);
        }
        std::hint::spin_loop();
        if idle_turns > options.spin_turns_before_yield {
            std::thread::yield_now();
        }
        thread_statistics.idle_ns += lap_ns(&mut clock);
    }
    // Let the copies already enqueued land before the World frees anything, and publish the
    // completions still outstanding.
    for (service, stopped) in rings.iter_mut().zip(&stopped) {
        if !stopped
            && let Err(error) = service
                .consumer
                .publish_completions(&mut service.executor, true)
        {
            fail(service.peer_rank, &error);
        }
    }
    publish(&rings, &thread_statistics);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_appended_exchange_leaves_the_earlier_regions_where_they_were() {
        let descriptor = |index: u32, base: u64| RemoteRegionDescriptor {
            base_address: base,
            length_bytes: 64,
            peer_rank: 0,
            region_index: index,
            ..Default::default()
        };
        let shared = SharedRegionTable::default();
        assert_eq!(shared.region_count(), 0);
        shared.append(vec![
            vec![descriptor(0, 0x1000)],
            vec![descriptor(1, 0x2000)],
        ]);
        let (first_generation, _) = shared.snapshot();
        // A second Buffer's exchange: its pool is region 2, and region 0 is still the first's.
        assert_eq!(shared.region_count(), 2);
        shared.append(vec![vec![descriptor(2, 0x9000)]]);
        let (generation, table) = shared.snapshot();
        assert!(generation > first_generation);
        assert_eq!(
            table.resolve("put destination", 0, 0, 8, 8).unwrap(),
            0x1008
        );
        assert_eq!(
            table.resolve("put destination", 2, 0, 8, 8).unwrap(),
            0x9008
        );
    }

    #[test]
    fn a_put_reads_only_registered_memory_once_sources_are_known() {
        let shared = SharedRegionTable::default();
        assert!(shared.snapshot().1.check_source(0xdead, 8).is_ok()); // no sources: unchecked
        shared.add_sources(&[(0x1000, 64), (0x4000, 16)]);
        let table = shared.snapshot().1;
        assert!(table.check_source(0x1000, 64).is_ok());
        assert!(table.check_source(0x4008, 8).is_ok());
        assert!(table.check_source(0x7000, 0).is_ok()); // an empty put reads nothing
        let error = table.check_source(0x1030, 32).unwrap_err();
        assert_eq!(
            error.to_string(),
            "put source: 32 bytes at 0x1030 are not inside memory this rank registered with this World (World.register); a put reads only memory registered with the sending rank's World"
        );
        assert!(table.check_source(u64::MAX - 4, 8).is_err());
    }

    #[test]
    fn the_region_table_resolves_and_bounds_checks() {
        let descriptor = |rank: u32, base: u64| RemoteRegionDescriptor {
            base_address: base,
            length_bytes: 64,
            peer_rank: rank,
            ..Default::default()
        };
        let table = ProxyRegionTable::new(vec![vec![descriptor(0, 0x1000), descriptor(1, 0x2000)]]);
        assert_eq!(table.resolve("signal", 0, 1, 56, 8).unwrap(), 0x2038);
        let error = table.resolve("signal", 0, 1, 60, 8).unwrap_err();
        assert_eq!(
            error.to_string(),
            "signal: 8 bytes at offset 60 of region 0 run past its 64 bytes"
        );
        let error = table.resolve("put destination", 3, 1, 0, 8).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("region index 3 was not exchanged (1 regions")
        );
        assert!(table.resolve("signal", 0, 2, 0, 8).is_err());
    }
}
