//! Canonical text for operations the compiler creates: a `tt.extern_elementwise` call in the
//! exact custom form Triton 3.6 prints, any operation in MLIR's generic form, and fresh value
//! names that do not clash with the module's.
//!
//! These build lines for the edit API (`printer.rs`); they do not check that the operation
//! exists, that the types agree, or that the operands are defined (Triton's parser does, when the
//! text goes back through `ir.parse_mlir_module`).

use std::collections::HashSet;

use crate::lexer::encode_string_literal;
use crate::syntax::TtirModule;

/// A value with its type, as an operand of a new operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypedValue {
    /// The value as used: `%x`, `%a#1`.
    pub name: String,
    /// Its type: `i64`, `!tt.ptr<i8>`.
    pub type_text: String,
}

/// A `tt.extern_elementwise` call, the form aboleth builtins take in TTIR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExternElementwiseCall {
    /// The result name, with its `%`.
    pub result_name: String,
    /// The operands in order.
    pub operands: Vec<TypedValue>,
    /// The result type.
    pub result_type: String,
    /// The `libname` attribute (`aboleth` for our builtins).
    pub libname: String,
    /// The `libpath` attribute (empty for our builtins; Triton ignores it on NVIDIA).
    pub libpath: String,
    /// The function the call names.
    pub symbol: String,
    /// The `pure` attribute; `false` keeps the call from being removed or hoisted.
    pub pure: bool,
    /// The location text to append, such as `loc(#loc12)` (reuse the replaced operation's).
    pub location_text: Option<String>,
}

impl ExternElementwiseCall {
    /// The call as Triton 3.6 prints it, without indentation or newline:
    /// `%r = tt.extern_elementwise %a, %b {libname = "aboleth", libpath = "", pure = false,
    /// symbol = "f"} : (i64, i64) -> i64 loc(#loc3)`. With no operands Triton prints two spaces
    /// after the op name, and so does this.
    pub fn to_text(&self) -> String {
        let operand_names: Vec<&str> = self
            .operands
            .iter()
            .map(|value| value.name.as_str())
            .collect();
        let operand_types: Vec<&str> = self
            .operands
            .iter()
            .map(|value| value.type_text.as_str())
            .collect();
        let mut text = format!(
            "{} = tt.extern_elementwise {} {{libname = {}, libpath = {}, pure = {}, symbol = {}}} \
             : ({}) -> {}",
            self.result_name,
            operand_names.join(", "),
            encode_string_literal(&self.libname),
            encode_string_literal(&self.libpath),
            self.pure,
            encode_string_literal(&self.symbol),
            operand_types.join(", "),
            self.result_type,
        );
        if let Some(location) = &self.location_text {
            text.push(' ');
            text.push_str(location);
        }
        text
    }
}

/// Any operation in MLIR's generic form: `%r = "dialect.op"(%a) <{p = 1}> {a = 2} : (i32) ->
/// i32 loc(#loc)`. Triton's parser accepts the generic form for every registered operation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GenericOperation {
    /// Result names, with their `%`; printed as `%a, %b = `.
    pub result_names: Vec<String>,
    /// The operation name, such as `tt.elementwise_inline_asm`.
    pub name: String,
    /// The operands in order.
    pub operands: Vec<TypedValue>,
    /// Properties (`<{...}>`): name and value text. Printed sorted by name, as MLIR does.
    pub properties: Vec<(String, String)>,
    /// Discardable attributes (`{...}`): name and value text. Printed sorted by name.
    pub attributes: Vec<(String, String)>,
    /// The result types.
    pub result_types: Vec<String>,
    /// The location text to append, such as `loc(#loc12)`.
    pub location_text: Option<String>,
}

/// An attribute name as MLIR prints it: bare when it is an identifier, quoted otherwise.
fn attribute_name_text(name: &str) -> String {
    let is_bare = name
        .bytes()
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == b'_')
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'$' | b'.'));
    if is_bare {
        name.to_string()
    } else {
        encode_string_literal(name)
    }
}

/// `{a = 1, b = 2}`, sorted by name.
fn dictionary_text(entries: &[(String, String)]) -> String {
    let mut sorted: Vec<&(String, String)> = entries.iter().collect();
    sorted.sort_by(|left, right| left.0.cmp(&right.0));
    let parts: Vec<String> = sorted
        .iter()
        .map(|(name, value)| format!("{} = {value}", attribute_name_text(name)))
        .collect();
    format!("{{{}}}", parts.join(", "))
}

impl GenericOperation {
    /// The operation in generic form, without indentation or newline.
    pub fn to_text(&self) -> String {
        let mut text = String::new();
        if !self.result_names.is_empty() {
            text.push_str(&self.result_names.join(", "));
            text.push_str(" = ");
        }
        let operand_names: Vec<&str> = self
            .operands
            .iter()
            .map(|value| value.name.as_str())
            .collect();
        let operand_types: Vec<&str> = self
            .operands
            .iter()
            .map(|value| value.type_text.as_str())
            .collect();
        text.push_str(&format!(
            "{}({})",
            encode_string_literal(&self.name),
            operand_names.join(", ")
        ));
        if !self.properties.is_empty() {
            text.push_str(&format!(" <{}>", dictionary_text(&self.properties)));
        }
        if !self.attributes.is_empty() {
            text.push(' ');
            text.push_str(&dictionary_text(&self.attributes));
        }
        let results = match self.result_types.len() {
            1 => self.result_types[0].clone(),
            _ => format!("({})", self.result_types.join(", ")),
        };
        text.push_str(&format!(" : ({}) -> {results}", operand_types.join(", ")));
        if let Some(location) = &self.location_text {
            text.push(' ');
            text.push_str(location);
        }
        text
    }
}

/// Hands out value names that no value of the module (and no name handed out before) uses.
#[derive(Clone, Debug)]
pub struct ValueNamer {
    taken: HashSet<String>,
}

impl ValueNamer {
    /// A namer that avoids every value name defined in `module`.
    pub fn new(module: &TtirModule) -> Self {
        let mut taken = HashSet::new();
        for id in module.operations() {
            let operation = module.operation(id);
            taken.extend(
                operation
                    .result_groups()
                    .iter()
                    .map(|group| group.name.clone()),
            );
            taken.extend(
                operation
                    .header_definitions()
                    .iter()
                    .map(|definition| definition.name.clone()),
            );
            for region in operation.regions() {
                for block in region.blocks() {
                    taken.extend(
                        block
                            .arguments()
                            .iter()
                            .map(|argument| argument.name.clone()),
                    );
                }
            }
        }
        ValueNamer { taken }
    }

    /// `%stem` if free, else `%stem_1`, `%stem_2`, ...; the name is then taken.
    pub fn fresh(&mut self, stem: &str) -> String {
        let mut candidate = format!("%{stem}");
        let mut suffix = 1;
        while self.taken.contains(&candidate) {
            candidate = format!("%{stem}_{suffix}");
            suffix += 1;
        }
        self.taken.insert(candidate.clone());
        candidate
    }
}
