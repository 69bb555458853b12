//! Questions passes ask about communication ops: which endpoint, which source, how many slots.
//!
//! Shared helpers so that every pass reads `ab.put`/`ab.signal` operands the same way and the
//! pass files hold only their own decision. Nothing here rewrites IR.

use aboleth_abi::Transport;
use aboleth_ir::{
    ab::{
        attributes::{Publication, SignalOperation},
        ops::operand,
    },
    attrs,
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
        value::Value,
    },
    scalar::constant_value,
    text::op_name,
};

/// True for the ops that post a command on a queue (`ab.put`, `ab.signal`).
pub fn is_transfer(ctx: &Context, op: Ptr<Operation>) -> bool {
    matches!(op_name(ctx, op).as_str(), "ab.put" | "ab.signal")
}

/// The endpoint operand of a transfer, drain or fence.
pub fn endpoint_of(ctx: &Context, op: Ptr<Operation>) -> Value {
    op.deref(ctx).get_operand(0)
}

/// The optional predicate of an `ab.put`.
pub fn put_predicate(ctx: &Context, op: Ptr<Operation>) -> Option<Value> {
    let operation = op.deref(ctx);
    (operation.get_num_operands() > operand::put::PREDICATE)
        .then(|| operation.get_operand(operand::put::PREDICATE))
}

/// The optional `after` token of an `ab.signal`.
pub fn signal_after(ctx: &Context, op: Ptr<Operation>) -> Option<Value> {
    let operation = op.deref(ctx);
    (operation.get_num_operands() > operand::signal::AFTER)
        .then(|| operation.get_operand(operand::signal::AFTER))
}

/// The signal's operation (`set` when the attribute is absent).
pub fn signal_operation(ctx: &Context, op: Ptr<Operation>) -> SignalOperation {
    attrs::get_typed::<SignalOperation>(ctx, op, "op").unwrap_or(SignalOperation::Set)
}

/// The kernel argument (or other root value) a local pointer is derived from by `ab.ptr_add`.
pub fn pointer_root(ctx: &Context, pointer: Value) -> Value {
    let mut current = pointer;
    while let Some(op) = current.defining_op() {
        if op_name(ctx, op) != "ab.ptr_add" {
            break;
        }
        current = op.deref(ctx).get_operand(0);
    }
    current
}

/// Largest payload the mlx5 lowering copies into a WQE instead of pointing at it. NICs accept
/// up to `max_inline_data` (often 220 B), but every inlined byte is a GPU store into the SQ, so
/// only small payloads win; 64 B is the DOCA/DeepEP-style choice.
pub const MLX5_INLINE_BYTES_LIMIT: i64 = 64;

/// Queue slots one transfer takes on `target`: WQE basic blocks on mlx5, ring entries on proxy.
/// Returns `None` when the size is not a compile-time constant (an inline put of unknown size).
pub fn slots_of(ctx: &Context, op: Ptr<Operation>, target: Transport) -> Option<i64> {
    match target {
        Transport::Mlx5 => {
            if op_name(ctx, op) == "ab.signal"
                && attrs::get_typed::<Publication>(ctx, op, "publication")
                    == Some(Publication::WriteWithImmediate)
            {
                // It rides on its put's WQE.
                return Some(0);
            }
            if op_name(ctx, op) == "ab.signal" {
                return Some(match signal_operation(ctx, op) {
                    // ATOMIC_FA: ctrl + raddr + atomic + data = ds 4, one basic block.
                    SignalOperation::Add => 1,
                    // Masked CS with compare_mask 0 (an unconditional 64-bit swap): ds 5, two.
                    SignalOperation::Set => 2,
                });
            }
            if attrs::get_bool(ctx, op, "inline") {
                let bytes = constant_value(ctx, op.deref(ctx).get_operand(operand::put::BYTES))?;
                Some(inline_write_basic_blocks(bytes))
            } else {
                // ctrl + raddr + data: ds 3, one basic block.
                Some(1)
            }
        }
        Transport::Proxy => Some(1),
        Transport::P2p | Transport::Efa | Transport::Ionic => Some(0),
    }
}

/// Basic blocks of an inline RDMA WRITE of `bytes`: ctrl (16) + raddr (16) + a 4-byte inline
/// header and the data, padded to 16 bytes; 64-byte basic blocks.
pub fn inline_write_basic_blocks(bytes: i64) -> i64 {
    let data_segment_units = (4 + bytes + 15) / 16;
    let ds = 2 + data_segment_units;
    (ds * 16 + 63) / 64
}
