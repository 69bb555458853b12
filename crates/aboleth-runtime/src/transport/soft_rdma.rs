//! The mlx5 transport over the software NIC (`connect_all("rdma")` with
//! `ABOLETH_RDMA_DEVICE=soft`): for each mlx5 peer, a queue pair whose send ring, doorbell
//! record, collapsed CQ and UAR word are host-pinned, device-mapped memory (the GPU writes WQEs
//! and rings there; [`ENDPOINT_FLAG_NIC_BUFFERS_IN_HOST_MEMORY`] makes the generated
//! code publish with system-scope fences), its queue management block and atomic-result word in
//! GPU memory, and one [`SoftNicThread`] per process executing every QP's WQEs through a
//! [`CudaDeviceAccess`]: payloads are copy-engine copies from this rank's GPU memory into the
//! peer's through its CUDA IPC mapping, atomics a system-scope compare-and-swap kernel.
//!
//! Keys: every exchanged region has lkey = rkey = [`data_region_key`] of its index in the
//! exchanged table (the same on every rank, so no key travels in the exchange); each QP's
//! atomic-result word has its own lkey. Region tables and endpoint handles get them from
//! [`SoftRdma::assign_keys`] and [`SoftRdma::fill_endpoint_handle`]; the NIC learns each
//! exchange's regions through [`SoftRdma::add_regions`], which pauses its thread between polls.
//!
//! What it does not do: write-with-immediate (no receive queues or receive CQ yet: the handle's
//! `receive_context_address` is 0, so kernels compiled with immediate signals are refused by
//! their endpoint check), the staged path (the GPU rings the UAR itself), non-collapsed CQs,
//! peers on other hosts. Its latency is a host thread's and PCIe's, not a NIC's.

use std::sync::Arc;

use aboleth_abi::endpoint::ENDPOINT_FLAG_NIC_BUFFERS_IN_HOST_MEMORY;
use aboleth_abi::mlx5::{Cqe64, DoorbellRecord, WQE_BASIC_BLOCK_BYTES};
use aboleth_abi::region::RemoteRegionDescriptor;
use aboleth_abi::{EndpointHandle, LocalRegionDescriptor, Mlx5QueueManagement, Transport};
use aboleth_nic::QueuePairConfig;

use crate::cuda::{Device, DeviceMemory, PinnedHostMemory, RuntimeKernels, Stream};
use crate::error::{RuntimeError, RuntimeResult};
use crate::exchange::RegionRecord;
use crate::soft_nic::{
    DeviceAccess, MappedNicMemory, MappedRegion, RegionBacking, SoftNic, SoftNicStatistics,
    SoftNicThread,
};

/// Send ring size of every soft QP, in basic blocks (64 KiB).
pub const SOFT_RDMA_SQ_BASIC_BLOCK_COUNT: u32 = 1024;
/// QPN of the QP to peer `p` is `SOFT_RDMA_QPN_BASE + p`.
pub const SOFT_RDMA_QPN_BASE: u32 = 0x100;
/// Keys of exchanged regions start here.
const DATA_KEY_BASE: u32 = 0x0100_0000;
/// Keys of the atomic-result words start here (one per peer).
const ATOMIC_RESULT_KEY_BASE: u32 = 0x0200_0000;
/// Staging bytes of the device access (reads and writes between host and GPU go through it).
const STAGING_BYTES: usize = 1 << 20;
/// Alignment of each queue structure in the pinned block (a CQE's and a basic block's size).
const QUEUE_ALIGNMENT_BYTES: usize = 64;

/// The lkey and rkey of the exchanged region at `region_index`.
pub fn data_region_key(region_index: u32) -> u32 {
    DATA_KEY_BASE + region_index
}

/// GPU memory through the CUDA driver, for the software NIC: a non-blocking stream (it never
/// waits for the user's kernels on the legacy stream), a pinned staging buffer, and the runtime's
/// compare-and-swap kernel. Every operation synchronizes the stream before it returns.
#[derive(Debug)]
pub struct CudaDeviceAccess {
    stream: Stream,
    kernels: Arc<RuntimeKernels>,
    staging: PinnedHostMemory,
}

impl CudaDeviceAccess {
    /// A stream and a staging buffer on `device`.
    pub fn new(device: &Arc<Device>, kernels: Arc<RuntimeKernels>) -> RuntimeResult<Self> {
        Ok(Self {
            stream: Stream::create(device)?,
            kernels,
            staging: PinnedHostMemory::allocate(device, STAGING_BYTES)?,
        })
    }
}

impl DeviceAccess for CudaDeviceAccess {
    fn read(&self, address: u64, bytes: &mut [u8]) -> Result<(), String> {
        for (index, chunk) in bytes.chunks_mut(STAGING_BYTES).enumerate() {
            let source = address + (index * STAGING_BYTES) as u64;
            self.stream
                .copy_async(self.staging.device_address(), source, chunk.len() as u64)
                .and_then(|()| self.stream.synchronize())
                .map_err(|error| error.to_string())?;
            // SAFETY: the staging buffer has STAGING_BYTES >= chunk.len() bytes, and the copy
            // into it has completed.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.staging.host_pointer(),
                    chunk.as_mut_ptr(),
                    chunk.len(),
                )
            };
        }
        Ok(())
    }

    fn write(&self, address: u64, bytes: &[u8]) -> Result<(), String> {
        for (index, chunk) in bytes.chunks(STAGING_BYTES).enumerate() {
            // SAFETY: as in `read`; the previous chunk's copy has completed.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    chunk.as_ptr(),
                    self.staging.host_pointer(),
                    chunk.len(),
                )
            };
            let destination = address + (index * STAGING_BYTES) as u64;
            self.stream
                .copy_async(
                    destination,
                    self.staging.device_address(),
                    chunk.len() as u64,
                )
                .and_then(|()| self.stream.synchronize())
                .map_err(|error| error.to_string())?;
        }
        Ok(())
    }

    fn copy(&self, destination: u64, source: u64, length: u64) -> Result<(), String> {
        self.stream
            .copy_async(destination, source, length)
            .and_then(|()| self.stream.synchronize())
            .map_err(|error| error.to_string())
    }

    fn compare_and_swap_u64(
        &self,
        address: u64,
        expected: u64,
        desired: u64,
    ) -> Result<u64, String> {
        self.kernels
            .compare_and_swap(
                &self.stream,
                address,
                (expected, desired),
                self.staging.device_address(),
            )
            .and_then(|()| self.stream.synchronize())
            .map_err(|error| error.to_string())?;
        // SAFETY: the kernel stored the found word at the staging buffer's start and has
        // completed; a volatile read since the GPU wrote it.
        Ok(unsafe { std::ptr::read_volatile(self.staging.host_pointer().cast::<u64>()) })
    }
}

/// Where one QP's structures are in its pinned block, as offsets from the block's start.
#[derive(Clone, Copy, Debug)]
struct QueueOffsets {
    doorbell_record: usize,
    cq: usize,
    uar: usize,
    total: usize,
}

impl QueueOffsets {
    fn new(sq_basic_block_count: u32) -> Self {
        let align = |bytes: usize| bytes.next_multiple_of(QUEUE_ALIGNMENT_BYTES);
        let doorbell_record = sq_basic_block_count as usize * WQE_BASIC_BLOCK_BYTES;
        let cq = doorbell_record + align(DoorbellRecord::SIZE_BYTES);
        let uar = cq + align(Cqe64::SIZE_BYTES);
        Self {
            doorbell_record,
            cq,
            uar,
            total: uar + QUEUE_ALIGNMENT_BYTES,
        }
    }
}

/// One QP to a peer: its pinned queues and its GPU-side words.
#[derive(Debug)]
struct SoftQueuePair {
    peer_rank: u32,
    qpn: u32,
    queues: PinnedHostMemory,
    offsets: QueueOffsets,
    management: DeviceMemory,
    atomic_result: DeviceMemory,
    atomic_result_lkey: u32,
}

impl SoftQueuePair {
    fn device_address(&self, offset: usize) -> u64 {
        self.queues.device_address() + offset as u64
    }
}

/// The NIC thread, or the NIC while its thread is paused.
#[derive(Debug)]
enum NicState {
    Running(SoftNicThread),
    Stopped(Option<String>),
}

/// The software NIC of one rank with its QPs, one per mlx5 peer.
#[derive(Debug)]
pub struct SoftRdma {
    rank: u32,
    queue_pairs: Vec<SoftQueuePair>,
    statistics: Arc<SoftNicStatistics>,
    state: NicState,
}

impl SoftRdma {
    /// Creates a QP to every peer whose transport is mlx5 and starts the NIC thread.
    pub fn start(
        device: &Arc<Device>,
        kernels: Arc<RuntimeKernels>,
        rank: u32,
        transports: &[Transport],
    ) -> RuntimeResult<Self> {
        let access = CudaDeviceAccess::new(device, kernels)?;
        let mut memory = MappedNicMemory::with_device(Box::new(access));
        let offsets = QueueOffsets::new(SOFT_RDMA_SQ_BASIC_BLOCK_COUNT);
        let mut queue_pairs = Vec::new();
        for (peer, _) in transports
            .iter()
            .enumerate()
            .filter(|&(_, &transport)| transport == Transport::Mlx5)
        {
            let peer_rank = peer as u32;
            let queues = PinnedHostMemory::allocate(device, offsets.total)?;
            let management =
                DeviceMemory::allocate(device, core::mem::size_of::<Mlx5QueueManagement>())?;
            device.fill(management.address(), 0, management.length_bytes())?;
            let atomic_result = DeviceMemory::allocate(device, 8)?;
            device.fill(atomic_result.address(), 0, 8)?;
            let queue_pair = SoftQueuePair {
                peer_rank,
                qpn: SOFT_RDMA_QPN_BASE + peer_rank,
                queues,
                offsets,
                management,
                atomic_result,
                atomic_result_lkey: ATOMIC_RESULT_KEY_BASE + peer_rank,
            };
            let regions = [
                (
                    queue_pair.queues.device_address(),
                    offsets.total as u64,
                    RegionBacking::Host {
                        pointer: queue_pair.queues.host_pointer(),
                    },
                    None,
                    format!("queues to rank {peer_rank}"),
                ),
                (
                    queue_pair.atomic_result.address(),
                    8,
                    RegionBacking::Device {
                        address: queue_pair.atomic_result.address(),
                    },
                    Some(queue_pair.atomic_result_lkey),
                    format!("atomic result of the QP to rank {peer_rank}"),
                ),
            ];
            for (address, length_bytes, backing, lkey, name) in regions {
                let region = MappedRegion {
                    rank,
                    address,
                    length_bytes,
                    backing,
                    lkey,
                    rkey: None,
                    name,
                };
                // SAFETY: the pinned block and the device word live in `queue_pairs`, which
                // outlives the NIC (stopped in `stop` and on drop before they are freed).
                unsafe { memory.add_region(region) }.map_err(|error| setup_error(rank, error))?;
            }
            queue_pairs.push(queue_pair);
        }
        let mut nic = SoftNic::new(memory);
        for queue_pair in &queue_pairs {
            let config = QueuePairConfig {
                rank,
                peer_rank: queue_pair.peer_rank,
                qpn: queue_pair.qpn,
                sq_buffer_address: queue_pair.device_address(0),
                sq_basic_block_count: SOFT_RDMA_SQ_BASIC_BLOCK_COUNT,
                doorbell_record_address: queue_pair.device_address(offsets.doorbell_record),
                cq_buffer_address: queue_pair.device_address(offsets.cq),
                cqe_count: 1,
                cq_collapsed: true,
                receive: None,
            };
            nic.create_queue_pair(config, queue_pair.device_address(offsets.uar))
                .map_err(|error| setup_error(rank, error))?;
        }
        let statistics = nic.statistics();
        let thread = SoftNicThread::start(nic).map_err(|error| RuntimeError::SoftNicStopped {
            rank,
            reason: format!("its thread could not start: {error}"),
        })?;
        tracing::info!(
            rank,
            queue_pairs = queue_pairs.len(),
            "software NIC started"
        );
        Ok(Self {
            rank,
            queue_pairs,
            statistics,
            state: NicState::Running(thread),
        })
    }

    /// The NIC's counters (doorbells observed, WQEs executed and failed).
    pub fn statistics(&self) -> &SoftNicStatistics {
        &self.statistics
    }

    /// Sets the keys of an exchange in its tables: each region's lkey, and the rkey of each
    /// mlx5 peer's descriptor, are [`data_region_key`] of the region's index.
    pub fn assign_keys(
        transports: &[Transport],
        local: &mut [LocalRegionDescriptor],
        remote: &mut [Vec<RemoteRegionDescriptor>],
    ) {
        for (descriptor, peers) in local.iter_mut().zip(remote.iter_mut()) {
            let key = peers.first().map(|peer| data_region_key(peer.region_index));
            descriptor.lkey = key.unwrap_or_default();
            for peer in peers.iter_mut() {
                if transports[peer.peer_rank as usize] == Transport::Mlx5 {
                    peer.rkey = data_region_key(peer.region_index);
                }
            }
        }
    }

    /// The regions of an exchange as the NIC reaches them: this rank's own (device memory at
    /// its addresses, lkey and rkey [`data_region_key`]) and each mlx5 peer's (the peer's
    /// addresses, which WQEs name, backed by `map_allocation`'s CUDA IPC mapping of its
    /// allocation; rkey [`data_region_key`]). Regions are numbered from `first_region_index`.
    pub fn regions_of_exchange(
        &self,
        transports: &[Transport],
        lists: &[Vec<RegionRecord>],
        first_region_index: u32,
        mut map_allocation: impl FnMut(u32, &RegionRecord) -> RuntimeResult<u64>,
    ) -> RuntimeResult<Vec<MappedRegion>> {
        let mut regions = Vec::new();
        for (peer, list) in lists.iter().enumerate() {
            let peer = peer as u32;
            let own = peer == self.rank;
            if !own && transports[peer as usize] != Transport::Mlx5 {
                continue;
            }
            // An empty region has no byte to reach (and the NIC's memory refuses empty ranges).
            for (index, record) in list
                .iter()
                .enumerate()
                .filter(|(_, record)| record.length_bytes > 0)
            {
                let key = data_region_key(first_region_index + index as u32);
                let backing = if own {
                    record.address
                } else {
                    map_allocation(peer, record)? + record.offset_in_allocation_bytes
                };
                regions.push(MappedRegion {
                    rank: peer,
                    address: record.address,
                    length_bytes: record.length_bytes,
                    backing: RegionBacking::Device { address: backing },
                    lkey: own.then_some(key),
                    rkey: Some(key),
                    name: format!("region {:?} of rank {peer}", record.name),
                });
            }
        }
        Ok(regions)
    }

    /// Fills the mlx5 fields of the handle to `handle.peer_rank` (a peer with a QP).
    pub fn fill_endpoint_handle(&self, handle: &mut EndpointHandle) {
        let Some(queue_pair) = self
            .queue_pairs
            .iter()
            .find(|queue_pair| queue_pair.peer_rank == handle.peer_rank)
        else {
            return;
        };
        let offsets = queue_pair.offsets;
        handle.flags = ENDPOINT_FLAG_NIC_BUFFERS_IN_HOST_MEMORY;
        handle.sq_buffer_address = queue_pair.device_address(0);
        handle.sq_wqe_basic_block_count = SOFT_RDMA_SQ_BASIC_BLOCK_COUNT;
        handle.qpn = queue_pair.qpn;
        handle.doorbell_record_address = queue_pair.device_address(offsets.doorbell_record);
        handle.uar_doorbell_address = queue_pair.device_address(offsets.uar);
        handle.cq_buffer_address = queue_pair.device_address(offsets.cq);
        handle.cqe_count = 1;
        handle.cq_collapsed = 1;
        handle.management_address = queue_pair.management.address();
        handle.atomic_result_address = queue_pair.atomic_result.address();
        handle.atomic_result_lkey = queue_pair.atomic_result_lkey;
        handle.receive_context_address = 0;
    }

    /// Gives the NIC the regions of an exchange: pauses its thread after its current poll, adds
    /// them, and starts it again. Errors if the NIC had stopped with an error.
    ///
    /// # Safety
    /// Each region's backing must stay valid (registered tensors alive, peers' mappings open)
    /// until [`SoftRdma::stop`] or the drop.
    pub unsafe fn add_regions(&mut self, regions: Vec<MappedRegion>) -> RuntimeResult<()> {
        let rank = self.rank;
        let mut nic = match std::mem::replace(&mut self.state, NicState::Stopped(None)) {
            NicState::Running(thread) => match thread.stop() {
                (nic, Ok(())) => nic,
                (_, Err(error)) => {
                    let reason = error.to_string();
                    self.state = NicState::Stopped(Some(reason.clone()));
                    return Err(RuntimeError::SoftNicStopped { rank, reason });
                }
            },
            NicState::Stopped(reason) => {
                self.state = NicState::Stopped(reason.clone());
                return Err(RuntimeError::SoftNicStopped {
                    rank,
                    reason: reason.unwrap_or_else(|| "it was stopped".to_owned()),
                });
            }
        };
        let mut added = Ok(());
        for region in regions {
            // SAFETY: the caller's contract.
            if let Err(error) = unsafe { nic.add_region(region) } {
                added = Err(setup_error(rank, error));
                break;
            }
        }
        let thread = SoftNicThread::start(nic).map_err(|error| RuntimeError::SoftNicStopped {
            rank,
            reason: format!("its thread could not restart: {error}"),
        })?;
        self.state = NicState::Running(thread);
        added
    }

    /// Fails if the NIC thread ended with an error of the model (not a failed WQE: that is an
    /// error CQE the kernel sees).
    pub fn check(&self) -> RuntimeResult<()> {
        match &self.state {
            NicState::Running(thread) if !thread.is_finished() => Ok(()),
            NicState::Running(_) => Err(RuntimeError::SoftNicStopped {
                rank: self.rank,
                reason: "its thread ended (stop() reports why)".to_owned(),
            }),
            NicState::Stopped(None) => Ok(()),
            NicState::Stopped(Some(reason)) => Err(RuntimeError::SoftNicStopped {
                rank: self.rank,
                reason: reason.clone(),
            }),
        }
    }

    /// Stops the NIC thread (nothing posted after this executes; kernels waiting for its
    /// completions give up at their bound). Returns why it had ended, if with an error.
    pub fn stop(&mut self) -> Option<String> {
        match std::mem::replace(&mut self.state, NicState::Stopped(None)) {
            NicState::Running(thread) => {
                let (_, result) = thread.stop();
                let reason = result.err().map(|error| error.to_string());
                self.state = NicState::Stopped(reason.clone());
                reason
            }
            NicState::Stopped(reason) => {
                self.state = NicState::Stopped(reason.clone());
                reason
            }
        }
    }
}

impl Drop for SoftRdma {
    fn drop(&mut self) {
        // Before the queues and the device words are freed.
        self.stop();
    }
}

fn setup_error(rank: u32, error: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::SoftNicStopped {
        rank,
        reason: format!("setting it up failed: {error}"),
    }
}
