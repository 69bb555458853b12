//! Simulated time: the latencies and bandwidths of every action the simulator models, and the
//! cost of each action in [`SimulatedNanoseconds`].
//!
//! What it models: a fixed latency plus a size over a bandwidth for each kind of action, with the
//! defaults below. What it does not model: contention, queueing, overlap of independent actions,
//! clocks of different agents drifting, or caches; the simulator is a reference for behaviour,
//! and its time is an estimate for comparing lowerings, not a performance prediction.
//!
//! | parameter | default | source |
//! | --- | --- | --- |
//! | `nvlink_store_bandwidth_bytes_per_second` | 368 GB/s | DESIGN.md §6 measured (SM stores, >= 66 CTAs) |
//! | `nvlink_one_way_latency_nanoseconds` | 700 ns | assumed (about a third of the 1.98 us 256 B all-to-all round of DESIGN.md §6) |
//! | `gpu_host_one_way_latency_nanoseconds` | 1625 ns | DESIGN.md §6 measured (3.25 us flag round trip, halved) |
//! | `pcie_mmio_doorbell_write_nanoseconds` | 500 ns | assumed |
//! | `nic_wqe_fetch_latency_nanoseconds` | 400 ns | assumed (one PCIe read by the NIC) |
//! | `nic_wqe_fetch_bandwidth_bytes_per_second` | 25 GB/s | assumed (64 B per basic block) |
//! | `nic_wire_bandwidth_bytes_per_second` | 25 GB/s | assumed (200 Gb/s NIC) |
//! | `nic_wire_one_way_latency_nanoseconds` | 1500 ns | assumed |
//! | `nic_cqe_write_nanoseconds` | 300 ns | assumed (one posted PCIe write of 64 B) |
//! | `gpu_global_store_nanoseconds` | 5 ns | assumed |
//! | `gpu_system_load_nanoseconds` | 600 ns | assumed (an `ld.relaxed.sys` from local HBM, past L1; dependent loads pay it one after another) |
//! | `gpu_scope_atomic_nanoseconds` | 300 ns | assumed (anchors §9: "a few hundred ns uncontended") |
//! | `fence_gpu_nanoseconds` | 200 ns | assumed |
//! | `fence_sys_nanoseconds` | 800 ns | assumed |
//! | `copy_engine_bandwidth_bytes_per_second` | 395 GB/s | DESIGN.md §6 measured |
//! | `copy_engine_launch_latency_nanoseconds` | 2000 ns | assumed (proxy-issued copy) |
//! | `proxy_entry_handling_nanoseconds` | 100 ns | assumed (host reads and decodes one ring entry) |

use std::fmt;
use std::iter::Sum;
use std::ops::{Add, AddAssign};

use crate::memory::MemoryKind;

/// A duration of simulated time. Integer nanoseconds so that sums are exact and deterministic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimulatedNanoseconds(pub u64);

impl Add for SimulatedNanoseconds {
    type Output = Self;
    fn add(self, other: Self) -> Self {
        Self(self.0.saturating_add(other.0))
    }
}

impl AddAssign for SimulatedNanoseconds {
    fn add_assign(&mut self, other: Self) {
        *self = *self + other;
    }
}

impl Sum for SimulatedNanoseconds {
    fn sum<I: Iterator<Item = Self>>(iter: I) -> Self {
        iter.fold(Self::default(), Add::add)
    }
}

impl fmt::Display for SimulatedNanoseconds {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{} ns", self.0)
    }
}

/// Latencies and bandwidths of the simulated machine; see the module table for defaults and
/// sources. Every field is public so that experiments can vary one at a time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CostModel {
    /// Bandwidth of SM stores to a peer GPU over NVLink.
    pub nvlink_store_bandwidth_bytes_per_second: u64,
    /// Time for an NVLink store to become visible at the peer.
    pub nvlink_one_way_latency_nanoseconds: u64,
    /// Time for a GPU store to host-pinned memory to become visible to the CPU (and back).
    pub gpu_host_one_way_latency_nanoseconds: u64,
    /// A posted 8-byte MMIO write to the NIC's UAR page.
    pub pcie_mmio_doorbell_write_nanoseconds: u64,
    /// Fixed cost of one NIC read over PCIe (a WQE fetch, the doorbell record).
    pub nic_wqe_fetch_latency_nanoseconds: u64,
    /// Bandwidth of the NIC's WQE reads (64 B per basic block).
    pub nic_wqe_fetch_bandwidth_bytes_per_second: u64,
    /// Link bandwidth of the NIC.
    pub nic_wire_bandwidth_bytes_per_second: u64,
    /// One-way latency between two NICs.
    pub nic_wire_one_way_latency_nanoseconds: u64,
    /// The NIC writing one 64-byte CQE into memory.
    pub nic_cqe_write_nanoseconds: u64,
    /// A GPU store to its own global memory becoming visible GPU-wide.
    pub gpu_global_store_nanoseconds: u64,
    /// A system-scope load from the GPU's own memory (packet unpacking pays one per round of
    /// loads issued together).
    pub gpu_system_load_nanoseconds: u64,
    /// A GPU-scope atomic on L2.
    pub gpu_scope_atomic_nanoseconds: u64,
    /// `fence.acq_rel.gpu` / `__threadfence()`.
    pub fence_gpu_nanoseconds: u64,
    /// `fence.sc.sys` / `__threadfence_system()`.
    pub fence_sys_nanoseconds: u64,
    /// Bandwidth of a copy-engine copy (the proxy's puts).
    pub copy_engine_bandwidth_bytes_per_second: u64,
    /// Launch latency of one copy-engine copy issued by the proxy thread.
    pub copy_engine_launch_latency_nanoseconds: u64,
    /// The proxy thread reading and decoding one ring entry.
    pub proxy_entry_handling_nanoseconds: u64,
}

impl Default for CostModel {
    fn default() -> Self {
        Self {
            nvlink_store_bandwidth_bytes_per_second: 368_000_000_000,
            nvlink_one_way_latency_nanoseconds: 700,
            gpu_host_one_way_latency_nanoseconds: 1625,
            pcie_mmio_doorbell_write_nanoseconds: 500,
            nic_wqe_fetch_latency_nanoseconds: 400,
            nic_wqe_fetch_bandwidth_bytes_per_second: 25_000_000_000,
            nic_wire_bandwidth_bytes_per_second: 25_000_000_000,
            nic_wire_one_way_latency_nanoseconds: 1500,
            nic_cqe_write_nanoseconds: 300,
            gpu_global_store_nanoseconds: 5,
            gpu_system_load_nanoseconds: 600,
            gpu_scope_atomic_nanoseconds: 300,
            fence_gpu_nanoseconds: 200,
            fence_sys_nanoseconds: 800,
            copy_engine_bandwidth_bytes_per_second: 395_000_000_000,
            copy_engine_launch_latency_nanoseconds: 2000,
            proxy_entry_handling_nanoseconds: 100,
        }
    }
}

/// `bytes` over a bandwidth, rounded up (a transfer of one byte still takes time).
fn transfer_nanoseconds(bytes: u64, bandwidth_bytes_per_second: u64) -> u64 {
    if bandwidth_bytes_per_second == 0 {
        return u64::MAX;
    }
    let nanoseconds =
        (u128::from(bytes) * 1_000_000_000).div_ceil(u128::from(bandwidth_bytes_per_second));
    u64::try_from(nanoseconds).unwrap_or(u64::MAX)
}

fn ns(nanoseconds: u64) -> SimulatedNanoseconds {
    SimulatedNanoseconds(nanoseconds)
}

impl CostModel {
    /// A GPU store of `bytes` becoming visible to other agents: local global memory, host-pinned
    /// memory (crossing PCIe), or a peer GPU (NVLink). `same_rank` is false for NVLink stores.
    pub fn gpu_store_visible(
        &self,
        same_rank: bool,
        destination: MemoryKind,
        bytes: u64,
    ) -> SimulatedNanoseconds {
        match (same_rank, destination) {
            (_, MemoryKind::HostPinned) => ns(self.gpu_host_one_way_latency_nanoseconds),
            (true, MemoryKind::Device) => ns(self.gpu_global_store_nanoseconds),
            (false, MemoryKind::Device) => self.nvlink_store(bytes),
        }
    }

    /// An NVLink store of `bytes` to a peer GPU, until visible there.
    pub fn nvlink_store(&self, bytes: u64) -> SimulatedNanoseconds {
        ns(self.nvlink_one_way_latency_nanoseconds
            + transfer_nanoseconds(bytes, self.nvlink_store_bandwidth_bytes_per_second))
    }

    /// A GPU-scope atomic.
    pub fn gpu_scope_atomic(&self) -> SimulatedNanoseconds {
        ns(self.gpu_scope_atomic_nanoseconds)
    }

    /// `fence.gpu`.
    pub fn fence_gpu(&self) -> SimulatedNanoseconds {
        ns(self.fence_gpu_nanoseconds)
    }

    /// `fence.sys`.
    pub fn fence_sys(&self) -> SimulatedNanoseconds {
        ns(self.fence_sys_nanoseconds)
    }

    /// The GPU's 8-byte UAR doorbell write.
    pub fn doorbell_mmio_write(&self) -> SimulatedNanoseconds {
        ns(self.pcie_mmio_doorbell_write_nanoseconds)
    }

    /// The NIC reading the QP doorbell record after a doorbell.
    pub fn nic_doorbell_record_read(&self) -> SimulatedNanoseconds {
        ns(self.nic_wqe_fetch_latency_nanoseconds)
    }

    /// The NIC fetching a WQE of `basic_blocks` 64-byte blocks.
    pub fn nic_wqe_fetch(&self, basic_blocks: u64) -> SimulatedNanoseconds {
        ns(self.nic_wqe_fetch_latency_nanoseconds
            + transfer_nanoseconds(
                basic_blocks * 64,
                self.nic_wqe_fetch_bandwidth_bytes_per_second,
            ))
    }

    /// An RDMA write of `bytes` until the data lands at the peer.
    pub fn nic_rdma_write(&self, bytes: u64) -> SimulatedNanoseconds {
        ns(self.nic_wire_one_way_latency_nanoseconds
            + transfer_nanoseconds(bytes, self.nic_wire_bandwidth_bytes_per_second))
    }

    /// An RDMA read of `bytes`: request out, data back.
    pub fn nic_rdma_read(&self, bytes: u64) -> SimulatedNanoseconds {
        ns(2 * self.nic_wire_one_way_latency_nanoseconds
            + transfer_nanoseconds(bytes, self.nic_wire_bandwidth_bytes_per_second))
    }

    /// An 8-byte remote atomic: request out, old value back.
    pub fn nic_atomic(&self) -> SimulatedNanoseconds {
        ns(2 * self.nic_wire_one_way_latency_nanoseconds
            + transfer_nanoseconds(16, self.nic_wire_bandwidth_bytes_per_second))
    }

    /// A DUMP WQE: the NIC reads `bytes` of local memory.
    pub fn nic_local_read(&self, bytes: u64) -> SimulatedNanoseconds {
        ns(self.nic_wqe_fetch_latency_nanoseconds
            + transfer_nanoseconds(bytes, self.nic_wqe_fetch_bandwidth_bytes_per_second))
    }

    /// A fenced WQE waiting for the earlier WQEs' acknowledgements (one wire round trip).
    pub fn nic_fence_wait(&self) -> SimulatedNanoseconds {
        ns(2 * self.nic_wire_one_way_latency_nanoseconds)
    }

    /// Writing a CQE, after the acknowledgement that makes it legal came back.
    pub fn nic_completion(&self) -> SimulatedNanoseconds {
        ns(self.nic_wire_one_way_latency_nanoseconds + self.nic_cqe_write_nanoseconds)
    }

    /// The proxy thread picking up one ring entry.
    pub fn proxy_entry_handling(&self) -> SimulatedNanoseconds {
        ns(self.proxy_entry_handling_nanoseconds)
    }

    /// A copy-engine copy of `bytes` issued by the proxy.
    pub fn copy_engine_copy(&self, bytes: u64) -> SimulatedNanoseconds {
        ns(self.copy_engine_launch_latency_nanoseconds
            + transfer_nanoseconds(bytes, self.copy_engine_bandwidth_bytes_per_second))
    }

    /// A host store (signal word, completion counter) reaching GPU memory over PCIe.
    pub fn host_store_to_device(&self) -> SimulatedNanoseconds {
        ns(self.gpu_host_one_way_latency_nanoseconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_follow_the_documented_defaults() {
        let model = CostModel::default();
        // 368 GB/s: 368 KB take 1 us on top of the latency.
        assert_eq!(model.nvlink_store(368_000), SimulatedNanoseconds(1700));
        assert_eq!(model.nic_wqe_fetch(1), SimulatedNanoseconds(400 + 3));
        assert_eq!(model.nic_rdma_write(25_000), SimulatedNanoseconds(2500));
        assert_eq!(model.copy_engine_copy(0), SimulatedNanoseconds(2000));
        assert_eq!(
            model.gpu_store_visible(true, MemoryKind::HostPinned, 8),
            SimulatedNanoseconds(1625)
        );
        let total: SimulatedNanoseconds = [model.fence_gpu(), model.fence_sys()].into_iter().sum();
        assert_eq!(total.to_string(), "1000 ns");
    }
}
