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
//! - mlx5 with `--immediate-signals` (the program declares its flags are observed only through
//!   `ab.wait_signal`): `WriteWithImmediate` for a signal that rides on its put, see
//!   [`immediate_signal_candidate`]. The put becomes an RDMA_WRITE_IMM whose immediate names
//!   the flag's element index and a small constant value; the signal takes no WQE. The flag is
//!   then written when a wait of the receiving rank drains its receive CQ, not when the data
//!   lands, which is why it needs the declaration: a host read or an `ab.load` of the flag could
//!   see it late. Every `ab.wait_signal` of such a kernel drains the receive CQ while it polls.
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

use aboleth_ir::{
    ab::ops::operand,
    pliron::{linked_list::LinkedList, value::Value},
    scalar::constant_value,
};

use crate::batching::is_pure_scalar;
use crate::comm::{endpoint_of, put_predicate, signal_after};
use crate::registry::PassContext;

/// Runs the pass on every kernel of `module`.
pub fn run(
    ctx: &mut Context,
    module: Ptr<Operation>,
    pass: &PassContext,
) -> Result<bool, Diagnostic> {
    let mut changed = false;
    // The flag table and endpoint table of the first signal published with an immediate: the
    // receive side decodes immediates against one flag region (the index is all it carries).
    let mut immediate_tables: Option<(Value, Value)> = None;
    for op in all_ops(ctx, module) {
        if op_name(ctx, op) == "ab.wait_signal" {
            attrs::set_string(ctx, op, "order", "acquire");
            changed = true;
            continue;
        }
        if op_name(ctx, op) != "ab.signal" {
            continue;
        }
        let immediate = (pass.target == Target::Mlx5 && pass.immediate_signals)
            .then(|| immediate_signal_candidate(ctx, op))
            .flatten()
            .filter(|tables| *immediate_tables.get_or_insert(*tables) == *tables);
        let publication = if pass.target == Target::P2p {
            Publication::ReleaseStore
        } else if immediate.is_some() {
            Publication::WriteWithImmediate
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

/// Largest signal value an immediate carries ([`aboleth_abi::mlx5::receive::ImmediateSignal`]).
pub const IMMEDIATE_VALUE_LIMIT: i64 = 1 << aboleth_abi::mlx5::receive::IMMEDIATE_VALUE_BITS;

/// The (flag table, endpoint table) of `signal` when it can ride on its put as an immediate:
/// its value is a constant below [`IMMEDIATE_VALUE_LIMIT`]; its `after` is a put on the same
/// endpoint with no runtime predicate, earlier in the same block with only pure scalar ops in
/// between (so nothing else is posted between the two); its flag is an element of an
/// `ab.remote` and its endpoint an `ab.endpoint`, both on tables that are kernel parameters
/// (the receive side finds them in every program).
pub fn immediate_signal_candidate(ctx: &Context, signal: Ptr<Operation>) -> Option<(Value, Value)> {
    let value = signal.deref(ctx).get_operand(operand::signal::VALUE);
    if !constant_value(ctx, value).is_some_and(|v| (0..IMMEDIATE_VALUE_LIMIT).contains(&v)) {
        return None;
    }
    let put = signal_after(ctx, signal)?.defining_op()?;
    if op_name(ctx, put) != "ab.put"
        || endpoint_of(ctx, put) != endpoint_of(ctx, signal)
        || put_predicate(ctx, put).is_some_and(|p| constant_value(ctx, p) != Some(1))
        || put.deref(ctx).get_parent_block() != signal.deref(ctx).get_parent_block()
    {
        return None;
    }
    let mut between = Vec::new();
    let mut cursor = put.deref(ctx).get_next();
    while let Some(op) = cursor {
        if op == signal {
            break;
        }
        if !is_pure_scalar(&op_name(ctx, op)) {
            return None;
        }
        between.push(op);
        cursor = op.deref(ctx).get_next();
    }
    cursor?;
    let flag = signal
        .deref(ctx)
        .get_operand(operand::signal::FLAG)
        .defining_op()?;
    if op_name(ctx, flag) != "ab.at" {
        return None;
    }
    // The put carries the flag's index, so the `ab.at` must be computable before the put (the
    // lowering moves it there): its operands may not come from ops between the two.
    let operands_before_put = (0..flag.deref(ctx).get_num_operands()).all(|index| {
        flag.deref(ctx)
            .get_operand(index)
            .defining_op()
            .is_none_or(|definition| !between.contains(&definition))
    });
    if !operands_before_put {
        return None;
    }
    let remote = flag.deref(ctx).get_operand(0).defining_op()?;
    let endpoint = endpoint_of(ctx, signal).defining_op()?;
    if op_name(ctx, remote) != "ab.remote" || op_name(ctx, endpoint) != "ab.endpoint" {
        return None;
    }
    let flag_table = remote.deref(ctx).get_operand(0);
    let endpoint_table = endpoint.deref(ctx).get_operand(0);
    (is_kernel_parameter(ctx, flag_table) && is_kernel_parameter(ctx, endpoint_table))
        .then_some((flag_table, endpoint_table))
}

/// Whether `value` is an argument of its kernel's entry block.
fn is_kernel_parameter(ctx: &Context, value: Value) -> bool {
    value.defining_op().is_none()
        && value
            .get_parent_block(ctx)
            .and_then(|block| block.deref(ctx).get_parent_op(ctx))
            .is_some_and(|op| op_name(ctx, op) == "builtin.func")
}
