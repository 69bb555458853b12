//! `scalar::value_range` and `scalar::trip_count_bound` on one kernel: each `ab.binop` result's
//! range in program order, and the bound of each loop's trip count.

use aboleth_ir::{
    pliron::context::Context,
    scalar::{ValueRange, trip_count_bound, value_range},
    text::{op_name, parse_module},
    walk::all_ops,
};

const KERNEL: &str = r#"
builtin.module @ranges {
  ^entry():
  builtin.func @ranges: builtin.function <(ab.ptr) -> ()> [grid: builtin.string "1"] {
    ^entry(counts: ab.ptr):
      zero = builtin.constant <builtin.integer <0: i64>> : builtin.integer i64;
      one = builtin.constant <builtin.integer <1: i64>> : builtin.integer i64;
      two = builtin.constant <builtin.integer <2: i64>> : builtin.integer i64;
      four = builtin.constant <builtin.integer <4: i64>> : builtin.integer i64;
      mask = builtin.constant <builtin.integer <255: i64>> : builtin.integer i64;
      limit = builtin.constant <builtin.integer <128: i64>> : builtin.integer i64;
      raw = ab.load counts : builtin.integer i64;
      remainder = ab.binop Rem raw, four : builtin.integer i64;
      clamped = ab.binop Max remainder, zero : builtin.integer i64;
      capped = ab.binop Min raw, limit : builtin.integer i64;
      masked = ab.binop And raw, mask : builtin.integer i64;
      halved = ab.binop Div masked, two : builtin.integer i64;
      sum = ab.binop Add clamped, halved : builtin.integer i64;
      product = ab.binop Mul sum, sum : builtin.integer i64;
      compared = ab.binop Lt raw, limit : builtin.integer i64;
      rank = ab.rank : builtin.integer i64;
      after_rank = ab.binop Add rank, one : builtin.integer i64;
      narrow = ab.load counts : builtin.integer i32;
      wide = ab.cast narrow : builtin.integer i64;
      wide_plus = ab.binop Add wide, one : builtin.integer i64;
      unbounded_sum = ab.binop Add raw, one : builtin.integer i64;
      ab.for zero, clamped, one [] {
        ^token(t: builtin.integer i64):
          twice = ab.binop Mul t, two : builtin.integer i64;
          ab.yield
      };
      ab.for zero, masked, two [] {
        ^half(h: builtin.integer i64):
          ab.yield
      };
      ab.for zero, raw, one [] {
        ^any(a: builtin.integer i64):
          ab.yield
      };
      ab.return
  }
}
"#;

fn range(low: i64, high: i64) -> ValueRange {
    ValueRange { low, high }
}

#[test]
fn binop_ranges_and_loop_trip_count_bounds() {
    let ctx = &mut Context::new();
    let module = parse_module(ctx, KERNEL, "ranges.abo").unwrap_or_else(|d| panic!("{d}"));
    let ops = all_ops(ctx, module);
    let ranges: Vec<ValueRange> = ops
        .iter()
        .filter(|op| op_name(ctx, **op) == "ab.binop")
        .map(|op| value_range(ctx, op.deref(ctx).get_result(0)))
        .collect();
    let full = ValueRange::of_width(64);
    let i32_max = i64::from(i32::MAX);
    assert_eq!(
        ranges,
        vec![
            range(-3, 3),                                // raw % 4: the dividend's sign
            range(0, 3),                                 // max(.., 0)
            range(i64::MIN, 128),                        // min(raw, 128): nothing below
            range(0, 255),                               // raw & 255
            range(0, 127),                               // / 2
            range(0, 130),                               // clamped + halved
            range(0, 16900),                             // sum * sum
            range(0, 1),                                 // a comparison
            full, // rank + 1: rank >= 0, but i64::MAX + 1 wraps
            range(i64::from(i32::MIN) + 1, i32_max + 1), // an i32 widened, + 1
            full, // raw + 1 may wrap
            range(0, 4), // t * 2 with t in [0, 2]
        ]
    );
    let trips: Vec<Option<i64>> = ops
        .iter()
        .filter(|op| op_name(ctx, **op) == "ab.for")
        .map(|op| trip_count_bound(ctx, *op))
        .collect();
    // 0..max(raw % 4, 0): 3; 0..(raw & 255) step 2: 128; 0..raw: up to i64::MAX.
    assert_eq!(trips, vec![Some(3), Some(128), Some(i64::MAX)]);
}
