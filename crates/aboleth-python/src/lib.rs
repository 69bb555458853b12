//! `aboleth._aboleth`: the Python extension module through which the `aboleth` package
//! (`python/aboleth`) reaches the Rust side. Built by maturin (`pyproject.toml` at the
//! repository root), abi3 for CPython 3.11 and later; its type stubs are
//! `python/aboleth/_aboleth.pyi`, generated from this crate (`tests/python_stubs.rs`).
//!
//! This file only registers; each file mirrors the core crate it converts for:
//! - `config.rs`: `PipelineOptions`, the stage's configuration (`aboleth-passes`' pipeline
//!   options, checked there);
//! - `stage.rs`: `run_stage` and `version` (the Triton stage, `aboleth-codegen`);
//! - `runtime.rs`: `TcpStoreBootstrap`, `World` and what they return, and `connect_kinds`
//!   (`aboleth-runtime`);
//! - `command_line.rs`: `run_command_line` (`aboleth-cli`);
//! - `abi.rs`: `packet_staging_bytes` and `transports`, the transport vocabulary that
//!   `aboleth.TARGETS` is read from (`aboleth-abi`).
//!
//! The crate is deliberately thin: it converts arguments, results and errors and holds no
//! compiler or runtime logic.

pub mod abi;
pub mod command_line;
pub mod config;
pub mod runtime;
pub mod stage;

use pyo3::prelude::*;

/// The Rust side of aboleth's Triton bridge (see `docs/TRITON_BRIDGE.md`) and host runtime.
#[pymodule(name = "_aboleth")]
mod python_module {
    #[pymodule_export]
    use crate::abi::{
        decode_mlx5_wqe_in_ring, device_context_bytes, layout_bytes, layout_fields,
        local_region_bytes, packet_staging_bytes, remote_region_bytes, transports,
    };
    #[pymodule_export]
    use crate::command_line::run_command_line;
    #[pymodule_export]
    use crate::config::PyPipelineOptions;
    #[pymodule_export]
    use crate::runtime::{
        PyDeviceTable, PyExchangedRegions, PyLocalRegion, PyRegion, PyRegistration,
        PyTcpStoreBootstrap, PyWorld, connect_kinds,
    };
    #[pymodule_export]
    use crate::stage::{device_library, python_run_stage, version};
}
