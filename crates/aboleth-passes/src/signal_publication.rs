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
//! - p2p with `--packet-signals` (the program declares that a signal publishes only the put it
//!   follows, whose data is read only after a wait on that signal's flag): `FlagInData` for a
//!   set that rides on a small put, see [`packet_signal_candidate`], in a kernel whose every put
//!   has its own signal. The put's payload travels as LL16 packets carrying the flag
//!   (`aboleth_abi::packet`) into a staging slot of the flag; no barrier, fence or flag store.
//!   Every `ab.wait_signal` of such a kernel also checks its flag's slot and unpacks it.
//!
//! The matching `ab.wait_signal`s are marked `order = "acquire"`: an `ld.acquire.sys` poll
//! pairs with the publishing release (or the NIC's in-order write), so no fence follows it.
//! Without this pass, the lowering publishes library-style (`Fenced`) and waits with a
//! volatile poll followed by a fence.

use aboleth_abi::Transport;
use aboleth_ir::{
    Diagnostic,
    ab::attributes::Publication,
    attrs,
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
    },
    text::op_name,
    walk::all_ops,
};

use aboleth_ir::{
    ab::{attributes::SignalOperation, ops::operand},
    pliron::{linked_list::LinkedList, value::Value},
    scalar::{constant_value, enclosing_loops, varies_injectively_with},
    walk::kernels,
};

use crate::batching::is_pure_scalar;
use crate::comm::{endpoint_of, put_predicate, signal_after, signal_operation};
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
    let packet_signals: Vec<Ptr<Operation>> =
        if pass.target == Transport::P2p && pass.packet_signals {
            kernels(ctx, module)
                .into_iter()
                .flat_map(|kernel| packet_signals_of(ctx, kernel))
                .collect()
        } else {
            Vec::new()
        };
    for op in all_ops(ctx, module) {
        if op_name(ctx, op) == "ab.wait_signal" {
            attrs::set_string(ctx, op, "order", "acquire");
            changed = true;
            continue;
        }
        if op_name(ctx, op) != "ab.signal" {
            continue;
        }
        let immediate = (pass.target == Transport::Mlx5 && pass.immediate_signals)
            .then(|| immediate_signal_candidate(ctx, op))
            .flatten()
            .filter(|tables| *immediate_tables.get_or_insert(*tables) == *tables);
        let publication = if packet_signals.contains(&op) {
            Publication::FlagInData
        } else if pass.target == Transport::P2p {
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

/// A signal that can travel with the put it directly follows.
struct RidingSignal {
    put: Ptr<Operation>,
    /// The `ab.at` of the flag.
    flag_at: Ptr<Operation>,
    /// The flag region's descriptor table (a kernel parameter).
    flag_table: Value,
    /// The endpoint table (a kernel parameter).
    endpoint_table: Value,
}

/// `signal` when it can ride on its put: its `after` is a put on the same endpoint with no
/// runtime predicate, earlier in the same block with only pure scalar ops in between (so
/// nothing else is posted between the two); its flag is an element of an `ab.remote` and its
/// endpoint an `ab.endpoint`, both on tables that are kernel parameters (the receive side
/// finds them in every program). With `flag_before_put`, the flag's `ab.at` must also be
/// computable before the put (a write-with-immediate carries the flag's index in the put).
fn riding_signal(
    ctx: &Context,
    signal: Ptr<Operation>,
    flag_before_put: bool,
) -> Option<RidingSignal> {
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
    let flag_at = signal
        .deref(ctx)
        .get_operand(operand::signal::FLAG)
        .defining_op()?;
    if op_name(ctx, flag_at) != "ab.at" {
        return None;
    }
    // The put carries the flag's index, so the `ab.at` must be computable before the put (the
    // lowering moves it there): its operands may not come from ops between the two.
    let operands_before_put = (0..flag_at.deref(ctx).get_num_operands()).all(|index| {
        flag_at
            .deref(ctx)
            .get_operand(index)
            .defining_op()
            .is_none_or(|definition| !between.contains(&definition))
    });
    if flag_before_put && !operands_before_put {
        return None;
    }
    let flag_table = remote_table(ctx, flag_at)?;
    let endpoint = endpoint_of(ctx, signal).defining_op()?;
    if op_name(ctx, endpoint) != "ab.endpoint" {
        return None;
    }
    let endpoint_table = endpoint.deref(ctx).get_operand(0);
    is_kernel_parameter(ctx, endpoint_table).then_some(RidingSignal {
        put,
        flag_at,
        flag_table,
        endpoint_table,
    })
}

/// The descriptor table of the `ab.remote` an `ab.at` indexes, when it is a kernel parameter.
fn remote_table(ctx: &Context, at: Ptr<Operation>) -> Option<Value> {
    let remote = at.deref(ctx).get_operand(0).defining_op()?;
    let table = remote.deref(ctx).get_operand(0);
    (op_name(ctx, remote) == "ab.remote" && is_kernel_parameter(ctx, table)).then_some(table)
}

/// The (flag table, endpoint table) of `signal` when it can ride on its put as an immediate:
/// its value is a constant below [`IMMEDIATE_VALUE_LIMIT`] and it rides on its put
/// ([`riding_signal`]).
pub fn immediate_signal_candidate(ctx: &Context, signal: Ptr<Operation>) -> Option<(Value, Value)> {
    let value = signal.deref(ctx).get_operand(operand::signal::VALUE);
    if !constant_value(ctx, value).is_some_and(|v| (0..IMMEDIATE_VALUE_LIMIT).contains(&v)) {
        return None;
    }
    riding_signal(ctx, signal, true).map(|riding| (riding.flag_table, riding.endpoint_table))
}

/// The (flag table, data table) of `signal` when its put may carry it as packets (flag-in-data):
/// - it rides on its put ([`riding_signal`]) and sets (an add would need every sender's packets
///   in one slot);
/// - the put's byte count is a constant multiple of 8 up to
///   [`aboleth_abi::packet::PACKET_PUT_BYTES_LIMIT`] and its destination an element of an
///   `ab.remote` on a kernel-parameter table (the receiver unpacks into its own entry);
/// - it is in at most one loop, and then the flag's index varies injectively with that loop's
///   variable ([`varies_injectively_with`]), so no two iterations reuse a slot the receiver may
///   not have unpacked yet (nested loops would need the index injective over all of them
///   together, which is not checked: they are refused).
pub fn packet_signal_candidate(ctx: &Context, signal: Ptr<Operation>) -> Option<(Value, Value)> {
    use aboleth_abi::packet::{PACKET_PAYLOAD_BYTES, PACKET_PUT_BYTES_LIMIT};
    if signal_operation(ctx, signal) != SignalOperation::Set {
        return None;
    }
    // The lowering emits the packets at the signal, after everything the flag needs.
    let riding = riding_signal(ctx, signal, false)?;
    let bytes = constant_value(ctx, riding.put.deref(ctx).get_operand(operand::put::BYTES))?;
    if bytes <= 0
        || !(bytes as u64).is_multiple_of(PACKET_PAYLOAD_BYTES)
        || bytes as u64 > PACKET_PUT_BYTES_LIMIT
    {
        return None;
    }
    let destination = riding
        .put
        .deref(ctx)
        .get_operand(operand::put::DESTINATION)
        .defining_op()?;
    if op_name(ctx, destination) != "ab.at" {
        return None;
    }
    let data_table = remote_table(ctx, destination)?;
    let index = riding.flag_at.deref(ctx).get_operand(1);
    let loops_covered = match enclosing_loops(ctx, signal).as_slice() {
        [] => true,
        [for_op] => varies_injectively_with(ctx, index, *for_op),
        _ => false,
    };
    loops_covered.then_some((riding.flag_table, data_table))
}

/// The signals of `kernel` that travel as packets, all or none, so that no slot can receive
/// two transfers in one launch as far as the compiler can see (the program promises the rest):
/// - every put has its own signal ([`every_put_has_its_own_signal`]);
/// - every signal of the kernel whose flag may lie in the flag region is a
///   [`packet_signal_candidate`] on one (flag table, data table) (a release store or an add to
///   the same flag would race with the unpacking wait's store of the flag);
/// - either there is one candidate (in at most one loop, whose iterations use distinct slots),
///   or every candidate sits outside loops with a distinct constant flag index.
fn packet_signals_of(ctx: &Context, kernel: Ptr<Operation>) -> Vec<Ptr<Operation>> {
    if !every_put_has_its_own_signal(ctx, kernel) {
        return Vec::new();
    }
    let signals: Vec<Ptr<Operation>> = all_ops(ctx, kernel)
        .into_iter()
        .filter(|op| op_name(ctx, *op) == "ab.signal")
        .collect();
    let mut tables = None;
    let mut indices = Vec::new();
    for signal in &signals {
        let Some(found) = packet_signal_candidate(ctx, *signal) else {
            // Another signal: it must name another flag region (a kernel-parameter table other
            // than the packets' flag table), which is only known once a candidate was found.
            continue;
        };
        if *tables.get_or_insert(found) != found {
            return Vec::new();
        }
        let flag_at = signal
            .deref(ctx)
            .get_operand(operand::signal::FLAG)
            .defining_op()
            .expect("candidates' flags are ab.at");
        indices.push((*signal, flag_at.deref(ctx).get_operand(1)));
    }
    let Some((flag_table, _)) = tables else {
        return Vec::new();
    };
    let others_elsewhere = signals
        .iter()
        .filter(|signal| !indices.iter().any(|(candidate, _)| candidate == *signal))
        .all(|signal| {
            let flag = signal.deref(ctx).get_operand(operand::signal::FLAG);
            flag.defining_op()
                .filter(|at| op_name(ctx, *at) == "ab.at")
                .and_then(|at| remote_table(ctx, at))
                .is_some_and(|table| table != flag_table)
        });
    if !others_elsewhere {
        return Vec::new();
    }
    if indices.len() > 1 {
        let constants: Vec<Option<i64>> = indices
            .iter()
            .map(|(signal, index)| {
                enclosing_loops(ctx, *signal)
                    .is_empty()
                    .then(|| constant_value(ctx, *index))
                    .flatten()
            })
            .collect();
        let distinct = constants.iter().enumerate().all(|(position, constant)| {
            constant.is_some_and(|value| !constants[..position].contains(&Some(value)))
        });
        if !distinct {
            return Vec::new();
        }
    }
    indices.into_iter().map(|(signal, _)| signal).collect()
}

/// Whether every `ab.put` of `kernel` is directly followed by a signal that rides on it: then no
/// put relies on a later signal of another put to publish it, which packets would not do.
fn every_put_has_its_own_signal(ctx: &Context, kernel: Ptr<Operation>) -> bool {
    let ops = all_ops(ctx, kernel);
    let riding_puts: Vec<Ptr<Operation>> = ops
        .iter()
        .filter(|op| op_name(ctx, **op) == "ab.signal")
        .filter_map(|signal| riding_signal(ctx, *signal, false).map(|riding| riding.put))
        .collect();
    ops.iter()
        .filter(|op| op_name(ctx, **op) == "ab.put")
        .all(|put| riding_puts.contains(put))
}

/// Whether `value` is an argument of its kernel's entry block.
fn is_kernel_parameter(ctx: &Context, value: Value) -> bool {
    value.defining_op().is_none()
        && value
            .get_parent_block(ctx)
            .and_then(|block| block.deref(ctx).get_parent_op(ctx))
            .is_some_and(|op| op_name(ctx, op) == "builtin.func")
}
