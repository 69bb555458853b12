//! Creating ops at an insertion point: what the lowering passes use to emit IR.
//!
//! A [`Builder`] inserts every new op before a fixed anchor op (or at the end of a block), so
//! a pass can expand one op into a sequence in program order. It sets the new op's location to
//! the anchor's, so diagnostics and the simulator's reports point back to the source line.
//! It makes no decisions about what to emit.

use awint::bw;
use pliron::{
    basic_block::BasicBlock,
    builtin::{
        attributes::IntegerAttr,
        ops::ConstantOp,
        types::{IntegerType, Signedness},
    },
    context::{Context, Ptr},
    location::Location,
    op::Op,
    operation::Operation,
    r#type::TypeHandle,
    utils::apint::APInt,
    value::Value,
};

use crate::ab::{
    attributes::BinaryOperator,
    ops::{BinaryOp, CastOp, IfOp, YieldOp},
};

/// Where new ops go.
#[derive(Clone, Copy, Debug)]
pub enum InsertionPoint {
    /// Before this op.
    Before(Ptr<Operation>),
    /// After this op (each new op goes after the previous new one).
    After(Ptr<Operation>),
}

/// Emits ops at an insertion point, all located at `location`.
pub struct Builder {
    point: InsertionPoint,
    location: Location,
}

impl Builder {
    /// New ops go before `anchor`, with `anchor`'s location.
    pub fn before(ctx: &Context, anchor: Ptr<Operation>) -> Self {
        Builder {
            point: InsertionPoint::Before(anchor),
            location: anchor.deref(ctx).loc().clone(),
        }
    }

    /// New ops go after `anchor`, in order, with `anchor`'s location.
    pub fn after(ctx: &Context, anchor: Ptr<Operation>) -> Self {
        Builder {
            point: InsertionPoint::After(anchor),
            location: anchor.deref(ctx).loc().clone(),
        }
    }

    /// Inserts an already created op at the insertion point.
    pub fn insert(&mut self, ctx: &mut Context, op: Ptr<Operation>) -> Ptr<Operation> {
        op.deref_mut(ctx).set_loc(self.location.clone());
        match self.point {
            InsertionPoint::Before(anchor) => op.insert_before(ctx, anchor),
            InsertionPoint::After(anchor) => {
                op.insert_after(ctx, anchor);
                self.point = InsertionPoint::After(op);
            }
        }
        op
    }

    /// Creates and inserts an op of type `T` with the given results and operands.
    pub fn create<T: Op>(
        &mut self,
        ctx: &mut Context,
        result_types: Vec<TypeHandle>,
        operands: Vec<Value>,
    ) -> Ptr<Operation> {
        let op = Operation::new(
            ctx,
            T::get_concrete_op_info(),
            result_types,
            operands,
            vec![],
            0,
        );
        self.insert(ctx, op)
    }

    /// Emits `ab.if condition { ab.yield }` and returns it with its (only) block, so that ops
    /// can be moved or created inside before the `ab.yield`.
    pub fn create_if(
        &mut self,
        ctx: &mut Context,
        condition: Value,
    ) -> (Ptr<Operation>, Ptr<BasicBlock>) {
        let op = Operation::new(
            ctx,
            IfOp::get_concrete_op_info(),
            vec![],
            vec![condition],
            vec![],
            1,
        );
        self.insert(ctx, op);
        let block = BasicBlock::new(ctx, None, vec![]);
        let region = op.deref(ctx).get_region(0);
        block.insert_at_back(region, ctx);
        let terminator = Operation::new(
            ctx,
            YieldOp::get_concrete_op_info(),
            vec![],
            vec![],
            vec![],
            0,
        );
        terminator.deref_mut(ctx).set_loc(self.location.clone());
        terminator.insert_at_back(block, ctx);
        (op, block)
    }

    /// Emits an `i64` constant.
    pub fn constant(&mut self, ctx: &mut Context, value: i64) -> Value {
        let ty = i64_type(ctx);
        let attr = IntegerAttr::new(ty, APInt::from_i64(value, bw(64)));
        let op = ConstantOp::new(ctx, Box::new(attr)).get_operation();
        self.insert(ctx, op);
        op.deref(ctx).get_result(0)
    }

    /// Emits `ab.binop` on two values of the same integer type.
    pub fn binary(
        &mut self,
        ctx: &mut Context,
        operator: BinaryOperator,
        lhs: Value,
        rhs: Value,
    ) -> Value {
        let ty = pliron::r#type::Typed::get_type(&lhs, ctx);
        let op = self.create::<BinaryOp>(ctx, vec![ty], vec![lhs, rhs]);
        Operation::get_op::<BinaryOp>(op, ctx)
            .expect("just created")
            .set_attr_ab_binop_kind(ctx, operator);
        op.deref(ctx).get_result(0)
    }

    /// Emits `ab.cast` of `value` to `i64` (or returns it when it already is `i64`).
    pub fn to_i64(&mut self, ctx: &mut Context, value: Value) -> Value {
        if crate::scalar::integer_width(ctx, value) == Some(64) {
            return value;
        }
        let ty = i64_type(ctx);
        let op = self.create::<CastOp>(ctx, vec![ty.into()], vec![value]);
        op.deref(ctx).get_result(0)
    }
}

/// The `i64` type.
pub fn i64_type(ctx: &mut Context) -> pliron::r#type::TypedHandle<IntegerType> {
    IntegerType::get(ctx, 64, Signedness::Signless)
}
