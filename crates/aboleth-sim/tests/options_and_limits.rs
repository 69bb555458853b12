//! Options that would run nothing are refused, resource limits are errors that name what is too
//! big, long runs report progress, and a program's pointers reach only its regions.

use std::{cell::RefCell, rc::Rc};

use aboleth_abi::Transport;

/// A refused option: what it is, how to set it, and what the error must say.
type RefusedOption = (
    &'static str,
    fn(&mut ValidationOptions),
    &'static [&'static str],
);
use aboleth_passes::pipeline::PipelineOptions;
use aboleth_sim::{
    interpreter::{ProgressHook, SimulationOptions, memory_estimate, simulate},
    validation::{ValidationOptions, compile_for_simulation, validate},
};

fn example(name: &str) -> (String, String) {
    let path = format!(
        "{}/../../examples/ir/{name}.abo",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    (text, format!("examples/ir/{name}.abo"))
}

/// The error `validate` gives for the example `name` under `options`.
fn validation_error(name: &str, options: &ValidationOptions) -> String {
    let (text, file) = example(name);
    match validate(&text, &file, options) {
        Ok(validations) => panic!("expected an error, got {validations:#?}"),
        Err(diagnostic) => diagnostic.to_string(),
    }
}

/// `--schedules 0`, `--rounds 0`, `--ranks 0/1`, too many ranks and `--step-limit 0` used to
/// "validate" having run nothing (or fail every schedule); each is refused up front, naming the
/// option and the fix.
#[test]
fn options_that_run_nothing_are_refused_naming_the_option_and_the_fix() {
    let cases: [RefusedOption; 6] = [
        (
            "schedules",
            |o| o.schedules = 0,
            &["--schedules 0", "give --schedules 1 or more"],
        ),
        (
            "rounds",
            |o| o.rounds = 0,
            &["--rounds 0", "give --rounds 1 or more"],
        ),
        (
            "no ranks",
            |o| o.ranks = 0,
            &["--ranks 0", "give --ranks 2 or more"],
        ),
        (
            "one rank",
            |o| o.ranks = 1,
            &["--ranks 1", "give --ranks 2 or more"],
        ),
        (
            "too many ranks",
            |o| o.ranks = 2000,
            &[
                "--ranks 2000",
                "at most 1024 ranks",
                "give --ranks 1024 or fewer",
            ],
        ),
        (
            "step limit",
            |o| o.step_limit = 0,
            &["--step-limit 0", "give a positive limit"],
        ),
    ];
    for (what, change, needles) in cases {
        for target in [Transport::Mlx5, Transport::P2p] {
            let mut options = ValidationOptions::new(target);
            change(&mut options);
            let message = validation_error("alltoall", &options);
            assert!(message.starts_with("<command line>"), "{what}: {message}");
            for needle in needles {
                assert!(message.contains(needle), "{what}: {needle}: {message}");
            }
        }
    }
}

/// A region of 10^14 bytes used to abort the process on allocation; it is refused before
/// anything is allocated, naming the region, its size and the limit.
#[test]
fn a_region_too_large_for_the_memory_limit_names_region_size_and_limit() {
    let (text, file) = example("alltoall");
    let text = text.replace("send=ranks*256", "send=100000000000000");
    let error = validate(&text, &file, &ValidationOptions::new(Transport::Mlx5))
        .expect_err("a 10^14-byte region must be refused")
        .to_string();
    for needle in [
        "kernel `alltoall`",
        "region `send`",
        "100000000000000 bytes",
        "memory limit of 4294967296 bytes (4.0 GiB)",
        "make the region smaller",
    ] {
        assert!(error.contains(needle), "{needle}: {error}");
    }
}

/// 1000 ranks on mlx5 (a million queue pairs) used to be killed for memory; the estimate made
/// before set-up refuses it, saying how much it needs and why.
#[test]
fn too_many_ranks_for_the_memory_limit_are_refused_with_the_estimate() {
    let mut options = ValidationOptions::new(Transport::Mlx5);
    options.ranks = 1000;
    let error = validation_error("stream_put_signal_1", &options);
    for needle in [
        "1000 ranks need",
        "of simulated memory",
        "grow with the square of the ranks",
        "memory limit",
        "use fewer ranks",
    ] {
        assert!(error.contains(needle), "{needle}: {error}");
    }
    // The estimate is what the SQ rings alone take: 999 peers x 1024 blocks x 64 bytes a rank.
    let (text, file) = example("stream_put_signal_1");
    let (kernels, _) =
        compile_for_simulation(&text, &file, &PipelineOptions::new(Transport::Mlx5), None).unwrap();
    let estimate = memory_estimate(&kernels[0], &SimulationOptions::new(1000));
    assert!(estimate.infrastructure_bytes >= 999 * 1024 * 64);
    // A small launch fits.
    let estimate = memory_estimate(&kernels[0], &SimulationOptions::new(4));
    assert!(estimate.total_bytes(4) < 4 << 20, "{estimate:?}");
}

/// The step limit's message names the option that raises it.
#[test]
fn the_step_limit_message_names_the_option() {
    let mut options = ValidationOptions::new(Transport::Mlx5);
    options.step_limit = 10;
    options.schedules = 1;
    let (text, file) = example("stream_put_signal_1");
    let validations = validate(&text, &file, &options).unwrap();
    let failure = &validations[0].failures[0];
    assert_eq!(failure.kind, "step-limit");
    assert!(
        failure.message.contains("--step-limit"),
        "{}",
        failure.message
    );
}

/// A long run calls the progress hook every `PROGRESS_STEPS` steps with the launch number;
/// the run itself is the same with or without it.
#[test]
fn long_runs_report_progress_and_progress_changes_nothing() {
    let (text, file) = example("alltoall");
    let (kernels, _) =
        compile_for_simulation(&text, &file, &PipelineOptions::new(Transport::Mlx5), None).unwrap();
    let calls = Rc::new(RefCell::new(Vec::new()));
    let recorded = calls.clone();
    let mut options = SimulationOptions::new(8);
    options.rounds = 2;
    let quiet = simulate(&kernels[0], &options).unwrap();
    options.progress = Some(ProgressHook(Rc::new(move |launch, steps| {
        recorded.borrow_mut().push((launch, steps));
    })));
    let reported = simulate(&kernels[0], &options).unwrap();
    assert_eq!(quiet.steps, reported.steps);
    assert_eq!(quiet.final_regions, reported.final_regions);
    let calls = calls.borrow();
    assert!(
        !calls.is_empty(),
        "{} steps and no progress",
        reported.steps
    );
    assert!(calls.iter().any(|(launch, _)| *launch == 2), "{calls:?}");
    assert!(
        calls.windows(2).all(|pair| pair[0].1 < pair[1].1),
        "{calls:?}"
    );
}

/// A wait on an address past every region used to land in the simulator's own receive CQ
/// ("flag 'receive cq'+0x600"); it is an out-of-bounds error naming the address, the nearest
/// region and the op.
#[test]
fn an_access_outside_every_region_is_out_of_bounds_not_internal_memory() {
    let path = format!(
        "{}/tests/programs/wait_outside_every_region.abo",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    for target in [Transport::Mlx5, Transport::Proxy, Transport::P2p] {
        let mut options = ValidationOptions::new(target);
        options.schedules = 2;
        let validations = validate(&text, &path, &options).unwrap();
        let failure = &validations[0].failures[0];
        assert_eq!(failure.kind, "program", "{}", failure.message);
        for needle in [
            "out of bounds: the gpu.wait_flag at",
            "wait_outside_every_region.abo:41:11",
            "waits on 8 bytes at 0x",
            "outside every region of rank",
            "the nearest region is 'flags'",
            "0x5f8 bytes past its end",
        ] {
            assert!(
                failure.message.contains(needle),
                "{needle}: {}",
                failure.message
            );
        }
        assert!(!failure.message.contains("receive"), "{}", failure.message);
    }
}
