//! Device-library goldens: the tier-1 library of each transport (`device_library::generate`),
//! file by file, against `tests/filetests/device_library/<target>/`. A mismatch prints the first
//! differing line; `ABOLETH_BLESS=1 cargo test -p aboleth-codegen --test device_library_goldens`
//! (or `make bless`) rewrites them (review the diff), never by hand. Whether the files compile
//! is checked with nvcc by `python/tests/test_device_library.py`; whether they run, by
//! `tests/gpu/tier1_exchange.py`.

use std::path::PathBuf;

use aboleth_abi::Transport;
use aboleth_codegen::device_library::generate;

fn golden_root(target: Transport) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/filetests/device_library")
        .join(target.name())
}

fn check(target: Transport) {
    let library = generate(target).expect("the library generates");
    let root = golden_root(target);
    let bless = std::env::var_os("ABOLETH_BLESS").is_some();
    let mut failures = Vec::new();
    for (path, contents) in &library.files {
        let golden = root.join(path);
        if bless {
            std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
            std::fs::write(&golden, contents).unwrap();
            continue;
        }
        match std::fs::read_to_string(&golden) {
            Ok(expected) if &expected == contents => {}
            Ok(expected) => {
                let line = expected
                    .lines()
                    .zip(contents.lines())
                    .position(|(a, b)| a != b)
                    .unwrap_or_else(|| expected.lines().count().min(contents.lines().count()));
                failures.push(format!(
                    "{}: differs from line {} on:\n  golden:    {}\n  generated: {}",
                    golden.display(),
                    line + 1,
                    expected.lines().nth(line).unwrap_or("<end>"),
                    contents.lines().nth(line).unwrap_or("<end>")
                ));
            }
            Err(error) => failures.push(format!("{}: {error}", golden.display())),
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n(ABOLETH_BLESS=1 rewrites the goldens)",
        failures.join("\n")
    );
}

#[test]
fn p2p_library_matches_its_golden() {
    check(Transport::P2p);
}

#[test]
fn proxy_library_matches_its_golden() {
    check(Transport::Proxy);
}

#[test]
fn mlx5_library_matches_its_golden() {
    check(Transport::Mlx5);
}

#[test]
fn transports_without_a_lowering_are_refused_by_name() {
    for target in [Transport::Efa, Transport::Ionic] {
        let error = generate(target).unwrap_err();
        assert!(error.not_built);
        assert!(
            error
                .message
                .contains(&format!("--target {}", target.name())),
            "{}",
            error.message
        );
        assert!(
            error.message.contains("p2p, proxy and mlx5"),
            "{}",
            error.message
        );
    }
}

#[test]
fn the_mlx5_library_posts_through_the_abi_layouts_and_checks_its_endpoints() {
    let library = generate(Transport::Mlx5).unwrap();
    let header = &library.files[0].1;
    let detail = &library.files[1].1;
    // The queue and WQE layouts are declared from aboleth-abi, with their assertions.
    for declared in [
        "struct alignas(64) Mlx5QueueManagement {",
        "static_assert(offsetof(Mlx5ControlSegment, fm_ce_se) == 11",
        "static_assert(sizeof(Mlx5MaskedCompareSwap64Segment) == 32",
        "static_assert(offsetof(Mlx5Cqe64, wqe_counter) == 60",
    ] {
        assert!(header.contains(declared), "{declared}");
    }
    // The opcodes are the abi's values.
    assert!(detail.contains(&format!(
        "constexpr uint32_t OPCODE_ATOMIC_MASKED_CS = {:#x}u;",
        aboleth_abi::mlx5::OPCODE_ATOMIC_MASKED_CS
    )));
    // Every body checks its endpoint first, as tier 2 does at each `ab.endpoint` (put,
    // put_signal and signal in two forms, fence, quiet, and wait_signal's own endpoint in its
    // six comparison forms, which is not mlx5 and passes; three scopes each).
    let checks = detail
        .matches("detail::mlx5_exit_unless_supported_endpoint(ab_")
        .count();
    assert_eq!(checks, 3 * (1 + 2 + 2 + 1 + 1 + 6), "{checks}");
    // A doorbell rings the UAR after the doorbell record, in each posting body.
    let put = detail
        .split("__device__ __forceinline__ void put_thread(")
        .nth(1)
        .unwrap()
        .split("\n}\n")
        .next()
        .unwrap();
    let record = put.find("detail::mlx5_doorbell_record(").unwrap();
    let ring = put.find("detail::mlx5_ring_doorbell(").unwrap();
    assert!(record < ring, "{put}");
    assert!(put.contains("mlx5::OPCODE_RDMA_WRITE)"), "{put}");
}

#[test]
fn every_variant_of_every_operation_is_declared_and_defined() {
    for target in [Transport::P2p, Transport::Proxy, Transport::Mlx5] {
        let library = generate(target).unwrap();
        let header = &library.files[0].1;
        let detail = &library.files[1].1;
        for operation in [
            "put",
            "put_signal",
            "signal",
            "fence",
            "quiet",
            "wait_signal",
        ] {
            for suffix in ["", "_warp", "_block"] {
                let name = format!("{operation}{suffix}(DeviceContext ctx");
                assert!(
                    header.contains(&format!("ABOLETH_DEVICE_API void {name}")),
                    "{target:?} {name}"
                );
                assert!(
                    detail.contains(&format!("ABOLETH_DEVICE_DEFINITION void {name}")),
                    "{target:?} {name}"
                );
            }
        }
        assert!(header.contains(
            "ABOLETH_DEVICE_API void* ptr(DeviceContext ctx, int peer, RemoteRegion region);"
        ));
        // Bounded waits: every wait of the library has a site, and the sites are distinct.
        let mut sites: Vec<u32> = library
            .wait_sites
            .iter()
            .map(|(site, _, _)| *site)
            .collect();
        let count = sites.len();
        sites.dedup();
        assert_eq!(sites.len(), count);
        // (mlx5 endpoint checks report through the same log, without polling.)
        assert_eq!(
            detail.matches("detail::give_up_if_overdue(ab_").count()
                + detail
                    .matches("detail::mlx5_exit_unless_supported_endpoint(ab_")
                    .count(),
            count,
            "{target:?}"
        );
    }
}

#[test]
fn the_signal_before_copy_mutation_moves_each_copy_after_its_signal() {
    use aboleth_codegen::cuda::CudaMutation;
    use aboleth_codegen::device_library::generate_mutated;
    let mutated = generate_mutated(Transport::P2p, Some(CudaMutation::SignalBeforeCopy)).unwrap();
    let header = &mutated.files[0].1;
    assert!(header.starts_with("// DELIBERATELY BROKEN (signal-before-copy)"));
    let detail = &mutated.files[1].1;
    let body = detail
        .split("void put_signal_set_thread(")
        .nth(1)
        .expect("the thread form of put_signal");
    let signal = body.find("st.release.sys.global.u64").expect("the signal");
    let copy = body.find("detail::copy_to_peer(").expect("the copy");
    assert!(signal < copy, "the mutation stores the signal first");
    let correct = &generate(Transport::P2p).unwrap().files[1].1;
    let body = correct.split("void put_signal_set_thread(").nth(1).unwrap();
    assert!(
        body.find("detail::copy_to_peer(").unwrap()
            < body.find("st.release.sys.global.u64").unwrap()
    );
}
