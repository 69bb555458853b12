//! Printing a [`TtirModule`] back to text, and the edits that change what is printed.
//!
//! Untouched text is copied from the source byte for byte: an unmodified module prints exactly
//! the text it was parsed from, and after edits every line outside the edited operations is
//! unchanged. An edit replaces an operation (with its regions) by new lines, or inserts lines
//! before or after it; new lines get the indentation of the operation they are anchored to and
//! are otherwise printed as given (build them with `canonical.rs`). Edits do not re-parse: to
//! query the edited program, print and parse again.

use crate::syntax::{BlockItem, OperationId, Region, TopLevelItem, TtirModule};

impl TtirModule {
    /// The module as text: the source where nothing was edited, the edits applied otherwise.
    pub fn print(&self) -> String {
        let mut output = String::with_capacity(self.source.len());
        for item in &self.items {
            match item {
                TopLevelItem::Text(span) => output.push_str(&self.source[span.clone()]),
                TopLevelItem::Alias(index) => {
                    output.push_str(&self.source[self.alias_definitions[*index].span.clone()]);
                }
                TopLevelItem::Operation(id) => self.print_operation(*id, &mut output),
            }
        }
        output
    }

    /// Replaces operation `id`, its regions included, by `lines` (each printed with the
    /// operation's indentation and a newline). An empty `lines` erases the operation. A later
    /// call replaces the earlier replacement.
    pub fn replace_operation(&mut self, id: OperationId, lines: Vec<String>) {
        self.edits[id.0].replacement = Some(lines);
    }

    /// Erases operation `id` and its regions.
    pub fn erase_operation(&mut self, id: OperationId) {
        self.replace_operation(id, Vec::new());
    }

    /// Inserts `lines` before operation `id`, after any lines inserted before it earlier.
    pub fn insert_lines_before(&mut self, id: OperationId, lines: Vec<String>) {
        self.edits[id.0].lines_before.extend(lines);
    }

    /// Inserts `lines` after operation `id` (after its regions), after any lines inserted after
    /// it earlier.
    pub fn insert_lines_after(&mut self, id: OperationId, lines: Vec<String>) {
        self.edits[id.0].lines_after.extend(lines);
    }

    /// Replaces the first line of operation `id`, which must open a region (its text up to
    /// and including the `{` ending that line, e.g. an `scf.for` header), by `line`, printed
    /// with the operation's indentation. The regions and the rest print as before.
    pub fn replace_header(&mut self, id: OperationId, line: String) {
        debug_assert!(
            !self.operations[id.0].regions.is_empty(),
            "replace_header needs an operation with a region"
        );
        self.edits[id.0].header = Some(line);
    }

    /// Whether any edit is pending.
    pub fn is_edited(&self) -> bool {
        self.edits.iter().any(|edit| {
            edit.replacement.is_some()
                || edit.header.is_some()
                || !edit.lines_before.is_empty()
                || !edit.lines_after.is_empty()
        })
    }

    fn print_operation(&self, id: OperationId, output: &mut String) {
        let operation = &self.operations[id.0];
        let edit = &self.edits[id.0];
        let push_lines = |output: &mut String, lines: &[String]| {
            for line in lines {
                // The source may end without a newline; new lines must still start on their own.
                if !output.is_empty() && !output.ends_with('\n') {
                    output.push('\n');
                }
                if !line.is_empty() {
                    output.push_str(&operation.indentation);
                    output.push_str(line);
                }
                output.push('\n');
            }
        };
        push_lines(output, &edit.lines_before);
        match &edit.replacement {
            Some(lines) => push_lines(output, lines),
            None => {
                for (index, segment) in operation.segments.iter().enumerate() {
                    match &edit.header {
                        Some(line) if index == 0 && !operation.regions.is_empty() => {
                            output.push_str(&operation.indentation);
                            output.push_str(line);
                            output.push('\n');
                        }
                        _ => output.push_str(&self.source[segment.clone()]),
                    }
                    if let Some(region) = operation.regions.get(index) {
                        self.print_region(region, output);
                    }
                }
            }
        }
        push_lines(output, &edit.lines_after);
    }

    fn print_region(&self, region: &Region, output: &mut String) {
        for block in &region.blocks {
            if let Some(label) = &block.label {
                output.push_str(&self.source[label.span.clone()]);
            }
            for item in &block.items {
                match item {
                    BlockItem::Operation(id) => self.print_operation(*id, output),
                    BlockItem::Trivia(span) => output.push_str(&self.source[span.clone()]),
                }
            }
        }
    }
}
