//! The program AST a strategy draws and the printer prints: a [`ProgramSpec`] of phases and
//! channels, each channel's route, iterations, puts, signals, completions and reuse, and the
//! [`GeneratedProgram`] (its text and the features it exercises). Plain data: drawing is in
//! `strategies.rs`, the rules in `normalize.rs`, the text in `printer.rs`.

use std::fmt;

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
