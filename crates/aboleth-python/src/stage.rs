//! The `aboleth` Triton stage as Python calls it: `run_stage(ttir_text, options, *,
//! source_name, plan_only) -> (ttir_text, summary_json)` (`docs/TRITON_BRIDGE.md`, "The
//! stage"), `version()`, and `device_library(target)`, the tier-1 library's files
//! ([`aboleth_codegen::device_library`]).
//!
//! What it does: parses the TTIR with [`aboleth_ttir`] (so that text that does not parse is
//! reported at its TTIR position, and to list the module's functions), hands it to
//! [`aboleth_codegen::run_stage`] with the [`PipelineOptions`] that `config.rs` made, and
//! serializes the [`StageSummary`]: `aboleth_codegen`'s summary plus the bridge version, the
//! functions and the options. With no aboleth call the text comes back unchanged with a
//! summary. Errors become Python exceptions here: `ValueError` for TTIR that does not parse
//! or communication that cannot be compiled (at the kernel's Python line), `NotImplementedError`
//! for a lowered op that TTIR code generation has no translation of.
//!
//! What it does not do: any compiler work (that belongs to `aboleth-ttir`, `aboleth-codegen`
//! and `aboleth-passes`), or checking the configuration (`config.rs` did, when it was made).

use std::fmt;

use aboleth_passes::pipeline::PipelineOptions;
use aboleth_ttir::{TtirError, TtirModule};
use pyo3::exceptions::{PyNotImplementedError, PyValueError};
use pyo3::prelude::*;
use serde::Serialize;

use crate::config::{ConfigSummary, PyPipelineOptions};

/// The bridge contract this crate implements (`v1` in the builtins' symbols).
pub const BRIDGE_VERSION: &str = "v1";

/// The version of the aboleth Rust side (this crate's).
pub const ABOLETH_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The version of the aboleth Rust side (the `aboleth-python` crate).
#[pyfunction]
pub fn version() -> &'static str {
    ABOLETH_VERSION
}

/// What the stage did, as Python reads it (`metadata["aboleth"]`, a JSON object).
#[derive(Clone, Debug, Serialize)]
pub struct StageSummary<'a> {
    /// [`BRIDGE_VERSION`].
    pub bridge: &'static str,
    /// [`ABOLETH_VERSION`].
    pub aboleth_version: &'static str,
    /// The module's `tt.func` symbols, in text order.
    pub functions: Vec<String>,
    /// What code generation did (kernel, passes, counts, the Aboleth IR, waits...).
    #[serde(flatten)]
    pub stage: &'a aboleth_codegen::StageSummary,
    /// The options the stage ran with.
    pub config: ConfigSummary<'a>,
}

impl StageSummary<'_> {
    /// The JSON text Python receives. Keys are sorted at every level (through
    /// `serde_json::Value`), so the text does not depend on field order.
    pub fn to_json(&self) -> String {
        serde_json::to_value(self)
            .expect("a stage summary has string keys only")
            .to_string()
    }
}

/// What the stage returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageOutput {
    /// The TTIR text for the rest of Triton's pipeline.
    pub ttir: String,
    /// The [`StageSummary`] as JSON.
    pub summary_json: String,
}

/// Why the stage did not produce TTIR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StageError {
    /// The TTIR text does not parse.
    Parse(TtirError),
    /// Valid, but code generation has no translation for an op it needs.
    NotBuilt {
        /// What is missing, naming the op and what works instead.
        message: String,
    },
    /// The kernel's communication cannot be compiled: the message names the source line.
    Compile(String),
}

impl fmt::Display for StageError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StageError::Parse(error) => write!(formatter, "{error}"),
            StageError::NotBuilt { message } | StageError::Compile(message) => {
                write!(formatter, "aboleth: {message}")
            }
        }
    }
}

impl std::error::Error for StageError {}

impl From<StageError> for PyErr {
    fn from(error: StageError) -> PyErr {
        match error {
            StageError::NotBuilt { .. } => PyNotImplementedError::new_err(error.to_string()),
            StageError::Parse(_) | StageError::Compile(_) => {
                PyValueError::new_err(error.to_string())
            }
        }
    }
}

/// Runs the stage on `ttir_text` for `pipeline`, reporting TTIR positions under `source_name`;
/// with `plan_only`, plans and lowers but leaves the TTIR as it is (what `aboleth compile
/// --emit aboleth|stats` needs).
pub fn run_stage(
    ttir_text: &str,
    pipeline: &PipelineOptions,
    source_name: &str,
    plan_only: bool,
) -> Result<StageOutput, StageError> {
    let module = TtirModule::parse(ttir_text, source_name).map_err(StageError::Parse)?;
    let functions: Vec<String> = module
        .functions()
        .filter_map(|id| module.operation(id).symbol().map(str::to_string))
        .collect();
    let output = aboleth_codegen::run_stage(
        ttir_text,
        &aboleth_codegen::StageOptions {
            pipeline: pipeline.clone(),
            source_name: source_name.to_string(),
            plan_only,
        },
    )
    .map_err(|error| {
        if error.not_built {
            StageError::NotBuilt {
                message: error.message,
            }
        } else {
            StageError::Compile(error.message)
        }
    })?;
    let summary = StageSummary {
        bridge: BRIDGE_VERSION,
        aboleth_version: ABOLETH_VERSION,
        functions,
        stage: &output.summary,
        config: ConfigSummary::from(pipeline),
    };
    Ok(StageOutput {
        summary_json: summary.to_json(),
        ttir: output.ttir,
    })
}

/// run_stage(ttir_text, options, *, source_name="<ttir>", plan_only=False) -> (ttir_text,
/// summary_json)
///
/// Runs the aboleth stage on TTIR text as Triton 3.6's `module.str()` prints it, for
/// `options` (a PipelineOptions); TTIR positions are reported under `source_name`. With
/// `plan_only` the pipeline runs but the TTIR comes back as it was (the summary is the
/// product). The GIL is released while it runs.
///
/// A module without aboleth extern calls comes back unchanged with a JSON summary; a module with
/// some comes back with the communication compiled for the target. Raises ValueError for TTIR
/// that does not parse or communication that cannot be compiled (located at the kernel's Python
/// line), NotImplementedError for an op code generation has no translation of.
#[pyfunction(name = "run_stage")]
#[pyo3(signature = (ttir_text, options, *, source_name = "<ttir>", plan_only = false))]
pub fn python_run_stage(
    py: Python<'_>,
    ttir_text: &str,
    options: PyRef<'_, PyPipelineOptions>,
    source_name: &str,
    plan_only: bool,
) -> PyResult<(String, String)> {
    let pipeline = &options.inner;
    let output = py.detach(|| run_stage(ttir_text, pipeline, source_name, plan_only))?;
    Ok((output.ttir, output.summary_json))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::pipeline_options;

    const PLAIN: &str = "module {\n  tt.func public @k(%x: i64 loc(unknown)) attributes {noinline = false} {\n    tt.return loc(#loc1)\n  } loc(#loc)\n} loc(#loc)\n#loc = loc(\"k.py\":1:0)\n#loc1 = loc(\"k.py\":3:4)\n";

    const WITH_CALLS: &str = "module {\n  tt.func public @k(%x: i64 loc(unknown)) attributes {noinline = false} {\n    %t = tt.extern_elementwise %x {libname = \"aboleth\", libpath = \"\", pure = false, symbol = \"__aboleth_v1__wait\"} : (i64) -> i32 loc(#loc2)\n    %u = tt.extern_elementwise %x {libname = \"aboleth\", libpath = \"\", pure = false, symbol = \"__aboleth_v1__fence\"} : (i64) -> i32 loc(unknown)\n    %v = tt.extern_elementwise %x {libname = \"libdevice\", libpath = \"\", pure = true, symbol = \"__nv_foo\"} : (i64) -> i32 loc(unknown)\n    tt.return loc(#loc1)\n  } loc(#loc)\n} loc(#loc)\n#loc = loc(\"k.py\":1:0)\n#loc1 = loc(\"k.py\":3:4)\n#loc2 = loc(\"k.py\":7:8)\n";

    fn mlx5_without_batching() -> PipelineOptions {
        pipeline_options(
            "mlx5",
            false,
            ["batch-commands".to_string()],
            (false, false),
            false,
        )
        .unwrap()
    }

    #[test]
    fn a_module_without_aboleth_calls_comes_back_unchanged_with_a_summary() {
        let output = run_stage(PLAIN, &mlx5_without_batching(), "k.ttir", false).unwrap();
        assert_eq!(output.ttir, PLAIN);
        let summary: serde_json::Value = serde_json::from_str(&output.summary_json).unwrap();
        assert_eq!(
            summary,
            serde_json::json!({
                "bridge": "v1", "aboleth_version": ABOLETH_VERSION, "changed": false,
                "aboleth_calls": 0, "functions": ["k"], "kernel": "", "target": "mlx5",
                "passes": [], "counts": serde_json::to_value(aboleth_passes::stats::Counts::default()).unwrap(),
                "per_iteration": false, "conditional": false, "aboleth_ir": "", "waits": [],
                "config": {"target": "mlx5", "passes_off": false, "immediate_signals": false,
                           "packet_signals": false, "disabled_passes": ["batch-commands"]},
            })
        );
    }

    #[test]
    fn the_summary_text_has_its_keys_sorted() {
        let output = run_stage(PLAIN, &mlx5_without_batching(), "k.ttir", false).unwrap();
        assert!(
            output
                .summary_json
                .starts_with(r#"{"aboleth_calls":0,"aboleth_ir":"","aboleth_version":"#),
            "{}",
            output.summary_json
        );
        assert!(
            output.summary_json.contains(r#""config":{"disabled_passes":["batch-commands"],"immediate_signals":false,"packet_signals":false,"passes_off":false,"target":"mlx5"}"#),
            "{}",
            output.summary_json
        );
    }

    #[test]
    fn compile_errors_name_the_python_source_line() {
        let error = run_stage(WITH_CALLS, &mlx5_without_batching(), "k.ttir", false).unwrap_err();
        assert!(matches!(error, StageError::Compile(_)), "{error:?}");
        assert_eq!(
            error.to_string(),
            "aboleth: k.py:7:8: error: aboleth.wait on a value that is not a put or signal token"
        );
    }

    #[test]
    fn parse_errors_carry_the_position() {
        let error = run_stage(
            "module {\n  tt.func @k(\n",
            &mlx5_without_batching(),
            "k.ttir",
            false,
        )
        .unwrap_err();
        let StageError::Parse(parse_error) = &error else {
            panic!("{error:?}");
        };
        assert_eq!(parse_error.file, "k.ttir");
        assert!(parse_error.line >= 1, "{parse_error}");
        assert!(error.to_string().starts_with("k.ttir:"), "{error}");
    }
}

/// device_library(target, mutation=None) -> (files, wait_sites, operations): the tier-1 CUDA
/// library for transport `target` ("p2p", "proxy" or "mlx5"), deliberately broken by `mutation` when
/// one is named (a GPU test's check that it is caught): `(relative path, contents)` of every file, `(site id,
/// operation variant, what it waits for)` of every bounded wait, and the operations' names.
/// `ValueError` for an unknown transport or a mutation of another transport's library,
/// `NotImplementedError` for a transport without a device library (efa, ionic).
#[pyfunction]
#[allow(
    clippy::type_complexity,
    reason = "the tuple is what Python unpacks; aboleth.device_library names its parts"
)]
#[pyo3(signature = (target, mutation=None))]
pub fn device_library(
    target: &str,
    mutation: Option<&str>,
) -> PyResult<(
    Vec<(String, String)>,
    Vec<(u32, String, &'static str)>,
    Vec<&'static str>,
)> {
    let transport = aboleth_abi::Transport::from_name(target).ok_or_else(|| {
        PyValueError::new_err(format!(
            "aboleth: unknown transport {target:?}; the device library is generated for \"p2p\", \"proxy\" and \"mlx5\""
        ))
    })?;
    let mutation = match mutation {
        None => None,
        Some(name) => Some(
            aboleth_codegen::cuda::CudaMutation::from_name(name).ok_or_else(|| {
                PyValueError::new_err(format!(
                    "aboleth: unknown device-library mutation {name:?}; known: {}",
                    aboleth_codegen::cuda::CudaMutation::ALL
                        .map(|mutation| mutation.name())
                        .join(", ")
                ))
            })?,
        ),
    };
    let library = aboleth_codegen::device_library::generate_mutated(transport, mutation).map_err(
        |error| {
            let message = format!("aboleth: {}", error.message.trim_start_matches("error: "));
            if error.not_built {
                PyNotImplementedError::new_err(message)
            } else {
                PyValueError::new_err(message)
            }
        },
    )?;
    Ok((library.files, library.wait_sites, library.operations))
}
