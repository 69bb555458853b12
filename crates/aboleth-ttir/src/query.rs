//! Questions the lifting step asks of a parsed module: which operations are `tt.extern_elementwise`
//! calls into a library (and their `libname`/`symbol`/`pure`), the shape of an `scf.for`, the
//! functions, and which operation or argument defines a value used at a given operation.
//!
//! Value lookup follows the scoping of structured control flow (earlier operations of the same
//! block, the block's arguments, the enclosing operation's header definitions, then outwards); it
//! does not model unstructured control flow between blocks, which TTIR does not use beyond
//! unreachable `^bb1:  // no predecessors` blocks left by early returns.

use crate::syntax::{BlockItem, Operation, OperationId, TtirModule};

/// The library call of a `tt.extern_elementwise` operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExternElementwise {
    /// The `libname` attribute (`aboleth` for our builtins).
    pub libname: String,
    /// The `libpath` attribute.
    pub libpath: String,
    /// The called function.
    pub symbol: String,
    /// The `pure` attribute.
    pub pure: bool,
}

/// The parts of an `scf.for` header:
/// `scf.for %k = %lower to %upper step %step iter_args(%a = %init) -> (T) : i32 {`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForLoop {
    /// The induction variable, with its `%`.
    pub induction_variable: String,
    /// The lower bound operand.
    pub lower_bound: String,
    /// The upper bound operand.
    pub upper_bound: String,
    /// The step operand.
    pub step: String,
    /// The loop-carried values in order.
    pub iter_args: Vec<IterArg>,
    /// The induction variable's type (after the header's `:`), if written.
    pub induction_type: Option<String>,
}

/// One loop-carried value of an `scf.for`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IterArg {
    /// The name inside the loop body.
    pub name: String,
    /// The value it starts from.
    pub initial_value: String,
    /// Its type (the matching result type of the loop), if known.
    pub type_text: Option<String>,
}

/// What defines a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueDefinition {
    /// Result `result_index` (counting across result groups) of `operation`.
    Result {
        /// The defining operation.
        operation: OperationId,
        /// Which result.
        result_index: usize,
    },
    /// Argument `argument_index` of a labeled block of `operation`'s region.
    BlockArgument {
        /// The operation owning the region.
        operation: OperationId,
        /// Which region of it.
        region: usize,
        /// Which block of the region.
        block: usize,
        /// Which argument of the block.
        argument_index: usize,
    },
    /// Header definition `index` of `operation` (a function argument, an `scf.for` induction
    /// variable or iter_arg, an `scf.while` before-region argument).
    HeaderDefinition {
        /// The operation whose header declares the value.
        operation: OperationId,
        /// Which header definition.
        index: usize,
    },
}

impl Operation {
    /// The library call, if this is a `tt.extern_elementwise` with string `libname` and
    /// `symbol` and a boolean `pure` (in either attribute dictionary or generic-form properties).
    pub fn extern_elementwise(&self) -> Option<ExternElementwise> {
        if self.name() != "tt.extern_elementwise" {
            return None;
        }
        Some(ExternElementwise {
            libname: self.attribute("libname")?.string_value()?,
            libpath: self
                .attribute("libpath")
                .and_then(|attribute| attribute.string_value())
                .unwrap_or_default(),
            symbol: self.attribute("symbol")?.string_value()?,
            pure: self.attribute("pure")?.bool_value()?,
        })
    }

    /// The header of an `scf.for`, if this is one written in the usual custom form.
    pub fn scf_for(&self) -> Option<ForLoop> {
        if self.name() != "scf.for" {
            return None;
        }
        let definitions = self.header_definitions();
        let operands = self.operands();
        let (induction_variable, iter_arg_names) = definitions.split_first()?;
        if operands.len() != 3 + iter_arg_names.len() {
            return None;
        }
        let result_types = self.result_types();
        let iter_args = iter_arg_names
            .iter()
            .zip(&operands[3..])
            .enumerate()
            .map(|(index, (definition, initial_value))| IterArg {
                name: definition.name.clone(),
                initial_value: initial_value.clone(),
                type_text: result_types.and_then(|types| types.get(index).cloned()),
            })
            .collect();
        Some(ForLoop {
            induction_variable: induction_variable.name.clone(),
            lower_bound: operands[0].clone(),
            upper_bound: operands[1].clone(),
            step: operands[2].clone(),
            iter_args,
            induction_type: self.type_text().map(str::to_string),
        })
    }
}

/// `%a#1` gives (`%a`, Some(1)); `%a` gives (`%a`, None).
fn split_value_use(value: &str) -> (&str, Option<usize>) {
    match value.split_once('#') {
        Some((base, index)) => (base, index.parse().ok()),
        None => (value, None),
    }
}

impl TtirModule {
    /// The `tt.func` operations, in source order.
    pub fn functions(&self) -> impl Iterator<Item = OperationId> + '_ {
        self.operations_named("tt.func")
    }

    /// The `tt.extern_elementwise` operations whose `libname` is `libname`, in source order.
    pub fn extern_calls_in_library<'module>(
        &'module self,
        libname: &'module str,
    ) -> impl Iterator<Item = OperationId> + 'module {
        self.operations_named("tt.extern_elementwise")
            .filter(move |&id| {
                self.operation(id)
                    .extern_elementwise()
                    .is_some_and(|call| call.libname == libname)
            })
    }

    /// What defines `value` (as written in an operand: `%x`, `%a#1`) where operation `user` uses
    /// it. `None` if nothing in scope defines it.
    pub fn find_definition(&self, user: OperationId, value: &str) -> Option<ValueDefinition> {
        let (base, result_index) = split_value_use(value);
        let mut current = user;
        loop {
            let container = self.operations[current.0].container?;
            let parent = &self.operations[container.parent.0];
            let block = &parent.regions[container.region].blocks[container.block];
            for item in block.items[..container.item].iter().rev() {
                let BlockItem::Operation(candidate) = item else {
                    continue;
                };
                let mut first_result = 0;
                for group in self.operations[candidate.0].result_groups() {
                    if group.name == base {
                        let index = match result_index {
                            Some(index) if index < group.count => index,
                            None if group.count == 1 => 0,
                            _ => return None,
                        };
                        return Some(ValueDefinition::Result {
                            operation: *candidate,
                            result_index: first_result + index,
                        });
                    }
                    first_result += group.count;
                }
            }
            if result_index.is_none() {
                if let Some(argument_index) = block
                    .arguments()
                    .iter()
                    .position(|argument| argument.name == base)
                {
                    return Some(ValueDefinition::BlockArgument {
                        operation: container.parent,
                        region: container.region,
                        block: container.block,
                        argument_index,
                    });
                }
                if let Some(index) = parent
                    .header_definitions()
                    .iter()
                    .position(|definition| definition.name == base)
                {
                    return Some(ValueDefinition::HeaderDefinition {
                        operation: container.parent,
                        index,
                    });
                }
            }
            current = container.parent;
        }
    }
}
