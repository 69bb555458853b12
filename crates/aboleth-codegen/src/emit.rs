//! Code generation: the lowered `ab` kernel back into the TTIR it was lifted from.
//!
//! The TTIR is edited in place through `aboleth-ttir`'s edit API: lines of untouched ops stay
//! byte-identical. Every aboleth extern call is replaced by the code generated for its lowered
//! form (or by a dead `arith.constant` that keeps its result name defined when the code lives
//! elsewhere, e.g. a batch's reservation before its loop); ops the pipeline created are placed
//! right before the next op that maps to TTIR in the same block (after the last one at a
//! block's end); kept scalar ops and loops stay where they are and are referred to by name.
//!
//! Transports: p2p (peer addresses from the region descriptors; copies as masked
//! `tt.load`/`tt.store` of 1024 words (or bytes, when unaligned) per iteration that Triton
//! spreads over the program's threads; flag stores, fences and flag polls as inline PTX with
//! exact qualifiers, one elected thread storing), proxy (ring entries) and mlx5 (WQEs, doorbell
//! record, doorbell). An mlx5 op without a translation here is refused with an error naming it. Nothing here decides anything: the planning attributes were consumed by the
//! lowering, and this module translates op by op.

use std::collections::HashMap;

use aboleth_abi::Transport;
use aboleth_ir::{
    ab::attributes::{BinaryOperator, SignalOperation},
    ab::ops::BinaryOp,
    attrs,
    pliron::{
        basic_block::BasicBlock,
        context::{Context, Ptr},
        operation::Operation,
        r#type::Typed,
        value::Value,
    },
    scalar::integer_width,
    text::op_name,
    walk::{block_ops, region_block},
};
use aboleth_ttir::{OperationId, TtirModule, ValueNamer};

use crate::BridgeError;
use crate::lift::{Entry, LiftedKernel};

/// Elements (bytes or 8-byte words) copied per iteration of a p2p copy loop: one tensor.
pub const P2P_COPY_CHUNK_ELEMENTS: i64 = 1024;

mod packets;

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
    /// The wait-failure log address and this rank, once an endpoint handle gave them.
    wait_log: Option<(String, String)>,
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

impl Generator<'_> {
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
                    let name = op_name(self.ctx, op);
                    if name == "ab.for" || name == "ab.if" {
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
        if op_name(self.ctx, op) == "ab.for" {
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
        let spread = op_name(self.ctx, op) == "ab.for"
            && attrs::get_string(self.ctx, op, "doorbell_scope").is_some();
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
                    aboleth_passes::doorbell_scope::WARP_LANES
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

    // ----- values ------------------------------------------------------------------------

    fn repr(&self, value: Value) -> Result<Repr, BridgeError> {
        self.values.get(&value).cloned().ok_or_else(|| {
            BridgeError::plain(format!(
                "internal: no TTIR value for an operand of type {}",
                ab_type_text(self.ctx, value)
            ))
        })
    }

    /// `value` as a TTIR value of type `wanted`, converting when needed.
    fn use_as(&mut self, value: Value, wanted: &str) -> Result<String, BridgeError> {
        let Repr::Scalar { name, type_text } = self.repr(value)? else {
            return Err(BridgeError::plain("internal: a handle used as a number"));
        };
        self.convert(&name, &type_text, wanted)
    }

    fn convert(&mut self, name: &str, from: &str, to: &str) -> Result<String, BridgeError> {
        if from == to {
            return Ok(name.to_string());
        }
        let result = self.fresh("ab_cv");
        let width = |t: &str| t.strip_prefix('i').and_then(|w| w.parse::<u32>().ok());
        let line = match (from.starts_with("!tt.ptr"), to.starts_with("!tt.ptr")) {
            (true, true) => format!("{result} = tt.bitcast {name} : {from} -> {to}"),
            (true, false) => {
                let as_int = self.assign("ab_cv", format!("tt.ptr_to_int {name} : {from} -> i64"));
                return self.convert(&as_int, "i64", to);
            }
            (false, true) => {
                let wide = self.convert(name, from, "i64")?;
                format!("{result} = tt.int_to_ptr {wide} : i64 -> {to}")
            }
            (false, false) => match (width(from), width(to)) {
                (Some(1), Some(_)) => format!("{result} = arith.extui {name} : {from} to {to}"),
                (Some(a), Some(b)) if a < b => {
                    format!("{result} = arith.extsi {name} : {from} to {to}")
                }
                (Some(a), Some(b)) if a > b => {
                    format!("{result} = arith.trunci {name} : {from} to {to}")
                }
                _ => {
                    return Err(BridgeError::plain(format!(
                        "internal: cannot convert {from} to {to}"
                    )));
                }
            },
        };
        self.emit(line);
        Ok(result)
    }

    fn i64(&mut self, value: Value) -> Result<String, BridgeError> {
        self.use_as(value, "i64")
    }

    fn constant_i64(&mut self, value: i64) -> String {
        self.assign("ab_c", format!("arith.constant {value} : i64"))
    }

    fn binary_i64(&mut self, operation: &str, lhs: &str, rhs: &str) -> String {
        self.assign("ab_v", format!("{operation} {lhs}, {rhs} : i64"))
    }

    fn define(&mut self, op: Ptr<Operation>, repr: Repr) {
        let result = op.deref(self.ctx).get_result(0);
        self.values.insert(result, repr);
    }

    fn operand(&self, op: Ptr<Operation>, index: usize) -> Value {
        op.deref(self.ctx).get_operand(index)
    }

    /// The remote address of a remote element: the descriptor's base address plus the offset.
    fn remote_address(&mut self, value: Value) -> Result<String, BridgeError> {
        let Repr::RemotePointer { descriptor, offset } = self.repr(value)? else {
            return Err(BridgeError::plain("internal: expected a remote pointer"));
        };
        let pointer = self.assign(
            "ab_descriptor",
            format!("tt.int_to_ptr {descriptor} : i64 -> !tt.ptr<i64>"),
        );
        let base = self.assign("ab_base", format!("tt.load {pointer} : !tt.ptr<i64>"));
        Ok(self.binary_i64("arith.addi", &base, &offset))
    }

    /// One inline-PTX statement run by every thread of the program (`$0` is a dummy result).
    fn asm(&mut self, ptx: &str, operands: &[(&str, &str, char)]) -> String {
        // Inside a `doorbell_scope` loop the only leader statements are the command writes of
        // the thread's own iteration: every thread is its own "leader" there.
        let spread_ptx;
        let ptx = if self.spread_depth > 0 {
            spread_ptx = ptx.replace(LEADER_PREDICATE, EVERY_THREAD_PREDICATE);
            spread_ptx.as_str()
        } else {
            ptx
        };
        let result = self.fresh("ab_asm");
        let mut constraints = vec!["=r".to_string()];
        constraints.extend(operands.iter().map(|(_, _, c)| c.to_string()));
        let names: Vec<&str> = operands.iter().map(|(n, _, _)| *n).collect();
        let types: Vec<&str> = operands.iter().map(|(_, t, _)| *t).collect();
        self.emit(format!(
            "{result} = tt.elementwise_inline_asm \"{ptx}\" {{constraints = \"{}\", packed_element = 1 : i32, pure = false}} {} : {} -> i32",
            constraints.join(","),
            names.join(", "),
            types.join(", ")
        ));
        result
    }

    /// Statements that are each predicated on `%ab_leader` (thread 0 of the program).
    fn leader_block(statements: &str) -> String {
        format!(
            "{{ .reg .pred %ab_leader; .reg .u32 %ab_tid; mov.u32 %ab_tid, %tid.x; setp.eq.u32 %ab_leader, %ab_tid, 0; {statements} mov.u32 $0, 0; }}"
        )
    }

    /// Wraps `ptx` so that only thread 0 of the program executes it.
    fn leader(ptx: &str) -> String {
        format!(
            "{{ .reg .pred %ab_leader; .reg .u32 %ab_tid; mov.u32 %ab_tid, %tid.x; setp.eq.u32 %ab_leader, %ab_tid, 0; @%ab_leader {ptx} mov.u32 $0, 0; }}"
        )
    }

    // ----- ops -----------------------------------------------------------------------------

    fn operation(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let name = op_name(self.ctx, op);
        match name.as_str() {
            "ab.yield" | "ab.return" => {}
            "ab.if" => {
                // An `ab.if` the lowering created (a library-style predicated put): its body is
                // all new code, generated inside an `scf.if`.
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
            }
            "builtin.constant" => {
                let result = op.deref(self.ctx).get_result(0);
                let value = aboleth_ir::scalar::constant_value(self.ctx, result)
                    .ok_or_else(|| BridgeError::plain("internal: a non-integer constant"))?;
                let type_text = ab_type_text(self.ctx, result);
                let fresh = self.assign("ab_c", format!("arith.constant {value} : {type_text}"));
                self.define(
                    op,
                    Repr::Scalar {
                        name: fresh,
                        type_text,
                    },
                );
            }
            "ab.binop" => {
                let operator = Operation::get_op::<BinaryOp>(op, self.ctx)
                    .expect("ab.binop")
                    .operator(self.ctx);
                let result = op.deref(self.ctx).get_result(0);
                let type_text = ab_type_text(self.ctx, result);
                let lhs = self.use_as(self.operand(op, 0), &type_text)?;
                let rhs = self.use_as(self.operand(op, 1), &type_text)?;
                let fresh = self.fresh("ab_v");
                let arith = |name: &str| format!("{fresh} = {name} {lhs}, {rhs} : {type_text}");
                let line = match operator {
                    BinaryOperator::Add => arith("arith.addi"),
                    BinaryOperator::Sub => arith("arith.subi"),
                    BinaryOperator::Mul => arith("arith.muli"),
                    BinaryOperator::Div => arith("arith.divsi"),
                    BinaryOperator::Rem => arith("arith.remsi"),
                    BinaryOperator::Min => arith("arith.minsi"),
                    BinaryOperator::Max => arith("arith.maxsi"),
                    BinaryOperator::And => arith("arith.andi"),
                    BinaryOperator::Or => arith("arith.ori"),
                    comparison => {
                        let predicate = match comparison {
                            BinaryOperator::Eq => "eq",
                            BinaryOperator::Ne => "ne",
                            BinaryOperator::Lt => "slt",
                            BinaryOperator::Le => "sle",
                            BinaryOperator::Gt => "sgt",
                            _ => "sge",
                        };
                        let flag = self.assign(
                            "ab_cmp",
                            format!("arith.cmpi {predicate}, {lhs}, {rhs} : {type_text}"),
                        );
                        format!("{fresh} = arith.extui {flag} : i1 to {type_text}")
                    }
                };
                self.emit(line);
                self.define(
                    op,
                    Repr::Scalar {
                        name: fresh,
                        type_text,
                    },
                );
            }
            "ab.cast" => {
                let result = op.deref(self.ctx).get_result(0);
                let type_text = ab_type_text(self.ctx, result);
                let Repr::Scalar {
                    name: source,
                    type_text: from,
                } = self.repr(self.operand(op, 0))?
                else {
                    return Err(BridgeError::plain("internal: cast of a handle"));
                };
                // ab.cast is a signed conversion; from a TTIR i1 it is a zero extension.
                let converted = self.convert(&source, &from, &type_text)?;
                self.define(
                    op,
                    Repr::Scalar {
                        name: converted,
                        type_text,
                    },
                );
            }
            "ab.ptr_add" => {
                let base = self.use_as(self.operand(op, 0), "!tt.ptr<i8>")?;
                let offset = self.i64(self.operand(op, 1))?;
                let fresh = self.assign(
                    "ab_p",
                    format!("tt.addptr {base}, {offset} : !tt.ptr<i8>, i64"),
                );
                self.define(
                    op,
                    Repr::Scalar {
                        name: fresh,
                        type_text: "!tt.ptr<i8>".into(),
                    },
                );
            }
            "ab.load" => {
                let result = op.deref(self.ctx).get_result(0);
                let type_text = ab_type_text(self.ctx, result);
                let pointer = self.use_as(self.operand(op, 0), &format!("!tt.ptr<{type_text}>"))?;
                let fresh =
                    self.assign("ab_v", format!("tt.load {pointer} : !tt.ptr<{type_text}>"));
                self.define(
                    op,
                    Repr::Scalar {
                        name: fresh,
                        type_text,
                    },
                );
            }
            "ab.store" => {
                let value = self.operand(op, 1);
                let type_text = ab_type_text(self.ctx, value);
                let pointer = self.use_as(self.operand(op, 0), &format!("!tt.ptr<{type_text}>"))?;
                let stored = self.use_as(value, &type_text)?;
                self.emit(format!(
                    "tt.store {pointer}, {stored} : !tt.ptr<{type_text}>"
                ));
            }
            "ab.endpoint" => {
                let table = self.i64(self.operand(op, 0))?;
                let peer = self.i64(self.operand(op, 1))?;
                let size = self.constant_i64(aboleth_abi::EndpointHandle::SIZE_BYTES as i64);
                let offset = self.binary_i64("arith.muli", &peer, &size);
                let address = self.binary_i64("arith.addi", &table, &offset);
                if self.depth == 0 && self.wait_log.is_none() {
                    // Every handle carries this rank's wait-failure log and its own rank: the
                    // first top-level endpoint gives them to every later wait.
                    let log = self.load_field(
                        &address,
                        core::mem::offset_of!(aboleth_abi::EndpointHandle, wait_failure_log_address)
                            as u64,
                        64,
                    );
                    let rank = self.load_field(
                        &address,
                        core::mem::offset_of!(aboleth_abi::EndpointHandle, local_rank) as u64,
                        32,
                    );
                    self.wait_log = Some((log, rank));
                }
                if self.target == Transport::Mlx5 {
                    self.exit_unless_supported_mlx5_endpoint(op, &address);
                }
                self.define(
                    op,
                    Repr::Scalar {
                        name: address,
                        type_text: "i64".into(),
                    },
                );
            }
            "ab.remote" => {
                let table = self.i64(self.operand(op, 0))?;
                let peer = self.i64(self.operand(op, 1))?;
                let size =
                    self.constant_i64(aboleth_abi::RemoteRegionDescriptor::SIZE_BYTES as i64);
                let offset = self.binary_i64("arith.muli", &peer, &size);
                let address = self.binary_i64("arith.addi", &table, &offset);
                self.define(
                    op,
                    Repr::Scalar {
                        name: address,
                        type_text: "i64".into(),
                    },
                );
            }
            "ab.at" => {
                let remote = self.operand(op, 0);
                let Repr::Scalar {
                    name: descriptor, ..
                } = self.repr(remote)?
                else {
                    return Err(BridgeError::plain("internal: ab.at of a non-region"));
                };
                let element_bytes = op
                    .deref(self.ctx)
                    .get_result(0)
                    .get_type(self.ctx)
                    .deref(self.ctx)
                    .downcast_ref::<aboleth_ir::ab::types::RemotePointerType>()
                    .map_or(1, |t| i64::from(t.element_bytes));
                let index = self.i64(self.operand(op, 1))?;
                let scale = self.constant_i64(element_bytes);
                let offset = self.binary_i64("arith.muli", &index, &scale);
                self.define(op, Repr::RemotePointer { descriptor, offset });
            }
            "p2p.copy" => self.p2p_copy(op)?,
            "p2p.signal" => self.p2p_signal(op)?,
            "p2p.put_packets" => self.p2p_put_packets(op)?,
            "gpu.barrier" => {
                if attrs::get_string(self.ctx, op, "scope").as_deref() == Some("warp") {
                    // Every warp syncs itself; only the leader's warp has written commands.
                    let dummy = self.constant_i64(0);
                    self.asm("bar.warp.sync -1; mov.u32 $0, 0;", &[(&dummy, "i64", 'l')]);
                } else {
                    self.emit("gpu.barrier".into());
                }
            }
            "gpu.fence" => {
                let ptx = match attrs::get_string(self.ctx, op, "scope").as_deref() {
                    Some("sys") => "fence.sc.sys; mov.u32 $0, 0;",
                    Some("cta") => "fence.acq_rel.cta; mov.u32 $0, 0;",
                    _ => "fence.acq_rel.gpu; mov.u32 $0, 0;",
                };
                let dummy = self.constant_i64(0);
                self.asm(ptx, &[(&dummy, "i64", 'l')]);
            }
            "gpu.wait_flag" => self.wait_flag(op)?,
            "proxy.reserve" => self.proxy_reserve(op)?,
            "proxy.put" => self.proxy_command(op, false)?,
            "proxy.signal" => self.proxy_command(op, true)?,
            "proxy.publish" => self.proxy_publish(op)?,
            "proxy.doorbell" => self.proxy_doorbell(op)?,
            "proxy.wait_completion" => self.proxy_wait_completion(op)?,
            "mlx5.reserve" => self.mlx5_reserve(op)?,
            "mlx5.write" => self.mlx5_write(op)?,
            "mlx5.atomic" => self.mlx5_atomic(op)?,
            "mlx5.publish" => self.mlx5_publish(op)?,
            "mlx5.lock" => self.mlx5_lock(op)?,
            "mlx5.unlock" => self.mlx5_unlock(op)?,
            "mlx5.doorbell_record" => self.mlx5_doorbell_record(op)?,
            "mlx5.doorbell" => self.mlx5_doorbell(op)?,
            "mlx5.wait_completion" => self.mlx5_wait_completion(op)?,
            other if other.starts_with("mlx5.") => {
                return Err(BridgeError::not_built(format!(
                    "TTIR code generation has no translation of `{other}`: --target {} compiles it to the Aboleth IR (aboleth compile --emit aboleth) and runs it in the simulator, but cannot generate Triton code for it",
                    self.target.name()
                )));
            }
            other => {
                return Err(BridgeError::plain(format!(
                    "internal: no TTIR code generation for `{other}`"
                )));
            }
        }
        Ok(())
    }

    fn p2p_copy(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let destination = self.remote_address(self.operand(op, 1))?;
        let source = self.use_as(self.operand(op, 2), "i64")?;
        let bytes = self.i64(self.operand(op, 3))?;
        let predicate_value = self.operand(op, 4);
        let constant_true =
            aboleth_ir::scalar::constant_value(self.ctx, predicate_value) == Some(1);
        let zero = self.constant_i64(0);
        let mut open_ifs = 0;
        if !constant_true {
            let predicate = self.i64(predicate_value)?;
            let condition = self.assign(
                "ab_pred",
                format!("arith.cmpi ne, {predicate}, {zero} : i64"),
            );
            self.emit(format!("scf.if {condition} {{"));
            open_ifs += 1;
        }
        // Words when source, destination and size allow it (8x fewer accesses), bytes otherwise.
        let either = self.binary_i64("arith.ori", &source, &destination);
        let all = self.binary_i64("arith.ori", &either, &bytes);
        let seven = self.constant_i64(7);
        let low_bits = self.binary_i64("arith.andi", &all, &seven);
        let aligned = self.assign(
            "ab_aligned",
            format!("arith.cmpi eq, {low_bits}, {zero} : i64"),
        );
        self.emit(format!("scf.if {aligned} {{"));
        let three = self.constant_i64(3);
        let words = self.binary_i64("arith.shrsi", &bytes, &three);
        self.copy_loop("i64", &source, &destination, &words);
        self.emit("} else {".into());
        self.copy_loop("i8", &source, &destination, &bytes);
        self.emit("}".into());
        for _ in 0..open_ifs {
            self.emit("}".into());
        }
        Ok(())
    }

    /// A loop copying `count` elements of `element` from `source` to `destination` (i64
    /// addresses), `P2P_COPY_CHUNK_ELEMENTS` per iteration, masked at the end.
    fn copy_loop(&mut self, element: &str, source: &str, destination: &str, count: &str) {
        let chunk = P2P_COPY_CHUNK_ELEMENTS;
        let zero = self.constant_i64(0);
        let step = self.constant_i64(chunk);
        let pointer_type = format!("!tt.ptr<{element}>");
        let source_pointer = self.assign(
            "ab_src",
            format!("tt.int_to_ptr {source} : i64 -> {pointer_type}"),
        );
        let destination_pointer = self.assign(
            "ab_dst",
            format!("tt.int_to_ptr {destination} : i64 -> {pointer_type}"),
        );
        let start = self.fresh("ab_chunk");
        let tensor = format!("tensor<{chunk}xi64>");
        let pointers = format!("tensor<{chunk}x{pointer_type}>");
        self.emit(format!(
            "scf.for {start} = {zero} to {count} step {step} : i64 {{"
        ));
        let lanes = self.assign(
            "ab_lanes",
            format!("tt.make_range {{end = {chunk} : i32, start = 0 : i32}} : tensor<{chunk}xi32>"),
        );
        let wide_lanes = self.assign(
            "ab_lanes",
            format!("arith.extsi {lanes} : tensor<{chunk}xi32> to {tensor}"),
        );
        let base = self.assign("ab_splat", format!("tt.splat {start} : i64 -> {tensor}"));
        let offsets = self.assign(
            "ab_offsets",
            format!("arith.addi {base}, {wide_lanes} : {tensor}"),
        );
        let limit = self.assign("ab_splat", format!("tt.splat {count} : i64 -> {tensor}"));
        let mask = self.assign(
            "ab_mask",
            format!("arith.cmpi slt, {offsets}, {limit} : {tensor}"),
        );
        let source_splat = self.assign(
            "ab_splat",
            format!("tt.splat {source_pointer} : {pointer_type} -> {pointers}"),
        );
        let source_pointers = self.assign(
            "ab_src",
            format!("tt.addptr {source_splat}, {offsets} : {pointers}, {tensor}"),
        );
        let destination_splat = self.assign(
            "ab_splat",
            format!("tt.splat {destination_pointer} : {pointer_type} -> {pointers}"),
        );
        let destination_pointers = self.assign(
            "ab_dst",
            format!("tt.addptr {destination_splat}, {offsets} : {pointers}, {tensor}"),
        );
        let data = self.assign(
            "ab_data",
            format!("tt.load {source_pointers}, {mask} : {pointers}"),
        );
        self.emit(format!(
            "tt.store {destination_pointers}, {data}, {mask} : {pointers}"
        ));
        self.emit("}".into());
    }

    fn p2p_signal(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let address = self.remote_address(self.operand(op, 1))?;
        let value = self.i64(self.operand(op, 2))?;
        let release = attrs::get_string(self.ctx, op, "order").as_deref() == Some("release");
        let operation =
            attrs::get_typed::<SignalOperation>(self.ctx, op, "op").unwrap_or(SignalOperation::Set);
        let store = match (operation, release) {
            (SignalOperation::Set, true) => "st.release.sys.global.u64 [$1], $2;",
            (SignalOperation::Set, false) => "st.volatile.global.u64 [$1], $2;",
            (SignalOperation::Add, true) => "red.release.sys.global.add.u64 [$1], $2;",
            (SignalOperation::Add, false) => "red.relaxed.sys.global.add.u64 [$1], $2;",
        };
        self.asm(
            &Self::leader(store),
            &[(&address, "i64", 'l'), (&value, "i64", 'l')],
        );
        Ok(())
    }

    fn wait_flag(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let flag = self.use_as(self.operand(op, 0), "!tt.ptr<i64>")?;
        let expected = self.i64(self.operand(op, 1))?;
        let acquire = attrs::get_string(self.ctx, op, "order").as_deref() == Some("acquire");
        let load = if acquire {
            "ld.acquire.sys.global.u64 $0, [$1];"
        } else {
            "ld.volatile.global.u64 $0, [$1];"
        };
        let bound = self.wait_bound(op);
        let flag_address = self.use_as(self.operand(op, 0), "i64")?;
        let unknown_peer = self.assign("ab_peer", "arith.constant -1 : i32".to_string());
        let packets = attrs::get_bool(self.ctx, op, "packets");
        let receives = if op.deref(self.ctx).get_num_operands() > 3 && !packets {
            Some(self.receive_side(self.operand(op, 2), self.operand(op, 3))?)
        } else {
            None
        };
        let packet_wait = if packets {
            Some(self.packet_wait(
                op,
                self.operand(op, 2),
                self.operand(op, 3),
                &flag_address,
                bound.as_ref(),
            )?)
        } else {
            None
        };
        // Every thread polls the same word: no election, no broadcast needed.
        self.emit("scf.while : () -> () {".into());
        if let Some(receives) = &receives {
            self.drain_one_receive(receives);
        }
        if let Some(packet_wait) = &packet_wait {
            self.unpack_packets(packet_wait);
        }
        let seen = self.assign("ab_seen", format!("tt.elementwise_inline_asm \"{load}\" {{constraints = \"=l,l\", packed_element = 1 : i32, pure = false}} {flag} : !tt.ptr<i64> -> i64"));
        let waiting = self.assign(
            "ab_waiting",
            format!("arith.cmpi slt, {seen}, {expected} : i64"),
        );
        if let Some(bound) = &bound {
            self.give_up_if_overdue(
                bound,
                &WaitReport {
                    waiting: waiting.clone(),
                    address: flag_address,
                    expected: expected.clone(),
                    seen,
                    peer: unknown_peer,
                    kind: aboleth_abi::wait_failure::WAIT_KIND_FLAG_AT_LEAST,
                },
            );
        }
        self.emit(format!("scf.condition({waiting})"));
        self.emit("} do {".into());
        self.emit("scf.yield".into());
        self.emit("}".into());
        Ok(())
    }

    /// What a receiving wait needs, read once before its loop: the rank's receive context
    /// (named by every endpoint handle; the first one's is used), its CQ, tables and doorbell
    /// record, and where the flags of `flag_table`'s region start on this rank.
    fn receive_side(
        &mut self,
        flag_table: Value,
        endpoint_table: Value,
    ) -> Result<Vec<(String, &'static str, char)>, BridgeError> {
        use aboleth_abi::mlx5::receive::Mlx5ReceiveContext as Context;
        let endpoints = self.i64(endpoint_table)?;
        let context = self.load_field(
            &endpoints,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, receive_context_address) as u64,
            64,
        );
        let field = |this: &mut Self, offset: usize, width: u32| {
            this.load_field(&context, offset as u64, width)
        };
        let cq = field(self, core::mem::offset_of!(Context, cq_buffer_address), 64);
        // The 32-bit fields go to the PTX as i32 (`r` registers).
        let narrow = |this: &mut Self, value: String| {
            this.assign("ab_narrow", format!("arith.trunci {value} : i64 to i32"))
        };
        let cqe_count = field(self, core::mem::offset_of!(Context, cqe_count), 32);
        let cqe_count = narrow(self, cqe_count);
        let cq_doorbell = field(
            self,
            core::mem::offset_of!(Context, cq_doorbell_record_address),
            64,
        );
        let queues = field(self, core::mem::offset_of!(Context, queues_address), 64);
        let qpn_mask = field(self, core::mem::offset_of!(Context, qpn_mask), 32);
        let qpn_mask = narrow(self, qpn_mask);
        let peer_of_qpn = field(
            self,
            core::mem::offset_of!(Context, peer_of_qpn_address),
            64,
        );
        let local_rank = field(self, core::mem::offset_of!(Context, local_rank), 32);
        let table = self.i64(flag_table)?;
        let size = self.constant_i64(aboleth_abi::RemoteRegionDescriptor::SIZE_BYTES as i64);
        let offset = self.binary_i64("arith.muli", &local_rank, &size);
        let descriptor = self.binary_i64("arith.addi", &table, &offset);
        let flags_base = self.load_field(
            &descriptor,
            core::mem::offset_of!(aboleth_abi::RemoteRegionDescriptor, base_address) as u64,
            64,
        );
        let flags_bytes = self.load_field(
            &descriptor,
            core::mem::offset_of!(aboleth_abi::RemoteRegionDescriptor, length_bytes) as u64,
            64,
        );
        let wide = |name: String| (name, "i64", 'l');
        Ok(vec![
            wide(context),
            wide(cq),
            (cqe_count, "i32", 'r'),
            wide(cq_doorbell),
            wide(queues),
            (qpn_mask, "i32", 'r'),
            wide(peer_of_qpn),
            wide(flags_base),
            wide(flags_bytes),
        ])
    }

    /// One step of draining the receive CQ, by thread 0 under the context's poll lock: if the
    /// CQE at the consumer index is this lap's RDMA_WRITE_IMM completion, apply its immediate
    /// (`aboleth_abi::mlx5::receive::ImmediateSignal`: add or set a small value on flag `index`
    /// of this rank's flag region, with release), post the QP's receive again (its counter and
    /// its doorbell-record word), and advance the consumer index and the CQ doorbell record.
    /// Any other CQE opcode traps. The simulator's `drain_receive_cq` does the same.
    fn drain_one_receive(&mut self, receives: &[(String, &'static str, char)]) {
        use aboleth_abi::mlx5::cqe::{CQE_OPCODE_INVALID, CQE_OPCODE_RESP_WR_IMM, Cqe64};
        use aboleth_abi::mlx5::receive::{
            IMMEDIATE_ADD_BIT, IMMEDIATE_INDEX_BITS, IMMEDIATE_VALUE_BITS, Mlx5ReceiveContext,
            Mlx5ReceiveQueue,
        };
        use core::mem::offset_of;
        // The owner word is the CQE's last 4 bytes read as one little-endian u32: op_own is its
        // top byte (opcode bits 31..28, format 27..26, owner 24).
        const _: () = assert!(offset_of!(Cqe64, op_own) == offset_of!(Cqe64, wqe_counter) + 3);
        const TEMPLATE: &str = "{ .reg .pred %ab_leader, %ab_got, %ab_valid, %ab_add, %ab_set, %ab_bad, %ab_odd_lap, %ab_not_add; .reg .u32 %ab_fmt, %ab_tid, %ab_lock, %ab_w, %ab_op, %ab_own, %ab_lap, %ab_imm, %ab_qpn, %ab_peer, %ab_index, %ab_value, %ab_posted32, %ab_ci32; .reg .u64 %ab_ci, %ab_slot, %ab_cqe, %ab_flag, %ab_value64, %ab_queue, %ab_posted, %ab_dbr, %ab_count64, %ab_peer64, %ab_index64, %ab_qpn64; mov.u32 %ab_tid, %tid.x; setp.eq.u32 %ab_leader, %ab_tid, 0; mov.u32 %ab_lock, 1; @%ab_leader atom.acquire.gpu.global.cas.b32 %ab_lock, [$1+@POLL_LOCK@], 0, 1; setp.eq.u32 %ab_got, %ab_lock, 0; and.pred %ab_got, %ab_got, %ab_leader; mov.u64 %ab_ci, 0; @%ab_got ld.volatile.global.u64 %ab_ci, [$1+@CONSUMER_INDEX@]; cvt.u64.u32 %ab_count64, $3; sub.u64 %ab_slot, %ab_count64, 1; and.b64 %ab_slot, %ab_slot, %ab_ci; mad.lo.u64 %ab_cqe, %ab_slot, @CQE_BYTES@, $2; mov.u32 %ab_w, 0xf0000000; @%ab_got ld.acquire.sys.global.u32 %ab_w, [%ab_cqe+@CQE_OWNER_WORD@]; shr.u32 %ab_op, %ab_w, 28; shr.u32 %ab_own, %ab_w, 24; and.b32 %ab_own, %ab_own, 1; cvt.u32.u64 %ab_ci32, %ab_ci; and.b32 %ab_lap, %ab_ci32, $3; setp.ne.u32 %ab_odd_lap, %ab_lap, 0; selp.u32 %ab_lap, 1, 0, %ab_odd_lap; setp.eq.u32 %ab_valid, %ab_own, %ab_lap; setp.ne.u32 %ab_bad, %ab_op, @OPCODE_INVALID@; and.pred %ab_valid, %ab_valid, %ab_bad; and.pred %ab_valid, %ab_valid, %ab_got; setp.ne.u32 %ab_bad, %ab_op, @OPCODE_WRITE_IMMEDIATE@; and.pred %ab_bad, %ab_bad, %ab_valid; @%ab_bad trap; shr.u32 %ab_fmt, %ab_w, 26; and.b32 %ab_fmt, %ab_fmt, 3; setp.ne.u32 %ab_bad, %ab_fmt, 0; and.pred %ab_bad, %ab_bad, %ab_valid; @%ab_bad trap; @%ab_valid ld.global.u32 %ab_imm, [%ab_cqe+@CQE_IMMEDIATE@]; prmt.b32 %ab_imm, %ab_imm, 0, 0x0123; @%ab_valid ld.global.u32 %ab_qpn, [%ab_cqe+@CQE_QPN@]; prmt.b32 %ab_qpn, %ab_qpn, 0, 0x0123; and.b32 %ab_qpn, %ab_qpn, $6; cvt.u64.u32 %ab_qpn64, %ab_qpn; mad.lo.u64 %ab_qpn64, %ab_qpn64, 4, $7; mov.u32 %ab_peer, 0; @%ab_valid ld.global.u32 %ab_peer, [%ab_qpn64]; and.b32 %ab_index, %ab_imm, @INDEX_MASK@; shr.u32 %ab_value, %ab_imm, @INDEX_BITS@; and.b32 %ab_value, %ab_value, @VALUE_MASK@; cvt.u64.u32 %ab_value64, %ab_value; cvt.u64.u32 %ab_index64, %ab_index; mad.lo.u64 %ab_flag, %ab_index64, 8, 8; setp.gt.u64 %ab_bad, %ab_flag, $9; and.pred %ab_bad, %ab_bad, %ab_valid; @%ab_bad trap; mad.lo.u64 %ab_flag, %ab_index64, 8, $8; setp.ge.u32 %ab_add, %ab_imm, @ADD_BIT_VALUE@; not.pred %ab_not_add, %ab_add; and.pred %ab_set, %ab_valid, %ab_not_add; and.pred %ab_add, %ab_add, %ab_valid; @%ab_add red.release.sys.global.add.u64 [%ab_flag], %ab_value64; @%ab_set st.release.sys.global.u64 [%ab_flag], %ab_value64; cvt.u64.u32 %ab_peer64, %ab_peer; mad.lo.u64 %ab_queue, %ab_peer64, @QUEUE_BYTES@, $5; mov.u64 %ab_posted, 0; @%ab_valid ld.global.u64 %ab_posted, [%ab_queue+@QUEUE_POSTED@]; add.u64 %ab_posted, %ab_posted, 1; @%ab_valid st.global.u64 [%ab_queue+@QUEUE_POSTED@], %ab_posted; mov.u64 %ab_dbr, 0; @%ab_valid ld.global.u64 %ab_dbr, [%ab_queue+@QUEUE_DOORBELL_RECORD@]; cvt.u32.u64 %ab_posted32, %ab_posted; and.b32 %ab_posted32, %ab_posted32, 65535; prmt.b32 %ab_posted32, %ab_posted32, 0, 0x0123; @%ab_valid st.relaxed.sys.global.b32 [%ab_dbr], %ab_posted32; add.u64 %ab_ci, %ab_ci, 1; @%ab_valid st.global.u64 [$1+@CONSUMER_INDEX@], %ab_ci; cvt.u32.u64 %ab_ci32, %ab_ci; and.b32 %ab_ci32, %ab_ci32, 16777215; prmt.b32 %ab_ci32, %ab_ci32, 0, 0x0123; @%ab_valid st.relaxed.sys.global.b32 [$4], %ab_ci32; @%ab_got st.release.gpu.global.b32 [$1+@POLL_LOCK@], 0; mov.u32 $0, 0; }";
        let ptx = fill_ptx(
            TEMPLATE,
            &[
                (
                    "POLL_LOCK",
                    offset_of!(Mlx5ReceiveContext, poll_lock) as u64,
                ),
                (
                    "CONSUMER_INDEX",
                    offset_of!(Mlx5ReceiveContext, consumer_index) as u64,
                ),
                ("CQE_BYTES", Cqe64::SIZE_BYTES as u64),
                ("CQE_OWNER_WORD", offset_of!(Cqe64, wqe_counter) as u64),
                ("OPCODE_INVALID", u64::from(CQE_OPCODE_INVALID)),
                ("OPCODE_WRITE_IMMEDIATE", u64::from(CQE_OPCODE_RESP_WR_IMM)),
                ("CQE_IMMEDIATE", offset_of!(Cqe64, imm_inval_pkey) as u64),
                ("CQE_QPN", offset_of!(Cqe64, sop_drop_qpn) as u64),
                ("INDEX_MASK", (1 << IMMEDIATE_INDEX_BITS) - 1),
                ("INDEX_BITS", u64::from(IMMEDIATE_INDEX_BITS)),
                ("VALUE_MASK", (1 << IMMEDIATE_VALUE_BITS) - 1),
                ("ADD_BIT_VALUE", 1 << IMMEDIATE_ADD_BIT),
                ("QUEUE_BYTES", Mlx5ReceiveQueue::SIZE_BYTES as u64),
                ("QUEUE_POSTED", offset_of!(Mlx5ReceiveQueue, posted) as u64),
                (
                    "QUEUE_DOORBELL_RECORD",
                    offset_of!(Mlx5ReceiveQueue, doorbell_record_address) as u64,
                ),
            ],
        );
        let typed: Vec<(&str, &str, char)> = receives
            .iter()
            .map(|(name, type_text, constraint)| (name.as_str(), *type_text, *constraint))
            .collect();
        self.asm(&ptx, &typed);
    }

    /// Before a wait's loop: its site (for the plan summary's source line), the bound read from
    /// the wait-failure log and the start time. `None` when no endpoint handle gave the log yet
    /// (the wait is then unbounded).
    fn wait_bound(&mut self, op: Ptr<Operation>) -> Option<WaitBound> {
        let (log, rank) = self.wait_log.clone()?;
        let site = self.wait_sites.len();
        let diagnostic = aboleth_ir::Diagnostic::at_op(self.ctx, op, "");
        self.wait_sites.push(diagnostic.line);
        let timeout = self.load_field(
            &log,
            aboleth_abi::WaitFailureLogHeader::TIMEOUT_NANOSECONDS_OFFSET_BYTES,
            64,
        );
        let dummy = self.constant_i64(0);
        let start = self.globaltimer(&dummy);
        Some(WaitBound {
            log,
            rank,
            site,
            timeout,
            start,
        })
    }

    /// Inside a wait's loop: past the bound (ABOLETH_WAIT_TIMEOUT_MS, 0: forever), or once the
    /// log's `abort_requested` is set, a thread still waiting counts itself, records what it
    /// waited for in the wait-failure log (while records fit), sets `abort_requested` so every
    /// other wait of the rank gives up at once, and exits; the host raises it
    /// (`World.check_waits()`). Every waiting thread records, so none can vanish unreported; a
    /// thread that exits counts as arrived at later barriers (PTX `exit`).
    fn give_up_if_overdue(&mut self, bound: &WaitBound, report: &WaitReport) {
        let now = self.globaltimer(&report.seen);
        let elapsed = self.binary_i64("arith.subi", &now, &bound.start);
        let zero = self.constant_i64(0);
        let bounded = self.assign(
            "ab_bounded",
            format!("arith.cmpi ne, {}, {zero} : i64", bound.timeout),
        );
        let over = self.assign(
            "ab_over",
            format!("arith.cmpi sgt, {elapsed}, {} : i64", bound.timeout),
        );
        let late = self.assign("ab_late", format!("arith.andi {over}, {bounded} : i1"));
        // `abort_requested` is host memory: read only once the wait is long.
        let patience = self.constant_i64(ABORT_POLL_AFTER_NANOSECONDS);
        let long = self.assign(
            "ab_long",
            format!("arith.cmpi sgt, {elapsed}, {patience} : i64"),
        );
        let abort_word = self.offset_address(
            &bound.log,
            aboleth_abi::WaitFailureLogHeader::ABORT_REQUESTED_OFFSET_BYTES,
        );
        let abort = self.fresh("ab_abort");
        self.emit(format!("{abort} = scf.if {long} -> (i64) {{"));
        let read = self.assign("ab_abort_read", format!("tt.elementwise_inline_asm \"ld.relaxed.sys.global.u64 $0, [$1];\" {{constraints = \"=l,l\", packed_element = 1 : i32, pure = false}} {abort_word} : i64 -> i64"));
        self.emit(format!("scf.yield {read} : i64"));
        self.emit("} else {".into());
        self.emit(format!("scf.yield {zero} : i64"));
        self.emit("}".into());
        let aborted = self.assign(
            "ab_aborted",
            format!("arith.cmpi ne, {abort}, {zero} : i64"),
        );
        let gives_up = self.assign("ab_gives_up", format!("arith.ori {late}, {aborted} : i1"));
        let expired = self.assign(
            "ab_expired",
            format!("arith.andi {gives_up}, {} : i1", report.waiting),
        );
        self.record_failure_if(bound, &expired, &elapsed, report);
    }

    /// In every thread for which `condition` (i1) holds: counts a failure, records `report` in
    /// the wait-failure log (while records fit), sets `abort_requested` and exits.
    fn record_failure_if(
        &mut self,
        bound: &WaitBound,
        condition: &str,
        elapsed: &str,
        report: &WaitReport,
    ) {
        self.emit(format!("scf.if {condition} {{"));
        let site_value = self.constant_i64(bound.site as i64);
        let record = {
            use aboleth_abi::{WaitFailureLogHeader as Header, WaitFailureRecord as Record};
            use core::mem::offset_of;
            const TEMPLATE: &str = "{ .reg .pred %ab_fits; .reg .u32 %ab_tid, %ab_cap32, %ab_cta; .reg .u64 %ab_slot, %ab_cap, %ab_rec, %ab_seq; mov.u32 %ab_tid, %tid.x; mov.u32 %ab_cta, %ctaid.x; atom.relaxed.sys.global.add.u64 %ab_slot, [$1+@FAILURE_COUNTER@], 1; ld.global.u32 %ab_cap32, [$1+@CAPACITY@]; cvt.u64.u32 %ab_cap, %ab_cap32; setp.lt.u64 %ab_fits, %ab_slot, %ab_cap; mad.lo.u64 %ab_rec, %ab_slot, @RECORD_BYTES@, $1; add.u64 %ab_rec, %ab_rec, @HEADER_BYTES@; @%ab_fits st.global.u64 [%ab_rec+@FLAG_ADDRESS@], $2; @%ab_fits st.global.u64 [%ab_rec+@EXPECTED@], $3; @%ab_fits st.global.u64 [%ab_rec+@OBSERVED@], $4; @%ab_fits st.global.u64 [%ab_rec+@WAITED@], $5; @%ab_fits st.global.u32 [%ab_rec+@RANK@], $6; @%ab_fits st.global.u32 [%ab_rec+@PEER@], $8; @%ab_fits st.global.u32 [%ab_rec+@SITE@], $7; @%ab_fits st.global.u32 [%ab_rec+@KIND@], $9; @%ab_fits st.global.u32 [%ab_rec+@PROGRAM@], %ab_cta; @%ab_fits st.global.u32 [%ab_rec+@THREAD@], %ab_tid; add.u64 %ab_seq, %ab_slot, 1; @%ab_fits st.release.sys.global.u64 [%ab_rec+@SEQUENCE@], %ab_seq; st.relaxed.sys.global.u64 [$1+@ABORT@], 1; exit; mov.u32 $0, 0; }";
            fill_ptx(
                TEMPLATE,
                &[
                    (
                        "FAILURE_COUNTER",
                        offset_of!(Header, failure_counter) as u64,
                    ),
                    ("CAPACITY", offset_of!(Header, capacity_records) as u64),
                    ("ABORT", offset_of!(Header, abort_requested) as u64),
                    ("HEADER_BYTES", Header::SIZE_BYTES as u64),
                    ("RECORD_BYTES", Record::SIZE_BYTES as u64),
                    ("SEQUENCE", offset_of!(Record, sequence) as u64),
                    ("FLAG_ADDRESS", offset_of!(Record, flag_address) as u64),
                    ("EXPECTED", offset_of!(Record, expected_value) as u64),
                    ("OBSERVED", offset_of!(Record, observed_value) as u64),
                    ("WAITED", offset_of!(Record, waited_nanoseconds) as u64),
                    ("RANK", offset_of!(Record, rank) as u64),
                    ("PEER", offset_of!(Record, peer_rank) as u64),
                    ("SITE", offset_of!(Record, site_id) as u64),
                    ("KIND", offset_of!(Record, comparison) as u64),
                    ("PROGRAM", offset_of!(Record, program_id) as u64),
                    ("THREAD", offset_of!(Record, thread_id) as u64),
                ],
            )
        };
        let rank32 = self.assign(
            "ab_rank",
            format!("arith.trunci {} : i64 to i32", bound.rank),
        );
        let site32 = self.assign("ab_site", format!("arith.trunci {site_value} : i64 to i32"));
        let kind32 = self.assign("ab_kind", format!("arith.constant {} : i32", report.kind));
        self.asm(
            &record,
            &[
                (&bound.log, "i64", 'l'),
                (&report.address, "i64", 'l'),
                (&report.expected, "i64", 'l'),
                (&report.seen, "i64", 'l'),
                (elapsed, "i64", 'l'),
                (&rank32, "i32", 'r'),
                (&site32, "i32", 'r'),
                (&report.peer, "i32", 'r'),
                (&kind32, "i32", 'r'),
            ],
        );
        self.emit("}".into());
    }

    /// mlx5: the generated code polls a collapsed CQ and rings the doorbell itself. A handle
    /// that says otherwise (`cq_collapsed` 0, `ENDPOINT_FLAG_HOST_RINGS_DOORBELL`) makes every
    /// thread record `WAIT_KIND_UNSUPPORTED_ENDPOINT` and exit before posting anything, instead
    /// of waiting on CQEs that land elsewhere or ringing a doorbell the host owns.
    fn exit_unless_supported_mlx5_endpoint(&mut self, op: Ptr<Operation>, handle: &str) {
        use aboleth_abi::EndpointHandle;
        use core::mem::offset_of;
        let log = self.load_field(
            handle,
            offset_of!(EndpointHandle, wait_failure_log_address) as u64,
            64,
        );
        let rank = self.load_field(handle, offset_of!(EndpointHandle, local_rank) as u64, 32);
        let peer = self.load_field(handle, offset_of!(EndpointHandle, peer_rank) as u64, 32);
        let peer = self.assign("ab_peer", format!("arith.trunci {peer} : i64 to i32"));
        let flags = self.load_field(handle, offset_of!(EndpointHandle, flags) as u64, 32);
        let collapsed =
            self.load_field(handle, offset_of!(EndpointHandle, cq_collapsed) as u64, 32);
        let host_bit = self.constant_i64(i64::from(
            aboleth_abi::endpoint::ENDPOINT_FLAG_HOST_RINGS_DOORBELL,
        ));
        let host_rings = self.binary_i64("arith.andi", &flags, &host_bit);
        let zero = self.constant_i64(0);
        let one = self.constant_i64(1);
        let host = self.assign(
            "ab_unsupported",
            format!("arith.cmpi ne, {host_rings}, {zero} : i64"),
        );
        let separate_cq = self.assign(
            "ab_unsupported",
            format!("arith.cmpi ne, {collapsed}, {one} : i64"),
        );
        let either = self.assign(
            "ab_unsupported",
            format!("arith.ori {host}, {separate_cq} : i1"),
        );
        // Only mlx5 handles (a kernel's endpoint to its own rank is p2p).
        let transport = self.load_field(handle, offset_of!(EndpointHandle, transport) as u64, 32);
        let mlx5 = self.constant_i64(aboleth_abi::Transport::Mlx5 as i64);
        let is_mlx5 = self.assign(
            "ab_unsupported",
            format!("arith.cmpi eq, {transport}, {mlx5} : i64"),
        );
        let unsupported = self.assign(
            "ab_unsupported",
            format!("arith.andi {either}, {is_mlx5} : i1"),
        );
        let bound = self.failure_site(op, log, rank);
        let report = WaitReport {
            waiting: unsupported.clone(),
            address: handle.to_owned(),
            expected: collapsed,
            seen: flags,
            peer,
            kind: aboleth_abi::wait_failure::WAIT_KIND_UNSUPPORTED_ENDPOINT,
        };
        self.record_failure_if(&bound, &unsupported, &zero, &report);
    }

    /// `%globaltimer` (nanoseconds), read after `after` (a data dependency keeps it in place).
    fn globaltimer(&mut self, after: &str) -> String {
        self.assign("ab_now", format!("tt.elementwise_inline_asm \"mov.u64 $0, %globaltimer;\" {{constraints = \"=l,l\", packed_element = 1 : i32, pure = false}} {after} : i64 -> i64"))
    }

    // ----- proxy -------------------------------------------------------------------------

    /// A little-endian field of `width` bits at `address + offset`, as i64 (every thread
    /// reads it; the values are uniform).
    fn load_field(&mut self, address: &str, offset: u64, width: u32) -> String {
        let offset_value = self.constant_i64(offset as i64);
        let field_address = self.binary_i64("arith.addi", address, &offset_value);
        let pointer = self.assign(
            "ab_field",
            format!("tt.int_to_ptr {field_address} : i64 -> !tt.ptr<i{width}>"),
        );
        let value = self.assign("ab_field", format!("tt.load {pointer} : !tt.ptr<i{width}>"));
        if width == 64 {
            value
        } else {
            // Unsigned fields: zero-extend.

            self.assign("ab_field", format!("arith.extui {value} : i{width} to i64"))
        }
    }

    /// `base + offset_bytes` as i64.
    fn offset_address(&mut self, base: &str, offset_bytes: u64) -> String {
        let offset = self.constant_i64(offset_bytes as i64);
        self.binary_i64("arith.addi", base, &offset)
    }

    fn ring_of(&mut self, endpoint: Value) -> Result<(String, String), BridgeError> {
        let handle = self.i64(endpoint)?;
        let ring = self.load_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, proxy_ring_address) as u64,
            64,
        );
        let capacity = self.load_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, proxy_ring_capacity_entries) as u64,
            32,
        );
        Ok((ring, capacity))
    }

    /// A leader-only load of `[address]` with `load` (`ld.acquire.sys...`); the other threads
    /// get `otherwise`, chosen so that their wait condition is already met.
    fn leader_load(&mut self, load: &str, address: &str, otherwise: &str) -> String {
        self.assign("ab_seen", format!("tt.elementwise_inline_asm \"{{ .reg .pred %ab_leader; .reg .u32 %ab_tid; mov.u32 %ab_tid, %tid.x; setp.eq.u32 %ab_leader, %ab_tid, 0; @%ab_leader {load} $0, [$1]; @!%ab_leader mov.u64 $0, $2; }}\" {{constraints = \"=l,l,l\", packed_element = 1 : i32, pure = false}} {address}, {otherwise} : i64, i64 -> i64"))
    }

    /// `scf.while` until `condition(seen)` is false, where `seen` is a leader-only load.
    fn leader_wait(
        &mut self,
        load: &str,
        address: &str,
        otherwise: &str,
        keep_waiting: impl Fn(&mut Self, &str) -> String,
        overdue: Option<Overdue>,
    ) {
        self.leader_wait_after(|_| {}, load, address, otherwise, keep_waiting, overdue);
    }

    /// What a queue wait of `op` on `endpoint` reports if it gives up: the word at `address`
    /// had to reach `expected` (see the `WAIT_KIND_*` codes). `None` when the wait is unbounded
    /// (no wait-failure log known yet).
    fn queue_overdue(
        &mut self,
        op: Ptr<Operation>,
        endpoint: Value,
        address: &str,
        expected: &str,
        kind: u32,
    ) -> Result<Option<Overdue>, BridgeError> {
        let Some(bound) = self.wait_bound(op) else {
            return Ok(None);
        };
        let handle = self.i64(endpoint)?;
        let peer = self.load_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, peer_rank) as u64,
            32,
        );
        let peer = self.assign("ab_peer", format!("arith.trunci {peer} : i64 to i32"));
        Ok(Some(Overdue {
            bound,
            address: address.to_string(),
            expected: expected.to_string(),
            peer,
            kind,
        }))
    }

    /// [`Self::leader_wait`], running `prelude` at the top of every iteration, before the load.
    fn leader_wait_after(
        &mut self,
        prelude: impl Fn(&mut Self),
        load: &str,
        address: &str,
        otherwise: &str,
        keep_waiting: impl Fn(&mut Self, &str) -> String,
        overdue: Option<Overdue>,
    ) {
        self.emit("scf.while : () -> () {".into());
        prelude(self);
        let seen = self.leader_load(load, address, otherwise);
        let waiting = keep_waiting(self, &seen);
        if let Some(overdue) = overdue {
            // Only the leader waits here (the others' `otherwise` already satisfies them).
            self.give_up_if_overdue(
                &overdue.bound,
                &WaitReport {
                    waiting: waiting.clone(),
                    address: overdue.address,
                    expected: overdue.expected,
                    seen,
                    peer: overdue.peer,
                    kind: overdue.kind,
                },
            );
        }
        self.emit(format!("scf.condition({waiting})"));
        self.emit("} do {".into());
        self.emit("scf.yield".into());
        self.emit("}".into());
    }

    fn proxy_reserve(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (ring, capacity) = self.ring_of(self.operand(op, 0))?;
        let counter = self.offset_address(
            &ring,
            aboleth_abi::ProxyRingHeader::PRODUCER_RESERVATION_COUNTER_OFFSET_BYTES,
        );
        let consumer = self.offset_address(
            &ring,
            aboleth_abi::ProxyRingHeader::CONSUMER_HEAD_OFFSET_BYTES,
        );
        // Shared rings are host memory that several programs' leaders update: system scope.
        self.reserve_slots(
            op,
            &counter,
            &consumer,
            &capacity,
            "sys",
            "ld.acquire.sys.global.u64",
            None,
        )
    }

    /// Thread 0 takes `slots` (operand 1) on a queue whose reservation counter is at `counter`
    /// (`atom.add` at `scope` when shared, a plain read-modify-write for one owner), then waits
    /// until `capacity` covers them past the consumer position at `consumer` (read with
    /// `consumer_load`). Posting follows the program's other threads' source stores: a barrier
    /// comes first, so thread 0's later release store covers them too.
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
        consumer_load: &str,
        reclaim_from_cq: Option<&str>,
    ) -> Result<(), BridgeError> {
        self.emit("gpu.barrier".into());
        let count = self.i64(self.operand(op, 1))?;
        let base = self.fresh("ab_base");
        let reserve = if attrs::get_bool(self.ctx, op, "atomic") {
            format!("@%ab_leader atom.relaxed.{scope}.global.add.u64 $0, [$1], $2;")
        } else {
            "@%ab_leader ld.volatile.global.u64 $0, [$1]; @%ab_leader add.u64 %ab_next, $0, $2; @%ab_leader st.volatile.global.u64 [$1], %ab_next;".to_string()
        };
        self.emit(format!(
            "{base} = tt.elementwise_inline_asm \"{{ .reg .pred %ab_leader; .reg .u32 %ab_tid; .reg .u64 %ab_next; mov.u32 %ab_tid, %tid.x; setp.eq.u32 %ab_leader, %ab_tid, 0; mov.u64 $0, 0; {reserve} }}\" {{constraints = \"=l,l,l\", packed_element = 1 : i32, pure = false}} {counter}, {count} : i64, i64 -> i64"
        ));
        let end = self.binary_i64("arith.addi", &base, &count);
        let consumer_owned = consumer.to_string();
        let reclaim = reclaim_from_cq.map(str::to_string);
        // Past the bound: the consumer position had to reach end - capacity.
        let needed = self.binary_i64("arith.subi", &end, capacity);
        let overdue = self.queue_overdue(
            op,
            self.operand(op, 0),
            consumer,
            &needed,
            aboleth_abi::wait_failure::WAIT_KIND_QUEUE_SPACE,
        )?;
        self.leader_wait_after(
            |this| {
                if let Some(counter_word) = &reclaim {
                    this.reclaim_from_cq(counter_word, &consumer_owned);
                }
            },
            consumer_load,
            consumer,
            &end,
            |this, seen| {
                let used = this.binary_i64("arith.subi", &end, seen);
                this.assign(
                    "ab_full",
                    format!("arith.cmpi sgt, {used}, {capacity} : i64"),
                )
            },
            overdue,
        );
        let base = if attrs::get_bool(self.ctx, op, "broadcast") {
            // Every thread writes commands of this batch: all need the base. The queue has
            // one owner (this program's leader), so after a barrier the counter reads back as
            // base + count in every thread.
            self.emit("gpu.barrier".into());
            let head = self.assign("ab_head", format!("tt.elementwise_inline_asm \"ld.volatile.global.u64 $0, [$1];\" {{constraints = \"=l,l\", packed_element = 1 : i32, pure = false}} {counter} : i64 -> i64"));
            if reclaim_from_cq.is_some() {
                // mlx5: a leader that gave up waiting for space exited before the barrier; the
                // others must not write into slots the NIC has not freed (its consumer position
                // is device memory: one cheap read).
                let seen = self.assign("ab_consumer", format!("tt.elementwise_inline_asm \"ld.volatile.global.u64 $0, [$1];\" {{constraints = \"=l,l\", packed_element = 1 : i32, pure = false}} {consumer} : i64 -> i64"));
                let used = self.binary_i64("arith.subi", &head, &seen);
                let full = self.assign(
                    "ab_full",
                    format!("arith.cmpi sgt, {used}, {capacity} : i64"),
                );
                self.emit(format!("scf.if {full} {{"));
                let dummy = self.constant_i64(0);
                self.asm("exit; mov.u32 $0, 0;", &[(&dummy, "i64", 'l')]);
                self.emit("}".into());
            }
            self.binary_i64("arith.subi", &head, &count)
        } else {
            base
        };
        self.define(
            op,
            Repr::Scalar {
                name: base,
                type_text: "i64".into(),
            },
        );
        Ok(())
    }

    /// While a reservation waits for send-ring space: the leader reads the collapsed CQ's CQE
    /// (`wqe_counter` big-endian at byte 60, `op_own` at 63) and, when it reports a WQE at or
    /// past the consumer index, frees through that WQE's first block (completions are
    /// cumulative; the WQE's size is not in the CQE). An error CQE traps. The simulator's
    /// `reclaim_mlx5_ring` does the same.
    fn reclaim_from_cq(&mut self, counter_word: &str, consumer: &str) {
        self.asm(
            "{ .reg .pred %ab_leader, %ab_valid, %ab_ahead, %ab_failed; .reg .u32 %ab_tid, %ab_w, %ab_c, %ab_op, %ab_ci32, %ab_d; .reg .u64 %ab_ci, %ab_d64, %ab_new, %ab_old; mov.u32 %ab_tid, %tid.x; setp.eq.u32 %ab_leader, %ab_tid, 0; mov.u32 %ab_w, 0xf0000000; @%ab_leader ld.acquire.sys.global.u32 %ab_w, [$1]; prmt.b32 %ab_c, %ab_w, 0, 0x4401; shr.u32 %ab_op, %ab_w, 28; setp.eq.u32 %ab_failed, %ab_op, 13; @%ab_failed trap; setp.eq.u32 %ab_failed, %ab_op, 14; @%ab_failed trap; setp.ne.u32 %ab_valid, %ab_op, 15; mov.u64 %ab_ci, 0; @%ab_leader ld.volatile.global.u64 %ab_ci, [$2]; cvt.u32.u64 %ab_ci32, %ab_ci; sub.u32 %ab_d, %ab_c, %ab_ci32; and.b32 %ab_d, %ab_d, 65535; setp.lt.u32 %ab_ahead, %ab_d, 32768; and.pred %ab_valid, %ab_valid, %ab_ahead; and.pred %ab_valid, %ab_valid, %ab_leader; cvt.u64.u32 %ab_d64, %ab_d; add.u64 %ab_new, %ab_ci, %ab_d64; add.u64 %ab_new, %ab_new, 1; @%ab_valid atom.relaxed.gpu.global.max.u64 %ab_old, [$2], %ab_new; mov.u32 $0, 0; }",
            &[(counter_word, "i64", 'l'), (consumer, "i64", 'l')],
        );
    }

    /// A ring entry: put (or NOP when its predicate is false) or signal.
    fn proxy_command(&mut self, op: Ptr<Operation>, signal: bool) -> Result<(), BridgeError> {
        let endpoint = self.operand(op, 0);
        let (ring, capacity) = self.ring_of(endpoint)?;
        let handle = self.i64(endpoint)?;
        let peer = self.load_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, peer_rank) as u64,
            32,
        );
        let slot = self.i64(self.operand(op, 1))?;
        let target = self.operand(op, 2);
        let Repr::RemotePointer { descriptor, offset } = self.repr(target)? else {
            return Err(BridgeError::plain(
                "internal: a proxy command without a remote pointer",
            ));
        };
        let region_index = self.load_field(
            &descriptor,
            core::mem::offset_of!(aboleth_abi::RemoteRegionDescriptor, region_index) as u64,
            32,
        );
        let zero = self.constant_i64(0);
        let thirty_two = self.constant_i64(32);
        let sixteen = self.constant_i64(16);
        let completion_operand = if signal { 4 } else { 7 };
        let completion = self.i64(self.operand(op, completion_operand))?;
        let completion_flag = self.assign(
            "ab_flag",
            format!("arith.cmpi ne, {completion}, {zero} : i64"),
        );
        let completion_bit = self.assign(
            "ab_flag",
            format!("arith.extui {completion_flag} : i1 to i64"),
        );
        let (opcode, flags, word16, word24, word32, word40, word48, word56);
        if signal {
            let add = attrs::get_typed::<SignalOperation>(self.ctx, op, "op")
                == Some(SignalOperation::Add);
            opcode = self.constant_i64(aboleth_abi::proxy::ProxyOpcode::Signal as i64);
            flags = if add {
                let add_bit =
                    self.constant_i64(i64::from(aboleth_abi::proxy::PROXY_FLAG_SIGNAL_ADD));
                self.binary_i64("arith.ori", &completion_bit, &add_bit)
            } else {
                completion_bit
            };
            word16 = zero.clone();
            word24 = zero.clone();
            let shifted = self.binary_i64("arith.shli", &offset, &thirty_two);
            word32 = self.binary_i64("arith.ori", &region_index, &shifted);
            word40 = zero.clone();
            word48 = zero.clone();
            word56 = self.i64(self.operand(op, 3))?;
        } else {
            let predicate = self.i64(self.operand(op, 6))?;
            let sends = self.assign(
                "ab_sends",
                format!("arith.cmpi ne, {predicate}, {zero} : i64"),
            );
            // Put = 1, NOP = 0: the predicate itself.
            opcode = self.fresh("ab_opcode");
            self.emit(format!("{opcode} = arith.extui {sends} : i1 to i64"));
            flags = completion_bit;
            let key = self.i64(self.operand(op, 5))?;
            let mask = self.constant_i64(0xffff_ffff);
            let key = self.binary_i64("arith.andi", &key, &mask);
            let shifted = self.binary_i64("arith.shli", &region_index, &thirty_two);
            word16 = self.binary_i64("arith.ori", &key, &shifted);
            word24 = self.use_as(self.operand(op, 3), "i64")?;
            word32 = zero.clone();
            word40 = offset;
            word48 = self.i64(self.operand(op, 4))?;
            word56 = zero.clone();
        }
        let flags_shifted = self.binary_i64("arith.shli", &flags, &sixteen);
        let peer_shifted = self.binary_i64("arith.shli", &peer, &thirty_two);
        let low = self.binary_i64("arith.ori", &opcode, &flags_shifted);
        let word8 = self.binary_i64("arith.ori", &low, &peer_shifted);
        let one = self.constant_i64(1);
        let sequence = self.binary_i64("arith.addi", &slot, &one);
        let index = self.binary_i64("arith.remsi", &slot, &capacity);
        let entry_bytes = self.constant_i64(aboleth_abi::ProxyRingEntry::SIZE_BYTES as i64);
        let entry_offset = self.binary_i64("arith.muli", &index, &entry_bytes);
        let entries = self.constant_i64(aboleth_abi::ProxyRingHeader::ENTRIES_OFFSET_BYTES as i64);
        let slots = self.binary_i64("arith.addi", &ring, &entries);
        let entry = self.binary_i64("arith.addi", &slots, &entry_offset);
        // Every field, then the sequence word; plain stores: the doorbell's release orders them.
        // (16-byte vector stores only at 16-byte-aligned offsets of the 64-byte entry.)
        let stores = "@%ab_leader st.global.u64 [$1+8], $2; @%ab_leader st.global.v2.u64 [$1+16], {$3, $4}; @%ab_leader st.global.v2.u64 [$1+32], {$5, $6}; @%ab_leader st.global.v2.u64 [$1+48], {$7, $8}; @%ab_leader st.global.u64 [$1], $9;";
        let operands = [
            entry.as_str(),
            &word8,
            &word16,
            &word24,
            &word32,
            &word40,
            &word48,
            &word56,
            &sequence,
        ];
        let typed: Vec<(&str, &str, char)> =
            operands.iter().map(|name| (*name, "i64", 'l')).collect();
        self.asm(&Self::leader_block(stores), &typed);
        Ok(())
    }

    fn proxy_publish(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (ring, _) = self.ring_of(self.operand(op, 0))?;
        let base = self.i64(self.operand(op, 1))?;
        let count = self.i64(self.operand(op, 2))?;
        let ready = self.offset_address(
            &ring,
            aboleth_abi::ProxyRingHeader::PRODUCER_READY_COUNTER_OFFSET_BYTES,
        );
        if attrs::get_bool(self.ctx, op, "owner_only") {
            self.owner_only_publication(&ready, &base, &count);
            return Ok(());
        }
        // In ticket order: wait for the producers before us, then advance past our batch.
        let overdue = self.queue_overdue(
            op,
            self.operand(op, 0),
            &ready,
            &base,
            aboleth_abi::wait_failure::WAIT_KIND_PUBLICATION_TURN,
        )?;
        self.leader_wait(
            "ld.acquire.sys.global.u64",
            &ready,
            &base,
            |this, seen| this.assign("ab_waiting", format!("arith.cmpi ne, {seen}, {base} : i64")),
            overdue,
        );
        let end = self.binary_i64("arith.addi", &base, &count);
        self.asm(
            &Self::leader("st.release.sys.global.u64 [$1], $2;"),
            &[(&ready, "i64", 'l'), (&end, "i64", 'l')],
        );
        Ok(())
    }

    /// A one-owner queue's publication: nobody else posts, so there is nothing to wait for;
    /// the counter is only kept in step (a plain store) for a later kernel that posts to the
    /// queue with the shared protocol, which waits until it equals its base.
    fn owner_only_publication(&mut self, ready: &str, base: &str, count: &str) {
        let end = self.binary_i64("arith.addi", base, count);
        self.asm(
            &Self::leader("st.volatile.global.u64 [$1], $2;"),
            &[(ready, "i64", 'l'), (&end, "i64", 'l')],
        );
    }

    fn proxy_doorbell(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (ring, _) = self.ring_of(self.operand(op, 0))?;
        let end = self.i64(self.operand(op, 1))?;
        let head = self.offset_address(
            &ring,
            aboleth_abi::ProxyRingHeader::PRODUCER_HEAD_OFFSET_BYTES,
        );
        let relaxed = attrs::get_string(self.ctx, op, "order").as_deref() == Some("relaxed");
        let store = match (attrs::get_bool(self.ctx, op, "atomic_max"), relaxed) {
            // One release atomic: a separate store could move a larger head backwards.
            (true, false) => "atom.release.sys.global.max.u64 %ab_old, [$1], $2;",
            (true, true) => "atom.relaxed.sys.global.max.u64 %ab_old, [$1], $2;",
            (false, false) => "st.release.sys.global.u64 [$1], $2;",
            (false, true) => "st.volatile.global.u64 [$1], $2;",
        };
        let ptx = format!(
            "{{ .reg .pred %ab_leader; .reg .u32 %ab_tid; .reg .u64 %ab_old; mov.u32 %ab_tid, %tid.x; setp.eq.u32 %ab_leader, %ab_tid, 0; @%ab_leader {store} mov.u32 $0, 0; }}"
        );
        self.asm(&ptx, &[(&head, "i64", 'l'), (&end, "i64", 'l')]);
        Ok(())
    }

    fn proxy_wait_completion(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (ring, _) = self.ring_of(self.operand(op, 0))?;
        let one = self.constant_i64(1);
        let target = if op.deref(self.ctx).get_num_operands() > 1 {
            let slot = self.i64(self.operand(op, 1))?;
            self.binary_i64("arith.addi", &slot, &one)
        } else {
            // Everything reserved so far on the ring (the program's last command asks for a
            // completion; completions are cumulative).
            let counter = self.offset_address(
                &ring,
                aboleth_abi::ProxyRingHeader::PRODUCER_RESERVATION_COUNTER_OFFSET_BYTES,
            );
            let zero = self.constant_i64(0);
            self.leader_load("ld.volatile.global.u64", &counter, &zero)
        };
        let completion = self.offset_address(
            &ring,
            aboleth_abi::ProxyRingHeader::COMPLETION_COUNTER_OFFSET_BYTES,
        );
        let overdue = self.queue_overdue(
            op,
            self.operand(op, 0),
            &completion,
            &target,
            aboleth_abi::wait_failure::WAIT_KIND_COMPLETION,
        )?;
        self.leader_wait(
            "ld.acquire.sys.global.u64",
            &completion,
            &target,
            |this, seen| {
                this.assign(
                    "ab_waiting",
                    format!("arith.cmpi slt, {seen}, {target} : i64"),
                )
            },
            overdue,
        );
        // The other threads may reuse the source next: they wait for the leader here.
        self.emit("gpu.barrier".into());
        Ok(())
    }

    // ----- mlx5 --------------------------------------------------------------------------

    fn handle_field(&mut self, handle: &str, offset: usize, width: u32) -> String {
        self.load_field(handle, offset as u64, width)
    }

    /// The endpoint's handle address and its queue management block.
    fn mlx5_queue(&mut self, endpoint: Value) -> Result<(String, String), BridgeError> {
        let handle = self.i64(endpoint)?;
        let management = self.handle_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, management_address),
            64,
        );
        Ok((handle, management))
    }

    fn mlx5_reserve(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (handle, management) = self.mlx5_queue(self.operand(op, 0))?;
        let ring = self.handle_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, sq_wqe_basic_block_count),
            32,
        );
        let head = self.offset_address(
            &management,
            core::mem::offset_of!(aboleth_abi::Mlx5QueueManagement, reserved_head) as u64,
        );
        // Ring space: the completion waits advance `consumer_index`.
        let consumer = self.offset_address(
            &management,
            core::mem::offset_of!(aboleth_abi::Mlx5QueueManagement, consumer_index) as u64,
        );
        // The CQE word a full ring is reclaimed from.
        let cq = self.handle_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, cq_buffer_address),
            64,
        );
        let counter_word = self.offset_address(&cq, 60);
        // The management block is device memory used by this GPU's programs only: GPU scope.
        self.reserve_slots(
            op,
            &head,
            &consumer,
            &ring,
            "gpu",
            "ld.volatile.global.u64",
            Some(&counter_word),
        )
    }

    /// The address of basic block `slot + index` of the send ring (the ring wraps).
    fn basic_block_address(&mut self, handle: &str, slot: &str, index: i64) -> String {
        let sq = self.handle_field(
            handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, sq_buffer_address),
            64,
        );
        let ring = self.handle_field(
            handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, sq_wqe_basic_block_count),
            32,
        );
        let offset = self.constant_i64(index);
        let position = self.binary_i64("arith.addi", slot, &offset);
        let wrapped = self.binary_i64("arith.remsi", &position, &ring);
        let bytes = self.constant_i64(aboleth_abi::mlx5::WQE_BASIC_BLOCK_BYTES as i64);
        let within = self.binary_i64("arith.muli", &wrapped, &bytes);
        self.binary_i64("arith.addi", &sq, &within)
    }

    /// The raw control words: `opmod << 24 | wqe_index << 8 | opcode` and `qpn << 8 | ds`
    /// (byte-swapped to big-endian by the PTX that stores them).
    fn control_words(
        &mut self,
        handle: &str,
        slot: &str,
        opcode: u8,
        opmod: u8,
        ds: &str,
    ) -> (String, String) {
        let mask = self.constant_i64(0xffff);
        let index = self.binary_i64("arith.andi", slot, &mask);
        let eight = self.constant_i64(8);
        let shifted = self.binary_i64("arith.shli", &index, &eight);
        let fixed = self.constant_i64((i64::from(opmod) << 24) | i64::from(opcode));
        let word0 = self.binary_i64("arith.ori", &shifted, &fixed);
        let qpn = self.handle_field(
            handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, qpn),
            32,
        );
        let qpn_shifted = self.binary_i64("arith.shli", &qpn, &eight);
        let word1 = self.binary_i64("arith.ori", &qpn_shifted, ds);
        (word0, word1)
    }

    /// Runs `ptx` (thread 0 stores) with the WQE words.
    fn store_wqe(&mut self, wqe: WqePtx) {
        let (ptx, operands) = wqe.finish();
        let typed: Vec<(&str, &str, char)> = operands
            .iter()
            .map(|(name, ty, c)| (name.as_str(), *ty, *c))
            .collect();
        self.asm(&ptx, &typed);
    }

    fn mlx5_write(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        // A write-with-immediate signal rides on this put: RDMA_WRITE_IMM, the immediate in the
        // control segment (operand 8; operand 9, the flag, is only for the simulator's checks).
        let immediate = if attrs::get_bool(self.ctx, op, "with_immediate") {
            // The immediate names the flag by a 20-bit element index: a flag further into its
            // region would signal another one, so that traps.
            let Repr::RemotePointer { offset, .. } = self.repr(self.operand(op, 9))? else {
                return Err(BridgeError::plain(
                    "internal: a write with immediate without its flag",
                ));
            };
            let limit =
                self.constant_i64(1 << (aboleth_abi::mlx5::receive::IMMEDIATE_INDEX_BITS + 3));
            let beyond = self.assign(
                "ab_beyond",
                format!("arith.cmpi uge, {offset}, {limit} : i64"),
            );
            self.emit(format!("scf.if {beyond} {{"));
            let dummy = self.constant_i64(0);
            self.asm("trap; mov.u32 $0, 0;", &[(&dummy, "i64", 'l')]);
            self.emit("}".into());
            Some(self.i64(self.operand(op, 8))?)
        } else {
            None
        };
        let endpoint = self.operand(op, 0);
        let (handle, management) = self.mlx5_queue(endpoint)?;
        let slot = self.i64(self.operand(op, 1))?;
        let Repr::RemotePointer { descriptor, .. } = self.repr(self.operand(op, 2))? else {
            return Err(BridgeError::plain(
                "internal: mlx5.write without a remote pointer",
            ));
        };
        let remote = self.remote_address(self.operand(op, 2))?;
        let rkey = self.load_field(
            &descriptor,
            core::mem::offset_of!(aboleth_abi::RemoteRegionDescriptor, rkey) as u64,
            32,
        );
        let source = self.use_as(self.operand(op, 3), "i64")?;
        let bytes_value = self.operand(op, 4);
        let bytes = self.i64(bytes_value)?;
        let key = self.i64(self.operand(op, 5))?;
        let predicate = self.i64(self.operand(op, 6))?;
        let completion = self.i64(self.operand(op, 7))?;
        let inline = attrs::get_bool(self.ctx, op, "inline");
        let inline_bytes = if inline {
            Some(
                aboleth_ir::scalar::constant_value(self.ctx, bytes_value).ok_or_else(|| {
                    BridgeError::plain("internal: an inline put without a constant size")
                })?,
            )
        } else {
            None
        };
        let blocks = match inline_bytes {
            Some(length) => aboleth_passes::comm::inline_write_basic_blocks(length),
            None => 1,
        };
        let addresses: Vec<String> = (0..blocks)
            .map(|index| self.basic_block_address(&handle, &slot, index))
            .collect();
        let zero = self.constant_i64(0);
        let sends = self.assign(
            "ab_sends",
            format!("arith.cmpi ne, {predicate}, {zero} : i64"),
        );
        let completion = self.effective_completion(op, &handle, &slot, blocks, &completion);
        let flags = self.completion_flags(&completion, false);
        // A false predicate posts a NOP over the same slots (the batch's size is static).
        self.emit(format!("scf.if {sends} {{"));
        let write_ds = match inline_bytes {
            Some(length) => 2 + (4 + length + 15) / 16,
            None => 3,
        };
        let ds = self.constant_i64(write_ds);
        let opcode = if immediate.is_some() {
            aboleth_abi::mlx5::OPCODE_RDMA_WRITE_IMM
        } else {
            aboleth_abi::mlx5::OPCODE_RDMA_WRITE
        };
        let (word0, word1) = self.control_words(&handle, &slot, opcode, 0, &ds);
        let mut wqe = WqePtx::new(&addresses);
        match &immediate {
            Some(immediate) => wqe.control_with_immediate(&word0, &word1, &flags, immediate),
            None => wqe.control(&word0, &word1, &flags),
        }
        wqe.remote(16, &remote, &rkey);
        match inline_bytes {
            Some(length) => {
                let header = self.constant_i64(i64::from(aboleth_abi::mlx5::INLINE_SEG) | length);
                wqe.word_be32(32, &header);
                wqe.copy_bytes(&source, 36, length as u32);
            }
            None => {
                wqe.data(32, &bytes, &key, &source);
            }
        }
        self.store_wqe(wqe);
        self.emit("} else {".into());
        let nop_ds = self.constant_i64(blocks * 4);
        let (nop0, nop1) =
            self.control_words(&handle, &slot, aboleth_abi::mlx5::OPCODE_NOP, 0, &nop_ds);
        let mut nop = WqePtx::new(&addresses);
        nop.control(&nop0, &nop1, &flags);
        self.store_wqe(nop);
        self.emit("}".into());
        self.note_posted(&management, &slot, blocks, &completion);
        Ok(())
    }

    /// The completion operand, or (for an op marked `periodic_completion`) 1 where the WQE at
    /// `slot` spanning `blocks` basic blocks starts at or covers a quarter of the ring: the
    /// formula of
    /// [`aboleth_abi::mlx5::periodic_completion`], so that a full ring can be reclaimed by polling
    /// the CQ (see `reserve_slots`).
    fn effective_completion(
        &mut self,
        op: Ptr<Operation>,
        handle: &str,
        slot: &str,
        blocks: i64,
        completion: &str,
    ) -> String {
        if !attrs::get_bool(self.ctx, op, "periodic_completion") {
            return completion.to_string();
        }
        let ring = self.handle_field(
            handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, sq_wqe_basic_block_count),
            32,
        );
        let fraction =
            self.constant_i64(aboleth_abi::mlx5::PERIODIC_COMPLETION_RING_FRACTION as i64);
        let one = self.constant_i64(1);
        let zero = self.constant_i64(0);
        let quarter = self.binary_i64("arith.divsi", &ring, &fraction);
        let quarter = self.binary_i64("arith.maxsi", &quarter, &one);
        let within = self.binary_i64("arith.remsi", slot, &quarter);
        let size = self.constant_i64(blocks);
        let reach = self.binary_i64("arith.addi", &within, &size);
        let at_start = self.assign("ab_at", format!("arith.cmpi eq, {within}, {zero} : i64"));
        let crosses = self.assign(
            "ab_cross",
            format!("arith.cmpi sgt, {reach}, {quarter} : i64"),
        );
        let requested = self.assign(
            "ab_req",
            format!("arith.cmpi ne, {completion}, {zero} : i64"),
        );
        let periodic = self.assign(
            "ab_periodic",
            format!("arith.ori {at_start}, {crosses} : i1"),
        );
        let wanted = self.assign(
            "ab_wanted",
            format!("arith.ori {periodic}, {requested} : i1"),
        );
        self.assign("ab_completion", format!("arith.extui {wanted} : i1 to i64"))
    }

    /// `fm_ce_se`: CQ_UPDATE when the completion operand is nonzero, and the fence bit.
    fn completion_flags(&mut self, completion: &str, fenced: bool) -> String {
        let zero = self.constant_i64(0);
        let requested = self.assign(
            "ab_cq",
            format!("arith.cmpi ne, {completion}, {zero} : i64"),
        );
        let update = self.constant_i64(i64::from(aboleth_abi::mlx5::WQE_CTRL_CQ_UPDATE));
        let fence = self.constant_i64(if fenced {
            i64::from(aboleth_abi::mlx5::FENCE_MODE_INITIATOR_SMALL)
        } else {
            0
        });
        let chosen = self.assign(
            "ab_flags",
            format!("arith.select {requested}, {update}, {zero} : i64"),
        );
        self.binary_i64("arith.ori", &chosen, &fence)
    }

    /// Remembers, in the management block, the last WQE that asks for a completion (its first
    /// basic block, and its end): what a drain waits for and then frees. `atom.max`, because
    /// several programs may post to one queue.
    fn note_posted(&mut self, management: &str, slot: &str, blocks: i64, completion: &str) {
        let last = self.offset_address(management, MANAGEMENT_LAST_POSTED_OFFSET_BYTES);
        let size = self.constant_i64(blocks);
        let end = self.binary_i64("arith.addi", slot, &size);
        self.asm(
            "{ .reg .pred %ab_leader, %ab_wanted; .reg .u32 %ab_tid; .reg .u64 %ab_old; mov.u32 %ab_tid, %tid.x; setp.eq.u32 %ab_leader, %ab_tid, 0; setp.ne.u64 %ab_wanted, $4, 0; and.pred %ab_wanted, %ab_wanted, %ab_leader; @%ab_wanted atom.relaxed.gpu.global.max.u64 %ab_old, [$1], $2; @%ab_wanted atom.relaxed.gpu.global.max.u64 %ab_old, [$1+8], $3; mov.u32 $0, 0; }",
            &[
                (&last, "i64", 'l'),
                (slot, "i64", 'l'),
                (&end, "i64", 'l'),
                (completion, "i64", 'l'),
            ],
        );
    }

    fn mlx5_atomic(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let endpoint = self.operand(op, 0);
        let (handle, management) = self.mlx5_queue(endpoint)?;
        let slot = self.i64(self.operand(op, 1))?;
        let Repr::RemotePointer { descriptor, .. } = self.repr(self.operand(op, 2))? else {
            return Err(BridgeError::plain(
                "internal: mlx5.atomic without a remote pointer",
            ));
        };
        let remote = self.remote_address(self.operand(op, 2))?;
        let rkey = self.load_field(
            &descriptor,
            core::mem::offset_of!(aboleth_abi::RemoteRegionDescriptor, rkey) as u64,
            32,
        );
        let value = self.i64(self.operand(op, 3))?;
        let completion = self.i64(self.operand(op, 4))?;
        let add =
            attrs::get_typed::<SignalOperation>(self.ctx, op, "op") == Some(SignalOperation::Add);
        let completion =
            self.effective_completion(op, &handle, &slot, if add { 1 } else { 2 }, &completion);
        let fenced = attrs::get_bool(self.ctx, op, "fence");
        let flags = self.completion_flags(&completion, fenced);
        let result_address = self.handle_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, atomic_result_address),
            64,
        );
        let result_key = self.handle_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, atomic_result_lkey),
            32,
        );
        let eight = self.constant_i64(8);
        let zero = self.constant_i64(0);
        let all_ones = self.constant_i64(-1);
        if add {
            // ATOMIC_FA: ctrl, raddr, atomic (add, 0), data (the fetched value's buffer); ds 4.
            let address = self.basic_block_address(&handle, &slot, 0);
            let ds = self.constant_i64(4);
            let (word0, word1) =
                self.control_words(&handle, &slot, aboleth_abi::mlx5::OPCODE_ATOMIC_FA, 0, &ds);
            let mut wqe = WqePtx::new(&[address]);
            wqe.control(&word0, &word1, &flags);
            wqe.remote(16, &remote, &rkey);
            wqe.be64(32, &value);
            wqe.be64(40, &zero);
            wqe.data(48, &eight, &result_key, &result_address);
            self.store_wqe(wqe);
        } else {
            // 8-byte masked compare-and-swap with compare_mask 0: an unconditional swap; ds 5.
            let addresses = vec![
                self.basic_block_address(&handle, &slot, 0),
                self.basic_block_address(&handle, &slot, 1),
            ];
            let ds = self.constant_i64(5);
            let (word0, word1) = self.control_words(
                &handle,
                &slot,
                aboleth_abi::mlx5::OPCODE_ATOMIC_MASKED_CS,
                aboleth_abi::mlx5::EXTENDED_ATOMIC_OPMOD_8_BYTES,
                &ds,
            );
            let mut wqe = WqePtx::new(&addresses);
            wqe.control(&word0, &word1, &flags);
            wqe.remote(16, &remote, &rkey);
            wqe.be64(32, &value);
            wqe.be64(40, &zero);
            wqe.be64(48, &all_ones);
            wqe.be64(56, &zero);
            wqe.data(64, &eight, &result_key, &result_address);
            self.store_wqe(wqe);
        }
        self.note_posted(&management, &slot, if add { 1 } else { 2 }, &completion);
        Ok(())
    }

    fn mlx5_publish(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (_, management) = self.mlx5_queue(self.operand(op, 0))?;
        let base = self.i64(self.operand(op, 1))?;
        let count = self.i64(self.operand(op, 2))?;
        let ready = self.offset_address(
            &management,
            core::mem::offset_of!(aboleth_abi::Mlx5QueueManagement, ready_head) as u64,
        );
        if attrs::get_bool(self.ctx, op, "owner_only") {
            self.owner_only_publication(&ready, &base, &count);
            return Ok(());
        }
        let overdue = self.queue_overdue(
            op,
            self.operand(op, 0),
            &ready,
            &base,
            aboleth_abi::wait_failure::WAIT_KIND_PUBLICATION_TURN,
        )?;
        self.leader_wait(
            "ld.acquire.gpu.global.u64",
            &ready,
            &base,
            |this, seen| this.assign("ab_waiting", format!("arith.cmpi ne, {seen}, {base} : i64")),
            overdue,
        );
        let end = self.binary_i64("arith.addi", &base, &count);
        self.asm(
            &Self::leader("st.release.gpu.global.u64 [$1], $2;"),
            &[(&ready, "i64", 'l'), (&end, "i64", 'l')],
        );
        Ok(())
    }

    fn mlx5_lock(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (_, management) = self.mlx5_queue(self.operand(op, 0))?;
        let lock = self.offset_address(
            &management,
            core::mem::offset_of!(aboleth_abi::Mlx5QueueManagement, post_send_lock) as u64,
        );
        // Thread 0 swaps 0 -> 1 until it gets the lock; the others see "free" at once.
        let zero_expected = self.constant_i64(0);
        let overdue = self.queue_overdue(
            op,
            self.operand(op, 0),
            &lock,
            &zero_expected,
            aboleth_abi::wait_failure::WAIT_KIND_POST_LOCK,
        )?;
        self.emit("scf.while : () -> () {".into());
        let old = self.assign("ab_lock", format!("tt.elementwise_inline_asm \"{{ .reg .pred %ab_leader; .reg .u32 %ab_tid; mov.u32 %ab_tid, %tid.x; setp.eq.u32 %ab_leader, %ab_tid, 0; mov.u64 $0, 0; @%ab_leader atom.acquire.gpu.global.cas.b64 $0, [$1], 0, 1; }}\" {{constraints = \"=l,l\", packed_element = 1 : i32, pure = false}} {lock} : i64 -> i64"));
        let zero = self.constant_i64(0);
        let held = self.assign("ab_held", format!("arith.cmpi ne, {old}, {zero} : i64"));
        if let Some(overdue) = overdue {
            self.give_up_if_overdue(
                &overdue.bound,
                &WaitReport {
                    waiting: held.clone(),
                    address: overdue.address,
                    expected: overdue.expected,
                    seen: old,
                    peer: overdue.peer,
                    kind: overdue.kind,
                },
            );
        }
        self.emit(format!("scf.condition({held})"));
        self.emit("} do {".into());
        self.emit("scf.yield".into());
        self.emit("}".into());
        Ok(())
    }

    fn mlx5_unlock(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (_, management) = self.mlx5_queue(self.operand(op, 0))?;
        let lock = self.offset_address(
            &management,
            core::mem::offset_of!(aboleth_abi::Mlx5QueueManagement, post_send_lock) as u64,
        );
        let zero = self.constant_i64(0);
        self.asm(
            &Self::leader("st.release.gpu.global.u64 [$1], $2;"),
            &[(&lock, "i64", 'l'), (&zero, "i64", 'l')],
        );
        Ok(())
    }

    fn mlx5_doorbell_record(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (handle, management) = self.mlx5_queue(self.operand(op, 0))?;
        let end = self.i64(self.operand(op, 1))?;
        let record = self.handle_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, doorbell_record_address),
            64,
        );
        let send_word = self.offset_address(&record, 4);
        let producer = self.offset_address(
            &management,
            core::mem::offset_of!(aboleth_abi::Mlx5QueueManagement, producer_index) as u64,
        );
        let relaxed = attrs::get_string(self.ctx, op, "order").as_deref() == Some("relaxed");
        let store = if relaxed {
            "st.volatile.global.b32"
        } else {
            "st.release.sys.global.b32"
        };
        // The send counter is the low 16 bits, big-endian; with several producers the largest
        // end wins (atom.max on the management block, under the post lock).
        let max = if attrs::get_bool(self.ctx, op, "atomic_max") {
            "@%ab_leader atom.relaxed.gpu.global.max.u64 %ab_old, [$3], $2; max.u64 %ab_end, $2, %ab_old;"
        } else {
            "mov.u64 %ab_end, $2;"
        };
        let ptx = format!(
            "{{ .reg .pred %ab_leader; .reg .u32 %ab_tid, %ab_low, %ab_be; .reg .u64 %ab_old, %ab_end; mov.u32 %ab_tid, %tid.x; setp.eq.u32 %ab_leader, %ab_tid, 0; mov.u64 %ab_old, 0; {max} cvt.u32.u64 %ab_low, %ab_end; and.b32 %ab_low, %ab_low, 65535; prmt.b32 %ab_be, %ab_low, 0, 0x0123; @%ab_leader {store} [$1], %ab_be; mov.u32 $0, 0; }}"
        );
        self.asm(
            &ptx,
            &[
                (&send_word, "i64", 'l'),
                (&end, "i64", 'l'),
                (&producer, "i64", 'l'),
            ],
        );
        Ok(())
    }

    fn mlx5_doorbell(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (handle, management) = self.mlx5_queue(self.operand(op, 0))?;
        let end = self.i64(self.operand(op, 1))?;
        let uar = self.handle_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, uar_doorbell_address),
            64,
        );
        let qpn = self.handle_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, qpn),
            32,
        );
        let producer = self.offset_address(
            &management,
            core::mem::offset_of!(aboleth_abi::Mlx5QueueManagement, producer_index) as u64,
        );
        // {BE32(producer_index << 8), BE32(qpn << 8)}: one 8-byte MMIO store, after a system
        // fence (the WQE and doorbell-record stores must reach the NIC first; a release orders
        // only what precedes it, not the MMIO store after it). On a shared queue another
        // producer may already have recorded a larger index: ring the largest (never backwards).
        let ptx = "{ .reg .pred %ab_leader; .reg .u32 %ab_tid, %ab_a, %ab_b; .reg .u64 %ab_v, %ab_max; mov.u32 %ab_tid, %tid.x; setp.eq.u32 %ab_leader, %ab_tid, 0; ld.volatile.global.u64 %ab_max, [$4]; max.u64 %ab_max, %ab_max, $2; cvt.u32.u64 %ab_a, %ab_max; and.b32 %ab_a, %ab_a, 65535; shl.b32 %ab_a, %ab_a, 8; prmt.b32 %ab_a, %ab_a, 0, 0x0123; cvt.u32.u64 %ab_b, $3; shl.b32 %ab_b, %ab_b, 8; prmt.b32 %ab_b, %ab_b, 0, 0x0123; mov.b64 %ab_v, {%ab_a, %ab_b}; @%ab_leader fence.sc.sys; @%ab_leader st.mmio.relaxed.sys.global.b64 [$1], %ab_v; mov.u32 $0, 0; }";
        self.asm(
            ptx,
            &[
                (&uar, "i64", 'l'),
                (&end, "i64", 'l'),
                (&qpn, "i64", 'l'),
                (&producer, "i64", 'l'),
            ],
        );
        Ok(())
    }

    fn mlx5_wait_completion(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (handle, management) = self.mlx5_queue(self.operand(op, 0))?;
        let one = self.constant_i64(1);
        let (target, freed) = if op.deref(self.ctx).get_num_operands() > 2 {
            // A token: its WQE's first basic block; once it completed, its blocks are free.
            let slot = self.i64(self.operand(op, 1))?;
            let end = self.i64(self.operand(op, 2))?;
            (slot, end)
        } else {
            // The last WQE that asked for a completion (completions are cumulative), and its end.
            let last = self.offset_address(&management, MANAGEMENT_LAST_POSTED_OFFSET_BYTES);
            let zero = self.constant_i64(0);
            let start = self.leader_load("ld.volatile.global.u64", &last, &zero);
            let last_end = self.offset_address(&last, 8);
            let end = self.leader_load("ld.volatile.global.u64", &last_end, &one);
            (start, end)
        };
        let cq = self.handle_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, cq_buffer_address),
            64,
        );
        // The collapsed CQ's CQE: wqe_counter (big-endian 16 bits) at 60, op_own at 63 (an
        // opcode of 0xf is "no CQE yet"). Done when the counter is at or after the target.
        // Thread 0 decides (the target may be its own reservation); the others wait at the
        // barrier below.
        let counter_word = self.offset_address(&cq, 60);
        let overdue = self.queue_overdue(
            op,
            self.operand(op, 0),
            &counter_word,
            &target,
            aboleth_abi::wait_failure::WAIT_KIND_COMPLETION,
        )?;
        self.emit("scf.while : () -> () {".into());
        let pending = self.assign("ab_pending", format!("tt.elementwise_inline_asm \"{{ .reg .pred %ab_leader, %ab_invalid, %ab_early, %ab_failed; .reg .u32 %ab_tid, %ab_w, %ab_c, %ab_op, %ab_t, %ab_d; mov.u32 %ab_tid, %tid.x; setp.eq.u32 %ab_leader, %ab_tid, 0; ld.acquire.sys.global.u32 %ab_w, [$1]; prmt.b32 %ab_c, %ab_w, 0, 0x4401; shr.u32 %ab_op, %ab_w, 28; setp.eq.u32 %ab_invalid, %ab_op, 15; setp.eq.u32 %ab_failed, %ab_op, 13; @%ab_failed trap; cvt.u32.u64 %ab_t, $2; sub.u32 %ab_d, %ab_c, %ab_t; and.b32 %ab_d, %ab_d, 65535; setp.ge.u32 %ab_early, %ab_d, 32768; or.pred %ab_early, %ab_early, %ab_invalid; and.pred %ab_early, %ab_early, %ab_leader; selp.u32 $0, 1, 0, %ab_early; }}\" {{constraints = \"=r,l,l\", packed_element = 1 : i32, pure = false}} {counter_word}, {target} : i64, i64 -> i32"));
        let zero32 = self.assign("ab_zero", "arith.constant 0 : i32".to_string());
        let waiting = self.assign(
            "ab_waiting",
            format!("arith.cmpi ne, {pending}, {zero32} : i32"),
        );
        if let Some(overdue) = overdue {
            // Report the CQE's counter (host order) the leader last saw.
            let seen = self.assign("ab_seen", format!("tt.elementwise_inline_asm \"{{ .reg .u32 %ab_w, %ab_c; ld.volatile.global.u32 %ab_w, [$1]; prmt.b32 %ab_c, %ab_w, 0, 0x4401; cvt.u64.u32 $0, %ab_c; }}\" {{constraints = \"=l,l\", packed_element = 1 : i32, pure = false}} {counter_word} : i64 -> i64"));
            self.give_up_if_overdue(
                &overdue.bound,
                &WaitReport {
                    waiting: waiting.clone(),
                    address: overdue.address,
                    expected: overdue.expected,
                    seen,
                    peer: overdue.peer,
                    kind: overdue.kind,
                },
            );
        }
        self.emit(format!("scf.condition({waiting})"));
        self.emit("} do {".into());
        self.emit("scf.yield".into());
        self.emit("}".into());
        // Those basic blocks are free again for reservations.
        let consumer = self.offset_address(
            &management,
            core::mem::offset_of!(aboleth_abi::Mlx5QueueManagement, consumer_index) as u64,
        );
        self.asm(
            &Self::leader("atom.relaxed.gpu.global.max.u64 %ab_old, [$1], $2;").replace(
                ".reg .u32 %ab_tid;",
                ".reg .u32 %ab_tid; .reg .u64 %ab_old;",
            ),
            &[(&consumer, "i64", 'l'), (&freed, "i64", 'l')],
        );
        self.emit("gpu.barrier".into());
        Ok(())
    }
}

/// A bounded wait's bookkeeping, computed before its loop ([`Generator::wait_bound`]).
struct WaitBound {
    /// The wait-failure log's address (i64).
    log: String,
    /// This rank (i64).
    rank: String,
    /// The wait's site id.
    site: usize,
    /// The bound in nanoseconds (i64; 0: unbounded).
    timeout: String,
    /// `%globaltimer` when the wait began (i64).
    start: String,
}

/// A queue wait's bound and what it reports ([`Generator::queue_overdue`]).
struct Overdue {
    bound: WaitBound,
    address: String,
    expected: String,
    peer: String,
    kind: u32,
}

/// What one iteration of a wait reports if it gives up ([`Generator::give_up_if_overdue`]).
struct WaitReport {
    /// Whether this thread still waits (i1).
    waiting: String,
    /// The word polled (i64).
    address: String,
    /// What it had to reach (i64).
    expected: String,
    /// What it held (i64).
    seen: String,
    /// The rank expected to write it (i32; -1: unknown).
    peer: String,
    /// `aboleth_abi::wait_failure::WAIT_KIND_*`.
    kind: u32,
}

/// How long a bounded wait polls its flag before it also reads the wait-failure log's
/// `abort_requested` word (host memory, so not on every poll).
const ABORT_POLL_AFTER_NANOSECONDS: i64 = 100_000;

/// How leader-only PTX elects thread 0 of the program.
const LEADER_PREDICATE: &str = "setp.eq.u32 %ab_leader, %ab_tid, 0;";
/// The same predicate, true in every thread.
const EVERY_THREAD_PREDICATE: &str = "setp.eq.u32 %ab_leader, %ab_tid, %ab_tid;";

/// The management block's spare words where code records the queue's last completion-requesting
/// WQE: its first basic block, then its end (24 spare bytes; two are used).
const MANAGEMENT_LAST_POSTED_OFFSET_BYTES: u64 =
    core::mem::offset_of!(aboleth_abi::Mlx5QueueManagement, reserved) as u64;

/// Inline PTX that stores one WQE's segments (big-endian fields) into its basic blocks, by
/// thread 0 of the program. Operands are TTIR values; the byte swaps happen in PTX.
struct WqePtx {
    operands: Vec<(String, &'static str, char)>,
    declarations: Vec<String>,
    body: Vec<String>,
    temporaries: usize,
    blocks: usize,
}

impl WqePtx {
    fn new(block_addresses: &[String]) -> Self {
        let mut wqe = WqePtx {
            operands: Vec::new(),
            declarations: vec![
                ".reg .pred %ab_leader;".into(),
                ".reg .u32 %ab_tid, %ab_zero;".into(),
            ],
            body: vec![
                "mov.u32 %ab_tid, %tid.x;".into(),
                "setp.eq.u32 %ab_leader, %ab_tid, 0;".into(),
                "mov.u32 %ab_zero, 0;".into(),
            ],
            temporaries: 0,
            blocks: block_addresses.len(),
        };
        for address in block_addresses {
            wqe.input(address);
        }
        wqe
    }

    /// Adds an i64 operand; returns its `$n`.
    fn input(&mut self, name: &str) -> String {
        self.operands.push((name.to_string(), "i64", 'l'));
        format!("${}", self.operands.len())
    }

    fn register32(&mut self) -> String {
        self.temporaries += 1;
        let name = format!("%ab_w{}", self.temporaries);
        self.declarations.push(format!(".reg .u32 {name};"));
        name
    }

    /// The address register of byte `offset` of the WQE (`$k+within`).
    fn at(&self, offset: u32) -> String {
        let block = (offset / 64) as usize;
        assert!(
            block < self.blocks,
            "WQE offset {offset} past its basic blocks"
        );
        format!("[${}+{}]", block + 1, offset % 64)
    }

    /// The big-endian bytes of the low 32 bits of `value` (an i64 operand).
    fn be32_of(&mut self, value: &str) -> String {
        let operand = self.input(value);
        let word = self.register32();
        self.body.push(format!("cvt.u32.u64 {word}, {operand};"));
        self.body
            .push(format!("prmt.b32 {word}, {word}, 0, 0x0123;"));
        word
    }

    /// The big-endian halves (high word first) of `value`.
    fn be64_of(&mut self, value: &str) -> (String, String) {
        let operand = self.input(value);
        let (low, high) = (self.register32(), self.register32());
        self.body
            .push(format!("mov.b64 {{{low}, {high}}}, {operand};"));
        self.body.push(format!("prmt.b32 {low}, {low}, 0, 0x0123;"));
        self.body
            .push(format!("prmt.b32 {high}, {high}, 0, 0x0123;"));
        (high, low)
    }

    fn store_words(&mut self, offset: u32, words: &[String]) {
        for (index, word) in words.iter().enumerate() {
            let address = self.at(offset + 4 * index as u32);
            self.body
                .push(format!("@%ab_leader st.global.b32 {address}, {word};"));
        }
    }

    /// The control segment: BE32 words 0 and 1, `fm_ce_se` in byte 11.
    fn control(&mut self, word0: &str, word1: &str, flags: &str) {
        let first = self.be32_of(word0);
        let second = self.be32_of(word1);
        let third = self.flags_word(flags);
        self.store_words(0, &[first, second, third, "%ab_zero".into()]);
    }

    /// The control segment of an RDMA_WRITE_IMM: the immediate (big-endian) in its last word.
    fn control_with_immediate(&mut self, word0: &str, word1: &str, flags: &str, immediate: &str) {
        let first = self.be32_of(word0);
        let second = self.be32_of(word1);
        let third = self.flags_word(flags);
        let fourth = self.be32_of(immediate);
        self.store_words(0, &[first, second, third, fourth]);
    }

    /// The control segment's third word: signature 0, `dci_stream_channel_id` 0, `fm_ce_se`.
    fn flags_word(&mut self, flags: &str) -> String {
        let operand = self.input(flags);
        let third = self.register32();
        self.body.push(format!("cvt.u32.u64 {third}, {operand};"));
        self.body.push(format!("shl.b32 {third}, {third}, 24;"));
        third
    }

    /// A remote-address segment: BE64 address, BE32 rkey, 0.
    fn remote(&mut self, offset: u32, address: &str, rkey: &str) {
        let (high, low) = self.be64_of(address);
        let key = self.be32_of(rkey);
        self.store_words(offset, &[high, low, key, "%ab_zero".into()]);
    }

    /// A data segment: BE32 byte count, BE32 lkey, BE64 address.
    fn data(&mut self, offset: u32, bytes: &str, key: &str, address: &str) {
        let count = self.be32_of(bytes);
        let lkey = self.be32_of(key);
        let (high, low) = self.be64_of(address);
        self.store_words(offset, &[count, lkey, high, low]);
    }

    fn word_be32(&mut self, offset: u32, value: &str) {
        let word = self.be32_of(value);
        self.store_words(offset, &[word]);
    }

    fn be64(&mut self, offset: u32, value: &str) {
        let (high, low) = self.be64_of(value);
        self.store_words(offset, &[high, low]);
    }

    /// `length` bytes from the source into the WQE at `offset` (inline data).
    fn copy_bytes(&mut self, source: &str, offset: u32, length: u32) {
        let operand = self.input(source);
        self.declarations.push(".reg .u16 %ab_byte;".into());
        for index in 0..length {
            let address = self.at(offset + index);
            self.body.push(format!(
                "@%ab_leader ld.global.u8 %ab_byte, [{operand}+{index}];"
            ));
            self.body
                .push(format!("@%ab_leader st.global.u8 {address}, %ab_byte;"));
        }
    }

    fn finish(self) -> (String, Vec<(String, &'static str, char)>) {
        let ptx = format!(
            "{{ {} {} mov.u32 $0, 0; }}",
            self.declarations.join(" "),
            self.body.join(" ")
        );
        (ptx, self.operands)
    }
}

/// `template` with every `@NAME@` replaced by its value from `values` (ABI offsets and
/// constants read from `aboleth-abi`, so inline PTX never hard-codes a layout).
fn fill_ptx(template: &str, values: &[(&str, u64)]) -> String {
    let mut ptx = template.to_owned();
    for (name, value) in values {
        let token = format!("@{name}@");
        assert!(ptx.contains(&token), "PTX template has no {token}");
        ptx = ptx.replace(&token, &value.to_string());
    }
    // Predicates are `@%name`: a token is `@` followed by a capital letter.
    let unfilled = ptx
        .split('@')
        .skip(1)
        .any(|rest| rest.starts_with(|c: char| c.is_ascii_uppercase()));
    assert!(!unfilled, "PTX template has an unfilled token: {ptx}");
    ptx
}
