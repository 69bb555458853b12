//! The software NIC's memory (issue 17, first part): [`MappedNicMemory`], the `aboleth-nic`
//! model's [`NicMemory`] over memory this process can dereference — host-pinned memory (the send
//! rings, doorbell records and CQs the GPU writes, staged buffers) and, once mapped, any other
//! range the caller vouches for. Each [`MappedRegion`] says which rank's address range it is (the
//! addresses WQEs carry), where it lives in this process, and the lkey and rkey registered on it.
//!
//! Atomics are real: an 8-byte atomic of a WQE is a sequentially consistent `fetch_update` on the
//! word through [`AtomicU64`], so it is atomic against the GPU's and other threads' atomics on
//! host-pinned memory (PCIe atomics from the GPU to pinned memory are system-scope on Hopper).
//! Reads and writes are byte copies, with no ordering beyond this thread's program order: the
//! NIC thread is the only agent that moves WQE payloads.
//!
//! What it does not do yet: device memory (the rank's own and its peers' through CUDA IPC need
//! copies through the copy engine and atomics through a kernel, not dereferences), the NIC thread,
//! and the UAR watching; `world.connect_all("rdma")` still refuses with its reason.

use std::sync::atomic::{AtomicU64, Ordering};

use aboleth_nic::{NicMemory, NicMemoryError};

/// One range of some rank's addresses that this process can dereference.
#[derive(Clone, Debug)]
pub struct MappedRegion {
    /// The rank whose address space the range belongs to.
    pub rank: u32,
    /// First address, as that rank's WQEs name it.
    pub address: u64,
    /// Bytes.
    pub length_bytes: u64,
    /// Where the first byte is in this process.
    pub pointer: *mut u8,
    /// The local key registered on the range, if any (gather lists and atomic results).
    pub lkey: Option<u32>,
    /// The remote key registered on the range, if any (targets of writes, reads and atomics).
    pub rkey: Option<u32>,
    /// What the range is, for error messages ("send ring", "destination", ...).
    pub name: String,
}

/// The memory a software NIC works on: every mapped region, looked up by (rank, address).
#[derive(Debug, Default)]
pub struct MappedNicMemory {
    regions: Vec<MappedRegion>,
}

// SAFETY: the regions' pointers are only dereferenced through `&self`/`&mut self` methods, and
// `add_region`'s contract makes the memory valid for the whole life of this value.
unsafe impl Send for MappedNicMemory {}

impl MappedNicMemory {
    /// No regions.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a region. Overlapping ranges of one rank are refused.
    ///
    /// # Safety
    /// `region.pointer` must be valid for reads and writes of `region.length_bytes` bytes, and
    /// 8-byte aligned wherever an atomic may target, for as long as this memory is used; other
    /// agents may write it concurrently only with atomics or where the protocol orders them.
    pub unsafe fn add_region(&mut self, region: MappedRegion) -> Result<(), NicMemoryError> {
        let end = region.address.checked_add(region.length_bytes);
        let overlaps = self.regions.iter().any(|other| {
            other.rank == region.rank
                && region.address < other.address + other.length_bytes
                && other.address < end.unwrap_or(u64::MAX)
        });
        if end.is_none() || overlaps || region.length_bytes == 0 {
            return Err(NicMemoryError {
                message: format!(
                    "rank {}: region {} ({} B at {:#x}) is empty, wraps, or overlaps another",
                    region.rank, region.name, region.length_bytes, region.address
                ),
            });
        }
        self.regions.push(region);
        Ok(())
    }

    fn locate(
        &self,
        rank: u32,
        address: u64,
        length: u64,
    ) -> Result<(&MappedRegion, usize), NicMemoryError> {
        self.regions
            .iter()
            .find(|region| {
                region.rank == rank
                    && address >= region.address
                    && address.checked_add(length).is_some_and(|end| end <= region.address + region.length_bytes)
            })
            .map(|region| (region, (address - region.address) as usize))
            .ok_or_else(|| NicMemoryError {
                message: format!(
                    "rank {rank}: access of {length} B at {address:#x} is in no mapped region (mapped: {})",
                    self.describe_rank(rank)
                ),
            })
    }

    fn describe_rank(&self, rank: u32) -> String {
        let names: Vec<String> = self
            .regions
            .iter()
            .filter(|region| region.rank == rank)
            .map(|region| {
                format!(
                    "{} [{:#x}, +{})",
                    region.name, region.address, region.length_bytes
                )
            })
            .collect();
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    }

    fn check_key(
        &self,
        rank: u32,
        key: u32,
        remote: bool,
        address: u64,
        length: u64,
    ) -> Result<(), NicMemoryError> {
        let kind = if remote { "rkey" } else { "lkey" };
        let registered = |region: &MappedRegion| if remote { region.rkey } else { region.lkey };
        let Some(region) = self
            .regions
            .iter()
            .find(|region| region.rank == rank && registered(region) == Some(key))
        else {
            return Err(NicMemoryError {
                message: format!(
                    "rank {rank}: {kind} {key:#x} is not a registered {kind} of this rank"
                ),
            });
        };
        if address < region.address
            || address
                .checked_add(length)
                .is_none_or(|end| end > region.address + region.length_bytes)
        {
            return Err(NicMemoryError {
                message: format!(
                    "rank {rank}: {kind} {key:#x} covers {} [{:#x}, +{}) but the access is {length} B at {address:#x}",
                    region.name, region.address, region.length_bytes
                ),
            });
        }
        Ok(())
    }
}

impl NicMemory for MappedNicMemory {
    fn read(&self, rank: u32, address: u64, length: u64) -> Result<Vec<u8>, NicMemoryError> {
        let (region, offset) = self.locate(rank, address, length)?;
        let mut bytes = vec![0; length as usize];
        // SAFETY: `locate` keeps the range inside the region, valid by `add_region`'s contract.
        unsafe {
            std::ptr::copy_nonoverlapping(
                region.pointer.add(offset),
                bytes.as_mut_ptr(),
                bytes.len(),
            )
        };
        Ok(bytes)
    }

    fn check_mapped(&self, rank: u32, address: u64, length: u64) -> Result<(), NicMemoryError> {
        self.locate(rank, address, length).map(|_| ())
    }

    fn write(&mut self, rank: u32, address: u64, bytes: &[u8]) -> Result<(), NicMemoryError> {
        let (region, offset) = self.locate(rank, address, bytes.len() as u64)?;
        // SAFETY: as in `read`.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), region.pointer.add(offset), bytes.len())
        };
        Ok(())
    }

    fn check_local_key(
        &self,
        rank: u32,
        lkey: u32,
        address: u64,
        length: u64,
    ) -> Result<(), NicMemoryError> {
        self.check_key(rank, lkey, false, address, length)
    }

    fn check_remote_key(
        &self,
        rank: u32,
        rkey: u32,
        address: u64,
        length: u64,
    ) -> Result<(), NicMemoryError> {
        self.check_key(rank, rkey, true, address, length)
    }

    fn atomic_update_u64(
        &mut self,
        rank: u32,
        address: u64,
        update: &dyn Fn(u64) -> u64,
    ) -> Result<u64, NicMemoryError> {
        let (region, offset) = self.locate(rank, address, 8)?;
        // SAFETY: in range as above; WQE targets are 8-byte aligned (the model checks it), so
        // the word is aligned when the region's pointer is, which `add_region` requires.
        let pointer = unsafe { region.pointer.add(offset) };
        if !(pointer as usize).is_multiple_of(8) {
            return Err(NicMemoryError {
                message: format!(
                    "rank {rank}: atomic at {address:#x} maps to an unaligned host address"
                ),
            });
        }
        // SAFETY: aligned, valid, and only accessed atomically by agents that race on it.
        let word = unsafe { AtomicU64::from_ptr(pointer.cast::<u64>()) };
        let old = word
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |native| {
                // The word is little-endian in memory, as the NIC's atomics see it.
                Some(update(u64::from_le(native)).to_le())
            })
            .expect("the closure always returns Some");
        Ok(u64::from_le(old))
    }
}
