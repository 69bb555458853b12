//! The host-proxy command ring: a [`ProxyRingHeader`] followed by `capacity_entries` 64-byte
//! [`ProxyRingEntry`] slots, in host-pinned memory. GPU threads are the producers, one host
//! thread is the consumer.
//!
//! Protocol (the layouts here serve it; the code that runs it lives in the runtime and codegen):
//! a producer takes tickets with an atomic add on `producer_reservation_counter` (a plain
//! increment when one program owns the ring), waits until `ticket < consumer_head +
//! capacity_entries` (its slot is free), and writes every field of slot
//! `slot_index(ticket, capacity_entries)`, `sequence = ticket + 1` last. Entries are published in
//! batches: after its last entry a producer stores `producer_head = end` with release ordering
//! (the proxy's doorbell), so one release covers the whole batch. On a shared ring producers
//! publish in ticket order: each first waits until `producer_ready_counter == base` and advances
//! it to `end` after its entries are visible, then raises `producer_head` with an atomic max. The
//! consumer, expecting ticket `t`, treats the slot as full once `producer_head > t` and
//! `sequence == t + 1` (acquire), executes it and advances `consumer_head`; it advances
//! `completion_counter` once the command's effects are complete (puts landed). A zeroed ring is
//! therefore empty. Fields are host-native little-endian. This module does no synchronisation.
//!
//! What a decoded command asks for is resolved here once for both executors (the runtime's
//! proxy thread and the simulator's proxy engine): [`ProxyOperation::parts`] and the
//! [`ProxyRegions`] trait turn its region references into addresses, checked against the
//! exchanged region table; each executor only performs the copy and the signal.

use crate::wire::wire_layout;

/// Opcode of a proxy command.
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProxyOpcode {
    /// Nothing to do (still consumes a ticket).
    Nop = 0,
    /// Copy `length_bytes` from the source to the destination region.
    Put = 1,
    /// Update the signal word.
    Signal = 2,
    /// Put, then the signal, ordered after the put.
    PutSignal = 3,
    /// No data: a completion fence over every earlier command of this ring.
    Drain = 4,
}

/// `flags` bit: the producer wants `completion_counter` to cover this command.
pub const PROXY_FLAG_COMPLETION_REQUESTED: u16 = 1 << 0;
/// `flags` bit: the signal is an atomic ADD (clear: SET).
pub const PROXY_FLAG_SIGNAL_ADD: u16 = 1 << 1;
/// Every defined `flags` bit.
pub const PROXY_FLAGS_ALL: u16 = PROXY_FLAG_COMPLETION_REQUESTED | PROXY_FLAG_SIGNAL_ADD;

/// One ring slot (64 B, one cache line). `opcode` and `flags` are u16 so that
/// `signal_offset_bytes` fits in the line.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyRingEntry {
    /// `ticket + 1` once the slot is filled; written last (a plain store: the batch's release
    /// store of `producer_head` orders it).
    pub sequence: u64,
    /// [`ProxyOpcode`] as u16.
    pub opcode: u16,
    /// `PROXY_FLAG_*` bits.
    pub flags: u16,
    /// Destination rank.
    pub peer_rank: u32,
    /// lkey of the source (used on the ibverbs path; 0 for the copy engine).
    pub source_key: u32,
    /// Index of the destination region in the exchanged region table.
    pub destination_region_index: u32,
    /// Local (sending rank's) source address.
    pub source_address: u64,
    /// Index of the signal's region in the exchanged region table.
    pub signal_region_index: u32,
    /// Offset of the 8-byte signal word in its region.
    pub signal_offset_bytes: u32,
    /// Offset of the destination in its region.
    pub destination_offset_bytes: u64,
    /// Bytes to copy.
    pub length_bytes: u64,
    /// Value set or added.
    pub signal_value: u64,
}
wire_layout!(ProxyRingEntry, 64, {
    sequence: u64 = 0, opcode: u16 = 8, flags: u16 = 10, peer_rank: u32 = 12, source_key: u32 = 16,
    destination_region_index: u32 = 20, source_address: u64 = 24, signal_region_index: u32 = 32,
    signal_offset_bytes: u32 = 36, destination_offset_bytes: u64 = 40, length_bytes: u64 = 48,
    signal_value: u64 = 56,
});

/// The ring header: each counter alone on its 64-byte line so producers and the consumer do not
/// false-share; entries start at [`ProxyRingHeader::ENTRIES_OFFSET_BYTES`].
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProxyRingHeader {
    /// Next ticket to hand out; GPU producers `atomicAdd` it.
    pub producer_reservation_counter: u64,
    reserved_0: [u8; 56],
    /// Next ticket the consumer will read; slots below it may be reused.
    pub consumer_head: u64,
    reserved_1: [u8; 56],
    /// Number of leading tickets whose effects are complete (drain waits on it).
    pub completion_counter: u64,
    reserved_2: [u8; 56],
    /// Number of slots, a power of two.
    pub capacity_entries: u32,
    reserved_3: u32,
    /// Shared rings: tickets below it have been published in order (producers only).
    pub producer_ready_counter: u64,
    /// Tickets below it are published to the consumer (release-stored by producers).
    pub producer_head: u64,
    reserved_4: [u8; 40],
}
wire_layout!(ProxyRingHeader, 256, {
    producer_reservation_counter: u64 = 0, reserved_0: [u8; 56] = 8, consumer_head: u64 = 64,
    reserved_1: [u8; 56] = 72, completion_counter: u64 = 128, reserved_2: [u8; 56] = 136,
    capacity_entries: u32 = 192, reserved_3: u32 = 196, producer_ready_counter: u64 = 200,
    producer_head: u64 = 208, reserved_4: [u8; 40] = 216,
});

const _: () =
    assert!(ProxyRingHeader::ENTRIES_OFFSET_BYTES == core::mem::size_of::<ProxyRingHeader>());

impl ProxyRingHeader {
    /// Offset of entry 0 from the start of the header.
    pub const ENTRIES_OFFSET_BYTES: usize = 256;
    /// Offset of `producer_reservation_counter`.
    pub const PRODUCER_RESERVATION_COUNTER_OFFSET_BYTES: u64 =
        core::mem::offset_of!(Self, producer_reservation_counter) as u64;
    /// Offset of `consumer_head`.
    pub const CONSUMER_HEAD_OFFSET_BYTES: u64 = core::mem::offset_of!(Self, consumer_head) as u64;
    /// Offset of `completion_counter`.
    pub const COMPLETION_COUNTER_OFFSET_BYTES: u64 =
        core::mem::offset_of!(Self, completion_counter) as u64;
    /// Offset of `producer_ready_counter`.
    pub const PRODUCER_READY_COUNTER_OFFSET_BYTES: u64 =
        core::mem::offset_of!(Self, producer_ready_counter) as u64;
    /// Offset of `producer_head`.
    pub const PRODUCER_HEAD_OFFSET_BYTES: u64 = core::mem::offset_of!(Self, producer_head) as u64;

    /// A fresh header (all counters zero) for a ring of `capacity_entries` slots.
    pub fn new(capacity_entries: u32) -> Result<Self, ProxyDecodeError> {
        validate_capacity_entries(capacity_entries)?;
        let mut header = Self::from_bytes(&[0u8; 256]);
        header.capacity_entries = capacity_entries;
        Ok(header)
    }

    /// Bytes of header plus entries.
    pub fn ring_total_bytes(&self) -> usize {
        Self::ENTRIES_OFFSET_BYTES + self.capacity_entries as usize * ProxyRingEntry::SIZE_BYTES
    }
}

/// Checks that a capacity is a non-zero power of two (slot indices are masks).
pub fn validate_capacity_entries(capacity_entries: u32) -> Result<(), ProxyDecodeError> {
    if capacity_entries.is_power_of_two() {
        Ok(())
    } else {
        Err(ProxyDecodeError::CapacityNotPowerOfTwo { capacity_entries })
    }
}

/// The slot a ticket lands in: `ticket & (capacity - 1)`. `capacity_entries` must be a power of
/// two (see [`validate_capacity_entries`]).
pub fn slot_index(ticket: u64, capacity_entries: u32) -> usize {
    debug_assert!(capacity_entries.is_power_of_two());
    (ticket & u64::from(capacity_entries - 1)) as usize
}

/// How a signal updates its word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignalOperation {
    /// Store the value.
    Set,
    /// Atomically add the value.
    Add,
}

/// The data part of a put.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyPut {
    /// Source address on this rank.
    pub source_address: u64,
    /// Source lkey.
    pub source_key: u32,
    /// Destination region index.
    pub destination_region_index: u32,
    /// Destination offset in the region.
    pub destination_offset_bytes: u64,
    /// Bytes to copy.
    pub length_bytes: u64,
}

/// The signal part of a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProxySignal {
    /// Signal region index.
    pub region_index: u32,
    /// Offset of the signal word.
    pub offset_bytes: u32,
    /// Operand.
    pub value: u64,
    /// SET or ADD.
    pub operation: SignalOperation,
}

/// What a command asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyOperation {
    /// No operation.
    Nop,
    /// A put.
    Put(ProxyPut),
    /// A signal.
    Signal(ProxySignal),
    /// A put followed by a signal.
    PutSignal(ProxyPut, ProxySignal),
    /// A completion fence.
    Drain,
}

impl ProxyOperation {
    /// The put and the signal the operation asks for, in the order they take effect (a
    /// `PutSignal` is its put, then its signal; `Nop` and `Drain` are neither).
    pub fn parts(&self) -> (Option<&ProxyPut>, Option<&ProxySignal>) {
        match self {
            ProxyOperation::Nop | ProxyOperation::Drain => (None, None),
            ProxyOperation::Put(put) => (Some(put), None),
            ProxyOperation::Signal(signal) => (None, Some(signal)),
            ProxyOperation::PutSignal(put, signal) => (Some(put), Some(signal)),
        }
    }
}

/// Bytes of the word a proxy signal updates.
pub const SIGNAL_WORD_BYTES: u64 = 8;

/// The exchanged region table as a proxy executor holds it (the runtime's proxy thread and the
/// simulator's proxy engine): the one place where a command's region references become the
/// addresses its put and signal act on. An implementation says where a descriptor is and
/// words each failure in its own error type; the resolution itself (bounds, alignment, the
/// ring's peer) is the provided methods, written once.
pub trait ProxyRegions {
    /// Why a command cannot be executed.
    type Error;

    /// The descriptor of region `region_index` on `peer_rank`, or why there is none; `what`
    /// names the command's field (`"put destination"` or `"signal"`).
    fn descriptor(
        &self,
        what: &'static str,
        region_index: u32,
        peer_rank: u32,
    ) -> Result<&crate::RemoteRegionDescriptor, Self::Error>;

    /// `[offset_bytes, offset_bytes + length_bytes)` is not inside region `region_index` of
    /// `region_length_bytes` bytes.
    fn out_of_bounds(
        &self,
        what: &'static str,
        region_index: u32,
        offset_bytes: u64,
        length_bytes: u64,
        region_length_bytes: u64,
    ) -> Self::Error;

    /// The signal word at `address` is not 8-byte aligned.
    fn misaligned_signal(&self, address: u64) -> Self::Error;

    /// The entry names `entry_peer_rank` but sits in the ring to `ring_peer_rank`.
    fn wrong_peer(&self, ring_peer_rank: u32, entry_peer_rank: u32) -> Self::Error;

    /// The address on `peer_rank` of `[offset_bytes, offset_bytes + length_bytes)` of region
    /// `region_index`, bounds-checked.
    fn resolve(
        &self,
        what: &'static str,
        region_index: u32,
        peer_rank: u32,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Result<u64, Self::Error> {
        let descriptor = self.descriptor(what, region_index, peer_rank)?;
        if !descriptor.contains(offset_bytes, length_bytes) {
            return Err(self.out_of_bounds(
                what,
                region_index,
                offset_bytes,
                length_bytes,
                descriptor.length_bytes,
            ));
        }
        Ok(descriptor.base_address + offset_bytes)
    }

    /// An error unless `command` is for the ring's peer `ring_peer_rank`.
    fn check_peer(&self, command: &ProxyCommand, ring_peer_rank: u32) -> Result<(), Self::Error> {
        if command.peer_rank == ring_peer_rank {
            Ok(())
        } else {
            Err(self.wrong_peer(ring_peer_rank, command.peer_rank))
        }
    }

    /// Where `put` writes on `peer_rank`.
    fn put_destination(&self, put: &ProxyPut, peer_rank: u32) -> Result<u64, Self::Error> {
        self.resolve(
            "put destination",
            put.destination_region_index,
            peer_rank,
            put.destination_offset_bytes,
            put.length_bytes,
        )
    }

    /// The (8-byte aligned) word `signal` updates on `peer_rank`.
    fn signal_address(&self, signal: &ProxySignal, peer_rank: u32) -> Result<u64, Self::Error> {
        let address = self.resolve(
            "signal",
            signal.region_index,
            peer_rank,
            u64::from(signal.offset_bytes),
            SIGNAL_WORD_BYTES,
        )?;
        if !address.is_multiple_of(SIGNAL_WORD_BYTES) {
            return Err(self.misaligned_signal(address));
        }
        Ok(address)
    }
}

/// A command as the consumer sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProxyCommand {
    /// The producer's ticket.
    pub ticket: u64,
    /// Destination rank.
    pub peer_rank: u32,
    /// The producer wants a completion for it.
    pub completion_requested: bool,
    /// The operation.
    pub operation: ProxyOperation,
}

/// Why a ring slot or header is not a valid command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProxyDecodeError {
    /// `sequence` is zero: the slot was never filled.
    #[error("proxy ring slot is empty (sequence 0)")]
    EmptySlot,
    /// Unknown opcode.
    #[error("unknown proxy opcode {opcode}")]
    UnknownOpcode {
        /// The value found.
        opcode: u16,
    },
    /// Undefined flag bits, or SIGNAL_ADD on a command without a signal.
    #[error("proxy flags {flags:#06x} are invalid for opcode {opcode}")]
    InvalidFlags {
        /// The value found.
        flags: u16,
        /// The opcode.
        opcode: u16,
    },
    /// Capacity is zero or not a power of two.
    #[error("proxy ring capacity {capacity_entries} is not a power of two")]
    CapacityNotPowerOfTwo {
        /// The value found.
        capacity_entries: u32,
    },
}

impl ProxyOpcode {
    /// Decodes the opcode field.
    pub fn from_u16(opcode: u16) -> Result<Self, ProxyDecodeError> {
        Ok(match opcode {
            0 => Self::Nop,
            1 => Self::Put,
            2 => Self::Signal,
            3 => Self::PutSignal,
            4 => Self::Drain,
            _ => return Err(ProxyDecodeError::UnknownOpcode { opcode }),
        })
    }
}

impl ProxyCommand {
    /// The slot contents for this command; unused fields are zero.
    pub fn encode(&self) -> ProxyRingEntry {
        let mut entry = ProxyRingEntry {
            sequence: self.ticket.wrapping_add(1),
            peer_rank: self.peer_rank,
            ..ProxyRingEntry::default()
        };
        if self.completion_requested {
            entry.flags |= PROXY_FLAG_COMPLETION_REQUESTED;
        }
        let (opcode, put, signal) = match self.operation {
            ProxyOperation::Nop => (ProxyOpcode::Nop, None, None),
            ProxyOperation::Put(put) => (ProxyOpcode::Put, Some(put), None),
            ProxyOperation::Signal(signal) => (ProxyOpcode::Signal, None, Some(signal)),
            ProxyOperation::PutSignal(put, signal) => {
                (ProxyOpcode::PutSignal, Some(put), Some(signal))
            }
            ProxyOperation::Drain => (ProxyOpcode::Drain, None, None),
        };
        entry.opcode = opcode as u16;
        if let Some(put) = put {
            entry.source_address = put.source_address;
            entry.source_key = put.source_key;
            entry.destination_region_index = put.destination_region_index;
            entry.destination_offset_bytes = put.destination_offset_bytes;
            entry.length_bytes = put.length_bytes;
        }
        if let Some(signal) = signal {
            entry.signal_region_index = signal.region_index;
            entry.signal_offset_bytes = signal.offset_bytes;
            entry.signal_value = signal.value;
            if signal.operation == SignalOperation::Add {
                entry.flags |= PROXY_FLAG_SIGNAL_ADD;
            }
        }
        entry
    }
}

impl ProxyRingEntry {
    /// Whether the slot holds the command for `ticket` (the consumer's readiness test).
    pub fn is_filled_for_ticket(&self, ticket: u64) -> bool {
        self.sequence == ticket.wrapping_add(1)
    }

    /// Decodes the slot into a command, validating opcode and flags.
    pub fn decode(&self) -> Result<ProxyCommand, ProxyDecodeError> {
        let ticket = self
            .sequence
            .checked_sub(1)
            .ok_or(ProxyDecodeError::EmptySlot)?;
        let opcode = ProxyOpcode::from_u16(self.opcode)?;
        let has_signal = matches!(opcode, ProxyOpcode::Signal | ProxyOpcode::PutSignal);
        let allowed = if has_signal {
            PROXY_FLAGS_ALL
        } else {
            PROXY_FLAG_COMPLETION_REQUESTED
        };
        if self.flags & !allowed != 0 {
            return Err(ProxyDecodeError::InvalidFlags {
                flags: self.flags,
                opcode: self.opcode,
            });
        }
        let put = ProxyPut {
            source_address: self.source_address,
            source_key: self.source_key,
            destination_region_index: self.destination_region_index,
            destination_offset_bytes: self.destination_offset_bytes,
            length_bytes: self.length_bytes,
        };
        let signal = ProxySignal {
            region_index: self.signal_region_index,
            offset_bytes: self.signal_offset_bytes,
            value: self.signal_value,
            operation: if self.flags & PROXY_FLAG_SIGNAL_ADD != 0 {
                SignalOperation::Add
            } else {
                SignalOperation::Set
            },
        };
        let operation = match opcode {
            ProxyOpcode::Nop => ProxyOperation::Nop,
            ProxyOpcode::Put => ProxyOperation::Put(put),
            ProxyOpcode::Signal => ProxyOperation::Signal(signal),
            ProxyOpcode::PutSignal => ProxyOperation::PutSignal(put, signal),
            ProxyOpcode::Drain => ProxyOperation::Drain,
        };
        Ok(ProxyCommand {
            ticket,
            peer_rank: self.peer_rank,
            completion_requested: self.flags & PROXY_FLAG_COMPLETION_REQUESTED != 0,
            operation,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One region of 64 bytes at 0x1000 on every rank; errors as strings.
    struct OneRegion(crate::RemoteRegionDescriptor);

    impl ProxyRegions for OneRegion {
        type Error = String;
        fn descriptor(
            &self,
            what: &'static str,
            region_index: u32,
            _peer_rank: u32,
        ) -> Result<&crate::RemoteRegionDescriptor, String> {
            (region_index == 0)
                .then_some(&self.0)
                .ok_or(format!("{what}: no region {region_index}"))
        }
        fn out_of_bounds(
            &self,
            what: &'static str,
            _: u32,
            offset: u64,
            length: u64,
            _: u64,
        ) -> String {
            format!("{what}: {length} at {offset}")
        }
        fn misaligned_signal(&self, address: u64) -> String {
            format!("misaligned {address:#x}")
        }
        fn wrong_peer(&self, ring: u32, entry: u32) -> String {
            format!("entry {entry} in ring {ring}")
        }
    }

    #[test]
    fn a_command_resolves_to_its_put_and_signal_addresses_once_for_both_executors() {
        let regions = OneRegion(crate::RemoteRegionDescriptor {
            base_address: 0x1000,
            length_bytes: 64,
            ..Default::default()
        });
        let put = ProxyPut {
            destination_offset_bytes: 8,
            length_bytes: 56,
            ..ProxyPut::default()
        };
        let signal = ProxySignal {
            region_index: 0,
            offset_bytes: 56,
            value: 1,
            operation: SignalOperation::Add,
        };
        let command = ProxyCommand {
            ticket: 0,
            peer_rank: 1,
            completion_requested: false,
            operation: ProxyOperation::PutSignal(put, signal),
        };
        assert_eq!(command.operation.parts(), (Some(&put), Some(&signal)));
        assert_eq!(ProxyOperation::Drain.parts(), (None, None));
        assert_eq!(regions.check_peer(&command, 1), Ok(()));
        assert_eq!(
            regions.check_peer(&command, 2),
            Err("entry 1 in ring 2".into())
        );
        assert_eq!(regions.put_destination(&put, 1), Ok(0x1008));
        assert_eq!(regions.signal_address(&signal, 1), Ok(0x1038));
        let too_long = ProxyPut {
            length_bytes: 57,
            ..put
        };
        assert_eq!(
            regions.put_destination(&too_long, 1),
            Err("put destination: 57 at 8".into())
        );
        let misaligned = ProxySignal {
            offset_bytes: 4,
            ..signal
        };
        assert_eq!(
            regions.signal_address(&misaligned, 1),
            Err("misaligned 0x1004".into())
        );
        let elsewhere = ProxySignal {
            region_index: 3,
            ..signal
        };
        assert_eq!(
            regions.signal_address(&elsewhere, 1),
            Err("signal: no region 3".into())
        );
    }

    #[test]
    fn ring_geometry() {
        let header = ProxyRingHeader::new(1024).unwrap();
        assert_eq!(header.ring_total_bytes(), 256 + 64 * 1024);
        assert_eq!(header.to_bytes()[192..196], 1024u32.to_le_bytes());
        assert_eq!(slot_index(1024 + 5, 1024), 5);
        assert_eq!(
            ProxyRingHeader::new(1000),
            Err(ProxyDecodeError::CapacityNotPowerOfTwo {
                capacity_entries: 1000
            })
        );
        assert!(ProxyRingHeader::new(0).is_err());
    }

    #[test]
    fn bad_slots_are_rejected() {
        assert_eq!(
            ProxyRingEntry::default().decode(),
            Err(ProxyDecodeError::EmptySlot)
        );
        let entry = ProxyRingEntry {
            sequence: 1,
            opcode: 9,
            ..Default::default()
        };
        assert_eq!(
            entry.decode(),
            Err(ProxyDecodeError::UnknownOpcode { opcode: 9 })
        );
        let entry = ProxyRingEntry {
            sequence: 1,
            opcode: ProxyOpcode::Put as u16,
            flags: PROXY_FLAG_SIGNAL_ADD,
            ..Default::default()
        };
        assert_eq!(
            entry.decode(),
            Err(ProxyDecodeError::InvalidFlags {
                flags: 2,
                opcode: 1
            })
        );
        assert!(!entry.is_filled_for_ticket(1));
        assert!(entry.is_filled_for_ticket(0));
    }
}
