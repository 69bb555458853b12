//! Structure queries on the real corpus: what the lifting step will ask (operation names,
//! results and their types, operands, regions, iter_args, extern calls and their attributes,
//! value definitions, locations resolved to the Python source).

mod common;

use aboleth_ttir::{
    ExternElementwiseCall, OperationId, TtirModule, TypedValue, ValueDefinition,
    decode_string_literal,
};
use common::parse_corpus_file;

/// Line `line` (1-based) of the corpus generation script, where the corpus kernels are written.
fn dump_script_line(line: u32) -> String {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../python/tools/dump_ttir_corpus.py");
    let text = std::fs::read_to_string(script).expect("the corpus script is in the repository");
    text.lines()
        .nth(line as usize - 1)
        .unwrap_or_default()
        .to_string()
}

/// The one operation of `ids`.
fn only(mut ids: impl Iterator<Item = OperationId>) -> OperationId {
    let first = ids.next().expect("one operation");
    assert!(ids.next().is_none(), "more than one operation");
    first
}

/// The first operation whose result list defines `name`.
fn defined_by(module: &TtirModule, name: &str) -> OperationId {
    module
        .operations()
        .find(|&id| {
            module
                .operation(id)
                .result_groups()
                .iter()
                .any(|group| group.name == name)
        })
        .unwrap_or_else(|| panic!("nothing defines {name}"))
}

/// The operation defining `value` where `user` uses it.
fn definition_operation(module: &TtirModule, user: OperationId, value: &str) -> OperationId {
    match module.find_definition(user, value) {
        Some(ValueDefinition::Result { operation, .. }) => operation,
        other => panic!("{value} is not an operation result: {other:?}"),
    }
}

#[test]
fn matmul_has_one_dot_inside_the_k_loop_in_both_forms() {
    for file in ["matmul.ttir", "matmul.after-passes.ttir"] {
        let (_, module) = parse_corpus_file(file);
        let dot = only(module.operations_named("tt.dot"));
        let operation = module.operation(dot);
        assert_eq!(operation.operands().len(), 3, "{file}");
        assert_eq!(
            operation.result_types().unwrap(),
            ["tensor<128x128xf32>"],
            "{file}"
        );
        let parent = operation.parent().unwrap();
        assert_eq!(module.operation(parent).name(), "scf.for", "{file}");
    }
}

#[test]
fn matmul_function_arguments_keep_types_and_divisibility() {
    let (_, module) = parse_corpus_file("matmul.after-passes.ttir");
    let function = module.operation(only(module.functions()));
    assert_eq!(function.symbol(), Some("matmul"));
    let arguments = function.header_definitions();
    assert_eq!(arguments.len(), 9);
    assert_eq!(arguments[0].name, "%a_pointer");
    assert_eq!(arguments[0].type_text.as_deref(), Some("!tt.ptr<f16>"));
    assert_eq!(
        arguments[0].attributes_text.as_deref(),
        Some("{tt.divisibility = 16 : i32}")
    );
    assert_eq!(arguments[6].name, "%stride_am");
    assert_eq!(arguments[6].attributes_text, None);
    assert_eq!(
        function.attribute("noinline").unwrap().bool_value(),
        Some(false)
    );
}

#[test]
fn for_loop_has_three_iter_args_with_types_and_a_trailing_attribute() {
    let (_, module) = parse_corpus_file("for_loop_carry.after-passes.ttir");
    let for_id = only(module.operations_named("scf.for"));
    let operation = module.operation(for_id);
    let for_loop = operation.scf_for().unwrap();
    assert_eq!(for_loop.induction_variable, "%i");
    assert_eq!(
        [&for_loop.lower_bound, &for_loop.upper_bound, &for_loop.step],
        ["%c0_i32", "%n_iterations", "%c1_i32"]
    );
    assert_eq!(for_loop.induction_type.as_deref(), Some("i32"));
    let iter_args: Vec<(&str, &str, Option<&str>)> = for_loop
        .iter_args
        .iter()
        .map(|arg| {
            (
                arg.name.as_str(),
                arg.initial_value.as_str(),
                arg.type_text.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        iter_args,
        [
            ("%total_2", "%total", Some("tensor<256xf32>")),
            ("%running_max_3", "%running_max", Some("tensor<256xf32>")),
            ("%count_4", "%c0_i32", Some("i32")),
        ]
    );
    assert_eq!(
        operation.result_names(),
        ["%count#0", "%count#1", "%count#2"]
    );
    // `tl.range(..., num_stages=2)` prints as a dictionary after the loop's closing brace.
    assert_eq!(
        operation
            .attribute("tt.num_stages")
            .unwrap()
            .value_text
            .as_deref(),
        Some("2 : i32")
    );
    // Inside the body, names resolve to the body's operations and the loop's header.
    let yield_id = only(module.operations_named("scf.yield"));
    assert_eq!(
        module.find_definition(yield_id, "%count_11"),
        Some(ValueDefinition::Result {
            operation: defined_by(&module, "%count_11"),
            result_index: 0
        })
    );
    assert_eq!(
        module.find_definition(yield_id, "%total_2"),
        Some(ValueDefinition::HeaderDefinition {
            operation: for_id,
            index: 1
        })
    );
    // After the loop, `%count#2` is the loop's third result.
    let sitofp = only(module.operations_named("arith.sitofp"));
    assert_eq!(
        module.find_definition(sitofp, "%count#2"),
        Some(ValueDefinition::Result {
            operation: for_id,
            result_index: 2
        })
    );
    // Loop-body values are not visible after the loop.
    assert_eq!(module.find_definition(sitofp, "%count_11"), None);
}

#[test]
fn while_loops_have_condition_and_body_regions() {
    let (_, module) = parse_corpus_file("while_loop.after-passes.ttir");
    let loops: Vec<OperationId> = module.operations_named("scf.while").collect();
    assert_eq!(loops.len(), 2);
    let first = module.operation(loops[0]);
    assert_eq!(first.regions().len(), 2);
    assert_eq!(first.result_names(), ["%value_0#0", "%value_0#1"]);
    assert_eq!(first.result_types().unwrap(), ["i32", "i32"]);
    assert_eq!(first.operands(), ["%c0_i32", "%value"]);
    let header: Vec<&str> = first
        .header_definitions()
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(header, ["%i", "%value_1"]);
    let body = &first.regions()[1].blocks()[0];
    assert_eq!(body.label().unwrap().name, "^bb0");
    let arguments: Vec<(&str, &str)> = body
        .arguments()
        .iter()
        .map(|argument| {
            (
                argument.name.as_str(),
                argument.type_text.as_deref().unwrap(),
            )
        })
        .collect();
    assert_eq!(arguments, [("%i", "i32"), ("%value_1", "i32")]);
    // The spin-wait: an acquire atomic in the condition region of the second loop.
    let second = module.operation(loops[1]);
    let condition_operations: Vec<&str> = second.regions()[0].blocks()[0]
        .operations()
        .map(|id| module.operation(id).name())
        .collect();
    assert_eq!(
        condition_operations,
        ["tt.atomic_rmw", "arith.cmpi", "scf.condition"]
    );
}

#[test]
fn aboleth_extern_calls_are_found_with_their_attributes() {
    let (_, module) = parse_corpus_file("aboleth_extern_calls.after-passes.ttir");
    let calls: Vec<OperationId> = module.extern_calls_in_library("aboleth").collect();
    let symbols: Vec<String> = calls
        .iter()
        .map(|&id| module.operation(id).extern_elementwise().unwrap().symbol)
        .collect();
    assert_eq!(
        symbols,
        [
            "__aboleth_v1__endpoint",
            "__aboleth_v1__remote__e1",
            "__aboleth_v1__remote__e8",
            "__aboleth_v1__at__e1",
            "__aboleth_v1__put",
            "__aboleth_v1__at__e1",
            "__aboleth_v1__put",
            "__aboleth_v1__at__e1",
            "__aboleth_v1__put_if",
            "__aboleth_v1__at__e8",
            "__aboleth_v1__signal_after__add",
            "__aboleth_v1__at__e8",
            "__aboleth_v1__signal_after__set",
            "__aboleth_v1__wait_signal",
            "__aboleth_v1__wait",
            "__aboleth_v1__fence",
            "__aboleth_v1__drain",
        ]
    );
    for &id in &calls {
        let call = module.operation(id).extern_elementwise().unwrap();
        assert!(!call.pure);
        assert_eq!(call.libpath, "");
    }
    // The second put is inside the loop and carries the token out through the loop.
    let in_loop = module.operation(calls[6]);
    let for_id = in_loop.parent().unwrap();
    assert_eq!(module.operation(for_id).name(), "scf.for");
    assert_eq!(in_loop.result_types().unwrap(), ["i64"]);
    assert_eq!(
        in_loop.type_text(),
        Some("(i64, i64, !tt.ptr<i8>, i32, i32) -> i64")
    );
    let for_loop = module.operation(for_id).scf_for().unwrap();
    assert_eq!(for_loop.iter_args.len(), 1);
    assert_eq!(for_loop.iter_args[0].type_text.as_deref(), Some("i64"));
    // The signal after the loop waits for the loop's token.
    let signal_add = module.operation(calls[10]);
    assert_eq!(
        module.find_definition(calls[10], &signal_add.operands()[3]),
        Some(ValueDefinition::Result {
            operation: for_id,
            result_index: 0
        })
    );
    // The put before the loop reads the kernel's pointer argument directly.
    assert_eq!(
        module.operation(calls[4]).operands(),
        ["%ep", "%token", "%src_pointer", "%c256_i32", "%source_key"]
    );
    // The predicated put has a sixth, i1 operand.
    assert_eq!(
        module.operation(calls[8]).type_text(),
        Some("(i64, i64, !tt.ptr<i8>, i32, i32, i1) -> i64")
    );
    // One-operand calls: fence, and quiet (which emits drain).
    let quiet = module.operation(calls[16]);
    assert_eq!(quiet.operands(), ["%ep"]);
    assert_eq!(quiet.result_types().unwrap(), ["i32"]);
    // Other libraries are not aboleth's.
    assert_eq!(module.extern_calls_in_library("libdevice").count(), 0);
}

#[test]
fn a_zero_operand_extern_call_is_read() {
    // Triton prints a call without operands with two spaces before the attributes. No aboleth
    // builtin has zero operands, so the corpus no longer holds one: this is the line Triton 3.6
    // printed for one (the earlier mock corpus).
    let text = "module {\n  tt.func public @k() attributes {noinline = false} {\n    %0 = \
                tt.extern_elementwise  {libname = \"aboleth\", libpath = \"\", pure = false, \
                symbol = \"__aboleth_v1__quiet\"} : () -> i32 loc(unknown)\n    tt.return \
                loc(unknown)\n  } loc(unknown)\n} loc(unknown)\n";
    let module = TtirModule::parse(text, "zero.ttir").unwrap();
    assert_eq!(module.print(), text);
    let quiet = module.operation(only(module.extern_calls_in_library("aboleth")));
    assert!(quiet.operands().is_empty());
    assert_eq!(quiet.result_types().unwrap(), ["i32"]);
    assert_eq!(quiet.type_text(), Some("() -> i32"));
}

#[test]
fn alltoall_put_operands_trace_back_to_scalar_computation_and_arguments() {
    let (_, module) = parse_corpus_file("alltoall.after-passes.ttir");
    let calls: Vec<OperationId> = module.extern_calls_in_library("aboleth").collect();
    assert_eq!(calls.len(), 9);
    let put = calls[4];
    let operation = module.operation(put);
    assert_eq!(
        operation.extern_elementwise().unwrap().symbol,
        "__aboleth_v1__put"
    );
    assert_eq!(
        operation.operands(),
        ["%ep", "%t", "%src_3", "%c256_i32", "%send_key"]
    );
    // dst.at(RANK * BYTES): an at() call on the remote() result and a constant.
    let destination = definition_operation(&module, put, "%t");
    assert_eq!(
        module
            .operation(destination)
            .extern_elementwise()
            .unwrap()
            .symbol,
        "__aboleth_v1__at__e1"
    );
    let remote = definition_operation(&module, destination, "%dst");
    assert_eq!(
        module
            .operation(remote)
            .extern_elementwise()
            .unwrap()
            .symbol,
        "__aboleth_v1__remote__e1"
    );
    let constant = definition_operation(&module, destination, "%c256_i32");
    assert_eq!(module.operation(constant).name(), "arith.constant");
    assert_eq!(module.operation(constant).type_text(), Some("i32"));
    // src = send.to(pointer) + peer * BYTES: an addptr over an int_to_ptr of the argument.
    let source = definition_operation(&module, put, "%src_3");
    assert_eq!(module.operation(source).name(), "tt.addptr");
    let function = only(module.functions());
    assert_eq!(
        module.find_definition(put, "%send_key"),
        Some(ValueDefinition::HeaderDefinition {
            operation: function,
            index: 4
        })
    );
    // The put's location resolves to the kernel line that calls it, and is named after the
    // Python variable it is assigned to.
    let position = module.source_position(put).unwrap();
    assert_eq!(position.file, "python/tools/dump_ttir_corpus.py");
    assert!(
        dump_script_line(position.line)
            .contains("t = aboleth.put(ep, dst.at(RANK * BYTES), src, BYTES, source_key=send_key)")
    );
    let location = operation.location().unwrap();
    assert_eq!(
        module.location_aliases().name(location).as_deref(),
        Some("t")
    );
    assert!(operation.location_text().unwrap().starts_with("loc(#loc"));
}

#[test]
fn canonical_extern_call_text_matches_what_triton_printed() {
    for file in [
        "aboleth_extern_calls.ttir",
        "aboleth_extern_calls.after-passes.ttir",
        "alltoall.ttir",
        "alltoall.after-passes.ttir",
    ] {
        let (text, module) = parse_corpus_file(file);
        let lines: Vec<&str> = text.lines().collect();
        for id in module.extern_calls_in_library("aboleth") {
            let operation = module.operation(id);
            let call = operation.extern_elementwise().unwrap();
            let type_text = operation.type_text().unwrap();
            let operand_types_text = type_text
                .strip_prefix('(')
                .and_then(|rest| rest.split_once(") -> "))
                .unwrap()
                .0;
            let operand_types: Vec<&str> = if operand_types_text.is_empty() {
                Vec::new()
            } else {
                operand_types_text.split(", ").collect()
            };
            let rebuilt = ExternElementwiseCall {
                result_name: operation.result_names()[0].clone(),
                operands: operation
                    .operands()
                    .iter()
                    .zip(operand_types)
                    .map(|(name, type_text)| TypedValue {
                        name: name.clone(),
                        type_text: type_text.to_string(),
                    })
                    .collect(),
                result_type: operation.result_types().unwrap()[0].clone(),
                libname: call.libname,
                libpath: call.libpath,
                symbol: call.symbol,
                pure: call.pure,
                location_text: operation.location_text().map(str::to_string),
            };
            let line = lines[module.text_position(id).line as usize - 1];
            assert_eq!(
                format!("{}{}", operation.indentation(), rebuilt.to_text()),
                line,
                "{file}"
            );
        }
    }
}

#[test]
fn inlined_code_resolves_to_a_call_stack_ending_in_the_kernel() {
    let (_, module) = parse_corpus_file("row_argmax.after-passes.ttir");
    let reductions: Vec<OperationId> = module.operations_named("tt.reduce").collect();
    assert_eq!(reductions.len(), 2);
    let argmax = module.operation(reductions[0]);
    assert!(argmax.is_generic_form());
    assert_eq!(argmax.result_names(), ["%2#0", "%2#1"]);
    assert_eq!(
        argmax.result_types().unwrap(),
        ["tensor<4xf32>", "tensor<4xi32>"]
    );
    let axis = &argmax.attribute_dictionaries()[0];
    assert!(axis.is_properties);
    assert_eq!(axis.entries[0].name, "axis");
    let combiner = &argmax.regions()[0].blocks()[0];
    assert_eq!(combiner.arguments().len(), 4);
    let stack = module.source_call_stack(reductions[0]);
    assert!(stack.len() >= 2, "{stack:?}");
    assert!(stack[0].file.ends_with("triton/language/standard.py"));
    let kernel_frame = stack.last().unwrap();
    assert_eq!(kernel_frame.file, "python/tools/dump_ttir_corpus.py");
    assert!(dump_script_line(kernel_frame.line).contains("tl.argmax(x, axis=1)"));
}

#[test]
fn multiple_result_groups_strings_and_inline_asm_are_read() {
    let (_, module) = parse_corpus_file("strings_and_inline_asm.after-passes.ttir");
    let split = module.operation(only(module.operations_named("tt.split")));
    assert_eq!(split.result_names(), ["%outLHS", "%outRHS"]);
    assert_eq!(
        split.result_types().unwrap(),
        ["tensor<64xf32>", "tensor<64xf32>"]
    );
    // Braces, `//` and quotes inside strings do not confuse the line-and-bracket structure.
    let print = module.operation(only(module.operations_named("tt.print")));
    assert_eq!(print.operands(), ["%x_2"]);
    assert_eq!(print.attribute("hex").unwrap().bool_value(), Some(false));
    let assert_operation = module.operation(only(module.operations_named("tt.assert")));
    assert_eq!(assert_operation.operands(), ["%0"]);
    assert!(
        module
            .source()
            .contains(r#"tt.assert %0, "negative {x} // \22oops\22""#)
    );
    assert_eq!(
        decode_string_literal(r#""negative {x} // \22oops\22""#),
        r#"negative {x} // "oops""#
    );
    let inline_asm = module.operation(only(module.operations_named("tt.elementwise_inline_asm")));
    assert_eq!(inline_asm.operands(), ["%token_pointer", "%token"]);
    assert_eq!(inline_asm.result_types().unwrap(), ["i64"]);
    assert_eq!(
        inline_asm
            .attribute("constraints")
            .unwrap()
            .string_value()
            .as_deref(),
        Some("=l,l,r")
    );
    let cas = module.operation(only(module.operations_named("tt.atomic_cas")));
    assert_eq!(cas.result_types().unwrap(), ["i64"]);
    assert_eq!(module.operations_named("gpu.barrier").count(), 1);
}

#[test]
fn helper_functions_calls_and_unreachable_blocks_are_read() {
    let (_, module) = parse_corpus_file("helper_call.ttir");
    let symbols: Vec<&str> = module
        .functions()
        .map(|id| module.operation(id).symbol().unwrap())
        .collect();
    assert_eq!(
        symbols,
        [
            "helper_call",
            "ttir_corpus.inlined_helper__fp32S128S__",
            "ttir_corpus.scaled_copy_helper__Pfp32_Pfp32__(2,)cconstexpr_3_d_0_",
        ]
    );
    let calls: Vec<&str> = module
        .operations_named("tt.call")
        .map(|id| module.operation(id).symbol().unwrap())
        .collect();
    assert_eq!(calls, symbols[1..]);
    // An early `return` leaves `^bb1:  // no predecessors` behind.
    let helper = module.operation(module.functions().nth(1).unwrap());
    let blocks = helper.regions()[0].blocks();
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[1].label().unwrap().name, "^bb1");
    // After the inliner, only the noinline helper is still called.
    let (_, after) = parse_corpus_file("helper_call.after-passes.ttir");
    assert_eq!(after.functions().count(), 2);
    assert_eq!(after.operations_named("tt.call").count(), 1);
}

#[test]
fn if_branches_resolve_their_own_values() {
    let (_, module) = parse_corpus_file("if_else.after-passes.ttir");
    let branch = only(module.operations_named("scf.if").take(1));
    let operation = module.operation(branch);
    assert_eq!(operation.regions().len(), 2);
    assert_eq!(operation.result_types().unwrap(), ["tensor<128xf32>"]);
    // Both branches define `%y_1`; each yield sees its own.
    let yields: Vec<OperationId> = module.operations_named("scf.yield").collect();
    let then_value = definition_operation(&module, yields[0], "%y_1");
    let else_value = definition_operation(&module, yields[1], "%y_1");
    assert_eq!(module.operation(then_value).name(), "tt.load");
    assert_eq!(module.operation(else_value).name(), "tt.splat");
}

#[test]
fn block_pointer_types_are_expanded_from_their_short_form() {
    let (_, module) = parse_corpus_file("block_pointers.ttir");
    let make = module.operation(only(module.operations_named("tt.make_tensor_ptr")));
    assert_eq!(make.type_text(), Some("<tensor<32x64xf32>>"));
    assert_eq!(make.result_types().unwrap(), ["!tt.ptr<tensor<32x64xf32>>"]);
    let load = module.operation(only(module.operations_named("tt.load")));
    assert_eq!(load.result_types().unwrap(), ["tensor<32x64xf32>"]);
    // The ttir passes rewrite block pointers into tensors of pointers.
    let (_, after) = parse_corpus_file("block_pointers.after-passes.ttir");
    assert_eq!(after.operations_named("tt.make_tensor_ptr").count(), 0);
}

#[test]
fn every_result_type_in_the_corpus_is_known() {
    for (name, text) in common::corpus_files() {
        let module = TtirModule::parse(&text, &name).unwrap();
        for id in module.operations() {
            let operation = module.operation(id);
            let types = operation.result_types();
            assert!(
                types.is_some_and(|types| types.len() == operation.result_count()),
                "{name}:{}: no result types for {}",
                module.text_position(id),
                operation.name()
            );
        }
    }
}
