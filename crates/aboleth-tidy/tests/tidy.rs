//! Runs the tidy checks of `aboleth_tidy` over this checkout, and checks the checks: each is
//! shown a deliberately broken input it must report.

use aboleth_tidy::{
    architecture_path_findings, checkable_prefix, expand_braces, files_with_extension,
    looks_like_path, python_module_doc_finding, repository_root, rust_module_doc_finding,
    unmapped_source_findings,
};

fn report(findings: &[aboleth_tidy::Finding]) -> String {
    findings
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_rust_module_opens_with_its_doc_paragraph() {
    let root = repository_root();
    let files = files_with_extension(&root.join("crates"), ".rs");
    assert!(files.len() > 50, "found only {} Rust files", files.len());
    let findings: Vec<_> = files
        .iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(path).expect("readable source");
            rust_module_doc_finding(&root, path, &text)
        })
        .collect();
    assert!(findings.is_empty(), "{}", report(&findings));
}

#[test]
fn every_python_module_opens_with_a_docstring() {
    let root = repository_root();
    let files = files_with_extension(&root.join("python/aboleth"), ".py");
    assert!(
        files.len() >= 5,
        "found only {} Python modules",
        files.len()
    );
    let findings: Vec<_> = files
        .iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(path).expect("readable source");
            python_module_doc_finding(&root, path, &text)
        })
        .collect();
    assert!(findings.is_empty(), "{}", report(&findings));
}

#[test]
fn every_path_architecture_names_exists() {
    let root = repository_root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let findings = architecture_path_findings(&root, &text);
    assert!(findings.is_empty(), "{}", report(&findings));
}

#[test]
fn the_code_map_names_every_source_file() {
    let root = repository_root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let findings = unmapped_source_findings(&root, &text);
    assert!(findings.is_empty(), "{}", report(&findings));
}

#[test]
fn the_checks_report_broken_inputs() {
    let root = repository_root();
    let file = root.join("crates/example.rs");
    assert!(rust_module_doc_finding(&root, &file, "use std::fs;\n").is_some());
    assert!(rust_module_doc_finding(&root, &file, "//!\n//! late\n").is_some());
    assert!(rust_module_doc_finding(&root, &file, "//! Does one thing.\n").is_none());
    let module = root.join("python/aboleth/example.py");
    assert!(python_module_doc_finding(&root, &module, "import os\n").is_some());
    assert!(python_module_doc_finding(&root, &module, "# comment\n\"\"\"Doc.\"\"\"\n").is_none());

    let architecture = "- `crates/aboleth-ir`: `src/text.rs`, `src/no_such_file.rs`,\n  \
                        `src/{walk,missing}.rs`, `tests/filetests/passes/<pass-flag>.abo`.\n";
    let findings = architecture_path_findings(&root, architecture);
    let named: Vec<&str> = findings
        .iter()
        .map(|finding| finding.message.split('`').nth(3).unwrap_or(""))
        .collect();
    assert_eq!(
        named,
        ["src/no_such_file.rs", "src/missing.rs"],
        "{}",
        report(&findings)
    );
}

#[test]
fn path_spans_are_recognized_and_expanded() {
    assert!(looks_like_path("src/emit/mod.rs"));
    assert!(looks_like_path("lift.rs"));
    assert!(!looks_like_path("aboleth_ir::pliron"));
    assert!(!looks_like_path("--passes-off"));
    assert!(!looks_like_path("//!"));
    assert!(!looks_like_path("python -m aboleth"));
    assert_eq!(expand_braces("src/{a,b}.rs"), ["src/a.rs", "src/b.rs"]);
    assert_eq!(
        expand_braces("x/{p,q}/{r,s}"),
        ["x/p/r", "x/p/s", "x/q/r", "x/q/s"]
    );
    assert_eq!(
        checkable_prefix("tests/filetests/cli/*.args"),
        "tests/filetests/cli"
    );
    assert_eq!(checkable_prefix("passes/<pass-flag>.abo"), "passes");
    assert_eq!(checkable_prefix("tests/"), "tests");
}
