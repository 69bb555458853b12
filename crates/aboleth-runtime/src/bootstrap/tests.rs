//! In-process tests: the store protocol against our server, configuration parsing, and ranks as
//! threads. The multi-process tests are in `tests/bootstrap_processes.rs`.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::protocol::{QueryType, RequestBuilder};
use super::*;

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn local_server() -> TcpStoreServer {
    TcpStoreServer::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).unwrap()
}

fn client_of(server: &TcpStoreServer, prefix: &str) -> TcpStoreClient {
    TcpStoreClient::connect(
        "127.0.0.1",
        server.local_address().port(),
        prefix,
        Instant::now() + Duration::from_secs(5),
        Duration::from_secs(5),
    )
    .unwrap()
}

#[test]
fn store_operations_follow_torch_semantics() {
    let server = local_server();
    let mut client = client_of(&server, "");
    client.set("a", b"1").unwrap();
    assert_eq!(
        client.get("a", Duration::from_secs(1)).unwrap(),
        Some(b"1".to_vec())
    );
    assert_eq!(client.add("counter", 5).unwrap(), 5);
    assert_eq!(client.add("counter", -2).unwrap(), 3);
    assert_eq!(
        client.get("counter", Duration::from_secs(1)).unwrap(),
        Some(b"3".to_vec())
    );
    assert!(
        client
            .check(&["a".to_owned(), "counter".to_owned()])
            .unwrap()
    );
    assert!(
        !client
            .check(&["a".to_owned(), "missing".to_owned()])
            .unwrap()
    );
    // compare_set: a missing key with an empty expectation is set; a wrong expectation leaves
    // the value and returns it; a missing key with a non-empty expectation returns it.
    assert_eq!(client.compare_set("cas", b"", b"x").unwrap(), b"x");
    assert_eq!(client.compare_set("cas", b"y", b"z").unwrap(), b"x");
    assert_eq!(client.compare_set("cas", b"x", b"z").unwrap(), b"z");
    assert_eq!(client.compare_set("other", b"e", b"d").unwrap(), b"e");
    assert_eq!(client.num_keys().unwrap(), 3);
    assert!(client.delete_key("a").unwrap());
    assert!(!client.delete_key("a").unwrap());
    // A wait that times out is cancelled and leaves the connection usable.
    let started = Instant::now();
    assert_eq!(
        client.get("never", Duration::from_millis(50)).unwrap(),
        None
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    client.set("after", b"ok").unwrap();
    assert_eq!(
        client.get("after", Duration::from_secs(1)).unwrap(),
        Some(b"ok".to_vec())
    );
}

#[test]
fn prefixes_are_joined_like_torch_prefix_store() {
    let server = local_server();
    let mut prefixed = client_of(&server, "/worker/attempt_0");
    let mut plain = client_of(&server, "");
    prefixed.set("k", b"v").unwrap();
    assert_eq!(
        plain
            .get("/worker/attempt_0/k", Duration::from_secs(1))
            .unwrap(),
        Some(b"v".to_vec())
    );
}

#[test]
fn keys_go_on_the_wire_as_torch_names_them() {
    let server = local_server();
    let mut prefixed = client_of(&server, "/worker/attempt_0");
    let mut plain = client_of(&server, "");
    prefixed.set("k", b"v").unwrap();
    plain.set("p", b"w").unwrap();
    // A raw GET with torch's wire names: "/" + key, "/" + prefix + "/" + key.
    let mut stream = TcpStream::connect(server.local_address()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    for (wire_key, expected) in [("/p", b"w"), ("//worker/attempt_0/k", b"v")] {
        let mut request = RequestBuilder::new(QueryType::Validate)
            .u32(0x3C85_F7CE)
            .finish();
        request.extend(
            RequestBuilder::new(QueryType::Get)
                .bytes(wire_key.as_bytes())
                .finish(),
        );
        stream.write_all(&request).unwrap();
        let value = super::protocol::read_bytes(&mut stream, 16).unwrap();
        assert_eq!(value, expected, "{wire_key}");
    }
}

#[test]
fn a_waiter_is_woken_by_another_connection() {
    let server = local_server();
    let mut waiter = client_of(&server, "");
    let mut setter = client_of(&server, "");
    let thread = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        setter.set("x", b"1").unwrap();
        setter.set("y", b"2").unwrap();
    });
    assert!(
        waiter
            .wait(&["x".to_owned(), "y".to_owned()], Duration::from_secs(5))
            .unwrap()
    );
    thread.join().unwrap();
}

#[test]
fn the_server_refuses_clients_that_do_not_validate() {
    let server = local_server();
    let mut stream = TcpStream::connect(server.local_address()).unwrap();
    let request = RequestBuilder::new(QueryType::Set)
        .bytes(b"k")
        .bytes(b"v")
        .finish();
    stream.write_all(&request).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buffer = [0u8; 1];
    // The server closes the connection instead of answering.
    assert_eq!(stream.read(&mut buffer).unwrap_or(0), 0);

    let mut stream = TcpStream::connect(server.local_address()).unwrap();
    let request = RequestBuilder::new(QueryType::Validate)
        .u32(0xdead_beef)
        .finish();
    stream.write_all(&request).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert_eq!(stream.read(&mut buffer).unwrap_or(0), 0);
}

#[test]
fn connecting_to_a_closed_port_fails_within_the_deadline() {
    let port = free_port();
    let started = Instant::now();
    let error = TcpStoreClient::connect(
        "127.0.0.1",
        port,
        "",
        Instant::now() + Duration::from_millis(300),
        Duration::from_secs(1),
    )
    .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2));
    let message = error.to_string();
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
    assert!(message.contains("MASTER_ADDR"), "{message}");
}

fn lookup_from(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect();
    move |name| map.get(name).cloned()
}

const BASE_ENVIRONMENT: [(&str, &str); 4] = [
    ("MASTER_ADDR", "127.0.0.1"),
    ("MASTER_PORT", "29500"),
    ("RANK", "1"),
    ("WORLD_SIZE", "2"),
];

fn environment_with(
    changes: &[(&'static str, Option<&'static str>)],
) -> Vec<(&'static str, &'static str)> {
    let mut environment: Vec<(&str, &str)> = BASE_ENVIRONMENT.to_vec();
    for (name, value) in changes {
        environment.retain(|(existing, _)| existing != name);
        if let Some(value) = value {
            environment.push((name, value));
        }
    }
    environment
}

#[test]
fn configuration_errors_name_the_variable() {
    for name in ["MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"] {
        let environment = environment_with(&[(name, None)]);
        let error = BootstrapConfig::from_lookup(&lookup_from(&environment)).unwrap_err();
        assert!(
            matches!(error, BootstrapError::MissingEnvironmentVariable { name: missing } if missing == name),
            "{error}"
        );
        assert!(error.to_string().contains(name));
    }
    let cases: [(&str, &str); 6] = [
        ("MASTER_PORT", "http"),
        ("MASTER_PORT", "70000"),
        ("RANK", "2"),
        ("RANK", "-1"),
        ("WORLD_SIZE", "0"),
        ("ABOLETH_BOOTSTRAP_TIMEOUT_S", "-3"),
    ];
    for (name, value) in cases {
        let environment = environment_with(&[(name, Some(value))]);
        let error = BootstrapConfig::from_lookup(&lookup_from(&environment)).unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains(&format!("{name}=\"{value}\"")),
            "{name}={value}: {message}"
        );
    }
}

#[test]
fn configuration_reads_timeout_token_and_hosting() {
    let environment = environment_with(&[
        ("ABOLETH_BOOTSTRAP_TIMEOUT_S", Some("2.5")),
        ("ABOLETH_JOB_TOKEN", Some("secret")),
    ]);
    let config = BootstrapConfig::from_lookup(&lookup_from(&environment)).unwrap();
    assert_eq!(config.timeout, Duration::from_millis(2500));
    assert_eq!(
        config.job_token,
        JobToken::from_secret("secret", "from ABOLETH_JOB_TOKEN")
    );
    assert_eq!(config.hosting, StoreHosting::RankZero);
    assert_eq!((config.rank, config.world_size), (1, 2));

    let environment = environment_with(&[
        ("TORCHELASTIC_USE_AGENT_STORE", Some("True")),
        ("TORCHELASTIC_RESTART_COUNT", Some("3")),
    ]);
    let config = BootstrapConfig::from_lookup(&lookup_from(&environment)).unwrap();
    assert_eq!(
        config.hosting,
        StoreHosting::TorchElasticAgent { restart_count: 3 }
    );
    assert_eq!(
        config.timeout,
        Duration::from_secs_f64(DEFAULT_TIMEOUT_SECONDS)
    );
    let environment = environment_with(&[("TORCHELASTIC_USE_AGENT_STORE", Some("True"))]);
    let error = BootstrapConfig::from_lookup(&lookup_from(&environment)).unwrap_err();
    assert!(error.to_string().contains("TORCHELASTIC_RESTART_COUNT"));
}

#[test]
fn derived_tokens_agree_within_a_job_and_differ_across_jobs() {
    let job = environment_with(&[("TORCHELASTIC_RUN_ID", Some("run-a"))]);
    let same_job_other_rank = environment_with(&[
        ("TORCHELASTIC_RUN_ID", Some("run-a")),
        ("RANK", Some("0")),
        ("MASTER_ADDR", Some("node0")),
    ]);
    let other_job = environment_with(&[("TORCHELASTIC_RUN_ID", Some("run-b"))]);
    let token = |pairs: &[(&str, &str)]| JobToken::derive(&lookup_from(pairs));
    assert_eq!(
        token(&job).digest_hex(),
        token(&same_job_other_rank).digest_hex()
    );
    assert_ne!(token(&job).digest_hex(), token(&other_job).digest_hex());
    assert!(token(&job).source().contains("TORCHELASTIC_RUN_ID=run-a"));
}

fn thread_config(port: u16, rank: u32, world_size: u32, token: &str) -> BootstrapConfig {
    BootstrapConfig {
        master_address: "127.0.0.1".to_owned(),
        master_port: port,
        rank,
        world_size,
        timeout: Duration::from_secs(10),
        job_token: JobToken::from_secret(token, "test"),
        hosting: StoreHosting::RankZero,
        key_namespace: "test".to_owned(),
    }
}

#[test]
fn ranks_as_threads_gather_and_share_keys() {
    let port = free_port();
    let world_size = 3;
    let threads: Vec<_> = (0..world_size)
        .map(|rank| {
            std::thread::spawn(move || {
                let mut bootstrap =
                    TcpStoreBootstrap::connect(thread_config(port, rank, world_size, "t")).unwrap();
                assert_eq!(bootstrap.hosts_store(), rank == 0);
                let blob = vec![rank as u8; rank as usize + 1];
                let gathered = bootstrap.all_gather("regions", &blob).unwrap();
                for (index, contribution) in gathered.iter().enumerate() {
                    assert_eq!(contribution, &vec![index as u8; index + 1]);
                }
                assert_eq!(bootstrap.all_gather("empty", &[]).unwrap().len(), 3);
                bootstrap.barrier("after").unwrap();
                if rank == 2 {
                    bootstrap.set("from-2", b"hello").unwrap();
                }
                assert_eq!(bootstrap.get("from-2").unwrap(), b"hello");
                bootstrap.add("arrivals", 1).unwrap();
                bootstrap.barrier("counted").unwrap();
                assert_eq!(bootstrap.add("arrivals", 0).unwrap(), 3);
                bootstrap.wait(&["from-2"]).unwrap();
                let error = bootstrap
                    .wait_with_timeout(&["from-2", "nobody"], Duration::from_millis(50))
                    .unwrap_err();
                assert!(error.to_string().contains("\"nobody\""), "{error}");
                bootstrap.close();
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
}

#[test]
fn mismatched_collectives_are_reported() {
    let server = local_server();
    let port = server.local_address().port();
    let threads: Vec<_> = (0..2)
        .map(|rank| {
            std::thread::spawn(move || {
                let mut bootstrap =
                    TcpStoreBootstrap::connect(thread_config(port, rank, 2, "t")).unwrap();
                let name = if rank == 0 { "send" } else { "recv" };
                let error = bootstrap.all_gather(name, b"x").unwrap_err();
                // A later collective refuses to run.
                let again = bootstrap.barrier("later").unwrap_err();
                assert!(
                    matches!(again, BootstrapError::AlreadyFailed { .. }),
                    "{again}"
                );
                error.to_string()
            })
        })
        .collect();
    for thread in threads {
        let message = thread.join().unwrap();
        assert!(
            message.contains("all_gather \"send\"") && message.contains("all_gather \"recv\""),
            "{message}"
        );
    }
}

#[test]
fn a_second_process_with_the_same_rank_is_refused() {
    // A store owned by the test: rank 0 finds the port taken and joins it as a client.
    let server = local_server();
    let port = server.local_address().port();
    let joined: Vec<_> = [0, 1]
        .into_iter()
        .map(|rank| {
            std::thread::spawn(move || {
                TcpStoreBootstrap::connect(thread_config(port, rank, 2, "t")).unwrap()
            })
        })
        .collect();
    let joined: Vec<TcpStoreBootstrap> = joined
        .into_iter()
        .map(|thread| thread.join().unwrap())
        .collect();
    assert!(!joined[0].hosts_store());
    // The job is complete; a late process claiming rank 1 again is refused, not admitted.
    let error = TcpStoreBootstrap::connect(thread_config(port, 1, 2, "t")).unwrap_err();
    assert!(
        matches!(error, BootstrapError::DuplicateRank { rank: 1 }),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("another process already joined as rank 1")
    );
    drop(joined);
}

#[test]
fn a_silent_service_is_not_taken_for_a_store() {
    // Accepts connections but never answers, like a wrong MASTER_PORT.
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let started = Instant::now();
    let error = TcpStoreClient::connect(
        "127.0.0.1",
        port,
        "",
        Instant::now() + Duration::from_millis(300),
        Duration::from_secs(30),
    )
    .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(matches!(error, StoreError::NotATcpStore { .. }), "{error}");
    drop(listener);
}

/// The error of a one-rank-present world of `world_size` ranks with a 1 s timeout, and how long
/// it took.
fn lone_rank_zero(world_size: u32) -> (BootstrapError, Duration) {
    let mut config = thread_config(free_port(), 0, world_size, "t");
    config.timeout = Duration::from_secs(1);
    let started = Instant::now();
    let error = TcpStoreBootstrap::connect(config).unwrap_err();
    (error, started.elapsed())
}

#[test]
fn a_large_world_with_one_rank_present_fails_within_twice_the_timeout() {
    // Before the fix, 5000 ranks produced a 29 KB message and 65536 ranks took 4.2 s (one
    // CHECK per missing rank after the timeout, every wait slice sending every rank's key).
    for world_size in [5000, MAX_WORLD_SIZE] {
        let (error, elapsed) = lone_rank_zero(world_size);
        assert!(
            elapsed < Duration::from_secs(2),
            "WORLD_SIZE={world_size} took {elapsed:?}: {error}"
        );
        assert!(
            matches!(&error, BootstrapError::Timeout { missing_ranks, .. }
                if missing_ranks.len() == world_size as usize - 1),
            "{error}"
        );
        assert_eq!(
            error.to_string(),
            format!(
                "rank 0: barrier \"rendezvous\" timed out after 1.0 s: ranks 1, 2, 3, 4, 5, 6, 7, 8 and {} more ({} of {world_size}) did not arrive; check that every rank was started with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE, or raise ABOLETH_BOOTSTRAP_TIMEOUT_S",
                world_size - 9,
                world_size - 1
            )
        );
    }
}

#[test]
fn missing_ranks_are_named_up_to_eight_then_counted() {
    let cases: [(&[u32], u32, &str); 5] = [
        (&[2], 3, "rank 2 of 3"),
        (&[1, 3], 4, "ranks 1 and 3 of 4"),
        (&[1, 2, 3], 5, "ranks 1, 2 and 3 of 5"),
        (
            &[1, 2, 3, 4, 5, 6, 7, 8],
            9,
            "ranks 1, 2, 3, 4, 5, 6, 7 and 8 of 9",
        ),
        (
            &[0, 1, 2, 3, 4, 5, 6, 7, 9],
            10,
            "ranks 0, 1, 2, 3, 4, 5, 6, 7 and 1 more (9 of 10)",
        ),
    ];
    for (missing, world_size, expected) in cases {
        assert_eq!(format_missing_ranks(missing, world_size), expected);
    }
    // Bounded whatever the number of missing ranks or refusals.
    let everyone: Vec<u32> = (1..MAX_WORLD_SIZE).collect();
    assert!(format_missing_ranks(&everyone, MAX_WORLD_SIZE).len() < 100);
    let refusals: BTreeMap<u32, String> = (1..1000)
        .map(|rank| (rank, "it has WORLD_SIZE=3".to_owned()))
        .collect();
    assert_eq!(
        format_refusals(&refusals),
        " (a process claiming rank 1 was refused: it has WORLD_SIZE=3) (a process claiming rank 2 was refused: it has WORLD_SIZE=3) (a process claiming rank 3 was refused: it has WORLD_SIZE=3) (and 996 more processes claiming missing ranks were refused)"
    );
}

#[test]
fn huge_or_absurd_world_sizes_and_ranks_are_refused_up_front() {
    let world_size_expected = "expected a number of ranks from 1 to 65536 (the bootstrap's limit); set WORLD_SIZE to the number of processes in the job (torchrun sets it to nnodes x nproc_per_node)";
    for value in ["10000000", "65537", "0", "-4", "many", "99999999999", ""] {
        let environment = environment_with(&[("WORLD_SIZE", Some(value)), ("RANK", Some("0"))]);
        let error = BootstrapConfig::from_lookup(&lookup_from(&environment)).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "environment variable WORLD_SIZE=\"{value}\" is invalid: {world_size_expected}"
            )
        );
    }
    let environment = environment_with(&[("WORLD_SIZE", Some("65536")), ("RANK", Some("65535"))]);
    let config = BootstrapConfig::from_lookup(&lookup_from(&environment)).unwrap();
    assert_eq!(config.world_size, MAX_WORLD_SIZE);
    for value in ["2", "-1", "one", "4294967296"] {
        let environment = environment_with(&[("RANK", Some(value))]);
        let error = BootstrapConfig::from_lookup(&lookup_from(&environment)).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "environment variable RANK=\"{value}\" is invalid: expected a rank from 0 to 1 (below WORLD_SIZE=2); give every process a distinct RANK"
            )
        );
    }
    // A configuration built in code is checked by connect before any network I/O: nothing
    // listens on this port, yet the answer is immediate and about WORLD_SIZE, not the store.
    let started = Instant::now();
    let error =
        TcpStoreBootstrap::connect(thread_config(free_port(), 1, 10_000_000, "t")).unwrap_err();
    assert!(started.elapsed() < Duration::from_millis(100));
    assert_eq!(
        error.to_string(),
        format!("environment variable WORLD_SIZE=\"10000000\" is invalid: {world_size_expected}")
    );
    let error = TcpStoreBootstrap::connect(thread_config(free_port(), 3, 3, "t")).unwrap_err();
    assert_eq!(
        error.to_string(),
        "environment variable RANK=\"3\" is invalid: expected a rank from 0 to 2 (below WORLD_SIZE=3); give every process a distinct RANK"
    );
}

#[test]
fn a_missing_rank_in_a_later_collective_is_named() {
    let port = free_port();
    let threads: Vec<_> = (0..3)
        .map(|rank| {
            std::thread::spawn(move || {
                let mut config = thread_config(port, rank, 3, "t");
                config.timeout = Duration::from_secs(1);
                let mut bootstrap = TcpStoreBootstrap::connect(config).unwrap();
                bootstrap.barrier("first").unwrap();
                if rank == 2 {
                    // Rank 2 skips the gather; its bootstrap stays open until the others fail.
                    std::thread::sleep(Duration::from_millis(1500));
                    return String::new();
                }
                let started = Instant::now();
                let error = bootstrap.all_gather("second", b"x").unwrap_err();
                assert!(started.elapsed() < Duration::from_secs(2), "{error}");
                error.to_string()
            })
        })
        .collect();
    let messages: Vec<String> = threads
        .into_iter()
        .map(|thread| thread.join().unwrap())
        .collect();
    // Whichever of ranks 0 and 1 times out first names rank 2; the other may learn of it
    // through the abort alert, which carries the same text.
    for message in &messages[..2] {
        assert!(
            message.contains(
                "all_gather \"second\" timed out after 1.0 s: rank 2 of 3 did not arrive; check that every rank was started with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE"
            ),
            "{message}"
        );
    }
}

#[test]
fn a_store_that_stops_replying_is_bounded_by_the_client_deadline() {
    // Answers the handshake like a TCPStore, then reads requests and never replies.
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut handshake = [0u8; 10];
        stream.read_exact(&mut handshake).unwrap();
        stream.write_all(&handshake[6..10]).unwrap();
        let mut sink = Vec::new();
        let _ = stream.read_to_end(&mut sink);
    });
    let mut client = TcpStoreClient::connect(
        "127.0.0.1",
        port,
        "",
        Instant::now() + Duration::from_secs(5),
        Duration::from_secs(30),
    )
    .unwrap();
    client.set_deadline(Some(Instant::now() + Duration::from_millis(200)));
    let started = Instant::now();
    let error = client.add("counter", 1).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1), "{error}");
    let message = error.to_string();
    assert!(
        message.starts_with(&format!(
            "TCPStore at 127.0.0.1:{port}: no reply to add \"counter\" within 0."
        )) && message.ends_with(
            "s; the process hosting the store (rank 0 or torchrun's agent) is stopped or overloaded, or raise ABOLETH_BOOTSTRAP_TIMEOUT_S"
        ),
        "{message}"
    );
    drop(client);
    server.join().unwrap();
}

#[test]
fn a_rendezvous_given_in_code_names_the_argument_it_refuses() {
    let refused = |address: &str, port: u16, rank: u32, world_size: u32| {
        BootstrapConfig::for_rendezvous(address, port, rank, world_size)
            .unwrap_err()
            .to_string()
    };
    assert!(refused(" ", 29500, 0, 2).starts_with("master_address=\" \" is invalid"));
    assert!(refused("127.0.0.1", 0, 0, 2).starts_with("master_port=\"0\" is invalid"));
    assert!(refused("127.0.0.1", 29500, 0, 0).starts_with("world_size=\"0\" is invalid"));
    let rank = refused("127.0.0.1", 29500, 2, 2);
    assert!(
        rank.starts_with("rank=\"2\" is invalid: expected a rank from 0 to 1"),
        "{rank}"
    );
}

#[test]
fn ranks_given_in_code_meet_at_rank_zeros_store() {
    let port = free_port();
    let threads: Vec<_> = (0..2)
        .map(|rank| {
            std::thread::spawn(move || {
                let mut config =
                    BootstrapConfig::for_rendezvous("127.0.0.1", port, rank, 2).unwrap();
                assert_eq!(config.hosting, StoreHosting::RankZero);
                // Each process counts its own bootstraps; these threads share one counter.
                config.key_namespace = "in-code".to_owned();
                let mut bootstrap = TcpStoreBootstrap::connect(config).unwrap();
                assert_eq!(bootstrap.hosts_store(), rank == 0);
                let gathered = bootstrap.all_gather("ranks", &[rank as u8]).unwrap();
                assert_eq!(gathered, vec![vec![0], vec![1]]);
                bootstrap.close();
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
}
