//! Reading and printing `.abo` text, and turning pliron errors into located diagnostics.
//!
//! [`parse_module`] parses a whole file (with its path recorded in every op's location) and
//! runs the verifier. Before pliron's parser runs, the text itself is checked for what would
//! crash it: non-ASCII names (its identifier parser panics) and nesting deeper than
//! [`REGION_NESTING_MAX`] regions or [`BRACKET_NESTING_MAX`] brackets (it recurses per level);
//! after it, text left past the module (a second module) is refused rather than dropped; [`print_module`] prints a module without location markers, which is the
//! form golden tests compare. A [`Diagnostic`] is `file:line:column: error: message`, the form
//! compilers use, so editors jump to it. This module does not run passes.

use std::fmt;

use pliron::combine::Parser;
use pliron::{
    context::{Context, Ptr},
    irfmt::parsers::spaced,
    location::{Location, Source},
    operation::{Operation, verify_operation},
    parsable::{State, state_stream_from_iterator},
    printable::Printable,
    result::Error,
};

/// A user-facing error with the place in the input it concerns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file (or `<input>` for text without a file).
    pub file: String,
    /// 1-based line, 0 when unknown.
    pub line: u32,
    /// 1-based column, 0 when unknown.
    pub column: u32,
    /// What is wrong, and how to fix it.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: error: {}", self.file, self.message)
        } else {
            write!(
                f,
                "{}:{}:{}: error: {}",
                self.file, self.line, self.column, self.message
            )
        }
    }
}

impl std::error::Error for Diagnostic {}

impl Diagnostic {
    /// A diagnostic at a pliron location (file and position when the op came from text).
    pub fn at(ctx: &Context, location: &Location, fallback_file: &str, message: String) -> Self {
        let (file, line, column) = position_of(ctx, location, fallback_file);
        Diagnostic {
            file,
            line,
            column,
            message,
        }
    }

    /// A diagnostic at the location of `op`.
    pub fn at_op(ctx: &Context, op: Ptr<Operation>, message: impl Into<String>) -> Self {
        let location = op.deref(ctx).loc().clone();
        Self::at(ctx, &location, "<input>", message.into())
    }

    /// Converts a pliron error into a diagnostic, keeping only the first meaningful line of the
    /// message (pliron's own text repeats the position and adds a backtrace).
    pub fn from_pliron(ctx: &Context, error: &Error, fallback_file: &str) -> Self {
        let mut message = error.err.to_string();
        if let Some(inner) = error.err.downcast_ref::<Error>() {
            message = inner.err.to_string();
        }
        let message = clean_parser_message(&message);
        Self::at(ctx, error.loc(), fallback_file, message)
    }
}

fn position_of(ctx: &Context, location: &Location, fallback_file: &str) -> (String, u32, u32) {
    match location {
        Location::SrcPos { src, pos } => {
            let file = match src {
                Source::File(_) => {
                    let printed = src.disp(ctx).to_string();
                    printed.trim_matches('"').to_string()
                }
                Source::InMemory => fallback_file.to_string(),
            };
            (file, pos.line.max(0) as u32, pos.column.max(0) as u32)
        }
        Location::Named { child_loc, .. } => position_of(ctx, child_loc, fallback_file),
        Location::CallSite { caller, .. } => position_of(ctx, caller, fallback_file),
        Location::Fused { locations, .. } => locations
            .first()
            .map(|first| position_of(ctx, first, fallback_file))
            .unwrap_or((fallback_file.to_string(), 0, 0)),
        Location::Unknown => (fallback_file.to_string(), 0, 0),
    }
}

/// Pliron's parser messages are multi-line ("Parse error at ...\nUnexpected ...\nExpected ...");
/// keep the lines that say what was wrong and drop the position (we print our own).
fn clean_parser_message(message: &str) -> String {
    let lines: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("Parse error at"))
        .filter(|line| !line.starts_with("Error backtrace"))
        .take_while(|line| !line.starts_with("0:"))
        .collect();
    if lines.is_empty() {
        message.trim().to_string()
    } else {
        lines.join("; ")
    }
}

/// Parses `text` (the contents of `file`) into a module and verifies it.
///
/// A panic inside pliron's parser or verifier (a bug there, found by fuzzing) is turned into a
/// diagnostic instead of aborting the caller.
pub fn parse_module(
    ctx: &mut Context,
    text: &str,
    file: &str,
) -> Result<Ptr<Operation>, Diagnostic> {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        parse_module_unguarded(ctx, text, file)
    }));
    outcome.unwrap_or_else(|panic| {
        let detail = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        Err(Diagnostic {
            file: file.to_string(),
            line: 0,
            column: 0,
            message: format!(
                "the parser failed on this input (internal error: {detail}); please report it"
            ),
        })
    })
}

fn parse_module_unguarded(
    ctx: &mut Context,
    text: &str,
    file: &str,
) -> Result<Ptr<Operation>, Diagnostic> {
    let uncommented = blank_comments(text);
    if !uncommented.trim_start().starts_with("builtin.module") {
        let (line, column) = uncommented
            .lines()
            .enumerate()
            .find_map(|(i, l)| {
                l.find(|c: char| !c.is_whitespace())
                    .map(|c| (i as u32 + 1, c as u32 + 1))
            })
            .unwrap_or((1, 1));
        return Err(Diagnostic {
            file: file.to_string(),
            line,
            column,
            message: "an .abo file holds one `builtin.module @name { ^entry(): ... }` with the kernels inside"
                .into(),
        });
    }
    // pliron's parser recurses once per nesting level and its identifier parser panics on
    // non-ASCII letters, so both are refused here, before anything recursive runs.
    check_text(&uncommented, file)?;
    let source = Source::new_from_file(ctx, file);
    let text = uncommented.as_str();
    // Keep only plain data out of the parse so the parser's borrow of `ctx` ends here.
    type SourcePosition = pliron::combine::stream::position::SourcePosition;
    let parsed: Result<(Ptr<Operation>, Option<SourcePosition>), (SourcePosition, String)> = {
        use pliron::combine::stream::{Positioned, StreamOnce};
        let state_stream = state_stream_from_iterator(text.chars(), State::new(ctx, source));
        match spaced(Operation::top_level_parser()).parse(state_stream) {
            Ok((module, mut rest)) => {
                // pliron stops after one top-level op: anything left (a second module) would
                // be dropped without a word.
                let position = rest.position();
                let trailing = rest.uncons().is_ok();
                Ok((module, trailing.then_some(position)))
            }
            Err(error) => Err((error.position, error.to_string())),
        }
    };
    let module = match parsed {
        Ok((_, Some(position))) => {
            let location = Location::SrcPos {
                src: source,
                pos: position,
            };
            return Err(Diagnostic::at(
                ctx,
                &location,
                file,
                "text after the module's closing brace: an .abo file holds exactly one \
                 builtin.module (a second one would be ignored); put every kernel in one module"
                    .into(),
            ));
        }
        Ok((module, None)) => module,
        Err((position, error_text)) => {
            let location = Location::SrcPos {
                src: source,
                pos: position,
            };
            let message = clean_parser_message(&error_text);
            return Err(improve_parse_error(
                text,
                Diagnostic::at(ctx, &location, file, message),
            ));
        }
    };
    verify_operation(module, ctx).map_err(|error| {
        let mut diagnostic = Diagnostic::from_pliron(ctx, &error, file);
        diagnostic.message = improve_verify_message(&diagnostic.message);
        diagnostic
    })?;
    crate::verify::verify_module(ctx, module)?;
    Ok(module)
}

/// How deeply regions (`{ ... }`: the module, a kernel, each `ab.for` and `ab.if` body) may
/// nest. pliron's parser, its verifier, the printer and the passes' walkers recurse once per
/// level; 64 levels stay far below what a 2 MiB thread stack holds in a debug build (about
/// 200), and no real kernel comes close.
pub const REGION_NESTING_MAX: usize = 64;

/// How deeply `(`, `[` and `<` may nest (types and attributes); deeper text would recurse in
/// the parser the same way.
pub const BRACKET_NESTING_MAX: usize = 32;

/// Checks, on the text alone, what must hold before pliron's parser runs: every character
/// outside string literals is ASCII, and nesting stays within [`REGION_NESTING_MAX`] and
/// [`BRACKET_NESTING_MAX`]. `text` has its comments blanked already.
fn check_text(text: &str, file: &str) -> Result<(), Diagnostic> {
    let located = |line: usize, column: usize, message: String| Diagnostic {
        file: file.to_string(),
        line: line as u32 + 1,
        column: column as u32 + 1,
        message,
    };
    let mut in_string = false;
    let mut escaped = false;
    let mut regions = 0usize;
    let mut brackets = 0usize;
    for (line_index, line) in text.lines().enumerate() {
        let mut previous = ' ';
        for (column, c) in line.chars().enumerate() {
            if in_string {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == '"' {
                    in_string = false;
                }
                previous = c;
                continue;
            }
            if !c.is_ascii() {
                return Err(located(
                    line_index,
                    column,
                    format!(
                        "non-ASCII character '{c}': names of values, blocks, ops and kernels \
                         are ASCII (letters, digits and '_', not starting with a digit); \
                         rename it (non-ASCII text is allowed only inside \"strings\")"
                    ),
                ));
            }
            match c {
                '"' => in_string = true,
                '{' => {
                    regions += 1;
                    if regions > REGION_NESTING_MAX {
                        return Err(located(
                            line_index,
                            column,
                            format!(
                                "regions nested more than {REGION_NESTING_MAX} deep (the module, \
                                 a kernel and each ab.for or ab.if body count one level each); \
                                 flatten the nesting, for example by combining conditions \
                                 with ab.binop And"
                            ),
                        ));
                    }
                }
                '}' => regions = regions.saturating_sub(1),
                '(' | '[' | '<' => {
                    brackets += 1;
                    if brackets > BRACKET_NESTING_MAX {
                        return Err(located(
                            line_index,
                            column,
                            format!(
                                "brackets ( [ < nested more than {BRACKET_NESTING_MAX} deep: \
                                 no type or attribute of the ab dialect needs that; check the \
                                 brackets"
                            ),
                        ));
                    }
                }
                // `->` in a function type is an arrow, not a closing bracket.
                '>' if previous == '-' => {}
                ')' | ']' | '>' => brackets = brackets.saturating_sub(1),
                _ => {}
            }
            previous = c;
        }
    }
    Ok(())
}

/// Rewords pliron's structural verifier messages (which name blocks by their uniqued labels)
/// into the rule and the fix.
fn improve_verify_message(message: &str) -> String {
    const TERMINATORS: &str = "a kernel's block ends with ab.return, an ab.for or ab.if body \
                               with ab.yield";
    if message.ends_with("is missing a terminator") {
        format!("this block does not end with a terminator: {TERMINATORS}")
    } else if message.ends_with("has a terminator that is not the last operation in the block") {
        format!(
            "ops after a terminator in this block (they would never run): {TERMINATORS}, as \
             its last op; move or delete the rest"
        )
    } else if let Some(rest) = message.strip_prefix("Op ")
        && let Some(op) = rest.strip_suffix(" must only have regions with single block")
    {
        format!("{op}'s body is exactly one block: `{{ ^label(): ... ab.yield }}`")
    } else {
        message.to_string()
    }
}

/// Makes pliron's parse errors say what to do, and point at the use of an undefined name
/// (pliron reports those at the enclosing function).
fn improve_parse_error(text: &str, mut diagnostic: Diagnostic) -> Diagnostic {
    let original = diagnostic.message.clone();
    if let Some(rest) = original.strip_prefix("Identifier ")
        && let Some(name) = rest.split_whitespace().next()
        && rest.contains("was not resolved")
    {
        diagnostic.message = format!(
            "'{name}' is used but never defined (a wait on an undefined token, or a typo); \
             define it before its use"
        );
        if let Some((line, column)) = first_use(text, name) {
            diagnostic.line = line;
            diagnostic.column = column;
        }
    } else if original.starts_with("Unexpected `}`")
        && previous_non_space(text, diagnostic.line, diagnostic.column) == Some(';')
    {
        diagnostic.message = "`;` before `}`: ops are separated by `;`, so the last op of a \
                              block (its ab.yield or ab.return) takes none; delete the `;`"
            .into();
    } else if let Some(op) = original.strip_prefix("Unregistered Op ") {
        let op = op.split_whitespace().next().unwrap_or(op);
        diagnostic.message = format!(
            "unknown op '{op}': not an op of the ab, mlx5, proxy, p2p, efa, ionic or gpu dialects \
             (docs/PROGRAMMING_MODEL.md lists them)"
        );
    }
    diagnostic
}

/// The last non-whitespace character before 1-based `line`:`column` of `text`.
fn previous_non_space(text: &str, line: u32, column: u32) -> Option<char> {
    let lines: Vec<&str> = text.lines().collect();
    let line_index = (line as usize).checked_sub(1)?;
    let current: String = lines
        .get(line_index)?
        .chars()
        .take((column as usize).saturating_sub(1))
        .collect();
    std::iter::once(current.as_str())
        .chain(lines[..line_index].iter().rev().copied())
        .find_map(|line| line.trim_end().chars().next_back())
}

fn first_use(text: &str, name: &str) -> Option<(u32, u32)> {
    for (line_index, line) in text.lines().enumerate() {
        let mut search = 0;
        while let Some(found) = line[search..].find(name) {
            let start = search + found;
            let end = start + name.len();
            let before = line[..start].chars().next_back();
            let after = line[end..].chars().next();
            let boundary =
                |c: Option<char>| c.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
            let is_definition = line[end..].trim_start().starts_with('=')
                || line[end..].trim_start().starts_with(':');
            if boundary(before) && boundary(after) && !is_definition {
                return Some((line_index as u32 + 1, start as u32 + 1));
            }
            search = end;
        }
    }
    None
}

/// pliron's text format has no comments; `.abo` files allow `// ...` to the end of a line
/// outside strings. They are replaced by spaces so columns in diagnostics stay right.
pub fn blank_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let mut in_string = false;
        let mut cut = None;
        let bytes = line.as_bytes();
        for (index, byte) in bytes.iter().enumerate() {
            match byte {
                b'"' => in_string = !in_string,
                b'/' if !in_string && bytes.get(index + 1) == Some(&b'/') => {
                    cut = Some(index);
                    break;
                }
                _ => {}
            }
        }
        match cut {
            Some(index) => {
                out.push_str(&line[..index]);
                let rest = &line[index..];
                out.extend(rest.chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
            }
            None => out.push_str(line),
        }
    }
    out
}

/// Prints a module without location markers (the golden-test form). Printing a copy keeps the
/// locations of the original for later diagnostics.
pub fn print_module(ctx: &Context, module: Ptr<Operation>) -> String {
    let printed = Operation::get_op_dyn(module, ctx).disp(ctx).to_string();
    normalize_names(&strip_location_markers(&printed))
}

/// pliron makes names unique by appending `_vN` to values and `_blockNvM` to block labels,
/// and appends again on every print. Drop the suffixes where the base name is unique in the
/// module, and keep `base_N` where it is not, so print -> parse -> print is a fixpoint.
fn normalize_names(printed: &str) -> String {
    use std::collections::{BTreeMap, BTreeSet};
    let is_ident_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
    // Split into identifier-like words and the text between them.
    let mut words: Vec<(bool, &str)> = Vec::new();
    let mut start = 0;
    let mut in_word = false;
    let mut in_string = false;
    for (index, c) in printed.char_indices() {
        if c == '"' {
            in_string = !in_string;
        }
        let word_char = is_ident_char(c) && !in_string;
        if word_char != in_word {
            if index > start {
                words.push((in_word, &printed[start..index]));
            }
            start = index;
            in_word = word_char;
        }
    }
    words.push((in_word, &printed[start..]));

    let split = |word: &str| -> Option<(String, String)> {
        // `name_v12` (values), `label_block3v1` (blocks), `v12` (unnamed values).
        if let Some(position) = word.rfind("_block") {
            let tail = &word[position + 6..];
            if let Some((a, b)) = tail.split_once('v')
                && !a.is_empty()
                && a.chars().all(|c| c.is_ascii_digit())
                && !b.is_empty()
                && b.chars().all(|c| c.is_ascii_digit())
            {
                return Some((word[..position].to_string(), format!("{a}_{b}")));
            }
        }
        if let Some(position) = word.rfind("_v") {
            let tail = &word[position + 2..];
            if !tail.is_empty() && tail.chars().all(|c| c.is_ascii_digit()) && position > 0 {
                return Some((word[..position].to_string(), tail.to_string()));
            }
        }
        None
    };
    let mut bases: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (is_word, word) in &words {
        if *is_word && let Some((base, suffix)) = split(word) {
            bases.entry(base).or_default().insert(suffix);
        }
    }
    let mut out = String::with_capacity(printed.len());
    for (is_word, word) in &words {
        match (*is_word).then(|| split(word)).flatten() {
            Some((base, suffix)) => {
                if bases[&base].len() == 1 {
                    out.push_str(&base);
                } else {
                    out.push_str(&format!("{base}_{suffix}"));
                }
            }
            None => out.push_str(word),
        }
    }
    out
}

/// Removes the ` !N` location references pliron appends to ops and blocks, and the trailing
/// spaces they leave.
fn strip_location_markers(printed: &str) -> String {
    let mut out = String::with_capacity(printed.len());
    for line in printed.lines() {
        let mut kept = line.to_string();
        if let Some(position) = kept.rfind(" !") {
            let tail = &kept[position + 2..];
            let is_marker = !tail.is_empty()
                && tail
                    .trim_end_matches([';', ':'])
                    .chars()
                    .all(|c| c.is_ascii_digit());
            if is_marker {
                let suffix: String = tail.chars().filter(|c| *c == ';' || *c == ':').collect();
                kept.truncate(position);
                kept.push_str(&suffix);
            }
        }
        out.push_str(kept.trim_end());
        out.push('\n');
    }
    out
}

/// Parses then prints: the round trip the fuzz target and the round-trip tests exercise.
pub fn roundtrip(text: &str, file: &str) -> Result<String, Diagnostic> {
    let ctx = &mut Context::new();
    let module = parse_module(ctx, text, file)?;
    Ok(print_module(ctx, module))
}

/// The op named `name` ("ab.put", "mlx5.write", ...).
pub fn op_name(ctx: &Context, op: Ptr<Operation>) -> String {
    Operation::get_opid(op, ctx).to_string()
}
