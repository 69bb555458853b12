//! The repository's tidy checks, as functions its test (`tests/tidy.rs`) runs over the
//! checkout: every Rust file under `crates/` opens with a `//!` paragraph, every Python module of
//! the package opens with a docstring, and every path `ARCHITECTURE.md` names exists.
//!
//! What it does not do: judge whether a doc is true (reviewers do), or format and lint code
//! (`cargo fmt` and `clippy` do). It reads files and returns what it found; it writes nothing.

use std::path::{Path, PathBuf};

/// One thing a check found wrong: where, and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The file (relative to the repository root) and, where it helps, `:line`.
    pub place: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{}: {}", self.place, self.message)
    }
}

/// The repository root (two levels above this crate).
pub fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every file under `directory` whose name ends with `extension`, sorted, skipping `target`
/// directories and hidden ones.
pub fn files_with_extension(directory: &Path, extension: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![directory.to_path_buf()];
    while let Some(current) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    pending.push(path);
                }
            } else if name.ends_with(extension) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// A Rust file whose first line is not `//!` followed by text (a module's opening paragraph
/// says what it does and does not do).
pub fn rust_module_doc_finding(root: &Path, path: &Path, text: &str) -> Option<Finding> {
    let first = text.lines().next().unwrap_or("");
    let has_doc = first
        .strip_prefix("//!")
        .is_some_and(|rest| rest.trim().len() >= 3);
    (!has_doc).then(|| Finding {
        place: format!("{}:1", relative(root, path)),
        message: "the module does not open with a `//!` paragraph saying what it does and does not do; add one"
            .to_string(),
    })
}

/// A Python module whose first statement is not a docstring.
pub fn python_module_doc_finding(root: &Path, path: &Path, text: &str) -> Option<Finding> {
    let first_statement = text
        .lines()
        .map(str::trim_start)
        .find(|line| !line.is_empty() && !line.starts_with('#'))
        .unwrap_or("");
    let has_doc = first_statement.starts_with("\"\"\"") || first_statement.starts_with("r\"\"\"");
    (!has_doc).then(|| Finding {
        place: format!("{}:1", relative(root, path)),
        message: "the module does not open with a docstring saying what it does; add one"
            .to_string(),
    })
}

/// Expands one level of `{a,b}` alternatives, recursively: `src/{x,y}.rs` gives `src/x.rs` and
/// `src/y.rs`.
pub fn expand_braces(pattern: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (pattern.find('{'), pattern.find('}')) else {
        return vec![pattern.to_string()];
    };
    if close < open {
        return vec![pattern.to_string()];
    }
    let (before, after) = (&pattern[..open], &pattern[close + 1..]);
    pattern[open + 1..close]
        .split(',')
        .flat_map(|alternative| expand_braces(&format!("{before}{}{after}", alternative.trim())))
        .collect()
}

const PATH_EXTENSIONS: [&str; 11] = [
    ".rs", ".md", ".py", ".toml", ".abo", ".out", ".ttir", ".json", ".sh", ".ptx", ".pyi",
];

/// Whether a backticked span names a file or directory (rather than code, a flag or a command).
pub fn looks_like_path(span: &str) -> bool {
    let plain = !span.is_empty()
        && !span.contains([' ', ':', '(', '"', '=', '|'])
        && !span.starts_with(['-', '.', '$', '/'])
        && span.is_ascii();
    plain
        && (span.contains('/')
            || PATH_EXTENSIONS
                .iter()
                .any(|extension| span.ends_with(extension)))
}

/// The part of a path before its first component with a placeholder (`<pass-flag>.abo`, `*`):
/// what can be checked to exist.
pub fn checkable_prefix(path: &str) -> &str {
    match path.find(['<', '*']) {
        Some(position) => match path[..position].rfind('/') {
            Some(slash) => &path[..slash],
            None => "",
        },
        None => path.trim_end_matches('/'),
    }
}

/// The backticked spans of one line.
pub fn backticked_spans(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

/// Every existing path `ARCHITECTURE.md` names (resolved as [`architecture_path_findings`]
/// resolves them), relative to the root, without a trailing `/`.
pub fn architecture_named_paths(root: &Path, text: &str) -> Vec<String> {
    let mut named = Vec::new();
    walk_architecture_paths(root, text, |resolved, _, _| {
        if let Some(path) = resolved {
            named.push(path);
        }
    });
    named.sort();
    named.dedup();
    named
}

/// The Rust files under `crates/*/src` that `ARCHITECTURE.md` does not reach in one hop: the file
/// is not named, and neither is its crate (for `src/lib.rs` and `src/main.rs`) or its directory
/// (for a `mod.rs`).
pub fn unmapped_source_findings(root: &Path, text: &str) -> Vec<Finding> {
    let named = architecture_named_paths(root, text);
    files_with_extension(&root.join("crates"), ".rs")
        .iter()
        .map(|path| relative(root, path))
        .filter(|path| path.contains("/src/"))
        .filter(|path| {
            let directory = path
                .rsplit_once('/')
                .map(|(directory, _)| directory)
                .unwrap_or("");
            let crate_root_file = path.ends_with("/src/lib.rs") || path.ends_with("/src/main.rs");
            let crate_directory = directory.trim_end_matches("/src");
            let module_directory_file = path.ends_with("/mod.rs");
            let reached = named.contains(path)
                || (crate_root_file && named.iter().any(|name| name == crate_directory))
                || (module_directory_file && named.iter().any(|name| name == directory));
            !reached
        })
        .map(|path| Finding {
            place: path.clone(),
            message:
                "ARCHITECTURE.md's code map does not name this file; add it to its crate's bullet"
                    .to_string(),
        })
        .collect()
}

/// Every path `ARCHITECTURE.md` names that exists nowhere it could mean: relative to the root,
/// or to the directory its bullet opens with (and that directory's `src/`), so `src/text.rs` in
/// the `crates/aboleth-ir` bullet means `crates/aboleth-ir/src/text.rs`.
pub fn architecture_path_findings(root: &Path, text: &str) -> Vec<Finding> {
    let mut findings = Vec::new();
    walk_architecture_paths(root, text, |resolved, line_number, message| {
        if resolved.is_none() {
            findings.push(Finding {
                place: format!("ARCHITECTURE.md:{line_number}"),
                message,
            });
        }
    });
    findings
}

/// Calls `visit(resolved, line_number, message)` for every path span of `text`: `resolved` is
/// the existing path relative to the root, or `None` with `message` saying what was looked for.
fn walk_architecture_paths(
    root: &Path,
    text: &str,
    mut visit: impl FnMut(Option<String>, usize, String),
) {
    let mut bullet_directory: Option<String> = None;
    for (index, line) in text.lines().enumerate() {
        if line.starts_with("- ") || line.starts_with('#') || line.trim().is_empty() {
            bullet_directory = None;
        }
        for span in backticked_spans(line) {
            if !looks_like_path(span) {
                continue;
            }
            for path in expand_braces(span) {
                let prefix = checkable_prefix(&path);
                if prefix.is_empty() {
                    continue;
                }
                let mut bases = vec![String::new()];
                if let Some(directory) = &bullet_directory {
                    bases.push(format!("{directory}/"));
                    bases.push(format!("{directory}/src/"));
                }
                let resolved = bases
                    .iter()
                    .map(|base| format!("{base}{prefix}"))
                    .find(|candidate| root.join(candidate).exists());
                let message = format!(
                    "`{span}` names `{prefix}`, which does not exist (looked under the root{}); fix the path or the code map",
                    bullet_directory
                        .as_ref()
                        .map(|directory| format!(" and {directory}"))
                        .unwrap_or_default()
                );
                visit(resolved, index + 1, message);
            }
            if bullet_directory.is_none() && line.starts_with("- ") {
                let directory = checkable_prefix(span).to_string();
                if root.join(&directory).is_dir() {
                    bullet_directory = Some(directory);
                }
            }
        }
    }
}
