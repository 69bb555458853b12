//! Ranks as real processes on loopback: each test starts `aboleth-bootstrap-probe` once per
//! rank with the launcher's environment variables (and nothing else inherited), on a free port,
//! and checks exit codes, what was gathered, and how fast failures are reported.

use std::net::{Ipv4Addr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Upper bound on any probe's run, so that a hung rendezvous fails the test instead of CI.
const PROCESS_LIMIT: Duration = Duration::from_secs(20);

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One rank process, killed (by its own pid) if the test ends first.
struct RankProcess {
    rank: u32,
    started: Instant,
    child: Option<Child>,
}

/// What a finished rank process reported.
#[derive(Debug)]
struct RankOutcome {
    rank: u32,
    success: bool,
    elapsed: Duration,
    stdout: String,
    stderr: String,
}

impl Drop for RankProcess {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn start_rank(
    port: u16,
    rank: u32,
    world_size: u32,
    job_token: &str,
    timeout_seconds: &str,
) -> RankProcess {
    let child = Command::new(env!("CARGO_BIN_EXE_aboleth-bootstrap-probe"))
        .env_clear()
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world_size.to_string())
        .env("ABOLETH_JOB_TOKEN", job_token)
        .env("ABOLETH_BOOTSTRAP_TIMEOUT_S", timeout_seconds)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the probe binary starts");
    RankProcess {
        rank,
        started: Instant::now(),
        child: Some(child),
    }
}

fn finish(mut process: RankProcess) -> RankOutcome {
    let mut child = process.child.take().unwrap();
    // Poll rather than block, to enforce PROCESS_LIMIT and to time each process on its own.
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if process.started.elapsed() > PROCESS_LIMIT {
            let _ = child.kill();
            panic!("rank {} ran past {PROCESS_LIMIT:?}", process.rank);
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let elapsed = process.started.elapsed();
    let output = child.wait_with_output().unwrap();
    RankOutcome {
        rank: process.rank,
        success: status.success(),
        elapsed,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Waits for every process concurrently (each timed from its own start).
fn finish_all(processes: Vec<RankProcess>) -> Vec<RankOutcome> {
    let threads: Vec<_> = processes
        .into_iter()
        .map(|process| std::thread::spawn(move || finish(process)))
        .collect();
    threads
        .into_iter()
        .map(|thread| thread.join().unwrap())
        .collect()
}

fn rendezvous_and_gather(world_size: u32) {
    let port = free_port();
    let processes = (0..world_size)
        .map(|rank| start_rank(port, rank, world_size, "job-gather", "10"))
        .collect();
    for outcome in finish_all(processes) {
        assert!(outcome.success, "{outcome:#?}");
        for index in 0..world_size {
            let prefix = format!("gathered {index}: rank={index} pid=");
            assert!(
                outcome.stdout.lines().any(|line| line.starts_with(&prefix)),
                "rank {} lacks {prefix:?}: {outcome:#?}",
                outcome.rank
            );
        }
        assert!(
            outcome
                .stdout
                .contains(&format!("(hosting the store: {})", outcome.rank == 0)),
            "{outcome:#?}"
        );
    }
}

#[test]
fn two_rank_processes_rendezvous_and_gather() {
    rendezvous_and_gather(2);
}

#[test]
fn four_rank_processes_rendezvous_and_gather() {
    rendezvous_and_gather(4);
}

/// Slack over the timeout for a failure report: process start, one wait slice, rank 0's
/// linger while the others read its abort alert.
const REPORT_SLACK: Duration = Duration::from_millis(1500);

#[test]
fn a_missing_rank_is_named_by_every_rank_within_the_timeout() {
    let port = free_port();
    let timeout = Duration::from_secs(2);
    // World size 3, but rank 2 is never started.
    let processes = (0..2)
        .map(|rank| start_rank(port, rank, 3, "job-missing", "2"))
        .collect();
    for outcome in finish_all(processes) {
        assert!(!outcome.success, "{outcome:#?}");
        assert!(
            outcome.stderr.contains("rank 2 of 3 did not arrive"),
            "rank {} does not name rank 2: {outcome:#?}",
            outcome.rank
        );
        assert!(
            outcome.elapsed < timeout + REPORT_SLACK,
            "rank {} took {:?}",
            outcome.rank,
            outcome.elapsed
        );
    }
}

#[test]
fn a_wrong_job_token_is_refused_and_named() {
    let port = free_port();
    let timeout = Duration::from_secs(2);
    let host = start_rank(port, 0, 2, "job-a", "2");
    let stray = start_rank(port, 1, 2, "job-b", "2");
    let outcomes = finish_all(vec![host, stray]);
    let (host, stray) = (&outcomes[0], &outcomes[1]);
    // The stray refuses itself as soon as it reads rank 0's session record.
    assert!(!stray.success, "{stray:#?}");
    assert!(
        stray.stderr.contains("rank 1 refused: its job token")
            && stray.stderr.contains("ABOLETH_JOB_TOKEN"),
        "{stray:#?}"
    );
    assert!(stray.elapsed < timeout, "{stray:#?}");
    // Rank 0 keeps waiting for a legitimate rank 1, then names it and the refusal.
    assert!(!host.success, "{host:#?}");
    assert!(
        host.stderr.contains("rank 1 of 2 did not arrive")
            && host
                .stderr
                .contains("a process claiming rank 1 was refused"),
        "{host:#?}"
    );
    assert!(host.elapsed < timeout + REPORT_SLACK, "{host:#?}");
}

#[test]
fn a_huge_world_size_is_refused_at_once_naming_the_variable_and_the_limit() {
    // Before the limit, WORLD_SIZE=10^7 ran out of time and memory (1.5 GB) instead.
    let outcome = finish(start_rank(free_port(), 0, 10_000_000, "job-huge", "3"));
    assert!(!outcome.success, "{outcome:#?}");
    assert!(
        outcome.stderr.contains(
            "environment variable WORLD_SIZE=\"10000000\" is invalid: expected a number of ranks from 1 to 65536 (the bootstrap's limit); set WORLD_SIZE to the number of processes in the job"
        ),
        "{outcome:#?}"
    );
    assert!(outcome.elapsed < Duration::from_secs(1), "{outcome:#?}");
}

#[test]
fn a_large_world_with_one_rank_started_fails_within_twice_the_timeout() {
    let timeout = Duration::from_secs(1);
    let outcome = finish(start_rank(free_port(), 0, 5000, "job-large", "1"));
    assert!(!outcome.success, "{outcome:#?}");
    assert!(
        outcome.stderr.contains(
            "barrier \"rendezvous\" timed out after 1.0 s: ranks 1, 2, 3, 4, 5, 6, 7, 8 and 4991 more (4999 of 5000) did not arrive; check that every rank was started with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE"
        ),
        "{outcome:#?}"
    );
    assert!(outcome.stderr.len() < 1000, "{outcome:#?}");
    assert!(outcome.elapsed < 2 * timeout, "{outcome:#?}");
}
