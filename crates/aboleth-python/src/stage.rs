//! The `aboleth` Triton stage as the Rust side sees it: TTIR text and a configuration in, TTIR
//! text and a JSON summary out (`docs/TRITON_BRIDGE.md`, "The stage").
//!
//! What it does: reads and checks the configuration JSON, parses the TTIR with [`aboleth_ttir`],
//! and hands it to [`aboleth_codegen::run_stage`], which lifts the `tt.extern_elementwise` calls
//! whose `libname` is `aboleth`, runs the pipeline and generates TTIR for the transport. With no
//! such call the text comes back unchanged with a summary.
//!
//! What it does not do: any compiler work (that belongs to `aboleth-ttir`, `aboleth-ir` and
//! `aboleth-passes`), or any Python (the module in `lib.rs` converts errors into Python
//! exceptions).

use std::fmt;

use aboleth_abi::Transport;
use aboleth_ttir::{FileLineColumn, LineColumn, TtirError, TtirModule};
use serde::{Deserialize, Serialize};

/// The `libname` of every `aboleth.language` builtin's extern call.
pub const ABOLETH_LIBNAME: &str = "aboleth";

/// The prefix of every symbol of version 1 of the builtin contract.
pub const SYMBOL_PREFIX: &str = "__aboleth_v1__";

/// The bridge contract this crate implements (`v1` in the symbols).
pub const BRIDGE_VERSION: &str = "v1";

/// Reads a lowered transport's name ([`Transport::from_name`]).
fn deserialize_target<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Transport, D::Error> {
    let name = String::deserialize(deserializer)?;
    Transport::from_name(&name)
        .filter(|transport| transport.is_lowered())
        .ok_or_else(|| {
            let lowered: Vec<&str> = Transport::LOWERED
                .iter()
                .map(|transport| transport.name())
                .collect();
            serde::de::Error::custom(format!(
                "unknown target {name:?}, expected one of {}",
                lowered.join(", ")
            ))
        })
}

fn serialize_target<S: serde::Serializer>(
    target: &Transport,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(target.name())
}

/// What the Python hook passes as `config_json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageConfig {
    /// The transport.
    #[serde(
        deserialize_with = "deserialize_target",
        serialize_with = "serialize_target"
    )]
    pub target: Transport,
    /// Run only the lowering (the library-style baseline).
    #[serde(default)]
    pub passes_off: bool,
    /// Planning passes to skip, by flag name.
    #[serde(default)]
    pub disabled_passes: Vec<String>,
    /// Flags are observed only through `wait_signal` (write-with-immediate signals on mlx5).
    #[serde(default)]
    pub immediate_signals: bool,
    /// Signals publish only their own put (flag-in-data packets on p2p).
    #[serde(default)]
    pub packet_signals: bool,
    /// The file name that TTIR positions are reported under (the hook passes `KERNEL.ttir`).
    #[serde(default = "default_source_name")]
    pub source_name: String,
    /// Plan and lower, but leave the TTIR as it is (what `aboleth compile --emit aboleth|stats`
    /// needs for any target, including those without TTIR code generation yet).
    #[serde(default)]
    pub plan_only: bool,
}

fn default_source_name() -> String {
    "<ttir>".to_string()
}

/// One aboleth extern call found in the TTIR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AbolethCall {
    /// The full symbol, such as `__aboleth_v1__put`.
    pub symbol: String,
    /// Where Triton says the call was written in Python (innermost frame), if it says.
    pub source_position: Option<FileLineColumn>,
    /// Where the call is in the TTIR text.
    pub ttir_position: LineColumn,
}

impl AbolethCall {
    /// The symbol without the contract prefix: `put`, `signal_after__set`, `at__e8`.
    pub fn operation(&self) -> &str {
        self.symbol
            .strip_prefix(SYMBOL_PREFIX)
            .unwrap_or(&self.symbol)
    }
}

/// What the stage returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageOutput {
    /// The TTIR text for the rest of Triton's pipeline.
    pub ttir: String,
    /// A JSON object describing what the stage did (stored in `metadata["aboleth"]`).
    pub summary_json: String,
}

/// Why the stage did not produce TTIR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StageError {
    /// The configuration JSON is malformed or names an unknown field or target.
    Config(String),
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
            StageError::Config(message) => {
                write!(formatter, "aboleth: bad stage configuration: {message}")
            }
            StageError::Parse(error) => write!(formatter, "{error}"),
            StageError::NotBuilt { message } | StageError::Compile(message) => {
                write!(formatter, "aboleth: {message}")
            }
        }
    }
}

impl std::error::Error for StageError {}

/// Parses the stage configuration.
pub fn parse_config(config_json: &str) -> Result<StageConfig, StageError> {
    serde_json::from_str(config_json).map_err(|error| StageError::Config(error.to_string()))
}

/// The aboleth extern calls of `module`, in text order, with their positions.
pub fn aboleth_calls(module: &TtirModule) -> Vec<AbolethCall> {
    module
        .extern_calls_in_library(ABOLETH_LIBNAME)
        .filter_map(|id| {
            let call = module.operation(id).extern_elementwise()?;
            Some(AbolethCall {
                symbol: call.symbol,
                source_position: module.source_position(id),
                ttir_position: module.text_position(id),
            })
        })
        .collect()
}

/// The pipeline configuration `config` asks for, checked by
/// `PipelineOptions::validate` (unknown passes, options that cannot take effect).
fn pipeline_options(
    config: &StageConfig,
) -> Result<aboleth_passes::pipeline::PipelineOptions, StageError> {
    let mut pipeline = aboleth_passes::pipeline::PipelineOptions::new(config.target);
    pipeline.passes_off = config.passes_off;
    pipeline.disabled = config.disabled_passes.iter().cloned().collect();
    pipeline.immediate_signals = config.immediate_signals;
    pipeline.packet_signals = config.packet_signals;
    pipeline.validate().map_err(StageError::Config)?;
    Ok(pipeline)
}

/// Checks a configuration without compiling anything (what `aboleth.Config` calls, so a bad
/// configuration is refused where it is written, not at the first kernel's compilation).
pub fn check_config(config_json: &str) -> Result<(), StageError> {
    pipeline_options(&parse_config(config_json)?).map(|_| ())
}

/// Runs the stage on `ttir_text` (see the module documentation for what that means today).
pub fn run_stage(ttir_text: &str, config_json: &str) -> Result<StageOutput, StageError> {
    let config = parse_config(config_json)?;
    let module = TtirModule::parse(ttir_text, &config.source_name).map_err(StageError::Parse)?;
    let functions: Vec<String> = module
        .functions()
        .filter_map(|id| module.operation(id).symbol().map(str::to_string))
        .collect();
    let calls = aboleth_calls(&module);
    let pipeline = pipeline_options(&config)?;
    let output = aboleth_codegen::run_stage(
        ttir_text,
        &aboleth_codegen::StageOptions {
            pipeline,
            source_name: config.source_name.clone(),
            plan_only: config.plan_only,
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
    let summary = serde_json::json!({
        "bridge": BRIDGE_VERSION,
        "aboleth_version": env!("CARGO_PKG_VERSION"),
        "changed": output.summary.changed,
        "aboleth_calls": calls.len(),
        "functions": functions,
        "kernel": output.summary.kernel,
        "passes": output.summary.passes,
        "counts": output.summary.counts,
        "per_iteration": output.summary.per_iteration,
        "conditional": output.summary.conditional,
        "aboleth_ir": output.summary.aboleth_ir,
        "waits": output.summary.waits,
        "config": {
            "target": config.target.name(),
            "passes_off": config.passes_off,
            "immediate_signals": config.immediate_signals,
            "packet_signals": config.packet_signals,
            "disabled_passes": config.disabled_passes,
        },
    });
    Ok(StageOutput {
        ttir: output.ttir,
        summary_json: summary.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: &str = "module {\n  tt.func public @k(%x: i64 loc(unknown)) attributes {noinline = false} {\n    tt.return loc(#loc1)\n  } loc(#loc)\n} loc(#loc)\n#loc = loc(\"k.py\":1:0)\n#loc1 = loc(\"k.py\":3:4)\n";

    const WITH_CALLS: &str = "module {\n  tt.func public @k(%x: i64 loc(unknown)) attributes {noinline = false} {\n    %t = tt.extern_elementwise %x {libname = \"aboleth\", libpath = \"\", pure = false, symbol = \"__aboleth_v1__wait\"} : (i64) -> i32 loc(#loc2)\n    %u = tt.extern_elementwise %x {libname = \"aboleth\", libpath = \"\", pure = false, symbol = \"__aboleth_v1__fence\"} : (i64) -> i32 loc(unknown)\n    %v = tt.extern_elementwise %x {libname = \"libdevice\", libpath = \"\", pure = true, symbol = \"__nv_foo\"} : (i64) -> i32 loc(unknown)\n    tt.return loc(#loc1)\n  } loc(#loc)\n} loc(#loc)\n#loc = loc(\"k.py\":1:0)\n#loc1 = loc(\"k.py\":3:4)\n#loc2 = loc(\"k.py\":7:8)\n";

    const CONFIG: &str = r#"{"target": "mlx5", "passes_off": false, "disabled_passes": ["batch-commands"], "source_name": "k.ttir"}"#;

    #[test]
    fn a_module_without_aboleth_calls_comes_back_unchanged_with_a_summary() {
        let output = run_stage(PLAIN, CONFIG).unwrap();
        assert_eq!(output.ttir, PLAIN);
        let summary: serde_json::Value = serde_json::from_str(&output.summary_json).unwrap();
        assert_eq!(summary["bridge"], "v1");
        assert_eq!(summary["changed"], false);
        assert_eq!(summary["aboleth_calls"], 0);
        assert_eq!(summary["functions"], serde_json::json!(["k"]));
        assert_eq!(summary["config"]["target"], "mlx5");
        assert_eq!(
            summary["config"]["disabled_passes"],
            serde_json::json!(["batch-commands"])
        );
    }

    #[test]
    fn compile_errors_name_the_python_source_line() {
        let error = run_stage(WITH_CALLS, CONFIG).unwrap_err();
        assert!(matches!(error, StageError::Compile(_)), "{error:?}");
        assert_eq!(
            error.to_string(),
            "aboleth: k.py:7:8: error: aboleth.wait on a value that is not a put or signal token"
        );
    }

    #[test]
    fn parse_errors_carry_the_position() {
        let error = run_stage("module {\n  tt.func @k(\n", CONFIG).unwrap_err();
        let StageError::Parse(parse_error) = &error else {
            panic!("{error:?}");
        };
        assert_eq!(parse_error.file, "k.ttir");
        assert!(parse_error.line >= 1, "{parse_error}");
        assert!(error.to_string().starts_with("k.ttir:"), "{error}");
    }

    #[test]
    fn bad_configurations_are_rejected() {
        for config in [
            "",
            "{}",
            r#"{"target": "ib"}"#,
            r#"{"target": "mlx5", "passes": []}"#,
            r#"{"target": "p2p", "passes_off": "yes"}"#,
        ] {
            let error = run_stage(PLAIN, config).unwrap_err();
            assert!(
                matches!(error, StageError::Config(_)),
                "{config}: {error:?}"
            );
            assert!(
                error
                    .to_string()
                    .starts_with("aboleth: bad stage configuration: "),
                "{error}"
            );
        }
        let minimal = parse_config(r#"{"target": "proxy"}"#).unwrap();
        assert_eq!(minimal.target, Transport::Proxy);
        assert!(!minimal.passes_off);
        assert!(minimal.disabled_passes.is_empty());
        assert_eq!(minimal.source_name, "<ttir>");
    }
}
