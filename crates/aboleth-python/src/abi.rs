//! What Python needs from `aboleth-abi`: `packet_staging_bytes`, the staging bytes a flag region
//! of packet signals needs after it ([`aboleth_abi::packet::staging_bytes`]), `transports`,
//! the transport vocabulary ([`aboleth_abi::Transport`]) that `aboleth.TARGETS` and the
//! runtime's list are read from, and the bytes of the tier-1 library's by-value arguments
//! (`device_context_bytes`, `remote_region_bytes`, `local_region_bytes`: what
//! `aboleth.device_library` passes to kernels), and, for GPU checks that stand in for a runtime
//! this machine lacks, `layout_bytes` (a handle or descriptor with chosen fields) and
//! `decode_mlx5_wqe_in_ring` (what a generated WQE says, by the abi's decoder).
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

/// transports() -> list of (name, runtime_name, lowered, generated, has_runtime): every
/// transport of `aboleth_abi::Transport`, in wire-code order (`lowered`: the pipeline lowers it,
/// so a Triton kernel's statistics and lowered IR can be planned for it; `generated`: Triton
/// kernels compile for it, and `aboleth.TARGETS` are those names; efa is lowered and simulated
/// but not generated; `runtime_name` is what `connect_all` calls it: "rdma" for mlx5).
#[pyfunction]
pub fn transports() -> Vec<(&'static str, &'static str, bool, bool, bool)> {
    aboleth_abi::Transport::ALL
        .into_iter()
        .map(|transport| {
            (
                transport.name(),
                transport.runtime_name(),
                transport.is_lowered(),
                transport.has_code_generation(),
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

/// The [`aboleth_abi::Field`] list and size of a layout a host-side test builds by hand.
fn layout(name: &str) -> Option<(&'static [aboleth_abi::Field], usize)> {
    use aboleth_abi::mlx5::doorbell::{DoorbellRecord, UarDoorbell};
    use aboleth_abi::{
        EndpointHandle, LocalRegionDescriptor, Mlx5QueueManagement, RemoteRegionDescriptor,
        WaitFailureLogHeader, WaitFailureRecord,
    };
    match name {
        "WaitFailureLogHeader" => Some((
            WaitFailureLogHeader::FIELDS,
            WaitFailureLogHeader::SIZE_BYTES,
        )),
        "WaitFailureRecord" => Some((WaitFailureRecord::FIELDS, WaitFailureRecord::SIZE_BYTES)),
        "Mlx5QueueManagement" => {
            Some((Mlx5QueueManagement::FIELDS, Mlx5QueueManagement::SIZE_BYTES))
        }
        "Mlx5DoorbellRecord" => Some((DoorbellRecord::FIELDS, DoorbellRecord::SIZE_BYTES)),
        "Mlx5UarDoorbell" => Some((UarDoorbell::FIELDS, UarDoorbell::SIZE_BYTES)),
        "EndpointHandle" => Some((EndpointHandle::FIELDS, EndpointHandle::SIZE_BYTES)),
        "RemoteRegionDescriptor" => Some((
            RemoteRegionDescriptor::FIELDS,
            RemoteRegionDescriptor::SIZE_BYTES,
        )),
        "LocalRegionDescriptor" => Some((
            LocalRegionDescriptor::FIELDS,
            LocalRegionDescriptor::SIZE_BYTES,
        )),
        _ => None,
    }
}

const LAYOUT_NAMES: &str = "EndpointHandle, RemoteRegionDescriptor, LocalRegionDescriptor, WaitFailureLogHeader, WaitFailureRecord, Mlx5QueueManagement, Mlx5DoorbellRecord, Mlx5UarDoorbell";

fn known_layout(function: &str, name: &str) -> PyResult<(&'static [aboleth_abi::Field], usize)> {
    layout(name).ok_or_else(|| {
        PyValueError::new_err(format!(
            "aboleth: {function}: no layout {name:?} ({LAYOUT_NAMES})"
        ))
    })
}

/// layout_bytes(name, fields) -> bytes: the bytes of layout `name` (an `aboleth-abi` struct:
/// `EndpointHandle`, `RemoteRegionDescriptor`, `WaitFailureLogHeader`, ...) with the integer
/// fields in `fields` set (by their names) and every other byte zero: for GPU checks that stand
/// in for a runtime this machine lacks (an mlx5 endpoint without a NIC,
/// `tests/gpu/tier1_mlx5_wqes.py`).
#[pyfunction]
pub fn layout_bytes(
    name: &str,
    fields: std::collections::HashMap<String, u64>,
) -> PyResult<Vec<u8>> {
    let (layout_fields, size_bytes) = known_layout("layout_bytes", name)?;
    let mut bytes = vec![0u8; size_bytes];
    for (field_name, value) in fields {
        let Some(field) = layout_fields.iter().find(|field| field.name == field_name) else {
            let names: Vec<&str> = layout_fields.iter().map(|field| field.name).collect();
            return Err(PyValueError::new_err(format!(
                "aboleth: layout_bytes: {name} has no field {field_name:?} (it has {})",
                names.join(", ")
            )));
        };
        let width = match field.rust_type {
            "u32" => 4,
            "u64" | "i64" => 8,
            other => {
                return Err(PyValueError::new_err(format!(
                    "aboleth: layout_bytes: {name}.{field_name} is {other}, not an integer this sets"
                )));
            }
        };
        if width == 4 && value > u64::from(u32::MAX) {
            return Err(PyValueError::new_err(format!(
                "aboleth: layout_bytes: {name}.{field_name} = {value} does not fit 32 bits"
            )));
        }
        bytes[field.offset_bytes..field.offset_bytes + width]
            .copy_from_slice(&value.to_le_bytes()[..width]);
    }
    Ok(bytes)
}

/// layout_fields(name, data) -> dict: the integer fields of layout `name` (see `layout_bytes`)
/// read from `data` (little-endian, or big-endian for the `Be*` fields of mlx5 layouts); byte
/// arrays are left out. `ValueError` when `data` is not the layout's size.
#[pyfunction]
pub fn layout_fields(
    name: &str,
    data: &[u8],
) -> PyResult<std::collections::BTreeMap<&'static str, u64>> {
    let (layout_fields, size_bytes) = known_layout("layout_fields", name)?;
    if data.len() != size_bytes {
        return Err(PyValueError::new_err(format!(
            "aboleth: layout_fields: {name} is {size_bytes} bytes, not {}",
            data.len()
        )));
    }
    let mut fields = std::collections::BTreeMap::new();
    for field in layout_fields {
        let bytes = &data[field.offset_bytes..field.offset_bytes + field.size_bytes];
        let mut word = [0u8; 8];
        let value = match field.rust_type {
            "u8" | "u16" | "u32" | "u64" | "i32" | "i64" => {
                word[..bytes.len()].copy_from_slice(bytes);
                u64::from_le_bytes(word)
            }
            "Be16" | "Be32" | "Be64" => {
                word[8 - bytes.len()..].copy_from_slice(bytes);
                u64::from_be_bytes(word)
            }
            _ => continue,
        };
        fields.insert(field.name, value);
    }
    Ok(fields)
}

/// decode_mlx5_wqe_in_ring(ring, ring_basic_block_count, basic_block_index) -> (operation,
/// fields): the WQE at that basic block of a send ring, decoded by `aboleth-abi`
/// ([`aboleth_abi::mlx5::wqe::decode_wqe_in_ring`]): the operation's name (`Nop`, `RdmaWrite`,
/// `RdmaWriteImmediate`, `AtomicFetchAdd`, `MaskedCompareSwap64`, or the decoder's name of any
/// other) and its control and operand fields as integers. `ValueError` for bytes that are no
/// WQE.
#[pyfunction]
pub fn decode_mlx5_wqe_in_ring(
    ring: &[u8],
    ring_basic_block_count: u32,
    basic_block_index: u32,
) -> PyResult<(String, std::collections::BTreeMap<&'static str, u64>)> {
    use aboleth_abi::mlx5::wqe::{WqeOperation, WritePayload, decode_wqe_in_ring};
    let decoded =
        decode_wqe_in_ring(ring, ring_basic_block_count, basic_block_index).map_err(|error| {
            PyValueError::new_err(format!(
                "aboleth: no WQE at basic block {basic_block_index}: {error}"
            ))
        })?;
    let control = decoded.control;
    let mut fields = std::collections::BTreeMap::from([
        ("opcode", u64::from(control.opcode)),
        ("opmod", u64::from(control.opmod)),
        ("wqe_index", u64::from(control.wqe_index)),
        ("qpn", u64::from(control.qpn)),
        ("ds", u64::from(control.ds)),
        ("fm_ce_se", u64::from(control.fm_ce_se)),
        ("immediate", u64::from(control.immediate)),
    ]);
    let mut remote = |address: u64, rkey: u32| {
        fields.insert("remote_address", address);
        fields.insert("rkey", u64::from(rkey));
    };
    let (name, result) = match &decoded.operation {
        WqeOperation::Nop => ("Nop".to_string(), None),
        WqeOperation::RdmaWrite {
            remote: target,
            payload,
            with_immediate,
        } => {
            remote(target.address, target.rkey);
            let name = if *with_immediate {
                "RdmaWriteImmediate"
            } else {
                "RdmaWrite"
            };
            match payload {
                WritePayload::Gather(buffers) if buffers.len() == 1 => {
                    (name.to_string(), Some(buffers[0]))
                }
                other => (format!("{name}:{other:?}"), None),
            }
        }
        WqeOperation::AtomicFetchAdd {
            remote: target,
            add,
            result,
        } => {
            remote(target.address, target.rkey);
            fields.insert("add", *add);
            ("AtomicFetchAdd".to_string(), Some(*result))
        }
        WqeOperation::MaskedCompareSwap64 {
            remote: target,
            operands,
            result,
        } => {
            remote(target.address, target.rkey);
            fields.insert("swap", operands.swap);
            fields.insert("compare", operands.compare);
            fields.insert("swap_mask", operands.swap_mask);
            fields.insert("compare_mask", operands.compare_mask);
            ("MaskedCompareSwap64".to_string(), Some(*result))
        }
        other => (format!("{other:?}"), None),
    };
    if let Some(buffer) = result {
        fields.insert("local_address", buffer.address);
        fields.insert("lkey", u64::from(buffer.lkey));
        fields.insert("length_bytes", u64::from(buffer.length_bytes));
    }
    Ok((name, fields))
}
