//! `aboleth-bootstrap-probe`: joins a job's bootstrap from the environment (`MASTER_ADDR`,
//! `MASTER_PORT`, `RANK`, `WORLD_SIZE`, and the optional variables of
//! [`aboleth_runtime::BootstrapConfig::from_lookup`]), all-gathers one line per rank, prints
//! what it gathered, and exits 0; on failure it prints the error to stderr and exits 1.
//!
//! Use it to check a launch environment (run it under `torchrun --nproc-per-node N` or with the
//! variables exported by hand), and in the multi-process tests. It does not touch GPUs.

use std::process::ExitCode;
use std::time::Instant;

use aboleth_runtime::TcpStoreBootstrap;

fn main() -> ExitCode {
    let started = Instant::now();
    match run(started) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!(
                "aboleth-bootstrap-probe: error after {:.2} s: {error}",
                started.elapsed().as_secs_f64()
            );
            ExitCode::FAILURE
        }
    }
}

fn run(started: Instant) -> Result<(), aboleth_runtime::BootstrapError> {
    let mut bootstrap = TcpStoreBootstrap::from_env()?;
    let rank = bootstrap.rank();
    let host_name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned());
    println!(
        "aboleth-bootstrap-probe: rank {rank}/{} joined in {:.2} s (hosting the store: {})",
        bootstrap.world_size(),
        started.elapsed().as_secs_f64(),
        bootstrap.hosts_store()
    );
    let line = format!("rank={rank} pid={} host={host_name}", std::process::id());
    let gathered = bootstrap.all_gather("probe", line.as_bytes())?;
    for (index, contribution) in gathered.iter().enumerate() {
        println!(
            "gathered {index}: {}",
            String::from_utf8_lossy(contribution)
        );
    }
    bootstrap.barrier("probe-done")?;
    bootstrap.close();
    Ok(())
}
