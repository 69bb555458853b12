//! The stage's configuration as Python writes it: `aboleth._aboleth.PipelineOptions`, the mirror
//! of [`aboleth_passes::pipeline::PipelineOptions`] that `aboleth.Config` builds and
//! `run_stage` takes.
//!
//! What it does: converts the Python arguments into the core's `PipelineOptions` in one place
//! ([`pipeline_options`]), checked by `PipelineOptions::validate`, whose message Python sees as
//! `ValueError("aboleth: bad stage configuration: ...")`; and describes the options for the
//! stage summary ([`ConfigSummary`]). What it does not do: decide what an option means (the
//! passes do), or carry the options only the command line has (`print_after_all`,
//! `stop_before_lowering`: the stage generates code, so it always runs the whole pipeline).

use std::collections::BTreeSet;
use std::fmt;

use aboleth_abi::Transport;
use aboleth_passes::pipeline::PipelineOptions;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde::Serialize;

/// A configuration the stage refuses: an unknown target, or what `PipelineOptions::validate`
/// refuses (unknown passes, options that cannot take effect for the target).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "aboleth: bad stage configuration: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}

/// The pipeline options the Python arguments ask for: `target` names a transport the code
/// generator generates for ([`Transport::GENERATED`]: Python compiles Triton kernels), or, with
/// `plan_only` (the statistics and the lowered IR, no code), any lowered one
/// ([`Transport::LOWERED`]: efa too); the rest is checked by `PipelineOptions::validate`.
pub fn pipeline_options(
    target: &str,
    passes_off: bool,
    disabled_passes: impl IntoIterator<Item = String>,
    (immediate_signals, packet_signals): (bool, bool),
    plan_only: bool,
) -> Result<PipelineOptions, ConfigError> {
    let generated: Vec<&str> = Transport::GENERATED
        .iter()
        .map(|transport| transport.name())
        .collect();
    let target = match Transport::from_name(target) {
        Some(transport) if transport.has_code_generation() => transport,
        Some(transport) if plan_only && transport.is_lowered() => transport,
        Some(transport) if transport.is_lowered() => {
            return Err(ConfigError(format!(
                "target {target:?} is lowered and simulated but has no code generation for \
                 Triton kernels yet (experimental); write the kernel as Aboleth IR and use \
                 `aboleth compile FILE.abo --target {name}` or `aboleth sim FILE.abo --target \
                 {name}` (a Triton kernel's statistics and lowered IR: `aboleth compile \
                 KERNEL.py --target {name} --emit stats|aboleth`), or compile for one of {}",
                generated.join(", "),
                name = transport.name()
            )));
        }
        _ => {
            return Err(ConfigError(format!(
                "unknown target {target:?}, expected one of {}",
                generated.join(", ")
            )));
        }
    };
    let mut options = PipelineOptions::new(target);
    options.passes_off = passes_off;
    options.disabled = disabled_passes.into_iter().collect();
    options.immediate_signals = immediate_signals;
    options.packet_signals = packet_signals;
    options.validate().map_err(ConfigError)?;
    Ok(options)
}

/// PipelineOptions(target, *, passes_off=False, disabled_passes=(), immediate_signals=False,
/// packet_signals=False, plan_only=False): what the aboleth stage compiles for, checked by the
/// Rust pipeline when made (ValueError naming the rule). `aboleth.Config` makes one; use that.
/// `plan_only` options (any lowered target, efa included) serve `run_stage(..., plan_only=True)`
/// only: statistics and lowered IR, no code.
#[pyclass(module = "aboleth._aboleth", name = "PipelineOptions", frozen)]
#[derive(Clone, Debug)]
pub struct PyPipelineOptions {
    /// The core's options, already validated.
    pub inner: PipelineOptions,
}

#[pymethods]
impl PyPipelineOptions {
    #[new]
    #[pyo3(signature = (target, *, passes_off = false, disabled_passes = Vec::new(), immediate_signals = false, packet_signals = false, plan_only = false))]
    fn new(
        target: &str,
        passes_off: bool,
        disabled_passes: Vec<String>,
        immediate_signals: bool,
        packet_signals: bool,
        plan_only: bool,
    ) -> PyResult<Self> {
        pipeline_options(
            target,
            passes_off,
            disabled_passes,
            (immediate_signals, packet_signals),
            plan_only,
        )
        .map(|inner| Self { inner })
        .map_err(|error| PyValueError::new_err(error.to_string()))
    }

    /// The transport ("mlx5", "proxy" or "p2p").
    #[getter]
    fn target(&self) -> &'static str {
        self.inner.target.name()
    }

    /// Whether only the lowering runs (the library-style baseline).
    #[getter]
    fn passes_off(&self) -> bool {
        self.inner.passes_off
    }

    /// The planning passes skipped, by flag name, sorted.
    #[getter]
    fn disabled_passes(&self) -> Vec<String> {
        self.inner.disabled.iter().cloned().collect()
    }

    /// Whether flags are observed only through `wait_signal` (mlx5 write-with-immediate).
    #[getter]
    fn immediate_signals(&self) -> bool {
        self.inner.immediate_signals
    }

    /// Whether signals publish only their own put (p2p flag-in-data packets).
    #[getter]
    fn packet_signals(&self) -> bool {
        self.inner.packet_signals
    }

    /// The constructor call that makes these options.
    fn __repr__(&self) -> String {
        let disabled: Vec<String> = self
            .inner
            .disabled
            .iter()
            .map(|name| format!("'{name}'"))
            .collect();
        format!(
            "PipelineOptions('{}', passes_off={}, disabled_passes=[{}], immediate_signals={}, packet_signals={})",
            self.inner.target.name(),
            python_bool(self.inner.passes_off),
            disabled.join(", "),
            python_bool(self.inner.immediate_signals),
            python_bool(self.inner.packet_signals),
        )
    }
}

/// Python's spelling of a bool (`True`, `False`).
fn python_bool(value: bool) -> &'static str {
    if value { "True" } else { "False" }
}

/// The `config` object of the stage summary: the options the stage ran with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConfigSummary<'a> {
    /// The transport's name.
    pub target: &'static str,
    /// Only the lowering ran.
    pub passes_off: bool,
    /// Flags observed only through `wait_signal`.
    pub immediate_signals: bool,
    /// Signals publish only their own put.
    pub packet_signals: bool,
    /// Planning passes skipped, sorted.
    pub disabled_passes: &'a BTreeSet<String>,
}

impl<'a> From<&'a PipelineOptions> for ConfigSummary<'a> {
    fn from(options: &'a PipelineOptions) -> Self {
        ConfigSummary {
            target: options.target.name(),
            passes_off: options.passes_off,
            immediate_signals: options.immediate_signals,
            packet_signals: options.packet_signals,
            disabled_passes: &options.disabled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(
        target: &str,
        passes_off: bool,
        disabled: &[&str],
        immediate_signals: bool,
        packet_signals: bool,
    ) -> String {
        pipeline_options(
            target,
            passes_off,
            disabled.iter().map(|name| name.to_string()),
            (immediate_signals, packet_signals),
            false,
        )
        .unwrap_err()
        .to_string()
    }

    #[test]
    fn the_arguments_become_the_core_options() {
        let options = pipeline_options(
            "mlx5",
            false,
            ["batch-commands".to_string(), "batch-commands".to_string()],
            (true, false),
            false,
        )
        .unwrap();
        assert_eq!(options.target, Transport::Mlx5);
        assert!(!options.passes_off && options.immediate_signals && !options.packet_signals);
        assert_eq!(
            options.disabled,
            BTreeSet::from(["batch-commands".to_string()])
        );
        assert!(!options.print_after_all && !options.stop_before_lowering);
    }

    #[test]
    fn refusals_are_the_pipeline_checks_messages() {
        for target in ["ib", "rdma", "tcp"] {
            assert_eq!(
                refused(target, false, &[], false, false),
                format!(
                    "aboleth: bad stage configuration: unknown target \"{target}\", expected one of mlx5, proxy, p2p, ionic"
                )
            );
        }
        assert!(refused("efa", false, &[], false, false).starts_with(
            "aboleth: bad stage configuration: target \"efa\" is lowered and simulated but has \
                 no code generation for Triton kernels yet"
        ));
        let planned = pipeline_options("efa", false, Vec::new(), (false, false), true).unwrap();
        assert_eq!(planned.target, Transport::Efa);
        let unknown_pass = refused("p2p", false, &["batch-everything"], false, false);
        assert!(
            unknown_pass.starts_with(
                "aboleth: bad stage configuration: unknown pass 'batch-everything' in --disable-pass"
            ),
            "{unknown_pass}"
        );
        for (message, expected) in [
            (refused("p2p", false, &[], true, false), "immediate signals"),
            (refused("mlx5", false, &[], false, true), "packet signals"),
            (
                refused("proxy", true, &["batch-commands"], false, false),
                "disabling passes",
            ),
        ] {
            assert!(
                message.starts_with(&format!("aboleth: bad stage configuration: {expected}")),
                "{message}"
            );
        }
    }

    #[test]
    fn the_summary_names_the_options() {
        let options = pipeline_options(
            "p2p",
            false,
            ["coalesce-doorbells".to_string()],
            (false, true),
            false,
        )
        .unwrap();
        let summary = serde_json::to_value(ConfigSummary::from(&options)).unwrap();
        assert_eq!(
            summary,
            serde_json::json!({"target": "p2p", "passes_off": false, "immediate_signals": false,
                "packet_signals": true, "disabled_passes": ["coalesce-doorbells"]})
        );
    }
}
