//! `batch-commands`: group consecutive commands on one queue under one reservation.
//!
//! Facts used: program order within a block, the endpoint of each transfer, and constant trip
//! counts. A batch is a maximal run, in one block, of members on the same endpoint, where a
//! member is an `ab.put`/`ab.signal`, or an `ab.for` with a constant trip count whose body holds
//! only pure scalar ops and transfers on that endpoint (so the slots it takes are known before
//! it starts). Pure scalar ops (`builtin.constant`, `ab.binop`, `ab.cast`, `ab.ptr_add`,
//! `ab.at`, `ab.remote`, `ab.load`) between members do not end a run; anything else does
//! (waits, drains, fences, stores, `ab.if`, transfers on another endpoint). Members get the
//! attribute `batch = N`. Program order inside a batch is kept, so every ordering the program
//! had on the queue still holds; only the reservation is shared. A predicated put stays a
//! member: its slot is filled with a NOP when the predicate is false.

use aboleth_ir::{
    Diagnostic, attrs,
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
        value::Value,
    },
    text::op_name,
    walk::{all_ops, block_ops},
};

use crate::registry::PassContext;
use crate::support::transfers::{
    batchable_loop_endpoint, endpoint_of, is_pure_scalar, is_transfer,
};

/// Runs the pass on every block of `module`.
pub fn run(ctx: &mut Context, module: Ptr<Operation>, _: &PassContext) -> Result<bool, Diagnostic> {
    let mut blocks = Vec::new();
    for op in all_ops(ctx, module) {
        if let Some(block) = op.deref(ctx).get_parent_block()
            && !blocks.contains(&block)
        {
            blocks.push(block);
        }
    }
    let mut next_batch = 0i64;
    let mut changed = false;
    for block in blocks {
        // The body of a loop that is itself a batch member was handled with its loop.
        if let Some(parent) = block.deref(ctx).get_parent_op(ctx)
            && op_name(ctx, parent) == "ab.for"
            && attrs::get_int(ctx, parent, "batch").is_some()
        {
            continue;
        }
        let mut current: Option<(Value, Vec<Ptr<Operation>>)> = None;
        let mut runs: Vec<Vec<Ptr<Operation>>> = Vec::new();
        for op in block_ops(ctx, block) {
            let name = op_name(ctx, op);
            let member_endpoint = if is_transfer(ctx, op) {
                // Transfers inside a batchable loop are handled with their loop.
                Some(endpoint_of(ctx, op))
            } else if name == "ab.for" {
                batchable_loop_endpoint(ctx, op)
            } else {
                None
            };
            match member_endpoint {
                Some(endpoint) => match &mut current {
                    Some((run_endpoint, members)) if *run_endpoint == endpoint => members.push(op),
                    _ => {
                        if let Some((_, members)) = current.take() {
                            runs.push(members);
                        }
                        current = Some((endpoint, vec![op]));
                    }
                },
                None if is_pure_scalar(&name) => {}
                None => {
                    if let Some((_, members)) = current.take() {
                        runs.push(members);
                    }
                }
            }
        }
        if let Some((_, members)) = current.take() {
            runs.push(members);
        }
        for members in runs {
            // Only transfers can be in an already-lowered or nested-loop batch; mark all.
            for member in &members {
                attrs::set_int(ctx, *member, "batch", next_batch);
                if op_name(ctx, *member) == "ab.for" {
                    for inner in all_ops(ctx, *member) {
                        if is_transfer(ctx, inner) || op_name(ctx, inner) == "ab.for" {
                            attrs::set_int(ctx, inner, "batch", next_batch);
                        }
                    }
                }
            }
            next_batch += 1;
            changed = true;
        }
    }
    Ok(changed)
}
