//! `lower-efa`: specialize to GPU-initiated RDMA on AWS EFA (SRD: reliable, unordered).
//!
//! Puts become RDMA write WQEs (`aboleth_abi::efa::wqe`; an empty write when a batched put's
//! predicate is false: EFA has no NOP). SRD delivers one queue pair's writes in any order and
//! the device offers no fence and no atomics, so a signal is its own WQE posted only after every
//! earlier command of the program on its queue has completed (the queue driver emits that wait,
//! marked `publishes`, before the signal's reservation: [`QueueTransport::IN_ORDER`] is false
//! here); a set is an 8-byte write of the value staged in the slot's staging word, an add an
//! empty write with immediate ([`aboleth_abi::mlx5::receive::ImmediateSignal`]'s encoding) that
//! the target's waits apply while they drain its receive CQ. Every WQE requests a completion:
//! rdma-core signals every EFA write (it refuses an unsignaled one unless the QP signals all),
//! and the consumer index is rebuilt from every completion (they arrive out of order;
//! `aboleth_abi::efa::queue`). Submission is a system-scope release
//! then the 32-bit MMIO doorbell of the producer index, by the leader; on a shared queue after a
//! fence, in-order publication and the doorbell lock, with `atomicMax` on the producer index.
//!
//! What it refuses: an add signal whose value is not a constant below the immediate's limit, or
//! whose flag is not an element of a region table (and endpoint of an endpoint table) passed
//! to the kernel, or whose flag table differs from the kernel's other add signals' (the receive
//! side decodes immediates against one region); a set signal on that region (a set lands with
//! its write, an add when a wait drains it: the two could reach a flag out of order). A flag of
//! that region changes when a wait of its rank drains, so it is observed through waits only (as
//! with mlx5's `--immediate-signals`, here implied: EFA has no other way). What it does not do: write-with-immediate
//! counters in place of the completion wait (pplx-garden's design), which would let a signal
//! follow its data without a round trip. The queue machinery is
//! [`crate::support::queue_lowering`]; this file holds only what is EFA's.

use aboleth_abi::Transport;
use aboleth_ir::{
    Diagnostic,
    ab::{attributes::SignalOperation, ops::operand},
    builder::Builder,
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
        value::Value,
    },
    scalar::constant_value,
    text::op_name,
    transport::{
        EfaDoorbellOp, EfaLockOp, EfaPublishOp, EfaReserveOp, EfaSignalOp, EfaUnlockOp,
        EfaWaitCompletionOp, EfaWriteOp,
    },
    walk::{all_ops, kernels},
};

use crate::registry::PassContext;
use crate::support::{
    queue_lowering::{
        Command, QueueTransport, Submission, emit_publication, emit_put_op, emit_signal_op,
        lower_module,
    },
    riding_signals::{IMMEDIATE_VALUE_LIMIT, emit_immediate_word, signal_tables},
    transfers::signal_operation,
    wait_lowering::ReceiveSide,
};

/// Where `efa.write` and `efa.signal` take their completion operand.
const WRITE_COMPLETION_OPERAND: usize = 7;
const SIGNAL_COMPLETION_OPERAND: usize = 4;

/// The EFA transport.
pub struct EfaTransport;

impl QueueTransport for EfaTransport {
    const TARGET: Transport = Transport::Efa;
    type ReserveOp = EfaReserveOp;
    type WaitCompletionOp = EfaWaitCompletionOp;
    const IN_ORDER: bool = false;

    /// The kernel's add signals (checked by [`run`] to share one flag table): every wait of
    /// the kernel drains the rank's receive CQ against them.
    fn receive_side(&self, ctx: &Context, kernel: Ptr<Operation>) -> Option<ReceiveSide> {
        let (flag_table, endpoint_table) = all_ops(ctx, kernel)
            .into_iter()
            .find(|op| is_add_signal(ctx, *op))
            .and_then(|signal| signal_tables(ctx, signal))?;
        Some(ReceiveSide::Immediates {
            flag_table,
            endpoint_table,
        })
    }

    fn emit_put(&self, ctx: &mut Context, builder: &mut Builder, command: &Command) {
        let op = emit_put_op::<EfaWriteOp>(ctx, builder, command);
        request_completion(ctx, builder, op, WRITE_COMPLETION_OPERAND);
    }

    fn emit_signal(&self, ctx: &mut Context, builder: &mut Builder, command: &Command) {
        // An add carries its immediate; the flag's `ab.at` comes before the signal.
        let immediate = (signal_operation(ctx, command.op) == SignalOperation::Add).then(|| {
            let flag_at = command
                .op
                .deref(ctx)
                .get_operand(operand::signal::FLAG)
                .defining_op()
                .expect("run checked: an add signal's flag is an ab.at");
            emit_immediate_word(ctx, builder, command.op, flag_at)
        });
        let op = emit_signal_op::<EfaSignalOp>(ctx, builder, command);
        // No NIC fence exists on EFA: the wait before the signal's reservation orders it.
        aboleth_ir::attrs::remove(ctx, op, "fence");
        request_completion(ctx, builder, op, SIGNAL_COMPLETION_OPERAND);
        if let Some(immediate) = immediate {
            Operation::push_operand(op, ctx, immediate);
        }
    }

    fn emit_submit(&self, ctx: &mut Context, builder: &mut Builder, submission: &Submission) {
        let Submission {
            endpoint,
            end,
            shared,
            scope,
            ..
        } = *submission;
        // The device takes the WQEs (rdma-core writes them into the LLQ, device memory mapped
        // for the writer) and the staged values over PCIe: a system-scope fence first.
        emit_publication::<EfaPublishOp>(ctx, builder, submission, "sys");
        if shared {
            builder.create::<EfaLockOp>(ctx, vec![], vec![endpoint]);
        }
        let doorbell = builder.create::<EfaDoorbellOp>(ctx, vec![], vec![endpoint, end]);
        aboleth_ir::attrs::set_bool(ctx, doorbell, "atomic_max", shared);
        aboleth_ir::attrs::set_string(ctx, doorbell, "scope", scope);
        if shared {
            builder.create::<EfaUnlockOp>(ctx, vec![], vec![endpoint]);
        }
    }
}

/// Every EFA WQE asks for a completion, whatever `plan-completions` decided.
fn request_completion(ctx: &mut Context, builder: &mut Builder, op: Ptr<Operation>, index: usize) {
    let one = builder.constant(ctx, 1);
    // The builder inserts after `op`; the operand must be defined before it.
    let constant = one.defining_op().expect("a constant has its op");
    constant.unlink(ctx);
    constant.insert_before(ctx, op);
    Operation::replace_operand(op, ctx, index, one);
    aboleth_ir::attrs::remove(ctx, op, "completion_once");
}

fn is_add_signal(ctx: &Context, op: Ptr<Operation>) -> bool {
    op_name(ctx, op) == "ab.signal" && signal_operation(ctx, op) == SignalOperation::Add
}

/// Runs the lowering on every kernel of `module`, after checking its add signals.
pub fn run(ctx: &mut Context, module: Ptr<Operation>, _: &PassContext) -> Result<bool, Diagnostic> {
    for kernel in kernels(ctx, module) {
        check_add_signals(ctx, kernel)?;
    }
    lower_module(ctx, module, &EfaTransport)
}

/// An add signal travels as an immediate a receiving wait applies: a constant value that fits,
/// a flag the receiver can find (an element of a region table passed to the kernel, through an
/// endpoint of an endpoint table passed to it), one flag table per kernel.
fn check_add_signals(ctx: &Context, kernel: Ptr<Operation>) -> Result<(), Diagnostic> {
    let mut kernel_tables: Option<(Value, Value)> = None;
    for signal in all_ops(ctx, kernel) {
        if !is_add_signal(ctx, signal) {
            continue;
        }
        let value = signal.deref(ctx).get_operand(operand::signal::VALUE);
        let found = match constant_value(ctx, value) {
            Some(constant) if (0..IMMEDIATE_VALUE_LIMIT).contains(&constant) => None,
            Some(constant) => Some(format!("the constant {constant}")),
            None => Some("a value computed at run time".to_owned()),
        };
        if let Some(found) = found {
            return Err(Diagnostic::at_op(
                ctx,
                signal,
                format!(
                    "on efa an add signal travels as an RDMA write with immediate that the \
                     receiving rank's waits apply (EFA has no remote atomics), so its value must \
                     be a constant in 0..{IMMEDIATE_VALUE_LIMIT}, and this one adds {found}; add \
                     a constant (e.g. 1 per arrival) or set the flag instead"
                ),
            ));
        }
        let Some(tables) = signal_tables(ctx, signal) else {
            return Err(Diagnostic::at_op(
                ctx,
                signal,
                "on efa an add signal's flag is applied by the receiving rank's waits, which find \
                 it by its element index: the flag must be `ab.at` of an `ab.remote` whose table \
                 is a kernel parameter, and the endpoint an `ab.endpoint` of an endpoint table \
                 that is a kernel parameter",
            ));
        };
        if *kernel_tables.get_or_insert(tables) != tables {
            return Err(Diagnostic::at_op(
                ctx,
                signal,
                "on efa every add signal of a kernel must name flags of one region (and \
                 endpoints of one table): the receiving waits decode immediates against a \
                 single flag region; use one flag region for the kernel's counters",
            ));
        }
    }
    // A set writes its flag when it lands, an add when a receiving wait drains it later: on
    // one flag the two could apply out of program order.
    let Some((add_flag_table, _)) = kernel_tables else {
        return Ok(());
    };
    for signal in all_ops(ctx, kernel) {
        if op_name(ctx, signal) == "ab.signal"
            && !is_add_signal(ctx, signal)
            && signal_tables(ctx, signal).is_some_and(|(table, _)| table == add_flag_table)
        {
            return Err(Diagnostic::at_op(
                ctx,
                signal,
                "on efa a set signal may not name the flag region this kernel's add signals use: \
                 the set lands when its write does, an add when a receiving wait applies it \
                 later, so the two could reach a flag out of program order; set flags in another \
                 region",
            ));
        }
    }
    Ok(())
}
