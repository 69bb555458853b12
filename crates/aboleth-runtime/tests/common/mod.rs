//! What the software NIC's tests share: mapping heap words, standing in for host-pinned memory,
//! as the regions of a `MappedNicMemory`.

use aboleth_runtime::soft_nic::{MappedNicMemory, MappedRegion};

/// One region: rank, address, bytes, lkey, rkey, name.
pub type RegionSpec = (u32, u64, u64, Option<u32>, Option<u32>, &'static str);

/// A memory whose region `i` is `specs[i]` backed by `backing[i]` (8-byte aligned words).
///
/// # Safety
/// `backing` must outlive the returned memory and never be resized; agents sharing it (another
/// view made from the same backing) may only touch what the doorbell protocol orders or words
/// accessed whole.
pub unsafe fn map_regions(backing: &mut [Vec<u64>], specs: &[RegionSpec]) -> MappedNicMemory {
    let mut memory = MappedNicMemory::new();
    for (words, &(rank, address, length_bytes, lkey, rkey, name)) in backing.iter_mut().zip(specs) {
        assert!(
            words.len() as u64 * 8 >= length_bytes,
            "{name}: backing too small"
        );
        let region = MappedRegion {
            rank,
            address,
            length_bytes,
            pointer: words.as_mut_ptr().cast::<u8>(),
            lkey,
            rkey,
            name: name.to_owned(),
        };
        // SAFETY: the caller's contract.
        unsafe { memory.add_region(region).unwrap() };
    }
    memory
}
