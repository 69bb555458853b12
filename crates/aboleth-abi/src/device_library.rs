//! The tier-1 device library's argument layouts: what a CUDA kernel written against
//! `aboleth/device.cuh` receives from the host and passes to every library call.
//!
//! - [`DeviceContext`]: the endpoint handle table of this rank (one [`crate::EndpointHandle`]
//!   per rank, this rank's own included, as `World.exchange_regions` builds it), this rank and
//!   the world's size. Waits find the wait-failure log through this rank's own handle.
//! - [`RemoteRegion`]: a region on every peer (its per-peer [`crate::RemoteRegionDescriptor`]
//!   table, as `table.regions(name)` holds it) and a byte offset into it.
//! - The local side of a put is [`crate::LocalRegionDescriptor`] (C++ `aboleth::LocalRegion`):
//!   the source address and its key.
//!
//! The C++ declarations of these structs (and of the descriptors they point at) are written
//! from the layouts here by [`crate::c_declarations`]; nothing else states their offsets. This
//! module does not build the library (aboleth-codegen's `device_library` does).

use crate::wire::wire_layout;

/// What every tier-1 call takes first (16 B, passed by value).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceContext {
    /// Device address of this rank's endpoint handle table (`world_size` handles, by rank).
    pub endpoint_handles_address: u64,
    /// This rank.
    pub rank: u32,
    /// Number of ranks.
    pub world_size: u32,
}
wire_layout!(DeviceContext, 16, { endpoint_handles_address: u64 = 0, rank: u32 = 8, world_size: u32 = 12 });

/// A place in a region that exists on every rank (16 B, passed by value): the region's
/// per-peer descriptor table and a byte offset into the region.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteRegion {
    /// Device address of the region's descriptor table (`world_size` descriptors, by rank).
    pub descriptors_address: u64,
    /// Offset in the region, in bytes.
    pub offset_bytes: u64,
}
wire_layout!(RemoteRegion, 16, { descriptors_address: u64 = 0, offset_bytes: u64 = 8 });

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layouts_round_trip_little_endian() {
        let context = DeviceContext {
            endpoint_handles_address: 0x1122_3344_5566_7788,
            rank: 3,
            world_size: 8,
        };
        let bytes = context.to_bytes();
        assert_eq!(&bytes[..8], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(&bytes[8..12], &3u32.to_le_bytes());
        assert_eq!(DeviceContext::from_bytes(&bytes), context);
        let region = RemoteRegion {
            descriptors_address: 0xdead_beef_0000,
            offset_bytes: 256,
        };
        assert_eq!(RemoteRegion::from_bytes(&region.to_bytes()), region);
        assert_eq!(DeviceContext::FIELDS.len(), 3);
        assert_eq!(RemoteRegion::FIELDS[1].offset_bytes, 8);
    }
}
