//! The flat memory the NIC-model tests run over: one byte array per rank, addressed from 0, with
//! one registration per rank covering [`BUFFER`].., whose local key is `LKEY + rank` and remote
//! key `RKEY + rank`, and an atomic of its own that counts its calls (as the runtime's software
//! NIC has). Nothing from `aboleth-sim`.

#![allow(
    dead_code,
    reason = "each test crate that includes this module uses part of it"
)]

use aboleth_nic::{NicMemory, NicMemoryError};

/// Bytes of each rank.
pub const RANK_BYTES: u64 = 1 << 16;
/// Where each rank's registration starts.
pub const BUFFER: u64 = 0x4000;
/// Rank r's local key is `LKEY + r`.
pub const LKEY: u32 = 0x10_0001; // 24 bits, as EFA lkeys are
/// Rank r's remote key is `RKEY + r`.
pub const RKEY: u32 = 0x20_0001;

/// Rank r's bytes are `ranks[r]`, addressed from 0; one registration per rank covers BUFFER..
#[derive(Default)]
pub struct FlatMemory {
    /// Rank r's bytes.
    pub ranks: Vec<Vec<u8>>,
    /// Calls of `atomic_update_u64`.
    pub atomics: u64,
}

impl FlatMemory {
    fn range(
        &self,
        rank: u32,
        address: u64,
        length: u64,
    ) -> Result<std::ops::Range<usize>, NicMemoryError> {
        if rank as usize >= self.ranks.len() || address + length > RANK_BYTES {
            return Err(NicMemoryError {
                message: format!("rank {rank}: {length} B at {address:#x} is outside its memory"),
            });
        }
        Ok(address as usize..(address + length) as usize)
    }

    fn check_key(
        &self,
        rank: u32,
        key: u32,
        expected: u32,
        address: u64,
        length: u64,
    ) -> Result<(), NicMemoryError> {
        if key != expected + rank || address < BUFFER || address + length > RANK_BYTES {
            return Err(NicMemoryError {
                message: format!(
                    "rank {rank}: key {key:#x} does not cover {length} B at {address:#x}"
                ),
            });
        }
        Ok(())
    }
}

impl NicMemory for FlatMemory {
    fn read(&self, rank: u32, address: u64, length: u64) -> Result<Vec<u8>, NicMemoryError> {
        let range = self.range(rank, address, length)?;
        Ok(self.ranks[rank as usize][range].to_vec())
    }

    fn check_mapped(&self, rank: u32, address: u64, length: u64) -> Result<(), NicMemoryError> {
        self.range(rank, address, length).map(|_| ())
    }

    fn write(&mut self, rank: u32, address: u64, bytes: &[u8]) -> Result<(), NicMemoryError> {
        let range = self.range(rank, address, bytes.len() as u64)?;
        self.ranks[rank as usize][range].copy_from_slice(bytes);
        Ok(())
    }

    fn check_local_key(
        &self,
        rank: u32,
        lkey: u32,
        address: u64,
        length: u64,
    ) -> Result<(), NicMemoryError> {
        self.check_key(rank, lkey, LKEY, address, length)
    }

    fn check_remote_key(
        &self,
        rank: u32,
        rkey: u32,
        address: u64,
        length: u64,
    ) -> Result<(), NicMemoryError> {
        self.check_key(rank, rkey, RKEY, address, length)
    }

    fn atomic_update_u64(
        &mut self,
        rank: u32,
        address: u64,
        update: &dyn Fn(u64) -> u64,
    ) -> Result<u64, NicMemoryError> {
        self.atomics += 1;
        let range = self.range(rank, address, 8)?;
        let word = &mut self.ranks[rank as usize][range];
        let old = u64::from_le_bytes(word.try_into().expect("8 bytes"));
        word.copy_from_slice(&update(old).to_le_bytes());
        Ok(old)
    }
}
