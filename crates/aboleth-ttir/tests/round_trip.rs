//! Printing an unmodified parse gives the input byte for byte, for every corpus file, and
//! print -> parse -> print is a fixpoint.

mod common;

use aboleth_ttir::TtirModule;

#[test]
fn every_corpus_file_prints_back_byte_for_byte() {
    let files = common::corpus_files();
    assert!(
        files.len() >= 24,
        "expected the full corpus, found {} files",
        files.len()
    );
    for (name, text) in &files {
        let module = TtirModule::parse(text, name).unwrap_or_else(|error| panic!("{error}"));
        let printed = module.print();
        assert!(printed == *text, "{name}: printing changed the text");
        let reprinted = TtirModule::parse(&printed, name)
            .unwrap_or_else(|error| panic!("{error}"))
            .print();
        assert!(
            reprinted == printed,
            "{name}: print -> parse -> print is not a fixpoint"
        );
    }
}

#[test]
fn corpus_holds_every_required_kernel_before_and_after_the_ttir_passes() {
    let names: Vec<String> = common::corpus_files()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    for kernel in [
        "matmul",
        "softmax",
        "row_argmax",
        "for_loop_carry",
        "while_loop",
        "if_else",
        "masked_vector_add",
        "helper_call",
        "strings_and_inline_asm",
        "block_pointers",
        "aboleth_extern_calls",
        "alltoall",
    ] {
        for suffix in [".ttir", ".after-passes.ttir"] {
            let file = format!("{kernel}{suffix}");
            assert!(names.contains(&file), "missing corpus file {file}");
        }
    }
}

#[test]
fn text_without_a_final_newline_and_with_blank_lines_and_comments_round_trips() {
    let text = "\n// a comment\n#loc = loc(\"k.py\":1:0)\nmodule {\n\n  // inside\n  tt.func @f() {\n\n    tt.return loc(#loc)\n  } loc(#loc)\n} loc(#loc)";
    let module = TtirModule::parse(text, "t.ttir").unwrap();
    assert_eq!(module.print(), text);
    assert_eq!(module.operations_named("tt.return").count(), 1);
}
