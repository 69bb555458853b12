//! The Triton bridge's compiler side: TTIR text with `aboleth.language` calls in, TTIR text with
//! the communication compiled for a transport out (`docs/TRITON_BRIDGE.md`).
//!
//! [`run_stage`] parses the TTIR ([`aboleth_ttir`]), lifts the aboleth calls and the scalar code
//! around them into the `ab` dialect ([`lift`]), runs the same pipeline as `aboleth opt`
//! ([`aboleth_passes::pipeline`]), and generates TTIR for the lowered ops in place ([`emit`]).
//! A kernel without aboleth calls comes back byte for byte. [`lift_for_simulation`] gives
//! `aboleth sim KERNEL.py` the lifted kernel as a [`SimulationKernel`], which maps the
//! simulator's positions back to the kernel's Python lines. What it does not do: talk to Python
//! or Triton (the `aboleth-python` crate and the stage hook do), or decide anything the passes
//! did not (code generation translates op by op).

pub mod cuda;
pub mod device_library;
pub mod emit;
pub mod lift;

use aboleth_ir::{
    Diagnostic, attrs, parse_module,
    pliron::context::Context,
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
    /// The request is valid but code generation has no translation for it (Python raises
    /// `NotImplementedError` for it).
    pub not_built: bool,
}

impl BridgeError {
    /// An error at a TTIR op: its Python source position when known, else its TTIR position.
    pub fn at(module: &TtirModule, id: OperationId, message: impl Into<String>) -> Self {
        BridgeError {
            message: format!("{}: error: {}", position_of(module, id), message.into()),
            not_built: false,
        }
    }

    /// A valid request that code generation has no translation for.
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

/// Where TTIR op `id` came from: its Python source position (`kernel.py:12:5`) when the TTIR
/// carries one, else its position in the TTIR text.
fn position_of(module: &TtirModule, id: OperationId) -> String {
    match module.source_position(id) {
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
    if !options.plan_only && !target.has_code_generation() {
        return Err(BridgeError::not_built(format!(
            "--target {} has no code generation yet (experimental: lowered and simulated); \
             plan only (the statistics and the lowered IR), or compile for mlx5, proxy, p2p or ionic",
            target.name()
        )));
    }
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
    // The lifted text is verified as it is parsed: a rule it breaks at a line that stands for a
    // TTIR op is the user's error (a negative byte count, a misaligned put), reported at their
    // Python line; only text the lifter wrote wrongly is internal.
    let ab_module = parse_module(ctx, &lifted.text, &lifted_file)
        .map_err(|diagnostic| map_parse_diagnostic(&module, &lifted, diagnostic))?;
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

/// A parse or verifier error of the lifted text: the user's, at their line, when the line stands
/// for a TTIR op; else the lifter's own (internal) mistake.
fn map_parse_diagnostic(
    module: &TtirModule,
    lifted: &lift::LiftedKernel,
    diagnostic: Diagnostic,
) -> BridgeError {
    locate_in_ttir(module, lifted, diagnostic, |diagnostic| {
        format!(
            "internal: the lifted kernel does not parse: {diagnostic} (please report it with \
             the kernel)\n{}",
            lifted.text
        )
    })
}

/// A pipeline error, at the user's line when the lifted line stands for a TTIR op.
fn map_diagnostic(
    module: &TtirModule,
    lifted: &lift::LiftedKernel,
    diagnostic: Diagnostic,
) -> BridgeError {
    locate_in_ttir(module, lifted, diagnostic, |diagnostic| {
        format!(
            "{} (in the lifted Aboleth IR of kernel `{}`)",
            diagnostic.message, lifted.name
        )
    })
}

fn locate_in_ttir(
    module: &TtirModule,
    lifted: &lift::LiftedKernel,
    diagnostic: Diagnostic,
    otherwise: impl FnOnce(&Diagnostic) -> String,
) -> BridgeError {
    match lifted.ttir_operation_at_line(diagnostic.line) {
        Some(id) => BridgeError::at(module, id, diagnostic.message),
        None => BridgeError::plain(otherwise(&diagnostic)),
    }
}

/// Lines of the lifted text before the first op (`lift`: ops start at line 5): the module,
/// its block, the function with its attributes, and its entry block (the kernel parameters).
const LIFTED_HEADER_LINES: u32 = 4;

/// A Triton kernel lifted for the simulator (`aboleth sim KERNEL.py`): the `ab` text with the
/// launch attributes, and the Python position each of its lines stands for, so that every
/// diagnostic about it points at the user's line, not at the generated text.
#[derive(Clone, Debug)]
pub struct SimulationKernel {
    /// The kernel's name.
    pub name: String,
    /// The lifted `ab` module, launch attributes on the kernel.
    pub text: String,
    /// `file:line:column` of the TTIR op each lifted line stands for, by lifted line.
    positions: std::collections::BTreeMap<u32, String>,
    /// `file:line:column` of the kernel's `def`, for lines that stand for no TTIR op (the
    /// header and its parameters).
    function_position: String,
    /// Deprecation notes: `bind` keys that named a local variable instead of the parameter.
    pub notes: Vec<String>,
}

impl SimulationKernel {
    /// The user's position for line `line` of [`Self::text`]: the TTIR op's when the line
    /// stands for one, the kernel's `def` for the header lines (parameters).
    pub fn position_of_line(&self, line: u32) -> Option<&str> {
        match self.positions.get(&line) {
            Some(position) => Some(position),
            None if (1..=LIFTED_HEADER_LINES).contains(&line) => Some(&self.function_position),
            None => None,
        }
    }

    /// `text` (a simulator message) with every `lifted_file:line:column` it quotes replaced by
    /// the user's position of that line (left as it is for lines the lifter added).
    pub fn relocate(&self, text: &str, lifted_file: &str) -> String {
        relocate_per_rank(std::slice::from_ref(self), text, lifted_file)
    }

    /// `diagnostic` (located in [`Self::text`]) told at the user's position, or, for a line the
    /// lifter added, said to be in the lifted IR of the kernel.
    pub fn locate(&self, diagnostic: &Diagnostic) -> String {
        match self.position_of_line(diagnostic.line) {
            Some(position) => format!("{position}: error: {}", diagnostic.message),
            None if diagnostic.line == 0 => diagnostic.to_string(),
            None => format!(
                "{}: error: {} (at line {} of the lifted Aboleth IR of kernel `{}`, an op the \
                 lifting added: the nearest Python line is that of the op it serves)",
                diagnostic.file, diagnostic.message, diagnostic.line, self.name
            ),
        }
    }
}

/// `text` (a simulator message) with every `lifted_file:line:column` and `lifted_file (rank
/// N):line:column` it quotes replaced by the user's position of that line in rank N's
/// compilation (`kernels[N]`, or `kernels[0]` without a rank), left as it is for lines the
/// lifter added.
pub fn relocate_per_rank(kernels: &[SimulationKernel], text: &str, lifted_file: &str) -> String {
    if lifted_file.is_empty() || kernels.is_empty() {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(lifted_file) {
        out.push_str(&rest[..start]);
        let mut prefix_length = lifted_file.len();
        let tail = &rest[start + prefix_length..];
        let mut kernel = &kernels[0];
        if let Some(rank) = tail.strip_prefix(" (rank ")
            && let Some(close) = rank.find(')')
            && let Ok(rank_index) = rank[..close].parse::<usize>()
        {
            prefix_length += " (rank ".len() + close + 1;
            kernel = kernels.get(rank_index).unwrap_or(kernel);
        }
        if !rest[start + prefix_length..].starts_with(':') {
            out.push_str(&rest[start..start + prefix_length]);
            rest = &rest[start + prefix_length..];
            continue;
        }
        prefix_length += 1;
        let prefix = &rest[start..start + prefix_length];
        let after = &rest[start + prefix_length..];
        let digits = after.chars().take_while(char::is_ascii_digit).count();
        let line: Option<u32> = after[..digits].parse().ok();
        let column_part = after[digits..].strip_prefix(':').unwrap_or("");
        let column_digits = column_part.chars().take_while(char::is_ascii_digit).count();
        match line.and_then(|line| kernel.position_of_line(line)) {
            Some(position) if column_digits > 0 => {
                out.push_str(position);
                rest = &column_part[column_digits..];
            }
            _ => {
                out.push_str(prefix);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The lifted Aboleth IR of a TTIR kernel, with the simulator's launch attributes
/// (`grid`, `regions`, `bind`, `init`: see `docs/PROGRAMMING_MODEL.md`) on the kernel, for
/// `aboleth sim KERNEL.py`. Parameters are named after the kernel's parameters (`bind` uses
/// them); see [`lift`] for values that are not parameters.
pub fn lift_for_simulation(
    ttir: &str,
    source_name: &str,
    attributes: &[(&str, &str)],
) -> Result<SimulationKernel, BridgeError> {
    let module = TtirModule::parse(ttir, source_name).map_err(|error| BridgeError {
        message: error.to_string(),
        not_built: false,
    })?;
    let lifted = lift::lift(&module)?.ok_or_else(|| {
        BridgeError::plain(format!(
            "{source_name}: the kernel has no aboleth calls: there is no communication to simulate"
        ))
    })?;
    let mut notes = Vec::new();
    let rendered: Vec<String> = attributes
        .iter()
        .map(|(name, value)| {
            let value = if *name == "bind" {
                bind_by_parameter_name(value, &lifted.parameters, &mut notes)
            } else {
                value.to_string()
            };
            format!("{name}: builtin.string {:?}", value)
        })
        .collect();
    let marker = "-> ()> [] {";
    if !lifted.text.contains(marker) {
        return Err(BridgeError::plain(
            "internal: the lifted kernel has no attribute list",
        ));
    }
    // The attributes go on the function's header line, so no line number moves.
    let text = lifted
        .text
        .replacen(marker, &format!("-> ()> [{}] {{", rendered.join(", ")), 1);
    let positions = lifted
        .entry_lines
        .iter()
        .filter_map(|line| {
            let id = lifted.ttir_operation_at_line(*line)?;
            Some((*line, position_of(&module, id)))
        })
        .collect();
    Ok(SimulationKernel {
        name: lifted.name.clone(),
        text,
        positions,
        function_position: position_of(&module, lifted.function),
        notes,
    })
}

/// `bind` with each key that names a parameter's local variable (`src` for `src =
/// send.to(...)`) replaced by the parameter's name (`send`), and a deprecation note for each;
/// a lifted parameter that reinterprets another one (`words = pool.to(...)`, both used) is bound
/// as that one is, unless the string binds it itself.
fn bind_by_parameter_name(
    bind: &str,
    parameters: &[lift::Parameter],
    notes: &mut Vec<String>,
) -> String {
    let entries: Vec<String> = bind
        .split_whitespace()
        .map(|entry| {
            let Some((key, value)) = entry.split_once('=') else {
                return entry.to_string();
            };
            let is_parameter = parameters.iter().any(|p| p.ab_name == key);
            let renamed = parameters
                .iter()
                .find(|p| p.local_name.as_deref() == Some(key));
            match renamed {
                Some(parameter) if !is_parameter => {
                    notes.push(format!(
                        "bind key `{key}` names a local variable of the kernel; bind the kernel \
                         parameter instead: `{}={value}` (local names are deprecated)",
                        parameter.ab_name
                    ));
                    format!("{}={value}", parameter.ab_name)
                }
                _ => entry.to_string(),
            }
        })
        .collect();
    let bound = |key: &str| {
        entries
            .iter()
            .find_map(|entry| entry.split_once('=').filter(|(k, _)| *k == key))
            .map(|(_, value)| value.to_string())
    };
    let mut derived = Vec::new();
    for parameter in parameters {
        if let Some(target) = &parameter.reinterprets
            && bound(&parameter.ab_name).is_none()
            && let Some(value) = bound(target)
        {
            derived.push(format!("{}={value}", parameter.ab_name));
        }
    }
    entries
        .into_iter()
        .chain(derived)
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(positions: &[(u32, &str)]) -> SimulationKernel {
        SimulationKernel {
            name: "k".into(),
            text: String::new(),
            positions: positions
                .iter()
                .map(|(line, position)| (*line, position.to_string()))
                .collect(),
            function_position: "k.py:3:0".into(),
            notes: Vec::new(),
        }
    }

    #[test]
    fn relocate_maps_each_ranks_lines_through_its_own_compilation() {
        let rank0 = kernel(&[(7, "k.py:10:5")]);
        let rank1 = kernel(&[(7, "k.py:11:5"), (9, "k.py:12:1")]);
        let text = "a at k.lifted.abo (rank 0):7:3 (p2p.copy); b at k.lifted.abo (rank 1):7:3; \
                    c at k.lifted.abo (rank 1):9:1; d at k.lifted.abo:7:1; \
                    e at k.lifted.abo (rank 1):8:1; f at k.lifted.abo:2:1; g k.lifted.abo:7";
        assert_eq!(
            relocate_per_rank(&[rank0, rank1], text, "k.lifted.abo"),
            "a at k.py:10:5 (p2p.copy); b at k.py:11:5; c at k.py:12:1; d at k.py:10:5; \
             e at k.lifted.abo (rank 1):8:1; f at k.py:3:0; g k.lifted.abo:7"
        );
        assert_eq!(relocate_per_rank(&[kernel(&[])], "x:1:1", ""), "x:1:1");
    }

    #[test]
    fn a_diagnostic_on_an_added_line_says_so_and_a_header_line_is_the_def() {
        let k = kernel(&[(5, "k.py:8:2")]);
        let at = |line| Diagnostic {
            file: "k.lifted.abo".into(),
            line,
            column: 1,
            message: "m".into(),
        };
        assert_eq!(k.locate(&at(5)), "k.py:8:2: error: m");
        assert_eq!(k.locate(&at(3)), "k.py:3:0: error: m");
        assert!(
            k.locate(&at(6))
                .starts_with("k.lifted.abo: error: m (at line 6 of the lifted Aboleth IR")
        );
    }

    #[test]
    fn bind_keys_naming_a_local_variable_are_renamed_with_a_note() {
        let parameter = |ab_name: &str, local_name: Option<&str>| lift::Parameter {
            ttir_name: format!("%{ab_name}"),
            ttir_type: "i64".into(),
            ab_name: ab_name.into(),
            local_name: local_name.map(str::to_string),
            reinterprets: None,
        };
        let parameters = [parameter("send", Some("src")), parameter("epoch", None)];
        let mut notes = Vec::new();
        let bind =
            bind_by_parameter_name("src=local:send epoch=value:epoch", &parameters, &mut notes);
        assert_eq!(bind, "send=local:send epoch=value:epoch");
        assert_eq!(notes.len(), 1);
        assert!(notes[0].starts_with("bind key `src` names a local variable"));
        // A key that is a parameter's own name stays, even if another parameter was once so named.
        let mut notes = Vec::new();
        let parameters = [parameter("send", Some("src")), parameter("src", None)];
        assert_eq!(
            bind_by_parameter_name("src=local:x", &parameters, &mut notes),
            "src=local:x"
        );
        assert!(notes.is_empty());
    }

    #[test]
    fn a_reinterpretation_of_a_bound_parameter_is_bound_as_it_is() {
        let pool = lift::Parameter {
            ttir_name: "%pool".into(),
            ttir_type: "!tt.ptr<i8>".into(),
            ab_name: "pool".into(),
            local_name: None,
            reinterprets: None,
        };
        let words = lift::Parameter {
            ttir_name: "%words".into(),
            ttir_type: "!tt.ptr<i64>".into(),
            ab_name: "words".into(),
            local_name: None,
            reinterprets: Some("pool".into()),
        };
        let parameters = [pool, words];
        let mut notes = Vec::new();
        assert_eq!(
            bind_by_parameter_name("pool=local:pool", &parameters, &mut notes),
            "pool=local:pool words=local:pool"
        );
        // Bound explicitly: left alone.
        assert_eq!(
            bind_by_parameter_name("pool=local:pool words=local:other", &parameters, &mut notes),
            "pool=local:pool words=local:other"
        );
        assert!(notes.is_empty());
    }
}
