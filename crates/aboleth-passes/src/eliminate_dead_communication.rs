//! `eliminate-dead-communication`: remove puts whose data can never be observed.
//!
//! A put is dead when (1) its predicate is the constant 0, (2) its byte count is the constant 0,
//! or (3) a later put in the same block on the same endpoint writes the same destination with
//! the same size, unconditionally, with no signal, fence, drain, wait or store in between, and
//! the earlier put's token is unused. Case 3 is safe because both puts travel on one in-order
//! queue, so the later data lands last, and nothing can have published the earlier data. On
//! EFA (SRD: unordered) either may land last, since no fence orders them (`ab.fence` is what
//! would); removing the earlier one keeps one of the outcomes the program allowed.
//!
//! Tokens of removed puts: `ab.wait` on them is removed (nothing is outstanding) and a signal's
//! `after` on them is dropped. Signals are never removed: a waiter depends on them.

use aboleth_ir::{
    Diagnostic,
    ab::ops::operand,
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
        value::Value,
    },
    scalar::constant_value,
    text::op_name,
    walk::{all_ops, block_ops},
};

use crate::registry::PassContext;
use crate::support::transfers::{endpoint_of, put_predicate};

/// Runs the pass on every kernel of `module`.
pub fn run(ctx: &mut Context, module: Ptr<Operation>, _: &PassContext) -> Result<bool, Diagnostic> {
    let mut dead = Vec::new();
    for op in all_ops(ctx, module) {
        if op_name(ctx, op) != "ab.put" {
            continue;
        }
        let bytes = constant_value(ctx, op.deref(ctx).get_operand(operand::put::BYTES));
        let predicate = put_predicate(ctx, op).and_then(|p| constant_value(ctx, p));
        if predicate == Some(0) || bytes == Some(0) || is_overwritten(ctx, op) {
            dead.push(op);
        }
    }
    let changed = !dead.is_empty();
    for put in dead {
        remove_put(ctx, put);
    }
    Ok(changed)
}

fn same_destination(ctx: &Context, a: Value, b: Value) -> bool {
    if a == b {
        return true;
    }
    let (Some(at_a), Some(at_b)) = (a.defining_op(), b.defining_op()) else {
        return false;
    };
    let (a, b) = (at_a.deref(ctx), at_b.deref(ctx));
    a.get_operand(0) == b.get_operand(0)
        && match (
            constant_value(ctx, a.get_operand(1)),
            constant_value(ctx, b.get_operand(1)),
        ) {
            (Some(x), Some(y)) => x == y,
            _ => a.get_operand(1) == b.get_operand(1),
        }
}

fn same_size(ctx: &Context, a: Value, b: Value) -> bool {
    a == b
        || matches!((constant_value(ctx, a), constant_value(ctx, b)), (Some(x), Some(y)) if x == y)
}

fn is_overwritten(ctx: &Context, put: Ptr<Operation>) -> bool {
    if put.deref(ctx).get_result(0).is_used(ctx) {
        return false;
    }
    let block = put
        .deref(ctx)
        .get_parent_block()
        .expect("ops live in blocks");
    let ops = block_ops(ctx, block);
    let position = ops
        .iter()
        .position(|op| *op == put)
        .expect("put is in its block");
    let endpoint = endpoint_of(ctx, put);
    let destination = put.deref(ctx).get_operand(operand::put::DESTINATION);
    let bytes = put.deref(ctx).get_operand(operand::put::BYTES);
    for later in &ops[position + 1..] {
        let name = op_name(ctx, *later);
        match name.as_str() {
            "ab.put" => {
                let operation = later.deref(ctx);
                let covers = operation.get_operand(operand::put::ENDPOINT) == endpoint
                    && same_destination(
                        ctx,
                        operation.get_operand(operand::put::DESTINATION),
                        destination,
                    )
                    && same_size(ctx, operation.get_operand(operand::put::BYTES), bytes);
                drop(operation);
                if covers && put_predicate(ctx, *later).is_none() {
                    return true;
                }
            }
            "ab.signal" | "ab.fence" | "ab.drain" | "ab.wait" | "ab.wait_signal" | "ab.store"
            | "ab.for" | "ab.if" | "ab.return" => return false,
            _ => {}
        }
    }
    false
}

fn remove_put(ctx: &mut Context, put: Ptr<Operation>) {
    let token = put.deref(ctx).get_result(0);
    for user in token.uses(ctx).into_iter().map(|u| u.user_op()) {
        match op_name(ctx, user).as_str() {
            "ab.wait" => Operation::erase(user, ctx),
            "ab.signal" => {
                let count = user.deref(ctx).get_num_operands();
                if count > operand::signal::AFTER {
                    Operation::remove_operand(user, ctx, operand::signal::AFTER);
                }
            }
            _ => {}
        }
    }
    Operation::erase(put, ctx);
}
