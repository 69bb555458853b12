//! Translation validation of random valid programs: each generated program is compiled
//! library-style and with the passes, for every lowered transport (efa skips the programs its
//! lowering refuses by its stated rules, at most half), and both run under 20 random
//! schedules with the checks of `docs/SIMULATOR.md`. Zero divergences are allowed.
//!
//! `ABOLETH_RANDOM_PROGRAMS` sets how many programs (default 1000), `ABOLETH_RANDOM_SEED` the
//! first generator seed (default 0). A failure prints the seed, the program and the way to
//! reproduce it with `aboleth sim`.

use aboleth_abi::Transport;
use aboleth_program_generator::{
    generate_from_seed, print_program, spec_from_seed, with_a_signal_per_put,
};
use aboleth_sim::validation::{ValidationOptions, validate};

/// The send ring of every other program (basic blocks): small enough that a launch wraps it.
const SMALL_SEND_RING_BLOCKS: u32 = 64;

fn environment_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|value| {
            value
                .parse()
                .unwrap_or_else(|_| panic!("{name}={value} is not a number"))
        })
        .unwrap_or(default)
}

#[test]
fn random_programs_validate_on_every_transport() {
    let programs = environment_number("ABOLETH_RANDOM_PROGRAMS", 1000);
    let first_seed = environment_number("ABOLETH_RANDOM_SEED", 0);
    let started = std::time::Instant::now();
    let mut runs = 0u64;
    // Programs whose p2p signals all travelled as packets: the flag-in-data path must be
    // exercised, not only allowed.
    let mut programs_with_packets = 0u64;
    // Programs lower-efa refuses for one of its stated rules (an add signal EFA cannot carry as
    // an immediate, a set on the adds' flag region): counted, and most programs must run.
    let mut refused_on_efa = 0u64;
    for seed in first_seed..first_seed + programs {
        // Every sixth program is reshaped so each put has a signal of its own: the shape
        // flag-in-data packets need (those seeds also run with `packet_signals`).
        let program = if seed % 6 == 5 {
            print_program(&with_a_signal_per_put(spec_from_seed(seed)))
        } else {
            generate_from_seed(seed)
        };
        for target in Transport::LOWERED {
            let mut options = ValidationOptions::new(target);
            options.ranks = program.ranks;
            options.schedules = 20;
            options.seed = seed;
            // Every other program on a small send ring: it wraps, and its space is reclaimed
            // through CQEs, as the generated code does it.
            if seed % 2 == 1 {
                options.sq_basic_block_count = SMALL_SEND_RING_BLOCKS;
            }
            // Every third program may publish mlx5 signals with write-with-immediate (generated
            // programs observe flags only through waits).
            options.immediate_signals = seed % 3 == 2 && target == Transport::Mlx5;
            // Likewise p2p signals as flag-in-data packets: generated programs also read a put's
            // data (at the end) only after waiting for the signal that follows it, in the same
            // launch. (Each declaration only where it can take effect: the pipeline refuses it
            // elsewhere.)
            options.packet_signals = seed % 3 == 2 && target == Transport::P2p;
            let file = format!("generated-{seed}.abo");
            let validations = match validate(&program.text, &file, &options) {
                Ok(validations) => validations,
                Err(error) if target == Transport::Efa && error.message.starts_with("on efa ") => {
                    refused_on_efa += 1;
                    continue;
                }
                Err(error) => panic!(
                    "seed {seed}: the compiler rejected a valid program for {}: {error}\n{program:?}",
                    target.name()
                ),
            };
            for validation in validations {
                runs += 2 * u64::from(validation.schedules);
                let on_counts = validation
                    .passes_on
                    .rounds
                    .first()
                    .map(|round| round.counts);
                if target == Transport::P2p
                    && on_counts.is_some_and(|counts| counts.flag_stores == 0)
                    && validation
                        .passes_off
                        .rounds
                        .first()
                        .is_some_and(|round| round.counts.flag_stores > 0)
                {
                    programs_with_packets += 1;
                }
                if let Some(failure) = validation.failures.first() {
                    panic!(
                        "seed {seed} on {}: {} failed check(s); first: {} schedule {}: {}: {}\n\
                         reproduce: write the program below to {file} and run\n  \
                         aboleth sim {file} --ranks {} --target {} --seed {} --schedules 1\n{program:?}",
                        target.name(),
                        validation.failures.len(),
                        failure.configuration,
                        failure.schedule,
                        failure.kind,
                        failure.message,
                        program.ranks,
                        target.name(),
                        failure.schedule_seed,
                    );
                }
            }
        }
        if (seed - first_seed + 1).is_multiple_of(100) {
            eprintln!(
                "random programs: {} of {programs} validated ({runs} simulated runs, {:.1} s)",
                seed - first_seed + 1,
                started.elapsed().as_secs_f64()
            );
        }
    }
    eprintln!(
        "random programs: {programs} programs x {} transports x 20 schedules x 2 lowerings: {runs} runs, zero divergences, {programs_with_packets} with every p2p signal in packets, {refused_on_efa} refused by lower-efa's rules, {:.1} s",
        Transport::LOWERED.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        refused_on_efa * 2 <= programs,
        "lower-efa refused {refused_on_efa} of {programs} generated programs: most must run on efa"
    );
    if programs >= 100 {
        assert!(
            programs_with_packets > 0,
            "no generated program sent its p2p signals as packets: the flag-in-data path went untested"
        );
    }
}
