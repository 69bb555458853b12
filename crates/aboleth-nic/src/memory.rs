//! The memory the NIC model works on, as a trait: the simulator's per-rank address spaces
//! (`aboleth-sim`'s `Memory`) and the runtime's software NIC (host-pinned queues, the rank's own
//! device memory, its peers' through CUDA IPC mappings) implement it.
//!
//! Addresses are the owning rank's: a WQE names local buffers by the requester's addresses and
//! remote ones by the responder's, and the implementation translates them to whatever it can
//! reach. Key checks are the implementation's (it knows the registrations). What it does not
//! promise: ordering between accesses beyond program order on one thread (the model runs every
//! access of a step from one thread, in the order a NIC performs them).

use std::fmt;

/// Why an access or a key check failed, in words that name the rank, the address and the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NicMemoryError {
    /// What was wrong.
    pub message: String,
}

impl fmt::Display for NicMemoryError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.message)
    }
}

impl std::error::Error for NicMemoryError {}

/// Byte access to every rank's memory and the registrations' key checks.
pub trait NicMemory {
    /// `length` bytes at `address` of `rank`.
    fn read(&self, rank: u32, address: u64, length: u64) -> Result<Vec<u8>, NicMemoryError>;

    /// Checks that every byte of the range is memory of `rank` (without reading it).
    fn check_mapped(&self, rank: u32, address: u64, length: u64) -> Result<(), NicMemoryError>;

    /// Stores `bytes` at `address` of `rank`.
    fn write(&mut self, rank: u32, address: u64, bytes: &[u8]) -> Result<(), NicMemoryError>;

    /// Checks that `lkey` is a local key of `rank` covering the range.
    fn check_local_key(
        &self,
        rank: u32,
        lkey: u32,
        address: u64,
        length: u64,
    ) -> Result<(), NicMemoryError>;

    /// Checks that `rkey` is a remote key of `rank` (the target) covering the range.
    fn check_remote_key(
        &self,
        rank: u32,
        rkey: u32,
        address: u64,
        length: u64,
    ) -> Result<(), NicMemoryError>;

    /// Replaces the little-endian 8-byte word at `address` of `rank` (8-byte aligned) by
    /// `update(old)` and returns `old`, as one atomic operation with respect to every other
    /// agent writing that word. The default reads then writes, which is atomic only where the NIC
    /// is the only agent between the two (the simulator, which runs one agent at a time).
    fn atomic_update_u64(
        &mut self,
        rank: u32,
        address: u64,
        update: &dyn Fn(u64) -> u64,
    ) -> Result<u64, NicMemoryError> {
        let bytes = self.read(rank, address, 8)?;
        let old = u64::from_le_bytes(bytes.try_into().map_err(|_| NicMemoryError {
            message: format!(
                "rank {rank}: the 8-byte read at {address:#x} returned another length"
            ),
        })?);
        self.write(rank, address, &update(old).to_le_bytes())?;
        Ok(old)
    }

    /// Copies `length` bytes from `source_address` of `source_rank` to `destination_address` of
    /// `destination_rank` (the gather of an RDMA write). The default reads then writes; a memory
    /// whose bytes are not in this process (GPU memory) copies without the round trip.
    fn copy(
        &mut self,
        (source_rank, source_address): (u32, u64),
        (destination_rank, destination_address): (u32, u64),
        length: u64,
    ) -> Result<(), NicMemoryError> {
        let bytes = self.read(source_rank, source_address, length)?;
        self.write(destination_rank, destination_address, &bytes)
    }

    /// Stores the little-endian 8-byte `value` at `address` of `rank`.
    fn write_u64(&mut self, rank: u32, address: u64, value: u64) -> Result<(), NicMemoryError> {
        self.write(rank, address, &value.to_le_bytes())
    }
}
