//! `assign-queue-owners`: find endpoints that exactly one program posts to.
//!
//! Facts used: how the endpoint's peer index depends on `ab.program_id`
//! ([`aboleth_ir::scalar::program_id_dependence`]) and the kernel's `grid` attribute.
//! Every endpoint of a kernel that runs a single program (`grid = "1"`) is `Program`-owned: one
//! leader thread posts to every queue. Otherwise an endpoint is `Program`-owned when it is the
//! kernel's only `ab.endpoint` on its handle table, is not inside a loop, and its peer index is
//! strictly increasing in the program id (distinct programs reach distinct queues, as in the
//! seed all-to-all's `pid + (pid >= RANK)`). Two `ab.endpoint` ops may reach the same queue
//! (`rank + 1` and `rank - 1` with two ranks), and the one-owner and shared posting protocols
//! must never meet on one queue, so with several programs they are all `Shared`. With one owner, the lowering keeps the producer index private to that program:
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
        let endpoints: Vec<Ptr<Operation>> = all_ops(ctx, kernel)
            .into_iter()
            .filter(|op| op_name(ctx, *op) == "ab.endpoint")
            .collect();
        for &op in &endpoints {
            let table = op.deref(ctx).get_operand(0);
            let peer = op.deref(ctx).get_operand(1);
            let alone_on_table = endpoints
                .iter()
                .filter(|other| other.deref(ctx).get_operand(0) == table)
                .count()
                == 1;
            let in_loop = !enclosing_loops(ctx, op).is_empty();
            let owner = if single_program {
                QueueOwner::Program
            } else if !alone_on_table || in_loop {
                QueueOwner::Shared
            } else if program_id_dependence(ctx, peer) == ProgramIdDependence::StrictlyIncreasing {
                QueueOwner::Program
            } else {
                QueueOwner::Shared
            };
            attrs::set(ctx, op, "owner", Box::new(owner));
            changed = true;
        }
    }
    Ok(changed)
}
