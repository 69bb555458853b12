//! Translation validation: the library-style lowering (`--passes-off`) and the Aboleth lowering
//! (the planning passes on) of one program, each run under many random schedules, must agree.
//!
//! For each schedule both configurations run with the same data seed; every run is checked by
//! the interpreter as it goes (data visible when a wait passes, transfers carry their source
//! as posted, no deadlock, no NIC or proxy error), and its final memory (every region on every
//! rank) must equal that of the library-style run under the first schedule. The first schedule
//! of each configuration also gives the executed counts and simulated time that `aboleth sim
//! --stats` and `make demo` print. What it does not do: prove equivalence for all schedules
//! (it samples them), or check programs that race by themselves (such a program fails here
//! with passes off as well, which is how to tell).
//!
//! Before running anything it refuses options that would run nothing or cannot run
//! ([`ValidationOptions::check`]: no schedules, no launches, fewer than 2 or more than
//! [`MAX_RANKS`] ranks, a zero step limit) and launches that need more simulated memory than
//! [`ValidationOptions::memory_limit_bytes`]; on a long run it reports progress on stderr
//! ([`ValidationOptions::progress`]), the only place it reads the wall clock, which decides
//! when a line is printed and never what a run does.

use aboleth_abi::Transport;
use std::{cell::RefCell, collections::BTreeSet, io::IsTerminal, rc::Rc, time::Instant};

use aboleth_ir::{Diagnostic, pliron::context::Context, text::parse_module, walk::kernels};
use aboleth_passes::pipeline::{PipelineOptions, run_pipeline};

use crate::{
    CostModel,
    interpreter::{
        DEFAULT_MEMORY_LIMIT_BYTES, ProgressHook, RoundReport, SimulationOptions,
        SimulationOutcome, check_memory, simulate_per_rank,
    },
    launch::Expression,
    mutations::Mutation,
    program::{SimKernel, build_kernel},
};

/// What to validate and how hard.
#[derive(Clone, Debug)]
pub struct ValidationOptions {
    /// Transport.
    pub target: Transport,
    /// Ranks.
    pub ranks: u32,
    /// Random schedules per configuration.
    pub schedules: u32,
    /// First schedule seed (schedule `k` uses `seed + k`); also the data seed.
    pub seed: u64,
    /// Launches per run.
    pub rounds: u32,
    /// Planning passes left out of the Aboleth configuration.
    pub disabled_passes: BTreeSet<String>,
    /// A deliberately broken lowering applied to the Aboleth configuration.
    pub mutation: Option<Mutation>,
    /// Scheduler steps per run before it is reported as not terminating.
    pub step_limit: u64,
    /// Programs per rank, overriding the kernel's `grid` attribute (an expression in `ranks`).
    pub grid: Option<String>,
    /// Only the kernel of this name (default: all).
    pub kernel: Option<String>,
    /// mlx5 send-ring size per QP in 64-byte basic blocks (a power of two); small rings make
    /// the generated ring reclamation run.
    pub sq_basic_block_count: u32,
    /// The Aboleth configuration may publish mlx5 signals with write-with-immediate
    /// (`PipelineOptions::immediate_signals`).
    pub immediate_signals: bool,
    /// The Aboleth configuration may publish p2p signals as flag-in-data packets
    /// (`PipelineOptions::packet_signals`).
    pub packet_signals: bool,
    /// Most bytes of simulated memory one run may allocate (all ranks' regions, queues and
    /// tables); default [`DEFAULT_MEMORY_LIMIT_BYTES`] (4 GiB).
    pub memory_limit_bytes: u64,
    /// Report progress on stderr when a validation runs long: from [`PROGRESS_AFTER_SECONDS`]
    /// on, one line every [`PROGRESS_EVERY_SECONDS`] (kernel, configuration, schedule k of K,
    /// launch, steps). Default: when stderr is a terminal.
    pub progress: bool,
    /// The latencies and bandwidths simulated time is counted in (default
    /// [`CostModel::default`], the 2 x H200 NVLink profile; see [`CostModel::named`]).
    pub cost_model: CostModel,
    /// Bytes per store of a p2p copy ([`SimulationOptions::p2p_store_bytes`]): how finely its
    /// stores may be reordered. Simulated time does not depend on it (a copy costs its whole
    /// length); larger pieces make megabyte copies fast to simulate.
    pub p2p_store_bytes: u64,
}

/// The most ranks a validation runs: every rank pair has its own queues, so memory and time
/// grow with the square of the ranks.
pub const MAX_RANKS: u32 = 1024;
/// Seconds of validation before the first progress line.
pub const PROGRESS_AFTER_SECONDS: u64 = 3;
/// Seconds between two progress lines.
pub const PROGRESS_EVERY_SECONDS: u64 = 5;

impl ValidationOptions {
    /// The pipelines of the two configurations: library style, and Aboleth's passes.
    fn pipelines(&self) -> (PipelineOptions, PipelineOptions) {
        let mut off = PipelineOptions::new(self.target);
        off.passes_off = true;
        let mut on = PipelineOptions::new(self.target);
        on.disabled = self.disabled_passes.clone();
        on.immediate_signals = self.immediate_signals;
        on.packet_signals = self.packet_signals;
        (off, on)
    }

    /// Defaults: 2 ranks, 20 schedules, seed 0, one round, all passes.
    pub fn new(target: Transport) -> Self {
        ValidationOptions {
            target,
            ranks: 2,
            schedules: 20,
            seed: 0,
            rounds: 1,
            disabled_passes: BTreeSet::new(),
            mutation: None,
            step_limit: 2_000_000,
            grid: None,
            kernel: None,
            sq_basic_block_count: SimulationOptions::new(2).sq_basic_block_count,
            immediate_signals: false,
            packet_signals: false,
            memory_limit_bytes: DEFAULT_MEMORY_LIMIT_BYTES,
            progress: std::io::stderr().is_terminal(),
            cost_model: CostModel::default(),
            p2p_store_bytes: SimulationOptions::new(2).p2p_store_bytes,
        }
    }

    /// Refuses options that would run nothing (and so "validate" nothing) or cannot run: each
    /// error names the option and the fix. [`validate`] and [`validate_per_rank`] call it.
    pub fn check(&self) -> Result<(), Diagnostic> {
        let refuse = |message: String| Diagnostic {
            file: "<command line>".into(),
            line: 0,
            column: 0,
            message,
        };
        if self.ranks < 2 {
            return Err(refuse(format!(
                "--ranks {}: communication needs at least 2 ranks; give --ranks 2 or more",
                self.ranks
            )));
        }
        if self.ranks > MAX_RANKS {
            return Err(refuse(format!(
                "--ranks {}: the simulator runs at most {MAX_RANKS} ranks (every rank pair has its own queues, so memory and time grow with the square of the ranks); give --ranks {MAX_RANKS} or fewer",
                self.ranks
            )));
        }
        if self.schedules == 0 {
            return Err(refuse(
                "--schedules 0 runs no schedule, so nothing would be validated; give --schedules 1 or more (the default is 20)".into(),
            ));
        }
        if self.rounds == 0 {
            return Err(refuse(
                "--rounds 0 runs no launch, so nothing would be validated; give --rounds 1 or more (the default is 1)".into(),
            ));
        }
        if self.step_limit == 0 {
            return Err(refuse(
                "--step-limit 0 stops every run before its first step; give a positive limit (the default is 2000000)".into(),
            ));
        }
        Ok(())
    }

    /// The simulation options of schedule `schedule`.
    fn simulation(&self, schedule: u32) -> SimulationOptions {
        SimulationOptions {
            rounds: self.rounds,
            schedule_seed: self.seed.wrapping_add(u64::from(schedule)),
            data_seed: self.seed,
            step_limit: self.step_limit,
            sq_basic_block_count: self.sq_basic_block_count,
            memory_limit_bytes: self.memory_limit_bytes,
            cost_model: self.cost_model.clone(),
            p2p_store_bytes: self.p2p_store_bytes,
            ..SimulationOptions::new(self.ranks)
        }
    }
}

/// A kernel's launch that needs more simulated memory than `options` allows, as a located
/// error: refused before any run (and before anything is allocated).
fn check_kernel_memory(
    kernel: &SimKernel,
    file: &str,
    options: &ValidationOptions,
) -> Result<(), Diagnostic> {
    check_memory(kernel, &options.simulation(0)).map_err(|message| Diagnostic {
        file: file.to_owned(),
        line: 0,
        column: 0,
        message: format!("kernel `{}`: {message}", kernel.name),
    })
}

/// Progress lines on stderr for a long validation (see [`ValidationOptions::progress`]).
struct ProgressReporter {
    started: Instant,
    last_printed: Option<Instant>,
    /// What runs now: kernel, target, ranks, configuration, schedule k of K.
    running: String,
}

impl ProgressReporter {
    fn report(&mut self, launch: Option<(u32, u32, u64)>) {
        let now = Instant::now();
        let due = match self.last_printed {
            None => now.duration_since(self.started).as_secs() >= PROGRESS_AFTER_SECONDS,
            Some(last) => now.duration_since(last).as_secs() >= PROGRESS_EVERY_SECONDS,
        };
        if !due {
            return;
        }
        self.last_printed = Some(now);
        let within = launch.map_or(String::new(), |(launch, launches, steps)| {
            format!(", launch {launch} of {launches}, {steps} steps")
        });
        eprintln!(
            "aboleth sim: {}{within} ({} s)",
            self.running,
            now.duration_since(self.started).as_secs()
        );
    }
}

/// One failed check.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Failure {
    /// `passes-off` or `passes-on`.
    pub configuration: &'static str,
    /// Schedule number (0-based) and its seed.
    pub schedule: u32,
    /// The seed that reproduces it (`--seed`, with `--schedules 1`).
    pub schedule_seed: u64,
    /// `divergence`, `deadlock`, `data-not-visible`, `source-changed`, `nic`, ...
    pub kind: &'static str,
    /// What happened, naming ranks, programs, lines and addresses.
    pub message: String,
}

/// A configuration's figures under the first schedule.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ConfigurationFigures {
    /// Per launch: executed counts and simulated time.
    pub rounds: Vec<RoundReport>,
}

/// The validation of one kernel.
#[derive(Clone, Debug, serde::Serialize)]
pub struct KernelValidation {
    /// Kernel name.
    pub kernel: String,
    /// Transport.
    pub target: &'static str,
    /// Schedules run per configuration.
    pub schedules: u32,
    /// Library style (`--passes-off`), first schedule.
    pub passes_off: ConfigurationFigures,
    /// Aboleth (passes on), first schedule.
    pub passes_on: ConfigurationFigures,
    /// Every failed check (empty: validated).
    pub failures: Vec<Failure>,
}

impl KernelValidation {
    /// True when no check failed.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Parses `text`, runs the pipeline with `pipeline`, optionally breaks the lowering with
/// `mutation`, and builds the simulator form of every kernel. The flag says whether the
/// mutation found something to break.
pub fn compile_for_simulation(
    text: &str,
    file: &str,
    pipeline: &PipelineOptions,
    mutation: Option<Mutation>,
) -> Result<(Vec<SimKernel>, bool), Diagnostic> {
    let ctx = &mut Context::new();
    let module = parse_module(ctx, text, file)?;
    run_pipeline(ctx, module, pipeline)?;
    let mut mutated = false;
    if let Some(mutation) = mutation {
        mutated = mutation.apply(ctx, module)?;
    }
    let built = kernels(ctx, module)
        .into_iter()
        .map(|kernel| build_kernel(ctx, kernel, pipeline.target))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((built, mutated))
}

/// Validates every kernel of `text`. Errors are compile errors; failed checks are in the result.
pub fn validate(
    text: &str,
    file: &str,
    options: &ValidationOptions,
) -> Result<Vec<KernelValidation>, Diagnostic> {
    options.check()?;
    let (off_options, on_options) = options.pipelines();
    let (off_kernels, _) = compile_for_simulation(text, file, &off_options, None)?;
    let (on_kernels, mutated) = compile_for_simulation(text, file, &on_options, options.mutation)?;
    if let Some(mutation) = options.mutation
        && !mutated
    {
        return Err(Diagnostic {
            file: file.to_owned(),
            line: 0,
            column: 0,
            message: format!(
                "the mutation `{}` found nothing to break in this program for {}",
                mutation.name(),
                options.target.name()
            ),
        });
    }
    let grid = options
        .grid
        .as_deref()
        .map(Expression::parse)
        .transpose()
        .map_err(|message| Diagnostic {
            file: "<command line>".into(),
            line: 0,
            column: 0,
            message: format!("--grid: {message}"),
        })?;
    let mut validations = Vec::new();
    for (mut off, mut on) in off_kernels.into_iter().zip(on_kernels) {
        if options
            .kernel
            .as_ref()
            .is_some_and(|name| *name != off.name)
        {
            continue;
        }
        if let Some(grid) = &grid {
            off.launch.grid = grid.clone();
            on.launch.grid = grid.clone();
        }
        check_kernel_memory(&off, file, options)?;
        check_kernel_memory(&on, file, options)?;
        validations.push(validate_kernel(
            std::slice::from_ref(&off),
            std::slice::from_ref(&on),
            options,
        ));
    }
    if let Some(name) = &options.kernel
        && validations.is_empty()
    {
        return Err(Diagnostic {
            file: file.to_owned(),
            line: 0,
            column: 0,
            message: format!("no kernel named `{name}` in this file (--kernel)"),
        });
    }
    Ok(validations)
}

/// Validates a kernel compiled once per rank: `texts[r]` is rank `r`'s `.abo` text (one kernel
/// each; a Triton kernel specialized on its rank). What [`validate`] checks, per rank's kernel.
pub fn validate_per_rank(
    texts: &[String],
    file: &str,
    options: &ValidationOptions,
) -> Result<KernelValidation, Diagnostic> {
    options.check()?;
    let (off_options, on_options) = options.pipelines();
    let grid = options
        .grid
        .as_deref()
        .map(Expression::parse)
        .transpose()
        .map_err(|message| Diagnostic {
            file: "<command line>".into(),
            line: 0,
            column: 0,
            message: format!("--grid: {message}"),
        })?;
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for (rank, text) in texts.iter().enumerate() {
        let rank_file = format!("{file} (rank {rank})");
        let (mut off_kernels, _) = compile_for_simulation(text, &rank_file, &off_options, None)?;
        let (mut on_kernels, mutated) =
            compile_for_simulation(text, &rank_file, &on_options, options.mutation)?;
        if options.mutation.is_some() && !mutated {
            return Err(Diagnostic {
                file: rank_file,
                line: 0,
                column: 0,
                message: "the mutation found nothing to break in this program".into(),
            });
        }
        if off_kernels.len() != 1 {
            return Err(Diagnostic {
                file: rank_file,
                line: 0,
                column: 0,
                message: format!("expected one kernel, found {}", off_kernels.len()),
            });
        }
        let (mut off_kernel, mut on_kernel) = (off_kernels.remove(0), on_kernels.remove(0));
        if let Some(grid) = &grid {
            off_kernel.launch.grid = grid.clone();
            on_kernel.launch.grid = grid.clone();
        }
        off.push(off_kernel);
        on.push(on_kernel);
    }
    check_kernel_memory(&off[0], file, options)?;
    check_kernel_memory(&on[0], file, options)?;
    Ok(validate_kernel(&off, &on, options))
}

fn validate_kernel(
    off: &[SimKernel],
    on: &[SimKernel],
    options: &ValidationOptions,
) -> KernelValidation {
    let mut validation = KernelValidation {
        kernel: off[0].name.clone(),
        target: options.target.name(),
        schedules: options.schedules,
        passes_off: ConfigurationFigures::default(),
        passes_on: ConfigurationFigures::default(),
        failures: Vec::new(),
    };
    let mut reference: Option<SimulationOutcome> = None;
    let mut expected_observations = None;
    let reporter = options.progress.then(|| {
        Rc::new(RefCell::new(ProgressReporter {
            started: Instant::now(),
            last_printed: None,
            running: String::new(),
        }))
    });
    let launches = options.rounds;
    let hook = reporter.as_ref().map(|reporter| {
        let reporter = reporter.clone();
        ProgressHook(Rc::new(move |launch, steps| {
            reporter
                .borrow_mut()
                .report(Some((launch, launches, steps)));
        }))
    });
    for schedule in 0..options.schedules {
        let schedule_seed = options.seed.wrapping_add(u64::from(schedule));
        let simulation = SimulationOptions {
            expected_observations: expected_observations.clone(),
            progress: hook.clone(),
            ..options.simulation(schedule)
        };
        for (configuration, kernel) in [("passes-off", off), ("passes-on", on)] {
            if let Some(reporter) = &reporter {
                let mut reporter = reporter.borrow_mut();
                reporter.running = format!(
                    "{} on {}, {} ranks: {configuration} schedule {} of {} (seed {schedule_seed})",
                    validation.kernel,
                    validation.target,
                    options.ranks,
                    schedule + 1,
                    options.schedules
                );
                reporter.report(None);
            }
            let outcome = match simulate_per_rank(kernel, &simulation) {
                Ok(outcome) => outcome,
                Err(error) => {
                    validation.failures.push(Failure {
                        configuration,
                        schedule,
                        schedule_seed,
                        kind: error.kind(),
                        message: error.to_string(),
                    });
                    continue;
                }
            };
            if schedule == 0 {
                let figures = ConfigurationFigures {
                    rounds: outcome.rounds.clone(),
                };
                if configuration == "passes-off" {
                    validation.passes_off = figures;
                } else {
                    validation.passes_on = figures;
                }
            }
            match &reference {
                None => {
                    // The first successful run (library style under the first schedule when
                    // it succeeds) defines what every wait guards.
                    expected_observations = Some(Rc::new(outcome.observations.clone()));
                    reference = Some(outcome);
                }
                Some(reference) => {
                    if let Some(message) = first_divergence(reference, &outcome) {
                        validation.failures.push(Failure {
                            configuration,
                            schedule,
                            schedule_seed,
                            kind: "divergence",
                            message,
                        });
                    }
                }
            }
        }
    }
    validation
}

/// Where `outcome`'s final memory first differs from `reference`'s.
fn first_divergence(reference: &SimulationOutcome, outcome: &SimulationOutcome) -> Option<String> {
    for (expected, found) in reference.final_regions.iter().zip(&outcome.final_regions) {
        if let Some(offset) = expected
            .bytes
            .iter()
            .zip(&found.bytes)
            .position(|(expected, found)| expected != found)
        {
            return Some(format!(
                "final memory differs from the library-style run under the first schedule: rank {} region '{}' byte {offset:#x} is {:#04x}, expected {:#04x}",
                expected.rank, expected.region, found.bytes[offset], expected.bytes[offset]
            ));
        }
    }
    None
}
