//! `run_command_line`: the whole `aboleth` command line ([`aboleth_cli::run_command_line`]), which
//! the Python package runs as its `aboleth` script and as `python -m aboleth`
//! (`python/aboleth/cli.py`).
//!
//! What it does not do: parse or decide anything about the command line (`aboleth-cli` does).

use pyo3::prelude::*;

/// run_command_line(arguments, python_interpreter) -> int: the `aboleth` command line
/// (`arguments[0]` is the program name), with Triton kernels compiled by `python_interpreter`.
/// Prints to the process's standard output and error, and returns the exit status. The GIL is
/// released while it runs.
#[pyfunction]
pub fn run_command_line(py: Python<'_>, arguments: Vec<String>, python_interpreter: String) -> i32 {
    py.detach(move || aboleth_cli::run_command_line(arguments, Some(python_interpreter)))
}
