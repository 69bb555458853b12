//! Random valid Aboleth programs (`.abo` text) for the simulator's translation validation.
//!
//! A program is first drawn as a [`ProgramSpec`] (an AST of phases and channels built with
//! proptest combinators, so failures shrink), then printed as one kernel named `generated`
//! with the harness attributes (`grid`, `regions`, `bind`, `init`). [`program_strategy`] is the
//! proptest entry point; [`generate_from_seed`] draws from the same strategy with a ChaCha rng
//! seeded from a `u64`, so a seed reproduces a program.
//!
//! Every program is valid by construction, because the simulator compares final memory between
//! compiler configurations and any race or deadlock in the input would be a false alarm:
//! - each destination byte on each rank is written by at most one put in the launch: a channel
//!   owns a segment of a receive region, split by a sender key `(j - 1) * programs + pid`
//!   (`j` is the distance from sender to receiver rank), then by iteration and put;
//! - each flag word is either set by exactly one `Set` signal or only added to; waits ask for
//!   exactly the value set or the exact total added, which the generator computes statically
//!   (or, for trip counts that depend on the sender's rank, the receiver recomputes them), or,
//!   on a flag that one sender adds 1 to per iteration (a counter flag), every count from 1
//!   to that total in turn;
//! - a program runs in phases: all sends of a phase, then the waits for that phase's signals,
//!   so every wait is matched by sends that never depend on it; nothing is sent to oneself;
//! - a source byte is stored to only after `ab.wait` on the put that read it, or `ab.drain`
//!   of its endpoint; receivers never touch the data they receive;
//! - every local address is in bounds and 8-byte aligned.
//!
//! It also keeps every queue (one sender rank to one peer) under [`QUEUE_BASIC_BLOCK_BUDGET`]
//! posted mlx5 basic blocks over the whole launch, so no ring can fill whatever the completion
//! plan, and multi-channel programs under [`MAX_OPERATIONS`] ops, so simulating thousands of
//! them stays cheap. Receivers never read the data they receive, so a program's final memory
//! does not depend on the schedule. It does not check programs against the compiler or run
//! them: its tests (with a reference interpreter of the semantic IR) and the simulator do.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::strategy::{BoxedStrategy, Union, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Fewest ranks a program runs on.
pub const MIN_RANKS: u32 = 2;
/// Most ranks a program runs on.
pub const MAX_RANKS: u32 = 4;
/// Most programs per rank (the grid).
pub const MAX_PROGRAMS: u32 = 3;
/// Most channels in one program, over all phases.
pub const MAX_CHANNELS: usize = 3;
/// Most ops (constants not counted) in a program of more than one channel: later channels are
/// dropped until it fits, so that simulating thousands of programs stays cheap.
pub const MAX_OPERATIONS: usize = 100;
/// Bytes at the start of each program's share of `send` that puts only read (never stored to).
pub const READ_ONLY_SOURCE_BYTES: u32 = 1024;
/// 8-byte words in the `choices` region that loaded predicates read.
pub const CHOICE_WORDS: u32 = 16;
/// Largest put the mlx5 lowering inlines: puts are drawn on both sides of it.
pub const INLINE_BYTES_LIMIT: u32 =
    aboleth_passes::support::queue_slots::MLX5_INLINE_BYTES_LIMIT as u32;
/// Most mlx5 basic blocks any one queue (sender rank to peer, all programs together) receives
/// over the launch. Rings hold at least 64 slots, so a program under this budget can never
/// fill one, whatever completions the compiler requests; ring sizing is then not what the
/// simulator is testing here.
pub const QUEUE_BASIC_BLOCK_BUDGET: u32 = 64;

/// Names of the features a generated program exercises ([`GeneratedProgram::features`]).
pub mod feature {
    /// More than one program per rank.
    pub const MULTIPLE_PROGRAMS: &str = "multiple_programs";
    /// A put with a runtime predicate.
    pub const PREDICATE: &str = "predicate";
    /// A predicate computed from `ab.load` of the `choices` region.
    pub const LOADED_PREDICATE: &str = "loaded_predicate";
    /// A signal with op `Set`.
    pub const SET_SIGNAL: &str = "set_signal";
    /// A signal with op `Add`.
    pub const ADD_SIGNAL: &str = "add_signal";
    /// An `Add` flag shared by several senders.
    pub const SHARED_ADD_FLAG: &str = "shared_add_flag";
    /// A signal with an `after` token.
    pub const SIGNAL_AFTER: &str = "signal_after";
    /// A signal without an `after` token.
    pub const SIGNAL_WITHOUT_AFTER: &str = "signal_without_after";
    /// A signal whose `after` token comes from a put on another endpoint value.
    pub const CROSS_ENDPOINT_AFTER: &str = "cross_endpoint_after";
    /// `ab.wait` on a put's token.
    pub const WAIT_PUT_TOKEN: &str = "wait_put_token";
    /// `ab.wait` on a signal's token.
    pub const WAIT_SIGNAL_TOKEN: &str = "wait_signal_token";
    /// `ab.drain`.
    pub const DRAIN: &str = "drain";
    /// `ab.fence`.
    pub const FENCE: &str = "fence";
    /// A source stored to and put again after `ab.wait` on the put that read it.
    pub const REUSE_AFTER_WAIT: &str = "reuse_after_wait";
    /// A source stored to and put again after `ab.drain` of its endpoint.
    pub const REUSE_AFTER_DRAIN: &str = "reuse_after_drain";
    /// A source refilled on every loop iteration.
    pub const REUSE_IN_LOOP: &str = "reuse_in_loop";
    /// An `ab.for` loop.
    pub const LOOP: &str = "loop";
    /// An `ab.for` inside another.
    pub const NESTED_LOOP: &str = "nested_loop";
    /// A loop whose trip count is not a compile-time constant.
    pub const RUNTIME_TRIP_COUNT: &str = "runtime_trip_count";
    /// A put of at most [`super::INLINE_BYTES_LIMIT`] bytes.
    pub const INLINE_PUT: &str = "inline_put";
    /// A put larger than [`super::INLINE_BYTES_LIMIT`] bytes.
    pub const LARGE_PUT: &str = "large_put";
    /// A channel to `(rank + k) % ranks` for a constant `k`.
    pub const FIXED_PEER: &str = "fixed_peer";
    /// A peer chosen by the program id.
    pub const PROGRAM_SELECTED_PEER: &str = "program_selected_peer";
    /// The all-to-all pairing `pid + (pid >= rank)`.
    pub const ALL_TO_ALL: &str = "all_to_all";
    /// An endpoint created inside a loop over peers.
    pub const PEER_LOOP: &str = "peer_loop";
    /// Sends under `ab.if pid == s`.
    pub const GATED_SENDER: &str = "gated_sender";
    /// Waits under `ab.if pid == w`.
    pub const GATED_WAITER: &str = "gated_waiter";
    /// A data region addressed in 8-byte elements (`ab.remote <8>`).
    pub const WORD_REMOTE: &str = "word_remote";
    /// A counter flag: several adds into one flag in one launch (one per iteration of a
    /// sender), awaited at every intermediate count, each wait guarding its iteration's data.
    pub const COUNTER_FLAG: &str = "counter_flag";
}

/// One generated program.
#[derive(Clone, PartialEq, Eq)]
pub struct GeneratedProgram {
    /// The `.abo` text (one module, one kernel named `generated`).
    pub text: String,
    /// One line: ranks, grid, phases, channels, op count and features.
    pub description: String,
    /// The number of ranks to launch it on.
    pub ranks: u32,
    /// Programs per rank (the value of the `grid` expression at `ranks`).
    pub programs: u32,
    /// Ops in the kernel body, `builtin.constant`s not counted.
    pub operations: usize,
    /// The features it exercises (names from [`feature`]), sorted.
    pub features: Vec<&'static str>,
}

impl GeneratedProgram {
    /// True when the program exercises `name` (one of the [`feature`] constants).
    pub fn has_feature(&self, name: &str) -> bool {
        self.features.contains(&name)
    }
}

// The text verbatim, so that a shrunk proptest failure prints a readable program.
impl fmt::Debug for GeneratedProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "GeneratedProgram ({})", self.description)?;
        f.write_str(&self.text)
    }
}

/// The whole program: launch shape, data layout choices and the phases.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramSpec {
    /// Ranks in the launch.
    pub ranks: u32,
    /// Programs per rank.
    pub programs: u32,
    /// How the `grid` attribute spells `programs`.
    pub grid_expression: GridExpression,
    /// The modulus of the `choices` region's `random_mod` init.
    pub choice_modulus: ChoiceModulus,
    /// The `epoch` kernel argument (`value:N`), used as a `Set` value.
    pub epoch: u32,
    /// The phases, in program order.
    pub phases: Vec<PhaseSpec>,
    /// Drain every top-level endpoint at the end of the kernel.
    pub final_drain: bool,
}

/// How the `grid` attribute is written (all evaluate to `programs` at `ranks`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GridExpression {
    /// The number itself.
    Literal,
    /// `ranks`.
    Ranks,
    /// `ranks-1`.
    RanksMinusOne,
    /// `ranks-2`.
    RanksMinusTwo,
    /// `2*ranks-N`.
    TwiceRanksMinus(u32),
}

/// The modulus of the `choices` words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChoiceModulus {
    /// A literal modulus.
    Constant(u32),
    /// `ranks`.
    Ranks,
}

/// One phase: every channel's sends, then every channel's waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhaseSpec {
    /// The channels of this phase.
    pub channels: Vec<ChannelSpec>,
    /// Drain the phase's top-level endpoints between the sends and the waits.
    pub drain_before_waits: bool,
}

/// One communication pattern that every rank runs, both as sender and as receiver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelSpec {
    /// Who sends to whom.
    pub route: Route,
    /// How many times the puts repeat per peer.
    pub iterations: Iterations,
    /// The puts of one iteration (1 or 2).
    pub puts: Vec<PutSpec>,
    /// Where an `ab.fence` goes.
    pub fence: FencePlacement,
    /// Which receive region the data lands in.
    pub data_region: DataRegion,
    /// A signal at the end of every iteration.
    pub iteration_signal: Option<SignalSpec>,
    /// A signal after all iterations (and after the reuse put).
    pub final_signal: Option<SignalSpec>,
    /// What each iteration waits for locally after its sends.
    pub iteration_completion: IterationCompletion,
    /// Whether (and how) the first put's source is refilled and sent again.
    pub reuse: Reuse,
    /// What the per-peer body waits for locally at its end.
    pub body_completion: BodyCompletion,
    /// Which receiving programs wait for the signals.
    pub waiter: Waiter,
    /// How receivers bound their loops over sender ranks.
    pub receive_bound: LoopBound,
    /// With a per-sender `Add` iteration signal: receivers wait for every intermediate count
    /// (1, 2, ... trips) of the sender's flag, a counter flag, not only for the total.
    pub counter_waits: bool,
}

/// Who sends to whom. `j` below is the distance `(peer - rank) mod ranks`, never 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// `peer = (rank + offset) % ranks`.
    Fixed {
        /// The distance `j`, in `1..ranks`.
        offset: u32,
        /// Which programs send.
        senders: Senders,
    },
    /// `peer = (rank + base + pid) % ranks` (needs `base + programs - 1 < ranks`).
    ProgramOffset {
        /// The distance of program 0.
        base: u32,
    },
    /// `peer = pid + (pid >= rank)` (needs `programs == ranks - 1`).
    AllToAll,
    /// A loop over `j in 1..ranks`, one endpoint per peer, created inside the loop.
    PeerLoop {
        /// Which programs send.
        senders: Senders,
        /// The loop's upper bound.
        bound: LoopBound,
    },
}

/// Which programs of a rank send on a channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Senders {
    /// Every program, each to its own destination slot.
    AllPrograms,
    /// Only this program (`ab.if pid == N`).
    OneProgram(u32),
}

/// How an upper bound of `ranks` is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoopBound {
    /// A constant (the generator knows `ranks`): a constant trip count.
    Constant,
    /// `ab.world_size`: a trip count the compiler cannot see.
    WorldSize,
}

/// The iteration structure of a channel's puts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Iterations {
    /// Once, without a loop.
    Single,
    /// `ab.for 0, count * step, step`.
    Constant {
        /// Trip count.
        count: u32,
        /// Step (1 or 2).
        step: u32,
    },
    /// Two nested constant loops.
    Nested {
        /// Outer trip count.
        outer: u32,
        /// Inner trip count.
        inner: u32,
    },
    /// A trip count computed from the sender's rank.
    RankDependent(RankTrip),
}

/// Trip counts computed from a rank `s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RankTrip {
    /// `s % 2 + 1`.
    ParityPlusOne,
    /// `s + 1`.
    RankPlusOne,
    /// `ranks - s`.
    WorldMinusRank,
    /// `s % 2` (zero trips on even ranks).
    Parity,
}

impl RankTrip {
    /// The trip count on rank `rank` of `ranks`.
    pub fn trips(self, rank: u32, ranks: u32) -> u32 {
        match self {
            RankTrip::ParityPlusOne => rank % 2 + 1,
            RankTrip::RankPlusOne => rank + 1,
            RankTrip::WorldMinusRank => ranks - rank,
            RankTrip::Parity => rank % 2,
        }
    }
}

impl Iterations {
    /// Iterations on sender rank `rank`.
    pub fn trips_on(self, rank: u32, ranks: u32) -> u32 {
        match self {
            Iterations::Single => 1,
            Iterations::Constant { count, .. } => count,
            Iterations::Nested { outer, inner } => outer * inner,
            Iterations::RankDependent(trip) => trip.trips(rank, ranks),
        }
    }

    /// The most iterations any rank runs (destination and flag space per sender).
    pub fn max_trips(self, ranks: u32) -> u32 {
        (0..ranks)
            .map(|rank| self.trips_on(rank, ranks))
            .max()
            .unwrap_or(1)
            .max(1)
    }
}

/// One put of an iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutSpec {
    /// Payload bytes: a multiple of 8 in `8..=512`.
    pub bytes: u32,
    /// An optional runtime predicate.
    pub predicate: Option<PredicateSpec>,
    /// Raw choice of the source offset in the read-only area (reduced when printed).
    pub source_word: u32,
}

/// Runtime predicates of a put (`it` is the iteration index, `key` the sender key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PredicateSpec {
    /// Compare `choices[(key + it + salt) % CHOICE_WORDS]`.
    LoadedChoice {
        /// The comparison.
        comparison: ChoiceComparison,
        /// Added to the word index.
        salt: u32,
    },
    /// `(rank + it) % 2 == salt % 2`.
    RankParity {
        /// Which parity sends.
        salt: u32,
    },
    /// `it < rank`.
    IterationBelowRank,
    /// `pid % 2 == 0`.
    ProgramParity,
}

/// How a loaded choice word becomes a predicate (thresholds are reduced mod the modulus).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChoiceComparison {
    /// The word itself (nonzero sends).
    NonZero,
    /// `word < 1 + N % modulus`.
    LessThan(u32),
    /// `word == N % modulus`.
    Equal(u32),
}

/// A signal of a channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignalSpec {
    /// Set or add.
    pub operation: SignalOperation,
    /// The `after` operand.
    pub after: SignalAfter,
}

/// A signal's update of the flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignalOperation {
    /// Set a flag word that no other signal touches.
    Set(SetValue),
    /// Add 1.
    Add {
        /// One flag for all senders of the channel (else one per sender key).
        shared_flag: bool,
    },
}

/// The value a `Set` signal writes (always at least 1, so a wait on it really waits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetValue {
    /// The `epoch` kernel argument.
    Epoch,
    /// A constant.
    Constant(u32),
    /// The iteration index plus one (1 for a final signal).
    IterationPlusOne,
}

/// A signal's `after` operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignalAfter {
    /// No `after`.
    None,
    /// The latest put token in scope on the same endpoint (none when there is none).
    LastPut,
    /// The token of an earlier top-level put, picked by index (none when there is none).
    EarlierChannelPut(u32),
}

/// What each iteration waits for after its sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IterationCompletion {
    /// Nothing.
    None,
    /// `ab.wait` on put `N`'s token.
    WaitPut(u32),
    /// `ab.wait` on the iteration signal's token.
    WaitSignal,
    /// `ab.drain` of the endpoint.
    Drain,
}

/// Buffer reuse of the first put's source (a slot of `send` nothing else reads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reuse {
    /// The first put reads the read-only area like the others.
    None,
    /// Every iteration stores new values into the slot, puts it, and completes it
    /// (the iteration completion is then `WaitPut(0)` or `Drain`).
    EachIteration,
    /// After the puts (single iteration): complete the first put, store new values, put the
    /// slot again to another destination range.
    AfterPuts {
        /// Complete with `ab.drain` instead of `ab.wait`.
        drain: bool,
    },
}

/// What the per-peer body waits for at its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyCompletion {
    /// Nothing.
    None,
    /// `ab.wait` on the last top-level put token (single iteration only).
    WaitPut,
    /// `ab.wait` on the final signal's token.
    WaitSignal,
    /// `ab.drain` of the endpoint.
    Drain,
}

/// Where an `ab.fence` goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FencePlacement {
    /// No fence.
    None,
    /// After the first put of every iteration.
    BetweenPuts,
    /// After all iterations, before the reuse and the final signal.
    BeforeFinalSignal,
}

/// Which receive region a channel's data lands in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataRegion {
    /// `recv`, addressed in bytes (`ab.remote <1>`).
    Bytes,
    /// `rows`, addressed in 8-byte elements (`ab.remote <8>`).
    Words,
}

/// Which receiving programs wait for a channel's signals (any number of programs may wait).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiter {
    /// Every program waits for every sender.
    EveryProgram,
    /// Only this program waits (`ab.if pid == N`).
    OneProgram(u32),
    /// Program `pid` waits only for its counterpart (the sender program `pid`, or for
    /// all-to-all, its own peer).
    MatchingProgram,
}

// ------------------------------------------------------------------------------------------
// Strategies.
// ------------------------------------------------------------------------------------------

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

fn grid_expression_strategy(ranks: u32, programs: u32) -> BoxedStrategy<GridExpression> {
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

fn choice_modulus_strategy() -> BoxedStrategy<ChoiceModulus> {
    prop_oneof![
        3 => (2u32..=4).prop_map(ChoiceModulus::Constant),
        1 => Just(ChoiceModulus::Ranks),
    ]
    .boxed()
}

fn phase_strategy(ranks: u32, programs: u32) -> impl Strategy<Value = PhaseSpec> {
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

fn channel_strategy(ranks: u32, programs: u32) -> impl Strategy<Value = ChannelSpec> {
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

fn senders_strategy(programs: u32) -> BoxedStrategy<Senders> {
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

fn loop_bound_strategy() -> BoxedStrategy<LoopBound> {
    prop_oneof![Just(LoopBound::Constant), Just(LoopBound::WorldSize)].boxed()
}

fn route_strategy(ranks: u32, programs: u32) -> BoxedStrategy<Route> {
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

fn iterations_strategy() -> BoxedStrategy<Iterations> {
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

fn put_strategy() -> impl Strategy<Value = PutSpec> {
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

fn signal_strategy() -> impl Strategy<Value = SignalSpec> {
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

fn iteration_completion_strategy() -> BoxedStrategy<IterationCompletion> {
    prop_oneof![
        3 => Just(IterationCompletion::None),
        1 => (0u32..2).prop_map(IterationCompletion::WaitPut),
        1 => Just(IterationCompletion::WaitSignal),
        1 => Just(IterationCompletion::Drain),
    ]
    .boxed()
}

fn reuse_strategy() -> BoxedStrategy<Reuse> {
    prop_oneof![
        2 => Just(Reuse::None),
        1 => Just(Reuse::EachIteration),
        2 => any::<bool>().prop_map(|drain| Reuse::AfterPuts { drain }),
    ]
    .boxed()
}

fn body_completion_strategy() -> BoxedStrategy<BodyCompletion> {
    prop_oneof![
        2 => Just(BodyCompletion::None),
        1 => Just(BodyCompletion::WaitPut),
        1 => Just(BodyCompletion::WaitSignal),
        1 => Just(BodyCompletion::Drain),
    ]
    .boxed()
}

fn fence_strategy() -> BoxedStrategy<FencePlacement> {
    prop_oneof![
        3 => Just(FencePlacement::None),
        1 => Just(FencePlacement::BetweenPuts),
        1 => Just(FencePlacement::BeforeFinalSignal),
    ]
    .boxed()
}

fn waiter_strategy(programs: u32) -> BoxedStrategy<Waiter> {
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

// ------------------------------------------------------------------------------------------
// Normalization: the combinations the strategies may draw that would break a rule.
// ------------------------------------------------------------------------------------------

fn normalize_channel(mut channel: ChannelSpec) -> ChannelSpec {
    // Intermediate counts mean something only on a flag that one sender adds to.
    channel.counter_waits &= matches!(
        channel.iteration_signal,
        Some(SignalSpec {
            operation: SignalOperation::Add { shared_flag: false },
            ..
        })
    );
    let single_sender = matches!(
        channel.route,
        Route::Fixed {
            senders: Senders::OneProgram(_),
            ..
        } | Route::PeerLoop {
            senders: Senders::OneProgram(_),
            ..
        }
    );
    if single_sender && channel.waiter == Waiter::MatchingProgram {
        channel.waiter = Waiter::EveryProgram;
    }
    let single = channel.iterations == Iterations::Single;
    // Reusing after the puts needs their tokens in scope (no loop); reusing in a loop needs one.
    channel.reuse = match (channel.reuse, single) {
        (Reuse::EachIteration, true) => Reuse::AfterPuts { drain: false },
        (Reuse::AfterPuts { .. }, false) => Reuse::EachIteration,
        (reuse, _) => reuse,
    };
    if let IterationCompletion::WaitPut(index) = channel.iteration_completion {
        channel.iteration_completion =
            IterationCompletion::WaitPut(index % channel.puts.len() as u32);
    }
    if channel.iteration_signal.is_none()
        && channel.iteration_completion == IterationCompletion::WaitSignal
    {
        channel.iteration_completion = IterationCompletion::None;
    }
    // The slot is stored to at the top of the next iteration: the put that read it must be
    // complete by the end of this one.
    if channel.reuse == Reuse::EachIteration
        && !matches!(
            channel.iteration_completion,
            IterationCompletion::WaitPut(0) | IterationCompletion::Drain
        )
    {
        channel.iteration_completion = IterationCompletion::WaitPut(0);
    }
    if (channel.body_completion == BodyCompletion::WaitPut && !single)
        || (channel.body_completion == BodyCompletion::WaitSignal && channel.final_signal.is_none())
    {
        channel.body_completion = BodyCompletion::None;
    }
    // In a loop over peers the next peer's first put reads the slot and its reuse stores to
    // it: the second put of the slot must be complete before the body repeats.
    if matches!(channel.route, Route::PeerLoop { .. })
        && matches!(channel.reuse, Reuse::AfterPuts { .. })
        && !matches!(
            channel.body_completion,
            BodyCompletion::WaitPut | BodyCompletion::Drain
        )
    {
        channel.body_completion = BodyCompletion::WaitPut;
    }
    channel
}

fn normalize_program(mut spec: ProgramSpec) -> ProgramSpec {
    // At most MAX_CHANNELS channels, in program order; no empty phase.
    let mut remaining = MAX_CHANNELS;
    for phase in &mut spec.phases {
        phase.channels.truncate(remaining);
        remaining -= phase.channels.len();
    }
    spec.phases.retain(|phase| !phase.channels.is_empty());
    // Simplify until every queue is under budget: first the iteration counts, then the
    // second put and the iteration signal, then whole channels from the end.
    let mut step = 0;
    while max_queue_basic_blocks(&spec) > QUEUE_BASIC_BLOCK_BUDGET {
        let channel_count: usize = spec.phases.iter().map(|p| p.channels.len()).sum();
        let channels = spec.phases.iter_mut().flat_map(|p| p.channels.iter_mut());
        match step {
            0 => channels.for_each(shrink_iterations),
            1 => channels.for_each(|channel| {
                channel.puts.truncate(1);
                channel.iteration_signal = None;
                *channel = normalize_channel(channel.clone());
            }),
            _ if channel_count > 1 => {
                if let Some(phase) = spec.phases.last_mut() {
                    phase.channels.pop();
                }
                spec.phases.retain(|phase| !phase.channels.is_empty());
            }
            _ => unreachable!(
                "one channel with one put and no iteration signal is always under budget"
            ),
        }
        step += 1;
    }
    while spec.phases.iter().map(|p| p.channels.len()).sum::<usize>() > 1
        && print_program(&spec).operations > MAX_OPERATIONS
    {
        if let Some(phase) = spec.phases.last_mut() {
            phase.channels.pop();
        }
        spec.phases.retain(|phase| !phase.channels.is_empty());
    }
    spec
}

fn shrink_iterations(channel: &mut ChannelSpec) {
    channel.iterations = match channel.iterations {
        Iterations::Constant { step, .. } => Iterations::Constant { count: 1, step },
        Iterations::Nested { .. } => Iterations::Constant { count: 1, step: 1 },
        Iterations::RankDependent(_) => Iterations::RankDependent(RankTrip::Parity),
        Iterations::Single => Iterations::Single,
    };
}

/// mlx5 basic blocks (64 B) of one put: inline up to 64 B, else one gather WQE.
fn put_basic_blocks(bytes: u32) -> u32 {
    if bytes <= INLINE_BYTES_LIMIT {
        let data_segment_units = (4 + bytes).div_ceil(16);
        ((2 + data_segment_units) * 16).div_ceil(64)
    } else {
        1
    }
}

fn signal_basic_blocks(signal: &Option<SignalSpec>) -> u32 {
    match signal {
        None => 0,
        Some(SignalSpec {
            operation: SignalOperation::Set(_),
            ..
        }) => 2,
        Some(SignalSpec {
            operation: SignalOperation::Add { .. },
            ..
        }) => 1,
    }
}

/// The peers program `pid` of rank `rank` sends to on `route`.
fn peers_of(route: Route, rank: u32, pid: u32, ranks: u32) -> Vec<u32> {
    match route {
        Route::Fixed { offset, senders } => match senders {
            Senders::OneProgram(sender) if sender != pid => Vec::new(),
            _ => vec![(rank + offset) % ranks],
        },
        Route::ProgramOffset { base } => vec![(rank + base + pid) % ranks],
        Route::AllToAll => vec![pid + u32::from(pid >= rank)],
        Route::PeerLoop { senders, .. } => match senders {
            Senders::OneProgram(sender) if sender != pid => Vec::new(),
            _ => (1..ranks).map(|j| (rank + j) % ranks).collect(),
        },
    }
}

/// The most mlx5 basic blocks one queue receives over the launch (all predicates true: a
/// false one still takes its slot as a NOP).
pub fn max_queue_basic_blocks(spec: &ProgramSpec) -> u32 {
    let mut per_queue: BTreeMap<(u32, u32), u32> = BTreeMap::new();
    for rank in 0..spec.ranks {
        for pid in 0..spec.programs {
            for channel in spec.phases.iter().flat_map(|p| &p.channels) {
                let trips = channel.iterations.trips_on(rank, spec.ranks);
                let per_iteration: u32 = channel
                    .puts
                    .iter()
                    .map(|put| put_basic_blocks(put.bytes))
                    .sum::<u32>()
                    + signal_basic_blocks(&channel.iteration_signal);
                let reuse = match channel.reuse {
                    Reuse::AfterPuts { .. } => put_basic_blocks(channel.puts[0].bytes),
                    _ => 0,
                };
                let per_peer =
                    trips * per_iteration + reuse + signal_basic_blocks(&channel.final_signal);
                for peer in peers_of(channel.route, rank, pid, spec.ranks) {
                    *per_queue.entry((rank, peer)).or_default() += per_peer;
                }
            }
        }
    }
    per_queue.values().copied().max().unwrap_or(0)
}

// ------------------------------------------------------------------------------------------
// Layout: where each channel's data, flags and reuse slot live.
// ------------------------------------------------------------------------------------------

/// Where one channel's data and flags live on every receiver, and its slot in `send`.
#[derive(Clone, Debug)]
struct ChannelLayout {
    /// Byte offset of the channel's segment in its data region.
    segment_base: u32,
    /// Bytes per sender key.
    sender_stride: u32,
    /// Bytes per iteration inside a sender's range.
    iteration_stride: u32,
    /// Byte offset of each put inside an iteration.
    put_offsets: Vec<u32>,
    /// Byte offset of the reuse put inside a sender's range.
    reuse_offset: u32,
    /// Iterations the destination and flag space is sized for.
    max_trips: u32,
    /// First flag word of the iteration signal.
    iteration_flag_base: u32,
    /// First flag word of the final signal.
    final_flag_base: u32,
    /// Byte offset of the reuse slot inside a program's share of `send`.
    slot_offset: Option<u32>,
    /// Byte offset of each put's source in the read-only area (per iteration 0).
    source_offsets: Vec<u32>,
}

#[derive(Clone, Debug)]
struct Layout {
    channels: Vec<ChannelLayout>,
    recv_bytes: u32,
    rows_bytes: u32,
    flag_words: u32,
    /// Bytes of `send` per program.
    partition_bytes: u32,
}

/// Distinct sender keys per receiver: `(j - 1) * programs + pid` for `j in 1..ranks`.
fn key_count(spec: &ProgramSpec) -> u32 {
    (spec.ranks - 1) * spec.programs
}

/// Flag words one signal needs on each receiver.
fn signal_flag_words(
    signal: &Option<SignalSpec>,
    keys: u32,
    max_trips: u32,
    per_iteration: bool,
) -> u32 {
    match signal {
        None => 0,
        Some(SignalSpec {
            operation: SignalOperation::Set(_),
            ..
        }) => keys * if per_iteration { max_trips } else { 1 },
        Some(SignalSpec {
            operation: SignalOperation::Add { shared_flag: true },
            ..
        }) => 1,
        Some(SignalSpec {
            operation: SignalOperation::Add { shared_flag: false },
            ..
        }) => keys,
    }
}

impl Layout {
    fn new(spec: &ProgramSpec) -> Layout {
        let keys = key_count(spec);
        let mut channels = Vec::new();
        let (mut recv_bytes, mut rows_bytes, mut flag_words) = (0u32, 0u32, 0u32);
        let mut partition_bytes = READ_ONLY_SOURCE_BYTES;
        for channel in spec.phases.iter().flat_map(|p| &p.channels) {
            let max_trips = channel.iterations.max_trips(spec.ranks);
            let mut put_offsets = Vec::new();
            let mut iteration_stride = 0;
            for put in &channel.puts {
                put_offsets.push(iteration_stride);
                iteration_stride += put.bytes;
            }
            let reuse_offset = max_trips * iteration_stride;
            let reuse_bytes = match channel.reuse {
                Reuse::AfterPuts { .. } => channel.puts[0].bytes,
                _ => 0,
            };
            let sender_stride = reuse_offset + reuse_bytes;
            let region_bytes = match channel.data_region {
                DataRegion::Bytes => &mut recv_bytes,
                DataRegion::Words => &mut rows_bytes,
            };
            let segment_base = *region_bytes;
            *region_bytes += keys * sender_stride;
            let iteration_flag_base = flag_words;
            flag_words += signal_flag_words(&channel.iteration_signal, keys, max_trips, true);
            let final_flag_base = flag_words;
            flag_words += signal_flag_words(&channel.final_signal, keys, max_trips, false);
            let slot_offset = (channel.reuse != Reuse::None).then(|| {
                let offset = partition_bytes;
                partition_bytes += channel.puts[0].bytes;
                offset
            });
            // Iteration `it` reads 8 * it bytes further on: keep the last read in the area.
            let source_offsets = channel
                .puts
                .iter()
                .map(|put| {
                    let room = (READ_ONLY_SOURCE_BYTES - put.bytes - (max_trips - 1) * 8) / 8;
                    (put.source_word % (room + 1)) * 8
                })
                .collect();
            channels.push(ChannelLayout {
                segment_base,
                sender_stride,
                iteration_stride,
                put_offsets,
                reuse_offset,
                max_trips,
                iteration_flag_base,
                final_flag_base,
                slot_offset,
                source_offsets,
            });
        }
        Layout {
            channels,
            recv_bytes: recv_bytes.max(8),
            rows_bytes: rows_bytes.max(8),
            flag_words: flag_words.max(1),
            partition_bytes,
        }
    }
}

// ------------------------------------------------------------------------------------------
// Printing.
// ------------------------------------------------------------------------------------------

/// A scalar the printer knows statically (folded into offsets) or only by name.
#[derive(Clone, Debug)]
enum Operand {
    Constant(u32),
    Value(String),
}

impl Operand {
    fn value(name: &str) -> Operand {
        Operand::Value(name.to_string())
    }
}

/// Names of the values a channel's per-peer body uses.
struct PeerValues {
    endpoint: String,
    data: String,
    flags: Option<String>,
    key: Operand,
    data_base: Operand,
    slot: Option<String>,
    iteration_flag_base: Option<Operand>,
    final_flag_index: Option<Operand>,
}

/// Prints `spec` as `.abo` text.
pub fn print_program(spec: &ProgramSpec) -> GeneratedProgram {
    let layout = Layout::new(spec);
    let mut printer = Printer {
        spec,
        layout: &layout,
        lines: Vec::new(),
        indent: 0,
        constants: BTreeSet::new(),
        used_names: BTreeSet::new(),
        features: BTreeSet::new(),
        loop_depth: 0,
        scope_depth: 0,
        top_level_tokens: Vec::new(),
        phase_endpoints: Vec::new(),
        all_endpoints: Vec::new(),
    };
    printer.kernel_body();
    printer.finish()
}

struct Printer<'a> {
    spec: &'a ProgramSpec,
    layout: &'a Layout,
    lines: Vec<String>,
    indent: usize,
    constants: BTreeSet<u32>,
    used_names: BTreeSet<String>,
    features: BTreeSet<&'static str>,
    loop_depth: usize,
    /// `ab.for` and `ab.if` nesting: values defined at depth 0 dominate the rest of the kernel.
    scope_depth: usize,
    /// `(token, endpoint)` of puts at depth 0, for cross-channel `after` operands.
    top_level_tokens: Vec<(String, String)>,
    phase_endpoints: Vec<String>,
    all_endpoints: Vec<String>,
}

const I64: &str = "builtin.integer i64";

/// Names the kernel's prologue defines.
const PROLOGUE_NAMES: [&str; 15] = [
    "endpoints",
    "recv",
    "rows",
    "flags",
    "send",
    "send_key",
    "my_flags",
    "choices",
    "epoch",
    "rank",
    "ranks",
    "pid32",
    "pid",
    "my_send",
    "store_seed",
];

impl Printer<'_> {
    fn line(&mut self, text: impl AsRef<str>) {
        let indent = 6 + 4 * self.indent;
        self.lines.push(format!("{:indent$}{}", "", text.as_ref()));
    }

    fn label(&mut self, text: String) {
        let indent = 8 + 4 * self.indent;
        self.lines.push(format!("{:indent$}{text}", ""));
    }

    fn comment(&mut self, text: impl AsRef<str>) {
        self.line(format!("// {}", text.as_ref()));
    }

    /// A name not used before in the kernel (pliron needs unique value and block names).
    fn fresh(&mut self, base: &str) -> String {
        let mut name = base.to_string();
        let mut counter = 2;
        while self.used_names.contains(&name) {
            name = format!("{base}_n{counter}");
            counter += 1;
        }
        self.used_names.insert(name.clone());
        name
    }

    fn constant(&mut self, value: u32) -> String {
        self.constants.insert(value);
        format!("c_{value}")
    }

    fn name(&mut self, operand: &Operand) -> String {
        match operand {
            Operand::Constant(value) => self.constant(*value),
            Operand::Value(name) => name.clone(),
        }
    }

    fn binop(&mut self, base: &str, operator: &str, lhs: &str, rhs: &str) -> String {
        let name = self.fresh(base);
        self.line(format!(
            "{name} = ab.binop {operator} {lhs}, {rhs} : {I64};"
        ));
        name
    }

    fn pointer_add(&mut self, base: &str, pointer: &str, offset: &str) -> String {
        let name = self.fresh(base);
        self.line(format!("{name} = ab.ptr_add {pointer}, {offset} : ab.ptr;"));
        name
    }

    /// `base + index * factor + extra`, folding every part known statically.
    fn affine(
        &mut self,
        name: &str,
        base: Option<&Operand>,
        index: &Operand,
        factor: u32,
        extra: u32,
    ) -> Operand {
        let mut constant = extra;
        let mut terms: Vec<String> = Vec::new();
        match base {
            Some(Operand::Constant(value)) => constant += value,
            Some(Operand::Value(value)) => terms.push(value.clone()),
            None => {}
        }
        match index {
            Operand::Constant(value) => constant += value * factor,
            Operand::Value(_) if factor == 0 => {}
            Operand::Value(value) if factor == 1 => terms.push(value.clone()),
            Operand::Value(value) => {
                let factor = self.constant(factor);
                let scaled = self.binop(&format!("{name}_scaled"), "Mul", value, &factor);
                terms.push(scaled);
            }
        }
        let Some(first) = terms.first().cloned() else {
            return Operand::Constant(constant);
        };
        let mut current = first;
        for term in &terms[1..] {
            current = self.binop(name, "Add", &current, term);
        }
        if constant != 0 {
            let constant = self.constant(constant);
            current = self.binop(name, "Add", &current, &constant);
        }
        Operand::Value(current)
    }

    /// Opens `ab.for lower, upper, step` and returns the induction variable.
    fn open_for(
        &mut self,
        base: &str,
        lower: u32,
        upper: &str,
        step: u32,
        constant_trip_count: bool,
    ) -> String {
        self.features.insert(feature::LOOP);
        if self.loop_depth > 0 {
            self.features.insert(feature::NESTED_LOOP);
        }
        if !constant_trip_count {
            self.features.insert(feature::RUNTIME_TRIP_COUNT);
        }
        let lower = self.constant(lower);
        let step = self.constant(step);
        let label = self.fresh(&format!("{base}_body"));
        let variable = self.fresh(base);
        self.line(format!("ab.for {lower}, {upper}, {step} [] {{"));
        self.label(format!("^{label}({variable}: {I64}):"));
        self.indent += 1;
        self.loop_depth += 1;
        self.scope_depth += 1;
        variable
    }

    fn close_for(&mut self) {
        self.line("ab.yield");
        self.indent -= 1;
        self.loop_depth -= 1;
        self.scope_depth -= 1;
        self.line("};");
    }

    fn open_if(&mut self, base: &str, condition: &str) {
        let label = self.fresh(&format!("{base}_then"));
        self.line(format!("ab.if {condition} {{"));
        self.label(format!("^{label}():"));
        self.indent += 1;
        self.scope_depth += 1;
    }

    fn close_if(&mut self) {
        self.line("ab.yield");
        self.indent -= 1;
        self.scope_depth -= 1;
        self.line("};");
    }

    fn kernel_body(&mut self) {
        let spec = self.spec;
        if spec.programs > 1 {
            self.features.insert(feature::MULTIPLE_PROGRAMS);
        }
        for name in PROLOGUE_NAMES {
            self.used_names.insert(name.to_string());
        }
        self.line(format!("rank = ab.rank : {I64};"));
        self.line(format!("ranks = ab.world_size : {I64};"));
        self.line("pid32 = ab.program_id : builtin.integer i32;");
        self.line(format!("pid = ab.cast pid32 : {I64};"));
        let partition = self.constant(self.layout.partition_bytes);
        let share = self.binop("send_share", "Mul", "pid", &partition);
        self.line(format!("my_send = ab.ptr_add send, {share} : ab.ptr;"));
        // Values stored into reuse slots: distinct per rank, program, channel and iteration.
        let rank_factor = self.constant(1_000_000);
        let pid_factor = self.constant(100_000);
        let rank_part = self.binop("seed_rank", "Mul", "rank", &rank_factor);
        let pid_part = self.binop("seed_pid", "Mul", "pid", &pid_factor);
        self.line(format!(
            "store_seed = ab.binop Add {rank_part}, {pid_part} : {I64};"
        ));
        let mut channel_index = 0;
        for (phase_index, phase) in spec.phases.iter().enumerate() {
            self.comment(format!("phase {phase_index}: sends"));
            self.phase_endpoints.clear();
            let first = channel_index;
            for channel in &phase.channels {
                self.sender(channel_index, channel);
                channel_index += 1;
            }
            if phase.drain_before_waits {
                for endpoint in self.phase_endpoints.clone() {
                    self.drain(&endpoint);
                }
            }
            self.comment(format!("phase {phase_index}: waits"));
            for (offset, channel) in phase.channels.iter().enumerate() {
                self.receiver(first + offset, channel);
            }
        }
        if spec.final_drain {
            for endpoint in self.all_endpoints.clone() {
                self.drain(&endpoint);
            }
        }
        self.line("ab.return");
    }

    fn drain(&mut self, endpoint: &str) {
        self.features.insert(feature::DRAIN);
        self.line(format!("ab.drain {endpoint} [];"));
    }

    fn wait(&mut self, token: &str) {
        self.line(format!("ab.wait {token} [];"));
    }

    fn element_bytes(channel: &ChannelSpec) -> u32 {
        match channel.data_region {
            DataRegion::Bytes => 1,
            DataRegion::Words => 8,
        }
    }

    // --- Sender side ------------------------------------------------------------------------

    fn sender(&mut self, index: usize, channel: &ChannelSpec) {
        let programs = self.spec.programs;
        let prefix = format!("ch{index}");
        self.comment(format!("channel {index} sends"));
        let gate = match channel.route {
            Route::Fixed {
                senders: Senders::OneProgram(sender),
                ..
            }
            | Route::PeerLoop {
                senders: Senders::OneProgram(sender),
                ..
            } if programs > 1 => Some(sender),
            _ => None,
        };
        if let Some(sender) = gate {
            self.features.insert(feature::GATED_SENDER);
            let sender = self.constant(sender);
            let condition = self.binop(&format!("{prefix}_is_sender"), "Eq", "pid", &sender);
            self.open_if(&format!("{prefix}_send"), &condition);
        }
        match channel.route {
            Route::Fixed { offset, .. } => {
                self.features.insert(feature::FIXED_PEER);
                let distance = self.constant(offset);
                let next = self.binop(&format!("{prefix}_next"), "Add", "rank", &distance);
                let peer = self.binop(&format!("{prefix}_peer"), "Rem", &next, "ranks");
                self.peer_body(index, channel, &peer, &Operand::Constant(offset));
            }
            Route::ProgramOffset { base } => {
                self.features.insert(feature::PROGRAM_SELECTED_PEER);
                let base = self.constant(base);
                let distance = self.binop(&format!("{prefix}_distance"), "Add", "pid", &base);
                let next = self.binop(&format!("{prefix}_next"), "Add", "rank", &distance);
                let peer = self.binop(&format!("{prefix}_peer"), "Rem", &next, "ranks");
                self.peer_body(index, channel, &peer, &Operand::Value(distance));
            }
            Route::AllToAll => {
                self.features.insert(feature::PROGRAM_SELECTED_PEER);
                self.features.insert(feature::ALL_TO_ALL);
                let skip = self.binop(&format!("{prefix}_skip"), "Ge", "pid", "rank");
                let peer = self.binop(&format!("{prefix}_peer"), "Add", "pid", &skip);
                let difference = self.binop(&format!("{prefix}_difference"), "Sub", &peer, "rank");
                let wrapped = self.binop(&format!("{prefix}_wrapped"), "Add", &difference, "ranks");
                let distance = self.binop(&format!("{prefix}_distance"), "Rem", &wrapped, "ranks");
                self.peer_body(index, channel, &peer, &Operand::Value(distance));
            }
            Route::PeerLoop { bound, .. } => {
                self.features.insert(feature::PEER_LOOP);
                let upper = self.ranks_bound(bound);
                let distance = self.open_for(
                    &format!("{prefix}_distance"),
                    1,
                    &upper,
                    1,
                    bound == LoopBound::Constant,
                );
                let next = self.binop(&format!("{prefix}_next"), "Add", "rank", &distance);
                let peer = self.binop(&format!("{prefix}_peer"), "Rem", &next, "ranks");
                self.peer_body(index, channel, &peer, &Operand::Value(distance));
                self.close_for();
            }
        }
        if gate.is_some() {
            self.close_if();
        }
    }

    fn ranks_bound(&mut self, bound: LoopBound) -> String {
        match bound {
            LoopBound::Constant => self.constant(self.spec.ranks),
            LoopBound::WorldSize => "ranks".to_string(),
        }
    }

    /// `(distance - 1) * programs + program`: unique per (sender rank, program) at a receiver.
    fn sender_key(&mut self, prefix: &str, distance: &Operand, program: &Operand) -> Operand {
        let programs = self.spec.programs;
        match distance {
            Operand::Constant(distance) => self.affine(
                &format!("{prefix}_key"),
                None,
                program,
                1,
                (distance - 1) * programs,
            ),
            Operand::Value(distance) => {
                let one = self.constant(1);
                let lower = self.binop(&format!("{prefix}_distance_index"), "Sub", distance, &one);
                self.affine(
                    &format!("{prefix}_key"),
                    Some(program),
                    &Operand::Value(lower),
                    programs,
                    0,
                )
            }
        }
    }

    /// The flag word of `signal`'s first iteration for `key` (`None` without a signal).
    fn flag_base(
        &mut self,
        name: &str,
        signal: &Option<SignalSpec>,
        key: &Operand,
        base: u32,
        per_key_words: u32,
    ) -> Option<Operand> {
        let signal = signal.as_ref()?;
        Some(match signal.operation {
            SignalOperation::Add { shared_flag: true } => Operand::Constant(base),
            SignalOperation::Add { shared_flag: false } => self.affine(name, None, key, 1, base),
            SignalOperation::Set(_) => self.affine(name, None, key, per_key_words, base),
        })
    }

    fn peer_body(&mut self, index: usize, channel: &ChannelSpec, peer: &str, distance: &Operand) {
        let prefix = format!("ch{index}");
        let layouts = self.layout;
        let layout = &layouts.channels[index];
        let endpoint = self.fresh(&format!("{prefix}_endpoint"));
        self.line(format!(
            "{endpoint} = ab.endpoint endpoints, {peer} [] : ab.endpoint;"
        ));
        if self.scope_depth == 0 {
            self.phase_endpoints.push(endpoint.clone());
            self.all_endpoints.push(endpoint.clone());
        }
        let element = Self::element_bytes(channel);
        let (region, region_bytes) = match channel.data_region {
            DataRegion::Bytes => ("recv", layouts.recv_bytes),
            DataRegion::Words => {
                self.features.insert(feature::WORD_REMOTE);
                ("rows", layouts.rows_bytes)
            }
        };
        let data = self.fresh(&format!("{prefix}_data"));
        self.line(format!(
            "{data} = ab.remote {region}, {peer} [length_bytes: builtin.integer <{region_bytes}: i64>] : ab.remote <{element}>;"
        ));
        let has_signal = channel.iteration_signal.is_some() || channel.final_signal.is_some();
        let flags = has_signal.then(|| {
            let flags = self.fresh(&format!("{prefix}_flags"));
            let flag_bytes = layouts.flag_words * 8;
            self.line(format!(
                "{flags} = ab.remote flags, {peer} [length_bytes: builtin.integer <{flag_bytes}: i64>] : ab.remote <8>;"
            ));
            flags
        });
        let key = self.sender_key(&prefix, distance, &Operand::value("pid"));
        let data_base = self.affine(
            &format!("{prefix}_data_base"),
            None,
            &key,
            layout.sender_stride / element,
            layout.segment_base / element,
        );
        let slot = layout.slot_offset.map(|offset| {
            let offset = self.constant(offset);
            self.pointer_add(&format!("{prefix}_slot"), "my_send", &offset)
        });
        let iteration_flag_base = self.flag_base(
            &format!("{prefix}_iteration_flag"),
            &channel.iteration_signal,
            &key,
            layout.iteration_flag_base,
            layout.max_trips,
        );
        let final_flag_index = self.flag_base(
            &format!("{prefix}_final_flag"),
            &channel.final_signal,
            &key,
            layout.final_flag_base,
            1,
        );
        let values = PeerValues {
            endpoint,
            data,
            flags,
            key,
            data_base,
            slot,
            iteration_flag_base,
            final_flag_index,
        };
        let single_tokens = self.iterations(index, channel, &values);
        self.after_iterations(index, channel, &values, single_tokens);
    }

    /// Emits the iteration structure; returns the put tokens when there is no loop.
    fn iterations(
        &mut self,
        index: usize,
        channel: &ChannelSpec,
        values: &PeerValues,
    ) -> Vec<String> {
        let prefix = format!("ch{index}");
        match channel.iterations {
            Iterations::Single => {
                return self.iteration(index, channel, values, &Operand::Constant(0));
            }
            Iterations::Constant { count, step } => {
                let upper = self.constant(count * step);
                let variable = self.open_for(&format!("{prefix}_step"), 0, &upper, step, true);
                let iteration = if step == 1 {
                    variable
                } else {
                    let step = self.constant(step);
                    self.binop(&format!("{prefix}_iteration"), "Div", &variable, &step)
                };
                self.iteration(index, channel, values, &Operand::Value(iteration));
                self.close_for();
            }
            Iterations::Nested { outer, inner } => {
                let outer_upper = self.constant(outer);
                let inner_upper = self.constant(inner);
                let outer_variable =
                    self.open_for(&format!("{prefix}_outer"), 0, &outer_upper, 1, true);
                let inner_variable =
                    self.open_for(&format!("{prefix}_inner"), 0, &inner_upper, 1, true);
                let iteration = self.affine(
                    &format!("{prefix}_iteration"),
                    Some(&Operand::Value(inner_variable)),
                    &Operand::Value(outer_variable),
                    inner,
                    0,
                );
                self.iteration(index, channel, values, &iteration);
                self.close_for();
                self.close_for();
            }
            Iterations::RankDependent(trip) => {
                let trips = self.rank_trips(&format!("{prefix}_trips"), trip, "rank");
                let variable = self.open_for(&format!("{prefix}_iteration"), 0, &trips, 1, false);
                self.iteration(index, channel, values, &Operand::Value(variable));
                self.close_for();
            }
        }
        Vec::new()
    }

    /// The trip count of `trip` on the rank named `rank`.
    fn rank_trips(&mut self, name: &str, trip: RankTrip, rank: &str) -> String {
        let one = self.constant(1);
        let two = self.constant(2);
        match trip {
            RankTrip::ParityPlusOne => {
                let parity = self.binop(&format!("{name}_parity"), "Rem", rank, &two);
                self.binop(name, "Add", &parity, &one)
            }
            RankTrip::RankPlusOne => self.binop(name, "Add", rank, &one),
            RankTrip::WorldMinusRank => self.binop(name, "Sub", "ranks", rank),
            RankTrip::Parity => self.binop(name, "Rem", rank, &two),
        }
    }

    /// One iteration: refill, puts, iteration signal, iteration completion. Returns the put
    /// tokens.
    fn iteration(
        &mut self,
        index: usize,
        channel: &ChannelSpec,
        values: &PeerValues,
        iteration: &Operand,
    ) -> Vec<String> {
        let prefix = format!("ch{index}");
        let layouts = self.layout;
        let layout = &layouts.channels[index];
        let element = Self::element_bytes(channel);
        if channel.reuse == Reuse::EachIteration {
            let slot = values.slot.clone().expect("reuse has a slot");
            self.features.insert(feature::REUSE_IN_LOOP);
            self.features.insert(match channel.iteration_completion {
                IterationCompletion::Drain => feature::REUSE_AFTER_DRAIN,
                _ => feature::REUSE_AFTER_WAIT,
            });
            self.store_slot(
                &prefix,
                &slot,
                channel.puts[0].bytes,
                index,
                iteration,
                false,
            );
        }
        let mut tokens = Vec::new();
        for (put_index, put) in channel.puts.iter().enumerate() {
            let put_prefix = format!("{prefix}_put{put_index}");
            let destination_index = self.affine(
                &format!("{put_prefix}_index"),
                Some(&values.data_base),
                iteration,
                layout.iteration_stride / element,
                layout.put_offsets[put_index] / element,
            );
            let destination_index = self.name(&destination_index);
            let destination = self.fresh(&format!("{put_prefix}_destination"));
            self.line(format!(
                "{destination} = ab.at {}, {destination_index} : ab.remote_ptr <{element}>;",
                values.data
            ));
            let source = match (&values.slot, put_index) {
                (Some(slot), 0) => slot.clone(),
                _ => {
                    let offset = self.affine(
                        &format!("{put_prefix}_source_offset"),
                        None,
                        iteration,
                        8,
                        layout.source_offsets[put_index],
                    );
                    let offset = self.name(&offset);
                    self.pointer_add(&format!("{put_prefix}_source"), "my_send", &offset)
                }
            };
            let predicate = put
                .predicate
                .map(|predicate| self.predicate(&put_prefix, predicate, iteration, &values.key));
            let token = self.put(
                &put_prefix,
                values,
                &destination,
                &source,
                put.bytes,
                predicate,
            );
            tokens.push(token);
            if channel.fence == FencePlacement::BetweenPuts && put_index == 0 {
                self.features.insert(feature::FENCE);
                self.line(format!("ab.fence {} [];", values.endpoint));
            }
        }
        let signal = channel.iteration_signal.map(|signal| {
            let flag_base = values
                .iteration_flag_base
                .clone()
                .expect("a signal has a flag");
            let flag_index = match signal.operation {
                SignalOperation::Set(_) => self.affine(
                    &format!("{prefix}_iteration_flag_index"),
                    Some(&flag_base),
                    iteration,
                    1,
                    0,
                ),
                SignalOperation::Add { .. } => flag_base,
            };
            self.signal(
                &format!("{prefix}_iteration_signal"),
                values,
                signal,
                &flag_index,
                iteration,
                tokens.last().map(String::as_str),
            )
        });
        match channel.iteration_completion {
            IterationCompletion::None => {}
            IterationCompletion::WaitPut(put_index) => {
                self.features.insert(feature::WAIT_PUT_TOKEN);
                self.wait(&tokens[put_index as usize]);
            }
            IterationCompletion::WaitSignal => {
                self.features.insert(feature::WAIT_SIGNAL_TOKEN);
                self.wait(signal.as_deref().expect("normalized: a signal exists"));
            }
            IterationCompletion::Drain => self.drain(&values.endpoint),
        }
        tokens
    }

    fn put(
        &mut self,
        prefix: &str,
        values: &PeerValues,
        destination: &str,
        source: &str,
        bytes: u32,
        predicate: Option<String>,
    ) -> String {
        self.features.insert(if bytes <= INLINE_BYTES_LIMIT {
            feature::INLINE_PUT
        } else {
            feature::LARGE_PUT
        });
        let bytes = self.constant(bytes);
        let token = self.fresh(prefix);
        let predicate = predicate.map(|p| format!(", {p}")).unwrap_or_default();
        self.line(format!(
            "{token} = ab.put {}, {destination}, {source}, {bytes}, send_key{predicate} [] : ab.token;",
            values.endpoint
        ));
        if self.scope_depth == 0 {
            self.top_level_tokens
                .push((token.clone(), values.endpoint.clone()));
        }
        token
    }

    fn predicate(
        &mut self,
        prefix: &str,
        predicate: PredicateSpec,
        iteration: &Operand,
        key: &Operand,
    ) -> String {
        self.features.insert(feature::PREDICATE);
        let two = self.constant(2);
        match predicate {
            PredicateSpec::LoadedChoice { comparison, salt } => {
                self.features.insert(feature::LOADED_PREDICATE);
                let word = self.affine(&format!("{prefix}_word"), Some(key), iteration, 1, salt);
                let offset = match word {
                    Operand::Constant(word) => self.constant(word % CHOICE_WORDS * 8),
                    Operand::Value(word) => {
                        let words = self.constant(CHOICE_WORDS);
                        let word =
                            self.binop(&format!("{prefix}_choice_index"), "Rem", &word, &words);
                        let eight = self.constant(8);
                        self.binop(&format!("{prefix}_choice_offset"), "Mul", &word, &eight)
                    }
                };
                let address =
                    self.pointer_add(&format!("{prefix}_choice_address"), "choices", &offset);
                let choice = self.fresh(&format!("{prefix}_choice"));
                self.line(format!("{choice} = ab.load {address} : {I64};"));
                let modulus = match self.spec.choice_modulus {
                    ChoiceModulus::Constant(modulus) => modulus,
                    ChoiceModulus::Ranks => self.spec.ranks,
                };
                match comparison {
                    ChoiceComparison::NonZero => choice,
                    ChoiceComparison::LessThan(threshold) => {
                        let threshold = self.constant(1 + threshold % modulus);
                        self.binop(&format!("{prefix}_predicate"), "Lt", &choice, &threshold)
                    }
                    ChoiceComparison::Equal(value) => {
                        let value = self.constant(value % modulus);
                        self.binop(&format!("{prefix}_predicate"), "Eq", &choice, &value)
                    }
                }
            }
            PredicateSpec::RankParity { salt } => {
                let sum = self.affine(
                    &format!("{prefix}_parity_input"),
                    Some(&Operand::value("rank")),
                    iteration,
                    1,
                    0,
                );
                let sum = self.name(&sum);
                let parity = self.binop(&format!("{prefix}_parity"), "Rem", &sum, &two);
                let wanted = self.constant(salt % 2);
                self.binop(&format!("{prefix}_predicate"), "Eq", &parity, &wanted)
            }
            PredicateSpec::IterationBelowRank => {
                let iteration = self.name(iteration);
                self.binop(&format!("{prefix}_predicate"), "Lt", &iteration, "rank")
            }
            PredicateSpec::ProgramParity => {
                let parity = self.binop(&format!("{prefix}_program_parity"), "Rem", "pid", &two);
                let zero = self.constant(0);
                self.binop(&format!("{prefix}_predicate"), "Eq", &parity, &zero)
            }
        }
    }

    /// The value a `Set` writes in iteration `iteration` (a final signal passes 0).
    fn set_value(&mut self, name: &str, value: SetValue, iteration: &Operand) -> String {
        match value {
            SetValue::Epoch => "epoch".to_string(),
            SetValue::Constant(value) => self.constant(value),
            SetValue::IterationPlusOne => {
                let value = self.affine(name, None, iteration, 1, 1);
                self.name(&value)
            }
        }
    }

    fn signal(
        &mut self,
        prefix: &str,
        values: &PeerValues,
        signal: SignalSpec,
        flag_index: &Operand,
        iteration: &Operand,
        last_put: Option<&str>,
    ) -> String {
        let flags = values.flags.clone().expect("signals have a flag region");
        let flag_index = self.name(flag_index);
        let flag = self.fresh(&format!("{prefix}_flag"));
        self.line(format!(
            "{flag} = ab.at {flags}, {flag_index} : ab.remote_ptr <8>;"
        ));
        let (value, operation) = match signal.operation {
            SignalOperation::Set(value) => {
                self.features.insert(feature::SET_SIGNAL);
                (
                    self.set_value(&format!("{prefix}_value"), value, iteration),
                    "Set",
                )
            }
            SignalOperation::Add { shared_flag } => {
                self.features.insert(feature::ADD_SIGNAL);
                if shared_flag {
                    self.features.insert(feature::SHARED_ADD_FLAG);
                }
                (self.constant(1), "Add")
            }
        };
        let after = match signal.after {
            SignalAfter::None => None,
            SignalAfter::LastPut => last_put.map(str::to_string),
            SignalAfter::EarlierChannelPut(choice) if !self.top_level_tokens.is_empty() => {
                // Prefer a put on another endpoint value: its ordering needs a completion.
                let other_endpoint: Vec<&(String, String)> = self
                    .top_level_tokens
                    .iter()
                    .filter(|(_, endpoint)| *endpoint != values.endpoint)
                    .collect();
                let (token, endpoint) = if other_endpoint.is_empty() {
                    self.top_level_tokens[choice as usize % self.top_level_tokens.len()].clone()
                } else {
                    other_endpoint[choice as usize % other_endpoint.len()].clone()
                };
                if endpoint != values.endpoint {
                    self.features.insert(feature::CROSS_ENDPOINT_AFTER);
                }
                Some(token)
            }
            SignalAfter::EarlierChannelPut(_) => None,
        };
        self.features.insert(if after.is_some() {
            feature::SIGNAL_AFTER
        } else {
            feature::SIGNAL_WITHOUT_AFTER
        });
        let token = self.fresh(prefix);
        let after = after.map(|a| format!(", {a}")).unwrap_or_default();
        self.line(format!(
            "{token} = ab.signal {}, {flag}, {value}{after} [op: ab.signal_op {operation}] : ab.token;",
            values.endpoint
        ));
        token
    }

    /// Stores new values into the first and the last word of a reuse slot (enough to change
    /// what the next put sends; a loop over every word would only cost simulation time).
    fn store_slot(
        &mut self,
        prefix: &str,
        slot: &str,
        bytes: u32,
        channel_index: usize,
        iteration: &Operand,
        second_round: bool,
    ) {
        let salt = channel_index as u32 * 10_000 + if second_round { 5_000 } else { 0 } + 1;
        let base = self.affine(
            &format!("{prefix}_fill"),
            Some(&Operand::value("store_seed")),
            iteration,
            100,
            salt,
        );
        let base = self.name(&base);
        self.line(format!("ab.store {slot}, {base};"));
        let last_word = bytes / 8 - 1;
        if last_word > 0 {
            let offset = self.constant(last_word * 8);
            let address = self.pointer_add(&format!("{prefix}_fill_address"), slot, &offset);
            let word = self.constant(last_word);
            let value = self.binop(&format!("{prefix}_fill_value"), "Add", &base, &word);
            self.line(format!("ab.store {address}, {value};"));
        }
    }

    fn after_iterations(
        &mut self,
        index: usize,
        channel: &ChannelSpec,
        values: &PeerValues,
        mut tokens: Vec<String>,
    ) {
        let prefix = format!("ch{index}");
        let layouts = self.layout;
        let layout = &layouts.channels[index];
        let element = Self::element_bytes(channel);
        if channel.fence == FencePlacement::BeforeFinalSignal {
            self.features.insert(feature::FENCE);
            self.line(format!("ab.fence {} [];", values.endpoint));
        }
        if let Reuse::AfterPuts { drain } = channel.reuse {
            let slot = values.slot.clone().expect("reuse has a slot");
            if drain {
                self.features.insert(feature::REUSE_AFTER_DRAIN);
                self.drain(&values.endpoint);
            } else {
                self.features.insert(feature::REUSE_AFTER_WAIT);
                self.features.insert(feature::WAIT_PUT_TOKEN);
                self.wait(&tokens[0]);
            }
            self.store_slot(
                &prefix,
                &slot,
                channel.puts[0].bytes,
                index,
                &Operand::Constant(0),
                true,
            );
            let destination_index = self.affine(
                &format!("{prefix}_again_index"),
                Some(&values.data_base),
                &Operand::Constant(0),
                0,
                layout.reuse_offset / element,
            );
            let destination_index = self.name(&destination_index);
            let destination = self.fresh(&format!("{prefix}_again_destination"));
            self.line(format!(
                "{destination} = ab.at {}, {destination_index} : ab.remote_ptr <{element}>;",
                values.data
            ));
            let token = self.put(
                &format!("{prefix}_again"),
                values,
                &destination,
                &slot,
                channel.puts[0].bytes,
                None,
            );
            tokens.push(token);
        }
        let final_token = channel.final_signal.map(|signal| {
            let flag_index = values
                .final_flag_index
                .clone()
                .expect("a signal has a flag");
            self.signal(
                &format!("{prefix}_final_signal"),
                values,
                signal,
                &flag_index,
                &Operand::Constant(0),
                tokens.last().map(String::as_str),
            )
        });
        match channel.body_completion {
            BodyCompletion::None => {}
            BodyCompletion::WaitPut => {
                let token = tokens
                    .last()
                    .cloned()
                    .expect("normalized: a single iteration has put tokens");
                self.features.insert(feature::WAIT_PUT_TOKEN);
                self.wait(&token);
            }
            BodyCompletion::WaitSignal => {
                self.features.insert(feature::WAIT_SIGNAL_TOKEN);
                self.wait(
                    final_token
                        .as_deref()
                        .expect("normalized: a final signal exists"),
                );
            }
            BodyCompletion::Drain => self.drain(&values.endpoint),
        }
    }

    // --- Receiver side ----------------------------------------------------------------------

    fn receiver(&mut self, index: usize, channel: &ChannelSpec) {
        let prefix = format!("ch{index}_rx");
        let signals = [channel.iteration_signal, channel.final_signal];
        if signals.iter().all(Option::is_none) {
            self.comment(format!(
                "channel {index} has no signals: nothing to wait for"
            ));
            return;
        }
        self.comment(format!("channel {index} waits"));
        let gate = match channel.waiter {
            Waiter::OneProgram(waiter) if self.spec.programs > 1 => Some(waiter),
            _ => None,
        };
        if let Some(waiter) = gate {
            self.features.insert(feature::GATED_WAITER);
            let waiter = self.constant(waiter);
            let condition = self.binop(&format!("{prefix}_is_waiter"), "Eq", "pid", &waiter);
            self.open_if(&format!("{prefix}_wait"), &condition);
        }
        self.shared_add_waits(index, channel);
        let per_sender = signals.iter().any(|signal| {
            matches!(
                signal,
                Some(SignalSpec {
                    operation: SignalOperation::Set(_)
                        | SignalOperation::Add { shared_flag: false },
                    ..
                })
            )
        });
        if per_sender {
            self.for_each_sender(index, channel);
        }
        if gate.is_some() {
            self.close_if();
        }
    }

    fn wait_flag(&mut self, prefix: &str, flag_index: &Operand, value: &str) {
        let offset = match flag_index {
            Operand::Constant(index) => self.constant(index * 8),
            Operand::Value(index) => {
                let eight = self.constant(8);
                self.binop(&format!("{prefix}_flag_offset"), "Mul", index, &eight)
            }
        };
        let address = self.pointer_add(&format!("{prefix}_flag_address"), "my_flags", &offset);
        self.line(format!("ab.wait_signal {address}, {value} [];"));
    }

    /// `(distance, programs)` of the senders to any one receiver: the sender rank is
    /// `(rank - distance) mod ranks`, and `programs` of its programs send.
    fn sender_distances(&self, channel: &ChannelSpec) -> Vec<(u32, u32)> {
        let (ranks, programs) = (self.spec.ranks, self.spec.programs);
        let count = |senders: Senders| match senders {
            Senders::AllPrograms => programs,
            Senders::OneProgram(_) => 1,
        };
        match channel.route {
            Route::Fixed { offset, senders } => vec![(offset, count(senders))],
            Route::ProgramOffset { base } => (0..programs).map(|pid| (base + pid, 1)).collect(),
            Route::AllToAll => (1..ranks).map(|distance| (distance, 1)).collect(),
            Route::PeerLoop { senders, .. } => (1..ranks)
                .map(|distance| (distance, count(senders)))
                .collect(),
        }
    }

    /// The rank `distance` behind this one: `(rank - distance) mod ranks`.
    fn sender_rank(&mut self, prefix: &str, distance: &Operand) -> String {
        let wrapped = match distance {
            Operand::Constant(distance) => {
                let ahead = self.constant(self.spec.ranks - distance);
                self.binop(&format!("{prefix}_behind"), "Add", "rank", &ahead)
            }
            Operand::Value(distance) => {
                let behind = self.binop(&format!("{prefix}_behind"), "Sub", "rank", distance);
                self.binop(&format!("{prefix}_behind_wrapped"), "Add", &behind, "ranks")
            }
        };
        self.binop(&format!("{prefix}_sender"), "Rem", &wrapped, "ranks")
    }

    /// Waits for the total of every shared `Add` flag of the channel.
    fn shared_add_waits(&mut self, index: usize, channel: &ChannelSpec) {
        let layouts = self.layout;
        let layout = &layouts.channels[index];
        let prefix = format!("ch{index}_rx");
        let senders = self.sender_distances(channel);
        let instances: u32 = senders.iter().map(|(_, count)| count).sum();
        for (signal, base, per_iteration) in [
            (channel.iteration_signal, layout.iteration_flag_base, true),
            (channel.final_signal, layout.final_flag_base, false),
        ] {
            let Some(SignalSpec {
                operation: SignalOperation::Add { shared_flag: true },
                ..
            }) = signal
            else {
                continue;
            };
            let name = if per_iteration { "iteration" } else { "final" };
            let total = match (per_iteration, channel.iterations) {
                (false, _) => self.constant(instances),
                (true, Iterations::RankDependent(trip)) => {
                    // The senders' trip counts depend on each sender's rank: sum them.
                    let mut total: Option<String> = None;
                    for (distance, count) in &senders {
                        let sender = self.sender_rank(
                            &format!("{prefix}_{name}"),
                            &Operand::Constant(*distance),
                        );
                        let trips =
                            self.rank_trips(&format!("{prefix}_{name}_trips"), trip, &sender);
                        let term = if *count == 1 {
                            trips
                        } else {
                            let count = self.constant(*count);
                            self.binop(&format!("{prefix}_{name}_term"), "Mul", &trips, &count)
                        };
                        total = Some(match total {
                            None => term,
                            Some(sum) => {
                                self.binop(&format!("{prefix}_{name}_total"), "Add", &sum, &term)
                            }
                        });
                    }
                    total.expect("every channel has a sender")
                }
                (true, iterations) => {
                    self.constant(instances * iterations.trips_on(0, self.spec.ranks))
                }
            };
            self.wait_flag(
                &format!("{prefix}_{name}_shared"),
                &Operand::Constant(base),
                &total,
            );
        }
    }

    /// The sender program to wait for: this program (matching), a constant, or a loop.
    fn sender_program(
        &mut self,
        prefix: &str,
        senders: Senders,
        matching: bool,
        open_loops: &mut usize,
    ) -> Operand {
        let programs = self.spec.programs;
        match senders {
            _ if matching => Operand::value("pid"),
            Senders::OneProgram(sender) => Operand::Constant(sender),
            Senders::AllPrograms if programs == 1 => Operand::Constant(0),
            Senders::AllPrograms => {
                let upper = self.constant(programs);
                *open_loops += 1;
                Operand::Value(self.open_for(&format!("{prefix}_program"), 0, &upper, 1, true))
            }
        }
    }

    /// Enumerates the senders this program waits for, and waits for each one's flags.
    fn for_each_sender(&mut self, index: usize, channel: &ChannelSpec) {
        let prefix = format!("ch{index}_rx");
        let matching = channel.waiter == Waiter::MatchingProgram;
        let mut open_loops = 0;
        let (distance, program) = match channel.route {
            Route::Fixed { offset, senders } => {
                let program = self.sender_program(&prefix, senders, matching, &mut open_loops);
                (Operand::Constant(offset), program)
            }
            Route::ProgramOffset { base } => {
                let program =
                    self.sender_program(&prefix, Senders::AllPrograms, matching, &mut open_loops);
                let distance = self.affine(&format!("{prefix}_distance"), None, &program, 1, base);
                (distance, program)
            }
            Route::AllToAll => {
                let distance = if matching {
                    // This program's own peer is the sender it waits for.
                    let skip = self.binop(&format!("{prefix}_skip"), "Ge", "pid", "rank");
                    let peer = self.binop(&format!("{prefix}_peer"), "Add", "pid", &skip);
                    let difference =
                        self.binop(&format!("{prefix}_difference"), "Sub", "rank", &peer);
                    let wrapped =
                        self.binop(&format!("{prefix}_wrapped"), "Add", &difference, "ranks");
                    self.binop(&format!("{prefix}_distance"), "Rem", &wrapped, "ranks")
                } else {
                    let upper = self.ranks_bound(channel.receive_bound);
                    open_loops += 1;
                    self.open_for(
                        &format!("{prefix}_distance"),
                        1,
                        &upper,
                        1,
                        channel.receive_bound == LoopBound::Constant,
                    )
                };
                let distance = Operand::Value(distance);
                // The sender's program that targets this rank: rank - (rank > sender).
                let sender = self.sender_rank(&format!("{prefix}_pair"), &distance);
                let above = self.binop(&format!("{prefix}_above"), "Gt", "rank", &sender);
                let program = self.binop(&format!("{prefix}_program"), "Sub", "rank", &above);
                (distance, Operand::Value(program))
            }
            Route::PeerLoop { senders, .. } => {
                let upper = self.ranks_bound(channel.receive_bound);
                open_loops += 1;
                let distance = self.open_for(
                    &format!("{prefix}_distance"),
                    1,
                    &upper,
                    1,
                    channel.receive_bound == LoopBound::Constant,
                );
                let program = self.sender_program(&prefix, senders, matching, &mut open_loops);
                (Operand::Value(distance), program)
            }
        };
        let key = self.sender_key(&prefix, &distance, &program);
        self.sender_waits(index, channel, &distance, &key);
        for _ in 0..open_loops {
            self.close_for();
        }
    }

    /// Waits for the per-key flags of the sender at `distance` with key `key`.
    fn sender_waits(
        &mut self,
        index: usize,
        channel: &ChannelSpec,
        distance: &Operand,
        key: &Operand,
    ) {
        let layouts = self.layout;
        let layout = &layouts.channels[index];
        let prefix = format!("ch{index}_rx");
        let ranks = self.spec.ranks;
        let rank_independent_trips = channel.iterations.trips_on(0, ranks);
        match channel.iteration_signal.map(|s| s.operation) {
            None | Some(SignalOperation::Add { shared_flag: true }) => {}
            Some(SignalOperation::Add { shared_flag: false }) => {
                let trips = match channel.iterations {
                    Iterations::RankDependent(trip) => {
                        let sender = self.sender_rank(&prefix, distance);
                        self.rank_trips(&format!("{prefix}_trips"), trip, &sender)
                    }
                    _ => self.constant(rank_independent_trips),
                };
                let flag_index = self.affine(
                    &format!("{prefix}_iteration_flag"),
                    None,
                    key,
                    1,
                    layout.iteration_flag_base,
                );
                if channel.counter_waits {
                    // Every intermediate count: the wait for `k + 1` guards iteration k's puts.
                    if channel.iterations.max_trips(ranks) > 1 {
                        self.features.insert(feature::COUNTER_FLAG);
                    }
                    let constant_trip_count =
                        !matches!(channel.iterations, Iterations::RankDependent(_));
                    let count = self.open_for(
                        &format!("{prefix}_count"),
                        0,
                        &trips,
                        1,
                        constant_trip_count,
                    );
                    let value = self.affine(
                        &format!("{prefix}_count_value"),
                        None,
                        &Operand::Value(count),
                        1,
                        1,
                    );
                    let value = self.name(&value);
                    self.wait_flag(&format!("{prefix}_iteration"), &flag_index, &value);
                    self.close_for();
                } else {
                    self.wait_flag(&format!("{prefix}_iteration"), &flag_index, &trips);
                }
            }
            Some(SignalOperation::Set(value)) => {
                let flag_base = self.affine(
                    &format!("{prefix}_iteration_flag"),
                    None,
                    key,
                    layout.max_trips,
                    layout.iteration_flag_base,
                );
                let (trips, constant_trip_count) = match channel.iterations {
                    Iterations::RankDependent(trip) => {
                        let sender = self.sender_rank(&prefix, distance);
                        (
                            self.rank_trips(&format!("{prefix}_trips"), trip, &sender),
                            false,
                        )
                    }
                    _ => (self.constant(rank_independent_trips), true),
                };
                if constant_trip_count && rank_independent_trips == 1 {
                    let value = self.set_value(
                        &format!("{prefix}_iteration_value"),
                        value,
                        &Operand::Constant(0),
                    );
                    self.wait_flag(&format!("{prefix}_iteration"), &flag_base, &value);
                } else {
                    let iteration = self.open_for(
                        &format!("{prefix}_iteration"),
                        0,
                        &trips,
                        1,
                        constant_trip_count,
                    );
                    let iteration = Operand::Value(iteration);
                    let flag_index = self.affine(
                        &format!("{prefix}_iteration_flag_index"),
                        Some(&flag_base),
                        &iteration,
                        1,
                        0,
                    );
                    let value =
                        self.set_value(&format!("{prefix}_iteration_value"), value, &iteration);
                    self.wait_flag(&format!("{prefix}_iteration"), &flag_index, &value);
                    self.close_for();
                }
            }
        }
        match channel.final_signal.map(|s| s.operation) {
            None | Some(SignalOperation::Add { shared_flag: true }) => {}
            Some(operation) => {
                let flag_index = self.affine(
                    &format!("{prefix}_final_flag"),
                    None,
                    key,
                    1,
                    layout.final_flag_base,
                );
                let value = match operation {
                    SignalOperation::Set(value) => self.set_value(
                        &format!("{prefix}_final_value"),
                        value,
                        &Operand::Constant(0),
                    ),
                    SignalOperation::Add { .. } => self.constant(1),
                };
                self.wait_flag(&format!("{prefix}_final"), &flag_index, &value);
            }
        }
    }

    // --- Assembly -----------------------------------------------------------------------------

    fn finish(self) -> GeneratedProgram {
        let spec = self.spec;
        let layout = self.layout;
        let grid = grid_text(spec);
        let modulus = match spec.choice_modulus {
            ChoiceModulus::Constant(modulus) => modulus.to_string(),
            ChoiceModulus::Ranks => "ranks".to_string(),
        };
        let mut body = Vec::new();
        for value in &self.constants {
            body.push(format!(
                "      c_{value} = builtin.constant <builtin.integer <{value}: i64>> : {I64};"
            ));
        }
        let operations = self
            .lines
            .iter()
            .filter(|line| {
                let line = line.trim_start();
                !line.starts_with("//") && !line.starts_with('^') && !line.starts_with('}')
            })
            .count();
        body.extend(self.lines);
        let features: Vec<&'static str> = self.features.into_iter().collect();
        let channels: usize = spec.phases.iter().map(|p| p.channels.len()).sum();
        let description = format!(
            "ranks={} grid={} ({} programs) phases={} channels={} ops={} constants={} features={}",
            spec.ranks,
            grid,
            spec.programs,
            spec.phases.len(),
            channels,
            operations,
            self.constants.len(),
            features.join(",")
        );
        let mut text = String::new();
        text.push_str(
            "// Generated by aboleth_sim::program_generator: a valid program (race- and\n",
        );
        text.push_str("// deadlock-free by construction) for translation validation.\n");
        text.push_str(&format!("// {description}\n"));
        let mut index = 0;
        for (phase_index, phase) in spec.phases.iter().enumerate() {
            for channel in &phase.channels {
                text.push_str(&format!(
                    "// phase {phase_index} channel {index}: {}\n",
                    channel_summary(channel)
                ));
                index += 1;
            }
        }
        text.push_str("builtin.module @generated {\n  ^entry():\n");
        text.push_str(
            "  builtin.func @generated: builtin.function <(ab.ptr, ab.ptr, ab.ptr, ab.ptr, ab.ptr, builtin.integer i32, ab.ptr, ab.ptr, builtin.integer i64) -> ()>\n",
        );
        text.push_str(&format!("    [grid: builtin.string \"{grid}\",\n"));
        text.push_str(&format!(
            "     regions: builtin.string \"send={} recv={} rows={} flags={} choices={}\",\n",
            layout.partition_bytes * spec.programs,
            layout.recv_bytes,
            layout.rows_bytes,
            layout.flag_words * 8,
            CHOICE_WORDS * 8
        ));
        text.push_str(&format!(
            "     bind: builtin.string \"endpoints=endpoints recv=regions:recv rows=regions:rows flags=regions:flags send=local:send send_key=lkey:send my_flags=local:flags choices=local:choices epoch=value:{}\",\n",
            spec.epoch
        ));
        text.push_str(&format!(
            "     init: builtin.string \"send=random choices=random_mod:{modulus} flags=zero\"]\n"
        ));
        text.push_str("  {\n");
        text.push_str(
            "    ^entry(endpoints: ab.ptr, recv: ab.ptr, rows: ab.ptr, flags: ab.ptr, send: ab.ptr, send_key: builtin.integer i32, my_flags: ab.ptr, choices: ab.ptr, epoch: builtin.integer i64):\n",
        );
        for line in body {
            text.push_str(&line);
            text.push('\n');
        }
        text.push_str("  }\n}\n");
        GeneratedProgram {
            text,
            description,
            ranks: spec.ranks,
            programs: spec.programs,
            operations,
            features,
        }
    }
}

/// The `grid` attribute text.
fn grid_text(spec: &ProgramSpec) -> String {
    match spec.grid_expression {
        GridExpression::Literal => spec.programs.to_string(),
        GridExpression::Ranks => "ranks".to_string(),
        GridExpression::RanksMinusOne => "ranks-1".to_string(),
        GridExpression::RanksMinusTwo => "ranks-2".to_string(),
        GridExpression::TwiceRanksMinus(n) => format!("2*ranks-{n}"),
    }
}

/// A short description of a channel for the header comments.
fn channel_summary(channel: &ChannelSpec) -> String {
    let route = match channel.route {
        Route::Fixed { offset, senders } => format!("peer rank+{offset} from {senders:?}"),
        Route::ProgramOffset { base } => format!("peer rank+{base}+pid"),
        Route::AllToAll => "all-to-all peer pid+(pid>=rank)".to_string(),
        Route::PeerLoop { senders, bound } => {
            format!("loop over peers ({bound:?} bound) from {senders:?}")
        }
    };
    let puts: Vec<String> = channel
        .puts
        .iter()
        .map(|put| match put.predicate {
            Some(predicate) => format!("{} B if {predicate:?}", put.bytes),
            None => format!("{} B", put.bytes),
        })
        .collect();
    let signal = |signal: &Option<SignalSpec>| match signal {
        Some(signal) => format!("{:?} after {:?}", signal.operation, signal.after),
        None => "none".to_string(),
    };
    format!(
        "{route}; {:?}; puts [{}]; iteration signal {}; final signal {}; {:?}; {:?}; {:?}; fence {:?}",
        channel.iterations,
        puts.join(", "),
        signal(&channel.iteration_signal),
        signal(&channel.final_signal),
        channel.reuse,
        channel.iteration_completion,
        channel.body_completion,
        channel.fence
    )
}

/// `spec` reshaped so that every put is published by a `Set` of its own that directly follows
/// it: one unpredicated put per iteration, signalled `after` it, with no fence between them, no
/// final signal and no reused source (which would add puts without a signal of their own). Such
/// programs are what flag-in-data packets need (`--packet-signals`), so the random validation
/// runs that path too; they stay valid programs for every transport.
pub fn with_a_signal_per_put(mut spec: ProgramSpec) -> ProgramSpec {
    for phase in &mut spec.phases {
        for channel in &mut phase.channels {
            channel.puts.truncate(1);
            for put in &mut channel.puts {
                put.predicate = None;
            }
            channel.fence = FencePlacement::None;
            channel.final_signal = None;
            channel.reuse = Reuse::None;
            let value = match channel.iteration_signal.map(|signal| signal.operation) {
                Some(SignalOperation::Set(value)) => value,
                _ => SetValue::Epoch,
            };
            channel.iteration_signal = Some(SignalSpec {
                operation: SignalOperation::Set(value),
                after: SignalAfter::LastPut,
            });
            if let IterationCompletion::WaitPut(index) = &mut channel.iteration_completion {
                *index = 0;
            }
            if channel.body_completion == BodyCompletion::WaitSignal {
                // The final signal is gone.
                channel.body_completion = BodyCompletion::Drain;
            }
        }
    }
    spec
}
