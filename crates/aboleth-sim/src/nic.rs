//! The simulator's mlx5 NIC: the shared model of `aboleth-nic` (the same one the runtime's
//! software NIC runs) over the simulated [`Memory`], with each step's [`NicWork`] priced by the
//! [`CostModel`] ([`nic_work_cost`]).
//!
//! What lives here and not in `aboleth-nic`: the [`NicMemory`] implementation of [`Memory`]
//! (its reads, writes and key checks; an atomic is a read then a write, which is atomic because
//! the simulator runs one agent at a time) and the pricing. Everything a WQE does is decided in
//! `aboleth-nic`.

pub use aboleth_nic::{
    CqPollResult, Nic, NicError, NicEvent, NicMemory, NicMemoryError, NicOperationWork, NicWork,
    QueuePairConfig, QueuePairState, QueuePairStatus, ReceiveCqConfig, ReceiveQueueConfig,
    SQ_BASIC_BLOCK_COUNT_MAX, WqeExecution, WqeOutcome, WrittenRange, apply_masked_compare_swap_64,
    apply_masked_fetch_add_64,
};

use crate::cost_model::{CostModel, SimulatedNanoseconds};
use crate::memory::{Memory, MemoryError};

fn nic_error(error: MemoryError) -> NicMemoryError {
    NicMemoryError {
        message: error.to_string(),
    }
}

impl NicMemory for Memory {
    fn read(&self, rank: u32, address: u64, length: u64) -> Result<Vec<u8>, NicMemoryError> {
        Memory::read(self, rank, address, length).map_err(nic_error)
    }

    fn check_mapped(&self, rank: u32, address: u64, length: u64) -> Result<(), NicMemoryError> {
        Memory::check_mapped(self, rank, address, length).map_err(nic_error)
    }

    fn write(&mut self, rank: u32, address: u64, bytes: &[u8]) -> Result<(), NicMemoryError> {
        Memory::write(self, rank, address, bytes).map_err(nic_error)
    }

    fn check_local_key(
        &self,
        rank: u32,
        lkey: u32,
        address: u64,
        length: u64,
    ) -> Result<(), NicMemoryError> {
        Memory::check_local_key(self, rank, lkey, address, length).map_err(nic_error)
    }

    fn check_remote_key(
        &self,
        rank: u32,
        rkey: u32,
        address: u64,
        length: u64,
    ) -> Result<(), NicMemoryError> {
        Memory::check_remote_key(self, rank, rkey, address, length).map_err(nic_error)
    }
}

/// The simulated time of one NIC step: the sum of the cost model's price of each piece of work.
pub fn nic_work_cost(cost_model: &CostModel, work: &NicWork) -> SimulatedNanoseconds {
    let mut cost = SimulatedNanoseconds::default();
    if work.doorbell_record_read {
        cost += cost_model.nic_doorbell_record_read();
    }
    if let Some(basic_blocks) = work.wqe_fetch_basic_blocks {
        cost += cost_model.nic_wqe_fetch(basic_blocks);
    }
    if work.fence_wait {
        cost += cost_model.nic_fence_wait();
    }
    cost += match work.operation {
        None => SimulatedNanoseconds::default(),
        Some(NicOperationWork::RdmaWrite { bytes }) => cost_model.nic_rdma_write(bytes),
        Some(NicOperationWork::RdmaRead { bytes }) => cost_model.nic_rdma_read(bytes),
        Some(NicOperationWork::Atomic) => cost_model.nic_atomic(),
        Some(NicOperationWork::LocalRead { bytes }) => cost_model.nic_local_read(bytes),
    };
    if work.completion {
        cost += cost_model.nic_completion();
    }
    cost
}
