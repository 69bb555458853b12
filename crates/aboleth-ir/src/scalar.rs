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
    // In i128: `upper - lower` of two i64 constants can exceed i64 (a loop from i64::MIN to
    // i64::MAX); a count that does not fit an i64 is treated as unknown.
    let span = (i128::from(upper) - i128::from(lower)).max(0);
    i64::try_from((span + i128::from(step) - 1) / i128::from(step)).ok()
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

/// True when `value` is computed from `root` (through any ops' operands). Each op is visited
/// once, so shared subexpressions cost nothing extra.
pub fn depends_on(ctx: &Context, value: Value, root: Value) -> bool {
    let mut pending = vec![value];
    let mut seen = std::collections::HashSet::new();
    while let Some(current) = pending.pop() {
        if current == root {
            return true;
        }
        if !seen.insert(current) {
            continue;
        }
        if let Some(op) = current.defining_op() {
            pending.extend(op.deref(ctx).operands());
        }
    }
    false
}

/// What is known of a loop variable: its constant bounds and step, when they are constants.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InductionRange {
    /// First value.
    pub lower: Option<i64>,
    /// Bound (exclusive).
    pub upper: Option<i64>,
    /// Increment.
    pub step: Option<i64>,
}

impl InductionRange {
    /// The bounds and step of `for_op`'s variable.
    pub fn of_loop(ctx: &Context, for_op: Ptr<Operation>) -> InductionRange {
        let operand = |index| constant_value(ctx, for_op.deref(ctx).get_operand(index));
        InductionRange {
            lower: operand(0),
            upper: operand(1),
            step: operand(2),
        }
    }

    /// Whether every value the variable takes fits a signed integer of `width` bits.
    fn fits(&self, width: u32) -> bool {
        let (Some(lower), Some(upper)) = (self.lower, self.upper) else {
            return false;
        };
        if width >= 64 {
            return true;
        }
        let limit = (1i64 << (width - 1)) - 1;
        lower >= -limit - 1 && upper.saturating_sub(1) <= limit
    }

    /// How far apart its extreme values are (`upper - lower`), when known.
    fn span(&self) -> Option<i64> {
        self.upper?.checked_sub(self.lower?)
    }
}

/// How deep [`varies_injectively_with`] follows an expression before it answers "no".
const INJECTIVITY_DEPTH_MAX: u32 = 32;

/// True when `value` does not change across the iterations of `for_op`: defined outside it, a
/// constant, or pure arithmetic (`ab.binop`, `ab.cast`) on such values.
pub fn loop_invariant(ctx: &Context, value: Value, for_op: Ptr<Operation>) -> bool {
    fn invariant(ctx: &Context, value: Value, for_op: Ptr<Operation>, depth: u32) -> bool {
        if !defined_inside(ctx, value, for_op) || constant_value(ctx, value).is_some() {
            return true;
        }
        let Some(op) = value.defining_op() else {
            return false; // the loop's own variable, or a nested loop's
        };
        depth < INJECTIVITY_DEPTH_MAX
            && matches!(op_name(ctx, op).as_str(), "ab.binop" | "ab.cast")
            && op
                .deref(ctx)
                .operands()
                .all(|operand| invariant(ctx, operand, for_op, depth + 1))
    }
    invariant(ctx, value, for_op, 0)
}

/// True when distinct iterations of `for_op` give distinct values of `value` (modulo its
/// width): `value` is the loop variable under additions and subtractions of loop-invariant
/// terms ([`loop_invariant`]), multiplications by a constant that is odd or small enough that
/// the products do not wrap, a narrowing cast of the variable itself whose width holds the whole
/// range (the Triton bridge's i32 loops), widening casts, and a division of the variable itself
/// by a positive constant that divides a positive step, from a non-negative start (`i / 2` over
/// `i = 0, 2, 4, ...`). Anything else, or an expression deeper than 32 ops, is "no".
pub fn varies_injectively_with(ctx: &Context, value: Value, for_op: Ptr<Operation>) -> bool {
    let induction = crate::walk::region_block(ctx, for_op, 0)
        .deref(ctx)
        .get_argument(0);
    let range = InductionRange::of_loop(ctx, for_op);
    injective(ctx, value, induction, for_op, range, 0)
}

fn injective(
    ctx: &Context,
    value: Value,
    induction: Value,
    for_op: Ptr<Operation>,
    range: InductionRange,
    depth: u32,
) -> bool {
    if value == induction {
        return true;
    }
    if depth >= INJECTIVITY_DEPTH_MAX {
        return false;
    }
    let Some(op) = value.defining_op() else {
        return false;
    };
    let varies = |varying: Value| injective(ctx, varying, induction, for_op, range, depth + 1);
    let invariant = |other: Value| loop_invariant(ctx, other, for_op);
    match op_name(ctx, op).as_str() {
        "ab.cast" => {
            let input = op.deref(ctx).get_operand(0);
            let widens = integer_width(ctx, value) >= integer_width(ctx, input);
            let narrows_the_range = input == induction
                && integer_width(ctx, value).is_some_and(|width| range.fits(width));
            (widens && varies(input)) || narrows_the_range
        }
        "ab.binop" => {
            let binary = Operation::get_op::<BinaryOp>(op, ctx).expect("name matched");
            let lhs = op.deref(ctx).get_operand(0);
            let rhs = op.deref(ctx).get_operand(1);
            let width = integer_width(ctx, value).unwrap_or(64);
            // Multiplying by `c` is one-to-one modulo 2^width when `c` is odd, or when no two
            // values of the range are a multiple of 2^width / |c| apart.
            let scales = |factor: Option<i64>| {
                factor.is_some_and(|c| {
                    c != 0
                        && (c % 2 != 0
                            || range
                                .span()
                                .and_then(|span| span.checked_mul(c.checked_abs()?))
                                .is_some_and(|extent| {
                                    width >= 64 || extent < (1i64 << (width - 1))
                                }))
                })
            };
            match binary.operator(ctx) {
                BinaryOperator::Add | BinaryOperator::Sub => {
                    (varies(lhs) && invariant(rhs)) || (varies(rhs) && invariant(lhs))
                }
                BinaryOperator::Mul => {
                    (varies(lhs) && scales(constant_value(ctx, rhs)))
                        || (varies(rhs) && scales(constant_value(ctx, lhs)))
                }
                BinaryOperator::Div => {
                    lhs == induction
                        && range.lower.is_some_and(|lower| lower >= 0)
                        && constant_value(ctx, rhs).zip(range.step).is_some_and(
                            |(divisor, step)| {
                                divisor > 0 && step > 0 && step.checked_rem(divisor) == Some(0)
                            },
                        )
                }
                _ => false,
            }
        }
        _ => false,
    }
}

/// The signed range an integer value is known to lie in (both bounds inclusive). A bound
/// nothing is known about is the extreme of the value's width, so every range is concrete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValueRange {
    /// Smallest value it can take.
    pub low: i64,
    /// Largest value it can take.
    pub high: i64,
}

impl ValueRange {
    /// Every value an integer of `width` bits holds.
    pub fn of_width(width: u32) -> ValueRange {
        if width >= 64 || width == 0 {
            ValueRange {
                low: i64::MIN,
                high: i64::MAX,
            }
        } else {
            let limit = 1i64 << (width - 1);
            ValueRange {
                low: -limit,
                high: limit - 1,
            }
        }
    }

    fn point(value: i64) -> ValueRange {
        ValueRange {
            low: value,
            high: value,
        }
    }

    /// The range computed in `i128` when it lies within `width` bits; otherwise the arithmetic
    /// may have wrapped and the value can be anything of that width.
    fn within(low: i128, high: i128, width: u32) -> ValueRange {
        let full = ValueRange::of_width(width);
        if low >= i128::from(full.low) && high <= i128::from(full.high) && low <= high {
            ValueRange {
                low: low as i64,
                high: high as i64,
            }
        } else {
            full
        }
    }
}

/// How deep [`value_range`] follows an expression before it answers "the whole width".
const RANGE_DEPTH_MAX: u32 = 32;

/// The range `value` lies in, from its constants, the bounds of the loops whose variables it
/// uses, and these rules: program ids and ranks are `>= 0`, the world size `>= 1`; `+ - *`
/// exact (unless they could wrap); `/` and `%` by a constant; `min`, `max`; `&` with a
/// non-negative operand is at most that operand; `|` of non-negative operands; comparisons
/// are 0 or 1; casts keep the range when the new width holds it. Loads and anything else are
/// the whole width. Used to bound the trip count of a loop whose count is only known at run
/// time (`count = min(load(...), MAX)`), so that its commands can share one reservation.
pub fn value_range(ctx: &Context, value: Value) -> ValueRange {
    range_of(ctx, value, 0)
}

fn range_of(ctx: &Context, value: Value, depth: u32) -> ValueRange {
    let width = integer_width(ctx, value).unwrap_or(64);
    let full = ValueRange::of_width(width);
    if let Some(constant) = constant_value(ctx, value) {
        return ValueRange::point(constant);
    }
    if depth >= RANGE_DEPTH_MAX {
        return full;
    }
    let operand_range = |index: usize, op: Ptr<Operation>| {
        range_of(ctx, op.deref(ctx).get_operand(index), depth + 1)
    };
    let Some(op) = value.defining_op() else {
        return induction_variable_range(ctx, value, depth).unwrap_or(full);
    };
    let (low, high): (i128, i128) = match op_name(ctx, op).as_str() {
        "ab.rank" | "ab.program_id" => (0, i128::from(full.high)),
        "ab.world_size" => (1, i128::from(full.high)),
        "ab.cast" => {
            let input = operand_range(0, op);
            (i128::from(input.low), i128::from(input.high))
        }
        "ab.binop" => {
            let binary = Operation::get_op::<BinaryOp>(op, ctx).expect("name matched");
            let lhs = operand_range(0, op);
            let rhs = operand_range(1, op);
            let divisor = constant_value(ctx, op.deref(ctx).get_operand(1));
            match binary_range(binary.operator(ctx), lhs, rhs, divisor) {
                Some(bounds) => bounds,
                None => return full,
            }
        }
        _ => return full,
    };
    ValueRange::within(low, high, width)
}

/// `lhs operator rhs` over ranges, in `i128`; `None` when nothing better than the whole width
/// is known. `divisor` is the right operand when it is a constant.
fn binary_range(
    operator: BinaryOperator,
    lhs: ValueRange,
    rhs: ValueRange,
    divisor: Option<i64>,
) -> Option<(i128, i128)> {
    let (a_low, a_high) = (i128::from(lhs.low), i128::from(lhs.high));
    let (b_low, b_high) = (i128::from(rhs.low), i128::from(rhs.high));
    Some(match operator {
        BinaryOperator::Add => (a_low + b_low, a_high + b_high),
        BinaryOperator::Sub => (a_low - b_high, a_high - b_low),
        BinaryOperator::Mul => {
            let corners = [
                a_low * b_low,
                a_low * b_high,
                a_high * b_low,
                a_high * b_high,
            ];
            (*corners.iter().min()?, *corners.iter().max()?)
        }
        BinaryOperator::Div => {
            // Truncating division by a constant is monotone in the dividend.
            let c = i128::from(divisor.filter(|c| *c != 0)?);
            if c > 0 {
                (a_low / c, a_high / c)
            } else {
                (a_high / c, a_low / c)
            }
        }
        BinaryOperator::Rem => {
            // The result has the dividend's sign and is smaller than the divisor in magnitude.
            let magnitude = i128::from(divisor.filter(|c| *c != 0)?).abs() - 1;
            if a_low >= 0 {
                (0, magnitude.min(a_high))
            } else if a_high <= 0 {
                ((-magnitude).max(a_low), 0)
            } else {
                (-magnitude, magnitude)
            }
        }
        BinaryOperator::Min => (a_low.min(b_low), a_high.min(b_high)),
        BinaryOperator::Max => (a_low.max(b_low), a_high.max(b_high)),
        BinaryOperator::And => {
            // `x & y` is in [0, y] for any x when y >= 0.
            let high = [(a_low, a_high), (b_low, b_high)]
                .into_iter()
                .filter(|(low, _)| *low >= 0)
                .map(|(_, high)| high)
                .min()?;
            (0, high)
        }
        BinaryOperator::Or => {
            if a_low < 0 || b_low < 0 {
                return None;
            }
            // No bit above the larger operand's highest bit.
            let larger = a_high.max(b_high);
            let bits = 128 - larger.leading_zeros();
            (a_low.max(b_low), (1i128 << bits) - 1)
        }
        BinaryOperator::Eq
        | BinaryOperator::Ne
        | BinaryOperator::Lt
        | BinaryOperator::Le
        | BinaryOperator::Gt
        | BinaryOperator::Ge => (0, 1),
    })
}

/// The range of an `ab.for` variable with a positive constant step: from its lower bound's
/// smallest value to one below its upper bound's largest. `None` for other block arguments.
fn induction_variable_range(ctx: &Context, value: Value, depth: u32) -> Option<ValueRange> {
    let block = value.get_parent_block(ctx)?;
    let for_op = block.deref(ctx).get_parent_op(ctx)?;
    Operation::get_op::<ForOp>(for_op, ctx)?;
    if crate::walk::region_block(ctx, for_op, 0)
        .deref(ctx)
        .get_argument(0)
        != value
    {
        return None;
    }
    let step = constant_value(ctx, for_op.deref(ctx).get_operand(2))?;
    if step <= 0 {
        return None;
    }
    let lower = range_of(ctx, for_op.deref(ctx).get_operand(0), depth + 1);
    let upper = range_of(ctx, for_op.deref(ctx).get_operand(1), depth + 1);
    let width = integer_width(ctx, value).unwrap_or(64);
    Some(ValueRange::within(
        i128::from(lower.low),
        i128::from(upper.high) - 1,
        width,
    ))
}

/// The largest trip count `for_op` can have: its trip count when constant, otherwise the
/// bound [`value_range`] gives its lower and upper bounds, with a positive constant step.
/// `None` when the step is not a positive constant or the bound does not fit an `i64`.
pub fn trip_count_bound(ctx: &Context, for_op: Ptr<Operation>) -> Option<i64> {
    if let Some(trip) = constant_trip_count(ctx, for_op) {
        return Some(trip);
    }
    let operation = for_op.deref(ctx);
    let step = constant_value(ctx, operation.get_operand(2)).filter(|step| *step > 0)?;
    let lower = value_range(ctx, operation.get_operand(0));
    let upper = value_range(ctx, operation.get_operand(1));
    let span = (i128::from(upper.high) - i128::from(lower.low)).max(0);
    i64::try_from((span + i128::from(step) - 1) / i128::from(step)).ok()
}
