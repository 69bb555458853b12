//! The pass list against the tree: one pass = one file = one flag = its goldens, with the same
//! name; and the pipeline lowers exactly the targets the registry has a lowering for.
//!
//! These read file names only; what the passes do is tested by the goldens (`filetests.rs`).

use std::path::{Path, PathBuf};

use aboleth_abi::Transport;
use aboleth_passes::{
    PipelineOptions,
    registry::{LOWERINGS, PASSES, lowering_for},
};

/// The files of `src/` that are not passes.
const NOT_PASSES: [&str; 4] = ["lib", "pipeline", "registry", "stats"];

fn crate_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn every_flag() -> Vec<&'static str> {
    PASSES
        .iter()
        .map(|pass| pass.name)
        .chain(LOWERINGS.iter().map(|lowering| lowering.name))
        .collect()
}

/// The stems of the files with `extension` directly in `dir`, sorted.
fn stems(dir: &Path, extension: &str) -> Vec<String> {
    let mut stems: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| entry.expect("readable entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == extension))
        .map(|path| path.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    stems.sort();
    stems
}

#[test]
fn every_pass_file_is_named_after_a_registered_flag() {
    let flags = every_flag();
    let files = stems(&crate_root().join("src"), "rs");
    for flag in &flags {
        let file = flag.replace('-', "_");
        assert!(
            files.contains(&file),
            "pass {flag}: expected its file src/{file}.rs"
        );
    }
    for file in &files {
        let flag = file.replace('_', "-");
        assert!(
            NOT_PASSES.contains(&file.as_str()) || flags.contains(&flag.as_str()),
            "src/{file}.rs is neither a registered pass (no flag {flag}) nor one of {NOT_PASSES:?}; \
             shared helpers go in src/support/"
        );
    }
    for file in stems(&crate_root().join("src/support"), "rs") {
        assert!(
            !flags.contains(&file.replace('_', "-").as_str()),
            "src/support/{file}.rs is named after a pass; passes live in src/"
        );
    }
}

#[test]
fn every_pass_golden_is_named_after_the_pass_it_runs() {
    let directory = crate_root().join("../../tests/filetests/passes");
    let goldens = stems(&directory, "abo");
    for golden in &goldens {
        let text = std::fs::read_to_string(directory.join(format!("{golden}.abo")))
            .expect("readable golden");
        let header = text.lines().next().unwrap_or_default();
        let flag = header
            .strip_prefix("// run: pass ")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| {
                panic!("passes/{golden}.abo: first line must be `// run: pass FLAG ...`")
            });
        assert!(
            every_flag().contains(&flag),
            "passes/{golden}.abo runs {flag}, which is not a registered pass"
        );
        assert!(
            golden == flag || golden.starts_with(&format!("{flag}-")),
            "passes/{golden}.abo runs {flag}: name it {flag}.abo or {flag}-<aspect>.abo"
        );
    }
    for pass in PASSES {
        assert!(
            goldens.iter().any(|golden| golden == pass.name),
            "pass {}: expected the golden tests/filetests/passes/{}.abo",
            pass.name,
            pass.name
        );
    }
}

#[test]
fn the_pipeline_accepts_exactly_the_targets_that_have_a_lowering() {
    for target in Transport::ALL {
        let name = target.name();
        let accepted = PipelineOptions::new(target).validate().is_ok();
        assert_eq!(
            accepted,
            lowering_for(target).is_some(),
            "--target {name}: accepted is {accepted}, but the registry's lowering is {:?}",
            lowering_for(target).map(|lowering| lowering.name)
        );
    }
}
