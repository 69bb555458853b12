//! The lowering driver shared by the queue transports (mlx5, proxy and EFA): reservation,
//! commands, submission and completion waits, driven by the planning attributes.
//!
//! For each batch (or each single transfer when there is none) it emits: one reservation of
//! the batch's slots (atomic unless the endpoint has one owner; a loop with a run-time trip
//! count adds `trip * slots_per_iteration`, computed before the batch), the commands at their
//! slots (loops included: a slot is `base + offset + iteration * slots_per_iteration + k`, and
//! members after a run-time loop start past its slots), and the submission after the last
//! command (or after each command without `coalesce-doorbells`).
//! Where an attribute is absent it does what a library does on every call: atomic
//! reservation, a GPU fence, in-order publication, the post lock, `atomicMax` on the producer
//! index, a completion per command, a fenced signal. `ab.wait` becomes a completion wait on its
//! token's slot, `ab.drain` a wait for everything the program posted, `ab.fence` nothing (the
//! queue is in order; on a transport that is not, a wait for everything), `ab.wait_signal` a
//! flag poll ([`crate::support::wait_lowering`]).
//! What differs per transport (the command ops, what submission is, a signal riding in its
//! put's command, what a wait does on the receive side) is a [`QueueTransport`]
//! implementation, in `lower_mlx5.rs`, `lower_proxy.rs` and `lower_efa.rs`; this module holds
//! no transport detail. A transport whose queue does not execute in order
//! ([`QueueTransport::IN_ORDER`] false: EFA's SRD) gets, before each signal's reservation, a
//! wait for every earlier command of the program on that queue (marked `publishes`), and no
//! library put-signal fusion; `batch-commands` never puts such a signal after another member.

use aboleth_abi::Transport;
use std::collections::HashMap;

use aboleth_ir::{
    Diagnostic,
    ab::attributes::{BinaryOperator, Publication},
    attrs,
    builder::{Builder, i64_type},
    pliron::{
        basic_block::BasicBlock,
        context::{Context, Ptr},
        op::Op,
        operation::Operation,
        value::Value,
    },
    scalar::{constant_trip_count, constant_value},
    text::op_name,
    transport::GpuBarrierOp,
    walk::{block_ops, kernels, region_block},
};

use crate::support::{
    queue_slots::slots_of,
    riding_signals::riding_signal_of_put,
    transfers::{
        batchable_loop_endpoint, endpoint_of, has_single_owner, is_pure_scalar, is_transfer,
        put_predicate, signal_after, signal_operation,
    },
    transport_ops::{emit_fence, put_operands, signal_operands},
    wait_lowering::{ReceiveSide, lower_wait_signal},
};

/// One command to emit: its op, the endpoint, the slot, and the completion decision.
pub struct Command {
    /// The semantic `ab.put` or `ab.signal`.
    pub op: Ptr<Operation>,
    /// The endpoint value.
    pub endpoint: Value,
    /// The first slot of the command.
    pub slot: Value,
    /// A put's predicate (`i64`): its command is a NOP of the same size when it is 0. `None`
    /// for a signal.
    pub predicate: Option<Value>,
    /// 1 when the command must request a completion, 0 when not (may be computed).
    pub completion: Value,
    /// True when `completion` is nonzero only on a loop's last iteration.
    pub completion_once: bool,
    /// True for library-style signals: the transport fences before executing them.
    pub fenced: bool,
    /// A put carrying the signal that rides on it: the operands
    /// [`QueueTransport::emit_riding_signal`] returned (on mlx5 the immediate, an `i64`, and
    /// the signal's flag, which the simulator checks the signal against).
    pub riding_signal: Option<(Value, Value)>,
}

/// One submission: slots `[base, end)` of `endpoint` (`count` of them) handed to the NIC or
/// the proxy.
pub struct Submission<'a> {
    /// The endpoint value.
    pub endpoint: Value,
    /// The first slot submitted.
    pub base: Value,
    /// How many slots.
    pub count: Value,
    /// The slot after the last one (`base + count`).
    pub end: Value,
    /// The endpoint has no single owner: the shared posting protocol.
    pub shared: bool,
    /// The doorbell scope: the threads (`thread`, `warp`, `cta`) whose command writes the
    /// doorbell covers.
    pub scope: &'a str,
}

/// What differs between queue transports.
pub trait QueueTransport {
    /// The target.
    const TARGET: Transport;
    /// The reservation op (`mlx5.reserve`, `proxy.reserve`): endpoint, slots -> base slot.
    type ReserveOp: Op;
    /// The completion wait op (`mlx5.wait_completion`, `proxy.wait_completion`): endpoint, and
    /// the command's first slot and the slot after it, or nothing for a wait for everything.
    type WaitCompletionOp: Op;
    /// The publication of a signal that rides in its put's command and takes no slot of its
    /// own (mlx5: write-with-immediate); `None` when the transport has none.
    const RIDING_PUBLICATION: Option<Publication> = None;
    /// Whether one queue executes its commands in order (an RC QP, a proxy ring): a signal then
    /// follows its data with nothing between. When false (EFA), every signal waits for the
    /// completion of the program's earlier commands on its queue first (the wait is marked
    /// `publishes`; the `signal-in-order-on-efa` mutation drops it), whatever its publication
    /// attribute says.
    const IN_ORDER: bool = true;

    /// Emits, before its put's command, the operands that carry `signal` (a signal of
    /// [`Self::RIDING_PUBLICATION`] riding on that put) in the command.
    fn emit_riding_signal(
        &self,
        _ctx: &mut Context,
        _builder: &mut Builder,
        _signal: Ptr<Operation>,
    ) -> (Value, Value) {
        unreachable!("only a transport with a riding publication has riding signals")
    }
    /// What every `ab.wait_signal` of `kernel` also does while it polls, if anything.
    fn receive_side(&self, _ctx: &Context, _kernel: Ptr<Operation>) -> Option<ReceiveSide> {
        None
    }
    /// Emits one put command.
    fn emit_put(&self, ctx: &mut Context, builder: &mut Builder, command: &Command);
    /// Emits one signal command.
    fn emit_signal(&self, ctx: &mut Context, builder: &mut Builder, command: &Command);
    /// Emits the submission of a range of slots.
    fn emit_submit(&self, ctx: &mut Context, builder: &mut Builder, submission: &Submission);
}

/// Lowers every kernel of `module` with `transport`.
pub fn lower_module<T: QueueTransport>(
    ctx: &mut Context,
    module: Ptr<Operation>,
    transport: &T,
) -> Result<bool, Diagnostic> {
    for kernel in kernels(ctx, module) {
        let receive_side = transport.receive_side(ctx, kernel);
        let mut lowering = Lowering {
            transport,
            tokens: HashMap::new(),
            erase: Vec::new(),
            receive_side,
        };
        let block = region_block(ctx, kernel, 0);
        lowering.lower_block(ctx, block)?;
        for op in lowering.erase.into_iter().rev() {
            Operation::erase(op, ctx);
        }
    }
    Ok(true)
}

struct Lowering<'a, T: QueueTransport> {
    transport: &'a T,
    /// Token -> (endpoint, first slot of its command, slots it takes).
    tokens: HashMap<Value, (Value, Value, i64)>,
    erase: Vec<Ptr<Operation>>,
    /// What every wait of the kernel also does while it polls.
    receive_side: Option<ReceiveSide>,
}

impl<T: QueueTransport> Lowering<'_, T> {
    fn lower_block(&mut self, ctx: &mut Context, block: Ptr<BasicBlock>) -> Result<(), Diagnostic> {
        let ops = block_ops(ctx, block);
        let mut index = 0;
        while index < ops.len() {
            let op = ops[index];
            let name = op_name(ctx, op);
            let batch = attrs::get_int(ctx, op, "batch");
            if batch.is_none() && is_unbatched_predicated_put::<T>(ctx, op) {
                // As `if (predicate) nvshmem_put(...)`: nothing at all is posted when the
                // predicate is false (a NOP keeping a batch's size static is only worth it in a
                // batch). The put moves into an `ab.if` and is lowered there, unpredicated.
                let predicate = put_predicate(ctx, op).expect("predicated");
                let mut builder = Builder::before(ctx, op);
                let (_, block) = builder.create_if(ctx, predicate);
                let terminator = block_ops(ctx, block)[0];
                op.unlink(ctx);
                op.insert_before(ctx, terminator);
                self.lower_batch(ctx, &[op], false)?;
                index += 1;
                continue;
            }
            if is_transfer(ctx, op) || (name == "ab.for" && batch.is_some()) {
                let mut members = vec![op];
                let mut last = index;
                let mut library_put_signal = false;
                if batch.is_none()
                    && T::IN_ORDER
                    && let Some(signal_index) = fusable_signal(ctx, &ops, index)
                {
                    // Library style still has put_signal: one call, one reservation and one
                    // doorbell for a put and the signal that names it in `after`.
                    members.push(ops[signal_index]);
                    last = signal_index;
                    library_put_signal = true;
                    if attrs::get(ctx, op, "completion").is_none() {
                        // As NVSHMEM: CQ_UPDATE only on the call's last WQE (the signal).
                        attrs::set_string(ctx, op, "completion", "never");
                    }
                }
                if let Some(id) = batch {
                    for (later_index, later) in ops.iter().enumerate().skip(index + 1) {
                        if attrs::get_int(ctx, *later, "batch") == Some(id) {
                            members.push(*later);
                            last = later_index;
                        } else if !is_pure_scalar(&op_name(ctx, *later)) {
                            break;
                        }
                    }
                }
                self.lower_batch(ctx, &members, library_put_signal)?;
                index = last + 1;
                continue;
            }
            match name.as_str() {
                "ab.for" | "ab.if" => {
                    let body = region_block(ctx, op, 0);
                    self.lower_block(ctx, body)?;
                }
                "ab.wait" => {
                    let token = op.deref(ctx).get_operand(0);
                    let (endpoint, slot, slots) = *self.tokens.get(&token).ok_or_else(|| {
                        Diagnostic::at_op(ctx, op, "ab.wait on a token whose transfer was not lowered in an enclosing scope (a compiler bug)")
                    })?;
                    let mut builder = Builder::before(ctx, op);
                    let size = builder.constant(ctx, slots);
                    let end = builder.binary(ctx, BinaryOperator::Add, slot, size);
                    emit_wait_completion::<T::WaitCompletionOp>(
                        ctx,
                        &mut builder,
                        endpoint,
                        Some((slot, end)),
                    );
                    self.erase.push(op);
                }
                "ab.fence" if T::IN_ORDER => {
                    // One RC queue (one proxy ring) executes its commands in order: later puts
                    // on the endpoint are delivered after earlier ones with no instruction.
                    self.erase.push(op);
                }
                "ab.fence" => {
                    // Not in order (SRD): later commands may land first, so wait for every
                    // earlier command on the endpoint, as a fence does there.
                    let endpoint = endpoint_of(ctx, op);
                    let mut builder = Builder::before(ctx, op);
                    emit_wait_completion::<T::WaitCompletionOp>(ctx, &mut builder, endpoint, None);
                    self.erase.push(op);
                }
                "ab.drain" => {
                    let endpoint = endpoint_of(ctx, op);
                    let mut builder = Builder::before(ctx, op);
                    emit_wait_completion::<T::WaitCompletionOp>(ctx, &mut builder, endpoint, None);
                    self.erase.push(op);
                }
                "ab.wait_signal" => {
                    lower_wait_signal(ctx, op, self.receive_side);
                    self.erase.push(op);
                }
                _ => {}
            }
            index += 1;
        }
        Ok(())
    }

    fn lower_batch(
        &mut self,
        ctx: &mut Context,
        members: &[Ptr<Operation>],
        library_put_signal: bool,
    ) -> Result<(), Diagnostic> {
        let target = T::TARGET;
        let first = members[0];
        let endpoint = member_endpoint(ctx, first, target);
        let shared = !has_single_owner(ctx, endpoint);
        let coalesce = library_put_signal
            || members
                .iter()
                .all(|m| attrs::get_string(ctx, *m, "doorbell").as_deref() == Some("batch"));
        // The slots of every member with a constant count, then those of loops whose trip
        // count is known only at run time (computed here, before the batch: `batch-commands`
        // checked their bounds are defined by then).
        let mut constant_slots = 0i64;
        let mut run_time_loops = Vec::new();
        for member in members {
            if op_name(ctx, *member) == "ab.for" && constant_trip_count(ctx, *member).is_none() {
                run_time_loops.push((
                    *member,
                    loop_slots_per_iteration_checked(ctx, *member, target)?,
                ));
            } else {
                constant_slots += member_slots(ctx, *member, target)?;
            }
        }
        let mut builder = Builder::before(ctx, first);
        if !T::IN_ORDER {
            self.publish_after_earlier_commands(ctx, &mut builder, members, endpoint)?;
        }
        let mut count = builder.constant(ctx, constant_slots);
        let mut run_time_trips = HashMap::new();
        for (for_op, per_iteration) in run_time_loops {
            let trip = emit_trip_count(ctx, &mut builder, for_op);
            let per_iteration_value = builder.constant(ctx, per_iteration);
            let slots = builder.binary(ctx, BinaryOperator::Mul, trip, per_iteration_value);
            count = builder.binary(ctx, BinaryOperator::Add, count, slots);
            run_time_trips.insert(for_op, (trip, slots));
        }
        let base = emit_reserve::<T::ReserveOp>(ctx, &mut builder, endpoint, count, shared);
        // `choose-doorbell-scope`: loops whose iterations run on a warp or the whole CTA. Those
        // threads need the base slot too, and the leader rings only after their writes.
        let widest_scope = members
            .iter()
            .filter_map(|member| attrs::get_string(ctx, *member, "doorbell_scope"))
            .max_by_key(|scope| scope == "cta");
        if widest_scope.is_some()
            && let Some(reserve) = base.defining_op()
        {
            attrs::set_bool(ctx, reserve, "broadcast", true);
        }
        // A member's first slot is `start + offset`; after a run-time loop, `start` moves past
        // its slots and `offset` restarts.
        let mut start = base;
        let mut offset = 0i64;
        for member in members {
            if let Some((trip, slots)) = run_time_trips.get(member).copied() {
                let mut builder = Builder::before(ctx, *member);
                let offset_value = builder.constant(ctx, offset);
                let loop_start = builder.binary(ctx, BinaryOperator::Add, start, offset_value);
                let trip = LoopTrip::RunTime(trip);
                self.lower_loop_member(ctx, *member, loop_start, 0, trip, shared, coalesce)?;
                if Some(member) != members.last() {
                    let mut builder = Builder::after(ctx, *member);
                    start = builder.binary(ctx, BinaryOperator::Add, loop_start, slots);
                    offset = 0;
                }
            } else if op_name(ctx, *member) == "ab.for" {
                let trip =
                    LoopTrip::Constant(constant_trip_count(ctx, *member).expect("checked above"));
                offset +=
                    self.lower_loop_member(ctx, *member, start, offset, trip, shared, coalesce)?;
            } else {
                let mut builder = Builder::before(ctx, *member);
                let offset_value = builder.constant(ctx, offset);
                let slot = builder.binary(ctx, BinaryOperator::Add, start, offset_value);
                let slots = self.lower_transfer(ctx, *member, slot, None, shared, coalesce)?;
                offset += slots;
            }
        }
        if coalesce {
            let last = *members.last().expect("a batch has members");
            let mut builder = Builder::after(ctx, last);
            if constant_slots == 0 && !run_time_trips.is_empty() {
                // Every member is a run-time loop, and they may all run zero times: then nothing
                // is submitted. On a shared queue an empty batch's publication would wait, in
                // ticket order, for a turn another batch with the same base already took.
                let zero = builder.constant(ctx, 0);
                let posted = builder.binary(ctx, BinaryOperator::Ne, count, zero);
                let (_, block) = builder.create_if(ctx, posted);
                let terminator = block_ops(ctx, block)[0];
                builder = Builder::before(ctx, terminator);
            }
            let end = builder.binary(ctx, BinaryOperator::Add, base, count);
            if let Some(scope) = &widest_scope {
                let barrier = builder.create::<GpuBarrierOp>(ctx, vec![], vec![]);
                attrs::set_string(ctx, barrier, "scope", scope);
            }
            let scope = widest_scope.as_deref().unwrap_or("thread");
            let submission = Submission {
                endpoint,
                base,
                count,
                end,
                shared,
                scope,
            };
            self.transport.emit_submit(ctx, &mut builder, &submission);
        }
        Ok(())
    }

    /// On a queue that does not execute in order: a batch whose first member is a signal waits
    /// first for every earlier command of the program on its queue (the signal's data among
    /// them), whatever its publication attribute says; a signal anywhere else in a batch is
    /// refused (`batch-commands` never puts one there on such a transport).
    fn publish_after_earlier_commands(
        &mut self,
        ctx: &mut Context,
        builder: &mut Builder,
        members: &[Ptr<Operation>],
        endpoint: Value,
    ) -> Result<(), Diagnostic> {
        for (position, member) in members.iter().enumerate() {
            let nested = op_name(ctx, *member) == "ab.for"
                && aboleth_ir::walk::all_ops(ctx, *member)
                    .into_iter()
                    .any(|op| op_name(ctx, op) == "ab.signal");
            if nested || (position > 0 && op_name(ctx, *member) == "ab.signal") {
                return Err(Diagnostic::at_op(
                    ctx,
                    *member,
                    format!(
                        "a signal batched after other commands on {}, whose queue does not \
                         execute in order: it could land before its data (a compiler bug: \
                         batch-commands starts a new batch at each signal there)",
                        T::TARGET.name()
                    ),
                ));
            }
        }
        // Whatever the signal's publication says: no publication is in order on such a queue.
        if op_name(ctx, members[0]) == "ab.signal" {
            let wait = emit_wait_completion::<T::WaitCompletionOp>(ctx, builder, endpoint, None);
            attrs::set_bool(ctx, wait, "publishes", true);
        }
        Ok(())
    }

    /// Lowers a batched loop whose slots start at `base + offset`; returns the slots it takes
    /// when its trip count is a constant (0 for a run-time one, whose slots the caller counted).
    #[allow(
        clippy::too_many_arguments,
        reason = "where its slots start, how many iterations, and how the batch posts"
    )]
    fn lower_loop_member(
        &mut self,
        ctx: &mut Context,
        for_op: Ptr<Operation>,
        base: Value,
        offset: i64,
        trip: LoopTrip,
        shared: bool,
        coalesce: bool,
    ) -> Result<i64, Diagnostic> {
        let target = T::TARGET;
        let body = region_block(ctx, for_op, 0);
        let body_ops = block_ops(ctx, body);
        let per_iteration = loop_slots_per_iteration_checked(ctx, for_op, target)?;
        let induction = body.deref(ctx).get_argument(0);
        let (lower, step) = {
            let operation = for_op.deref(ctx);
            (operation.get_operand(0), operation.get_operand(2))
        };
        let first_op = body_ops[0];
        let mut builder = Builder::before(ctx, first_op);
        let distance = builder.binary(ctx, BinaryOperator::Sub, induction, lower);
        let iteration = builder.binary(ctx, BinaryOperator::Div, distance, step);
        let per_iteration_value = builder.constant(ctx, per_iteration);
        let scaled = builder.binary(ctx, BinaryOperator::Mul, iteration, per_iteration_value);
        let offset_value = builder.constant(ctx, offset);
        let start = builder.binary(ctx, BinaryOperator::Add, base, offset_value);
        let iteration_base = builder.binary(ctx, BinaryOperator::Add, start, scaled);
        let last_index = match trip {
            LoopTrip::Constant(trip) => builder.constant(ctx, trip - 1),
            LoopTrip::RunTime(trip) => {
                let one = builder.constant(ctx, 1);
                builder.binary(ctx, BinaryOperator::Sub, trip, one)
            }
        };
        let is_last = builder.binary(ctx, BinaryOperator::Eq, iteration, last_index);
        let mut inner_offset = 0i64;
        for op in body_ops {
            if op_name(ctx, op) == "ab.for" {
                let inner_trip = LoopTrip::Constant(
                    constant_trip_count(ctx, op).expect("nested batched loops are constant"),
                );
                inner_offset += self.lower_loop_member(
                    ctx,
                    op,
                    iteration_base,
                    inner_offset,
                    inner_trip,
                    shared,
                    coalesce,
                )?;
            } else if is_transfer(ctx, op) {
                let mut builder = Builder::before(ctx, op);
                let inner = builder.constant(ctx, inner_offset);
                let slot = builder.binary(ctx, BinaryOperator::Add, iteration_base, inner);
                inner_offset +=
                    self.lower_transfer(ctx, op, slot, Some(is_last), shared, coalesce)?;
            }
        }
        match trip {
            LoopTrip::Constant(trip) => trip
                .checked_mul(per_iteration)
                .ok_or_else(|| too_many_slots(ctx, for_op)),
            LoopTrip::RunTime(_) => Ok(0),
        }
    }

    /// Lowers one transfer at `slot`; returns its slot count.
    fn lower_transfer(
        &mut self,
        ctx: &mut Context,
        op: Ptr<Operation>,
        slot: Value,
        last_iteration: Option<Value>,
        shared: bool,
        coalesce: bool,
    ) -> Result<i64, Diagnostic> {
        let target = T::TARGET;
        let slots = slots_of(ctx, op, target).ok_or_else(|| {
            Diagnostic::at_op(
                ctx,
                op,
                "cannot size this command's queue slots: an inline put needs a constant byte count",
            )
        })?;
        let endpoint = endpoint_of(ctx, op);
        let publication = attrs::get_typed::<Publication>(ctx, op, "publication");
        if publication.is_some() && publication == T::RIDING_PUBLICATION {
            // Its put carried it (see below): a wait on it is a wait on the put's command.
            let put_token = signal_after(ctx, op).expect("riding signals name their put");
            let carried = *self.tokens.get(&put_token).ok_or_else(|| {
                Diagnostic::at_op(
                    ctx,
                    op,
                    "a write-with-immediate signal whose put was not lowered before it (a compiler bug)",
                )
            })?;
            self.tokens.insert(op.deref(ctx).get_result(0), carried);
            self.erase.push(op);
            return Ok(0);
        }
        let mut builder = Builder::before(ctx, op);
        let (mut completion, mut completion_once) =
            completion_of(ctx, &mut builder, op, last_iteration);
        let mut riding_signal = None;
        if let Some(signal) =
            T::RIDING_PUBLICATION.and_then(|riding| riding_signal_of_put(ctx, op, riding))
        {
            // One command for both: it asks for a completion if either needed one.
            let (signal_completion, signal_once) =
                completion_of(ctx, &mut builder, signal, last_iteration);
            if attrs::get_string(ctx, op, "completion").as_deref() == Some("never") {
                (completion, completion_once) = (signal_completion, signal_once);
            } else if attrs::get_string(ctx, signal, "completion").as_deref() != Some("never") {
                completion = builder.binary(ctx, BinaryOperator::Or, completion, signal_completion);
                completion_once = completion_once && signal_once;
            }
            riding_signal = Some(self.transport.emit_riding_signal(ctx, &mut builder, signal));
        }
        let is_put = op_name(ctx, op) == "ab.put";
        let predicate = is_put.then(|| {
            let guarded_by_if = op.deref(ctx).get_parent_op(ctx).is_some_and(|parent| {
                op_name(ctx, parent) == "ab.if"
                    && put_predicate(ctx, op) == Some(parent.deref(ctx).get_operand(0))
            });
            match put_predicate(ctx, op) {
                Some(predicate) if !guarded_by_if => builder.to_i64(ctx, predicate),
                _ => builder.constant(ctx, 1),
            }
        });
        let command = Command {
            op,
            endpoint,
            slot,
            predicate,
            completion,
            completion_once,
            fenced: publication.is_none() || publication == Some(Publication::Fenced),
            riding_signal,
        };
        if is_put {
            self.transport.emit_put(ctx, &mut builder, &command);
        } else {
            self.transport.emit_signal(ctx, &mut builder, &command);
        }
        if !coalesce {
            let slots_value = builder.constant(ctx, slots);
            let end = builder.binary(ctx, BinaryOperator::Add, slot, slots_value);
            let submission = Submission {
                endpoint,
                base: slot,
                count: slots_value,
                end,
                shared,
                scope: "thread",
            };
            self.transport.emit_submit(ctx, &mut builder, &submission);
        }
        // A command is one WQE (or ring entry); its completion reports the index of its first
        // slot, so that is what a wait on its token polls for; once it is done, the slots up to
        // its end are free again.
        self.tokens
            .insert(op.deref(ctx).get_result(0), (endpoint, slot, slots));
        self.erase.push(op);
        Ok(slots)
    }
}

/// The completion operand of `op`'s command from its `completion` decision, and whether it is
/// nonzero only on a loop's last iteration.
fn completion_of(
    ctx: &mut Context,
    builder: &mut Builder,
    op: Ptr<Operation>,
    last_iteration: Option<Value>,
) -> (Value, bool) {
    let decision = attrs::get_string(ctx, op, "completion");
    match (decision.as_deref(), last_iteration) {
        (Some("never"), _) => (builder.constant(ctx, 0), false),
        (Some("last_iteration"), Some(is_last)) => (is_last, true),
        (Some("last_iteration"), None) => match innermost_last_iteration(ctx, builder, op) {
            Some(is_last) => (is_last, true),
            None => (builder.constant(ctx, 1), false),
        },
        _ => (builder.constant(ctx, 1), false),
    }
}

/// `1` on the last iteration of the innermost constant-trip-count loop around `op` (not
/// batched), else `0`; `None` when `op` is not directly in such a loop. The completion it gates
/// is requested once per run of that loop: at its end, which is what a later drain needs.
fn innermost_last_iteration(
    ctx: &mut Context,
    builder: &mut Builder,
    op: Ptr<Operation>,
) -> Option<Value> {
    let for_op = op.deref(ctx).get_parent_op(ctx)?;
    if op_name(ctx, for_op) != "ab.for" {
        return None;
    }
    let trip = constant_trip_count(ctx, for_op)?;
    let induction = region_block(ctx, for_op, 0).deref(ctx).get_argument(0);
    let (lower, step) = {
        let operation = for_op.deref(ctx);
        (operation.get_operand(0), operation.get_operand(2))
    };
    let distance = builder.binary(ctx, BinaryOperator::Sub, induction, lower);
    let iteration = builder.binary(ctx, BinaryOperator::Div, distance, step);
    let last = builder.constant(ctx, trip - 1);
    Some(builder.binary(ctx, BinaryOperator::Eq, iteration, last))
}

/// A put with a runtime predicate, outside any batch, whose token nothing uses (a waited token
/// would need its slot outside the `ab.if`), and whose completion no later drain relies on:
/// `plan-completions` may have given the completion that retires the earlier commands of the
/// queue to this put alone, and it must then be posted (as a NOP or an empty write when the
/// predicate is false) for that completion to come. On a queue that is not in order (EFA)
/// every command completes and a drain waits for all of them, so nothing relies on one put.
fn is_unbatched_predicated_put<T: QueueTransport>(ctx: &Context, op: Ptr<Operation>) -> bool {
    op_name(ctx, op) == "ab.put"
        && put_predicate(ctx, op).is_some()
        && !op.deref(ctx).get_result(0).is_used(ctx)
        && (!T::IN_ORDER
            || !matches!(
                attrs::get_string(ctx, op, "completion").as_deref(),
                Some("always" | "last_iteration")
            ))
}

/// The index of a signal right after the put at `index` (pure scalar ops between them allowed)
/// on the same endpoint whose `after` is the put's token, when neither is batched.
fn fusable_signal(ctx: &Context, ops: &[Ptr<Operation>], index: usize) -> Option<usize> {
    let put = ops[index];
    if op_name(ctx, put) != "ab.put" {
        return None;
    }
    let token = put.deref(ctx).get_result(0);
    for (later_index, later) in ops.iter().enumerate().skip(index + 1) {
        let name = op_name(ctx, *later);
        if name == "ab.signal" {
            let fusable = attrs::get_int(ctx, *later, "batch").is_none()
                && endpoint_of(ctx, *later) == endpoint_of(ctx, put)
                && signal_after(ctx, *later) == Some(token);
            return fusable.then_some(later_index);
        }
        if !is_pure_scalar(&name) {
            return None;
        }
    }
    None
}

/// How many iterations a batched loop runs: a constant, or a value computed before the batch.
#[derive(Clone, Copy)]
enum LoopTrip {
    Constant(i64),
    RunTime(Value),
}

/// Emits `max(0, ceil((upper - lower) / step))` of a loop with a positive constant step (what
/// `batch-commands` requires of a loop with a run-time trip count).
fn emit_trip_count(ctx: &mut Context, builder: &mut Builder, for_op: Ptr<Operation>) -> Value {
    let (lower, upper, step) = {
        let operation = for_op.deref(ctx);
        (
            operation.get_operand(0),
            operation.get_operand(1),
            operation.get_operand(2),
        )
    };
    let step_value = constant_value(ctx, step).expect("batched loops have a constant step");
    let span = builder.binary(ctx, BinaryOperator::Sub, upper, lower);
    let iterations = if step_value == 1 {
        span
    } else {
        let rounding = builder.constant(ctx, step_value - 1);
        let rounded = builder.binary(ctx, BinaryOperator::Add, span, rounding);
        builder.binary(ctx, BinaryOperator::Div, rounded, step)
    };
    let zero = builder.constant(ctx, 0);
    builder.binary(ctx, BinaryOperator::Max, iterations, zero)
}

/// The slots one iteration of a batched loop takes, or the error naming the command whose size
/// is not a constant.
fn loop_slots_per_iteration_checked(
    ctx: &Context,
    for_op: Ptr<Operation>,
    target: Transport,
) -> Result<i64, Diagnostic> {
    let mut per_iteration = 0i64;
    for op in block_ops(ctx, region_block(ctx, for_op, 0)) {
        if is_transfer(ctx, op) || op_name(ctx, op) == "ab.for" {
            per_iteration = per_iteration
                .checked_add(member_slots(ctx, op, target)?)
                .ok_or_else(|| too_many_slots(ctx, for_op))?;
        }
    }
    Ok(per_iteration)
}

fn member_endpoint(ctx: &Context, member: Ptr<Operation>, target: Transport) -> Value {
    if op_name(ctx, member) == "ab.for" {
        batchable_loop_endpoint(ctx, member, target).expect("batched loops have one endpoint")
    } else {
        endpoint_of(ctx, member)
    }
}

/// A batched loop whose queue slots (trip count times slots per iteration) overflow an i64:
/// a constant trip count near i64::MAX, refused rather than wrapped.
fn too_many_slots(ctx: &Context, for_op: Ptr<Operation>) -> Diagnostic {
    Diagnostic::at_op(
        ctx,
        for_op,
        "this loop posts more commands than a 64-bit count holds (its constant trip count times \
         the commands per iteration); use fewer iterations",
    )
}

fn member_slots(
    ctx: &Context,
    member: Ptr<Operation>,
    target: Transport,
) -> Result<i64, Diagnostic> {
    if op_name(ctx, member) == "ab.for" {
        let trip = constant_trip_count(ctx, member).expect("a loop counted here is constant");
        let per_iteration = loop_slots_per_iteration_checked(ctx, member, target)?;
        return trip
            .checked_mul(per_iteration)
            .ok_or_else(|| too_many_slots(ctx, member));
    }
    slots_of(ctx, member, target).ok_or_else(|| {
        Diagnostic::at_op(
            ctx,
            member,
            "cannot size this command's queue slots: an inline put needs a constant byte count",
        )
    })
}

/// Emits a reservation op `T` (`mlx5.reserve`, `proxy.reserve`) and returns its base slot.
fn emit_reserve<T: Op>(
    ctx: &mut Context,
    builder: &mut Builder,
    endpoint: Value,
    slots: Value,
    atomic: bool,
) -> Value {
    let ty = i64_type(ctx).into();
    let op = builder.create::<T>(ctx, vec![ty], vec![endpoint, slots]);
    attrs::set_bool(ctx, op, "atomic", atomic);
    op.deref(ctx).get_result(0)
}

/// Emits a completion wait op `T` for the command at `(slot, end)` (its first slot and the slot
/// after it), or for everything when `None`.
fn emit_wait_completion<T: Op>(
    ctx: &mut Context,
    builder: &mut Builder,
    endpoint: Value,
    slot: Option<(Value, Value)>,
) -> Ptr<Operation> {
    let mut operands = vec![endpoint];
    if let Some((slot, end)) = slot {
        operands.extend([slot, end]);
    }
    builder.create::<T>(ctx, vec![], operands)
}

/// Emits a put command op `T` (`mlx5.write`, `proxy.put`): endpoint, slot, destination,
/// source, bytes, key, predicate, completion, then the riding signal's operands if any. The
/// caller marks it ([`mark_completion_once`] and its own attributes).
pub fn emit_put_op<T: Op>(
    ctx: &mut Context,
    builder: &mut Builder,
    command: &Command,
) -> Ptr<Operation> {
    let predicate = command.predicate.expect("a put command has a predicate");
    let [destination, source, bytes, key] = put_operands(ctx, builder, command.op);
    let mut operands = vec![
        command.endpoint,
        command.slot,
        destination,
        source,
        bytes,
        key,
        predicate,
        command.completion,
    ];
    if let Some((first, second)) = command.riding_signal {
        operands.extend([first, second]);
    }
    builder.create::<T>(ctx, vec![], operands)
}

/// Emits a signal command op `T` (`mlx5.atomic`, `proxy.signal`): endpoint, slot, flag,
/// value, completion, with the signal's `op`, the library `fence` flag and
/// [`mark_completion_once`].
pub fn emit_signal_op<T: Op>(
    ctx: &mut Context,
    builder: &mut Builder,
    command: &Command,
) -> Ptr<Operation> {
    let [flag, value] = signal_operands(ctx, builder, command.op);
    let operands = vec![
        command.endpoint,
        command.slot,
        flag,
        value,
        command.completion,
    ];
    let op = builder.create::<T>(ctx, vec![], operands);
    let operation = signal_operation(ctx, command.op);
    attrs::set(ctx, op, "op", Box::new(operation));
    attrs::set_bool(ctx, op, "fence", command.fenced);
    mark_completion_once(ctx, op, command);
    op
}

/// Marks a command op whose completion is requested only on a loop's last iteration.
pub fn mark_completion_once(ctx: &Context, op: Ptr<Operation>, command: &Command) {
    if command.completion_once {
        attrs::set_bool(ctx, op, "completion_once", true);
    }
}

/// Emits the in-order publication op `T` (`mlx5.publish`, `proxy.publish`) of a submission: on
/// a shared queue after a fence of `fence_scope` (what the consumer reads the commands
/// through); on a one-owner queue a plain store marked `owner_only`, which keeps the shared
/// protocol's publication counter in step (no wait): a later kernel may post to this queue
/// with that protocol.
pub fn emit_publication<T: Op>(
    ctx: &mut Context,
    builder: &mut Builder,
    submission: &Submission,
    fence_scope: &str,
) {
    let operands = vec![submission.endpoint, submission.base, submission.count];
    if submission.shared {
        emit_fence(ctx, builder, fence_scope);
        builder.create::<T>(ctx, vec![], operands);
    } else {
        let publish = builder.create::<T>(ctx, vec![], operands);
        attrs::set_bool(ctx, publish, "owner_only", true);
    }
}
