//! Lifting: the `aboleth` extern calls of a TTIR kernel, and the scalar computation and loops
//! around them, become an `ab`-dialect kernel the pipeline can plan and lower.
//!
//! What is lifted: every `tt.extern_elementwise` with `libname = "aboleth"` (by its symbol, see
//! `docs/TRITON_BRIDGE.md`); the backward slice of their operands through scalar `arith` ops,
//! `tt.get_program_id x`, scalar `tt.addptr` and scalar `tt.load`; and the `scf.for`/`scf.if`
//! that contain lifted calls. Anything else an operand comes from (a reduction, a select, an
//! `int_to_ptr`, a function argument) enters as an opaque kernel parameter, named after the kernel
//! parameter it is or reinterprets (`tt.int_to_ptr`, `tt.ptr_to_int`, `tt.bitcast` of one), else
//! after the TTIR value. What it does not do: change the TTIR (that is [`crate::emit`]), or lift
//! `scf.while`, `else` regions or loop-carried values other than tokens.
//!
//! What the lifting leaves out but the lowering must know: whether TTIR it did not take may
//! have written memory before a put (a `tl.store` of the tile the put sends, an atomic, a call).
//! Such a put is marked `ttir_unlifted_writes` (see [`unlifted_writes_before`]); the p2p
//! lowering then orders those stores before the copy with a barrier.
//!
//! The lifted text is parsed by `aboleth-ir`; [`LiftedKernel::entries`] lists, in the order the
//! parsed ops are walked, which TTIR op (if any) each `ab` op stands for, so that code generation
//! can put new code next to the right TTIR op and refer to existing TTIR values by name.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write;

use aboleth_ttir::{OperationId, TtirModule, ValueDefinition};

use crate::BridgeError;
use aboleth_ir::ab::attributes::Comparison;

/// The `libname` of every aboleth builtin.
pub const ABOLETH_LIBNAME: &str = "aboleth";
/// The symbol prefix of version 1 of the builtin contract.
pub const SYMBOL_PREFIX: &str = "__aboleth_v1__";

/// What one `ab` op of the lifted text stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A TTIR op that stays in the TTIR (scalar ops, loads, loops, ifs): new code is placed
    /// around it and its results are referred to by their TTIR names.
    Kept(OperationId),
    /// An aboleth extern call: its TTIR op is replaced by the code generated for it.
    Call(OperationId),
    /// An op that only converts a TTIR value for the `ab` dialect (an `i32` loop counter seen
    /// as `i64`): it has no code; its result is the TTIR value `name` converted.
    Alias {
        /// The TTIR value.
        name: String,
        /// Its TTIR type.
        type_text: String,
    },
    /// An op the lifting added (bound conversions, pointer scaling): code is generated for it.
    Added,
}

/// A TTIR value the `ab` kernel receives as a parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parameter {
    /// The TTIR value (`%send_key`).
    pub ttir_name: String,
    /// Its TTIR type (`i32`, `!tt.ptr<i64>`).
    pub ttir_type: String,
    /// Its name in the lifted text: the name of the kernel parameter it is (`send_key`), or is
    /// a pointer reinterpretation of (`src = send.to(...)` with `send` an integer: `send`);
    /// otherwise the TTIR name without `%`. Prefixed with `a_` when it would not be an
    /// identifier or would clash with lifted names. `bind` (`aboleth sim KERNEL.py`) uses it.
    pub ab_name: String,
    /// The TTIR name without `%` when it differs from `ab_name` (`src`): the local variable
    /// that older `bind` strings named, still accepted with a deprecation note.
    pub local_name: Option<String>,
    /// The kernel parameter this one reinterprets (`words = pool.to(...)` when `pool` is a
    /// parameter of the lifted kernel too): the simulator binds it as that parameter is bound.
    pub reinterprets: Option<String>,
}

/// The result of lifting one kernel.
#[derive(Clone, Debug)]
pub struct LiftedKernel {
    /// The `tt.func` op.
    pub function: OperationId,
    /// The kernel's name.
    pub name: String,
    /// The `.abo` text.
    pub text: String,
    /// One entry per op of the text, in walk (pre-)order, blocks' terminators included.
    pub entries: Vec<Entry>,
    /// The kernel parameters in order.
    pub parameters: Vec<Parameter>,
    /// For each TTIR op result that an `ab` value stands for: its TTIR name and type.
    pub result_names: HashMap<OperationId, Vec<(String, String)>>,
    /// The TTIR ops lifted as extern calls.
    pub calls: Vec<OperationId>,
    /// The line of the lifted text each entry is on (1-based).
    pub entry_lines: Vec<u32>,
}

impl LiftedKernel {
    /// The TTIR op that the lifted text's `line` stands for, if any.
    pub fn ttir_operation_at_line(&self, line: u32) -> Option<OperationId> {
        let index = self.entry_lines.iter().position(|l| *l == line)?;
        match self.entries[index] {
            Entry::Kept(id) | Entry::Call(id) => Some(id),
            _ => None,
        }
    }
}

/// Lifts the public kernel of `module`, or returns `None` when it has no aboleth call.
pub fn lift(module: &TtirModule) -> Result<Option<LiftedKernel>, BridgeError> {
    let calls: Vec<OperationId> = module.extern_calls_in_library(ABOLETH_LIBNAME).collect();
    if calls.is_empty() {
        return Ok(None);
    }
    let function = module
        .operation(calls[0])
        .parent()
        .and_then(|mut id| {
            loop {
                if module.operation(id).name() == "tt.func" {
                    return Some(id);
                }
                id = module.operation(id).parent()?;
            }
        })
        .ok_or_else(|| BridgeError::at(module, calls[0], "an aboleth call outside a tt.func"))?;
    for call in &calls {
        let mut current = module.operation(*call).parent();
        while let Some(id) = current {
            if module.operation(id).name() == "tt.func" && id != function {
                return Err(BridgeError::at(
                    module,
                    *call,
                    "aboleth calls in more than one function: call aboleth builtins from the kernel itself (inline helpers)",
                ));
            }
            current = module.operation(id).parent();
        }
    }
    let mut lifter = Lifter {
        module,
        function,
        needed: BTreeSet::new(),
        opaque: BTreeMap::new(),
        opaque_definition: BTreeMap::new(),
        names: HashMap::new(),
        next_name: 0,
        text: String::new(),
        entries: Vec::new(),
        result_names: HashMap::new(),
        parameters: Vec::new(),
        indent: 6,
        entry_lines: Vec::new(),
        unlifted_writes_before: BTreeSet::new(),
    };
    lifter.find_needed(&calls)?;
    lifter.unlifted_writes_before = unlifted_writes_before(module, function, &calls);
    let body = lifter.build_body()?;
    let name = module
        .operation(function)
        .symbol()
        .unwrap_or("kernel")
        .to_string();
    let mut text = String::new();
    let parameter_types: Vec<String> = lifter
        .parameters
        .iter()
        .map(|parameter| ab_type(&parameter.ttir_type))
        .collect();
    let _ = writeln!(text, "builtin.module @bridge {{");
    let _ = writeln!(text, "  ^entry():");
    let _ = writeln!(
        text,
        "  builtin.func @{}: builtin.function <({}) -> ()> [] {{",
        sanitize(&name),
        parameter_types.join(", ")
    );
    let arguments: Vec<String> = lifter
        .parameters
        .iter()
        .enumerate()
        .map(|(index, parameter)| format!("{}: {}", parameter.ab_name, parameter_types[index]))
        .collect();
    let _ = writeln!(text, "    ^entry_block({}):", arguments.join(", "));
    text.push_str(&body);
    let _ = writeln!(text, "      ab.return");
    let _ = writeln!(text, "  }}");
    let _ = writeln!(text, "}}");
    let mut entries = lifter.entries;
    entries.push(Entry::Added); // ab.return
    let mut entry_lines = lifter.entry_lines;
    entry_lines.push(text.lines().count() as u32 - 2);
    Ok(Some(LiftedKernel {
        function,
        name,
        text,
        entries,
        parameters: lifter.parameters,
        result_names: lifter.result_names,
        calls,
        entry_lines,
    }))
}

/// The `ab` type of a TTIR scalar type.
fn ab_type(ttir_type: &str) -> String {
    if ttir_type.starts_with("!tt.ptr") {
        "ab.ptr".to_string()
    } else {
        format!("builtin.integer {ttir_type}")
    }
}

fn sanitize(name: &str) -> String {
    name.trim_start_matches('@')
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Byte size of a pointee type (`!tt.ptr<i64>` -> 8).
pub fn pointee_bytes(pointer_type: &str) -> Option<i64> {
    let inner = pointer_type
        .strip_prefix("!tt.ptr<")?
        .split([',', '>'])
        .next()?
        .trim();
    Some(match inner {
        "i1" | "i8" => 1,
        "i16" | "f16" | "bf16" => 2,
        "i32" | "f32" => 4,
        "i64" | "f64" => 8,
        _ => return None,
    })
}

type DefinitionKey = (usize, usize, usize, usize, usize);

fn key(definition: ValueDefinition) -> DefinitionKey {
    match definition {
        ValueDefinition::Result {
            operation,
            result_index,
        } => (0, operation.index(), result_index, 0, 0),
        ValueDefinition::BlockArgument {
            operation,
            region,
            block,
            argument_index,
        } => (1, operation.index(), region, block, argument_index),
        ValueDefinition::HeaderDefinition { operation, index } => {
            (2, operation.index(), index, 0, 0)
        }
    }
}

const LIFTABLE_SCALAR_OPS: &[&str] = &[
    "arith.constant",
    "arith.addi",
    "arith.subi",
    "arith.muli",
    "arith.divsi",
    "arith.remsi",
    "arith.andi",
    "arith.ori",
    "arith.minsi",
    "arith.maxsi",
    "arith.cmpi",
    "arith.extsi",
    "arith.extui",
    "arith.trunci",
    "tt.get_program_id",
    "tt.addptr",
    "tt.load",
];

struct Lifter<'m> {
    module: &'m TtirModule,
    function: OperationId,
    needed: BTreeSet<OperationId>,
    /// Opaque values: definition -> (TTIR name, type).
    opaque: BTreeMap<DefinitionKey, (String, String)>,
    /// The definition behind each opaque value (to find the kernel parameter it stands for).
    opaque_definition: BTreeMap<DefinitionKey, ValueDefinition>,
    /// Lifted value names by definition.
    names: HashMap<DefinitionKey, String>,
    next_name: usize,
    text: String,
    entries: Vec<Entry>,
    result_names: HashMap<OperationId, Vec<(String, String)>>,
    parameters: Vec<Parameter>,
    indent: usize,
    entry_lines: Vec<u32>,
    /// The calls that unlifted TTIR work may have written memory before.
    unlifted_writes_before: BTreeSet<OperationId>,
}

impl Lifter<'_> {
    fn is_scalar_type(type_text: &str) -> bool {
        !type_text.starts_with("tensor") && !type_text.contains("tensor<")
    }

    fn result_type(&self, operation: OperationId, index: usize) -> Option<String> {
        self.module
            .operation(operation)
            .result_types()
            .and_then(|types| types.get(index).cloned())
    }

    fn liftable(&self, operation: OperationId, result_index: usize) -> bool {
        let op = self.module.operation(operation);
        let name = op.name();
        if name == "tt.extern_elementwise" {
            return op
                .extern_elementwise()
                .is_some_and(|call| call.libname == ABOLETH_LIBNAME);
        }
        if name == "tt.get_program_id" {
            return self.line_of(operation).contains("tt.get_program_id x");
        }
        LIFTABLE_SCALAR_OPS.contains(&name)
            && self
                .result_type(operation, result_index)
                .is_some_and(|t| Self::is_scalar_type(&t))
            && (name != "arith.constant" || constant_text(&self.line_of(operation)).is_some())
    }

    fn line_of(&self, operation: OperationId) -> String {
        let position = self.module.text_position(operation);
        self.module
            .source()
            .lines()
            .nth(position.line as usize - 1)
            .unwrap_or("")
            .to_string()
    }

    /// Marks the calls, the scalar ops feeding them and the loops/ifs around them.
    fn find_needed(&mut self, calls: &[OperationId]) -> Result<(), BridgeError> {
        let mut work: Vec<OperationId> = calls.to_vec();
        while let Some(operation) = work.pop() {
            if !self.needed.insert(operation) {
                continue;
            }
            // Enclosing structure up to the function.
            let mut parent = self.module.operation(operation).parent();
            while let Some(id) = parent {
                if id == self.function {
                    break;
                }
                match self.module.operation(id).name() {
                    "scf.for" | "scf.if" => work.push(id),
                    other => {
                        return Err(BridgeError::at(
                            self.module,
                            operation,
                            format!(
                                "an aboleth call inside `{other}` is not supported yet: use scf.for or if around communication"
                            ),
                        ));
                    }
                }
                parent = self.module.operation(id).parent();
            }
            let operands: Vec<String> = match self.module.operation(operation).name() {
                // Only the bounds of a loop and the condition of an if feed the ab ops.
                "scf.for" => self.module.operation(operation).operands()[..3].to_vec(),
                "scf.if" => self.module.operation(operation).operands()[..1].to_vec(),
                _ => self.module.operation(operation).operands().to_vec(),
            };
            for operand in operands {
                let Some(definition) = self.module.find_definition(operation, &operand) else {
                    return Err(BridgeError::at(
                        self.module,
                        operation,
                        format!("cannot find the definition of `{operand}`"),
                    ));
                };
                match definition {
                    ValueDefinition::Result {
                        operation: producer,
                        result_index,
                    } if self.module.operation(producer).name() != "scf.for"
                        && self.liftable(producer, result_index) =>
                    {
                        work.push(producer)
                    }
                    ValueDefinition::HeaderDefinition {
                        operation: owner,
                        index: 0,
                    } if self.module.operation(owner).name() == "scf.for" => work.push(owner),
                    _ => {
                        let type_text = self.type_of(operation, &operand, definition);
                        self.opaque_definition.insert(key(definition), definition);
                        self.opaque
                            .entry(key(definition))
                            .or_insert((operand.clone(), type_text));
                    }
                }
            }
        }
        Ok(())
    }

    /// The kernel parameter (`%send`) an opaque value is, or reinterprets through one
    /// `tt.int_to_ptr`, `tt.ptr_to_int` or `tt.bitcast` (same address, another type).
    fn kernel_parameter_of(&self, definition: &ValueDefinition) -> Option<String> {
        let parameter_name = |definition: ValueDefinition| match definition {
            ValueDefinition::HeaderDefinition { operation, index }
                if operation == self.function =>
            {
                self.module
                    .operation(operation)
                    .header_definitions()
                    .get(index)
                    .map(|declaration| declaration.name.clone())
            }
            _ => None,
        };
        if let Some(name) = parameter_name(*definition) {
            return Some(name);
        }
        let ValueDefinition::Result { operation, .. } = *definition else {
            return None;
        };
        let producer = self.module.operation(operation);
        if !matches!(
            producer.name(),
            "tt.int_to_ptr" | "tt.ptr_to_int" | "tt.bitcast"
        ) {
            return None;
        }
        let [operand] = producer.operands() else {
            return None;
        };
        parameter_name(self.module.find_definition(operation, operand)?)
    }

    /// The TTIR type of `value` (as used by `user`).
    fn type_of(&self, user: OperationId, value: &str, definition: ValueDefinition) -> String {
        match definition {
            ValueDefinition::Result {
                operation,
                result_index,
            } => self
                .result_type(operation, result_index)
                .unwrap_or_else(|| "i64".to_string()),
            ValueDefinition::HeaderDefinition { operation, index } => {
                let op = self.module.operation(operation);
                if op.name() == "scf.for" {
                    return op
                        .scf_for()
                        .and_then(|header| {
                            if index == 0 {
                                header.induction_type
                            } else {
                                header.iter_args.get(index - 1)?.type_text.clone()
                            }
                        })
                        .unwrap_or_else(|| "i64".to_string());
                }
                op.header_definitions()
                    .get(index)
                    .and_then(|declaration| declaration.type_text.clone())
                    .unwrap_or_else(|| "i64".to_string())
            }
            ValueDefinition::BlockArgument { .. } => {
                let _ = (user, value);
                "i64".to_string()
            }
        }
    }

    fn fresh(&mut self) -> String {
        self.next_name += 1;
        format!("l{}", self.next_name)
    }

    fn line(&mut self, text: &str, entry: Entry) {
        // Four header lines precede the body in the final text.
        self.entry_lines
            .push(4 + self.text.lines().count() as u32 + 1);
        let _ = writeln!(self.text, "{}{}", " ".repeat(self.indent), text);
        self.entries.push(entry);
    }

    fn build_body(&mut self) -> Result<String, BridgeError> {
        // Parameters: opaque values, in a stable order.
        let opaque: Vec<(DefinitionKey, (String, String))> =
            self.opaque.iter().map(|(k, v)| (*k, v.clone())).collect();
        let opaque_definitions: Vec<ValueDefinition> = opaque
            .iter()
            .map(|(definition, _)| self.opaque_definition[definition])
            .collect();
        let opaque_names: BTreeSet<String> =
            opaque.iter().map(|(_, (name, _))| name.clone()).collect();
        for (index, (definition, (name, type_text))) in opaque.into_iter().enumerate() {
            if !(type_text.starts_with("!tt.ptr") || type_text.starts_with('i')) {
                return Err(BridgeError::plain(format!(
                    "the aboleth calls use `{name}` of type {type_text}: only integers and pointers can reach communication"
                )));
            }
            // Named after the kernel parameter it is or reinterprets (what `bind` refers to in
            // `aboleth sim KERNEL.py`), else after the TTIR value.
            let local = sanitize(name.trim_start_matches('%'));
            // A reinterpretation yields the name to the parameter itself when that is also used.
            // So does a second reinterpretation of one parameter: it keeps its local name.
            let reinterpreted = self.kernel_parameter_of(&opaque_definitions[index]);
            let parameter = reinterpreted
                .clone()
                .filter(|parameter| *parameter == name || !opaque_names.contains(parameter))
                .map(|parameter| sanitize(parameter.trim_start_matches('%')))
                .filter(|parameter| !self.parameters.iter().any(|p| &p.ab_name == parameter));
            let plain = parameter.unwrap_or_else(|| local.clone());
            let clashes = plain.starts_with(|c: char| c.is_ascii_digit())
                || (plain.starts_with('l') && plain[1..].chars().all(|c| c.is_ascii_digit()))
                || plain == "entry";
            let mut ab_name = if clashes { format!("a_{plain}") } else { plain };
            if self.parameters.iter().any(|p| p.ab_name == ab_name) {
                ab_name = format!("{ab_name}_{index}");
            }
            self.names.insert(definition, ab_name.clone());
            let reinterprets = reinterpreted
                .filter(|parameter| *parameter != name)
                .map(|parameter| sanitize(parameter.trim_start_matches('%')))
                .filter(|parameter| *parameter != ab_name);
            self.parameters.push(Parameter {
                ttir_name: name,
                ttir_type: type_text,
                local_name: (local != ab_name).then_some(local),
                ab_name,
                reinterprets,
            });
        }
        let function = self.function;
        let block = &self.module.operation(function).regions()[0].blocks()[0];
        let operations: Vec<OperationId> = block.operations().collect();
        for operation in operations {
            self.lift_operation(operation)?;
        }
        Ok(std::mem::take(&mut self.text))
    }

    /// The `ab` name of a TTIR operand of `user`.
    fn operand(&self, user: OperationId, operand: &str) -> Result<String, BridgeError> {
        let definition = self.module.find_definition(user, operand).ok_or_else(|| {
            BridgeError::at(self.module, user, format!("`{operand}` is undefined"))
        })?;
        self.names.get(&key(definition)).cloned().ok_or_else(|| {
            BridgeError::at(
                self.module,
                user,
                format!(
                    "`{operand}` is not available to the communication code (a loop-carried value?)"
                ),
            )
        })
    }

    fn operand_type(&self, user: OperationId, operand: &str) -> String {
        self.module
            .find_definition(user, operand)
            .map(|definition| self.type_of(user, operand, definition))
            .unwrap_or_else(|| "i64".to_string())
    }

    fn define(&mut self, operation: OperationId, result_index: usize) -> String {
        let name = self.fresh();
        self.names.insert(
            key(ValueDefinition::Result {
                operation,
                result_index,
            }),
            name.clone(),
        );
        name
    }

    fn remember_results(&mut self, operation: OperationId) {
        let op = self.module.operation(operation);
        let names = op.result_names();
        let types = op.result_types().map(|t| t.to_vec()).unwrap_or_default();
        let pairs = names
            .into_iter()
            .enumerate()
            .map(|(index, name)| {
                (
                    name,
                    types.get(index).cloned().unwrap_or_else(|| "i64".into()),
                )
            })
            .collect();
        self.result_names.insert(operation, pairs);
    }

    fn lift_operation(&mut self, operation: OperationId) -> Result<(), BridgeError> {
        if !self.needed.contains(&operation) {
            return Ok(());
        }
        let op = self.module.operation(operation);
        let name = op.name().to_string();
        let operands = op.operands().to_vec();
        self.remember_results(operation);
        let result_type = self
            .result_type(operation, 0)
            .unwrap_or_else(|| "i64".into());
        match name.as_str() {
            "tt.extern_elementwise" => return self.lift_call(operation),
            "scf.for" => return self.lift_for(operation),
            "scf.if" => return self.lift_if(operation),
            _ => {}
        }
        let ab_result_type = ab_type(&result_type);
        let line = self.line_of(operation);
        let text = match name.as_str() {
            "arith.constant" => {
                let value = constant_text(&line).expect("checked liftable");
                let result = self.define(operation, 0);
                format!(
                    "{result} = builtin.constant <builtin.integer <{value}: {result_type}>> : {ab_result_type};"
                )
            }
            "tt.get_program_id" => {
                let result = self.define(operation, 0);
                format!("{result} = ab.program_id : {ab_result_type};")
            }
            "arith.extsi" | "arith.extui" | "arith.trunci" => {
                let source = self.operand(operation, &operands[0])?;
                let result = self.define(operation, 0);
                format!("{result} = ab.cast {source} : {ab_result_type};")
            }
            "arith.cmpi" => {
                let predicate = line
                    .split("arith.cmpi")
                    .nth(1)
                    .and_then(|rest| rest.split(',').next())
                    .map(str::trim)
                    .unwrap_or("");
                let operator = match predicate {
                    "eq" => "Eq",
                    "ne" => "Ne",
                    "slt" => "Lt",
                    "sle" => "Le",
                    "sgt" => "Gt",
                    "sge" => "Ge",
                    other => {
                        return Err(BridgeError::at(
                            self.module,
                            operation,
                            format!(
                                "comparison `{other}` feeding communication is not supported yet (signed comparisons only)"
                            ),
                        ));
                    }
                };
                let lhs = self.operand(operation, &operands[0])?;
                let rhs = self.operand(operation, &operands[1])?;
                let operand_type = ab_type(&self.operand_type(operation, &operands[0]));
                let result = self.define(operation, 0);
                // The ab comparison yields the operands' width; the TTIR one an i1.
                format!("{result} = ab.binop {operator} {lhs}, {rhs} : {operand_type};")
            }
            "tt.addptr" => {
                let base = self.operand(operation, &operands[0])?;
                let offset = self.operand(operation, &operands[1])?;
                let offset_type = ab_type(&self.operand_type(operation, &operands[1]));
                let bytes = pointee_bytes(&result_type).ok_or_else(|| {
                    BridgeError::at(
                        self.module,
                        operation,
                        format!("pointer type {result_type} has an unknown element size"),
                    )
                })?;
                let scale = self.fresh();
                self.line(
                    &format!("{scale} = builtin.constant <builtin.integer <{bytes}: {}>> : {offset_type};", offset_type.trim_start_matches("builtin.integer ")),
                    Entry::Added,
                );
                let scaled = self.fresh();
                self.line(
                    &format!("{scaled} = ab.binop Mul {offset}, {scale} : {offset_type};"),
                    Entry::Added,
                );
                let result = self.define(operation, 0);
                format!("{result} = ab.ptr_add {base}, {scaled} : ab.ptr;")
            }
            "tt.load" => {
                let pointer = self.operand(operation, &operands[0])?;
                let result = self.define(operation, 0);
                format!("{result} = ab.load {pointer} : {ab_result_type};")
            }
            arith => {
                let operator = match arith {
                    "arith.addi" => "Add",
                    "arith.subi" => "Sub",
                    "arith.muli" => "Mul",
                    "arith.divsi" => "Div",
                    "arith.remsi" => "Rem",
                    "arith.andi" => "And",
                    "arith.ori" => "Or",
                    "arith.minsi" => "Min",
                    "arith.maxsi" => "Max",
                    other => unreachable!("{other} is not liftable"),
                };
                let lhs = self.operand(operation, &operands[0])?;
                let rhs = self.operand(operation, &operands[1])?;
                let result = self.define(operation, 0);
                format!("{result} = ab.binop {operator} {lhs}, {rhs} : {ab_result_type};")
            }
        };
        self.line(&text, Entry::Kept(operation));
        Ok(())
    }

    fn lift_for(&mut self, operation: OperationId) -> Result<(), BridgeError> {
        let header = self.module.operation(operation).scf_for().ok_or_else(|| {
            BridgeError::at(self.module, operation, "an scf.for in an unexpected form")
        })?;
        let induction_type = header
            .induction_type
            .clone()
            .unwrap_or_else(|| "i64".into());
        let mut bounds = Vec::new();
        for bound in [&header.lower_bound, &header.upper_bound, &header.step] {
            let name = self.operand(operation, bound)?;
            if induction_type == "i64" {
                bounds.push(name);
            } else {
                let wide = self.fresh();
                self.line(
                    &format!("{wide} = ab.cast {name} : builtin.integer i64;"),
                    Entry::Added,
                );
                bounds.push(wide);
            }
        }
        let induction = self.fresh();
        // A loop whose TTIR holds more than the lifted ops (tensor work, stores, carried
        // values) must keep its iteration space: no lowering may spread it over threads.
        let attributes = if header.iter_args.is_empty() && self.body_fully_lifted(operation) {
            ""
        } else {
            "ttir_unlifted_work: builtin.bool true"
        };
        self.line(
            &format!(
                "ab.for {}, {}, {} [{attributes}] {{",
                bounds[0], bounds[1], bounds[2]
            ),
            Entry::Kept(operation),
        );
        let _ = writeln!(
            self.text,
            "{}^{}_body({induction}: builtin.integer i64):",
            " ".repeat(self.indent + 2),
            induction
        );
        self.indent += 4;
        let induction_key = key(ValueDefinition::HeaderDefinition {
            operation,
            index: 0,
        });
        if induction_type == "i64" {
            self.names.insert(induction_key, induction);
        } else {
            let narrow = self.fresh();
            self.line(
                &format!("{narrow} = ab.cast {induction} : builtin.integer {induction_type};"),
                Entry::Alias {
                    name: header.induction_variable.clone(),
                    type_text: induction_type.clone(),
                },
            );
            self.names.insert(induction_key, narrow);
        }
        let body: Vec<OperationId> = self.module.operation(operation).regions()[0].blocks()[0]
            .operations()
            .collect();
        for inner in body {
            self.lift_operation(inner)?;
        }
        self.line("ab.yield", Entry::Added);
        self.indent -= 4;
        let _ = writeln!(self.text, "{}}};", " ".repeat(self.indent));
        Ok(())
    }

    /// Whether every op in the regions of `operation` (nested ones included) is lifted, apart
    /// from the terminators.
    fn body_fully_lifted(&self, operation: OperationId) -> bool {
        self.module
            .operation(operation)
            .regions()
            .iter()
            .flat_map(|region| region.blocks())
            .flat_map(|block| block.operations())
            .all(|inner| {
                let name = self.module.operation(inner).name();
                name == "scf.yield"
                    || (self.needed.contains(&inner)
                        && (!matches!(name, "scf.for" | "scf.if") || self.body_fully_lifted(inner)))
            })
    }

    fn lift_if(&mut self, operation: OperationId) -> Result<(), BridgeError> {
        let op = self.module.operation(operation);
        if op.regions().len() > 1
            && op.regions()[1]
                .blocks()
                .iter()
                .flat_map(|block| block.operations())
                .any(|inner| self.needed.contains(&inner))
        {
            return Err(BridgeError::at(
                self.module,
                operation,
                "aboleth calls in the `else` branch of an if are not supported yet: use a second `if` with the negated condition",
            ));
        }
        let condition = self.operand(operation, &op.operands()[0])?;
        let label = self.fresh();
        self.line(&format!("ab.if {condition} {{"), Entry::Kept(operation));
        let _ = writeln!(self.text, "{}^{label}_then():", " ".repeat(self.indent + 2));
        self.indent += 4;
        let body: Vec<OperationId> = op.regions()[0].blocks()[0].operations().collect();
        for inner in body {
            self.lift_operation(inner)?;
        }
        self.line("ab.yield", Entry::Added);
        self.indent -= 4;
        let _ = writeln!(self.text, "{}}};", " ".repeat(self.indent));
        Ok(())
    }

    /// A token operand: the put/signal it names, or `None` when it was carried through a loop
    /// (then the caller falls back to endpoint order or a drain).
    fn token(&self, user: OperationId, operand: &str) -> Option<String> {
        let definition = self.module.find_definition(user, operand)?;
        match definition {
            ValueDefinition::Result { operation, .. }
                if self.module.operation(operation).name() == "tt.extern_elementwise" =>
            {
                self.names.get(&key(definition)).cloned()
            }
            _ => None,
        }
    }

    /// The endpoint of the put or signal whose token was carried out of (or around) a loop.
    fn carried_token_endpoint(&self, user: OperationId, operand: &str) -> Option<String> {
        let definition = self.module.find_definition(user, operand)?;
        let (owner, index) = match definition {
            ValueDefinition::Result {
                operation,
                result_index,
            } if self.module.operation(operation).name() == "scf.for" => {
                (operation, result_index + 1)
            }
            ValueDefinition::HeaderDefinition { operation, index }
                if self.module.operation(operation).name() == "scf.for" && index > 0 =>
            {
                (operation, index)
            }
            _ => return None,
        };
        let header = self.module.operation(owner).scf_for()?;
        let initial = &header.iter_args.get(index - 1)?.initial_value;
        // The initial token's call: its first operand is the endpoint.
        let producer = match self.module.find_definition(owner, initial)? {
            ValueDefinition::Result { operation, .. } => operation,
            _ => return None,
        };
        let endpoint = self.module.operation(producer).operands().first()?.clone();
        self.operand(producer, &endpoint).ok()
    }

    fn lift_call(&mut self, operation: OperationId) -> Result<(), BridgeError> {
        let op = self.module.operation(operation);
        let call = op.extern_elementwise().expect("an extern call");
        let operands = op.operands().to_vec();
        let kind = call.symbol.strip_prefix(SYMBOL_PREFIX).ok_or_else(|| {
            BridgeError::at(
                self.module,
                operation,
                format!(
                    "unknown aboleth symbol `{}`: this compiler implements {SYMBOL_PREFIX}* (rebuild the kernel with the matching aboleth.language)",
                    call.symbol
                ),
            )
        })?;
        let (op_kind, parameter) = match kind.split_once("__") {
            Some((head, tail)) => (head, Some(tail)),
            None => (kind, None),
        };
        let element = |parameter: Option<&str>| -> Result<u32, BridgeError> {
            parameter
                .and_then(|p| p.strip_prefix('e'))
                .and_then(|e| e.parse().ok())
                .ok_or_else(|| {
                    BridgeError::at(
                        self.module,
                        operation,
                        format!("malformed symbol `{}`", call.symbol),
                    )
                })
        };
        let arguments: Vec<String> = match op_kind {
            "put" | "put_if" | "signal" | "signal_after" | "endpoint" | "remote" | "at"
            | "wait_signal" | "drain" | "fence" => operands
                .iter()
                .map(|operand| self.operand(operation, operand))
                .collect::<Result<_, _>>()?,
            _ => Vec::new(),
        };
        let signal_operation = |parameter: Option<&str>| -> Result<&'static str, BridgeError> {
            match parameter {
                Some("set") => Ok("Set"),
                Some("add") => Ok("Add"),
                _ => Err(BridgeError::at(
                    self.module,
                    operation,
                    format!("malformed symbol `{}`", call.symbol),
                )),
            }
        };
        let text = match op_kind {
            "endpoint" => {
                let result = self.define(operation, 0);
                format!(
                    "{result} = ab.endpoint {}, {} [] : ab.endpoint;",
                    arguments[0], arguments[1]
                )
            }
            "remote" => {
                let bytes = element(parameter)?;
                let result = self.define(operation, 0);
                format!(
                    "{result} = ab.remote {}, {} [] : ab.remote <{bytes}>;",
                    arguments[0], arguments[1]
                )
            }
            "at" => {
                let bytes = element(parameter)?;
                let result = self.define(operation, 0);
                format!(
                    "{result} = ab.at {}, {} : ab.remote_ptr <{bytes}>;",
                    arguments[0], arguments[1]
                )
            }
            "put" | "put_if" => {
                let result = self.define(operation, 0);
                let attributes = if self.unlifted_writes_before.contains(&operation) {
                    "ttir_unlifted_writes: builtin.bool true"
                } else {
                    ""
                };
                format!(
                    "{result} = ab.put {} [{attributes}] : ab.token;",
                    arguments.join(", ")
                )
            }
            "signal" => {
                let operation_name = signal_operation(parameter)?;
                let result = self.define(operation, 0);
                format!(
                    "{result} = ab.signal {}, {}, {} [op: ab.signal_op {operation_name}] : ab.token;",
                    arguments[0], arguments[1], arguments[2]
                )
            }
            "signal_after" => {
                let operation_name = signal_operation(parameter)?;
                let endpoint = self.operand(operation, &operands[0])?;
                let flag = self.operand(operation, &operands[1])?;
                let value = self.operand(operation, &operands[2])?;
                let after = match self.token(operation, &operands[3]) {
                    Some(token) => format!(", {token}"),
                    None => {
                        // A token carried through a loop: fine when it is on this endpoint
                        // (the signal is ordered after every earlier put on it anyway).
                        if self
                            .carried_token_endpoint(operation, &operands[3])
                            .as_deref()
                            != Some(endpoint.as_str())
                        {
                            return Err(BridgeError::at(
                                self.module,
                                operation,
                                "`after=` a token carried through a loop from another endpoint is not supported yet: wait on it first",
                            ));
                        }
                        String::new()
                    }
                };
                let result = self.define(operation, 0);
                format!(
                    "{result} = ab.signal {endpoint}, {flag}, {value}{after} [op: ab.signal_op {operation_name}] : ab.token;"
                )
            }
            "wait_signal" => match parameter {
                None => format!("ab.wait_signal {}, {} [];", arguments[0], arguments[1]),
                Some(name) => {
                    let comparison = Comparison::from_name(name).ok_or_else(|| {
                        BridgeError::at(
                            self.module,
                            operation,
                            format!("malformed symbol `{}`", call.symbol),
                        )
                    })?;
                    format!(
                        "ab.wait_signal {}, {} [comparison: ab.comparison {comparison:?}];",
                        arguments[0], arguments[1]
                    )
                }
            },
            "wait" => match self.token(operation, &operands[0]) {
                Some(token) => format!("ab.wait {token} [];"),
                None => {
                    let endpoint = self
                        .carried_token_endpoint(operation, &operands[0])
                        .ok_or_else(|| {
                            BridgeError::at(
                                self.module,
                                operation,
                                "aboleth.wait on a value that is not a put or signal token",
                            )
                        })?;
                    // Waiting for the last of a loop's transfers: every earlier one on the
                    // endpoint completes first, so a drain of the endpoint is the same wait.
                    format!("ab.drain {endpoint} [];")
                }
            },
            "drain" => format!("ab.drain {} [];", arguments[0]),
            "fence" => format!("ab.fence {} [];", arguments[0]),
            _ => {
                return Err(BridgeError::at(
                    self.module,
                    operation,
                    format!("unknown aboleth builtin `{}`", call.symbol),
                ));
            }
        };
        self.line(&text, Entry::Call(operation));
        Ok(())
    }
}

/// TTIR ops known not to write memory (besides `arith.*`, `math.*` and the structure of
/// `scf.*`, whose regions are looked at op by op).
const NON_WRITING_OPS: &[&str] = &[
    "tt.func",
    "tt.return",
    "tt.load",
    "tt.descriptor_load",
    "tt.splat",
    "tt.unsplat",
    "tt.make_range",
    "tt.addptr",
    "tt.advance",
    "tt.make_tensor_ptr",
    "tt.make_tensor_descriptor",
    "tt.broadcast",
    "tt.expand_dims",
    "tt.reshape",
    "tt.trans",
    "tt.join",
    "tt.split",
    "tt.cat",
    "tt.gather",
    "tt.histogram",
    "tt.dot",
    "tt.dot_scaled",
    "tt.reduce",
    "tt.reduce.return",
    "tt.scan",
    "tt.scan.return",
    "tt.get_program_id",
    "tt.get_num_programs",
    "tt.int_to_ptr",
    "tt.ptr_to_int",
    "tt.bitcast",
    "tt.fp_to_fp",
    "tt.clampf",
    "tt.precise_sqrt",
    "tt.precise_divf",
    "tt.mulhiui",
    "tt.assert",
    "tt.print",
    "ub.poison",
    "gpu.barrier",
];

/// Whether a TTIR op may write memory, as far as the lifting can tell: anything not known to be
/// free of writes may (a store, an atomic, a call, an impure inline asm or library call, an op
/// this list does not know). Aboleth calls are the lowering's business, not unlifted work.
fn may_write_memory(module: &TtirModule, operation: OperationId) -> bool {
    let op = module.operation(operation);
    let name = op.name();
    if name.starts_with("arith.") || name.starts_with("math.") || name.starts_with("scf.") {
        return false;
    }
    if let Some(call) = op.extern_elementwise() {
        return call.libname != ABOLETH_LIBNAME && !call.pure;
    }
    if name == "tt.elementwise_inline_asm" {
        return op.attribute("pure").and_then(|pure| pure.bool_value()) != Some(true);
    }
    !NON_WRITING_OPS.contains(&name)
}

/// The loops (`scf.for`, `scf.while`) around `operation`, innermost first.
fn enclosing_loops(module: &TtirModule, operation: OperationId) -> Vec<OperationId> {
    let mut loops = Vec::new();
    let mut parent = module.operation(operation).parent();
    while let Some(id) = parent {
        if matches!(module.operation(id).name(), "scf.for" | "scf.while") {
            loops.push(id);
        }
        parent = module.operation(id).parent();
    }
    loops
}

/// The `calls` before which an op of `function` that may write memory ([`may_write_memory`]) may
/// run: one earlier in the text (before it, or in a region before it), or one in a loop around
/// the call too (an earlier iteration). Conservative: a barrier in between is not looked for.
pub fn unlifted_writes_before(
    module: &TtirModule,
    function: OperationId,
    calls: &[OperationId],
) -> BTreeSet<OperationId> {
    let inside_function = |operation: OperationId| {
        let mut parent = module.operation(operation).parent();
        while let Some(id) = parent {
            if id == function {
                return true;
            }
            parent = module.operation(id).parent();
        }
        false
    };
    let writers: Vec<(OperationId, Vec<OperationId>)> = module
        .operations()
        .filter(|&operation| inside_function(operation) && may_write_memory(module, operation))
        .map(|operation| (operation, enclosing_loops(module, operation)))
        .collect();
    calls
        .iter()
        .copied()
        .filter(|&call| {
            let call_loops = enclosing_loops(module, call);
            writers.iter().any(|(writer, writer_loops)| {
                // Ids follow source order: an op before the call in the text runs before it
                // (if at all); one after it runs before it only around a loop of both.
                writer.index() < call.index()
                    || writer_loops
                        .iter()
                        .any(|loop_op| call_loops.contains(loop_op))
            })
        })
        .collect()
}

/// The integer value of an `arith.constant` line (`true`/`false` as 1/0), if scalar.
fn constant_text(line: &str) -> Option<String> {
    let rest = line.split("arith.constant").nth(1)?.trim();
    let value = rest.split([' ', ':']).next()?.trim();
    match value {
        "true" => Some("1".into()),
        "false" => Some("0".into()),
        _ if value.parse::<i64>().is_ok() => Some(value.to_string()),
        _ => None,
    }
}
