//! MLIR source locations as Triton 3.6 prints them, and their resolution to `file:line:column`.
//!
//! Triton prints `loc(#loc3)` after each operation and defines the aliases in lines such as
//! `#loc3 = loc("kernel.py":12:8)` before and after the module. The forms that occur are a file
//! position, `unknown`, a name with or without a child (`"token"(#loc13)`: Triton names a location
//! after the Python variable the value was assigned to), `callsite(callee at caller)` for inlined
//! code, and `fused[...]`. This module parses them into [`Location`] and resolves alias chains; it
//! does not keep the location's text (the printer copies the original bytes).

use std::collections::HashMap;
use std::fmt;

use crate::error::{LineIndex, TtirError};
use crate::lexer::{Token, TokenKind, decode_string_literal};

/// How deeply locations may nest (`callsite` inside `callsite` ...) or chain through aliases
/// before the parser or the resolver gives up: a guard against cycles and stack exhaustion on
/// hostile input. Triton's own nesting is a handful of levels.
const LOCATION_DEPTH_LIMIT: usize = 64;

/// A parsed location.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// `unknown`.
    Unknown,
    /// `"file":line:column` (a range `... to line:column` keeps only its start).
    FilePosition(FileLineColumn),
    /// `"name"` or `"name"(child)`.
    Name {
        /// The decoded name.
        name: String,
        /// The child location, if any.
        child: Option<Box<Location>>,
    },
    /// `callsite(callee at caller)`: code inlined from `callee`, called at `caller`.
    CallSite {
        /// Where the code was written (inside the called function).
        callee: Box<Location>,
        /// Where the call was made.
        caller: Box<Location>,
    },
    /// `fused[a, b]` or `fused<metadata>[a, b]`.
    Fused(Vec<Location>),
    /// A reference to an alias defined elsewhere in the file: `#loc3`.
    Alias(String),
}

/// A resolved position in a source file.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileLineColumn {
    /// The file name, decoded from its string literal.
    pub file: String,
    /// 1-based line (0 is what Triton prints for a function's own location column).
    pub line: u32,
    /// Column as printed (Triton's columns are 0-based for functions, 1-based otherwise).
    pub column: u32,
}

impl fmt::Display for FileLineColumn {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}:{}:{}", self.file, self.line, self.column)
    }
}

impl Location {
    /// Every alias this location refers to directly (not through other aliases).
    pub fn referenced_aliases(&self) -> Vec<&str> {
        let mut aliases = Vec::new();
        self.collect_aliases(&mut aliases);
        aliases
    }

    fn collect_aliases<'location>(&'location self, aliases: &mut Vec<&'location str>) {
        match self {
            Location::Alias(name) => aliases.push(name),
            Location::Name {
                child: Some(child), ..
            } => child.collect_aliases(aliases),
            Location::CallSite { callee, caller } => {
                callee.collect_aliases(aliases);
                caller.collect_aliases(aliases);
            }
            Location::Fused(locations) => {
                for location in locations {
                    location.collect_aliases(aliases);
                }
            }
            Location::Unknown | Location::FilePosition(_) | Location::Name { child: None, .. } => {}
        }
    }
}

/// The location aliases of one file (`#loc3 = loc(...)`), for resolution.
#[derive(Clone, Debug, Default)]
pub struct LocationAliases {
    aliases: HashMap<String, Location>,
}

impl LocationAliases {
    /// Defines `name` (with its `#`). Returns false if it was already defined.
    pub(crate) fn define(&mut self, name: String, location: Location) -> bool {
        if self.aliases.contains_key(&name) {
            return false;
        }
        self.aliases.insert(name, location);
        true
    }

    /// Whether `name` (with its `#`) is defined.
    pub fn is_defined(&self, name: &str) -> bool {
        self.aliases.contains_key(name)
    }

    /// The location an alias stands for, if defined.
    pub fn get(&self, name: &str) -> Option<&Location> {
        self.aliases.get(name)
    }

    /// The source positions of `location`, innermost first: for code inlined from a helper, the
    /// helper's line comes first and the call sites follow. Unknown parts, names without a
    /// position and undefined aliases contribute nothing; a `fused` location contributes its
    /// first part that has a position.
    pub fn call_stack(&self, location: &Location) -> Vec<FileLineColumn> {
        let mut frames = Vec::new();
        self.collect_frames(location, 0, &mut frames);
        frames
    }

    /// The innermost source position of `location` (MLIR's convention for a call site is the
    /// callee); `None` when it has none.
    pub fn file_line_column(&self, location: &Location) -> Option<FileLineColumn> {
        self.call_stack(location).into_iter().next()
    }

    /// The outermost name of `location` (`"token"(...)` gives `token`): Triton's name for the
    /// Python variable the value was assigned to.
    pub fn name(&self, location: &Location) -> Option<String> {
        let mut current = location;
        for _ in 0..LOCATION_DEPTH_LIMIT {
            match current {
                Location::Name { name, .. } => return Some(name.clone()),
                Location::Alias(alias) => current = self.aliases.get(alias)?,
                _ => return None,
            }
        }
        None
    }

    fn collect_frames(&self, location: &Location, depth: usize, frames: &mut Vec<FileLineColumn>) {
        if depth >= LOCATION_DEPTH_LIMIT {
            return;
        }
        match location {
            Location::Unknown | Location::Name { child: None, .. } => {}
            Location::FilePosition(position) => frames.push(position.clone()),
            Location::Name {
                child: Some(child), ..
            } => self.collect_frames(child, depth + 1, frames),
            Location::CallSite { callee, caller } => {
                self.collect_frames(callee, depth + 1, frames);
                self.collect_frames(caller, depth + 1, frames);
            }
            Location::Fused(locations) => {
                for part in locations {
                    let before = frames.len();
                    self.collect_frames(part, depth + 1, frames);
                    if frames.len() > before {
                        break;
                    }
                }
            }
            Location::Alias(name) => {
                if let Some(target) = self.aliases.get(name) {
                    self.collect_frames(target, depth + 1, frames);
                }
            }
        }
    }
}

/// Parses the tokens between `loc(` and its `)` into a [`Location`].
pub(crate) struct LocationParser<'input> {
    pub source: &'input str,
    pub file_name: &'input str,
    pub line_index: &'input LineIndex,
    pub tokens: &'input [Token],
    pub index: usize,
    /// Where to report an error at the end of the tokens (the closing `)`).
    pub end_offset: usize,
}

impl LocationParser<'_> {
    /// Parses the whole token list as one location.
    pub fn parse_all(mut self) -> Result<Location, TtirError> {
        let location = self.parse_location(0)?;
        if let Some(token) = self.tokens.get(self.index) {
            return Err(self.error(
                token.start,
                format!(
                    "expected ')' after the location, found '{}'",
                    token.text(self.source)
                ),
            ));
        }
        Ok(location)
    }

    fn error(&self, offset: usize, message: String) -> TtirError {
        self.line_index
            .error_at(self.file_name, self.source, offset, message)
    }

    fn peek(&self) -> Option<Token> {
        self.tokens.get(self.index).copied()
    }

    /// The offset of the next token, or of the end, for errors.
    fn next_offset(&self) -> usize {
        self.peek().map_or(self.end_offset, |token| token.start)
    }

    fn found(&self) -> String {
        self.peek().map_or("')'".to_string(), |token| {
            format!("'{}'", token.text(self.source))
        })
    }

    fn expect_punctuation(&mut self, byte: u8, context: &str) -> Result<(), TtirError> {
        match self.peek() {
            Some(token) if token.is_punctuation(self.source, byte) => {
                self.index += 1;
                Ok(())
            }
            _ => Err(self.error(
                self.next_offset(),
                format!(
                    "expected '{}' {context}, found {}",
                    byte as char,
                    self.found()
                ),
            )),
        }
    }

    fn expect_number(&mut self, what: &str) -> Result<u32, TtirError> {
        match self.peek() {
            Some(token) if token.kind == TokenKind::Number => {
                self.index += 1;
                token.text(self.source).parse::<u32>().map_err(|_| {
                    self.error(
                        token.start,
                        format!(
                            "expected a {what} number, found '{}'",
                            token.text(self.source)
                        ),
                    )
                })
            }
            _ => Err(self.error(
                self.next_offset(),
                format!("expected a {what} number, found {}", self.found()),
            )),
        }
    }

    fn parse_location(&mut self, depth: usize) -> Result<Location, TtirError> {
        if depth >= LOCATION_DEPTH_LIMIT {
            return Err(self.error(
                self.next_offset(),
                format!("location nested deeper than {LOCATION_DEPTH_LIMIT} levels"),
            ));
        }
        let Some(token) = self.peek() else {
            return Err(self.error(
                self.end_offset,
                "expected a location (a \"file\":line:column, 'unknown', a \"name\", \
                 'callsite(...)', 'fused[...]' or '#alias'), found ')'"
                    .to_string(),
            ));
        };
        self.index += 1;
        match token.kind {
            TokenKind::AttributeAlias => Ok(Location::Alias(token.text(self.source).to_string())),
            TokenKind::Identifier if token.is_identifier(self.source, "unknown") => {
                Ok(Location::Unknown)
            }
            TokenKind::Identifier if token.is_identifier(self.source, "callsite") => {
                self.expect_punctuation(b'(', "after 'callsite'")?;
                let callee = self.parse_location(depth + 1)?;
                match self.peek() {
                    Some(at) if at.is_identifier(self.source, "at") => self.index += 1,
                    _ => {
                        return Err(self.error(
                            self.next_offset(),
                            format!(
                                "expected 'at' between the callee and the caller of \
                                 'callsite(...)', found {}",
                                self.found()
                            ),
                        ));
                    }
                }
                let caller = self.parse_location(depth + 1)?;
                self.expect_punctuation(b')', "to close 'callsite('")?;
                Ok(Location::CallSite {
                    callee: Box::new(callee),
                    caller: Box::new(caller),
                })
            }
            TokenKind::Identifier if token.is_identifier(self.source, "fused") => {
                if self
                    .peek()
                    .is_some_and(|next| next.is_punctuation(self.source, b'<'))
                {
                    self.skip_angle_group()?;
                }
                self.expect_punctuation(b'[', "after 'fused'")?;
                let mut parts = Vec::new();
                loop {
                    parts.push(self.parse_location(depth + 1)?);
                    match self.peek() {
                        Some(next) if next.is_punctuation(self.source, b',') => self.index += 1,
                        Some(next) if next.is_punctuation(self.source, b']') => {
                            self.index += 1;
                            break;
                        }
                        _ => {
                            return Err(self.error(
                                self.next_offset(),
                                format!(
                                    "expected ',' or ']' in 'fused[...]', found {}",
                                    self.found()
                                ),
                            ));
                        }
                    }
                }
                Ok(Location::Fused(parts))
            }
            TokenKind::String => {
                let text = decode_string_literal(token.text(self.source));
                match self.peek() {
                    Some(next) if next.is_punctuation(self.source, b':') => {
                        self.index += 1;
                        let line = self.expect_number("line")?;
                        self.expect_punctuation(b':', "between the line and the column")?;
                        let column = self.expect_number("column")?;
                        self.skip_range_end()?;
                        Ok(Location::FilePosition(FileLineColumn {
                            file: text,
                            line,
                            column,
                        }))
                    }
                    Some(next) if next.is_punctuation(self.source, b'(') => {
                        self.index += 1;
                        let child = self.parse_location(depth + 1)?;
                        self.expect_punctuation(b')', "to close the named location")?;
                        Ok(Location::Name {
                            name: text,
                            child: Some(Box::new(child)),
                        })
                    }
                    _ => Ok(Location::Name {
                        name: text,
                        child: None,
                    }),
                }
            }
            _ => Err(self.error(
                token.start,
                format!(
                    "expected a location (a \"file\":line:column, 'unknown', a \"name\", \
                     'callsite(...)', 'fused[...]' or '#alias'), found '{}'",
                    token.text(self.source)
                ),
            )),
        }
    }

    /// Skips the end of a range location: `to 12:4`, `to :4`.
    fn skip_range_end(&mut self) -> Result<(), TtirError> {
        if !self
            .peek()
            .is_some_and(|token| token.is_identifier(self.source, "to"))
        {
            return Ok(());
        }
        self.index += 1;
        if self
            .peek()
            .is_some_and(|token| token.kind == TokenKind::Number)
        {
            self.index += 1;
        }
        self.expect_punctuation(b':', "in the end of a location range")?;
        self.expect_number("column")?;
        Ok(())
    }

    /// Skips a balanced `<...>` group (the metadata of `fused<...>`).
    fn skip_angle_group(&mut self) -> Result<(), TtirError> {
        let mut depth = 0usize;
        while let Some(token) = self.peek() {
            self.index += 1;
            if token.is_punctuation(self.source, b'<') {
                depth += 1;
            } else if token.is_punctuation(self.source, b'>') {
                depth -= 1;
                if depth == 0 {
                    return Ok(());
                }
            }
        }
        Err(self.error(
            self.end_offset,
            "expected '>' to close 'fused<'".to_string(),
        ))
    }
}
