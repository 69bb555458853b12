//! The hand-written parser from TTIR text to a [`TtirModule`].
//!
//! It relies on how MLIR (and so Triton 3.6) prints: one operation per line; a region opens with
//! a `{` that ends a line and closes with a line starting with `}` (`} else {`, `} do {`,
//! `}) : ...`, `} {attrs} loc(...)`); block labels (`^bb0(...):`) start lines; alias definitions
//! (`#loc3 = loc(...)`) are top-level lines. Within a line it tokenizes, checks that brackets
//! balance, and reads the parts every operation shares (results, name, operands, attribute
//! dictionaries, type signature, location) without knowing each operation's custom syntax.
//!
//! It does not verify types, check that values are defined before use, or understand any
//! dialect: an operation it does not know is kept as text plus the facts above. A value name
//! directly followed by `:` (`%arg: i32`, MLIR's argument style) or by `=` (`scf.for %k = ...`,
//! `iter_args(%a = %b)`) is a definition; every other value name is a use.

use crate::error::{LineIndex, TtirError};
use crate::lexer::{Lexer, Token, TokenKind, decode_string_literal};
use crate::location::{Location, LocationAliases, LocationParser};
use crate::syntax::{
    AliasDefinition, Attribute, AttributeDictionary, Block, BlockItem, BlockLabel, Container,
    Operation, OperationEdit, OperationId, Region, ResultGroup, TopLevelItem, TtirModule,
    ValueDeclaration,
};
use crate::types::infer_result_types;

/// How deeply regions may nest before parsing stops with an error: recursion depth is bounded
/// on hostile input. Triton's kernels nest a few levels.
const REGION_NESTING_LIMIT: usize = 128;

/// The largest `N` accepted in a result group `%x:N`, so a corrupt count cannot make later
/// queries allocate without bound.
const RESULT_COUNT_LIMIT: usize = 1 << 16;

/// A token of one operation's own text (not its regions), with its bracket depth.
#[derive(Clone, Copy, Debug)]
struct ScannedToken {
    token: Token,
    /// Brackets open around the token; an opening and its closing bracket have the depth outside.
    depth: usize,
    /// True for the `{` that opens a region (its contents are not in the token list).
    is_region: bool,
}

impl TtirModule {
    /// Parses TTIR text. `file_name` is used in error messages only.
    pub fn parse(source: &str, file_name: &str) -> Result<TtirModule, TtirError> {
        let line_index = LineIndex::new(source);
        let mut parser = Parser {
            source,
            file_name,
            lexer: Lexer::new(source),
            line_index,
            operations: Vec::new(),
            alias_definitions: Vec::new(),
            location_aliases: LocationAliases::default(),
            alias_references: Vec::new(),
        };
        let items = parser.parse_top_level()?;
        parser.check_alias_references()?;
        let edits = vec![OperationEdit::default(); parser.operations.len()];
        Ok(TtirModule {
            source: source.to_string(),
            file_name: file_name.to_string(),
            line_index: parser.line_index,
            items,
            operations: parser.operations,
            alias_definitions: parser.alias_definitions,
            location_aliases: parser.location_aliases,
            edits,
        })
    }
}

struct Parser<'source> {
    source: &'source str,
    file_name: &'source str,
    lexer: Lexer<'source>,
    line_index: LineIndex,
    operations: Vec<Operation>,
    alias_definitions: Vec<AliasDefinition>,
    location_aliases: LocationAliases,
    /// Every `#alias` used in a location, with where: checked once the whole file is read,
    /// because Triton defines most aliases after the module.
    alias_references: Vec<(usize, String)>,
}

/// Describes a token for "found ..." in messages.
fn describe(source: &str, token: Option<&Token>) -> String {
    match token {
        None => "the end of the line".to_string(),
        Some(token) => match token.kind {
            TokenKind::Newline => "the end of the line".to_string(),
            TokenKind::EndOfFile => "the end of the file".to_string(),
            _ => format!("'{}'", token.text(source)),
        },
    }
}

fn closing_for(opening: u8) -> u8 {
    match opening {
        b'(' => b')',
        b'[' => b']',
        b'{' => b'}',
        _ => b'>',
    }
}

impl<'source> Parser<'source> {
    fn error(&self, offset: usize, message: String) -> TtirError {
        self.line_index
            .error_at(self.file_name, self.source, offset, message)
    }

    fn next_token(&mut self) -> Result<Token, TtirError> {
        self.lexer.next_token(self.file_name, &self.line_index)
    }

    fn peek_token(&self) -> Result<Token, TtirError> {
        self.lexer.peek(self.file_name, &self.line_index)
    }

    fn position_text(&self, offset: usize) -> String {
        self.line_index.line_column(self.source, offset).to_string()
    }

    fn text(&self, start: usize, end: usize) -> String {
        self.source[start..end].to_string()
    }

    /// Reads the top level: blank lines, alias definitions, resource blobs and operations.
    fn parse_top_level(&mut self) -> Result<Vec<TopLevelItem>, TtirError> {
        let mut items = Vec::new();
        loop {
            let line_start = self.lexer.position();
            let first = self.peek_token()?;
            match first.kind {
                TokenKind::EndOfFile => {
                    if line_start < self.source.len() {
                        items.push(TopLevelItem::Text(line_start..self.source.len()));
                    }
                    return Ok(items);
                }
                TokenKind::Newline => {
                    self.next_token()?;
                    items.push(TopLevelItem::Text(line_start..first.end));
                }
                _ if self.source[first.start..].starts_with("{-#") => {
                    let end = self.skip_resource_blob(first.start)?;
                    items.push(TopLevelItem::Text(line_start..end));
                }
                TokenKind::AttributeAlias | TokenKind::TypeAlias => {
                    let index = self.parse_alias_definition(line_start)?;
                    items.push(TopLevelItem::Alias(index));
                }
                TokenKind::Punctuation if first.is_punctuation(self.source, b'}') => {
                    return Err(self.error(
                        first.start,
                        "unexpected '}': no region is open here".to_string(),
                    ));
                }
                _ => {
                    let id = self.parse_operation(line_start, None, 0)?;
                    items.push(TopLevelItem::Operation(id));
                }
            }
        }
    }

    /// Skips `{-# ... #-}` and the rest of its last line; returns the end offset.
    fn skip_resource_blob(&mut self, start: usize) -> Result<usize, TtirError> {
        let Some(relative_end) = self.source[start..].find("#-}") else {
            return Err(self.error(
                start,
                "expected '#-}' to close the '{-#' resource block, found the end of the file"
                    .to_string(),
            ));
        };
        let after_close = start + relative_end + 3;
        let end = self.source[after_close..]
            .find('\n')
            .map_or(self.source.len(), |newline| after_close + newline + 1);
        self.lexer.set_position(end);
        Ok(end)
    }

    /// Reads tokens to the end of the line, checking that brackets balance. Regions are not
    /// allowed (used for alias definitions and block labels). Returns the tokens and the end of
    /// the line (after its newline).
    fn scan_line(&mut self) -> Result<(Vec<ScannedToken>, usize), TtirError> {
        let mut scanned = Vec::new();
        let mut open_brackets: Vec<Token> = Vec::new();
        loop {
            let token = self.next_token()?;
            match token.kind {
                TokenKind::Newline | TokenKind::EndOfFile => {
                    self.check_all_closed(&open_brackets, &token)?;
                    return Ok((scanned, token.end));
                }
                _ => {
                    let depth = self.track_bracket(&mut open_brackets, &token)?;
                    scanned.push(ScannedToken {
                        token,
                        depth,
                        is_region: false,
                    });
                }
            }
        }
    }

    /// Errors if a bracket is still open when a line (or the file) ends at `end`.
    fn check_all_closed(&self, open_brackets: &[Token], end: &Token) -> Result<(), TtirError> {
        let Some(open) = open_brackets.last() else {
            return Ok(());
        };
        let opening = self.source.as_bytes()[open.start];
        Err(self.error(
            end.start,
            format!(
                "expected '{}' to close '{}' opened at {}, found {}",
                closing_for(opening) as char,
                opening as char,
                self.position_text(open.start),
                describe(self.source, Some(end)),
            ),
        ))
    }

    /// Updates the open-bracket stack for `token` and returns the token's depth.
    fn track_bracket(
        &self,
        open_brackets: &mut Vec<Token>,
        token: &Token,
    ) -> Result<usize, TtirError> {
        if token.kind != TokenKind::Punctuation {
            return Ok(open_brackets.len());
        }
        let byte = self.source.as_bytes()[token.start];
        match byte {
            b'(' | b'[' | b'{' | b'<' => {
                open_brackets.push(*token);
                Ok(open_brackets.len() - 1)
            }
            b')' | b']' | b'}' | b'>' => {
                let Some(open) = open_brackets.pop() else {
                    return Err(self.error(
                        token.start,
                        format!(
                            "unexpected '{}' with no matching opening bracket",
                            byte as char
                        ),
                    ));
                };
                let opening = self.source.as_bytes()[open.start];
                if closing_for(opening) != byte {
                    return Err(self.error(
                        token.start,
                        format!(
                            "expected '{}' to close '{}' opened at {}, found '{}'",
                            closing_for(opening) as char,
                            opening as char,
                            self.position_text(open.start),
                            byte as char
                        ),
                    ));
                }
                Ok(open_brackets.len())
            }
            _ => Ok(open_brackets.len()),
        }
    }

    /// Reads `#name = value` (one line) and records location aliases.
    fn parse_alias_definition(&mut self, line_start: usize) -> Result<usize, TtirError> {
        let (tokens, end) = self.scan_line()?;
        let tokens = tokens.as_slice();
        let name_token = tokens[0].token;
        let name = name_token.text(self.source).to_string();
        match tokens.get(1) {
            Some(equals) if equals.token.is_punctuation(self.source, b'=') => {}
            other => {
                return Err(self.error(
                    other.map_or(name_token.end, |token| token.token.start),
                    format!(
                        "expected '=' after the alias '{name}' at the start of a line, found {}",
                        describe(self.source, other.map(|token| &token.token))
                    ),
                ));
            }
        }
        let Some(value_first) = tokens.get(2) else {
            return Err(self.error(
                tokens[1].token.end,
                format!("expected a value after '{name} =', found the end of the line"),
            ));
        };
        let value_last = tokens[tokens.len() - 1];
        let value_text = self.text(value_first.token.start, value_last.token.end);
        let location = if value_first.token.is_identifier(self.source, "loc") {
            let (location, close) = self.parse_location_at(tokens, 2)?;
            if let Some(extra) = tokens.get(close + 1) {
                return Err(self.error(
                    extra.token.start,
                    format!(
                        "expected the end of the line after the location of '{name}', found '{}'",
                        extra.token.text(self.source)
                    ),
                ));
            }
            if !self.location_aliases.define(name.clone(), location.clone()) {
                return Err(self.error(
                    name_token.start,
                    format!("redefinition of location alias '{name}'"),
                ));
            }
            Some(location)
        } else {
            None
        };
        self.alias_definitions.push(AliasDefinition {
            name,
            value_text,
            location,
            span: line_start..end,
        });
        Ok(self.alias_definitions.len() - 1)
    }

    /// Parses `loc(...)` whose `loc` token is at `index`; returns the location and the index of
    /// the closing `)`.
    fn parse_location_at(
        &mut self,
        tokens: &[ScannedToken],
        index: usize,
    ) -> Result<(Location, usize), TtirError> {
        let loc_token = tokens[index].token;
        let close = match tokens.get(index + 1) {
            Some(open) if open.token.is_punctuation(self.source, b'(') => {
                matching_close(tokens, index + 1)
            }
            _ => None,
        };
        let Some(close) = close else {
            return Err(self.error(loc_token.end, "expected '(' after 'loc'".to_string()));
        };
        let inner: Vec<Token> = tokens[index + 2..close]
            .iter()
            .map(|scanned| scanned.token)
            .collect();
        let location = LocationParser {
            source: self.source,
            file_name: self.file_name,
            line_index: &self.line_index,
            tokens: &inner,
            index: 0,
            end_offset: tokens[close].token.start,
        }
        .parse_all()?;
        for alias in location.referenced_aliases() {
            self.alias_references
                .push((loc_token.start, alias.to_string()));
        }
        Ok((location, close))
    }

    /// Errors for the first location that names an alias the file does not define.
    fn check_alias_references(&self) -> Result<(), TtirError> {
        for (offset, alias) in &self.alias_references {
            if !self.location_aliases.is_defined(alias) {
                return Err(self.error(
                    *offset,
                    format!(
                        "use of undefined location alias '{alias}' (no '{alias} = loc(...)' line \
                         in the file)"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Parses one operation starting at `line_start` (its first token is on this line), with its
    /// regions, and returns its id.
    fn parse_operation(
        &mut self,
        line_start: usize,
        container: Option<Container>,
        nesting: usize,
    ) -> Result<OperationId, TtirError> {
        let id = OperationId(self.operations.len());
        // Reserve the slot first so that ids follow source order (parent before children).
        self.operations.push(empty_operation(container, line_start));
        let first = self.peek_token()?;
        let indentation = self.text(line_start, first.start);

        let mut scanned = Vec::new();
        let mut open_brackets: Vec<Token> = Vec::new();
        let mut segments = Vec::new();
        let mut regions = Vec::new();
        let mut segment_start = line_start;
        loop {
            let token = self.next_token()?;
            match token.kind {
                TokenKind::Newline | TokenKind::EndOfFile => {
                    self.check_all_closed(&open_brackets, &token)?;
                    segments.push(segment_start..token.end);
                    break;
                }
                TokenKind::Punctuation
                    if token.is_punctuation(self.source, b'{')
                        && self.peek_token()?.kind == TokenKind::Newline =>
                {
                    // A `{` that ends the line opens a region (attribute dictionaries are always
                    // printed on one line).
                    let newline = self.next_token()?;
                    segments.push(segment_start..newline.end);
                    scanned.push(ScannedToken {
                        token,
                        depth: open_brackets.len(),
                        is_region: true,
                    });
                    let region_index = regions.len();
                    let (region, closing_line_start) =
                        self.parse_region(token, id, region_index, nesting + 1)?;
                    regions.push(region);
                    segment_start = closing_line_start;
                }
                _ => {
                    let depth = self.track_bracket(&mut open_brackets, &token)?;
                    scanned.push(ScannedToken {
                        token,
                        depth,
                        is_region: false,
                    });
                }
            }
        }
        let mut operation = empty_operation(container, first.start);
        operation.indentation = indentation;
        operation.segments = segments;
        operation.regions = regions;
        self.analyze_operation(&scanned, &mut operation)?;
        self.operations[id.0] = operation;
        Ok(id)
    }

    /// Parses a region's blocks after its opening `{` line, through the `}` that closes it.
    /// Returns the region and the offset where the closing line starts.
    fn parse_region(
        &mut self,
        open: Token,
        parent: OperationId,
        region_index: usize,
        nesting: usize,
    ) -> Result<(Region, usize), TtirError> {
        if nesting > REGION_NESTING_LIMIT {
            return Err(self.error(
                open.start,
                format!("regions nested deeper than {REGION_NESTING_LIMIT} levels"),
            ));
        }
        let mut blocks = vec![Block {
            label: None,
            items: Vec::new(),
        }];
        loop {
            let line_start = self.lexer.position();
            let first = self.peek_token()?;
            let current_block = blocks.len() - 1;
            match first.kind {
                TokenKind::Newline => {
                    self.next_token()?;
                    blocks[current_block]
                        .items
                        .push(BlockItem::Trivia(line_start..first.end));
                }
                TokenKind::EndOfFile => {
                    return Err(self.error(
                        first.start,
                        format!(
                            "expected '}}' to close the region opened at {}, found the end of \
                             the file",
                            self.position_text(open.start)
                        ),
                    ));
                }
                TokenKind::Punctuation if first.is_punctuation(self.source, b'}') => {
                    self.next_token()?;
                    return Ok((Region { blocks }, line_start));
                }
                TokenKind::BlockName => {
                    let mut label = self.parse_block_label(line_start)?;
                    // Blank lines before the first label belong to the label line, so printing
                    // (label, then items) keeps their order.
                    let block = &mut blocks[current_block];
                    let only_trivia = block
                        .items
                        .iter()
                        .all(|item| matches!(item, BlockItem::Trivia(_)));
                    if block.label.is_none() && only_trivia {
                        if let Some(BlockItem::Trivia(first_trivia)) = block.items.first() {
                            label.span.start = first_trivia.start;
                        }
                        block.items.clear();
                        block.label = Some(label);
                    } else {
                        blocks.push(Block {
                            label: Some(label),
                            items: Vec::new(),
                        });
                    }
                }
                _ => {
                    let container = Container {
                        parent,
                        region: region_index,
                        block: current_block,
                        item: blocks[current_block].items.len(),
                    };
                    let id = self.parse_operation(line_start, Some(container), nesting)?;
                    blocks[current_block].items.push(BlockItem::Operation(id));
                }
            }
        }
    }

    /// Parses a block label line: `^bb0(%a: f32 loc(...), ...):` or `^bb1:  // comment`.
    fn parse_block_label(&mut self, line_start: usize) -> Result<BlockLabel, TtirError> {
        let (tokens, end) = self.scan_line()?;
        let tokens = tokens.as_slice();
        let name_token = tokens[0].token;
        let name = name_token.text(self.source).to_string();
        let mut index = 1;
        let mut arguments = Vec::new();
        if tokens
            .get(1)
            .is_some_and(|open| open.token.is_punctuation(self.source, b'('))
        {
            // Balanced by `scan_line`, so the close exists.
            let close = matching_close(tokens, 1).unwrap_or(tokens.len() - 1);
            let mut argument_index = 2;
            while argument_index < close {
                let token = tokens[argument_index].token;
                let is_declaration = token.kind == TokenKind::ValueName
                    && tokens.get(argument_index + 1).is_some_and(|colon| {
                        colon.token.is_punctuation(self.source, b':')
                            && colon.token.start == token.end
                    });
                if !is_declaration {
                    return Err(self.error(
                        token.start,
                        format!(
                            "expected a block argument like '%arg0: i32' in the label of '{name}', \
                             found '{}'",
                            token.text(self.source)
                        ),
                    ));
                }
                let (declaration, next) = self.parse_declaration(tokens, argument_index)?;
                arguments.push(declaration);
                argument_index = next;
                if argument_index < close
                    && tokens[argument_index]
                        .token
                        .is_punctuation(self.source, b',')
                {
                    argument_index += 1;
                }
            }
            index = close + 1;
        }
        match tokens.get(index) {
            Some(colon) if colon.token.is_punctuation(self.source, b':') => {}
            other => {
                return Err(self.error(
                    other.map_or_else(
                        || tokens[tokens.len() - 1].token.end,
                        |token| token.token.start,
                    ),
                    format!(
                        "expected ':' after the block label '{name}', found {}",
                        describe(self.source, other.map(|token| &token.token))
                    ),
                ));
            }
        }
        if let Some(extra) = tokens.get(index + 1) {
            return Err(self.error(
                extra.token.start,
                format!(
                    "expected the end of the line after the block label '{name}:', found '{}'",
                    extra.token.text(self.source)
                ),
            ));
        }
        Ok(BlockLabel {
            name,
            arguments,
            span: line_start..end,
        })
    }

    /// Parses `%name: type {attrs} loc(...)` whose name is at `index` (the `:` is adjacent).
    /// Returns the declaration and the index after it (at the `,` or closing bracket).
    fn parse_declaration(
        &mut self,
        tokens: &[ScannedToken],
        index: usize,
    ) -> Result<(ValueDeclaration, usize), TtirError> {
        let name_depth = tokens[index].depth;
        let name = tokens[index].token.text(self.source).to_string();
        let type_start = index + 2;
        let mut cursor = type_start;
        let ends_declaration = |scanned: &ScannedToken| {
            scanned.depth < name_depth
                || (scanned.depth == name_depth
                    && (scanned.token.is_punctuation(self.source, b',') || scanned.is_region))
        };
        let is_attribute_or_location = |cursor: usize| {
            let scanned = &tokens[cursor];
            scanned.depth == name_depth
                && (scanned.token.is_punctuation(self.source, b'{')
                    || (scanned.token.is_identifier(self.source, "loc")
                        && tokens
                            .get(cursor + 1)
                            .is_some_and(|open| open.token.is_punctuation(self.source, b'('))))
        };
        while cursor < tokens.len()
            && !ends_declaration(&tokens[cursor])
            && !is_attribute_or_location(cursor)
        {
            cursor += 1;
        }
        if cursor == type_start {
            let found = tokens.get(cursor).map(|token| &token.token);
            return Err(self.error(
                found.map_or_else(|| tokens[index + 1].token.end, |token| token.start),
                format!(
                    "expected a type after '{name}:', found {}",
                    describe(self.source, found)
                ),
            ));
        }
        let type_text = self.text(tokens[type_start].token.start, tokens[cursor - 1].token.end);
        let mut attributes_text = None;
        if cursor < tokens.len()
            && tokens[cursor].depth == name_depth
            && tokens[cursor].token.is_punctuation(self.source, b'{')
        {
            let close = matching_close(tokens, cursor).unwrap_or(tokens.len() - 1);
            attributes_text = Some(self.text(tokens[cursor].token.start, tokens[close].token.end));
            cursor = close + 1;
        }
        let mut location = None;
        if cursor < tokens.len()
            && tokens[cursor].depth == name_depth
            && tokens[cursor].token.is_identifier(self.source, "loc")
        {
            let (parsed, close) = self.parse_location_at(tokens, cursor)?;
            location = Some(parsed);
            cursor = close + 1;
        }
        if let Some(extra) = tokens.get(cursor).filter(|token| !ends_declaration(token)) {
            return Err(self.error(
                extra.token.start,
                format!(
                    "expected ',' or ')' after the declaration of '{name}', found '{}'",
                    extra.token.text(self.source)
                ),
            ));
        }
        Ok((
            ValueDeclaration {
                name,
                type_text: Some(type_text),
                attributes_text,
                location,
            },
            cursor,
        ))
    }

    /// Fills in `operation` from the tokens of its own text.
    fn analyze_operation(
        &mut self,
        tokens: &[ScannedToken],
        operation: &mut Operation,
    ) -> Result<(), TtirError> {
        let source = self.source;
        let mut index = 0;
        if tokens
            .first()
            .is_some_and(|first| first.token.kind == TokenKind::ValueName)
        {
            let (result_groups, after_equals) = self.parse_result_list(tokens)?;
            operation.result_groups = result_groups;
            index = after_equals;
        }

        // The name: `tt.load` (custom form) or `"tt.reduce"` (generic form).
        match tokens.get(index).map(|scanned| scanned.token) {
            Some(token) if token.kind == TokenKind::Identifier => {
                operation.name = token.text(source).to_string();
            }
            Some(token) if token.kind == TokenKind::String => {
                operation.name = decode_string_literal(token.text(source));
                operation.is_generic_form = true;
            }
            other => {
                let offset = other.map_or_else(
                    || {
                        tokens
                            .last()
                            .map_or(operation.start_offset, |last| last.token.end)
                    },
                    |token| token.start,
                );
                let after = if operation.result_groups.is_empty() {
                    String::new()
                } else {
                    " after '='".to_string()
                };
                return Err(self.error(
                    offset,
                    format!(
                        "expected an operation name (like 'tt.load' or '\"tt.reduce\"'){after}, \
                         found {}",
                        describe(source, other.as_ref())
                    ),
                ));
            }
        }
        index += 1;

        let body = &tokens[index..];
        let mut last_colon = None;
        let mut last_arrow = None;
        let mut location_at = None;
        let mut cursor = 0;
        while cursor < body.len() {
            let scanned = body[cursor];
            let token = scanned.token;
            match token.kind {
                TokenKind::ValueName => {
                    let next = body.get(cursor + 1).map(|next| next.token);
                    let is_typed_declaration = next.is_some_and(|next| {
                        next.is_punctuation(source, b':') && next.start == token.end
                    });
                    let is_assigned_definition =
                        next.is_some_and(|next| next.is_punctuation(source, b'='));
                    if is_typed_declaration {
                        let (declaration, next_cursor) = self.parse_declaration(body, cursor)?;
                        operation.header_definitions.push(declaration);
                        cursor = next_cursor;
                        continue;
                    }
                    if is_assigned_definition {
                        operation.header_definitions.push(ValueDeclaration {
                            name: token.text(source).to_string(),
                            type_text: None,
                            attributes_text: None,
                            location: None,
                        });
                    } else {
                        operation.operands.push(token.text(source).to_string());
                    }
                }
                TokenKind::SymbolName if scanned.depth == 0 && operation.symbol.is_none() => {
                    let text = &token.text(source)[1..];
                    operation.symbol = Some(if text.starts_with('"') {
                        decode_string_literal(text)
                    } else {
                        text.to_string()
                    });
                }
                TokenKind::Punctuation
                    if !scanned.is_region && token.is_punctuation(source, b'{') =>
                {
                    let is_properties = scanned.depth == 1
                        && cursor > 0
                        && body[cursor - 1].depth == 0
                        && body[cursor - 1].token.is_punctuation(source, b'<')
                        && body[cursor - 1].token.end == token.start;
                    let close = matching_close(body, cursor).unwrap_or(body.len() - 1);
                    if scanned.depth == 0 || is_properties {
                        operation
                            .attribute_dictionaries
                            .push(self.parse_dictionary(&body[cursor..=close], is_properties)?);
                        cursor = close + 1;
                        continue;
                    }
                }
                TokenKind::Identifier
                    if scanned.depth == 0
                        && token.is_identifier(source, "loc")
                        && body
                            .get(cursor + 1)
                            .is_some_and(|open| open.token.is_punctuation(source, b'(')) =>
                {
                    location_at = Some(cursor);
                }
                TokenKind::Punctuation
                    if scanned.depth == 0 && token.is_punctuation(source, b':') =>
                {
                    last_colon = Some(cursor);
                }
                TokenKind::Arrow if scanned.depth == 0 => last_arrow = Some(cursor),
                _ => {}
            }
            cursor += 1;
        }

        if let Some(location_index) = location_at {
            let (location, close) = self.parse_location_at(body, location_index)?;
            operation.location = Some(location);
            operation.location_text =
                Some(self.text(body[location_index].token.start, body[close].token.end));
        }

        // The signature text after a top-level `:` or `->` runs to the next region, attribute
        // dictionary, `attributes` keyword, location, or (for `->`) the next top-level `:`.
        let text_after = |start: usize, stop_at_colon: bool| -> Option<String> {
            let mut end = start + 1;
            while end < body.len() {
                let scanned = &body[end];
                let stops = scanned.is_region
                    || Some(end) == location_at
                    || (scanned.depth == 0
                        && (scanned.token.is_punctuation(source, b'{')
                            || scanned.token.is_identifier(source, "attributes")
                            || (stop_at_colon && scanned.token.is_punctuation(source, b':'))));
                if stops {
                    break;
                }
                end += 1;
            }
            (end > start + 1)
                .then(|| source[body[start + 1].token.start..body[end - 1].token.end].to_string())
        };
        operation.type_text = last_colon.and_then(|colon| text_after(colon, false));
        let arrow_text = last_arrow.and_then(|arrow| text_after(arrow, true));
        let first_word = body
            .first()
            .filter(|scanned| scanned.token.kind == TokenKind::Identifier)
            .map(|scanned| scanned.token.text(source));
        operation.result_types = infer_result_types(
            &operation.name,
            operation.result_count(),
            operation.type_text.as_deref(),
            arrow_text.as_deref(),
            first_word,
        );
        Ok(())
    }

    /// Parses the result list `%a, %b:2 =` at the start of `tokens`; returns the groups and the
    /// index after the `=`.
    fn parse_result_list(
        &self,
        tokens: &[ScannedToken],
    ) -> Result<(Vec<ResultGroup>, usize), TtirError> {
        let source = self.source;
        let mut result_groups = Vec::new();
        let mut index = 0;
        loop {
            let Some(name_token) = tokens
                .get(index)
                .map(|scanned| scanned.token)
                .filter(|token| {
                    token.kind == TokenKind::ValueName && !token.text(source).contains('#')
                })
            else {
                let found = tokens.get(index).map(|scanned| &scanned.token);
                return Err(self.error(
                    found.map_or_else(|| tokens[index - 1].token.end, |token| token.start),
                    format!(
                        "expected a result name like '%0' in the result list, found {}",
                        describe(source, found)
                    ),
                ));
            };
            index += 1;
            let mut count = 1;
            if tokens
                .get(index)
                .is_some_and(|colon| colon.token.is_punctuation(source, b':'))
            {
                let count_token = tokens.get(index + 1).map(|scanned| scanned.token);
                count = match count_token {
                    Some(token) if token.kind == TokenKind::Number => {
                        match token.text(source).parse::<usize>() {
                            Ok(value) if (1..=RESULT_COUNT_LIMIT).contains(&value) => value,
                            _ => {
                                return Err(self.error(
                                    token.start,
                                    format!(
                                        "expected a result count from 1 to \
                                         {RESULT_COUNT_LIMIT} after '{}:', found '{}'",
                                        name_token.text(source),
                                        token.text(source)
                                    ),
                                ));
                            }
                        }
                    }
                    other => {
                        return Err(self.error(
                            other.map_or_else(|| tokens[index].token.end, |token| token.start),
                            format!(
                                "expected a result count after '{}:', found {}",
                                name_token.text(source),
                                describe(source, other.as_ref())
                            ),
                        ));
                    }
                };
                index += 2;
            }
            result_groups.push(ResultGroup {
                name: name_token.text(source).to_string(),
                count,
            });
            match tokens.get(index) {
                Some(comma) if comma.token.is_punctuation(source, b',') => index += 1,
                Some(equals) if equals.token.is_punctuation(source, b'=') => {
                    return Ok((result_groups, index + 1));
                }
                other => {
                    let found = other.map(|scanned| &scanned.token);
                    return Err(self.error(
                        found.map_or_else(|| tokens[index - 1].token.end, |token| token.start),
                        format!(
                            "expected ',' or '=' after the result '{}', found {}",
                            name_token.text(source),
                            describe(source, found)
                        ),
                    ));
                }
            }
        }
    }

    /// Parses `{name = value, unit_name}` (the given tokens run from `{` to `}`).
    fn parse_dictionary(
        &self,
        tokens: &[ScannedToken],
        is_properties: bool,
    ) -> Result<AttributeDictionary, TtirError> {
        let source = self.source;
        let entry_depth = tokens[0].depth + 1;
        let mut entries = Vec::new();
        let inner = &tokens[1..tokens.len().saturating_sub(1).max(1)];
        for entry in inner.split(|scanned| {
            scanned.depth == entry_depth && scanned.token.is_punctuation(source, b',')
        }) {
            let Some(name_token) = entry.first().map(|scanned| scanned.token) else {
                if inner.is_empty() {
                    break;
                }
                return Err(self.error(
                    tokens[0].token.start,
                    "expected an attribute name between ',' in the attribute dictionary"
                        .to_string(),
                ));
            };
            let name = match name_token.kind {
                TokenKind::Identifier => name_token.text(source).to_string(),
                TokenKind::String => decode_string_literal(name_token.text(source)),
                _ => {
                    return Err(self.error(
                        name_token.start,
                        format!(
                            "expected an attribute name in the attribute dictionary, found '{}'",
                            name_token.text(source)
                        ),
                    ));
                }
            };
            let value_text = match entry.get(1) {
                None => None,
                Some(equals) if equals.token.is_punctuation(source, b'=') => {
                    let Some(value_first) = entry.get(2) else {
                        return Err(self.error(
                            equals.token.end,
                            format!("expected a value after '{name} =', found nothing"),
                        ));
                    };
                    let value_last = entry[entry.len() - 1];
                    Some(self.text(value_first.token.start, value_last.token.end))
                }
                Some(other) => {
                    return Err(self.error(
                        other.token.start,
                        format!(
                            "expected '=' or ',' after the attribute name '{name}', found '{}'",
                            other.token.text(source)
                        ),
                    ));
                }
            };
            entries.push(Attribute { name, value_text });
        }
        Ok(AttributeDictionary {
            is_properties,
            entries,
        })
    }
}

/// An operation with nothing filled in yet.
fn empty_operation(container: Option<Container>, start_offset: usize) -> Operation {
    Operation {
        name: String::new(),
        is_generic_form: false,
        result_groups: Vec::new(),
        operands: Vec::new(),
        header_definitions: Vec::new(),
        attribute_dictionaries: Vec::new(),
        symbol: None,
        type_text: None,
        result_types: None,
        location: None,
        location_text: None,
        regions: Vec::new(),
        container,
        indentation: String::new(),
        start_offset,
        segments: Vec::new(),
    }
}

/// The index of the bracket closing the one at `open`, in a balanced token list: the first later
/// token at the same depth or shallower.
fn matching_close(tokens: &[ScannedToken], open: usize) -> Option<usize> {
    let open_depth = tokens[open].depth;
    tokens[open + 1..]
        .iter()
        .position(|scanned| scanned.depth <= open_depth && !scanned.is_region)
        .map(|offset| open + 1 + offset)
}
