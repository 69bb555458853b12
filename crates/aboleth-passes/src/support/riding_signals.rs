//! Which signals can ride on the put they follow, so that one command carries both: as an
//! RDMA write-with-immediate on mlx5, or as flag-in-data packets on p2p.
//!
//! `choose-signal-publication` asks [`immediate_signal_candidate`] and
//! [`packet_signal_candidate`] to decide a signal's publication; the lowerings ask them again
//! for the tables the receive side needs, and ask [`riding_signal_of_put`] which signal a put
//! carries. The analysis lives here, once, so that the decision and its lowering cannot
//! disagree. Nothing here rewrites IR.

use aboleth_ir::{
    ab::{
        attributes::{Publication, SignalOperation},
        ops::operand,
    },
    attrs,
    pliron::{
        context::{Context, Ptr},
        linked_list::LinkedList,
        operation::Operation,
        value::Value,
    },
    scalar::{constant_value, enclosing_loops, varies_injectively_with},
    text::op_name,
};

use crate::support::transfers::{
    endpoint_of, is_pure_scalar, put_predicate, signal_after, signal_operation,
};

/// Largest signal value an immediate carries ([`aboleth_abi::mlx5::receive::ImmediateSignal`]).
pub const IMMEDIATE_VALUE_LIMIT: i64 = 1 << aboleth_abi::mlx5::receive::IMMEDIATE_VALUE_BITS;

/// A signal that can travel with the put it directly follows.
pub struct RidingSignal {
    /// The put it rides on.
    pub put: Ptr<Operation>,
    /// The `ab.at` of the flag.
    pub flag_at: Ptr<Operation>,
    /// The flag region's descriptor table (a kernel parameter).
    pub flag_table: Value,
    /// The endpoint table (a kernel parameter).
    pub endpoint_table: Value,
}

/// `signal` when it can ride on its put: its `after` is a put on the same endpoint with no
/// runtime predicate, earlier in the same block with only pure scalar ops in between (so
/// nothing else is posted between the two); its flag is an element of an `ab.remote` and its
/// endpoint an `ab.endpoint`, both on tables that are kernel parameters (the receive side
/// finds them in every program). With `flag_before_put`, the flag's `ab.at` must also be
/// computable before the put (a write-with-immediate carries the flag's index in the put).
pub fn riding_signal(
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
    let (flag_table, endpoint_table) = signal_tables(ctx, signal)?;
    Some(RidingSignal {
        put,
        flag_at,
        flag_table,
        endpoint_table,
    })
}

/// The (flag table, endpoint table) of `signal` when its flag is an element (`ab.at`) of an
/// `ab.remote` and its endpoint an `ab.endpoint`, both on tables that are kernel parameters:
/// what a receive side that applies immediates needs (every program finds them).
pub fn signal_tables(ctx: &Context, signal: Ptr<Operation>) -> Option<(Value, Value)> {
    let flag_at = signal
        .deref(ctx)
        .get_operand(operand::signal::FLAG)
        .defining_op()?;
    if op_name(ctx, flag_at) != "ab.at" {
        return None;
    }
    let flag_table = remote_table(ctx, flag_at)?;
    let endpoint = endpoint_of(ctx, signal).defining_op()?;
    if op_name(ctx, endpoint) != "ab.endpoint" {
        return None;
    }
    let endpoint_table = endpoint.deref(ctx).get_operand(0);
    is_kernel_parameter(ctx, endpoint_table).then_some((flag_table, endpoint_table))
}

/// Emits the 32-bit immediate ([`aboleth_abi::mlx5::receive::ImmediateSignal`]) that carries
/// `signal`, whose value is a constant (checked by the caller): the add bit, the value, and the
/// element index of its flag (`flag_at`'s index operand, which must be available here).
pub fn emit_immediate_word(
    ctx: &mut Context,
    builder: &mut aboleth_ir::builder::Builder,
    signal: Ptr<Operation>,
    flag_at: Ptr<Operation>,
) -> Value {
    use aboleth_abi::mlx5::receive::{IMMEDIATE_ADD_BIT, IMMEDIATE_INDEX_BITS};
    let value = signal.deref(ctx).get_operand(operand::signal::VALUE);
    let value = constant_value(ctx, value).expect("checked: the signal's value is a constant");
    let add = signal_operation(ctx, signal) == SignalOperation::Add;
    let high = (i64::from(add) << IMMEDIATE_ADD_BIT) | (value << IMMEDIATE_INDEX_BITS);
    let index = flag_at.deref(ctx).get_operand(1);
    let index = builder.to_i64(ctx, index);
    let high = builder.constant(ctx, high);
    builder.binary(
        ctx,
        aboleth_ir::ab::attributes::BinaryOperator::Or,
        high,
        index,
    )
}

/// The descriptor table of the `ab.remote` an `ab.at` indexes, when it is a kernel parameter.
pub fn remote_table(ctx: &Context, at: Ptr<Operation>) -> Option<Value> {
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

/// The signal published with `publication` that rides on `put` (write-with-immediate or
/// packets), if one does: the next transfer after it in its block (only pure scalar ops
/// between) when that names `put`'s token.
pub fn riding_signal_of_put(
    ctx: &Context,
    put: Ptr<Operation>,
    publication: Publication,
) -> Option<Ptr<Operation>> {
    if op_name(ctx, put) != "ab.put" {
        return None;
    }
    let token = put.deref(ctx).get_result(0);
    let mut cursor = put.deref(ctx).get_next();
    while let Some(op) = cursor {
        let name = op_name(ctx, op);
        if name == "ab.signal" {
            let rides = attrs::get_typed::<Publication>(ctx, op, "publication")
                == Some(publication)
                && signal_after(ctx, op) == Some(token);
            return rides.then_some(op);
        }
        if !is_pure_scalar(&name) {
            return None;
        }
        cursor = op.deref(ctx).get_next();
    }
    None
}

/// Whether `value` is an argument of its kernel's entry block.
fn is_kernel_parameter(ctx: &Context, value: Value) -> bool {
    value.defining_op().is_none()
        && value
            .get_parent_block(ctx)
            .and_then(|block| block.deref(ctx).get_parent_op(ctx))
            .is_some_and(|op| op_name(ctx, op) == "builtin.func")
}
