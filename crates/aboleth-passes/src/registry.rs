//! Every pass: its flag name, its level, a one-line description and its entry point.
//!
//! The CLI's `--disable-pass NAME` and `aboleth passes` read this table; `docs/COMPILER_SEMANTICS.md`
//! describes each entry at length. The order here is the pipeline order (see `pipeline.rs`).

use aboleth_abi::Transport;
use aboleth_ir::{
    Diagnostic,
    pliron::context::{Context, Ptr},
    pliron::operation::Operation,
};

/// What a pass may look at besides the IR.
#[derive(Clone, Copy, Debug)]
pub struct PassContext {
    /// The transport being compiled for.
    pub target: Transport,
    /// The program declares that its flags are observed only through `ab.wait_signal`, so a
    /// signal's flag may be written when a wait of the receiving rank applies it rather than
    /// when it lands: `choose-signal-publication` may then pick write-with-immediate.
    pub immediate_signals: bool,
    /// The program declares that a signal publishes only the put it follows and that each
    /// put's data is read after a wait on that put's own flag, in the same kernel or by the
    /// host after it: `choose-signal-publication` may then pick flag-in-data (packets) on p2p.
    pub packet_signals: bool,
}

/// Pipeline level of a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// Removing dead communication and sizing queues.
    Storage,
    /// Deciding per transfer: inline, publication, completion.
    Transfer,
    /// Deciding per queue: ownership, ordering, batching, doorbells.
    Submission,
    /// Emitting the transport dialect.
    Transport,
}

impl Level {
    /// The level's name as printed.
    pub fn name(self) -> &'static str {
        match self {
            Level::Storage => "storage",
            Level::Transfer => "transfer",
            Level::Submission => "submission",
            Level::Transport => "transport",
        }
    }
}

/// A pass's entry point: returns whether it changed the module.
pub type PassFunction = fn(&mut Context, Ptr<Operation>, &PassContext) -> Result<bool, Diagnostic>;

/// One registered pass.
pub struct PassInfo {
    /// The flag name (`--disable-pass NAME`), also the golden file's name.
    pub name: &'static str,
    /// Pipeline level.
    pub level: Level,
    /// One line: what it does.
    pub description: &'static str,
    /// Entry point.
    pub run: PassFunction,
}

/// Every switchable planning pass, in pipeline order. Lowering passes are listed in
/// [`LOWERINGS`]: they are not switchable (there is always exactly one per target).
pub const PASSES: &[PassInfo] = &[
    PassInfo {
        name: "eliminate-dead-communication",
        level: Level::Storage,
        description: "remove puts that can never be observed (false predicate, 0 bytes, overwritten)",
        run: crate::dead_communication::run,
    },
    PassInfo {
        name: "size-buffers",
        level: Level::Storage,
        description: "record on each endpoint how many queue slots are in flight between completions",
        run: crate::buffer_sizing::run,
    },
    PassInfo {
        name: "inline-small-payloads",
        level: Level::Transfer,
        description: "carry payloads of constant size up to the transport's limit inside the command",
        run: crate::inline_payloads::run,
    },
    PassInfo {
        name: "choose-signal-publication",
        level: Level::Transfer,
        description: "publish each signal the cheapest legal way (in-order queue, release store, after completion)",
        run: crate::signal_publication::run,
    },
    PassInfo {
        name: "plan-completions",
        level: Level::Transfer,
        description: "request completions only where a wait, a drain, a reuse or the kernel's end needs one",
        run: crate::completion_planning::run,
    },
    PassInfo {
        name: "elide-epochs",
        level: Level::Submission,
        description: "derive per-iteration epoch counters from the loop counter instead of a load and a store each iteration",
        run: crate::elide_epochs::run,
    },
    PassInfo {
        name: "assign-queue-owners",
        level: Level::Submission,
        description: "find endpoints that one program owns, so posting needs no atomics or locks",
        run: crate::queue_owners::run,
    },
    PassInfo {
        name: "order-publications",
        level: Level::Submission,
        description: "make signals whose data went on another queue wait for that data's completion",
        run: crate::publication_ordering::run,
    },
    PassInfo {
        name: "batch-commands",
        level: Level::Submission,
        description: "group consecutive commands on one queue (constant loops included) under one reservation",
        run: crate::batching::run,
    },
    PassInfo {
        name: "coalesce-doorbells",
        level: Level::Submission,
        description: "ring one doorbell and write the doorbell record once per batch",
        run: crate::doorbell_coalescing::run,
    },
    PassInfo {
        name: "choose-doorbell-scope",
        level: Level::Submission,
        description: "let a warp or the CTA write a batched loop's commands, then one thread rings after a barrier",
        run: crate::doorbell_scope::run,
    },
];

/// The lowering pass of each target.
pub const LOWERINGS: &[(&str, PassFunction)] = &[
    ("lower-mlx5", crate::lower_mlx5::run),
    ("lower-proxy", crate::lower_proxy::run),
    ("lower-p2p", crate::lower_p2p::run),
];

/// Looks a planning pass up by flag name.
pub fn find(name: &str) -> Option<&'static PassInfo> {
    PASSES.iter().find(|pass| pass.name == name)
}
