//! Code generation: the lowered `ab` kernel back into the TTIR it was lifted from.
//!
//! The TTIR is edited in place through `aboleth-ttir`'s edit API: lines of untouched ops stay
//! byte-identical. This module is the walker: [`generate`] visits the lowered kernel block by
//! block with a [`Generator`], keeps the TTIR ops the lifting kept (and the loops and ifs
//! around them, referred to by name), replaces every aboleth extern call by the code generated
//! for its lowered form (or by a dead `arith.constant` that keeps its result name defined when
//! the code lives elsewhere, e.g. a batch's reservation before its loop), and places ops the
//! pipeline created right before the next op that maps to TTIR in the same block (after the
//! last one at a block's end). Each lowered op is handed to the one method that translates it,
//! found by its type: scalar and handle ops in `scalar.rs`, p2p in `p2p.rs` and `packets.rs`,
//! proxy in `proxy.rs`, mlx5 in `mlx5.rs` and `mlx5_receive.rs`, Ionic in `ionic.rs`, with the
//! reservation, in-order publication and post lock they share in `queue.rs`, bounded waits in `waits.rs`, and the inline
//! PTX they write through `ptx/`. An op of a transport dialect without a translation is
//! refused with an error naming it. Nothing here decides anything: the planning attributes
//! were consumed by the lowering, and code generation translates op by op.

use std::collections::HashMap;

use aboleth_abi::Transport;
use aboleth_ir::ab::ops::{
    AtOp, CastOp, EndpointOp, ForOp, IfOp, LoadOp, PointerAddOp, RemoteOp, ReturnOp, StoreOp,
    YieldOp,
};
use aboleth_ir::pliron::builtin::ops::ConstantOp;
use aboleth_ir::pliron::op::{Op, OpId};
use aboleth_ir::transport::{
    GpuBarrierOp, GpuFenceOp, GpuWaitFlagOp, IonicDoorbellOp, IonicLockOp, IonicPublishOp,
    IonicReserveOp, IonicSignalOp, IonicUnlockOp, IonicWaitCompletionOp, IonicWriteOp,
    Mlx5AtomicOp, Mlx5DoorbellOp, Mlx5DoorbellRecordOp, Mlx5LockOp, Mlx5PublishOp, Mlx5ReserveOp,
    Mlx5UnlockOp, Mlx5WaitCompletionOp, Mlx5WriteOp, P2pCopyOp, P2pPutPacketsOp, P2pSignalOp,
    ProxyDoorbellOp, ProxyPublishOp, ProxyPutOp, ProxyReserveOp, ProxySignalOp,
    ProxyWaitCompletionOp,
};
use aboleth_ir::{
    ab::ops::BinaryOp,
    attrs,
    pliron::{
        basic_block::BasicBlock,
        context::{Context, Ptr},
        operation::Operation,
        value::Value,
    },
    scalar::integer_width,
    text::op_name,
    walk::{block_ops, region_block},
};
use aboleth_ttir::{OperationId, TtirModule, ValueNamer};

use crate::BridgeError;
use crate::lift::{Entry, LiftedKernel};
use waits::{WaitBound, WaitLog, WaitReport};

/// Elements (bytes or 8-byte words) copied per iteration of a p2p copy loop: one tensor.
pub const P2P_COPY_CHUNK_ELEMENTS: i64 = 1024;

mod ionic;
mod mlx5;
mod mlx5_receive;
mod p2p;
mod packets;
mod proxy;
mod ptx;
mod queue;
mod scalar;
mod waits;

/// How an `ab` value exists in the TTIR.
#[derive(Clone, Debug)]
enum Repr {
    /// A TTIR value and its type.
    Scalar { name: String, type_text: String },
    /// A remote element: its region descriptor's address and the byte offset (both `i64`).
    RemotePointer { descriptor: String, offset: String },
}

/// Generates TTIR for the lowered kernel `kernel` into `module`'s edits. Returns the source
/// position of each bounded wait, indexed by the site id its failure records carry.
pub fn generate(
    ctx: &Context,
    kernel: Ptr<Operation>,
    lifted: &LiftedKernel,
    module: &mut TtirModule,
    target: Transport,
) -> Result<Vec<String>, BridgeError> {
    let mut generator = Generator {
        ctx,
        lifted,
        target,
        values: HashMap::new(),
        namer: ValueNamer::new(module),
        replaced: Vec::new(),
        pending: Vec::new(),
        edits: Vec::new(),
        depth: 0,
        wait_log: None,
        remote_bases: HashMap::new(),
        wait_sites: Vec::new(),
        spread_depth: 0,
    };
    let entry_block = region_block(ctx, kernel, 0);
    for (index, parameter) in lifted.parameters.iter().enumerate() {
        let argument = entry_block.deref(ctx).get_argument(index);
        generator.values.insert(
            argument,
            Repr::Scalar {
                name: parameter.ttir_name.clone(),
                type_text: parameter.ttir_type.clone(),
            },
        );
    }
    let function_block_first = first_operation(module, lifted.function, 0);
    generator.block(module, entry_block, function_block_first)?;
    // Calls the pipeline removed (dead puts): keep their result names defined.
    for call in &lifted.calls {
        if !generator.replaced.contains(call) {
            let lines = generator.dummy_definitions(*call);
            generator.edits.push(Edit::Replace(*call, lines));
        }
    }
    let wait_sites = generator
        .wait_sites
        .iter()
        .map(|line| {
            lifted
                .ttir_operation_at_line(*line)
                .and_then(|id| module.source_position(id))
                .map_or_else(|| "unknown".to_string(), |position| position.to_string())
        })
        .collect();
    for edit in generator.edits {
        match edit {
            Edit::Before(id, lines) => module.insert_lines_before(id, lines),
            Edit::After(id, lines) => module.insert_lines_after(id, lines),
            Edit::Replace(id, lines) => module.replace_operation(id, lines),
            Edit::Header(id, line) => module.replace_header(id, line),
        }
    }
    Ok(wait_sites)
}

/// The fence instruction of a `gpu.fence` at `scope` (`fence.sc.sys` for the system): one
/// choice for both encodings (TTIR here, C++ in `crate::cuda`).
pub(crate) fn fence_ptx(scope: Option<&str>) -> &'static str {
    match scope {
        Some("sys") => "fence.sc.sys;",
        Some("cta") => "fence.acq_rel.cta;",
        _ => "fence.acq_rel.gpu;",
    }
}

/// The instruction of a p2p signal (`[$1]` the flag, `$2` the value): a release store or
/// reduction, or the relaxed form the lowering chose.
pub(crate) fn signal_ptx(
    operation: aboleth_ir::ab::attributes::SignalOperation,
    release: bool,
) -> &'static str {
    use aboleth_ir::ab::attributes::SignalOperation;
    match (operation, release) {
        (SignalOperation::Set, true) => "st.release.sys.global.u64 [$1], $2;",
        (SignalOperation::Set, false) => "st.volatile.global.u64 [$1], $2;",
        (SignalOperation::Add, true) => "red.release.sys.global.add.u64 [$1], $2;",
        (SignalOperation::Add, false) => "red.relaxed.sys.global.add.u64 [$1], $2;",
    }
}

pub(crate) use mlx5::{MLX5_CQ_RING_PROGRESS_SPARE_WORD, MLX5_CQ_RING_WORD_XOR};
pub(crate) use scalar::at_element_bytes;
pub(crate) use waits::{flag_wait_kind, wait_failure_record_ptx};

fn first_operation(
    module: &TtirModule,
    operation: OperationId,
    region: usize,
) -> Option<OperationId> {
    module.operation(operation).regions()[region].blocks()[0]
        .operations()
        .next()
}

enum Edit {
    Before(OperationId, Vec<String>),
    After(OperationId, Vec<String>),
    Replace(OperationId, Vec<String>),
    /// A new first line for a kept loop (its bounds spread over threads).
    Header(OperationId, String),
}

struct Generator<'a> {
    ctx: &'a Context,
    lifted: &'a LiftedKernel,
    target: Transport,
    values: HashMap<Value, Repr>,
    namer: ValueNamer,
    replaced: Vec<OperationId>,
    /// Lines waiting for their anchor.
    pending: Vec<String>,
    edits: Vec<Edit>,
    /// Nesting depth of the block being generated (0: the kernel's body).
    depth: usize,
    /// The wait-failure log, this rank and the waits' bound, once an endpoint handle gave them.
    wait_log: Option<WaitLog>,
    /// p2p: the peer region's base address, read at its `ab.remote`, by the descriptor
    /// address's TTIR name (what `remote_address` adds an offset to).
    remote_bases: HashMap<String, String>,
    /// The lifted-text line of each bounded wait, by site id.
    wait_sites: Vec<u32>,
    /// How many `doorbell_scope` loops enclose the code being generated: inside one, every
    /// thread runs its own iterations and writes their commands itself.
    spread_depth: usize,
}

fn ab_type_text(ctx: &Context, value: Value) -> String {
    match integer_width(ctx, value) {
        Some(width) => format!("i{width}"),
        None => "!tt.ptr<i8>".to_string(),
    }
}

/// How one lowered op becomes TTIR.
type Translation<'a> = fn(&mut Generator<'a>, Ptr<Operation>) -> Result<(), BridgeError>;

/// The translation of each lowered op, found by the op's type (its pliron `OpId`): one method
/// per op, in the file of its dialect or transport.
fn translation<'a>(id: &OpId) -> Option<Translation<'a>> {
    macro_rules! by_type {
        ($($op:ty => $method:path),* $(,)?) => {
            $(if *id == <$op as Op>::get_opid_static() {
                return Some($method);
            })*
        };
    }
    by_type!(
        ConstantOp => Generator::constant,
        BinaryOp => Generator::binary,
        CastOp => Generator::cast,
        PointerAddOp => Generator::pointer_add,
        LoadOp => Generator::load,
        StoreOp => Generator::store,
        EndpointOp => Generator::endpoint,
        RemoteOp => Generator::remote,
        AtOp => Generator::at,
        IfOp => Generator::lowered_if,
        YieldOp => Generator::nothing,
        ReturnOp => Generator::nothing,
        P2pCopyOp => Generator::p2p_copy,
        P2pSignalOp => Generator::p2p_signal,
        P2pPutPacketsOp => Generator::p2p_put_packets,
        GpuBarrierOp => Generator::gpu_barrier,
        GpuFenceOp => Generator::gpu_fence,
        GpuWaitFlagOp => Generator::wait_flag,
        ProxyReserveOp => Generator::proxy_reserve,
        ProxyPutOp => Generator::proxy_put,
        ProxySignalOp => Generator::proxy_signal,
        ProxyPublishOp => Generator::proxy_publish,
        ProxyDoorbellOp => Generator::proxy_doorbell,
        ProxyWaitCompletionOp => Generator::proxy_wait_completion,
        Mlx5ReserveOp => Generator::mlx5_reserve,
        Mlx5WriteOp => Generator::mlx5_write,
        Mlx5AtomicOp => Generator::mlx5_atomic,
        Mlx5PublishOp => Generator::mlx5_publish,
        Mlx5LockOp => Generator::mlx5_lock,
        Mlx5UnlockOp => Generator::mlx5_unlock,
        Mlx5DoorbellRecordOp => Generator::mlx5_doorbell_record,
        Mlx5DoorbellOp => Generator::mlx5_doorbell,
        Mlx5WaitCompletionOp => Generator::mlx5_wait_completion,
        IonicReserveOp => Generator::ionic_reserve,
        IonicWriteOp => Generator::ionic_write,
        IonicSignalOp => Generator::ionic_signal,
        IonicPublishOp => Generator::ionic_publish,
        IonicLockOp => Generator::ionic_lock,
        IonicUnlockOp => Generator::ionic_unlock,
        IonicDoorbellOp => Generator::ionic_doorbell,
        IonicWaitCompletionOp => Generator::ionic_wait_completion,
    );
    None
}

impl Generator<'_> {
    /// `ab.if` the lowering created (a library-style predicated put): its body is all new code,
    /// generated inside an `scf.if`.
    fn lowered_if(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let condition = self.i64(self.operand(op, 0))?;
        let zero = self.constant_i64(0);
        let taken = self.assign(
            "ab_taken",
            format!("arith.cmpi ne, {condition}, {zero} : i64"),
        );
        self.emit(format!("scf.if {taken} {{"));
        for inner in block_ops(self.ctx, region_block(self.ctx, op, 0)) {
            if self
                .entry(inner)
                .is_some_and(|entry| !matches!(entry, Entry::Added))
            {
                return Err(BridgeError::plain(
                    "internal: a lifted op inside an if the lowering created",
                ));
            }
            self.operation(inner)?;
        }
        self.emit("}".into());
        Ok(())
    }

    /// `gpu.barrier`: `bar.sync` of the program, or of each warp (`scope: "warp"`).
    fn gpu_barrier(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        if attrs::get_string(self.ctx, op, "scope").as_deref() == Some("warp") {
            // Every warp syncs itself; only the leader's warp has written commands.
            let dummy = self.constant_i64(0);
            self.asm("bar.warp.sync -1; mov.u32 $0, 0;", &[(&dummy, "i64", 'l')]);
        } else {
            self.emit("gpu.barrier".into());
        }
        Ok(())
    }

    /// `gpu.fence`: a fence at the op's scope (`fence.sc.sys` for the system).
    fn gpu_fence(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let ptx = format!(
            "{} mov.u32 $0, 0;",
            fence_ptx(attrs::get_string(self.ctx, op, "scope").as_deref())
        );
        let dummy = self.constant_i64(0);
        self.asm(&ptx, &[(&dummy, "i64", 'l')]);
        Ok(())
    }

    fn entry(&self, op: Ptr<Operation>) -> Option<&Entry> {
        attrs::get_int(self.ctx, op, "ttir_entry").map(|index| &self.lifted.entries[index as usize])
    }

    fn fresh(&mut self, stem: &str) -> String {
        self.namer.fresh(stem)
    }

    fn emit(&mut self, line: String) {
        self.pending.push(line);
    }

    /// Emits `%name = right_side` with a fresh name from `stem`; returns the name.
    fn assign(&mut self, stem: &str, right_side: String) -> String {
        let name = self.fresh(stem);
        self.emit(format!("{name} = {right_side}"));
        name
    }

    /// Lowers the ops of `block`; `first` is the first TTIR op of the matching TTIR block.
    fn block(
        &mut self,
        module: &TtirModule,
        block: Ptr<BasicBlock>,
        first: Option<OperationId>,
    ) -> Result<(), BridgeError> {
        let mut last_kept: Option<OperationId> = None;
        for op in block_ops(self.ctx, block) {
            match self.entry(op).cloned() {
                Some(Entry::Kept(id)) => {
                    self.flush_before(id);
                    self.bind_kept(op, id);
                    if self.isa::<ForOp>(op) || self.isa::<IfOp>(op) {
                        self.structured(module, op, id)?;
                    }
                    last_kept = Some(id);
                }
                Some(Entry::Call(id)) => {
                    self.flush_before(id);
                    self.operation(op)?;
                    let mut lines = std::mem::take(&mut self.pending);
                    lines.extend(self.dummy_definitions(id));
                    self.edits.push(Edit::Replace(id, lines));
                    self.replaced.push(id);
                    last_kept = Some(id);
                }
                Some(Entry::Alias { name, type_text }) => {
                    let result = op.deref(self.ctx).get_result(0);
                    self.values.insert(result, Repr::Scalar { name, type_text });
                }
                Some(Entry::Added) | None => self.operation(op)?,
            }
        }
        if !self.pending.is_empty() {
            let lines = std::mem::take(&mut self.pending);
            match (last_kept, first) {
                (Some(id), _) => self.edits.push(Edit::After(id, lines)),
                (None, Some(id)) => self.edits.push(Edit::Before(id, lines)),
                (None, None) => {
                    return Err(BridgeError::plain(
                        "internal: generated code with nowhere to go (an empty TTIR block)",
                    ));
                }
            }
        }
        Ok(())
    }

    fn flush_before(&mut self, id: OperationId) {
        if !self.pending.is_empty() {
            let lines = std::mem::take(&mut self.pending);
            self.edits.push(Edit::Before(id, lines));
        }
    }

    fn bind_kept(&mut self, op: Ptr<Operation>, id: OperationId) {
        let results: Vec<Value> = {
            let operation = op.deref(self.ctx);
            (0..operation.get_num_results())
                .map(|index| operation.get_result(index))
                .collect()
        };
        if let Some(names) = self.lifted.result_names.get(&id) {
            for (value, (name, type_text)) in results.into_iter().zip(names) {
                self.values.insert(
                    value,
                    Repr::Scalar {
                        name: name.clone(),
                        type_text: type_text.clone(),
                    },
                );
            }
        }
    }

    fn structured(
        &mut self,
        module: &TtirModule,
        op: Ptr<Operation>,
        id: OperationId,
    ) -> Result<(), BridgeError> {
        let body = region_block(self.ctx, op, 0);
        let first = first_operation(module, id, 0);
        if self.isa::<ForOp>(op) {
            let header = module
                .operation(id)
                .scf_for()
                .ok_or_else(|| BridgeError::plain("internal: a kept ab.for without its scf.for"))?;
            let induction_type = header.induction_type.unwrap_or_else(|| "i64".into());
            let induction = body.deref(self.ctx).get_argument(0);
            if induction_type == "i64" {
                self.values.insert(
                    induction,
                    Repr::Scalar {
                        name: header.induction_variable,
                        type_text: induction_type,
                    },
                );
            } else {
                let wide = self.fresh("ab_i");
                let line = format!(
                    "{wide} = arith.extsi {} : {induction_type} to i64",
                    header.induction_variable
                );
                match first {
                    Some(first) => self.edits.push(Edit::Before(first, vec![line])),
                    None => return Err(BridgeError::plain("internal: an empty scf.for body")),
                }
                self.values.insert(
                    induction,
                    Repr::Scalar {
                        name: wide,
                        type_text: "i64".into(),
                    },
                );
            }
        }
        let spread =
            self.isa::<ForOp>(op) && attrs::get_string(self.ctx, op, "doorbell_scope").is_some();
        if spread {
            self.spread_loop(module, op, id)?;
        }
        self.depth += 1;
        self.spread_depth += usize::from(spread);
        let result = self.block(module, body, first);
        self.spread_depth -= usize::from(spread);
        self.depth -= 1;
        result
    }

    /// Rewrites the header of a `doorbell_scope` loop so that thread `t` of the scope runs
    /// iterations `t, t + T, ...` (`T` = 32 for `warp`, the CTA's size for `cta`; threads
    /// outside the warp get an empty range). The body then writes each iteration's commands
    /// from the thread that runs it, and the barrier the lowering put after the loop orders
    /// them before the leader's doorbell.
    fn spread_loop(
        &mut self,
        module: &TtirModule,
        op: Ptr<Operation>,
        id: OperationId,
    ) -> Result<(), BridgeError> {
        let header = module
            .operation(id)
            .scf_for()
            .ok_or_else(|| BridgeError::plain("internal: a kept ab.for without its scf.for"))?;
        let scope = attrs::get_string(self.ctx, op, "doorbell_scope").unwrap_or_default();
        let induction_type = header
            .induction_type
            .clone()
            .unwrap_or_else(|| "i64".into());
        if !header.iter_args.is_empty() || !matches!(induction_type.as_str(), "i32" | "i64") {
            return Err(BridgeError::plain(format!(
                "internal: a doorbell_scope loop must have an i32 or i64 counter and no loop-carried values (it has {} and {})",
                induction_type,
                header.iter_args.len()
            )));
        }
        let dummy = self.constant_i64(0);
        let thread = self.asm("mov.u32 $0, %tid.x;", &[(&dummy, "i64", 'l')]);
        let thread = self.convert(&thread, "i32", &induction_type)?;
        let count = if scope == "cta" {
            let count = self.asm("mov.u32 $0, %ntid.x;", &[(&dummy, "i64", 'l')]);
            self.convert(&count, "i32", &induction_type)?
        } else {
            self.assign(
                "ab_lanes",
                format!(
                    "arith.constant {} : {induction_type}",
                    aboleth_passes::choose_doorbell_scope::WARP_LANES
                ),
            )
        };
        let ty = &induction_type;
        let offset = self.assign(
            "ab_v",
            format!("arith.muli {thread}, {} : {ty}", header.step),
        );
        let mut lower = self.assign(
            "ab_v",
            format!("arith.addi {}, {offset} : {ty}", header.lower_bound),
        );
        if scope != "cta" {
            // Only the leader's warp posts; the other warps skip the loop.
            let in_warp = self.assign(
                "ab_in_warp",
                format!("arith.cmpi slt, {thread}, {count} : {ty}"),
            );
            lower = self.assign(
                "ab_v",
                format!(
                    "arith.select {in_warp}, {lower}, {} : {ty}",
                    header.upper_bound
                ),
            );
        }
        let step = self.assign(
            "ab_v",
            format!("arith.muli {}, {count} : {ty}", header.step),
        );
        self.flush_before(id);
        self.edits.push(Edit::Header(
            id,
            format!(
                "scf.for {} = {lower} to {} step {step}  : {ty} {{",
                header.induction_variable, header.upper_bound
            ),
        ));
        Ok(())
    }

    /// Lines that keep the results of a replaced call defined (dead; Triton removes them).
    fn dummy_definitions(&mut self, id: OperationId) -> Vec<String> {
        self.lifted
            .result_names
            .get(&id)
            .map(|names| {
                names
                    .iter()
                    .map(|(name, type_text)| format!("{name} = arith.constant 0 : {type_text}"))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether `op` is a `T`.
    fn isa<T: Op>(&self, op: Ptr<Operation>) -> bool {
        Operation::get_opid(op, self.ctx) == T::get_opid_static()
    }

    /// Translates one lowered op by the method its type names ([`translation`]).
    fn operation(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        if let Some(translate) = translation(&Operation::get_opid(op, self.ctx)) {
            return translate(self, op);
        }
        match op_name(self.ctx, op).as_str() {
            other if other.starts_with("mlx5.") || other.starts_with("efa.") => {
                Err(BridgeError::not_built(format!(
                    "TTIR code generation has no translation of `{other}`: --target {} compiles it to the Aboleth IR (aboleth compile --emit aboleth) and runs it in the simulator, but cannot generate Triton code for it",
                    self.target.name()
                )))
            }
            other => Err(BridgeError::plain(format!(
                "internal: no TTIR code generation for `{other}`"
            ))),
        }
    }

    /// `ab.yield` and `ab.return`: the kept `scf.yield` and `tt.return` stand for them.
    fn nothing(&mut self, _op: Ptr<Operation>) -> Result<(), BridgeError> {
        Ok(())
    }
}
