//! The host runtime of Aboleth: the rank bootstrap ([`bootstrap`]: rendezvous and blob exchange
//! over PyTorch's TCPStore protocol), the host side of the proxy command ring ([`proxy_ring`]),
//! and the GPU side behind the Python API ([`world::World`]): device memory registration, region
//! exchange into device tables, and the p2p, proxy and software-NIC mlx5 transports
//! ([`transport`], [`soft_nic`]).
//!
//! CUDA is reached through the driver API loaded at run time ([`cuda`]); the crate builds on a
//! machine without CUDA, and there creating a World fails with
//! [`RuntimeError::CudaDriverNotFound`]. The logic that needs no GPU (records, tables, bounds,
//! transport choice, proxy execution) lives in modules of its own ([`exchange`],
//! [`registration`], [`transport`], [`transport::proxy`]) and is tested on the CPU; the GPU
//! paths are checked by the `aboleth-runtime-gpu-check` binary (tests/gpu/README.md).
//!
//! What it does not contain yet: the mlx5 transport on a real NIC (DEVX queues, UAR mapping:
//! `connect_all("rdma")` runs mlx5 over the software NIC only, with `ABOLETH_RDMA_DEVICE=soft`,
//! and is refused with the reason otherwise), the Python bindings (crates/aboleth-python wraps [`world::World`]), and kernel
//! launching for user programs.

pub mod bootstrap;
pub mod cuda;
pub mod error;
pub mod exchange;
pub mod proxy_ring;
pub mod registration;
pub mod soft_nic;
pub mod transport;
pub mod wait_failure;
pub mod world;

pub use bootstrap::{BootstrapConfig, BootstrapError, TcpStoreBootstrap};
pub use error::{ErrorKind, RuntimeError, RuntimeResult};
pub use registration::{Region, Registration};
pub use transport::TransportRequest;
pub use world::{DeviceTable, ExchangedRegions, RankCollective, World, WorldOptions};
