//! Tests of the random program generator: every generated program parses, passes the semantic
//! verifier, compiles for mlx5, proxy and p2p with and without the planning passes, prints to
//! a fixpoint, and is valid (race- and deadlock-free) by the rules the simulator relies on.
//!
//! Validity is checked by the crate's reference interpreter of the semantic `ab` IR
//! (`reference_interpreter::check_validity`), against the rules of the crate documentation.

use std::collections::{BTreeMap, BTreeSet};

use aboleth_abi::Transport;
use aboleth_ir::{
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
    },
    text::{parse_module, print_module},
    verify::verify_module,
};
use aboleth_passes::{PipelineOptions, run_pipeline};
use aboleth_program_generator::{
    GeneratedProgram, MAX_OPERATIONS, feature, generate_from_seed, program_strategy,
    reference_interpreter::check_validity, spec_from_seed,
};
use proptest::prelude::*;

// ------------------------------------------------------------------------------------------
// Compilation and printing.
// ------------------------------------------------------------------------------------------

/// Parses (the parser runs the semantic verifier too) and verifies again explicitly.
fn parse(ctx: &mut Context, program: &GeneratedProgram) -> Ptr<Operation> {
    let module = parse_module(ctx, &program.text, "generated.abo")
        .unwrap_or_else(|d| panic!("{d}\n{program:?}"));
    verify_module(ctx, module).unwrap_or_else(|d| panic!("{d}\n{program:?}"));
    module
}

/// Compiles for every target, with the default passes and with `passes_off`.
fn assert_compiles_everywhere(program: &GeneratedProgram) {
    for target in [Transport::Mlx5, Transport::Proxy, Transport::P2p] {
        for passes_off in [false, true] {
            let ctx = &mut Context::new();
            let module = parse(ctx, program);
            let mut options = PipelineOptions::new(target);
            options.passes_off = passes_off;
            run_pipeline(ctx, module, &options).unwrap_or_else(|d| {
                panic!("{target:?} passes_off={passes_off}: the compiler rejected a valid program: {d}\n{program:?}")
            });
        }
    }
}

/// print(parse(text)) parses and prints back to itself.
fn assert_print_is_a_fixpoint(program: &GeneratedProgram) {
    let ctx = &mut Context::new();
    let module = parse(ctx, program);
    let first = print_module(ctx, module);
    let ctx = &mut Context::new();
    let module = parse_module(ctx, &first, "printed.abo")
        .unwrap_or_else(|d| panic!("the printed module does not parse: {d}\n{first}"));
    let second = print_module(ctx, module);
    assert_eq!(first, second, "print -> parse -> print is not a fixpoint");
}

fn assert_everything(program: &GeneratedProgram) {
    assert_compiles_everywhere(program);
    assert_print_is_a_fixpoint(program);
    if let Err(problem) = check_validity(&program.text, program.ranks) {
        panic!("generated program is invalid: {problem}\n{program:?}");
    }
}

// ------------------------------------------------------------------------------------------
// The tests.
// ------------------------------------------------------------------------------------------

#[test]
fn three_hundred_seeds_parse_verify_compile_everywhere_print_to_a_fixpoint_and_are_valid() {
    for seed in 0..300 {
        let program = generate_from_seed(seed);
        assert_everything(&program);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn strategy_programs_parse_verify_compile_everywhere_print_to_a_fixpoint_and_are_valid(
        program in program_strategy()
    ) {
        assert_everything(&program);
    }
}

#[test]
fn the_first_two_hundred_seeds_cover_every_feature() {
    let required = [
        feature::PREDICATE,
        feature::LOADED_PREDICATE,
        feature::ADD_SIGNAL,
        feature::SET_SIGNAL,
        feature::SHARED_ADD_FLAG,
        feature::SIGNAL_AFTER,
        feature::SIGNAL_WITHOUT_AFTER,
        feature::CROSS_ENDPOINT_AFTER,
        feature::REUSE_AFTER_WAIT,
        feature::REUSE_AFTER_DRAIN,
        feature::REUSE_IN_LOOP,
        feature::WAIT_PUT_TOKEN,
        feature::WAIT_SIGNAL_TOKEN,
        feature::DRAIN,
        feature::FENCE,
        feature::LOOP,
        feature::NESTED_LOOP,
        feature::RUNTIME_TRIP_COUNT,
        feature::MULTIPLE_PROGRAMS,
        feature::INLINE_PUT,
        feature::LARGE_PUT,
        feature::FIXED_PEER,
        feature::PROGRAM_SELECTED_PEER,
        feature::ALL_TO_ALL,
        feature::PEER_LOOP,
        feature::GATED_SENDER,
        feature::GATED_WAITER,
        feature::WORD_REMOTE,
        feature::COUNTER_FLAG,
    ];
    let mut seen: BTreeMap<&str, u32> = BTreeMap::new();
    let mut ranks = BTreeSet::new();
    let mut programs = BTreeSet::new();
    for seed in 0..200 {
        let program = generate_from_seed(seed);
        ranks.insert(program.ranks);
        programs.insert(program.programs);
        for name in &program.features {
            *seen.entry(name).or_default() += 1;
        }
    }
    let missing: Vec<&str> = required
        .iter()
        .copied()
        .filter(|name| !seen.contains_key(name))
        .collect();
    assert!(
        missing.is_empty(),
        "features never generated: {missing:?}; seen: {seen:?}"
    );
    assert_eq!(ranks, BTreeSet::from([2, 3, 4]));
    assert_eq!(programs, BTreeSet::from([1, 2, 3]));
}

#[test]
fn a_seed_always_gives_the_same_program_and_seeds_differ() {
    let mut texts = BTreeSet::new();
    for seed in 0..50 {
        let program = generate_from_seed(seed);
        assert_eq!(program, generate_from_seed(seed));
        assert_eq!(spec_from_seed(seed), spec_from_seed(seed));
        texts.insert(program.text);
    }
    assert!(texts.len() >= 48, "seeds should give distinct programs");
}

#[test]
fn a_thousand_programs_generate_cheaply_and_stay_small() {
    let start = std::time::Instant::now();
    let mut total_operations = 0;
    for seed in 0..1000 {
        let program = generate_from_seed(seed);
        assert!(program.text.contains("builtin.func @generated"));
        assert!(program.text.starts_with("//"));
        assert!(!program.description.contains('\n'));
        let channels: usize = program
            .description
            .split("channels=")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|count| count.parse().ok())
            .expect("the description names the channel count");
        assert!(
            channels == 1 || program.operations <= MAX_OPERATIONS,
            "{}",
            program.description
        );
        total_operations += program.operations;
    }
    // No timing assertion (machines differ); the number is printed for whoever looks.
    println!(
        "1000 programs in {:?}, {} ops on average",
        start.elapsed(),
        total_operations / 1000
    );
}

#[test]
fn the_validity_checker_accepts_the_example_style_and_rejects_broken_programs() {
    let valid = example_program("", "ab.wait put [];\n      ab.store send, one;");
    check_validity(&valid, 2).expect("a put, a wait, then a store is valid");
    let racy_store = example_program("", "ab.store send, one;\n      ab.wait put [];");
    let problem = check_validity(&racy_store, 2).expect_err("store before the wait");
    assert!(problem.contains("may still be reading"), "{problem}");
    let double_write = example_program(
        "again = ab.put endpoint, at, send, c_8, key [] : ab.token;",
        "",
    );
    let problem = check_validity(&double_write, 2).expect_err("two puts to one destination");
    assert!(problem.contains("written twice"), "{problem}");
    let deadlock =
        example_program("", "").replace("wait_signal my_flags, one", "wait_signal my_flags, c_8");
    let problem = check_validity(&deadlock, 2).expect_err("waits for a value never reached");
    assert!(problem.contains("exactly"), "{problem}");
}

/// One put of 8 bytes and one signal to the next rank, then a wait for the signal from the
/// previous rank; `after_put` goes after the put, `at_end` before the return.
fn example_program(after_put: &str, at_end: &str) -> String {
    format!(
        r#"builtin.module @generated {{
  ^entry():
  builtin.func @generated: builtin.function <(ab.ptr, ab.ptr, ab.ptr, ab.ptr, builtin.integer i32, ab.ptr) -> ()>
    [grid: builtin.string "1",
     regions: builtin.string "send=8 recv=8 flags=8",
     bind: builtin.string "endpoints=endpoints recv=regions:recv flags=regions:flags send=local:send key=lkey:send my_flags=local:flags"]
  {{
    ^entry(endpoints: ab.ptr, recv: ab.ptr, flags: ab.ptr, send: ab.ptr, key: builtin.integer i32, my_flags: ab.ptr):
      c_0 = builtin.constant <builtin.integer <0: i64>> : builtin.integer i64;
      one = builtin.constant <builtin.integer <1: i64>> : builtin.integer i64;
      c_8 = builtin.constant <builtin.integer <8: i64>> : builtin.integer i64;
      rank = ab.rank : builtin.integer i64;
      ranks = ab.world_size : builtin.integer i64;
      next = ab.binop Add rank, one : builtin.integer i64;
      peer = ab.binop Rem next, ranks : builtin.integer i64;
      endpoint = ab.endpoint endpoints, peer [] : ab.endpoint;
      data = ab.remote recv, peer [length_bytes: builtin.integer <8: i64>] : ab.remote <1>;
      flag = ab.remote flags, peer [length_bytes: builtin.integer <8: i64>] : ab.remote <8>;
      at = ab.at data, c_0 : ab.remote_ptr <1>;
      put = ab.put endpoint, at, send, c_8, key [] : ab.token;
      {after_put}
      flag_at = ab.at flag, c_0 : ab.remote_ptr <8>;
      signal = ab.signal endpoint, flag_at, one, put [op: ab.signal_op Set] : ab.token;
      ab.wait_signal my_flags, one [];
      {at_end}
      ab.return
  }}
}}
"#
    )
}
