//! `batch-commands`: group consecutive commands on one queue under one reservation.
//!
//! Facts used: program order within a block, the endpoint of each transfer, and loop trip
//! counts. A batch is a maximal run, in one block, of members on the same endpoint, where a
//! member is an `ab.put`/`ab.signal`, or an `ab.for` whose body holds only pure scalar ops and
//! transfers on that endpoint (nested loops with constant trip counts allowed), so that the
//! slots it takes are known before it starts: its trip count is a constant, or is computed at
//! run time from values defined before the batch's first member and bounded
//! (`scalar::trip_count_bound`: `count = min(load(..), MAX)`, `count % N`, ...) so that the
//! ring can be sized for the bound. Such a loop (MoE's compacted tokens, one put each) then
//! takes one reservation and one doorbell with the signal after it, not one per token. Pure scalar ops (`builtin.constant`, `ab.binop`, `ab.cast`, `ab.ptr_add`,
//! `ab.at`, `ab.remote`, `ab.load`) between members do not end a run; anything else does
//! (waits, drains, fences, stores, `ab.if`, transfers on another endpoint). Members get the
//! attribute `batch = N`. Program order inside a batch is kept, so every ordering the program
//! had on the queue still holds; only the reservation is shared. A predicated put stays a
//! member: its slot is filled with a NOP when the predicate is false.
//!
//! On EFA a signal never follows another member of its batch, and a loop holding a signal is
//! not a member: SRD delivers a queue's writes in any order, so the lowering must wait for the
//! completions of the commands before a signal, which are only posted at the batch's doorbell.
//! A signal there starts a new batch (the puts after it may join it). A put with a run-time
//! predicate is not a member on EFA (nor on Ionic) either: its slot would be filled by an empty
//! write, which is a network transaction there, not a local NOP.

use aboleth_abi::Transport;
use aboleth_ir::{
    Diagnostic, attrs,
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
        value::Value,
    },
    scalar::constant_trip_count,
    text::op_name,
    walk::{all_ops, block_ops},
};

use crate::registry::PassContext;
use crate::support::transfers::{
    batchable_loop_endpoint, endpoint_of, is_pure_scalar, is_runtime_predicated_put, is_transfer,
};

/// Runs the pass on every block of `module`.
pub fn run(
    ctx: &mut Context,
    module: Ptr<Operation>,
    pass: &PassContext,
) -> Result<bool, Diagnostic> {
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
            let member_endpoint = if matches!(pass.target, Transport::Efa | Transport::Ionic)
                && is_runtime_predicated_put(ctx, op)
            {
                // An empty write is a network transaction on EFA and Ionic (no local NOP):
                // post the put only if it sends.
                None
            } else if is_transfer(ctx, op) {
                // Transfers inside a batchable loop are handled with their loop.
                Some(endpoint_of(ctx, op))
            } else if name == "ab.for" {
                batchable_loop_endpoint(ctx, op, pass.target)
            } else {
                None
            };
            let unordered_signal = pass.target == Transport::Efa && name == "ab.signal";
            match member_endpoint {
                Some(endpoint) => match &mut current {
                    // The run's reservation is emitted before its first member: a run-time trip
                    // count computed after that member starts a new run.
                    Some((run_endpoint, members))
                        if *run_endpoint == endpoint
                            && !unordered_signal
                            && trip_count_available_before(ctx, op, members[0]) =>
                    {
                        members.push(op)
                    }
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

/// True when `member` is not a loop with a run-time trip count, or its bounds and step are
/// defined before `first` (in an enclosing block, or earlier in `first`'s block): a
/// reservation before `first` can count its iterations.
fn trip_count_available_before(
    ctx: &Context,
    member: Ptr<Operation>,
    first: Ptr<Operation>,
) -> bool {
    if op_name(ctx, member) != "ab.for" || constant_trip_count(ctx, member).is_some() {
        return true;
    }
    let block = first.deref(ctx).get_parent_block();
    let ops = block.map(|block| block_ops(ctx, block)).unwrap_or_default();
    let first_index = ops.iter().position(|op| *op == first);
    member
        .deref(ctx)
        .operands()
        .all(|bound| match bound.defining_op() {
            Some(definition) if definition.deref(ctx).get_parent_block() == block => {
                ops.iter().position(|op| *op == definition) < first_index
            }
            // Block arguments and values of enclosing blocks dominate the whole block.
            _ => true,
        })
}
