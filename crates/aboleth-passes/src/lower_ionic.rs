//! `lower-ionic`: specialize to GPU-initiated RDMA on AMD Pensando Ionic (RoCEv2 RC, in order).
//!
//! Puts become RDMA write WQEs (`aboleth_abi::ionic::wqe`; an empty inline write when a put's
//! predicate is false: Ionic has no NOP, so `batch-commands` keeps predicated puts out of Ionic
//! batches); signals become a fetch-add (add, the old value to the endpoint's scratch word) or
//! an 8-byte inline RDMA write of the value (set: Ionic has no masked swap that writes
//! unconditionally), each with the fence flag when published library-style. An RC queue pair
//! executes its WQEs in order, so a signal follows its data with nothing between, as on mlx5.
//! Every WQE is marked `periodic_completion` (it also asks for a CQE at ring-quarter boundaries,
//! `aboleth_abi::mlx5::periodic_completion`'s rule), so a full ring can always be reclaimed from
//! the cumulative CQEs. Submission is a system-scope release then the 64-bit MMIO doorbell of
//! the queue id and producer index, by the leader; on a shared queue after a fence, in-order
//! publication and the doorbell lock, with `atomicMax` on the producer index.
//!
//! What it does not do: write-with-immediate signals (no receive side is modeled), the CQ
//! credits rdma-core reserves before a doorbell. Code generation (`aboleth-codegen`'s
//! `emit/ionic.rs`) targets NVIDIA GPUs; there is no AMD GPU here. The queue machinery is [`crate::support::queue_lowering`]; this file holds only
//! what is Ionic's.

use aboleth_abi::Transport;
use aboleth_ir::{
    Diagnostic, attrs,
    builder::Builder,
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
    },
    transport::{
        IonicDoorbellOp, IonicLockOp, IonicPublishOp, IonicReserveOp, IonicSignalOp, IonicUnlockOp,
        IonicWaitCompletionOp, IonicWriteOp,
    },
};

use crate::registry::PassContext;
use crate::support::queue_lowering::{
    Command, QueueTransport, Submission, emit_publication, emit_put_op, emit_signal_op,
    lower_module, mark_completion_once,
};

/// The Ionic transport.
pub struct IonicTransport;

impl QueueTransport for IonicTransport {
    const TARGET: Transport = Transport::Ionic;
    type ReserveOp = IonicReserveOp;
    type WaitCompletionOp = IonicWaitCompletionOp;

    fn emit_put(&self, ctx: &mut Context, builder: &mut Builder, command: &Command) {
        let op = emit_put_op::<IonicWriteOp>(ctx, builder, command);
        mark_completion_once(ctx, op, command);
        attrs::set_bool(ctx, op, "periodic_completion", true);
    }

    fn emit_signal(&self, ctx: &mut Context, builder: &mut Builder, command: &Command) {
        let op = emit_signal_op::<IonicSignalOp>(ctx, builder, command);
        attrs::set_bool(ctx, op, "periodic_completion", true);
    }

    fn emit_submit(&self, ctx: &mut Context, builder: &mut Builder, submission: &Submission) {
        let Submission {
            endpoint,
            end,
            shared,
            scope,
            ..
        } = *submission;
        // The device reads the WQEs over PCIe: a system-scope fence first on a shared queue.
        emit_publication::<IonicPublishOp>(ctx, builder, submission, "sys");
        if shared {
            builder.create::<IonicLockOp>(ctx, vec![], vec![endpoint]);
        }
        let doorbell = builder.create::<IonicDoorbellOp>(ctx, vec![], vec![endpoint, end]);
        attrs::set_bool(ctx, doorbell, "atomic_max", shared);
        attrs::set_string(ctx, doorbell, "scope", scope);
        if shared {
            builder.create::<IonicUnlockOp>(ctx, vec![], vec![endpoint]);
        }
    }
}

/// Runs the lowering on every kernel of `module`.
pub fn run(ctx: &mut Context, module: Ptr<Operation>, _: &PassContext) -> Result<bool, Diagnostic> {
    lower_module(ctx, module, &IonicTransport)
}
