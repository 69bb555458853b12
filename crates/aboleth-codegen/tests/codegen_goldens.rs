//! Code-generation goldens: every `.ttir` file under `tests/filetests/codegen/` is a Triton
//! kernel with aboleth calls; the stage (`run_stage`) runs on it as its first line says, and
//! what it produces is compared with the sibling `.out` file. Each file is its own named test
//! (`codegen/p2p/alltoall.ttir`), so `cargo test -p aboleth-codegen --test codegen_goldens
//! alltoall` runs a few, and a mismatch prints a line diff. `ABOLETH_BLESS=1 cargo test -p
//! aboleth-codegen` (or `make bless`) rewrites the `.out` files (review the diff); they are
//! never edited by hand.
//!
//! First-line forms (a TTIR `//` comment, so the file is still TTIR and its line numbers are
//! the ones the stage reports):
//! - `// run: codegen target=T [passes-off] [immediate-signals] [packet-signals]`: the
//!   generated TTIR;
//! - `// run: error target=T [...]`: the stage must refuse the kernel; its message. The
//!   lifter's located errors live in `codegen/lift/`, one file per error.
//!
//! What it does not check: that the generated TTIR compiles further in Triton (the Python tests
//! and `tests/gpu` do), or what the simulator makes of the lowered kernel (`aboleth-sim`).

use std::path::{Path, PathBuf};

use aboleth_abi::Transport;
use aboleth_codegen::{StageOptions, run_stage};
use aboleth_passes::pipeline::PipelineOptions;
use libtest_mimic::{Arguments, Failed, Trial};

fn repository_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn goldens_root() -> PathBuf {
    repository_root().join("tests/filetests/codegen")
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("the codegen goldens directory exists") {
        let path = entry.expect("readable entry").path();
        if path.is_dir() {
            collect(&path, out);
        } else if path
            .extension()
            .is_some_and(|extension| extension == "ttir")
        {
            out.push(path);
        }
    }
}

/// The file's name relative to the repository, as tests and diagnostics name it.
fn relative_name(path: &Path) -> String {
    let root = repository_root()
        .canonicalize()
        .expect("the repository root exists");
    let path = path.canonicalize().expect("the golden input exists");
    path.strip_prefix(&root)
        .unwrap_or(&path)
        .display()
        .to_string()
}

/// What the stage makes of the file, as its first line asks.
fn run_file(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|error| error.to_string())?;
    let name = relative_name(path);
    let header = text.lines().next().unwrap_or_default();
    let words: Vec<&str> = header
        .strip_prefix("// run:")
        .ok_or_else(|| format!("{name}: the first line must be `// run: ...`"))?
        .split_whitespace()
        .collect();
    let target_name = words
        .iter()
        .find_map(|word| word.strip_prefix("target="))
        .ok_or_else(|| format!("{name}: the run line names no target=T"))?;
    let target = Transport::from_name(target_name)
        .ok_or_else(|| format!("{name}: unknown target {target_name}"))?;
    let known = [
        "codegen",
        "error",
        "passes-off",
        "immediate-signals",
        "packet-signals",
    ];
    if let Some(unknown) = words
        .iter()
        .find(|word| !word.starts_with("target=") && !known.contains(word))
    {
        return Err(format!("{name}: unknown run word {unknown}"));
    }
    let mut pipeline = PipelineOptions::new(target);
    pipeline.passes_off = words.contains(&"passes-off");
    pipeline.immediate_signals = words.contains(&"immediate-signals");
    pipeline.packet_signals = words.contains(&"packet-signals");
    pipeline
        .validate()
        .map_err(|error| format!("{name}: {error}"))?;
    let options = StageOptions {
        pipeline,
        source_name: name.clone(),
        plan_only: false,
    };
    let result = run_stage(&text, &options);
    match words.first().copied() {
        Some("codegen") => match result {
            Ok(output) if output.summary.changed => Ok(output.ttir),
            Ok(_) => Err(format!(
                "{name}: the kernel has no aboleth calls to generate"
            )),
            Err(error) => Err(format!("{name}: the stage failed: {error}")),
        },
        Some("error") => match result {
            Ok(_) => Err(format!(
                "{name}: expected an error, but the stage succeeded"
            )),
            Err(error) => Ok(format!("{error}\n")),
        },
        other => Err(format!("{name}: unknown run mode {other:?}")),
    }
}

/// A line diff of `expected` against `actual` (longest common subsequence; `-` expected only,
/// `+` actual only), with two lines of context around each change.
fn line_diff(expected: &str, actual: &str) -> String {
    let old: Vec<&str> = expected.lines().collect();
    let new: Vec<&str> = actual.lines().collect();
    // common[i][j]: the length of the longest common subsequence of old[i..] and new[j..].
    let mut common = vec![vec![0usize; new.len() + 1]; old.len() + 1];
    for i in (0..old.len()).rev() {
        for j in (0..new.len()).rev() {
            common[i][j] = if old[i] == new[j] {
                common[i + 1][j + 1] + 1
            } else {
                common[i + 1][j].max(common[i][j + 1])
            };
        }
    }
    let mut lines: Vec<(char, usize, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < new.len() {
        if i < old.len() && j < new.len() && old[i] == new[j] {
            lines.push((' ', i + 1, old[i]));
            i += 1;
            j += 1;
        } else if i < old.len() && (j == new.len() || common[i + 1][j] >= common[i][j + 1]) {
            lines.push(('-', i + 1, old[i]));
            i += 1;
        } else {
            lines.push(('+', j + 1, new[j]));
            j += 1;
        }
    }
    let context = 2;
    let changed: Vec<usize> = (0..lines.len()).filter(|&k| lines[k].0 != ' ').collect();
    let mut out = String::new();
    let mut last_printed: Option<usize> = None;
    for (k, (sign, number, line)) in lines.iter().enumerate() {
        let near = changed.iter().any(|&c| c.abs_diff(k) <= context);
        if !near {
            continue;
        }
        if last_printed.is_some_and(|last| last + 1 != k) {
            out.push_str("...\n");
        }
        let side = if *sign == '+' { "actual" } else { "expected" };
        out.push_str(&format!("{sign} {side}:{number:<5} {line}\n"));
        last_printed = Some(k);
    }
    if expected.ends_with('\n') != actual.ends_with('\n') {
        out.push_str("(the two differ in their final newline)\n");
    }
    out
}

fn check(path: &Path, bless: bool) -> Result<(), Failed> {
    let actual = run_file(path)?;
    let golden = path.with_extension("out");
    if bless {
        std::fs::write(&golden, &actual).map_err(|error| error.to_string())?;
        return Ok(());
    }
    let expected = std::fs::read_to_string(&golden).map_err(|error| {
        format!(
            "{}: {error} (run with ABOLETH_BLESS=1 to create it)",
            golden.display()
        )
    })?;
    if expected == actual {
        return Ok(());
    }
    Err(format!(
        "the stage's output differs from {} (run with ABOLETH_BLESS=1 to accept, then review \
         the diff)\n{}",
        relative_name(&golden),
        line_diff(&expected, &actual)
    )
    .into())
}

fn main() {
    let arguments = Arguments::from_args();
    let bless = std::env::var("ABOLETH_BLESS").is_ok_and(|value| value == "1");
    let mut files = Vec::new();
    collect(&goldens_root(), &mut files);
    files.sort();
    let mut trials: Vec<Trial> = files
        .into_iter()
        .map(|path| {
            let name = relative_name(&path)
                .trim_start_matches("tests/filetests/")
                .to_string();
            Trial::test(name, move || check(&path, bless))
        })
        .collect();
    // Each transport must have goldens: an emptied directory is a failure, not a pass.
    for transport in ["p2p", "proxy", "mlx5"] {
        let directory = goldens_root().join(transport);
        trials.push(Trial::test(
            format!("codegen/{transport} has goldens"),
            move || {
                let mut found = Vec::new();
                if directory.is_dir() {
                    collect(&directory, &mut found);
                }
                if found.is_empty() {
                    return Err(format!("no .ttir goldens under {}", directory.display()).into());
                }
                Ok(())
            },
        ));
    }
    trials.push(Trial::test("line diff marks changed lines", || {
        let diff = line_diff("a\nb\nc\n", "a\nx\nc\n");
        let expected =
            "  expected:1     a\n- expected:2     b\n+ actual:2     x\n  expected:3     c\n";
        if diff != expected {
            return Err(format!("unexpected diff:\n{diff}").into());
        }
        Ok(())
    }));
    libtest_mimic::run(&arguments, trials).exit();
}
