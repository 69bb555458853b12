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
//! record, doorbell, unlock.
//! A signal planned `WriteWithImmediate` rides on its put: the put becomes an RDMA_WRITE_IMM
//! whose immediate ([`aboleth_abi::mlx5::receive::ImmediateSignal`]) names the flag's element
//! index and the value, and every `ab.wait_signal` of the kernel drains the receive CQ while
//! it polls. The queue machinery (reservation, slots, batches, completion waits) is the
//! driver in [`crate::support::queue_lowering`]; this file holds only what is mlx5's.

use aboleth_abi::Transport;
use aboleth_ir::{
    Diagnostic,
    ab::{attributes::Publication, ops::operand},
    attrs,
    builder::Builder,
    pliron::{
        context::{Context, Ptr},
        linked_list::LinkedList,
        operation::Operation,
        value::Value,
    },
    text::op_name,
    transport::{
        Mlx5AtomicOp, Mlx5DoorbellOp, Mlx5DoorbellRecordOp, Mlx5LockOp, Mlx5PublishOp,
        Mlx5ReserveOp, Mlx5UnlockOp, Mlx5WaitCompletionOp, Mlx5WriteOp,
    },
    walk::all_ops,
};

use crate::registry::PassContext;
use crate::support::{
    queue_lowering::{
        Command, QueueTransport, Submission, emit_publication, emit_put_op, emit_signal_op,
        lower_module, mark_completion_once,
    },
    riding_signals::{emit_immediate_word, immediate_signal_candidate},
    transfers::signal_after,
    wait_lowering::ReceiveSide,
};

/// The mlx5 transport.
pub struct Mlx5Transport;

impl QueueTransport for Mlx5Transport {
    const TARGET: Transport = Transport::Mlx5;
    type ReserveOp = Mlx5ReserveOp;
    type WaitCompletionOp = Mlx5WaitCompletionOp;
    const RIDING_PUBLICATION: Option<Publication> = Some(Publication::WriteWithImmediate);

    fn emit_riding_signal(
        &self,
        ctx: &mut Context,
        builder: &mut Builder,
        signal: Ptr<Operation>,
    ) -> (Value, Value) {
        immediate_of(ctx, builder, signal)
    }

    /// The kernel's write-with-immediate signals, if any, share one (flag table, endpoint
    /// table): every wait of the kernel then drains the receive CQ against them.
    fn receive_side(&self, ctx: &Context, kernel: Ptr<Operation>) -> Option<ReceiveSide> {
        let (flag_table, endpoint_table) = all_ops(ctx, kernel).into_iter().find_map(|op| {
            (op_name(ctx, op) == "ab.signal"
                && attrs::get_typed::<Publication>(ctx, op, "publication")
                    == Some(Publication::WriteWithImmediate))
            .then(|| immediate_signal_candidate(ctx, op))
            .flatten()
        })?;
        Some(ReceiveSide::Immediates {
            flag_table,
            endpoint_table,
        })
    }

    fn emit_put(&self, ctx: &mut Context, builder: &mut Builder, command: &Command) {
        let op = emit_put_op::<Mlx5WriteOp>(ctx, builder, command);
        if command.riding_signal.is_some() {
            attrs::set_bool(ctx, op, "with_immediate", true);
        }
        mark_completion_once(ctx, op, command);
        if attrs::get_bool(ctx, command.op, "inline") {
            attrs::set_bool(ctx, op, "inline", true);
        }
        attrs::set_bool(ctx, op, "periodic_completion", true);
    }

    fn emit_signal(&self, ctx: &mut Context, builder: &mut Builder, command: &Command) {
        let op = emit_signal_op::<Mlx5AtomicOp>(ctx, builder, command);
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
        // NVSHMEM's shared-queue sequence: GPU fence, in-order publication, then the lock.
        emit_publication::<Mlx5PublishOp>(ctx, builder, submission, "gpu");
        if shared {
            builder.create::<Mlx5LockOp>(ctx, vec![], vec![endpoint]);
        }
        let record = builder.create::<Mlx5DoorbellRecordOp>(ctx, vec![], vec![endpoint, end]);
        attrs::set_bool(ctx, record, "atomic_max", shared);
        let doorbell = builder.create::<Mlx5DoorbellOp>(ctx, vec![], vec![endpoint, end]);
        attrs::set_string(ctx, doorbell, "scope", scope);
        if shared {
            builder.create::<Mlx5UnlockOp>(ctx, vec![], vec![endpoint]);
        }
    }
}

/// Runs the lowering on every kernel of `module`.
pub fn run(ctx: &mut Context, module: Ptr<Operation>, _: &PassContext) -> Result<bool, Diagnostic> {
    lower_module(ctx, module, &Mlx5Transport)
}

/// The immediate of `signal` (`aboleth_abi::mlx5::receive::ImmediateSignal`: add bit, the
/// constant value, the flag's element index) and its flag.
fn immediate_of(
    ctx: &mut Context,
    builder: &mut Builder,
    signal: Ptr<Operation>,
) -> (Value, Value) {
    let flag = signal.deref(ctx).get_operand(operand::signal::FLAG);
    let at = flag.defining_op().expect("checked: the flag is an ab.at");
    // It may sit between the put and the signal; its operands come from before the put
    // (checked), so it moves before the put, where the WQE uses it. One already before the put
    // stays: earlier users of the same `ab.at` (another signal to that flag) need it there.
    let put = signal_after(ctx, signal)
        .and_then(|token| token.defining_op())
        .expect("immediate signals name their put");
    if at.deref(ctx).get_parent_block() == put.deref(ctx).get_parent_block()
        && comes_after(ctx, at, put)
    {
        at.unlink(ctx);
        at.insert_before(ctx, put);
    }
    (emit_immediate_word(ctx, builder, signal, at), flag)
}

/// Whether `later` follows `earlier` in their (common) block.
fn comes_after(ctx: &Context, later: Ptr<Operation>, earlier: Ptr<Operation>) -> bool {
    let mut cursor = earlier.deref(ctx).get_next();
    while let Some(op) = cursor {
        if op == later {
            return true;
        }
        cursor = op.deref(ctx).get_next();
    }
    false
}
