//! What the software NIC's tests share: mapping heap words, standing in for host-pinned memory or
//! for GPU memory, as the regions of a `MappedNicMemory`.

use std::sync::atomic::{AtomicU64, Ordering};

use aboleth_runtime::soft_nic::{DeviceAccess, MappedNicMemory, MappedRegion, RegionBacking};

/// One region: rank, address, bytes, lkey, rkey, name.
pub type RegionSpec = (u32, u64, u64, Option<u32>, Option<u32>, &'static str);

/// Heap memory playing GPU memory: its "device addresses" are host addresses of this process,
/// so the software NIC's device paths (copies, the compare-and-swap loop) run on the CPU.
#[derive(Debug, Default)]
pub struct HeapDevice;

// The addresses are those of `map_regions`' backing words, valid while the memory is used.
impl DeviceAccess for HeapDevice {
    fn read(&self, address: u64, bytes: &mut [u8]) -> Result<(), String> {
        // SAFETY: see the impl's comment.
        unsafe {
            std::ptr::copy_nonoverlapping(address as *const u8, bytes.as_mut_ptr(), bytes.len())
        };
        Ok(())
    }
    fn write(&self, address: u64, bytes: &[u8]) -> Result<(), String> {
        // SAFETY: as above.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), address as *mut u8, bytes.len()) };
        Ok(())
    }
    fn copy(&self, destination: u64, source: u64, length: u64) -> Result<(), String> {
        // SAFETY: as above; `copy` (memmove) since a rank may write into its own buffer.
        unsafe { std::ptr::copy(source as *const u8, destination as *mut u8, length as usize) };
        Ok(())
    }
    fn compare_and_swap_u64(
        &self,
        address: u64,
        expected: u64,
        desired: u64,
    ) -> Result<u64, String> {
        // SAFETY: as above; the model only issues aligned atomics.
        let word = unsafe { AtomicU64::from_ptr(address as *mut u64) };
        Ok(word
            .compare_exchange(expected, desired, Ordering::SeqCst, Ordering::SeqCst)
            .unwrap_or_else(|found| found))
    }
}

/// A memory whose region `i` is `specs[i]` backed by `backing[i]` (8-byte aligned words): host
/// memory, or (for the names in `on_device`) GPU memory played by a [`HeapDevice`].
///
/// # Safety
/// `backing` must outlive the returned memory and never be resized; agents sharing it (another
/// view made from the same backing) may only touch what the doorbell protocol orders or words
/// accessed whole.
pub unsafe fn map_regions(
    backing: &mut [Vec<u64>],
    specs: &[RegionSpec],
    on_device: &[&str],
) -> MappedNicMemory {
    let mut memory = if on_device.is_empty() {
        MappedNicMemory::new()
    } else {
        MappedNicMemory::with_device(Box::new(HeapDevice))
    };
    for (words, &(rank, address, length_bytes, lkey, rkey, name)) in backing.iter_mut().zip(specs) {
        assert!(
            words.len() as u64 * 8 >= length_bytes,
            "{name}: backing too small"
        );
        let pointer = words.as_mut_ptr().cast::<u8>();
        let backing = if on_device.contains(&name) {
            RegionBacking::Device {
                address: pointer as u64,
            }
        } else {
            RegionBacking::Host { pointer }
        };
        let region = MappedRegion {
            rank,
            address,
            length_bytes,
            backing,
            lkey,
            rkey,
            name: name.to_owned(),
        };
        // SAFETY: the caller's contract.
        unsafe { memory.add_region(region).unwrap() };
    }
    memory
}
