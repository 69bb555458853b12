//! Error messages, as golden strings: each names the position (`file:line:column`), what was
//! expected, and what was found.

mod common;

use aboleth_ttir::TtirModule;

/// The error message for `text`, which must fail to parse.
fn error_for(text: &str) -> String {
    match TtirModule::parse(text, "bad.ttir") {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn unbalanced_brackets() {
    assert_eq!(
        error_for("module {\n  %0 = arith.constant 1 : i32 loc(#loc1\n} loc(#loc)\n"),
        "bad.ttir:2:40: error: expected ')' to close '(' opened at 2:34, found the end of the line"
    );
    assert_eq!(
        error_for("module {\n  %0 = tt.load %p : tensor<4x!tt.ptr<f32>) loc(unknown)\n}\n"),
        "bad.ttir:2:42: error: expected '>' to close '<' opened at 2:27, found ')'"
    );
    assert_eq!(
        error_for("module {\n  tt.return )\n}\n"),
        "bad.ttir:2:13: error: unexpected ')' with no matching opening bracket"
    );
}

#[test]
fn unterminated_strings_and_regions() {
    assert_eq!(
        error_for("module {\n  tt.print \"unterminated {\n} loc(unknown)\n"),
        "bad.ttir:2:12: error: unterminated string literal: expected a closing '\"' before the \
         end of the line"
    );
    assert_eq!(
        error_for("module {\n  tt.func @f() {\n    tt.return loc(unknown)\n"),
        "bad.ttir:4:1: error: expected '}' to close the region opened at 2:16, found the end of \
         the file"
    );
    assert_eq!(
        error_for("}\n"),
        "bad.ttir:1:1: error: unexpected '}': no region is open here"
    );
}

#[test]
fn malformed_result_lists_and_names() {
    assert_eq!(
        error_for("module {\n  %0 = : i32 loc(unknown)\n} loc(unknown)\n"),
        "bad.ttir:2:8: error: expected an operation name (like 'tt.load' or '\"tt.reduce\"') \
         after '=', found ':'"
    );
    assert_eq!(
        error_for("module {\n  %0 %1 = arith.addi %a, %b : i32\n}\n"),
        "bad.ttir:2:6: error: expected ',' or '=' after the result '%0', found '%1'"
    );
    assert_eq!(
        error_for("module {\n  %0:0 = tt.split %x : tensor<2xf32> -> tensor<f32>\n}\n"),
        "bad.ttir:2:6: error: expected a result count from 1 to 65536 after '%0:', found '0'"
    );
    assert_eq!(
        error_for("module {\n  % = arith.constant 1 : i32\n}\n"),
        "bad.ttir:2:3: error: expected a value name after '%' (like '%0')"
    );
    assert_eq!(
        error_for("module {\n  tt.func @f() attributes {= false} {\n  }\n}\n"),
        "bad.ttir:2:28: error: expected an attribute name in the attribute dictionary, found '='"
    );
}

#[test]
fn malformed_block_labels() {
    assert_eq!(
        error_for("module {\n  \"tt.reduce\"(%x) ({\n  ^bb0(%a: f32)\n  }) : (f32) -> f32\n}\n"),
        "bad.ttir:3:16: error: expected ':' after the block label '^bb0', found the end of the line"
    );
    assert_eq!(
        error_for("module {\n  ^bb0(%a f32):\n}\n"),
        "bad.ttir:2:8: error: expected a block argument like '%arg0: i32' in the label of \
         '^bb0', found '%a'"
    );
}

#[test]
fn malformed_locations_and_aliases() {
    assert_eq!(
        error_for("module {\n} loc(#loc9)\n"),
        "bad.ttir:2:3: error: use of undefined location alias '#loc9' (no '#loc9 = loc(...)' \
         line in the file)"
    );
    assert_eq!(
        error_for("module {\n  tt.return loc(12)\n}\n"),
        "bad.ttir:2:17: error: expected a location (a \"file\":line:column, 'unknown', a \
         \"name\", 'callsite(...)', 'fused[...]' or '#alias'), found '12'"
    );
    assert_eq!(
        error_for("module {\n  tt.return loc(callsite(#loc1 #loc2))\n}\n"),
        "bad.ttir:2:32: error: expected 'at' between the callee and the caller of \
         'callsite(...)', found '#loc2'"
    );
    assert_eq!(
        error_for("module {\n  tt.return loc(\"a.py\":x:1)\n}\n"),
        "bad.ttir:2:24: error: expected a line number, found 'x'"
    );
    assert_eq!(
        error_for("#loc = loc(\"a.py\":1:0)\n#loc = loc(\"a.py\":2:0)\nmodule {\n} loc(#loc)\n"),
        "bad.ttir:2:1: error: redefinition of location alias '#loc'"
    );
    assert_eq!(
        error_for("#loc = loc(\"a.py\":1:0) extra\n"),
        "bad.ttir:1:24: error: expected the end of the line after the location of '#loc', \
         found 'extra'"
    );
}

#[test]
fn truncated_corpus_file_names_the_unclosed_region() {
    let (text, _) = common::parse_corpus_file("alltoall.after-passes.ttir");
    let truncated: String = text
        .lines()
        .take(15)
        .map(|line| format!("{line}\n"))
        .collect();
    let error = TtirModule::parse(&truncated, "alltoall.ttir").unwrap_err();
    // Line 10 is the `tt.func` line; its body is cut off.
    assert_eq!(error.line, 16);
    assert_eq!(
        error.message,
        format!(
            "expected '}}' to close the region opened at 10:{}, found the end of the file",
            text.lines().nth(9).unwrap().len()
        )
    );
}
