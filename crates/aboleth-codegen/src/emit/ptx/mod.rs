//! Inline PTX: the one place TTIR `tt.elementwise_inline_asm` statements are written
//! ([`Generator::asm`]), the election of thread 0 (`leader`, `leader_block`; inside a
//! `doorbell_scope` loop every thread is its own leader), the typed WQE builder in `wqe.rs`,
//! and the long statements kept as `.ptx` templates beside this file, loaded with
//! `include_str!` and filled by [`fill_ptx`] with offsets and constants from `aboleth-abi` (a
//! template names a layout field, never its number). It does not decide which statement to
//! run: the transport modules do.

use super::Generator;

mod wqe;
pub(super) use wqe::WqePtx;

impl Generator<'_> {
    /// One inline-PTX statement run by every thread of the program (`$0` is a dummy result).
    pub(super) fn asm(&mut self, ptx: &str, operands: &[(&str, &str, char)]) -> String {
        // Inside a `doorbell_scope` loop the only leader statements are the command writes of
        // the thread's own iteration: every thread is its own "leader" there.
        let spread_ptx;
        let ptx = if self.spread_depth > 0 {
            spread_ptx = ptx.replace(LEADER_PREDICATE, EVERY_THREAD_PREDICATE);
            spread_ptx.as_str()
        } else {
            ptx
        };
        let result = self.fresh("ab_asm");
        let mut constraints = vec!["=r".to_string()];
        constraints.extend(operands.iter().map(|(_, _, c)| c.to_string()));
        let names: Vec<&str> = operands.iter().map(|(n, _, _)| *n).collect();
        let types: Vec<&str> = operands.iter().map(|(_, t, _)| *t).collect();
        self.emit(format!(
            "{result} = tt.elementwise_inline_asm \"{ptx}\" {{constraints = \"{}\", packed_element = 1 : i32, pure = false}} {} : {} -> i32",
            constraints.join(","),
            names.join(", "),
            types.join(", ")
        ));
        result
    }

    /// Statements that are each predicated on `%ab_leader` (thread 0 of the program).
    pub(super) fn leader_block(statements: &str) -> String {
        format!(
            "{{ .reg .pred %ab_leader; .reg .u32 %ab_tid; mov.u32 %ab_tid, %tid.x; setp.eq.u32 %ab_leader, %ab_tid, 0; {statements} mov.u32 $0, 0; }}"
        )
    }

    /// Wraps `ptx` so that only thread 0 of the program executes it.
    pub(super) fn leader(ptx: &str) -> String {
        format!(
            "{{ .reg .pred %ab_leader; .reg .u32 %ab_tid; mov.u32 %ab_tid, %tid.x; setp.eq.u32 %ab_leader, %ab_tid, 0; @%ab_leader {ptx} mov.u32 $0, 0; }}"
        )
    }
}

/// How leader-only PTX elects thread 0 of the program.
const LEADER_PREDICATE: &str = "setp.eq.u32 %ab_leader, %ab_tid, 0;";
/// The same predicate, true in every thread.
const EVERY_THREAD_PREDICATE: &str = "setp.eq.u32 %ab_leader, %ab_tid, %ab_tid;";

/// `template` with every `@NAME@` replaced by its value from `values` (ABI offsets and
/// constants read from `aboleth-abi`, so inline PTX never hard-codes a layout).
pub(super) fn fill_ptx(template: &str, values: &[(&str, u64)]) -> String {
    // A `.ptx` file ends with a newline; the statement does not.
    let mut ptx = template.trim_end_matches('\n').to_owned();
    for (name, value) in values {
        let token = format!("@{name}@");
        assert!(ptx.contains(&token), "PTX template has no {token}");
        ptx = ptx.replace(&token, &value.to_string());
    }
    // Predicates are `@%name`: a token is `@` followed by a capital letter.
    let unfilled = ptx
        .split('@')
        .skip(1)
        .any(|rest| rest.starts_with(|c: char| c.is_ascii_uppercase()));
    assert!(!unfilled, "PTX template has an unfilled token: {ptx}");
    ptx
}
