//! Reading and writing the attributes passes attach to operations, by name.
//!
//! Pass decisions are stored in each op's attribute dictionary as builtin booleans, integers,
//! strings, or the `ab` enum attributes, so they print and parse with the op. This module only
//! reads and writes them; it never interprets them.

use awint::bw;
use pliron::{
    attribute::AttrObj,
    builtin::{
        attributes::{BoolAttr, IntegerAttr, StringAttr},
        types::{IntegerType, Signedness},
    },
    context::{Context, Ptr},
    identifier::Identifier,
    operation::Operation,
    utils::apint::APInt,
};

fn key(name: &str) -> Identifier {
    Identifier::try_new(name.to_string()).expect("attribute names in this crate are identifiers")
}

/// Returns the attribute `name` of `op`, if any.
pub fn get(ctx: &Context, op: Ptr<Operation>, name: &str) -> Option<AttrObj> {
    op.deref(ctx).attributes.0.get(&key(name)).cloned()
}

/// Sets attribute `name` of `op`.
pub fn set(ctx: &Context, op: Ptr<Operation>, name: &str, value: AttrObj) {
    op.deref_mut(ctx).attributes.0.insert(key(name), value);
}

/// Removes attribute `name` of `op`.
pub fn remove(ctx: &Context, op: Ptr<Operation>, name: &str) {
    op.deref_mut(ctx).attributes.0.remove(&key(name));
}

/// Reads a boolean attribute (absent means `false`).
pub fn get_bool(ctx: &Context, op: Ptr<Operation>, name: &str) -> bool {
    get(ctx, op, name)
        .and_then(|attr| {
            attr.downcast_ref::<BoolAttr>()
                .map(|b| bool::from(b.clone()))
        })
        .unwrap_or(false)
}

/// Sets a boolean attribute.
pub fn set_bool(ctx: &Context, op: Ptr<Operation>, name: &str, value: bool) {
    set(ctx, op, name, Box::new(BoolAttr::new(value)));
}

/// Reads an integer attribute.
pub fn get_int(ctx: &Context, op: Ptr<Operation>, name: &str) -> Option<i64> {
    get(ctx, op, name).and_then(|attr| {
        attr.downcast_ref::<IntegerAttr>()
            .map(|int| APInt::from(int.clone()).to_i64())
    })
}

/// Sets a 64-bit integer attribute.
pub fn set_int(ctx: &mut Context, op: Ptr<Operation>, name: &str, value: i64) {
    let ty = IntegerType::get(ctx, 64, Signedness::Signless);
    let attr = IntegerAttr::new(ty, APInt::from_i64(value, bw(64)));
    set(ctx, op, name, Box::new(attr));
}

/// Reads a string attribute.
pub fn get_string(ctx: &Context, op: Ptr<Operation>, name: &str) -> Option<String> {
    get(ctx, op, name).and_then(|attr| {
        attr.downcast_ref::<StringAttr>()
            .map(|s| String::from(s.clone()))
    })
}

/// Sets a string attribute.
pub fn set_string(ctx: &Context, op: Ptr<Operation>, name: &str, value: &str) {
    set(ctx, op, name, Box::new(StringAttr::new(value.to_string())));
}

/// Reads an attribute of a concrete attribute type (the `ab` enums).
pub fn get_typed<T: pliron::attribute::Attribute + Clone>(
    ctx: &Context,
    op: Ptr<Operation>,
    name: &str,
) -> Option<T> {
    get(ctx, op, name).and_then(|attr| attr.downcast_ref::<T>().cloned())
}

/// The `comparison` of an `ab.wait_signal` or a `gpu.wait_flag`: `Ge` when it has none (a flag
/// reaching an epoch, the common wait).
pub fn comparison(ctx: &Context, op: Ptr<Operation>) -> crate::ab::attributes::Comparison {
    get_typed(ctx, op, "comparison").unwrap_or(crate::ab::attributes::Comparison::Ge)
}

/// Sets the `comparison` of `op`; `Ge` is left unwritten, so the common wait prints as before.
pub fn set_comparison(
    ctx: &Context,
    op: Ptr<Operation>,
    comparison: crate::ab::attributes::Comparison,
) {
    if comparison == crate::ab::attributes::Comparison::Ge {
        remove(ctx, op, "comparison");
    } else {
        set(ctx, op, "comparison", Box::new(comparison));
    }
}
