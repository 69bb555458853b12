//! `choose-signal-publication`: publish each signal the cheapest legal way.
//!
//! Facts used: the endpoint of the signal and of the put its `after` token comes from.
//! - mlx5 and proxy, data on the same endpoint (or no `after`: the signal then follows every
//!   earlier put on its endpoint): `InOrderOnQueue`. An RC QP executes WQEs in order at the
//!   responder and the proxy executes one ring's entries in order on one stream, so the signal
//!   cannot overtake its data; no NIC fence and no GPU fence are needed.
//! - data on another endpoint: `AfterCompletion` (`order-publications` then inserts a wait for
//!   the data's completion before the signal). Nothing orders two queues.
//! - EFA: `AfterCompletion`, always. SRD delivers one queue pair's writes in any order, so a
//!   signal is posted only once every earlier command of its queue has completed (`lower-efa`
//!   emits that wait whatever the attribute says; `order-publications` adds the wait for data
//!   on another queue). Dropping that wait is the bug the `signal-in-order-on-efa` mutation
//!   stands for.
//! - p2p: `ReleaseStore`: after a CTA barrier, one `st.release.sys` (or `red.release.sys.add`)
//!   is cumulative over every store the CTA made before it, whichever peer they went to.
//!
//! - mlx5 with `--immediate-signals` (the program declares its flags are observed only through
//!   `ab.wait_signal`): `WriteWithImmediate` for a signal that rides on its put, see
//!   [`immediate_signal_candidate`](crate::support::riding_signals::immediate_signal_candidate). The put becomes an RDMA_WRITE_IMM whose immediate names
//!   the flag's element index and a small constant value; the signal takes no WQE. The flag is
//!   then written when a wait of the receiving rank drains its receive CQ, not when the data
//!   lands, which is why it needs the declaration: a host read or an `ab.load` of the flag could
//!   see it late. Every `ab.wait_signal` of such a kernel drains the receive CQ while it polls.
//! - p2p with `--packet-signals` (the program declares that a signal publishes only the put it
//!   follows, whose data is read only after a wait on that signal's flag): `FlagInData` for a
//!   set that rides on a small put, see
//!   [`packet_signal_candidate`](crate::support::riding_signals::packet_signal_candidate), in a kernel whose every put
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
    ab::{attributes::Publication, ops::operand},
    attrs,
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
        value::Value,
    },
    scalar::{constant_value, enclosing_loops},
    text::op_name,
    walk::{all_ops, kernels},
};

use crate::registry::PassContext;
use crate::support::{
    riding_signals::{
        immediate_signal_candidate, packet_signal_candidate, remote_table, riding_signal,
    },
    transfers::{endpoint_of, signal_after},
};

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
        } else if pass.target == Transport::Efa {
            Publication::AfterCompletion
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
