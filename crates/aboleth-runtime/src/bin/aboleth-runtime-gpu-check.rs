//! `aboleth-runtime-gpu-check`: the GPU check of the runtime, run by every rank of a job (one
//! process per GPU; environment `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`, optional
//! `LOCAL_RANK` for the device, default `RANK`). Each rank prints one JSON object on stdout
//! and exits 0 only if every check passed; progress goes to stderr.
//!
//! What it checks, in order (tests/gpu/README.md has the command that runs it):
//! 1. errors: `register` of host memory, of pinned host memory, of 0 bytes, a region past its
//!    registration, and `connect_all("rdma")` on a machine without an mlx5 device;
//! 2. p2p: a World connected with p2p registers a buffer at an offset inside a larger
//!    `cuMemAlloc` block (as PyTorch's caching allocator hands them out), exchanges regions,
//!    checks the device tables against their host copies, and for sizes 8 B to 4 MiB writes a
//!    pattern into every peer's `recv` region through the mapped peer address (host-to-device
//!    and device-to-device copies), then, after a barrier, checks its own `recv` bit for bit,
//!    with a poisoned byte after each slice still intact;
//! 3. the wait-failure log: the reference bounded-wait kernel times out on a flag that never
//!    comes and records rank, peer, flag, expected and observed values; a satisfied wait
//!    records nothing;
//! 4. proxy: a second World connected with the proxy; for each size the host posts a put+signal
//!    (SET) into the ring to each peer, and the receiver polls its flag and then checks the data
//!    without any barrier between (so the signal must follow the data); then batches of ADD
//!    signals; then the round-trip time of an 8-byte put+signal with a completion;
//! 5. auto: a third World connected with "auto" reports the transports it chose.
//!
//! It does not measure bandwidth or run compiled kernels.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aboleth_abi::Transport;
use aboleth_abi::proxy::{ProxyOperation, ProxyPut, ProxySignal, SignalOperation};
use aboleth_runtime::cuda::{Device, DeviceMemory, PinnedHostMemory, Stream};
use aboleth_runtime::proxy_ring::{ProducerCommand, RingProducer};
use aboleth_runtime::{ExchangedRegions, Region, TcpStoreBootstrap, TransportRequest, World};
use serde_json::{Value, json};

/// Largest slice per peer.
const MAXIMUM_SLICE_BYTES: usize = 4 << 20;
/// Slice sizes checked.
const SLICE_SIZES: [usize; 7] = [8, 64, 4096, 65536, 1 << 20, 3 << 20, 4 << 20];
/// Offset of the registration inside its allocation (a caching-allocator block).
const REGISTRATION_OFFSET_BYTES: u64 = 4096;
/// Fill of `recv` before each round, so unwritten bytes show.
const POISON: u8 = 0xa5;

type CheckResult<T> = Result<T, String>;

fn main() -> ExitCode {
    let started = Instant::now();
    let rank: u32 = std::env::var("RANK")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(0);
    let (ok, report) = match run(rank) {
        Ok(report) => {
            let ok = report["failures"].as_array().is_some_and(Vec::is_empty);
            (ok, report)
        }
        Err(error) => (false, json!({ "rank": rank, "fatal_error": error })),
    };
    let mut report = report;
    report["ok"] = json!(ok);
    report["elapsed_seconds"] = json!(started.elapsed().as_secs_f64());
    println!(
        "{}",
        serde_json::to_string_pretty(&report).expect("JSON values serialize")
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn progress(rank: u32, message: &str) {
    eprintln!("[rank {rank}] {message}");
}

/// Deterministic bytes for (writer rank, size, round): splitmix64.
fn pattern(writer_rank: u32, size: usize, round: u64) -> Vec<u8> {
    let mut state = (u64::from(writer_rank) << 48) ^ ((size as u64) << 8) ^ round ^ 0x9e37_79b9;
    let mut bytes = Vec::with_capacity(size + 8);
    while bytes.len() < size {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        bytes.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    bytes.truncate(size);
    bytes
}

/// The buffer of one World: `send` (one slice), `recv` (one slice per rank), `flags` (two
/// 8-byte words per rank: SET flags then ADD counters).
struct Buffer {
    block: DeviceMemory,
    send: Region,
    recv: Region,
    flags: Region,
}

impl Buffer {
    fn registered_bytes(world_size: u32) -> u64 {
        let slices = MAXIMUM_SLICE_BYTES as u64 * (1 + u64::from(world_size));
        slices + 16 * u64::from(world_size)
    }

    fn new(world: &mut World) -> CheckResult<Self> {
        let world_size = world.world_size();
        let length = Self::registered_bytes(world_size);
        let block = DeviceMemory::allocate(
            world.device(),
            (length + 2 * REGISTRATION_OFFSET_BYTES) as usize,
        )
        .map_err(|e| e.to_string())?;
        world
            .device()
            .fill(block.address(), 0, block.length_bytes())
            .map_err(|e| e.to_string())?;
        let registration = world
            .register(block.address() + REGISTRATION_OFFSET_BYTES, length)
            .map_err(|e| e.to_string())?;
        let slice = MAXIMUM_SLICE_BYTES as u64;
        let recv_length = slice * u64::from(world_size);
        let region = |name, offset, length| {
            world
                .region(name, &registration, offset, length)
                .map_err(|e| e.to_string())
        };
        Ok(Self {
            send: region("send", 0, slice)?,
            recv: region("recv", slice, recv_length)?,
            flags: region("flags", slice + recv_length, 16 * u64::from(world_size))?,
            block,
        })
    }

    fn exchange(&self, world: &mut World) -> CheckResult<ExchangedRegions> {
        world
            .exchange_regions([
                ("send", &self.send),
                ("recv", &self.recv),
                ("flags", &self.flags),
            ])
            .map_err(|e| e.to_string())
    }
}

fn new_world(rank: u32, choice: TransportRequest) -> CheckResult<(World, Vec<Transport>)> {
    let bootstrap = TcpStoreBootstrap::from_env().map_err(|e| e.to_string())?;
    let world_size = bootstrap.world_size();
    let device_ordinal: i32 = std::env::var("LOCAL_RANK")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(rank as i32);
    let mut world = World::new(rank, world_size, device_ordinal, Box::new(bootstrap))
        .map_err(|e| e.to_string())?;
    let transports = world.connect_all(choice).map_err(|e| e.to_string())?;
    Ok((world, transports))
}

fn barrier(world: &mut World, name: &str) -> CheckResult<()> {
    world.barrier(name).map_err(|e| e.to_string())
}

fn run(rank: u32) -> CheckResult<Value> {
    let mut failures: Vec<String> = Vec::new();
    let mut report = json!({ "rank": rank });

    // 1. p2p World, first refusing rdma.
    progress(rank, "creating the p2p world");
    let bootstrap = TcpStoreBootstrap::from_env().map_err(|e| e.to_string())?;
    let world_size = bootstrap.world_size();
    let device_ordinal: i32 = std::env::var("LOCAL_RANK")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(rank as i32);
    let mut world = World::new(rank, world_size, device_ordinal, Box::new(bootstrap))
        .map_err(|e| e.to_string())?;
    let device = world.device().clone();
    report["world_size"] = json!(world_size);
    report["device"] = json!({
        "ordinal": device.ordinal(),
        "name": device.name().map_err(|e| e.to_string())?,
        "pci_bus_id": device.pci_bus_id().map_err(|e| e.to_string())?,
        "stream_memory_operations_64_bit": device.supports_64_bit_stream_memory_operations(),
        "driver_cuda_version": aboleth_runtime::cuda::driver_version().map_err(|e| e.to_string())?,
    });
    let rdma = world.connect_all(TransportRequest::Only(Transport::Mlx5));
    let rdma_message = match rdma {
        Ok(transports) => {
            failures.push(format!("connect_all(rdma) succeeded: {transports:?}"));
            String::new()
        }
        Err(error) => error.to_string(),
    };
    let transports = world
        .connect_all(TransportRequest::Only(Transport::P2p))
        .map_err(|e| e.to_string())?;
    report["p2p_transports"] = json!(format!("{transports:?}"));

    report["errors"] = check_errors(&mut world, &device, &rdma_message, &mut failures)?;

    let buffer = Buffer::new(&mut world)?;
    let table = buffer.exchange(&mut world)?;
    report["p2p_tables"] = check_tables(&world, &buffer, &table, &mut failures)?;
    progress(rank, "p2p writes");
    report["p2p"] = check_p2p(&mut world, &buffer, &table, &mut failures)?;
    progress(rank, "wait-failure log");
    report["wait_failure_log"] = check_wait_failures(&mut world, &table, &mut failures)?;

    // 4. proxy World.
    progress(rank, "creating the proxy world");
    let (mut proxy_world, proxy_transports) =
        new_world(rank, TransportRequest::Only(Transport::Proxy))?;
    report["proxy_transports"] = json!(format!("{proxy_transports:?}"));
    let proxy_buffer = Buffer::new(&mut proxy_world)?;
    let proxy_table = proxy_buffer.exchange(&mut proxy_world)?;
    report["proxy_tables"] =
        check_tables(&proxy_world, &proxy_buffer, &proxy_table, &mut failures)?;
    report["proxy"] = check_proxy(&mut proxy_world, &proxy_buffer, &proxy_table, &mut failures)?;

    // 5. auto World.
    progress(rank, "creating the auto world");
    let (mut auto_world, auto_transports) = new_world(rank, TransportRequest::Auto)?;
    report["auto_transports"] = json!(format!("{auto_transports:?}"));
    if auto_transports
        .iter()
        .enumerate()
        .any(|(peer, transport)| peer as u32 != rank && *transport != Transport::P2p)
    {
        failures.push(format!(
            "auto chose {auto_transports:?}; peer access between these GPUs should make it p2p"
        ));
    }

    progress(rank, "closing");
    auto_world.close().map_err(|e| e.to_string())?;
    if let Err(error) = proxy_world.close() {
        failures.push(format!("closing the proxy world: {error}"));
    }
    drop(proxy_table);
    drop(proxy_buffer);
    world.close().map_err(|e| e.to_string())?;
    drop(table);
    drop(buffer);
    report["failures"] = json!(failures);
    Ok(report)
}

fn check_errors(
    world: &mut World,
    device: &Arc<Device>,
    rdma_message: &str,
    failures: &mut Vec<String>,
) -> CheckResult<Value> {
    let mut messages = serde_json::Map::new();
    messages.insert("connect_all_rdma".into(), json!(rdma_message));
    if !rdma_message.contains("rdma transport cannot be used here") {
        failures.push(format!("unexpected rdma error: {rdma_message}"));
    }
    let pageable = vec![0u8; 4096];
    let pinned = PinnedHostMemory::allocate(device, 4096).map_err(|e| e.to_string())?;
    let small = DeviceMemory::allocate(device, 4096).map_err(|e| e.to_string())?;
    let cases: [(&str, u64, u64, &str); 4] = [
        (
            "register_pageable_host",
            pageable.as_ptr() as u64,
            4096,
            "host memory",
        ),
        (
            "register_pinned_host",
            pinned.host_pointer() as u64,
            4096,
            "page-locked host memory",
        ),
        ("register_zero_bytes", small.address(), 0, "0 bytes"),
        (
            "register_past_allocation",
            small.address(),
            64 << 20,
            "the CUDA allocation holding it spans",
        ),
    ];
    for (name, address, length, expected) in cases {
        match world.register(address, length) {
            Ok(_) => failures.push(format!("{name}: register succeeded")),
            Err(error) => {
                let message = error.to_string();
                if !message.contains(expected) {
                    failures.push(format!("{name}: unexpected error {message}"));
                }
                messages.insert(
                    name.into(),
                    json!({ "kind": format!("{:?}", error.kind()), "message": message }),
                );
            }
        }
    }
    let registration = world
        .register(small.address(), 4096)
        .map_err(|e| e.to_string())?;
    match world.region("recv", &registration, 1024, 3073) {
        Ok(_) => failures.push("an out-of-bounds region was accepted".into()),
        Err(error) => {
            messages.insert(
                "region_out_of_bounds".into(),
                json!({ "kind": format!("{:?}", error.kind()), "message": error.to_string() }),
            );
        }
    }
    Ok(Value::Object(messages))
}

fn check_tables(
    world: &World,
    buffer: &Buffer,
    table: &ExchangedRegions,
    failures: &mut Vec<String>,
) -> CheckResult<Value> {
    let rank = world.rank();
    let device_copies_match = table.verify_device_copies().map_err(|e| e.to_string())?;
    if !device_copies_match {
        failures.push("the device tables differ from their host copies".into());
    }
    let recv = table
        .remote_descriptors("recv")
        .map_err(|e| e.to_string())?;
    let local = table.local("recv").map_err(|e| e.to_string())?;
    if recv[rank as usize].base_address != buffer.recv.address()
        || local.address != buffer.recv.address()
    {
        failures.push("this rank's own recv descriptor is not its local address".into());
    }
    for handle in table.endpoint_handle_list() {
        if let Err(error) = handle.validate() {
            failures.push(format!("endpoint handle to {}: {error}", handle.peer_rank));
        }
    }
    let handles: Vec<Value> = table
        .endpoint_handle_list()
        .iter()
        .map(|handle| {
            json!({
                "peer_rank": handle.peer_rank,
                "transport": handle.transport,
                "peer_base_delta": handle.peer_base_delta,
                "proxy_ring_address": format!("{:#x}", handle.proxy_ring_address),
                "proxy_ring_capacity_entries": handle.proxy_ring_capacity_entries,
            })
        })
        .collect();
    Ok(json!({
        "region_names": table.names(),
        "recv_base_addresses": recv.iter().map(|d| format!("{:#x}", d.base_address)).collect::<Vec<_>>(),
        "local_recv_address": format!("{:#x}", local.address),
        "allocation_block": format!("{:#x}", buffer.block.address()),
        "endpoint_handles": handles,
        "device_copies_match_host": device_copies_match,
        "peer_base_deltas_uniform": table.peer_base_deltas().iter().all(|d| d.uniform),
    }))
}

fn check_p2p(
    world: &mut World,
    buffer: &Buffer,
    table: &ExchangedRegions,
    failures: &mut Vec<String>,
) -> CheckResult<Value> {
    let rank = world.rank();
    let world_size = world.world_size();
    let device = world.device().clone();
    let recv = table
        .remote_descriptors("recv")
        .map_err(|e| e.to_string())?
        .to_vec();
    let deltas = table.peer_base_deltas().to_vec();
    let slice = MAXIMUM_SLICE_BYTES as u64;
    let mut rounds = Vec::new();
    let mut round = 0u64;
    for size in SLICE_SIZES {
        for method in [
            "host_to_device",
            "device_to_device",
            "local_address_plus_delta",
        ] {
            round += 1;
            device
                .fill(
                    buffer.recv.address(),
                    POISON,
                    buffer.recv.length_bytes() as usize,
                )
                .map_err(|e| e.to_string())?;
            barrier(world, "poisoned")?;
            let data = pattern(rank, size, round);
            let started = Instant::now();
            for peer in (0..world_size).filter(|&peer| peer != rank) {
                let destination = match method {
                    "local_address_plus_delta" => (buffer.recv.address() + u64::from(rank) * slice)
                        .wrapping_add(deltas[peer as usize].delta as u64),
                    _ => recv[peer as usize].base_address + u64::from(rank) * slice,
                };
                if method == "host_to_device" {
                    device
                        .copy_to_device(destination, &data)
                        .map_err(|e| e.to_string())?;
                } else {
                    device
                        .copy_to_device(buffer.send.address(), &data)
                        .map_err(|e| e.to_string())?;
                    device
                        .copy_device_to_device(destination, buffer.send.address(), size)
                        .map_err(|e| e.to_string())?;
                }
            }
            device.synchronize().map_err(|e| e.to_string())?;
            let write_seconds = started.elapsed().as_secs_f64();
            barrier(world, "written")?;
            let mut bit_exact = true;
            for peer in (0..world_size).filter(|&peer| peer != rank) {
                let expected = pattern(peer, size, round);
                let mut found = vec![0u8; size + usize::from(size < MAXIMUM_SLICE_BYTES)];
                device
                    .copy_from_device(buffer.recv.address() + u64::from(peer) * slice, &mut found)
                    .map_err(|e| e.to_string())?;
                let data_ok = found[..size] == expected[..];
                let guard_ok = size == MAXIMUM_SLICE_BYTES || found[size] == POISON;
                if !(data_ok && guard_ok) {
                    bit_exact = false;
                    let first = found[..size]
                        .iter()
                        .zip(&expected)
                        .position(|(a, b)| a != b);
                    failures.push(format!(
                        "p2p {method} {size} B from rank {peer}: data ok {data_ok}, guard ok {guard_ok}, first mismatch {first:?}"
                    ));
                }
            }
            rounds.push(json!({
                "size_bytes": size,
                "method": method,
                "bit_exact": bit_exact,
                "write_seconds": write_seconds,
            }));
        }
    }
    Ok(json!(rounds))
}

fn check_wait_failures(
    world: &mut World,
    table: &ExchangedRegions,
    failures: &mut Vec<String>,
) -> CheckResult<Value> {
    let rank = world.rank();
    let device = world.device().clone();
    let kernels = world.runtime_kernels().map_err(|e| e.to_string())?;
    let stream = Stream::create(&device).map_err(|e| e.to_string())?;
    let flag_address = table.local("flags").map_err(|e| e.to_string())?.address;
    device.fill(flag_address, 0, 8).map_err(|e| e.to_string())?;
    let log_address = world.wait_failure_log_address();
    let timeout_nanoseconds = 2_000_000;
    // Satisfied at once: no record.
    kernels
        .bounded_wait(
            &stream,
            flag_address,
            0,
            timeout_nanoseconds,
            log_address,
            rank,
            (rank + 1) % world.world_size(),
            3,
        )
        .map_err(|e| e.to_string())?;
    stream.synchronize().map_err(|e| e.to_string())?;
    let after_satisfied = world.wait_failure_log().failure_count();
    // Never satisfied: one record after ~2 ms.
    let started = Instant::now();
    kernels
        .bounded_wait(
            &stream,
            flag_address,
            1,
            timeout_nanoseconds,
            log_address,
            rank,
            (rank + 1) % world.world_size(),
            7,
        )
        .map_err(|e| e.to_string())?;
    stream.synchronize().map_err(|e| e.to_string())?;
    let wait_seconds = started.elapsed().as_secs_f64();
    let records = world.wait_failures();
    let message = world.check_waits().err().map(|error| error.to_string());
    let expected_ok = after_satisfied == 0
        && records.len() == 1
        && records[0].flag_address == flag_address
        && records[0].expected_value == 1
        && records[0].observed_value == 0
        && records[0].rank == rank
        && records[0].site_id == 7
        && records[0].waited_nanoseconds >= timeout_nanoseconds;
    if !expected_ok {
        failures.push(format!(
            "wait-failure log: after a satisfied wait {after_satisfied} failures; records {records:?}"
        ));
    }
    Ok(json!({
        "failures_after_satisfied_wait": after_satisfied,
        "records": records.iter().map(|r| json!({
            "flag_address": format!("{:#x}", r.flag_address),
            "expected_value": r.expected_value,
            "observed_value": r.observed_value,
            "waited_nanoseconds": r.waited_nanoseconds,
            "rank": r.rank,
            "peer_rank": r.peer_rank,
            "site_id": r.site_id,
        })).collect::<Vec<_>>(),
        "check_waits_message": message,
        "host_seconds_for_timed_out_wait": wait_seconds,
        "ok": expected_ok,
    }))
}

/// Reads the 8-byte word at `address` until it equals `expected` (10 s at most).
fn poll_word(device: &Device, address: u64, expected: u64) -> CheckResult<Duration> {
    let started = Instant::now();
    let mut word = [0u8; 8];
    loop {
        device
            .copy_from_device(address, &mut word)
            .map_err(|e| e.to_string())?;
        let value = u64::from_le_bytes(word);
        if value == expected {
            return Ok(started.elapsed());
        }
        if started.elapsed() > Duration::from_secs(10) {
            return Err(format!(
                "the word at {address:#x} is {value}, still not {expected}, after 10 s"
            ));
        }
    }
}

fn check_proxy(
    world: &mut World,
    buffer: &Buffer,
    table: &ExchangedRegions,
    failures: &mut Vec<String>,
) -> CheckResult<Value> {
    let rank = world.rank();
    let world_size = world.world_size();
    let device = world.device().clone();
    let recv_index = table.region_index("recv").map_err(|e| e.to_string())?;
    let flags_index = table.region_index("flags").map_err(|e| e.to_string())?;
    let slice = MAXIMUM_SLICE_BYTES as u64;
    let peers: Vec<u32> = (0..world_size).filter(|&peer| peer != rank).collect();
    let producers = peers
        .iter()
        .map(|&peer| {
            Ok((
                peer,
                RingProducer::new(world.proxy_ring(peer).map_err(|e| e.to_string())?),
            ))
        })
        .collect::<CheckResult<Vec<_>>>()?;
    let mut rounds = Vec::new();
    for (round, size) in SLICE_SIZES.into_iter().enumerate() {
        let epoch = round as u64 + 1;
        device
            .fill(
                buffer.recv.address(),
                POISON,
                buffer.recv.length_bytes() as usize,
            )
            .map_err(|e| e.to_string())?;
        let data = pattern(rank, size, 100 + epoch);
        device
            .copy_to_device(buffer.send.address(), &data)
            .map_err(|e| e.to_string())?;
        barrier(world, "proxy round start")?;
        for (peer, producer) in &producers {
            let command = ProducerCommand::new(
                *peer,
                false,
                ProxyOperation::PutSignal(
                    ProxyPut {
                        source_address: buffer.send.address(),
                        source_key: 0,
                        destination_region_index: recv_index,
                        destination_offset_bytes: u64::from(rank) * slice,
                        length_bytes: size as u64,
                    },
                    ProxySignal {
                        region_index: flags_index,
                        offset_bytes: 8 * rank,
                        value: epoch,
                        operation: SignalOperation::Set,
                    },
                ),
            );
            producer.submit(command);
        }
        // Receiver: the flag first, then the data, with no barrier between.
        let mut bit_exact = true;
        let mut flag_seconds = Vec::new();
        for &peer in &peers {
            let waited = poll_word(&device, buffer.flags.address() + 8 * u64::from(peer), epoch)?;
            flag_seconds.push(waited.as_secs_f64());
            let mut found = vec![0u8; size + usize::from(size < MAXIMUM_SLICE_BYTES)];
            device
                .copy_from_device(buffer.recv.address() + u64::from(peer) * slice, &mut found)
                .map_err(|e| e.to_string())?;
            let expected = pattern(peer, size, 100 + epoch);
            let data_ok = found[..size] == expected[..];
            let guard_ok = size == MAXIMUM_SLICE_BYTES || found[size] == POISON;
            if !(data_ok && guard_ok) {
                bit_exact = false;
                failures.push(format!(
                    "proxy put+signal {size} B from rank {peer}: data ok {data_ok}, guard ok {guard_ok} after the flag was seen"
                ));
            }
        }
        // ADD: a batch of 5 adds of `epoch` per peer, the last with a completion.
        for (peer, producer) in &producers {
            let add = |completion| {
                ProducerCommand::new(
                    *peer,
                    completion,
                    ProxyOperation::Signal(ProxySignal {
                        region_index: flags_index,
                        offset_bytes: 8 * (world_size + rank),
                        value: epoch,
                        operation: SignalOperation::Add,
                    }),
                )
            };
            let batch = [add(false), add(false), add(false), add(false), add(true)];
            let tickets = producer.submit_batch(&batch).map_err(|e| e.to_string())?;
            producer.wait_for_completion(tickets.end - 1);
        }
        let expected_sum: u64 = (1..=epoch).map(|e| 5 * e).sum();
        for &peer in &peers {
            poll_word(
                &device,
                buffer.flags.address() + 8 * u64::from(world_size + peer),
                expected_sum,
            )
            .map_err(|error| {
                failures.push(format!("proxy ADD from rank {peer}: {error}"));
                error
            })?;
        }
        world.check_proxy().map_err(|e| e.to_string())?;
        rounds.push(json!({
            "size_bytes": size,
            "put_signal_bit_exact_after_flag": bit_exact,
            "flag_seen_after_seconds": flag_seconds,
            "add_counter": expected_sum,
        }));
        barrier(world, "proxy round end")?;
    }
    // Round trip of an 8-byte put+signal with a completion, host producer to completion.
    let mut round_trips = Vec::new();
    if let Some((peer, producer)) = producers.first() {
        for iteration in 0..500u64 {
            let started = Instant::now();
            let ticket = producer.submit(ProducerCommand::new(
                *peer,
                true,
                ProxyOperation::PutSignal(
                    ProxyPut {
                        source_address: buffer.send.address(),
                        source_key: 0,
                        destination_region_index: recv_index,
                        destination_offset_bytes: u64::from(rank) * slice,
                        length_bytes: 8,
                    },
                    ProxySignal {
                        region_index: flags_index,
                        offset_bytes: 8 * rank,
                        value: 1000 + iteration,
                        operation: SignalOperation::Set,
                    },
                ),
            ));
            producer.wait_for_completion(ticket);
            round_trips.push(started.elapsed().as_secs_f64() * 1e6);
        }
    }
    round_trips.sort_by(f64::total_cmp);
    let percentile = |p: f64| {
        round_trips
            .get(((round_trips.len() as f64 - 1.0) * p) as usize)
            .copied()
    };
    barrier(world, "proxy done")?;
    world.check_proxy().map_err(|e| e.to_string())?;
    Ok(json!({
        "rounds": rounds,
        "commands_executed": world.proxy_commands_executed(),
        "put_signal_8_bytes_with_completion_round_trip_microseconds": {
            "median": percentile(0.5),
            "p90": percentile(0.9),
            "minimum": percentile(0.0),
            "samples": round_trips.len(),
        },
    }))
}
