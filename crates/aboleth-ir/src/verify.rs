//! The semantic verifier: operand kinds, region bounds and alignment rules, with located errors.
//!
//! pliron checks structure (operand and result counts declared by interfaces, SSA dominance,
//! terminators); this module checks what the `ab` and transport ops mean: a put takes an
//! endpoint, a remote pointer, a local pointer, a byte count and a key; a signal's flag is an
//! 8-byte element; a put fits its region when both are known. Every message says what the rule
//! is and how to fix the input. The verifier never changes IR.

use pliron::{
    builtin::types::IntegerType,
    context::{Context, Ptr},
    linked_list::ContainsLinkedList,
    operation::Operation,
    r#type::Typed,
    value::Value,
};

use crate::ab::attributes::SignalOperation;
use crate::ab::types::{EndpointType, PointerType, RemotePointerType, RemoteType, TokenType};
use crate::attrs;
use crate::scalar::constant_value;
use crate::text::{Diagnostic, op_name};
use crate::walk::{all_ops, region_block};

/// What a value is, for the verifier's rules and messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueKind {
    /// An integer of the given width.
    Integer(u32),
    /// `ab.endpoint`.
    Endpoint,
    /// `ab.token`.
    Token,
    /// `ab.ptr`.
    Pointer,
    /// `ab.remote<N>`.
    Remote(u32),
    /// `ab.remote_ptr<N>`.
    RemotePointer(u32),
    /// Any other type.
    Other,
}

impl ValueKind {
    /// How the kind reads in an error message.
    pub fn describe(self) -> String {
        match self {
            ValueKind::Integer(width) => format!("an i{width} integer"),
            ValueKind::Endpoint => "an endpoint (ab.endpoint)".into(),
            ValueKind::Token => "a token (ab.token)".into(),
            ValueKind::Pointer => "a local pointer (ab.ptr)".into(),
            ValueKind::Remote(n) => format!("a remote region (ab.remote <{n}>)"),
            ValueKind::RemotePointer(n) => format!("a remote pointer (ab.remote_ptr <{n}>)"),
            ValueKind::Other => "a value of another type".into(),
        }
    }
}

/// Classifies `value` by its type.
pub fn kind_of(ctx: &Context, value: Value) -> ValueKind {
    let ty = value.get_type(ctx);
    let ty = ty.deref(ctx);
    if let Some(int) = ty.downcast_ref::<IntegerType>() {
        ValueKind::Integer(int.width())
    } else if ty.downcast_ref::<EndpointType>().is_some() {
        ValueKind::Endpoint
    } else if ty.downcast_ref::<TokenType>().is_some() {
        ValueKind::Token
    } else if ty.downcast_ref::<PointerType>().is_some() {
        ValueKind::Pointer
    } else if let Some(remote) = ty.downcast_ref::<RemoteType>() {
        ValueKind::Remote(remote.element_bytes)
    } else if let Some(remote) = ty.downcast_ref::<RemotePointerType>() {
        ValueKind::RemotePointer(remote.element_bytes)
    } else {
        ValueKind::Other
    }
}

/// The operand shapes the verifier accepts.
#[derive(Clone, Copy)]
enum Expect {
    Integer,
    Endpoint,
    Token,
    Pointer,
    Remote,
    RemotePointer,
}

impl Expect {
    fn accepts(self, kind: ValueKind) -> bool {
        matches!(
            (self, kind),
            (Expect::Integer, ValueKind::Integer(_))
                | (Expect::Endpoint, ValueKind::Endpoint)
                | (Expect::Token, ValueKind::Token)
                | (Expect::Pointer, ValueKind::Pointer)
                | (Expect::Remote, ValueKind::Remote(_))
                | (Expect::RemotePointer, ValueKind::RemotePointer(_))
        )
    }

    fn describe(self) -> &'static str {
        match self {
            Expect::Integer => "an integer",
            Expect::Endpoint => "an endpoint (ab.endpoint)",
            Expect::Token => "a token (ab.token)",
            Expect::Pointer => "a local pointer (ab.ptr)",
            Expect::Remote => "a remote region (ab.remote <N>)",
            Expect::RemotePointer => "a remote pointer (ab.remote_ptr <N>)",
        }
    }
}

struct Signature {
    operand_names: &'static [&'static str],
    operands: &'static [Expect],
    optional: &'static [(&'static str, Expect)],
}

fn signature(name: &str) -> Option<Signature> {
    use Expect::*;
    let sig = |operand_names, operands, optional| Signature {
        operand_names,
        operands,
        optional,
    };
    Some(match name {
        "ab.binop" => sig(&["lhs", "rhs"], &[Integer, Integer], &[]),
        "ab.cast" => sig(&["value"], &[Integer], &[]),
        "ab.ptr_add" => sig(&["pointer", "offset"], &[Pointer, Integer], &[]),
        "ab.load" => sig(&["pointer"], &[Pointer], &[]),
        "ab.store" => sig(&["pointer", "value"], &[Pointer, Integer], &[]),
        "ab.for" => sig(
            &["lower", "upper", "step"],
            &[Integer, Integer, Integer],
            &[],
        ),
        "ab.if" => sig(&["condition"], &[Integer], &[]),
        "ab.endpoint" => sig(&["handles", "peer"], &[Pointer, Integer], &[]),
        "ab.remote" => sig(&["regions", "peer"], &[Pointer, Integer], &[]),
        "ab.at" => sig(&["remote", "index"], &[Remote, Integer], &[]),
        "ab.put" => sig(
            &["endpoint", "destination", "source", "bytes", "source_key"],
            &[Endpoint, RemotePointer, Pointer, Integer, Integer],
            &[("predicate", Integer)],
        ),
        "ab.signal" => sig(
            &["endpoint", "flag", "value"],
            &[Endpoint, RemotePointer, Integer],
            &[("after", Token)],
        ),
        "ab.wait_signal" => sig(&["flag", "value"], &[Pointer, Integer], &[]),
        "ab.wait" => sig(&["token"], &[Token], &[]),
        "ab.drain" | "ab.fence" => sig(&["endpoint"], &[Endpoint], &[]),
        _ => return None,
    })
}

/// Verifies every op in `module` against the rules of this module.
pub fn verify_module(ctx: &Context, module: Ptr<Operation>) -> Result<(), Diagnostic> {
    for op in all_ops(ctx, module) {
        verify_op(ctx, op)?;
    }
    Ok(())
}

fn verify_op(ctx: &Context, op: Ptr<Operation>) -> Result<(), Diagnostic> {
    let name = op_name(ctx, op);
    if let Some(sig) = signature(&name) {
        check_operands(ctx, op, &name, &sig)?;
    }
    match name.as_str() {
        "ab.binop" => {
            let operation = op.deref(ctx);
            let lhs = kind_of(ctx, operation.get_operand(0));
            let rhs = kind_of(ctx, operation.get_operand(1));
            let result = kind_of(ctx, operation.get_result(0));
            if lhs != rhs || lhs != result {
                return Err(Diagnostic::at_op(
                    ctx,
                    op,
                    format!(
                        "type mismatch in ab.binop: lhs is {}, rhs is {}, result is {}; \
                         all three must be the same integer type (insert ab.cast)",
                        lhs.describe(),
                        rhs.describe(),
                        result.describe()
                    ),
                ));
            }
        }
        "ab.at" => {
            let operation = op.deref(ctx);
            let remote = kind_of(ctx, operation.get_operand(0));
            let result = kind_of(ctx, operation.get_result(0));
            if let (ValueKind::Remote(a), ValueKind::RemotePointer(b)) = (remote, result)
                && a != b
            {
                return Err(Diagnostic::at_op(
                    ctx,
                    op,
                    format!(
                        "type mismatch in ab.at: the region has {a}-byte elements but the result \
                         is ab.remote_ptr <{b}>; use ab.remote_ptr <{a}>"
                    ),
                ));
            }
        }
        "ab.for" => check_single_block_region(ctx, op, 1)?,
        "ab.if" => check_single_block_region(ctx, op, 0)?,
        "ab.put" => check_put(ctx, op)?,
        "ab.signal" => check_signal(ctx, op)?,
        _ => {}
    }
    Ok(())
}

fn check_operands(
    ctx: &Context,
    op: Ptr<Operation>,
    name: &str,
    sig: &Signature,
) -> Result<(), Diagnostic> {
    let count = op.deref(ctx).get_num_operands();
    let required = sig.operands.len();
    let allowed = required + sig.optional.len();
    if count < required || count > allowed {
        let mut expected: Vec<String> = sig.operand_names.iter().map(|n| n.to_string()).collect();
        expected.extend(sig.optional.iter().map(|(n, _)| format!("[{n}]")));
        return Err(Diagnostic::at_op(
            ctx,
            op,
            format!(
                "{name} takes operands ({}) but has {count}",
                expected.join(", ")
            ),
        ));
    }
    for index in 0..count {
        let (operand_name, expect) = if index < required {
            (sig.operand_names[index], sig.operands[index])
        } else {
            sig.optional[index - required]
        };
        let value = op.deref(ctx).get_operand(index);
        let kind = kind_of(ctx, value);
        if !expect.accepts(kind) {
            return Err(Diagnostic::at_op(
                ctx,
                op,
                format!(
                    "type mismatch in {name}: operand {} ('{operand_name}') must be {} but is {}",
                    index + 1,
                    expect.describe(),
                    kind.describe()
                ),
            ));
        }
    }
    Ok(())
}

fn check_single_block_region(
    ctx: &Context,
    op: Ptr<Operation>,
    arguments: usize,
) -> Result<(), Diagnostic> {
    let name = op_name(ctx, op);
    let region = op.deref(ctx).get_region(0);
    if region.deref(ctx).get_head().is_none() {
        return Err(Diagnostic::at_op(
            ctx,
            op,
            format!("{name} needs a body block"),
        ));
    }
    let block = region_block(ctx, op, 0);
    let count = block.deref(ctx).get_num_arguments();
    if count != arguments {
        return Err(Diagnostic::at_op(
            ctx,
            op,
            format!(
                "{name}'s body block takes {arguments} argument(s) (the induction variable for \
                 ab.for, none for ab.if) but declares {count}"
            ),
        ));
    }
    Ok(())
}

/// The `length_bytes` of the `ab.remote` behind a remote pointer, when declared.
pub fn region_length_bytes(ctx: &Context, remote_pointer: Value) -> Option<i64> {
    let at = remote_pointer.defining_op()?;
    let remote = at.deref(ctx).get_operand(0).defining_op()?;
    attrs::get_int(ctx, remote, "length_bytes")
}

fn check_put(ctx: &Context, op: Ptr<Operation>) -> Result<(), Diagnostic> {
    use crate::ab::ops::operand::put;
    let operation = op.deref(ctx);
    let destination = operation.get_operand(put::DESTINATION);
    let bytes = constant_value(ctx, operation.get_operand(put::BYTES));
    let element_bytes = match kind_of(ctx, destination) {
        ValueKind::RemotePointer(n) => i64::from(n),
        _ => 1,
    };
    drop(operation);
    if let Some(bytes) = bytes {
        if bytes < 0 {
            return Err(Diagnostic::at_op(
                ctx,
                op,
                format!("ab.put of {bytes} bytes: the byte count must not be negative"),
            ));
        }
        if bytes % element_bytes != 0 {
            return Err(Diagnostic::at_op(
                ctx,
                op,
                format!(
                    "misaligned ab.put: {bytes} bytes is not a multiple of the destination's \
                     {element_bytes}-byte elements; send whole elements"
                ),
            ));
        }
        let index = destination
            .defining_op()
            .and_then(|at| constant_value(ctx, at.deref(ctx).get_operand(1)));
        if let (Some(length), Some(index)) = (region_length_bytes(ctx, destination), index) {
            let end = index * element_bytes + bytes;
            if end > length || index < 0 {
                return Err(Diagnostic::at_op(
                    ctx,
                    op,
                    format!(
                        "ab.put writes bytes [{}, {end}) of a region of {length} bytes: \
                         the put is larger than its region; shrink the put or the offset",
                        index * element_bytes
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn check_signal(ctx: &Context, op: Ptr<Operation>) -> Result<(), Diagnostic> {
    use crate::ab::ops::operand::signal;
    let flag = op.deref(ctx).get_operand(signal::FLAG);
    if let ValueKind::RemotePointer(n) = kind_of(ctx, flag)
        && n != 8
    {
        return Err(Diagnostic::at_op(
            ctx,
            op,
            format!(
                "misaligned ab.signal: the flag region has {n}-byte elements; signals update \
                 8-byte aligned 64-bit flags (declare the region ab.remote <8>)"
            ),
        ));
    }
    if attrs::get(ctx, op, "op").is_some()
        && attrs::get_typed::<SignalOperation>(ctx, op, "op").is_none()
    {
        return Err(Diagnostic::at_op(
            ctx,
            op,
            "ab.signal's 'op' attribute must be ab.signal_op Set or ab.signal_op Add",
        ));
    }
    Ok(())
}
