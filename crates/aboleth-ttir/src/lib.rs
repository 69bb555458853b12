//! The TTIR bridge: a lossless parser and printer for the TTIR text Triton 3.6 prints
//! (`module.str()` at the `ttir` stage), with the queries the lifting step needs and an edit API
//! whose output changes only the edited lines.
//!
//! ```
//! use aboleth_ttir::TtirModule;
//!
//! let text = "module {\n  tt.func public @k(%x: i64 loc(unknown)) attributes {noinline = false} {\n    %0 = tt.extern_elementwise %x {libname = \"aboleth\", libpath = \"\", pure = false, symbol = \"__aboleth_v1__wait\"} : (i64) -> i32 loc(unknown)\n    tt.return loc(unknown)\n  } loc(unknown)\n} loc(unknown)\n";
//! let module = TtirModule::parse(text, "kernel.ttir").unwrap();
//! assert_eq!(module.print(), text); // lossless
//! let call = module.extern_calls_in_library("aboleth").next().unwrap();
//! assert_eq!(module.operation(call).operands(), ["%x"]);
//! assert_eq!(module.operation(call).result_types().unwrap(), ["i32"]);
//! ```
//!
//! What it does: reads module, functions, operations (custom and generic form), regions, blocks,
//! attribute dictionaries and locations into a [`TtirModule`]; keeps the byte range of every
//! piece so that printing an unmodified module gives its input byte for byte; resolves locations
//! to `file:line:column`; finds value definitions; and prints edits (replace, insert before or
//! after, erase) with untouched lines unchanged. Errors are [`TtirError`]s, `file:line:column:
//! error: ...`, and the parser never panics on malformed input.
//!
//! What it does not do: verify types or SSA dominance, know any dialect's full syntax (an
//! operation it does not know keeps its text and the facts every operation shares), or lift to
//! the Aboleth IR (the next step builds on these queries).

mod canonical;
mod error;
mod lexer;
mod location;
mod parser;
mod printer;
mod query;
mod syntax;
mod types;

pub use canonical::{ExternElementwiseCall, GenericOperation, TypedValue, ValueNamer};
pub use error::{LineColumn, TtirError};
pub use lexer::{decode_string_literal, encode_string_literal};
pub use location::{FileLineColumn, Location, LocationAliases};
pub use query::{ExternElementwise, ForLoop, IterArg, ValueDefinition};
pub use syntax::{
    AliasDefinition, Attribute, AttributeDictionary, Block, BlockLabel, Operation, OperationId,
    Region, ResultGroup, TtirModule, ValueDeclaration,
};
