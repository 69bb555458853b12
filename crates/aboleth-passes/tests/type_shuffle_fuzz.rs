//! A bounded, deterministic generator of well-formed programs whose types are shuffled, run
//! through the parser, the verifier and the whole pipeline.
//!
//! Each program is a random, syntactically valid module: constants, scalar ops, endpoints,
//! regions, puts, signals, waits, loops and ifs nested a few levels. With a small probability per
//! op an operand is replaced by any value in scope (whatever its type) or a result type by any
//! type of the dialect (integers of odd widths, tokens, pointers, `ab.remote <0>`, ...). The
//! property: parsing, verifying and `run_pipeline` (one target, passes on or off, signal
//! options on or off, chosen at random per program) never panic, never blame the compiler ("a compiler bug"), and every error is a `Diagnostic` with a
//! line number. Unshuffled programs must mostly compile, so the generator is known to reach the
//! passes. `ABOLETH_FUZZ_SECONDS` bounds the run (default 3 s, as the parser fuzzer).

use aboleth_abi::Transport;
use std::time::{Duration, Instant};

use aboleth_ir::{pliron::context::Context, text::parse_module};
use aboleth_passes::{PipelineOptions, run_pipeline};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const TYPES: &[&str] = &[
    "builtin.integer i1",
    "builtin.integer i8",
    "builtin.integer i32",
    "builtin.integer i64",
    "builtin.integer i128",
    "builtin.integer si64",
    "ab.ptr",
    "ab.token",
    "ab.endpoint",
    "ab.remote <0>",
    "ab.remote <1>",
    "ab.remote <8>",
    "ab.remote_ptr <1>",
    "ab.remote_ptr <8>",
];

const I64: &str = "builtin.integer i64";
const OPERATORS: &[&str] = &[
    "Add", "Sub", "Mul", "Div", "Rem", "Min", "Max", "And", "Or", "Eq", "Ne", "Lt", "Le", "Gt",
    "Ge",
];

struct Generator {
    rng: ChaCha8Rng,
    /// Probability (per mille) that an operand or result type is shuffled.
    shuffle_per_mille: u32,
    /// Values in scope, innermost scope last: (name, type).
    scopes: Vec<Vec<(String, String)>>,
    text: String,
    next_name: usize,
}

impl Generator {
    fn fresh(&mut self) -> String {
        self.next_name += 1;
        format!("v{}", self.next_name)
    }

    fn shuffled(&mut self) -> bool {
        self.rng.random_range(0..1000) < self.shuffle_per_mille
    }

    fn define(&mut self, name: &str, ty: &str) {
        self.scopes
            .last_mut()
            .expect("a scope")
            .push((name.to_string(), ty.to_string()));
    }

    /// A value of type `ty` in scope (a shuffled one of any type), or a new constant.
    fn operand(&mut self, ty: &str, indent: usize) -> String {
        let all: Vec<(String, String)> = self.scopes.iter().flatten().cloned().collect();
        if self.shuffled() {
            return all[self.rng.random_range(0..all.len())].0.clone();
        }
        let matching: Vec<&(String, String)> = all.iter().filter(|(_, t)| t == ty).collect();
        if !matching.is_empty() && self.rng.random_range(0..4) != 0 {
            return matching[self.rng.random_range(0..matching.len())].0.clone();
        }
        if let Some(width) = ty.strip_prefix("builtin.integer i") {
            // Mostly small multiples of 8 (sizes and offsets that fit), sometimes the extremes
            // that overflow arithmetic on trip counts, offsets and sizes.
            let value: i128 = if self.rng.random_range(0..10) == 0 {
                let extremes = [-1, i128::from(i64::MIN), i128::from(i64::MAX), 1 << 31];
                extremes[self.rng.random_range(0..extremes.len())]
            } else {
                self.rng.random_range(0..16) * 8
            };
            let name = self.fresh();
            self.line(
                indent,
                &format!("{name} = builtin.constant <builtin.integer <{value}: i{width}>> : {ty};"),
            );
            self.define(&name, ty);
            return name;
        }
        matching
            .first()
            .map(|(name, _)| name.clone())
            .unwrap_or_else(|| all[0].0.clone())
    }

    fn result_type(&mut self, ty: &str) -> String {
        if self.shuffled() {
            TYPES[self.rng.random_range(0..TYPES.len())].to_string()
        } else {
            ty.to_string()
        }
    }

    fn line(&mut self, indent: usize, text: &str) {
        self.text.push_str(&" ".repeat(indent));
        self.text.push_str(text);
        self.text.push('\n');
    }

    fn with_result(&mut self, indent: usize, ty: &str, body: &str) {
        let name = self.fresh();
        let ty = self.result_type(ty);
        self.line(indent, &format!("{name} = {body} : {ty};"));
        self.define(&name, &ty);
    }

    fn statement(&mut self, indent: usize, depth: usize) {
        match self.rng.random_range(0..17) {
            0 => {
                let operator = OPERATORS[self.rng.random_range(0..OPERATORS.len())];
                let lhs = self.operand(I64, indent);
                let rhs = self.operand(I64, indent);
                self.with_result(indent, I64, &format!("ab.binop {operator} {lhs}, {rhs}"));
            }
            1 => {
                let value = self.operand("builtin.integer i32", indent);
                self.with_result(indent, I64, &format!("ab.cast {value}"));
            }
            2 => {
                let pointer = self.operand("ab.ptr", indent);
                let offset = self.operand(I64, indent);
                self.with_result(indent, "ab.ptr", &format!("ab.ptr_add {pointer}, {offset}"));
            }
            3 => {
                let pointer = self.operand("ab.ptr", indent);
                self.with_result(indent, I64, &format!("ab.load {pointer}"));
            }
            4 => {
                let pointer = self.operand("ab.ptr", indent);
                let value = self.operand(I64, indent);
                self.line(indent, &format!("ab.store {pointer}, {value};"));
            }
            5 => {
                let handles = self.operand("ab.ptr", indent);
                let peer = self.operand(I64, indent);
                self.with_result(
                    indent,
                    "ab.endpoint",
                    &format!("ab.endpoint {handles}, {peer} []"),
                );
            }
            6 => {
                let regions = self.operand("ab.ptr", indent);
                let peer = self.operand(I64, indent);
                let element = if self.rng.random_bool(0.5) { 1 } else { 8 };
                self.with_result(
                    indent,
                    &format!("ab.remote <{element}>"),
                    &format!(
                        "ab.remote {regions}, {peer} [length_bytes: builtin.integer <4096: i64>]"
                    ),
                );
            }
            7 => {
                let element = if self.rng.random_bool(0.5) { 1 } else { 8 };
                let remote = self.operand(&format!("ab.remote <{element}>"), indent);
                let index = self.operand(I64, indent);
                self.with_result(
                    indent,
                    &format!("ab.remote_ptr <{element}>"),
                    &format!("ab.at {remote}, {index}"),
                );
            }
            8 => {
                let endpoint = self.operand("ab.endpoint", indent);
                let destination = self.operand("ab.remote_ptr <1>", indent);
                let source = self.operand("ab.ptr", indent);
                let bytes = self.operand(I64, indent);
                let key = self.operand("builtin.integer i32", indent);
                let predicate = if self.rng.random_bool(0.2) {
                    format!(", {}", self.operand(I64, indent))
                } else {
                    String::new()
                };
                self.with_result(
                    indent,
                    "ab.token",
                    &format!(
                        "ab.put {endpoint}, {destination}, {source}, {bytes}, {key}{predicate} []"
                    ),
                );
            }
            9 => {
                let endpoint = self.operand("ab.endpoint", indent);
                let flag = self.operand("ab.remote_ptr <8>", indent);
                let value = self.operand(I64, indent);
                let after = if self.rng.random_bool(0.5) {
                    format!(", {}", self.operand("ab.token", indent))
                } else {
                    String::new()
                };
                let op = if self.rng.random_bool(0.5) {
                    "Set"
                } else {
                    "Add"
                };
                self.with_result(
                    indent,
                    "ab.token",
                    &format!(
                        "ab.signal {endpoint}, {flag}, {value}{after} [op: ab.signal_op {op}]"
                    ),
                );
            }
            10 => {
                let token = self.operand("ab.token", indent);
                self.line(indent, &format!("ab.wait {token} [];"));
            }
            11 => {
                let flag = self.operand("ab.ptr", indent);
                let value = self.operand(I64, indent);
                self.line(indent, &format!("ab.wait_signal {flag}, {value} [];"));
            }
            12 => {
                let endpoint = self.operand("ab.endpoint", indent);
                let op = if self.rng.random_bool(0.5) {
                    "drain"
                } else {
                    "fence"
                };
                self.line(indent, &format!("ab.{op} {endpoint} [];"));
            }
            13 => {
                let (op, ty) = match self.rng.random_range(0..3) {
                    0 => ("ab.program_id", "builtin.integer i32"),
                    1 => ("ab.rank", I64),
                    _ => ("ab.world_size", I64),
                };
                self.with_result(indent, ty, op);
            }
            14 | 15 if depth < 3 => {
                let is_loop = self.rng.random_bool(0.5);
                let label = self.fresh();
                if is_loop {
                    let lower = self.operand(I64, indent);
                    let upper = self.operand(I64, indent);
                    let step = self.operand(I64, indent);
                    let induction = self.fresh();
                    let induction_type = self.result_type(I64);
                    self.line(indent, &format!("ab.for {lower}, {upper}, {step} [] {{"));
                    self.line(
                        indent + 2,
                        &format!("^b{label}({induction}: {induction_type}):"),
                    );
                    self.scopes.push(vec![(induction, induction_type)]);
                } else {
                    let condition = self.operand(I64, indent);
                    self.line(indent, &format!("ab.if {condition} {{"));
                    self.line(indent + 2, &format!("^b{label}():"));
                    self.scopes.push(Vec::new());
                }
                for _ in 0..self.rng.random_range(0..6) {
                    self.statement(indent + 4, depth + 1);
                }
                self.line(indent + 4, "ab.yield");
                self.line(indent, "};");
                self.scopes.pop();
            }
            _ => {
                // A put and its signal on well-known values: what most kernels do.
                let token = self.fresh();
                self.line(
                    indent,
                    &format!(
                        "{token} = ab.put endpoint, dst_at, send, size, send_key [] : ab.token;"
                    ),
                );
                self.define(&token, "ab.token");
                let signal = self.fresh();
                self.line(
                    indent,
                    &format!(
                        "{signal} = ab.signal endpoint, flag_at, epoch, {token} [op: ab.signal_op Set] : ab.token;"
                    ),
                );
                self.define(&signal, "ab.token");
            }
        }
    }
}

const PRELUDE: &str = "
      zero = builtin.constant <builtin.integer <0: i64>> : builtin.integer i64;
      one = builtin.constant <builtin.integer <1: i64>> : builtin.integer i64;
      size = builtin.constant <builtin.integer <64: i64>> : builtin.integer i64;
      peer = builtin.constant <builtin.integer <1: i64>> : builtin.integer i64;
      endpoint = ab.endpoint endpoints, peer [] : ab.endpoint;
      dst = ab.remote recv, peer [length_bytes: builtin.integer <4096: i64>] : ab.remote <1>;
      flag = ab.remote flags, peer [length_bytes: builtin.integer <64: i64>] : ab.remote <8>;
      dst_at = ab.at dst, zero : ab.remote_ptr <1>;
      flag_at = ab.at flag, zero : ab.remote_ptr <8>;
";

fn program(rng: &mut ChaCha8Rng, shuffle_per_mille: u32) -> String {
    let mut generator = Generator {
        rng: ChaCha8Rng::seed_from_u64(rng.random()),
        shuffle_per_mille,
        scopes: vec![
            [
                ("endpoints", "ab.ptr"),
                ("recv", "ab.ptr"),
                ("flags", "ab.ptr"),
                ("send", "ab.ptr"),
                ("send_key", "builtin.integer i32"),
                ("my_flags", "ab.ptr"),
                ("epoch", I64),
                ("zero", I64),
                ("one", I64),
                ("size", I64),
                ("peer", I64),
                ("endpoint", "ab.endpoint"),
                ("dst", "ab.remote <1>"),
                ("flag", "ab.remote <8>"),
                ("dst_at", "ab.remote_ptr <1>"),
                ("flag_at", "ab.remote_ptr <8>"),
            ]
            .iter()
            .map(|(name, ty)| (name.to_string(), ty.to_string()))
            .collect(),
        ],
        text: String::new(),
        next_name: 0,
    };
    for _ in 0..generator.rng.random_range(1..14) {
        generator.statement(6, 0);
    }
    format!(
        "builtin.module @fuzz {{\n  ^entry():\n  builtin.func @kernel: builtin.function <(ab.ptr, \
         ab.ptr, ab.ptr, ab.ptr, builtin.integer i32, ab.ptr, builtin.integer i64) -> ()> \
         [grid: builtin.string \"1\"] {{\n    ^entry_kernel(endpoints: ab.ptr, recv: ab.ptr, \
         flags: ab.ptr, send: ab.ptr, send_key: builtin.integer i32, my_flags: ab.ptr, epoch: \
         builtin.integer i64):{PRELUDE}{}      ab.return\n  }}\n}}\n",
        generator.text
    )
}

/// Parses and compiles `text` in the `configuration`th way; returns whether it parsed and
/// whether it compiled, or the broken property.
fn check(text: &str, configuration: usize) -> Result<(bool, usize), String> {
    let bad_diagnostic = |stage: &str, diagnostic: &aboleth_ir::Diagnostic| {
        if diagnostic.line == 0
            || diagnostic.message.contains("internal error")
            || diagnostic.message.contains("compiler bug")
        {
            Some(format!("{stage}: {diagnostic}"))
        } else {
            None
        }
    };
    let parsed = {
        let ctx = &mut Context::new();
        parse_module(ctx, text, "fuzz.abo").map(|_| ())
    };
    if let Err(diagnostic) = parsed {
        return match bad_diagnostic("parse", &diagnostic) {
            Some(problem) => Err(problem),
            None => Ok((false, 0)),
        };
    }
    let mut compiled = 0;
    let mut configurations = Vec::new();
    for target in [Transport::Mlx5, Transport::Proxy, Transport::P2p] {
        for passes_off in [false, true] {
            // The declarations only where they can take effect (`PipelineOptions::validate`
            // refuses the others): write-with-immediate on mlx5, packets on p2p.
            let declaration = match target {
                Transport::Mlx5 => (true, false),
                Transport::P2p => (false, true),
                _ => (false, false),
            };
            for flags in [(false, false), declaration] {
                configurations.push((target, passes_off, flags));
            }
        }
    }
    // One configuration per program keeps the programs many; the rotation covers them all.
    let chosen = configurations[configuration % configurations.len()];
    {
        let (target, passes_off, (immediate_signals, packet_signals)) = chosen;
        {
            {
                let ctx = &mut Context::new();
                let module = parse_module(ctx, text, "fuzz.abo").map_err(|d| d.to_string())?;
                let mut options = PipelineOptions::new(target);
                options.passes_off = passes_off;
                options.immediate_signals = immediate_signals;
                options.packet_signals = packet_signals;
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run_pipeline(ctx, module, &options)
                }));
                let stage = format!(
                    "{} passes_off={passes_off} immediate={immediate_signals} packets={packet_signals}",
                    target.name()
                );
                match outcome {
                    Err(panic) => {
                        let detail = panic
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default();
                        return Err(format!("{stage}: panicked: {detail}"));
                    }
                    Ok(Err(diagnostic)) => {
                        if let Some(problem) = bad_diagnostic(&stage, &diagnostic) {
                            return Err(problem);
                        }
                    }
                    Ok(Ok(_)) => compiled += 1,
                }
            }
        }
    }
    Ok((true, compiled))
}

/// Held while a test has replaced the process's panic hook.
static PANIC_HOOK_TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn type_shuffled_programs_never_panic_and_every_error_is_located() {
    let seconds: u64 = std::env::var("ABOLETH_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut rng = ChaCha8Rng::seed_from_u64(0x7e5_5a5e);
    let (mut cases, mut parsed, mut compiled_any) = (0u64, 0u64, 0u64);
    let (mut clean_cases, mut clean_compiled) = (0u64, 0u64);
    // The panic hook is global: the two tests take turns, so neither silences the other's
    // failure message.
    let _turn = PANIC_HOOK_TURN
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut failure = None;
    while Instant::now() < deadline || cases < 20 {
        // Every fourth program is left well typed: those must mostly compile. The others are
        // shuffled lightly (most of them then hold one or two wrong types, which is what
        // reaches the passes past a lenient verifier) or heavily.
        let clean = cases % 4 == 0;
        let shuffle_per_mille = match cases % 4 {
            0 => 0,
            1 => 15,
            2 => 40,
            _ => 120,
        };
        let text = program(&mut rng, shuffle_per_mille);
        cases += 1;
        match check(&text, rng.random_range(0..usize::MAX)) {
            Ok((was_parsed, compiled)) => {
                parsed += u64::from(was_parsed);
                compiled_any += u64::from(compiled > 0);
                if clean {
                    clean_cases += 1;
                    clean_compiled += u64::from(compiled > 0);
                }
            }
            Err(problem) => {
                failure = Some(format!("{problem}\nprogram:\n{text}"));
                break;
            }
        }
    }
    std::panic::set_hook(hook);
    if let Some(failure) = failure {
        panic!("{failure}");
    }
    eprintln!(
        "generated {cases} programs: {parsed} verified, {compiled_any} compiled for some target; \
         {clean_compiled} of {clean_cases} well-typed ones compiled (each for one random \
         target and options)"
    );
    assert!(
        clean_compiled * 2 >= clean_cases,
        "fewer than half of the well-typed programs compiled: the generator no longer reaches the passes"
    );
}

/// Loops from i64::MIN to i64::MAX (a trip count past i64) and nested loops whose trip counts
/// multiply past it used to overflow in `constant_trip_count`, `size-buffers`, the lowerings and
/// the statistics.
#[test]
fn loops_with_extreme_constant_bounds_compile_or_are_refused_with_a_location() {
    let put_in = |loops: &str, closing: &str| {
        format!(
            "builtin.module @m {{\n  ^entry():\n  builtin.func @kernel: builtin.function <(ab.ptr, \
             ab.ptr, ab.ptr, ab.ptr, builtin.integer i32, ab.ptr, builtin.integer i64) -> ()> \
             [grid: builtin.string \"1\"] {{\n    ^entry_kernel(endpoints: ab.ptr, recv: ab.ptr, \
             flags: ab.ptr, send: ab.ptr, send_key: builtin.integer i32, my_flags: ab.ptr, epoch: \
             builtin.integer i64):{PRELUDE}\
      low = builtin.constant <builtin.integer <-9223372036854775808: i64>> : builtin.integer i64;
      high = builtin.constant <builtin.integer <9223372036854775807: i64>> : builtin.integer i64;
{loops}\
      token = ab.put endpoint, dst_at, send, size, send_key [] : ab.token;
      sent = ab.signal endpoint, flag_at, epoch, token [op: ab.signal_op Set] : ab.token;
      ab.yield
{closing}      ab.return\n  }}\n}}\n"
        )
    };
    let whole_range = put_in(
        "      ab.for low, high, one [] {\n        ^body(i: builtin.integer i64):\n",
        "      };\n",
    );
    let nested = put_in(
        "      ab.for zero, high, one [] {\n        ^outer(i: builtin.integer i64):\n\
         ab.for zero, high, one [] {\n        ^inner(j: builtin.integer i64):\n",
        "      };\n      ab.yield\n      };\n",
    );
    // The panic hook is global: the two tests take turns, so neither silences the other's
    // failure message.
    let _turn = PANIC_HOOK_TURN
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let outcomes: Vec<Result<(bool, usize), String>> = [&whole_range, &nested]
        .iter()
        .flat_map(|text| (0..12).map(move |configuration| check(text, configuration)))
        .collect();
    std::panic::set_hook(hook);
    for outcome in outcomes {
        let (parsed, _) = outcome.unwrap_or_else(|problem| panic!("{problem}"));
        assert!(parsed, "the programs are valid");
    }
}
