//! Flag-in-data packets (`aboleth_abi::packet`) in the simulator: `p2p.put_packets` writes
//! its payload as LL16 packets into the flag's staging slot on the peer (relaxed 8-byte
//! stores, each half carrying the flag), and a packet wait polls the slot until a whole
//! transfer has landed, unpacks it into the data region, sets the flag and marks the slot
//! consumed, as the generated code does. A transfer's signal (guarding its own put alone) is
//! delivered when it is unpacked; one never unpacked by the launch's end is reported by
//! `checks.rs`.
//!
//! The wait itself (`gpu.wait_flag` with packet receives) is in `waits.rs`; plain p2p copies
//! and signals are in `p2p.rs`.

use std::rc::Rc;

use aboleth_abi::RemoteRegionDescriptor;
use aboleth_ir::ab::attributes::SignalOperation;

use super::{PacketSlot, PacketTransfer, SignalRecord, SimulationError, Step, World};
use crate::program::{Register, StoreOrder};

impl<'k> World<'k> {
    /// `p2p.put_packets`: the payload as packets into the flag's slot on the peer, relaxed
    /// stores only; the signal (guarding this put alone) is delivered when a wait unpacks it.
    pub(super) fn put_packets(
        &mut self,
        thread: usize,
        site: usize,
        [endpoint, flag, destination, source, bytes, value]: [Register; 6],
    ) -> Result<Step, SimulationError> {
        use aboleth_abi::packet::{FLAG_BYTES, encode_slot, slot_offset_bytes};
        let rank = self.threads[thread].rank;
        let (peer, _) = self.endpoint(thread, endpoint)?;
        let flag = self.remote_pointer(thread, flag)?;
        let destination = self.remote_pointer(thread, destination)?;
        self.check_same_peer(thread, site, peer, flag.peer)?;
        self.check_same_peer(thread, site, peer, destination.peer)?;
        let source = self.integer(thread, source)? as u64;
        let length_bytes = self.integer(thread, bytes)?.max(0) as u64;
        let value = self.integer(thread, value)?;
        let at = self.site_of(rank, site);
        self.check_inside_region(thread, "packet put", site, &destination, length_bytes)?;
        if flag.offset_bytes % FLAG_BYTES != 0
            || flag.offset_bytes + FLAG_BYTES > flag.region_length_bytes
        {
            return Err(self.program_error(
                thread,
                format!(
                    "packet signal at {at} names flag byte {} of a {}-byte region: flags are aligned 8-byte words inside it",
                    flag.offset_bytes, flag.region_length_bytes
                ),
            ));
        }
        if !destination.offset_bytes.is_multiple_of(4) || !source.is_multiple_of(4) {
            return Err(self.program_error(
                thread,
                format!(
                    "packet put at {at} copies from {source:#x} to byte {} of its region: packets carry 4-byte words, so both must be 4-byte aligned",
                    destination.offset_bytes
                ),
            ));
        }
        if aboleth_abi::packet::packet_flag(value) == 0 {
            return Err(self.program_error(
                thread,
                format!(
                    "packet signal at {at} sets value {value}, whose low 32 bits are 0: a zeroed slot carries that flag already, so its packets would look landed; packet signals need values whose low 32 bits are not 0"
                ),
            ));
        }
        self.check_in_user_region(thread, site, "reads", source, length_bytes)?;
        let payload = self.load_copy_source(thread, site, source, length_bytes)?;
        let packets = encode_slot(destination.offset_bytes, value, &payload)
            .map_err(|e| self.program_error(thread, format!("packet put at {at}: {e}")))?;
        let region_start = flag.address - flag.offset_bytes;
        let slot_address = region_start
            + slot_offset_bytes(flag.region_length_bytes, flag.offset_bytes / FLAG_BYTES);
        if let Some(earlier) = self.packet_transfers.get(&(peer, slot_address)) {
            return Err(self.program_error(
                thread,
                format!(
                    "packet signal at {at} (value {value}) overwrites flag {}'s slot on rank {peer} before a wait unpacked the transfer sent at {} (value {}): with packet signals a flag carries one transfer at a time; give each transfer its own flag, or wait for the first before sending the second",
                    self.memory.describe_address(peer, flag.address),
                    self.site_of(earlier.signal.rank, earlier.signal.site),
                    earlier.value
                ),
            ));
        }
        // Each 8-byte half is its own store (single-copy atomic); the two halves of a packet may
        // become visible in either order, which is why each carries the flag.
        for (index, packet) in packets.iter().enumerate() {
            let bytes = packet.to_bytes();
            let address = slot_address + (index * aboleth_abi::packet::Packet::SIZE_BYTES) as u64;
            for (half, half_bytes) in bytes.chunks(8).enumerate() {
                self.store(
                    thread,
                    peer,
                    address + 8 * half as u64,
                    half_bytes,
                    StoreOrder::Relaxed,
                )?;
            }
        }
        let put = self.stored_put_record(thread, site, peer, destination.address, payload);
        let signal = Rc::new(SignalRecord {
            rank,
            program: self.threads[thread].program,
            site,
            flag: (peer, flag.address),
            operation: SignalOperation::Set,
            operand: value,
            guarded: vec![put],
        });
        self.packet_transfers
            .insert((peer, slot_address), PacketTransfer { value, signal });
        self.counts.payload_bytes += length_bytes;
        let wire_bytes = (packets.len() * aboleth_abi::packet::Packet::SIZE_BYTES) as u64;
        let cost = self.options.cost_model.peer_store(wire_bytes).0;
        self.advance_clock(thread, cost);
        Ok(Step::Effect)
    }

    /// The slot of the flag at local `address` when it lies in this rank's entry of `flag_table`
    /// (else the flag is not one packets can target, and the wait only polls it).
    pub(super) fn packet_slot_of(
        &self,
        thread: usize,
        address: u64,
        flag_table: Register,
        data_table: Register,
    ) -> Result<Option<PacketSlot>, SimulationError> {
        use aboleth_abi::packet::{FLAG_BYTES, slot_offset_bytes};
        let rank = self.threads[thread].rank;
        let descriptor = |table: Register| -> Result<RemoteRegionDescriptor, SimulationError> {
            let table = self.integer(thread, table)? as u64;
            self.region_descriptor(thread, table, u64::from(rank))
        };
        let flags = descriptor(flag_table)?;
        let data = descriptor(data_table)?;
        let Some(offset) = address.checked_sub(flags.base_address) else {
            return Ok(None);
        };
        if offset % FLAG_BYTES != 0 || offset + FLAG_BYTES > flags.length_bytes {
            return Ok(None);
        }
        if !flags.has_packet_slots() {
            return Err(self.program_error(
                thread,
                "a packet wait's flag region has no packet slots (REGION_FLAG_PACKET_SLOTS)".into(),
            ));
        }
        Ok(Some(PacketSlot {
            slot_address: flags.base_address
                + slot_offset_bytes(flags.length_bytes, offset / FLAG_BYTES),
            data_base_address: data.base_address,
            data_length_bytes: data.length_bytes,
            check_payload_flags: true,
            payload_bytes_max: aboleth_abi::packet::PACKET_PUT_BYTES_LIMIT,
        }))
    }

    /// The header and payload of `slot` when a whole transfer has landed there: both header
    /// packets and every payload packet carry the header's flag.
    pub(super) fn landed_packets(
        &self,
        thread: usize,
        rank: u32,
        slot: &PacketSlot,
    ) -> Result<Option<(aboleth_abi::packet::SlotHeader, Vec<u8>)>, SimulationError> {
        use aboleth_abi::packet::{HEADER_PACKETS, Packet, decode_header};
        let packet_at = |index: u64| -> Result<Packet, SimulationError> {
            let bytes = self.load(
                thread,
                rank,
                slot.slot_address + index * Packet::SIZE_BYTES as u64,
                Packet::SIZE_BYTES as u64,
            )?;
            Ok(Packet::from_bytes(
                bytes.as_slice().try_into().expect("packet bytes"),
            ))
        };
        let Some(header) = decode_header(&packet_at(0)?, &packet_at(1)?) else {
            return Ok(None);
        };
        // Generated code unrolls the check for the kernel's longest packet put: a longer
        // transfer (another rank's kernel put more) is never unpacked.
        if u64::from(header.payload_bytes) > slot.payload_bytes_max {
            return Ok(None);
        }
        let mut payload = Vec::with_capacity(header.payload_bytes as usize);
        let payload_packets = u64::from(header.payload_bytes) / 8;
        for index in 0..payload_packets {
            let packet = packet_at(HEADER_PACKETS + index)?;
            if slot.check_payload_flags && !packet.carries(header.flag) {
                return Ok(None);
            }
            payload.extend_from_slice(&packet.payload());
        }
        Ok(Some((header, payload)))
    }

    /// Unpacks `slot` when a whole transfer has landed: its payload goes to the data region at
    /// the header's offset, the flag at `flag_address` is set to its value, the slot is marked
    /// consumed, and its signal is delivered (so the wait checks the data is there).
    pub(super) fn unpack_packets(
        &mut self,
        thread: usize,
        site: usize,
        flag_address: u64,
        slot: &PacketSlot,
    ) -> Result<(), SimulationError> {
        use aboleth_abi::packet::CONSUMED_HEADER;
        let rank = self.threads[thread].rank;
        let Some((header, payload)) = self.landed_packets(thread, rank, slot)? else {
            return Ok(());
        };
        let offset = u64::from(header.destination_offset_bytes);
        if offset + payload.len() as u64 > slot.data_length_bytes {
            return Err(self.program_error(
                thread,
                format!(
                    "the wait at {} found a packet transfer for bytes {offset}..{} of a {}-byte data region",
                    self.site_of(rank, site),
                    offset + payload.len() as u64,
                    slot.data_length_bytes
                ),
            ));
        }
        // As the generated code does: thread 0 stores the payload, marks the slot consumed, then
        // releases the flag (ordering both before it for every acquire poll).
        self.store(
            thread,
            rank,
            slot.data_base_address + offset,
            &payload,
            StoreOrder::Relaxed,
        )?;
        self.store(
            thread,
            rank,
            slot.slot_address,
            &CONSUMED_HEADER.to_bytes(),
            StoreOrder::Relaxed,
        )?;
        self.store(
            thread,
            rank,
            flag_address,
            &header.value.to_le_bytes(),
            StoreOrder::Release,
        )?;
        if let Some(transfer) = self.packet_transfers.remove(&(rank, slot.slot_address)) {
            self.landed_puts
                .extend(transfer.signal.guarded.iter().cloned());
            let time = self.threads[thread].clock_nanoseconds;
            self.deliver(rank, flag_address, transfer.signal, time);
        }
        // As the generated code does it: the header, then the payload packets checked in groups
        // of 16 loads issued together, then (past one group) loaded again to copy.
        let cost = &self.options.cost_model;
        let packets = payload.len() as u64 / 8;
        let groups = packets.div_ceil(16);
        let load_rounds = 1 + groups + if groups > 1 { groups } else { 0 };
        let nanoseconds = cost.gpu_system_load_nanoseconds * load_rounds
            + cost.gpu_global_store_nanoseconds * (2 + 2 * packets);
        self.advance_clock(thread, nanoseconds);
        Ok(())
    }
}
