//! The stage on real TTIR from the corpus (dumped from Triton 3.6 with the real builtins).

use aboleth_abi::Transport;
use aboleth_codegen::{StageOptions, run_stage};
use aboleth_passes::pipeline::PipelineOptions;

fn corpus(name: &str) -> String {
    let path = format!(
        "{}/../aboleth-ttir/tests/corpus/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn options(target: Transport) -> StageOptions {
    StageOptions {
        pipeline: PipelineOptions::new(target),
        source_name: "kernel.ttir".into(),
        plan_only: false,
    }
}

#[test]
fn kernels_without_aboleth_calls_come_back_unchanged() {
    for name in [
        "matmul.after-passes.ttir",
        "softmax.after-passes.ttir",
        "while_loop.after-passes.ttir",
    ] {
        let text = corpus(name);
        let output = run_stage(&text, &options(Transport::P2p)).unwrap();
        assert_eq!(output.ttir, text, "{name}");
        assert!(!output.summary.changed);
    }
}

#[test]
fn the_seed_alltoall_compiles_for_p2p() {
    let text = corpus("alltoall.after-passes.ttir");
    let output = run_stage(&text, &options(Transport::P2p)).unwrap_or_else(|e| panic!("{e}"));
    println!("{}", output.ttir);
    println!("{}", output.summary.aboleth_ir);
    assert!(output.summary.changed);
    assert!(!output.ttir.contains("libname = \"aboleth\""));
    assert!(output.ttir.contains("st.release.sys.global.u64"));
    assert!(output.ttir.contains("ld.acquire.sys.global.u64"));
}

#[test]
fn the_seed_alltoall_compiles_for_proxy() {
    let text = corpus("alltoall.after-passes.ttir");
    let output = run_stage(&text, &options(Transport::Proxy)).unwrap_or_else(|e| panic!("{e}"));
    if let Ok(path) = std::env::var("ABOLETH_DUMP_TTIR") {
        std::fs::write(path, &output.ttir).unwrap();
    }
    assert!(!output.ttir.contains("libname = \"aboleth\""));
    // One owner: a plain reservation, one release store of the producer head, entries stored
    // by one elected thread, an acquire poll of the completion counter.
    assert!(
        output
            .ttir
            .contains("ld.volatile.global.u64 $0, [$1]; @%ab_leader add.u64")
    );
    assert_eq!(
        output
            .ttir
            .matches("st.release.sys.global.u64 [$1], $2;")
            .count(),
        1
    );
    assert!(output.ttir.contains("st.global.v2.u64 [$1+16]"));
    // No reservation atomic (the only atomic left is the failure record of a timed-out wait).
    assert!(!output.ttir.contains("atom.relaxed.sys.global.add.u64 $0"));
    assert!(!output.ttir.contains("atom.release"));
}

#[test]
fn waits_are_bounded_and_name_their_source_line() {
    let text = corpus("alltoall.after-passes.ttir");
    let output = run_stage(&text, &options(Transport::P2p)).unwrap_or_else(|e| panic!("{e}"));
    // The bound is read from the wait-failure log that the endpoint handle points to.
    assert!(output.ttir.contains("mov.u64 $0, %globaltimer;"));
    // A wait that gives up records itself, asks every other wait of the rank to give up
    // (abort_requested, log + 16) and exits; a long wait also reads that word.
    assert!(output.ttir.contains(
        "st.release.sys.global.u64 [%ab_rec+0], %ab_seq; st.relaxed.sys.global.u64 [$1+16], 1; exit;"
    ));
    assert!(output.ttir.contains("ld.relaxed.sys.global.u64 $0, [$1];"));
    assert_eq!(output.summary.waits.len(), 1);
    assert!(
        output.summary.waits[0].starts_with("python/tools/dump_ttir_corpus.py:"),
        "{:?}",
        output.summary.waits
    );
}

#[test]
fn the_seed_alltoall_compiles_for_mlx5() {
    let text = corpus("alltoall.after-passes.ttir");
    let output = run_stage(&text, &options(Transport::Mlx5)).unwrap_or_else(|e| panic!("{e}"));
    if let Ok(path) = std::env::var("ABOLETH_DUMP_TTIR") {
        std::fs::write(path, &output.ttir).unwrap();
    }
    assert!(!output.ttir.contains("libname = \"aboleth\""));
    // One owner: a plain reservation; WQE fields byte-swapped by thread 0; one doorbell record
    // release store and one MMIO doorbell for the put+signal batch; a CQ poll for the wait.
    assert!(output.ttir.contains("prmt.b32"));
    assert_eq!(output.ttir.matches("st.release.sys.global.b32").count(), 1);
    assert_eq!(
        output
            .ttir
            .matches("st.mmio.relaxed.sys.global.b64")
            .count(),
        1
    );
    assert!(
        output
            .ttir
            .contains("ld.acquire.sys.global.u32 %ab_w, [$1]")
    );
    // Before posting, the handle's CQ layout and doorbell owner are checked: a handle the code
    // does not support makes the program record WAIT_KIND_UNSUPPORTED_ENDPOINT and exit.
    let kind = aboleth_abi::wait_failure::WAIT_KIND_UNSUPPORTED_ENDPOINT;
    assert!(
        output
            .ttir
            .contains(&format!("arith.constant {kind} : i32")),
        "no unsupported-endpoint check"
    );
    let p2p = run_stage(&text, &options(Transport::P2p)).unwrap_or_else(|e| panic!("{e}"));
    assert!(!p2p.ttir.contains(&format!("arith.constant {kind} : i32")));
}

#[test]
fn a_library_style_predicated_put_compiles_for_every_transport() {
    // The corpus's put_if: make its token unused, so the library lowering puts it under an if.
    let text = corpus("aboleth_extern_calls.after-passes.ttir");
    let signal_after = text
        .lines()
        .find(|line| line.contains("__aboleth_v1__signal_after__set"))
        .expect("the corpus signals after the put_if")
        .to_string();
    let unused = text.replace(
        &signal_after,
        &signal_after
            .replace("signal_after__set", "signal__set")
            .replace(", %last_5 {", " {")
            .replace(", i64) -> i64", ") -> i64"),
    );
    for target in [Transport::Mlx5, Transport::Proxy, Transport::P2p] {
        let mut options = options(target);
        options.pipeline.passes_off = true;
        let output =
            run_stage(&unused, &options).unwrap_or_else(|e| panic!("{}: {e}", target.name()));
        if target != Transport::P2p {
            // Nothing is posted when the predicate is false: the whole call is under an if.
            assert!(
                output.ttir.contains("scf.if %ab_taken"),
                "{}",
                target.name()
            );
        }
    }
}

#[test]
fn queue_waits_are_bounded_too() {
    let text = corpus("alltoall.after-passes.ttir");
    for target in [Transport::Proxy, Transport::Mlx5] {
        let output = run_stage(&text, &options(target)).unwrap_or_else(|e| panic!("{e}"));
        // The flag wait, the reservation's wait for ring space and the completion wait each
        // give up past the bound and record what they waited for.
        let give_ups = output
            .ttir
            .matches("st.relaxed.sys.global.u64 [$1+16], 1; exit;")
            .count();
        assert!(give_ups >= 3, "{}: {give_ups}", target.name());
        for kind in [
            aboleth_abi::wait_failure::WAIT_KIND_QUEUE_SPACE,
            aboleth_abi::wait_failure::WAIT_KIND_COMPLETION,
        ] {
            assert!(
                output
                    .ttir
                    .contains(&format!("arith.constant {kind} : i32")),
                "{}: kind {kind}",
                target.name()
            );
        }
        assert_eq!(output.summary.waits.len(), give_ups, "{}", target.name());
    }
}

/// The seed's all-to-all with a `tt.store` into the slice it puts, right before the put: the
/// send buffer is now written by the program's threads (a tile), not by the host.
fn alltoall_storing_its_source() -> String {
    let text = corpus("alltoall.after-passes.ttir");
    let put_address = "    %t = tt.extern_elementwise %dst, %c256_i32";
    assert!(text.contains(put_address));
    text.replacen(
        put_address,
        &format!(
            "    %tile = arith.constant 7 : i8 loc(#loc1)\n    tt.store %src_3, %tile : !tt.ptr<i8> loc(#loc1)\n{put_address}"
        ),
        1,
    )
}

/// The line numbers of the generated TTIR's lines containing `needle`.
fn lines_with(ttir: &str, needle: &str) -> Vec<usize> {
    ttir.lines()
        .enumerate()
        .filter(|(_, line)| line.contains(needle))
        .map(|(number, _)| number)
        .collect()
}

/// A put whose source the kernel stored: p2p puts a `gpu.barrier` between the store and the
/// copy's loads (the copy is spread over the threads, the store may be another thread's); the
/// seed's all-to-all, whose send buffer the host wrote, copies without one (its only barrier is
/// the signal's, after the copy).
#[test]
fn a_p2p_copy_of_a_source_the_kernel_stored_follows_a_barrier() {
    let output = run_stage(&alltoall_storing_its_source(), &options(Transport::P2p))
        .unwrap_or_else(|e| panic!("{e}"));
    // The lowering decided it (the lifting marked the put `ttir_unlifted_writes`).
    assert!(
        output.summary.aboleth_ir.contains("source_stores"),
        "{}",
        output.summary.aboleth_ir
    );
    let store = lines_with(&output.ttir, "tt.store %src_3, %tile");
    let barriers = lines_with(&output.ttir, "gpu.barrier");
    let copy = lines_with(&output.ttir, "scf.for %ab_chunk");
    assert_eq!(store.len(), 1);
    assert!(!copy.is_empty());
    assert!(
        barriers
            .iter()
            .any(|barrier| store[0] < *barrier && *barrier < copy[0]),
        "{}",
        output.ttir
    );

    let output = run_stage(
        &corpus("alltoall.after-passes.ttir"),
        &options(Transport::P2p),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(!output.summary.aboleth_ir.contains("source_stores"));
    let barriers = lines_with(&output.ttir, "gpu.barrier");
    let copy = lines_with(&output.ttir, "scf.for %ab_chunk");
    assert_eq!(barriers.len(), 1, "{}", output.ttir);
    assert!(copy[0] < barriers[0]);
}

/// mlx5 and proxy post after a barrier whoever wrote the source: every reservation starts with
/// one, so the store is ordered before the leader writes the commands and rings.
#[test]
fn mlx5_and_proxy_reserve_after_a_barrier_following_the_source_store() {
    for target in [Transport::Mlx5, Transport::Proxy] {
        let output = run_stage(&alltoall_storing_its_source(), &options(target))
            .unwrap_or_else(|e| panic!("{e}"));
        let store = lines_with(&output.ttir, "tt.store %src_3, %tile")[0];
        let barrier = lines_with(&output.ttir, "gpu.barrier")
            .into_iter()
            .find(|line| *line > store)
            .unwrap_or_else(|| panic!("{}: no barrier after the store", target.name()));
        // The reservation: the one-owner read-modify-write of the reservation counter.
        let reservation = lines_with(&output.ttir, "@%ab_leader add.u64 %ab_next")
            .into_iter()
            .find(|line| *line > store)
            .unwrap_or_else(|| panic!("{}: no reservation", target.name()));
        assert!(barrier < reservation, "{}", target.name());
        assert!(
            lines_with(&output.ttir, "gpu.barrier")
                .iter()
                .all(|line| *line < store || *line >= barrier),
            "{}",
            target.name()
        );
    }
}
