//! Tokens of MLIR text as Triton 3.6 prints it: value names (`%x`, `%x#1`), block names
//! (`^bb0`), symbols (`@f`, `@"quoted"`), attribute and type aliases (`#loc3`, `!tt.ptr`), bare
//! identifiers, numbers, string literals, punctuation and newlines.
//!
//! The lexer only finds token boundaries; it does not interpret types or attributes (a type such
//! as `tensor<128x64xf16>` is several tokens, and only its brackets matter to the parser).
//! Spaces, tabs, carriage returns and `//` comments are skipped, but they stay in the source, so
//! the printer can reproduce them byte for byte. Newlines are tokens because Triton prints one
//! operation per line. Every token boundary is a `char` boundary, so slicing the source at token
//! boundaries never panics, whatever bytes the input holds.

use crate::error::{LineIndex, TtirError};

/// What a token is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TokenKind {
    /// `%name`, `%0`, `%c-1_i64`, or a use of one result of a group: `%name#1`.
    ValueName,
    /// `^bb0`.
    BlockName,
    /// `@name` or `@"quoted name"`.
    SymbolName,
    /// `#loc3`, `#ttg.blocked`: an attribute alias or dialect attribute prefix.
    AttributeAlias,
    /// `!tt.ptr`: a type alias or dialect type prefix.
    TypeAlias,
    /// A bare identifier: `tt.load`, `loc`, `to`, `i32`, `x64xf16`.
    Identifier,
    /// An integer or float literal, optionally negative: `16`, `-1`, `1.0e+00`, `0xFF800000`.
    Number,
    /// A string literal with its quotes.
    String,
    /// `->`.
    Arrow,
    /// One punctuation byte: `( ) [ ] { } < > , : = * ?` and anything else outside the other kinds
    /// (a non-ASCII character outside a string is one `Punctuation` token of its full length).
    Punctuation,
    /// The end of a line (the `\n` byte).
    Newline,
    /// The end of the text (an empty token).
    EndOfFile,
}

/// A token: its kind and byte range in the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Token {
    pub kind: TokenKind,
    pub start: usize,
    pub end: usize,
}

impl Token {
    /// Whether this is the one-byte punctuation token `byte`.
    pub fn is_punctuation(&self, source: &str, byte: u8) -> bool {
        self.kind == TokenKind::Punctuation && source.as_bytes()[self.start] == byte
    }

    /// Whether this is the bare identifier `word`.
    pub fn is_identifier(&self, source: &str, word: &str) -> bool {
        self.kind == TokenKind::Identifier && &source[self.start..self.end] == word
    }

    /// The token's text.
    pub fn text<'source>(&self, source: &'source str) -> &'source str {
        &source[self.start..self.end]
    }
}

/// A cursor over the source that produces tokens on demand.
#[derive(Clone)]
pub(crate) struct Lexer<'source> {
    source: &'source str,
    position: usize,
}

/// Bytes that may continue an MLIR suffix id (`%`, `^`, `#`, `!` names): letters, digits, `$._-`.
fn is_suffix_id_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'$' | b'.' | b'_' | b'-')
}

/// Bytes that may continue a bare identifier: letters, digits, `$._`.
fn is_identifier_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'$' | b'.' | b'_')
}

impl<'source> Lexer<'source> {
    /// A lexer at the start of `source`.
    pub fn new(source: &'source str) -> Self {
        Lexer {
            source,
            position: 0,
        }
    }

    /// The byte offset of the next unread byte (always a `char` boundary).
    pub fn position(&self) -> usize {
        self.position
    }

    /// Moves to `position`, which must come from [`Lexer::position`] or a token boundary.
    pub fn set_position(&mut self, position: usize) {
        self.position = position;
    }

    /// The next token, without consuming it.
    pub fn peek(&self, file_name: &str, line_index: &LineIndex) -> Result<Token, TtirError> {
        self.clone().next_token(file_name, line_index)
    }

    /// Skips spaces, tabs, carriage returns and `//` comments (never a newline).
    fn skip_blanks(&mut self) {
        let bytes = self.source.as_bytes();
        while self.position < bytes.len() {
            match bytes[self.position] {
                b' ' | b'\t' | b'\r' => self.position += 1,
                b'/' if bytes.get(self.position + 1) == Some(&b'/') => {
                    while self.position < bytes.len() && bytes[self.position] != b'\n' {
                        self.position += 1;
                    }
                }
                _ => break,
            }
        }
    }

    /// Advances over bytes satisfying `predicate` (all ASCII, so the end is a `char` boundary).
    fn advance_while(&mut self, predicate: fn(u8) -> bool) {
        let bytes = self.source.as_bytes();
        while self.position < bytes.len() && predicate(bytes[self.position]) {
            self.position += 1;
        }
    }

    /// Reads the next token. Errors only for malformed strings and empty sigils (`%` alone).
    pub fn next_token(
        &mut self,
        file_name: &str,
        line_index: &LineIndex,
    ) -> Result<Token, TtirError> {
        self.skip_blanks();
        let bytes = self.source.as_bytes();
        let start = self.position;
        let token = |kind, end| Token { kind, start, end };
        let Some(&first) = bytes.get(start) else {
            return Ok(token(TokenKind::EndOfFile, start));
        };
        let error = |offset: usize, message: String| {
            Err(line_index.error_at(file_name, self.source, offset, message))
        };
        match first {
            b'\n' => {
                self.position += 1;
                Ok(token(TokenKind::Newline, self.position))
            }
            b'"' => {
                self.read_string_body(start, file_name, line_index)?;
                Ok(token(TokenKind::String, self.position))
            }
            b'%' | b'^' | b'#' | b'!' => {
                self.position += 1;
                self.advance_while(is_suffix_id_byte);
                if self.position == start + 1 {
                    if first == b'!' || first == b'#' {
                        // `#-}` closes a resource blob and `!` may be punctuation elsewhere: not
                        // names, but not errors either.
                        return Ok(token(TokenKind::Punctuation, self.position));
                    }
                    let what = if first == b'%' { "value" } else { "block" };
                    return error(
                        start,
                        format!(
                            "expected a {what} name after '{}' (like '{}0')",
                            first as char, first as char
                        ),
                    );
                }
                let kind = match first {
                    b'%' => {
                        // A use of one result of a multi-result group: `%name#3`.
                        if bytes.get(self.position) == Some(&b'#')
                            && bytes
                                .get(self.position + 1)
                                .is_some_and(|byte| byte.is_ascii_digit())
                        {
                            self.position += 1;
                            self.advance_while(|byte| byte.is_ascii_digit());
                        }
                        TokenKind::ValueName
                    }
                    b'^' => TokenKind::BlockName,
                    b'#' => TokenKind::AttributeAlias,
                    _ => TokenKind::TypeAlias,
                };
                Ok(token(kind, self.position))
            }
            b'@' => {
                self.position += 1;
                if bytes.get(self.position) == Some(&b'"') {
                    self.read_string_body(self.position, file_name, line_index)?;
                } else {
                    self.advance_while(is_suffix_id_byte);
                    if self.position == start + 1 {
                        return error(
                            start,
                            "expected a symbol name after '@' (like '@kernel')".to_string(),
                        );
                    }
                }
                Ok(token(TokenKind::SymbolName, self.position))
            }
            b'-' if bytes.get(start + 1) == Some(&b'>') => {
                self.position += 2;
                Ok(token(TokenKind::Arrow, self.position))
            }
            b'-' if bytes
                .get(start + 1)
                .is_some_and(|byte| byte.is_ascii_digit()) =>
            {
                self.position += 1;
                self.read_number_body();
                Ok(token(TokenKind::Number, self.position))
            }
            byte if byte.is_ascii_digit() => {
                self.read_number_body();
                Ok(token(TokenKind::Number, self.position))
            }
            byte if byte.is_ascii_alphabetic() || byte == b'_' => {
                self.advance_while(is_identifier_byte);
                Ok(token(TokenKind::Identifier, self.position))
            }
            byte if byte.is_ascii() => {
                self.position += 1;
                Ok(token(TokenKind::Punctuation, self.position))
            }
            _ => {
                // A non-ASCII character outside a string: one token of its full UTF-8 length, so
                // that later slicing stays on `char` boundaries.
                let length = self.source[start..]
                    .chars()
                    .next()
                    .map_or(1, char::len_utf8);
                self.position += length;
                Ok(token(TokenKind::Punctuation, self.position))
            }
        }
    }

    /// Reads digits, a hexadecimal `0x...`, or a float `1.5e+00`, starting at a digit.
    fn read_number_body(&mut self) {
        let bytes = self.source.as_bytes();
        if bytes.get(self.position) == Some(&b'0')
            && bytes.get(self.position + 1) == Some(&b'x')
            && bytes
                .get(self.position + 2)
                .is_some_and(|byte| byte.is_ascii_hexdigit())
        {
            self.position += 2;
            self.advance_while(|byte| byte.is_ascii_hexdigit());
            return;
        }
        self.advance_while(|byte| byte.is_ascii_digit());
        if bytes.get(self.position) == Some(&b'.') {
            self.position += 1;
            self.advance_while(|byte| byte.is_ascii_digit());
            if matches!(bytes.get(self.position), Some(b'e' | b'E')) {
                let exponent_start = self.position;
                self.position += 1;
                if matches!(bytes.get(self.position), Some(b'+' | b'-')) {
                    self.position += 1;
                }
                if bytes
                    .get(self.position)
                    .is_some_and(|byte| byte.is_ascii_digit())
                {
                    self.advance_while(|byte| byte.is_ascii_digit());
                } else {
                    self.position = exponent_start;
                }
            }
        }
    }

    /// Reads a string literal whose opening quote is at `quote`; leaves the position after the
    /// closing quote. MLIR strings never hold a raw newline (the printer escapes it as `\0A`).
    fn read_string_body(
        &mut self,
        quote: usize,
        file_name: &str,
        line_index: &LineIndex,
    ) -> Result<(), TtirError> {
        let bytes = self.source.as_bytes();
        self.position = quote + 1;
        loop {
            match bytes.get(self.position) {
                Some(b'"') => {
                    self.position += 1;
                    return Ok(());
                }
                Some(b'\\') if bytes.get(self.position + 1).is_some_and(|b| *b != b'\n') => {
                    self.position += 2;
                }
                Some(b'\n') | None => {
                    return Err(line_index.error_at(
                        file_name,
                        self.source,
                        quote,
                        "unterminated string literal: expected a closing '\"' before the end of \
                         the line"
                            .to_string(),
                    ));
                }
                Some(_) => self.position += 1,
            }
        }
    }
}

/// Decodes an MLIR string literal (with its quotes): `\\`, `\"`, `\n`, `\t` and the two-digit
/// hexadecimal escapes the printer writes (`\22` for a quote, `\0A` for a newline). Bytes that do
/// not form UTF-8 are replaced, so decoding never fails.
pub fn decode_string_literal(literal: &str) -> String {
    let bytes = literal.as_bytes();
    let inner = if bytes.len() >= 2 && bytes[0] == b'"' && bytes[bytes.len() - 1] == b'"' {
        &bytes[1..bytes.len() - 1]
    } else {
        bytes
    };
    let mut decoded = Vec::with_capacity(inner.len());
    let mut index = 0;
    while index < inner.len() {
        let byte = inner[index];
        if byte != b'\\' || index + 1 >= inner.len() {
            decoded.push(byte);
            index += 1;
            continue;
        }
        let next = inner[index + 1];
        let hex_value = |high: u8, low: u8| {
            let digit = |byte: u8| (byte as char).to_digit(16);
            Some(digit(high)? * 16 + digit(low)?)
        };
        match next {
            b'\\' | b'"' => {
                decoded.push(next);
                index += 2;
            }
            b'n' => {
                decoded.push(b'\n');
                index += 2;
            }
            b't' => {
                decoded.push(b'\t');
                index += 2;
            }
            _ => match inner.get(index + 2).and_then(|&low| hex_value(next, low)) {
                Some(value) => {
                    // Two hex digits give at most 255, so this never truncates.
                    decoded.push(u8::try_from(value).unwrap_or(b'?'));
                    index += 3;
                }
                None => {
                    decoded.push(byte);
                    index += 1;
                }
            },
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

/// Writes `text` as an MLIR string literal the way MLIR's printer does: printable ASCII as is
/// except `"` (`\22`) and `\` (`\\`); every other byte as `\XX`.
pub fn encode_string_literal(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len() + 2);
    encoded.push('"');
    for &byte in text.as_bytes() {
        match byte {
            b'\\' => encoded.push_str("\\\\"),
            b'"' => encoded.push_str("\\22"),
            0x20..=0x7e => encoded.push(byte as char),
            _ => encoded.push_str(&format!("\\{byte:02X}")),
        }
    }
    encoded.push('"');
    encoded
}
