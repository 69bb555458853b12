//! The default pipeline, in one function, with the verifier between passes.
//!
//! [`run_pipeline`] checks and verifies its input, runs the planning passes of
//! [`crate::registry::PASSES`] in their order (skipping disabled ones, or all of them for
//! `--passes-off`), verifying after each, then the target's lowering from
//! [`crate::registry::LOWERINGS`], then verifies again. It records the module's text after
//! each pass when asked (`--print-after-all`). Which passes exist, and their order, is the
//! registry's: this module names none.

use aboleth_abi::Transport;
use std::collections::BTreeSet;

use aboleth_ir::{
    Diagnostic,
    pliron::{
        context::{Context, Ptr},
        operation::{Operation, verify_operation},
    },
    text::{op_name, print_module},
    verify::verify_module,
    walk::all_ops,
};

use crate::registry::{PASSES, PassContext, lowering_for};

/// How to run the pipeline.
#[derive(Clone, Debug)]
pub struct PipelineOptions {
    /// The transport to lower to.
    pub target: Transport,
    /// Skip every planning pass (library-style lowering: the baseline).
    pub passes_off: bool,
    /// Planning passes to skip, by flag name.
    pub disabled: BTreeSet<String>,
    /// Record the module text after each pass.
    pub print_after_all: bool,
    /// Stop before lowering (prints the planned semantic IR).
    pub stop_before_lowering: bool,
    /// Flags are observed only through `ab.wait_signal` (see [`PassContext::immediate_signals`]).
    pub immediate_signals: bool,
    /// Signals publish only their own put (see [`PassContext::packet_signals`]).
    pub packet_signals: bool,
}

impl PipelineOptions {
    /// All passes on, for `target`.
    pub fn new(target: Transport) -> Self {
        PipelineOptions {
            target,
            passes_off: false,
            disabled: BTreeSet::new(),
            print_after_all: false,
            stop_before_lowering: false,
            immediate_signals: false,
            packet_signals: false,
        }
    }

    /// Checks the configuration: every disabled name is a real pass, and no option is given
    /// where it can have no effect (a user asking for something they cannot get must hear so):
    /// `--disable-pass` with `--passes-off` (which skips every pass), `--immediate-signals`
    /// off mlx5 (only mlx5 has write-with-immediate), `--packet-signals` off p2p (only NVLink
    /// stores carry LL packets); and a target no lowering exists for (none today: every transport is
    /// lowered). Declarations
    /// with `--passes-off` are accepted: they describe the program, and benchmarks give both
    /// configurations the same ones.
    pub fn validate(&self) -> Result<(), String> {
        if self.passes_off && !self.disabled.is_empty() {
            let names: Vec<&str> = self.disabled.iter().map(String::as_str).collect();
            return Err(format!(
                "disabling passes ({}) has no effect with passes off (--passes-off, \
                 passes_off=True), which already skips every planning pass; give one or the other",
                names.join(", ")
            ));
        }
        if self.immediate_signals && self.target != Transport::Mlx5 {
            return Err(format!(
                "immediate signals (--immediate-signals, immediate_signals=True) let mlx5 \
                 signals ride on their puts as RDMA write-with-immediate; the {} transport has no \
                 such operation: drop the option, or compile for mlx5",
                self.target.name()
            ));
        }
        if self.packet_signals && self.target != Transport::P2p {
            return Err(format!(
                "packet signals (--packet-signals, packet_signals=True) let p2p signals travel \
                 in their puts' data as LL packets over NVLink stores; the {} transport does not \
                 store to peer memory: drop the option, or compile for p2p",
                self.target.name()
            ));
        }
        if !self.target.is_lowered() {
            return Err(format!(
                "--target {}: not supported yet: no lowering to {} exists; use --target mlx5, \
                 proxy, p2p, efa or ionic",
                self.target.name(),
                self.target.name()
            ));
        }
        for name in &self.disabled {
            if crate::registry::find(name).is_none() {
                let known: Vec<&str> = PASSES.iter().map(|pass| pass.name).collect();
                return Err(format!(
                    "unknown pass '{name}' in --disable-pass (disabled_passes); known passes: {}",
                    known.join(", ")
                ));
            }
        }
        Ok(())
    }
}

/// What the pipeline did.
#[derive(Clone, Debug, Default)]
pub struct PipelineReport {
    /// The passes that ran, in order (planning passes then the lowering).
    pub passes_run: Vec<String>,
    /// `(pass, module text after it)` when `print_after_all` was set.
    pub snapshots: Vec<(String, String)>,
}

/// Runs the pipeline on `module` in place.
pub fn run_pipeline(
    ctx: &mut Context,
    module: Ptr<Operation>,
    options: &PipelineOptions,
) -> Result<PipelineReport, Diagnostic> {
    options.validate().map_err(|message| Diagnostic {
        file: "<command line>".into(),
        line: 0,
        column: 0,
        message,
    })?;
    let pass_context = PassContext {
        target: options.target,
        immediate_signals: options.immediate_signals,
        packet_signals: options.packet_signals,
    };
    let mut report = PipelineReport::default();
    check_semantic_input(ctx, module)?;
    verify(ctx, module, "input")?;

    // Storage, transfer and submission planning, in the registry's order.
    for pass in PASSES {
        if options.passes_off || options.disabled.contains(pass.name) {
            continue;
        }
        (pass.run)(ctx, module, &pass_context)?;
        record(ctx, module, options, &mut report, pass.name)?;
    }
    if options.stop_before_lowering {
        return Ok(report);
    }
    // Transport specialization: the target's one lowering.
    let lowering =
        lowering_for(options.target).expect("targets without a lowering are refused above");
    (lowering.run)(ctx, module, &pass_context)?;
    record(ctx, module, options, &mut report, lowering.name)?;
    Ok(report)
}

fn record(
    ctx: &mut Context,
    module: Ptr<Operation>,
    options: &PipelineOptions,
    report: &mut PipelineReport,
    name: &str,
) -> Result<(), Diagnostic> {
    verify(ctx, module, name)?;
    report.passes_run.push(name.to_string());
    if options.print_after_all {
        report
            .snapshots
            .push((name.to_string(), print_module(ctx, module)));
    }
    Ok(())
}

/// The pipeline's input is the `ab` dialect: transport ops are what the lowerings emit, and the
/// planning passes neither expect nor check them, so hand-written ones are refused here.
fn check_semantic_input(ctx: &Context, module: Ptr<Operation>) -> Result<(), Diagnostic> {
    for op in all_ops(ctx, module) {
        let name = op_name(ctx, op);
        let dialect = name.split('.').next().unwrap_or_default();
        if matches!(dialect, "mlx5" | "proxy" | "p2p" | "efa" | "ionic" | "gpu") {
            return Err(Diagnostic::at_op(
                ctx,
                op,
                format!(
                    "{name} in the input: transport ops are produced by the lowering \
                     (--target mlx5|proxy|p2p|efa|ionic), not written by hand; write the ab op it \
                     implements (ab.put, ab.signal, ab.wait_signal, ...)"
                ),
            ));
        }
    }
    Ok(())
}

fn verify(ctx: &Context, module: Ptr<Operation>, after: &str) -> Result<(), Diagnostic> {
    verify_operation(module, ctx).map_err(|error| {
        let mut diagnostic = Diagnostic::from_pliron(ctx, &error, "<input>");
        diagnostic.message = format!(
            "IR invalid after {after} (a compiler bug): {}",
            diagnostic.message
        );
        diagnostic
    })?;
    verify_module(ctx, module).map_err(|mut diagnostic| {
        diagnostic.message = format!(
            "IR invalid after {after} (a compiler bug): {}",
            diagnostic.message
        );
        diagnostic
    })
}
