//! Golden text tests: every `.abo` file under `tests/filetests/` runs as its first line says,
//! and its output is compared with the sibling `.out` file. `ABOLETH_BLESS=1 cargo test`
//! rewrites the `.out` files (review the diff); they are never edited by hand.
//!
//! First-line forms:
//! - `// run: pass NAME target=T [immediate-signals]`: run one planning pass (or `lower-mlx5`...)
//!   and print the IR;
//! - `// run: pipeline target=T [passes-off] [immediate-signals] [stats]`: run the whole
//!   pipeline, print IR or stats;
//! - `// run: error [target=T]`: parse (and compile for T) and print the diagnostic.

use aboleth_abi::Transport;
use std::path::{Path, PathBuf};

use aboleth_ir::{
    pliron::context::Context,
    text::{parse_module, print_module},
    walk::kernels,
};
use aboleth_passes::{
    PipelineOptions,
    registry::{PassContext, find_any},
    run_pipeline,
    stats::count_kernel,
};

fn filetests_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/filetests")
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("filetests directory exists") {
        let path = entry.expect("readable entry").path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "abo") {
            out.push(path);
        }
    }
}

fn target_of(words: &[&str]) -> Transport {
    words
        .iter()
        .find_map(|w| w.strip_prefix("target="))
        .map(|name| Transport::from_name(name).unwrap_or_else(|| panic!("unknown target {name}")))
        .unwrap_or(Transport::Mlx5)
}

fn run_file(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("readable test");
    let header = text.lines().next().unwrap_or_default();
    let words: Vec<&str> = header
        .strip_prefix("// run:")
        .unwrap_or_else(|| panic!("{}: first line must be `// run: ...`", path.display()))
        .split_whitespace()
        .collect();
    let file = path
        .strip_prefix(filetests_root().parent().unwrap().parent().unwrap())
        .unwrap_or(path)
        .display()
        .to_string();
    let ctx = &mut Context::new();
    let parsed = parse_module(ctx, &text, &file);
    match words.first().copied() {
        Some("error") => match parsed {
            Err(diagnostic) => format!("{diagnostic}\n"),
            Ok(module) => {
                let options = PipelineOptions::new(target_of(&words));
                match run_pipeline(ctx, module, &options) {
                    Err(diagnostic) => format!("{diagnostic}\n"),
                    Ok(_) => panic!("{file}: expected an error, but it compiled"),
                }
            }
        },
        Some("pass") => {
            let module = parsed.unwrap_or_else(|d| panic!("{d}"));
            let name = words[1];
            let pass_context = PassContext {
                target: target_of(&words),
                immediate_signals: words.contains(&"immediate-signals"),
                packet_signals: words.contains(&"packet-signals"),
            };
            let run = find_any(name).unwrap_or_else(|| panic!("{file}: unknown pass {name}"));
            run(ctx, module, &pass_context).unwrap_or_else(|d| panic!("{d}"));
            aboleth_ir::verify::verify_module(ctx, module).unwrap_or_else(|d| panic!("{d}"));
            print_module(ctx, module)
        }
        Some("pipeline") => {
            let module = parsed.unwrap_or_else(|d| panic!("{d}"));
            let mut options = PipelineOptions::new(target_of(&words));
            options.passes_off = words.contains(&"passes-off");
            options.immediate_signals = words.contains(&"immediate-signals");
            options.packet_signals = words.contains(&"packet-signals");
            run_pipeline(ctx, module, &options).unwrap_or_else(|d| panic!("{d}"));
            if words.contains(&"stats") {
                let mut out = String::new();
                for kernel in kernels(ctx, module) {
                    let (counts, per_iteration, conditional) = count_kernel(ctx, kernel);
                    out.push_str(&format!(
                        "{}\nper_iteration={per_iteration} conditional={conditional}\n",
                        serde_json::to_string_pretty(&counts).unwrap()
                    ));
                }
                out
            } else {
                print_module(ctx, module)
            }
        }
        other => panic!("{file}: unknown run mode {other:?}"),
    }
}

#[test]
fn filetests_match_their_golden_output() {
    let mut files = Vec::new();
    collect(&filetests_root(), &mut files);
    files.sort();
    assert!(
        files.len() >= 10,
        "expected golden tests under {}",
        filetests_root().display()
    );
    let bless = std::env::var("ABOLETH_BLESS").is_ok_and(|v| v == "1");
    let mut failures = Vec::new();
    for path in files {
        let actual = run_file(&path);
        let golden = path.with_extension("out");
        if bless {
            std::fs::write(&golden, &actual).expect("writable golden");
            continue;
        }
        let expected = std::fs::read_to_string(&golden).unwrap_or_default();
        if expected != actual {
            failures.push(format!(
                "{}: output differs from {} (run with ABOLETH_BLESS=1 to accept)\n--- actual ---\n{actual}",
                path.display(),
                golden.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
