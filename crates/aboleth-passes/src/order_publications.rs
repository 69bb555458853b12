//! `order-publications`: a signal whose data went on another queue waits for that data.
//!
//! For every signal published `AfterCompletion` (its `after` put is on another endpoint),
//! inserts `ab.wait` on the put's token right before the signal and makes the put request a
//! completion. Two queues (two QPs, two proxy rings) are not ordered with each other, so only
//! the data's completion proves it has landed. Signals on their data's own queue are left
//! alone: in-order delivery already orders them, and this pass must not add a fence there.
//! On EFA (SRD: no order on one queue either) a signal whose data is on its own queue is left
//! to the lowering, which waits for every earlier command of that queue before the signal.

use aboleth_abi::Transport;
use aboleth_ir::{
    Diagnostic,
    ab::{attributes::Publication, ops::WaitOp},
    attrs,
    builder::Builder,
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
    },
    text::op_name,
    walk::all_ops,
};

use crate::registry::PassContext;
use crate::support::transfers::{endpoint_of, signal_after};

/// Runs the pass on every kernel of `module`.
pub fn run(
    ctx: &mut Context,
    module: Ptr<Operation>,
    pass: &PassContext,
) -> Result<bool, Diagnostic> {
    let mut changed = false;
    for op in all_ops(ctx, module) {
        if op_name(ctx, op) != "ab.signal"
            || attrs::get_typed::<Publication>(ctx, op, "publication")
                != Some(Publication::AfterCompletion)
        {
            continue;
        }
        let Some(token) = signal_after(ctx, op) else {
            continue;
        };
        let same_endpoint = token
            .defining_op()
            .is_some_and(|producer| endpoint_of(ctx, producer) == endpoint_of(ctx, op));
        if pass.target == Transport::Efa && same_endpoint {
            // lower-efa's wait for the whole queue covers it.
            continue;
        }
        let already_waited = token
            .uses(ctx)
            .iter()
            .any(|u| op_name(ctx, u.user_op()) == "ab.wait");
        if let Some(producer) = token.defining_op() {
            attrs::set_string(ctx, producer, "completion", "always");
        }
        if !already_waited {
            let mut builder = Builder::before(ctx, op);
            builder.create::<WaitOp>(ctx, vec![], vec![token]);
        }
        changed = true;
    }
    Ok(changed)
}
