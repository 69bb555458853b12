//! The lowering of `ab.wait_signal`, shared by every transport: a flag poll (`gpu.wait_flag`,
//! with the wait's comparison),
//! acquire when `choose-signal-publication` planned it, else the library's volatile poll and a
//! GPU fence; in a kernel whose signals ride on their puts, the poll also does the receive
//! side's work ([`ReceiveSide`]).
//!
//! It does not decide which receive side a kernel needs: the mlx5 lowering passes the tables
//! of its write-with-immediate signals, `lower-p2p` those of its packet signals.

use aboleth_ir::{
    attrs,
    builder::Builder,
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
        value::Value,
    },
    transport::{GpuFenceOp, GpuWaitFlagOp},
};

/// What a wait also does while it polls, in a kernel whose signals do not write flags directly.
#[derive(Clone, Copy, Debug)]
pub enum ReceiveSide {
    /// Write-with-immediate: drain this rank's receive CQ, applying each immediate to its flag
    /// (`gpu.wait_flag %flag, %value, %flag_table, %endpoint_table`).
    Immediates {
        /// The flag region's descriptor table.
        flag_table: Value,
        /// The endpoint table (every handle names the receive context).
        endpoint_table: Value,
    },
    /// Flag-in-data: unpack the flag's packet slot into the data region and set the flag
    /// (`gpu.wait_flag %flag, %value, %flag_table, %data_table [packets]`).
    Packets {
        /// The flag region's descriptor table.
        flag_table: Value,
        /// The destination region's descriptor table.
        data_table: Value,
    },
}

/// Lowers `ab.wait_signal` to a flag poll (just before it; the caller erases it):
/// `ld.acquire.sys` when planned, else the library's volatile poll followed by a GPU fence;
/// with `receives`, what the poll also does in a kernel whose signals need the receiver's help.
pub fn lower_wait_signal(ctx: &mut Context, op: Ptr<Operation>, receives: Option<ReceiveSide>) {
    let (flag, value) = {
        let operation = op.deref(ctx);
        (operation.get_operand(0), operation.get_operand(1))
    };
    let acquire = attrs::get_string(ctx, op, "order").as_deref() == Some("acquire");
    let comparison = attrs::comparison(ctx, op);
    let mut builder = Builder::before(ctx, op);
    let value = builder.to_i64(ctx, value);
    let mut operands = vec![flag, value];
    match receives {
        Some(ReceiveSide::Immediates {
            flag_table,
            endpoint_table,
        }) => operands.extend([flag_table, endpoint_table]),
        Some(ReceiveSide::Packets {
            flag_table,
            data_table,
        }) => operands.extend([flag_table, data_table]),
        None => {}
    }
    let poll = builder.create::<GpuWaitFlagOp>(ctx, vec![], operands);
    attrs::set_comparison(ctx, poll, comparison);
    if matches!(receives, Some(ReceiveSide::Packets { .. })) {
        attrs::set_bool(ctx, poll, "packets", true);
    }
    attrs::set_string(
        ctx,
        poll,
        "order",
        if acquire { "acquire" } else { "volatile" },
    );
    if !acquire {
        let fence = builder.create::<GpuFenceOp>(ctx, vec![], vec![]);
        attrs::set_string(ctx, fence, "scope", "gpu");
    }
}
