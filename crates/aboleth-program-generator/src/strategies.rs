//! Generation: the proptest strategies that draw a [`ProgramSpec`] (so failures shrink) and
//! print it, and [`generate_from_seed`], which draws from the same strategies with a ChaCha
//! rng seeded from a `u64`, so a seed reproduces a program. What a drawn spec must be
//! reshaped to stay valid is `normalize.rs`'s job.

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::strategy::{BoxedStrategy, Union, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::normalize::{normalize_channel, normalize_program};
use crate::*;

/// Random valid programs, shrinkable (see the module documentation for the validity rules).
pub fn program_strategy() -> impl Strategy<Value = GeneratedProgram> {
    program_spec_strategy().prop_map(|spec| print_program(&spec))
}

/// Random valid program specs, normalized so that every rule of the module holds.
pub fn program_spec_strategy() -> impl Strategy<Value = ProgramSpec> {
    (MIN_RANKS..=MAX_RANKS, 1u32..=MAX_PROGRAMS)
        .prop_flat_map(|(ranks, programs)| {
            (
                Just(ranks),
                Just(programs),
                grid_expression_strategy(ranks, programs),
                choice_modulus_strategy(),
                1u32..=9,
                vec(phase_strategy(ranks, programs), 1..=3),
                any::<bool>(),
            )
        })
        .prop_map(
            |(ranks, programs, grid_expression, choice_modulus, epoch, phases, final_drain)| {
                normalize_program(ProgramSpec {
                    ranks,
                    programs,
                    grid_expression,
                    choice_modulus,
                    epoch,
                    phases,
                    final_drain,
                })
            },
        )
}

/// The program drawn from [`program_strategy`] by a ChaCha rng seeded with `seed`:
/// deterministic, and distributed exactly as the proptest strategy.
pub fn generate_from_seed(seed: u64) -> GeneratedProgram {
    print_program(&spec_from_seed(seed))
}

/// The spec behind [`generate_from_seed`].
pub fn spec_from_seed(seed: u64) -> ProgramSpec {
    let mut seed_rng = ChaCha8Rng::seed_from_u64(seed);
    let mut seed_bytes = [0u8; 32];
    seed_rng.fill_bytes(&mut seed_bytes);
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    program_spec_strategy()
        .new_tree(&mut runner)
        .expect("the program strategy never rejects a value")
        .current()
}

pub(crate) fn grid_expression_strategy(ranks: u32, programs: u32) -> BoxedStrategy<GridExpression> {
    let mut choices = vec![
        GridExpression::Literal,
        GridExpression::TwiceRanksMinus(2 * ranks - programs),
    ];
    if programs == ranks {
        choices.push(GridExpression::Ranks);
    }
    if programs + 1 == ranks {
        choices.push(GridExpression::RanksMinusOne);
    }
    if programs + 2 == ranks {
        choices.push(GridExpression::RanksMinusTwo);
    }
    proptest::sample::select(choices).boxed()
}

pub(crate) fn choice_modulus_strategy() -> BoxedStrategy<ChoiceModulus> {
    prop_oneof![
        3 => (2u32..=4).prop_map(ChoiceModulus::Constant),
        1 => Just(ChoiceModulus::Ranks),
    ]
    .boxed()
}

pub(crate) fn phase_strategy(ranks: u32, programs: u32) -> impl Strategy<Value = PhaseSpec> {
    (
        // Mostly one channel per phase, so that programs have several phases.
        prop_oneof![
            3 => vec(channel_strategy(ranks, programs), 1..=1),
            1 => vec(channel_strategy(ranks, programs), 2..=2),
        ],
        proptest::bool::weighted(0.25),
    )
        .prop_map(|(channels, drain_before_waits)| PhaseSpec {
            channels,
            drain_before_waits,
        })
}

pub(crate) fn channel_strategy(ranks: u32, programs: u32) -> impl Strategy<Value = ChannelSpec> {
    let shape = (
        route_strategy(ranks, programs),
        iterations_strategy(),
        vec(put_strategy(), 1..=2),
        fence_strategy(),
        prop_oneof![Just(DataRegion::Bytes), Just(DataRegion::Words)],
        option::weighted(0.6, signal_strategy()),
        option::weighted(0.75, signal_strategy()),
    );
    let completion = (
        iteration_completion_strategy(),
        reuse_strategy(),
        body_completion_strategy(),
        waiter_strategy(programs),
        loop_bound_strategy(),
        any::<bool>(),
    );
    (shape, completion).prop_map(
        move |(
            (route, iterations, puts, fence, data_region, iteration_signal, final_signal),
            (iteration_completion, reuse, body_completion, waiter, receive_bound, counter_waits),
        )| {
            normalize_channel(ChannelSpec {
                route,
                iterations,
                puts,
                fence,
                data_region,
                iteration_signal,
                final_signal,
                iteration_completion,
                reuse,
                body_completion,
                waiter,
                receive_bound,
                counter_waits,
            })
        },
    )
}

pub(crate) fn senders_strategy(programs: u32) -> BoxedStrategy<Senders> {
    if programs == 1 {
        Just(Senders::AllPrograms).boxed()
    } else {
        prop_oneof![
            3 => Just(Senders::AllPrograms),
            1 => (0..programs).prop_map(Senders::OneProgram),
        ]
        .boxed()
    }
}

pub(crate) fn loop_bound_strategy() -> BoxedStrategy<LoopBound> {
    prop_oneof![Just(LoopBound::Constant), Just(LoopBound::WorldSize)].boxed()
}

pub(crate) fn route_strategy(ranks: u32, programs: u32) -> BoxedStrategy<Route> {
    let mut arms: Vec<(u32, BoxedStrategy<Route>)> = vec![(
        4,
        (1..ranks, senders_strategy(programs))
            .prop_map(|(offset, senders)| Route::Fixed { offset, senders })
            .boxed(),
    )];
    arms.push((
        2,
        (senders_strategy(programs), loop_bound_strategy())
            .prop_map(|(senders, bound)| Route::PeerLoop { senders, bound })
            .boxed(),
    ));
    if programs < ranks {
        arms.push((
            2,
            (1..=ranks - programs)
                .prop_map(|base| Route::ProgramOffset { base })
                .boxed(),
        ));
    }
    if programs + 1 == ranks {
        arms.push((2, Just(Route::AllToAll).boxed()));
    }
    Union::new_weighted(arms).boxed()
}

pub(crate) fn iterations_strategy() -> BoxedStrategy<Iterations> {
    prop_oneof![
        3 => Just(Iterations::Single),
        3 => (1u32..=4, 1u32..=2).prop_map(|(count, step)| Iterations::Constant { count, step }),
        2 => (2u32..=3, 2u32..=3).prop_map(|(outer, inner)| Iterations::Nested { outer, inner }),
        2 => prop_oneof![
            Just(RankTrip::ParityPlusOne),
            Just(RankTrip::RankPlusOne),
            Just(RankTrip::WorldMinusRank),
            Just(RankTrip::Parity),
        ]
        .prop_map(Iterations::RankDependent),
    ]
    .boxed()
}

pub(crate) fn put_strategy() -> impl Strategy<Value = PutSpec> {
    let bytes = prop_oneof![
        // Up to 64 bytes: inlined on mlx5.
        (1u32..=8).prop_map(|words| words * 8),
        // Larger: gathered from the source by the NIC.
        (9u32..=64).prop_map(|words| words * 8),
    ];
    let predicate = prop_oneof![
        2 => (
            prop_oneof![
                Just(ChoiceComparison::NonZero),
                (0u32..4).prop_map(ChoiceComparison::LessThan),
                (0u32..4).prop_map(ChoiceComparison::Equal),
            ],
            0u32..CHOICE_WORDS,
        )
            .prop_map(|(comparison, salt)| PredicateSpec::LoadedChoice { comparison, salt }),
        1 => (0u32..2).prop_map(|salt| PredicateSpec::RankParity { salt }),
        1 => Just(PredicateSpec::IterationBelowRank),
        1 => Just(PredicateSpec::ProgramParity),
    ];
    (bytes, option::weighted(0.35, predicate), 0u32..128).prop_map(
        |(bytes, predicate, source_word)| PutSpec {
            bytes,
            predicate,
            source_word,
        },
    )
}

pub(crate) fn signal_strategy() -> impl Strategy<Value = SignalSpec> {
    let operation = prop_oneof![
        prop_oneof![
            Just(SetValue::Epoch),
            (1u32..=1000).prop_map(SetValue::Constant),
            Just(SetValue::IterationPlusOne),
        ]
        .prop_map(SignalOperation::Set),
        any::<bool>().prop_map(|shared_flag| SignalOperation::Add { shared_flag }),
    ];
    let after = prop_oneof![
        2 => Just(SignalAfter::LastPut),
        1 => Just(SignalAfter::None),
        1 => (0u32..8).prop_map(SignalAfter::EarlierChannelPut),
    ];
    (operation, after).prop_map(|(operation, after)| SignalSpec { operation, after })
}

pub(crate) fn iteration_completion_strategy() -> BoxedStrategy<IterationCompletion> {
    prop_oneof![
        3 => Just(IterationCompletion::None),
        1 => (0u32..2).prop_map(IterationCompletion::WaitPut),
        1 => Just(IterationCompletion::WaitSignal),
        1 => Just(IterationCompletion::Drain),
    ]
    .boxed()
}

pub(crate) fn reuse_strategy() -> BoxedStrategy<Reuse> {
    prop_oneof![
        2 => Just(Reuse::None),
        1 => Just(Reuse::EachIteration),
        2 => any::<bool>().prop_map(|drain| Reuse::AfterPuts { drain }),
    ]
    .boxed()
}

pub(crate) fn body_completion_strategy() -> BoxedStrategy<BodyCompletion> {
    prop_oneof![
        2 => Just(BodyCompletion::None),
        1 => Just(BodyCompletion::WaitPut),
        1 => Just(BodyCompletion::WaitSignal),
        1 => Just(BodyCompletion::Drain),
    ]
    .boxed()
}

pub(crate) fn fence_strategy() -> BoxedStrategy<FencePlacement> {
    prop_oneof![
        3 => Just(FencePlacement::None),
        1 => Just(FencePlacement::BetweenPuts),
        1 => Just(FencePlacement::BeforeFinalSignal),
    ]
    .boxed()
}

pub(crate) fn waiter_strategy(programs: u32) -> BoxedStrategy<Waiter> {
    if programs == 1 {
        Just(Waiter::EveryProgram).boxed()
    } else {
        prop_oneof![
            Just(Waiter::EveryProgram),
            (0..programs).prop_map(Waiter::OneProgram),
            Just(Waiter::MatchingProgram),
        ]
        .boxed()
    }
}
