//! Deterministic simulator of the devices Aboleth's compiled kernels talk to: the memory of every
//! rank, mlx5 NICs, the host proxy thread, and the weak ordering of GPU stores.
//!
//! The interpreter (another crate's job) runs each rank's compiled kernel and calls these models:
//! GPU stores go through a [`GpuStoreBuffer`], doorbells to [`Nic::ring_doorbell`], and between
//! instructions it lets the rng pick which agent moves next ([`Nic::step`],
//! [`ProxyEngine::step`], [`GpuStoreBuffer::drain_one_random`]). Every model reads and writes
//! the same [`Memory`], so a NIC sees exactly the WQE bytes the GPU has made visible, and a
//! proxy exactly the ring entries.
//!
//! Everything is deterministic: no wall clock, no hash-order iteration, and every choice comes
//! from a `rand_chacha::ChaCha8Rng` the caller passes in, so a seed reproduces a run. Time is
//! simulated: each step reports its cost from the [`CostModel`].

pub mod cost_model;
pub mod gpu_store_buffer;
pub mod interpreter;
pub mod launch;
pub mod memory;
pub mod mutations;
pub mod nic;
pub mod program;
pub mod proxy_engine;
pub mod validation;

pub use cost_model::{CostModel, SimulatedNanoseconds};
pub use gpu_store_buffer::{DrainedStore, GpuStoreBuffer};
pub use memory::{KeyKind, Memory, MemoryError, MemoryKind};
pub use nic::{
    CqPollResult, Nic, NicError, NicEvent, QueuePairConfig, QueuePairState, QueuePairStatus,
    WqeExecution, WqeOutcome, WrittenRange,
};
pub use proxy_engine::{ProxyEngine, ProxyError, ProxyEvent, ProxyFailure, RegionTable};
