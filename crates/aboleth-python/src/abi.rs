//! What Python needs from `aboleth-abi`'s layouts: `packet_staging_bytes`, the staging bytes a
//! flag region of packet signals needs after it ([`aboleth_abi::packet::staging_bytes`]).
//!
//! What it does not do: define a layout (only `aboleth-abi` does).

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
