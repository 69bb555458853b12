//! Random valid Aboleth programs (`.abo` text) for the simulator's translation validation: a
//! dev-only crate (`publish = false`), so that proptest is never linked into the `aboleth`
//! binary.
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
//!
//! The files, one job each: `spec.rs` the program AST ([`ProgramSpec`] and its parts),
//! `strategies.rs` the proptest strategies that draw it, `normalize.rs` the rules a drawn spec
//! is reshaped to keep (and the per-queue budget), `layout.rs` where each channel's data and
//! flags live, `printer.rs` the `.abo` text, and `reference_interpreter.rs` the validity
//! checker: a small interpreter of the semantic IR that runs a printed program and checks the
//! rules above.

mod layout;
mod normalize;
mod printer;
pub mod reference_interpreter;
mod spec;
mod strategies;

pub use normalize::{max_queue_basic_blocks, with_a_signal_per_put};
pub use printer::print_program;
pub use spec::*;
pub use strategies::{generate_from_seed, program_spec_strategy, program_strategy, spec_from_seed};

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
