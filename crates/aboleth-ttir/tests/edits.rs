//! The edit API: replacing an operation by new lines, inserting lines before and after one, and
//! erasing one with its regions. Every line outside the edits prints byte for byte as parsed.

mod common;

use aboleth_ttir::{
    ExternElementwiseCall, GenericOperation, OperationId, TtirModule, TypedValue, ValueNamer,
};
use common::parse_corpus_file;

/// The text's lines, each with its newline.
fn lines_of(text: &str) -> Vec<String> {
    text.split_inclusive('\n').map(str::to_string).collect()
}

/// The 0-based line index where operation `id` starts.
fn line_index_of(module: &TtirModule, id: OperationId) -> usize {
    module.text_position(id).line as usize - 1
}

#[test]
fn replace_and_insert_leave_every_other_line_byte_identical() {
    let (text, mut module) = parse_corpus_file("alltoall.after-passes.ttir");
    let calls: Vec<OperationId> = module.extern_calls_in_library("aboleth").collect();
    // The kernel ends with a signal, a wait on a local flag and a wait on the signal's token.
    let [signal, wait_signal, wait] = calls[calls.len() - 3..] else {
        panic!("expected at least three aboleth calls");
    };
    let mut namer = ValueNamer::new(&module);
    let fence_name = namer.fresh("aboleth_fence");
    assert_eq!(fence_name, "%aboleth_fence");

    let wait_operation = module.operation(wait);
    let replacement = ExternElementwiseCall {
        result_name: wait_operation.result_names()[0].clone(),
        operands: vec![TypedValue {
            name: "%sent_7".to_string(),
            type_text: "i64".to_string(),
        }],
        result_type: "i32".to_string(),
        libname: "aboleth".to_string(),
        libpath: String::new(),
        symbol: "__aboleth_v1__wait__planned".to_string(),
        pure: false,
        location_text: wait_operation.location_text().map(str::to_string),
    }
    .to_text();
    let fence = GenericOperation {
        result_names: vec![fence_name.clone()],
        name: "tt.elementwise_inline_asm".to_string(),
        operands: Vec::new(),
        properties: vec![
            (
                "asm_string".to_string(),
                "\"fence.acq_rel.sys;\"".to_string(),
            ),
            ("constraints".to_string(), "\"=r\"".to_string()),
            ("packed_element".to_string(), "1 : i32".to_string()),
            ("pure".to_string(), "false".to_string()),
        ],
        attributes: Vec::new(),
        result_types: vec!["i32".to_string()],
        location_text: module
            .operation(wait_signal)
            .location_text()
            .map(str::to_string),
    }
    .to_text();
    module.replace_operation(wait, vec![replacement.clone()]);
    module.insert_lines_before(wait_signal, vec![fence.clone()]);
    module.insert_lines_after(signal, vec!["// planned: one doorbell".to_string()]);
    module.insert_lines_after(signal, vec![String::new()]);
    assert!(module.is_edited());

    let mut expected = lines_of(&text);
    let indentation = module.operation(wait).indentation().to_string();
    expected[line_index_of(&module, wait)] = format!("{indentation}{replacement}\n");
    expected.insert(
        line_index_of(&module, wait_signal),
        format!("{indentation}{fence}\n"),
    );
    let after_signal = line_index_of(&module, signal) + 1;
    expected.insert(after_signal, "\n".to_string());
    expected.insert(
        after_signal,
        format!("{indentation}// planned: one doorbell\n"),
    );
    let printed = module.print();
    assert_eq!(printed, expected.concat());

    // The edited text parses again and shows the edits.
    let reparsed = TtirModule::parse(&printed, "edited.ttir").unwrap();
    let symbols: Vec<String> = reparsed
        .extern_calls_in_library("aboleth")
        .map(|id| reparsed.operation(id).extern_elementwise().unwrap().symbol)
        .collect();
    assert_eq!(symbols.last().unwrap(), "__aboleth_v1__wait__planned");
    let asm = reparsed
        .operations_named("tt.elementwise_inline_asm")
        .next()
        .unwrap();
    let asm_operation = reparsed.operation(asm);
    assert!(asm_operation.is_generic_form());
    assert_eq!(asm_operation.result_names(), [fence_name]);
    assert_eq!(asm_operation.result_types().unwrap(), ["i32"]);
    assert_eq!(
        asm_operation
            .attribute("constraints")
            .unwrap()
            .string_value()
            .as_deref(),
        Some("=r")
    );
}

#[test]
fn erasing_a_loop_removes_exactly_its_lines() {
    let (text, mut module) = parse_corpus_file("aboleth_extern_calls.after-passes.ttir");
    let for_loop = module.operations_named("scf.for").next().unwrap();
    // The first operation after the loop (the first one not inside it).
    let next = module
        .operations()
        .skip_while(|&id| id != for_loop)
        .skip(1)
        .find(|&id| module.operation(id).parent() != Some(for_loop))
        .unwrap();
    let (first_line, next_line) = (
        line_index_of(&module, for_loop),
        line_index_of(&module, next),
    );
    module.erase_operation(for_loop);
    let mut expected = lines_of(&text);
    expected.drain(first_line..next_line);
    assert_eq!(module.print(), expected.concat());
}

#[test]
fn edits_to_an_operation_inside_a_region_and_at_the_end_of_the_file() {
    // No newline at the end: lines inserted after the last operation still start a new line.
    let text =
        "module {\n  scf.if %c {\n    tt.return loc(unknown)\n  } loc(unknown)\n} loc(unknown)";
    let mut module = TtirModule::parse(text, "t.ttir").unwrap();
    let return_id = module.operations_named("tt.return").next().unwrap();
    let module_id = module.top_level_operations().next().unwrap();
    module.replace_operation(
        return_id,
        vec!["tt.return loc(#new)".to_string(), "// x".to_string()],
    );
    module.insert_lines_before(return_id, vec!["// before".to_string()]);
    module.insert_lines_after(module_id, vec!["#new = loc(unknown)".to_string()]);
    assert_eq!(
        module.print(),
        "module {\n  scf.if %c {\n    // before\n    tt.return loc(#new)\n    // x\n  } \
         loc(unknown)\n} loc(unknown)\n#new = loc(unknown)\n"
    );
}

#[test]
fn replacing_a_loop_header_changes_only_its_first_line() {
    let (text, mut module) = parse_corpus_file("aboleth_extern_calls.after-passes.ttir");
    let for_loop = module.operations_named("scf.for").next().unwrap();
    let header = module.operation(for_loop).scf_for().unwrap();
    let line = line_index_of(&module, for_loop);
    let new_header = format!(
        "scf.for {} = %new_lower to {} step %new_step  : {} {{",
        header.induction_variable,
        header.upper_bound,
        header.induction_type.clone().unwrap()
    );
    module.replace_header(for_loop, new_header.clone());
    let mut expected = lines_of(&text);
    let indentation: String = expected[line].chars().take_while(|c| *c == ' ').collect();
    expected[line] = format!("{indentation}{new_header}\n");
    let printed = module.print();
    assert_eq!(printed, expected.concat());
    // The result parses, and the loop now reads its bounds from the new names.
    let reparsed = TtirModule::parse(&printed, "edited.ttir").unwrap();
    let edited = reparsed.operations_named("scf.for").next().unwrap();
    let edited_header = reparsed.operation(edited).scf_for().unwrap();
    assert_eq!(edited_header.lower_bound, "%new_lower");
    assert_eq!(edited_header.step, "%new_step");
    assert_eq!(edited_header.upper_bound, header.upper_bound);
}

#[test]
fn generic_operation_text_sorts_dictionaries_and_quotes_names() {
    let operation = GenericOperation {
        result_names: vec!["%a".to_string(), "%b".to_string()],
        name: "test.op".to_string(),
        operands: vec![
            TypedValue {
                name: "%x".to_string(),
                type_text: "i64".to_string(),
            },
            TypedValue {
                name: "%y#1".to_string(),
                type_text: "!tt.ptr<i8>".to_string(),
            },
        ],
        properties: vec![("z".to_string(), "1 : i32".to_string())],
        attributes: vec![
            ("ttg.num-warps".to_string(), "4 : i32".to_string()),
            ("b".to_string(), "unit".to_string()),
        ],
        result_types: vec!["i32".to_string(), "i1".to_string()],
        location_text: Some("loc(unknown)".to_string()),
    };
    assert_eq!(
        operation.to_text(),
        "%a, %b = \"test.op\"(%x, %y#1) <{z = 1 : i32}> {b = unit, \"ttg.num-warps\" = 4 : i32} : \
         (i64, !tt.ptr<i8>) -> (i32, i1) loc(unknown)"
    );
    let zero = GenericOperation {
        name: "gpu.barrier".to_string(),
        ..GenericOperation::default()
    };
    assert_eq!(zero.to_text(), "\"gpu.barrier\"() : () -> ()");
}

#[test]
fn fresh_value_names_avoid_every_name_in_the_module() {
    let (_, module) = parse_corpus_file("alltoall.after-passes.ttir");
    let mut namer = ValueNamer::new(&module);
    // `%t` and `%t_4` are taken (the put's destination and token).
    assert_eq!(namer.fresh("t"), "%t_1");
    assert_eq!(namer.fresh("t"), "%t_2");
    assert_eq!(namer.fresh("endpoints"), "%endpoints_1");
    assert_eq!(namer.fresh("fresh"), "%fresh");
}
