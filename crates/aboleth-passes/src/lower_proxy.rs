//! `lower-proxy`: specialize to the host proxy (ring entries executed by a host thread).
//!
//! Puts and signals become 64-byte ring entries (`aboleth_abi::proxy::ProxyRingEntry`) written
//! into the endpoint's host-pinned ring; the sequence word is written last. Submission is one
//! `st.release.sys` of the producer head that the proxy thread polls (the proxy's doorbell);
//! on a shared ring it is preceded by a system fence and in-order publication and done with
//! `atomicMax`. The proxy executes one ring's entries in order on one stream, so a signal entry
//! after its data needs no fence. Completions are a host-written counter the GPU polls. The
//! queue machinery is the driver in [`crate::support::queue_lowering`]; this file holds only
//! what is the proxy's.

use aboleth_abi::Transport;
use aboleth_ir::{
    Diagnostic, attrs,
    builder::Builder,
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
    },
    transport::{
        ProxyDoorbellOp, ProxyPublishOp, ProxyPutOp, ProxyReserveOp, ProxySignalOp,
        ProxyWaitCompletionOp,
    },
};

use crate::registry::PassContext;
use crate::support::queue_lowering::{
    Command, QueueTransport, Submission, emit_publication, emit_put_op, emit_signal_op,
    lower_module, mark_completion_once,
};

/// The proxy transport.
pub struct ProxyTransport;

impl QueueTransport for ProxyTransport {
    const TARGET: Transport = Transport::Proxy;
    type ReserveOp = ProxyReserveOp;
    type WaitCompletionOp = ProxyWaitCompletionOp;

    fn emit_put(&self, ctx: &mut Context, builder: &mut Builder, command: &Command) {
        let op = emit_put_op::<ProxyPutOp>(ctx, builder, command);
        mark_completion_once(ctx, op, command);
    }

    fn emit_signal(&self, ctx: &mut Context, builder: &mut Builder, command: &Command) {
        emit_signal_op::<ProxySignalOp>(ctx, builder, command);
    }

    fn emit_submit(&self, ctx: &mut Context, builder: &mut Builder, submission: &Submission) {
        // On a shared ring: a system fence, then in-order publication.
        emit_publication::<ProxyPublishOp>(ctx, builder, submission, "sys");
        let doorbell = builder.create::<ProxyDoorbellOp>(
            ctx,
            vec![],
            vec![submission.endpoint, submission.end],
        );
        attrs::set_bool(ctx, doorbell, "atomic_max", submission.shared);
        attrs::set_string(ctx, doorbell, "scope", submission.scope);
    }
}

/// Runs the lowering on every kernel of `module`.
pub fn run(ctx: &mut Context, module: Ptr<Operation>, _: &PassContext) -> Result<bool, Diagnostic> {
    lower_module(ctx, module, &ProxyTransport)
}
