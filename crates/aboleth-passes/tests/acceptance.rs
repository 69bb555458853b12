//! The compiler-core acceptance checks: every example compiles for every target, and the
//! 16-chain stream has one reservation, doorbell and doorbell-record update with the passes
//! on and sixteen with `--passes-off`.

use aboleth_abi::Transport;
use std::path::PathBuf;

use aboleth_ir::{pliron::context::Context, text::parse_module, walk::kernels};
use aboleth_passes::{
    PipelineOptions, run_pipeline,
    stats::{Counts, count_kernel},
};

fn example(name: &str) -> (String, String) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/ir")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (text, path.display().to_string())
}

fn counts(name: &str, target: Transport, passes_off: bool) -> Counts {
    let (text, file) = example(name);
    let ctx = &mut Context::new();
    let module = parse_module(ctx, &text, &file).unwrap_or_else(|d| panic!("{d}"));
    let mut options = PipelineOptions::new(target);
    options.passes_off = passes_off;
    run_pipeline(ctx, module, &options).unwrap_or_else(|d| panic!("{d}"));
    let mut total = Counts::default();
    for kernel in kernels(ctx, module) {
        total.add(&count_kernel(ctx, kernel).0);
    }
    total
}

#[test]
fn every_example_compiles_for_mlx5_proxy_and_p2p_with_and_without_passes() {
    let names = [
        "alltoall.abo",
        "stream_put_signal_1.abo",
        "stream_put_signal_4.abo",
        "stream_put_signal_16.abo",
        "moe_dispatch.abo",
        "moe_dispatch_compacted.abo",
        "dead_put.abo",
    ];
    for name in names {
        for target in [Transport::Mlx5, Transport::Proxy, Transport::P2p] {
            for passes_off in [false, true] {
                let c = counts(name, target, passes_off);
                assert!(c.payload_bytes > 0, "{name} on {target:?} moves no data");
            }
        }
    }
}

#[test]
fn sixteen_chains_on_mlx5_post_with_one_reservation_doorbell_and_record_update() {
    let on = counts("stream_put_signal_16.abo", Transport::Mlx5, false);
    assert_eq!(
        (on.reservations, on.doorbells, on.doorbell_record_updates),
        (1, 1, 1)
    );
    assert_eq!(on.atomics, 0, "one owner: no reservation atomic");
    assert_eq!(on.wqes, 32);
    let off = counts("stream_put_signal_16.abo", Transport::Mlx5, true);
    assert_eq!(
        (off.reservations, off.doorbells, off.doorbell_record_updates),
        (16, 16, 16)
    );
    assert!(
        off.atomics >= 16,
        "library style reserves with an atomic per call"
    );
}

#[test]
fn dead_puts_are_removed_only_with_the_pass() {
    let on = counts("dead_put.abo", Transport::Mlx5, false);
    let off = counts("dead_put.abo", Transport::Mlx5, true);
    assert_eq!(on.payload_bytes, 64);
    assert!(off.payload_bytes > on.payload_bytes);
}
