//! Every pass, written once: its flag name, its level, a one-line description and its entry
//! point, in pipeline order ([`PASSES`] for planning, then the target's one entry of
//! [`LOWERINGS`]).
//!
//! [`crate::pipeline::run_pipeline`] runs these lists in this order; the CLI's
//! `--disable-pass NAME` and `aboleth passes` read them too; each pass's file is
//! `src/<flag with underscores>.rs` and its goldens `tests/filetests/passes/<flag>*.abo`
//! (the tests check both); `docs/COMPILER_SEMANTICS.md` describes each entry at length. This
//! module runs nothing itself.

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
        run: crate::eliminate_dead_communication::run,
    },
    PassInfo {
        name: "size-buffers",
        level: Level::Storage,
        description: "record on each endpoint how many queue slots are in flight between completions",
        run: crate::size_buffers::run,
    },
    PassInfo {
        name: "inline-small-payloads",
        level: Level::Transfer,
        description: "carry payloads of constant size up to the transport's limit inside the command",
        run: crate::inline_small_payloads::run,
    },
    PassInfo {
        name: "choose-signal-publication",
        level: Level::Transfer,
        description: "publish each signal the cheapest legal way (in-order queue, release store, after completion)",
        run: crate::choose_signal_publication::run,
    },
    PassInfo {
        name: "plan-completions",
        level: Level::Transfer,
        description: "request completions only where a wait, a drain, a reuse or the kernel's end needs one",
        run: crate::plan_completions::run,
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
        run: crate::assign_queue_owners::run,
    },
    PassInfo {
        name: "order-publications",
        level: Level::Submission,
        description: "make signals whose data went on another queue wait for that data's completion",
        run: crate::order_publications::run,
    },
    PassInfo {
        name: "batch-commands",
        level: Level::Submission,
        description: "group consecutive commands on one queue (constant loops included) under one reservation",
        run: crate::batch_commands::run,
    },
    PassInfo {
        name: "coalesce-doorbells",
        level: Level::Submission,
        description: "ring one doorbell and write the doorbell record once per batch",
        run: crate::coalesce_doorbells::run,
    },
    PassInfo {
        name: "choose-doorbell-scope",
        level: Level::Submission,
        description: "let a warp or the CTA write a batched loop's commands, then one thread rings after a barrier",
        run: crate::choose_doorbell_scope::run,
    },
];

/// One lowering pass: the transport it specializes to. Not switchable: there is always exactly
/// one per target that has a lowering.
pub struct LoweringInfo {
    /// The target it lowers to.
    pub target: Transport,
    /// The flag name (the name `--print-after-all` shows, `// run: pass NAME` in goldens).
    pub name: &'static str,
    /// One line: what it emits.
    pub description: &'static str,
    /// Entry point.
    pub run: PassFunction,
}

/// The lowering pass of each target that has one; it runs after every planning pass.
pub const LOWERINGS: &[LoweringInfo] = &[
    LoweringInfo {
        target: Transport::Mlx5,
        name: "lower-mlx5",
        description: "specialize to GPU-initiated RDMA on ConnectX: WQEs, doorbell record, UAR doorbell",
        run: crate::lower_mlx5::run,
    },
    LoweringInfo {
        target: Transport::Proxy,
        name: "lower-proxy",
        description: "specialize to the host proxy: ring entries that a host thread executes",
        run: crate::lower_proxy::run,
    },
    LoweringInfo {
        target: Transport::Efa,
        name: "lower-efa",
        description: "specialize to AWS EFA (SRD, unordered): RDMA write WQEs, signals after their data's completions, MMIO doorbell",
        run: crate::lower_efa::run,
    },
    LoweringInfo {
        target: Transport::Ionic,
        name: "lower-ionic",
        description: "specialize to AMD Pensando Ionic (RoCEv2 RC): RDMA write and atomic WQEs, 64-bit MMIO doorbell",
        run: crate::lower_ionic::run,
    },
    LoweringInfo {
        target: Transport::P2p,
        name: "lower-p2p",
        description: "specialize to NVLink peer memory: stores to peer pointers and flag stores",
        run: crate::lower_p2p::run,
    },
];

/// Looks a planning pass up by flag name.
pub fn find(name: &str) -> Option<&'static PassInfo> {
    PASSES.iter().find(|pass| pass.name == name)
}

/// The lowering pass of `target`, if it has one.
pub fn lowering_for(target: Transport) -> Option<&'static LoweringInfo> {
    LOWERINGS.iter().find(|lowering| lowering.target == target)
}

/// The entry point of any pass, planning or lowering, by flag name.
pub fn find_any(name: &str) -> Option<PassFunction> {
    find(name).map(|pass| pass.run).or_else(|| {
        LOWERINGS
            .iter()
            .find(|lowering| lowering.name == name)
            .map(|lowering| lowering.run)
    })
}
