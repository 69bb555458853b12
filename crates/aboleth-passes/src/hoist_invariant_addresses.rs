//! `hoist-invariant-addresses`: compute a remote address (`ab.at`) whose region and offset do
//! not change across a loop once, before the loop, instead of in every iteration.
//!
//! Facts used: an `ab.for` with a constant trip count of at least one, and an `ab.at r, o` in
//! its body's own block (not under an `ab.if` or a nested loop) whose operands are defined
//! outside the loop, or are constants defined in the body (which move with it). Rewrite: the
//! `ab.at` (and those constants) move to just before the loop; applied until nothing moves, so
//! an address invariant in several nested loops leaves all of them.
//!
//! Why it is safe: `ab.at` reads only the region's descriptor (written by the runtime before the
//! launch and never by kernels) and computes an address: it has no effect, and its value depends
//! only on its operands, which are the same in every iteration. The loop runs at least once and
//! the `ab.at` runs unconditionally in it, so the hoisted one computes the value the first
//! iteration computed (and reads the same descriptor) without adding an evaluation on any
//! path. Why it pays: generated code reads the descriptor at the `ab.at`; in a loop of rounds
//! that read sits on the critical path after each round's wait. What it does not do: addresses
//! that depend on the loop's variable, loops that may run zero times or have unknown trip
//! counts, `ab.at` under a condition, or any other op.

use aboleth_ir::{
    Diagnostic, attrs,
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
        value::Value,
    },
    scalar::{constant_trip_count, constant_value, defined_inside},
    text::op_name,
    walk::{all_ops, block_ops, kernels, region_block},
};

use crate::registry::PassContext;

/// Runs the pass on every kernel of `module`.
pub fn run(ctx: &mut Context, module: Ptr<Operation>, _: &PassContext) -> Result<bool, Diagnostic> {
    let mut changed = false;
    for kernel in kernels(ctx, module) {
        // Until nothing moves: an address hoisted out of an inner loop may leave the outer one.
        loop {
            let loops: Vec<Ptr<Operation>> = all_ops(ctx, kernel)
                .into_iter()
                .filter(|op| op_name(ctx, *op) == "ab.for")
                .collect();
            let mut moved_any = false;
            for for_op in loops {
                let moved = hoist_out_of(ctx, for_op);
                if moved > 0 {
                    let before = attrs::get_int(ctx, for_op, "addresses_hoisted").unwrap_or(0);
                    attrs::set_int(ctx, for_op, "addresses_hoisted", before + moved);
                    moved_any = true;
                }
            }
            if !moved_any {
                break;
            }
            changed = true;
        }
    }
    Ok(changed)
}

/// Moves every hoistable `ab.at` of `for_op`'s body (with the body constants it uses) before
/// the loop; returns how many `ab.at` moved.
fn hoist_out_of(ctx: &mut Context, for_op: Ptr<Operation>) -> i64 {
    if constant_trip_count(ctx, for_op).is_none_or(|trip| trip < 1) {
        return 0;
    }
    let body = region_block(ctx, for_op, 0);
    let mut moved = 0;
    for op in block_ops(ctx, body) {
        if op_name(ctx, op) != "ab.at" {
            continue;
        }
        let operands: Vec<Value> = op.deref(ctx).operands().collect();
        let movable_constants: Option<Vec<Ptr<Operation>>> = operands
            .iter()
            .filter(|operand| defined_inside(ctx, **operand, for_op))
            .map(|operand| body_constant(ctx, *operand, body))
            .collect();
        let Some(constants) = movable_constants else {
            continue;
        };
        for constant in constants {
            constant.unlink(ctx);
            constant.insert_before(ctx, for_op);
        }
        op.unlink(ctx);
        op.insert_before(ctx, for_op);
        moved += 1;
    }
    moved
}

/// The `builtin.constant` op defining `value` directly in `body`, if that is what defines it
/// (a constant has no operands, so it can move anywhere its uses are dominated).
fn body_constant(
    ctx: &Context,
    value: Value,
    body: Ptr<aboleth_ir::pliron::basic_block::BasicBlock>,
) -> Option<Ptr<Operation>> {
    let op = value.defining_op()?;
    let in_body = op.deref(ctx).get_parent_block() == Some(body);
    (in_body && constant_value(ctx, value).is_some() && op_name(ctx, op) == "builtin.constant")
        .then_some(op)
}
