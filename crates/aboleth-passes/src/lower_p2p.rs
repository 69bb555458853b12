//! `lower-p2p`: specialize to NVLink / peer memory (loads and stores over peer pointers).
//!
//! A put becomes `p2p.copy`: every thread of the program stores its share of the payload to
//! the peer (Triton vectorizes it). A signal becomes a CTA barrier and one thread's flag update:
//! `st.release.sys` / `red.release.sys.add` when planned (`ReleaseStore`), or the library's
//! `fence.sc.sys` followed by a relaxed store. Waiting for a put's token needs nothing when
//! planned (the stores have read the source when they are issued) and a system fence in the
//! library form (NVSHMEM's quiet). A drain or fence is one system fence. There is no queue,
//! reservation or doorbell on this transport.
//!
//! A put and the signal planned `FlagInData` that rides on it become one `p2p.put_packets` at
//! the signal: the payload as LL16 packets into the flag's staging slot, with no barrier, fence
//! or flag store; every wait of such a kernel then also unpacks its flag's slot.

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
    transport::{GpuBarrierOp, P2pCopyOp, P2pPutPacketsOp, P2pSignalOp},
    walk::{all_ops, kernels, region_block},
};

use aboleth_ir::{ab::ops::operand, pliron::linked_list::LinkedList, scalar::constant_value};

use crate::comm::{endpoint_of, put_predicate, signal_after, signal_operation};
use crate::lower_common::{
    ReceiveSide, emit_fence, lower_wait_signal_receiving, put_operands, riding_signal_of_put,
    signal_operands,
};
use crate::registry::PassContext;
use crate::signal_publication::packet_signal_candidate;

/// The kernel attribute naming (by index) the argument whose flag region needs a staging area
/// for packet slots (`aboleth_abi::packet::staging_bytes` more bytes after its end).
pub const PACKET_STAGING_ATTRIBUTE: &str = "packet_staging_argument";

/// Runs the lowering on every kernel of `module`.
pub fn run(ctx: &mut Context, module: Ptr<Operation>, _: &PassContext) -> Result<bool, Diagnostic> {
    for kernel in kernels(ctx, module) {
        lower_kernel(ctx, kernel);
    }
    Ok(true)
}

fn lower_kernel(ctx: &mut Context, kernel: Ptr<Operation>) {
    let publication_of =
        |ctx: &Context, op| attrs::get_typed::<Publication>(ctx, op, "publication");
    let packet_tables = all_ops(ctx, kernel).into_iter().find_map(|op| {
        (op_name(ctx, op) == "ab.signal"
            && publication_of(ctx, op) == Some(Publication::FlagInData))
        .then(|| packet_signal_candidate(ctx, op))
        .flatten()
    });
    // The longest packet put of the kernel: what its waits must be able to unpack.
    let packet_bytes_max = all_ops(ctx, kernel)
        .into_iter()
        .filter(|op| {
            op_name(ctx, *op) == "ab.signal"
                && publication_of(ctx, *op) == Some(Publication::FlagInData)
        })
        .filter_map(|signal| signal_after(ctx, signal)?.defining_op())
        .filter_map(|put| constant_value(ctx, put.deref(ctx).get_operand(operand::put::BYTES)))
        .max()
        .unwrap_or(0);
    if let Some((flag_table, _)) = packet_tables {
        // The staging slots follow the flag region: whoever allocates it (the runtime, the
        // simulator) reads which argument names it here.
        let entry = region_block(ctx, kernel, 0);
        let arguments = entry.deref(ctx).get_num_arguments();
        if let Some(index) =
            (0..arguments).find(|i| entry.deref(ctx).get_argument(*i) == flag_table)
        {
            attrs::set_int(ctx, kernel, PACKET_STAGING_ATTRIBUTE, index as i64);
        }
    }
    let mut erase = Vec::new();
    for op in all_ops(ctx, kernel) {
        let name = op_name(ctx, op);
        let mut builder = Builder::before(ctx, op);
        match name.as_str() {
            // Its signal sends it as packets (below).
            "ab.put" if riding_signal_of_put(ctx, op, Publication::FlagInData).is_some() => {}
            "ab.signal" if publication_of(ctx, op) == Some(Publication::FlagInData) => {
                let put = signal_after(ctx, op)
                    .and_then(|token| token.defining_op())
                    .expect("packet signals name their put");
                let endpoint = endpoint_of(ctx, op);
                let [destination, source, bytes, _key] = put_operands(ctx, &mut builder, put);
                let [flag, value] = signal_operands(ctx, &mut builder, op);
                builder.create::<P2pPutPacketsOp>(
                    ctx,
                    vec![],
                    vec![endpoint, flag, destination, source, bytes, value],
                );
            }
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
            "ab.wait_signal" => {
                lower_wait_signal_receiving(
                    ctx,
                    op,
                    packet_tables.map(|(flag_table, data_table)| ReceiveSide::Packets {
                        flag_table,
                        data_table,
                    }),
                );
                if packet_tables.is_some() {
                    // The poll it became (just before it): how long a transfer it unpacks.
                    let poll = op
                        .deref(ctx)
                        .get_prev()
                        .filter(|poll| op_name(ctx, *poll) == "gpu.wait_flag");
                    if let Some(poll) = poll {
                        attrs::set_int(ctx, poll, "packet_bytes_max", packet_bytes_max);
                    }
                }
            }
            _ => continue,
        }
        erase.push(op);
    }
    for op in erase.into_iter().rev() {
        Operation::erase(op, ctx);
    }
}
