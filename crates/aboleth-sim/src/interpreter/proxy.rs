//! How the simulator executes the proxy transport on the GPU's side: the command ring of each
//! endpoint (host-pinned, registered with the rank's [`ProxyEngine`]), the ring entries each
//! queue command becomes (the bytes `aboleth_abi::proxy` encodes, fields first and the
//! sequence word last), the producer-head doorbell, and completion waits on the ring's
//! completion counter. It also turns each step of the proxy model ([`crate::proxy_engine`],
//! which executes the entries) into the interpreter's bookkeeping.
//!
//! The queue protocol the proxy shares with mlx5 is in `queue.rs`; the proxy thread's own
//! execution of an entry is in `proxy_engine.rs`.

use aboleth_abi::{
    EndpointHandle, ProxyCommand, ProxyRingEntry, ProxyRingHeader,
    proxy::{ProxyOperation, ProxyPut, ProxySignal, SignalOperation as ProxySignalOperation},
};
use aboleth_ir::ab::attributes::SignalOperation;

use super::{
    Block, CommandKey, PostedCommand, SimulationError, SimulationOptions, Step, World,
    queue::{PreparedPut, PreparedSignal, QueueGeometry},
    setup::{ENDPOINT_HANDLE_BYTES, setup_error},
    store_cost,
};
use crate::{
    Memory, MemoryKind, ProxyEngine,
    program::{SignalOperands, StoreOrder},
};

/// A ring entry's sequence word: its first field, stored last (the proxy reads an entry once
/// its sequence names the ticket).
const SEQUENCE_WORD_BYTES: usize = core::mem::size_of::<u64>();
const _: () = assert!(core::mem::offset_of!(ProxyRingEntry, sequence) == 0);
const _: () = assert!(core::mem::offset_of!(ProxyRingEntry, opcode) == SEQUENCE_WORD_BYTES);

/// The proxy's part of the endpoint from `rank` to `peer`: a command ring, registered with the
/// rank's proxy.
pub(super) fn setup_proxy_endpoint(
    memory: &mut Memory,
    proxy: &mut ProxyEngine,
    options: &SimulationOptions,
    (rank, peer): (u32, u32),
    handle: &mut EndpointHandle,
) -> Result<(), SimulationError> {
    let header = ProxyRingHeader::new(options.proxy_ring_capacity_entries).map_err(setup_error)?;
    let ring = memory.allocate(
        rank,
        header.ring_total_bytes() as u64,
        MemoryKind::HostPinned,
        &format!("proxy ring to {peer}"),
    );
    memory
        .write(rank, ring, &header.to_bytes())
        .map_err(setup_error)?;
    proxy
        .register_ring(memory, peer, ring, options.proxy_ring_capacity_entries)
        .map_err(setup_error)?;
    handle.proxy_ring_address = ring;
    handle.proxy_ring_capacity_entries = options.proxy_ring_capacity_entries;
    Ok(())
}

/// What the proxy's set-up allocates per rank beyond the tables: a ring per peer.
pub(super) fn infrastructure_bytes(ranks: u64, options: &SimulationOptions) -> u64 {
    let ring = ProxyRingHeader::new(options.proxy_ring_capacity_entries)
        .map_or(0, |header| header.ring_total_bytes() as u64);
    ranks.saturating_sub(1) * ring
}

impl<'k> World<'k> {
    /// The counters of a proxy ring: in its header.
    pub(super) fn proxy_queue_geometry(handle: &EndpointHandle) -> QueueGeometry {
        QueueGeometry {
            reservation_counter_address: handle.proxy_ring_address
                + ProxyRingHeader::PRODUCER_RESERVATION_COUNTER_OFFSET_BYTES,
            ready_counter_address: handle.proxy_ring_address
                + ProxyRingHeader::PRODUCER_READY_COUNTER_OFFSET_BYTES,
            capacity: u64::from(handle.proxy_ring_capacity_entries),
            consumer_address: handle.proxy_ring_address
                + ProxyRingHeader::CONSUMER_HEAD_OFFSET_BYTES,
            cq_counter_address: None,
            read_error: SimulationError::Proxy,
        }
    }

    /// `proxy.put`: a put entry naming its destination by region and offset (a NOP entry when
    /// its predicate is false).
    pub(super) fn proxy_put(
        &mut self,
        thread: usize,
        site: usize,
        put: PreparedPut,
    ) -> Result<(), SimulationError> {
        let operation = if put.predicate {
            // The proxy would reject it; say so at the source line.
            self.check_inside_region(thread, "put", site, &put.destination, put.length_bytes)?;
            ProxyOperation::Put(ProxyPut {
                source_address: put.source,
                source_key: put.key,
                destination_region_index: put.destination.region_index,
                destination_offset_bytes: put.destination.offset_bytes,
                length_bytes: put.length_bytes,
            })
        } else {
            ProxyOperation::Nop
        };
        self.write_ring_entry(
            thread,
            put.peer,
            &put.handle,
            put.slot,
            put.completion,
            operation,
            put.posted,
        )
    }

    /// `proxy.signal`: a signal entry naming its flag by region and offset.
    pub(super) fn proxy_signal(
        &mut self,
        thread: usize,
        operands: &SignalOperands,
        signal: PreparedSignal,
    ) -> Result<(), SimulationError> {
        let operation = ProxyOperation::Signal(ProxySignal {
            region_index: signal.flag.region_index,
            offset_bytes: signal.flag.offset_bytes as u32,
            value: signal.value,
            operation: match operands.operation {
                SignalOperation::Add => ProxySignalOperation::Add,
                SignalOperation::Set => ProxySignalOperation::Set,
            },
        });
        self.write_ring_entry(
            thread,
            signal.peer,
            &signal.handle,
            signal.slot,
            signal.completion,
            operation,
            PostedCommand::Signal(signal.record),
        )
    }

    /// `proxy.doorbell`: moves the ring's producer head to `end`, with one atomic max when
    /// several programs post.
    pub(super) fn proxy_doorbell(
        &mut self,
        thread: usize,
        handle: &EndpointHandle,
        end: u64,
        atomic_max: bool,
        order: StoreOrder,
    ) -> Result<(), SimulationError> {
        let rank = self.threads[thread].rank;
        let cost = self.options.cost_model.clone();
        let address = handle.proxy_ring_address + ProxyRingHeader::PRODUCER_HEAD_OFFSET_BYTES;
        if atomic_max {
            // One `atom.release.sys.max`: a separate store of the maximum could
            // land after another producer's larger head and move it backwards.
            if order == StoreOrder::Release {
                self.flush(thread)?;
            }
            self.atomic_update(thread, rank, address, |old| old.max(end))?;
            self.counts.atomics += 1;
            self.advance_clock(thread, cost.gpu_scope_atomic_nanoseconds);
        } else {
            self.store(thread, rank, address, &end.to_le_bytes(), order)?;
            self.advance_clock(thread, store_cost(&cost, order));
        }
        let time =
            self.threads[thread].clock_nanoseconds + cost.gpu_host_one_way_latency_nanoseconds;
        self.doorbell_times
            .insert((rank, handle.proxy_ring_address), time);
        Ok(())
    }

    /// `proxy.wait_completion`: waits until the ring's completion counter passes `ticket`.
    pub(super) fn proxy_wait_completion(
        &mut self,
        thread: usize,
        site: usize,
        peer: u32,
        handle: &EndpointHandle,
        ticket: u64,
    ) -> Result<Step, SimulationError> {
        let rank = self.threads[thread].rank;
        let block = Block::ProxyCompletion {
            ring_address: handle.proxy_ring_address,
            peer,
            ticket,
            site,
        };
        if !self.block_released(thread, &block)? {
            return Ok(Step::Blocked(block));
        }
        let completed_at = self
            .write_times
            .get(&(rank, handle.proxy_ring_address))
            .copied()
            .unwrap_or(0);
        let state = &mut self.threads[thread];
        state.clock_nanoseconds = state.clock_nanoseconds.max(completed_at);
        Ok(Step::Effect)
    }

    #[allow(clippy::too_many_arguments, reason = "one ring entry's fields")]
    pub(super) fn write_ring_entry(
        &mut self,
        thread: usize,
        peer: u32,
        handle: &EndpointHandle,
        ticket: u64,
        completion: bool,
        operation: ProxyOperation,
        posted: PostedCommand,
    ) -> Result<(), SimulationError> {
        let rank = self.threads[thread].rank;
        let entry = ProxyCommand {
            ticket,
            peer_rank: peer,
            completion_requested: completion,
            operation,
        }
        .encode();
        let bytes = entry.to_bytes();
        let address = handle.proxy_ring_address
            + ProxyRingHeader::ENTRIES_OFFSET_BYTES as u64
            + aboleth_abi::proxy::slot_index(ticket, handle.proxy_ring_capacity_entries) as u64
                * ProxyRingEntry::SIZE_BYTES as u64;
        // The fields, then the sequence word last (both plain: the doorbell's release orders them).
        let fields = SEQUENCE_WORD_BYTES;
        self.store(
            thread,
            rank,
            address + fields as u64,
            &bytes[fields..],
            StoreOrder::Relaxed,
        )?;
        self.store(thread, rank, address, &bytes[..fields], StoreOrder::Relaxed)?;
        self.advance_clock(
            thread,
            2 * self.options.cost_model.gpu_global_store_nanoseconds,
        );
        self.post(
            thread,
            CommandKey::Proxy { rank, peer, ticket },
            peer,
            completion.then_some(ticket + 1),
            posted,
        )?;
        Ok(())
    }

    pub(super) fn step_proxy(&mut self, index: usize) -> Result<(), SimulationError> {
        let Some(event) = self.proxies[index]
            .step(&mut self.memory, &mut self.rng)
            .map_err(|e| SimulationError::Proxy(e.to_string()))?
        else {
            return Ok(());
        };
        let rank = event.rank;
        let ring_address = self.endpoint_handles_ring(rank, event.peer_rank);
        let rung_at = self
            .doorbell_times
            .get(&(rank, ring_address))
            .copied()
            .unwrap_or(0);
        let clock = &mut self.proxy_clocks[rank as usize];
        *clock = (*clock).max(rung_at) + event.cost.0;
        let now = *clock;
        if event.completion_counter.is_some() {
            self.write_times.insert(
                (rank, ring_address),
                now + self.options.cost_model.gpu_host_one_way_latency_nanoseconds,
            );
        }
        let posted = self.posted.remove(&CommandKey::Proxy {
            rank,
            peer: event.peer_rank,
            ticket: event.command.ticket,
        });
        self.on_command_executed(posted, now)
    }

    pub(super) fn endpoint_handles_ring(&self, rank: u32, peer: u32) -> u64 {
        let address = self.endpoint_tables[rank as usize] + u64::from(peer) * ENDPOINT_HANDLE_BYTES;
        self.memory
            .read(rank, address, ENDPOINT_HANDLE_BYTES)
            .map(|bytes| {
                EndpointHandle::from_bytes(&bytes.try_into().expect("128 bytes")).proxy_ring_address
            })
            .unwrap_or(0)
    }
}
