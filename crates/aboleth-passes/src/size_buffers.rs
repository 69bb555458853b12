//! `size-buffers`: record how many queue slots each endpoint needs in flight.
//!
//! For every `ab.endpoint`, sums the slots (WQE basic blocks on mlx5, ring entries on proxy) of
//! the transfers posted on it between completion points (`ab.wait`, `ab.drain`), with loops
//! multiplied out by their trip count or, when that is known only at run time, its bound
//! (`scalar::trip_count_bound`), and records the largest such reuse distance as `queue_slots`
//! (a power of two, at least 64; on Ionic, whose ring keeps one slot empty, one more than the
//! distance before rounding). The runtime and the simulator size the ring from it; a batch can
//! then never exceed the ring. Loops with unbounded trip counts record
//! `queue_slots_unbounded`; they are not batched, and the reservations reclaim the ring
//! through mlx5's periodic completions. p2p has no queue: nothing is recorded.

use aboleth_abi::Transport;
use std::collections::HashMap;

use aboleth_ir::{
    Diagnostic, attrs,
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
        value::Value,
    },
    scalar::{enclosing_loops, trip_count_bound},
    text::op_name,
    walk::all_ops,
};

use crate::registry::PassContext;
use crate::support::{
    queue_slots::slots_of,
    transfers::{endpoint_of, is_transfer},
};

/// Smallest ring the runtime allocates.
pub const QUEUE_SLOTS_MIN: i64 = 64;

/// Runs the pass on every kernel of `module`.
pub fn run(
    ctx: &mut Context,
    module: Ptr<Operation>,
    pass: &PassContext,
) -> Result<bool, Diagnostic> {
    if matches!(pass.target, Transport::P2p) {
        return Ok(false);
    }
    // endpoint -> (slots since the last completion point, maximum seen, unbounded)
    let mut in_flight: HashMap<Value, (i64, i64, bool)> = HashMap::new();
    for op in all_ops(ctx, module) {
        let name = op_name(ctx, op);
        if is_transfer(ctx, op) {
            let endpoint = endpoint_of(ctx, op);
            let mut multiplicity = Some(1i64);
            for loop_op in enclosing_loops(ctx, op) {
                multiplicity = multiplicity
                    .zip(trip_count_bound(ctx, loop_op))
                    .and_then(|(a, b)| a.checked_mul(b));
            }
            let entry = in_flight.entry(endpoint).or_insert((0, 0, false));
            match (multiplicity, slots_of(ctx, op, pass.target)) {
                // A count past i64 (constant trip counts near i64::MAX) is unbounded.
                (Some(m), Some(slots)) => match m
                    .checked_mul(slots)
                    .and_then(|added| entry.0.checked_add(added))
                {
                    Some(total) => {
                        entry.0 = total;
                        entry.1 = entry.1.max(total);
                    }
                    None => entry.2 = true,
                },
                _ => entry.2 = true,
            }
        } else if name == "ab.drain" || name == "ab.wait" {
            // A completion point retires everything before it (RC completions are cumulative).
            for entry in in_flight.values_mut() {
                entry.0 = 0;
            }
        }
    }
    let mut changed = false;
    for op in all_ops(ctx, module) {
        if op_name(ctx, op) != "ab.endpoint" {
            continue;
        }
        let endpoint = op.deref(ctx).get_result(0);
        let Some((_, maximum, unbounded)) = in_flight.get(&endpoint).copied() else {
            continue;
        };
        if unbounded {
            attrs::set_bool(ctx, op, "queue_slots_unbounded", true);
        }
        // An Ionic ring keeps one slot empty (rdma-core's `ionic_queue_full`): a batch of as many
        // slots as the ring has could never be reserved there.
        let usable = if pass.target == aboleth_abi::Transport::Ionic {
            maximum.max(1).saturating_add(1)
        } else {
            maximum.max(1)
        };
        let slots = (usable as u64).next_power_of_two() as i64;
        attrs::set_int(ctx, op, "queue_slots", slots.max(QUEUE_SLOTS_MIN));
        changed = true;
    }
    Ok(changed)
}
