//! Walking the IR: every op in program order, the ops of one block, the kernels of a module.
//!
//! Passes collect the ops they look at into a `Vec` first and rewrite afterwards, so a walk
//! never observes a half-rewritten block. Nothing here mutates IR.

use pliron::{
    basic_block::BasicBlock,
    context::{Context, Ptr},
    linked_list::ContainsLinkedList,
    operation::Operation,
};

use crate::text::op_name;

/// The ops of `block`, in order.
pub fn block_ops(ctx: &Context, block: Ptr<BasicBlock>) -> Vec<Ptr<Operation>> {
    block.deref(ctx).iter(ctx).collect()
}

/// The ops of the first block of region `index` of `op` (our regions have one block).
pub fn region_ops(ctx: &Context, op: Ptr<Operation>, index: usize) -> Vec<Ptr<Operation>> {
    let region = op.deref(ctx).get_region(index);
    let Some(block) = region.deref(ctx).get_head() else {
        return Vec::new();
    };
    block_ops(ctx, block)
}

/// The first block of region `index` of `op`.
pub fn region_block(ctx: &Context, op: Ptr<Operation>, index: usize) -> Ptr<BasicBlock> {
    let region = op.deref(ctx).get_region(index);
    region
        .deref(ctx)
        .get_head()
        .expect("the verifier guarantees one block per region")
}

/// Every op nested in `root` (not `root` itself), in program (pre-)order.
pub fn all_ops(ctx: &Context, root: Ptr<Operation>) -> Vec<Ptr<Operation>> {
    let mut out = Vec::new();
    collect(ctx, root, &mut out);
    out
}

fn collect(ctx: &Context, op: Ptr<Operation>, out: &mut Vec<Ptr<Operation>>) {
    let regions: Vec<_> = op.deref(ctx).regions().collect();
    for region in regions {
        let blocks: Vec<_> = region.deref(ctx).iter(ctx).collect();
        for block in blocks {
            for inner in block_ops(ctx, block) {
                out.push(inner);
                collect(ctx, inner, out);
            }
        }
    }
}

/// The kernels (`builtin.func` ops) of a module.
pub fn kernels(ctx: &Context, module: Ptr<Operation>) -> Vec<Ptr<Operation>> {
    all_ops(ctx, module)
        .into_iter()
        .filter(|op| op_name(ctx, *op) == "builtin.func")
        .collect()
}

/// The symbol name of a kernel.
pub fn kernel_name(ctx: &Context, kernel: Ptr<Operation>) -> String {
    use pliron::builtin::op_interfaces::SymbolOpInterface;
    let func = Operation::get_op::<pliron::builtin::ops::FuncOp>(kernel, ctx)
        .expect("kernels are builtin.func ops");
    func.get_symbol_name(ctx).to_string()
}
