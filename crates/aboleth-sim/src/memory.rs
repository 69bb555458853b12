//! The memory of every simulated rank: per-rank address spaces of named allocations, plus the
//! memory registrations (lkey/rkey) that the NIC model checks.
//!
//! What it models: byte-addressed, zero-initialised device and host-pinned allocations; each rank
//! has its own address space starting at `(rank + 1) << 40`, so an address used on the wrong rank
//! is unmapped instead of silently aliasing; allocations are 256-byte aligned and separated by an
//! unmapped guard gap, so an overrun of one buffer faults instead of landing in the next; a
//! registration gives a distinct nonzero lkey and rkey covering one range.
//!
//! What it does not model: memory ordering or caching (stores become visible to [`Memory`] at once:
//! delayed visibility is [`crate::gpu_store_buffer`]'s job), freeing, virtual-memory mappings
//! shared between ranks (an NVLink store names the target rank explicitly), access rights beyond
//! "the key exists, belongs to this rank, and covers the range", or memory windows.

use std::collections::BTreeMap;
use std::fmt;

/// Alignment of every allocation, in bytes (a GPU cache line pair; also what CUDA guarantees).
pub const ALLOCATION_ALIGNMENT_BYTES: u64 = 256;
/// Unmapped bytes left after every allocation, so that overruns hit nothing.
pub const ALLOCATION_GUARD_GAP_BYTES: u64 = 256;
/// First key handed out; above `MLX5_INVALID_LKEY` (0x100) so no valid key can be mistaken for it.
const FIRST_KEY: u32 = 0x0001_0000;

/// Where an allocation lives, which decides which agents can reach it at what cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MemoryKind {
    /// GPU global memory (HBM).
    Device,
    /// Host memory pinned and mapped for the GPU (proxy rings, staged NIC buffers).
    HostPinned,
}

/// Which of a registration's two keys a check is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyKind {
    /// The local key, presented by the owning rank's NIC in data segments.
    Local,
    /// The remote key, presented by a peer in raddr segments.
    Remote,
}

impl fmt::Display for KeyKind {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            Self::Local => "lkey",
            Self::Remote => "rkey",
        })
    }
}

/// Why a memory access or key check failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MemoryError {
    /// Some byte of the range is outside every allocation of the rank.
    #[error(
        "rank {rank}: access of {length} B at {address:#x} is unmapped (nearest allocation: {nearest_allocation})"
    )]
    Unmapped {
        /// The rank whose address space was accessed.
        rank: u32,
        /// First byte accessed.
        address: u64,
        /// Bytes accessed.
        length: u64,
        /// Name and range of the closest allocation of that rank, or "none".
        nearest_allocation: String,
    },
    /// No registration of this rank has this key (unknown, another rank's, or the other kind).
    #[error("rank {rank}: {key_kind} {key:#x} is not a registered {key_kind} of this rank")]
    BadKey {
        /// The rank the key was presented to.
        rank: u32,
        /// The key.
        key: u32,
        /// lkey or rkey.
        key_kind: KeyKind,
    },
    /// The key is valid but its registration does not cover the range.
    #[error(
        "rank {rank}: {key_kind} {key:#x} covers [{registered_address:#x}, +{registered_length}) but the access is {length} B at {address:#x}"
    )]
    KeyOutOfBounds {
        /// The rank the key was presented to.
        rank: u32,
        /// The key.
        key: u32,
        /// lkey or rkey.
        key_kind: KeyKind,
        /// First byte accessed.
        address: u64,
        /// Bytes accessed.
        length: u64,
        /// Start of the registration.
        registered_address: u64,
        /// Length of the registration.
        registered_length: u64,
    },
}

#[derive(Clone, Debug)]
struct Allocation {
    length_bytes: u64,
    kind: MemoryKind,
    name: String,
    bytes: Vec<u8>,
}

#[derive(Clone, Debug)]
struct Registration {
    rank: u32,
    address: u64,
    length_bytes: u64,
    key_kind: KeyKind,
}

#[derive(Clone, Debug, Default)]
struct RankAddressSpace {
    /// Keyed by start address, so the allocation holding an address is one range lookup away.
    allocations: BTreeMap<u64, Allocation>,
    next_free_address: u64,
}

/// The memory of all ranks, and the registrations made on it.
#[derive(Clone, Debug)]
pub struct Memory {
    ranks: BTreeMap<u32, RankAddressSpace>,
    /// Every key ever handed out, lkeys and rkeys alike, so the two can never be confused.
    registrations: BTreeMap<u32, Registration>,
    next_key: u32,
}

impl Default for Memory {
    fn default() -> Self {
        Self::new()
    }
}

/// The first address of `rank`'s address space.
pub fn rank_address_space_base(rank: u32) -> u64 {
    (u64::from(rank) + 1) << 40
}

impl Memory {
    /// Empty memory: no allocations on any rank.
    pub fn new() -> Self {
        Self {
            ranks: BTreeMap::new(),
            registrations: BTreeMap::new(),
            next_key: FIRST_KEY,
        }
    }

    /// Allocates `length_bytes` zeroed bytes on `rank` and returns the address; `name` appears in
    /// error messages and deadlock reports.
    pub fn allocate(&mut self, rank: u32, length_bytes: u64, kind: MemoryKind, name: &str) -> u64 {
        let space = self.ranks.entry(rank).or_insert_with(|| RankAddressSpace {
            allocations: BTreeMap::new(),
            next_free_address: rank_address_space_base(rank),
        });
        let address = space.next_free_address;
        let reserved = length_bytes
            .max(1)
            .next_multiple_of(ALLOCATION_ALIGNMENT_BYTES);
        space.next_free_address = address + reserved + ALLOCATION_GUARD_GAP_BYTES;
        let length = usize::try_from(length_bytes).expect("allocation fits the host's memory");
        space.allocations.insert(
            address,
            Allocation {
                length_bytes,
                kind,
                name: name.to_owned(),
                bytes: vec![0; length],
            },
        );
        address
    }

    /// The allocation containing `address` on `rank`, with its start address.
    fn allocation_at(&self, rank: u32, address: u64) -> Option<(u64, &Allocation)> {
        let (&start, allocation) = self
            .ranks
            .get(&rank)?
            .allocations
            .range(..=address)
            .next_back()?;
        (address < start + allocation.length_bytes).then_some((start, allocation))
    }

    fn unmapped(&self, rank: u32, address: u64, length: u64) -> MemoryError {
        let nearest = self.ranks.get(&rank).and_then(|space| {
            space
                .allocations
                .iter()
                .min_by_key(|&(&start, allocation)| {
                    let end = start + allocation.length_bytes;
                    if address < start {
                        start - address
                    } else {
                        address.saturating_sub(end)
                    }
                })
        });
        let nearest_allocation = match nearest {
            Some((start, allocation)) => format!(
                "'{}' [{start:#x}, {:#x})",
                allocation.name,
                start + allocation.length_bytes
            ),
            None => "none".to_owned(),
        };
        MemoryError::Unmapped {
            rank,
            address,
            length,
            nearest_allocation,
        }
    }

    /// Start address and byte offset of a range that lies inside one allocation.
    fn locate(&self, rank: u32, address: u64, length: u64) -> Result<(u64, usize), MemoryError> {
        let (start, allocation) = self
            .allocation_at(rank, address)
            .or_else(|| {
                // A zero-length access exactly at the end of an allocation is still in bounds.
                (length == 0)
                    .then(|| self.allocation_at(rank, address.checked_sub(1)?))
                    .flatten()
            })
            .ok_or_else(|| self.unmapped(rank, address, length))?;
        let end = address.checked_add(length);
        if end.is_none_or(|end| end > start + allocation.length_bytes) {
            return Err(self.unmapped(rank, address, length));
        }
        Ok((start, (address - start) as usize))
    }

    /// Checks that `[address, address + length)` lies inside one allocation of `rank`.
    pub fn check_mapped(&self, rank: u32, address: u64, length: u64) -> Result<(), MemoryError> {
        self.locate(rank, address, length).map(|_| ())
    }

    /// Reads `length` bytes.
    pub fn read(&self, rank: u32, address: u64, length: u64) -> Result<Vec<u8>, MemoryError> {
        let (start, offset) = self.locate(rank, address, length)?;
        let allocation = &self.ranks[&rank].allocations[&start];
        Ok(allocation.bytes[offset..offset + length as usize].to_vec())
    }

    /// Writes `bytes`.
    pub fn write(&mut self, rank: u32, address: u64, bytes: &[u8]) -> Result<(), MemoryError> {
        let (start, offset) = self.locate(rank, address, bytes.len() as u64)?;
        let allocation = self
            .ranks
            .get_mut(&rank)
            .and_then(|space| space.allocations.get_mut(&start))
            .expect("located above");
        allocation.bytes[offset..offset + bytes.len()].copy_from_slice(bytes);
        Ok(())
    }

    /// Reads a little-endian u64 (any alignment: the callers that care check it themselves).
    pub fn read_u64(&self, rank: u32, address: u64) -> Result<u64, MemoryError> {
        let bytes = self.read(rank, address, 8)?;
        Ok(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
    }

    /// Writes a little-endian u64.
    pub fn write_u64(&mut self, rank: u32, address: u64, value: u64) -> Result<(), MemoryError> {
        self.write(rank, address, &value.to_le_bytes())
    }

    /// The name of the allocation containing `address`, for messages.
    pub fn allocation_name(&self, rank: u32, address: u64) -> Option<&str> {
        self.allocation_at(rank, address)
            .map(|(_, allocation)| allocation.name.as_str())
    }

    /// The kind of the allocation containing `address` (decides store visibility costs).
    pub fn allocation_kind(&self, rank: u32, address: u64) -> Option<MemoryKind> {
        self.allocation_at(rank, address)
            .map(|(_, allocation)| allocation.kind)
    }

    /// "'name'+0xoffset" for `address`, or the bare address when unmapped: for error messages.
    pub fn describe_address(&self, rank: u32, address: u64) -> String {
        match self.allocation_at(rank, address) {
            Some((start, allocation)) => format!("'{}'+{:#x}", allocation.name, address - start),
            None => format!("{address:#x} (unmapped)"),
        }
    }

    /// Registers `[address, address + length_bytes)` of `rank` and returns `(lkey, rkey)`. Keys
    /// are distinct across all ranks and registrations, nonzero, and handed out in call order, so
    /// the same program always gets the same keys.
    pub fn register(
        &mut self,
        rank: u32,
        address: u64,
        length_bytes: u64,
    ) -> Result<(u32, u32), MemoryError> {
        self.check_mapped(rank, address, length_bytes)?;
        let lkey = self.next_key;
        let rkey = lkey + 1;
        self.next_key += 2;
        for (key, key_kind) in [(lkey, KeyKind::Local), (rkey, KeyKind::Remote)] {
            self.registrations.insert(
                key,
                Registration {
                    rank,
                    address,
                    length_bytes,
                    key_kind,
                },
            );
        }
        Ok((lkey, rkey))
    }

    fn check_key(
        &self,
        rank: u32,
        key: u32,
        key_kind: KeyKind,
        address: u64,
        length: u64,
    ) -> Result<(), MemoryError> {
        let registration = self
            .registrations
            .get(&key)
            .filter(|registration| registration.rank == rank && registration.key_kind == key_kind)
            .ok_or(MemoryError::BadKey {
                rank,
                key,
                key_kind,
            })?;
        let inside = address >= registration.address
            && address
                .checked_add(length)
                .is_some_and(|end| end <= registration.address + registration.length_bytes);
        if !inside {
            return Err(MemoryError::KeyOutOfBounds {
                rank,
                key,
                key_kind,
                address,
                length,
                registered_address: registration.address,
                registered_length: registration.length_bytes,
            });
        }
        Ok(())
    }

    /// Checks that `lkey` is a local key of `rank` covering the range (what the NIC does for a
    /// data segment before reading or writing local memory).
    pub fn check_local_key(
        &self,
        rank: u32,
        lkey: u32,
        address: u64,
        length: u64,
    ) -> Result<(), MemoryError> {
        self.check_key(rank, lkey, KeyKind::Local, address, length)
    }

    /// Checks that `rkey` is a remote key of `rank` (the target) covering the range.
    pub fn check_remote_key(
        &self,
        rank: u32,
        rkey: u32,
        address: u64,
        length: u64,
    ) -> Result<(), MemoryError> {
        self.check_key(rank, rkey, KeyKind::Remote, address, length)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_aligned_disjoint_zeroed_and_per_rank() {
        let mut memory = Memory::new();
        let a = memory.allocate(0, 10, MemoryKind::Device, "a");
        let b = memory.allocate(0, 1000, MemoryKind::HostPinned, "b");
        let c = memory.allocate(1, 8, MemoryKind::Device, "c");
        assert_eq!(a, 1 << 40);
        assert_eq!(c, 2 << 40);
        assert_eq!(b % ALLOCATION_ALIGNMENT_BYTES, 0);
        assert!(b >= a + 10 + ALLOCATION_GUARD_GAP_BYTES);
        assert_eq!(memory.read(0, b, 1000).unwrap(), vec![0; 1000]);
        memory.write_u64(1, c, 0x0102_0304_0506_0708).unwrap();
        assert_eq!(memory.read(1, c, 2).unwrap(), vec![8, 7]);
        assert_eq!(memory.read_u64(1, c).unwrap(), 0x0102_0304_0506_0708);
        assert_eq!(memory.allocation_name(0, b + 999), Some("b"));
        assert_eq!(memory.allocation_kind(0, b), Some(MemoryKind::HostPinned));
        assert_eq!(memory.describe_address(0, b + 16), "'b'+0x10");
        // Rank 0's address is unmapped on rank 1.
        assert!(matches!(
            memory.read(1, a, 1),
            Err(MemoryError::Unmapped { rank: 1, .. })
        ));
        assert!(memory.read(0, a + 10, 0).is_ok());
    }

    #[test]
    fn overruns_name_the_nearest_allocation() {
        let mut memory = Memory::new();
        let a = memory.allocate(3, 16, MemoryKind::Device, "send_buffer");
        let error = memory.write(3, a + 8, &[0; 9]).unwrap_err();
        let message = error.to_string();
        assert!(message.contains("rank 3"), "{message}");
        assert!(message.contains("send_buffer"), "{message}");
        assert!(matches!(error, MemoryError::Unmapped { length: 9, .. }));
        assert!(memory.read(3, u64::MAX, 2).is_err());
    }

    #[test]
    fn keys_are_distinct_and_checked_by_rank_kind_and_range() {
        let mut memory = Memory::new();
        let a = memory.allocate(0, 64, MemoryKind::Device, "a");
        let b = memory.allocate(1, 64, MemoryKind::Device, "b");
        let (lkey_a, rkey_a) = memory.register(0, a, 64).unwrap();
        let (lkey_b, rkey_b) = memory.register(1, b, 32).unwrap();
        let keys = [lkey_a, rkey_a, lkey_b, rkey_b];
        assert!(keys.iter().all(|&key| key != 0));
        assert_eq!(
            keys.iter().collect::<std::collections::BTreeSet<_>>().len(),
            4
        );
        memory.check_local_key(0, lkey_a, a, 64).unwrap();
        memory.check_remote_key(1, rkey_b, b + 24, 8).unwrap();
        assert!(matches!(
            memory.check_remote_key(1, lkey_b, b, 8),
            Err(MemoryError::BadKey {
                key_kind: KeyKind::Remote,
                ..
            })
        ));
        assert!(matches!(
            memory.check_remote_key(0, rkey_b, b, 8),
            Err(MemoryError::BadKey { rank: 0, .. })
        ));
        assert!(matches!(
            memory.check_remote_key(1, rkey_b, b + 28, 8),
            Err(MemoryError::KeyOutOfBounds { .. })
        ));
        assert!(memory.register(0, a, 65).is_err());
    }
}
