//! The Triton bridge's compiler side: TTIR text with `aboleth.language` calls in, TTIR text with
//! the communication compiled for a transport out (`docs/TRITON_BRIDGE.md`).
//!
//! [`run_stage`] parses the TTIR ([`aboleth_ttir`]), lifts the aboleth calls and the scalar code
//! around them into the `ab` dialect ([`lift`]), runs the same pipeline as `aboleth opt`
//! ([`aboleth_passes::pipeline`]), and generates TTIR for the lowered ops in place ([`emit`]).
//! A kernel without aboleth calls comes back byte for byte. What it does not do: talk to Python
//! or Triton (the `aboleth-python` crate and the stage hook do), or decide anything the passes
//! did not (code generation translates op by op).

pub mod emit;
pub mod lift;

use aboleth_ir::{
    Diagnostic, attrs, parse_module,
    pliron::context::Context,
    transport::Target,
    walk::{all_ops, kernels},
};
use aboleth_passes::pipeline::{PipelineOptions, run_pipeline};
use aboleth_ttir::{OperationId, TtirModule};
use serde::Serialize;

/// An error of the bridge, already formatted with the position it refers to.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct BridgeError {
    /// `file:line:col: error: ...` (the Python source position when TTIR has one).
    pub message: String,
    /// The request is valid but its code generation is not built yet (Python raises
    /// `NotImplementedError` for it).
    pub not_built: bool,
}

impl BridgeError {
    /// An error at a TTIR op: its Python source position when known, else its TTIR position.
    pub fn at(module: &TtirModule, id: OperationId, message: impl Into<String>) -> Self {
        let message = message.into();
        let position = match module.source_position(id) {
            Some(position) => position.to_string(),
            None => {
                let position = module.text_position(id);
                format!(
                    "{}:{}:{}",
                    module.file_name(),
                    position.line,
                    position.column
                )
            }
        };
        BridgeError {
            message: format!("{position}: error: {message}"),
            not_built: false,
        }
    }

    /// A valid request whose code generation is not built yet.
    pub fn not_built(message: impl Into<String>) -> Self {
        BridgeError {
            message: format!("error: {}", message.into()),
            not_built: true,
        }
    }

    /// An error without a position.
    pub fn plain(message: impl Into<String>) -> Self {
        BridgeError {
            message: format!("error: {}", message.into()),
            not_built: false,
        }
    }
}

/// What the stage is asked to do.
#[derive(Clone, Debug)]
pub struct StageOptions {
    /// The pipeline configuration (target, passes off, disabled passes).
    pub pipeline: PipelineOptions,
    /// The name TTIR positions are reported under.
    pub source_name: String,
    /// Plan and lower but generate no TTIR (the summary is the product).
    pub plan_only: bool,
}

/// What the stage did.
#[derive(Clone, Debug, Serialize)]
pub struct StageSummary {
    /// The kernel name (empty when there was nothing to do).
    pub kernel: String,
    /// The transport.
    pub target: &'static str,
    /// Aboleth calls found.
    pub aboleth_calls: usize,
    /// Passes run, in order.
    pub passes: Vec<String>,
    /// Static counts of the lowered kernel (`aboleth compile --emit stats`).
    pub counts: aboleth_passes::stats::Counts,
    /// Some counted ops are in loops of unknown trip count (counted once).
    pub per_iteration: bool,
    /// Some counted ops run only under a runtime condition.
    pub conditional: bool,
    /// Whether the TTIR changed.
    pub changed: bool,
    /// The lifted Aboleth IR after the pipeline, for debugging (`aboleth compile --emit aboleth`).
    pub aboleth_ir: String,
    /// The Python source position of each bounded wait, indexed by the `site_id` its failure
    /// records carry (empty when no endpoint handle brought the wait-failure log).
    pub waits: Vec<String>,
}

/// The stage's output.
#[derive(Clone, Debug)]
pub struct StageOutput {
    /// The TTIR to continue compiling.
    pub ttir: String,
    /// What happened.
    pub summary: StageSummary,
}

/// Runs the stage on one TTIR module.
pub fn run_stage(ttir: &str, options: &StageOptions) -> Result<StageOutput, BridgeError> {
    let mut module =
        TtirModule::parse(ttir, &options.source_name).map_err(|error| BridgeError {
            message: error.to_string(),
            not_built: false,
        })?;
    let target = options.pipeline.target;
    let Some(lifted) = lift::lift(&module)? else {
        return Ok(StageOutput {
            ttir: ttir.to_string(),
            summary: StageSummary {
                kernel: String::new(),
                target: target.name(),
                aboleth_calls: 0,
                passes: Vec::new(),
                counts: Default::default(),
                per_iteration: false,
                conditional: false,
                changed: false,
                aboleth_ir: String::new(),
                waits: Vec::new(),
            },
        });
    };
    let ctx = &mut Context::new();
    let lifted_file = format!("{}.lifted.abo", options.source_name);
    let ab_module = parse_module(ctx, &lifted.text, &lifted_file)
        .map_err(|diagnostic| internal(&lifted, diagnostic))?;
    let kernel = kernels(ctx, ab_module)
        .into_iter()
        .next()
        .ok_or_else(|| BridgeError::plain("internal: the lifted module has no kernel"))?;
    let walked = all_ops(ctx, kernel);
    if walked.len() != lifted.entries.len() {
        return Err(BridgeError::plain(format!(
            "internal: lifted {} ops but recorded {} entries",
            walked.len(),
            lifted.entries.len()
        )));
    }
    for (index, op) in walked.into_iter().enumerate() {
        attrs::set_int(ctx, op, "ttir_entry", index as i64);
    }
    let report = run_pipeline(ctx, ab_module, &options.pipeline).map_err(|diagnostic| {
        // Diagnostics point into the lifted text: map them back to the TTIR op of that line.
        map_diagnostic(&module, &lifted, diagnostic)
    })?;
    let (counts, per_iteration, conditional) = aboleth_passes::stats::count_kernel(ctx, kernel);
    let aboleth_ir = aboleth_ir::print_module(ctx, ab_module);
    let waits = if options.plan_only {
        Vec::new()
    } else {
        emit::generate(ctx, kernel, &lifted, &mut module, target)?
    };
    Ok(StageOutput {
        ttir: if options.plan_only {
            ttir.to_string()
        } else {
            module.print()
        },
        summary: StageSummary {
            kernel: lifted.name.clone(),
            target: target.name(),
            aboleth_calls: lifted.calls.len(),
            passes: report.passes_run,
            counts,
            per_iteration,
            conditional,
            changed: !options.plan_only,
            aboleth_ir,
            waits,
        },
    })
}

fn internal(lifted: &lift::LiftedKernel, diagnostic: Diagnostic) -> BridgeError {
    BridgeError::plain(format!(
        "internal: the lifted kernel does not parse: {diagnostic}\n{}",
        lifted.text
    ))
}

fn map_diagnostic(
    module: &TtirModule,
    lifted: &lift::LiftedKernel,
    diagnostic: Diagnostic,
) -> BridgeError {
    match lifted.ttir_operation_at_line(diagnostic.line) {
        Some(id) => BridgeError::at(module, id, diagnostic.message),
        None => BridgeError::plain(format!(
            "{} (in the lifted Aboleth IR of kernel `{}`)",
            diagnostic.message, lifted.name
        )),
    }
}

/// The lifted Aboleth IR of a TTIR kernel, with the simulator's launch attributes
/// (`grid`, `regions`, `bind`, `init`: see `docs/PROGRAMMING_MODEL.md`) on the kernel, for
/// `aboleth sim KERNEL.py`. Parameters are named after the TTIR values (`bind` uses them).
pub fn lift_for_simulation(
    ttir: &str,
    source_name: &str,
    attributes: &[(&str, &str)],
) -> Result<String, BridgeError> {
    let module = TtirModule::parse(ttir, source_name).map_err(|error| BridgeError {
        message: error.to_string(),
        not_built: false,
    })?;
    let lifted = lift::lift(&module)?.ok_or_else(|| {
        BridgeError::plain(format!(
            "{source_name}: the kernel has no aboleth calls: there is no communication to simulate"
        ))
    })?;
    let rendered: Vec<String> = attributes
        .iter()
        .map(|(name, value)| format!("{name}: builtin.string {:?}", value))
        .collect();
    let marker = "-> ()> [] {";
    if !lifted.text.contains(marker) {
        return Err(BridgeError::plain(
            "internal: the lifted kernel has no attribute list",
        ));
    }
    Ok(lifted
        .text
        .replacen(marker, &format!("-> ()> [{}] {{", rendered.join(", ")), 1))
}

/// Targets the stage accepts (`mlx5`, `proxy`, `p2p`).
pub fn target_from_name(name: &str) -> Option<Target> {
    match name {
        "mlx5" => Some(Target::Mlx5),
        "proxy" => Some(Target::Proxy),
        "p2p" => Some(Target::P2p),
        _ => None,
    }
}
