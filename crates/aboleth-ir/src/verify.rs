//! The semantic verifier: structure, operand and result types, region bounds and alignment
//! rules of the `ab` dialect, with located errors.
//!
//! pliron checks operand and result counts declared by interfaces and SSA dominance; this
//! module checks what the program means, so that no pass, lowering or simulator ever meets IR
//! it cannot handle:
//! - structure: a module holds only kernels (`builtin.func`); a kernel's function type has no
//!   results and its arguments match its one block's arguments in number and type, and are
//!   local pointers or integers; every region of a kernel, `ab.for` or `ab.if` is one block that
//!   ends in its terminator (`ab.return` for a kernel, `ab.yield` for the others), and neither
//!   terminator appears anywhere else;
//! - result types of every `ab` op (`ab.put`/`ab.signal` -> `ab.token`, `ab.endpoint` ->
//!   `ab.endpoint`, `ab.remote` -> `ab.remote <E>` with `E >= 1`, `ab.at` -> the region's
//!   `ab.remote_ptr <E>`, `ab.ptr_add` -> `ab.ptr`, `ab.program_id` -> i32, `ab.rank` and
//!   `ab.world_size` -> i64, `ab.binop`/`ab.cast`/`ab.load` -> integers) and their operand types
//!   (a put takes an endpoint, a remote pointer, a local pointer, a byte count and a key);
//! - integers are signless `builtin.integer iN` with 1 <= N <= 64; what `ab.load` and
//!   `ab.store` move is 8, 16, 32 or 64 bits wide; a loop's bounds, step and induction variable
//!   share one type;
//! - constants that make a program meaningless: a loop step <= 0, a division or remainder by
//!   zero (or of i64::MIN by -1), a put of a negative or misaligned size or past its region's `length_bytes`, a
//!   signal on a flag that is not an 8-byte element.
//!
//! Every message says what the rule is and how to fix the input; docs/PROGRAMMING_MODEL.md
//! lists the same rules. The nesting limit is checked on the text before parsing
//! ([`crate::text::REGION_NESTING_MAX`]). The verifier never changes IR.

use pliron::{
    basic_block::BasicBlock,
    builtin::{
        attributes::IntegerAttr,
        ops::{ConstantOp, FuncOp},
        type_interfaces::FunctionTypeInterface,
        types::{FunctionType, IntegerType, Signedness},
    },
    context::{Context, Ptr},
    linked_list::ContainsLinkedList,
    operation::Operation,
    printable::Printable,
    r#type::{TypeHandle, Typed},
    value::Value,
};

use crate::ab::attributes::{BinaryOperator, Comparison, SignalOperation};
use crate::ab::ops::BinaryOp;
use crate::ab::types::{EndpointType, PointerType, RemotePointerType, RemoteType, TokenType};
use crate::attrs;
use crate::scalar::constant_value;
use crate::text::{Diagnostic, op_name};
use crate::walk::{all_ops, block_ops, region_block};

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
    kind_of_type(ctx, value.get_type(ctx))
}

/// Classifies a type (signed and unsigned integers are [`ValueKind::Other`]: the `ab` dialect's
/// integers are signless, their operators say how they are read).
pub fn kind_of_type(ctx: &Context, ty: TypeHandle) -> ValueKind {
    let ty = ty.deref(ctx);
    if let Some(int) = ty.downcast_ref::<IntegerType>() {
        if int.signedness() == Signedness::Signless {
            ValueKind::Integer(int.width())
        } else {
            ValueKind::Other
        }
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
            (Expect::Integer, ValueKind::Integer(1..=64))
                | (Expect::Endpoint, ValueKind::Endpoint)
                | (Expect::Token, ValueKind::Token)
                | (Expect::Pointer, ValueKind::Pointer)
                | (Expect::Remote, ValueKind::Remote(_))
                | (Expect::RemotePointer, ValueKind::RemotePointer(_))
        )
    }

    fn describe(self) -> &'static str {
        match self {
            Expect::Integer => "an integer (builtin.integer i1 to i64)",
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

/// Integer widths the `ab` dialect computes with: the simulator and the code generator hold
/// every integer in 64 bits.
pub fn is_supported_width(width: u32) -> bool {
    (1..=64).contains(&width)
}

/// Widths `ab.load` and `ab.store` move: whole bytes, as the hardware's loads and stores do.
pub fn is_memory_width(width: u32) -> bool {
    matches!(width, 8 | 16 | 32 | 64)
}

/// How a type reads in an error message: its kind, or the type itself when it has none.
pub fn describe_type(ctx: &Context, ty: TypeHandle) -> String {
    match kind_of_type(ctx, ty) {
        ValueKind::Other => format!("a value of type {}", ty.disp(ctx)),
        kind => kind.describe(),
    }
}

fn describe_value(ctx: &Context, value: Value) -> String {
    describe_type(ctx, value.get_type(ctx))
}

/// Verifies `module` against the rules of this module (listed in its documentation).
pub fn verify_module(ctx: &Context, module: Ptr<Operation>) -> Result<(), Diagnostic> {
    check_module(ctx, module)?;
    for op in all_ops(ctx, module) {
        check_placement(ctx, op)?;
        verify_op(ctx, op)?;
    }
    Ok(())
}

fn check_module(ctx: &Context, module: Ptr<Operation>) -> Result<(), Diagnostic> {
    let name = op_name(ctx, module);
    if name != "builtin.module" {
        return Err(Diagnostic::at_op(
            ctx,
            module,
            format!(
                "the top of an .abo file is one builtin.module, not {name}: \
                 `builtin.module @name {{ ^entry(): ... }}` with the kernels inside"
            ),
        ));
    }
    let regions: Vec<_> = module.deref(ctx).regions().collect();
    for region in regions {
        let blocks: Vec<_> = region.deref(ctx).iter(ctx).collect();
        for block in blocks {
            for op in block_ops(ctx, block) {
                let inner = op_name(ctx, op);
                if inner != "builtin.func" {
                    return Err(Diagnostic::at_op(
                        ctx,
                        op,
                        format!(
                            "{inner} at the top level of the module: a module holds only \
                             kernels (builtin.func); move it into a kernel"
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Where structural ops may appear, and that every region ends in its terminator.
fn check_placement(ctx: &Context, op: Ptr<Operation>) -> Result<(), Diagnostic> {
    let name = op_name(ctx, op);
    let parent = op.deref(ctx).get_parent_op(ctx);
    let parent_name = parent
        .map(|parent| op_name(ctx, parent))
        .unwrap_or_default();
    match name.as_str() {
        "builtin.module" => {
            return Err(Diagnostic::at_op(
                ctx,
                op,
                "a builtin.module inside another op: an .abo file holds exactly one module, \
                 at the top; put every kernel in it",
            ));
        }
        "builtin.func" => {
            if parent_name != "builtin.module" {
                return Err(Diagnostic::at_op(
                    ctx,
                    op,
                    format!(
                        "a kernel (builtin.func) inside {parent_name}: kernels are defined at the \
                         top level of the module"
                    ),
                ));
            }
            check_region_shape(ctx, op, "ab.return")?;
            check_kernel_signature(ctx, op)?;
        }
        "ab.for" | "ab.if" => check_region_shape(ctx, op, "ab.yield")?,
        _ => {}
    }
    if let Some(diagnostic) = misplaced_terminator(ctx, op) {
        return Err(diagnostic);
    }
    if matches!(name.as_str(), "ab.return" | "ab.yield")
        && let Some(block) = op.deref(ctx).get_parent_block()
        && block.deref(ctx).get_tail() != Some(op)
    {
        return Err(Diagnostic::at_op(
            ctx,
            op,
            format!(
                "ops after {name}: a terminator must be the last op of its block (the ops \
                 after it would never run); move or delete them"
            ),
        ));
    }
    Ok(())
}

/// The error for an `ab.return` outside a kernel's block or an `ab.yield` outside an `ab.for` or
/// `ab.if` body, located at the terminator.
fn misplaced_terminator(ctx: &Context, op: Ptr<Operation>) -> Option<Diagnostic> {
    let name = op_name(ctx, op);
    let parent = op.deref(ctx).get_parent_op(ctx);
    let parent_name = parent
        .map(|parent| op_name(ctx, parent))
        .unwrap_or_default();
    let message = match name.as_str() {
        "ab.return" if parent_name != "builtin.func" => format!(
            "ab.return inside {parent_name}: ab.return ends a kernel and may appear only as the \
             last op of the kernel's block; end this body with ab.yield (to skip the rest of a \
             kernel, guard it with ab.if)"
        ),
        "ab.yield" if !matches!(parent_name.as_str(), "ab.for" | "ab.if") => {
            let place = if parent_name == "builtin.func" {
                "a kernel's block"
            } else {
                parent_name.as_str()
            };
            format!(
                "ab.yield ends {place}: ab.yield ends the body of an ab.for or ab.if; a kernel \
                 ends with ab.return"
            )
        }
        _ => return None,
    };
    Some(Diagnostic::at_op(ctx, op, message))
}

/// A kernel, `ab.for` or `ab.if` has one region of one block that ends in `terminator`.
fn check_region_shape(
    ctx: &Context,
    op: Ptr<Operation>,
    terminator: &str,
) -> Result<(), Diagnostic> {
    let name = op_name(ctx, op);
    let what = if name == "builtin.func" {
        "kernel".to_string()
    } else {
        name.clone()
    };
    let region = op.deref(ctx).get_region(0);
    let blocks: Vec<Ptr<BasicBlock>> = region.deref(ctx).iter(ctx).collect();
    let Some(block) = blocks.first().copied() else {
        return Err(Diagnostic::at_op(
            ctx,
            op,
            format!("the {what} needs a body block ending in {terminator}"),
        ));
    };
    if blocks.len() > 1 {
        return Err(Diagnostic::at_op(
            ctx,
            op,
            format!(
                "the {what}'s body has {} blocks: bodies are one block (ab.for and ab.if \
                 express control flow)",
                blocks.len()
            ),
        ));
    }
    let last = block.deref(ctx).get_tail();
    // A terminator of the wrong kind is reported where it stands, with its own rule.
    if let Some(diagnostic) = last.and_then(|last| misplaced_terminator(ctx, last)) {
        return Err(diagnostic);
    }
    if last.is_none_or(|last| op_name(ctx, last) != terminator) {
        let found = match last {
            Some(last) => format!("its last op is {}", op_name(ctx, last)),
            None => "it is empty".to_string(),
        };
        return Err(Diagnostic::at_op(
            ctx,
            op,
            format!("the {what}'s body does not end with {terminator} ({found}); add {terminator}"),
        ));
    }
    Ok(())
}

/// A kernel's function type returns nothing, and its arguments are its block's arguments:
/// local pointers or integers.
fn check_kernel_signature(ctx: &Context, op: Ptr<Operation>) -> Result<(), Diagnostic> {
    let Some(func) = Operation::get_op::<FuncOp>(op, ctx) else {
        return Ok(());
    };
    let kernel = crate::walk::kernel_name(ctx, op);
    let function_type = func.get_type(ctx);
    let (arguments, results) = {
        let ty = function_type.deref(ctx);
        let Some(function) = ty.downcast_ref::<FunctionType>() else {
            return Err(Diagnostic::at_op(
                ctx,
                op,
                format!("kernel @{kernel}'s type must be a builtin.function <(...) -> ()>"),
            ));
        };
        (function.arg_types(), function.res_types())
    };
    if !results.is_empty() {
        return Err(Diagnostic::at_op(
            ctx,
            op,
            format!(
                "kernel @{kernel}'s function type returns {} value(s): kernels return nothing; \
                 write `-> ()`",
                results.len()
            ),
        ));
    }
    let block = region_block(ctx, op, 0);
    let block_arguments: Vec<Value> = block.deref(ctx).arguments().collect();
    if block_arguments.len() != arguments.len() {
        return Err(Diagnostic::at_op(
            ctx,
            op,
            format!(
                "kernel @{kernel}'s function type takes {} argument(s) but its entry block \
                 declares {}; make them agree",
                arguments.len(),
                block_arguments.len()
            ),
        ));
    }
    for (index, (declared, argument)) in arguments.iter().zip(&block_arguments).enumerate() {
        let actual = argument.get_type(ctx);
        if actual != *declared {
            return Err(Diagnostic::at_op(
                ctx,
                op,
                format!(
                    "argument {} of kernel @{kernel} is {} in the function type but {} in the \
                     entry block; make them agree",
                    index + 1,
                    describe_type(ctx, *declared),
                    describe_type(ctx, actual)
                ),
            ));
        }
        match kind_of_type(ctx, actual) {
            ValueKind::Pointer => {}
            ValueKind::Integer(width) if is_supported_width(width) => {}
            _ => {
                return Err(Diagnostic::at_op(
                    ctx,
                    op,
                    format!(
                        "argument {} of kernel @{kernel} is {}: kernel arguments are local \
                         pointers (ab.ptr) or integers (builtin.integer i1 to i64); endpoints, \
                         remote regions and tokens are made inside the kernel (ab.endpoint, \
                         ab.remote, ab.put)",
                        index + 1,
                        describe_type(ctx, actual)
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// What the result of an `ab` op must be.
#[derive(Clone, Copy)]
enum ResultRule {
    /// An integer of exactly this width.
    Width(u32),
    /// An integer of a supported width.
    Integer,
    /// An integer that memory holds (8, 16, 32 or 64 bits).
    MemoryInteger,
    Pointer,
    Endpoint,
    Token,
    Remote,
    RemotePointer,
}

impl ResultRule {
    fn accepts(self, kind: ValueKind) -> bool {
        match (self, kind) {
            (ResultRule::Width(expected), ValueKind::Integer(width)) => width == expected,
            (ResultRule::Integer, ValueKind::Integer(width)) => is_supported_width(width),
            (ResultRule::MemoryInteger, ValueKind::Integer(width)) => is_memory_width(width),
            (ResultRule::Pointer, ValueKind::Pointer)
            | (ResultRule::Endpoint, ValueKind::Endpoint)
            | (ResultRule::Token, ValueKind::Token)
            | (ResultRule::Remote, ValueKind::Remote(_))
            | (ResultRule::RemotePointer, ValueKind::RemotePointer(_)) => true,
            _ => false,
        }
    }

    /// What the rule asks for, and the type to write.
    fn describe(self) -> (String, String) {
        match self {
            ResultRule::Width(width) => (
                format!("an i{width} integer"),
                format!("builtin.integer i{width}"),
            ),
            ResultRule::Integer => (
                "an integer of 1 to 64 bits".into(),
                "builtin.integer i64".into(),
            ),
            ResultRule::MemoryInteger => (
                "an integer of 8, 16, 32 or 64 bits (what a load moves)".into(),
                "builtin.integer i64".into(),
            ),
            ResultRule::Pointer => ("a local pointer".into(), "ab.ptr".into()),
            ResultRule::Endpoint => ("an endpoint".into(), "ab.endpoint".into()),
            ResultRule::Token => ("a token".into(), "ab.token".into()),
            ResultRule::Remote => ("a remote region".into(), "ab.remote <E>".into()),
            ResultRule::RemotePointer => ("a remote pointer".into(), "ab.remote_ptr <E>".into()),
        }
    }
}

fn result_rule(name: &str) -> Option<ResultRule> {
    Some(match name {
        "ab.program_id" => ResultRule::Width(32),
        "ab.rank" | "ab.world_size" => ResultRule::Width(64),
        "ab.binop" | "ab.cast" | "builtin.constant" => ResultRule::Integer,
        "ab.load" => ResultRule::MemoryInteger,
        "ab.ptr_add" => ResultRule::Pointer,
        "ab.endpoint" => ResultRule::Endpoint,
        "ab.remote" => ResultRule::Remote,
        "ab.at" => ResultRule::RemotePointer,
        "ab.put" | "ab.signal" => ResultRule::Token,
        _ => return None,
    })
}

fn check_result(ctx: &Context, op: Ptr<Operation>, name: &str) -> Result<(), Diagnostic> {
    let Some(rule) = result_rule(name) else {
        return Ok(());
    };
    if op.deref(ctx).get_num_results() != 1 {
        return Err(Diagnostic::at_op(ctx, op, format!("{name} has one result")));
    }
    let result = op.deref(ctx).get_result(0);
    let kind = kind_of(ctx, result);
    if !rule.accepts(kind) {
        let (wanted, written) = rule.describe();
        return Err(Diagnostic::at_op(
            ctx,
            op,
            format!(
                "wrong result type for {name}: its result is {wanted} but is declared {}; \
                 write `: {written}`",
                describe_value(ctx, result)
            ),
        ));
    }
    if let ValueKind::Remote(0) = kind {
        return Err(Diagnostic::at_op(
            ctx,
            op,
            "ab.remote <0>: a region's element size is at least 1 byte (`ab.at r, i` is the \
             byte offset i * E); write ab.remote <1> for a byte-addressed region",
        ));
    }
    Ok(())
}

fn verify_op(ctx: &Context, op: Ptr<Operation>) -> Result<(), Diagnostic> {
    let name = op_name(ctx, op);
    if let Some(sig) = signature(&name) {
        check_operands(ctx, op, &name, &sig)?;
    }
    check_result(ctx, op, &name)?;
    match name.as_str() {
        "builtin.constant" => check_constant(ctx, op)?,
        "ab.binop" => check_binop(ctx, op)?,
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
        "ab.store" => {
            let value = op.deref(ctx).get_operand(1);
            if let ValueKind::Integer(width) = kind_of(ctx, value)
                && !is_memory_width(width)
            {
                return Err(Diagnostic::at_op(
                    ctx,
                    op,
                    format!(
                        "ab.store of an i{width}: a store moves 8, 16, 32 or 64 bits; \
                         ab.cast the value to one of those widths"
                    ),
                ));
            }
        }
        "ab.for" => {
            check_single_block_region(ctx, op, 1)?;
            check_loop(ctx, op)?;
        }
        "ab.if" => check_single_block_region(ctx, op, 0)?,
        "ab.put" => check_put(ctx, op)?,
        "ab.signal" => check_signal(ctx, op)?,
        "ab.wait_signal" => check_wait_signal(ctx, op)?,
        _ => {}
    }
    Ok(())
}

/// `ab.wait_signal`'s optional `comparison` is an `ab.comparison`.
fn check_wait_signal(ctx: &Context, op: Ptr<Operation>) -> Result<(), Diagnostic> {
    if attrs::get(ctx, op, "comparison").is_some()
        && attrs::get_typed::<Comparison>(ctx, op, "comparison").is_none()
    {
        return Err(Diagnostic::at_op(
            ctx,
            op,
            "ab.wait_signal's 'comparison' attribute must be an ab.comparison: Eq, Ne, Gt, Le, Lt or Ge",
        ));
    }
    Ok(())
}

/// A constant in a kernel is an integer whose attribute has the result's type.
fn check_constant(ctx: &Context, op: Ptr<Operation>) -> Result<(), Diagnostic> {
    let Some(constant) = Operation::get_op::<ConstantOp>(op, ctx) else {
        return Ok(());
    };
    let result_type = op.deref(ctx).get_result(0).get_type(ctx);
    let attribute_type = constant
        .get_attr_builtin_constant_value(ctx)
        .and_then(|attr| {
            attr.downcast_ref::<IntegerAttr>()
                .map(|int| TypeHandle::from(int.get_type()))
        });
    match attribute_type {
        None => Err(Diagnostic::at_op(
            ctx,
            op,
            "builtin.constant in a kernel holds an integer: \
             `builtin.constant <builtin.integer <V: i64>> : builtin.integer i64`",
        )),
        Some(ty) if ty != result_type => Err(Diagnostic::at_op(
            ctx,
            op,
            format!(
                "builtin.constant's value is {} but its result is declared {}; make them agree",
                describe_type(ctx, ty),
                describe_type(ctx, result_type)
            ),
        )),
        Some(_) => Ok(()),
    }
}

fn check_binop(ctx: &Context, op: Ptr<Operation>) -> Result<(), Diagnostic> {
    let (lhs_value, rhs_value, result_value) = {
        let operation = op.deref(ctx);
        (
            operation.get_operand(0),
            operation.get_operand(1),
            operation.get_result(0),
        )
    };
    let lhs = kind_of(ctx, lhs_value);
    let rhs = kind_of(ctx, rhs_value);
    let result = kind_of(ctx, result_value);
    if lhs != rhs || lhs != result {
        return Err(Diagnostic::at_op(
            ctx,
            op,
            format!(
                "type mismatch in ab.binop: lhs is {}, rhs is {}, result is {}; \
                 all three must be the same integer type (insert ab.cast)",
                describe_value(ctx, lhs_value),
                describe_value(ctx, rhs_value),
                describe_value(ctx, result_value)
            ),
        ));
    }
    let Some(binary) = Operation::get_op::<BinaryOp>(op, ctx) else {
        return Ok(());
    };
    let operator = binary.get_attr_ab_binop_kind(ctx).map(|kind| *kind);
    if let Some(operator @ (BinaryOperator::Div | BinaryOperator::Rem)) = operator
        && constant_value(ctx, rhs_value) == Some(0)
    {
        let what = if operator == BinaryOperator::Div {
            "division"
        } else {
            "remainder"
        };
        return Err(Diagnostic::at_op(
            ctx,
            op,
            format!(
                "{what} by zero: the right operand of ab.binop {operator:?} is the constant 0; \
                 divide by a non-zero value"
            ),
        ));
    }
    if let (Some(operator), Some(lhs), Some(rhs)) = (
        operator,
        constant_value(ctx, lhs_value),
        constant_value(ctx, rhs_value),
    ) && rhs != 0
        && crate::scalar::evaluate_binary(operator, lhs, rhs).is_none()
    {
        return Err(Diagnostic::at_op(
            ctx,
            op,
            format!(
                "ab.binop {operator:?} of {lhs} by {rhs} overflows a 64-bit integer (the most \
                 negative value divided by -1 is not representable); change the operands"
            ),
        ));
    }
    Ok(())
}

/// A loop's bounds, step and induction variable share one integer type, and a constant step
/// is positive (loops count up from `lower` while the counter is below `upper`).
fn check_loop(ctx: &Context, op: Ptr<Operation>) -> Result<(), Diagnostic> {
    let (lower, upper, step) = {
        let operation = op.deref(ctx);
        (
            operation.get_operand(0),
            operation.get_operand(1),
            operation.get_operand(2),
        )
    };
    let induction = region_block(ctx, op, 0).deref(ctx).get_argument(0);
    let kinds = [
        ("lower bound", lower),
        ("upper bound", upper),
        ("step", step),
        ("induction variable", induction),
    ];
    let first = lower.get_type(ctx);
    for (what, value) in kinds {
        if value.get_type(ctx) != first {
            return Err(Diagnostic::at_op(
                ctx,
                op,
                format!(
                    "type mismatch in ab.for: the lower bound is {} but the {what} is {}; the \
                     bounds, the step and the induction variable must have one integer type \
                     (insert ab.cast)",
                    describe_value(ctx, lower),
                    describe_value(ctx, value)
                ),
            ));
        }
    }
    if let Some(step) = constant_value(ctx, step)
        && step <= 0
    {
        return Err(Diagnostic::at_op(
            ctx,
            op,
            format!(
                "ab.for with step {step}: the step must be positive (a loop counts up from its \
                 lower bound while the counter is below its upper bound); to count down, \
                 compute the index from an up-counting loop"
            ),
        ));
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
                    describe_value(ctx, value)
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
    let at = remote_pointer
        .defining_op()
        .filter(|at| op_name(ctx, *at) == "ab.at")?;
    let remote = at
        .deref(ctx)
        .get_operand(0)
        .defining_op()
        .filter(|remote| op_name(ctx, *remote) == "ab.remote")?;
    attrs::get_int(ctx, remote, "length_bytes")
}

fn check_put(ctx: &Context, op: Ptr<Operation>) -> Result<(), Diagnostic> {
    use crate::ab::ops::operand::put;
    let operation = op.deref(ctx);
    let destination = operation.get_operand(put::DESTINATION);
    let bytes = constant_value(ctx, operation.get_operand(put::BYTES));
    // ab.remote_ptr <0> cannot reach here (ab.remote <0> is refused first); max(1) keeps the
    // remainder below defined whatever order rules run in.
    let element_bytes = match kind_of(ctx, destination) {
        ValueKind::RemotePointer(n) => i64::from(n).max(1),
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
            .filter(|at| op_name(ctx, *at) == "ab.at")
            .and_then(|at| constant_value(ctx, at.deref(ctx).get_operand(1)));
        if let (Some(length), Some(index)) = (region_length_bytes(ctx, destination), index) {
            // In i128: a constant index near i64::MAX times the element size must not wrap.
            let start = i128::from(index) * i128::from(element_bytes);
            let end = start + i128::from(bytes);
            if end > i128::from(length) || index < 0 {
                return Err(Diagnostic::at_op(
                    ctx,
                    op,
                    format!(
                        "ab.put writes bytes [{start}, {end}) of a region of {length} bytes: \
                         the put is larger than its region; shrink the put or the offset"
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
