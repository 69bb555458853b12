//! `lower-proxy`: specialize to the host proxy (ring entries executed by a host thread).
//!
//! Puts and signals become 64-byte ring entries (`aboleth_abi::proxy::ProxyRingEntry`) written
//! into the endpoint's host-pinned ring; the sequence word is written last. Submission is one
//! `st.release.sys` of the producer head that the proxy thread polls (the proxy's doorbell);
//! on a shared ring it is preceded by a system fence and in-order publication and done with
//! `atomicMax`. The proxy executes one ring's entries in order on one stream, so a signal entry
//! after its data needs no fence. Completions are a host-written counter the GPU polls.

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
        ProxyDoorbellOp, ProxyPublishOp, ProxyPutOp, ProxyReserveOp, ProxySignalOp,
        ProxyWaitCompletionOp,
    },
};

use crate::lower_common::{
    Command, QueueTransport, emit_fence, emit_put_op, emit_reserve_op, emit_signal_op,
    emit_wait_completion_op, lower_module,
};
use crate::registry::PassContext;

/// The proxy transport.
pub struct ProxyTransport;

impl QueueTransport for ProxyTransport {
    fn target(&self) -> Transport {
        Transport::Proxy
    }

    fn emit_reserve(
        &self,
        ctx: &mut Context,
        builder: &mut Builder,
        endpoint: Value,
        slots: Value,
        atomic: bool,
    ) -> Value {
        emit_reserve_op::<ProxyReserveOp>(ctx, builder, endpoint, slots, atomic)
    }

    fn emit_put(
        &self,
        ctx: &mut Context,
        builder: &mut Builder,
        command: &Command,
        predicate: Value,
    ) {
        emit_put_op::<ProxyPutOp>(ctx, builder, command, predicate);
    }

    fn emit_signal(&self, ctx: &mut Context, builder: &mut Builder, command: &Command) {
        emit_signal_op::<ProxySignalOp>(ctx, builder, command);
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
            emit_fence(ctx, builder, "sys");
            builder.create::<ProxyPublishOp>(ctx, vec![], vec![endpoint, base, count]);
        } else {
            // Keep the shared protocol's publication counter in step (a plain store, no wait):
            // a later kernel may post to this ring with that protocol.
            let publish =
                builder.create::<ProxyPublishOp>(ctx, vec![], vec![endpoint, base, count]);
            attrs::set_bool(ctx, publish, "owner_only", true);
        }
        let doorbell = builder.create::<ProxyDoorbellOp>(ctx, vec![], vec![endpoint, end]);
        attrs::set_bool(ctx, doorbell, "atomic_max", shared);
        attrs::set_string(ctx, doorbell, "scope", scope);
    }

    fn emit_wait_completion(
        &self,
        ctx: &mut Context,
        builder: &mut Builder,
        endpoint: Value,
        slot: Option<(Value, Value)>,
    ) {
        emit_wait_completion_op::<ProxyWaitCompletionOp>(ctx, builder, endpoint, slot);
    }
}

/// Runs the lowering on every kernel of `module`.
pub fn run(ctx: &mut Context, module: Ptr<Operation>, _: &PassContext) -> Result<bool, Diagnostic> {
    lower_module(ctx, module, &ProxyTransport)
}
