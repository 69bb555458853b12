//! The committed type stubs of `aboleth._aboleth`, `python/aboleth/_aboleth.pyi`, are the ones
//! PyO3 generates from this crate: the `experimental-inspect` feature embeds a description of
//! the module in the cdylib, and `pyo3-introspection` reads it back and prints the stubs. The
//! test fails when the committed file differs (a `#[pyfunction]`, `#[pyclass]` or signature
//! changed without regenerating); `ABOLETH_BLESS=1 cargo test -p aboleth-python --test
//! python_stubs` (`make stubs`, also run by `make bless`) rewrites it.
//!
//! What it does not check: that the Python package uses the module as the stubs say (the
//! pytest suite runs it).

use std::path::{Path, PathBuf};

/// The first lines of the stub file, before what PyO3 generates.
const HEADER: &str = "# Generated from crates/aboleth-python by PyO3's introspection: do not edit.\n\
# Regenerate with `make stubs` (ABOLETH_BLESS=1 cargo test -p aboleth-python --test python_stubs).\n";

/// The cdylib cargo built for this test: the library target's artifacts sit next to the test
/// executable (`target/<profile>/deps/`).
fn extension_module() -> PathBuf {
    let executable = std::env::current_exe().expect("the test executable's path");
    let directory = executable.parent().expect("the deps directory");
    let library = directory.join(format!(
        "{}aboleth_python{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    ));
    assert!(
        library.is_file(),
        "{} is missing: cargo builds the cdylib with the library target",
        library.display()
    );
    library
}

fn generated_stubs() -> String {
    let module = pyo3_introspection::introspect_cdylib(extension_module(), "_aboleth")
        .expect("introspecting aboleth._aboleth");
    let files = pyo3_introspection::module_stub_files(&module);
    assert_eq!(
        files.keys().collect::<Vec<_>>(),
        [Path::new("__init__.pyi")],
        "aboleth._aboleth has no submodules: one stub file"
    );
    format!("{HEADER}{}", files[Path::new("__init__.pyi")])
}

#[test]
fn the_committed_stubs_are_the_generated_ones() {
    let committed_path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/aboleth/_aboleth.pyi");
    let generated = generated_stubs();
    if std::env::var("ABOLETH_BLESS").is_ok_and(|value| value == "1") {
        std::fs::write(&committed_path, &generated).expect("writing the stubs");
        return;
    }
    let committed = std::fs::read_to_string(&committed_path).unwrap_or_default();
    if committed != generated {
        let first_difference = committed
            .lines()
            .zip(generated.lines())
            .position(|(old, new)| old != new)
            .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
        panic!(
            "{} is not what PyO3 generates from crates/aboleth-python (first difference at line {}); \
             run `make stubs` (ABOLETH_BLESS=1 cargo test -p aboleth-python --test python_stubs) \
             and commit the result.\n--- generated ---\n{generated}",
            committed_path.display(),
            first_difference + 1
        );
    }
}

#[test]
fn the_stubs_name_every_function_and_class_python_uses() {
    let generated = generated_stubs();
    for name in [
        "def version(",
        "def packet_staging_bytes(",
        "def run_stage(",
        "def run_command_line(",
        "def transports(",
        "def connect_kinds(",
        "class PipelineOptions",
        "class TcpStoreBootstrap",
        "class World",
        "class Registration",
        "class Region",
        "class LocalRegion",
        "class DeviceTable",
        "class ExchangedRegions",
    ] {
        assert!(
            generated.contains(name),
            "{name} missing from:\n{generated}"
        );
    }
}
