//! `coalesce-doorbells`: one doorbell and one doorbell-record update per batch.
//!
//! Marks every batch member with `doorbell = "batch"`; the lowering then writes the doorbell
//! record and rings the doorbell once, after the batch's last command, instead of after each
//! command. Safe because the NIC (or the proxy) fetches every command up to the producer index
//! it is given, and the record is a release store ordered after all the batch's command writes.
//! Without this pass a batch still shares one reservation but rings per command.

use aboleth_ir::{
    Diagnostic, attrs,
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
    },
    walk::all_ops,
};

use crate::registry::PassContext;

/// Runs the pass on every kernel of `module`.
pub fn run(ctx: &mut Context, module: Ptr<Operation>, _: &PassContext) -> Result<bool, Diagnostic> {
    let mut changed = false;
    for op in all_ops(ctx, module) {
        if attrs::get_int(ctx, op, "batch").is_some() {
            attrs::set_string(ctx, op, "doorbell", "batch");
            changed = true;
        }
    }
    Ok(changed)
}
