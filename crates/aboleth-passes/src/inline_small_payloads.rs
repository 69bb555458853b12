//! `inline-small-payloads`: carry small payloads inside the command.
//!
//! On mlx5, a put of constant size up to [`crate::support::queue_slots::MLX5_INLINE_BYTES_LIMIT`] bytes is marked
//! `inline`: the lowering copies the payload into the WQE's inline segment, so the NIC does not
//! DMA-read the source, and the source is reusable as soon as the WQE is written (its completion
//! is then never needed for reuse). Proxy ring entries have no payload room and p2p copies are
//! already stores, so the pass changes nothing there. Sizes unknown at compile time are never
//! inlined.

use aboleth_abi::Transport;
use aboleth_ir::{
    Diagnostic,
    ab::ops::operand,
    attrs,
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
    },
    scalar::constant_value,
    text::op_name,
    walk::all_ops,
};

use crate::registry::PassContext;
use crate::support::queue_slots::MLX5_INLINE_BYTES_LIMIT;

/// Runs the pass on every kernel of `module`.
pub fn run(
    ctx: &mut Context,
    module: Ptr<Operation>,
    pass: &PassContext,
) -> Result<bool, Diagnostic> {
    if pass.target != Transport::Mlx5 {
        return Ok(false);
    }
    let mut changed = false;
    for op in all_ops(ctx, module) {
        if op_name(ctx, op) != "ab.put" {
            continue;
        }
        let bytes = constant_value(ctx, op.deref(ctx).get_operand(operand::put::BYTES));
        if matches!(bytes, Some(n) if n > 0 && n <= MLX5_INLINE_BYTES_LIMIT) {
            attrs::set_bool(ctx, op, "inline", true);
            changed = true;
        }
    }
    Ok(changed)
}
