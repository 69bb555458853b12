//! The weak-memory model of GPU stores that other agents observe: WQE bytes and doorbell records
//! the NIC reads, proxy ring entries the host reads, and NVLink stores to peer GPUs.
//!
//! What it models: one buffer per issuing (rank, program). Plain stores are queued and become
//! visible in [`Memory`] one at a time, in an order the caller's rng chooses, except that two
//! stores to overlapping bytes keep program order (per-location coherence: a thread never sees its
//! own later store overwritten by an earlier one). A release store or a fence first makes every
//! earlier store of the program visible (in random order), then the release store itself is
//! written. The issuing program's loads see its own pending stores (store forwarding).
//!
//! What it does not model: scopes (a CTA-scope release is treated like a system-scope one), the
//! visibility of one store to some observers and not others (a store is visible to all agents
//! once drained), tearing inside one store (each store is all-or-nothing), and loads being
//! reordered (loads read [`Memory`] at the moment they execute). Costs of visibility are
//! [`crate::cost_model::CostModel::gpu_store_visible`]'s; this module only decides order.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::memory::{Memory, MemoryError};

/// A store that became visible, for tracing and for charging its visibility cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrainedStore {
    /// The rank whose memory was written.
    pub target_rank: u32,
    /// First byte written.
    pub address: u64,
    /// Bytes written.
    pub length_bytes: u64,
    /// Program-order number of the store within its buffer (0 for the first store ever issued).
    pub program_order: u64,
}

#[derive(Clone, Debug)]
struct PendingStore {
    target_rank: u32,
    address: u64,
    bytes: Vec<u8>,
    program_order: u64,
}

impl PendingStore {
    fn overlaps(&self, target_rank: u32, address: u64, length_bytes: u64) -> bool {
        let end = self.address + self.bytes.len() as u64;
        self.target_rank == target_rank && self.address < address + length_bytes && address < end
    }
}

/// The queued, not-yet-visible stores of one GPU program on one rank.
#[derive(Clone, Debug)]
pub struct GpuStoreBuffer {
    rank: u32,
    program: u32,
    /// In program order.
    pending: Vec<PendingStore>,
    next_program_order: u64,
}

impl GpuStoreBuffer {
    /// An empty buffer for program `program` running on `rank`.
    pub fn new(rank: u32, program: u32) -> Self {
        Self {
            rank,
            program,
            pending: Vec::new(),
            next_program_order: 0,
        }
    }

    /// The issuing rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The issuing program.
    pub fn program(&self) -> u32 {
        self.program
    }

    /// Whether any store is still invisible to other agents.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Number of invisible stores.
    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// The program-order number the next store will get (what [`DrainedStore::program_order`]
    /// reports when it becomes visible), so a caller can recognise one store among the drained.
    pub fn next_program_order(&self) -> u64 {
        self.next_program_order
    }

    /// Queues a plain store. The target is checked now so that a bad address is reported at the
    /// store that made it, not at some later drain.
    pub fn store(
        &mut self,
        memory: &Memory,
        target_rank: u32,
        address: u64,
        bytes: &[u8],
    ) -> Result<(), MemoryError> {
        memory.check_mapped(target_rank, address, bytes.len() as u64)?;
        self.pending.push(PendingStore {
            target_rank,
            address,
            bytes: bytes.to_vec(),
            program_order: self.next_program_order,
        });
        self.next_program_order += 1;
        Ok(())
    }

    /// Takes over `other`'s invisible stores (another thread of the same program, at a
    /// barrier): they stay invisible, keep their order among themselves, and now come before
    /// this buffer's later stores, so this program's next release or fence covers them (a
    /// release is cumulative over what the barrier ordered before it).
    pub fn absorb(&mut self, other: GpuStoreBuffer) {
        for mut store in other.pending {
            store.program_order = self.next_program_order;
            self.next_program_order += 1;
            self.pending.push(store);
        }
    }

    /// Makes every earlier store visible (random order), then writes this one: `st.release`.
    pub fn store_release(
        &mut self,
        memory: &mut Memory,
        rng: &mut ChaCha8Rng,
        target_rank: u32,
        address: u64,
        bytes: &[u8],
    ) -> Result<Vec<DrainedStore>, MemoryError> {
        memory.check_mapped(target_rank, address, bytes.len() as u64)?;
        let mut drained = self.fence(memory, rng)?;
        memory.write(target_rank, address, bytes)?;
        drained.push(DrainedStore {
            target_rank,
            address,
            length_bytes: bytes.len() as u64,
            program_order: self.next_program_order,
        });
        self.next_program_order += 1;
        Ok(drained)
    }

    /// Makes every pending store visible, in random order: `fence.*` / `__threadfence*()`.
    pub fn fence(
        &mut self,
        memory: &mut Memory,
        rng: &mut ChaCha8Rng,
    ) -> Result<Vec<DrainedStore>, MemoryError> {
        let mut drained = Vec::with_capacity(self.pending.len());
        while let Some(store) = self.drain_one_random(memory, rng)? {
            drained.push(store);
        }
        Ok(drained)
    }

    /// Makes one pending store visible, chosen by `rng` among those with no earlier pending store
    /// to overlapping bytes. `None` when nothing is pending.
    pub fn drain_one_random(
        &mut self,
        memory: &mut Memory,
        rng: &mut ChaCha8Rng,
    ) -> Result<Option<DrainedStore>, MemoryError> {
        let drainable: Vec<usize> = (0..self.pending.len())
            .filter(|&index| {
                let store = &self.pending[index];
                !self.pending[..index].iter().any(|earlier| {
                    earlier.overlaps(store.target_rank, store.address, store.bytes.len() as u64)
                })
            })
            .collect();
        if drainable.is_empty() {
            return Ok(None);
        }
        let index = drainable[rng.random_range(0..drainable.len())];
        self.drain_at(memory, index).map(Some)
    }

    /// Makes visible, in program order, every pending store overlapping the range: what must
    /// happen before an atomic of this program on those bytes, which sees its own earlier stores.
    pub fn drain_overlapping(
        &mut self,
        memory: &mut Memory,
        target_rank: u32,
        address: u64,
        length_bytes: u64,
    ) -> Result<Vec<DrainedStore>, MemoryError> {
        let mut drained = Vec::new();
        while let Some(index) = self
            .pending
            .iter()
            .position(|store| store.overlaps(target_rank, address, length_bytes))
        {
            drained.push(self.drain_at(memory, index)?);
        }
        Ok(drained)
    }

    fn drain_at(&mut self, memory: &mut Memory, index: usize) -> Result<DrainedStore, MemoryError> {
        let store = self.pending.remove(index);
        memory.write(store.target_rank, store.address, &store.bytes)?;
        Ok(DrainedStore {
            target_rank: store.target_rank,
            address: store.address,
            length_bytes: store.bytes.len() as u64,
            program_order: store.program_order,
        })
    }

    /// A load by this program: memory as it is, overlaid with this program's pending stores in
    /// program order (store forwarding).
    pub fn load(
        &self,
        memory: &Memory,
        target_rank: u32,
        address: u64,
        length_bytes: u64,
    ) -> Result<Vec<u8>, MemoryError> {
        let mut bytes = memory.read(target_rank, address, length_bytes)?;
        self.overlay_pending(target_rank, address, &mut bytes);
        Ok(bytes)
    }

    /// Overwrites `bytes` (read at `address` on `target_rank`) with this buffer's pending
    /// stores to them, in program order: what a load sees that forwards from this buffer too.
    pub fn overlay_pending(&self, target_rank: u32, address: u64, bytes: &mut [u8]) {
        let length_bytes = bytes.len() as u64;
        for store in &self.pending {
            if !store.overlaps(target_rank, address, length_bytes) {
                continue;
            }
            let store_end = store.address + store.bytes.len() as u64;
            let start = store.address.max(address);
            let end = store_end.min(address + length_bytes);
            bytes[(start - address) as usize..(end - address) as usize].copy_from_slice(
                &store.bytes[(start - store.address) as usize..(end - store.address) as usize],
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryKind;
    use rand::SeedableRng;

    #[test]
    fn loads_forward_pending_stores_and_same_bytes_keep_order() {
        let mut memory = Memory::new();
        let address = memory.allocate(1, 16, MemoryKind::Device, "buffer");
        let mut buffer = GpuStoreBuffer::new(0, 7);
        buffer.store(&memory, 1, address, &[1, 1, 1, 1]).unwrap();
        buffer.store(&memory, 1, address + 2, &[2, 2]).unwrap();
        assert_eq!(
            buffer.load(&memory, 1, address, 5).unwrap(),
            vec![1, 1, 2, 2, 0]
        );
        assert_eq!(memory.read(1, address, 4).unwrap(), vec![0; 4]);
        for seed in 0..20 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut memory = memory.clone();
            let mut buffer = buffer.clone();
            // The second store overlaps the first, so only the first may drain first.
            let first = buffer.drain_one_random(&mut memory, &mut rng).unwrap();
            assert_eq!(first.unwrap().program_order, 0);
            buffer.fence(&mut memory, &mut rng).unwrap();
            assert_eq!(memory.read(1, address, 4).unwrap(), vec![1, 1, 2, 2]);
            assert!(!buffer.has_pending());
        }
        assert!(buffer.store(&memory, 0, address, &[0]).is_err());
    }

    #[test]
    fn drain_overlapping_keeps_other_stores_pending() {
        let mut memory = Memory::new();
        let address = memory.allocate(0, 64, MemoryKind::Device, "words");
        let mut buffer = GpuStoreBuffer::new(0, 0);
        buffer.store(&memory, 0, address, &[1; 8]).unwrap();
        buffer.store(&memory, 0, address + 8, &[2; 8]).unwrap();
        let drained = buffer
            .drain_overlapping(&mut memory, 0, address, 8)
            .unwrap();
        assert_eq!(drained.len(), 1);
        assert_eq!(buffer.pending_count(), 1);
        assert_eq!(memory.read_u64(0, address + 8).unwrap(), 0);
    }
}
