//! Memory region descriptors as kernels read them: one [`RemoteRegionDescriptor`] per peer per
//! region (a region's "regions tensor" is `[RemoteRegionDescriptor; world_size]`, indexed by
//! rank) and one [`LocalRegionDescriptor`] per local region.
//!
//! Keys are host values (little-endian); the mlx5 lowering byte-swaps them when it writes a WQE.
//! This module does not register memory or exchange descriptors; it only fixes their layout and
//! checks bounds.

use crate::transport::{Transport, TransportCodeError};
use crate::wire::wire_layout;

/// Where a region lives on one peer (32 B).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteRegionDescriptor {
    /// The peer's address of the region start: an NVLink-mapped pointer for p2p, the remote
    /// virtual address for RDMA.
    pub base_address: u64,
    /// Region length.
    pub length_bytes: u64,
    /// Remote key (RDMA); 0 for p2p.
    pub rkey: u32,
    /// The rank this descriptor points into.
    pub peer_rank: u32,
    /// [`Transport`] in the low 16 bits (the transport that reaches this peer), region flags
    /// above ([`REGION_FLAG_PACKET_SLOTS`]).
    pub transport: u32,
    /// The region's index in the exchanged table: what proxy ring entries name
    /// (`destination_region_index`, `signal_region_index`).
    pub region_index: u32,
}
wire_layout!(RemoteRegionDescriptor, 32, {
    base_address: u64 = 0, length_bytes: u64 = 8, rkey: u32 = 16, peer_rank: u32 = 20,
    transport: u32 = 24, region_index: u32 = 28,
});

/// A local region (16 B).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalRegionDescriptor {
    /// Local address of the region start.
    pub address: u64,
    /// Local key (RDMA); 0 otherwise.
    pub lkey: u32,
    /// Zero.
    pub reserved: u32,
}
wire_layout!(LocalRegionDescriptor, 16, { address: u64 = 0, lkey: u32 = 8, reserved: u32 = 12 });

/// The bits of [`RemoteRegionDescriptor::transport`] that hold the [`Transport`].
pub const TRANSPORT_KIND_MASK: u32 = 0xffff;
/// Region flag: packet staging slots follow the region's bytes
/// ([`crate::packet::staging_bytes`]), so packet signals may name flags in it. Generated code
/// checks it before it stores or reads a slot.
pub const REGION_FLAG_PACKET_SLOTS: u32 = 1 << 16;

impl RemoteRegionDescriptor {
    /// The transport field, decoded (region flags ignored).
    pub fn decode_transport(&self) -> Result<Transport, TransportCodeError> {
        Transport::from_code(self.transport & TRANSPORT_KIND_MASK)
    }

    /// Whether packet staging slots follow the region ([`REGION_FLAG_PACKET_SLOTS`]).
    pub fn has_packet_slots(&self) -> bool {
        self.transport & REGION_FLAG_PACKET_SLOTS != 0
    }

    /// Whether `[offset_bytes, offset_bytes + length_bytes)` lies inside the region (no overflow).
    pub fn contains(&self, offset_bytes: u64, length_bytes: u64) -> bool {
        offset_bytes
            .checked_add(length_bytes)
            .is_some_and(|end| end <= self.length_bytes)
    }
}

/// The bytes of a regions tensor: the descriptors in rank order.
pub fn encode_region_table(descriptors: &[RemoteRegionDescriptor]) -> Vec<u8> {
    descriptors
        .iter()
        .flat_map(|descriptor| descriptor.to_bytes())
        .collect()
}

/// Why bytes are not a regions tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegionDecodeError {
    /// The length is not a whole number of 32-byte descriptors.
    #[error("region table of {length_bytes} B is not a multiple of 32 B")]
    TableLengthNotMultiple {
        /// Bytes given.
        length_bytes: usize,
    },
}

/// Reads a regions tensor back.
pub fn decode_region_table(bytes: &[u8]) -> Result<Vec<RemoteRegionDescriptor>, RegionDecodeError> {
    let chunks = bytes.chunks_exact(RemoteRegionDescriptor::SIZE_BYTES);
    if !chunks.remainder().is_empty() {
        return Err(RegionDecodeError::TableLengthNotMultiple {
            length_bytes: bytes.len(),
        });
    }
    Ok(chunks
        .map(|chunk| RemoteRegionDescriptor::from_bytes(chunk.try_into().expect("32 B")))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_and_tables() {
        let region = RemoteRegionDescriptor {
            length_bytes: 100,
            transport: 3,
            ..Default::default()
        };
        assert!(region.contains(0, 100) && region.contains(100, 0));
        assert!(!region.contains(1, 100) && !region.contains(u64::MAX, 2));
        assert_eq!(region.decode_transport(), Ok(Transport::P2p));
        let table = [
            region,
            RemoteRegionDescriptor {
                peer_rank: 1,
                ..region
            },
        ];
        assert_eq!(
            decode_region_table(&encode_region_table(&table)).unwrap(),
            table
        );
        assert_eq!(
            decode_region_table(&[0; 33]),
            Err(RegionDecodeError::TableLengthNotMultiple { length_bytes: 33 })
        );
    }
}
