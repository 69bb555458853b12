//! `elide-epochs`: derive epoch counters from loop counters instead of loading and storing them
//! every iteration.
//!
//! Facts used: a loop with a constant trip count whose body (its own block, not nested ops)
//! holds exactly one `e = ab.load p` and one later `ab.store p, e + k` (`k` a constant, `e` an
//! `i64`), where `p` is defined outside the loop and nothing else in the loop reads or writes
//! memory through `p`'s root pointer, and no `ab.wait_signal` in the kernel polls that root.
//! Rewrite: one `base = ab.load p` before the loop; inside, `e` becomes
//! `base + ((i - lower) / step) * k`; one `ab.store p, base + trip * k` after the loop. The loop
//! is then free of stores, so `batch-commands` can make it one batch.
//!
//! Why it is safe: plain memory behind `ab.load`/`ab.store` is private to the program unless it
//! is published to it through `ab.wait_signal` (the programming model's data-race-freedom rule),
//! so no other agent can change `*p` during the loop; iteration `j` then loads `base + j * k`
//! and the final value is `base + trip * k`, exactly as before. What it does not do: counters
//! updated conditionally, by a non-constant step, through several pointers, or in nested
//! blocks; those keep their loads and stores.

use aboleth_ir::{
    Diagnostic,
    ab::{
        attributes::BinaryOperator,
        ops::{BinaryOp, LoadOp, StoreOp},
    },
    attrs,
    builder::Builder,
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
        r#type::Typed,
        value::Value,
    },
    scalar::{constant_trip_count, constant_value, defined_inside, integer_width},
    text::op_name,
    walk::{all_ops, block_ops, kernels, region_block},
};

use crate::registry::PassContext;
use crate::support::transfers::pointer_root;

/// Runs the pass on every kernel of `module`.
pub fn run(ctx: &mut Context, module: Ptr<Operation>, _: &PassContext) -> Result<bool, Diagnostic> {
    let mut changed = false;
    for kernel in kernels(ctx, module) {
        let polled_roots: Vec<Value> = all_ops(ctx, kernel)
            .into_iter()
            .filter(|op| op_name(ctx, *op) == "ab.wait_signal")
            .map(|op| pointer_root(ctx, op.deref(ctx).get_operand(0)))
            .collect();
        // Collected first: the rewrite erases ops that a live walk would visit.
        let loops: Vec<Ptr<Operation>> = all_ops(ctx, kernel)
            .into_iter()
            .filter(|op| op_name(ctx, *op) == "ab.for")
            .collect();
        for for_op in loops {
            let Some(trip) = constant_trip_count(ctx, for_op).filter(|trip| *trip > 0) else {
                continue;
            };
            let mut elided = 0;
            while let Some(counter) = find_counter(ctx, for_op, &polled_roots) {
                rewrite(ctx, for_op, trip, counter);
                elided += 1;
            }
            if elided > 0 {
                attrs::set_int(ctx, for_op, "epochs_elided", elided);
                changed = true;
            }
        }
    }
    Ok(changed)
}

/// A counter in a loop: its load, its store, and the constant added per iteration.
struct Counter {
    load: Ptr<Operation>,
    store: Ptr<Operation>,
    increment: i64,
}

fn find_counter(ctx: &Context, for_op: Ptr<Operation>, polled_roots: &[Value]) -> Option<Counter> {
    let body = block_ops(ctx, region_block(ctx, for_op, 0));
    let inside = all_ops(ctx, for_op);
    for (position, load) in body.iter().enumerate() {
        if op_name(ctx, *load) != "ab.load" {
            continue;
        }
        let pointer = load.deref(ctx).get_operand(0);
        let loaded = load.deref(ctx).get_result(0);
        if defined_inside(ctx, pointer, for_op) || integer_width(ctx, loaded) != Some(64) {
            continue;
        }
        let root = pointer_root(ctx, pointer);
        if polled_roots.contains(&root) {
            continue;
        }
        let Some(store) = body[position + 1..]
            .iter()
            .copied()
            .find(|op| op_name(ctx, *op) == "ab.store" && op.deref(ctx).get_operand(0) == pointer)
        else {
            continue;
        };
        let Some(increment) = increment_of(ctx, store.deref(ctx).get_operand(1), loaded) else {
            continue;
        };
        // Nothing else in the loop may touch memory through the same root.
        let touches_root = |op: Ptr<Operation>| -> bool {
            let name = op_name(ctx, op);
            let pointer_operand = match name.as_str() {
                "ab.load" | "ab.store" | "ab.wait_signal" => Some(0),
                "ab.put" => Some(aboleth_ir::ab::ops::operand::put::SOURCE),
                _ => None,
            };
            pointer_operand
                .is_some_and(|index| pointer_root(ctx, op.deref(ctx).get_operand(index)) == root)
        };
        if inside
            .iter()
            .any(|op| *op != *load && *op != store && touches_root(*op))
        {
            continue;
        }
        return Some(Counter {
            load: *load,
            store,
            increment,
        });
    }
    None
}

/// `k` when `value` is `loaded + k` or `k + loaded` with a constant `k`.
fn increment_of(ctx: &Context, value: Value, loaded: Value) -> Option<i64> {
    let op = value.defining_op()?;
    let binary = Operation::get_op::<BinaryOp>(op, ctx)?;
    if binary.operator(ctx) != BinaryOperator::Add {
        return None;
    }
    let (lhs, rhs) = {
        let operation = op.deref(ctx);
        (operation.get_operand(0), operation.get_operand(1))
    };
    if lhs == loaded {
        constant_value(ctx, rhs)
    } else if rhs == loaded {
        constant_value(ctx, lhs)
    } else {
        None
    }
}

fn rewrite(ctx: &mut Context, for_op: Ptr<Operation>, trip: i64, counter: Counter) {
    let pointer = counter.load.deref(ctx).get_operand(0);
    let loaded = counter.load.deref(ctx).get_result(0);
    let ty = loaded.get_type(ctx);
    let (lower, step) = {
        let operation = for_op.deref(ctx);
        (operation.get_operand(0), operation.get_operand(2))
    };
    let induction = region_block(ctx, for_op, 0).deref(ctx).get_argument(0);

    let mut before = Builder::before(ctx, for_op);
    let base_load = before.create::<LoadOp>(ctx, vec![ty], vec![pointer]);
    let base = base_load.deref(ctx).get_result(0);

    let mut inside = Builder::before(ctx, counter.load);
    let distance = inside.binary(ctx, BinaryOperator::Sub, induction, lower);
    let iteration = inside.binary(ctx, BinaryOperator::Div, distance, step);
    let increment = inside.constant(ctx, counter.increment);
    let offset = inside.binary(ctx, BinaryOperator::Mul, iteration, increment);
    let current = inside.binary(ctx, BinaryOperator::Add, base, offset);
    loaded.replace_all_uses_with(ctx, &current);
    Operation::erase(counter.load, ctx);
    Operation::erase(counter.store, ctx);

    let mut after = Builder::after(ctx, for_op);
    let total = after.constant(ctx, trip * counter.increment);
    let last = after.binary(ctx, BinaryOperator::Add, base, total);
    after.create::<StoreOp>(ctx, vec![], vec![pointer, last]);
}
