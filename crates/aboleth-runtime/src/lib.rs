//! The host runtime of Aboleth, CPU side: the rank bootstrap ([`bootstrap`]: rendezvous and
//! blob exchange over PyTorch's TCPStore protocol) and the host side of the proxy command ring
//! ([`proxy_ring`]: the consumer the proxy thread runs, and a host producer speaking the GPU's
//! protocol).
//!
//! What it does not contain yet: CUDA (memory registration, IPC handles, pinned allocation,
//! the copy-engine executor), ibverbs, the `World` object and the Python bindings; those build
//! on these two modules.

pub mod bootstrap;
pub mod proxy_ring;

pub use bootstrap::{BootstrapConfig, BootstrapError, TcpStoreBootstrap};
