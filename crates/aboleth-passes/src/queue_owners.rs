//! `assign-queue-owners`: find endpoints that exactly one program posts to.
//!
//! Facts used: how the endpoint's peer index depends on `ab.program_id`
//! ([`aboleth_ir::scalar::program_id_dependence`]) and the kernel's `grid` attribute.
//! An endpoint is `Program`-owned when its peer index is strictly increasing in the program id
//! (distinct programs reach distinct queues, as in the seed all-to-all's
//! `pid + (pid >= RANK)`), or when it is uniform and the kernel runs a single program
//! (`grid = "1"`), and the `ab.endpoint` op is not inside a loop. Every other endpoint is
//! `Shared`. With one owner, the lowering keeps the producer index private to that program:
//! no reservation atomic, no in-order publication CAS, no post lock, no `atomicMax`.
//! Within a program one leader thread posts, so there is no intra-program race either.

use aboleth_ir::{
    Diagnostic,
    ab::attributes::QueueOwner,
    attrs,
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
    },
    scalar::{ProgramIdDependence, enclosing_loops, program_id_dependence},
    text::op_name,
    walk::{all_ops, kernels},
};

use crate::registry::PassContext;

/// Runs the pass on every kernel of `module`.
pub fn run(ctx: &mut Context, module: Ptr<Operation>, _: &PassContext) -> Result<bool, Diagnostic> {
    let mut changed = false;
    for kernel in kernels(ctx, module) {
        let single_program =
            attrs::get_string(ctx, kernel, "grid").is_some_and(|g| g.trim() == "1");
        for op in all_ops(ctx, kernel) {
            if op_name(ctx, op) != "ab.endpoint" {
                continue;
            }
            let peer = op.deref(ctx).get_operand(1);
            let in_loop = !enclosing_loops(ctx, op).is_empty();
            let owner = match program_id_dependence(ctx, peer) {
                _ if in_loop => QueueOwner::Shared,
                ProgramIdDependence::StrictlyIncreasing => QueueOwner::Program,
                ProgramIdDependence::Uniform if single_program => QueueOwner::Program,
                _ => QueueOwner::Shared,
            };
            attrs::set(ctx, op, "owner", Box::new(owner));
            changed = true;
        }
    }
    Ok(changed)
}
