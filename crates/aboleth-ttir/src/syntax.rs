//! The parsed form of a TTIR file: a [`TtirModule`] owns the source text, an arena of
//! [`Operation`]s in source order, the top-level alias definitions, and the pending edits.
//!
//! Every node remembers the byte ranges of the text it came from, so an unmodified module prints
//! back byte for byte (see `printer.rs`). Operations are opaque beyond what the lifting step needs:
//! name, results, operands, values defined in the header (function arguments, `scf.for` induction
//! variables and iter_args), attribute dictionaries, the type signature text, the result types
//! where the syntax states them, the location, and regions with blocks. This module holds the data
//! and its plain accessors; it does not parse (`parser.rs`), print (`printer.rs`) or interpret
//! particular operations (`query.rs`).

use std::ops::Range;

use crate::error::{LineColumn, LineIndex, TtirError};
use crate::location::{FileLineColumn, Location, LocationAliases};

/// A byte range of the source.
pub(crate) type Span = Range<usize>;

/// Identifies an operation within one [`TtirModule`]. Ids follow source order (a parent comes
/// before the operations of its regions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OperationId(pub(crate) usize);

impl OperationId {
    /// The position of the operation in source order, from 0.
    pub fn index(self) -> usize {
        self.0
    }
}

/// A parsed TTIR file.
#[derive(Clone, Debug)]
pub struct TtirModule {
    pub(crate) source: String,
    pub(crate) file_name: String,
    pub(crate) line_index: LineIndex,
    pub(crate) items: Vec<TopLevelItem>,
    pub(crate) operations: Vec<Operation>,
    pub(crate) alias_definitions: Vec<AliasDefinition>,
    pub(crate) location_aliases: LocationAliases,
    pub(crate) edits: Vec<OperationEdit>,
}

/// A piece of the file outside any operation.
#[derive(Clone, Debug)]
pub(crate) enum TopLevelItem {
    /// Blank lines, comments, a `{-# ... #-}` resource blob: copied as is.
    Text(Span),
    /// An alias definition line (index into `alias_definitions`).
    Alias(usize),
    /// A top-level operation (normally the one `module`).
    Operation(OperationId),
}

/// An alias definition line: `#loc3 = loc("kernel.py":12:8)` or `!type = ...`.
#[derive(Clone, Debug)]
pub struct AliasDefinition {
    /// The alias with its sigil: `#loc3`.
    pub name: String,
    /// The text after `=`, trimmed.
    pub value_text: String,
    /// The location, when the value is `loc(...)`.
    pub location: Option<Location>,
    pub(crate) span: Span,
}

/// Changes requested for one operation; printed by `printer.rs`.
#[derive(Clone, Debug, Default)]
pub(crate) struct OperationEdit {
    pub lines_before: Vec<String>,
    pub replacement: Option<Vec<String>>,
    pub lines_after: Vec<String>,
    /// A new first line for an operation with regions (its text up to the first region).
    pub header: Option<String>,
}

/// `%name` or `%name:count` in an operation's result list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResultGroup {
    /// The name with its `%`.
    pub name: String,
    /// How many results the group holds (1 unless written `%name:N`).
    pub count: usize,
}

impl ResultGroup {
    /// How each result of the group is used in operands: `%name` for a single result,
    /// `%name#0`, `%name#1`, ... for a group.
    pub fn value_names(&self) -> Vec<String> {
        if self.count == 1 {
            vec![self.name.clone()]
        } else {
            (0..self.count)
                .map(|index| format!("{}#{index}", self.name))
                .collect()
        }
    }
}

/// A value declared with its type: a block argument (`^bb0(%arg: f32 loc(...))`), a function
/// argument, or a value defined in an operation's header (`scf.for %k = ...`, `iter_args(%a =
/// %b)`, where there is no type next to the name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValueDeclaration {
    /// The name with its `%`.
    pub name: String,
    /// The type text, when written next to the name (`%x: i32`).
    pub type_text: Option<String>,
    /// An argument attribute dictionary such as `{tt.divisibility = 16 : i32}`, as written.
    pub attributes_text: Option<String>,
    /// The argument's own location.
    pub location: Option<Location>,
}

/// One attribute dictionary of an operation: `{a = 1, b}` or the generic form's properties
/// `<{axis = 1 : i32}>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttributeDictionary {
    /// True for `<{...}>` (generic-form properties).
    pub is_properties: bool,
    /// The entries in source order.
    pub entries: Vec<Attribute>,
}

/// One entry of an attribute dictionary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attribute {
    /// The name, decoded if it was quoted (`"ttg.num-warps"`).
    pub name: String,
    /// The value text after `=`, trimmed; `None` for a unit attribute written as a bare name.
    pub value_text: Option<String>,
}

impl Attribute {
    /// The value decoded as a string literal, if it is one (`"aboleth"` gives `aboleth`).
    pub fn string_value(&self) -> Option<String> {
        let text = self.value_text.as_deref()?;
        (text.len() >= 2 && text.starts_with('"') && text.ends_with('"'))
            .then(|| crate::lexer::decode_string_literal(text))
    }

    /// The value as a boolean, if it is `true` or `false`.
    pub fn bool_value(&self) -> Option<bool> {
        match self.value_text.as_deref()? {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        }
    }
}

/// A region: `{` at the end of a line, blocks, and a closing `}`.
#[derive(Clone, Debug)]
pub struct Region {
    pub(crate) blocks: Vec<Block>,
}

impl Region {
    /// The blocks in source order. The first one has no label when its arguments (if any) are
    /// declared in the operation's header, as for `tt.func` and `scf.for`.
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }
}

/// A block: an optional label line and its operations.
#[derive(Clone, Debug)]
pub struct Block {
    pub(crate) label: Option<BlockLabel>,
    pub(crate) items: Vec<BlockItem>,
}

impl Block {
    /// The label, if the block has one.
    pub fn label(&self) -> Option<&BlockLabel> {
        self.label.as_ref()
    }

    /// The block's arguments (empty for an unlabeled block).
    pub fn arguments(&self) -> &[ValueDeclaration] {
        self.label
            .as_ref()
            .map_or(&[], |label| label.arguments.as_slice())
    }

    /// The block's operations, in order.
    pub fn operations(&self) -> impl Iterator<Item = OperationId> + '_ {
        self.items.iter().filter_map(|item| match item {
            BlockItem::Operation(id) => Some(*id),
            BlockItem::Trivia(_) => None,
        })
    }
}

/// A block label line: `^bb0(%arg1: f32 loc(unknown)):`.
#[derive(Clone, Debug)]
pub struct BlockLabel {
    /// The block name with its `^`.
    pub name: String,
    /// The block arguments.
    pub arguments: Vec<ValueDeclaration>,
    pub(crate) span: Span,
}

/// What a block holds, in source order.
#[derive(Clone, Debug)]
pub(crate) enum BlockItem {
    Operation(OperationId),
    /// A blank or comment-only line.
    Trivia(Span),
}

/// Where an operation sits: its parent, which region, which block, which item of the block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Container {
    pub parent: OperationId,
    pub region: usize,
    pub block: usize,
    pub item: usize,
}

/// One operation and the text it came from.
#[derive(Clone, Debug)]
pub struct Operation {
    pub(crate) name: String,
    pub(crate) is_generic_form: bool,
    pub(crate) result_groups: Vec<ResultGroup>,
    pub(crate) operands: Vec<String>,
    pub(crate) header_definitions: Vec<ValueDeclaration>,
    pub(crate) attribute_dictionaries: Vec<AttributeDictionary>,
    pub(crate) symbol: Option<String>,
    pub(crate) type_text: Option<String>,
    pub(crate) result_types: Option<Vec<String>>,
    pub(crate) location: Option<Location>,
    pub(crate) location_text: Option<String>,
    pub(crate) regions: Vec<Region>,
    pub(crate) container: Option<Container>,
    pub(crate) indentation: String,
    pub(crate) start_offset: usize,
    /// The operation's own text around its regions: `segments[0]`, region 0, `segments[1]`, ...
    /// Together with the regions they cover the operation's lines exactly, newlines included.
    pub(crate) segments: Vec<Span>,
}

impl Operation {
    /// The operation name as printed (`tt.load`, `scf.for`, `module`), without quotes for the
    /// generic form (`"tt.reduce"(...)` gives `tt.reduce`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the operation is written in generic form (`"tt.reduce"(%x) <{...}> ({...}) : ...`).
    pub fn is_generic_form(&self) -> bool {
        self.is_generic_form
    }

    /// The result list as written: `%a:2, %b = ...` gives two groups.
    pub fn result_groups(&self) -> &[ResultGroup] {
        &self.result_groups
    }

    /// The number of results.
    pub fn result_count(&self) -> usize {
        self.result_groups.iter().map(|group| group.count).sum()
    }

    /// How each result is referred to by its users, in result order (`%a#0`, `%a#1`, `%b`).
    pub fn result_names(&self) -> Vec<String> {
        self.result_groups
            .iter()
            .flat_map(ResultGroup::value_names)
            .collect()
    }

    /// The result types, when the syntax states them: after the last top-level `->`, after ` to `
    /// for casts, the single type of ops such as `arith.addi`, and the rules of `tt.load`,
    /// `tt.addptr`, `arith.cmpi`/`cmpf`, `arith.select`, `tt.get_program_id` and the `tt.ptr`
    /// short form of `tt.make_tensor_ptr`/`tt.advance`. `None` when the text alone does not say.
    pub fn result_types(&self) -> Option<&[String]> {
        self.result_types.as_deref()
    }

    /// The values this operation uses, as written (`%x`, `%a#1`), in source order. Values
    /// defined in the header (`%k` of `scf.for %k = ...`) are not operands.
    pub fn operands(&self) -> &[String] {
        &self.operands
    }

    /// Values defined in the operation's header and visible inside its regions: function
    /// arguments of `tt.func`, the induction variable and iter_args of `scf.for`, the
    /// before-region arguments of `scf.while`.
    pub fn header_definitions(&self) -> &[ValueDeclaration] {
        &self.header_definitions
    }

    /// The operation's attribute dictionaries (not those of function arguments).
    pub fn attribute_dictionaries(&self) -> &[AttributeDictionary] {
        &self.attribute_dictionaries
    }

    /// The first attribute named `name` in any of the operation's dictionaries.
    pub fn attribute(&self, name: &str) -> Option<&Attribute> {
        self.attribute_dictionaries
            .iter()
            .flat_map(|dictionary| dictionary.entries.iter())
            .find(|attribute| attribute.name == name)
    }

    /// The first symbol the operation names outside brackets, decoded: `@matmul` of a `tt.func`,
    /// the callee of a `tt.call`.
    pub fn symbol(&self) -> Option<&str> {
        self.symbol.as_deref()
    }

    /// The text after the last top-level ` : `, up to the location: the type signature in most
    /// custom forms (`(i64, i32) -> i64`, `i32 to i64`, `tensor<128xi32>`).
    pub fn type_text(&self) -> Option<&str> {
        self.type_text.as_deref()
    }

    /// The trailing location, parsed.
    pub fn location(&self) -> Option<&Location> {
        self.location.as_ref()
    }

    /// The trailing location exactly as written (`loc(#loc12)`), to reuse on replacement ops.
    pub fn location_text(&self) -> Option<&str> {
        self.location_text.as_deref()
    }

    /// The operation's regions.
    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    /// The operation whose region holds this one; `None` at top level.
    pub fn parent(&self) -> Option<OperationId> {
        self.container.map(|container| container.parent)
    }

    /// The whitespace before the operation on its first line.
    pub fn indentation(&self) -> &str {
        &self.indentation
    }
}

impl TtirModule {
    /// The text the module was parsed from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The file name used in errors.
    pub fn file_name(&self) -> &str {
        &self.file_name
    }

    /// The operation `id`.
    ///
    /// # Panics
    ///
    /// If `id` comes from another module and is out of range.
    pub fn operation(&self, id: OperationId) -> &Operation {
        &self.operations[id.0]
    }

    /// Every operation in source order (a parent before its regions' operations).
    pub fn operations(&self) -> impl Iterator<Item = OperationId> + '_ {
        (0..self.operations.len()).map(OperationId)
    }

    /// The operations named `name`, in source order.
    pub fn operations_named<'module>(
        &'module self,
        name: &'module str,
    ) -> impl Iterator<Item = OperationId> + 'module {
        self.operations()
            .filter(move |&id| self.operations[id.0].name == name)
    }

    /// The operations at top level (normally the one `module`).
    pub fn top_level_operations(&self) -> impl Iterator<Item = OperationId> + '_ {
        self.items.iter().filter_map(|item| match item {
            TopLevelItem::Operation(id) => Some(*id),
            _ => None,
        })
    }

    /// The alias definition lines (`#loc3 = loc(...)`), in source order.
    pub fn alias_definitions(&self) -> &[AliasDefinition] {
        &self.alias_definitions
    }

    /// The location aliases, to resolve [`Location`]s.
    pub fn location_aliases(&self) -> &LocationAliases {
        &self.location_aliases
    }

    /// Where operation `id` starts in the TTIR text (its first token, after the indentation).
    pub fn text_position(&self, id: OperationId) -> LineColumn {
        self.line_index
            .line_column(&self.source, self.operations[id.0].start_offset)
    }

    /// An error pointing at operation `id` in the TTIR text.
    pub fn error_at_operation(&self, id: OperationId, message: impl Into<String>) -> TtirError {
        self.line_index.error_at(
            &self.file_name,
            &self.source,
            self.operations[id.0].start_offset,
            message.into(),
        )
    }

    /// The innermost Python source position of operation `id`, from its location.
    pub fn source_position(&self, id: OperationId) -> Option<FileLineColumn> {
        self.operations[id.0]
            .location
            .as_ref()
            .and_then(|location| self.location_aliases.file_line_column(location))
    }

    /// The Python source positions of operation `id`, innermost first (inlined helpers first,
    /// then their call sites).
    pub fn source_call_stack(&self, id: OperationId) -> Vec<FileLineColumn> {
        self.operations[id.0]
            .location
            .as_ref()
            .map(|location| self.location_aliases.call_stack(location))
            .unwrap_or_default()
    }
}
