//! Questions passes ask about communication ops: which endpoint, which predicate, which
//! `after` token, which root pointer; which ops are pure scalar code; which loops post to one
//! endpoint; which endpoints have one owner.
//!
//! Shared so that every pass and lowering reads `ab.put`/`ab.signal` operands and the planning
//! attributes the same way, and the pass files hold only their own decision. Nothing here
//! rewrites IR.

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
    scalar::{constant_trip_count, defined_inside},
    text::op_name,
    walk::region_ops,
};

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

/// The endpoint every transfer in a batchable loop uses, if the loop is batchable: a constant
/// trip count, and a body of pure scalar ops and transfers (or batchable loops) on one endpoint
/// defined outside it.
pub fn batchable_loop_endpoint(ctx: &Context, for_op: Ptr<Operation>) -> Option<Value> {
    constant_trip_count(ctx, for_op)?;
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
            let inner = batchable_loop_endpoint(ctx, op)?;
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
