//! Facts about scalar values: constants, integer widths, and what a value is derived from.
//!
//! Passes ask "is this byte count a constant?", "what is this loop's trip count?" and "does
//! this peer index depend only on the program id, and how?". This module answers by walking
//! def-use chains; it never rewrites IR. The simulator has its own full interpreter.

use pliron::{
    builtin::{attributes::IntegerAttr, ops::ConstantOp, types::IntegerType},
    context::{Context, Ptr},
    op::Op,
    operation::Operation,
    r#type::Typed,
    utils::apint::APInt,
    value::Value,
};

use crate::ab::{
    attributes::BinaryOperator,
    ops::{BinaryOp, CastOp, ForOp},
};
use crate::text::op_name;

/// The integer width of `value`'s type, if it is an integer.
pub fn integer_width(ctx: &Context, value: Value) -> Option<u32> {
    let ty = value.get_type(ctx);
    let ty = ty.deref(ctx);
    ty.downcast_ref::<IntegerType>().map(|int| int.width())
}

/// The constant value of `value` when it is a `builtin.constant` integer, or arithmetic on them.
pub fn constant_value(ctx: &Context, value: Value) -> Option<i64> {
    let op = value.defining_op()?;
    if let Some(constant) = Operation::get_op::<ConstantOp>(op, ctx) {
        let attr = constant.get_attr_builtin_constant_value(ctx)?;
        let int = attr.downcast_ref::<IntegerAttr>()?;
        return Some(APInt::from(int.clone()).to_i64());
    }
    if let Some(cast) = Operation::get_op::<CastOp>(op, ctx) {
        let input = constant_value(ctx, cast.get_operation().deref(ctx).get_operand(0))?;
        let width = integer_width(ctx, value)?;
        return Some(truncate_signed(input, width));
    }
    if let Some(binary) = Operation::get_op::<BinaryOp>(op, ctx) {
        let operation = binary.get_operation().deref(ctx);
        let lhs = constant_value(ctx, operation.get_operand(0))?;
        let rhs = constant_value(ctx, operation.get_operand(1))?;
        let width = integer_width(ctx, value).unwrap_or(64);
        return evaluate_binary(binary.operator(ctx), lhs, rhs).map(|v| truncate_signed(v, width));
    }
    None
}

/// Applies a binary operator with the simulator's semantics (wrapping, signed, comparisons 0/1).
/// Returns `None` for division or remainder by zero.
pub fn evaluate_binary(operator: BinaryOperator, lhs: i64, rhs: i64) -> Option<i64> {
    Some(match operator {
        BinaryOperator::Add => lhs.wrapping_add(rhs),
        BinaryOperator::Sub => lhs.wrapping_sub(rhs),
        BinaryOperator::Mul => lhs.wrapping_mul(rhs),
        BinaryOperator::Div => lhs.checked_div(rhs)?,
        BinaryOperator::Rem => lhs.checked_rem(rhs)?,
        BinaryOperator::Min => lhs.min(rhs),
        BinaryOperator::Max => lhs.max(rhs),
        BinaryOperator::And => lhs & rhs,
        BinaryOperator::Or => lhs | rhs,
        BinaryOperator::Eq => i64::from(lhs == rhs),
        BinaryOperator::Ne => i64::from(lhs != rhs),
        BinaryOperator::Lt => i64::from(lhs < rhs),
        BinaryOperator::Le => i64::from(lhs <= rhs),
        BinaryOperator::Gt => i64::from(lhs > rhs),
        BinaryOperator::Ge => i64::from(lhs >= rhs),
    })
}

/// Sign-truncates `value` to `width` bits (the value an integer of that width holds).
pub fn truncate_signed(value: i64, width: u32) -> i64 {
    if width >= 64 || width == 0 {
        value
    } else {
        let shift = 64 - width;
        (value << shift) >> shift
    }
}

/// The trip count of an `ab.for` whose bounds and step are constants.
pub fn constant_trip_count(ctx: &Context, for_op: Ptr<Operation>) -> Option<i64> {
    let operation = for_op.deref(ctx);
    let lower = constant_value(ctx, operation.get_operand(0))?;
    let upper = constant_value(ctx, operation.get_operand(1))?;
    let step = constant_value(ctx, operation.get_operand(2))?;
    if step <= 0 {
        return None;
    }
    Some(((upper - lower).max(0) + step - 1) / step)
}

/// How a value varies with the program id: used to find which program owns a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgramIdDependence {
    /// The same in every program (a constant, a kernel argument, or arithmetic on them).
    Uniform,
    /// Strictly increasing in the program id: distinct programs get distinct values.
    StrictlyIncreasing,
    /// Non-decreasing in the program id (e.g. `pid >= RANK`).
    NonDecreasing,
    /// Anything else (loop variables, loads, unknown arithmetic).
    Unknown,
}

/// Classifies `value` by how it depends on `ab.program_id`.
///
/// Sums of non-decreasing terms with at least one strictly increasing term are strictly
/// increasing; multiplying by a positive constant keeps the class; comparisons `pid >= c`
/// and `pid > c` are non-decreasing; casts that widen keep the class.
pub fn program_id_dependence(ctx: &Context, value: Value) -> ProgramIdDependence {
    use ProgramIdDependence::*;
    let Some(op) = value.defining_op() else {
        // A block argument: kernel arguments are uniform, loop induction variables are not.
        let block = value.get_parent_block(ctx);
        let is_kernel_argument = block
            .and_then(|block| block.deref(ctx).get_parent_op(ctx))
            .is_some_and(|parent| op_name(ctx, parent) == "builtin.func");
        return if is_kernel_argument { Uniform } else { Unknown };
    };
    let name = op_name(ctx, op);
    match name.as_str() {
        "builtin.constant" | "ab.rank" | "ab.world_size" => Uniform,
        "ab.program_id" => StrictlyIncreasing,
        "ab.cast" => {
            let input = op.deref(ctx).get_operand(0);
            let widens = integer_width(ctx, value) >= integer_width(ctx, input);
            let inner = program_id_dependence(ctx, input);
            if widens || inner == Uniform {
                inner
            } else {
                Unknown
            }
        }
        "ab.binop" => {
            let binary = Operation::get_op::<BinaryOp>(op, ctx).expect("name matched");
            let lhs_value = op.deref(ctx).get_operand(0);
            let rhs_value = op.deref(ctx).get_operand(1);
            let lhs = program_id_dependence(ctx, lhs_value);
            let rhs = program_id_dependence(ctx, rhs_value);
            if lhs == Uniform && rhs == Uniform {
                return Uniform;
            }
            match binary.operator(ctx) {
                BinaryOperator::Add => match (lhs, rhs) {
                    (Unknown, _) | (_, Unknown) => Unknown,
                    (StrictlyIncreasing, _) | (_, StrictlyIncreasing) => StrictlyIncreasing,
                    _ => NonDecreasing,
                },
                BinaryOperator::Sub if rhs == Uniform => lhs,
                BinaryOperator::Mul => {
                    let (varying, factor) = if lhs == Uniform {
                        (rhs, constant_value(ctx, lhs_value))
                    } else if rhs == Uniform {
                        (lhs, constant_value(ctx, rhs_value))
                    } else {
                        return Unknown;
                    };
                    match factor {
                        Some(f) if f > 0 => varying,
                        _ => Unknown,
                    }
                }
                BinaryOperator::Ge | BinaryOperator::Gt if rhs == Uniform => {
                    if lhs == Unknown {
                        Unknown
                    } else {
                        NonDecreasing
                    }
                }
                _ => Unknown,
            }
        }
        _ => Unknown,
    }
}

/// True when `value` is defined inside the body of `for_op` (directly or nested).
pub fn defined_inside(ctx: &Context, value: Value, for_op: Ptr<Operation>) -> bool {
    let mut block = value.get_parent_block(ctx);
    while let Some(current) = block {
        let Some(parent) = current.deref(ctx).get_parent_op(ctx) else {
            return false;
        };
        if parent == for_op {
            return true;
        }
        block = parent.deref(ctx).get_parent_block();
    }
    false
}

/// Returns the `ab.for` ops enclosing `op`, innermost first.
pub fn enclosing_loops(ctx: &Context, op: Ptr<Operation>) -> Vec<Ptr<Operation>> {
    let mut loops = Vec::new();
    let mut current = op.deref(ctx).get_parent_op(ctx);
    while let Some(parent) = current {
        if Operation::get_op::<ForOp>(parent, ctx).is_some() {
            loops.push(parent);
        }
        current = parent.deref(ctx).get_parent_op(ctx);
    }
    loops
}

/// True when `op` is nested (at any depth) in an `ab.if`: it may not execute.
pub fn inside_if(ctx: &Context, op: Ptr<Operation>) -> bool {
    let mut current = op.deref(ctx).get_parent_op(ctx);
    while let Some(parent) = current {
        if op_name(ctx, parent) == "ab.if" {
            return true;
        }
        current = parent.deref(ctx).get_parent_op(ctx);
    }
    false
}

/// True when `value` is computed from `root` (through any ops' operands).
pub fn depends_on(ctx: &Context, value: Value, root: Value) -> bool {
    if value == root {
        return true;
    }
    let Some(op) = value.defining_op() else {
        return false;
    };
    let operands: Vec<Value> = op.deref(ctx).operands().collect();
    operands
        .into_iter()
        .any(|operand| depends_on(ctx, operand, root))
}

/// True when distinct values of `induction` (a loop variable advancing by `step`, when
/// known) give distinct values of `value`: `value` is `induction` under additions and
/// subtractions of terms that do not depend on it, multiplications by a nonzero constant,
/// widening casts, and a division of `induction` itself by a constant that divides `step`
/// (`i / 2` over `i = 0, 2, 4, ...`).
pub fn varies_injectively_with(
    ctx: &Context,
    value: Value,
    induction: Value,
    step: Option<i64>,
) -> bool {
    if value == induction {
        return true;
    }
    let Some(op) = value.defining_op() else {
        return false;
    };
    match op_name(ctx, op).as_str() {
        "ab.cast" => {
            let input = op.deref(ctx).get_operand(0);
            integer_width(ctx, value) >= integer_width(ctx, input)
                && varies_injectively_with(ctx, input, induction, step)
        }
        "ab.binop" => {
            let binary = Operation::get_op::<BinaryOp>(op, ctx).expect("name matched");
            let lhs = op.deref(ctx).get_operand(0);
            let rhs = op.deref(ctx).get_operand(1);
            let varies = |varying: Value| varies_injectively_with(ctx, varying, induction, step);
            let one_side = |varying: Value, other: Value| {
                varies(varying) && !depends_on(ctx, other, induction)
            };
            match binary.operator(ctx) {
                BinaryOperator::Add => one_side(lhs, rhs) || one_side(rhs, lhs),
                BinaryOperator::Sub => one_side(lhs, rhs) || one_side(rhs, lhs),
                BinaryOperator::Mul => {
                    (varies(lhs) && constant_value(ctx, rhs).is_some_and(|c| c != 0))
                        || (varies(rhs) && constant_value(ctx, lhs).is_some_and(|c| c != 0))
                }
                BinaryOperator::Div => {
                    lhs == induction
                        && constant_value(ctx, rhs)
                            .zip(step)
                            .is_some_and(|(divisor, step)| divisor != 0 && step % divisor == 0)
                }
                _ => false,
            }
        }
        _ => false,
    }
}
