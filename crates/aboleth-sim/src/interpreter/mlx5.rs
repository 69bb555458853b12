//! How the simulator executes the mlx5 transport on the GPU's side: the queue-pair set-up of
//! each endpoint and the rank's receive side, the WQEs each queue command becomes (the bytes
//! `aboleth_abi::mlx5` encodes, stored into the send ring like any store), the doorbell record
//! and doorbell, the post lock, completion waits and the reclaiming of a full ring from the
//! collapsed CQ, and the receive side of writes with immediate (receive CQEs applied to flags
//! by receiving waits). It also turns each step of the NIC model ([`crate::nic`], which
//! executes the WQEs) into the interpreter's bookkeeping: clocks, the checks of a landed put,
//! pending immediates.
//!
//! The queue protocol mlx5 shares with the proxy (reservation, publication, a put's and a
//! signal's records) is in `queue.rs`; the NIC's own execution of a WQE is in `nic.rs`.

use aboleth_abi::{
    EndpointHandle, Mlx5QueueManagement, RemoteRegionDescriptor, Transport,
    mlx5::{
        ControlSegment, Cqe64, DoorbellRecord, FENCE_MODE_INITIATOR_SMALL, LocalBuffer,
        MaskedCompareSwap64, RemoteAddress, UarDoorbell, WQE_BASIC_BLOCK_BYTES, WQE_CTRL_CQ_UPDATE,
        WqeCommon, atomic_fetch_add, masked_compare_swap_64, nop_spanning_basic_blocks, rdma_write,
        rdma_write_imm, rdma_write_imm_inline, rdma_write_inline,
        receive::{
            ImmediateSignal, Mlx5ReceiveContext, Mlx5ReceiveQueue, RECEIVE_WQE_BYTES,
            ReceiveDataSegment,
        },
    },
};
use aboleth_ir::ab::attributes::SignalOperation;
use aboleth_passes::support::queue_slots::inline_write_basic_blocks;

use super::{
    Block, CommandKey, PostedCommand, SimulationError, SimulationOptions, Step, World,
    queue::{PreparedPut, PreparedSignal, QueueGeometry},
    setup::{REGION_DESCRIPTOR_BYTES, setup_error},
    store_cost,
};
use crate::{
    CqPollResult, Memory, MemoryKind, Nic, QueuePairConfig,
    nic::{ReceiveCqConfig, ReceiveQueueConfig, WqeOutcome},
    program::{PutOperands, Register, SignalOperands, StoreOrder},
};

/// Where a collapsed CQ's CQE keeps the `wqe_counter` of the last completed WQE.
const CQE_WQE_COUNTER_OFFSET_BYTES: u64 = core::mem::offset_of!(Cqe64, wqe_counter) as u64;
/// Where a CQE keeps its `op_own` byte (opcode and owner bit).
const CQE_OP_OWN_OFFSET_BYTES: u64 = core::mem::offset_of!(Cqe64, op_own) as u64;
/// Bytes of one CQE.
const CQE_BYTES: u64 = Cqe64::SIZE_BYTES as u64;
/// Where the doorbell record keeps the send counter.
const DOORBELL_RECORD_SEND_COUNTER_OFFSET_BYTES: u64 =
    core::mem::offset_of!(DoorbellRecord, send_counter) as u64;
/// Where a WQE's control segment (its first basic block) keeps `fm_ce_se`.
const CONTROL_FM_CE_SE_OFFSET_BYTES: usize = core::mem::offset_of!(ControlSegment, fm_ce_se);
/// A CQ's doorbell record: the consumer index word the generated code updates, and the arm
/// word (never armed: the CQ is polled), the same two 32-bit words as a QP's.
const CQ_DOORBELL_RECORD_BYTES: u64 = DoorbellRecord::SIZE_BYTES as u64;
/// An entry of the receive context's peer-of-QPN table (`peer_of_qpn_address`): a rank.
const PEER_OF_QPN_ENTRY_BYTES: u64 = core::mem::size_of::<u32>() as u64;
/// The word an atomic WQE returns the flag's old value into.
const ATOMIC_RESULT_BYTES: u64 = core::mem::size_of::<u64>() as u64;
/// Bytes of one send-ring basic block.
const BASIC_BLOCK_BYTES: u64 = WQE_BASIC_BLOCK_BYTES as u64;

/// Where an endpoint handle keeps the receive context's address.
pub(super) const RECEIVE_CONTEXT_FIELD: u64 =
    core::mem::offset_of!(EndpointHandle, receive_context_address) as u64;

/// Receive WQEs per mlx5 QP (write-with-immediate signals each take one until a wait posts it
/// again).
pub(super) const RECEIVES_PER_QUEUE_PAIR: u32 = 64;

/// Where a rank's receive side lives.
pub(super) struct ReceiveSide {
    pub(super) context_address: u64,
    pub(super) queues_address: u64,
}

/// Allocates `rank`'s receive CQ (room for every QP's receives), its context and its tables
/// (the queue table is written once the QPs exist).
pub(super) fn allocate_receive_side(
    memory: &mut Memory,
    nic: &mut Nic,
    rank: u32,
    ranks: u32,
) -> Result<ReceiveSide, SimulationError> {
    let setup = |e: &dyn std::fmt::Display| SimulationError::Setup(e.to_string());
    let cqe_count = (RECEIVES_PER_QUEUE_PAIR * ranks).next_power_of_two();
    let cq = memory.allocate(
        rank,
        u64::from(cqe_count) * CQE_BYTES,
        MemoryKind::Device,
        "receive cq",
    );
    let cq_doorbell = memory.allocate(
        rank,
        CQ_DOORBELL_RECORD_BYTES,
        MemoryKind::Device,
        "receive cq doorbell record",
    );
    nic.create_receive_cq(
        memory,
        ReceiveCqConfig {
            rank,
            buffer_address: cq,
            cqe_count,
            doorbell_record_address: cq_doorbell,
            shared_producer_counter_address: None,
        },
    )
    .map_err(|e| setup(&e))?;
    let queues = memory.allocate(
        rank,
        u64::from(ranks) * Mlx5ReceiveQueue::SIZE_BYTES as u64,
        MemoryKind::Device,
        "receive queues",
    );
    let qpn_mask = (QPN_BASE + ranks).next_power_of_two() - 1;
    let peer_of_qpn = memory.allocate(
        rank,
        u64::from(qpn_mask + 1) * PEER_OF_QPN_ENTRY_BYTES,
        MemoryKind::Device,
        "peer of qpn",
    );
    for peer in 0..ranks {
        memory
            .write(
                rank,
                peer_of_qpn + u64::from((QPN_BASE + peer) & qpn_mask) * PEER_OF_QPN_ENTRY_BYTES,
                &peer.to_le_bytes(),
            )
            .map_err(|e| setup(&e))?;
    }
    let context_address = memory.allocate(
        rank,
        Mlx5ReceiveContext::SIZE_BYTES as u64,
        MemoryKind::Device,
        "receive context",
    );
    let context = Mlx5ReceiveContext {
        cq_buffer_address: cq,
        cqe_count,
        poll_lock: 0,
        consumer_index: 0,
        cq_doorbell_record_address: cq_doorbell,
        queues_address: queues,
        queue_count: ranks,
        qpn_mask,
        peer_of_qpn_address: peer_of_qpn,
        local_rank: rank,
        reserved: [0; 4],
    };
    memory
        .write(rank, context_address, &context.to_bytes())
        .map_err(|e| setup(&e))?;
    Ok(ReceiveSide {
        context_address,
        queues_address: queues,
    })
}

pub(super) const QPN_BASE: u32 = 0x100;

pub(super) fn management_offset(field: usize) -> u64 {
    field as u64
}

pub(super) const MANAGEMENT_RESERVED_HEAD: usize =
    core::mem::offset_of!(Mlx5QueueManagement, reserved_head);

pub(super) const MANAGEMENT_READY_HEAD: usize =
    core::mem::offset_of!(Mlx5QueueManagement, ready_head);

pub(super) const MANAGEMENT_PRODUCER_INDEX: usize =
    core::mem::offset_of!(Mlx5QueueManagement, producer_index);

pub(super) const MANAGEMENT_POST_SEND_LOCK: usize =
    core::mem::offset_of!(Mlx5QueueManagement, post_send_lock);

pub(super) const MANAGEMENT_CONSUMER_INDEX: usize =
    core::mem::offset_of!(Mlx5QueueManagement, consumer_index);

/// mlx5's part of the endpoint from `rank` to `peer`: an RC QP with its send ring, doorbell
/// record, collapsed CQ, queue-management block, atomic-result word and a receive queue whose
/// receives are all posted, written into `handle` and `receive_queue`.
pub(super) fn setup_mlx5_endpoint(
    memory: &mut Memory,
    nic: &mut Nic,
    options: &SimulationOptions,
    (rank, peer): (u32, u32),
    handle: &mut EndpointHandle,
    receive_queue: &mut Mlx5ReceiveQueue,
    receive: Option<&ReceiveSide>,
) -> Result<(), SimulationError> {
    let sq_bytes = u64::from(options.sq_basic_block_count) * BASIC_BLOCK_BYTES;
    let sq = memory.allocate(rank, sq_bytes, MemoryKind::Device, &format!("sq to {peer}"));
    let dbr = memory.allocate(
        rank,
        DoorbellRecord::SIZE_BYTES as u64,
        MemoryKind::Device,
        &format!("dbr to {peer}"),
    );
    let cq = memory.allocate(
        rank,
        CQE_BYTES,
        MemoryKind::Device,
        &format!("cq to {peer}"),
    );
    let management = memory.allocate(
        rank,
        core::mem::size_of::<Mlx5QueueManagement>() as u64,
        MemoryKind::Device,
        &format!("queue management to {peer}"),
    );
    let atomic_result = memory.allocate(
        rank,
        ATOMIC_RESULT_BYTES,
        MemoryKind::Device,
        &format!("atomic result to {peer}"),
    );
    let (atomic_lkey, _) = memory
        .register(rank, atomic_result, ATOMIC_RESULT_BYTES)
        .map_err(setup_error)?;
    let qpn = QPN_BASE + peer;
    let receive_buffer = memory.allocate(
        rank,
        u64::from(RECEIVES_PER_QUEUE_PAIR) * RECEIVE_WQE_BYTES as u64,
        MemoryKind::Device,
        &format!("receive queue from {peer}"),
    );
    let empty = ReceiveDataSegment::empty().to_bytes();
    memory
        .write(
            rank,
            receive_buffer,
            &empty.repeat(RECEIVES_PER_QUEUE_PAIR as usize),
        )
        .map_err(setup_error)?;
    // Every receive posted: the doorbell record's receive word at +0.
    memory
        .write(rank, dbr, &RECEIVES_PER_QUEUE_PAIR.to_be_bytes())
        .map_err(setup_error)?;
    *receive_queue = Mlx5ReceiveQueue {
        qpn,
        wqe_count: RECEIVES_PER_QUEUE_PAIR,
        doorbell_record_address: dbr,
        posted: u64::from(RECEIVES_PER_QUEUE_PAIR),
        buffer_address: receive_buffer,
    };
    nic.create_queue_pair(
        memory,
        QueuePairConfig {
            rank,
            peer_rank: peer,
            qpn,
            sq_buffer_address: sq,
            sq_basic_block_count: options.sq_basic_block_count,
            doorbell_record_address: dbr,
            cq_buffer_address: cq,
            cqe_count: 1,
            cq_collapsed: true,
            receive: Some(ReceiveQueueConfig {
                buffer_address: receive_buffer,
                wqe_count: RECEIVES_PER_QUEUE_PAIR,
                doorbell_record_address: dbr,
            }),
        },
    )
    .map_err(setup_error)?;
    handle.sq_buffer_address = sq;
    handle.sq_wqe_basic_block_count = options.sq_basic_block_count;
    handle.qpn = qpn;
    handle.doorbell_record_address = dbr;
    handle.uar_doorbell_address = dbr;
    handle.cq_buffer_address = cq;
    handle.cqe_count = 1;
    handle.cq_collapsed = 1;
    handle.management_address = management;
    handle.atomic_result_address = atomic_result;
    handle.atomic_result_lkey = atomic_lkey;
    handle.receive_context_address = receive.map_or(0, |side| side.context_address);
    Ok(())
}

/// What mlx5's set-up allocates per rank beyond the tables (mirrors [`setup_mlx5_endpoint`]
/// and [`allocate_receive_side`]).
pub(super) fn infrastructure_bytes(ranks: u64, options: &SimulationOptions) -> u64 {
    let peers = ranks.saturating_sub(1);
    let receive_cq = (u64::from(RECEIVES_PER_QUEUE_PAIR) * ranks).next_power_of_two() * CQE_BYTES;
    let peer_of_qpn = (u64::from(QPN_BASE) + ranks).next_power_of_two() * PEER_OF_QPN_ENTRY_BYTES;
    let receive_side = receive_cq
        + peer_of_qpn
        + ranks * Mlx5ReceiveQueue::SIZE_BYTES as u64
        + Mlx5ReceiveContext::SIZE_BYTES as u64
        + CQ_DOORBELL_RECORD_BYTES;
    let per_peer = u64::from(options.sq_basic_block_count) * BASIC_BLOCK_BYTES
        + DoorbellRecord::SIZE_BYTES as u64
        + CQE_BYTES
        + core::mem::size_of::<Mlx5QueueManagement>() as u64
        + ATOMIC_RESULT_BYTES
        + u64::from(RECEIVES_PER_QUEUE_PAIR) * RECEIVE_WQE_BYTES as u64;
    receive_side + peers * per_peer
}

impl<'k> World<'k> {
    /// The `wqe_counter` and opcode of the CQE whose `wqe_counter` word is at `address` (a
    /// collapsed CQ's only CQE, at [`QueueGeometry::cq_counter_address`]): what the generated
    /// reservation reads when the ring looks full.
    pub(super) fn collapsed_cqe(
        &self,
        rank: u32,
        address: u64,
    ) -> Result<(u16, u8), crate::MemoryError> {
        let tail = self
            .memory
            .read(rank, address, CQE_BYTES - CQE_WQE_COUNTER_OFFSET_BYTES)?;
        let counter = u16::from_be_bytes([tail[0], tail[1]]);
        let op_own = tail[(CQE_OP_OWN_OFFSET_BYTES - CQE_WQE_COUNTER_OFFSET_BYTES) as usize];
        Ok((counter, op_own >> 4))
    }

    /// The counters of an mlx5 queue: in its management block, the consumer index the
    /// completion waits advance, the collapsed CQ for reclaiming.
    pub(super) fn mlx5_queue_geometry(handle: &EndpointHandle) -> QueueGeometry {
        QueueGeometry {
            reservation_counter_address: handle.management_address
                + management_offset(MANAGEMENT_RESERVED_HEAD),
            ready_counter_address: handle.management_address
                + management_offset(MANAGEMENT_READY_HEAD),
            capacity: u64::from(handle.sq_wqe_basic_block_count),
            consumer_address: Self::mlx5_consumer_address(handle),
            cq_counter_address: Some(handle.cq_buffer_address + CQE_WQE_COUNTER_OFFSET_BYTES),
            read_error: SimulationError::Nic,
        }
    }

    /// `mlx5.write`: the put as an RDMA write WQE (inline, with immediate, or a NOP of the same
    /// size when its predicate is false) in its send-ring slots.
    pub(super) fn mlx5_put(
        &mut self,
        thread: usize,
        site: usize,
        operands: &PutOperands,
        put: PreparedPut,
    ) -> Result<(), SimulationError> {
        let rank = self.threads[thread].rank;
        let common = WqeCommon {
            wqe_index: put.slot as u16,
            qpn: put.handle.qpn,
            fm_ce_se: if put.completion {
                WQE_CTRL_CQ_UPDATE
            } else {
                0
            },
        };
        let remote = RemoteAddress {
            address: put.destination.address,
            rkey: put.destination.rkey,
        };
        let local = LocalBuffer {
            address: put.source,
            lkey: put.key,
            length_bytes: put.length_bytes as u32,
        };
        let wqe = if !put.predicate {
            let blocks = if operands.inline {
                inline_write_basic_blocks(put.length_bytes as i64) as usize
            } else {
                1
            };
            nop_spanning_basic_blocks(&common, blocks)
        } else if operands.inline {
            match put.immediate {
                Some(value) => rdma_write_imm_inline(&common, remote, &put.expected, value),
                None => rdma_write_inline(&common, remote, &put.expected),
            }
            .map_err(|e| {
                self.program_error(
                    thread,
                    format!("inline put at {}: {e}", self.site_of(rank, site)),
                )
            })?
        } else if let Some(value) = put.immediate {
            rdma_write_imm(&common, remote, local, value)
        } else {
            rdma_write(&common, remote, local)
        };
        self.write_wqe(
            thread,
            put.peer,
            &put.handle,
            put.slot,
            wqe.basic_blocks(),
            put.completion,
            operands.periodic_completion,
            put.posted,
        )
    }

    /// `mlx5.atomic`: the signal as an atomic WQE, a fetch-and-add or a masked compare-swap
    /// that sets the flag, its result in the endpoint's scratch word.
    pub(super) fn mlx5_signal(
        &mut self,
        thread: usize,
        operands: &SignalOperands,
        signal: PreparedSignal,
    ) -> Result<(), SimulationError> {
        let mut fm_ce_se = if signal.completion {
            WQE_CTRL_CQ_UPDATE
        } else {
            0
        };
        if operands.fenced {
            fm_ce_se |= FENCE_MODE_INITIATOR_SMALL;
        }
        let common = WqeCommon {
            wqe_index: signal.slot as u16,
            qpn: signal.handle.qpn,
            fm_ce_se,
        };
        let remote = RemoteAddress {
            address: signal.flag.address,
            rkey: signal.flag.rkey,
        };
        let result = LocalBuffer {
            address: signal.handle.atomic_result_address,
            lkey: signal.handle.atomic_result_lkey,
            length_bytes: ATOMIC_RESULT_BYTES as u32,
        };
        let value = signal.value;
        let wqe = match operands.operation {
            SignalOperation::Add => atomic_fetch_add(&common, remote, value, result),
            SignalOperation::Set => masked_compare_swap_64(
                &common,
                remote,
                MaskedCompareSwap64 {
                    swap: value,
                    compare: 0,
                    swap_mask: u64::MAX,
                    compare_mask: 0,
                },
                result,
            ),
        };
        self.write_wqe(
            thread,
            signal.peer,
            &signal.handle,
            signal.slot,
            wqe.basic_blocks(),
            signal.completion,
            operands.periodic_completion,
            PostedCommand::Signal(signal.record),
        )
    }

    /// Where the post lock of `handle`'s queue is, in its transport's management block.
    fn post_lock_address(&self, handle: &EndpointHandle) -> u64 {
        match self.transport {
            Transport::Efa => Self::efa_post_lock_address(handle),
            Transport::Ionic => Self::ionic_post_lock_address(handle),
            _ => handle.management_address + management_offset(MANAGEMENT_POST_SEND_LOCK),
        }
    }

    /// `mlx5.lock` / `efa.lock`: takes the queue's post lock, or waits for it.
    pub(super) fn mlx5_lock(
        &mut self,
        thread: usize,
        site: usize,
        endpoint: Register,
    ) -> Result<Step, SimulationError> {
        let rank = self.threads[thread].rank;
        let (_, handle) = self.endpoint(thread, endpoint)?;
        let address = self.post_lock_address(&handle);
        if self.memory.read_u64(rank, address).unwrap_or(1) != 0 {
            return Ok(Step::Blocked(Block::Lock { address, site }));
        }
        self.atomic_update(thread, rank, address, |_| 1)?;
        self.counts.atomics += 1;
        self.advance_clock(thread, self.options.cost_model.gpu_scope_atomic_nanoseconds);
        Ok(Step::Effect)
    }

    /// `mlx5.unlock` / `efa.unlock`: releases the post lock (a release store).
    pub(super) fn mlx5_unlock(
        &mut self,
        thread: usize,
        endpoint: Register,
    ) -> Result<Step, SimulationError> {
        let rank = self.threads[thread].rank;
        let (_, handle) = self.endpoint(thread, endpoint)?;
        let address = self.post_lock_address(&handle);
        self.store(
            thread,
            rank,
            address,
            &0u64.to_le_bytes(),
            StoreOrder::Release,
        )?;
        self.advance_clock(thread, self.options.cost_model.gpu_global_store_nanoseconds);
        Ok(Step::Effect)
    }

    /// `mlx5.doorbell_record`: the send counter of the doorbell record (after an atomic max of
    /// the producer index when several programs post).
    pub(super) fn mlx5_doorbell_record(
        &mut self,
        thread: usize,
        endpoint: Register,
        end: Register,
        atomic_max: bool,
        order: StoreOrder,
    ) -> Result<Step, SimulationError> {
        let rank = self.threads[thread].rank;
        let cost = self.options.cost_model.clone();
        let (_, handle) = self.endpoint(thread, endpoint)?;
        let mut end = self.integer(thread, end)? as u64;
        if atomic_max {
            let address = handle.management_address + management_offset(MANAGEMENT_PRODUCER_INDEX);
            end = end.max(self.atomic_update(thread, rank, address, |old| old.max(end))?);
            self.counts.atomics += 1;
            self.advance_clock(thread, cost.gpu_scope_atomic_nanoseconds);
        }
        let word = DoorbellRecord::send_counter_value(end as u32);
        self.store(
            thread,
            rank,
            handle.doorbell_record_address + DOORBELL_RECORD_SEND_COUNTER_OFFSET_BYTES,
            &word.0,
            order,
        )?;
        self.counts.doorbell_record_updates += 1;
        self.advance_clock(thread, store_cost(&cost, order));
        Ok(Step::Effect)
    }

    /// `mlx5.doorbell`: rings the NIC's doorbell (a UAR write) with the producer index `end`.
    pub(super) fn mlx5_doorbell(
        &mut self,
        thread: usize,
        handle: &EndpointHandle,
        end: u64,
    ) -> Result<(), SimulationError> {
        let rank = self.threads[thread].rank;
        let doorbell = UarDoorbell::next_producer_index(end as u16, handle.qpn);
        self.nic
            .ring_doorbell(rank, doorbell.to_bytes())
            .map_err(|e| SimulationError::Nic(e.to_string()))?;
        self.advance_clock(
            thread,
            self.options.cost_model.pcie_mmio_doorbell_write_nanoseconds,
        );
        let time = self.threads[thread].clock_nanoseconds;
        self.doorbell_times
            .insert((rank, u64::from(handle.qpn)), time);
        Ok(())
    }

    /// `mlx5.wait_completion`: waits for the CQE of the WQE at `slot` (an error CQE fails the
    /// run), then frees its slots up to `end` as the generated code does.
    pub(super) fn mlx5_wait_completion(
        &mut self,
        thread: usize,
        site: usize,
        peer: u32,
        handle: &EndpointHandle,
        slot: u64,
        end: u64,
    ) -> Result<Step, SimulationError> {
        let rank = self.threads[thread].rank;
        let qpn = handle.qpn;
        if let CqPollResult::Error {
            syndrome,
            wqe_counter,
        } = self
            .nic
            .poll_cq_for_index(&self.memory, rank, qpn, slot)
            .map_err(|e| SimulationError::Nic(e.to_string()))?
        {
            return Err(SimulationError::Nic(format!(
                "rank {rank} program {} waiting at {} found an error completion (syndrome {syndrome:#04x}) for the WQE at index {wqe_counter} on its QP to rank {peer}",
                self.threads[thread].program,
                self.site_of(rank, site)
            )));
        }
        let block = Block::Mlx5Completion {
            qpn,
            peer,
            slot,
            site,
        };
        if !self.block_released(thread, &block)? {
            return Ok(Step::Blocked(block));
        }
        let completed_at = self
            .write_times
            .get(&(rank, u64::from(qpn)))
            .copied()
            .unwrap_or(0);
        // As the generated code does: the completed command's slots are free again.
        self.atomic_update(thread, rank, Self::mlx5_consumer_address(handle), |old| {
            old.max(end)
        })?;
        let state = &mut self.threads[thread];
        state.clock_nanoseconds = state.clock_nanoseconds.max(completed_at);
        Ok(Step::Effect)
    }

    /// The immediate of a write with immediate (checked against the flag it names) and the
    /// flag's address on `peer`.
    pub(super) fn immediate_signal(
        &self,
        thread: usize,
        site: usize,
        peer: u32,
        value: Register,
        flag: Register,
    ) -> Result<(u32, u64), SimulationError> {
        let rank = self.threads[thread].rank;
        let immediate = self.integer(thread, value)?;
        let flag = self.remote_pointer(thread, flag)?;
        let signal = u32::try_from(immediate)
            .ok()
            .map(ImmediateSignal::decode)
            .filter(|signal| {
                u64::from(signal.flag_index) * 8 == flag.offset_bytes && flag.peer == peer
            });
        match signal {
            Some(_) => Ok((immediate as u32, flag.address)),
            None => Err(self.program_error(
                thread,
                format!(
                    "the write with immediate at {} carries {immediate:#x}, which does not name its flag (element {} of its region on rank {}): the flag index must fit {} bits",
                    self.site_of(rank, site),
                    flag.offset_bytes / 8,
                    flag.peer,
                    aboleth_abi::mlx5::receive::IMMEDIATE_INDEX_BITS
                ),
            )),
        }
    }

    /// The receives of a wait on write-with-immediate signals: applies every ready receive CQE
    /// of the rank (its context named by the endpoint table at `endpoint_table`) to its flag in
    /// the region of `flag_table`; returns the context, which the wait watches while blocked.
    pub(super) fn receive_immediates(
        &mut self,
        thread: usize,
        flag_table: u64,
        endpoint_table: u64,
    ) -> Result<u64, SimulationError> {
        let rank = self.threads[thread].rank;
        // Every handle of the rank (the first one included) names the context.
        let context = self
            .memory
            .read_u64(rank, endpoint_table + RECEIVE_CONTEXT_FIELD)
            .map_err(|e| self.program_error(thread, e.to_string()))?;
        self.immediate_flag_tables
            .insert(rank, (context, flag_table));
        self.drain_receive_cq(rank, context, flag_table, Some(thread))?;
        Ok(context)
    }

    /// The number of the next receive CQE of `rank`'s context at `context`, if one is ready.
    pub(super) fn next_receive_cqe(&self, rank: u32, context: u64) -> Option<u64> {
        if self.transport == Transport::Efa {
            return self.efa_next_receive(rank, context);
        }
        let bytes = self
            .memory
            .read(rank, context, Mlx5ReceiveContext::SIZE_BYTES as u64)
            .ok()?;
        let context = Mlx5ReceiveContext::from_bytes(&bytes.try_into().ok()?);
        let number = context.consumer_index;
        let slot = number % u64::from(context.cqe_count);
        let op_own = self
            .memory
            .read(
                rank,
                context.cq_buffer_address + slot * CQE_BYTES + CQE_OP_OWN_OFFSET_BYTES,
                1,
            )
            .ok()?[0];
        aboleth_abi::mlx5::cqe::cqe_is_software_owned(op_own, number as u32, context.cqe_count)
            .then_some(number)
    }

    /// What a receiving wait does (and the host, at the end): applies every ready receive CQE
    /// of `rank` to its flag in the region of `flag_table` on this rank, posts its receive
    /// again, advances the CQ's consumer index and its doorbell record, and delivers the signal
    /// for the data checks. One step: the generated code does it under the context's lock.
    pub(super) fn drain_receive_cq(
        &mut self,
        rank: u32,
        context_address: u64,
        flag_table: u64,
        thread: Option<usize>,
    ) -> Result<(), SimulationError> {
        if self.transport == Transport::Efa {
            return self.efa_drain_receive_cq(rank, context_address, flag_table, thread);
        }
        let fail = |message: String| SimulationError::Program(format!("rank {rank}: {message}"));
        let read = |world: &Self, address: u64, length: u64| {
            world
                .memory
                .read(rank, address, length)
                .map_err(|e| fail(e.to_string()))
        };
        while let Some(number) = self.next_receive_cqe(rank, context_address) {
            let context = Mlx5ReceiveContext::from_bytes(
                &read(self, context_address, Mlx5ReceiveContext::SIZE_BYTES as u64)?
                    .try_into()
                    .expect("64 bytes"),
            );
            let slot = number % u64::from(context.cqe_count);
            let cqe = aboleth_abi::mlx5::cqe::decode_cqe(
                &read(
                    self,
                    context.cq_buffer_address + slot * CQE_BYTES,
                    CQE_BYTES,
                )?
                .try_into()
                .expect("64 bytes"),
            )
            .map_err(|e| fail(format!("receive CQE {number}: {e}")))?;
            let aboleth_abi::mlx5::DecodedCqe::ResponderWriteImmediate { qpn, immediate, .. } = cqe
            else {
                return Err(fail(format!(
                    "receive CQE {number} is not a write with immediate: {cqe:?}"
                )));
            };
            let peer_word = read(
                self,
                context.peer_of_qpn_address
                    + u64::from(qpn & context.qpn_mask) * PEER_OF_QPN_ENTRY_BYTES,
                PEER_OF_QPN_ENTRY_BYTES,
            )?;
            let peer = u32::from_le_bytes(peer_word.try_into().expect("4 bytes"));
            self.apply_immediate(
                (rank, context.local_rank),
                flag_table,
                (immediate, number),
                &format!("rank {peer}"),
                thread,
            )?;
            // Post the receive again: the queue's counter and its doorbell record.
            let queue_address =
                context.queues_address + u64::from(peer) * Mlx5ReceiveQueue::SIZE_BYTES as u64;
            let mut queue = Mlx5ReceiveQueue::from_bytes(
                &read(self, queue_address, Mlx5ReceiveQueue::SIZE_BYTES as u64)?
                    .try_into()
                    .expect("32 bytes"),
            );
            queue.posted += 1;
            let write = |world: &mut Self, address: u64, bytes: &[u8]| {
                world
                    .memory
                    .write(rank, address, bytes)
                    .map_err(|e| fail(e.to_string()))
            };
            write(self, queue_address, &queue.to_bytes())?;
            write(
                self,
                queue.doorbell_record_address,
                &((queue.posted as u32) & 0xffff).to_be_bytes(),
            )?;
            let consumer = number + 1;
            write(
                self,
                context_address + core::mem::offset_of!(Mlx5ReceiveContext, consumer_index) as u64,
                &consumer.to_le_bytes(),
            )?;
            write(
                self,
                context.cq_doorbell_record_address,
                &((consumer as u32) & 0x00ff_ffff).to_be_bytes(),
            )?;
            if let Some(thread) = thread {
                self.advance_clock(
                    thread,
                    self.options.cost_model.gpu_global_store_nanoseconds * 4,
                );
            }
        }
        Ok(())
    }

    /// Applies the signal an immediate carries ([`ImmediateSignal`]) to its flag in the region
    /// of `flag_table` on `rank` (`local_rank` indexes the table), and delivers the signal record
    /// waiting for receive completion `number`, for the data checks. `from` names the sender in
    /// messages. Shared by the mlx5 and EFA receive sides.
    pub(super) fn apply_immediate(
        &mut self,
        (rank, local_rank): (u32, u32),
        flag_table: u64,
        (immediate, number): (u32, u64),
        from: &str,
        thread: Option<usize>,
    ) -> Result<(), SimulationError> {
        let fail = |message: String| SimulationError::Program(format!("rank {rank}: {message}"));
        let signal = ImmediateSignal::decode(immediate);
        let descriptor = RemoteRegionDescriptor::from_bytes(
            &self
                .memory
                .read(
                    rank,
                    flag_table + u64::from(local_rank) * REGION_DESCRIPTOR_BYTES,
                    REGION_DESCRIPTOR_BYTES,
                )
                .map_err(|e| fail(e.to_string()))?
                .try_into()
                .expect("32 bytes"),
        );
        let offset = u64::from(signal.flag_index) * 8;
        if offset + 8 > descriptor.length_bytes {
            return Err(fail(format!(
                "an immediate from {from} names flag {} beyond its region ({} bytes)",
                signal.flag_index, descriptor.length_bytes
            )));
        }
        let flag = descriptor.base_address + offset;
        let old = self
            .memory
            .read_u64(rank, flag)
            .map_err(|e| fail(e.to_string()))?;
        let new = if signal.add {
            old.wrapping_add(u64::from(signal.value))
        } else {
            u64::from(signal.value)
        };
        self.memory
            .write_u64(rank, flag, new)
            .map_err(|e| fail(e.to_string()))?;
        let now = thread.map_or(0, |thread| self.threads[thread].clock_nanoseconds);
        if let Some((record, landed_at)) = self.pending_immediates.remove(&(rank, number)) {
            self.deliver(rank, flag, record, now.max(landed_at));
        }
        Ok(())
    }

    /// After the last launch: the host applies what is left in every receive CQ.
    pub(super) fn drain_every_receive_cq(&mut self) -> Result<(), SimulationError> {
        let tables: Vec<(u32, (u64, u64))> = self
            .immediate_flag_tables
            .iter()
            .map(|(rank, tables)| (*rank, *tables))
            .collect();
        for (rank, (context, flag_table)) in tables {
            self.drain_receive_cq(rank, context, flag_table, None)?;
        }
        Ok(())
    }

    /// The management word where the generated code keeps the first send-ring block not yet
    /// known to be free.
    pub(super) fn mlx5_consumer_address(handle: &EndpointHandle) -> u64 {
        handle.management_address + management_offset(MANAGEMENT_CONSUMER_INDEX)
    }

    /// What the generated reservation does when the ring looks full: it polls the queue's
    /// collapsed CQ and, if the CQE there reports a WQE at or past the consumer index, frees
    /// through that WQE's first block (RC completions are cumulative; its size is not in the
    /// CQE). Returns the consumer index. Periodic completions
    /// ([`aboleth_abi::mlx5::periodic_completion`]) guarantee such a CQE comes.
    pub(super) fn reclaim_mlx5_ring(
        &mut self,
        thread: usize,
        rank: u32,
        peer: u32,
        handle: &EndpointHandle,
    ) -> Result<u64, SimulationError> {
        let consumer_address = Self::mlx5_consumer_address(handle);
        let consumer = self
            .memory
            .read_u64(rank, consumer_address)
            .map_err(|e| SimulationError::Nic(e.to_string()))?;
        let (counter, opcode) = self
            .collapsed_cqe(
                rank,
                handle.cq_buffer_address + CQE_WQE_COUNTER_OFFSET_BYTES,
            )
            .map_err(|e| SimulationError::Nic(e.to_string()))?;
        if opcode == aboleth_abi::mlx5::cqe::CQE_OPCODE_REQ_ERR
            || opcode == aboleth_abi::mlx5::cqe::CQE_OPCODE_RESP_ERR
        {
            return Err(SimulationError::Nic(format!(
                "rank {rank} program {}: its QP to rank {peer} holds an error completion (the reservation's ring reclamation found it)",
                self.threads[thread].program
            )));
        }
        if opcode == aboleth_abi::mlx5::cqe::CQE_OPCODE_INVALID {
            return Ok(consumer);
        }
        let ahead = counter.wrapping_sub(consumer as u16);
        if ahead >= 0x8000 {
            return Ok(consumer);
        }
        let freed = consumer + u64::from(ahead) + 1;
        self.atomic_update(thread, rank, consumer_address, |old| old.max(freed))?;
        Ok(freed.max(consumer))
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "one WQE's placement and its bookkeeping"
    )]
    pub(super) fn write_wqe(
        &mut self,
        thread: usize,
        peer: u32,
        handle: &EndpointHandle,
        slot: u64,
        basic_blocks: &[[u8; 64]],
        completion: bool,
        periodic_completion: bool,
        posted: PostedCommand,
    ) -> Result<(), SimulationError> {
        let rank = self.threads[thread].rank;
        let ring = u64::from(handle.sq_wqe_basic_block_count);
        let blocks = basic_blocks.len() as u64;
        // The generated code asks for a CQE on WQEs at ring-quarter boundaries too, so that a
        // full ring can always be reclaimed.
        let mut basic_blocks = basic_blocks.to_vec();
        let completion = if !completion
            && periodic_completion
            && aboleth_abi::mlx5::periodic_completion(slot, blocks, ring)
        {
            basic_blocks[0][CONTROL_FM_CE_SE_OFFSET_BYTES] |= WQE_CTRL_CQ_UPDATE;
            self.counts.completions_requested += 1;
            true
        } else {
            completion
        };
        for (offset, block) in basic_blocks.iter().enumerate() {
            let index = (slot + offset as u64) % ring;
            self.store(
                thread,
                rank,
                handle.sq_buffer_address + index * BASIC_BLOCK_BYTES,
                block,
                StoreOrder::Relaxed,
            )?;
        }
        self.advance_clock(
            thread,
            self.options.cost_model.gpu_global_store_nanoseconds * basic_blocks.len() as u64,
        );
        self.post(
            thread,
            CommandKey::Mlx5 {
                rank,
                qpn: handle.qpn,
                slot,
            },
            peer,
            completion.then_some(slot + blocks),
            posted,
        )?;
        Ok(())
    }

    pub(super) fn step_nic(&mut self) -> Result<(), SimulationError> {
        let Some(event) = self
            .nic
            .step(&mut self.memory, &mut self.rng)
            .map_err(|e| SimulationError::Nic(e.to_string()))?
        else {
            return Ok(());
        };
        let rank = event.rank;
        let rung_at = self
            .doorbell_times
            .get(&(rank, u64::from(event.qpn)))
            .copied()
            .unwrap_or(0);
        let clock = &mut self.nic_clocks[rank as usize];
        *clock = (*clock).max(rung_at)
            + crate::nic::nic_work_cost(&self.options.cost_model, &event.work).0;
        let now = *clock;
        let Some(execution) = event.wqe else {
            return Ok(());
        };
        let key = CommandKey::Mlx5 {
            rank,
            qpn: event.qpn,
            slot: execution.basic_block_index,
        };
        let posted = self.posted.remove(&key);
        match execution.outcome {
            WqeOutcome::Failed { syndrome, reason } => {
                let site = self.posted_site(&posted);
                return Err(SimulationError::Nic(format!(
                    "rank {rank}'s QP to rank {}: the WQE at slot {}{site} failed with syndrome {syndrome:#04x}: {reason}",
                    event.peer_rank, execution.basic_block_index
                )));
            }
            WqeOutcome::Completed { .. } => {}
        }
        if execution.cqe_slot.is_some() {
            self.write_times.insert((rank, u64::from(event.qpn)), now);
        }
        if let Some(PostedCommand::PutWithImmediate(_, signal)) = &posted {
            // Its signal reaches the flag when a wait of the receiver applies the CQE.
            let responder = event.responder_completion.ok_or_else(|| {
                SimulationError::Nic(format!(
                    "rank {rank}'s write with immediate at slot {} left no receive CQE",
                    execution.basic_block_index
                ))
            })?;
            self.pending_immediates
                .insert(responder, (signal.clone(), now));
        }
        self.on_command_executed(posted, now)
    }
}
