//! `choose-doorbell-scope`: let a warp or the whole CTA write a batched loop's commands, and
//! ring the batch's one doorbell after a barrier.
//!
//! Facts used: the `batch` and `doorbell = "batch"` attributes of a loop member, its constant
//! trip count, its endpoint's `owner`, and `ttir_unlifted_work` (set by the Triton lifting
//! when the loop's TTIR holds work the lifting did not take). A batched `ab.for` whose batch
//! rings one doorbell, whose endpoint has one owner, that runs at least twice, whose body is
//! all lifted, and that is not inside another batched loop (an inner loop runs whole in each
//! thread) gets `doorbell_scope = "warp"` (up to 32 iterations: one warp writes them in one
//! step, and a warp barrier is cheaper than a CTA one) or `"cta"` (more iterations). Every
//! other batch keeps the default scope `thread`: the program's leader writes every command.
//! The loop's bounds must be constants small enough that the spread counter (`lower + t * step`,
//! stride `step * T`) cannot overflow a 32-bit Triton loop counter.
//!
//! What the lowering then does: the reservation is made by the leader as before and its base
//! is broadcast (the owner's reservation counter is read back after a barrier); iteration `i`
//! of the loop runs on thread `i mod T` of the scope (`T` = 32, or the CTA's size); a barrier
//! of the scope follows the loop, and the leader writes the doorbell record and rings. Why it
//! is safe: iterations of a batched loop are independent (their body is pure scalar code and
//! commands at slots computed from the loop counter, so no iteration reads another's results),
//! every slot is still written exactly once, and the barrier orders every thread's command
//! writes before the leader's release of the doorbell record (PTX barriers order memory among
//! the threads they synchronize, and a release is cumulative over what it observed). Shared
//! queues keep thread scope: their base comes from an atomic only the leader sees.
//! Not for p2p: its copies already spread over the whole program.

use aboleth_abi::Transport;
use aboleth_ir::{
    Diagnostic, attrs,
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
    },
    scalar::{constant_trip_count, constant_value},
    text::op_name,
    walk::all_ops,
};

use crate::registry::PassContext;
use crate::support::transfers::{batchable_loop_endpoint, has_single_owner};

/// Iterations one warp writes in one step.
pub const WARP_LANES: i64 = 32;

/// Runs the pass on every kernel of `module`.
pub fn run(
    ctx: &mut Context,
    module: Ptr<Operation>,
    pass: &PassContext,
) -> Result<bool, Diagnostic> {
    if !matches!(pass.target, Transport::Mlx5 | Transport::Proxy) {
        return Ok(false);
    }
    let mut changed = false;
    for op in all_ops(ctx, module) {
        if op_name(ctx, op) != "ab.for"
            || attrs::get_int(ctx, op, "batch").is_none()
            || attrs::get_string(ctx, op, "doorbell").as_deref() != Some("batch")
            || attrs::get_bool(ctx, op, "ttir_unlifted_work")
        {
            continue;
        }
        let Some(trip) = constant_trip_count(ctx, op) else {
            continue;
        };
        let Some(endpoint) = batchable_loop_endpoint(ctx, op, pass.target) else {
            continue;
        };
        // Only the outermost loop of a batch is spread: an inner one runs whole in each thread.
        if trip < 2
            || !has_single_owner(ctx, endpoint)
            || inside_batched_loop(ctx, op)
            || !spread_counter_fits(ctx, op)
        {
            continue;
        }
        let scope = if trip <= WARP_LANES { "warp" } else { "cta" };
        attrs::set_string(ctx, op, "doorbell_scope", scope);
        changed = true;
    }
    Ok(changed)
}

/// Most threads a CTA-scope loop may be spread over (CUDA's block size limit).
pub const CTA_THREADS_MAX: i64 = 1024;

/// Whether the spread loop's counter stays in 32 bits (the Triton counter may be `i32`): thread
/// `t` starts at `lower + t * step` and strides by `step * T`, so `upper + step * T` must fit,
/// for every `T` up to [`CTA_THREADS_MAX`]. The bounds must be constants.
fn spread_counter_fits(ctx: &Context, for_op: Ptr<Operation>) -> bool {
    let operand = |index| constant_value(ctx, for_op.deref(ctx).get_operand(index));
    let (Some(lower), Some(upper), Some(step)) = (operand(0), operand(1), operand(2)) else {
        return false;
    };
    let reach = step
        .checked_mul(CTA_THREADS_MAX)
        .and_then(|stride| upper.max(lower).checked_add(stride));
    lower >= i64::from(i32::MIN) && reach.is_some_and(|reach| reach <= i64::from(i32::MAX))
}

/// Whether an enclosing `ab.for` is itself a batch member.
fn inside_batched_loop(ctx: &Context, op: Ptr<Operation>) -> bool {
    let mut parent = op.deref(ctx).get_parent_op(ctx);
    while let Some(ancestor) = parent {
        if op_name(ctx, ancestor) == "ab.for" && attrs::get_int(ctx, ancestor, "batch").is_some() {
            return true;
        }
        parent = ancestor.deref(ctx).get_parent_op(ctx);
    }
    false
}
