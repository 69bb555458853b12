//! How the simulator executes the p2p transport (NVLink / peer memory): a copy is the
//! program's own relaxed stores into the peer's memory, in pieces of
//! [`super::SimulationOptions::p2p_store_bytes`] that its store buffer may reorder, and a signal
//! is a store or an atomic add on the peer's flag. Nothing executes them later: there is no
//! queue, ring or device model, so a put's record is landed when posted and a signal is
//! delivered when its store becomes visible.
//!
//! Flag-in-data packets (`p2p.put_packets` and the waits that unpack them) are in
//! `packets.rs`; a copy's source is read through `memory_access.rs`.

use aboleth_abi::EndpointHandle;
use aboleth_ir::ab::attributes::SignalOperation;

use super::{SimulationError, Step, World, store_cost};
use crate::program::{Register, StoreOrder};

/// p2p's part of the endpoint from `rank` to `peer`: the distance between the two ranks'
/// address spaces, which the generated code adds to a local address.
pub(super) fn setup_p2p_endpoint((rank, peer): (u32, u32), handle: &mut EndpointHandle) {
    handle.peer_base_delta = crate::memory::rank_address_space_base(peer)
        .wrapping_sub(crate::memory::rank_address_space_base(rank))
        as i64;
}

impl<'k> World<'k> {
    /// `p2p.copy`: the source, as the program's threads read it, stored piece by piece into
    /// the destination on the peer (nothing when the predicate is false).
    pub(super) fn p2p_copy(
        &mut self,
        thread: usize,
        site: usize,
        [endpoint, destination, source, bytes, predicate]: [Register; 5],
    ) -> Result<Step, SimulationError> {
        let (peer, _) = self.endpoint(thread, endpoint)?;
        let destination = self.remote_pointer(thread, destination)?;
        self.check_same_peer(thread, site, peer, destination.peer)?;
        let source = self.integer(thread, source)? as u64;
        let length_bytes = self.integer(thread, bytes)?.max(0) as u64;
        if self.integer(thread, predicate)? == 0 {
            return Ok(Step::Continue);
        }
        self.check_inside_region(thread, "copy", site, &destination, length_bytes)?;
        self.check_in_user_region(thread, site, "reads", source, length_bytes)?;
        let payload = self.load_copy_source(thread, site, source, length_bytes)?;
        let chunk = self.options.p2p_store_bytes.max(1) as usize;
        for (index, piece) in payload.chunks(chunk).enumerate() {
            self.store(
                thread,
                peer,
                destination.address + (index * chunk) as u64,
                piece,
                StoreOrder::Relaxed,
            )?;
        }
        let record = self.stored_put_record(thread, site, peer, destination.address, payload);
        self.landed_puts.push(record.clone());
        self.threads[thread]
            .unsignaled_puts
            .entry(peer)
            .or_default()
            .push(record);
        self.counts.payload_bytes += length_bytes;
        let cost = self.options.cost_model.peer_store(length_bytes).0;
        self.advance_clock(thread, cost);
        Ok(Step::Effect)
    }

    /// `p2p.signal`: a set is a store of the value (delivered when it becomes visible), an add
    /// an atomic on the peer's flag (a release one flushes the program's stores first).
    pub(super) fn p2p_signal(
        &mut self,
        thread: usize,
        site: usize,
        [endpoint, flag, value]: [Register; 3],
        operation: SignalOperation,
        order: StoreOrder,
    ) -> Result<Step, SimulationError> {
        let cost = self.options.cost_model.clone();
        let (peer, _) = self.endpoint(thread, endpoint)?;
        let flag = self.remote_pointer(thread, flag)?;
        self.check_same_peer(thread, site, peer, flag.peer)?;
        let value = self.integer(thread, value)?;
        let record = self.take_signal_record(thread, peer, site, flag.address, (operation, value));
        let latency = cost.peer_store_one_way_latency_nanoseconds;
        match operation {
            SignalOperation::Set => {
                self.counts.flag_stores += 1;
                let program_order =
                    self.store(thread, peer, flag.address, &value.to_le_bytes(), order)?;
                match order {
                    StoreOrder::Release => {
                        let time = self.threads[thread].clock_nanoseconds + latency;
                        self.deliver(peer, flag.address, record, time);
                    }
                    StoreOrder::Relaxed => {
                        self.p2p_signal_stores
                            .insert((thread, program_order), record);
                    }
                }
                self.advance_clock(thread, store_cost(&cost, order));
            }
            SignalOperation::Add => {
                if order == StoreOrder::Release {
                    self.flush(thread)?;
                }
                self.atomic_update(thread, peer, flag.address, |old| {
                    old.wrapping_add(value as u64)
                })?;
                self.counts.atomics += 1;
                self.advance_clock(thread, cost.gpu_scope_atomic_nanoseconds);
                let time = self.threads[thread].clock_nanoseconds + latency;
                self.deliver(peer, flag.address, record, time);
            }
        }
        Ok(Step::Effect)
    }
}
