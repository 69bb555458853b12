//! Questions passes ask about communication ops: which endpoint, which predicate, which
//! `after` token, which root pointer; which ops are pure scalar code; which loops post to one
//! endpoint and can share one reservation; which endpoints have one owner.
//!
//! Shared so that every pass and lowering reads `ab.put`/`ab.signal` operands and the planning
//! attributes the same way, and the pass files hold only their own decision. Nothing here
//! rewrites IR.

use aboleth_abi::Transport;
use aboleth_ir::{
    ab::{
        attributes::{QueueOwner, SignalOperation},
        ops::operand,
    },
    attrs,
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
        value::Value,
    },
    scalar::{constant_trip_count, defined_inside, trip_count_bound},
    text::op_name,
    walk::region_ops,
};

use crate::support::queue_slots::loop_slots_per_iteration;

/// True for the ops that post a command on a queue (`ab.put`, `ab.signal`).
pub fn is_transfer(ctx: &Context, op: Ptr<Operation>) -> bool {
    matches!(op_name(ctx, op).as_str(), "ab.put" | "ab.signal")
}

/// The endpoint operand of a transfer, drain or fence.
pub fn endpoint_of(ctx: &Context, op: Ptr<Operation>) -> Value {
    op.deref(ctx).get_operand(0)
}

/// The optional predicate of an `ab.put`.
pub fn put_predicate(ctx: &Context, op: Ptr<Operation>) -> Option<Value> {
    let operation = op.deref(ctx);
    (operation.get_num_operands() > operand::put::PREDICATE)
        .then(|| operation.get_operand(operand::put::PREDICATE))
}

/// Whether `op` is an `ab.put` whose predicate is not the constant 1.
pub fn is_runtime_predicated_put(ctx: &Context, op: Ptr<Operation>) -> bool {
    op_name(ctx, op) == "ab.put"
        && put_predicate(ctx, op)
            .is_some_and(|predicate| aboleth_ir::scalar::constant_value(ctx, predicate) != Some(1))
}

/// The optional `after` token of an `ab.signal`.
pub fn signal_after(ctx: &Context, op: Ptr<Operation>) -> Option<Value> {
    let operation = op.deref(ctx);
    (operation.get_num_operands() > operand::signal::AFTER)
        .then(|| operation.get_operand(operand::signal::AFTER))
}

/// The signal's operation (`set` when the attribute is absent).
pub fn signal_operation(ctx: &Context, op: Ptr<Operation>) -> SignalOperation {
    attrs::get_typed::<SignalOperation>(ctx, op, "op").unwrap_or(SignalOperation::Set)
}

/// The kernel argument (or other root value) a local pointer is derived from by `ab.ptr_add`.
pub fn pointer_root(ctx: &Context, pointer: Value) -> Value {
    let mut current = pointer;
    while let Some(op) = current.defining_op() {
        if op_name(ctx, op) != "ab.ptr_add" {
            break;
        }
        current = op.deref(ctx).get_operand(0);
    }
    current
}

/// Ops that compute values without side effects; they may sit between batch members, and
/// between a put and the signal that rides on it.
pub fn is_pure_scalar(name: &str) -> bool {
    matches!(
        name,
        "builtin.constant"
            | "ab.binop"
            | "ab.cast"
            | "ab.ptr_add"
            | "ab.at"
            | "ab.remote"
            | "ab.load"
            | "ab.program_id"
            | "ab.rank"
            | "ab.world_size"
    )
}

/// Most queue slots a batched loop whose trip count is known only at run time may take at its
/// trip count's bound: the ring `size-buffers` sizes for it must stay allocatable (mlx5 devices
/// report `max_qp_wr` 32768). A loop past it posts command by command instead.
pub const RUN_TIME_BATCH_SLOTS_MAX: i64 = 1 << 15;

/// The endpoint every transfer in a batchable loop uses, if the loop is batchable: a trip
/// count that is constant, or known at run time before the loop starts and bounded
/// ([`trip_count_bound`]) so that its slots on `target` stay within
/// [`RUN_TIME_BATCH_SLOTS_MAX`]; and a body of pure scalar ops and transfers (or batchable
/// loops with constant trip counts, so every iteration takes the same slots) on one endpoint
/// defined outside it.
pub fn batchable_loop_endpoint(
    ctx: &Context,
    for_op: Ptr<Operation>,
    target: Transport,
) -> Option<Value> {
    let endpoint = loop_body_endpoint(ctx, for_op)?;
    // SRD does not order a signal behind the puts before it: on EFA a signal waits for their
    // completions first, which a batch (one doorbell after every member) cannot do. And a put
    // whose predicate is false would take its slot as an empty write, a network transaction
    // on EFA (there is no local NOP), so predicated puts are posted only when they send.
    if target == Transport::Efa
        && aboleth_ir::walk::all_ops(ctx, for_op)
            .into_iter()
            .any(|op| op_name(ctx, op) == "ab.signal" || is_runtime_predicated_put(ctx, op))
    {
        return None;
    }
    // Ionic has no NOP either: its predicated puts are posted only when they send.
    if target == Transport::Ionic
        && aboleth_ir::walk::all_ops(ctx, for_op)
            .into_iter()
            .any(|op| is_runtime_predicated_put(ctx, op))
    {
        return None;
    }
    if constant_trip_count(ctx, for_op).is_none() {
        let bound = trip_count_bound(ctx, for_op)?;
        let per_iteration = loop_slots_per_iteration(ctx, for_op, target)?;
        bound
            .checked_mul(per_iteration)
            .filter(|slots| *slots <= RUN_TIME_BATCH_SLOTS_MAX)?;
    }
    Some(endpoint)
}

/// The one endpoint of a loop body made of pure scalar ops, transfers and nested loops of the
/// same kind with constant trip counts.
fn loop_body_endpoint(ctx: &Context, for_op: Ptr<Operation>) -> Option<Value> {
    let mut endpoint = None;
    for op in region_ops(ctx, for_op, 0) {
        let name = op_name(ctx, op);
        if is_transfer(ctx, op) {
            let this = endpoint_of(ctx, op);
            if defined_inside(ctx, this, for_op) || endpoint.is_some_and(|e| e != this) {
                return None;
            }
            endpoint = Some(this);
        } else if name == "ab.for" {
            constant_trip_count(ctx, op)?;
            let inner = loop_body_endpoint(ctx, op)?;
            if endpoint.is_some_and(|e| e != inner) {
                return None;
            }
            endpoint = Some(inner);
        } else if !(is_pure_scalar(&name) || name == "ab.yield") {
            return None;
        }
    }
    endpoint
}

/// True when `assign-queue-owners` found the endpoint to have one owner.
pub fn has_single_owner(ctx: &Context, endpoint: Value) -> bool {
    endpoint
        .defining_op()
        .and_then(|op| attrs::get_typed::<QueueOwner>(ctx, op, "owner"))
        == Some(QueueOwner::Program)
}
