//! Loading the committed TTIR corpus (`tests/corpus/`, written by
//! `python/tools/dump_ttir_corpus.py`).

#![allow(
    dead_code,
    reason = "each test crate uses its own subset of these helpers"
)]

use std::path::PathBuf;

use aboleth_ttir::TtirModule;

/// The corpus directory.
pub fn corpus_directory() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

/// Every corpus file as (file name, text), sorted by name.
pub fn corpus_files() -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(corpus_directory())
        .expect("tests/corpus exists")
        .map(|entry| entry.expect("readable directory entry").path())
        .filter(|path| {
            path.extension()
                .is_some_and(|extension| extension == "ttir")
        })
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).expect("readable corpus file");
            (name, text)
        })
        .collect();
    files.sort();
    files
}

/// Parses corpus file `name` (such as `matmul.after-passes.ttir`).
pub fn parse_corpus_file(name: &str) -> (String, TtirModule) {
    let text = std::fs::read_to_string(corpus_directory().join(name))
        .unwrap_or_else(|error| panic!("reading {name}: {error}"));
    let module = TtirModule::parse(&text, name).unwrap_or_else(|error| panic!("{error}"));
    (text, module)
}
