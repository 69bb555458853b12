//! `lower-p2p`: specialize to NVLink / peer memory (loads and stores over peer pointers).
//!
//! A put becomes `p2p.copy`: every thread of the program stores its share of the payload to
//! the peer (Triton vectorizes it). A signal becomes a CTA barrier and one thread's flag update:
//! `st.release.sys` / `red.release.sys.add` when planned (`ReleaseStore`), or the library's
//! `fence.sc.sys` followed by a relaxed store. Waiting for a put's token needs nothing when
//! planned (the stores have read the source when they are issued) and a system fence in the
//! library form (NVSHMEM's quiet). A drain or fence is one system fence. There is no queue,
//! reservation or doorbell on this transport.

use aboleth_ir::{
    Diagnostic,
    ab::attributes::Publication,
    attrs,
    builder::Builder,
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
    },
    text::op_name,
    transport::{GpuBarrierOp, P2pCopyOp, P2pSignalOp},
    walk::all_ops,
};

use crate::comm::{endpoint_of, put_predicate, signal_operation};
use crate::lower_common::{emit_fence, lower_wait_signal, put_operands, signal_operands};
use crate::registry::PassContext;

/// Runs the lowering on every kernel of `module`.
pub fn run(ctx: &mut Context, module: Ptr<Operation>, _: &PassContext) -> Result<bool, Diagnostic> {
    let mut erase = Vec::new();
    for op in all_ops(ctx, module) {
        let name = op_name(ctx, op);
        let mut builder = Builder::before(ctx, op);
        match name.as_str() {
            "ab.put" => {
                let endpoint = endpoint_of(ctx, op);
                let [destination, source, bytes, _key] = put_operands(ctx, &mut builder, op);
                let predicate = match put_predicate(ctx, op) {
                    Some(predicate) => builder.to_i64(ctx, predicate),
                    None => builder.constant(ctx, 1),
                };
                let copy = builder.create::<P2pCopyOp>(
                    ctx,
                    vec![],
                    vec![endpoint, destination, source, bytes, predicate],
                );
                attrs::set_string(ctx, copy, "scope", "cta");
            }
            "ab.signal" => {
                let endpoint = endpoint_of(ctx, op);
                let release = attrs::get_typed::<Publication>(ctx, op, "publication")
                    == Some(Publication::ReleaseStore);
                let [flag, value] = signal_operands(ctx, &mut builder, op);
                builder.create::<GpuBarrierOp>(ctx, vec![], vec![]);
                if !release {
                    emit_fence(ctx, &mut builder, "sys");
                }
                let signal =
                    builder.create::<P2pSignalOp>(ctx, vec![], vec![endpoint, flag, value]);
                let operation = signal_operation(ctx, op);
                attrs::set(ctx, signal, "op", Box::new(operation));
                attrs::set_string(
                    ctx,
                    signal,
                    "order",
                    if release { "release" } else { "relaxed" },
                );
                attrs::set_string(ctx, signal, "scope", "thread");
            }
            "ab.wait" => {
                let planned = op
                    .deref(ctx)
                    .get_operand(0)
                    .defining_op()
                    .is_some_and(|producer| attrs::get(ctx, producer, "completion").is_some());
                if !planned {
                    emit_fence(ctx, &mut builder, "sys");
                }
            }
            "ab.drain" | "ab.fence" => emit_fence(ctx, &mut builder, "sys"),
            "ab.wait_signal" => lower_wait_signal(ctx, op),
            _ => continue,
        }
        erase.push(op);
    }
    for op in erase.into_iter().rev() {
        Operation::erase(op, ctx);
    }
    Ok(true)
}
