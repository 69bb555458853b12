//! Host/device shared layouts, defined once: read by codegen, runtime and simulator alike.
//!
//! Every struct that crosses the host/device boundary or is read by a NIC lives here as a
//! `#[repr(C)]` type whose size and field offsets are asserted at compile time, with a safe
//! `to_bytes`/`from_bytes` pair and typed decoding errors:
//! - [`efa`]: the RDMA-write send WQE and the completion descriptors of AWS EFA (SRD), encoded
//!   and decoded byte-exactly (cross-checked against rdma-core's `efa_io_defs.h`);
//! - [`ionic`]: the send WQEs, completions and doorbell value of AMD Pensando Ionic NICs
//!   (cross-checked against rdma-core's `ionic_fw_types.h`);
//! - [`mlx5`]: work queue entries, completion queue entries and doorbells of ConnectX NICs,
//!   encoded and decoded byte-exactly (cross-checked against rdma-core's `mlx5dv.h`);
//! - [`proxy`]: the host-proxy command ring;
//! - [`region`]: remote and local memory region descriptors;
//! - [`transport`]: the one transport enum every layer uses (names, wire code, which are lowered
//!   and which have a runtime);
//! - [`endpoint`]: per-peer endpoint handles;
//! - [`packet`]: NVLink flag-in-data packets and the staging slots they land in;
//! - [`device_library`]: the tier-1 library's arguments (`DeviceContext`, `RemoteRegion`), and
//!   [`c_declarations`]: the C++ declarations of these layouts, written from their field lists.
//!
//! This crate holds layouts and pure encode/decode functions only: no I/O, no synchronisation, no
//! dependency on CUDA, ibverbs or Python.

mod wire;

pub mod c_declarations;
pub mod device_library;
pub mod efa;
pub mod endpoint;
pub mod ionic;
pub mod mlx5;
pub mod packet;
pub mod proxy;
pub mod region;
pub mod transport;
pub mod wait_failure;

pub use endpoint::{EndpointError, EndpointHandle, Mlx5QueueManagement};
pub use proxy::{ProxyCommand, ProxyRingEntry, ProxyRingHeader};
pub use region::{LocalRegionDescriptor, RemoteRegionDescriptor};
pub use transport::{Transport, TransportCodeError};
pub use wait_failure::{WaitFailureLogHeader, WaitFailureRecord};
pub use wire::{Be16, Be32, Be64, Field};
