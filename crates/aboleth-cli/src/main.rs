//! The `aboleth` binary: the command line of [`aboleth_cli`], run with this process's arguments.
//! The same command line is what the Python package installs as `aboleth` (and runs as
//! `python -m aboleth`), through the extension module.

use std::process::ExitCode;

fn main() -> ExitCode {
    let status = aboleth_cli::run_command_line(std::env::args_os(), None);
    ExitCode::from(u8::try_from(status).unwrap_or(1))
}
