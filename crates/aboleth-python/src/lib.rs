//! `aboleth._aboleth`: the Python extension module through which the Triton stage hook
//! (`python/aboleth/hook.py`) reaches the Rust side. Built by maturin (`pyproject.toml` at the
//! repository root), abi3 for CPython 3.11 and later.
//!
//! It exposes:
//! - `version() -> str`: this crate's version;
//! - `packet_staging_bytes(length) -> int`: staging bytes after a flag region of packet signals;
//! - `transports()` and `connect_kinds()`: the transport vocabulary (`aboleth_abi::Transport`),
//!   which `aboleth.TARGETS` and `aboleth.runtime.TRANSPORT_KINDS` are read from;
//! - `run_stage(ttir_text: str, config_json: str) -> (str, str)`: the `aboleth` stage
//!   ([`stage::run_stage`]), run with the GIL released. Errors become Python exceptions: a bad
//!   configuration, TTIR that does not parse, or communication that cannot be compiled raises
//!   `ValueError` with the `file:line:column: error: ...` message at the kernel's line; a request
//!   whose code generation does not exist raises `NotImplementedError`.
//! - `check_config(config_json)`: raises `ValueError` for a configuration the stage refuses;
//! - `run_command_line(arguments, python_interpreter) -> int`: the whole `aboleth` command line
//!   (`aboleth-cli`), which the package installs as the `aboleth` script and runs as
//!   `python -m aboleth`;
//! - the host runtime's classes ([`runtime`]): `TcpStoreBootstrap`, `World` (integer addresses;
//!   `python/aboleth/runtime.py` wraps it for tensors), `Registration`, `Region`,
//!   `ExchangedRegions`, `LocalRegion`, `DeviceTable`.
//!
//! This crate is deliberately thin: it converts arguments, results and errors and holds no
//! compiler or runtime logic.

pub mod runtime;
pub mod stage;

use pyo3::exceptions::{PyNotImplementedError, PyValueError};
use pyo3::prelude::*;

use crate::stage::StageError;

/// The version of the aboleth Rust side (the `aboleth-python` crate).
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// packet_staging_bytes(length) -> int: the bytes a flag region of `length` bytes needs after
/// it for packet slots (`world.region(..., packet_slots=True)`).
#[pyfunction]
fn packet_staging_bytes(length: u64) -> PyResult<u64> {
    use aboleth_abi::packet::{FLAG_BYTES, SLOT_BYTES};
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
fn transports() -> Vec<(&'static str, &'static str, bool, bool)> {
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

/// connect_kinds() -> list of str: what `World.connect_all(kind)` accepts
/// (`aboleth_runtime::TransportRequest::names`).
#[pyfunction]
fn connect_kinds() -> Vec<&'static str> {
    aboleth_runtime::TransportRequest::names()
}

/// run_stage(ttir_text, config_json) -> (ttir_text, summary_json)
///
/// Runs the aboleth stage on TTIR text as Triton 3.6's `module.str()` prints it. The
/// configuration is a JSON object: `target` ("mlx5", "proxy" or "p2p"), and optionally
/// `passes_off` (bool), `disabled_passes` (list of pass names) and `source_name` (the file name
/// that TTIR positions are reported under). The GIL is released while it runs.
///
/// A module without aboleth extern calls comes back unchanged with a JSON summary; a module with
/// some comes back with the communication compiled for the target. Raises ValueError for a bad
/// configuration, TTIR that does not parse or communication that cannot be compiled (located at
/// the kernel's Python line).
#[pyfunction]
fn run_stage(py: Python<'_>, ttir_text: String, config_json: String) -> PyResult<(String, String)> {
    py.detach(move || stage::run_stage(&ttir_text, &config_json))
        .map(|output| (output.ttir, output.summary_json))
        .map_err(|error| match error {
            StageError::NotBuilt { .. } => PyNotImplementedError::new_err(error.to_string()),
            StageError::Config(_) | StageError::Parse(_) | StageError::Compile(_) => {
                PyValueError::new_err(error.to_string())
            }
        })
}

/// check_config(config_json) -> None: raises ValueError when the stage configuration is one
/// the stage would refuse (unknown pass, an option that cannot take effect for the target).
#[pyfunction]
fn check_config(config_json: &str) -> PyResult<()> {
    stage::check_config(config_json).map_err(|error| PyValueError::new_err(error.to_string()))
}

/// run_command_line(arguments, python_interpreter) -> int: the `aboleth` command line
/// (`aboleth_cli::run_command_line`; `arguments[0]` is the program name), with Triton kernels
/// compiled by `python_interpreter`. Prints to the process's standard output and error, and
/// returns the exit status. The GIL is released while it runs.
#[pyfunction]
fn run_command_line(py: Python<'_>, arguments: Vec<String>, python_interpreter: String) -> i32 {
    py.detach(move || aboleth_cli::run_command_line(arguments, Some(python_interpreter)))
}

/// The Rust side of aboleth's Triton bridge (see `docs/TRITON_BRIDGE.md`).
#[pymodule(name = "_aboleth")]
mod python_module {
    #[pymodule_export]
    use super::{
        check_config, connect_kinds, packet_staging_bytes, run_command_line, run_stage, transports,
        version,
    };

    #[pymodule_export]
    use crate::runtime::{
        PyDeviceTable, PyExchangedRegions, PyLocalRegion, PyRegion, PyRegistration,
        PyTcpStoreBootstrap, PyWorld,
    };
}
