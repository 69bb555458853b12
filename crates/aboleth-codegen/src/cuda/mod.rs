//! CUDA C++ code generation: a lowered `ab` function (no loops, as the device library's
//! operations are) as the body of a `__device__` function that a thread, a warp or a block
//! calls ([`ProgramScope`]): the encoding of the tier-1 library (`crate::device_library`), next
//! to the TTIR encoding of tier 2 (`crate::emit`) of the same lowered ops.
//!
//! What "the program" is in the lowered IR maps to the caller's scope: its thread 0 (the
//! leader that posts commands and signals) is the calling thread, lane 0 of the calling warp
//! or thread 0 of the block; a program-wide copy is spread over the scope's threads; a
//! program barrier is nothing, `__syncwarp()` or `__syncthreads()`. Every lowered op becomes
//! a few C++ statements with the same memory ordering as its TTIR form: the inline PTX of
//! signals, fences, doorbells and polls is the same instruction, and the wait-failure record
//! is the same `emit/ptx/wait_failure_record.ptx` template. One difference is deliberate: a
//! library call cannot read the waits' bound once per launch, so a bounded wait reads the
//! bound and the abort word (host memory) only once it has polled for
//! [`ABORT_POLL_AFTER_NANOSECONDS`], never on its fast path. Field offsets come from the C++
//! declarations written from `aboleth-abi` (`aboleth_abi::c_declarations`): the generated code
//! names fields, never offsets. Nothing here decides anything; ops without a translation
//! (packets, receive queues, loops, inline mlx5 puts) are refused with an error naming them.

mod mlx5;
mod proxy;

pub use mlx5::{declarations as mlx5_declarations, helpers as mlx5_helpers};

use std::collections::HashMap;
use std::fmt::Write as _;

use aboleth_abi::Transport;
use aboleth_ir::ab::attributes::{BinaryOperator, Comparison, SignalOperation};
use aboleth_ir::ab::ops::{
    AtOp, BinaryOp, CastOp, EndpointOp, IfOp, LoadOp, PointerAddOp, RemoteOp, ReturnOp, StoreOp,
    YieldOp,
};
use aboleth_ir::pliron::builtin::ops::ConstantOp;
use aboleth_ir::pliron::op::{Op, OpId};
use aboleth_ir::pliron::{
    basic_block::BasicBlock,
    context::{Context, Ptr},
    operation::Operation,
    value::Value,
};
use aboleth_ir::transport::{
    GpuBarrierOp, GpuFenceOp, GpuWaitFlagOp, Mlx5AtomicOp, Mlx5DoorbellOp, Mlx5DoorbellRecordOp,
    Mlx5LockOp, Mlx5PublishOp, Mlx5ReserveOp, Mlx5UnlockOp, Mlx5WaitCompletionOp, Mlx5WriteOp,
    P2pCopyOp, P2pSignalOp, ProxyDoorbellOp, ProxyPublishOp, ProxyPutOp, ProxyReserveOp,
    ProxySignalOp, ProxyWaitCompletionOp,
};
use aboleth_ir::{
    attrs, scalar::integer_width, text::op_name, walk::block_ops, walk::region_block,
};

use crate::BridgeError;
use crate::emit::wait_failure_record_ptx;

/// How long a library wait polls before it reads the bound and the abort word (host memory):
/// the same patience as tier 2's abort poll.
pub const ABORT_POLL_AFTER_NANOSECONDS: u64 = 100_000;

/// Who calls a library function: every thread of the scope calls it with the same arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProgramScope {
    /// One thread, alone.
    Thread,
    /// The 32 lanes of one warp, converged.
    Warp,
    /// Every thread of the block.
    Block,
}

impl ProgramScope {
    /// Every scope, in the order the library lists variants.
    pub const ALL: [ProgramScope; 3] = [Self::Thread, Self::Warp, Self::Block];

    /// The variant's suffix in the library's names (`put_signal`, `put_signal_warp`, ...).
    pub fn suffix(self) -> &'static str {
        match self {
            Self::Thread => "",
            Self::Warp => "_warp",
            Self::Block => "_block",
        }
    }

    /// The scope's name in contracts and goldens.
    pub fn name(self) -> &'static str {
        match self {
            Self::Thread => "thread",
            Self::Warp => "warp",
            Self::Block => "block",
        }
    }

    /// This thread's index in the scope and the scope's thread count (C++ expressions of the
    /// header's `detail` helpers).
    fn lane_and_lanes(self) -> (&'static str, &'static str) {
        match self {
            Self::Thread => ("0u", "1u"),
            Self::Warp => ("detail::lane_in_warp()", "32u"),
            Self::Block => ("detail::thread_in_block()", "detail::threads_in_block()"),
        }
    }

    fn barrier(self) -> Option<&'static str> {
        match self {
            Self::Thread => None,
            Self::Warp => Some("__syncwarp();"),
            Self::Block => Some("__syncthreads();"),
        }
    }
}

/// A deliberately broken encoding, for the GPU check that the tests catch what it breaks
/// (`tests/gpu/tier1_exchange.py`, "mutation"): never used to build a library users get.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CudaMutation {
    /// p2p: every signal is stored before the copy that precedes it, so a receiver can see the
    /// flag before the data.
    SignalBeforeCopy,
    /// mlx5: WQE fields are stored in the GPU's byte order instead of big-endian, so a NIC
    /// reads other addresses, keys and lengths (`tests/gpu/tier1_mlx5_wqes.py` must catch it).
    HostOrderWqes,
}

impl CudaMutation {
    /// Every mutation.
    pub const ALL: [CudaMutation; 2] = [Self::SignalBeforeCopy, Self::HostOrderWqes];

    /// Its name on the command line (`aboleth device-library --mutate NAME`).
    pub fn name(self) -> &'static str {
        match self {
            Self::SignalBeforeCopy => "signal-before-copy",
            Self::HostOrderWqes => "host-order-wqes",
        }
    }

    /// The transport whose encoding it breaks.
    pub fn target(self) -> Transport {
        match self {
            Self::SignalBeforeCopy => Transport::P2p,
            Self::HostOrderWqes => Transport::Mlx5,
        }
    }

    /// The mutation named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|mutation| mutation.name() == name)
    }
}

/// One parameter of the generated function: its C++ name and type, in the lowered function's
/// argument order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parameter {
    /// The C++ name.
    pub name: String,
    /// The C++ type (`uint64_t`, `int64_t`, `int32_t`).
    pub c_type: String,
}

/// What [`generate_function`] produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeneratedFunction {
    /// The body's statements (without the braces), indented by two spaces.
    pub body: String,
    /// What each bounded wait of the body waits for, by its site id minus `first_site`.
    pub wait_sites: Vec<&'static str>,
}

/// How an `ab` value exists in the C++ body.
#[derive(Clone, Debug)]
enum Repr {
    /// A C++ variable (or literal) and its C++ type.
    Scalar { name: String, c_type: String },
    /// A remote element: its region descriptor's address and the byte offset (both 64-bit).
    RemotePointer { descriptor: String, offset: String },
}

/// The body of a `__device__` function computing lowered function `function` for `scope`, whose
/// arguments are `parameters`. Wait sites are numbered from `first_site`.
pub fn generate_function(
    ctx: &Context,
    function: Ptr<Operation>,
    parameters: &[Parameter],
    scope: ProgramScope,
    target: Transport,
    first_site: u32,
    mutation: Option<CudaMutation>,
) -> Result<GeneratedFunction, BridgeError> {
    let entry = region_block(ctx, function, 0);
    let arguments = entry.deref(ctx).get_num_arguments();
    if arguments != parameters.len() {
        return Err(BridgeError::plain(format!(
            "internal: the lowered function has {arguments} arguments but {} parameters were named",
            parameters.len()
        )));
    }
    let mut generator = CudaGenerator {
        ctx,
        scope,
        target,
        values: HashMap::new(),
        lines: Vec::new(),
        next_name: 0,
        depth: 1,
        wait_handle: None,
        remote_bases: HashMap::new(),
        handle_fields: HashMap::new(),
        first_site,
        wait_sites: Vec::new(),
        mutation,
        deferred_copy: None,
    };
    let (lane, lanes) = scope.lane_and_lanes();
    generator.line(format!("[[maybe_unused]] const uint32_t ab_lane = {lane};"));
    generator.line(format!(
        "[[maybe_unused]] const uint32_t ab_lanes = {lanes};"
    ));
    generator.line("[[maybe_unused]] const bool ab_leader = ab_lane == 0;".into());
    for (index, parameter) in parameters.iter().enumerate() {
        let argument = entry.deref(ctx).get_argument(index);
        generator.values.insert(
            argument,
            Repr::Scalar {
                name: parameter.name.clone(),
                c_type: parameter.c_type.clone(),
            },
        );
    }
    generator.block(entry)?;
    let mut body = String::new();
    for line in &generator.lines {
        body.push_str(line);
        body.push('\n');
    }
    Ok(GeneratedFunction {
        body,
        wait_sites: generator.wait_sites,
    })
}

struct CudaGenerator<'a> {
    ctx: &'a Context,
    scope: ProgramScope,
    target: Transport,
    values: HashMap<Value, Repr>,
    lines: Vec<String>,
    next_name: usize,
    /// Indentation depth (1: the function body).
    depth: usize,
    /// The endpoint handle whose wait-failure log and rank every bounded wait reports with
    /// (the first top-level `ab.endpoint`, as in tier 2).
    wait_handle: Option<String>,
    /// p2p: the peer region's base address read at its `ab.remote`, by descriptor variable.
    remote_bases: HashMap<String, String>,
    /// Endpoint handle fields read at the body's top level, by handle and field (the proxy's
    /// ring, the mlx5 queue's buffers and counters).
    handle_fields: HashMap<(String, &'static str), String>,
    first_site: u32,
    wait_sites: Vec<&'static str>,
    mutation: Option<CudaMutation>,
    /// Under [`CudaMutation::SignalBeforeCopy`]: a copy's lines, emitted after the next signal.
    deferred_copy: Option<Vec<String>>,
}

/// What a bounded wait polls, until when, and what it reports when it gives up.
struct Wait<'a> {
    /// The address it reports.
    address: &'a str,
    /// A C++ condition on `ab_seen`: true while the wait goes on.
    keep_waiting: &'a str,
    /// The value it reports as expected.
    expected: &'a str,
    /// The C++ expression of what it reports as seen (from `ab_seen`).
    seen: &'a str,
    /// The peer it reports (a C++ expression; -1: none).
    peer: &'a str,
    /// `WAIT_KIND_*`.
    kind: u32,
    /// What it waits for, in the header's list of wait sites.
    what: &'static str,
    /// Only the scope's leader polls.
    leader_only: bool,
}

/// How one lowered op becomes C++.
type Translation<'a> = fn(&mut CudaGenerator<'a>, Ptr<Operation>) -> Result<(), BridgeError>;

fn translation<'a>(id: &OpId) -> Option<Translation<'a>> {
    macro_rules! by_type {
        ($($op:ty => $method:path),* $(,)?) => {
            $(if *id == <$op as Op>::get_opid_static() {
                return Some($method);
            })*
        };
    }
    by_type!(
        ConstantOp => CudaGenerator::constant,
        BinaryOp => CudaGenerator::binary,
        CastOp => CudaGenerator::cast,
        PointerAddOp => CudaGenerator::pointer_add,
        LoadOp => CudaGenerator::load,
        StoreOp => CudaGenerator::store,
        EndpointOp => CudaGenerator::endpoint,
        RemoteOp => CudaGenerator::remote,
        AtOp => CudaGenerator::at,
        IfOp => CudaGenerator::lowered_if,
        YieldOp => CudaGenerator::nothing,
        ReturnOp => CudaGenerator::nothing,
        P2pCopyOp => CudaGenerator::p2p_copy,
        P2pSignalOp => CudaGenerator::p2p_signal,
        GpuBarrierOp => CudaGenerator::gpu_barrier,
        GpuFenceOp => CudaGenerator::gpu_fence,
        GpuWaitFlagOp => CudaGenerator::wait_flag,
        ProxyReserveOp => CudaGenerator::proxy_reserve,
        ProxyPutOp => CudaGenerator::proxy_put,
        ProxySignalOp => CudaGenerator::proxy_signal,
        ProxyPublishOp => CudaGenerator::proxy_publish,
        ProxyDoorbellOp => CudaGenerator::proxy_doorbell,
        ProxyWaitCompletionOp => CudaGenerator::proxy_wait_completion,
        Mlx5ReserveOp => CudaGenerator::mlx5_reserve,
        Mlx5WriteOp => CudaGenerator::mlx5_write,
        Mlx5AtomicOp => CudaGenerator::mlx5_atomic,
        Mlx5PublishOp => CudaGenerator::mlx5_publish,
        Mlx5LockOp => CudaGenerator::mlx5_lock,
        Mlx5UnlockOp => CudaGenerator::mlx5_unlock,
        Mlx5DoorbellRecordOp => CudaGenerator::mlx5_doorbell_record,
        Mlx5DoorbellOp => CudaGenerator::mlx5_doorbell,
        Mlx5WaitCompletionOp => CudaGenerator::mlx5_wait_completion,
    );
    None
}

fn c_type_of(ctx: &Context, value: Value) -> String {
    match integer_width(ctx, value) {
        Some(1) => "bool".into(),
        Some(width) => format!("int{width}_t"),
        None => "uint64_t".into(),
    }
}

impl CudaGenerator<'_> {
    fn line(&mut self, text: String) {
        let indent = "  ".repeat(self.depth);
        self.lines.push(format!("{indent}{text}"));
    }

    fn fresh(&mut self, stem: &str) -> String {
        let name = format!("ab_{stem}{}", self.next_name);
        self.next_name += 1;
        name
    }

    /// `const TYPE ab_stemN = EXPRESSION;`; returns the name.
    fn assign(&mut self, stem: &str, c_type: &str, expression: String) -> String {
        let name = self.fresh(stem);
        self.line(format!(
            "[[maybe_unused]] const {c_type} {name} = {expression};"
        ));
        name
    }

    fn operand(&self, op: Ptr<Operation>, index: usize) -> Value {
        op.deref(self.ctx).get_operand(index)
    }

    fn repr(&self, value: Value) -> Result<Repr, BridgeError> {
        self.values.get(&value).cloned().ok_or_else(|| {
            BridgeError::plain(format!(
                "internal: no C++ value for an operand of type {}",
                c_type_of(self.ctx, value)
            ))
        })
    }

    /// `value` as a C++ expression of type `wanted` (a cast when the types differ).
    fn use_as(&self, value: Value, wanted: &str) -> Result<String, BridgeError> {
        let Repr::Scalar { name, c_type } = self.repr(value)? else {
            return Err(BridgeError::plain(
                "internal: a remote element used as a number",
            ));
        };
        Ok(if c_type == wanted {
            name
        } else {
            format!("static_cast<{wanted}>({name})")
        })
    }

    fn u64(&self, value: Value) -> Result<String, BridgeError> {
        self.use_as(value, "uint64_t")
    }

    fn i64(&self, value: Value) -> Result<String, BridgeError> {
        self.use_as(value, "int64_t")
    }

    fn define(&mut self, op: Ptr<Operation>, repr: Repr) {
        let result = op.deref(self.ctx).get_result(0);
        self.values.insert(result, repr);
    }

    fn define_scalar(&mut self, op: Ptr<Operation>, name: String, c_type: String) {
        self.define(op, Repr::Scalar { name, c_type });
    }

    fn block(&mut self, block: Ptr<BasicBlock>) -> Result<(), BridgeError> {
        for op in block_ops(self.ctx, block) {
            self.operation(op)?;
        }
        Ok(())
    }

    fn operation(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        if let Some(translate) = translation(&Operation::get_opid(op, self.ctx)) {
            return translate(self, op);
        }
        Err(BridgeError::not_built(format!(
            "CUDA code generation (the device library) has no translation of `{}` for --target {}",
            op_name(self.ctx, op),
            self.target.name()
        )))
    }

    fn nothing(&mut self, _op: Ptr<Operation>) -> Result<(), BridgeError> {
        Ok(())
    }

    /// A statement only the scope's leader runs.
    fn leader_only(&mut self, statement: String) {
        self.line(format!("if (ab_leader) {{ {statement} }}"));
    }

    fn constant(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let result = op.deref(self.ctx).get_result(0);
        let value = aboleth_ir::scalar::constant_value(self.ctx, result)
            .ok_or_else(|| BridgeError::plain("internal: a non-integer constant"))?;
        let c_type = c_type_of(self.ctx, result);
        let literal = if c_type == "int64_t" {
            format!("INT64_C({value})")
        } else {
            format!("static_cast<{c_type}>({value})")
        };
        self.define_scalar(op, literal, c_type);
        Ok(())
    }

    fn binary(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let operator = Operation::get_op::<BinaryOp>(op, self.ctx)
            .expect("ab.binop")
            .operator(self.ctx);
        let result = op.deref(self.ctx).get_result(0);
        let c_type = c_type_of(self.ctx, result);
        let lhs = self.use_as(self.operand(op, 0), &c_type)?;
        let rhs = self.use_as(self.operand(op, 1), &c_type)?;
        let expression = match operator {
            BinaryOperator::Add => format!("{lhs} + {rhs}"),
            BinaryOperator::Sub => format!("{lhs} - {rhs}"),
            BinaryOperator::Mul => format!("{lhs} * {rhs}"),
            BinaryOperator::Div => format!("{lhs} / {rhs}"),
            BinaryOperator::Rem => format!("{lhs} % {rhs}"),
            BinaryOperator::Min => format!("({lhs} < {rhs} ? {lhs} : {rhs})"),
            BinaryOperator::Max => format!("({lhs} > {rhs} ? {lhs} : {rhs})"),
            BinaryOperator::And => format!("{lhs} & {rhs}"),
            BinaryOperator::Or => format!("{lhs} | {rhs}"),
            comparison => {
                let symbol = match comparison {
                    BinaryOperator::Eq => "==",
                    BinaryOperator::Ne => "!=",
                    BinaryOperator::Lt => "<",
                    BinaryOperator::Le => "<=",
                    BinaryOperator::Gt => ">",
                    _ => ">=",
                };
                format!("static_cast<{c_type}>({lhs} {symbol} {rhs})")
            }
        };
        let name = self.assign("v", &c_type, expression);
        self.define_scalar(op, name, c_type);
        Ok(())
    }

    fn cast(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let result = op.deref(self.ctx).get_result(0);
        let c_type = c_type_of(self.ctx, result);
        let converted = self.use_as(self.operand(op, 0), &c_type)?;
        let name = self.assign("v", &c_type, converted);
        self.define_scalar(op, name, c_type);
        Ok(())
    }

    fn pointer_add(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let base = self.u64(self.operand(op, 0))?;
        let offset = self.u64(self.operand(op, 1))?;
        let name = self.assign("p", "uint64_t", format!("{base} + {offset}"));
        self.define_scalar(op, name, "uint64_t".into());
        Ok(())
    }

    fn load(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let result = op.deref(self.ctx).get_result(0);
        let c_type = c_type_of(self.ctx, result);
        let pointer = self.u64(self.operand(op, 0))?;
        let name = self.assign(
            "v",
            &c_type,
            format!("*reinterpret_cast<const {c_type}*>({pointer})"),
        );
        self.define_scalar(op, name, c_type);
        Ok(())
    }

    fn store(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let value = self.operand(op, 1);
        let c_type = c_type_of(self.ctx, value);
        let pointer = self.u64(self.operand(op, 0))?;
        let stored = self.use_as(value, &c_type)?;
        self.line(format!(
            "*reinterpret_cast<{c_type}*>({pointer}) = {stored};"
        ));
        Ok(())
    }

    /// `ab.endpoint`: the peer's handle in the table; the first top-level one is where bounded
    /// waits find the wait-failure log and this rank.
    fn endpoint(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let table = self.u64(self.operand(op, 0))?;
        let peer = self.u64(self.operand(op, 1))?;
        let handle = self.assign(
            "endpoint",
            "uint64_t",
            format!("{table} + {peer} * sizeof(EndpointHandle)"),
        );
        if self.depth == 1 && self.wait_handle.is_none() {
            self.wait_handle = Some(handle.clone());
        }
        if self.target == Transport::Mlx5 {
            self.exit_unless_supported_mlx5_endpoint(&handle);
        }
        self.define_scalar(op, handle, "uint64_t".into());
        Ok(())
    }

    /// `ab.remote`: the peer's descriptor in the table (on p2p its base address is read here,
    /// as tier 2 does).
    fn remote(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let table = self.u64(self.operand(op, 0))?;
        let peer = self.u64(self.operand(op, 1))?;
        let descriptor = self.assign(
            "descriptor",
            "uint64_t",
            format!("{table} + {peer} * sizeof(RemoteRegionDescriptor)"),
        );
        if self.target == Transport::P2p {
            let base = self.assign(
                "base",
                "uint64_t",
                format!(
                    "detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>({descriptor})->base_address)"
                ),
            );
            self.remote_bases.insert(descriptor.clone(), base);
        }
        self.define_scalar(op, descriptor, "uint64_t".into());
        Ok(())
    }

    fn at(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let Repr::Scalar {
            name: descriptor, ..
        } = self.repr(self.operand(op, 0))?
        else {
            return Err(BridgeError::plain("internal: ab.at of a non-region"));
        };
        let element_bytes = crate::emit::at_element_bytes(self.ctx, op);
        let index = self.u64(self.operand(op, 1))?;
        let offset = self.assign("offset", "uint64_t", format!("{index} * {element_bytes}u"));
        self.define(op, Repr::RemotePointer { descriptor, offset });
        Ok(())
    }

    /// The address of a remote element: the descriptor's base address plus the offset.
    fn remote_address(&mut self, value: Value) -> Result<String, BridgeError> {
        let Repr::RemotePointer { descriptor, offset } = self.repr(value)? else {
            return Err(BridgeError::plain("internal: expected a remote pointer"));
        };
        let base = match self.remote_bases.get(&descriptor) {
            Some(base) => base.clone(),
            None => format!(
                "detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>({descriptor})->base_address)"
            ),
        };
        Ok(self.assign("address", "uint64_t", format!("{base} + {offset}")))
    }

    /// `ab.if` the lowering created: its body inside an `if`.
    fn lowered_if(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let condition = self.i64(self.operand(op, 0))?;
        self.line(format!("if ({condition} != 0) {{"));
        self.depth += 1;
        let result = self.block(region_block(self.ctx, op, 0));
        self.depth -= 1;
        self.line("}".into());
        result
    }

    /// `gpu.barrier`: the scope's barrier (a lone thread needs none). A `warp`-scoped barrier
    /// of a doorbell-scope loop is the warp's.
    fn gpu_barrier(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let barrier = if attrs::get_string(self.ctx, op, "scope").as_deref() == Some("warp")
            && self.scope != ProgramScope::Thread
        {
            Some("__syncwarp();")
        } else {
            self.scope.barrier()
        };
        if let Some(barrier) = barrier {
            self.line(barrier.into());
        }
        Ok(())
    }

    fn gpu_fence(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let fence = crate::emit::fence_ptx(attrs::get_string(self.ctx, op, "scope").as_deref());
        self.line(format!("asm volatile(\"{fence}\" ::: \"memory\");"));
        Ok(())
    }

    /// `p2p.copy`: the scope's threads store the payload into the peer's memory, 16-byte
    /// vectors when source, destination and size allow, else words, else bytes.
    fn p2p_copy(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let destination = self.remote_address(self.operand(op, 1))?;
        let source = self.u64(self.operand(op, 2))?;
        let bytes = self.u64(self.operand(op, 3))?;
        let predicate_value = self.operand(op, 4);
        let always = aboleth_ir::scalar::constant_value(self.ctx, predicate_value) == Some(1);
        let start = self.lines.len();
        if !always {
            let predicate = self.i64(predicate_value)?;
            self.line(format!("if ({predicate} != 0) {{"));
            self.depth += 1;
        }
        self.line(format!(
            "detail::copy_to_peer({destination}, {source}, {bytes}, ab_lane, ab_lanes);"
        ));
        if !always {
            self.depth -= 1;
            self.line("}".into());
        }
        if self.mutation == Some(CudaMutation::SignalBeforeCopy) {
            self.deferred_copy = Some(self.lines.split_off(start));
        }
        Ok(())
    }

    /// `p2p.signal`: the leader's store or reduction with the lowering's ordering.
    fn p2p_signal(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let address = self.remote_address(self.operand(op, 1))?;
        let value = self.u64(self.operand(op, 2))?;
        let release = attrs::get_string(self.ctx, op, "order").as_deref() == Some("release");
        let operation =
            attrs::get_typed::<SignalOperation>(self.ctx, op, "op").unwrap_or(SignalOperation::Set);
        let ptx = crate::emit::signal_ptx(operation, release).replace('$', "%");
        let ptx = ptx.replace("%1", "%0").replace("%2", "%1");
        self.leader_only(format!(
            "asm volatile(\"{ptx}\" :: \"l\"({address}), \"l\"({value}) : \"memory\");"
        ));
        if let Some(copy) = self.deferred_copy.take() {
            self.lines.extend(copy);
        }
        Ok(())
    }

    /// `gpu.wait_flag`: every thread of the scope polls the flag until it reaches the value.
    fn wait_flag(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        if op.deref(self.ctx).get_num_operands() > 2 {
            return Err(BridgeError::not_built(
                "CUDA code generation (the device library) has no translation of a wait that drains receives or unpacks packets",
            ));
        }
        let flag = self.u64(self.operand(op, 0))?;
        let expected = self.u64(self.operand(op, 1))?;
        let acquire = attrs::get_string(self.ctx, op, "order").as_deref() == Some("acquire");
        let load = if acquire {
            "ld.acquire.sys.global.u64"
        } else {
            "ld.volatile.global.u64"
        };
        // Tier 1 compares unsigned 64-bit values, as NVSHMEM's signal_wait_until does.
        let comparison = attrs::comparison(self.ctx, op);
        self.bounded_wait(
            &flag,
            load,
            &format!("!(ab_seen {} {expected})", comparison.symbol()),
            &expected,
            "-1",
            crate::emit::flag_wait_kind(comparison),
            match comparison {
                Comparison::Ge => "a flag to reach the value",
                Comparison::Eq => "a flag to equal the value",
                Comparison::Ne => "a flag to differ from the value",
                Comparison::Gt => "a flag to exceed the value",
                Comparison::Le => "a flag to be at most the value",
                Comparison::Lt => "a flag to be below the value",
            },
            false,
        );
        Ok(())
    }

    /// A loop polling the 64-bit word at `address` with `load` (into `ab_seen`) while
    /// `keep_waiting` holds, bounded ([`Self::bounded_poll`]).
    #[allow(
        clippy::too_many_arguments,
        reason = "what a wait polls, until when, and what it reports"
    )]
    fn bounded_wait(
        &mut self,
        address: &str,
        load: &str,
        keep_waiting: &str,
        expected: &str,
        peer: &str,
        kind: u32,
        what: &'static str,
        leader_only: bool,
    ) {
        let poll = format!(
            "asm volatile(\"{load} %0, [%1];\" : \"=l\"(ab_seen) : \"l\"({address}) : \"memory\");"
        );
        self.bounded_poll(
            &poll,
            Wait {
                address,
                keep_waiting,
                expected,
                seen: "ab_seen",
                peer,
                kind,
                what,
                leader_only,
            },
        );
    }

    /// A loop running `poll` (a statement that sets `uint64_t ab_seen`) while
    /// `wait.keep_waiting` holds, bounded: after [`ABORT_POLL_AFTER_NANOSECONDS`] it reads the
    /// bound and the abort word and, past the bound or once asked to, records what `wait` says
    /// in the wait-failure log and exits (the tier-2 record, `detail::give_up`). With
    /// `leader_only` only the leader polls (the others pass).
    fn bounded_poll(&mut self, poll: &str, wait: Wait<'_>) {
        let site = self.first_site + self.wait_sites.len() as u32;
        self.wait_sites.push(wait.what);
        let handle = self.wait_handle.clone();
        if wait.leader_only {
            self.line("if (ab_leader) {".into());
            self.depth += 1;
        }
        self.line("{".into());
        self.depth += 1;
        self.line("const uint64_t ab_start = detail::globaltimer();".into());
        self.line("uint64_t ab_seen;".into());
        self.line("for (;;) {".into());
        self.depth += 1;
        self.line(poll.to_string());
        self.line(format!("if (!({})) break;", wait.keep_waiting));
        match handle {
            Some(handle) => self.line(format!(
                "detail::give_up_if_overdue({handle}, ab_start, {}, {}, {}, {}, {site}u, {}u);",
                wait.address, wait.expected, wait.seen, wait.peer, wait.kind
            )),
            None => self.line("// unbounded: no endpoint handle gave the wait-failure log".into()),
        }
        self.depth -= 1;
        self.line("}".into());
        self.depth -= 1;
        self.line("}".into());
        if wait.leader_only {
            self.depth -= 1;
            self.line("}".into());
        }
    }

    /// Queue slots (operand 1 of `op`) taken by the leader after the scope's barrier (its
    /// threads' source stores come first): `atom.add` at `scope` on `counter` when the queue is
    /// shared, a plain read-modify-write for one owner; then the leader waits, running `poll`
    /// (which sets `ab_seen` to the consumer position), until `capacity` covers them. The
    /// proxy ring's and the mlx5 send queue's reservation; returns the base slot's variable.
    #[allow(
        clippy::too_many_arguments,
        reason = "a queue's counter, consumer, capacity and how each is read"
    )]
    fn reserve_slots(
        &mut self,
        op: Ptr<Operation>,
        counter: &str,
        consumer: &str,
        capacity: &str,
        scope: &str,
        poll: &str,
        what: &'static str,
    ) -> Result<String, BridgeError> {
        let endpoint = self.operand(op, 0);
        let count = self.u64(self.operand(op, 1))?;
        if let Some(barrier) = self.scope.barrier() {
            self.line(barrier.into());
        }
        let base = self.fresh("base");
        self.line(format!("uint64_t {base} = 0;"));
        if attrs::get_bool(self.ctx, op, "atomic") {
            self.leader_only(format!(
                "asm volatile(\"atom.relaxed.{scope}.global.add.u64 %0, [%1], %2;\" : \"=l\"({base}) : \"l\"({counter}), \"l\"({count}) : \"memory\");"
            ));
        } else {
            self.leader_only(format!(
                "{base} = *reinterpret_cast<volatile uint64_t*>({counter}); *reinterpret_cast<volatile uint64_t*>({counter}) = {base} + {count};"
            ));
        }
        let end = self.assign("end", "uint64_t", format!("{base} + {count}"));
        let needed = self.assign("needed", "uint64_t", format!("{end} - {capacity}"));
        let handle = self.u64(endpoint)?;
        let peer = self.peer_of(&handle);
        // Signed, as tier 2's: the slots in use past the consumer position.
        let keep_waiting =
            format!("static_cast<int64_t>({end} - ab_seen) > static_cast<int64_t>({capacity})");
        self.bounded_poll(
            poll,
            Wait {
                address: consumer,
                keep_waiting: &keep_waiting,
                expected: &needed,
                seen: "ab_seen",
                peer: &peer,
                kind: aboleth_abi::wait_failure::WAIT_KIND_QUEUE_SPACE,
                what,
                leader_only: true,
            },
        );
        if attrs::get_bool(self.ctx, op, "broadcast") {
            return Err(BridgeError::not_built(
                "CUDA code generation (the device library) has no translation of a reservation whose entries every thread writes",
            ));
        }
        Ok(base)
    }

    /// `*.publish` of a batch (operands 1 and 2: base and count) whose ready counter is at
    /// `ready`: in ticket order on a shared queue (the leader waits with an acquire at `scope`
    /// until the counter equals its base, then release-stores its end), or the one-owner
    /// store. Proxy rings are host memory (`sys`); an mlx5 queue's management block is this
    /// GPU's (`gpu`).
    fn publish_in_order(
        &mut self,
        op: Ptr<Operation>,
        ready: &str,
        scope: &str,
        what: &'static str,
    ) -> Result<(), BridgeError> {
        let endpoint = self.operand(op, 0);
        let base = self.u64(self.operand(op, 1))?;
        let count = self.u64(self.operand(op, 2))?;
        let end = self.assign("end", "uint64_t", format!("{base} + {count}"));
        if attrs::get_bool(self.ctx, op, "owner_only") {
            self.leader_only(format!(
                "*reinterpret_cast<volatile uint64_t*>({ready}) = {end};"
            ));
            return Ok(());
        }
        let handle = self.u64(endpoint)?;
        let peer = self.peer_of(&handle);
        self.bounded_wait(
            ready,
            &format!("ld.acquire.{scope}.global.u64"),
            &format!("ab_seen != {base}"),
            &base,
            &peer,
            aboleth_abi::wait_failure::WAIT_KIND_PUBLICATION_TURN,
            what,
            true,
        );
        self.leader_only(format!(
            "asm volatile(\"st.release.{scope}.global.u64 [%0], %1;\" :: \"l\"({ready}), \"l\"({end}) : \"memory\");"
        ));
        Ok(())
    }

    /// A field of the endpoint handle at `handle` (a table load, into `ab_<stem>N`), read once
    /// per handle and field in the body's top level (every later op reuses it).
    fn handle_field(
        &mut self,
        handle: &str,
        stem: &str,
        field: &'static str,
        c_type: &str,
    ) -> String {
        if let Some(name) = self.handle_fields.get(&(handle.to_string(), field)) {
            return name.clone();
        }
        let name = self.assign(
            stem,
            c_type,
            format!(
                "detail::table_load(&reinterpret_cast<const EndpointHandle*>({handle})->{field})"
            ),
        );
        if self.depth == 1 {
            self.handle_fields
                .insert((handle.to_string(), field), name.clone());
        }
        name
    }

    /// The peer rank of an endpoint handle (a C++ expression).
    fn peer_of(&self, handle: &str) -> String {
        format!(
            "static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>({handle})->peer_rank))"
        )
    }
}

/// The C++ helpers every generated body uses (in the header's implementation part, once):
/// lane and scope sizes, the copy, the clock, and the give-up path of bounded waits with the
/// tier-2 failure record.
pub fn helpers() -> String {
    let record = wait_failure_record_ptx()
        .replace('%', "%%")
        .replace('$', "%");
    let mut text = String::new();
    let _ = write!(
        text,
        r#"namespace detail {{

__device__ __forceinline__ uint32_t lane_in_warp() {{
  uint32_t lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  return lane;
}}

__device__ __forceinline__ uint32_t thread_in_block() {{
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}}

__device__ __forceinline__ uint32_t threads_in_block() {{
  return blockDim.x * blockDim.y * blockDim.z;
}}

__device__ __forceinline__ uint64_t globaltimer() {{
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now) :: "memory");
  return now;
}}

// A field of an endpoint handle or a region descriptor: tables the host wrote before the
// launch and nobody writes while kernels run, so a read-only, non-coherent global load
// (ld.global.nc) is correct, and it stays in the read-only cache across the waits' acquires.
__device__ __forceinline__ uint64_t table_load(const uint64_t* field) {{
  uint64_t value;
  asm("ld.global.nc.u64 %0, [%1];" : "=l"(value) : "l"(field));
  return value;
}}

__device__ __forceinline__ int64_t table_load(const int64_t* field) {{
  int64_t value;
  asm("ld.global.nc.s64 %0, [%1];" : "=l"(value) : "l"(field));
  return value;
}}

__device__ __forceinline__ uint32_t table_load(const uint32_t* field) {{
  uint32_t value;
  asm("ld.global.nc.u32 %0, [%1];" : "=r"(value) : "l"(field));
  return value;
}}

// Thread `lane` of `lanes` stores its share of `count` elements from `from` to `to` (plain,
// weakly ordered stores, as tier 2's copies). Each thread loads COPY_UNROLL elements before it
// stores them, so that a lone thread keeps that many loads in flight instead of waiting for
// each; source and destination do not overlap (__restrict__), so the compiler may also start
// the next loads before the stores. (Global-space PTX accesses in program order measured
// slower at 16 KiB-1 MiB: 2026-12-02-bench-nvidia-h200-2ranks-mps-tier1-nc.)
template <typename Element>
__device__ __forceinline__ void copy_elements(Element* __restrict__ to, const Element* __restrict__ from,
                                              uint64_t count, uint32_t lane, uint32_t lanes) {{
  constexpr uint32_t COPY_UNROLL = 8;
  uint64_t i = lane;
  for (; i + (COPY_UNROLL - 1) * uint64_t(lanes) < count; i += COPY_UNROLL * uint64_t(lanes)) {{
    Element staged[COPY_UNROLL];
#pragma unroll
    for (uint32_t k = 0; k < COPY_UNROLL; ++k) staged[k] = from[i + k * uint64_t(lanes)];
#pragma unroll
    for (uint32_t k = 0; k < COPY_UNROLL; ++k) to[i + k * uint64_t(lanes)] = staged[k];
  }}
  for (; i < count; i += lanes) to[i] = from[i];
}}

// The copy of a put: 16-byte vectors when source, destination and size are 16-byte aligned,
// words when 8-byte aligned, bytes otherwise.
__device__ __forceinline__ void copy_to_peer(uint64_t destination, uint64_t source, uint64_t bytes,
                                             uint32_t lane, uint32_t lanes) {{
  const uint64_t all = destination | source | bytes;
  if ((all & 15) == 0) {{
    copy_elements(reinterpret_cast<uint4*>(destination), reinterpret_cast<const uint4*>(source), bytes / 16, lane,
                  lanes);
  }} else if ((all & 7) == 0) {{
    copy_elements(reinterpret_cast<uint64_t*>(destination), reinterpret_cast<const uint64_t*>(source), bytes / 8,
                  lane, lanes);
  }} else {{
    copy_elements(reinterpret_cast<uint8_t*>(destination), reinterpret_cast<const uint8_t*>(source), bytes, lane,
                  lanes);
  }}
}}

// A bounded wait that has polled for {patience} ns reads the bound (ABOLETH_WAIT_TIMEOUT_MS,
// 0: forever) and the abort word from the wait-failure log of `handle`'s rank; past the bound
// or once another wait gave up, it records what it waited for (the tier-2 record) and exits.
static __device__ __noinline__ void give_up(uint64_t log, uint64_t address, uint64_t expected, uint64_t seen,
                                     uint64_t elapsed, uint32_t rank, uint32_t site, int32_t peer,
                                     uint32_t kind) {{
  [[maybe_unused]] uint32_t ignored;
  asm volatile("{record}"
               : "=r"(ignored)
               : "l"(log), "l"(address), "l"(expected), "l"(seen), "l"(elapsed), "r"(rank), "r"(site),
                 "r"(peer), "r"(kind)
               : "memory");
}}

__device__ __forceinline__ void give_up_if_overdue(uint64_t handle, uint64_t start, uint64_t address,
                                                   uint64_t expected, uint64_t seen, int32_t peer,
                                                   uint32_t site, uint32_t kind) {{
  const uint64_t elapsed = globaltimer() - start;
  if (elapsed <= {patience}u) return;
  const EndpointHandle* endpoint = reinterpret_cast<const EndpointHandle*>(handle);
  const WaitFailureLogHeader* log =
      reinterpret_cast<const WaitFailureLogHeader*>(endpoint->wait_failure_log_address);
  uint64_t timeout, abort;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(timeout) : "l"(&log->timeout_nanoseconds) : "memory");
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(abort) : "l"(&log->abort_requested) : "memory");
  if ((timeout != 0 && elapsed > timeout) || abort != 0) {{
    give_up(endpoint->wait_failure_log_address, address, expected, seen, elapsed, endpoint->local_rank,
            site, peer, kind);
  }}
}}

}}  // namespace detail
"#,
        patience = ABORT_POLL_AFTER_NANOSECONDS,
    );
    text
}
