//! The NIC models. [`efa`] is AWS EFA's (SRD: unordered writes); [`ionic`] AMD Pensando Ionic's
//! (RoCEv2 RC: in order per queue pair). The rest of this file is the
//! mlx5 NIC model: RC send queues whose WQEs, doorbell records and CQEs live in a
//! [`NicMemory`], executed one WQE per [`Nic::step`] (a queue the caller's rng picks among those
//! with work) or [`Nic::step_queue_pair`] (a queue the caller names). The same model runs over the
//! simulator's memory (`aboleth-sim`) and over real memory in the runtime's software NIC, so the
//! two cannot drift: what a WQE does is decided here once.
//!
//! What it models, per queue pair (QP): the UAR doorbell as a trigger only (it carries the QPN);
//! the doorbell record (DBR) as the authoritative 16-bit producer count, read when the NIC next
//! works on the QP rather than when the doorbell is rung, so a doorbell rung before the DBR store
//! is visible executes nothing; in-order execution of RDMA_WRITE (gather or inline),
//! RDMA_WRITE_IMM, RDMA_READ, ATOMIC_FA, ATOMIC_CS, 8-byte MASKED_FA and MASKED_CS, NOP and DUMP,
//! with lkey, rkey, bounds and alignment checks; strict WQE validation (a `wqe_index` that does not
//! match its slot, a QPN that is not the QP's, a WQE running past the doorbelled producer count, or
//! bytes the decoder rejects are a local QP operation error); requester CQEs with the lap-parity
//! owner bit, or always in slot 0 with owner 0 for a collapsed CQ; and the GPU-side CQ poll.
//!
//! The responder side of RDMA_WRITE_IMM: a QP configured with a receive queue consumes one
//! receive WQE per write with immediate and writes a responder CQE (the immediate, the QPN and
//! the receive's index) into its rank's receive CQ ([`Nic::create_receive_cq`]); the receive
//! queue's producer count is read from the QP's doorbell record (receive word at +0) when a
//! receive is needed, and a write with immediate that finds none waits (receiver not ready,
//! retried for ever: the requester's queue stalls, and is not pending work, until a receive is
//! posted). A receive CQE that would overrun the CQ's consumer index (its doorbell record) is an
//! error of the simulation.
//!
//! What it does not model: packet loss and retries, BlueFlame, the send CQs' doorbell records
//! (so a normal send CQ overrun is not detected, as with `cqc.oi = 1`), CQE compression, DC/UD address vectors, SEND and WAIT, and flush CQEs: after an error the QP stops
//! (see [`QueuePairState::Error`]). Remote writes land in the peer's memory at once; time is only
//! reported as each event's [`NicWork`] (what the NIC did: reads, fetched blocks, bytes moved,
//! completions), which the simulator prices with its cost model.

use std::collections::BTreeMap;

use aboleth_abi::mlx5::{
    CQE_SYNDROME_LOCAL_LENGTH_ERR, CQE_SYNDROME_LOCAL_PROT_ERR, CQE_SYNDROME_LOCAL_QP_OP_ERR,
    CQE_SYNDROME_REMOTE_ACCESS_ERR, CQE_SYNDROME_REMOTE_INVAL_REQ_ERR, Cqe64, CqeDecodeError,
    DecodedCqe, DecodedUarDoorbell, DecodedWqe, DoorbellDecodeError, DoorbellRecord, ErrorCqe64,
    LocalBuffer, MaskedCompareSwap64, RemoteAddress, RequesterCompletion, UarDoorbell,
    WQE_BASIC_BLOCK_BYTES, WQE_CTRL_CQ_UPDATE, WQE_DS_UNIT_BYTES, WqeOperation, WritePayload,
    cqe_owner_for_index, cqe_syndrome_name, decode_cqe, decode_wqe,
};
use rand::Rng;

pub mod efa;
pub mod ionic;
mod memory;

pub use memory::{NicMemory, NicMemoryError};

/// Bytes of one CQE.
const CQE_BYTES: u64 = Cqe64::SIZE_BYTES as u64;

/// Largest send ring the model accepts, in basic blocks: the CQ poll compares 16-bit WQE counters
/// as signed distances, which is exact only while fewer than 2^15 basic blocks are outstanding.
pub const SQ_BASIC_BLOCK_COUNT_MAX: u32 = 1 << 15;
/// Mask of the fence-mode bits `[7:5]` of `fm_ce_se`.
const FENCE_MODE_MASK: u8 = 0xE0;
/// `ds` units per basic block.
const DS_PER_BASIC_BLOCK: u64 = (WQE_BASIC_BLOCK_BYTES / WQE_DS_UNIT_BYTES) as u64;

/// Where a QP's queues live and whom it talks to. Memory is allocated by the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueuePairConfig {
    /// The rank owning the QP (its NIC, its SQ, its local buffers).
    pub rank: u32,
    /// The rank at the other end of the RC connection.
    pub peer_rank: u32,
    /// Queue pair number (24 bits), unique per rank.
    pub qpn: u32,
    /// Start of the send ring on `rank`.
    pub sq_buffer_address: u64,
    /// Ring size in 64-byte basic blocks: a power of two, at most [`SQ_BASIC_BLOCK_COUNT_MAX`].
    pub sq_basic_block_count: u32,
    /// The 8-byte QP doorbell record on `rank` (send word at +4).
    pub doorbell_record_address: u64,
    /// The CQ buffer on `rank`: `cqe_count` 64-byte CQEs. One CQ per QP.
    pub cq_buffer_address: u64,
    /// Number of CQEs, a power of two.
    pub cqe_count: u32,
    /// Collapsed CQ (NVSHMEM's): every CQE goes to slot 0 and the owner bit stays 0.
    pub cq_collapsed: bool,
    /// The QP's receive queue, where writes with immediate arriving on it take a receive.
    pub receive: Option<ReceiveQueueConfig>,
}

/// A QP's receive queue: `wqe_count` 16-byte receive WQEs; the producer count is the
/// big-endian 32-bit word at `doorbell_record_address` (the QP doorbell record's receive word).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiveQueueConfig {
    /// The receive WQEs.
    pub buffer_address: u64,
    /// Receive WQEs (a power of two).
    pub wqe_count: u32,
    /// The receive word of the QP's doorbell record.
    pub doorbell_record_address: u64,
}

/// A rank's receive CQ, shared by its QPs' receive queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiveCqConfig {
    /// The rank.
    pub rank: u32,
    /// `cqe_count` 64-byte CQEs.
    pub buffer_address: u64,
    /// CQEs (a power of two).
    pub cqe_count: u32,
    /// The CQ doorbell record: the consumer index (SET_CI, big-endian, 24 bits) at +0.
    pub doorbell_record_address: u64,
    /// For a CQ that several NICs write (the software NIC: each process runs the requester side
    /// of its own QPs, so every peer's NIC delivers into this rank's CQ): an 8-byte word of the
    /// rank counting the CQEs produced, each CQE's number taken with an atomic add on it. The
    /// CQ's owner initialized the CQ, and [`Nic::create_receive_cq`] then writes nothing. `None`
    /// (the simulator): this NIC is the CQ's only writer and counts in itself.
    pub shared_producer_counter_address: Option<u64>,
}

/// The responder half of a peer's QP whose send side another NIC runs (the software NIC's peer
/// processes): what a write with immediate arriving on it needs. It never executes WQEs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteResponderConfig {
    /// The rank owning the QP (the responder).
    pub rank: u32,
    /// The rank at the other end: the requester whose QP this NIC runs.
    pub peer_rank: u32,
    /// The responder QP's number.
    pub qpn: u32,
    /// Its receive queue.
    pub receive: ReceiveQueueConfig,
}

#[derive(Clone, Debug)]
struct ReceiveCq {
    config: ReceiveCqConfig,
    produced: u64,
}

/// Whether a QP still executes WQEs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueuePairState {
    /// Executing WQEs.
    Ready,
    /// A WQE failed and an error CQE was written. The QP then stops: later WQEs are neither
    /// executed nor flushed with WR_FLUSH CQEs, as for a DEVX QP owned by the GPU, where no
    /// driver synthesises flush CQEs; a GPU poll sees the error CQE and must treat it as fatal.
    Error {
        /// `CQE_SYNDROME_*` of the failed WQE.
        syndrome: u8,
        /// `wqe_index` of the failed WQE.
        wqe_counter: u16,
    },
}

/// A snapshot of a QP's progress, for the interpreter's reports and for tests; GPUs learn of
/// completions only through [`Nic::poll_cq_for_index`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueuePairStatus {
    /// A doorbell was rung and the DBR not yet read.
    pub doorbell_pending: bool,
    /// Doorbells rung so far.
    pub doorbells_rung: u64,
    /// The 64-bit producer count rebuilt from the last DBR read.
    pub producer_index_seen: u64,
    /// The 64-bit index of the next basic block to execute.
    pub next_basic_block: u64,
    /// WQEs executed successfully.
    pub wqes_executed: u64,
    /// CQEs written (success and error).
    pub completions_written: u64,
    /// Ready or error.
    pub state: QueuePairState,
}

/// Bytes the NIC changed in some rank's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrittenRange {
    /// Rank whose memory was written.
    pub rank: u32,
    /// First byte.
    pub address: u64,
    /// Bytes written.
    pub length_bytes: u64,
}

/// How one WQE ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WqeOutcome {
    /// Executed.
    Completed {
        /// Bytes moved (the CQE's `byte_cnt`): payload for writes and reads, 8 for atomics.
        byte_count: u64,
        /// The immediate of an RDMA_WRITE_IMM, as the responder would see it.
        immediate: Option<u32>,
        /// Memory changed, remote target first.
        written: Vec<WrittenRange>,
    },
    /// Failed; an error CQE was written and the QP is now in error.
    Failed {
        /// `CQE_SYNDROME_*`.
        syndrome: u8,
        /// What was wrong, naming rank, address, key or index.
        reason: String,
    },
}

/// One WQE's execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WqeExecution {
    /// The 64-bit basic-block index of the WQE (its slot is this modulo the ring size).
    pub basic_block_index: u64,
    /// The opcode byte found in the control segment.
    pub opcode: u8,
    /// Result.
    pub outcome: WqeOutcome,
    /// The CQ slot a CQE was written to, if one was.
    pub cqe_slot: Option<u32>,
}

/// One unit of NIC work on one QP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NicEvent {
    /// The QP's rank.
    pub rank: u32,
    /// The QP.
    pub qpn: u32,
    /// The QP's peer.
    pub peer_rank: u32,
    /// The send word of the DBR, if a pending doorbell made the NIC read it in this step.
    pub doorbell_record_producer_index: Option<u16>,
    /// For a write with immediate: the responder's rank and the number of the CQE it wrote in
    /// that rank's receive CQ.
    pub responder_completion: Option<(u32, u64)>,
    /// The WQE executed in this step, if the producer count allowed one.
    pub wqe: Option<WqeExecution>,
    /// What the NIC did in this step (the simulator prices it with its cost model).
    pub work: NicWork,
}

/// What the NIC did in one step, for a cost model to price: each field is one kind of work a
/// real NIC spends time on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NicWork {
    /// It read the QP's doorbell record after a doorbell.
    pub doorbell_record_read: bool,
    /// It fetched a WQE of this many 64-byte basic blocks.
    pub wqe_fetch_basic_blocks: Option<u64>,
    /// The WQE was fenced behind earlier ones (in-order execution: it only waits).
    pub fence_wait: bool,
    /// The WQE's operation, once its checks passed.
    pub operation: Option<NicOperationWork>,
    /// It wrote a CQE (success or error).
    pub completion: bool,
}

/// The data movement of one WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NicOperationWork {
    /// A write (gathered or inline) of `bytes` to the peer.
    RdmaWrite {
        /// Payload bytes.
        bytes: u64,
    },
    /// A read of `bytes` from the peer.
    RdmaRead {
        /// Payload bytes.
        bytes: u64,
    },
    /// An 8-byte remote atomic.
    Atomic,
    /// A DUMP: `bytes` of local memory read.
    LocalRead {
        /// Bytes read.
        bytes: u64,
    },
}

/// What a GPU-side poll of a QP's CQ concludes about one WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqPollResult {
    /// A CQE at or after the WQE was found: it is retired (RC completions are cumulative).
    Completed,
    /// No CQE covers it yet.
    Pending,
    /// The CQ holds an error CQE at or before the WQE.
    Error {
        /// `CQE_SYNDROME_*`.
        syndrome: u8,
        /// `wqe_index` of the failed WQE.
        wqe_counter: u16,
    },
}

/// Errors of the simulation itself (bad configuration, queues in unmapped memory, unknown QPs):
/// unlike failed WQEs, these have no CQE and stop the simulation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NicError {
    /// A QP with this number exists already on the rank.
    #[error("rank {rank}: QP {qpn:#x} already exists")]
    DuplicateQueuePair {
        /// Rank.
        rank: u32,
        /// QPN.
        qpn: u32,
    },
    /// The configuration is invalid.
    #[error("rank {rank}: QP {qpn:#x} configuration is invalid: {reason}")]
    InvalidConfig {
        /// Rank.
        rank: u32,
        /// QPN.
        qpn: u32,
        /// What is wrong.
        reason: String,
    },
    /// No QP with this number on the rank.
    #[error("rank {rank}: no QP {qpn:#x}")]
    UnknownQueuePair {
        /// Rank.
        rank: u32,
        /// QPN.
        qpn: u32,
    },
    /// The 8 bytes stored to the UAR decode to neither doorbell convention.
    #[error("rank {rank}: malformed UAR doorbell {value:02x?}: {source}")]
    MalformedDoorbell {
        /// Rank.
        rank: u32,
        /// The bytes stored.
        value: [u8; 8],
        /// Why.
        source: DoorbellDecodeError,
    },
    /// The DBR claims more outstanding basic blocks than the ring holds, or went backwards.
    #[error(
        "rank {rank}: QP {qpn:#x} doorbell record says producer {doorbell_record:#06x} but the NIC is at basic block {next_basic_block} (last producer seen {producer_index_seen}) of a {sq_basic_block_count}-block ring"
    )]
    DoorbellRecordOverrun {
        /// Rank.
        rank: u32,
        /// QPN.
        qpn: u32,
        /// The 16-bit send word read.
        doorbell_record: u16,
        /// Producer count before this read.
        producer_index_seen: u64,
        /// Next basic block to execute.
        next_basic_block: u64,
        /// Ring size.
        sq_basic_block_count: u32,
    },
    /// A queue structure (SQ, DBR, CQ) is not in mapped memory.
    #[error("rank {rank}: QP {qpn:#x} {structure}: {source}")]
    QueueMemory {
        /// Rank.
        rank: u32,
        /// QPN.
        qpn: u32,
        /// "send ring", "doorbell record" or "completion queue".
        structure: &'static str,
        /// The memory error.
        source: NicMemoryError,
    },
    /// A CQE slot holds bytes that are not a requester CQE.
    #[error("rank {rank}: QP {qpn:#x} CQE slot {slot}: {source}")]
    CorruptCqe {
        /// Rank.
        rank: u32,
        /// QPN.
        qpn: u32,
        /// Slot.
        slot: u32,
        /// Why.
        source: CqeDecodeError,
    },
}

#[derive(Clone, Debug)]
struct QueuePair {
    config: QueuePairConfig,
    doorbell_pending: bool,
    doorbells_rung: u64,
    last_doorbell_index: Option<u16>,
    producer_index_seen: u64,
    next_basic_block: u64,
    wqes_executed: u64,
    completions_written: u64,
    state: QueuePairState,
    last_cqe: Option<String>,
    receives_consumed: u64,
}

/// A WQE that failed: the syndrome for its error CQE and a reason for people.
struct WqeFailure {
    syndrome: u8,
    reason: String,
}

fn failure(syndrome: u8) -> impl Fn(NicMemoryError) -> WqeFailure {
    move |error| WqeFailure {
        syndrome,
        reason: error.to_string(),
    }
}

/// A 64-bit fetch-and-add whose carries stop at the bits set in `field_boundary` (each set bit is
/// the most significant bit of a field), as the masked FA of ConnectX defines it.
pub fn apply_masked_fetch_add_64(old: u64, add: u64, field_boundary: u64) -> u64 {
    let mut result = 0;
    let mut carry = 0;
    for bit in 0..64 {
        let sum = ((old >> bit) & 1) + ((add >> bit) & 1) + carry;
        result |= (sum & 1) << bit;
        carry = if (field_boundary >> bit) & 1 == 1 {
            0
        } else {
            sum >> 1
        };
    }
    result
}

/// A 64-bit masked compare-and-swap: compares under `compare_mask`, replaces the bits of
/// `swap_mask` on success; returns the new value.
pub fn apply_masked_compare_swap_64(old: u64, operands: &MaskedCompareSwap64) -> u64 {
    if old & operands.compare_mask == operands.compare & operands.compare_mask {
        (old & !operands.swap_mask) | (operands.swap & operands.swap_mask)
    } else {
        old
    }
}

/// Whether a CQE for WQE `wqe_counter` retires the WQE at 64-bit index `wqe_index`: a signed
/// 16-bit distance, exact while fewer than 2^15 basic blocks are outstanding.
fn counter_at_or_after(wqe_counter: u16, wqe_index: u64) -> bool {
    wqe_counter.wrapping_sub(wqe_index as u16) as i16 >= 0
}

impl QueuePair {
    /// A QP with nothing rung, read or executed yet.
    fn fresh(config: QueuePairConfig) -> Self {
        QueuePair {
            config,
            doorbell_pending: false,
            doorbells_rung: 0,
            last_doorbell_index: None,
            producer_index_seen: 0,
            next_basic_block: 0,
            wqes_executed: 0,
            completions_written: 0,
            state: QueuePairState::Ready,
            last_cqe: None,
            receives_consumed: 0,
        }
    }

    fn has_work(&self) -> bool {
        self.state == QueuePairState::Ready
            && (self.doorbell_pending || self.next_basic_block < self.producer_index_seen)
    }

    fn memory_error(&self, structure: &'static str) -> impl Fn(NicMemoryError) -> NicError {
        let (rank, qpn) = (self.config.rank, self.config.qpn);
        move |source| NicError::QueueMemory {
            rank,
            qpn,
            structure,
            source,
        }
    }

    fn read_basic_block(&self, memory: &impl NicMemory, index: u64) -> Result<Vec<u8>, NicError> {
        let slot = index % u64::from(self.config.sq_basic_block_count);
        let address = self.config.sq_buffer_address + slot * WQE_BASIC_BLOCK_BYTES as u64;
        memory
            .read(self.config.rank, address, WQE_BASIC_BLOCK_BYTES as u64)
            .map_err(self.memory_error("send ring"))
    }

    fn read_doorbell_record(&mut self, memory: &impl NicMemory) -> Result<u16, NicError> {
        let bytes = memory
            .read(
                self.config.rank,
                self.config.doorbell_record_address,
                DoorbellRecord::SIZE_BYTES as u64,
            )
            .map_err(self.memory_error("doorbell record"))?;
        let record = DoorbellRecord::from_bytes(&bytes.try_into().expect("8 bytes"));
        let doorbell_record = record.send_producer_index();
        let advance = u64::from(doorbell_record.wrapping_sub(self.producer_index_seen as u16));
        let producer_index = self.producer_index_seen + advance;
        if producer_index - self.next_basic_block > u64::from(self.config.sq_basic_block_count) {
            return Err(NicError::DoorbellRecordOverrun {
                rank: self.config.rank,
                qpn: self.config.qpn,
                doorbell_record,
                producer_index_seen: self.producer_index_seen,
                next_basic_block: self.next_basic_block,
                sq_basic_block_count: self.config.sq_basic_block_count,
            });
        }
        self.producer_index_seen = producer_index;
        Ok(doorbell_record)
    }

    /// Reads and validates the WQE at `next_basic_block`. The outer error is the simulator's,
    /// the inner one a malformed WQE (local QP operation error).
    fn fetch(&self, memory: &impl NicMemory) -> Result<Result<DecodedWqe, WqeFailure>, NicError> {
        let (qpn, index) = (self.config.qpn, self.next_basic_block);
        let first = self.read_basic_block(memory, index)?;
        let ds = u64::from(first[7] & 0x3f);
        let basic_blocks = ds.div_ceil(DS_PER_BASIC_BLOCK).max(1);
        let malformed = |reason: String| {
            Ok(Err(WqeFailure {
                syndrome: CQE_SYNDROME_LOCAL_QP_OP_ERR,
                reason,
            }))
        };
        let doorbelled = self.producer_index_seen - index;
        if basic_blocks > doorbelled {
            return malformed(format!(
                "ds {ds} spans {basic_blocks} basic blocks but only {doorbelled} were doorbelled"
            ));
        }
        let mut bytes = first;
        for offset in 1..basic_blocks {
            bytes.extend(self.read_basic_block(memory, index + offset)?);
        }
        let wqe = match decode_wqe(&bytes) {
            Ok(wqe) => wqe,
            Err(error) => return malformed(error.to_string()),
        };
        if wqe.control.wqe_index != index as u16 {
            return malformed(format!(
                "wqe_index {:#06x} does not match its slot (expected {:#06x}): stale or garbage slot",
                wqe.control.wqe_index, index as u16
            ));
        }
        if wqe.control.qpn != qpn & 0x00ff_ffff {
            return malformed(format!("control segment names QP {:#x}", wqe.control.qpn));
        }
        Ok(Ok(wqe))
    }

    /// Reads the gather list of a write, checking each lkey.
    fn gather(
        &self,
        memory: &impl NicMemory,
        segments: &[LocalBuffer],
    ) -> Result<Vec<u8>, WqeFailure> {
        let mut data = Vec::new();
        for segment in segments.iter().filter(|segment| segment.length_bytes > 0) {
            let (address, length) = (segment.address, u64::from(segment.length_bytes));
            memory
                .check_local_key(self.config.rank, segment.lkey, address, length)
                .map_err(failure(CQE_SYNDROME_LOCAL_PROT_ERR))?;
            data.extend(
                memory
                    .read(self.config.rank, address, length)
                    .map_err(failure(CQE_SYNDROME_LOCAL_PROT_ERR))?,
            );
        }
        Ok(data)
    }

    /// Checks the gather list of a write (each lkey, each range mapped) without reading it;
    /// returns its length.
    fn check_gather(
        &self,
        memory: &impl NicMemory,
        segments: &[LocalBuffer],
    ) -> Result<u64, WqeFailure> {
        let mut length = 0;
        for segment in segments.iter().filter(|segment| segment.length_bytes > 0) {
            let (address, segment_length) = (segment.address, u64::from(segment.length_bytes));
            memory
                .check_local_key(self.config.rank, segment.lkey, address, segment_length)
                .and_then(|()| memory.check_mapped(self.config.rank, address, segment_length))
                .map_err(failure(CQE_SYNDROME_LOCAL_PROT_ERR))?;
            length += segment_length;
        }
        Ok(length)
    }

    /// Copies a checked gather list to consecutive bytes of the peer at `remote_address`, one
    /// [`NicMemory::copy`] per segment, in list order.
    fn copy_gathered(
        &self,
        memory: &mut impl NicMemory,
        segments: &[LocalBuffer],
        remote_address: u64,
    ) -> Result<(), NicMemoryError> {
        let mut offset = 0;
        for segment in segments.iter().filter(|segment| segment.length_bytes > 0) {
            let length = u64::from(segment.length_bytes);
            memory.copy(
                (self.config.rank, segment.address),
                (self.config.peer_rank, remote_address + offset),
                length,
            )?;
            offset += length;
        }
        Ok(())
    }

    fn check_remote(
        &self,
        memory: &impl NicMemory,
        remote: &RemoteAddress,
        length: u64,
    ) -> Result<(), WqeFailure> {
        memory
            .check_remote_key(self.config.peer_rank, remote.rkey, remote.address, length)
            .map_err(failure(CQE_SYNDROME_REMOTE_ACCESS_ERR))
    }

    /// An 8-byte atomic on the peer's little-endian word (`atomic_req_8B_endianness_mode = 1`);
    /// the old value lands little-endian in `result`.
    fn atomic(
        &self,
        memory: &mut impl NicMemory,
        remote: &RemoteAddress,
        result: &LocalBuffer,
        update: impl Fn(u64) -> u64,
    ) -> Result<Vec<WrittenRange>, WqeFailure> {
        let (rank, peer_rank) = (self.config.rank, self.config.peer_rank);
        if result.length_bytes < 8 {
            return Err(WqeFailure {
                syndrome: CQE_SYNDROME_LOCAL_LENGTH_ERR,
                reason: format!(
                    "rank {rank}: atomic result buffer at {:#x} is {} B, needs 8",
                    result.address, result.length_bytes
                ),
            });
        }
        memory
            .check_local_key(rank, result.lkey, result.address, 8)
            .map_err(failure(CQE_SYNDROME_LOCAL_PROT_ERR))?;
        if !remote.address.is_multiple_of(8) {
            return Err(WqeFailure {
                syndrome: CQE_SYNDROME_REMOTE_INVAL_REQ_ERR,
                reason: format!(
                    "rank {peer_rank}: atomic target {:#x} (rkey {:#x}) is not 8-byte aligned",
                    remote.address, remote.rkey
                ),
            });
        }
        self.check_remote(memory, remote, 8)?;
        let old = memory
            .atomic_update_u64(peer_rank, remote.address, &update)
            .map_err(failure(CQE_SYNDROME_REMOTE_ACCESS_ERR))?;
        memory
            .write_u64(rank, result.address, old)
            .map_err(failure(CQE_SYNDROME_LOCAL_PROT_ERR))?;
        Ok(vec![
            WrittenRange {
                rank: peer_rank,
                address: remote.address,
                length_bytes: 8,
            },
            WrittenRange {
                rank,
                address: result.address,
                length_bytes: 8,
            },
        ])
    }

    /// Executes a validated WQE; returns the outcome and records its operation in `work`.
    fn perform(
        &self,
        memory: &mut impl NicMemory,
        wqe: &DecodedWqe,
        work: &mut NicWork,
    ) -> Result<WqeOutcome, WqeFailure> {
        let (rank, peer_rank) = (self.config.rank, self.config.peer_rank);
        let completed = |byte_count, written| WqeOutcome::Completed {
            byte_count,
            immediate: None,
            written,
        };
        match &wqe.operation {
            WqeOperation::Nop => Ok(completed(0, Vec::new())),
            WqeOperation::RdmaWrite {
                remote,
                payload,
                with_immediate,
            } => {
                let length = match payload {
                    WritePayload::Inline(bytes) => bytes.len() as u64,
                    WritePayload::Gather(segments) => self.check_gather(memory, segments)?,
                };
                let mut written = Vec::new();
                // A zero-length write touches no memory, so it checks no rkey (IB semantics).
                if length > 0 {
                    self.check_remote(memory, remote, length)?;
                    match payload {
                        WritePayload::Inline(bytes) => {
                            memory.write(peer_rank, remote.address, bytes)
                        }
                        WritePayload::Gather(segments) => {
                            self.copy_gathered(memory, segments, remote.address)
                        }
                    }
                    .map_err(failure(CQE_SYNDROME_REMOTE_ACCESS_ERR))?;
                    written.push(WrittenRange {
                        rank: peer_rank,
                        address: remote.address,
                        length_bytes: length,
                    });
                }
                work.operation = Some(NicOperationWork::RdmaWrite { bytes: length });
                Ok(WqeOutcome::Completed {
                    byte_count: length,
                    immediate: with_immediate.then_some(wqe.control.immediate),
                    written,
                })
            }
            WqeOperation::RdmaRead { remote, local } => {
                for segment in local.iter().filter(|segment| segment.length_bytes > 0) {
                    memory
                        .check_local_key(
                            rank,
                            segment.lkey,
                            segment.address,
                            u64::from(segment.length_bytes),
                        )
                        .map_err(failure(CQE_SYNDROME_LOCAL_PROT_ERR))?;
                }
                let length: u64 = local.iter().map(|s| u64::from(s.length_bytes)).sum();
                let mut written = Vec::new();
                if length > 0 {
                    self.check_remote(memory, remote, length)?;
                    let data = memory
                        .read(peer_rank, remote.address, length)
                        .map_err(failure(CQE_SYNDROME_REMOTE_ACCESS_ERR))?;
                    let mut offset = 0;
                    for segment in local.iter().filter(|segment| segment.length_bytes > 0) {
                        let end = offset + segment.length_bytes as usize;
                        memory
                            .write(rank, segment.address, &data[offset..end])
                            .map_err(failure(CQE_SYNDROME_LOCAL_PROT_ERR))?;
                        written.push(WrittenRange {
                            rank,
                            address: segment.address,
                            length_bytes: u64::from(segment.length_bytes),
                        });
                        offset = end;
                    }
                }
                work.operation = Some(NicOperationWork::RdmaRead { bytes: length });
                Ok(completed(length, written))
            }
            WqeOperation::AtomicFetchAdd {
                remote,
                add,
                result,
            } => {
                work.operation = Some(NicOperationWork::Atomic);
                let written = self.atomic(memory, remote, result, |old| old.wrapping_add(*add))?;
                Ok(completed(8, written))
            }
            WqeOperation::AtomicCompareSwap {
                remote,
                compare,
                swap,
                result,
            } => {
                work.operation = Some(NicOperationWork::Atomic);
                let update = |old| if old == *compare { *swap } else { old };
                Ok(completed(8, self.atomic(memory, remote, result, update)?))
            }
            WqeOperation::MaskedFetchAdd64 {
                remote,
                add,
                field_boundary,
                result,
            } => {
                work.operation = Some(NicOperationWork::Atomic);
                let update = |old| apply_masked_fetch_add_64(old, *add, *field_boundary);
                Ok(completed(8, self.atomic(memory, remote, result, update)?))
            }
            WqeOperation::MaskedCompareSwap64 {
                remote,
                operands,
                result,
            } => {
                work.operation = Some(NicOperationWork::Atomic);
                let update = |old| apply_masked_compare_swap_64(old, operands);
                Ok(completed(8, self.atomic(memory, remote, result, update)?))
            }
            WqeOperation::Dump { local } => {
                let data = self.gather(memory, std::slice::from_ref(local))?;
                work.operation = Some(NicOperationWork::LocalRead {
                    bytes: data.len() as u64,
                });
                Ok(completed(0, Vec::new()))
            }
        }
    }

    /// Writes the next CQE: slot `completions % cqe_count` with the lap parity as owner, or slot 0
    /// with owner 0 on a collapsed CQ. Returns the slot.
    fn write_cqe(
        &mut self,
        memory: &mut impl NicMemory,
        bytes: impl FnOnce(bool) -> [u8; Cqe64::SIZE_BYTES],
        summary: String,
    ) -> Result<u32, NicError> {
        let number = self.completions_written;
        let cqe_count = self.config.cqe_count;
        let (slot, owner) = if self.config.cq_collapsed {
            (0, false)
        } else {
            // Truncating to u32 keeps the lap parity: cqe_count is a power of two below 2^32.
            let number = number as u32;
            (number % cqe_count, cqe_owner_for_index(number, cqe_count))
        };
        let address = self.config.cq_buffer_address + u64::from(slot) * CQE_BYTES;
        memory
            .write(self.config.rank, address, &bytes(owner))
            .map_err(self.memory_error("completion queue"))?;
        self.completions_written += 1;
        self.last_cqe = Some(format!(
            "#{number} in slot {slot} (owner {owner}): {summary}"
        ));
        Ok(slot)
    }

    fn execute_next(
        &mut self,
        memory: &mut impl NicMemory,
        work: &mut NicWork,
    ) -> Result<WqeExecution, NicError> {
        let index = self.next_basic_block;
        let opcode = self.read_basic_block(memory, index)?[3];
        let mut completion = RequesterCompletion {
            send_opcode: opcode,
            qpn: self.config.qpn,
            wqe_counter: index as u16,
        };
        let result = self.fetch(memory)?.and_then(|wqe| {
            let basic_blocks = wqe.basic_block_count() as u64;
            work.wqe_fetch_basic_blocks = Some(basic_blocks);
            // In-order execution means a fence only waits: it takes time, changes no order.
            if wqe.control.fm_ce_se & FENCE_MODE_MASK != 0 && self.wqes_executed > 0 {
                work.fence_wait = true;
            }
            let outcome = self.perform(memory, &wqe, work)?;
            Ok((wqe, basic_blocks, outcome))
        });
        let (outcome, cqe_slot) = match result {
            Ok((wqe, basic_blocks, outcome)) => {
                self.next_basic_block += basic_blocks;
                self.wqes_executed += 1;
                let mut cqe_slot = None;
                if wqe.control.fm_ce_se & WQE_CTRL_CQ_UPDATE != 0 {
                    let WqeOutcome::Completed { byte_count, .. } = &outcome else {
                        unreachable!("perform returns failures as Err")
                    };
                    let byte_count = *byte_count as u32;
                    completion.wqe_counter = wqe.control.wqe_index;
                    work.completion = true;
                    let summary =
                        format!("completed WQE {:#06x} opcode {opcode:#04x}", index as u16);
                    cqe_slot = Some(self.write_cqe(
                        memory,
                        |owner| Cqe64::requester(&completion, byte_count, owner).to_bytes(),
                        summary,
                    )?);
                }
                (outcome, cqe_slot)
            }
            Err(WqeFailure { syndrome, reason }) => {
                let reason = format!(
                    "rank {} QP {:#x} (to rank {}) WQE {:#06x} at basic block {index}: {reason}",
                    self.config.rank, self.config.qpn, self.config.peer_rank, index as u16
                );
                self.state = QueuePairState::Error {
                    syndrome,
                    wqe_counter: index as u16,
                };
                work.completion = true;
                let summary = format!(
                    "error {syndrome:#04x} ({}) on WQE {:#06x}: {reason}",
                    cqe_syndrome_name(syndrome).unwrap_or("unknown"),
                    index as u16
                );
                let slot = self.write_cqe(
                    memory,
                    |owner| ErrorCqe64::requester_error(&completion, syndrome, 0, owner).to_bytes(),
                    summary,
                )?;
                (WqeOutcome::Failed { syndrome, reason }, Some(slot))
            }
        };
        Ok(WqeExecution {
            basic_block_index: index,
            opcode,
            outcome,
            cqe_slot,
        })
    }

    fn status(&self) -> QueuePairStatus {
        QueuePairStatus {
            doorbell_pending: self.doorbell_pending,
            doorbells_rung: self.doorbells_rung,
            producer_index_seen: self.producer_index_seen,
            next_basic_block: self.next_basic_block,
            wqes_executed: self.wqes_executed,
            completions_written: self.completions_written,
            state: self.state,
        }
    }
}

/// The NICs of all ranks: every QP, keyed by (rank, QPN).
#[derive(Clone, Debug, Default)]
pub struct Nic {
    queue_pairs: BTreeMap<(u32, u32), QueuePair>,
    receive_cqs: BTreeMap<u32, ReceiveCq>,
    /// The QPs of `queue_pairs` that are [`Nic::create_remote_responder`]'s.
    remote_responders: std::collections::BTreeSet<(u32, u32)>,
}

impl Nic {
    /// NICs with no QPs.
    pub fn new() -> Self {
        Self::default()
    }

    /// Creates a QP after checking its configuration and memory, and fills its CQ with invalid
    /// CQEs (`op_own = 0xF0`), as rdma-core does.
    pub fn create_queue_pair(
        &mut self,
        memory: &mut impl NicMemory,
        config: QueuePairConfig,
    ) -> Result<(), NicError> {
        let (rank, qpn) = (config.rank, config.qpn);
        let invalid = |reason: String| NicError::InvalidConfig { rank, qpn, reason };
        if self.queue_pairs.contains_key(&(rank, qpn)) {
            return Err(NicError::DuplicateQueuePair { rank, qpn });
        }
        if qpn > 0x00ff_ffff {
            return Err(invalid("QPN does not fit 24 bits".to_owned()));
        }
        if !config.sq_basic_block_count.is_power_of_two()
            || config.sq_basic_block_count > SQ_BASIC_BLOCK_COUNT_MAX
        {
            return Err(invalid(format!(
                "sq_basic_block_count {} is not a power of two up to {SQ_BASIC_BLOCK_COUNT_MAX}",
                config.sq_basic_block_count
            )));
        }
        if !config.cqe_count.is_power_of_two() {
            return Err(invalid(format!(
                "cqe_count {} is not a power of two",
                config.cqe_count
            )));
        }
        let queue_pair = QueuePair::fresh(config);
        let sq_bytes = u64::from(config.sq_basic_block_count) * WQE_BASIC_BLOCK_BYTES as u64;
        memory
            .check_mapped(rank, config.sq_buffer_address, sq_bytes)
            .map_err(queue_pair.memory_error("send ring"))?;
        memory
            .check_mapped(
                rank,
                config.doorbell_record_address,
                DoorbellRecord::SIZE_BYTES as u64,
            )
            .map_err(queue_pair.memory_error("doorbell record"))?;
        let invalid_cqes = Cqe64::invalid()
            .to_bytes()
            .repeat(config.cqe_count as usize);
        memory
            .write(rank, config.cq_buffer_address, &invalid_cqes)
            .map_err(queue_pair.memory_error("completion queue"))?;
        self.queue_pairs.insert((rank, qpn), queue_pair);
        Ok(())
    }

    fn queue_pair(&self, rank: u32, qpn: u32) -> Result<&QueuePair, NicError> {
        self.queue_pairs
            .get(&(rank, qpn))
            .ok_or(NicError::UnknownQueuePair { rank, qpn })
    }

    /// The GPU's 8-byte store to the UAR of `rank`'s NIC: decodes either doorbell convention and
    /// marks the named QP as triggered. The DBR is read later, when the NIC works on the QP.
    pub fn ring_doorbell(&mut self, rank: u32, uar_value: [u8; 8]) -> Result<(), NicError> {
        let decoded = UarDoorbell::from_bytes(&uar_value)
            .decode()
            .map_err(|source| NicError::MalformedDoorbell {
                rank,
                value: uar_value,
                source,
            })?;
        let (qpn, index) = match decoded {
            DecodedUarDoorbell::NextProducerIndex {
                producer_index,
                qpn,
            } => (qpn, producer_index),
            DecodedUarDoorbell::LastWqeControl { wqe_index, qpn, .. } => (qpn, wqe_index),
        };
        if self.remote_responders.contains(&(rank, qpn)) {
            return Err(NicError::InvalidConfig {
                rank,
                qpn,
                reason: "a doorbell names the responder half of a QP another NIC runs".to_owned(),
            });
        }
        let queue_pair = self
            .queue_pairs
            .get_mut(&(rank, qpn))
            .ok_or(NicError::UnknownQueuePair { rank, qpn })?;
        queue_pair.doorbell_pending = true;
        queue_pair.doorbells_rung += 1;
        queue_pair.last_doorbell_index = Some(index);
        Ok(())
    }

    /// Creates `config.rank`'s receive CQ and fills it with invalid CQEs.
    pub fn create_receive_cq(
        &mut self,
        memory: &mut impl NicMemory,
        config: ReceiveCqConfig,
    ) -> Result<(), NicError> {
        if !config.cqe_count.is_power_of_two() {
            return Err(NicError::InvalidConfig {
                rank: config.rank,
                qpn: 0,
                reason: format!("receive CQ size {} is not a power of two", config.cqe_count),
            });
        }
        let memory_error = |source| NicError::QueueMemory {
            rank: config.rank,
            qpn: 0,
            structure: "receive CQ",
            source,
        };
        if let Some(counter) = config.shared_producer_counter_address {
            // Everything a delivery touches is checked now: once a delivery has taken a CQE
            // number from the shared count, a failure would leave that slot empty for good and
            // the consumer, which drains in order, blocked behind it.
            let cq_bytes = u64::from(config.cqe_count) * CQE_BYTES;
            memory
                .check_mapped(config.rank, counter, 8)
                .and_then(|()| memory.check_mapped(config.rank, config.buffer_address, cq_bytes))
                .and_then(|()| memory.check_mapped(config.rank, config.doorbell_record_address, 4))
                .map_err(memory_error)?;
        } else {
            let invalid_cqes = Cqe64::invalid()
                .to_bytes()
                .repeat(config.cqe_count as usize);
            memory
                .write(config.rank, config.buffer_address, &invalid_cqes)
                .map_err(memory_error)?;
        }
        self.receive_cqs.insert(
            config.rank,
            ReceiveCq {
                config,
                produced: 0,
            },
        );
        Ok(())
    }

    /// Adds the responder half of a peer's QP that another NIC runs ([`RemoteResponderConfig`]),
    /// so that this NIC's QP to that peer can deliver writes with immediate into it. It has no
    /// send side: it is never runnable and a doorbell naming it is refused.
    pub fn create_remote_responder(
        &mut self,
        memory: &mut impl NicMemory,
        config: RemoteResponderConfig,
    ) -> Result<(), NicError> {
        let (rank, qpn) = (config.rank, config.qpn);
        if self.queue_pairs.contains_key(&(rank, qpn)) {
            return Err(NicError::DuplicateQueuePair { rank, qpn });
        }
        if !config.receive.wqe_count.is_power_of_two() {
            return Err(NicError::InvalidConfig {
                rank,
                qpn,
                reason: format!(
                    "receive queue size {} is not a power of two",
                    config.receive.wqe_count
                ),
            });
        }
        let queue_pair = QueuePair::fresh(QueuePairConfig {
            rank,
            peer_rank: config.peer_rank,
            qpn,
            sq_buffer_address: 0,
            sq_basic_block_count: 1,
            doorbell_record_address: 0,
            cq_buffer_address: 0,
            cqe_count: 1,
            cq_collapsed: true,
            receive: Some(config.receive),
        });
        let receive_bytes = u64::from(config.receive.wqe_count)
            * aboleth_abi::mlx5::receive::RECEIVE_WQE_BYTES as u64;
        memory
            .check_mapped(rank, config.receive.buffer_address, receive_bytes)
            .and_then(|()| memory.check_mapped(rank, config.receive.doorbell_record_address, 4))
            .map_err(queue_pair.memory_error("receive queue"))?;
        self.queue_pairs.insert((rank, qpn), queue_pair);
        self.remote_responders.insert((rank, qpn));
        Ok(())
    }

    /// Whether some QP has a doorbell to look at or doorbelled WQEs it can execute (a write
    /// with immediate whose responder has no receive posted cannot).
    pub fn pending_work(&self, memory: &impl NicMemory) -> bool {
        self.queue_pairs
            .iter()
            .any(|(key, queue_pair)| self.can_step(*key, queue_pair, memory))
    }

    fn can_step(&self, key: (u32, u32), queue_pair: &QueuePair, memory: &impl NicMemory) -> bool {
        queue_pair.has_work() && (queue_pair.doorbell_pending || !self.stalled(key, memory))
    }

    /// The responder QP of `key`'s QP: the one on its peer whose peer it is.
    fn responder_of(&self, key: (u32, u32)) -> Option<(u32, u32)> {
        let queue_pair = self.queue_pairs.get(&key)?;
        let (rank, peer) = (queue_pair.config.rank, queue_pair.config.peer_rank);
        self.queue_pairs
            .iter()
            .find(|((other_rank, _), other)| *other_rank == peer && other.config.peer_rank == rank)
            .map(|(other_key, _)| *other_key)
    }

    /// The responder of `key`'s QP when it has a receive queue (else writes with immediate
    /// are executed without a responder side, as a bare requester model).
    fn receiving_responder(&self, key: (u32, u32)) -> Option<(u32, u32)> {
        self.responder_of(key).filter(|responder| {
            self.queue_pairs
                .get(responder)
                .is_some_and(|queue_pair| queue_pair.config.receive.is_some())
        })
    }

    /// Receives posted to the responder `key` and not yet consumed.
    fn receives_available(&self, key: (u32, u32), memory: &impl NicMemory) -> u64 {
        let Some(queue_pair) = self.queue_pairs.get(&key) else {
            return 0;
        };
        let Some(receive) = queue_pair.config.receive else {
            return 0;
        };
        // An unreadable word is not "no receive": the step runs and reports the memory error
        // (a stall here would hang the queue without a word).
        let Ok(word) = memory.read(key.0, receive.doorbell_record_address, 4) else {
            return u64::MAX;
        };
        let posted = u32::from_be_bytes(word.try_into().expect("4 bytes")) as u16;
        u64::from(posted.wrapping_sub(queue_pair.receives_consumed as u16))
    }

    /// Whether the next doorbelled WQE of `key` is a write with immediate that its responder
    /// has no receive for (receiver not ready: it waits).
    fn stalled(&self, key: (u32, u32), memory: &impl NicMemory) -> bool {
        let Some(queue_pair) = self.queue_pairs.get(&key) else {
            return false;
        };
        if queue_pair.next_basic_block >= queue_pair.producer_index_seen {
            return false;
        }
        let opcode = queue_pair
            .read_basic_block(memory, queue_pair.next_basic_block)
            .map_or(0, |block| block[3]);
        opcode == aboleth_abi::mlx5::OPCODE_RDMA_WRITE_IMM
            && self
                .receiving_responder(key)
                .is_some_and(|responder| self.receives_available(responder, memory) == 0)
    }

    /// The responder side of a write with immediate that `requester`'s QP executed: consumes a
    /// receive of the responder's queue and writes the responder CQE into its rank's receive
    /// CQ. Returns the responder's rank and the CQE's number.
    fn deliver_immediate(
        &mut self,
        memory: &mut impl NicMemory,
        requester: (u32, u32),
        immediate: u32,
        byte_count: u64,
    ) -> Result<(u32, u64), NicError> {
        let responder = self
            .responder_of(requester)
            .ok_or(NicError::InvalidConfig {
                rank: requester.0,
                qpn: requester.1,
                reason: "a write with immediate to a peer with no QP back".to_owned(),
            })?;
        let queue_pair = self.queue_pairs.get_mut(&responder).expect("found above");
        let receive = queue_pair.config.receive.ok_or(NicError::InvalidConfig {
            rank: responder.0,
            qpn: responder.1,
            reason: "a write with immediate arrived at a QP without a receive queue".to_owned(),
        })?;
        let receive_index = queue_pair.receives_consumed;
        let slot = receive_index % u64::from(receive.wqe_count);
        memory
            .read(
                responder.0,
                receive.buffer_address
                    + slot * aboleth_abi::mlx5::receive::RECEIVE_WQE_BYTES as u64,
                aboleth_abi::mlx5::receive::RECEIVE_WQE_BYTES as u64,
            )
            .map_err(queue_pair.memory_error("receive queue"))?;
        queue_pair.receives_consumed += 1;
        let cq = self
            .receive_cqs
            .get_mut(&responder.0)
            .ok_or(NicError::InvalidConfig {
                rank: responder.0,
                qpn: responder.1,
                reason: "no receive CQ on this rank".to_owned(),
            })?;
        let memory_error = |source| NicError::QueueMemory {
            rank: responder.0,
            qpn: responder.1,
            structure: "receive CQ",
            source,
        };
        // The CQE's number: this NIC's own count, or one taken from the count the writers share.
        let number = match cq.config.shared_producer_counter_address {
            None => cq.produced,
            Some(counter) => memory
                .atomic_update_u64(responder.0, counter, &|count| count.wrapping_add(1))
                .map_err(memory_error)?,
        };
        let word = memory
            .read(responder.0, cq.config.doorbell_record_address, 4)
            .map_err(memory_error)?;
        let consumer_low = u32::from_be_bytes(word.try_into().expect("4 bytes")) & 0x00ff_ffff;
        // The consumer index is the CQ owner's word: a garbage value is an error, not a panic.
        let behind = u64::from((number as u32).wrapping_sub(consumer_low) & 0x00ff_ffff);
        let Some(consumer) = number.checked_sub(behind) else {
            return Err(NicError::InvalidConfig {
                rank: responder.0,
                qpn: responder.1,
                reason: format!(
                    "receive CQ consumer index {consumer_low:#x} is ahead of the {number} CQEs produced"
                ),
            });
        };
        if number - consumer >= u64::from(cq.config.cqe_count) {
            return Err(NicError::InvalidConfig {
                rank: responder.0,
                qpn: responder.1,
                reason: format!(
                    "receive CQ overrun: CQE {number} would overwrite one the consumer (at {consumer}) has not read"
                ),
            });
        }
        let cqe_slot = (number % u64::from(cq.config.cqe_count)) as u32;
        let owner = cqe_owner_for_index(number as u32, cq.config.cqe_count);
        let cqe = Cqe64::responder_write_immediate(
            responder.1,
            receive_index as u16,
            byte_count as u32,
            immediate,
            owner,
        );
        memory
            .write(
                responder.0,
                cq.config.buffer_address + u64::from(cqe_slot) * CQE_BYTES,
                &cqe.to_bytes(),
            )
            .map_err(memory_error)?;
        cq.produced = number + 1;
        Ok((responder.0, number))
    }

    /// One unit of work on one QP chosen by `rng` among those with work: read the DBR if a
    /// doorbell is pending, then execute the next doorbelled WQE if any. `None` when idle.
    pub fn step(
        &mut self,
        memory: &mut impl NicMemory,
        rng: &mut impl Rng,
    ) -> Result<Option<NicEvent>, NicError> {
        let candidates = self.runnable_queue_pairs(memory);
        if candidates.is_empty() {
            return Ok(None);
        }
        let key = candidates[rng.random_range(0..candidates.len())];
        self.step_queue_pair(memory, key.0, key.1).map(Some)
    }

    /// The QPs that [`Nic::step_queue_pair`] would do something for now: a doorbell to read, or a
    /// doorbelled WQE that is not waiting for a receive.
    pub fn runnable_queue_pairs(&self, memory: &impl NicMemory) -> Vec<(u32, u32)> {
        self.queue_pairs
            .iter()
            .filter(|(key, queue_pair)| self.can_step(**key, queue_pair, memory))
            .map(|(&key, _)| key)
            .collect()
    }

    /// One unit of work on the QP `qpn` of `rank`: read the DBR if a doorbell is pending, then
    /// execute the next doorbelled WQE if any (and, for a write with immediate, the responder's
    /// side). On an idle QP, or one in error, the event has no WQE and no doorbell record read.
    pub fn step_queue_pair(
        &mut self,
        memory: &mut impl NicMemory,
        rank: u32,
        qpn: u32,
    ) -> Result<NicEvent, NicError> {
        let key = (rank, qpn);
        let queue_pair = self
            .queue_pairs
            .get_mut(&key)
            .ok_or(NicError::UnknownQueuePair { rank, qpn })?;
        let mut work = NicWork::default();
        // A QP in error executes nothing more (and writes no second error CQE).
        if queue_pair.state != QueuePairState::Ready {
            return Ok(NicEvent {
                rank,
                qpn,
                peer_rank: queue_pair.config.peer_rank,
                doorbell_record_producer_index: None,
                responder_completion: None,
                wqe: None,
                work,
            });
        }
        let mut doorbell_record_producer_index = None;
        if queue_pair.doorbell_pending {
            queue_pair.doorbell_pending = false;
            work.doorbell_record_read = true;
            doorbell_record_producer_index = Some(queue_pair.read_doorbell_record(memory)?);
        }
        let peer_rank = queue_pair.config.peer_rank;
        let ready = queue_pair.next_basic_block < queue_pair.producer_index_seen;
        let wqe = if ready && !self.stalled(key, memory) {
            let queue_pair = self.queue_pairs.get_mut(&key).expect("candidate exists");
            Some(queue_pair.execute_next(memory, &mut work)?)
        } else {
            None
        };
        let responder_completion = match &wqe {
            Some(WqeExecution {
                outcome:
                    WqeOutcome::Completed {
                        immediate: Some(immediate),
                        byte_count,
                        ..
                    },
                ..
            }) if self.receiving_responder(key).is_some() => {
                Some(self.deliver_immediate(memory, key, *immediate, *byte_count)?)
            }
            _ => None,
        };
        Ok(NicEvent {
            rank: key.0,
            qpn: key.1,
            peer_rank,
            doorbell_record_producer_index,
            responder_completion,
            wqe,
            work,
        })
    }

    /// A snapshot of a QP's progress (diagnostics; not how GPUs learn of completions).
    pub fn queue_pair_status(&self, rank: u32, qpn: u32) -> Result<QueuePairStatus, NicError> {
        Ok(self.queue_pair(rank, qpn)?.status())
    }

    /// What a GPU thread polling this QP's CQ concludes about the WQE at 64-bit basic-block index
    /// `wqe_index`. Collapsed CQ (NVSHMEM): read slot 0's `wqe_counter` and compare it, modulo
    /// 2^16, with the index. Normal CQ: find the newest valid CQE by scanning owner bits from
    /// slot 0 (slots written in the current lap share slot 0's owner bit), then compare the same
    /// way. The caller must only poll indices it has posted; with at most 2^15 basic blocks in
    /// the ring, the signed 16-bit comparison is then exact.
    pub fn poll_cq_for_index(
        &self,
        memory: &impl NicMemory,
        rank: u32,
        qpn: u32,
        wqe_index: u64,
    ) -> Result<CqPollResult, NicError> {
        let queue_pair = self.queue_pair(rank, qpn)?;
        let read_cqe = |slot: u32| -> Result<DecodedCqe, NicError> {
            let address = queue_pair.config.cq_buffer_address + u64::from(slot) * CQE_BYTES;
            let bytes = memory
                .read(rank, address, CQE_BYTES)
                .map_err(queue_pair.memory_error("completion queue"))?;
            decode_cqe(&bytes.try_into().expect("64 bytes")).map_err(|source| {
                NicError::CorruptCqe {
                    rank,
                    qpn,
                    slot,
                    source,
                }
            })
        };
        let owner_of = |cqe: &DecodedCqe| match *cqe {
            DecodedCqe::Invalid { .. } => None,
            DecodedCqe::Requester { owner, .. }
            | DecodedCqe::RequesterError { owner, .. }
            | DecodedCqe::ResponderWriteImmediate { owner, .. } => Some(owner),
        };
        let mut newest = read_cqe(0)?;
        if !queue_pair.config.cq_collapsed
            && let Some(lap_owner) = owner_of(&newest)
        {
            for slot in 1..queue_pair.config.cqe_count {
                let cqe = read_cqe(slot)?;
                if owner_of(&cqe) != Some(lap_owner) {
                    break;
                }
                newest = cqe;
            }
        }
        Ok(match newest {
            DecodedCqe::Invalid { .. } => CqPollResult::Pending,
            // Responder CQEs go to the receive CQ, never to a send CQ.
            DecodedCqe::ResponderWriteImmediate { .. } => {
                return Err(NicError::CorruptCqe {
                    rank,
                    qpn,
                    slot: 0,
                    source: aboleth_abi::mlx5::cqe::CqeDecodeError::UnsupportedOpcode {
                        opcode: aboleth_abi::mlx5::cqe::CQE_OPCODE_RESP_WR_IMM,
                    },
                });
            }
            DecodedCqe::Requester { completion, .. } => {
                if counter_at_or_after(completion.wqe_counter, wqe_index) {
                    CqPollResult::Completed
                } else {
                    CqPollResult::Pending
                }
            }
            DecodedCqe::RequesterError {
                completion,
                syndrome,
                ..
            } => {
                // In-order execution: every WQE before the failed one completed.
                let failed = completion.wqe_counter;
                if counter_at_or_after(failed, wqe_index) && failed != wqe_index as u16 {
                    CqPollResult::Completed
                } else {
                    CqPollResult::Error {
                        syndrome,
                        wqe_counter: failed,
                    }
                }
            }
        })
    }

    /// A one-paragraph account of a QP for deadlock reports: doorbells, the producer count the
    /// NIC saw, WQEs executed, CQEs written, state and the last CQE.
    pub fn describe_queue(&self, rank: u32, qpn: u32) -> String {
        let Ok(queue_pair) = self.queue_pair(rank, qpn) else {
            return format!("rank {rank} QP {qpn:#x}: no such queue pair");
        };
        let state = match queue_pair.state {
            QueuePairState::Ready => "ready".to_owned(),
            QueuePairState::Error {
                syndrome,
                wqe_counter,
            } => format!(
                "error (syndrome {syndrome:#04x} {} at WQE {wqe_counter:#06x})",
                cqe_syndrome_name(syndrome).unwrap_or("unknown")
            ),
        };
        format!(
            "rank {rank} QP {qpn:#x} -> rank {}: {} doorbell(s) rung (last index {}), {}; \
             producer count seen {}, next basic block {}, {} WQE(s) executed, {} CQE(s) written \
             ({} CQ of {}); state {state}; last CQE: {}",
            queue_pair.config.peer_rank,
            queue_pair.doorbells_rung,
            queue_pair
                .last_doorbell_index
                .map_or("none".to_owned(), |index| format!("{index:#06x}")),
            if queue_pair.doorbell_pending {
                "doorbell record not yet read"
            } else {
                "no doorbell pending"
            },
            queue_pair.producer_index_seen,
            queue_pair.next_basic_block,
            queue_pair.wqes_executed,
            queue_pair.completions_written,
            if queue_pair.config.cq_collapsed {
                "collapsed"
            } else {
                "normal"
            },
            queue_pair.config.cqe_count,
            queue_pair.last_cqe.as_deref().unwrap_or("none"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_atomics_follow_field_boundaries_and_masks() {
        // One 64-bit field: a plain add.
        assert_eq!(apply_masked_fetch_add_64(u64::MAX, 1, 0), 0);
        // Two 32-bit fields: the carry out of the low field is dropped.
        let boundary = 1 << 31 | 1 << 63;
        assert_eq!(
            apply_masked_fetch_add_64(0x0000_0001_FFFF_FFFF, 1, boundary),
            0x0000_0001_0000_0000
        );
        let set = MaskedCompareSwap64 {
            swap: 5,
            compare: 0,
            swap_mask: u64::MAX,
            compare_mask: 0,
        };
        assert_eq!(apply_masked_compare_swap_64(99, &set), 5);
        let conditional = MaskedCompareSwap64 {
            compare: 1,
            compare_mask: 0xFF,
            swap: 0xAB00,
            swap_mask: 0xFF00,
        };
        assert_eq!(apply_masked_compare_swap_64(0x1201, &conditional), 0xAB01);
        assert_eq!(apply_masked_compare_swap_64(0x1202, &conditional), 0x1202);
    }

    #[test]
    fn sixteen_bit_counters_compare_across_the_wrap() {
        assert!(counter_at_or_after(5, 5));
        assert!(counter_at_or_after(5, 0x1_0003));
        assert!(!counter_at_or_after(0xFFFF, 0x1_0000));
        assert!(counter_at_or_after(0x0001, 0xFFFF));
    }
}
