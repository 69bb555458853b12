//! Deliberately broken lowerings: each [`Mutation`] edits a lowered module the way one class of
//! compiler bug would, so that tests can show the simulator catches that class.
//!
//! They exist only to test the checker (`aboleth sim --mutate NAME` and the mutation tests);
//! nothing in the compiler calls them. Each one says what bug it stands for and how the
//! simulator is expected to notice it. A mutation that finds nothing to break in a module
//! reports that (`Ok(false)`), so a test cannot pass by mutating nothing.

use aboleth_ir::{
    Diagnostic,
    ab::attributes::BinaryOperator,
    attrs,
    builder::Builder,
    pliron::{
        context::{Context, Ptr},
        linked_list::LinkedList,
        operation::Operation,
    },
    text::op_name,
    walk::all_ops,
};

/// A class of lowering bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// The signal is executed before the data it publishes: on queues its command takes the
    /// put's slot (the put moves after it); on p2p the copy is issued after the flag store.
    /// Caught as data not visible when the wait passes.
    SignalBeforeData,
    /// Every fence is dropped and every release store becomes relaxed (doorbell records, proxy
    /// heads, p2p flags). Caught as a flag or command seen before its data (stale WQE or ring
    /// entry bytes, data not visible, or a source read before its stores landed).
    MissingFence,
    /// No command requests a completion. Caught as a deadlock naming the waiting program.
    DroppedCompletion,
    /// The mlx5 UAR doorbell is rung before the doorbell record is written (mlx5 only). Caught
    /// when the NIC services the doorbell in between: it sees no new WQEs and the waiters hang.
    DoorbellBeforeRecord,
    /// Waits for a put's completion before its source is reused are dropped. Caught as a
    /// transfer delivering bytes written after it was posted.
    ReusedSourceWithoutWait,
    /// A shared queue is posted as if one program owned it (what a wrong `assign-queue-owners`
    /// would cause): plain reservations, no in-order publication, no lock, no `atomicMax`.
    /// Caught when two programs take the same slots: overwritten WQEs or ring entries show up
    /// as NIC or proxy errors, lost data or a deadlock.
    FalseSingleOwner,
    /// `elide-epochs` stores a counter one short after its loop. Caught as a divergence of
    /// final memory, or as a deadlock when a later launch waits for epochs never sent.
    EpochOffByOne,
    /// The barrier between a `doorbell_scope` loop and its doorbell is dropped: the leader
    /// rings while the other threads' commands may still be unwritten or invisible. Caught as
    /// the NIC or proxy reading a stale or half-written command, lost data, or a deadlock.
    PostingWithoutBarrier,
    /// A one-owner queue's publication counter is not kept in step with its reservations (the
    /// bug the GPU run found: a later library-style kernel on the same queue waited forever
    /// for its turn). Caught by the end-of-launch check of every queue's counters.
    StalePublicationCounter,
    /// Waits of a kernel that sends write-with-immediate or packet signals do not drain the
    /// receive CQ or unpack packet slots: nobody applies the signals. Caught as a deadlock of
    /// the waits (their flags never move).
    WaitWithoutDrainingReceives,
    /// mlx5 and Ionic WQEs lose `periodic_completion`: a ring filled without a planned completion has no
    /// CQE to reclaim it from. Caught as a deadlock on ring space.
    NoPeriodicCompletions,
    /// Packet waits unpack a slot once its header has landed, without checking that every
    /// payload packet carries the flag (the classic LL bug: trusting one flag for data stored
    /// by other, unordered stores). Caught as data not visible when the wait passes.
    UnpackWithoutCheckingPackets,
    /// The barrier before a p2p copy (or packet put) whose source the program may have just
    /// written is dropped: the copy's threads read the source while other threads' stores to
    /// it are unordered (the race the GPU passed by luck). Caught as a stale source read.
    PutWithoutSourceBarrier,
    /// Every flag wait polls `>=` whatever its comparison (a lowering or encoder that forgets
    /// `ab.wait_signal`'s `comparison`). Caught as data not visible when a `!=`, `>`, `<=` or
    /// `<` wait passes on the value the previous launch left.
    WaitComparisonDropped,
    /// A reservation whose slot count is computed at run time (a batch with a loop whose trip
    /// count is loaded) takes one slot fewer than its commands use, as a lowering that counted
    /// a run-time loop one iteration short would. The next reservation on the queue then
    /// starts inside this batch. Caught as a queue whose counters disagree at the end of the
    /// launch, an overwritten or skipped command (lost data, a NIC or proxy error), or a
    /// deadlock.
    RunTimeBatchUnderReserved,
    /// EFA signals are posted without first waiting for the completions of the commands
    /// before them on their queue (the waits `lower-efa` marks `publishes` are dropped), as a
    /// lowering that trusted SRD to deliver one queue pair's writes in order would: the signal
    /// rides in order behind its data. Caught as data not visible when the wait passes (the
    /// device model executes the writes in flight in any order).
    SignalInOrderOnEfa,
}

impl Mutation {
    /// Every mutation, in the order tests and the CLI list them.
    pub const ALL: [Mutation; 16] = [
        Mutation::SignalBeforeData,
        Mutation::MissingFence,
        Mutation::DroppedCompletion,
        Mutation::DoorbellBeforeRecord,
        Mutation::ReusedSourceWithoutWait,
        Mutation::FalseSingleOwner,
        Mutation::EpochOffByOne,
        Mutation::PostingWithoutBarrier,
        Mutation::StalePublicationCounter,
        Mutation::WaitWithoutDrainingReceives,
        Mutation::NoPeriodicCompletions,
        Mutation::UnpackWithoutCheckingPackets,
        Mutation::PutWithoutSourceBarrier,
        Mutation::WaitComparisonDropped,
        Mutation::RunTimeBatchUnderReserved,
        Mutation::SignalInOrderOnEfa,
    ];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Mutation::SignalBeforeData => "signal-before-data",
            Mutation::MissingFence => "missing-fence",
            Mutation::DroppedCompletion => "dropped-completion",
            Mutation::DoorbellBeforeRecord => "doorbell-before-record",
            Mutation::ReusedSourceWithoutWait => "reused-source-without-wait",
            Mutation::FalseSingleOwner => "false-single-owner",
            Mutation::EpochOffByOne => "epoch-off-by-one",
            Mutation::PostingWithoutBarrier => "posting-without-barrier",
            Mutation::StalePublicationCounter => "stale-publication-counter",
            Mutation::WaitWithoutDrainingReceives => "wait-without-draining-receives",
            Mutation::NoPeriodicCompletions => "no-periodic-completions",
            Mutation::UnpackWithoutCheckingPackets => "unpack-without-checking-packets",
            Mutation::PutWithoutSourceBarrier => "put-without-source-barrier",
            Mutation::WaitComparisonDropped => "wait-comparison-dropped",
            Mutation::RunTimeBatchUnderReserved => "run-time-batch-under-reserved",
            Mutation::SignalInOrderOnEfa => "signal-in-order-on-efa",
        }
    }

    /// Parses a command-line name.
    pub fn from_name(name: &str) -> Option<Mutation> {
        Mutation::ALL
            .into_iter()
            .find(|mutation| mutation.name() == name)
    }

    /// Applies the mutation to a lowered module; `Ok(false)` when there was nothing to break.
    pub fn apply(self, ctx: &mut Context, module: Ptr<Operation>) -> Result<bool, Diagnostic> {
        let mut changed = false;
        match self {
            Mutation::SignalBeforeData => {
                for op in all_ops(ctx, module) {
                    let name = op_name(ctx, op);
                    if !matches!(
                        name.as_str(),
                        "mlx5.write" | "proxy.put" | "ionic.write" | "p2p.copy"
                    ) {
                        continue;
                    }
                    let Some(signal) = next_in_block(ctx, op, |name| {
                        matches!(
                            name,
                            "mlx5.atomic" | "proxy.signal" | "ionic.signal" | "p2p.signal"
                        )
                    }) else {
                        // A p2p copy in a loop (a put per row) published by one signal after
                        // the loop: the loop runs after the flag store.
                        if name == "p2p.copy"
                            && let Some((signal, outer)) = p2p_signal_after_enclosing(ctx, op)
                        {
                            outer.unlink(ctx);
                            outer.insert_after(ctx, signal);
                            changed = true;
                        }
                        continue;
                    };
                    if name == "p2p.copy" {
                        op.unlink(ctx);
                        op.insert_after(ctx, signal);
                    } else {
                        swap_slots(ctx, op, signal);
                    }
                    changed = true;
                }
            }
            Mutation::MissingFence => {
                for op in all_ops(ctx, module) {
                    match op_name(ctx, op).as_str() {
                        "gpu.fence" => {
                            Operation::erase(op, ctx);
                            changed = true;
                        }
                        "p2p.signal"
                        | "mlx5.doorbell_record"
                        | "proxy.doorbell"
                        | "efa.doorbell"
                        | "ionic.doorbell" => {
                            attrs::set_string(ctx, op, "order", "relaxed");
                            changed = true;
                        }
                        _ => {}
                    }
                }
            }
            Mutation::DroppedCompletion => {
                for op in all_ops(ctx, module) {
                    let completion_operand = match op_name(ctx, op).as_str() {
                        "mlx5.write" | "proxy.put" | "efa.write" | "ionic.write" => 7,
                        "mlx5.atomic" | "proxy.signal" | "efa.signal" | "ionic.signal" => 4,
                        _ => continue,
                    };
                    let mut builder = Builder::before(ctx, op);
                    let zero = builder.constant(ctx, 0);
                    Operation::replace_operand(op, ctx, completion_operand, zero);
                    attrs::remove(ctx, op, "completion_once");
                    changed = true;
                }
            }
            Mutation::DoorbellBeforeRecord => {
                for op in all_ops(ctx, module) {
                    if op_name(ctx, op) != "mlx5.doorbell" {
                        continue;
                    }
                    let Some(record) =
                        previous_in_block(ctx, op, |name| name == "mlx5.doorbell_record")
                    else {
                        continue;
                    };
                    op.unlink(ctx);
                    op.insert_before(ctx, record);
                    changed = true;
                }
            }
            Mutation::ReusedSourceWithoutWait => {
                for op in all_ops(ctx, module) {
                    let name = op_name(ctx, op);
                    let is_token_wait = matches!(
                        name.as_str(),
                        "mlx5.wait_completion"
                            | "proxy.wait_completion"
                            | "efa.wait_completion"
                            | "ionic.wait_completion"
                    ) && op.deref(ctx).get_num_operands() > 1;
                    if is_token_wait {
                        Operation::erase(op, ctx);
                        changed = true;
                    }
                }
            }
            Mutation::FalseSingleOwner => {
                for op in all_ops(ctx, module) {
                    match op_name(ctx, op).as_str() {
                        "mlx5.reserve" | "proxy.reserve" | "efa.reserve" | "ionic.reserve"
                            if attrs::get_bool(ctx, op, "atomic") =>
                        {
                            attrs::set_bool(ctx, op, "atomic", false);
                            changed = true;
                        }
                        "mlx5.publish" | "proxy.publish" | "efa.publish" | "ionic.publish"
                        | "mlx5.lock" | "mlx5.unlock" | "efa.lock" | "ionic.lock"
                        | "efa.unlock" | "ionic.unlock" => {
                            Operation::erase(op, ctx);
                            changed = true;
                        }
                        "mlx5.doorbell_record"
                        | "proxy.doorbell"
                        | "efa.doorbell"
                        | "ionic.doorbell" => {
                            attrs::set_bool(ctx, op, "atomic_max", false);
                        }
                        _ => {}
                    }
                }
            }
            Mutation::EpochOffByOne => {
                for op in all_ops(ctx, module) {
                    if op_name(ctx, op) != "ab.for"
                        || attrs::get_int(ctx, op, "epochs_elided").is_none()
                    {
                        continue;
                    }
                    let Some(store) = next_in_block(ctx, op, |name| name == "ab.store") else {
                        continue;
                    };
                    let stored = store.deref(ctx).get_operand(1);
                    let mut builder = Builder::before(ctx, store);
                    let one = builder.constant(ctx, 1);
                    let short = builder.binary(ctx, BinaryOperator::Sub, stored, one);
                    Operation::replace_operand(store, ctx, 1, short);
                    changed = true;
                }
            }
            Mutation::StalePublicationCounter => {
                for op in all_ops(ctx, module) {
                    if matches!(
                        op_name(ctx, op).as_str(),
                        "mlx5.publish" | "proxy.publish" | "efa.publish" | "ionic.publish"
                    ) && attrs::get_bool(ctx, op, "owner_only")
                    {
                        Operation::erase(op, ctx);
                        changed = true;
                    }
                }
            }
            Mutation::WaitWithoutDrainingReceives => {
                for op in all_ops(ctx, module) {
                    if op_name(ctx, op) == "gpu.wait_flag" && op.deref(ctx).get_num_operands() > 2 {
                        let (flag, value) = {
                            let operation = op.deref(ctx);
                            (operation.get_operand(0), operation.get_operand(1))
                        };
                        let mut builder = Builder::before(ctx, op);
                        let poll = builder.create::<aboleth_ir::transport::GpuWaitFlagOp>(
                            ctx,
                            vec![],
                            vec![flag, value],
                        );
                        if let Some(order) = attrs::get_string(ctx, op, "order") {
                            attrs::set_string(ctx, poll, "order", &order);
                        }
                        Operation::erase(op, ctx);
                        changed = true;
                    }
                }
            }
            Mutation::NoPeriodicCompletions => {
                for op in all_ops(ctx, module) {
                    if attrs::get_bool(ctx, op, "periodic_completion") {
                        attrs::set_bool(ctx, op, "periodic_completion", false);
                        changed = true;
                    }
                }
            }
            Mutation::UnpackWithoutCheckingPackets => {
                for op in all_ops(ctx, module) {
                    if op_name(ctx, op) == "gpu.wait_flag" && attrs::get_bool(ctx, op, "packets") {
                        attrs::set_bool(ctx, op, "check_payload_flags", false);
                        changed = true;
                    }
                }
            }
            Mutation::PutWithoutSourceBarrier => {
                for op in all_ops(ctx, module) {
                    if op_name(ctx, op) == "gpu.barrier"
                        && attrs::get_bool(
                            ctx,
                            op,
                            aboleth_passes::lower_p2p::SOURCE_BARRIER_ATTRIBUTE,
                        )
                    {
                        Operation::erase(op, ctx);
                        changed = true;
                    }
                }
            }
            Mutation::WaitComparisonDropped => {
                for op in all_ops(ctx, module) {
                    if op_name(ctx, op) == "gpu.wait_flag"
                        && attrs::get(ctx, op, "comparison").is_some()
                    {
                        attrs::remove(ctx, op, "comparison");
                        changed = true;
                    }
                }
            }
            Mutation::RunTimeBatchUnderReserved => {
                for op in all_ops(ctx, module) {
                    if !matches!(
                        op_name(ctx, op).as_str(),
                        "mlx5.reserve" | "proxy.reserve" | "efa.reserve" | "ionic.reserve"
                    ) {
                        continue;
                    }
                    let count = op.deref(ctx).get_operand(1);
                    if aboleth_ir::scalar::constant_value(ctx, count).is_some() {
                        continue;
                    }
                    let mut builder = Builder::before(ctx, op);
                    let one = builder.constant(ctx, 1);
                    let short = builder.binary(ctx, BinaryOperator::Sub, count, one);
                    Operation::replace_operand(op, ctx, 1, short);
                    changed = true;
                }
            }
            Mutation::SignalInOrderOnEfa => {
                for op in all_ops(ctx, module) {
                    if op_name(ctx, op) == "efa.wait_completion"
                        && attrs::get_bool(ctx, op, "publishes")
                    {
                        Operation::erase(op, ctx);
                        changed = true;
                    }
                }
            }
            Mutation::PostingWithoutBarrier => {
                for op in all_ops(ctx, module) {
                    if op_name(ctx, op) == "gpu.barrier"
                        && attrs::get_string(ctx, op, "scope").is_some()
                    {
                        Operation::erase(op, ctx);
                        changed = true;
                    }
                }
            }
        }
        Ok(changed)
    }
}

fn next_in_block(
    ctx: &Context,
    op: Ptr<Operation>,
    wanted: impl Fn(&str) -> bool,
) -> Option<Ptr<Operation>> {
    let mut cursor = op.deref(ctx).get_next();
    while let Some(next) = cursor {
        if wanted(&op_name(ctx, next)) {
            return Some(next);
        }
        cursor = next.deref(ctx).get_next();
    }
    None
}

/// For a `p2p.copy` nested in ops (loops, branches) with no signal after it in its own block:
/// the first `p2p.signal` after one of its enclosing ops, in that op's block, and that enclosing
/// op, when the enclosing op has no results (so it can move after the signal: its operands are
/// defined before it, and nothing in between can use what it computes).
fn p2p_signal_after_enclosing(
    ctx: &Context,
    copy: Ptr<Operation>,
) -> Option<(Ptr<Operation>, Ptr<Operation>)> {
    let mut outer = copy.deref(ctx).get_parent_op(ctx)?;
    loop {
        if let Some(signal) = next_in_block(ctx, outer, |name| name == "p2p.signal") {
            return (outer.deref(ctx).get_num_results() == 0).then_some((signal, outer));
        }
        outer = outer.deref(ctx).get_parent_op(ctx)?;
    }
}

fn previous_in_block(
    ctx: &Context,
    op: Ptr<Operation>,
    wanted: impl Fn(&str) -> bool,
) -> Option<Ptr<Operation>> {
    let mut cursor = op.deref(ctx).get_prev();
    while let Some(previous) = cursor {
        if wanted(&op_name(ctx, previous)) {
            return Some(previous);
        }
        cursor = previous.deref(ctx).get_prev();
    }
    None
}

/// Gives the signal the put's first slot and moves the put right after the signal's slots, so
/// the queue executes the signal first while the slot range stays the same.
fn swap_slots(ctx: &mut Context, put: Ptr<Operation>, signal: Ptr<Operation>) {
    const SLOT: usize = 1;
    let signal_slots = match op_name(ctx, signal).as_str() {
        "mlx5.atomic" => {
            use aboleth_ir::ab::attributes::SignalOperation;
            match attrs::get_typed::<SignalOperation>(ctx, signal, "op") {
                Some(SignalOperation::Add) => 1,
                _ => 2,
            }
        }
        _ => 1,
    };
    let put_slot = put.deref(ctx).get_operand(SLOT);
    let mut builder = Builder::before(ctx, put);
    let shift = builder.constant(ctx, signal_slots);
    let moved = builder.binary(ctx, BinaryOperator::Add, put_slot, shift);
    Operation::replace_operand(put, ctx, SLOT, moved);
    Operation::replace_operand(signal, ctx, SLOT, put_slot);
}
