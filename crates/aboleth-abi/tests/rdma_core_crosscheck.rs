//! Cross-check of the mlx5 encoders against rdma-core's own `<infiniband/mlx5dv.h>` (Debian's
//! `libibverbs-dev`): `tests/c/mlx5dv_reference.c` is compiled with the system C compiler, fed
//! the same inputs as our encoders on stdin, and must print the same bytes, layouts and constants
//! (running and reading the program: `tests/common/mod.rs`, shared with `tests/efa_crosscheck.rs`).
//! Without the header this test fails; it never passes silently.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use aboleth_abi::mlx5::*;
use aboleth_abi::{Be32, Be64};

const HEADER_MISSING: &str = "rdma-core header <infiniband/mlx5dv.h> not found: install Debian's \
                              libibverbs-dev (apt-get install libibverbs-dev)";

type Fields = &'static [(&'static str, usize)];
const CTRL: Fields = &[
    ("opmod_idx_opcode", 4),
    ("qpn_ds", 4),
    ("signature", 1),
    ("dci_stream_channel_id", 2),
    ("fm_ce_se", 1),
    ("imm", 4),
];
const RADDR: Fields = &[("raddr", 8), ("rkey", 4), ("reserved", 4)];
const DATA: Fields = &[("byte_count", 4), ("lkey", 4), ("addr", 8)];
const ATOMIC: Fields = &[("swap_add", 8), ("compare", 8)];
const MASKED_FA: Fields = &[("add", 8), ("field_boundary", 8)];
const MASKED_CS: Fields = &[
    ("swap", 8),
    ("compare", 8),
    ("swap_mask", 8),
    ("compare_mask", 8),
];
const INLINE: Fields = &[("byte_count", 4), ("payload", 252)];
const CQE: Fields = &[
    ("responder_info/srqn/imm/app", 44),
    ("byte_cnt", 4),
    ("timestamp/hw_err_synd/hw_synd_type", 6),
    ("vendor_err_synd", 1),
    ("syndrome", 1),
    ("sop_drop_qpn/s_wqe_opcode_qpn", 4),
    ("wqe_counter", 2),
    ("signature", 1),
    ("op_own", 1),
];
const DBREC: Fields = &[("dbrec[RCV_DBR]", 4), ("dbrec[SND_DBR]", 4)];

/// One input line for the C program, our bytes for it, and the layout to name a differing byte.
struct Case {
    input: String,
    ours: Vec<u8>,
    segments: Vec<(&'static str, Fields)>,
    decoded: Option<DecodedWqe>,
}

fn field_at(segments: &[(&'static str, Fields)], offset: usize) -> String {
    let mut start = 0;
    for (segment, fields) in segments {
        for (field, size) in fields.iter() {
            if offset < start + size {
                return format!("{segment}.{field}");
            }
            start += size;
        }
    }
    "padding".to_string()
}

use common::Inputs;

fn wqe_case(
    input: String,
    wqe: &Wqe,
    segments: Vec<(&'static str, Fields)>,
    decoded: DecodedWqe,
) -> Case {
    Case {
        input,
        ours: wqe.as_bytes().to_vec(),
        segments,
        decoded: Some(decoded),
    }
}

fn cases() -> Vec<Case> {
    let mut inputs = Inputs(0x9e37_79b9_7f4a_7c15);
    let mut cases = Vec::new();
    let fences = [
        0,
        WQE_CTRL_CQ_UPDATE,
        WQE_CTRL_SOLICITED,
        FENCE_MODE_FENCE,
        0xff,
    ];
    for round in 0..48u64 {
        // Round 0 uses extremes; the rest are pseudo-random.
        let pick =
            |inputs: &mut Inputs, extreme: u64| if round == 0 { extreme } else { inputs.next() };
        let pi = pick(&mut inputs, 0xffff) as u16;
        let qpn = pick(&mut inputs, 0xff_ffff) as u32 & 0xff_ffff;
        let fm_ce_se = fences[round as usize % fences.len()];
        let common = WqeCommon {
            wqe_index: pi,
            qpn,
            fm_ce_se,
        };
        let remote = RemoteAddress {
            address: pick(&mut inputs, u64::MAX),
            rkey: pick(&mut inputs, u64::MAX) as u32,
        };
        let local = LocalBuffer {
            address: pick(&mut inputs, u64::MAX),
            lkey: pick(&mut inputs, u64::MAX) as u32,
            length_bytes: pick(&mut inputs, 0x7fff_ffff) as u32 & 0x7fff_ffff,
        };
        let result = LocalBuffer {
            length_bytes: 8,
            ..local
        };
        let head = format!("{pi} {qpn} {fm_ce_se} {} {}", remote.address, remote.rkey);
        let local_args = format!("{} {} {}", local.address, local.lkey, local.length_bytes);
        let (a, b, c, d) = (inputs.next(), inputs.next(), inputs.next(), inputs.next());
        let immediate = inputs.next() as u32;
        let control = |opcode, opmod, ds, immediate| ControlFields {
            opcode,
            opmod,
            wqe_index: pi,
            qpn,
            ds,
            fm_ce_se,
            immediate,
            ..ControlFields::default()
        };
        let decoded = |control, operation| DecodedWqe { control, operation };

        // Single segments and control fields the builders never vary.
        let (opcode, opmod, ds, signature) = (
            inputs.next() as u8,
            inputs.next() as u8,
            inputs.below(64) as u8,
            inputs.next() as u8,
        );
        let raw_qpn = pick(&mut inputs, u64::from(u32::MAX)) as u32;
        let fields = ControlFields {
            opcode,
            opmod,
            wqe_index: pi,
            qpn: raw_qpn,
            ds,
            fm_ce_se,
            signature,
            dci_stream_channel_id: 0,
            immediate,
        };
        cases.push(Case {
            input: format!(
                "ctrl {pi} {opcode} {opmod} {raw_qpn} {fm_ce_se} {ds} {signature} {immediate}"
            ),
            ours: ControlSegment::encode(&fields).to_bytes().to_vec(),
            segments: vec![("ctrl", CTRL)],
            decoded: None,
        });
        let data = DataSegment {
            byte_count: Be32::new(local.length_bytes),
            lkey: Be32::new(local.lkey),
            addr: Be64::new(local.address),
        };
        cases.push(Case {
            input: format!(
                "data {} {} {}",
                local.length_bytes, local.lkey, local.address
            ),
            ours: data.to_bytes().to_vec(),
            segments: vec![("data", DATA)],
            decoded: None,
        });
        let inline_length = if round == 0 {
            INLINE_BYTES_MAX
        } else {
            inputs.below(221) as usize
        };
        let header = InlineHeader {
            byte_count: Be32::new(inline_length as u32 | INLINE_SEG),
        };
        cases.push(Case {
            input: format!("inline_header {inline_length}"),
            ours: header.to_bytes().to_vec(),
            segments: vec![("inline", INLINE)],
            decoded: None,
        });

        // Whole WQEs.
        let gather = WritePayload::Gather(vec![local]);
        let write = |with_immediate| WqeOperation::RdmaWrite {
            remote,
            payload: gather.clone(),
            with_immediate,
        };
        let rw = vec![("ctrl", CTRL), ("raddr", RADDR), ("data", DATA)];
        cases.push(wqe_case(
            format!("nop {pi} {qpn} {fm_ce_se}"),
            &nop(&common),
            vec![("ctrl", CTRL)],
            decoded(control(OPCODE_NOP, 0, 1, 0), WqeOperation::Nop),
        ));
        cases.push(wqe_case(
            format!("write {head} {local_args}"),
            &rdma_write(&common, remote, local),
            rw.clone(),
            decoded(control(OPCODE_RDMA_WRITE, 0, 3, 0), write(false)),
        ));
        cases.push(wqe_case(
            format!("write_imm {head} {local_args} {immediate}"),
            &rdma_write_imm(&common, remote, local, immediate),
            rw.clone(),
            decoded(control(OPCODE_RDMA_WRITE_IMM, 0, 3, immediate), write(true)),
        ));
        cases.push(wqe_case(
            format!("read {head} {local_args}"),
            &rdma_read(&common, remote, local),
            rw,
            decoded(
                control(OPCODE_RDMA_READ, 0, 3, 0),
                WqeOperation::RdmaRead {
                    remote,
                    local: vec![local],
                },
            ),
        ));
        let seed = inputs.below(256);
        let payload: Vec<u8> = (0..inline_length as u64)
            .map(|i| (seed + 7 * i) as u8)
            .collect();
        let inline_ds = 2 + (4 + inline_length).div_ceil(16) as u8;
        cases.push(wqe_case(
            format!("write_inline {head} {inline_length} {seed}"),
            &rdma_write_inline(&common, remote, &payload).expect("within INLINE_BYTES_MAX"),
            vec![("ctrl", CTRL), ("raddr", RADDR), ("inline", INLINE)],
            decoded(
                control(OPCODE_RDMA_WRITE, 0, inline_ds, 0),
                WqeOperation::RdmaWrite {
                    remote,
                    payload: WritePayload::Inline(payload.clone()),
                    with_immediate: false,
                },
            ),
        ));
        let result_args = format!("{} {}", result.address, result.lkey);
        cases.push(wqe_case(
            format!("fetch_add {head} {a} 0 {result_args}"),
            &atomic_fetch_add(&common, remote, a, result),
            vec![
                ("ctrl", CTRL),
                ("raddr", RADDR),
                ("atomic", ATOMIC),
                ("data", DATA),
            ],
            decoded(
                control(OPCODE_ATOMIC_FA, 0, 4, 0),
                WqeOperation::AtomicFetchAdd {
                    remote,
                    add: a,
                    result,
                },
            ),
        ));
        cases.push(wqe_case(
            format!("compare_swap {head} {a} {b} {result_args}"),
            &atomic_compare_swap(&common, remote, a, b, result),
            vec![
                ("ctrl", CTRL),
                ("raddr", RADDR),
                ("atomic", ATOMIC),
                ("data", DATA),
            ],
            decoded(
                control(OPCODE_ATOMIC_CS, 0, 4, 0),
                WqeOperation::AtomicCompareSwap {
                    remote,
                    compare: a,
                    swap: b,
                    result,
                },
            ),
        ));
        cases.push(wqe_case(
            format!("masked_fetch_add {head} {a} {b} {result_args}"),
            &masked_fetch_add_64(&common, remote, a, b, result),
            vec![
                ("ctrl", CTRL),
                ("raddr", RADDR),
                ("masked_fa", MASKED_FA),
                ("data", DATA),
            ],
            decoded(
                control(OPCODE_ATOMIC_MASKED_FA, EXTENDED_ATOMIC_OPMOD_8_BYTES, 4, 0),
                WqeOperation::MaskedFetchAdd64 {
                    remote,
                    add: a,
                    field_boundary: b,
                    result,
                },
            ),
        ));
        let operands = MaskedCompareSwap64 {
            swap: a,
            compare: b,
            swap_mask: c,
            compare_mask: d,
        };
        cases.push(wqe_case(
            format!("masked_compare_swap {head} {a} {b} {c} {d} {result_args}"),
            &masked_compare_swap_64(&common, remote, operands, result),
            vec![
                ("ctrl", CTRL),
                ("raddr", RADDR),
                ("masked_cs", MASKED_CS),
                ("data", DATA),
            ],
            decoded(
                control(OPCODE_ATOMIC_MASKED_CS, EXTENDED_ATOMIC_OPMOD_8_BYTES, 5, 0),
                WqeOperation::MaskedCompareSwap64 {
                    remote,
                    operands,
                    result,
                },
            ),
        ));

        // CQEs and doorbells.
        let send_opcode =
            [OPCODE_RDMA_WRITE, OPCODE_ATOMIC_MASKED_FA, OPCODE_NOP][round as usize % 3];
        let completion = RequesterCompletion {
            send_opcode,
            qpn,
            wqe_counter: pi,
        };
        let owner = round % 2 == 1;
        let syndromes = [
            CQE_SYNDROME_REMOTE_ACCESS_ERR,
            CQE_SYNDROME_WR_FLUSH_ERR,
            0x22,
        ];
        let syndrome = syndromes[round as usize % syndromes.len()];
        let vendor = inputs.next() as u8;
        cases.push(Case {
            input: format!(
                "cqe {send_opcode} {qpn} {pi} {} {}",
                u8::from(owner),
                local.length_bytes
            ),
            ours: Cqe64::requester(&completion, local.length_bytes, owner)
                .to_bytes()
                .to_vec(),
            segments: vec![("cqe64", CQE)],
            decoded: None,
        });
        cases.push(Case {
            input: format!(
                "err_cqe {send_opcode} {qpn} {pi} {} {syndrome} {vendor}",
                u8::from(owner)
            ),
            ours: ErrorCqe64::requester_error(&completion, syndrome, vendor, owner)
                .to_bytes()
                .to_vec(),
            segments: vec![("err_cqe", CQE)],
            decoded: None,
        });
        let producer_index = pick(&mut inputs, u64::from(u32::MAX)) as u32;
        cases.push(Case {
            input: format!("dbrec {producer_index}"),
            ours: DoorbellRecord::for_send_producer_index(producer_index)
                .to_bytes()
                .to_vec(),
            segments: vec![("doorbell_record", DBREC)],
            decoded: None,
        });
        let last = masked_compare_swap_64(&common, remote, operands, result);
        let last_control = ControlSegment::from_bytes(last.as_bytes()[..16].try_into().unwrap());
        cases.push(Case {
            input: format!("uar_last_wqe {pi} {qpn} {fm_ce_se} {OPCODE_ATOMIC_MASKED_CS} {EXTENDED_ATOMIC_OPMOD_8_BYTES} 5"),
            ours: UarDoorbell::last_wqe_control(&last_control).to_bytes().to_vec(),
            segments: vec![("uar", &CTRL[..2])],
            decoded: None,
        });
    }
    cases
}

/// `name -> value` for every `sizeof.`, `offsetof.` and `const.` line the C program prints.
fn expected_layouts() -> BTreeMap<String, u64> {
    use core::mem::{offset_of, size_of};
    let mut map = BTreeMap::new();
    macro_rules! layout {
        ($c_name:literal, $ty:ty, [$($field:ident),*]) => {
            map.insert(format!("sizeof.{}", $c_name), size_of::<$ty>() as u64);
            $(map.insert(
                format!("offsetof.{}.{}", $c_name, stringify!($field)),
                offset_of!($ty, $field) as u64,
            );)*
        };
    }
    macro_rules! constants {
        ($($c_name:ident = $ours:expr),* $(,)?) => {
            $(map.insert(format!("const.{}", stringify!($c_name)), $ours as u64);)*
        };
    }
    layout!(
        "mlx5_wqe_ctrl_seg",
        ControlSegment,
        [
            opmod_idx_opcode,
            qpn_ds,
            signature,
            dci_stream_channel_id,
            fm_ce_se,
            imm
        ]
    );
    layout!("mlx5_wqe_raddr_seg", RemoteAddressSegment, [raddr, rkey]);
    layout!("mlx5_wqe_data_seg", DataSegment, [byte_count, lkey, addr]);
    layout!("mlx5_wqe_atomic_seg", AtomicSegment, [swap_add, compare]);
    layout!("mlx5_wqe_inl_data_seg", InlineHeader, []);
    layout!(
        "mlx5_cqe64",
        Cqe64,
        [
            srqn_uidx,
            imm_inval_pkey,
            byte_cnt,
            timestamp,
            sop_drop_qpn,
            wqe_counter,
            signature,
            op_own
        ]
    );
    layout!(
        "mlx5_err_cqe",
        ErrorCqe64,
        [
            vendor_err_synd,
            syndrome,
            s_wqe_opcode_qpn,
            wqe_counter,
            op_own
        ]
    );
    constants!(
        MLX5_SEND_WQE_BB = WQE_BASIC_BLOCK_BYTES,
        MLX5_SEND_WQE_SHIFT = WQE_BASIC_BLOCK_SHIFT,
        MLX5_OPCODE_NOP = OPCODE_NOP,
        MLX5_OPCODE_RDMA_WRITE = OPCODE_RDMA_WRITE,
        MLX5_OPCODE_RDMA_WRITE_IMM = OPCODE_RDMA_WRITE_IMM,
        MLX5_OPCODE_SEND = OPCODE_SEND,
        MLX5_OPCODE_RDMA_READ = OPCODE_RDMA_READ,
        MLX5_OPCODE_ATOMIC_CS = OPCODE_ATOMIC_CS,
        MLX5_OPCODE_ATOMIC_FA = OPCODE_ATOMIC_FA,
        MLX5_OPCODE_ATOMIC_MASKED_CS = OPCODE_ATOMIC_MASKED_CS,
        MLX5_OPCODE_ATOMIC_MASKED_FA = OPCODE_ATOMIC_MASKED_FA,
        MLX5_WQE_CTRL_CQ_UPDATE = WQE_CTRL_CQ_UPDATE,
        MLX5_WQE_CTRL_SOLICITED = WQE_CTRL_SOLICITED,
        MLX5_WQE_CTRL_FENCE = FENCE_MODE_SMALL_AND_FENCE,
        MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE = FENCE_MODE_INITIATOR_SMALL,
        MLX5_INLINE_SEG = INLINE_SEG,
        MLX5_INVALID_LKEY = INVALID_LKEY,
        MLX5_SND_DBR = SND_DBR,
        MLX5_RCV_DBR = RCV_DBR,
        MLX5_CQE_REQ = CQE_OPCODE_REQ,
        MLX5_CQE_REQ_ERR = CQE_OPCODE_REQ_ERR,
        MLX5_CQE_INVALID = CQE_OPCODE_INVALID,
        MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR = CQE_SYNDROME_LOCAL_LENGTH_ERR,
        MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR = CQE_SYNDROME_LOCAL_QP_OP_ERR,
        MLX5_CQE_SYNDROME_LOCAL_PROT_ERR = CQE_SYNDROME_LOCAL_PROT_ERR,
        MLX5_CQE_SYNDROME_WR_FLUSH_ERR = CQE_SYNDROME_WR_FLUSH_ERR,
        MLX5_CQE_SYNDROME_MW_BIND_ERR = CQE_SYNDROME_MW_BIND_ERR,
        MLX5_CQE_SYNDROME_BAD_RESP_ERR = CQE_SYNDROME_BAD_RESP_ERR,
        MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR = CQE_SYNDROME_LOCAL_ACCESS_ERR,
        MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR = CQE_SYNDROME_REMOTE_INVAL_REQ_ERR,
        MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR = CQE_SYNDROME_REMOTE_ACCESS_ERR,
        MLX5_CQE_SYNDROME_REMOTE_OP_ERR = CQE_SYNDROME_REMOTE_OP_ERR,
        MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR = CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR,
        MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR = CQE_SYNDROME_RNR_RETRY_EXC_ERR,
        MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR = CQE_SYNDROME_REMOTE_ABORTED_ERR,
    );
    map
}

/// Compiles the reference program, or fails with the install hint when the header is missing.
fn compile_reference(directory: &Path) -> PathBuf {
    std::fs::create_dir_all(directory).expect("create the build directory");
    let probe = directory.join("probe.c");
    std::fs::write(
        &probe,
        "#include <infiniband/mlx5dv.h>\nint main(void) { return 0; }\n",
    )
    .expect("write the probe");
    let probe_output = Command::new("cc")
        .arg("-fsyntax-only")
        .arg(&probe)
        .output()
        .unwrap_or_else(|error| panic!("cannot run the C compiler `cc`: {error}"));
    assert!(
        probe_output.status.success(),
        "{HEADER_MISSING}\ncc said:\n{}",
        String::from_utf8_lossy(&probe_output.stderr)
    );
    common::compile_reference(directory, "mlx5dv_reference", &[])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[test]
fn encoders_match_rdma_core_mlx5dv_h() {
    let directory = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rdma_core_crosscheck");
    let executable = compile_reference(&directory);
    let cases = cases();
    let inputs: Vec<String> = cases.iter().map(|case| case.input.clone()).collect();
    let (layouts, case_lines) = common::run_reference(&executable, &inputs);
    common::check_layouts(&layouts, &expected_layouts());
    for (case, (label, theirs_hex)) in cases.iter().zip(&case_lines) {
        let theirs = common::bytes_of_hex(theirs_hex);
        if let Some(offset) =
            (0..case.ours.len().max(theirs.len())).find(|&at| case.ours.get(at) != theirs.get(at))
        {
            panic!(
                "{label} (`{}`): field {} differs at byte {offset}\n  ours:      {}\n  rdma-core: {}",
                case.input,
                field_at(&case.segments, offset),
                hex(&case.ours),
                theirs_hex
            );
        }
        if let Some(decoded) = &case.decoded {
            assert_eq!(
                &decode_wqe(&theirs).expect("decode rdma-core's WQE"),
                decoded,
                "{label}"
            );
        }
    }
}
