//! What the rdma-core cross-checks share: compiling a reference C program with the system
//! compiler, running it on the cases' input lines, splitting what it prints into layout facts
//! (`sizeof.*`, `offsetof.*`, `const.*` with a decimal value) and one `<label> <hex>` line per
//! case, and comparing the facts with ours, naming the first that differs; and the deterministic
//! input generator ([`Inputs`]) the cases are drawn from.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Compiles `tests/c/<name>.c` (with `-I` for each of `includes`) into `directory`.
pub fn compile_reference(directory: &Path, name: &str, includes: &[&Path]) -> PathBuf {
    std::fs::create_dir_all(directory).expect("create the build directory");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let executable = directory.join(name);
    let mut command = Command::new("cc");
    command.args(["-std=gnu11", "-O1", "-Wall", "-Wextra"]);
    for include in includes {
        command.arg("-I").arg(include);
    }
    let output = command
        .arg("-o")
        .arg(&executable)
        .arg(&source)
        .output()
        .unwrap_or_else(|error| panic!("cannot run the C compiler `cc`: {error}"));
    assert!(
        output.status.success(),
        "compiling {} failed:\n{}",
        source.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    executable
}

/// What the reference program printed for `inputs` (one case per line): its layout facts and
/// its case lines (label, hex), in order.
pub fn run_reference(
    executable: &Path,
    inputs: &[String],
) -> (BTreeMap<String, u64>, Vec<(String, String)>) {
    let stdin_text: String = inputs.iter().map(|input| format!("{input}\n")).collect();
    let mut child = Command::new(executable)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the reference program");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin_text.as_bytes())
        .expect("write inputs");
    let output = child
        .wait_with_output()
        .expect("wait for the reference program");
    assert!(
        output.status.success(),
        "reference program failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).expect("ASCII output");
    let mut layouts = BTreeMap::new();
    let mut case_lines = Vec::new();
    for line in stdout.lines() {
        let (label, value) = line.split_once(' ').expect("`label value` lines");
        if label.starts_with("sizeof.")
            || label.starts_with("offsetof.")
            || label.starts_with("const.")
        {
            layouts.insert(label.to_string(), value.parse::<u64>().expect("decimal"));
        } else {
            case_lines.push((label.to_string(), value.to_string()));
        }
    }
    assert_eq!(
        case_lines.len(),
        inputs.len(),
        "one output line per input line"
    );
    for (index, ((label, _), input)) in case_lines.iter().zip(inputs).enumerate() {
        let command = input.split(' ').next().unwrap_or_default();
        assert_eq!(
            label,
            &format!("{command}#{}", index + 1),
            "output out of step"
        );
    }
    (layouts, case_lines)
}

/// Every fact the program printed equals ours, and it printed every fact we check.
pub fn check_layouts(theirs: &BTreeMap<String, u64>, ours: &BTreeMap<String, u64>) {
    for (name, value) in theirs {
        let mine = ours
            .get(name)
            .unwrap_or_else(|| panic!("{name} is not checked on our side"));
        assert_eq!(mine, value, "{name}: ours {mine}, rdma-core {value}");
    }
    for name in ours.keys() {
        assert!(
            theirs.contains_key(name),
            "{name} not printed by the reference program"
        );
    }
}

/// The bytes of a hex string.
pub fn bytes_of_hex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&hex[at..at + 2], 16).expect("hex"))
        .collect()
}

/// xorshift64*: deterministic inputs without a dependency.
pub struct Inputs(pub u64);
impl Inputs {
    /// The next 64 bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value below `bound`.
    #[allow(
        dead_code,
        reason = "each cross-check includes this module and uses part of it"
    )]
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}
