//! `lower-mlx5`: specialize to GPU-initiated RDMA on ConnectX (WQEs, doorbell record, UAR).
//!
//! Puts become RDMA WRITE WQEs (inline when planned; a NOP of the same size when a predicate
//! is false), signals become ATOMIC_FA (add) or masked compare-and-swap (set) WQEs, each with
//! CQ_UPDATE when its completion is requested and the fence bit when published library-style.
//! Submission on a one-owner queue is a release store of the doorbell record then the 8-byte
//! UAR doorbell, both by the program's leader thread (doorbell scope `thread`); on a shared
//! queue it is NVSHMEM's sequence: GPU fence, in-order publication, lock, `atomicMax`,
//! record, doorbell, unlock. The queue machinery is in [`crate::lower_common`].

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
        Mlx5ReserveOp, Mlx5UnlockOp, Mlx5WaitCompletionOp, Mlx5WriteOp, Target,
    },
};

use crate::comm::signal_operation;
use crate::lower_common::{
    Command, QueueTransport, emit_fence, lower_module, put_operands, signal_operands, slot_type,
};
use crate::registry::PassContext;

/// The mlx5 transport.
pub struct Mlx5Transport;

fn mark_completion(ctx: &Context, op: Ptr<Operation>, command: &Command) {
    if command.completion_once {
        attrs::set_bool(ctx, op, "completion_once", true);
    }
}

impl QueueTransport for Mlx5Transport {
    fn target(&self) -> Target {
        Target::Mlx5
    }

    fn emit_reserve(
        &self,
        ctx: &mut Context,
        builder: &mut Builder,
        endpoint: Value,
        slots: Value,
        atomic: bool,
    ) -> Value {
        let ty = slot_type(ctx);
        let op = builder.create::<Mlx5ReserveOp>(ctx, vec![ty], vec![endpoint, slots]);
        attrs::set_bool(ctx, op, "atomic", atomic);
        op.deref(ctx).get_result(0)
    }

    fn emit_put(
        &self,
        ctx: &mut Context,
        builder: &mut Builder,
        command: &Command,
        predicate: Value,
    ) {
        let [destination, source, bytes, key] = put_operands(ctx, builder, command.op);
        let op = builder.create::<Mlx5WriteOp>(
            ctx,
            vec![],
            vec![
                command.endpoint,
                command.slot,
                destination,
                source,
                bytes,
                key,
                predicate,
                command.completion,
            ],
        );
        if attrs::get_bool(ctx, command.op, "inline") {
            attrs::set_bool(ctx, op, "inline", true);
        }
        mark_completion(ctx, op, command);
    }

    fn emit_signal(&self, ctx: &mut Context, builder: &mut Builder, command: &Command) {
        let [flag, value] = signal_operands(ctx, builder, command.op);
        let op = builder.create::<Mlx5AtomicOp>(
            ctx,
            vec![],
            vec![
                command.endpoint,
                command.slot,
                flag,
                value,
                command.completion,
            ],
        );
        let operation = signal_operation(ctx, command.op);
        attrs::set(ctx, op, "op", Box::new(operation));
        attrs::set_bool(ctx, op, "fence", command.fenced);
        mark_completion(ctx, op, command);
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
    ) {
        if shared {
            emit_fence(ctx, builder, "gpu");
            builder.create::<Mlx5PublishOp>(ctx, vec![], vec![endpoint, base, count]);
            builder.create::<Mlx5LockOp>(ctx, vec![], vec![endpoint]);
        }
        let record = builder.create::<Mlx5DoorbellRecordOp>(ctx, vec![], vec![endpoint, end]);
        attrs::set_bool(ctx, record, "atomic_max", shared);
        let doorbell = builder.create::<Mlx5DoorbellOp>(ctx, vec![], vec![endpoint, end]);
        attrs::set_string(ctx, doorbell, "scope", "thread");
        if shared {
            builder.create::<Mlx5UnlockOp>(ctx, vec![], vec![endpoint]);
        }
    }

    fn emit_wait_completion(
        &self,
        ctx: &mut Context,
        builder: &mut Builder,
        endpoint: Value,
        slot: Option<Value>,
    ) {
        let mut operands = vec![endpoint];
        operands.extend(slot);
        builder.create::<Mlx5WaitCompletionOp>(ctx, vec![], operands);
    }
}

/// Runs the lowering on every kernel of `module`.
pub fn run(ctx: &mut Context, module: Ptr<Operation>, _: &PassContext) -> Result<bool, Diagnostic> {
    lower_module(ctx, module, &Mlx5Transport)
}
