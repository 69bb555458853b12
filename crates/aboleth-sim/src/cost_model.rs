//! Simulated time: the latencies and bandwidths of every action the simulator models, and the
//! cost of each action in [`SimulatedNanoseconds`], with two measured profiles.
//!
//! What it models: a fixed latency plus a size over a bandwidth for each kind of action. What it
//! does not model: contention (two ranks' copies sharing one GPU's HBM, the copy engines, the
//! proxy thread's CPU), queueing, overlap of independent actions, how many warps a program has,
//! how a copy is tiled, clocks of different agents drifting, or caches; the simulator is a
//! reference for behaviour, and its time is an estimate for comparing lowerings, not a
//! performance prediction. How far it is from measured time is stated, per profile, transport
//! and size, in docs/SIMULATOR.md ("Calibration") and checked by
//! `crates/aboleth-sim/tests/calibration.rs` against the committed measurements.
//!
//! Profiles ([`CostModel::named`], `aboleth sim --cost-model NAME`):
//! - `h200-nvlink` ([`CostModel::default`], [`CostModel::h200_nvlink`]): two H200 over NVLink
//!   (`nvidia-h200-x2`), from `tests/gpu/results/2026-11-30-*-nvidia-h200-x2.json` and DESIGN.md §6.
//! - `h200-two-ranks-one-gpu-mps` ([`CostModel::h200_two_ranks_one_gpu_mps`]): two ranks on one
//!   H200 under CUDA MPS (peer memory is the same GPU's HBM, not NVLink), from
//!   `experiments/bench/results/2026-12-02-bench-nvidia-h200-2ranks-mps-final.json`
//!   (called BENCH below; rows are `suite alltoall, system aboleth, transport T, variant V,
//!   num_warps 4` unless named otherwise: 4 warps is Triton's default, the seed's launch).
//!
//! How the simulator spends them on the seed's all-to-all (examples/ir/alltoall.abo, 2 ranks),
//! which is how a round time determines a parameter: p2p passes on, a round is
//! `2 x peer_store_one_way_latency + bytes / peer_store_bandwidth` (the copy until visible at the
//! peer, then the flag's flight); proxy passes on, it is `4 x gpu_host_one_way_latency +
//! copy_engine_launch_latency + bytes / copy_engine_bandwidth + 2 x proxy_entry_handling +
//! fence_gpu + 8 x gpu_global_store` (doorbell to the host, the copy, the signal and the
//! completion counter back). Passes off adds fences and atomics (assumed costs).
//!
//! | parameter | `h200-nvlink` (default) | `h200-two-ranks-one-gpu-mps` | source |
//! | --- | --- | --- | --- |
//! | `peer_store_bandwidth_bytes_per_second` | 36.6 GB/s | 36.0 GB/s | measured, one program (one CTA of 4 warps) copying to its peer: nvlink: `2026-11-30-seed-alltoall-nvidia-h200-x2.json` sizes, slowest rank's launch medians, 3 MiB / (123.36 us at 4 MiB - 37.33 us at 1 MiB); the launch overhead cancels. mps: BENCH p2p passes-on, 3 MiB / (139.87 us at 4 MiB - 52.48 us at 1 MiB). Not the 368 GB/s of >= 66 CTAs (DESIGN.md §6): the simulator has no contention, so the bandwidth is one program's |
//! | `peer_store_one_way_latency_nanoseconds` | 1260 ns | 589 ns | measured: nvlink: `2026-11-30-packet-latency-nvidia-h200-x2.json` release_store 8 B, 5.048 us ping-pong round trip / 2 = 2.524 us one way = 2 x latency; mps: BENCH p2p passes-on 8 B round 1.177 us = 2 x latency |
//! | `gpu_host_one_way_latency_nanoseconds` | 1625 ns | 1021 ns | measured: nvlink: DESIGN.md §6 flag round trip 3.25 us / 2; mps: BENCH `system flag-round-trip` row, 2.043 us / 2 |
//! | `copy_engine_bandwidth_bytes_per_second` | 395 GB/s | 129 GB/s | measured: nvlink: DESIGN.md §6 (copy engine GPU0 -> GPU1); mps: BENCH proxy passes-on, (4 MiB - 8 B) / (55.32 us - 22.82 us) |
//! | `copy_engine_launch_latency_nanoseconds` | 18290 ns | 18290 ns | measured on mps: BENCH proxy passes-on 8 B round 22.82 us minus the modelled rest (4 x 1021 + 2 x 100 + 200 + 40 ns): the proxy thread issuing a copy and waiting for it. nvlink: the same figure (the host software is the same; the x2 files time whole launches only, which `calibration.rs` checks it against) |
//! | `pcie_mmio_doorbell_write_nanoseconds` | 500 ns | 500 ns | assumed (no NIC measured) |
//! | `nic_wqe_fetch_latency_nanoseconds` | 400 ns | 400 ns | assumed (one PCIe read by the NIC) |
//! | `nic_wqe_fetch_bandwidth_bytes_per_second` | 25 GB/s | 25 GB/s | assumed (64 B per basic block) |
//! | `nic_wire_bandwidth_bytes_per_second` | 25 GB/s | 25 GB/s | assumed (200 Gb/s NIC) |
//! | `nic_wire_one_way_latency_nanoseconds` | 1500 ns | 1500 ns | assumed |
//! | `nic_cqe_write_nanoseconds` | 300 ns | 300 ns | assumed (one posted PCIe write of 64 B) |
//! | `gpu_global_store_nanoseconds` | 5 ns | 5 ns | assumed |
//! | `gpu_system_load_nanoseconds` | 600 ns | 600 ns | assumed (an `ld.relaxed.sys` from local HBM, past L1; dependent loads pay it one after another) |
//! | `gpu_scope_atomic_nanoseconds` | 300 ns | 300 ns | assumed (anchors §9: "a few hundred ns uncontended"); also charged for atomics on host-pinned proxy rings, which cost more |
//! | `fence_gpu_nanoseconds` | 200 ns | 200 ns | assumed |
//! | `fence_sys_nanoseconds` | 800 ns | 800 ns | assumed (the measured passes-off minus passes-on p2p rounds suggest less under MPS) |
//! | `proxy_entry_handling_nanoseconds` | 100 ns | 100 ns | assumed (host reads and decodes one ring entry) |

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
    /// Bandwidth of one program's stores (a p2p copy by one CTA) into a peer rank's memory:
    /// over NVLink between GPUs, the same GPU's HBM under MPS. Per program, because the
    /// simulator has no contention.
    pub peer_store_bandwidth_bytes_per_second: u64,
    /// Time for a store into a peer rank's memory to become visible there.
    pub peer_store_one_way_latency_nanoseconds: u64,
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
    /// The `h200-nvlink` profile ([`CostModel::h200_nvlink`]).
    fn default() -> Self {
        Self::h200_nvlink()
    }
}

impl CostModel {
    /// The profiles [`CostModel::named`] knows, default first.
    pub const PROFILE_NAMES: [&'static str; 2] = ["h200-nvlink", "h200-two-ranks-one-gpu-mps"];

    /// The profile called `name` (one of [`CostModel::PROFILE_NAMES`]), or `None`.
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "h200-nvlink" => Some(Self::h200_nvlink()),
            "h200-two-ranks-one-gpu-mps" => Some(Self::h200_two_ranks_one_gpu_mps()),
            _ => None,
        }
    }

    /// Two H200 over NVLink (`nvidia-h200-x2`); the default. Measured values and their sources
    /// are in the module table; the rest are assumed.
    pub fn h200_nvlink() -> Self {
        Self {
            peer_store_bandwidth_bytes_per_second: 36_600_000_000,
            peer_store_one_way_latency_nanoseconds: 1260,
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
            copy_engine_launch_latency_nanoseconds: 18_290,
            proxy_entry_handling_nanoseconds: 100,
        }
    }

    /// Two ranks on one H200 under CUDA MPS (`nvidia-h200` with `NPROC=2`): peer memory is the
    /// same GPU's HBM, not NVLink. Measured values and their sources are in the module table;
    /// the rest are the assumed values of [`CostModel::h200_nvlink`].
    pub fn h200_two_ranks_one_gpu_mps() -> Self {
        Self {
            peer_store_bandwidth_bytes_per_second: 36_000_000_000,
            peer_store_one_way_latency_nanoseconds: 589,
            gpu_host_one_way_latency_nanoseconds: 1021,
            copy_engine_bandwidth_bytes_per_second: 129_000_000_000,
            copy_engine_launch_latency_nanoseconds: 18_290,
            ..Self::h200_nvlink()
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
    /// memory (crossing PCIe), or a peer rank's memory. `same_rank` is false for peer stores.
    pub fn gpu_store_visible(
        &self,
        same_rank: bool,
        destination: MemoryKind,
        bytes: u64,
    ) -> SimulatedNanoseconds {
        match (same_rank, destination) {
            (_, MemoryKind::HostPinned) => ns(self.gpu_host_one_way_latency_nanoseconds),
            (true, MemoryKind::Device) => ns(self.gpu_global_store_nanoseconds),
            (false, MemoryKind::Device) => self.peer_store(bytes),
        }
    }

    /// One program's stores of `bytes` into a peer rank's memory, until visible there.
    pub fn peer_store(&self, bytes: u64) -> SimulatedNanoseconds {
        ns(self.peer_store_one_way_latency_nanoseconds
            + transfer_nanoseconds(bytes, self.peer_store_bandwidth_bytes_per_second))
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
        assert_eq!(model, CostModel::h200_nvlink());
        // 36.6 GB/s: 36.6 KB take 1 us on top of the latency.
        assert_eq!(model.peer_store(36_600), SimulatedNanoseconds(1260 + 1000));
        assert_eq!(model.nic_wqe_fetch(1), SimulatedNanoseconds(400 + 3));
        assert_eq!(model.nic_rdma_write(25_000), SimulatedNanoseconds(2500));
        assert_eq!(model.copy_engine_copy(0), SimulatedNanoseconds(18_290));
        assert_eq!(
            model.gpu_store_visible(true, MemoryKind::HostPinned, 8),
            SimulatedNanoseconds(1625)
        );
        let total: SimulatedNanoseconds = [model.fence_gpu(), model.fence_sys()].into_iter().sum();
        assert_eq!(total.to_string(), "1000 ns");
    }

    #[test]
    fn every_profile_name_gives_its_profile() {
        assert_eq!(
            CostModel::named(CostModel::PROFILE_NAMES[0]),
            Some(CostModel::default())
        );
        let mps = CostModel::named("h200-two-ranks-one-gpu-mps").expect("a profile");
        assert_eq!(mps, CostModel::h200_two_ranks_one_gpu_mps());
        assert_eq!(mps.gpu_host_one_way_latency_nanoseconds, 1021);
        // What is not measured under MPS is the NVLink profile's assumption.
        assert_eq!(
            mps.fence_sys_nanoseconds,
            CostModel::default().fence_sys_nanoseconds
        );
        assert_eq!(CostModel::named("h200"), None);
        for name in CostModel::PROFILE_NAMES {
            assert!(CostModel::named(name).is_some(), "{name}");
        }
    }
}
