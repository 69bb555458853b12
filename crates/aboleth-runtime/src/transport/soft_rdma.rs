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
//! Writes with immediate: each rank's receive side ([`ReceiveSideLayout`]: receive CQ, one
//! receive queue per peer, the QPN map and the `Mlx5ReceiveContext` the handles point to) is
//! one GPU allocation that the rank's GPU drains and reposts; every peer maps it through CUDA
//! IPC ([`SoftRdma::attach_receive_sides`], after an all-gather of the records at connect time),
//! and its NIC consumes the receives of its own queue there and writes the responder CQEs, each
//! numbered from the count the peers share in that allocation, so that several NICs (processes)
//! write one CQ without taking the same slot.
//!
//! Modes ([`SoftRdmaOptions`], from `ABOLETH_SOFT_NIC_CQ` and `ABOLETH_SOFT_NIC_DOORBELL`): a
//! collapsed CQ (the default) or a CQ ring with owner bits, and the GPU ringing the UAR (the
//! default) or the staged path, where the GPU stores only the doorbell record and the NIC
//! thread rings for it, as the host thread of an unprivileged process would.
//!
//! Ionic peers (`connect_all("ionic")` with `ABOLETH_RDMA_DEVICE=soft`, experimental): the same
//! NIC thread runs an Ionic queue pair per peer (`aboleth_nic::ionic::IonicDevice`, firmware ABI
//! 2): its send queue, CQ and doorbell word host-pinned and device-mapped, its
//! `IonicQueueManagement` block and atomic-result word in GPU memory; keys as for mlx5
//! ([`SoftRdma::serves`] says which transports it runs).
//!
//! What it does not do: peers on other hosts, the send CQs' doorbell records (the model does
//! not check a send CQ for overrun; the ring is as large as the send ring instead). Its latency is a host thread's and PCIe's, not a NIC's.

use std::sync::Arc;

use aboleth_abi::endpoint::{
    ENDPOINT_FLAG_HOST_RINGS_DOORBELL, ENDPOINT_FLAG_NIC_BUFFERS_IN_HOST_MEMORY,
};
use aboleth_abi::ionic::{IonicVersion, queue::IonicQueueManagement};
use aboleth_abi::mlx5::receive::{
    Mlx5ReceiveContext, Mlx5ReceiveQueue, RECEIVE_WQE_BYTES, ReceiveDataSegment,
};
use aboleth_abi::mlx5::{Cqe64, DoorbellRecord, WQE_BASIC_BLOCK_BYTES};
use aboleth_abi::region::RemoteRegionDescriptor;
use aboleth_abi::{EndpointHandle, LocalRegionDescriptor, Mlx5QueueManagement, Transport};
use aboleth_nic::ionic::IonicQueuePairConfig;
use aboleth_nic::{QueuePairConfig, ReceiveCqConfig, ReceiveQueueConfig, RemoteResponderConfig};

use crate::cuda::{Device, DeviceMemory, PinnedHostMemory, RuntimeKernels, Stream};
use crate::error::{RuntimeError, RuntimeResult};
use crate::exchange::RegionRecord;
use crate::soft_nic::{
    DeviceAccess, DoorbellSource, MappedNicMemory, MappedRegion, RegionBacking, SoftNic,
    SoftNicStatistics, SoftNicThread,
};

/// Send ring size of every soft QP, in basic blocks (64 KiB).
pub const SOFT_RDMA_SQ_BASIC_BLOCK_COUNT: u32 = 1024;
/// QPN of the QP to peer `p` is `SOFT_RDMA_QPN_BASE + p`.
pub const SOFT_RDMA_QPN_BASE: u32 = 0x100;
/// Entries of every soft Ionic send queue and of its CQ (one slot of the send queue stays
/// empty; the CQ is as large, so unreclaimed CQEs never overrun it).
pub const SOFT_IONIC_QUEUE_ENTRIES: u32 = 1024;
/// Keys of exchanged regions start here.
const DATA_KEY_BASE: u32 = 0x0100_0000;
/// Keys of the atomic-result words start here (one per peer).
const ATOMIC_RESULT_KEY_BASE: u32 = 0x0200_0000;
/// Staging bytes of the device access (reads and writes between host and GPU go through it).
const STAGING_BYTES: usize = 1 << 20;
/// Alignment of each queue structure in the pinned block (a CQE's and a basic block's size).
const QUEUE_ALIGNMENT_BYTES: usize = 64;
/// Receives posted per QP (writes with immediate in flight from one peer before the receiving
/// GPU reposts).
pub const SOFT_RDMA_RECEIVES_PER_QUEUE_PAIR: u32 = 64;
/// Bytes of one `peer_of_qpn` entry (a u32 peer rank).
const PEER_OF_QPN_ENTRY_BYTES: usize = core::mem::size_of::<u32>();
/// Bytes a rank publishes about its receive side: its device address and its CUDA IPC handle.
pub const RECEIVE_SIDE_RECORD_BYTES: usize = 8 + crate::exchange::IPC_HANDLE_BYTES;

/// Where each part of a rank's receive side is, as offsets in its one GPU allocation (the same on
/// every rank of a world, so only the base address travels). The receiving GPU drains the CQ and
/// reposts receives; every peer's NIC delivers into it through its CUDA IPC mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiveSideLayout {
    /// Ranks (one receive queue each; this rank's own is unused).
    pub ranks: u32,
    /// CQEs in the receive CQ.
    pub cqe_count: u32,
    /// `qpn & qpn_mask` indexes `peer_of_qpn`.
    pub qpn_mask: u32,
    /// The receive CQ.
    pub cq: usize,
    /// Its doorbell record (the consumer index the GPU sets).
    pub cq_doorbell_record: usize,
    /// The CQEs produced, counted by every peer's NIC ([`ReceiveCqConfig::shared_producer_counter_address`]).
    pub shared_producer_counter: usize,
    /// `[Mlx5ReceiveQueue; ranks]`.
    pub queues: usize,
    /// `[u32; qpn_mask + 1]`.
    pub peer_of_qpn: usize,
    /// The [`Mlx5ReceiveContext`].
    pub context: usize,
    /// Receive WQEs of peer 0's queue; peer p's follow at `p * receive_buffer_stride`.
    pub receive_buffers: usize,
    /// Bytes per peer of the receive WQEs and their doorbell word.
    pub receive_buffer_stride: usize,
    /// Bytes in all.
    pub total: usize,
}

impl ReceiveSideLayout {
    /// The layout for `ranks` ranks.
    pub fn new(ranks: u32) -> Self {
        let align = |bytes: usize| bytes.next_multiple_of(QUEUE_ALIGNMENT_BYTES);
        let cqe_count = (SOFT_RDMA_RECEIVES_PER_QUEUE_PAIR * ranks).next_power_of_two();
        let qpn_mask = (SOFT_RDMA_QPN_BASE + ranks).next_power_of_two() - 1;
        let cq = 0;
        let cq_doorbell_record = cq + align(cqe_count as usize * Cqe64::SIZE_BYTES);
        let shared_producer_counter = cq_doorbell_record + align(DoorbellRecord::SIZE_BYTES);
        let queues = shared_producer_counter + QUEUE_ALIGNMENT_BYTES;
        let peer_of_qpn = queues + align(ranks as usize * Mlx5ReceiveQueue::SIZE_BYTES);
        let context = peer_of_qpn + align((qpn_mask as usize + 1) * PEER_OF_QPN_ENTRY_BYTES);
        let receive_buffers = context + align(Mlx5ReceiveContext::SIZE_BYTES);
        // The receive WQEs, then the queue's doorbell word (BE32 posted count) in a slot of its own.
        let receive_buffer_stride =
            align(SOFT_RDMA_RECEIVES_PER_QUEUE_PAIR as usize * RECEIVE_WQE_BYTES)
                + QUEUE_ALIGNMENT_BYTES;
        Self {
            ranks,
            cqe_count,
            qpn_mask,
            cq,
            cq_doorbell_record,
            shared_producer_counter,
            queues,
            peer_of_qpn,
            context,
            receive_buffers,
            receive_buffer_stride,
            total: receive_buffers + ranks as usize * receive_buffer_stride,
        }
    }

    /// The receive WQEs of the queue of peer `peer`.
    pub fn receive_buffer(&self, peer: u32) -> usize {
        self.receive_buffers + peer as usize * self.receive_buffer_stride
    }

    /// The doorbell word (receives posted, BE32) of the queue of peer `peer`.
    pub fn receive_doorbell(&self, peer: u32) -> usize {
        self.receive_buffer(peer) + self.receive_buffer_stride - QUEUE_ALIGNMENT_BYTES
    }

    /// The initial bytes of `rank`'s receive side at `base`: invalid CQEs, every receive posted
    /// (empty segments), the queue table, the QPN map and the context.
    pub fn initial_bytes(&self, rank: u32, base: u64) -> Vec<u8> {
        let mut bytes = vec![0u8; self.total];
        let mut put =
            |offset: usize, data: &[u8]| bytes[offset..offset + data.len()].copy_from_slice(data);
        put(
            self.cq,
            &Cqe64::invalid().to_bytes().repeat(self.cqe_count as usize),
        );
        let empty = ReceiveDataSegment::empty().to_bytes();
        for peer in 0..self.ranks {
            let qpn = SOFT_RDMA_QPN_BASE + peer;
            put(
                self.receive_buffer(peer),
                &empty.repeat(SOFT_RDMA_RECEIVES_PER_QUEUE_PAIR as usize),
            );
            put(
                self.receive_doorbell(peer),
                &SOFT_RDMA_RECEIVES_PER_QUEUE_PAIR.to_be_bytes(),
            );
            let queue = Mlx5ReceiveQueue {
                qpn,
                wqe_count: SOFT_RDMA_RECEIVES_PER_QUEUE_PAIR,
                doorbell_record_address: base + self.receive_doorbell(peer) as u64,
                posted: u64::from(SOFT_RDMA_RECEIVES_PER_QUEUE_PAIR),
                buffer_address: base + self.receive_buffer(peer) as u64,
            };
            put(
                self.queues + peer as usize * Mlx5ReceiveQueue::SIZE_BYTES,
                &queue.to_bytes(),
            );
            put(
                self.peer_of_qpn + (qpn & self.qpn_mask) as usize * PEER_OF_QPN_ENTRY_BYTES,
                &peer.to_le_bytes(),
            );
        }
        let context = Mlx5ReceiveContext {
            cq_buffer_address: base + self.cq as u64,
            cqe_count: self.cqe_count,
            poll_lock: 0,
            consumer_index: 0,
            cq_doorbell_record_address: base + self.cq_doorbell_record as u64,
            queues_address: base + self.queues as u64,
            queue_count: self.ranks,
            qpn_mask: self.qpn_mask,
            peer_of_qpn_address: base + self.peer_of_qpn as u64,
            local_rank: rank,
            reserved: [0; 4],
        };
        put(self.context, &context.to_bytes());
        bytes
    }
}

/// How the soft QPs are set up: the generated code's modes a ConnectX setup chooses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SoftRdmaOptions {
    /// A CQ ring of [`SOFT_RDMA_SQ_BASIC_BLOCK_COUNT`] CQEs with owner bits (`cq_collapsed` 0)
    /// instead of one collapsed CQE slot.
    pub cq_ring: bool,
    /// The staged path: the GPU stores only the doorbell record and the host (the NIC thread)
    /// rings (`ENDPOINT_FLAG_HOST_RINGS_DOORBELL`).
    pub host_rings_doorbell: bool,
}

/// `ABOLETH_SOFT_NIC_CQ` (`collapsed`, the default, or `ring`).
pub const CQ_ENVIRONMENT_VARIABLE: &str = "ABOLETH_SOFT_NIC_CQ";
/// `ABOLETH_SOFT_NIC_DOORBELL` (`gpu`, the default, or `host`: the staged path).
pub const DOORBELL_ENVIRONMENT_VARIABLE: &str = "ABOLETH_SOFT_NIC_DOORBELL";

impl SoftRdmaOptions {
    /// From [`CQ_ENVIRONMENT_VARIABLE`] and [`DOORBELL_ENVIRONMENT_VARIABLE`].
    pub fn from_environment() -> RuntimeResult<Self> {
        Ok(Self {
            cq_ring: environment_choice(
                CQ_ENVIRONMENT_VARIABLE,
                ("collapsed", "ring"),
                "collapsed (one CQE slot, the default) or ring",
            )?,
            host_rings_doorbell: environment_choice(
                DOORBELL_ENVIRONMENT_VARIABLE,
                ("gpu", "host"),
                "gpu (the GPU rings, the default) or host (the staged path)",
            )?,
        })
    }

    /// CQEs in each QP's CQ: one slot, or a ring as large as the send ring (every unconsumed
    /// CQE is of a WQE the GPU has not reclaimed, so it never overruns).
    pub fn cqe_count(&self) -> u32 {
        if self.cq_ring {
            SOFT_RDMA_SQ_BASIC_BLOCK_COUNT
        } else {
            1
        }
    }
}

/// Whether `variable` names the second of `(default, other)`; unset is the default.
fn environment_choice(
    variable: &'static str,
    (default, other): (&str, &str),
    expected: &'static str,
) -> RuntimeResult<bool> {
    match std::env::var(variable) {
        Err(_) => Ok(false),
        Ok(value) if value.trim() == default => Ok(false),
        Ok(value) if value.trim() == other => Ok(true),
        Ok(value) => Err(RuntimeError::InvalidEnvironment {
            variable,
            value,
            expected,
        }),
    }
}

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
    fn new(sq_basic_block_count: u32, cqe_count: u32) -> Self {
        let align = |bytes: usize| bytes.next_multiple_of(QUEUE_ALIGNMENT_BYTES);
        let doorbell_record = sq_basic_block_count as usize * WQE_BASIC_BLOCK_BYTES;
        let cq = doorbell_record + align(DoorbellRecord::SIZE_BYTES);
        let uar = cq + align(cqe_count as usize * Cqe64::SIZE_BYTES);
        Self {
            doorbell_record,
            cq,
            uar,
            total: uar + QUEUE_ALIGNMENT_BYTES,
        }
    }
}

/// Where one Ionic queue pair's structures are in its pinned block (the send queue at 0).
#[derive(Clone, Copy, Debug)]
struct IonicQueueOffsets {
    cq: usize,
    doorbell: usize,
    total: usize,
}

impl IonicQueueOffsets {
    fn new(entries: u32) -> Self {
        let align = |bytes: usize| bytes.next_multiple_of(QUEUE_ALIGNMENT_BYTES);
        let cq = align(entries as usize * aboleth_abi::ionic::WQE_BYTES);
        let doorbell = cq + align(entries as usize * aboleth_abi::ionic::CQE_BYTES);
        Self {
            cq,
            doorbell,
            total: doorbell + QUEUE_ALIGNMENT_BYTES,
        }
    }
}

/// One Ionic queue pair to a peer: its pinned queues and its GPU-side words.
#[derive(Debug)]
struct SoftIonicQueue {
    peer_rank: u32,
    queue_id: u32,
    queues: PinnedHostMemory,
    offsets: IonicQueueOffsets,
    management: DeviceMemory,
    atomic_result: DeviceMemory,
    atomic_result_lkey: u32,
}

impl SoftIonicQueue {
    fn device_address(&self, offset: usize) -> u64 {
        self.queues.device_address() + offset as u64
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

/// The software NIC of one rank with its QPs, one per mlx5 peer, and the rank's receive side.
#[derive(Debug)]
pub struct SoftRdma {
    rank: u32,
    options: SoftRdmaOptions,
    queue_pairs: Vec<SoftQueuePair>,
    ionic_queues: Vec<SoftIonicQueue>,
    receive_layout: ReceiveSideLayout,
    receive_side: DeviceMemory,
    statistics: Arc<SoftNicStatistics>,
    state: NicState,
}

impl SoftRdma {
    /// Whether the software NIC runs `transport`'s queues (mlx5 and Ionic).
    pub fn serves(transport: Transport) -> bool {
        matches!(transport, Transport::Mlx5 | Transport::Ionic)
    }

    /// Creates a QP to every peer whose transport is mlx5, an Ionic queue pair to every Ionic
    /// peer, and starts the NIC thread.
    pub fn start(
        device: &Arc<Device>,
        kernels: Arc<RuntimeKernels>,
        rank: u32,
        transports: &[Transport],
        options: SoftRdmaOptions,
    ) -> RuntimeResult<Self> {
        let access = CudaDeviceAccess::new(device, kernels)?;
        let mut memory = MappedNicMemory::with_device(Box::new(access));
        let receive_layout = ReceiveSideLayout::new(transports.len() as u32);
        let receive_side = DeviceMemory::allocate(device, receive_layout.total)?;
        device.copy_to_device(
            receive_side.address(),
            &receive_layout.initial_bytes(rank, receive_side.address()),
        )?;
        let offsets = QueueOffsets::new(SOFT_RDMA_SQ_BASIC_BLOCK_COUNT, options.cqe_count());
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
        let ionic_queues = Self::allocate_ionic_queues(device, rank, transports, &mut memory)?;
        let mut nic = SoftNic::new(memory);
        for queue in &ionic_queues {
            let config = IonicQueuePairConfig {
                rank,
                queue_id: queue.queue_id,
                peer_rank: queue.peer_rank,
                version: IonicVersion::V2,
                sq_address: queue.device_address(0),
                sq_entries: SOFT_IONIC_QUEUE_ENTRIES,
                cq_address: queue.device_address(queue.offsets.cq),
                cq_entries: SOFT_IONIC_QUEUE_ENTRIES,
            };
            nic.create_ionic_queue_pair(config, queue.device_address(queue.offsets.doorbell))
                .map_err(|error| setup_error(rank, error))?;
        }
        for queue_pair in &queue_pairs {
            let config = QueuePairConfig {
                rank,
                peer_rank: queue_pair.peer_rank,
                qpn: queue_pair.qpn,
                sq_buffer_address: queue_pair.device_address(0),
                sq_basic_block_count: SOFT_RDMA_SQ_BASIC_BLOCK_COUNT,
                doorbell_record_address: queue_pair.device_address(offsets.doorbell_record),
                cq_buffer_address: queue_pair.device_address(offsets.cq),
                cqe_count: options.cqe_count(),
                cq_collapsed: !options.cq_ring,
                receive: None,
            };
            let doorbell = if options.host_rings_doorbell {
                DoorbellSource::HostRings
            } else {
                DoorbellSource::Uar(queue_pair.device_address(offsets.uar))
            };
            nic.create_queue_pair(config, doorbell)
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
            ionic_queue_pairs = ionic_queues.len(),
            ?options,
            "software NIC started"
        );
        Ok(Self {
            rank,
            options,
            queue_pairs,
            ionic_queues,
            receive_layout,
            receive_side,
            statistics,
            state: NicState::Running(thread),
        })
    }

    /// The Ionic queue pair to every Ionic peer: a zeroed pinned block (send queue, CQ: a zeroed
    /// CQE has color 0, so none is valid in the first lap; doorbell word), a management block
    /// naming firmware ABI 2, an atomic-result word, and their regions in `memory`.
    fn allocate_ionic_queues(
        device: &Arc<Device>,
        rank: u32,
        transports: &[Transport],
        memory: &mut MappedNicMemory,
    ) -> RuntimeResult<Vec<SoftIonicQueue>> {
        let offsets = IonicQueueOffsets::new(SOFT_IONIC_QUEUE_ENTRIES);
        let mut queues = Vec::new();
        for (peer, _) in transports
            .iter()
            .enumerate()
            .filter(|&(_, &transport)| transport == Transport::Ionic)
        {
            let peer_rank = peer as u32;
            let block = PinnedHostMemory::allocate(device, offsets.total)?;
            // SAFETY: the block has `offsets.total` bytes and nothing else uses it yet.
            unsafe { std::ptr::write_bytes(block.host_pointer(), 0, offsets.total) };
            let management = DeviceMemory::allocate(device, IonicQueueManagement::SIZE_BYTES)?;
            let initial = IonicQueueManagement {
                firmware_version: 2,
                ..IonicQueueManagement::default()
            };
            device.copy_to_device(management.address(), &initial.to_bytes())?;
            let atomic_result = DeviceMemory::allocate(device, 8)?;
            device.fill(atomic_result.address(), 0, 8)?;
            let queue = SoftIonicQueue {
                peer_rank,
                queue_id: SOFT_RDMA_QPN_BASE + peer_rank,
                queues: block,
                offsets,
                management,
                atomic_result,
                atomic_result_lkey: ATOMIC_RESULT_KEY_BASE + peer_rank,
            };
            let regions = [
                MappedRegion {
                    rank,
                    address: queue.queues.device_address(),
                    length_bytes: offsets.total as u64,
                    backing: RegionBacking::Host {
                        pointer: queue.queues.host_pointer(),
                    },
                    lkey: None,
                    rkey: None,
                    name: format!("Ionic queues to rank {peer_rank}"),
                },
                MappedRegion {
                    rank,
                    address: queue.atomic_result.address(),
                    length_bytes: 8,
                    backing: RegionBacking::Device {
                        address: queue.atomic_result.address(),
                    },
                    lkey: Some(queue.atomic_result_lkey),
                    rkey: None,
                    name: format!("atomic result of the Ionic queue pair to rank {peer_rank}"),
                },
            ];
            for region in regions {
                // SAFETY: the pinned block and the device word live in `ionic_queues`, which
                // outlives the NIC (stopped in `stop` and on drop before they are freed).
                unsafe { memory.add_region(region) }.map_err(|error| setup_error(rank, error))?;
            }
            queues.push(queue);
        }
        Ok(queues)
    }

    /// The NIC's counters (doorbells observed, WQEs executed and failed).
    pub fn statistics(&self) -> &SoftNicStatistics {
        &self.statistics
    }

    /// Sets the keys of an exchange in its tables: each region's lkey, and the rkey of each
    /// mlx5 or Ionic peer's descriptor, are [`data_region_key`] of the region's index.
    pub fn assign_keys(
        transports: &[Transport],
        local: &mut [LocalRegionDescriptor],
        remote: &mut [Vec<RemoteRegionDescriptor>],
    ) {
        for (descriptor, peers) in local.iter_mut().zip(remote.iter_mut()) {
            let key = peers.first().map(|peer| data_region_key(peer.region_index));
            descriptor.lkey = key.unwrap_or_default();
            for peer in peers.iter_mut() {
                if Self::serves(transports[peer.peer_rank as usize]) {
                    peer.rkey = data_region_key(peer.region_index);
                }
            }
        }
    }

    /// The regions of an exchange as the NIC reaches them: this rank's own (device memory at
    /// its addresses, lkey and rkey [`data_region_key`]) and each mlx5 or Ionic peer's (the peer's
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
            if !own && !Self::serves(transports[peer as usize]) {
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

    /// Fills the mlx5 or Ionic fields of the handle to `handle.peer_rank` (a peer with a QP).
    pub fn fill_endpoint_handle(&self, handle: &mut EndpointHandle) {
        if let Some(queue) = self
            .ionic_queues
            .iter()
            .find(|queue| queue.peer_rank == handle.peer_rank)
        {
            handle.flags = ENDPOINT_FLAG_NIC_BUFFERS_IN_HOST_MEMORY;
            handle.sq_buffer_address = queue.device_address(0);
            handle.sq_wqe_basic_block_count = SOFT_IONIC_QUEUE_ENTRIES;
            handle.qpn = queue.queue_id;
            handle.uar_doorbell_address = queue.device_address(queue.offsets.doorbell);
            handle.cq_buffer_address = queue.device_address(queue.offsets.cq);
            handle.cqe_count = SOFT_IONIC_QUEUE_ENTRIES;
            handle.management_address = queue.management.address();
            handle.atomic_result_address = queue.atomic_result.address();
            handle.atomic_result_lkey = queue.atomic_result_lkey;
            return;
        }
        let Some(queue_pair) = self
            .queue_pairs
            .iter()
            .find(|queue_pair| queue_pair.peer_rank == handle.peer_rank)
        else {
            return;
        };
        let offsets = queue_pair.offsets;
        handle.flags = ENDPOINT_FLAG_NIC_BUFFERS_IN_HOST_MEMORY;
        if self.options.host_rings_doorbell {
            handle.flags |= ENDPOINT_FLAG_HOST_RINGS_DOORBELL;
        }
        handle.sq_buffer_address = queue_pair.device_address(0);
        handle.sq_wqe_basic_block_count = SOFT_RDMA_SQ_BASIC_BLOCK_COUNT;
        handle.qpn = queue_pair.qpn;
        handle.doorbell_record_address = queue_pair.device_address(offsets.doorbell_record);
        // The staged path's GPU never stores to the UAR: none is given.
        handle.uar_doorbell_address = if self.options.host_rings_doorbell {
            0
        } else {
            queue_pair.device_address(offsets.uar)
        };
        handle.cq_buffer_address = queue_pair.device_address(offsets.cq);
        handle.cqe_count = self.options.cqe_count();
        handle.cq_collapsed = u32::from(!self.options.cq_ring);
        handle.management_address = queue_pair.management.address();
        handle.atomic_result_address = queue_pair.atomic_result.address();
        handle.atomic_result_lkey = queue_pair.atomic_result_lkey;
        handle.receive_context_address = self.receive_context_address();
    }

    /// This rank's `Mlx5ReceiveContext`, which every endpoint handle of the rank names.
    pub fn receive_context_address(&self) -> u64 {
        self.receive_side.address() + self.receive_layout.context as u64
    }

    /// What this rank publishes about its receive side ([`RECEIVE_SIDE_RECORD_BYTES`]): its
    /// device address and the CUDA IPC handle of its allocation.
    pub fn receive_side_record(&self, device: &Device) -> RuntimeResult<Vec<u8>> {
        let handle = device
            .ipc_handle(self.receive_side.address())
            .map_err(|code| RuntimeError::NotExportable {
                allocation_base: self.receive_side.address(),
                code,
            })?;
        let mut record = self.receive_side.address().to_le_bytes().to_vec();
        record.extend_from_slice(&handle);
        Ok(record)
    }

    /// Decodes a peer's [`SoftRdma::receive_side_record`]: its address and IPC handle.
    pub fn decode_receive_side_record(
        rank: u32,
        peer: u32,
        record: &[u8],
    ) -> RuntimeResult<(u64, [u8; crate::exchange::IPC_HANDLE_BYTES])> {
        let malformed = || RuntimeError::SoftNicStopped {
            rank,
            reason: format!(
                "rank {peer}'s receive-side record has {} bytes, not {RECEIVE_SIDE_RECORD_BYTES}",
                record.len()
            ),
        };
        if record.len() != RECEIVE_SIDE_RECORD_BYTES {
            return Err(malformed());
        }
        let (address, handle) = record.split_at(8);
        Ok((
            u64::from_le_bytes(address.try_into().map_err(|_| malformed())?),
            handle.try_into().map_err(|_| malformed())?,
        ))
    }

    /// Gives the NIC every mlx5 peer's receive side, `(peer, its address, its mapping here)`:
    /// a region of the peer's memory, the responder half of the peer's QP back to this rank
    /// (where this rank's writes with immediate take a receive) and the peer's receive CQ, whose
    /// CQEs every NIC numbers from the count they share.
    ///
    /// # Safety
    /// Each mapping must stay open until [`SoftRdma::stop`] or the drop.
    pub unsafe fn attach_receive_sides(&mut self, peers: &[(u32, u64, u64)]) -> RuntimeResult<()> {
        let (rank, layout) = (self.rank, self.receive_layout);
        self.with_paused_nic(|nic| {
            for &(peer, address, mapped) in peers {
                let region = MappedRegion {
                    rank: peer,
                    address,
                    length_bytes: layout.total as u64,
                    backing: RegionBacking::Device { address: mapped },
                    lkey: None,
                    rkey: None,
                    name: format!("receive side of rank {peer}"),
                };
                // SAFETY: the caller's contract.
                unsafe { nic.add_region(region) }.map_err(|error| setup_error(rank, error))?;
                let (model, memory) = nic.nic_and_memory();
                model
                    .create_remote_responder(
                        memory,
                        RemoteResponderConfig {
                            rank: peer,
                            peer_rank: rank,
                            qpn: SOFT_RDMA_QPN_BASE + rank,
                            receive: ReceiveQueueConfig {
                                buffer_address: address + layout.receive_buffer(rank) as u64,
                                wqe_count: SOFT_RDMA_RECEIVES_PER_QUEUE_PAIR,
                                doorbell_record_address: address
                                    + layout.receive_doorbell(rank) as u64,
                            },
                        },
                    )
                    .and_then(|()| {
                        model.create_receive_cq(
                            memory,
                            ReceiveCqConfig {
                                rank: peer,
                                buffer_address: address + layout.cq as u64,
                                cqe_count: layout.cqe_count,
                                doorbell_record_address: address + layout.cq_doorbell_record as u64,
                                shared_producer_counter_address: Some(
                                    address + layout.shared_producer_counter as u64,
                                ),
                            },
                        )
                    })
                    .map_err(|error| setup_error(rank, error))?;
            }
            Ok(())
        })
    }

    /// Gives the NIC the regions of an exchange: pauses its thread after its current poll, adds
    /// them, and starts it again. Errors if the NIC had stopped with an error.
    ///
    /// # Safety
    /// Each region's backing must stay valid (registered tensors alive, peers' mappings open)
    /// until [`SoftRdma::stop`] or the drop.
    pub unsafe fn add_regions(&mut self, regions: Vec<MappedRegion>) -> RuntimeResult<()> {
        let rank = self.rank;
        self.with_paused_nic(|nic| {
            for region in regions {
                // SAFETY: the caller's contract.
                unsafe { nic.add_region(region) }.map_err(|error| setup_error(rank, error))?;
            }
            Ok(())
        })
    }

    /// Runs `change` on the NIC with its thread paused after its current poll, then starts the
    /// thread again (also when `change` failed). Errors if the NIC had stopped with an error.
    fn with_paused_nic(
        &mut self,
        change: impl FnOnce(&mut SoftNic) -> RuntimeResult<()>,
    ) -> RuntimeResult<()> {
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
        let changed = change(&mut nic);
        match SoftNicThread::start(nic) {
            Ok(thread) => self.state = NicState::Running(thread),
            Err(error) => {
                let reason = format!("its thread could not restart: {error}");
                self.state = NicState::Stopped(Some(reason.clone()));
                return Err(RuntimeError::SoftNicStopped { rank, reason });
            }
        }
        changed
    }

    /// Waits (at most `timeout`) until two polls that started after this call executed nothing,
    /// so every doorbell stored before it has been executed; false on timeout or when the thread
    /// is not running. `World::close` calls it before its barrier, so no peer frees memory this
    /// NIC still writes.
    pub fn wait_until_idle(&self, timeout: std::time::Duration) -> bool {
        let NicState::Running(thread) = &self.state else {
            return false;
        };
        let statistics = &self.statistics;
        let polls_at_start = statistics.polls.load(std::sync::atomic::Ordering::Acquire);
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline && !thread.is_finished() {
            let polls = statistics.polls.load(std::sync::atomic::Ordering::Acquire);
            let idle = statistics
                .idle_polls_in_a_row
                .load(std::sync::atomic::Ordering::Acquire);
            // `polls` counts a poll when it starts, `idle` when it ends idle: with the last two
            // finished polls idle and at least four started since this call, both idle ones
            // started after it (a poll under way at the call is number `polls_at_start + 1`).
            if polls >= polls_at_start + 4 && idle >= 2 {
                return true;
            }
            std::thread::yield_now();
        }
        false
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_receive_side_parts_are_aligned_and_apart_and_the_context_points_at_them() {
        for ranks in [2, 3, 8, 64] {
            let layout = ReceiveSideLayout::new(ranks);
            let mut parts = vec![
                (layout.cq, layout.cqe_count as usize * Cqe64::SIZE_BYTES),
                (layout.cq_doorbell_record, DoorbellRecord::SIZE_BYTES),
                (layout.shared_producer_counter, 8),
                (layout.queues, ranks as usize * Mlx5ReceiveQueue::SIZE_BYTES),
                (
                    layout.peer_of_qpn,
                    (layout.qpn_mask as usize + 1) * PEER_OF_QPN_ENTRY_BYTES,
                ),
                (layout.context, Mlx5ReceiveContext::SIZE_BYTES),
            ];
            for peer in 0..ranks {
                parts.push((
                    layout.receive_buffer(peer),
                    SOFT_RDMA_RECEIVES_PER_QUEUE_PAIR as usize * RECEIVE_WQE_BYTES,
                ));
                parts.push((layout.receive_doorbell(peer), 4));
            }
            parts.sort();
            for pair in parts.windows(2) {
                assert!(
                    pair[0].0 + pair[0].1 <= pair[1].0,
                    "{ranks} ranks: {pair:?} overlap"
                );
            }
            assert!(parts.iter().all(|&(offset, _)| offset % 8 == 0));
            let last = parts.last().unwrap();
            assert!(last.0 + last.1 <= layout.total);
            assert!(layout.qpn_mask >= SOFT_RDMA_QPN_BASE + ranks - 1);
            let base = 0x7000_0000_0000;
            let bytes = layout.initial_bytes(1, base);
            let context = Mlx5ReceiveContext::from_bytes(
                &bytes[layout.context..layout.context + Mlx5ReceiveContext::SIZE_BYTES]
                    .try_into()
                    .unwrap(),
            );
            assert_eq!(context.cq_buffer_address, base + layout.cq as u64);
            assert_eq!(context.queues_address, base + layout.queues as u64);
            assert_eq!((context.queue_count, context.local_rank), (ranks, 1));
            let queue_at = layout.queues + (ranks as usize - 1) * Mlx5ReceiveQueue::SIZE_BYTES;
            let queue = Mlx5ReceiveQueue::from_bytes(
                &bytes[queue_at..queue_at + Mlx5ReceiveQueue::SIZE_BYTES]
                    .try_into()
                    .unwrap(),
            );
            assert_eq!(queue.qpn, SOFT_RDMA_QPN_BASE + ranks - 1);
            assert_eq!(
                queue.doorbell_record_address,
                base + layout.receive_doorbell(ranks - 1) as u64
            );
            let doorbell = layout.receive_doorbell(ranks - 1);
            assert_eq!(
                bytes[doorbell..doorbell + 4],
                SOFT_RDMA_RECEIVES_PER_QUEUE_PAIR.to_be_bytes()
            );
            let entry = layout.peer_of_qpn
                + ((SOFT_RDMA_QPN_BASE + ranks - 1) & layout.qpn_mask) as usize * 4;
            assert_eq!(bytes[entry..entry + 4], (ranks - 1).to_le_bytes());
        }
    }

    #[test]
    fn keys_follow_the_region_index_and_only_mlx5_peers_get_an_rkey() {
        let transports = [Transport::P2p, Transport::Mlx5, Transport::Proxy];
        let descriptor = |peer_rank, region_index| RemoteRegionDescriptor {
            peer_rank,
            region_index,
            ..RemoteRegionDescriptor::default()
        };
        let mut local = vec![LocalRegionDescriptor::default(); 2];
        let mut remote: Vec<Vec<_>> = (0..2)
            .map(|index| (0..3).map(|peer| descriptor(peer, 5 + index)).collect())
            .collect();
        SoftRdma::assign_keys(&transports, &mut local, &mut remote);
        assert_eq!(local[1].lkey, data_region_key(6));
        assert_eq!(
            remote[1].iter().map(|d| d.rkey).collect::<Vec<_>>(),
            [0, data_region_key(6), 0]
        );
        let record = [7u8; RECEIVE_SIDE_RECORD_BYTES - 1];
        let error = SoftRdma::decode_receive_side_record(0, 1, &record).unwrap_err();
        assert!(
            error.to_string().contains("rank 1's receive-side record"),
            "{error}"
        );
    }
}
