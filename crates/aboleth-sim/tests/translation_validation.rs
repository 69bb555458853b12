//! Translation validation of the example programs, the mutation tests (one deliberately broken
//! lowering per test, each of which must be caught), and the simulator's user-facing errors.

use aboleth_abi::Transport;
use aboleth_passes::pipeline::PipelineOptions;
use aboleth_sim::{
    interpreter::{SimulationOptions, simulate},
    mutations::Mutation,
    validation::{KernelValidation, ValidationOptions, compile_for_simulation, validate},
};

/// The in-order transports `signal-before-data` applies to (on EFA a signal is a batch of its own
/// after a wait, so there is no put to swap it with).
const TARGETS: [Transport; 4] = [
    Transport::Mlx5,
    Transport::Proxy,
    Transport::P2p,
    Transport::Ionic,
];

fn example(name: &str) -> (String, String) {
    let path = format!(
        "{}/../../examples/ir/{name}.abo",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    (text, format!("examples/ir/{name}.abo"))
}

/// A program of `tests/programs/`: its text and path.
fn test_program(name: &str) -> (String, String) {
    let path = format!("{}/tests/programs/{name}.abo", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    (text, path)
}

fn run(name: &str, options: &ValidationOptions) -> KernelValidation {
    let (text, file) = example(name);
    let mut validations = validate(&text, &file, options).unwrap_or_else(|d| panic!("{d}"));
    assert_eq!(validations.len(), 1);
    validations.remove(0)
}

#[test]
fn every_example_validates_on_every_target() {
    for name in [
        "alltoall",
        "count_arrivals",
        "dead_put",
        "epoch_counter",
        "moe_dispatch",
        "moe_dispatch_compacted",
        "reuse_source",
        "shared_queue",
        "stream_put_signal_1",
        "stream_put_signal_4",
        "stream_put_signal_16",
    ] {
        for target in Transport::LOWERED {
            for ranks in [2, 4] {
                let mut options = ValidationOptions::new(target);
                options.ranks = ranks;
                options.rounds = 2;
                let validation = run(name, &options);
                assert!(
                    validation.passed(),
                    "{name} on {} with {ranks} ranks: {:#?}",
                    target.name(),
                    validation.failures
                );
                assert_eq!(validation.passes_off.rounds.len(), 2);
                assert_eq!(validation.passes_on.rounds.len(), 2);
            }
        }
    }
}

/// On a 64-block send ring, four launches of every example wrap the ring several times; the
/// generated code frees space only through completions it waits for, or that the reservation
/// finds by polling the CQ (periodic completions guarantee one comes), so this fails if either
/// is missing (the run deadlocks on ring space).
#[test]
fn small_send_rings_wrap_and_are_reclaimed_through_completions() {
    for name in [
        "alltoall",
        "moe_dispatch",
        "moe_dispatch_compacted",
        "reuse_source",
        "shared_queue",
        "stream_put_signal_4",
        "stream_put_signal_16",
    ] {
        let mut options = ValidationOptions::new(Transport::Mlx5);
        options.ranks = 3;
        options.rounds = 4;
        options.schedules = 5;
        options.sq_basic_block_count = 64;
        let validation = run(name, &options);
        assert!(validation.passed(), "{name}: {:#?}", validation.failures);
    }
}

/// EFA: on 16-entry send queues, four launches of every example wrap the queues several
/// times; completions arrive out of order and the reservations free space only through the
/// completion log's consumer index, so this fails (a deadlock on queue space, or a device
/// refusing a doorbell that runs past its ring) if the log is not rebuilt right.
#[test]
fn efa_send_queues_wrap_and_are_reclaimed_through_the_completion_log() {
    for name in [
        "alltoall",
        "count_arrivals",
        "moe_dispatch",
        "moe_dispatch_compacted",
        "reuse_source",
        "shared_queue",
        "stream_put_signal_16",
    ] {
        let mut options = ValidationOptions::new(Transport::Efa);
        options.ranks = 3;
        options.rounds = 4;
        options.schedules = 5;
        options.sq_basic_block_count = 16;
        let validation = run(name, &options);
        assert!(validation.passed(), "{name}: {:#?}", validation.failures);
    }
}

/// EFA: every WQE requests a completion (rdma-core requires it), a signal is a WQE of its own
/// after its data's completions, and the planned form posts no more WQEs than the library's.
#[test]
fn efa_signals_are_writes_after_their_data_and_every_wqe_completes() {
    for name in ["alltoall", "count_arrivals", "moe_dispatch"] {
        let mut options = ValidationOptions::new(Transport::Efa);
        options.ranks = 3;
        let validation = run(name, &options);
        assert!(validation.passed(), "{name}: {:#?}", validation.failures);
        for counts in [
            validation.passes_on.rounds[0].counts,
            validation.passes_off.rounds[0].counts,
        ] {
            assert_eq!(counts.completions_requested, counts.wqes, "{name}");
        }
        assert!(
            validation.passes_on.rounds[0].counts.wqes
                <= validation.passes_off.rounds[0].counts.wqes,
            "{name}"
        );
    }
}

/// EFA: more add signals in flight to a rank than its receive CQ holds is reported as an
/// overrun naming the rank and the fix, in both configurations, never a silent loss or a hang.
#[test]
fn an_efa_receive_cq_overrun_is_reported() {
    let (text, path) = test_program("efa_receive_cq_overrun");
    let mut options = ValidationOptions::new(Transport::Efa);
    options.schedules = 2;
    for validation in validate(&text, &path, &options).unwrap_or_else(|d| panic!("{d}")) {
        assert!(!validation.failures.is_empty());
        for failure in &validation.failures {
            assert_eq!(failure.kind, "nic", "{failure:?}");
            assert!(
                failure.message.contains("receive CQ overran")
                    && failure.message.contains("a wait of rank"),
                "{}",
                failure.message
            );
        }
    }
}

/// EFA: a signal marked `InOrderOnQueue` by hand still waits for its data's completion (SRD
/// orders nothing), in both configurations.
#[test]
fn an_efa_signal_marked_in_order_still_waits_for_its_data() {
    let (text, path) = test_program("efa_signal_marked_in_order");
    let mut options = ValidationOptions::new(Transport::Efa);
    options.ranks = 3;
    options.schedules = 40;
    for validation in validate(&text, &path, &options).unwrap_or_else(|d| panic!("{d}")) {
        assert!(validation.passed(), "{:#?}", validation.failures);
    }
}

/// A put under a run-time predicate that carries the completion a later drain relies on is
/// posted (a NOP or an empty write when the predicate is false), not skipped: found by random
/// program 548 on Ionic (which keeps predicated puts out of batches), and on mlx5 and the proxy
/// with `batch-commands` disabled, as a source rewritten before the NIC read it.
#[test]
fn a_predicated_put_carrying_the_drain_completion_is_posted() {
    for program in [
        "predicated_put_carrying_the_drain_completion",
        "predicated_put_carrying_a_last_iteration_completion",
    ] {
        let (text, path) = test_program(program);
        for (target, disabled) in [
            (Transport::Ionic, None),
            (Transport::Efa, None),
            (Transport::Mlx5, Some("batch-commands")),
            (Transport::Proxy, Some("batch-commands")),
        ] {
            let mut options = ValidationOptions::new(target);
            options.ranks = 2;
            options.schedules = 20;
            options.seed = 548;
            options.disabled_passes = disabled.into_iter().map(str::to_owned).collect();
            let validations = match validate(&text, &path, &options) {
                Ok(validations) => validations,
                // lower-efa's own rules may refuse a generated program.
                Err(error) if target == Transport::Efa && error.message.starts_with("on efa ") => {
                    continue;
                }
                Err(error) => panic!("{error}"),
            };
            for validation in validations {
                assert!(
                    validation.passed(),
                    "{program} on {}: {:#?}",
                    target.name(),
                    validation.failures
                );
            }
        }
    }
}

#[test]
fn mutation_signal_in_order_on_efa_is_caught() {
    for program in [
        "alltoall",
        "count_arrivals",
        "moe_dispatch_compacted",
        "shared_queue",
    ] {
        let mut options = ValidationOptions::new(Transport::Efa);
        options.ranks = 3;
        options.schedules = 40;
        options.mutation = Some(Mutation::SignalInOrderOnEfa);
        let validation = run(program, &options);
        let kinds: Vec<&str> = validation.failures.iter().map(|f| f.kind).collect();
        assert!(kinds.contains(&"data-not-visible"), "{program}: {kinds:?}");
    }
}

/// A launch that fills a 16-block send ring three times over with no wait before its drain: it
/// finishes only if the reservations reclaim space through the periodic completions.
#[test]
fn a_ring_filled_within_a_launch_is_reclaimed_through_periodic_completions() {
    let (text, path) = test_program("ring_fills_within_a_launch");
    for target in [Transport::Mlx5, Transport::Ionic] {
        let mut options = ValidationOptions::new(target);
        options.ranks = 3;
        options.rounds = 2;
        options.schedules = 10;
        options.sq_basic_block_count = 16;
        for validation in validate(&text, &path, &options).unwrap_or_else(|d| panic!("{d}")) {
            assert!(
                validation.passed(),
                "{}: {:#?}",
                target.name(),
                validation.failures
            );
        }
    }
}

/// Ionic: on 64-entry send queues (63 usable: one stays empty), four launches of every example
/// wrap the queues; space comes
/// back only through the cumulative CQEs the reservations poll, so this fails (a deadlock on
/// queue space, or a device refusing a doorbell past its ring) if that is wrong.
#[test]
fn ionic_send_queues_wrap_and_are_reclaimed_through_their_cqes() {
    for name in [
        "alltoall",
        "count_arrivals",
        "moe_dispatch",
        "moe_dispatch_compacted",
        "reuse_source",
        "shared_queue",
        "stream_put_signal_16",
    ] {
        let mut options = ValidationOptions::new(Transport::Ionic);
        options.ranks = 3;
        options.rounds = 4;
        options.schedules = 5;
        options.sq_basic_block_count = 64;
        let validation = run(name, &options);
        assert!(validation.passed(), "{name}: {:#?}", validation.failures);
    }
}

/// With `--immediate-signals`, count_arrivals' signals ride on their puts on mlx5: half the
/// WQEs, no remote atomics, and the same final memory and checks as the library style.
#[test]
fn write_with_immediate_signals_validate_and_save_a_wqe_per_signal() {
    for ranks in [2, 3, 4] {
        let mut options = ValidationOptions::new(Transport::Mlx5);
        options.ranks = ranks;
        options.rounds = 3;
        options.immediate_signals = true;
        let validation = run("count_arrivals", &options);
        assert!(
            validation.passed(),
            "{ranks} ranks: {:#?}",
            validation.failures
        );
        let on = validation.passes_on.rounds[0].counts;
        let off = validation.passes_off.rounds[0].counts;
        // Per program: 4 puts + 4 signals library-style, 4 writes with immediate here.
        assert_eq!(off.wqes, u64::from(ranks * (ranks - 1)) * 8);
        assert_eq!(on.wqes, u64::from(ranks * (ranks - 1)) * 4);
    }
}

/// moe_dispatch_compacted's per-peer loop runs `count` times, a count loaded at run time and
/// bounded by `% 4`: its puts and the signal after it share one reservation and one doorbell
/// per program on the queue transports (library style: one of each per command), and every
/// configuration validates.
#[test]
fn a_loop_with_a_run_time_trip_count_posts_one_batch_per_program() {
    for target in [Transport::Mlx5, Transport::Proxy] {
        for ranks in [2, 4, 8] {
            let mut options = ValidationOptions::new(target);
            options.ranks = ranks;
            options.rounds = 2;
            let validation = run("moe_dispatch_compacted", &options);
            assert!(
                validation.passed(),
                "{} {ranks} ranks: {:#?}",
                target.name(),
                validation.failures
            );
            let programs = u64::from(ranks * (ranks - 1));
            for round in &validation.passes_on.rounds {
                assert_eq!(round.counts.reservations, programs, "{}", target.name());
                assert_eq!(round.counts.doorbells, programs, "{}", target.name());
            }
            let off = validation.passes_off.rounds[0].counts;
            // One WQE per token and one per signal; library style rings for each.
            assert!(off.wqes > programs, "some tokens were sent");
            assert_eq!(off.doorbells, off.wqes);
        }
    }
}

#[test]
fn mutation_run_time_batch_under_reserved_is_caught() {
    for target in [Transport::Mlx5, Transport::Proxy] {
        let mut options = ValidationOptions::new(target);
        options.ranks = 3;
        options.rounds = 3;
        options.mutation = Some(Mutation::RunTimeBatchUnderReserved);
        let validation = run("moe_dispatch_compacted", &options);
        assert!(!validation.passed(), "{}: nothing caught", target.name());
        for failure in &validation.failures {
            assert_eq!(failure.configuration, "passes-on", "{failure:?}");
        }
    }
}

#[test]
fn mutation_wait_without_draining_receives_is_caught() {
    let mut options = ValidationOptions::new(Transport::Mlx5);
    options.ranks = 3;
    options.immediate_signals = true;
    options.mutation = Some(Mutation::WaitWithoutDrainingReceives);
    let validation = run("count_arrivals", &options);
    let kinds: Vec<&str> = validation.failures.iter().map(|f| f.kind).collect();
    assert!(kinds.contains(&"deadlock"), "{kinds:?}");
    assert!(
        validation
            .failures
            .iter()
            .all(|failure| failure.configuration == "passes-on")
    );
}

/// With `--packet-signals`, p2p chains travel as flag-in-data packets: no barrier and no flag
/// store per chain, and the same final memory and per-wait data checks as the library style.
#[test]
fn packet_signals_validate_and_drop_barriers_and_flag_stores() {
    for (name, chains_per_program) in [("stream_put_signal_16", 16), ("alltoall", 1)] {
        for ranks in [2, 3, 4] {
            let mut options = ValidationOptions::new(Transport::P2p);
            options.ranks = ranks;
            options.rounds = 3;
            options.packet_signals = true;
            let validation = run(name, &options);
            assert!(
                validation.passed(),
                "{name}, {ranks} ranks: {:#?}",
                validation.failures
            );
            let on = validation.passes_on.rounds[0].counts;
            let off = validation.passes_off.rounds[0].counts;
            let programs = if name == "alltoall" { ranks - 1 } else { 1 };
            let chains = u64::from(ranks * programs) * chains_per_program;
            assert_eq!((off.flag_stores, off.barriers), (chains, chains), "{name}");
            assert_eq!((on.flag_stores, on.barriers), (0, 0), "{name}");
            assert_eq!(on.payload_bytes, off.payload_bytes);
        }
    }
}

#[test]
fn mutation_unpack_without_checking_packets_is_caught() {
    let mut options = ValidationOptions::new(Transport::P2p);
    options.ranks = 3;
    options.packet_signals = true;
    options.mutation = Some(Mutation::UnpackWithoutCheckingPackets);
    let validation = run("stream_put_signal_16", &options);
    let kinds: Vec<&str> = validation.failures.iter().map(|f| f.kind).collect();
    assert!(kinds.contains(&"data-not-visible"), "{kinds:?}");
    assert!(
        validation
            .failures
            .iter()
            .all(|failure| failure.configuration == "passes-on")
    );
    // Without packet signals there is no packet wait to break: an error, not a pass.
    options.packet_signals = false;
    let (text, file) = example("stream_put_signal_16");
    assert!(validate(&text, &file, &options).is_err());
}

#[test]
fn mutation_wait_without_unpacking_packets_is_caught() {
    let mut options = ValidationOptions::new(Transport::P2p);
    options.ranks = 3;
    options.packet_signals = true;
    options.mutation = Some(Mutation::WaitWithoutDrainingReceives);
    let validation = run("stream_put_signal_4", &options);
    let kinds: Vec<&str> = validation.failures.iter().map(|f| f.kind).collect();
    assert!(kinds.contains(&"deadlock"), "{kinds:?}");
}

/// A program that breaks the packet-signals contract (a chain no wait of its receiver awaits)
/// validates library-style and fails with packets, naming the signal and the rule.
#[test]
fn a_packet_transfer_never_awaited_names_the_signal_and_the_rule() {
    let (text, path) = test_program("packets_never_awaited");
    let mut options = ValidationOptions::new(Transport::P2p);
    options.ranks = 2;
    options.schedules = 3;
    let mut validations = validate(&text, &path, &options).unwrap_or_else(|d| panic!("{d}"));
    assert!(validations.remove(0).passed());
    options.packet_signals = true;
    let validation = validate(&text, &path, &options)
        .unwrap_or_else(|d| panic!("{d}"))
        .remove(0);
    assert_eq!(validation.failures.len(), 3, "{:#?}", validation.failures);
    let expected = "program error: after launch 1: rank 1 program 0's packet signal at PATH:27:7 (p2p.put_packets) (value 1) to flag 'flags'+0x0 on rank 0 was never unpacked: with packet signals every signal must be awaited by its receiver in the launch that sends it"
        .replace("PATH", &path);
    // Which rank's transfer is reported first depends on the schedule.
    let swapped = expected
        .replace("rank 1", "rank @")
        .replace("rank 0", "rank 1")
        .replace("rank @", "rank 0");
    for failure in &validation.failures {
        assert_eq!(failure.configuration, "passes-on");
        assert!(
            failure.message == expected || failure.message == swapped,
            "{}",
            failure.message
        );
    }
}

/// Two chains whose flag indices are equal only at run time: the compiler cannot tell the slots
/// apart, so it keeps both signals as release stores, and the program validates.
#[test]
fn chains_that_may_share_a_slot_keep_their_release_stores() {
    let (text, path) = test_program("packets_share_a_flag");
    let mut options = ValidationOptions::new(Transport::P2p);
    options.ranks = 2;
    options.packet_signals = true;
    let validation = validate(&text, &path, &options)
        .unwrap_or_else(|d| panic!("{d}"))
        .remove(0);
    assert!(validation.passed(), "{:#?}", validation.failures);
    assert_eq!(validation.passes_on.rounds[0].counts.flag_stores, 2 * 2);
}

#[test]
fn mutation_no_periodic_completions_is_caught() {
    let (text, path) = test_program("ring_fills_within_a_launch");
    for target in [Transport::Mlx5, Transport::Ionic] {
        let mut options = ValidationOptions::new(target);
        options.ranks = 3;
        options.schedules = 5;
        options.sq_basic_block_count = 16;
        options.mutation = Some(Mutation::NoPeriodicCompletions);
        for validation in validate(&text, &path, &options).unwrap_or_else(|d| panic!("{d}")) {
            let kinds: Vec<&str> = validation.failures.iter().map(|f| f.kind).collect();
            assert!(kinds.contains(&"deadlock"), "{}: {kinds:?}", target.name());
            assert!(
                validation
                    .failures
                    .iter()
                    .all(|failure| failure.configuration == "passes-on")
            );
        }
    }
}

/// Programs the random-program validation found miscompiled (now fixed): each must validate.
#[test]
fn regressions_found_by_random_programs_validate() {
    let directory = format!("{}/tests/regressions", env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<_> = std::fs::read_dir(&directory)
        .unwrap_or_else(|e| panic!("{directory}: {e}"))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "abo"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    for path in files {
        let text = std::fs::read_to_string(&path).expect("readable");
        for target in TARGETS {
            for ranks in [2, 3, 4] {
                let mut options = ValidationOptions::new(target);
                options.ranks = ranks;
                let file = path.display().to_string();
                for validation in validate(&text, &file, &options).unwrap_or_else(|d| panic!("{d}"))
                {
                    if validation.failures.iter().all(|f| f.kind == "setup")
                        && !validation.failures.is_empty()
                    {
                        // The grid is empty at this rank count (e.g. "ranks-2" on 2 ranks).
                        continue;
                    }
                    assert!(
                        validation.passed(),
                        "{file} on {} with {ranks} ranks: {:#?}",
                        target.name(),
                        validation.failures
                    );
                }
            }
        }
    }
}

#[test]
fn the_alltoall_validates_on_eight_ranks() {
    for target in TARGETS {
        let mut options = ValidationOptions::new(target);
        options.ranks = 8;
        options.rounds = 3;
        let validation = run("alltoall", &options);
        assert!(validation.passed(), "{:#?}", validation.failures);
    }
}

#[test]
fn executed_counts_of_the_sixteen_chain_stream_match_the_plan() {
    let mut options = ValidationOptions::new(Transport::Mlx5);
    options.schedules = 2;
    let validation = run("stream_put_signal_16", &options);
    assert!(validation.passed(), "{:#?}", validation.failures);
    // Two ranks, one program each.
    let on = validation.passes_on.rounds[0].counts;
    assert_eq!(
        (on.reservations, on.doorbells, on.doorbell_record_updates),
        (2, 2, 2)
    );
    // One planned completion per rank, and one periodic one: each ring's first WQE starts at
    // block 0, a ring-quarter boundary (aboleth_abi::mlx5::periodic_completion).
    assert_eq!((on.atomics, on.wqes, on.completions_requested), (0, 64, 4));
    assert_eq!(on.inline_bytes, 2 * 16 * 64);
    let off = validation.passes_off.rounds[0].counts;
    assert_eq!(
        (off.reservations, off.doorbells, off.doorbell_record_updates),
        (32, 32, 32)
    );
    assert_eq!(off.atomics, 32 * 4);
    assert!(
        validation.passes_on.rounds[0].simulated_time_nanoseconds
            < validation.passes_off.rounds[0].simulated_time_nanoseconds
    );
}

/// Runs `mutation` on `program` for `target` and returns the kinds of the failures found.
fn mutation_failures(mutation: Mutation, program: &str, target: Transport) -> Vec<&'static str> {
    let mut options = ValidationOptions::new(target);
    options.ranks = 3;
    options.mutation = Some(mutation);
    let validation = run(program, &options);
    for failure in &validation.failures {
        assert_eq!(
            failure.configuration, "passes-on",
            "the library-style run must stay clean: {failure:?}"
        );
    }
    validation.failures.iter().map(|f| f.kind).collect()
}

#[test]
fn mutation_signal_before_data_is_caught() {
    for target in TARGETS {
        let kinds = mutation_failures(Mutation::SignalBeforeData, "stream_put_signal_4", target);
        assert!(
            kinds.contains(&"data-not-visible"),
            "{}: {kinds:?}",
            target.name()
        );
    }
}

#[test]
fn mutation_missing_fence_is_caught() {
    for (target, expected) in [
        (Transport::Mlx5, "nic"),
        (Transport::Proxy, "proxy"),
        (Transport::P2p, "data-not-visible"),
        // The device fetches WQE bytes still in the store buffer: not an RDMA write.
        (Transport::Efa, "nic"),
        (Transport::Ionic, "nic"),
    ] {
        let kinds = mutation_failures(Mutation::MissingFence, "stream_put_signal_4", target);
        assert!(kinds.contains(&expected), "{}: {kinds:?}", target.name());
    }
    let kinds = mutation_failures(Mutation::MissingFence, "reuse_source", Transport::Proxy);
    assert!(kinds.contains(&"source-changed"), "{kinds:?}");
}

#[test]
fn mutation_dropped_completion_is_caught() {
    for target in [
        Transport::Mlx5,
        Transport::Proxy,
        Transport::Efa,
        Transport::Ionic,
    ] {
        let kinds = mutation_failures(Mutation::DroppedCompletion, "alltoall", target);
        assert!(kinds.contains(&"deadlock"), "{}: {kinds:?}", target.name());
    }
}

#[test]
fn mutation_doorbell_before_record_is_caught() {
    let kinds = mutation_failures(
        Mutation::DoorbellBeforeRecord,
        "stream_put_signal_4",
        Transport::Mlx5,
    );
    assert!(kinds.contains(&"deadlock"), "{kinds:?}");
}

#[test]
fn mutation_reused_source_without_wait_is_caught() {
    for target in [Transport::Mlx5, Transport::Proxy] {
        let kinds = mutation_failures(Mutation::ReusedSourceWithoutWait, "reuse_source", target);
        assert!(
            kinds.contains(&"source-changed"),
            "{}: {kinds:?}",
            target.name()
        );
    }
}

#[test]
fn mutation_false_single_owner_is_caught() {
    for target in [
        Transport::Mlx5,
        Transport::Proxy,
        Transport::Efa,
        Transport::Ionic,
    ] {
        let kinds = mutation_failures(Mutation::FalseSingleOwner, "shared_queue", target);
        assert!(!kinds.is_empty(), "{}", target.name());
    }
}

#[test]
fn mutation_epoch_off_by_one_is_caught() {
    for target in TARGETS {
        let mut options = ValidationOptions::new(target);
        options.ranks = 3;
        options.rounds = 2;
        options.mutation = Some(Mutation::EpochOffByOne);
        let validation = run("epoch_counter", &options);
        assert!(!validation.passed(), "{}", target.name());
        assert!(
            validation
                .failures
                .iter()
                .all(|failure| failure.configuration == "passes-on"),
            "{:#?}",
            validation.failures
        );
    }
}

#[test]
fn mutation_posting_without_barrier_is_caught() {
    for (target, expected) in [(Transport::Mlx5, "nic"), (Transport::Proxy, "proxy")] {
        for example_name in ["stream_put_signal_16", "moe_dispatch"] {
            let kinds = mutation_failures(Mutation::PostingWithoutBarrier, example_name, target);
            assert!(
                kinds.contains(&expected),
                "{example_name} on {}: {kinds:?}",
                target.name()
            );
        }
    }
}

#[test]
fn mutation_stale_publication_counter_is_caught() {
    for target in [Transport::Mlx5, Transport::Proxy] {
        let kinds = mutation_failures(Mutation::StalePublicationCounter, "alltoall", target);
        assert!(kinds.contains(&"program"), "{}: {kinds:?}", target.name());
    }
}

/// A program that stores its send buffer and then puts it validates on every transport: p2p
/// puts a barrier before the copy (one more per program than the signal's), mlx5 and proxy
/// reserve after one. The seed's all-to-all, whose send buffer the host wrote, gets none.
#[test]
fn a_source_the_program_stored_is_copied_after_a_barrier() {
    let (text, path) = test_program("store_then_put");
    for target in TARGETS {
        for ranks in [2, 3] {
            let mut options = ValidationOptions::new(target);
            options.ranks = ranks;
            options.rounds = 2;
            let validation = validate(&text, &path, &options)
                .unwrap_or_else(|d| panic!("{d}"))
                .remove(0);
            assert!(
                validation.passed(),
                "{} with {ranks} ranks: {:#?}",
                target.name(),
                validation.failures
            );
            if target == Transport::P2p {
                let programs = u64::from(ranks * (ranks - 1));
                for figures in [&validation.passes_on, &validation.passes_off] {
                    assert_eq!(figures.rounds[0].counts.barriers, 2 * programs);
                }
            }
        }
    }
    // As packets: no barrier for the signal, the source's still.
    let mut options = ValidationOptions::new(Transport::P2p);
    options.ranks = 3;
    options.packet_signals = true;
    let validation = validate(&text, &path, &options)
        .unwrap_or_else(|d| panic!("{d}"))
        .remove(0);
    assert!(validation.passed(), "{:#?}", validation.failures);
    assert_eq!(validation.passes_on.rounds[0].counts.flag_stores, 0);
    assert_eq!(validation.passes_on.rounds[0].counts.barriers, 3 * 2);

    let mut options = ValidationOptions::new(Transport::P2p);
    options.ranks = 3;
    let validation = run("alltoall", &options);
    assert!(validation.passed(), "{:#?}", validation.failures);
    // One barrier per program: the signal's.
    assert_eq!(validation.passes_on.rounds[0].counts.barriers, 3 * 2);
    options.mutation = Some(Mutation::PutWithoutSourceBarrier);
    let (text, file) = example("alltoall");
    assert_eq!(
        validate(&text, &file, &options).unwrap_err().to_string(),
        "examples/ir/alltoall.abo: error: the mutation `put-without-source-barrier` found nothing to break in this program for p2p"
    );
}

/// The simulator keeps per-location order between a program's stores that a barrier handed to
/// its buffer and the next ones of its other threads (a random program found it reading an
/// older value back).
#[test]
fn stores_rewritten_after_their_barrier_keep_their_order() {
    let (text, path) = test_program("source_rewritten_after_its_barrier");
    for target in TARGETS {
        let mut options = ValidationOptions::new(target);
        options.ranks = 3;
        for validation in validate(&text, &path, &options).unwrap_or_else(|d| panic!("{d}")) {
            assert!(
                validation.passed(),
                "{}: {:#?}",
                target.name(),
                validation.failures
            );
        }
    }
}

#[test]
fn mutation_put_without_source_barrier_is_caught() {
    let (text, path) = test_program("store_then_put");
    for packet_signals in [false, true] {
        let mut options = ValidationOptions::new(Transport::P2p);
        options.ranks = 3;
        options.packet_signals = packet_signals;
        options.mutation = Some(Mutation::PutWithoutSourceBarrier);
        let validation = validate(&text, &path, &options)
            .unwrap_or_else(|d| panic!("{d}"))
            .remove(0);
        let kinds: Vec<&str> = validation.failures.iter().map(|f| f.kind).collect();
        assert!(kinds.contains(&"stale-source"), "{kinds:?}");
        for failure in &validation.failures {
            assert_eq!(failure.configuration, "passes-on", "{failure:?}");
        }
        let message = &validation.failures[0].message;
        assert!(
            message.contains("where the program had stored")
                && message.contains("a gpu.barrier must separate them"),
            "{message}"
        );
    }
    // The pipelined staging buffer of reuse_source, rewritten before every put.
    let kinds = mutation_failures(
        Mutation::PutWithoutSourceBarrier,
        "reuse_source",
        Transport::P2p,
    );
    assert!(kinds.contains(&"stale-source"), "{kinds:?}");
}

#[test]
fn waits_with_every_comparison_validate_on_every_transport() {
    let (text, path) = test_program("wait_comparisons");
    let mut configurations: Vec<ValidationOptions> =
        TARGETS.into_iter().map(ValidationOptions::new).collect();
    let mut immediates = ValidationOptions::new(Transport::Mlx5);
    immediates.immediate_signals = true;
    let mut packets = ValidationOptions::new(Transport::P2p);
    packets.packet_signals = true;
    configurations.extend([immediates, packets]);
    for mut options in configurations {
        options.ranks = 3;
        options.rounds = 3;
        let validations = validate(&text, &path, &options).unwrap_or_else(|d| panic!("{d}"));
        assert_eq!(validations.len(), 5);
        for validation in validations {
            assert!(
                validation.passed(),
                "{} {}: {:#?}",
                validation.kernel,
                options.target.name(),
                validation.failures
            );
        }
    }
}

#[test]
fn mutation_wait_comparison_dropped_is_caught() {
    let (text, path) = test_program("wait_comparisons");
    for target in TARGETS {
        let mut options = ValidationOptions::new(target);
        options.ranks = 3;
        options.rounds = 3;
        options.mutation = Some(Mutation::WaitComparisonDropped);
        for validation in validate(&text, &path, &options).unwrap_or_else(|d| panic!("{d}")) {
            // `== epoch` and `>= epoch` wait for the same landing: nothing to catch there.
            if validation.kernel == "wait_eq" {
                continue;
            }
            let kinds: Vec<&str> = validation.failures.iter().map(|f| f.kind).collect();
            assert!(
                kinds.contains(&"data-not-visible"),
                "{} {}: {kinds:?}",
                validation.kernel,
                target.name()
            );
        }
    }
}

#[test]
fn a_deadlock_of_a_wait_with_another_comparison_names_it() {
    let text = WAITS_FOREVER.replace(
        "ab.wait_signal my_flags, epoch [];",
        "ab.wait_signal my_flags, epoch [comparison: ab.comparison Gt];",
    );
    let pipeline = PipelineOptions::new(Transport::P2p);
    let (kernels, _) = compile_for_simulation(&text, "lonely.abo", &pipeline, None).unwrap();
    let error = simulate(&kernels[0], &SimulationOptions::new(2)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "deadlock: rank 0 program 0 waits at lonely.abo:9:7 (gpu.wait_flag) for flag 'flags'+0x0 on rank 0 to become > 1 (epoch 1); it holds 0: the signal that should set it never arrived; \
         rank 1 program 0 waits at lonely.abo:9:7 (gpu.wait_flag) for flag 'flags'+0x0 on rank 1 to become > 1 (epoch 1); it holds 0: the signal that should set it never arrived"
    );
}

#[test]
fn a_mutation_with_nothing_to_break_is_an_error_not_a_pass() {
    let (text, file) = example("alltoall");
    let mut options = ValidationOptions::new(Transport::P2p);
    options.mutation = Some(Mutation::DoorbellBeforeRecord);
    let error = validate(&text, &file, &options).unwrap_err();
    assert_eq!(
        error.to_string(),
        "examples/ir/alltoall.abo: error: the mutation `doorbell-before-record` found nothing to break in this program for p2p"
    );
}

const WAITS_FOREVER: &str = r#"builtin.module @lonely {
  ^entry():
  builtin.func @lonely: builtin.function <(ab.ptr, builtin.integer i64) -> ()>
    [grid: builtin.string "1",
     regions: builtin.string "flags=8",
     bind: builtin.string "my_flags=local:flags epoch=value:epoch"]
  {
    ^entry(my_flags: ab.ptr, epoch: builtin.integer i64):
      ab.wait_signal my_flags, epoch [];
      ab.return
  }
}
"#;

#[test]
fn a_deadlock_names_rank_program_flag_and_epoch() {
    let pipeline = PipelineOptions::new(Transport::Mlx5);
    let (kernels, _) =
        compile_for_simulation(WAITS_FOREVER, "lonely.abo", &pipeline, None).unwrap();
    let error = simulate(&kernels[0], &SimulationOptions::new(2)).unwrap_err();
    assert_eq!(error.kind(), "deadlock");
    assert_eq!(
        error.to_string(),
        "deadlock: rank 0 program 0 waits at lonely.abo:9:7 (gpu.wait_flag) for flag 'flags'+0x0 on rank 0 to reach 1 (epoch 1); it holds 0: the signal that should set it never arrived; \
         rank 1 program 0 waits at lonely.abo:9:7 (gpu.wait_flag) for flag 'flags'+0x0 on rank 1 to reach 1 (epoch 1); it holds 0: the signal that should set it never arrived"
    );
}

#[test]
fn setup_errors_name_the_attribute_and_the_fix() {
    let pipeline = PipelineOptions::new(Transport::P2p);
    let unbound = WAITS_FOREVER.replace(" epoch=value:epoch", "");
    let error = compile_for_simulation(&unbound, "unbound.abo", &pipeline, None).unwrap_err();
    assert_eq!(
        error.to_string(),
        "unbound.abo:3:3: error: cannot simulate: argument `epoch` is not bound; add `epoch=...` to the kernel's `bind` attribute"
    );
    let no_regions = WAITS_FOREVER.replace("     regions: builtin.string \"flags=8\",\n", "");
    let error = compile_for_simulation(&no_regions, "bare.abo", &pipeline, None).unwrap_err();
    assert!(
        error.to_string().starts_with(
            "bare.abo:3:3: error: cannot simulate: the kernel has no `regions` attribute"
        ),
        "{error}"
    );
    let (kernels, _) =
        compile_for_simulation(WAITS_FOREVER, "lonely.abo", &pipeline, None).unwrap();
    let error = simulate(&kernels[0], &SimulationOptions::new(1)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "cannot set up the simulation: 1 rank(s): communication needs at least 2 ranks (--ranks)"
    );
}
