//! Flag-in-data packets (NVLink): the staging slots a `p2p.put_packets` writes and a packet
//! wait unpacks, defined once for the lowering, the simulator and the code generator.
//!
//! A packet is NCCL's LL16 unit: 16 bytes carrying 8 bytes of payload as two 4-byte halves, each
//! followed by the 32-bit flag (the low half of the signal's value). The sender writes every
//! packet as two relaxed 8-byte stores and nothing else: no barrier, no fence, no flag store.
//! The receiver knows a packet has landed when both of its flag words equal the flag, because an
//! aligned 8-byte store is single-copy atomic (16 bytes are not guaranteed to be, hence two
//! flags).
//!
//! Each flag of a flag region that packet signals target owns one slot in a staging area that
//! follows the region (at [`staging_offset_bytes`]): two header packets (where the payload goes
//! in the destination region, how long it is, and the high half of the value) and up to
//! [`PACKET_PUT_BYTES_LIMIT`] / 8 payload packets. This module holds the layout and the pure
//! encode/decode functions; it does not poll, copy or allocate anything.

use crate::wire::wire_layout;

/// One LL16 packet: `{payload_low, flag, payload_high, flag}` (16 B).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Packet {
    /// Payload bytes 0..4.
    pub payload_low: u32,
    /// The flag, guarding `payload_low`.
    pub flag_first: u32,
    /// Payload bytes 4..8.
    pub payload_high: u32,
    /// The flag again, guarding `payload_high`.
    pub flag_second: u32,
}
wire_layout!(Packet, 16, {
    payload_low: u32 = 0, flag_first: u32 = 4, payload_high: u32 = 8, flag_second: u32 = 12,
});

/// Payload bytes per packet.
pub const PACKET_PAYLOAD_BYTES: u64 = 8;
/// Header packets at the start of every slot.
pub const HEADER_PACKETS: u64 = 2;
/// Largest put that may travel as packets: a slot holds this many payload bytes. LL doubles the
/// bytes on the wire, so it only pays for small messages (NCCL switches protocol near this size).
pub const PACKET_PUT_BYTES_LIMIT: u64 = 512;
/// Bytes of one flag's slot.
pub const SLOT_BYTES: u64 =
    (HEADER_PACKETS + PACKET_PUT_BYTES_LIMIT / PACKET_PAYLOAD_BYTES) * Packet::SIZE_BYTES as u64;
/// Bytes of one flag (flags are 8-byte words).
pub const FLAG_BYTES: u64 = 8;

const _: () = assert!(SLOT_BYTES == 1056);
const _: () = assert!(SLOT_BYTES.is_multiple_of(16));

/// Where the staging area starts, from the flag region's start: the region's length rounded up
/// to a packet.
pub const fn staging_offset_bytes(flag_region_length_bytes: u64) -> u64 {
    flag_region_length_bytes.div_ceil(Packet::SIZE_BYTES as u64) * Packet::SIZE_BYTES as u64
}

/// Bytes allocated after the flag region's own bytes for its staging area (one slot per flag),
/// counted from the region's end (so the padding to [`staging_offset_bytes`] is included).
pub const fn staging_bytes(flag_region_length_bytes: u64) -> u64 {
    staging_offset_bytes(flag_region_length_bytes) - flag_region_length_bytes
        + flag_region_length_bytes / FLAG_BYTES * SLOT_BYTES
}

/// Offset of flag `flag_index`'s slot from the flag region's start.
pub const fn slot_offset_bytes(flag_region_length_bytes: u64, flag_index: u64) -> u64 {
    staging_offset_bytes(flag_region_length_bytes) + flag_index * SLOT_BYTES
}

/// The flag every packet of a transfer carries for signal value `value`: its low 32 bits.
pub const fn packet_flag(value: i64) -> u32 {
    value as u32
}

/// What a slot's header says: the transfer the packets after it carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotHeader {
    /// The flag all of the transfer's packets carry.
    pub flag: u32,
    /// The signal's full value (what the receiver's flag is set to).
    pub value: i64,
    /// Where the payload goes, from the start of the destination region.
    pub destination_offset_bytes: u32,
    /// Payload length (a multiple of [`PACKET_PAYLOAD_BYTES`], at most the limit).
    pub payload_bytes: u32,
}

impl Packet {
    /// A packet carrying `payload` (8 bytes, little-endian halves) under `flag`.
    pub fn new(payload: [u8; 8], flag: u32) -> Packet {
        Packet {
            payload_low: u32::from_le_bytes(payload[..4].try_into().expect("4 bytes")),
            flag_first: flag,
            payload_high: u32::from_le_bytes(payload[4..].try_into().expect("4 bytes")),
            flag_second: flag,
        }
    }

    /// Whether both halves have landed for `flag`.
    pub fn carries(&self, flag: u32) -> bool {
        self.flag_first == flag && self.flag_second == flag
    }

    /// The 8 payload bytes.
    pub fn payload(&self) -> [u8; 8] {
        let mut bytes = [0; 8];
        bytes[..4].copy_from_slice(&self.payload_low.to_le_bytes());
        bytes[4..].copy_from_slice(&self.payload_high.to_le_bytes());
        bytes
    }
}

/// Why a transfer cannot travel as packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PacketEncodeError {
    /// The payload is not a whole number of packets or is over the slot's capacity.
    #[error(
        "a packet put carries a multiple of {PACKET_PAYLOAD_BYTES} bytes up to {PACKET_PUT_BYTES_LIMIT}, not {payload_bytes}"
    )]
    PayloadLength {
        /// Bytes given.
        payload_bytes: u64,
    },
    /// The destination offset does not fit the header's 32 bits.
    #[error("a packet put's destination offset {offset_bytes} is past 4 GiB")]
    DestinationOffset {
        /// Offset given.
        offset_bytes: u64,
    },
}

/// What a receiver stores over a slot's first header packet once it has unpacked the slot, so
/// the next wait does not unpack it again (a transfer of the same value would look alike).
pub const CONSUMED_HEADER: Packet = Packet {
    payload_low: 0,
    flag_first: 0,
    payload_high: 0,
    flag_second: 0,
};

/// The packets of one slot, header first: what a sender stores for `payload` going to
/// `destination_offset_bytes` in the destination region, published with `value`.
pub fn encode_slot(
    destination_offset_bytes: u64,
    value: i64,
    payload: &[u8],
) -> Result<Vec<Packet>, PacketEncodeError> {
    let payload_bytes = payload.len() as u64;
    if !payload_bytes.is_multiple_of(PACKET_PAYLOAD_BYTES) || payload_bytes > PACKET_PUT_BYTES_LIMIT
    {
        return Err(PacketEncodeError::PayloadLength { payload_bytes });
    }
    let offset = u32::try_from(destination_offset_bytes).map_err(|_| {
        PacketEncodeError::DestinationOffset {
            offset_bytes: destination_offset_bytes,
        }
    })?;
    let flag = packet_flag(value);
    let mut packets = vec![
        Packet {
            payload_low: offset,
            flag_first: flag,
            payload_high: payload_bytes as u32,
            flag_second: flag,
        },
        Packet {
            payload_low: (value >> 32) as u32,
            flag_first: flag,
            payload_high: 0,
            flag_second: flag,
        },
    ];
    packets.extend(
        payload
            .chunks(PACKET_PAYLOAD_BYTES as usize)
            .map(|chunk| Packet::new(chunk.try_into().expect("8 bytes"), flag)),
    );
    Ok(packets)
}

/// The header of a slot from its two header packets, when both have fully landed for one flag
/// and describe a well-formed transfer; `None` while they are torn, and for a slot that is
/// zeroed or consumed (no transfer is empty: the receiver marks a slot consumed by zeroing its
/// first header packet, see [`CONSUMED_HEADER`]).
pub fn decode_header(first: &Packet, second: &Packet) -> Option<SlotHeader> {
    let flag = first.flag_first;
    if !first.carries(flag) || !second.carries(flag) {
        return None;
    }
    let payload_bytes = first.payload_high;
    if payload_bytes == 0
        || u64::from(payload_bytes) % PACKET_PAYLOAD_BYTES != 0
        || u64::from(payload_bytes) > PACKET_PUT_BYTES_LIMIT
    {
        return None;
    }
    Some(SlotHeader {
        flag,
        value: ((u64::from(second.payload_low) << 32) | u64::from(flag)) as i64,
        destination_offset_bytes: first.payload_low,
        payload_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_round_trips_through_its_packets() {
        let payload: Vec<u8> = (0..64).collect();
        let value = (7_i64 << 32) | 5;
        let packets = encode_slot(192, value, &payload).unwrap();
        assert_eq!(packets.len(), 2 + 8);
        let header = decode_header(&packets[0], &packets[1]).unwrap();
        assert_eq!(
            header,
            SlotHeader {
                flag: 5,
                value,
                destination_offset_bytes: 192,
                payload_bytes: 64
            }
        );
        let unpacked: Vec<u8> = packets[2..].iter().flat_map(Packet::payload).collect();
        assert_eq!(unpacked, payload);
        assert!(packets.iter().all(|packet| packet.carries(5)));
    }

    #[test]
    fn torn_or_stale_headers_are_not_read() {
        let packets = encode_slot(0, 9, &[1; 8]).unwrap();
        let mut torn = packets[0];
        torn.flag_second = 8;
        assert_eq!(decode_header(&torn, &packets[1]), None);
        let stale = encode_slot(0, 8, &[1; 8]).unwrap();
        assert_eq!(decode_header(&packets[0], &stale[1]), None);
        // A zeroed (never written) or consumed slot holds no transfer.
        assert_eq!(decode_header(&CONSUMED_HEADER, &packets[1]), None);
        let zero = Packet::default();
        assert_eq!(decode_header(&zero, &zero), None);
    }

    #[test]
    fn bad_transfers_are_refused_with_their_numbers() {
        assert_eq!(
            encode_slot(0, 1, &[0; 12]).unwrap_err().to_string(),
            "a packet put carries a multiple of 8 bytes up to 512, not 12"
        );
        assert!(encode_slot(0, 1, &[0; 520]).is_err());
        assert!(encode_slot(1 << 32, 1, &[0; 8]).is_err());
    }

    #[test]
    fn staging_follows_the_region_one_slot_per_flag() {
        assert_eq!(staging_offset_bytes(24), 32);
        assert_eq!(staging_bytes(24), 8 + 3 * SLOT_BYTES);
        assert_eq!(slot_offset_bytes(24, 2), 32 + 2 * SLOT_BYTES);
        assert_eq!(Packet::new([1, 0, 0, 0, 2, 0, 0, 0], 3).to_bytes()[8], 2);
    }
}
