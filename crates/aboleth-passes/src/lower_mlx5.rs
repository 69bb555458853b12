//! `lower-mlx5`: specialize to GPU-initiated RDMA on ConnectX (WQEs, doorbell record, UAR).
//!
//! Puts become RDMA WRITE WQEs (inline when planned; a NOP of the same size when a predicate
//! is false), signals become ATOMIC_FA (add) or masked compare-and-swap (set) WQEs, each with
//! CQ_UPDATE when its completion is requested and the fence bit when published library-style;
//! every WQE is marked `periodic_completion` (it also asks for a CQE when it starts at or
//! covers a quarter of the ring, `aboleth_abi::mlx5::periodic_completion`, so a full ring can
//! always be reclaimed).
//! Submission on a one-owner queue is a release store of the doorbell record then the 8-byte
//! UAR doorbell, both by the program's leader thread (doorbell scope `thread`); on a shared
//! queue it is NVSHMEM's sequence: GPU fence, in-order publication, lock, `atomicMax`,
//! record, doorbell, unlock. The queue machinery is in [`crate::lower_common`].

use aboleth_abi::Transport;
use aboleth_ir::{
    Diagnostic, attrs,
    builder::Builder,
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
        value::Value,
    },
    transport::{
        Mlx5AtomicOp, Mlx5DoorbellOp, Mlx5DoorbellRecordOp, Mlx5LockOp, Mlx5PublishOp,
        Mlx5ReserveOp, Mlx5UnlockOp, Mlx5WaitCompletionOp, Mlx5WriteOp,
    },
};

use crate::lower_common::{
    Command, QueueTransport, emit_fence, emit_put_op, emit_reserve_op, emit_signal_op,
    emit_wait_completion_op, lower_module,
};
use crate::registry::PassContext;

/// The mlx5 transport.
pub struct Mlx5Transport;

impl QueueTransport for Mlx5Transport {
    fn target(&self) -> Transport {
        Transport::Mlx5
    }

    fn emit_reserve(
        &self,
        ctx: &mut Context,
        builder: &mut Builder,
        endpoint: Value,
        slots: Value,
        atomic: bool,
    ) -> Value {
        emit_reserve_op::<Mlx5ReserveOp>(ctx, builder, endpoint, slots, atomic)
    }

    fn emit_put(
        &self,
        ctx: &mut Context,
        builder: &mut Builder,
        command: &Command,
        predicate: Value,
    ) {
        let op = emit_put_op::<Mlx5WriteOp>(ctx, builder, command, predicate);
        if attrs::get_bool(ctx, command.op, "inline") {
            attrs::set_bool(ctx, op, "inline", true);
        }
        attrs::set_bool(ctx, op, "periodic_completion", true);
    }

    fn emit_signal(&self, ctx: &mut Context, builder: &mut Builder, command: &Command) {
        let op = emit_signal_op::<Mlx5AtomicOp>(ctx, builder, command);
        attrs::set_bool(ctx, op, "periodic_completion", true);
    }

    fn emit_submit(
        &self,
        ctx: &mut Context,
        builder: &mut Builder,
        endpoint: Value,
        base: Value,
        count: Value,
        end: Value,
        shared: bool,
        scope: &str,
    ) {
        if shared {
            emit_fence(ctx, builder, "gpu");
            builder.create::<Mlx5PublishOp>(ctx, vec![], vec![endpoint, base, count]);
            builder.create::<Mlx5LockOp>(ctx, vec![], vec![endpoint]);
        } else {
            // Keep the shared protocol's publication counter in step (a plain store, no wait):
            // a later kernel may post to this queue with that protocol.
            let publish = builder.create::<Mlx5PublishOp>(ctx, vec![], vec![endpoint, base, count]);
            attrs::set_bool(ctx, publish, "owner_only", true);
        }
        let record = builder.create::<Mlx5DoorbellRecordOp>(ctx, vec![], vec![endpoint, end]);
        attrs::set_bool(ctx, record, "atomic_max", shared);
        let doorbell = builder.create::<Mlx5DoorbellOp>(ctx, vec![], vec![endpoint, end]);
        attrs::set_string(ctx, doorbell, "scope", scope);
        if shared {
            builder.create::<Mlx5UnlockOp>(ctx, vec![], vec![endpoint]);
        }
    }

    fn emit_wait_completion(
        &self,
        ctx: &mut Context,
        builder: &mut Builder,
        endpoint: Value,
        slot: Option<(Value, Value)>,
    ) {
        emit_wait_completion_op::<Mlx5WaitCompletionOp>(ctx, builder, endpoint, slot);
    }
}

/// Runs the lowering on every kernel of `module`.
pub fn run(ctx: &mut Context, module: Ptr<Operation>, _: &PassContext) -> Result<bool, Diagnostic> {
    lower_module(ctx, module, &Mlx5Transport)
}
