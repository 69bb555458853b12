//! `choose-signal-publication`: publish each signal the cheapest legal way.
//!
//! Facts used: the endpoint of the signal and of the put its `after` token comes from.
//! - mlx5 and proxy, data on the same endpoint (or no `after`: the signal then follows every
//!   earlier put on its endpoint): `InOrderOnQueue`. An RC QP executes WQEs in order at the
//!   responder and the proxy executes one ring's entries in order on one stream, so the signal
//!   cannot overtake its data; no NIC fence and no GPU fence are needed.
//! - data on another endpoint: `AfterCompletion` (`order-publications` then inserts a wait for
//!   the data's completion before the signal). Nothing orders two queues.
//! - p2p: `ReleaseStore`: after a CTA barrier, one `st.release.sys` (or `red.release.sys.add`)
//!   is cumulative over every store the CTA made before it, whichever peer they went to.
//!
//! The matching `ab.wait_signal`s are marked `order = "acquire"`: an `ld.acquire.sys` poll
//! pairs with the publishing release (or the NIC's in-order write), so no fence follows it.
//! Without this pass, the lowering publishes library-style (`Fenced`) and waits with a
//! volatile poll followed by a fence.

use aboleth_ir::{
    Diagnostic,
    ab::attributes::Publication,
    attrs,
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
    },
    text::op_name,
    transport::Target,
    walk::all_ops,
};

use crate::comm::{endpoint_of, signal_after};
use crate::registry::PassContext;

/// Runs the pass on every kernel of `module`.
pub fn run(
    ctx: &mut Context,
    module: Ptr<Operation>,
    pass: &PassContext,
) -> Result<bool, Diagnostic> {
    let mut changed = false;
    for op in all_ops(ctx, module) {
        if op_name(ctx, op) == "ab.wait_signal" {
            attrs::set_string(ctx, op, "order", "acquire");
            changed = true;
            continue;
        }
        if op_name(ctx, op) != "ab.signal" {
            continue;
        }
        let publication = if pass.target == Target::P2p {
            Publication::ReleaseStore
        } else {
            let data_endpoint = signal_after(ctx, op)
                .and_then(|token| token.defining_op())
                .map(|producer| endpoint_of(ctx, producer));
            match data_endpoint {
                Some(endpoint) if endpoint != endpoint_of(ctx, op) => Publication::AfterCompletion,
                _ => Publication::InOrderOnQueue,
            }
        };
        attrs::set(ctx, op, "publication", Box::new(publication));
        changed = true;
    }
    Ok(changed)
}
