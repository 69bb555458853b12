//! Every example in `examples/ir` parses, verifies, and prints to a fixpoint.

use std::path::PathBuf;

fn examples() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/ir");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("examples/ir exists")
        .map(|entry| entry.expect("readable directory").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "abo"))
        .collect();
    paths.sort();
    assert!(
        paths.len() >= 6,
        "expected at least 6 examples in {}",
        dir.display()
    );
    paths
}

#[test]
fn examples_parse_verify_and_print_to_a_fixpoint() {
    for path in examples() {
        let text = std::fs::read_to_string(&path).expect("readable example");
        let file = path.display().to_string();
        let once = aboleth_ir::text::roundtrip(&text, &file)
            .unwrap_or_else(|diagnostic| panic!("{diagnostic}"));
        let twice = aboleth_ir::text::roundtrip(&once, &file)
            .unwrap_or_else(|diagnostic| panic!("reparse of printed {file}: {diagnostic}\n{once}"));
        assert_eq!(
            once, twice,
            "print -> parse -> print is not a fixpoint for {file}"
        );
    }
}
