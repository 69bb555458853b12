//! Memory as a program sees it: loads through its store buffer (and its other threads' stores
//! not yet ordered by a barrier), stores, fences and atomics, the `ab.load` and `ab.store`
//! instructions, and the bounds every program pointer must keep (inside its rank's regions;
//! a remote write inside its region). Reads of the region-descriptor tables go through here
//! too, as the generated code's loads do.
//!
//! It does not decide when stores become visible (the scheduler drains the buffers, see
//! [`crate::gpu_store_buffer`]) nor what a wait guarantees (`checks.rs`).

use aboleth_abi::RemoteRegionDescriptor;
use aboleth_ir::scalar::truncate_signed;

use super::{
    RegionAllocation, RemotePointerValue, SimulationError, Step, Value, World,
    setup::REGION_DESCRIPTOR_BYTES,
};
use crate::{
    gpu_store_buffer::DrainedStore,
    program::{Register, StoreOrder},
};

impl<'k> World<'k> {
    /// `ab.load`: `width_bytes` from the program's view of memory, sign-extended.
    pub(super) fn execute_load(
        &mut self,
        thread: usize,
        site: usize,
        result: Register,
        address: Register,
        width_bytes: u64,
    ) -> Result<Step, SimulationError> {
        let rank = self.threads[thread].rank;
        let address = self.integer(thread, address)? as u64;
        self.check_in_user_region(thread, site, "reads", address, width_bytes)?;
        let bytes = self.load(thread, rank, address, width_bytes)?;
        let mut word = [0u8; 8];
        word[..bytes.len()].copy_from_slice(&bytes);
        let value = truncate_signed(i64::from_le_bytes(word), (width_bytes * 8) as u32);
        self.set(thread, result, Value::Integer(value));
        Ok(Step::Continue)
    }

    /// `ab.store`: a store of the program's other threads, into their buffer until the
    /// program's next barrier orders it.
    pub(super) fn execute_store(
        &mut self,
        thread: usize,
        site: usize,
        address: Register,
        value: Register,
        width_bytes: u64,
    ) -> Result<Step, SimulationError> {
        let rank = self.threads[thread].rank;
        let address = self.integer(thread, address)? as u64;
        self.check_in_user_region(thread, site, "writes", address, width_bytes)?;
        let value = self.integer(thread, value)?;
        let bytes = value.to_le_bytes()[..width_bytes as usize].to_vec();
        // Stores a barrier ordered before this one (now in the program's buffer) to the
        // same bytes come first in their coherence order: they become visible now, so
        // this one, from the other buffer, cannot land before them.
        let drained = self.store_buffers[thread]
            .drain_overlapping(&mut self.memory, rank, address, width_bytes)
            .map_err(|e| self.program_error(thread, format!("store: {e}")))?;
        self.on_drained(thread, drained);
        let other = self.other_threads_of(thread);
        self.store_buffers[other]
            .store(&self.memory, rank, address, &bytes)
            .map_err(|e| self.program_error(thread, format!("store: {e}")))?;
        self.advance_clock(thread, self.options.cost_model.gpu_global_store_nanoseconds);
        Ok(Step::Effect)
    }

    /// An out-of-bounds error unless `[address, address + length_bytes)` lies inside one of
    /// `rank`'s regions: what a program's own pointers (loads, stores, waits, put sources) may
    /// reach. The simulator's allocations (queues, rings, tables, receive sides) are never
    /// addressable through them, as on a GPU they would be someone else's memory.
    pub(super) fn check_in_user_region(
        &self,
        thread: usize,
        site: usize,
        access: &str,
        address: u64,
        length_bytes: u64,
    ) -> Result<(), SimulationError> {
        let rank = self.threads[thread].rank;
        let regions = &self.regions[rank as usize];
        let inside = regions.values().any(|region| {
            address >= region.address
                && address
                    .checked_add(length_bytes)
                    .is_some_and(|end| end <= region.address + region.length_bytes)
        });
        if inside {
            return Ok(());
        }
        let distance = |region: &RegionAllocation| {
            let end = region.address + region.length_bytes;
            if address < region.address {
                region.address - address
            } else {
                address.saturating_sub(end)
            }
        };
        let nearest = regions
            .iter()
            .min_by_key(|(_, region)| distance(region))
            .map_or("none".to_owned(), |(name, region)| {
                let end = region.address + region.length_bytes;
                let relation = if address < region.address {
                    format!("{:#x} bytes before its start", region.address - address)
                } else if address >= end {
                    format!("{:#x} bytes past its end", address - end)
                } else {
                    format!(
                        "starting at its byte {:#x} and running {:#x} bytes past its end",
                        address - region.address,
                        (address + length_bytes).saturating_sub(end)
                    )
                };
                format!(
                    "'{name}' [{:#x}, {end:#x}), {} bytes ({relation})",
                    region.address, region.length_bytes
                )
            });
        Err(self.program_error(
            thread,
            format!(
                "out of bounds: the {} at {} {access} {length_bytes} bytes at {address:#x}, outside every region of rank {rank}; the nearest region is {nearest}",
                self.kernel_of(rank).sites[site].op_name,
                self.kernel_of(rank).sites[site].location,
            ),
        ))
    }

    /// A load of the program: memory with its own pending stores and those of its other
    /// threads not yet ordered by a barrier (a scalar load sees the program's scalar stores).
    pub(super) fn load(
        &self,
        thread: usize,
        rank: u32,
        address: u64,
        length_bytes: u64,
    ) -> Result<Vec<u8>, SimulationError> {
        let mut bytes = self.load_after_barrier(thread, rank, address, length_bytes)?;
        if let Some(other) = self.threads[thread].other_threads {
            self.store_buffers[other].overlay_pending(rank, address, &mut bytes);
        }
        Ok(bytes)
    }

    /// A load by the program's threads in general (a copy's): memory with the stores ordered
    /// before it, not the other threads' stores since the last barrier.
    pub(super) fn load_after_barrier(
        &self,
        thread: usize,
        rank: u32,
        address: u64,
        length_bytes: u64,
    ) -> Result<Vec<u8>, SimulationError> {
        self.store_buffers[thread]
            .load(&self.memory, rank, address, length_bytes)
            .map_err(|e| self.program_error(thread, format!("load: {e}")))
    }

    /// The source of a p2p copy or packet put as its threads read it: an error when the
    /// program stored other bytes there that no barrier has ordered before the copy.
    pub(super) fn load_copy_source(
        &self,
        thread: usize,
        site: usize,
        source: u64,
        length_bytes: u64,
    ) -> Result<Vec<u8>, SimulationError> {
        let rank = self.threads[thread].rank;
        let seen = self.load_after_barrier(thread, rank, source, length_bytes)?;
        let stored = self.load(thread, rank, source, length_bytes)?;
        if let Some(offset) = (0..seen.len()).find(|&offset| seen[offset] != stored[offset]) {
            let state = &self.threads[thread];
            return Err(SimulationError::StaleSource(format!(
                "rank {rank} program {}'s copy at {} read {:#04x} at byte {offset} of its source {} where the program had stored {:#04x}: the store is not ordered before the copy's loads (a gpu.barrier must separate them)",
                state.program,
                self.site_of(rank, site),
                seen[offset],
                self.memory.describe_address(rank, source),
                stored[offset],
            )));
        }
        Ok(seen)
    }

    pub(super) fn load_i64(
        &self,
        thread: usize,
        rank: u32,
        address: u64,
    ) -> Result<i64, SimulationError> {
        let bytes = self.load(thread, rank, address, 8)?;
        Ok(i64::from_le_bytes(bytes.try_into().expect("8 bytes")))
    }

    pub(super) fn store(
        &mut self,
        thread: usize,
        rank: u32,
        address: u64,
        bytes: &[u8],
        order: StoreOrder,
    ) -> Result<u64, SimulationError> {
        let program_order = self.store_buffers[thread].next_program_order();
        match order {
            StoreOrder::Relaxed => self.store_buffers[thread]
                .store(&self.memory, rank, address, bytes)
                .map_err(|e| self.program_error(thread, format!("store: {e}")))?,
            StoreOrder::Release => {
                let drained = self.store_buffers[thread]
                    .store_release(&mut self.memory, &mut self.rng, rank, address, bytes)
                    .map_err(|e| self.program_error(thread, format!("store: {e}")))?;
                self.on_drained(thread, drained);
            }
        }
        Ok(program_order)
    }

    pub(super) fn flush(&mut self, thread: usize) -> Result<(), SimulationError> {
        let drained = self.store_buffers[thread]
            .fence(&mut self.memory, &mut self.rng)
            .map_err(|e| SimulationError::Program(e.to_string()))?;
        self.on_drained(thread, drained);
        Ok(())
    }

    /// An atomic read-modify-write on memory (it does not wait in the store buffer).
    pub(super) fn atomic_update(
        &mut self,
        thread: usize,
        rank: u32,
        address: u64,
        update: impl FnOnce(u64) -> u64,
    ) -> Result<u64, SimulationError> {
        // The program's own earlier stores to this word are ordered before its atomic on it.
        let drained = self.store_buffers[thread]
            .drain_overlapping(&mut self.memory, rank, address, 8)
            .map_err(|e| self.program_error(thread, format!("atomic: {e}")))?;
        self.on_drained(thread, drained);
        let old = self
            .memory
            .read_u64(rank, address)
            .map_err(|e| self.program_error(thread, format!("atomic: {e}")))?;
        self.memory
            .write_u64(rank, address, update(old))
            .map_err(|e| self.program_error(thread, format!("atomic: {e}")))?;
        Ok(old)
    }

    pub(super) fn on_drained(&mut self, thread: usize, drained: Vec<DrainedStore>) {
        for store in drained {
            if let Some(signal) = self
                .p2p_signal_stores
                .remove(&(thread, store.program_order))
            {
                let time = self.threads[thread].clock_nanoseconds
                    + self
                        .options
                        .cost_model
                        .peer_store_one_way_latency_nanoseconds;
                self.deliver(store.target_rank, store.address, signal, time);
            }
        }
    }

    /// A program error unless `length_bytes` from `destination` stay inside its region.
    pub(super) fn check_inside_region(
        &self,
        thread: usize,
        what: &str,
        site: usize,
        destination: &RemotePointerValue,
        length_bytes: u64,
    ) -> Result<(), SimulationError> {
        if destination.offset_bytes + length_bytes <= destination.region_length_bytes {
            return Ok(());
        }
        Err(self.program_error(
            thread,
            format!(
                "{what} at {} writes past the end of its region ({} + {length_bytes} > {} bytes)",
                self.site_of(self.threads[thread].rank, site),
                destination.offset_bytes,
                destination.region_length_bytes
            ),
        ))
    }

    /// Entry `index` of the region-descriptor table at `table`, as `thread` sees it.
    pub(super) fn region_descriptor(
        &self,
        thread: usize,
        table: u64,
        index: u64,
    ) -> Result<RemoteRegionDescriptor, SimulationError> {
        let rank = self.threads[thread].rank;
        let bytes = self.load(
            thread,
            rank,
            table + index * REGION_DESCRIPTOR_BYTES,
            REGION_DESCRIPTOR_BYTES,
        )?;
        Ok(RemoteRegionDescriptor::from_bytes(
            &bytes.try_into().expect("32 bytes"),
        ))
    }
}
