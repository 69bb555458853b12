//! Golden tests of the `aboleth` command line: every `tests/filetests/cli/NAME.args` file holds
//! one command's arguments (one per line, after the program name; `#` lines are comments), run
//! from the repository root; its exit status, standard output and standard error are compared
//! with `NAME.out`. `ABOLETH_BLESS=1 cargo test -p aboleth-cli` rewrites the `.out` files
//! (review the diff); they are never edited by hand. Triton kernels (`.py`) are covered by
//! `python/tests/test_cli.py`, which runs where the Python package is installed.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repository_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(arguments_file: &Path) -> String {
    let text = std::fs::read_to_string(arguments_file).expect("readable arguments file");
    let arguments: Vec<&str> = text
        .lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .collect();
    let output = Command::new(env!("CARGO_BIN_EXE_aboleth"))
        .args(&arguments)
        .current_dir(repository_root())
        .env_remove("ABOLETH_PYTHON")
        .output()
        .expect("the aboleth binary runs");
    format!(
        "status: {}\n--- stdout\n{}--- stderr\n{}",
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn command_line_goldens() {
    let directory = repository_root().join("tests/filetests/cli");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&directory)
        .expect("tests/filetests/cli exists")
        .map(|entry| entry.expect("readable entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "args"))
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no .args files in {}",
        directory.display()
    );
    let bless = std::env::var_os("ABOLETH_BLESS").is_some();
    let mut mismatches = Vec::new();
    for file in &files {
        let actual = run(file);
        let expected_path = file.with_extension("out");
        if bless {
            std::fs::write(&expected_path, &actual).expect("writable .out");
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if expected != actual {
            mismatches.push(format!(
                "{}:\n--- expected\n{expected}\n--- actual\n{actual}",
                file.display()
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} golden(s) differ (ABOLETH_BLESS=1 rewrites them):\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

/// `aboleth opt ... | head -1`: a reader that goes away ends the command quietly, without a
/// panic message and with status 0.
#[test]
fn a_closed_standard_output_ends_the_command_quietly() {
    use std::io::Read;
    let mut child = Command::new(env!("CARGO_BIN_EXE_aboleth"))
        .args(["opt", "examples/ir/alltoall.abo", "--print-after-all"])
        .current_dir(repository_root())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the aboleth binary runs");
    let mut first = [0u8; 16];
    child
        .stdout
        .as_mut()
        .expect("piped")
        .read_exact(&mut first)
        .expect("some output");
    drop(child.stdout.take());
    let output = child.wait_with_output().expect("it ends");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("panicked"),
        "a broken pipe must not panic: {stderr}"
    );
    assert_eq!(output.status.code(), Some(0), "{stderr}");
}
