//! Pieces every lowering emits the same way: a `gpu.fence`, and a put's and a signal's
//! operands in the order the transport ops take them (with the `i64` conversions).
//!
//! Used by the queue lowering (mlx5, proxy) and by `lower-p2p`; it emits no command and makes
//! no decision.

use aboleth_ir::{
    ab::ops::operand,
    attrs,
    builder::Builder,
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
        value::Value,
    },
    transport::GpuFenceOp,
};

/// Emits `gpu.fence [scope]`.
pub fn emit_fence(ctx: &mut Context, builder: &mut Builder, scope: &str) {
    let fence = builder.create::<GpuFenceOp>(ctx, vec![], vec![]);
    attrs::set_string(ctx, fence, "scope", scope);
}

/// The operands of an `ab.put` in transport order: destination, source, bytes, key.
pub fn put_operands(ctx: &mut Context, builder: &mut Builder, op: Ptr<Operation>) -> [Value; 4] {
    let (destination, source, bytes, key) = {
        let operation = op.deref(ctx);
        (
            operation.get_operand(operand::put::DESTINATION),
            operation.get_operand(operand::put::SOURCE),
            operation.get_operand(operand::put::BYTES),
            operation.get_operand(operand::put::SOURCE_KEY),
        )
    };
    let bytes = builder.to_i64(ctx, bytes);
    let key = builder.to_i64(ctx, key);
    [destination, source, bytes, key]
}

/// The operands of an `ab.signal` in transport order: flag, value.
pub fn signal_operands(ctx: &mut Context, builder: &mut Builder, op: Ptr<Operation>) -> [Value; 2] {
    let (flag, value) = {
        let operation = op.deref(ctx);
        (
            operation.get_operand(operand::signal::FLAG),
            operation.get_operand(operand::signal::VALUE),
        )
    };
    let value = builder.to_i64(ctx, value);
    [flag, value]
}
