//! Malformed input never panics: truncated and mutated corpus files either parse (and then print
//! back byte for byte, and answer every query) or give a `TtirError`. Deterministic (a fixed
//! xorshift seed) and bounded in time.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use aboleth_ttir::TtirModule;

/// The whole test stops adding cases after this long, so it stays well under 10 seconds.
const TIME_BUDGET: Duration = Duration::from_secs(5);

/// Bytes that matter to the parser's structure.
const STRUCTURAL_TEXT: [&str; 16] = [
    "{", "}", "(", ")", "<", ">", "[", "]", "\"", "%", "^", "#", "\n", ":", "=", "é",
];

/// A small deterministic generator (xorshift64), so failures reproduce.
struct Xorshift(u64);

impl Xorshift {
    fn next_below(&mut self, bound: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % bound.max(1) as u64) as usize
    }
}

/// The `char` boundary at or before `offset`.
fn boundary_at_or_before(text: &str, mut offset: usize) -> usize {
    offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

/// One random mutation of `text`.
fn mutate(text: &str, random: &mut Xorshift) -> String {
    let offset = boundary_at_or_before(text, random.next_below(text.len() + 1));
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let line = random.next_below(lines.len());
    match random.next_below(6) {
        0 => text[..offset].to_string(),
        1 => {
            let mut mutated = text.to_string();
            if let Some(character) = text[offset..].chars().next() {
                mutated.replace_range(offset..offset + character.len_utf8(), "");
            }
            mutated
        }
        2 => {
            let mut mutated = text.to_string();
            mutated.insert_str(
                offset,
                STRUCTURAL_TEXT[random.next_below(STRUCTURAL_TEXT.len())],
            );
            mutated
        }
        3 => {
            let mut mutated: Vec<&str> = lines.clone();
            mutated.remove(line);
            mutated.concat()
        }
        4 => {
            let mut mutated: Vec<&str> = lines.clone();
            mutated.insert(line, lines[line]);
            mutated.concat()
        }
        _ => {
            let mut mutated = text.to_string();
            if let Some(character) = text[offset..].chars().next() {
                let replacement = STRUCTURAL_TEXT[random.next_below(STRUCTURAL_TEXT.len())];
                mutated.replace_range(offset..offset + character.len_utf8(), replacement);
            }
            mutated
        }
    }
}

/// Parses `text`; if it parses, checks the lossless print and runs every query once.
fn exercise(text: &str) {
    let Ok(module) = TtirModule::parse(text, "mutated.ttir") else {
        return;
    };
    assert!(
        module.print() == text,
        "a successful parse must print back byte for byte"
    );
    for id in module.operations() {
        let operation = module.operation(id);
        let _ = operation.result_types();
        let _ = operation.extern_elementwise();
        let _ = operation.scf_for();
        let _ = module.source_call_stack(id);
        let _ = module.text_position(id);
        for operand in operation.operands() {
            let _ = module.find_definition(id, operand);
        }
    }
}

#[test]
fn truncated_and_mutated_corpus_files_never_panic() {
    let started = Instant::now();
    let mut random = Xorshift(0x9e37_79b9_7f4a_7c15);
    let files = common::corpus_files();
    let mut cases = 0usize;
    'files: for (name, text) in &files {
        let mut inputs: Vec<String> = (0..24)
            .map(|step| text[..boundary_at_or_before(text, text.len() * step / 24)].to_string())
            .collect();
        for _ in 0..120 {
            let once = mutate(text, &mut random);
            inputs.push(mutate(&once, &mut random));
            inputs.push(once);
        }
        for input in inputs {
            if started.elapsed() > TIME_BUDGET {
                break 'files;
            }
            let outcome = catch_unwind(AssertUnwindSafe(|| exercise(&input)));
            assert!(outcome.is_ok(), "panic on a mutation of {name}:\n{input}");
            cases += 1;
        }
    }
    assert!(cases >= 1000, "only {cases} cases ran in the time budget");
}
