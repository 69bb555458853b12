//! How many queue slots a command takes on each transport (WQE basic blocks on mlx5, ring
//! entries on proxy, 64-byte WQEs on EFA), and the inline payload limit that decides it for an mlx5 put.
//!
//! Read by `batch-commands` (which run-time loops fit a batch), `size-buffers` (ring sizes),
//! the queue lowering (slot offsets), the code generator and the simulator (inline WQE sizes). Nothing here rewrites IR.

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
    },
    scalar::{constant_trip_count, constant_value},
    text::op_name,
    walk::{block_ops, region_block},
};

use crate::support::transfers::{is_transfer, signal_operation};

/// Largest payload the mlx5 lowering copies into a WQE instead of pointing at it. NICs accept
/// up to `max_inline_data` (often 220 B), but every inlined byte is a GPU store into the SQ, so
/// only small payloads win; 64 B is the DOCA/DeepEP-style choice.
pub const MLX5_INLINE_BYTES_LIMIT: i64 = 64;

/// Queue slots one transfer takes on `target`: WQE basic blocks on mlx5, ring entries on proxy,
/// one WQE on EFA (a put is one RDMA write, a signal one write too: no inline data, no atomics)
/// and on Ionic (a put is one RDMA write, a signal a fetch-add or an 8-byte inline write).
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
        Transport::Proxy | Transport::Efa | Transport::Ionic => Some(1),
        Transport::P2p => Some(0),
    }
}

/// Queue slots one iteration of `for_op` takes on `target`: its transfers' and, for nested
/// loops, their constant trip count times theirs. `None` when a size is not a compile-time
/// constant, a nested loop's trip count is not constant, or the count overflows.
pub fn loop_slots_per_iteration(
    ctx: &Context,
    for_op: Ptr<Operation>,
    target: Transport,
) -> Option<i64> {
    let mut total = 0i64;
    for op in block_ops(ctx, region_block(ctx, for_op, 0)) {
        let slots = if op_name(ctx, op) == "ab.for" {
            constant_trip_count(ctx, op)?.checked_mul(loop_slots_per_iteration(ctx, op, target)?)?
        } else if is_transfer(ctx, op) {
            slots_of(ctx, op, target)?
        } else {
            continue;
        };
        total = total.checked_add(slots)?;
    }
    Some(total)
}

/// Basic blocks of an inline RDMA WRITE of `bytes`: ctrl (16) + raddr (16) + a 4-byte inline
/// header and the data, padded to 16 bytes; 64-byte basic blocks.
pub fn inline_write_basic_blocks(bytes: i64) -> i64 {
    let data_segment_units = (4 + bytes + 15) / 16;
    let ds = 2 + data_segment_units;
    (ds * 16 + 63) / 64
}
