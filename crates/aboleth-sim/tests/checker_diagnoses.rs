//! What a wait guarantees (counter flags: several signals into one flag per launch, waits for
//! intermediate values), and diagnoses that name the real cause: an overwrite while the peer
//! reads, a stale epoch, a flag that went down, an access outside every region.

use aboleth_abi::Transport;
use aboleth_sim::validation::{KernelValidation, ValidationOptions, validate};

const TARGETS: [Transport; 3] = [Transport::Mlx5, Transport::Proxy, Transport::P2p];

/// A program of `tests/programs/`: its text and path.
fn test_program(name: &str) -> (String, String) {
    let path = format!("{}/tests/programs/{name}.abo", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    (text, path)
}

fn validate_program(name: &str, options: &ValidationOptions) -> Vec<KernelValidation> {
    let (text, path) = test_program(name);
    validate(&text, &path, options).unwrap_or_else(|d| panic!("{d}"))
}

/// The first failure of `kind` in `validation`, with its message.
fn failure_of_kind<'v>(
    validation: &'v KernelValidation,
    kind: &str,
) -> &'v aboleth_sim::validation::Failure {
    validation
        .failures
        .iter()
        .find(|failure| failure.kind == kind)
        .unwrap_or_else(|| panic!("no {kind} failure in {:#?}", validation.failures))
}

/// A ring all-gather whose one flag per rank is a counter (adds 1 per step, or sets the step
/// number): each wait guards the chunks of the signals needed to reach its value, whatever
/// else already arrived. Before the checker judged the awaited value, p2p failed with
/// "data-not-visible" on the adding kernel, passes off as well.
#[test]
fn a_ring_all_gather_on_a_counter_flag_validates_on_every_target() {
    for target in TARGETS {
        for ranks in [2, 4, 5] {
            let mut options = ValidationOptions::new(target);
            options.ranks = ranks;
            options.rounds = 3;
            let validations = validate_program("ring_allgather_counter", &options);
            assert_eq!(validations.len(), 2);
            for validation in validations {
                assert!(
                    validation.passed(),
                    "{} on {} with {ranks} ranks: {:#?}",
                    validation.kernel,
                    target.name(),
                    validation.failures
                );
            }
        }
    }
}

/// The same all-gather waiting one step short forwards a chunk before it is guaranteed to
/// have arrived: caught on every target, with the library-style lowering too.
#[test]
fn a_ring_all_gather_waiting_for_too_small_a_value_is_caught() {
    for target in TARGETS {
        let mut options = ValidationOptions::new(target);
        options.ranks = 4;
        options.rounds = 2;
        let validations = validate_program("ring_allgather_waits_too_little", &options);
        let validation = &validations[0];
        assert!(!validation.passed(), "{} passed", target.name());
        assert!(
            validation
                .failures
                .iter()
                .any(|failure| failure.configuration == "passes-off"),
            "{}: {:#?}",
            target.name(),
            validation.failures
        );
    }
}

/// A put that overwrites bytes the receiver is still reading is an overwrite, named with the
/// region, the offset, both puts and the reader, not a signal published before its data.
#[test]
fn an_overwrite_while_the_peer_reads_names_region_offset_puts_and_reader() {
    for target in TARGETS {
        let options = ValidationOptions::new(target);
        let validations = validate_program("overwrite_while_the_peer_reads", &options);
        let failure = failure_of_kind(&validations[0], "data-overwritten");
        let message = &failure.message;
        for needle in [
            "overwrote data its reader was still reading",
            "'recv'+0x",
            "overwrite_while_the_peer_reads.abo:29:7",
            "overwrite_while_the_peer_reads.abo:32:7",
            "program 0 passed the wait",
            "is still reading it",
        ] {
            assert!(
                message.contains(needle),
                "{}: {needle}: {message}",
                target.name()
            );
        }
        assert!(!message.contains("published before its data"), "{message}");
    }
}

/// A flag set to the same value in every launch: the second launch's wait passes on the first
/// launch's value. Reported as a stale epoch with the launch number, passes off too.
#[test]
fn a_flag_value_repeated_across_launches_is_a_stale_epoch_with_the_launch_number() {
    for target in TARGETS {
        let mut options = ValidationOptions::new(target);
        options.rounds = 3;
        let validations = validate_program("flag_value_repeats_across_launches", &options);
        let validation = &validations[0];
        let failure = validation
            .failures
            .iter()
            .find(|failure| failure.configuration == "passes-off" && failure.schedule == 0)
            .unwrap_or_else(|| panic!("{:#?}", validation.failures));
        assert_eq!(failure.kind, "stale-epoch", "{}", failure.message);
        for needle in [
            "stale epoch: flag 'flags'+0x0 on rank",
            "receives the same value 1 in launch 2",
            "as in launch 1",
            "waits cannot tell the launches apart",
        ] {
            assert!(
                failure.message.contains(needle),
                "{needle}: {}",
                failure.message
            );
        }
        // One launch is fine: there is nothing to confuse it with.
        options.rounds = 1;
        let validations = validate_program("flag_value_repeats_across_launches", &options);
        assert!(validations[0].passed(), "{:#?}", validations[0].failures);
    }
}

/// `signal Add -5` where the receiver waits for `>= 5`: the deadlock report says the flag went
/// down and can never reach the value, not that the signal never arrived.
#[test]
fn a_flag_that_went_down_is_reported_as_unreachable() {
    for target in TARGETS {
        let options = ValidationOptions::new(target);
        let validations = validate_program("flag_goes_down", &options);
        let failure = failure_of_kind(&validations[0], "deadlock");
        for needle in [
            "it holds -5: the flag went down",
            "added -5",
            "can never reach 5",
        ] {
            assert!(
                failure.message.contains(needle),
                "{needle}: {}",
                failure.message
            );
        }
        assert!(
            !failure.message.contains("never arrived"),
            "{}",
            failure.message
        );
    }
}
