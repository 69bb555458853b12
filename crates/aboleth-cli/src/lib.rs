//! The `aboleth` command line: `opt` prints IR after the pipeline, `compile --emit stats` prints
//! what each kernel does, `sim` runs and validates it on simulated ranks, `plan` prints the
//! passes' decisions and costs, `passes` lists the passes. Inputs are `.abo` files, or Triton
//! kernels in `.py` files (compiled through the Python package, `python -m aboleth.triton_compile`).
//!
//! [`run_command_line`] is the whole command: the `aboleth` binary calls it, and so does the
//! Python package's `aboleth` script (and `python -m aboleth`) through the extension module, so
//! there is one front door. Each subcommand parses its input, runs the library, and prints;
//! errors are printed as `file:line:column: error: message` and exit with status 1 (arguments
//! that do not parse: 2, as clap reports them). A closed standard output (`aboleth opt ... | head -1`) ends the command quietly.
//! No compiler logic lives here.

use aboleth_abi::Transport;
use std::collections::BTreeSet;

use clap::{
    Parser, Subcommand, ValueEnum,
    builder::{PossibleValuesParser, TypedValueParser},
};

use aboleth_ir::{
    Diagnostic,
    pliron::context::Context,
    text::{parse_module, print_module},
    walk::{kernel_name, kernels},
};
use aboleth_passes::{
    PipelineOptions,
    registry::PASSES,
    run_pipeline,
    stats::{KernelStats, count_kernel},
};
use aboleth_sim::{
    CostModel,
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

/// Parses `--target`: one of [`Transport::NAMES`] (clap lists them in its help and errors).
fn target_parser() -> impl TypedValueParser<Value = Transport> {
    PossibleValuesParser::new(Transport::NAMES).map(|name: String| {
        Transport::from_name(&name).expect("clap accepted one of Transport::NAMES")
    })
}

#[derive(clap::Args)]
struct PipelineArguments {
    #[command(flatten)]
    planning: PlanningArguments,
    /// Lower every call library-style (the baseline every benchmark compares against).
    #[arg(long)]
    passes_off: bool,
}

/// The transport and what the passes may assume: shared by `opt`/`compile` and `sim` (which
/// runs passes off itself, beside these).
#[derive(clap::Args)]
struct PlanningArguments {
    /// The transport to specialize to.
    #[arg(long, value_parser = target_parser(), default_value = "mlx5")]
    target: Transport,
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
    /// The pipeline configuration, checked (`PipelineOptions::validate`): a combination that
    /// cannot have the effect asked for is a command-line error.
    fn options(&self) -> anyhow::Result<PipelineOptions> {
        let planning = &self.planning;
        let mut options = PipelineOptions::new(planning.target);
        options.passes_off = self.passes_off;
        options.immediate_signals = planning.immediate_signals;
        options.packet_signals = planning.packet_signals;
        options.disabled = planning
            .disable_pass
            .iter()
            .cloned()
            .collect::<BTreeSet<_>>();
        options.validate().map_err(command_line_error)?;
        Ok(options)
    }
}

/// `aboleth compile --export`: the forms of a tier-2 program besides a Triton launch
/// (python/aboleth/export.py writes them).
#[derive(Clone, Copy, ValueEnum)]
enum ExportForm {
    /// The TTIR after the aboleth stage, as a private function to splice into another module.
    Fragment,
    /// The standalone kernel: its cubin, a JSON description and a C launcher.
    Kernel,
    /// A device function: LLVM IR (Triton's extern_libs), PTX and a header (CUDA).
    Function,
}

impl ExportForm {
    fn name(self) -> &'static str {
        match self {
            ExportForm::Fragment => "fragment",
            ExportForm::Kernel => "kernel",
            ExportForm::Function => "function",
        }
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
    /// Compile an .abo file, or a Triton kernel in a .py file (through the Python package,
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
        /// .py: write an export form under --out instead of printing: `fragment` (the TTIR
        /// after the aboleth stage as a function to splice), `kernel` (cubin and a C launcher)
        /// or `function` (a device function: LLVM IR for Triton, PTX and a header for CUDA).
        #[arg(long, value_enum)]
        export: Option<ExportForm>,
        /// .py: the directory --export writes to.
        #[arg(long)]
        out: Option<String>,
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
        /// The transport, and what the Aboleth configuration's passes may assume.
        #[command(flatten)]
        planning: PlanningArguments,
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
        /// Break the Aboleth lowering on purpose, to see the checker catch it (docs/SIMULATOR.md
        /// lists the mutations and what catches each; an unknown name prints them all).
        #[arg(long, value_name = "MUTATION")]
        mutate: Option<String>,
        /// Scheduler steps per run before it is reported as not terminating.
        #[arg(long, default_value_t = 2_000_000)]
        step_limit: u64,
        /// The measured machine simulated time is counted for: two H200 over NVLink, or two
        /// ranks on one H200 under CUDA MPS (crates/aboleth-sim/src/cost_model.rs).
        #[arg(long, value_name = "NAME", value_parser = PossibleValuesParser::new(CostModel::PROFILE_NAMES), default_value = CostModel::PROFILE_NAMES[0])]
        cost_model: String,
        #[command(flatten)]
        python: PythonKernelArguments,
    },
    /// Print what the passes decided for a file and a table of costs, library-style
    /// (`--passes-off`) against Aboleth, for mlx5, proxy and p2p.
    Plan {
        /// The input file.
        file: String,
    },
    /// Write the tier-1 CUDA device library for a transport: include/aboleth/device.cuh (and its
    /// implementation), and libaboleth_device.a built with nvcc (docs/TIERS.md).
    DeviceLibrary {
        /// The transport the library is specialized to (p2p, proxy or mlx5).
        #[arg(long, value_parser = target_parser())]
        target: Transport,
        /// The directory to write (created if missing; the library's files are replaced).
        #[arg(long)]
        out: String,
        /// Write the header only; do not build the archive.
        #[arg(long)]
        header_only: bool,
        /// The nvcc to build the archive with (default: $NVCC, $CUDA_HOME/bin/nvcc, nvcc on
        /// PATH, /usr/local/cuda/bin/nvcc).
        #[arg(long)]
        nvcc: Option<String>,
        /// The GPU architecture to build the archive for.
        #[arg(long, default_value = "sm_90")]
        arch: String,
        /// Also build each operation's LLVM bitcode (bitcode/<operation>.bc, for Triton's
        /// extern_libs and CuTe DSL) with clang 16 or later.
        #[arg(long)]
        bitcode: bool,
        /// The clang++ to build the bitcode with (default: $ABOLETH_CLANG, clang++-16, clang++).
        #[arg(long)]
        clang: Option<String>,
        /// Write a deliberately broken library (signal-before-copy): for the GPU check that
        /// catches it, never for use.
        #[arg(long, value_name = "MUTATION")]
        mutate: Option<String>,
    },
}

/// Runs the command line `arguments` (the first one is the program name) and returns the exit
/// status: 0 on success, 1 when the input, an option or a check failed, 2 when the arguments
/// do not parse. Triton
/// kernels (`.py`) are compiled by `python_interpreter` (default: `ABOLETH_PYTHON`, else
/// `.venv/bin/python` when present, else `python3`).
pub fn run_command_line<I, T>(arguments: I, python_interpreter: Option<String>) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(arguments) {
        Ok(cli) => cli,
        Err(error) => {
            // --help and --version are "errors" that print to stdout and succeed.
            let _ = error.print();
            return if error.use_stderr() { 2 } else { 0 };
        }
    };
    let python = python_interpreter.unwrap_or_else(default_python_interpreter);
    match run(cli, &python) {
        Ok(()) => 0,
        Err(error) if is_broken_pipe(&error) => 0,
        Err(error) => {
            eprintln!("{error}");
            1
        }
    }
}

/// Writes `text` to standard output. A reader that went away (`| head`) is reported as a
/// broken pipe, which [`run_command_line`] turns into a quiet end instead of a panic.
fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error
        .downcast_ref::<std::io::Error>()
        .is_some_and(|error| error.kind() == std::io::ErrorKind::BrokenPipe)
}

fn read(file: &str) -> anyhow::Result<String> {
    std::fs::read_to_string(file)
        .map_err(|error| anyhow::anyhow!("{file}: error: cannot read the file: {error}"))
}

fn run(cli: Cli, python: &str) -> anyhow::Result<()> {
    match cli.command {
        Command::Passes => {
            let mut out = String::new();
            for pass in PASSES {
                out.push_str(&format!(
                    "{:<30} {:<11} {}\n",
                    pass.name,
                    pass.level.name(),
                    pass.description
                ));
            }
            emit(&out)
        }
        Command::Opt {
            file,
            pipeline,
            print_after_all,
            no_lowering,
        } => {
            let mut options = pipeline.options()?;
            refuse_python_input(&file, "opt")?;
            let text = read(&file)?;
            let ctx = &mut Context::new();
            let module = parse_module(ctx, &text, &file)?;
            options.print_after_all = print_after_all;
            options.stop_before_lowering = no_lowering;
            let report = run_pipeline(ctx, module, &options)?;
            for (pass, snapshot) in &report.snapshots {
                emit(&format!("// ----- IR after {pass} -----\n{snapshot}"))?;
            }
            if !print_after_all {
                emit(&print_module(ctx, module))?;
            }
            Ok(())
        }
        Command::DeviceLibrary {
            target,
            out,
            header_only,
            nvcc,
            arch,
            bitcode,
            clang,
            mutate,
        } => {
            let mutation = match mutate {
                None => None,
                Some(name) => Some(
                    aboleth_codegen::cuda::CudaMutation::from_name(&name).ok_or_else(|| {
                        command_line_error(format!(
                            "unknown device-library mutation '{name}'; known: {}",
                            aboleth_codegen::cuda::CudaMutation::ALL
                                .map(|mutation| mutation.name())
                                .join(", ")
                        ))
                    })?,
                ),
            };
            let mut report = device_library(target, &out, header_only, nvcc, &arch, mutation)?;
            if bitcode {
                report.push_str(&device_library_bitcode(&out, clang)?);
            }
            emit(&report)
        }
        Command::Plan { file } => {
            refuse_python_input(&file, "plan")?;
            let text = read(&file)?;
            emit(&plan(&text, &file)?)
        }
        Command::Sim {
            file,
            kernel,
            ranks,
            grid,
            planning,
            schedules,
            seed,
            rounds,
            check,
            stats,
            mutate,
            step_limit,
            cost_model,
            python: python_kernel,
        } => {
            let passes_on = PipelineArguments {
                planning,
                passes_off: false,
            }
            .options()?;
            let mut options = ValidationOptions::new(passes_on.target);
            options.ranks = ranks;
            options.grid = grid;
            options.schedules = schedules;
            options.seed = seed;
            options.rounds = rounds;
            options.step_limit = step_limit;
            options.cost_model = CostModel::named(&cost_model)
                .expect("clap accepted one of CostModel::PROFILE_NAMES");
            options.disabled_passes = passes_on.disabled;
            options.immediate_signals = passes_on.immediate_signals;
            options.packet_signals = passes_on.packet_signals;
            options.kernel = kernel;
            if let Some(name) = mutate {
                let names: Vec<&str> = Mutation::ALL.iter().map(|m| m.name()).collect();
                options.mutation = Some(Mutation::from_name(&name).ok_or_else(|| {
                    command_line_error(format!(
                        "unknown mutation '{name}'; known: {}",
                        names.join(", ")
                    ))
                })?);
            }
            let validations = if is_python_file(&file) {
                vec![simulate_python(&file, &python_kernel, &options, python)?]
            } else {
                python_kernel.refuse_for_abo(&file)?;
                validate(&read(&file)?, &file, &options)?
            };
            if stats {
                let value = serde_json::json!({ "kernels": validations });
                emit(&format!(
                    "{}\n",
                    serde_json::to_string_pretty(&value).expect("serializes")
                ))?;
            } else {
                for validation in &validations {
                    emit(&describe_validation(validation, &options))?;
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
            emit: what,
            kernel,
            signature,
            constexpr,
            num_warps,
            export,
            out,
        } => {
            let options = pipeline.options()?;
            if is_python_file(&file) {
                if !options.target.has_code_generation()
                    && (matches!(what, Emit::Ttir | Emit::Ptx) || export.is_some())
                {
                    anyhow::bail!(
                        "{file}: error: --target {target} has no code generation for Triton \
                         kernels yet ({target} is experimental: lowered and simulated); plan \
                         it for {target} with --emit stats or --emit aboleth, or compile for \
                         --target mlx5, proxy, p2p or ionic",
                        target = options.target.name()
                    );
                }
                let request = PythonCompilation {
                    file: &file,
                    pipeline: &pipeline,
                    emit: what,
                    kernel,
                    signature,
                    constexpr,
                    num_warps,
                    export: (export, out.clone()),
                };
                return compile_python(&request, python);
            }
            for (flag, given) in [
                ("--kernel", kernel.is_some()),
                ("--signature", !signature.is_empty()),
                ("--constexpr", !constexpr.is_empty()),
                ("--num-warps", num_warps.is_some()),
            ] {
                if given {
                    return Err(python_only_flag(&file, flag));
                }
            }
            if export.is_some() || out.is_some() {
                anyhow::bail!(
                    "{file}: error: --export needs a Triton kernel (.py): Triton builds the cubin, LLVM IR and TTIR the export forms are made of; an .abo file compiles to Aboleth IR (--emit aboleth)"
                );
            }
            if matches!(what, Emit::Ttir | Emit::Ptx) {
                anyhow::bail!(
                    "{file}: error: --emit {} needs a Triton kernel (.py); for .abo files use --emit aboleth or stats",
                    what.name()
                );
            }
            let text = read(&file)?;
            let json = compile(&text, &file, &options, what)?;
            emit(&format!("{json}\n"))
        }
    }
}

fn is_python_file(file: &str) -> bool {
    file.to_ascii_lowercase().ends_with(".py")
}

/// A mistake on the command line itself (no input file position to give).
/// `aboleth device-library`: writes the library's files under `out` and, unless `header_only`,
/// builds the archive with nvcc; returns what it says it did.
fn device_library(
    target: Transport,
    out: &str,
    header_only: bool,
    nvcc: Option<String>,
    arch: &str,
    mutation: Option<aboleth_codegen::cuda::CudaMutation>,
) -> anyhow::Result<String> {
    use aboleth_codegen::device_library::{
        ARCHIVE_NAME, HEADER_PATH, archive_commands, generate_mutated,
    };
    let library = generate_mutated(target, mutation)
        .map_err(|error| command_line_error(error.message.trim_start_matches("error: ")))?;
    let root = std::path::Path::new(out);
    for (path, contents) in &library.files {
        let file = root.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).map_err(|error| {
                anyhow::anyhow!(
                    "{}: error: cannot create the directory: {error}",
                    parent.display()
                )
            })?;
        }
        std::fs::write(&file, contents)
            .map_err(|error| anyhow::anyhow!("{}: error: cannot write: {error}", file.display()))?;
    }
    let mut report = format!(
        "wrote {} for {}: {} and ptr, each for a thread, a warp and a block ({} bounded wait sites)\n",
        root.join(HEADER_PATH).display(),
        target.name(),
        library.operations.join(", "),
        library.wait_sites.len()
    );
    if header_only {
        return Ok(report);
    }
    let nvcc = nvcc.or_else(find_nvcc).ok_or_else(|| {
        command_line_error(
            "no nvcc to build libaboleth_device.a: pass --nvcc PATH or set NVCC (the nvidia-cuda-nvcc wheel has one), or --header-only for the header alone",
        )
    })?;
    for arguments in archive_commands(out, arch) {
        let output = std::process::Command::new(&nvcc)
            .args(&arguments)
            .output()
            .map_err(|error| command_line_error(format!("cannot run {nvcc}: {error}")))?;
        if !output.status.success() {
            return Err(command_line_error(format!(
                "{nvcc} {} failed ({}):\n{}{}",
                arguments.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )));
        }
    }
    // The intermediate object is not part of the library.
    let _ = std::fs::remove_file(root.join("aboleth_device.o"));
    report.push_str(&format!(
        "built {} with {nvcc} for {arch}\n",
        root.join(ARCHIVE_NAME).display()
    ));
    Ok(report)
}

/// `aboleth device-library --bitcode`: each operation's bitcode with clang, in `out`.
fn device_library_bitcode(out: &str, clang: Option<String>) -> anyhow::Result<String> {
    use aboleth_codegen::device_library::bitcode_commands;
    let clang = clang
        .or_else(|| std::env::var("ABOLETH_CLANG").ok())
        .or_else(|| {
            ["clang++-16", "clang++"].into_iter().find_map(|name| {
                std::env::var_os("PATH").and_then(|path| {
                    std::env::split_paths(&path)
                        .map(|directory| directory.join(name))
                        .find(|candidate| candidate.is_file())
                        .map(|found| found.display().to_string())
                })
            })
        })
        .ok_or_else(|| {
            command_line_error(
                "no clang++ to build the bitcode: pass --clang PATH or set ABOLETH_CLANG (clang 16 or later, with its CUDA support), or leave out --bitcode",
            )
        })?;
    let root = std::path::Path::new(out);
    std::fs::create_dir_all(root.join("bitcode")).map_err(|error| {
        anyhow::anyhow!(
            "{}: error: cannot create the directory: {error}",
            root.join("bitcode").display()
        )
    })?;
    let commands = bitcode_commands();
    for (operation, arguments) in &commands {
        let output = std::process::Command::new(&clang)
            .args(arguments)
            .current_dir(root)
            .output()
            .map_err(|error| command_line_error(format!("cannot run {clang}: {error}")))?;
        if !output.status.success() {
            return Err(command_line_error(format!(
                "{clang} failed on the bitcode of {operation} ({}):\n{}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )));
        }
    }
    Ok(format!(
        "built {} bitcode files in {} with {clang}\n",
        commands.len(),
        root.join("bitcode").display()
    ))
}

/// nvcc from $NVCC, $CUDA_HOME/bin, PATH or /usr/local/cuda/bin.
fn find_nvcc() -> Option<String> {
    let executable = |path: std::path::PathBuf| path.is_file().then(|| path.display().to_string());
    if let Some(nvcc) = std::env::var_os("NVCC") {
        return Some(nvcc.to_string_lossy().into_owned());
    }
    if let Some(found) = std::env::var_os("CUDA_HOME")
        .and_then(|home| executable(std::path::PathBuf::from(home).join("bin/nvcc")))
    {
        return Some(found);
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .chain([std::path::PathBuf::from("/usr/local/cuda/bin")])
        .find_map(|directory| executable(directory.join("nvcc")))
}

fn command_line_error(message: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("<command line>: error: {message}")
}

/// `flag` describes how to compile a Triton kernel; an `.abo` file carries that itself.
fn python_only_flag(file: &str, flag: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{file}: error: {flag} applies to Triton kernels (.py files); an .abo file names its \
         kernels and carries its launch (grid, regions, bind, init) as kernel attributes: drop {flag}"
    )
}

fn refuse_python_input(file: &str, verb: &str) -> anyhow::Result<()> {
    if is_python_file(file) {
        anyhow::bail!(
            "{file}: error: `aboleth {verb}` reads .abo files; for a Triton kernel use \
             `aboleth compile {file} --kernel NAME --signature ... --emit aboleth` (the lifted, \
             planned Aboleth IR) or `aboleth sim {file} ...`"
        );
    }
    Ok(())
}

/// The Python interpreter that has the aboleth package, when the caller does not say:
/// `ABOLETH_PYTHON`, `.venv/bin/python`, or python3.
fn default_python_interpreter() -> String {
    std::env::var("ABOLETH_PYTHON").unwrap_or_else(|_| {
        if std::path::Path::new(".venv/bin/python").exists() {
            ".venv/bin/python".to_string()
        } else {
            "python3".to_string()
        }
    })
}

/// The module of the Python package that compiles a Triton kernel file on the CPU.
const TRITON_COMPILE_MODULE: &str = "aboleth.triton_compile";

/// Runs `python -m aboleth.triton_compile ARGUMENTS`; returns its standard output, or its
/// error message (already `file:line:column: error: ...` or `aboleth: error: ...`) as the
/// error.
fn run_triton_compile(python: &str, file: &str, arguments: &[String]) -> anyhow::Result<String> {
    let mut command = std::process::Command::new(python);
    command
        .args(["-m", TRITON_COMPILE_MODULE, file])
        .args(arguments);
    let output = command.output().map_err(|error| {
        anyhow::anyhow!(
            "{file}: error: cannot run `{python}` ({error}); Triton kernels need the aboleth Python \
             package (`pip install .`, or `make python-setup` and `maturin develop`), or set \
             ABOLETH_PYTHON to an interpreter that has it"
        )
    })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let message = stderr.trim_end();
        if message.is_empty() {
            anyhow::bail!("{file}: error: `{python} -m {TRITON_COMPILE_MODULE}` failed");
        }
        anyhow::bail!("{message}");
    }
    Ok(String::from_utf8(output.stdout)?)
}

impl PythonKernelArguments {
    /// The options that describe a Triton kernel's compilation and launch make no sense for an
    /// `.abo` file, which carries its launch as attributes.
    fn refuse_for_abo(&self, file: &str) -> anyhow::Result<()> {
        for (flag, given) in [
            ("--signature", !self.signature.is_empty()),
            ("--constexpr", !self.constexpr.is_empty()),
            ("--rank-constexpr", self.rank_constexpr.is_some()),
            ("--regions", self.regions.is_some()),
            ("--bind", self.bind.is_some()),
            ("--init", self.init.is_some()),
        ] {
            if given {
                return Err(python_only_flag(file, flag));
            }
        }
        Ok(())
    }
}

/// `aboleth sim KERNEL.py`: Triton's TTIR of the kernel (once per rank with
/// `--rank-constexpr`), lifted with the launch attributes, validated like an .abo file; every
/// diagnostic is told at the kernel's Python line.
fn simulate_python(
    file: &str,
    python_kernel: &PythonKernelArguments,
    options: &ValidationOptions,
    python: &str,
) -> anyhow::Result<KernelValidation> {
    let kernel = options.kernel.clone().ok_or_else(|| {
        anyhow::anyhow!("{file}: error: name the @triton.jit function with --kernel NAME")
    })?;
    let missing = |flag: &str, example: &str| {
        anyhow::anyhow!(
            "{file}: error: a Python kernel carries no launch description: give {flag} (e.g. {flag} \"{example}\")"
        )
    };
    let regions = python_kernel
        .regions
        .clone()
        .ok_or_else(|| missing("--regions", "send=ranks*256 recv=ranks*256 flags=ranks*8"))?;
    let bind = python_kernel.bind.clone().ok_or_else(|| {
        missing(
            "--bind",
            "endpoints=endpoints recv=regions:recv send=local:send send_key=lkey:send epoch=value:epoch",
        )
    })?;
    // Refused options (ranks, schedules, rounds) and a launch that does not parse, before
    // compiling once per rank; the launch's mistakes are the command line's, not the kernel's.
    options.check()?;
    let grid = options.grid.clone().unwrap_or_else(|| "1".to_string());
    aboleth_sim::launch::LaunchSpec::parse(
        Some(&grid),
        Some(&regions),
        Some(&bind),
        python_kernel.init.as_deref(),
    )
    .map_err(|message| command_line_error(format!("--{message}")))?;
    let compilations = if python_kernel.rank_constexpr.is_some() {
        options.ranks
    } else {
        1
    };
    // The TTIR before the aboleth stage does not depend on the target, and the Python side
    // accepts only targets with code generation: an experimental one (efa) captures as mlx5.
    let capture_target = if options.target.has_code_generation() {
        options.target
    } else {
        Transport::Mlx5
    };
    let mut kernels = Vec::new();
    for rank in 0..compilations {
        let mut arguments = vec![
            "--kernel".to_string(),
            kernel.clone(),
            "--target".to_string(),
            capture_target.name().to_string(),
            "--emit".to_string(),
            "ttir-input".to_string(),
        ];
        for value in &python_kernel.signature {
            arguments.extend(["--signature".to_string(), value.clone()]);
        }
        for value in &python_kernel.constexpr {
            arguments.extend(["--constexpr".to_string(), value.clone()]);
        }
        if let Some(name) = &python_kernel.rank_constexpr {
            arguments.extend(["--constexpr".to_string(), format!("{name}={rank}")]);
        }
        let ttir = run_triton_compile(python, file, &arguments)?;
        let mut attributes = vec![
            ("grid", grid.as_str()),
            ("regions", regions.as_str()),
            ("bind", bind.as_str()),
        ];
        if let Some(init) = &python_kernel.init {
            attributes.push(("init", init.as_str()));
        }
        let lifted =
            aboleth_codegen::lift_for_simulation(&ttir, &format!("{kernel}.ttir"), &attributes)
                .map_err(|error| anyhow::anyhow!("{}", error.message))?;
        if rank == 0 {
            for note in &lifted.notes {
                eprintln!("{file}: warning: {note}");
            }
        }
        kernels.push(lifted);
    }
    let texts: Vec<String> = kernels.iter().map(|k| k.text.clone()).collect();
    // The simulator locates what it reports in the lifted text (`FILE` or, per rank, `FILE
    // (rank N)`): tell it at the user's line, through that rank's compilation.
    let lifted_file = format!("{kernel}.lifted.abo");
    let locate = |diagnostic: Diagnostic| {
        let rank = diagnostic
            .file
            .strip_prefix(&format!("{lifted_file} (rank "))
            .and_then(|rest| rest.strip_suffix(')'))
            .and_then(|rank| rank.parse::<usize>().ok())
            .unwrap_or(0);
        let located = kernels.get(rank).map(|kernel| kernel.locate(&diagnostic));
        anyhow::anyhow!("{}", located.unwrap_or_else(|| diagnostic.to_string()))
    };
    let mut validation = if texts.len() == 1 {
        let mut validations = validate(&texts[0], &lifted_file, options).map_err(locate)?;
        validations.remove(0)
    } else {
        validate_per_rank(&texts, &lifted_file, options).map_err(locate)?
    };
    for failure in &mut validation.failures {
        failure.message =
            aboleth_codegen::relocate_per_rank(&kernels, &failure.message, &lifted_file);
    }
    Ok(validation)
}

/// What `aboleth compile KERNEL.py` forwards to the Python package.
struct PythonCompilation<'a> {
    file: &'a str,
    pipeline: &'a PipelineArguments,
    emit: Emit,
    kernel: Option<String>,
    signature: Vec<String>,
    constexpr: Vec<String>,
    num_warps: Option<u32>,
    /// `--export FORM` and `--out DIR` (the Python side checks that they come together).
    export: (Option<ExportForm>, Option<String>),
}

/// `aboleth compile KERNEL.py`: hands the work to the Python package (Triton lives there).
fn compile_python(request: &PythonCompilation<'_>, python: &str) -> anyhow::Result<()> {
    let file = request.file;
    let kernel = request.kernel.clone().ok_or_else(|| {
        anyhow::anyhow!("{file}: error: name the @triton.jit function with --kernel NAME")
    })?;
    let pipeline = request.pipeline;
    let planning = &pipeline.planning;
    let mut arguments = vec![
        "--kernel".to_string(),
        kernel,
        "--target".to_string(),
        planning.target.name().to_string(),
        "--emit".to_string(),
        request.emit.name().to_string(),
    ];
    for value in &request.signature {
        arguments.extend(["--signature".to_string(), value.clone()]);
    }
    for value in &request.constexpr {
        arguments.extend(["--constexpr".to_string(), value.clone()]);
    }
    if let Some(warps) = request.num_warps {
        arguments.extend(["--num-warps".to_string(), warps.to_string()]);
    }
    if let Some(form) = request.export.0 {
        arguments.extend(["--export".to_string(), form.name().to_string()]);
    }
    if let Some(out) = &request.export.1 {
        arguments.extend(["--out".to_string(), out.clone()]);
    }
    if pipeline.passes_off {
        arguments.push("--passes-off".to_string());
    }
    for pass in &planning.disable_pass {
        arguments.extend(["--disable-pass".to_string(), pass.clone()]);
    }
    if planning.immediate_signals {
        arguments.push("--immediate-signals".to_string());
    }
    if planning.packet_signals {
        arguments.push("--packet-signals".to_string());
    }
    let output = run_triton_compile(python, file, &arguments)?;
    emit(&output)
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
    let mut options = PipelineOptions::new(Transport::Mlx5);
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
    for target in [Transport::Mlx5, Transport::Proxy, Transport::P2p] {
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
