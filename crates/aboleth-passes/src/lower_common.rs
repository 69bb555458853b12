//! The lowering shared by the queue transports (mlx5 and proxy): reservation, commands,
//! submission and completion waits, driven by the planning attributes.
//!
//! For each batch (or each single transfer when there is none) it emits: one reservation of
//! the batch's slots (atomic unless the endpoint has one owner), the commands at their slots
//! (loops included: a slot is `base + offset + iteration * slots_per_iteration + k`), and the
//! submission after the last command (or after each command without `coalesce-doorbells`).
//! Where an attribute is absent it does what a library does on every call: atomic
//! reservation, a GPU fence, in-order publication, the post lock, `atomicMax` on the producer
//! index, a completion per command, a fenced signal. `ab.wait` becomes a completion wait on its
//! token's slot, `ab.drain` a wait for everything the program posted, `ab.fence` nothing (the
//! queue is in order), `ab.wait_signal` a flag poll. The per-transport differences (op names, slot sizes, what submission is) live in
//! [`QueueTransport`] implementations; this module holds no transport detail.

use aboleth_abi::Transport;
use std::collections::HashMap;

use aboleth_ir::{
    Diagnostic,
    ab::{
        attributes::{BinaryOperator, Publication, QueueOwner},
        ops::operand,
    },
    attrs,
    builder::{Builder, i64_type},
    pliron::{
        basic_block::BasicBlock,
        context::{Context, Ptr},
        linked_list::LinkedList,
        operation::Operation,
        value::Value,
    },
    scalar::constant_trip_count,
    text::op_name,
    transport::{GpuBarrierOp, GpuFenceOp, GpuWaitFlagOp},
    walk::{all_ops, block_ops, kernels, region_block},
};

use crate::batching::is_pure_scalar;
use crate::comm::{
    endpoint_of, is_transfer, put_predicate, signal_after, signal_operation, slots_of,
};

/// One command to emit: its op, the endpoint, the slot, and the completion decision.
pub struct Command {
    /// The semantic `ab.put` or `ab.signal`.
    pub op: Ptr<Operation>,
    /// The endpoint value.
    pub endpoint: Value,
    /// The first slot of the command.
    pub slot: Value,
    /// 1 when the command must request a completion, 0 when not (may be computed).
    pub completion: Value,
    /// True when `completion` is nonzero only on a loop's last iteration.
    pub completion_once: bool,
    /// True for library-style signals: the transport fences before executing them.
    pub fenced: bool,
    /// A put carrying a write-with-immediate signal: the immediate (`i64`) and the signal's
    /// flag (the simulator checks the signal against it; the code generator does not need it).
    pub immediate: Option<(Value, Value)>,
}

/// What differs between queue transports.
#[allow(
    clippy::too_many_arguments,
    reason = "a submission names the queue, the slot range and the sharing mode"
)]
pub trait QueueTransport {
    /// The target.
    fn target(&self) -> Transport;
    /// Emits the reservation; returns the base slot (`i64`).
    fn emit_reserve(
        &self,
        ctx: &mut Context,
        builder: &mut Builder,
        endpoint: Value,
        slots: Value,
        atomic: bool,
    ) -> Value;
    /// Emits one put command.
    fn emit_put(
        &self,
        ctx: &mut Context,
        builder: &mut Builder,
        command: &Command,
        predicate: Value,
    );
    /// Emits one signal command.
    fn emit_signal(&self, ctx: &mut Context, builder: &mut Builder, command: &Command);
    /// Emits the submission of slots `[base, end)`; `scope` is the doorbell scope: the threads
    /// (`thread`, `warp`, `cta`) whose command writes the doorbell covers.
    fn emit_submit(
        &self,
        ctx: &mut Context,
        builder: &mut Builder,
        endpoint: Value,
        base: Value,
        count: Value,
        end: Value,
        shared: bool,
        scope: &str,
    );
    /// Emits a wait for the command at `(slot, end)`, or for everything reserved when `None`.
    fn emit_wait_completion(
        &self,
        ctx: &mut Context,
        builder: &mut Builder,
        endpoint: Value,
        slot: Option<(Value, Value)>,
    );
}

/// True when the endpoint was found to have one owner.
pub fn has_single_owner(ctx: &Context, endpoint: Value) -> bool {
    endpoint
        .defining_op()
        .and_then(|op| attrs::get_typed::<QueueOwner>(ctx, op, "owner"))
        == Some(QueueOwner::Program)
}

/// Lowers every kernel of `module` with `transport`.
pub fn lower_module(
    ctx: &mut Context,
    module: Ptr<Operation>,
    transport: &dyn QueueTransport,
) -> Result<bool, Diagnostic> {
    for kernel in kernels(ctx, module) {
        let receive_tables = all_ops(ctx, kernel).into_iter().find_map(|op| {
            (op_name(ctx, op) == "ab.signal"
                && attrs::get_typed::<Publication>(ctx, op, "publication")
                    == Some(Publication::WriteWithImmediate))
            .then(|| crate::signal_publication::immediate_signal_candidate(ctx, op))
            .flatten()
        });
        let mut lowering = Lowering {
            transport,
            tokens: HashMap::new(),
            erase: Vec::new(),
            receive_tables,
        };
        let block = region_block(ctx, kernel, 0);
        lowering.lower_block(ctx, block)?;
        for op in lowering.erase.into_iter().rev() {
            Operation::erase(op, ctx);
        }
    }
    Ok(true)
}

struct Lowering<'a> {
    transport: &'a dyn QueueTransport,
    /// Token -> (endpoint, first slot of its command, slots it takes).
    tokens: HashMap<Value, (Value, Value, i64)>,
    erase: Vec<Ptr<Operation>>,
    /// (flag table, endpoint table) of the kernel's write-with-immediate signals, if any: every
    /// wait of the kernel then drains the receive CQ.
    receive_tables: Option<(Value, Value)>,
}

impl Lowering<'_> {
    fn lower_block(&mut self, ctx: &mut Context, block: Ptr<BasicBlock>) -> Result<(), Diagnostic> {
        let ops = block_ops(ctx, block);
        let mut index = 0;
        while index < ops.len() {
            let op = ops[index];
            let name = op_name(ctx, op);
            let batch = attrs::get_int(ctx, op, "batch");
            if batch.is_none() && is_unbatched_predicated_put(ctx, op) {
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
                    self.transport.emit_wait_completion(
                        ctx,
                        &mut builder,
                        endpoint,
                        Some((slot, end)),
                    );
                    self.erase.push(op);
                }
                "ab.fence" => {
                    // One RC queue (one proxy ring) executes its commands in order: later puts
                    // on the endpoint are delivered after earlier ones with no instruction.
                    self.erase.push(op);
                }
                "ab.drain" => {
                    let endpoint = endpoint_of(ctx, op);
                    let mut builder = Builder::before(ctx, op);
                    self.transport
                        .emit_wait_completion(ctx, &mut builder, endpoint, None);
                    self.erase.push(op);
                }
                "ab.wait_signal" => {
                    lower_wait_signal_receiving(
                        ctx,
                        op,
                        self.receive_tables.map(|(flag_table, endpoint_table)| {
                            ReceiveSide::Immediates {
                                flag_table,
                                endpoint_table,
                            }
                        }),
                    );
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
        let target = self.transport.target();
        let first = members[0];
        let endpoint = member_endpoint(ctx, first);
        let shared = !has_single_owner(ctx, endpoint);
        let coalesce = library_put_signal
            || members
                .iter()
                .all(|m| attrs::get_string(ctx, *m, "doorbell").as_deref() == Some("batch"));
        let mut total = 0i64;
        for member in members {
            total += member_slots(ctx, *member, target)?;
        }
        let mut builder = Builder::before(ctx, first);
        let count = builder.constant(ctx, total);
        let base = self
            .transport
            .emit_reserve(ctx, &mut builder, endpoint, count, shared);
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
        let mut offset = 0i64;
        for member in members {
            if op_name(ctx, *member) == "ab.for" {
                offset += self.lower_loop_member(ctx, *member, base, offset, shared, coalesce)?;
            } else {
                let mut builder = Builder::before(ctx, *member);
                let offset_value = builder.constant(ctx, offset);
                let slot = builder.binary(ctx, BinaryOperator::Add, base, offset_value);
                let slots = self.lower_transfer(ctx, *member, slot, None, shared, coalesce)?;
                offset += slots;
            }
        }
        if coalesce {
            let last = *members.last().expect("a batch has members");
            let mut builder = Builder::after(ctx, last);
            let end = builder.binary(ctx, BinaryOperator::Add, base, count);
            if let Some(scope) = &widest_scope {
                let barrier = builder.create::<GpuBarrierOp>(ctx, vec![], vec![]);
                attrs::set_string(ctx, barrier, "scope", scope);
            }
            let scope = widest_scope.as_deref().unwrap_or("thread");
            self.transport.emit_submit(
                ctx,
                &mut builder,
                endpoint,
                base,
                count,
                end,
                shared,
                scope,
            );
        }
        Ok(())
    }

    /// Lowers a batched loop whose slots start at `base + offset`; returns the slots it takes.
    fn lower_loop_member(
        &mut self,
        ctx: &mut Context,
        for_op: Ptr<Operation>,
        base: Value,
        offset: i64,
        shared: bool,
        coalesce: bool,
    ) -> Result<i64, Diagnostic> {
        let target = self.transport.target();
        let trip =
            constant_trip_count(ctx, for_op).expect("batched loops have constant trip counts");
        let body = region_block(ctx, for_op, 0);
        let body_ops = block_ops(ctx, body);
        let mut per_iteration = 0;
        for op in &body_ops {
            if is_transfer(ctx, *op) || op_name(ctx, *op) == "ab.for" {
                per_iteration += member_slots(ctx, *op, target)?;
            }
        }
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
        let last_index = builder.constant(ctx, trip - 1);
        let is_last = builder.binary(ctx, BinaryOperator::Eq, iteration, last_index);
        let mut inner_offset = 0i64;
        for op in body_ops {
            if op_name(ctx, op) == "ab.for" {
                inner_offset += self.lower_loop_member(
                    ctx,
                    op,
                    iteration_base,
                    inner_offset,
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
        trip.checked_mul(per_iteration)
            .ok_or_else(|| too_many_slots(ctx, for_op))
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
        let target = self.transport.target();
        let slots = slots_of(ctx, op, target).ok_or_else(|| {
            Diagnostic::at_op(
                ctx,
                op,
                "cannot size this command's queue slots: an inline put needs a constant byte count",
            )
        })?;
        let endpoint = endpoint_of(ctx, op);
        let publication = attrs::get_typed::<Publication>(ctx, op, "publication");
        if publication == Some(Publication::WriteWithImmediate) {
            // Its put carried it (see below): a wait on it is a wait on the put's WQE.
            let put_token = signal_after(ctx, op).expect("immediate signals name their put");
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
        let mut immediate = None;
        if let Some(signal) = riding_signal_of_put(ctx, op, Publication::WriteWithImmediate) {
            // One WQE for both: it asks for a completion if either needed one.
            let (signal_completion, signal_once) =
                completion_of(ctx, &mut builder, signal, last_iteration);
            if attrs::get_string(ctx, op, "completion").as_deref() == Some("never") {
                (completion, completion_once) = (signal_completion, signal_once);
            } else if attrs::get_string(ctx, signal, "completion").as_deref() != Some("never") {
                completion = builder.binary(ctx, BinaryOperator::Or, completion, signal_completion);
                completion_once = completion_once && signal_once;
            }
            immediate = Some(immediate_of(ctx, &mut builder, signal));
        }
        let command = Command {
            op,
            endpoint,
            slot,
            completion,
            completion_once,
            fenced: publication.is_none() || publication == Some(Publication::Fenced),
            immediate,
        };
        if op_name(ctx, op) == "ab.put" {
            let guarded_by_if = op.deref(ctx).get_parent_op(ctx).is_some_and(|parent| {
                op_name(ctx, parent) == "ab.if"
                    && put_predicate(ctx, op) == Some(parent.deref(ctx).get_operand(0))
            });
            let predicate = match put_predicate(ctx, op) {
                Some(predicate) if !guarded_by_if => builder.to_i64(ctx, predicate),
                _ => builder.constant(ctx, 1),
            };
            self.transport
                .emit_put(ctx, &mut builder, &command, predicate);
        } else {
            self.transport.emit_signal(ctx, &mut builder, &command);
        }
        if !coalesce {
            let slots_value = builder.constant(ctx, slots);
            let end = builder.binary(ctx, BinaryOperator::Add, slot, slots_value);
            self.transport.emit_submit(
                ctx,
                &mut builder,
                endpoint,
                slot,
                slots_value,
                end,
                shared,
                "thread",
            );
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

/// The signal published with `publication` that rides on `put` (write-with-immediate or
/// packets), if one does: the next transfer after it in its block (only pure scalar ops
/// between) when that names `put`'s token.
pub fn riding_signal_of_put(
    ctx: &Context,
    put: Ptr<Operation>,
    publication: Publication,
) -> Option<Ptr<Operation>> {
    if op_name(ctx, put) != "ab.put" {
        return None;
    }
    let token = put.deref(ctx).get_result(0);
    let mut cursor = put.deref(ctx).get_next();
    while let Some(op) = cursor {
        let name = op_name(ctx, op);
        if name == "ab.signal" {
            let rides = attrs::get_typed::<Publication>(ctx, op, "publication")
                == Some(publication)
                && signal_after(ctx, op) == Some(token);
            return rides.then_some(op);
        }
        if !is_pure_scalar(&name) {
            return None;
        }
        cursor = op.deref(ctx).get_next();
    }
    None
}

/// The immediate of `signal` (`aboleth_abi::mlx5::receive::ImmediateSignal`: add bit, the
/// constant value, the flag's element index) and its flag.
fn immediate_of(
    ctx: &mut Context,
    builder: &mut Builder,
    signal: Ptr<Operation>,
) -> (Value, Value) {
    use aboleth_abi::mlx5::receive::{IMMEDIATE_ADD_BIT, IMMEDIATE_INDEX_BITS};
    let flag = signal.deref(ctx).get_operand(operand::signal::FLAG);
    let value = signal.deref(ctx).get_operand(operand::signal::VALUE);
    let value = aboleth_ir::scalar::constant_value(ctx, value)
        .expect("choose-signal-publication checked the value is a constant");
    let add = signal_operation(ctx, signal) == aboleth_ir::ab::attributes::SignalOperation::Add;
    let high = (i64::from(add) << IMMEDIATE_ADD_BIT) | (value << IMMEDIATE_INDEX_BITS);
    let at = flag.defining_op().expect("checked: the flag is an ab.at");
    // It may sit between the put and the signal; its operands come from before the put
    // (checked), so it moves before the put, where the WQE uses it. One already before the put
    // stays: earlier users of the same `ab.at` (another signal to that flag) need it there.
    let put = signal_after(ctx, signal)
        .and_then(|token| token.defining_op())
        .expect("immediate signals name their put");
    if at.deref(ctx).get_parent_block() == put.deref(ctx).get_parent_block()
        && comes_after(ctx, at, put)
    {
        at.unlink(ctx);
        at.insert_before(ctx, put);
    }
    let index = at.deref(ctx).get_operand(1);
    let index = builder.to_i64(ctx, index);
    let high = builder.constant(ctx, high);
    (builder.binary(ctx, BinaryOperator::Or, high, index), flag)
}

/// Whether `later` follows `earlier` in their (common) block.
fn comes_after(ctx: &Context, later: Ptr<Operation>, earlier: Ptr<Operation>) -> bool {
    let mut cursor = earlier.deref(ctx).get_next();
    while let Some(op) = cursor {
        if op == later {
            return true;
        }
        cursor = op.deref(ctx).get_next();
    }
    false
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
/// would need its slot outside the `ab.if`).
fn is_unbatched_predicated_put(ctx: &Context, op: Ptr<Operation>) -> bool {
    op_name(ctx, op) == "ab.put"
        && put_predicate(ctx, op).is_some()
        && !op.deref(ctx).get_result(0).is_used(ctx)
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
                && crate::comm::signal_after(ctx, *later) == Some(token);
            return fusable.then_some(later_index);
        }
        if !is_pure_scalar(&name) {
            return None;
        }
    }
    None
}

fn member_endpoint(ctx: &Context, member: Ptr<Operation>) -> Value {
    if op_name(ctx, member) == "ab.for" {
        crate::batching::batchable_loop_endpoint(ctx, member)
            .expect("batched loops have one endpoint")
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
        let trip = constant_trip_count(ctx, member).unwrap_or(0);
        let mut per_iteration = 0;
        for op in block_ops(ctx, region_block(ctx, member, 0)) {
            if is_transfer(ctx, op) || op_name(ctx, op) == "ab.for" {
                per_iteration += member_slots(ctx, op, target)?;
            }
        }
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

/// Lowers `ab.wait_signal` to a flag poll: `ld.acquire.sys` when planned, else the library's
/// volatile poll followed by a GPU fence.
pub fn lower_wait_signal(ctx: &mut Context, op: Ptr<Operation>) {
    lower_wait_signal_receiving(ctx, op, None);
}

/// What a wait also does while it polls, in a kernel whose signals do not write flags directly.
#[derive(Clone, Copy, Debug)]
pub enum ReceiveSide {
    /// Write-with-immediate: drain this rank's receive CQ, applying each immediate to its flag
    /// (`gpu.wait_flag %flag, %value, %flag_table, %endpoint_table`).
    Immediates {
        /// The flag region's descriptor table.
        flag_table: Value,
        /// The endpoint table (every handle names the receive context).
        endpoint_table: Value,
    },
    /// Flag-in-data: unpack the flag's packet slot into the data region and set the flag
    /// (`gpu.wait_flag %flag, %value, %flag_table, %data_table [packets]`).
    Packets {
        /// The flag region's descriptor table.
        flag_table: Value,
        /// The destination region's descriptor table.
        data_table: Value,
    },
}

/// [`lower_wait_signal`], with what the poll also does in a kernel whose signals need the
/// receiver's help ([`ReceiveSide`]).
pub fn lower_wait_signal_receiving(
    ctx: &mut Context,
    op: Ptr<Operation>,
    receives: Option<ReceiveSide>,
) {
    let (flag, value) = {
        let operation = op.deref(ctx);
        (operation.get_operand(0), operation.get_operand(1))
    };
    let acquire = attrs::get_string(ctx, op, "order").as_deref() == Some("acquire");
    let mut builder = Builder::before(ctx, op);
    let value = builder.to_i64(ctx, value);
    let mut operands = vec![flag, value];
    match receives {
        Some(ReceiveSide::Immediates {
            flag_table,
            endpoint_table,
        }) => operands.extend([flag_table, endpoint_table]),
        Some(ReceiveSide::Packets {
            flag_table,
            data_table,
        }) => operands.extend([flag_table, data_table]),
        None => {}
    }
    let poll = builder.create::<GpuWaitFlagOp>(ctx, vec![], operands);
    if matches!(receives, Some(ReceiveSide::Packets { .. })) {
        attrs::set_bool(ctx, poll, "packets", true);
    }
    attrs::set_string(
        ctx,
        poll,
        "order",
        if acquire { "acquire" } else { "volatile" },
    );
    if !acquire {
        let fence = builder.create::<GpuFenceOp>(ctx, vec![], vec![]);
        attrs::set_string(ctx, fence, "scope", "gpu");
    }
}

/// Emits `gpu.fence [scope]`.
pub fn emit_fence(ctx: &mut Context, builder: &mut Builder, scope: &str) {
    let fence = builder.create::<GpuFenceOp>(ctx, vec![], vec![]);
    attrs::set_string(ctx, fence, "scope", scope);
}

/// Emits a reservation op `T` (`mlx5.reserve`, `proxy.reserve`) and returns its base slot.
pub fn emit_reserve_op<T: aboleth_ir::pliron::op::Op>(
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
pub fn emit_wait_completion_op<T: aboleth_ir::pliron::op::Op>(
    ctx: &mut Context,
    builder: &mut Builder,
    endpoint: Value,
    slot: Option<(Value, Value)>,
) {
    let mut operands = vec![endpoint];
    if let Some((slot, end)) = slot {
        operands.extend([slot, end]);
    }
    builder.create::<T>(ctx, vec![], operands);
}

/// Emits a put command op `T` (`mlx5.write`, `proxy.put`): endpoint, slot, destination,
/// source, bytes, key, predicate, completion.
pub fn emit_put_op<T: aboleth_ir::pliron::op::Op>(
    ctx: &mut Context,
    builder: &mut Builder,
    command: &Command,
    predicate: Value,
) -> Ptr<Operation> {
    let [destination, source, bytes, key] = put_operands(ctx, builder, command.op);
    let operands = vec![
        command.endpoint,
        command.slot,
        destination,
        source,
        bytes,
        key,
        predicate,
        command.completion,
    ];
    let mut operands = operands;
    if let Some((immediate, flag)) = command.immediate {
        operands.extend([immediate, flag]);
    }
    let op = builder.create::<T>(ctx, vec![], operands);
    if command.immediate.is_some() {
        attrs::set_bool(ctx, op, "with_immediate", true);
    }
    mark_completion_once(ctx, op, command);
    op
}

/// Emits a signal command op `T` (`mlx5.atomic`, `proxy.signal`): endpoint, slot, flag,
/// value, completion, with the signal's `op` and the library `fence` flag.
pub fn emit_signal_op<T: aboleth_ir::pliron::op::Op>(
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
    let operation = crate::comm::signal_operation(ctx, command.op);
    attrs::set(ctx, op, "op", Box::new(operation));
    attrs::set_bool(ctx, op, "fence", command.fenced);
    mark_completion_once(ctx, op, command);
    op
}

/// Marks a command op whose completion is requested only on a loop's last iteration.
fn mark_completion_once(ctx: &Context, op: Ptr<Operation>, command: &Command) {
    if command.completion_once {
        attrs::set_bool(ctx, op, "completion_once", true);
    }
}

/// The operands of an `ab.put` in transport order: destination, source, bytes, key.
pub fn put_operands(ctx: &mut Context, builder: &mut Builder, op: Ptr<Operation>) -> [Value; 4] {
    let (destination, source, bytes, key) = {
        let operation = op.deref(ctx);
        (
            operation.get_operand(operand::put::DESTINATION),
            operation.get_operand(operand::put::SOURCE),
            operation.get_operand(operand::put::BYTES),
            operation.get_operand(operand::put::SOURCE_KEY),
        )
    };
    let bytes = builder.to_i64(ctx, bytes);
    let key = builder.to_i64(ctx, key);
    [destination, source, bytes, key]
}

/// The operands of an `ab.signal` in transport order: flag, value.
pub fn signal_operands(ctx: &mut Context, builder: &mut Builder, op: Ptr<Operation>) -> [Value; 2] {
    let (flag, value) = {
        let operation = op.deref(ctx);
        (
            operation.get_operand(operand::signal::FLAG),
            operation.get_operand(operand::signal::VALUE),
        )
    };
    let value = builder.to_i64(ctx, value);
    [flag, value]
}
