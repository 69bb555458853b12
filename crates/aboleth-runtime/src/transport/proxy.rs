//! The proxy transport's host side: per peer a command ring in host-pinned memory mapped for the
//! GPU ([`PinnedRing`], aboleth-abi's `ProxyRingHeader` then `ProxyRingEntry` slots), and one
//! proxy thread per process ([`ProxyThread`]) that runs each ring's consumer
//! (`crate::proxy_ring::RingConsumer`) with a [`ProxyExecutor`]: it resolves a command's region
//! indices through the exchanged region table ([`ProxyRegionTable`]) and drives a
//! [`CopyEngine`] — the CUDA copy engine ([`CudaCopyEngine`]) or a test double.
//!
//! Execution and ordering. Each ring has its own CUDA stream; its commands are enqueued on it in
//! ticket order:
//! - a put is `cuMemcpyAsync(peer's mapped destination, local source)`;
//! - a SET signal is `cuStreamWriteValue64` with default flags, which the driver precedes with
//!   a system-wide memory fence; an ADD signal is a one-thread kernel doing `fence.sc.sys` then
//!   a system-scope release atomic add (CUDA has no stream atomic), as is a SET on a device
//!   without 64-bit stream memory operations;
//! - stream order starts the signal only once the put before it has completed, i.e. once the
//!   copy engine's writes have been performed at the destination; the fence in front of the
//!   signal's store or atomic then makes them visible system-wide before the signal. So a
//!   receiver that reads the new signal value with acquire also reads the data. The same holds
//!   across commands: every signal is ordered after every earlier put of its ring;
//! - completion: a command that requests one makes the executor wait for the stream
//!   (`cuStreamSynchronize`) before returning, so the consumer's release of
//!   `completion_counter` follows the effects of that command and of every earlier one (one
//!   stream, in order). Commands that request none return once enqueued (the producer may not
//!   reuse their source buffers before a later completion anyway), which keeps the copy engine
//!   busy while the proxy reads the next entries. A NOP or DRAIN enqueues nothing.
//!
//! Flow control on a full ring is the producer's (it waits for `consumer_head`). What this
//! module does not do: the ibverbs path (a peer on another host), cross-ring ordering, or
//! re-running a command after a failure (the ring stops, [`ProxyThread::failures`] says why).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

use aboleth_abi::RemoteRegionDescriptor;
use aboleth_abi::proxy::{ProxyCommand, ProxyRegions, SignalOperation};

use crate::cuda::{Device, PinnedHostMemory, RuntimeKernels, Stream};
use crate::error::{RuntimeError, RuntimeResult};
use crate::proxy_ring::{CommandExecutor, HostRing, RingConsumer, RingMemory, RingWord};

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
}

/// The exchanged region table as the proxy reads it: `regions[index][rank]`, addresses as this
/// rank's GPU reaches them (mapped peer memory).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProxyRegionTable {
    regions: Vec<Vec<RemoteRegionDescriptor>>,
}

impl ProxyRegionTable {
    /// The table of an exchange (`RegionTables::remote`).
    pub fn new(regions: Vec<Vec<RemoteRegionDescriptor>>) -> Self {
        Self { regions }
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
    /// The copy engine failed.
    #[error("copy engine: {0}")]
    Engine(Box<dyn std::error::Error + Send + Sync>),
}

/// A region table that `exchange_regions` replaces while the proxy thread runs.
pub type SharedRegionTable = Arc<RwLock<Arc<ProxyRegionTable>>>;

/// Executes one ring's commands with a [`CopyEngine`] (see the module comment for ordering).
#[derive(Debug)]
pub struct ProxyExecutor<E> {
    peer_rank: u32,
    regions: SharedRegionTable,
    engine: E,
}

impl<E: CopyEngine> ProxyExecutor<E> {
    /// The executor of the ring to `peer_rank`.
    pub fn new(peer_rank: u32, regions: SharedRegionTable, engine: E) -> Self {
        Self {
            peer_rank,
            regions,
            engine,
        }
    }

    /// The engine.
    pub fn engine(&self) -> &E {
        &self.engine
    }

    /// Waits for everything enqueued.
    pub fn wait_until_complete(&mut self) -> Result<(), ProxyExecutionError> {
        self.engine
            .wait_until_complete()
            .map_err(|error| ProxyExecutionError::Engine(Box::new(error)))
    }
}

impl<E: CopyEngine> CommandExecutor for ProxyExecutor<E> {
    type Error = ProxyExecutionError;

    fn execute(&mut self, command: &ProxyCommand) -> Result<(), ProxyExecutionError> {
        let table = self
            .regions
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        table.check_peer(command, self.peer_rank)?;
        // Resolve every address before enqueuing anything, so a bad command leaves no half of
        // itself behind.
        let (put, signal) = command.operation.parts();
        let put = match put {
            Some(put) => Some((
                table.put_destination(put, self.peer_rank)?,
                put.source_address,
                put.length_bytes,
            )),
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
        if let Some((destination, source, length_bytes)) = put
            && length_bytes > 0
        {
            self.engine
                .copy(destination, source, length_bytes)
                .map_err(engine_error)?;
        }
        if let Some((address, value, operation)) = signal {
            match operation {
                SignalOperation::Set => self.engine.signal_set(address, value),
                SignalOperation::Add => self.engine.signal_add(address, value),
            }
            .map_err(engine_error)?;
        }
        if command.completion_requested {
            self.engine.wait_until_complete().map_err(engine_error)?;
        }
        Ok(())
    }
}

/// The CUDA copy engine: one stream per ring, signals as stream writes or one-thread kernels
/// (see the module comment).
#[derive(Debug)]
pub struct CudaCopyEngine {
    stream: Stream,
    kernels: Arc<RuntimeKernels>,
    stream_writes: bool,
}

impl CudaCopyEngine {
    /// An engine with its own stream on `device`.
    pub fn new(device: &Arc<Device>, kernels: Arc<RuntimeKernels>) -> RuntimeResult<Self> {
        Ok(Self {
            stream: Stream::create(device)?,
            kernels,
            stream_writes: device.supports_64_bit_stream_memory_operations(),
        })
    }

    /// Whether SET signals use `cuStreamWriteValue64` (else the set kernel).
    pub fn uses_stream_writes(&self) -> bool {
        self.stream_writes
    }
}

impl CopyEngine for CudaCopyEngine {
    type Error = RuntimeError;

    fn copy(&mut self, destination: u64, source: u64, length_bytes: u64) -> RuntimeResult<()> {
        self.stream.copy_async(destination, source, length_bytes)
    }

    fn signal_set(&mut self, address: u64, value: u64) -> RuntimeResult<()> {
        if self.stream_writes {
            match self.stream.write_value_64(address, value) {
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
        self.stream.synchronize()
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
}

impl Default for ProxyThreadOptions {
    fn default() -> Self {
        Self {
            maximum_commands_per_turn: 64,
            spin_turns_before_yield: 4096,
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
    commands_executed: Arc<AtomicU64>,
    handle: Option<JoinHandle<()>>,
}

impl ProxyThread {
    /// Starts the thread. `on_start` runs first on the thread (the CUDA engine makes its
    /// context current there); an error from it is reported as a failure and the thread ends.
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
        let commands_executed = Arc::new(AtomicU64::new(0));
        let handle = {
            let stop = stop.clone();
            let failures = failures.clone();
            let commands_executed = commands_executed.clone();
            std::thread::Builder::new()
                .name(format!("aboleth-proxy-{rank}"))
                .spawn(move || {
                    if let Err(failure) = on_start() {
                        failures.lock().expect("failures lock").push(failure);
                        return;
                    }
                    run_proxy(rank, rings, options, &stop, &failures, &commands_executed);
                })?
        };
        Ok(Self {
            stop,
            failures,
            commands_executed,
            handle: Some(handle),
        })
    }

    /// The failures so far, one line per stopped ring.
    pub fn failures(&self) -> Vec<String> {
        self.failures.lock().expect("failures lock").clone()
    }

    /// Commands executed so far, all rings together.
    pub fn commands_executed(&self) -> u64 {
        self.commands_executed.load(Ordering::Relaxed)
    }

    /// Runs what is already published, waits for its effects, and ends the thread.
    pub fn stop(mut self) -> Vec<String> {
        self.stop_and_join();
        self.failures()
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
    commands_executed: &AtomicU64,
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
        if executed_this_turn > 0 {
            commands_executed.fetch_add(executed_this_turn as u64, Ordering::Relaxed);
            idle_turns = 0;
            continue;
        }
        if stopping {
            break;
        }
        idle_turns = idle_turns.saturating_add(1);
        std::hint::spin_loop();
        if idle_turns > options.spin_turns_before_yield {
            std::thread::yield_now();
        }
    }
    // Let the copies already enqueued land before the World frees anything.
    for (service, stopped) in rings.iter_mut().zip(&stopped) {
        if !stopped && let Err(error) = service.executor.wait_until_complete() {
            fail(service.peer_rank, &error);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
