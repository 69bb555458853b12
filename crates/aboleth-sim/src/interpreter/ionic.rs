//! How the simulator executes the Ionic transport on the GPU's side: each endpoint's RC queue
//! pair (send queue, CQ, `aboleth_abi::ionic::queue::IonicQueueManagement`, the scratch word an
//! add's old value lands in); the WQEs each queue command becomes (`aboleth_abi::ionic::wqe`
//! bytes, firmware ABI 2, stored into the send queue like any store, with the lap's color); the
//! doorbell (a system-scope release, then the device's 64-bit doorbell); completion waits and
//! ring reclaiming from the cumulative send CQEs; and each step of the device model
//! (`aboleth_nic::ionic::IonicDevice`, in order per queue pair) turned into the interpreter's
//! bookkeeping.
//!
//! A CQ poll or reclaim runs as one step: the generated code would do it under the queue's poll
//! lock (`IonicQueueManagement::poll_lock`), which this one step stands for. This file is the
//! protocol's reference, which `aboleth-codegen`'s `emit/ionic.rs` translates (a drain's target
//! there is the management block's `last_completion_end`; here each program keeps its own). Not
//! modeled: the CQ credits rdma-core reserves before a doorbell. The queue protocol shared with mlx5, EFA and the proxy is in
//! `queue.rs`.

use aboleth_abi::{
    EndpointHandle,
    ionic::{
        CQE_BYTES, IonicVersion, WQE_BYTES,
        cqe::Completion,
        queue::IonicQueueManagement,
        sq_color_of, sq_doorbell_value,
        wqe::{AtomicOperation, LocalBuffer, SendWqe, WqeCommon, WritePayload},
    },
};
use aboleth_ir::ab::attributes::SignalOperation;
use aboleth_nic::ionic::{IonicDevice, IonicQueuePairConfig};

use super::{
    Block, CommandKey, PostedCommand, SimulationError, SimulationOptions, Step, World,
    queue::{PreparedPut, PreparedSignal, QueueGeometry, QueueWaitTarget},
    setup::setup_error,
};
use crate::{
    Memory, MemoryKind,
    program::{PutOperands, SignalOperands, StoreOrder},
};

/// The queue id of the queue pair from a rank to `peer` is this plus `peer`.
const QUEUE_ID_BASE: u32 = 0x100;
/// The firmware ABI the simulated devices speak.
const FIRMWARE: IonicVersion = IonicVersion::V2;
/// Bytes of the scratch word an add's old value lands in, and of the doorbell slot.
const WORD_BYTES: u64 = 8;

const RESERVED_HEAD: u64 = core::mem::offset_of!(IonicQueueManagement, reserved_head) as u64;
const READY_HEAD: u64 = core::mem::offset_of!(IonicQueueManagement, ready_head) as u64;
const PRODUCER_INDEX: u64 = core::mem::offset_of!(IonicQueueManagement, producer_index) as u64;
const CONSUMER_INDEX: u64 = core::mem::offset_of!(IonicQueueManagement, consumer_index) as u64;
const POST_SEND_LOCK: u64 = core::mem::offset_of!(IonicQueueManagement, post_send_lock) as u64;
const COMPLETIONS_POLLED: u64 =
    core::mem::offset_of!(IonicQueueManagement, completions_polled) as u64;

/// What the completion side of an Ionic queue needs of its endpoint handle (a blocked program
/// keeps it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct IonicQueue {
    queue_id: u32,
    sq_entries: u32,
    management_address: u64,
}

impl IonicQueue {
    pub(super) fn of(handle: &EndpointHandle) -> Self {
        IonicQueue {
            queue_id: handle.qpn,
            sq_entries: handle.sq_wqe_basic_block_count,
            management_address: handle.management_address,
        }
    }
}

/// The send queue entries of an Ionic endpoint for `options` (the ring size option, capped).
fn send_queue_entries(options: &SimulationOptions) -> u32 {
    options
        .sq_basic_block_count
        .clamp(2, 1 << 16)
        .next_power_of_two()
        .min(1 << 16)
}

/// Ionic's part of the endpoint from `rank` to `peer`: an RC queue pair with its send queue and
/// CQ, its management block and scratch word, written into `handle`.
pub(super) fn setup_ionic_endpoint(
    memory: &mut Memory,
    ionic: &mut IonicDevice,
    options: &SimulationOptions,
    (rank, peer): (u32, u32),
    handle: &mut EndpointHandle,
) -> Result<(), SimulationError> {
    let entries = send_queue_entries(options);
    let name = |what: &str| format!("ionic {what} to {peer}");
    let sq = memory.allocate(
        rank,
        u64::from(entries) * WQE_BYTES as u64,
        MemoryKind::Device,
        &name("send queue"),
    );
    let cq = memory.allocate(
        rank,
        u64::from(entries) * CQE_BYTES as u64,
        MemoryKind::Device,
        &name("cq"),
    );
    let management = memory.allocate(
        rank,
        IonicQueueManagement::SIZE_BYTES as u64,
        MemoryKind::Device,
        &name("queue management"),
    );
    let scratch = memory.allocate(rank, WORD_BYTES, MemoryKind::Device, &name("atomic result"));
    let (scratch_lkey, _) = memory
        .register(rank, scratch, WORD_BYTES)
        .map_err(setup_error)?;
    let doorbell = memory.allocate(rank, WORD_BYTES, MemoryKind::Device, &name("doorbell"));
    let queue_id = QUEUE_ID_BASE + peer;
    ionic
        .create_queue_pair(IonicQueuePairConfig {
            rank,
            queue_id,
            peer_rank: peer,
            version: FIRMWARE,
            sq_address: sq,
            sq_entries: entries,
            cq_address: cq,
            cq_entries: entries,
        })
        .map_err(setup_error)?;
    let block = IonicQueueManagement {
        firmware_version: 2,
        ..IonicQueueManagement::default()
    };
    memory
        .write(rank, management, &block.to_bytes())
        .map_err(setup_error)?;
    handle.sq_buffer_address = sq;
    handle.sq_wqe_basic_block_count = entries;
    handle.qpn = queue_id;
    handle.uar_doorbell_address = doorbell;
    handle.cq_buffer_address = cq;
    handle.cqe_count = entries;
    handle.management_address = management;
    handle.atomic_result_address = scratch;
    handle.atomic_result_lkey = scratch_lkey;
    Ok(())
}

/// What Ionic's set-up allocates per rank beyond the tables (mirrors [`setup_ionic_endpoint`]).
pub(super) fn infrastructure_bytes(ranks: u64, options: &SimulationOptions) -> u64 {
    let entries = u64::from(send_queue_entries(options));
    let per_peer = entries * WQE_BYTES as u64
        + entries * CQE_BYTES as u64
        + IonicQueueManagement::SIZE_BYTES as u64
        + 2 * WORD_BYTES;
    ranks.saturating_sub(1) * per_peer
}

impl<'k> World<'k> {
    /// The counters of an Ionic queue, in its management block.
    pub(super) fn ionic_queue_geometry(handle: &EndpointHandle) -> QueueGeometry {
        QueueGeometry {
            reservation_counter_address: handle.management_address + RESERVED_HEAD,
            ready_counter_address: handle.management_address + READY_HEAD,
            // One slot stays empty, as in rdma-core (`ionic_queue_full`): the device takes a
            // doorbell only while fewer than `entries` WQEs are outstanding.
            capacity: u64::from(handle.sq_wqe_basic_block_count) - 1,
            consumer_address: handle.management_address + CONSUMER_INDEX,
            cq_counter_address: None,
            read_error: SimulationError::Nic,
        }
    }

    /// The post lock's address of an Ionic queue.
    pub(super) fn ionic_post_lock_address(handle: &EndpointHandle) -> u64 {
        handle.management_address + POST_SEND_LOCK
    }

    /// Stores one WQE into its send-queue slot and records the posted command. The WQE also
    /// asks for a completion at a ring-quarter boundary when `periodic_completion` says so.
    #[allow(
        clippy::too_many_arguments,
        reason = "one WQE's placement and its bookkeeping"
    )]
    fn write_ionic_wqe(
        &mut self,
        thread: usize,
        (peer, handle): (u32, &EndpointHandle),
        slot: u64,
        mut wqe: SendWqe,
        (completion, periodic_completion): (bool, bool),
        posted: PostedCommand,
    ) -> Result<(), SimulationError> {
        let rank = self.threads[thread].rank;
        let entries = u64::from(handle.sq_wqe_basic_block_count);
        let signaled = completion
            || (periodic_completion && aboleth_abi::mlx5::periodic_completion(slot, 1, entries));
        if signaled && !completion {
            self.counts.completions_requested += 1;
        }
        match &mut wqe {
            SendWqe::RdmaWrite { common, .. } | SendWqe::Atomic { common, .. } => {
                // rdma-core writes the ring position (`sq.queue.prod`) as the id.
                *common = WqeCommon {
                    wqe_id: slot % entries,
                    color: sq_color_of(slot, entries),
                    signaled,
                    fence: common.fence,
                };
            }
        }
        let bytes = wqe
            .encode(FIRMWARE)
            .map_err(|e| self.program_error(thread, format!("an Ionic WQE at slot {slot}: {e}")))?;
        self.store(
            thread,
            rank,
            handle.sq_buffer_address + (slot % entries) * WQE_BYTES as u64,
            &bytes,
            StoreOrder::Relaxed,
        )?;
        self.advance_clock(thread, self.options.cost_model.gpu_global_store_nanoseconds);
        self.post(
            thread,
            CommandKey::Ionic {
                rank,
                queue_id: handle.qpn,
                slot,
            },
            peer,
            signaled.then_some(slot + 1),
            posted,
        )
    }

    /// `ionic.write`: the put as an RDMA write WQE (an empty inline write when its predicate is
    /// false).
    pub(super) fn ionic_put(
        &mut self,
        thread: usize,
        operands: &PutOperands,
        put: PreparedPut,
    ) -> Result<(), SimulationError> {
        let payload = if put.predicate {
            WritePayload::Buffers(vec![LocalBuffer {
                address: put.source,
                length_bytes: u32::try_from(put.length_bytes).unwrap_or(u32::MAX),
                lkey: put.key,
            }])
        } else {
            WritePayload::Inline(Vec::new())
        };
        let wqe = SendWqe::RdmaWrite {
            common: WqeCommon::default(),
            remote_address: put.destination.address,
            rkey: put.destination.rkey,
            payload,
            immediate: None,
        };
        self.write_ionic_wqe(
            thread,
            (put.peer, &put.handle),
            put.slot,
            wqe,
            (put.completion, operands.periodic_completion),
            put.posted,
        )
    }

    /// `ionic.signal`: a fetch-add (add) or an 8-byte inline write of the value (set).
    pub(super) fn ionic_signal(
        &mut self,
        thread: usize,
        operands: &SignalOperands,
        signal: PreparedSignal,
    ) -> Result<(), SimulationError> {
        let common = WqeCommon {
            fence: operands.fenced,
            ..WqeCommon::default()
        };
        let wqe = match operands.operation {
            SignalOperation::Add => SendWqe::Atomic {
                common,
                remote_address: signal.flag.address,
                rkey: signal.flag.rkey,
                operation: AtomicOperation::FetchAdd { add: signal.value },
                result: LocalBuffer {
                    address: signal.handle.atomic_result_address,
                    length_bytes: WORD_BYTES as u32,
                    lkey: signal.handle.atomic_result_lkey,
                },
            },
            SignalOperation::Set => SendWqe::RdmaWrite {
                common,
                remote_address: signal.flag.address,
                rkey: signal.flag.rkey,
                payload: WritePayload::Inline(signal.value.to_le_bytes().to_vec()),
                immediate: None,
            },
        };
        self.write_ionic_wqe(
            thread,
            (signal.peer, &signal.handle),
            signal.slot,
            wqe,
            (signal.completion, operands.periodic_completion),
            PostedCommand::Signal(signal.record),
        )
    }

    /// `ionic.doorbell`: a system-scope release of the program's stores (the WQEs), the
    /// producer index (`atomicMax` on a shared queue), then the device's 64-bit doorbell.
    pub(super) fn ionic_doorbell(
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
        let entries = u64::from(handle.sq_wqe_basic_block_count);
        let value = sq_doorbell_value(handle.qpn, (end % entries) as u16);
        self.ionic
            .ring_doorbell(&self.memory, rank, value)
            .map_err(|e| {
                SimulationError::Nic(format!(
                    "rank {rank} program {}'s Ionic queue to rank {peer}: {e}",
                    self.threads[thread].program
                ))
            })?;
        self.doorbell_rung(thread, u64::from(handle.qpn));
        Ok(())
    }

    fn ionic_counter(&self, rank: u32, address: u64) -> Result<u64, SimulationError> {
        self.memory
            .read_u64(rank, address)
            .map_err(|e| SimulationError::Nic(e.to_string()))
    }

    /// Polls every CQE the device has written since the last poll (an error completion fails
    /// the run); each covers every WQE up to its message number, which becomes the consumer
    /// index. Returns the consumer index.
    pub(super) fn ionic_poll_completions(
        &mut self,
        rank: u32,
        peer: u32,
        queue: IonicQueue,
    ) -> Result<u64, SimulationError> {
        let nic = |e: &dyn std::fmt::Display| SimulationError::Nic(e.to_string());
        let base = queue.management_address;
        let mut polled = self.ionic_counter(rank, base + COMPLETIONS_POLLED)?;
        let mut consumer = self.ionic_counter(rank, base + CONSUMER_INDEX)?;
        while let Some(cqe) = self
            .ionic
            .completion_at(&self.memory, rank, queue.queue_id, polled)
            .map_err(|e| nic(&e))?
        {
            match cqe.decode() {
                Ok(Completion::Send {
                    msn, status: None, ..
                }) => {
                    // The message number names the WQE index + 1 past the consumer; only its
                    // bits within the ring are relied on, as rdma-core's poller does
                    // (`msg_msn & mask`): fewer than `entries` WQEs are ever in flight.
                    let mask = u64::from(queue.sq_entries) - 1;
                    let through = consumer + (u64::from(msn).wrapping_sub(consumer) & mask);
                    consumer = consumer.max(through);
                }
                Ok(Completion::Send {
                    msn,
                    status: Some(status),
                    ..
                }) => {
                    return Err(SimulationError::Nic(format!(
                        "rank {rank}'s Ionic queue to rank {peer}: the WQE of message {msn} completed with status {status}"
                    )));
                }
                other => {
                    return Err(SimulationError::Nic(format!(
                        "rank {rank}'s Ionic queue to rank {peer}: an unexpected CQE {other:?}"
                    )));
                }
            }
            polled += 1;
        }
        self.memory
            .write_u64(rank, base + COMPLETIONS_POLLED, polled)
            .map_err(|e| nic(&e))?;
        self.memory
            .write_u64(rank, base + CONSUMER_INDEX, consumer)
            .map_err(|e| nic(&e))?;
        Ok(consumer)
    }

    /// Whether what an Ionic wait waits for has completed (without polling): the completions are
    /// cumulative, so a WQE is done once the consumer index is past it.
    pub(super) fn ionic_wait_done(
        &self,
        rank: u32,
        queue: IonicQueue,
        target: QueueWaitTarget,
    ) -> Result<bool, SimulationError> {
        let consumer = self.ionic_counter(rank, queue.management_address + CONSUMER_INDEX)?;
        Ok(match target {
            QueueWaitTarget::Wqe(index) => consumer > index,
            QueueWaitTarget::Prefix(end) => consumer >= end,
        })
    }

    /// Whether the device wrote a CQE the queue has not polled yet.
    pub(super) fn ionic_completion_ready(
        &self,
        rank: u32,
        queue: IonicQueue,
    ) -> Result<bool, SimulationError> {
        let polled = self.ionic_counter(rank, queue.management_address + COMPLETIONS_POLLED)?;
        Ok(self
            .ionic
            .completion_at(&self.memory, rank, queue.queue_id, polled)
            .map_err(|e| SimulationError::Nic(e.to_string()))?
            .is_some())
    }

    /// `ionic.wait_completion`: polls, then passes once `target` has completed, or blocks until
    /// the device writes another CQE.
    pub(super) fn ionic_wait_completion(
        &mut self,
        thread: usize,
        site: usize,
        (peer, handle): (u32, &EndpointHandle),
        target: QueueWaitTarget,
    ) -> Result<Step, SimulationError> {
        let rank = self.threads[thread].rank;
        let queue = IonicQueue::of(handle);
        self.ionic_poll_completions(rank, peer, queue)?;
        if !self.ionic_wait_done(rank, queue, target)? {
            return Ok(Step::Blocked(Block::IonicCompletion {
                queue,
                peer,
                target,
                site,
            }));
        }
        Ok(self.pass_completion_wait(thread, u64::from(handle.qpn)))
    }

    /// One step of the Ionic device: the oldest WQE of one queue pair, executed.
    pub(super) fn step_ionic(&mut self) -> Result<(), SimulationError> {
        let Some(event) = self
            .ionic
            .step(&mut self.memory, &mut self.rng)
            .map_err(|e| SimulationError::Nic(e.to_string()))?
        else {
            return Ok(());
        };
        let rank = event.rank;
        let cost = &self.options.cost_model;
        let rung_at = self
            .doorbell_times
            .get(&(rank, u64::from(event.queue_id)))
            .copied()
            .unwrap_or(0);
        let mut work = cost.nic_wqe_fetch(1) + cost.nic_rdma_write(event.bytes);
        if event.completed {
            work += cost.nic_completion();
        }
        let clock = &mut self.nic_clocks[rank as usize];
        *clock = (*clock).max(rung_at) + work.0;
        let now = *clock;
        let posted = self.posted.remove(&CommandKey::Ionic {
            rank,
            queue_id: event.queue_id,
            slot: event.index,
        });
        if event.status != aboleth_abi::ionic::STS_OK {
            let site = self.posted_site(&posted);
            return Err(SimulationError::Nic(format!(
                "rank {rank}'s Ionic queue {}: the WQE at index {}{site} failed with status {}",
                event.queue_id, event.index, event.status
            )));
        }
        if event.completed {
            self.write_times
                .insert((rank, u64::from(event.queue_id)), now);
        }
        self.on_command_executed(posted, now)
    }
}
