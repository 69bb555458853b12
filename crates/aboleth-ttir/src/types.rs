//! Result types from an operation's printed signature, and small helpers on type text
//! (`tensor<4x256xi32>`, `!tt.ptr<f32>`).
//!
//! MLIR custom syntax states result types in different places per operation (`arith.addi %a,
//! %b : i32` gives the one type; `tt.load %p : !tt.ptr<i32>` gives the operand's type). This
//! module knows the general rules and the exceptions among the operations the lifting step
//! reads; for others it answers only what the text plainly says, and `None` otherwise. Types are
//! handled as text; nothing here checks that a type is well formed.

/// Splits `text` at `separator` where no bracket is open (`->` is not a bracket); trims the
/// parts.
pub(crate) fn split_top_level(text: &str, separator: char) -> Vec<&str> {
    split_top_level_ranges(text, separator)
        .into_iter()
        .map(|range| text[range].trim())
        .collect()
}

/// The byte ranges of the parts [`split_top_level`] returns, untrimmed.
fn split_top_level_ranges(text: &str, separator: char) -> Vec<std::ops::Range<usize>> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut part_start = 0;
    let mut previous = '\0';
    let mut in_string = false;
    for (offset, character) in text.char_indices() {
        if in_string {
            if character == '"' && previous != '\\' {
                in_string = false;
            }
        } else {
            match character {
                '"' => in_string = true,
                '(' | '[' | '{' | '<' => depth += 1,
                '>' if previous == '-' => {}
                ')' | ']' | '}' | '>' => depth = depth.saturating_sub(1),
                _ if character == separator && depth == 0 => {
                    parts.push(part_start..offset);
                    part_start = offset + character.len_utf8();
                }
                _ => {}
            }
        }
        previous = character;
    }
    parts.push(part_start..text.len());
    parts
}

/// `(a, b)` gives `a, b` when the parentheses enclose the whole text (not for `(a) -> (b)`);
/// otherwise the trimmed text.
fn strip_enclosing_parentheses(text: &str) -> &str {
    let trimmed = text.trim();
    if !trimmed.starts_with('(') {
        return trimmed;
    }
    let mut depth = 0usize;
    for (offset, character) in trimmed.char_indices() {
        match character {
            '(' => depth += 1,
            ')' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return if offset == trimmed.len() - 1 {
                        &trimmed[1..offset]
                    } else {
                        trimmed
                    };
                }
            }
            _ => {}
        }
    }
    trimmed
}

/// The type after the last top-level `to` (`i32 to i64` gives `i64`), if there is one.
fn cast_target(text: &str) -> Option<String> {
    let words: Vec<&str> = split_top_level(text, ' ')
        .into_iter()
        .filter(|word| !word.is_empty())
        .collect();
    let position = words.iter().rposition(|word| *word == "to")?;
    (position + 1 < words.len()).then(|| words[position + 1..].join(" "))
}

/// Splits a ranked tensor type into (shape prefix with its trailing `x`, element type,
/// encoding suffix starting with `,`): `tensor<4x256xi32>` gives (`4x256x`, `i32`, ``).
pub(crate) fn split_tensor_type(text: &str) -> Option<(&str, &str, &str)> {
    let body = text.trim().strip_prefix("tensor<")?.strip_suffix('>')?;
    let first_part = split_top_level_ranges(body, ',').into_iter().next()?;
    let shape_and_element = body[first_part.clone()].trim();
    let encoding = &body[first_part.end..];
    let mut element_start = 0;
    let bytes = shape_and_element.as_bytes();
    loop {
        let dimension_end = bytes[element_start..]
            .iter()
            .position(|byte| !(byte.is_ascii_digit() || *byte == b'?'))
            .map(|offset| element_start + offset)?;
        if dimension_end > element_start && bytes[dimension_end] == b'x' {
            element_start = dimension_end + 1;
        } else {
            break;
        }
    }
    Some((
        &shape_and_element[..element_start],
        &shape_and_element[element_start..],
        encoding,
    ))
}

/// `type_text` with its element type replaced: a tensor keeps its shape and encoding, a scalar is
/// replaced whole.
pub(crate) fn with_element_type(type_text: &str, element: &str) -> String {
    match split_tensor_type(type_text) {
        Some((shape, _, encoding)) => format!("tensor<{shape}{element}{encoding}>"),
        None => element.to_string(),
    }
}

/// What a pointer (or tensor of pointers) points to: `!tt.ptr<f32>` gives `f32`,
/// `tensor<64x!tt.ptr<f32>>` gives `tensor<64xf32>`, `!tt.ptr<tensor<32x64xf32>>` gives the
/// tensor. The address space (`!tt.ptr<f32, 1>`) is dropped.
pub(crate) fn pointee_type(type_text: &str) -> Option<String> {
    let trimmed = type_text.trim();
    if let Some(body) = trimmed
        .strip_prefix("!tt.ptr<")
        .and_then(|rest| rest.strip_suffix('>'))
    {
        return split_top_level(body, ',')
            .first()
            .map(|part| part.to_string());
    }
    let (_, element, _) = split_tensor_type(trimmed)?;
    Some(with_element_type(trimmed, &pointee_type(element)?))
}

/// The result types of an operation, from its name, number of results, the text after its last
/// top-level `:` (`type_text`) and after its last top-level `->` (`arrow_text`), and its first
/// bare word (for `arith.constant true`). `None` when the text does not say.
pub(crate) fn infer_result_types(
    name: &str,
    result_count: usize,
    type_text: Option<&str>,
    arrow_text: Option<&str>,
    first_word: Option<&str>,
) -> Option<Vec<String>> {
    if result_count == 0 {
        return Some(Vec::new());
    }
    let single = |text: &str| vec![text.trim().to_string()];
    let types: Vec<String> = match name {
        "arith.constant" => match (type_text, first_word) {
            (Some(text), _) => single(text),
            (None, Some("true" | "false")) => single("i1"),
            _ => return None,
        },
        "arith.cmpi" | "arith.cmpf" => {
            let operand_type = split_top_level(type_text?, ',').into_iter().next()?;
            vec![with_element_type(operand_type, "i1")]
        }
        "tt.load" => vec![pointee_type(split_top_level(type_text?, ',').first()?)?],
        "tt.addptr" => single(split_top_level(type_text?, ',').first()?),
        "arith.select" => single(split_top_level(type_text?, ',').last()?),
        "tt.get_program_id" | "tt.get_num_programs" => single("i32"),
        // These print `!tt.ptr<tensor<...>>` in short form, without the dialect prefix.
        "tt.make_tensor_ptr" | "tt.advance" => {
            let text = type_text?.trim();
            match text.strip_prefix('<') {
                Some(_) => vec![format!("!tt.ptr{text}")],
                None => single(text),
            }
        }
        _ => {
            if let Some(arrow) = arrow_text {
                split_top_level(strip_enclosing_parentheses(arrow), ',')
                    .into_iter()
                    .map(str::to_string)
                    .collect()
            } else {
                let text = type_text?;
                if let Some(target) = cast_target(text) {
                    vec![target]
                } else {
                    let parts = split_top_level(text, ',');
                    if parts.len() != 1 {
                        return None;
                    }
                    single(parts[0])
                }
            }
        }
    };
    if types.iter().any(String::is_empty) {
        return None;
    }
    if types.len() == result_count {
        Some(types)
    } else if types.len() == 1 {
        // `tt.split ... -> tensor<64xf32>` states the one type both results share.
        Some(vec![types[0].clone(); result_count])
    } else {
        None
    }
}
