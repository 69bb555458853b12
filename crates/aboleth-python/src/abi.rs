//! What Python needs from `aboleth-abi`: `packet_staging_bytes`, the staging bytes a flag region
//! of packet signals needs after it ([`aboleth_abi::packet::staging_bytes`]), `transports`,
//! the transport vocabulary ([`aboleth_abi::Transport`]) that `aboleth.TARGETS` and the
//! runtime's list are read from, and the bytes of the tier-1 library's by-value arguments
//! (`device_context_bytes`, `remote_region_bytes`, `local_region_bytes`: what
//! `aboleth.device_library` passes to kernels).
//!
//! What it does not do: define a layout or a transport (only `aboleth-abi` does).

use aboleth_abi::packet::{FLAG_BYTES, SLOT_BYTES};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// packet_staging_bytes(length) -> int: the bytes a flag region of `length` bytes needs after
/// it for packet slots (`world.region(..., packet_slots=True)`).
#[pyfunction]
pub fn packet_staging_bytes(length: u64) -> PyResult<u64> {
    if !length.is_multiple_of(FLAG_BYTES) || (length / FLAG_BYTES).checked_mul(SLOT_BYTES).is_none()
    {
        return Err(PyValueError::new_err(format!(
            "aboleth: packet_staging_bytes({length}): a flag region holds whole 8-byte flags, at most {} of them",
            u64::MAX / SLOT_BYTES
        )));
    }
    Ok(aboleth_abi::packet::staging_bytes(length))
}

/// transports() -> list of (name, runtime_name, lowered, has_runtime): every transport of
/// `aboleth_abi::Transport`, in wire-code order (`aboleth.TARGETS` are the lowered ones' names;
/// `runtime_name` is what `connect_all` calls it: "rdma" for mlx5).
#[pyfunction]
pub fn transports() -> Vec<(&'static str, &'static str, bool, bool)> {
    aboleth_abi::Transport::ALL
        .into_iter()
        .map(|transport| {
            (
                transport.name(),
                transport.runtime_name(),
                transport.is_lowered(),
                transport.has_runtime(),
            )
        })
        .collect()
}

/// device_context_bytes(endpoint_handles_address, rank, world_size) -> bytes: an
/// `aboleth::DeviceContext` ([`aboleth_abi::device_library::DeviceContext`]).
#[pyfunction]
pub fn device_context_bytes(endpoint_handles_address: u64, rank: u32, world_size: u32) -> Vec<u8> {
    aboleth_abi::device_library::DeviceContext {
        endpoint_handles_address,
        rank,
        world_size,
    }
    .to_bytes()
    .to_vec()
}

/// remote_region_bytes(descriptors_address, offset_bytes) -> bytes: an `aboleth::RemoteRegion`
/// ([`aboleth_abi::device_library::RemoteRegion`]).
#[pyfunction]
pub fn remote_region_bytes(descriptors_address: u64, offset_bytes: u64) -> Vec<u8> {
    aboleth_abi::device_library::RemoteRegion {
        descriptors_address,
        offset_bytes,
    }
    .to_bytes()
    .to_vec()
}

/// local_region_bytes(address, lkey) -> bytes: an `aboleth::LocalRegion`
/// ([`aboleth_abi::LocalRegionDescriptor`]).
#[pyfunction]
pub fn local_region_bytes(address: u64, lkey: u32) -> Vec<u8> {
    aboleth_abi::LocalRegionDescriptor {
        address,
        lkey,
        reserved: 0,
    }
    .to_bytes()
    .to_vec()
}
