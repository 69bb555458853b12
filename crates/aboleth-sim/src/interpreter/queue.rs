//! The queue protocol mlx5, EFA, Ionic and the proxy share: reserving slots, reading a put's or a
//! signal's operands into the records the checks use, publishing in order, and recording a
//! posted command against its slot (a slot collision is two programs owning one queue).
//!
//! What differs per transport is where the counters live and how a full ring is reclaimed: a
//! [`QueueGeometry`] from `mlx5.rs`, `efa.rs`, `ionic.rs` or `proxy.rs`, and [`World::reclaim`]. The encoding of a
//! command (a WQE, a ring entry) is not here: `mlx5.rs` and `proxy.rs` write it from the
//! [`PreparedPut`] or [`PreparedSignal`] this file reads.

use std::rc::Rc;

use aboleth_abi::{EndpointHandle, Transport, mlx5::receive::ImmediateSignal};
use aboleth_ir::ab::attributes::SignalOperation;

use super::{
    Block, CommandKey, PostedCommand, PutRecord, RemotePointerValue, SignalRecord, SimulationError,
    Step, Value, World,
};
use crate::program::{PutOperands, Register, SignalOperands, StoreOrder};

/// Where a queue's counters live, for one transport.
pub(super) struct QueueGeometry {
    /// The reservation counter (the next free slot).
    pub(super) reservation_counter_address: u64,
    /// The publication counter: the slots before it are published.
    pub(super) ready_counter_address: u64,
    /// Slots in the ring.
    pub(super) capacity: u64,
    /// The consumer position a reservation reads (slots before it are free).
    pub(super) consumer_address: u64,
    /// mlx5: the collapsed CQ's `wqe_counter` word, from which a full ring is reclaimed.
    pub(super) cq_counter_address: Option<u64>,
    /// The error a failed read of the consumer position is (the NIC's or the proxy's).
    pub(super) read_error: fn(String) -> SimulationError,
}

/// What a completion wait of a queue whose completions the generated code tracks itself (EFA,
/// Ionic) waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum QueueWaitTarget {
    /// The WQE at this index (a token wait).
    Wqe(u64),
    /// Every WQE before this index (a drain, or the wait before a signal).
    Prefix(u64),
}

impl QueueWaitTarget {
    /// What the wait waits for, for a deadlock report.
    pub(super) fn describe(self) -> String {
        match self {
            QueueWaitTarget::Wqe(index) => format!("the completion of the WQE at index {index}"),
            QueueWaitTarget::Prefix(end) => {
                format!("the completions of every WQE before index {end}")
            }
        }
    }
}

/// A put's operands, read and checked, and the record the checks keep of it.
pub(super) struct PreparedPut {
    pub(super) peer: u32,
    pub(super) handle: EndpointHandle,
    pub(super) slot: u64,
    pub(super) destination: RemotePointerValue,
    pub(super) source: u64,
    pub(super) length_bytes: u64,
    pub(super) key: u32,
    pub(super) predicate: bool,
    pub(super) completion: bool,
    /// The source bytes as the program saw them (empty when the predicate is false).
    pub(super) expected: Vec<u8>,
    /// The immediate of a write with immediate.
    pub(super) immediate: Option<u32>,
    pub(super) posted: PostedCommand,
}

/// A signal's operands, read and checked, and its record.
pub(super) struct PreparedSignal {
    pub(super) peer: u32,
    pub(super) handle: EndpointHandle,
    pub(super) slot: u64,
    pub(super) flag: RemotePointerValue,
    pub(super) value: u64,
    pub(super) completion: bool,
    pub(super) record: Rc<SignalRecord>,
}

impl<'k> World<'k> {
    /// The counters of the queue `handle` names, in the kernel's transport.
    pub(super) fn queue_geometry(&self, handle: &EndpointHandle) -> QueueGeometry {
        match self.transport {
            Transport::Mlx5 => Self::mlx5_queue_geometry(handle),
            Transport::Efa => Self::efa_queue_geometry(handle),
            Transport::Ionic => Self::ionic_queue_geometry(handle),
            _ => Self::proxy_queue_geometry(handle),
        }
    }

    /// What the generated reservation does when the ring looks full with `consumed` known
    /// free: mlx5 reclaims from its CQ ([`World::reclaim_mlx5_ring`]); the proxy advances
    /// its consumer head itself.
    fn reclaim(
        &mut self,
        thread: usize,
        peer: u32,
        handle: &EndpointHandle,
        consumed: u64,
    ) -> Result<u64, SimulationError> {
        let rank = self.threads[thread].rank;
        match self.transport {
            Transport::Mlx5 => self.reclaim_mlx5_ring(thread, rank, peer, handle),
            Transport::Efa => {
                self.efa_poll_completions(rank, peer, super::efa::EfaQueue::of(handle))
            }
            Transport::Ionic => {
                self.ionic_poll_completions(rank, peer, super::ionic::IonicQueue::of(handle))
            }
            _ => Ok(consumed),
        }
    }

    /// `mlx5.reserve` / `proxy.reserve`.
    pub(super) fn reserve(
        &mut self,
        thread: usize,
        site: usize,
        result: Register,
        endpoint: Register,
        slots: Register,
        atomic: bool,
    ) -> Result<Step, SimulationError> {
        // Generated code starts every reservation with a barrier of the program's threads (the
        // commands and their sources follow the other threads' stores: aboleth-codegen's
        // `emit/queue.rs`, `reserve_slots`).
        self.order_other_threads(thread);
        let rank = self.threads[thread].rank;
        let (peer, handle) = self.endpoint(thread, endpoint)?;
        let slots = self.integer(thread, slots)? as u64;
        let geometry = self.queue_geometry(&handle);
        let (counter, capacity) = (geometry.reservation_counter_address, geometry.capacity);
        // What the generated code knows: mlx5, the consumer index its completion waits advanced
        // (see `reclaim_mlx5_ring` for when that is not enough); the proxy, its consumer head.
        let consumed = self
            .memory
            .read_u64(rank, geometry.consumer_address)
            .map_err(|e| (geometry.read_error)(e.to_string()))?;
        if slots > capacity {
            return Err(self.program_error(
                thread,
                format!(
                    "reservation of {slots} slots at {} exceeds the queue to rank {peer} ({capacity} slots): raise the ring size",
                    self.site_of(rank, site)
                ),
            ));
        }
        let efa_queue =
            (self.transport == Transport::Efa).then(|| super::efa::EfaQueue::of(&handle));
        let ionic_queue =
            (self.transport == Transport::Ionic).then(|| super::ionic::IonicQueue::of(&handle));
        let space_block = |end: u64| Block::Space {
            peer,
            site,
            consumer_address: geometry.consumer_address,
            needed: end.saturating_sub(capacity),
            cq_counter_address: geometry.cq_counter_address,
            efa_queue,
            ionic_queue,
        };
        let cost = self.options.cost_model.clone();
        let head_now = if atomic {
            self.memory.read_u64(rank, counter).unwrap_or(0)
        } else {
            self.threads[thread].reservation_loaded.map_or_else(
                || self.load_i64(thread, rank, counter).map(|v| v as u64),
                Ok,
            )?
        };
        let consumed = if head_now + slots > consumed + capacity {
            self.reclaim(thread, peer, &handle, consumed)?
        } else {
            consumed
        };
        if atomic {
            let head = head_now;
            if head + slots > consumed + capacity {
                return Ok(Step::Blocked(space_block(head + slots)));
            }
            let base = self.atomic_update(thread, rank, counter, |old| old + slots)?;
            self.set(thread, result, Value::Integer(base as i64));
            self.counts.reservations += 1;
            self.counts.atomics += 1;
            self.advance_clock(thread, cost.gpu_scope_atomic_nanoseconds);
            return Ok(Step::Effect);
        }
        // One owner: a plain load and a plain store, two steps apart, so that two programs
        // wrongly believed to own one queue can interleave and collide.
        match self.threads[thread].reservation_loaded.take() {
            None => {
                let head = self.load_i64(thread, rank, counter)? as u64;
                if head + slots > consumed + capacity {
                    return Ok(Step::Blocked(space_block(head + slots)));
                }
                self.threads[thread].reservation_loaded = Some(head);
                // Run this instruction again for the store.
                self.threads[thread]
                    .frames
                    .last_mut()
                    .expect("executing in a frame")
                    .pc -= 1;
                self.advance_clock(thread, cost.gpu_global_store_nanoseconds);
                Ok(Step::Effect)
            }
            Some(base) => {
                self.store(
                    thread,
                    rank,
                    counter,
                    &(base + slots).to_le_bytes(),
                    StoreOrder::Relaxed,
                )?;
                self.set(thread, result, Value::Integer(base as i64));
                self.counts.reservations += 1;
                self.advance_clock(thread, cost.gpu_global_store_nanoseconds);
                Ok(Step::Effect)
            }
        }
    }

    /// Reads a put's operands and records it: what it must deliver, which signal it waits
    /// for (a write with immediate carries its own), what it counts.
    pub(super) fn prepare_put(
        &mut self,
        thread: usize,
        site: usize,
        put: &PutOperands,
    ) -> Result<PreparedPut, SimulationError> {
        let rank = self.threads[thread].rank;
        let (peer, handle) = self.endpoint(thread, put.endpoint)?;
        let slot = self.integer(thread, put.slot)? as u64;
        let destination = self.remote_pointer(thread, put.destination)?;
        let immediate = match put.immediate {
            Some((value, flag)) => Some(self.immediate_signal(thread, site, peer, value, flag)?),
            None => None,
        };
        self.check_same_peer(thread, site, peer, destination.peer)?;
        let source = self.integer(thread, put.source)? as u64;
        let length_bytes = self.integer(thread, put.bytes)?;
        let key = self.integer(thread, put.key)? as u32;
        let predicate = self.integer(thread, put.predicate)? != 0;
        let completion = self.integer(thread, put.completion)? != 0;
        if length_bytes < 0 {
            return Err(self.program_error(
                thread,
                format!(
                    "put of {length_bytes} bytes at {}",
                    self.site_of(rank, site)
                ),
            ));
        }
        let length_bytes = length_bytes as u64;
        if predicate {
            self.check_in_user_region(thread, site, "reads", source, length_bytes)?;
        }
        let expected = if predicate {
            self.load(thread, rank, source, length_bytes)?
        } else {
            Vec::new()
        };
        let visible_at_post = if predicate {
            self.memory
                .read(rank, source, length_bytes)
                .map_err(|e| self.program_error(thread, format!("put source: {e}")))?
        } else {
            Vec::new()
        };
        let record = Rc::new(PutRecord {
            rank,
            program: self.threads[thread].program,
            site,
            destination_rank: peer,
            destination_address: destination.address,
            expected: expected.clone(),
            visible_at_post,
        });
        if predicate {
            self.threads[thread]
                .unsignaled_puts
                .entry(peer)
                .or_default()
                .push(record.clone());
            self.counts.payload_bytes += length_bytes;
            if put.inline {
                self.counts.inline_bytes += length_bytes;
            }
        }
        self.counts.wqes += 1;
        self.counts.completions_requested += u64::from(completion);
        let posted = match (predicate, &immediate) {
            (true, Some((value, flag_address))) => {
                // The signal guards this put and the earlier ones on the endpoint.
                let decoded = ImmediateSignal::decode(*value);
                let operation = if decoded.add {
                    SignalOperation::Add
                } else {
                    SignalOperation::Set
                };
                let signal = self.take_signal_record(
                    thread,
                    peer,
                    site,
                    *flag_address,
                    (operation, i64::from(decoded.value)),
                );
                PostedCommand::PutWithImmediate(record, signal)
            }
            (true, None) => PostedCommand::Put(record),
            (false, _) => PostedCommand::Other,
        };
        Ok(PreparedPut {
            peer,
            handle,
            slot,
            destination,
            source,
            length_bytes,
            key,
            predicate,
            completion,
            expected,
            immediate: immediate.map(|(value, _)| value),
            posted,
        })
    }

    /// Reads a signal's operands and records it with the puts it guards.
    pub(super) fn prepare_signal(
        &mut self,
        thread: usize,
        site: usize,
        signal: &SignalOperands,
    ) -> Result<PreparedSignal, SimulationError> {
        let (peer, handle) = self.endpoint(thread, signal.endpoint)?;
        let slot = self.integer(thread, signal.slot)? as u64;
        let flag = self.remote_pointer(thread, signal.flag)?;
        self.check_same_peer(thread, site, peer, flag.peer)?;
        let value = self.integer(thread, signal.value)? as u64;
        let completion = self.integer(thread, signal.completion)? != 0;
        let record = self.take_signal_record(
            thread,
            peer,
            site,
            flag.address,
            (signal.operation, value as i64),
        );
        self.counts.wqes += 1;
        self.counts.completions_requested += u64::from(completion);
        Ok(PreparedSignal {
            peer,
            handle,
            slot,
            flag,
            value,
            completion,
            record,
        })
    }

    /// `mlx5.publish` / `proxy.publish`: waits until the publication counter is `base`, then
    /// moves it past this program's `count` slots (a one-owner queue stores it plainly).
    pub(super) fn publish(
        &mut self,
        thread: usize,
        site: usize,
        endpoint: Register,
        base: Register,
        count: Register,
        owner_only: bool,
    ) -> Result<Step, SimulationError> {
        let rank = self.threads[thread].rank;
        let cost = self.options.cost_model.clone();
        let (_, handle) = self.endpoint(thread, endpoint)?;
        let base = self.integer(thread, base)? as u64;
        let count = self.integer(thread, count)? as u64;
        let address = self.queue_geometry(&handle).ready_counter_address;
        if owner_only {
            self.store(
                thread,
                rank,
                address,
                &(base + count).to_le_bytes(),
                StoreOrder::Relaxed,
            )?;
            self.advance_clock(thread, cost.gpu_global_store_nanoseconds);
            return Ok(Step::Effect);
        }
        if self.memory.read_u64(rank, address).unwrap_or(u64::MAX) != base {
            return Ok(Step::Blocked(Block::Publication {
                address,
                base,
                site,
            }));
        }
        self.atomic_update(thread, rank, address, |_| base + count)?;
        self.counts.atomics += 1;
        self.advance_clock(thread, cost.gpu_scope_atomic_nanoseconds);
        Ok(Step::Effect)
    }

    /// The part of an MMIO doorbell that EFA and Ionic share: a system-scope release of the
    /// program's stores (the WQEs, the staged values) unless `order` is relaxed, then the new
    /// producer index at `producer_address` (an `atomicMax` on a shared queue, whose result is
    /// what the doorbell carries; a plain store otherwise). Returns the producer index to ring.
    pub(super) fn release_and_advance_producer(
        &mut self,
        thread: usize,
        producer_address: u64,
        end: u64,
        (atomic_max, order): (bool, StoreOrder),
    ) -> Result<u64, SimulationError> {
        let rank = self.threads[thread].rank;
        let cost = self.options.cost_model.clone();
        if order == StoreOrder::Release {
            self.flush(thread)?;
            self.advance_clock(thread, cost.fence_sys_nanoseconds);
        }
        if atomic_max {
            self.counts.atomics += 1;
            self.advance_clock(thread, cost.gpu_scope_atomic_nanoseconds);
            return Ok(
                end.max(self.atomic_update(thread, rank, producer_address, |old| old.max(end))?)
            );
        }
        self.store(
            thread,
            rank,
            producer_address,
            &end.to_le_bytes(),
            StoreOrder::Relaxed,
        )?;
        Ok(end)
    }

    /// A completion wait of `thread` passed: its clock moves to when the device last wrote a
    /// completion of queue `queue` (by `(rank, queue)`, as `write_times` keeps it).
    pub(super) fn pass_completion_wait(&mut self, thread: usize, queue: u64) -> Step {
        let rank = self.threads[thread].rank;
        let completed_at = self.write_times.get(&(rank, queue)).copied().unwrap_or(0);
        let state = &mut self.threads[thread];
        state.clock_nanoseconds = state.clock_nanoseconds.max(completed_at);
        Step::Effect
    }

    /// The MMIO store of a doorbell done: its cost, and when it was rung (for the device's
    /// clock), by `(rank, queue)`.
    pub(super) fn doorbell_rung(&mut self, thread: usize, queue: u64) {
        let rank = self.threads[thread].rank;
        self.advance_clock(
            thread,
            self.options.cost_model.pcie_mmio_doorbell_write_nanoseconds,
        );
        let time = self.threads[thread].clock_nanoseconds;
        self.doorbell_times.insert((rank, queue), time);
    }

    /// Where, in the program, the command a device event refers to came from (for messages).
    pub(super) fn posted_site(&self, posted: &Option<PostedCommand>) -> String {
        match posted {
            Some(PostedCommand::Put(put) | PostedCommand::PutWithImmediate(put, _)) => {
                format!(" (the put at {})", self.site_of(put.rank, put.site))
            }
            Some(PostedCommand::Signal(signal)) => {
                format!(
                    " (the signal at {})",
                    self.site_of(signal.rank, signal.site)
                )
            }
            _ => String::new(),
        }
    }

    /// Records a posted command (with the slot after it when it requests a completion); a slot still holding an unexecuted command means two programs
    /// took the same slots (a queue posted as if it had one owner when it has several).
    pub(super) fn post(
        &mut self,
        thread: usize,
        key: CommandKey,
        peer: u32,
        completion_end: Option<u64>,
        posted: PostedCommand,
    ) -> Result<(), SimulationError> {
        if let Some(end) = completion_end {
            // What a drain of this queue waits for, and frees.
            let first = match key {
                CommandKey::Mlx5 { slot, .. }
                | CommandKey::Efa { slot, .. }
                | CommandKey::Ionic { slot, .. } => slot,
                CommandKey::Proxy { ticket, .. } => ticket,
            };
            self.threads[thread]
                .last_completion_slot
                .insert(peer, (first, end));
        }
        if self.posted.contains_key(&key) {
            let (rank, slot) = match key {
                CommandKey::Mlx5 { rank, slot, .. }
                | CommandKey::Efa { rank, slot, .. }
                | CommandKey::Ionic { rank, slot, .. }
                | CommandKey::Proxy {
                    rank, ticket: slot, ..
                } => (rank, slot),
            };
            return Err(SimulationError::SlotCollision(format!(
                "rank {rank} program {} wrote slot {slot} of its queue to rank {peer} while an earlier command there had not executed yet: two programs reserved the same slots (is the queue really owned by one program?)",
                self.threads[thread].program
            )));
        }
        self.posted.insert(key, posted);
        Ok(())
    }
}
