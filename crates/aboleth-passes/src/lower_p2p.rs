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
//!
//! A copy's loads (and a packet put's) are spread over the program's threads, so they see an
//! earlier store of the program to the source only if a barrier orders it first: the lowering
//! puts a `gpu.barrier [source_stores]` before a put whenever the program may have written
//! memory since its last barrier ([`puts_needing_source_barrier`]: an `ab.store`, a loop with
//! `ttir_unlifted_work`, or a put the Triton lifting marked `ttir_unlifted_writes`), and none
//! where provably nothing was written (a send buffer the host filled). This is not a planning
//! choice: both configurations get it, like the barrier before a signal.

use std::collections::HashSet;

use aboleth_ir::{
    Diagnostic,
    ab::{attributes::Publication, ops::operand},
    attrs,
    builder::Builder,
    pliron::{
        basic_block::BasicBlock,
        context::{Context, Ptr},
        linked_list::LinkedList,
        operation::Operation,
    },
    scalar::constant_value,
    text::op_name,
    transport::{GpuBarrierOp, P2pCopyOp, P2pPutPacketsOp, P2pSignalOp},
    walk::{all_ops, block_ops, kernels, region_block, region_ops},
};

use crate::registry::PassContext;
use crate::support::{
    riding_signals::{packet_signal_candidate, riding_signal_of_put},
    transfers::{endpoint_of, put_predicate, signal_after, signal_operation},
    transport_ops::{emit_fence, put_operands, signal_operands},
    wait_lowering::{ReceiveSide, lower_wait_signal},
};

/// The kernel attribute naming (by index) the argument whose flag region needs a staging area
/// for packet slots (`aboleth_abi::packet::staging_bytes` more bytes after its end).
pub const PACKET_STAGING_ATTRIBUTE: &str = "packet_staging_argument";

/// The attribute marking the barrier a put needs before its copy reads the source (the
/// `put-without-source-barrier` mutation of the simulator drops exactly these).
pub const SOURCE_BARRIER_ATTRIBUTE: &str = "source_stores";

/// The attribute the Triton lifting sets on a put when TTIR work it did not lift (a
/// `tl.store`, an atomic, a call) may have written memory before the put.
pub const UNLIFTED_WRITES_ATTRIBUTE: &str = "ttir_unlifted_writes";

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
    let needs_source_barrier = puts_needing_source_barrier(ctx, region_block(ctx, kernel, 0));
    let source_barrier = |ctx: &mut Context, builder: &mut Builder, put| {
        if needs_source_barrier.contains(&put) {
            let barrier = builder.create::<GpuBarrierOp>(ctx, vec![], vec![]);
            attrs::set_bool(ctx, barrier, SOURCE_BARRIER_ATTRIBUTE, true);
        }
    };
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
                source_barrier(ctx, &mut builder, put);
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
                source_barrier(ctx, &mut builder, op);
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
                lower_wait_signal(
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

/// The puts of a kernel body (`entry`) whose copy must follow a barrier: those where the
/// program may have written memory since its last barrier (or the launch's start, before which
/// the host wrote everything the kernel reads). Any store may alias any source, so the facts
/// are only where stores are: an `ab.store`; anywhere inside a loop marked `ttir_unlifted_work`
/// (TTIR the lifting did not take, which may store at any point of every iteration); a put
/// marked `ttir_unlifted_writes` by the lifting. A p2p signal (barrier, then flag store) and a
/// put's own barrier end a dirty stretch; a copy's stores go to the peer, not to a source.
/// Loops are followed around their back edge; an `ab.if` may or may not run.
pub fn puts_needing_source_barrier(
    ctx: &Context,
    entry: Ptr<BasicBlock>,
) -> HashSet<Ptr<Operation>> {
    let mut puts = HashSet::new();
    written_after(ctx, &block_ops(ctx, entry), false, false, &mut puts);
    puts
}

/// Walks `ops` entered with `written` (the program may have written since its last barrier),
/// recording the puts that see it; returns the state at the end. `unlifted`: inside a loop
/// with unlifted TTIR work, where every point may follow a store.
fn written_after(
    ctx: &Context,
    ops: &[Ptr<Operation>],
    mut written: bool,
    unlifted: bool,
    puts: &mut HashSet<Ptr<Operation>>,
) -> bool {
    written |= unlifted;
    for op in ops {
        match op_name(ctx, *op).as_str() {
            "ab.store" => written = true,
            "ab.put" => {
                if written || unlifted || attrs::get_bool(ctx, *op, UNLIFTED_WRITES_ATTRIBUTE) {
                    puts.insert(*op);
                }
                // Its barrier (or none needed): nothing is written since.
                written = false;
            }
            "ab.signal" => {
                // A signal after a barrier; a packet signal has none of its own, but its put had
                // one when it needed it, and only pure scalar ops lie between them.
                written = false;
            }
            "ab.for" => {
                let body = region_ops(ctx, *op, 0);
                let inside = unlifted || attrs::get_bool(ctx, *op, "ttir_unlifted_work");
                // Around the back edge: the body's end flows into its start. Two walks reach
                // the fixed point (the state is one bit and the walk is monotone).
                let end = written_after(ctx, &body, written, inside, puts);
                let end = if end && !written {
                    written_after(ctx, &body, true, inside, puts)
                } else {
                    end
                };
                // Zero iterations keep the state before the loop.
                written = written || end;
            }
            "ab.if" => {
                let end = written_after(ctx, &region_ops(ctx, *op, 0), written, unlifted, puts);
                written = written || end;
            }
            _ => {}
        }
    }
    written || unlifted
}
