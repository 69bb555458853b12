//! The crate's one error type, [`TtirError`] (`file:line:column: error: message`, the same form
//! as `aboleth_ir::text::Diagnostic`), and the byte-offset to line/column conversion behind it.
//!
//! It does not decide what is an error: the parser and the queries build messages that name what
//! was expected and what was found.

use std::fmt;

/// An error at a position in TTIR text: `file:line:column: error: message`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TtirError {
    /// The file name the text was parsed under (a path, or `<input>`).
    pub file: String,
    /// 1-based line; 0 when the error has no position.
    pub line: u32,
    /// 1-based column in characters; 0 when the error has no position.
    pub column: u32,
    /// What was expected, and what was found.
    pub message: String,
}

impl fmt::Display for TtirError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(formatter, "{}: error: {}", self.file, self.message)
        } else {
            write!(
                formatter,
                "{}:{}:{}: error: {}",
                self.file, self.line, self.column, self.message
            )
        }
    }
}

impl std::error::Error for TtirError {}

/// A 1-based line and column (in characters) in a text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LineColumn {
    /// 1-based line.
    pub line: u32,
    /// 1-based column, counted in characters.
    pub column: u32,
}

impl fmt::Display for LineColumn {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}:{}", self.line, self.column)
    }
}

/// The byte offsets where lines start, to turn offsets into line and column numbers.
#[derive(Clone, Debug)]
pub(crate) struct LineIndex {
    line_starts: Vec<usize>,
}

impl LineIndex {
    /// Indexes the line starts of `source`.
    pub fn new(source: &str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(
            source
                .bytes()
                .enumerate()
                .filter(|&(_, byte)| byte == b'\n')
                .map(|(offset, _)| offset + 1),
        );
        LineIndex { line_starts }
    }

    /// The line and column of byte `offset` (a `char` boundary of `source`).
    pub fn line_column(&self, source: &str, offset: usize) -> LineColumn {
        let offset = offset.min(source.len());
        let line_number = self.line_starts.partition_point(|&start| start <= offset);
        let line_start = self.line_starts[line_number.saturating_sub(1)];
        // Offsets come from token boundaries, which are `char` boundaries; `get` keeps this
        // panic-free even if one were not.
        let column = source
            .get(line_start..offset)
            .map_or(offset - line_start, |prefix| prefix.chars().count());
        LineColumn {
            line: u32::try_from(line_number).unwrap_or(u32::MAX),
            column: u32::try_from(column + 1).unwrap_or(u32::MAX),
        }
    }

    /// An error at byte `offset`.
    pub fn error_at(
        &self,
        file_name: &str,
        source: &str,
        offset: usize,
        message: String,
    ) -> TtirError {
        let position = self.line_column(source, offset);
        TtirError {
            file: file_name.to_string(),
            line: position.line,
            column: position.column,
            message,
        }
    }
}
