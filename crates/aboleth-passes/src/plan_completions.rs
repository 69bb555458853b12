//! `plan-completions`: request a completion only where something waits for one.
//!
//! Facts used: which tokens `ab.wait` consumes; where `ab.drain` and the kernel's end are;
//! which local stores overwrite a put's source (same root pointer, same block, later).
//! Decisions, as the `completion` attribute of each transfer:
//! - `always` for a transfer whose token is waited on, and for the last transfer on each
//!   endpoint before a drain or the kernel's end (RC completions are cumulative, so one
//!   completion retires everything posted before it on the queue);
//! - `last_iteration` for such a last transfer inside constant-trip-count loops that do not
//!   also contain the drain: only the final iteration asks for the completion (a drain in the
//!   same loop body needs it every iteration: `always`);
//! - `always` for a non-inline put whose source is overwritten by a later `ab.store` before any
//!   completion point, and an `ab.wait` on it is inserted before the store: the source must not
//!   change while the NIC or the proxy may still read it;
//! - `never` for everything else.
//!
//! A transfer inside an `ab.if` cannot be relied on to execute, so when the last transfer of
//! an endpoint is conditional, every transfer on that endpoint keeps `always`.
//! Without this pass every transfer requests a completion (library style).

use std::collections::HashMap;

use aboleth_ir::{
    Diagnostic,
    ab::ops::{WaitOp, operand},
    attrs,
    builder::Builder,
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
        value::Value,
    },
    scalar::{constant_trip_count, enclosing_loops},
    text::op_name,
    walk::{all_ops, block_ops, kernels},
};

use crate::registry::PassContext;
use crate::support::transfers::{endpoint_of, is_transfer, pointer_root};

/// Runs the pass on every kernel of `module`.
pub fn run(ctx: &mut Context, module: Ptr<Operation>, _: &PassContext) -> Result<bool, Diagnostic> {
    let mut changed = false;
    for kernel in kernels(ctx, module) {
        changed |= plan_kernel(ctx, kernel);
    }
    Ok(changed)
}

fn plan_kernel(ctx: &mut Context, kernel: Ptr<Operation>) -> bool {
    let ops = all_ops(ctx, kernel);
    let mut decision: HashMap<Ptr<Operation>, &'static str> = HashMap::new();
    for op in &ops {
        if is_transfer(ctx, *op) {
            decision.insert(*op, "never");
        }
    }
    // Waited tokens.
    for op in &ops {
        if op_name(ctx, *op) == "ab.wait"
            && let Some(producer) = op.deref(ctx).get_operand(0).defining_op()
        {
            decision.insert(producer, "always");
        }
    }
    // The last transfer on each endpoint before each drain, and before the end.
    let mut last_on: HashMap<Value, Ptr<Operation>> = HashMap::new();
    let mut conditional_endpoints: Vec<Value> = Vec::new();
    let mut mark_last = |ctx: &Context,
                         decision: &mut HashMap<Ptr<Operation>, &'static str>,
                         last: Ptr<Operation>,
                         completion_point: Option<Ptr<Operation>>| {
        if aboleth_ir::scalar::inside_if(ctx, last) {
            conditional_endpoints.push(endpoint_of(ctx, last));
            return;
        }
        // Only the loops left before reaching the drain matter: a drain inside the same loop
        // runs every iteration and needs the completion every iteration.
        // Nor do loops around the endpoint's own definition: each iteration there is another
        // queue, whose last transfer is in that iteration.
        let mut outer_loops = completion_point
            .map(|point| enclosing_loops(ctx, point))
            .unwrap_or_default();
        if let Some(definition) = endpoint_of(ctx, last).defining_op() {
            outer_loops.extend(enclosing_loops(ctx, definition));
        }
        let loops: Vec<_> = enclosing_loops(ctx, last)
            .into_iter()
            .filter(|l| !outer_loops.contains(l))
            .collect();
        let constant =
            !loops.is_empty() && loops.iter().all(|l| constant_trip_count(ctx, *l).is_some());
        let current = decision.get(&last).copied().unwrap_or("never");
        if current != "always" {
            decision.insert(last, if constant { "last_iteration" } else { "always" });
        }
    };
    for op in &ops {
        let name = op_name(ctx, *op);
        if is_transfer(ctx, *op) {
            last_on.insert(endpoint_of(ctx, *op), *op);
        } else if name == "ab.drain" {
            let endpoint = endpoint_of(ctx, *op);
            if let Some(last) = last_on.remove(&endpoint) {
                mark_last(ctx, &mut decision, last, Some(*op));
            }
        }
    }
    for (_, last) in last_on.drain() {
        mark_last(ctx, &mut decision, last, None);
    }
    for endpoint in conditional_endpoints {
        for (op, choice) in decision.iter_mut() {
            if endpoint_of(ctx, *op) == endpoint {
                *choice = "always";
            }
        }
    }
    // Sources overwritten before a completion point.
    let mut waits_to_insert = Vec::new();
    for op in &ops {
        if op_name(ctx, *op) != "ab.put" || attrs::get_bool(ctx, *op, "inline") {
            continue;
        }
        if let Some(store) = overwriting_store(ctx, *op) {
            decision.insert(*op, "always");
            waits_to_insert.push((*op, store));
        }
    }
    let changed = !decision.is_empty();
    for (op, choice) in decision {
        attrs::set_string(ctx, op, "completion", choice);
    }
    for (put, store) in waits_to_insert {
        let token = put.deref(ctx).get_result(0);
        let mut builder = Builder::before(ctx, store);
        builder.create::<WaitOp>(ctx, vec![], vec![token]);
    }
    changed
}

/// A later `ab.store` in the put's block to the put's source buffer, with no wait on the put
/// and no drain of its endpoint in between.
fn overwriting_store(ctx: &Context, put: Ptr<Operation>) -> Option<Ptr<Operation>> {
    let block = put.deref(ctx).get_parent_block()?;
    let ops = block_ops(ctx, block);
    let position = ops.iter().position(|op| *op == put)?;
    let source_root = pointer_root(ctx, put.deref(ctx).get_operand(operand::put::SOURCE));
    let token = put.deref(ctx).get_result(0);
    let endpoint = endpoint_of(ctx, put);
    for later in &ops[position + 1..] {
        match op_name(ctx, *later).as_str() {
            "ab.wait" if later.deref(ctx).get_operand(0) == token => return None,
            "ab.drain" if endpoint_of(ctx, *later) == endpoint => return None,
            "ab.store" => {
                let target = pointer_root(ctx, later.deref(ctx).get_operand(0));
                if target == source_root {
                    return Some(*later);
                }
            }
            _ => {}
        }
    }
    None
}
