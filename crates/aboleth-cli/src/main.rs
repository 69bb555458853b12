//! The `aboleth` command line: `opt` prints IR after the pipeline, `compile --emit stats` prints
//! what each kernel does, `sim` runs and validates it on simulated ranks, `passes` lists the
//! passes.
//!
//! Each subcommand parses its input, runs the library, and prints; errors are printed as
//! `file:line:column: error: message` and exit with status 1. No compiler logic lives here.

use std::collections::BTreeSet;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use aboleth_ir::{
    Diagnostic,
    pliron::context::Context,
    text::{parse_module, print_module},
    transport::Target,
    walk::{kernel_name, kernels},
};
use aboleth_passes::{
    PipelineOptions,
    registry::PASSES,
    run_pipeline,
    stats::{KernelStats, count_kernel},
};
use aboleth_sim::{
    mutations::Mutation,
    validation::{KernelValidation, ValidationOptions, validate, validate_per_rank},
};

#[derive(Parser)]
#[command(
    name = "aboleth",
    version,
    about = "A compiler for GPU-initiated communication"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum TargetArgument {
    Mlx5,
    Proxy,
    P2p,
    Efa,
    Ionic,
}

impl TargetArgument {
    fn target(self) -> Target {
        match self {
            TargetArgument::Mlx5 => Target::Mlx5,
            TargetArgument::Proxy => Target::Proxy,
            TargetArgument::P2p => Target::P2p,
            TargetArgument::Efa => Target::Efa,
            TargetArgument::Ionic => Target::Ionic,
        }
    }
}

#[derive(clap::Args)]
struct PipelineArguments {
    /// The transport to specialize to.
    #[arg(long, value_enum, default_value = "mlx5")]
    target: TargetArgument,
    /// Lower every call library-style (the baseline every benchmark compares against).
    #[arg(long)]
    passes_off: bool,
    /// Skip one planning pass (repeatable); see `aboleth passes`.
    #[arg(long = "disable-pass", value_name = "NAME")]
    disable_pass: Vec<String>,
    /// Declare that the program's flags are observed only through `wait_signal`, so mlx5
    /// signals may ride on their puts as write-with-immediate (the flag is written when a wait
    /// of the receiving rank applies it).
    #[arg(long)]
    immediate_signals: bool,
    /// Declare that a signal publishes only the put it follows, whose data is read after a
    /// wait on that signal's flag in the same launch, so p2p signals may travel in their puts'
    /// data as LL packets (flag-in-data), unpacked by the receiver's waits.
    #[arg(long)]
    packet_signals: bool,
}

impl PipelineArguments {
    fn options(&self) -> PipelineOptions {
        let mut options = PipelineOptions::new(self.target.target());
        options.passes_off = self.passes_off;
        options.immediate_signals = self.immediate_signals;
        options.packet_signals = self.packet_signals;
        options.disabled = self.disable_pass.iter().cloned().collect::<BTreeSet<_>>();
        options
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum Emit {
    /// The lowered Aboleth IR.
    Aboleth,
    /// JSON statistics per kernel.
    Stats,
    /// The TTIR after the aboleth stage (Python kernels only).
    Ttir,
    /// The PTX (Python kernels only).
    Ptx,
}

impl Emit {
    fn name(self) -> &'static str {
        match self {
            Emit::Aboleth => "aboleth",
            Emit::Stats => "stats",
            Emit::Ttir => "ttir",
            Emit::Ptx => "ptx",
        }
    }
}

/// What `aboleth sim KERNEL.py` needs beyond an .abo file: how to compile the Triton kernel and
/// the launch that the .abo attributes would otherwise describe.
#[derive(clap::Args)]
struct PythonKernelArguments {
    /// .py: NAME=TYPE[,NAME=TYPE...] with Triton's types (*i64, i64, i32, ...).
    #[arg(long)]
    signature: Vec<String>,
    /// .py: NAME=VALUE for a constexpr parameter (repeatable).
    #[arg(long)]
    constexpr: Vec<String>,
    /// .py: the constexpr that holds the rank (the kernel is then compiled once per rank).
    #[arg(long, value_name = "NAME")]
    rank_constexpr: Option<String>,
    /// .py: the simulator's regions, as the `regions` attribute (e.g. "send=ranks*256 ...").
    #[arg(long)]
    regions: Option<String>,
    /// .py: what each kernel argument receives, as the `bind` attribute.
    #[arg(long)]
    bind: Option<String>,
    /// .py: initial contents, as the `init` attribute.
    #[arg(long)]
    init: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the pipeline on an .abo file and print the resulting IR.
    Opt {
        /// The input file.
        file: String,
        #[command(flatten)]
        pipeline: PipelineArguments,
        /// Print the IR after every pass.
        #[arg(long)]
        print_after_all: bool,
        /// Stop after the planning passes (print the annotated semantic IR).
        #[arg(long)]
        no_lowering: bool,
    },
    /// Compile an .abo file, or a Triton kernel in a .py file (through `python -m aboleth`,
    /// no GPU needed), and emit IR, PTX or statistics.
    Compile {
        /// The input file (.abo, or .py with --kernel and --signature).
        file: String,
        #[command(flatten)]
        pipeline: PipelineArguments,
        /// What to print.
        #[arg(long, value_enum, default_value = "stats")]
        emit: Emit,
        /// .py: the @triton.jit function.
        #[arg(long)]
        kernel: Option<String>,
        /// .py: NAME=TYPE[,NAME=TYPE...] with Triton's types (*i64, i64, i32, ...).
        #[arg(long)]
        signature: Vec<String>,
        /// .py: NAME=VALUE for a constexpr parameter (repeatable).
        #[arg(long)]
        constexpr: Vec<String>,
        /// .py: warps per program.
        #[arg(long)]
        num_warps: Option<u32>,
    },
    /// List the planning passes in pipeline order.
    Passes,
    /// Run a kernel on simulated ranks, library-style (`--passes-off`) and with the passes, under
    /// random schedules, and check that they agree (translation validation).
    Sim {
        /// The input file (.abo).
        file: String,
        /// Only this kernel (default: every kernel of the file).
        #[arg(long)]
        kernel: Option<String>,
        /// Simulated ranks.
        #[arg(long, default_value_t = 2)]
        ranks: u32,
        /// Programs per rank, overriding the kernel's `grid` (an expression in `ranks`).
        #[arg(long)]
        grid: Option<String>,
        /// The transport.
        #[arg(long, value_enum, default_value = "mlx5")]
        target: TargetArgument,
        /// Skip one planning pass in the Aboleth configuration (repeatable).
        #[arg(long = "disable-pass", value_name = "NAME")]
        disable_pass: Vec<String>,
        /// Flags are observed only through `wait_signal`: mlx5 signals may ride on their puts
        /// (write-with-immediate), applied by the receiver's waits.
        #[arg(long)]
        immediate_signals: bool,
        /// A signal publishes only the put it follows, awaited in the same launch: p2p signals
        /// may travel in their puts' data as LL packets (flag-in-data).
        #[arg(long)]
        packet_signals: bool,
        /// Random schedules per configuration.
        #[arg(long, default_value_t = 20)]
        schedules: u32,
        /// First schedule seed (schedule k uses seed + k) and the data seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Kernel launches per run (`value:epoch` arguments count them from 1).
        #[arg(long, default_value_t = 1)]
        rounds: u32,
        /// Exit with status 1 when a check fails.
        #[arg(long)]
        check: bool,
        /// Print executed counts and simulated time as JSON.
        #[arg(long)]
        stats: bool,
        /// Break the Aboleth lowering on purpose, to see the checker catch it: signal-before-data,
        /// missing-fence, dropped-completion, doorbell-before-record, reused-source-without-wait,
        /// false-single-owner, epoch-off-by-one, posting-without-barrier,
        /// stale-publication-counter, wait-without-draining-receives,
        /// no-periodic-completions, unpack-without-checking-packets.
        #[arg(long, value_name = "MUTATION")]
        mutate: Option<String>,
        /// Scheduler steps per run before it is reported as not terminating.
        #[arg(long, default_value_t = 2_000_000)]
        step_limit: u64,
        #[command(flatten)]
        python: PythonKernelArguments,
    },
    /// Print what the passes decided for a file and a table of costs, library-style
    /// (`--passes-off`) against Aboleth, for mlx5, proxy and p2p.
    Plan {
        /// The input file.
        file: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}

fn read(file: &str) -> anyhow::Result<String> {
    std::fs::read_to_string(file)
        .map_err(|error| anyhow::anyhow!("{file}: error: cannot read the file: {error}"))
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Passes => {
            for pass in PASSES {
                println!(
                    "{:<30} {:<11} {}",
                    pass.name,
                    pass.level.name(),
                    pass.description
                );
            }
            Ok(())
        }
        Command::Opt {
            file,
            pipeline,
            print_after_all,
            no_lowering,
        } => {
            let text = read(&file)?;
            let ctx = &mut Context::new();
            let module = parse_module(ctx, &text, &file)?;
            let mut options = pipeline.options();
            options.print_after_all = print_after_all;
            options.stop_before_lowering = no_lowering;
            let report = run_pipeline(ctx, module, &options)?;
            for (pass, snapshot) in &report.snapshots {
                println!("// ----- IR after {pass} -----");
                print!("{snapshot}");
            }
            if !print_after_all {
                print!("{}", print_module(ctx, module));
            }
            Ok(())
        }
        Command::Plan { file } => {
            let text = read(&file)?;
            print!("{}", plan(&text, &file)?);
            Ok(())
        }
        Command::Sim {
            file,
            kernel,
            ranks,
            grid,
            target,
            disable_pass,
            immediate_signals,
            packet_signals,
            schedules,
            seed,
            rounds,
            check,
            stats,
            mutate,
            step_limit,
            python,
        } => {
            let mut options = ValidationOptions::new(target.target());
            options.ranks = ranks;
            options.grid = grid;
            options.schedules = schedules;
            options.seed = seed;
            options.rounds = rounds;
            options.step_limit = step_limit;
            options.disabled_passes = disable_pass.into_iter().collect();
            options.immediate_signals = immediate_signals;
            options.packet_signals = packet_signals;
            options.kernel = kernel;
            if let Some(name) = mutate {
                let names: Vec<&str> = Mutation::ALL.iter().map(|m| m.name()).collect();
                options.mutation = Some(Mutation::from_name(&name).ok_or_else(|| {
                    anyhow::anyhow!(
                        "<command line>: error: unknown mutation '{name}'; known: {}",
                        names.join(", ")
                    )
                })?);
            }
            let validations = if file.ends_with(".py") {
                vec![simulate_python(&file, &python, &options)?]
            } else {
                validate(&read(&file)?, &file, &options)?
            };
            if stats {
                let value = serde_json::json!({ "kernels": validations });
                println!(
                    "{}",
                    serde_json::to_string_pretty(&value).expect("serializes")
                );
            } else {
                for validation in &validations {
                    print!("{}", describe_validation(validation, &options));
                }
            }
            if check && validations.iter().any(|v| !v.passed()) {
                anyhow::bail!("{file}: error: translation validation failed (see above)");
            }
            Ok(())
        }
        Command::Compile {
            file,
            pipeline,
            emit,
            kernel,
            signature,
            constexpr,
            num_warps,
        } => {
            if file.ends_with(".py") {
                return compile_python(
                    &file, &pipeline, emit, kernel, signature, constexpr, num_warps,
                );
            }
            if matches!(emit, Emit::Ttir | Emit::Ptx) {
                anyhow::bail!(
                    "{file}: error: --emit {} needs a Triton kernel (.py); for .abo files use --emit aboleth or stats",
                    emit.name()
                );
            }
            let text = read(&file)?;
            let json = compile(&text, &file, &pipeline.options(), emit)?;
            println!("{json}");
            Ok(())
        }
    }
}

/// The Python interpreter that has the aboleth package: `ABOLETH_PYTHON`, `.venv`, or python3.
fn python_interpreter() -> String {
    std::env::var("ABOLETH_PYTHON").unwrap_or_else(|_| {
        if std::path::Path::new(".venv/bin/python").exists() {
            ".venv/bin/python".to_string()
        } else {
            "python3".to_string()
        }
    })
}

/// `aboleth sim KERNEL.py`: Triton's TTIR of the kernel (once per rank with
/// `--rank-constexpr`), lifted with the launch attributes, validated like an .abo file.
fn simulate_python(
    file: &str,
    python: &PythonKernelArguments,
    options: &ValidationOptions,
) -> anyhow::Result<KernelValidation> {
    let kernel = options.kernel.clone().ok_or_else(|| {
        anyhow::anyhow!("{file}: error: name the @triton.jit function with --kernel NAME")
    })?;
    let missing = |flag: &str, example: &str| {
        anyhow::anyhow!(
            "{file}: error: a Python kernel carries no launch description: give {flag} (e.g. {flag} \"{example}\")"
        )
    };
    let regions = python
        .regions
        .clone()
        .ok_or_else(|| missing("--regions", "send=ranks*256 recv=ranks*256 flags=ranks*8"))?;
    let bind = python.bind.clone().ok_or_else(|| {
        missing(
            "--bind",
            "endpoints=endpoints recv=regions:recv send=local:send send_key=lkey:send epoch=value:epoch",
        )
    })?;
    let grid = options.grid.clone().unwrap_or_else(|| "1".to_string());
    let compilations = if python.rank_constexpr.is_some() {
        options.ranks
    } else {
        1
    };
    let interpreter = python_interpreter();
    let mut texts = Vec::new();
    for rank in 0..compilations {
        let mut command = std::process::Command::new(&interpreter);
        command
            .args(["-m", "aboleth", "compile", file, "--kernel", &kernel])
            .args(["--target", options.target.name(), "--emit", "ttir-input"]);
        for value in &python.signature {
            command.args(["--signature", value]);
        }
        for value in &python.constexpr {
            command.args(["--constexpr", value]);
        }
        if let Some(name) = &python.rank_constexpr {
            command.args(["--constexpr", &format!("{name}={rank}")]);
        }
        let output = command.output().map_err(|error| {
            anyhow::anyhow!(
                "{file}: error: cannot run `{interpreter}` ({error}); Python kernels need the aboleth Python package: run `make python-setup` and `maturin develop`, or set ABOLETH_PYTHON"
            )
        })?;
        if !output.status.success() {
            anyhow::bail!(
                "{file}: error: `{interpreter} -m aboleth compile` failed:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let ttir = String::from_utf8(output.stdout)?;
        let mut attributes = vec![
            ("grid", grid.as_str()),
            ("regions", regions.as_str()),
            ("bind", bind.as_str()),
        ];
        if let Some(init) = &python.init {
            attributes.push(("init", init.as_str()));
        }
        let text =
            aboleth_codegen::lift_for_simulation(&ttir, &format!("{kernel}.ttir"), &attributes)
                .map_err(|error| anyhow::anyhow!("{}", error.message))?;
        texts.push(text);
    }
    let validation = if texts.len() == 1 {
        let mut validations = validate(&texts[0], file, options)?;
        validations.remove(0)
    } else {
        validate_per_rank(&texts, file, options)?
    };
    Ok(validation)
}

/// `aboleth compile KERNEL.py`: hands the work to the Python package (Triton lives there).
#[allow(
    clippy::too_many_arguments,
    reason = "the command line's arguments, forwarded"
)]
fn compile_python(
    file: &str,
    pipeline: &PipelineArguments,
    emit: Emit,
    kernel: Option<String>,
    signature: Vec<String>,
    constexpr: Vec<String>,
    num_warps: Option<u32>,
) -> anyhow::Result<()> {
    let kernel = kernel.ok_or_else(|| {
        anyhow::anyhow!("{file}: error: name the @triton.jit function with --kernel NAME")
    })?;
    let python = python_interpreter();
    let mut command = std::process::Command::new(&python);
    command
        .args(["-m", "aboleth", "compile", file, "--kernel", &kernel])
        .args(["--target", pipeline.target.target().name()])
        .args(["--emit", emit.name()]);
    for value in &signature {
        command.args(["--signature", value]);
    }
    for value in &constexpr {
        command.args(["--constexpr", value]);
    }
    if let Some(warps) = num_warps {
        command.args(["--num-warps", &warps.to_string()]);
    }
    if pipeline.passes_off {
        command.arg("--passes-off");
    }
    for pass in &pipeline.disable_pass {
        command.args(["--disable-pass", pass]);
    }
    if pipeline.immediate_signals {
        command.arg("--immediate-signals");
    }
    if pipeline.packet_signals {
        command.arg("--packet-signals");
    }
    let status = command.status().map_err(|error| {
        anyhow::anyhow!(
            "{file}: error: cannot run `{python}` ({error}); Python kernels need the aboleth Python package: run `make python-setup` and `maturin develop`, or set ABOLETH_PYTHON to an interpreter that has it"
        )
    })?;
    if !status.success() {
        anyhow::bail!("{file}: error: `{python} -m aboleth compile` failed (see above)");
    }
    Ok(())
}

/// The human summary of one kernel's validation.
fn describe_validation(validation: &KernelValidation, options: &ValidationOptions) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let verdict = if validation.passed() {
        "validated: same final memory, every wait saw its data, every transfer its source, no deadlock".to_owned()
    } else {
        format!("{} FAILED CHECK(S)", validation.failures.len())
    };
    let _ = writeln!(
        out,
        "{} on {}: {} ranks, {} schedule(s) x 2 configurations, seed {}: {verdict}",
        validation.kernel, validation.target, options.ranks, validation.schedules, options.seed
    );
    for failure in validation.failures.iter().take(10) {
        let _ = writeln!(
            out,
            "  {} schedule {} (--seed {} --schedules 1): {}: {}",
            failure.configuration,
            failure.schedule,
            failure.schedule_seed,
            failure.kind,
            failure.message
        );
    }
    if validation.failures.len() > 10 {
        let _ = writeln!(out, "  ... and {} more", validation.failures.len() - 10);
    }
    let rows = |figures: &aboleth_sim::validation::ConfigurationFigures| {
        let rounds = figures.rounds.len().max(1) as u64;
        let mut total = aboleth_passes::stats::Counts::default();
        let mut time = 0;
        for round in &figures.rounds {
            total.add(&round.counts);
            time += round.simulated_time_nanoseconds;
        }
        (total, time / rounds, rounds)
    };
    let (off, off_time, rounds) = rows(&validation.passes_off);
    let (on, on_time, _) = rows(&validation.passes_on);
    let _ = writeln!(
        out,
        "  executed per round (all ranks, first schedule)   library   aboleth"
    );
    let fences = |c: &aboleth_passes::stats::Counts| c.fences.cta + c.fences.gpu + c.fences.sys;
    for (name, a, b) in [
        ("reservations", off.reservations, on.reservations),
        ("commands (WQEs / ring entries)", off.wqes, on.wqes),
        ("doorbells", off.doorbells, on.doorbells),
        (
            "doorbell-record updates",
            off.doorbell_record_updates,
            on.doorbell_record_updates,
        ),
        ("fences", fences(&off), fences(&on)),
        ("GPU atomics", off.atomics, on.atomics),
        (
            "completions requested",
            off.completions_requested,
            on.completions_requested,
        ),
        ("payload bytes", off.payload_bytes, on.payload_bytes),
        ("thread barriers", off.barriers, on.barriers),
        ("flag stores (NVLink)", off.flag_stores, on.flag_stores),
    ] {
        let _ = writeln!(out, "  {name:<46} {:>9} {:>9}", a / rounds, b / rounds);
    }
    let _ = writeln!(
        out,
        "  {:<46} {:>9} {:>9}",
        "simulated time per round (ns)", off_time, on_time
    );
    out
}

fn compile(
    text: &str,
    file: &str,
    options: &PipelineOptions,
    emit: Emit,
) -> Result<String, Diagnostic> {
    let ctx = &mut Context::new();
    let module = parse_module(ctx, text, file)?;
    let report = run_pipeline(ctx, module, options)?;
    match emit {
        Emit::Aboleth | Emit::Ttir | Emit::Ptx => Ok(print_module(ctx, module)),
        Emit::Stats => {
            let mut kernel_stats = Vec::new();
            for kernel in kernels(ctx, module) {
                let (counts, per_iteration, conditional) = count_kernel(ctx, kernel);
                kernel_stats.push(KernelStats {
                    name: kernel_name(ctx, kernel),
                    target: options.target.name().to_string(),
                    passes: report.passes_run.clone(),
                    counts,
                    per_iteration,
                    conditional,
                });
            }
            let value = serde_json::json!({ "kernels": kernel_stats });
            Ok(serde_json::to_string_pretty(&value).expect("stats serialize"))
        }
    }
}

fn total_counts(
    text: &str,
    file: &str,
    options: &PipelineOptions,
) -> Result<aboleth_passes::stats::Counts, Diagnostic> {
    let ctx = &mut Context::new();
    let module = parse_module(ctx, text, file)?;
    run_pipeline(ctx, module, options)?;
    let mut total = aboleth_passes::stats::Counts::default();
    for kernel in kernels(ctx, module) {
        total.add(&count_kernel(ctx, kernel).0);
    }
    Ok(total)
}

/// The decisions the planning passes took (one line per annotated op) and the cost table.
fn plan(text: &str, file: &str) -> Result<String, Diagnostic> {
    use std::fmt::Write;
    let mut out = String::new();
    let ctx = &mut Context::new();
    let module = parse_module(ctx, text, file)?;
    let mut options = PipelineOptions::new(Target::Mlx5);
    options.stop_before_lowering = true;
    run_pipeline(ctx, module, &options)?;
    let _ = writeln!(
        out,
        "plan for {file} (mlx5 planning; every op's decisions):"
    );
    let printed = print_module(ctx, module);
    for line in printed.lines() {
        let interesting = [
            "owner:",
            "publication:",
            "completion:",
            "batch:",
            "inline:",
            "queue_slots:",
        ];
        if interesting.iter().any(|key| line.contains(key)) {
            let _ = writeln!(out, "  {}", line.trim());
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<6} {:<9} {:>12} {:>9} {:>10} {:>7} {:>8} {:>12} {:>10}",
        "target",
        "lowering",
        "reservations",
        "commands",
        "doorbells",
        "fences",
        "atomics",
        "completions",
        "payload_B"
    );
    for target in [Target::Mlx5, Target::Proxy, Target::P2p] {
        for passes_off in [true, false] {
            let mut options = PipelineOptions::new(target);
            options.passes_off = passes_off;
            let c = total_counts(text, file, &options)?;
            let fences = c.fences.cta + c.fences.gpu + c.fences.sys;
            let _ = writeln!(
                out,
                "{:<6} {:<9} {:>12} {:>9} {:>10} {:>7} {:>8} {:>12} {:>10}",
                target.name(),
                if passes_off { "library" } else { "aboleth" },
                c.reservations,
                c.wqes,
                c.doorbells,
                fences,
                c.atomics,
                c.completions_requested,
                c.payload_bytes
            );
        }
    }
    let _ = writeln!(
        out,
        "(static counts per program instance; `aboleth compile FILE --target T --emit stats` gives the JSON)"
    );
    Ok(out)
}
