//! How the simulator executes the EFA transport on the GPU's side: each endpoint's queue pair
//! (send queue, send CQ, `aboleth_abi::efa::queue::EfaQueueManagement` with its completion log
//! and signal staging words) and each rank's receive side (receive CQ and
//! `EfaReceiveContext`); the WQEs each queue command becomes (`aboleth_abi::efa::wqe` bytes,
//! stored into the send queue like any store); the doorbell (a system-scope release, then the
//! device's doorbell); completion waits and ring reclaiming, which rebuild the consumer index
//! from completions that arrive in any order; the receive side of add signals (receive
//! completions applied to flags by receiving waits); and each step of the device model
//! (`aboleth_nic::efa::EfaDevice`, which executes writes in an rng-chosen order) turned into the
//! interpreter's bookkeeping.
//!
//! A completion poll, a reclaim and a receive drain each run as one step: the generated code
//! would do them under the queue's poll lock (`EfaQueueManagement::poll_lock`) or the receive
//! context's (`EfaReceiveContext::poll_lock`), which this one step stands for. No generated code
//! exists for EFA yet; this file is the protocol's reference. Simplifications: the send queue is
//! memory the device reads at the doorbell (rdma-core writes WQEs into the device's LLQ), the
//! doorbell carries the producer counter's low 16 bits as rdma-core's does, and batches are not
//! capped at the device's `max_batch_wr`. The queue protocol EFA shares with mlx5 and the
//! proxy (reservation, publication, records) is in `queue.rs`.

use aboleth_abi::{
    EndpointHandle,
    efa::{
        COMP_STATUS_OK, TX_WQE_BYTES,
        cqe::{FLAGS_PHASE, RxCompletion},
        queue::{EfaQueueManagement, EfaReceiveContext, SQ_ENTRIES_MAX, index_of_request},
        wqe::{BUF_DESC_LKEY_MASK, RdmaWrite, RdmaWriteWqe},
    },
    mlx5::receive::ImmediateSignal,
};
use aboleth_ir::ab::attributes::SignalOperation;
use aboleth_nic::efa::{
    EfaDevice, EfaQueuePairConfig, EfaReceiveCqConfig, completion_queue_phase_of,
    send_queue_phase_of,
};

use super::{
    Block, CommandKey, PostedCommand, SimulationError, SimulationOptions, Step, World,
    queue::{PreparedPut, PreparedSignal, QueueGeometry, QueueWaitTarget},
    setup::setup_error,
};
use crate::{
    Memory, MemoryKind,
    program::{SignalOperands, StoreOrder},
};

/// The local QP number of the queue pair from a rank to `peer` is this plus `peer`.
pub(super) const EFA_QP_NUMBER_BASE: u16 = 0x100;
/// The queue key every simulated QP uses.
const EFA_QUEUE_KEY: u32 = 0x0051_4b45;
/// Receive completions per peer a rank's receive CQ has room for (add signals in flight).
const RECEIVE_COMPLETIONS_PER_PEER: u32 = 256;
/// Bytes of one completion-log or staging word.
const WORD_BYTES: u64 = 8;
/// Bytes of the doorbell register's mapping.
const DOORBELL_BYTES: u64 = 4;

const fn management_field(offset: usize) -> u64 {
    offset as u64
}
const RESERVED_HEAD: u64 =
    management_field(core::mem::offset_of!(EfaQueueManagement, reserved_head));
const READY_HEAD: u64 = management_field(core::mem::offset_of!(EfaQueueManagement, ready_head));
const PRODUCER_INDEX: u64 =
    management_field(core::mem::offset_of!(EfaQueueManagement, producer_index));
const CONSUMER_INDEX: u64 =
    management_field(core::mem::offset_of!(EfaQueueManagement, consumer_index));
pub(super) const POST_SEND_LOCK: u64 =
    management_field(core::mem::offset_of!(EfaQueueManagement, post_send_lock));
const COMPLETIONS_POLLED: u64 = management_field(core::mem::offset_of!(
    EfaQueueManagement,
    completions_polled
));
const RECEIVE_CONSUMER_INDEX: u64 = core::mem::offset_of!(EfaReceiveContext, consumer_index) as u64;

/// What the completion side of an EFA queue needs of its endpoint handle (a blocked program
/// keeps it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct EfaQueue {
    qp_num: u16,
    sq_entries: u32,
    management_address: u64,
}

impl EfaQueue {
    pub(super) fn of(handle: &EndpointHandle) -> Self {
        EfaQueue {
            qp_num: handle.qpn as u16,
            sq_entries: handle.sq_wqe_basic_block_count,
            management_address: handle.management_address,
        }
    }
}

/// The send queue entries of an EFA endpoint for `options` (the mlx5 ring size option, capped).
fn send_queue_entries(options: &SimulationOptions) -> u32 {
    options
        .sq_basic_block_count
        .clamp(1, SQ_ENTRIES_MAX)
        .next_power_of_two()
        .min(SQ_ENTRIES_MAX)
}

/// Allocates `rank`'s receive CQ and context, and gives the device the CQ; returns the
/// context's address.
pub(super) fn allocate_efa_receive_side(
    memory: &mut Memory,
    efa: &mut EfaDevice,
    rank: u32,
    ranks: u32,
) -> Result<u64, SimulationError> {
    let entries = (RECEIVE_COMPLETIONS_PER_PEER * ranks).next_power_of_two();
    let cq = memory.allocate(
        rank,
        u64::from(entries) * RxCompletion::SIZE_BYTES as u64,
        MemoryKind::Device,
        "efa receive cq",
    );
    let context = memory.allocate(
        rank,
        EfaReceiveContext::SIZE_BYTES as u64,
        MemoryKind::Device,
        "efa receive context",
    );
    efa.create_receive_cq(EfaReceiveCqConfig {
        rank,
        address: cq,
        entries,
        consumer_index_address: Some(context + RECEIVE_CONSUMER_INDEX),
    })
    .map_err(setup_error)?;
    let bytes = EfaReceiveContext {
        cq_address: cq,
        cq_entries: entries,
        local_rank: rank,
        ..EfaReceiveContext::default()
    }
    .to_bytes();
    memory.write(rank, context, &bytes).map_err(setup_error)?;
    Ok(context)
}

/// EFA's part of the endpoint from `rank` to `peer`: a queue pair with its send queue and send
/// CQ, its management block, completion log and staging words, an address handle naming `peer`,
/// written into `handle`.
pub(super) fn setup_efa_endpoint(
    memory: &mut Memory,
    efa: &mut EfaDevice,
    options: &SimulationOptions,
    (rank, peer): (u32, u32),
    handle: &mut EndpointHandle,
    receive_context: u64,
) -> Result<(), SimulationError> {
    let entries = send_queue_entries(options);
    let words = u64::from(entries) * WORD_BYTES;
    let name = |what: &str| format!("efa {what} to {peer}");
    let sq = memory.allocate(
        rank,
        u64::from(entries) * TX_WQE_BYTES as u64,
        MemoryKind::Device,
        &name("send queue"),
    );
    let cq = memory.allocate(
        rank,
        u64::from(entries) * aboleth_abi::efa::cqe::TxCompletion::SIZE_BYTES as u64,
        MemoryKind::Device,
        &name("send cq"),
    );
    let management = memory.allocate(
        rank,
        EfaQueueManagement::SIZE_BYTES as u64,
        MemoryKind::Device,
        &name("queue management"),
    );
    let log = memory.allocate(rank, words, MemoryKind::Device, &name("completion log"));
    let staging = memory.allocate(rank, words, MemoryKind::Device, &name("signal staging"));
    let (staging_lkey, _) = memory.register(rank, staging, words).map_err(setup_error)?;
    if staging_lkey & !BUF_DESC_LKEY_MASK != 0 {
        return Err(SimulationError::Setup(format!(
            "the simulator ran out of 24-bit EFA keys (lkey {staging_lkey:#x})"
        )));
    }
    let doorbell = memory.allocate(
        rank,
        DOORBELL_BYTES,
        MemoryKind::Device,
        &name("doorbell register"),
    );
    let qp_num = EFA_QP_NUMBER_BASE + peer as u16;
    let address_handle = peer as u16 + 1;
    efa.create_queue_pair(EfaQueuePairConfig {
        rank,
        qp_num,
        sq_address: sq,
        sq_entries: entries,
        cq_address: cq,
        cq_entries: entries,
    })
    .map_err(setup_error)?;
    efa.add_address_handle(rank, address_handle, peer);
    let block = EfaQueueManagement {
        completion_log_address: log,
        signal_staging_address: staging,
        signal_staging_lkey: staging_lkey,
        queue_key: EFA_QUEUE_KEY,
        destination_qp_number: EFA_QP_NUMBER_BASE + rank as u16,
        address_handle,
        ..EfaQueueManagement::default()
    };
    memory
        .write(rank, management, &block.to_bytes())
        .map_err(setup_error)?;
    handle.sq_buffer_address = sq;
    handle.sq_wqe_basic_block_count = entries;
    handle.qpn = u32::from(qp_num);
    handle.uar_doorbell_address = doorbell;
    handle.cq_buffer_address = cq;
    handle.cqe_count = entries;
    handle.management_address = management;
    handle.receive_context_address = receive_context;
    Ok(())
}

/// What EFA's set-up allocates per rank beyond the tables (mirrors [`setup_efa_endpoint`] and
/// [`allocate_efa_receive_side`]).
pub(super) fn infrastructure_bytes(ranks: u64, options: &SimulationOptions) -> u64 {
    let entries = u64::from(send_queue_entries(options));
    let receive = (u64::from(RECEIVE_COMPLETIONS_PER_PEER) * ranks).next_power_of_two()
        * RxCompletion::SIZE_BYTES as u64
        + EfaReceiveContext::SIZE_BYTES as u64;
    let per_peer = entries * TX_WQE_BYTES as u64
        + entries * aboleth_abi::efa::cqe::TxCompletion::SIZE_BYTES as u64
        + EfaQueueManagement::SIZE_BYTES as u64
        + 2 * entries * WORD_BYTES
        + DOORBELL_BYTES;
    receive + ranks.saturating_sub(1) * per_peer
}

impl<'k> World<'k> {
    /// The counters of an EFA queue, in its management block.
    pub(super) fn efa_queue_geometry(handle: &EndpointHandle) -> QueueGeometry {
        QueueGeometry {
            reservation_counter_address: handle.management_address + RESERVED_HEAD,
            ready_counter_address: handle.management_address + READY_HEAD,
            capacity: u64::from(handle.sq_wqe_basic_block_count),
            consumer_address: handle.management_address + CONSUMER_INDEX,
            cq_counter_address: None,
            read_error: SimulationError::Nic,
        }
    }

    fn efa_management(
        &self,
        rank: u32,
        queue: EfaQueue,
    ) -> Result<EfaQueueManagement, SimulationError> {
        let bytes = self
            .memory
            .read(
                rank,
                queue.management_address,
                EfaQueueManagement::SIZE_BYTES as u64,
            )
            .map_err(|e| SimulationError::Nic(e.to_string()))?;
        Ok(EfaQueueManagement::from_bytes(
            bytes.as_slice().try_into().expect("128 bytes"),
        ))
    }

    /// Stores one WQE into its send-queue slot and records the posted command.
    fn write_efa_wqe(
        &mut self,
        thread: usize,
        (peer, handle): (u32, &EndpointHandle),
        slot: u64,
        write: &RdmaWrite,
        posted: PostedCommand,
    ) -> Result<(), SimulationError> {
        let rank = self.threads[thread].rank;
        let entries = u64::from(handle.sq_wqe_basic_block_count);
        let bytes = RdmaWriteWqe::encode(write).to_bytes();
        self.store(
            thread,
            rank,
            handle.sq_buffer_address + (slot % entries) * TX_WQE_BYTES as u64,
            &bytes,
            StoreOrder::Relaxed,
        )?;
        self.advance_clock(thread, self.options.cost_model.gpu_global_store_nanoseconds);
        self.post(
            thread,
            CommandKey::Efa {
                rank,
                qp_num: handle.qpn as u16,
                slot,
            },
            peer,
            write.completion_requested.then_some(slot + 1),
            posted,
        )
    }

    /// The fields every WQE of `handle`'s queue at `slot` shares.
    fn efa_write_at(
        management: &EfaQueueManagement,
        handle: &EndpointHandle,
        slot: u64,
        completion_requested: bool,
    ) -> RdmaWrite {
        RdmaWrite {
            req_id: slot as u16,
            phase: send_queue_phase_of(slot as u32, handle.sq_wqe_basic_block_count),
            completion_requested,
            dest_qp_num: management.destination_qp_number,
            ah: management.address_handle,
            qkey: management.queue_key,
            remote_address: 0,
            rkey: 0,
            local_address: management.signal_staging_address,
            lkey: management.signal_staging_lkey,
            length_bytes: 0,
            immediate: None,
        }
    }

    /// `efa.write`: the put as an RDMA write WQE (an empty write when its predicate is false).
    pub(super) fn efa_put(
        &mut self,
        thread: usize,
        site: usize,
        put: PreparedPut,
    ) -> Result<(), SimulationError> {
        let rank = self.threads[thread].rank;
        let management = self.efa_management(rank, EfaQueue::of(&put.handle))?;
        let mut write = Self::efa_write_at(&management, &put.handle, put.slot, put.completion);
        write.remote_address = put.destination.address;
        write.rkey = put.destination.rkey;
        if put.predicate {
            if put.key & !BUF_DESC_LKEY_MASK != 0 {
                return Err(self.program_error(
                    thread,
                    format!(
                        "the put at {} names lkey {:#x}, wider than EFA's 24 bits",
                        self.site_of(rank, site),
                        put.key
                    ),
                ));
            }
            write.length_bytes = u32::try_from(put.length_bytes).map_err(|_| {
                self.program_error(
                    thread,
                    format!(
                        "the put at {} moves {} bytes, more than one EFA write carries (2^32 - 1)",
                        self.site_of(rank, site),
                        put.length_bytes
                    ),
                )
            })?;
            write.local_address = put.source;
            write.lkey = put.key;
        }
        self.write_efa_wqe(
            thread,
            (put.peer, &put.handle),
            put.slot,
            &write,
            put.posted,
        )
    }

    /// `efa.signal`: a set as an 8-byte write of the value staged in the slot's staging word;
    /// an add as an empty write with immediate, applied by a wait of the target.
    pub(super) fn efa_signal(
        &mut self,
        thread: usize,
        site: usize,
        operands: &SignalOperands,
        signal: PreparedSignal,
    ) -> Result<(), SimulationError> {
        let rank = self.threads[thread].rank;
        let management = self.efa_management(rank, EfaQueue::of(&signal.handle))?;
        let mut write =
            Self::efa_write_at(&management, &signal.handle, signal.slot, signal.completion);
        write.remote_address = signal.flag.address;
        write.rkey = signal.flag.rkey;
        match operands.operation {
            SignalOperation::Set => {
                let entries = u64::from(signal.handle.sq_wqe_basic_block_count);
                let staged =
                    management.signal_staging_address + (signal.slot % entries) * WORD_BYTES;
                self.store(
                    thread,
                    rank,
                    staged,
                    &signal.value.to_le_bytes(),
                    StoreOrder::Relaxed,
                )?;
                write.local_address = staged;
                write.length_bytes = WORD_BYTES as u32;
            }
            SignalOperation::Add => {
                let immediate = operands.immediate.ok_or_else(|| {
                    self.program_error(
                        thread,
                        format!(
                            "the add signal at {} carries no immediate (efa.signal needs one for an add)",
                            self.site_of(rank, site)
                        ),
                    )
                })?;
                let (immediate, _) =
                    self.immediate_signal(thread, site, signal.peer, immediate, operands.flag)?;
                let decoded = ImmediateSignal::decode(immediate);
                if !decoded.add || u64::from(decoded.value) != signal.value {
                    return Err(self.program_error(
                        thread,
                        format!(
                            "the add signal at {} carries immediate {immediate:#x}, which does not add its value {}",
                            self.site_of(rank, site),
                            signal.value
                        ),
                    ));
                }
                write.immediate = Some(immediate);
            }
        }
        self.write_efa_wqe(
            thread,
            (signal.peer, &signal.handle),
            signal.slot,
            &write,
            PostedCommand::Signal(signal.record),
        )
    }

    /// `efa.doorbell`: a system-scope release of the program's stores (the WQEs, the staged
    /// values), the producer index (`atomicMax` on a shared queue), then the device's doorbell.
    pub(super) fn efa_doorbell(
        &mut self,
        thread: usize,
        (peer, handle): (u32, &EndpointHandle),
        end: u64,
        atomic_max: bool,
        order: StoreOrder,
    ) -> Result<(), SimulationError> {
        let rank = self.threads[thread].rank;
        let end = self.release_and_advance_producer(
            thread,
            handle.management_address + PRODUCER_INDEX,
            end,
            (atomic_max, order),
        )?;
        self.efa
            .ring_doorbell(&self.memory, rank, handle.qpn as u16, end as u16)
            .map_err(|e| {
                SimulationError::Nic(format!(
                    "rank {rank} program {}'s EFA queue to rank {peer}: {e}",
                    self.threads[thread].program
                ))
            })?;
        self.doorbell_rung(thread, u64::from(handle.qpn));
        Ok(())
    }

    /// Polls every send completion the device has written since the last poll into the
    /// completion log (an error completion fails the run), then moves the consumer index past
    /// every WQE the log shows completed; returns the consumer index.
    pub(super) fn efa_poll_completions(
        &mut self,
        rank: u32,
        peer: u32,
        queue: EfaQueue,
    ) -> Result<u64, SimulationError> {
        let nic = |e: &dyn std::fmt::Display| SimulationError::Nic(e.to_string());
        let mut management = self.efa_management(rank, queue)?;
        let entries = u64::from(queue.sq_entries);
        let qp_num = queue.qp_num;
        let log_word = |management: &EfaQueueManagement, index: u64| -> u64 {
            management.completion_log_address + (index % entries) * WORD_BYTES
        };
        while let Some(completion) = self
            .efa
            .poll_send_completion(
                &self.memory,
                rank,
                qp_num,
                management.completions_polled as u32,
            )
            .map_err(|e| nic(&e))?
        {
            let index = index_of_request(management.consumer_index, completion.req_id);
            if completion.status != COMP_STATUS_OK {
                return Err(SimulationError::Nic(format!(
                    "rank {rank}'s EFA queue to rank {peer}: the WQE at index {index} completed with status {}",
                    completion.status
                )));
            }
            self.memory
                .write_u64(rank, log_word(&management, index), index + 1)
                .map_err(|e| nic(&e))?;
            management.completions_polled += 1;
        }
        while self
            .memory
            .read_u64(rank, log_word(&management, management.consumer_index))
            .map_err(|e| nic(&e))?
            == management.consumer_index + 1
        {
            management.consumer_index += 1;
        }
        let base = queue.management_address;
        self.memory
            .write_u64(
                rank,
                base + COMPLETIONS_POLLED,
                management.completions_polled,
            )
            .map_err(|e| nic(&e))?;
        self.memory
            .write_u64(rank, base + CONSUMER_INDEX, management.consumer_index)
            .map_err(|e| nic(&e))?;
        Ok(management.consumer_index)
    }

    /// Whether what an EFA wait waits for has completed, by the completion log and consumer
    /// index (without polling).
    pub(super) fn efa_wait_done(
        &self,
        rank: u32,
        queue: EfaQueue,
        target: QueueWaitTarget,
    ) -> Result<bool, SimulationError> {
        let management = self.efa_management(rank, queue)?;
        let entries = u64::from(queue.sq_entries);
        Ok(match target {
            QueueWaitTarget::Prefix(end) => management.consumer_index >= end,
            QueueWaitTarget::Wqe(index) => {
                management.consumer_index > index
                    || self
                        .memory
                        .read_u64(
                            rank,
                            management.completion_log_address + (index % entries) * WORD_BYTES,
                        )
                        .map_err(|e| SimulationError::Nic(e.to_string()))?
                        == index + 1
            }
        })
    }

    /// Whether the device wrote a send completion the queue has not polled yet.
    pub(super) fn efa_completion_ready(
        &self,
        rank: u32,
        queue: EfaQueue,
    ) -> Result<bool, SimulationError> {
        let management = self.efa_management(rank, queue)?;
        Ok(self
            .efa
            .poll_send_completion(
                &self.memory,
                rank,
                queue.qp_num,
                management.completions_polled as u32,
            )
            .map_err(|e| SimulationError::Nic(e.to_string()))?
            .is_some())
    }

    /// `efa.wait_completion`: polls, then passes once `target` has completed, or blocks until
    /// the device writes another completion.
    pub(super) fn efa_wait_completion(
        &mut self,
        thread: usize,
        site: usize,
        (peer, handle): (u32, &EndpointHandle),
        target: QueueWaitTarget,
    ) -> Result<Step, SimulationError> {
        let rank = self.threads[thread].rank;
        let queue = EfaQueue::of(handle);
        self.efa_poll_completions(rank, peer, queue)?;
        if !self.efa_wait_done(rank, queue, target)? {
            return Ok(Step::Blocked(Block::EfaCompletion {
                queue,
                peer,
                target,
                site,
            }));
        }
        Ok(self.pass_completion_wait(thread, u64::from(handle.qpn)))
    }

    /// The number of the next receive completion of the EFA context at `context`, if ready.
    pub(super) fn efa_next_receive(&self, rank: u32, context: u64) -> Option<u64> {
        let bytes = self
            .memory
            .read(rank, context, EfaReceiveContext::SIZE_BYTES as u64)
            .ok()?;
        let context = EfaReceiveContext::from_bytes(bytes.as_slice().try_into().ok()?);
        let number = context.consumer_index;
        let address = context.cq_address
            + (number % u64::from(context.cq_entries)) * RxCompletion::SIZE_BYTES as u64;
        let completion = RxCompletion::from_bytes(
            self.memory
                .read(rank, address, RxCompletion::SIZE_BYTES as u64)
                .ok()?
                .as_slice()
                .try_into()
                .ok()?,
        );
        let phase = completion_queue_phase_of(number as u32, context.cq_entries);
        ((completion.flags & FLAGS_PHASE != 0) == phase).then_some(number)
    }

    /// What a receiving wait does on EFA (and the host, at the end): applies every ready
    /// receive completion of `rank` to its flag in the region of `flag_table`, advances the
    /// context's consumer index, and delivers the signal for the data checks.
    pub(super) fn efa_drain_receive_cq(
        &mut self,
        rank: u32,
        context_address: u64,
        flag_table: u64,
        thread: Option<usize>,
    ) -> Result<(), SimulationError> {
        let fail = |message: String| SimulationError::Program(format!("rank {rank}: {message}"));
        while let Some(number) = self.efa_next_receive(rank, context_address) {
            let read = |world: &Self, address: u64, length: u64| {
                world
                    .memory
                    .read(rank, address, length)
                    .map_err(|e| fail(e.to_string()))
            };
            let context = EfaReceiveContext::from_bytes(
                read(self, context_address, EfaReceiveContext::SIZE_BYTES as u64)?
                    .as_slice()
                    .try_into()
                    .expect("64 bytes"),
            );
            let completion = RxCompletion::from_bytes(
                read(
                    self,
                    context.cq_address
                        + (number % u64::from(context.cq_entries))
                            * RxCompletion::SIZE_BYTES as u64,
                    RxCompletion::SIZE_BYTES as u64,
                )?
                .as_slice()
                .try_into()
                .expect("16 bytes"),
            );
            let Some(immediate) = completion.immediate() else {
                return Err(fail(format!(
                    "EFA receive completion {number} carries no immediate: {completion:?}"
                )));
            };
            self.apply_immediate(
                (rank, context.local_rank),
                flag_table,
                (immediate, number),
                &format!("QP {}", completion.src_qp_num),
                thread,
            )?;
            self.memory
                .write_u64(rank, context_address + RECEIVE_CONSUMER_INDEX, number + 1)
                .map_err(|e| fail(e.to_string()))?;
            if let Some(thread) = thread {
                self.advance_clock(
                    thread,
                    self.options.cost_model.gpu_global_store_nanoseconds * 2,
                );
            }
        }
        Ok(())
    }

    /// One step of the EFA device: one write in flight, chosen by the rng, executed.
    pub(super) fn step_efa(&mut self) -> Result<(), SimulationError> {
        let Some(event) = self
            .efa
            .step(&mut self.memory, &mut self.rng)
            .map_err(|e| SimulationError::Nic(e.to_string()))?
        else {
            return Ok(());
        };
        let rank = event.rank;
        let cost = &self.options.cost_model;
        let rung_at = self
            .doorbell_times
            .get(&(rank, u64::from(event.qp_num)))
            .copied()
            .unwrap_or(0);
        let mut work =
            cost.nic_wqe_fetch(1) + cost.nic_rdma_write(u64::from(event.write.length_bytes));
        if event.completed {
            work += cost.nic_completion();
        }
        let clock = &mut self.nic_clocks[rank as usize];
        *clock = (*clock).max(rung_at) + work.0;
        let now = *clock;
        let key = CommandKey::Efa {
            rank,
            qp_num: event.qp_num,
            slot: u64::from(event.index),
        };
        let posted = self.posted.remove(&key);
        if event.status != COMP_STATUS_OK {
            let site = self.posted_site(&posted);
            return Err(SimulationError::Nic(format!(
                "rank {rank}'s EFA queue pair {}: the WQE at index {}{site} failed with status {}",
                event.qp_num, event.index, event.status
            )));
        }
        if event.completed {
            self.write_times
                .insert((rank, u64::from(event.qp_num)), now);
        }
        if let (Some(PostedCommand::Signal(signal)), Some(target), Some(receive)) =
            (&posted, event.target_rank, event.receive_index)
        {
            // An add: it reaches its flag when a wait of the target applies the completion.
            self.pending_immediates
                .insert((target, u64::from(receive)), (signal.clone(), now));
            return Ok(());
        }
        self.on_command_executed(posted, now)
    }

    /// The post lock's address of a queue (mlx5 or EFA).
    pub(super) fn efa_post_lock_address(handle: &EndpointHandle) -> u64 {
        handle.management_address + POST_SEND_LOCK
    }
}
