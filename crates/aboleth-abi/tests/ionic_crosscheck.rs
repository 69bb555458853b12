//! Cross-check of the Ionic encoders against rdma-core's own `providers/ionic/ionic_fw_types.h`
//! and the doorbell rule of `ionic_queue.h` (rdma-core 61.0's source, which `make
//! rdma-core-source` fetches and pins; no Debian package installs them):
//! `tests/c/ionic_reference.c` is compiled with the system C compiler against them, fed the same
//! inputs as our encoders on stdin, and must print the same bytes, layouts and constants. The
//! doorbell constants are copied out of `ionic_queue.h` into a generated header first (that file
//! needs rdma-core's util headers). Without the source this test fails, naming the command that
//! fetches it; it never passes silently.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use aboleth_abi::ionic::cqe::*;
use aboleth_abi::ionic::wqe::*;
use aboleth_abi::ionic::*;

/// The extracted rdma-core source: `ABOLETH_RDMA_CORE_IONIC_SOURCE`, else
/// `.cache/rdma-core/rdma-core-61.0`.
fn rdma_core_source() -> PathBuf {
    if let Some(path) = std::env::var_os("ABOLETH_RDMA_CORE_IONIC_SOURCE") {
        return PathBuf::from(path);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/rdma-core/rdma-core-61.0")
}

use common::Inputs;

/// One input line for the C program and our bytes for it.
struct Case {
    input: String,
    ours: Vec<u8>,
    /// The firmware ABI version of a WQE case (its bytes decode back to `wqe`).
    wqe: Option<(IonicVersion, SendWqe)>,
}

fn version_number(version: IonicVersion) -> u8 {
    match version {
        IonicVersion::V1 => 1,
        IonicVersion::V2 => 2,
    }
}

fn common_of(inputs: &mut Inputs, index: u64) -> WqeCommon {
    WqeCommon {
        wqe_id: inputs.next() & 0xffff,
        color: index.is_multiple_of(2),
        signaled: !index.is_multiple_of(3),
        fence: index.is_multiple_of(5),
    }
}

fn flags_text(common: &WqeCommon) -> String {
    format!(
        "{} {} {} {}",
        common.wqe_id,
        u8::from(common.color),
        u8::from(common.signaled),
        u8::from(common.fence)
    )
}

fn wqe_case(version: IonicVersion, input: String, wqe: SendWqe) -> Case {
    let ours = wqe.encode(version).expect("our encoder takes it").to_vec();
    Case {
        input,
        ours,
        wqe: Some((version, wqe)),
    }
}

fn cases() -> Vec<Case> {
    let mut inputs = Inputs(0x5eed_1011_c000_0001);
    let mut cases = Vec::new();
    for index in 0..48u64 {
        let version = if index % 2 == 0 {
            IonicVersion::V1
        } else {
            IonicVersion::V2
        };
        let common = common_of(&mut inputs, index);
        let (remote_address, rkey) = (inputs.next(), inputs.next() as u32);
        let immediate = (index % 4 < 2).then(|| inputs.next() as u32);
        let buffers: Vec<LocalBuffer> = (0..1 + index % 2)
            .map(|_| LocalBuffer {
                address: inputs.next(),
                length_bytes: (inputs.next() as u32) & 0x3fff_ffff,
                lkey: inputs.next() as u32,
            })
            .collect();
        let pair = |at: usize| {
            buffers.get(at).map_or("0 0 0".to_string(), |buffer| {
                format!("{} {} {}", buffer.address, buffer.length_bytes, buffer.lkey)
            })
        };
        let input = format!(
            "write {} {} {remote_address} {rkey} {} {} {} {} {}",
            version_number(version),
            flags_text(&common),
            u8::from(immediate.is_some()),
            immediate.unwrap_or(0),
            buffers.len(),
            pair(0),
            pair(1)
        );
        cases.push(wqe_case(
            version,
            input,
            SendWqe::RdmaWrite {
                common,
                remote_address,
                rkey,
                payload: WritePayload::Buffers(buffers),
                immediate,
            },
        ));
    }
    for index in 0..16u64 {
        let version = if index % 2 == 0 {
            IonicVersion::V2
        } else {
            IonicVersion::V1
        };
        let common = common_of(&mut inputs, index);
        let (remote_address, rkey) = (inputs.next(), inputs.next() as u32);
        let immediate = (index % 3 == 0).then(|| inputs.next() as u32);
        let (length, seed) = ((index * 2 + 1) as usize, (inputs.next() & 0xff) as u8);
        let data: Vec<u8> = (0..length)
            .map(|i| seed.wrapping_add(31u8.wrapping_mul(i as u8)))
            .collect();
        let input = format!(
            "inline {} {} {remote_address} {rkey} {} {} {length} {seed}",
            version_number(version),
            flags_text(&common),
            u8::from(immediate.is_some()),
            immediate.unwrap_or(0)
        );
        cases.push(wqe_case(
            version,
            input,
            SendWqe::RdmaWrite {
                common,
                remote_address,
                rkey,
                payload: WritePayload::Inline(data),
                immediate,
            },
        ));
    }
    for index in 0..32u64 {
        let version = if index % 2 == 0 {
            IonicVersion::V1
        } else {
            IonicVersion::V2
        };
        let common = common_of(&mut inputs, index);
        let (remote_address, rkey) = (inputs.next() & !7, inputs.next() as u32);
        let (swap_add, compare) = (inputs.next(), inputs.next());
        let compare_swap = index % 4 >= 2;
        let result = LocalBuffer {
            address: inputs.next(),
            length_bytes: 8,
            lkey: inputs.next() as u32,
        };
        let input = format!(
            "atomic {} {} {remote_address} {rkey} {} {swap_add} {} {} {}",
            version_number(version),
            flags_text(&common),
            u8::from(compare_swap),
            if compare_swap { compare } else { 0 },
            result.address,
            result.lkey
        );
        let operation = if compare_swap {
            AtomicOperation::CompareSwap {
                compare,
                swap: swap_add,
            }
        } else {
            AtomicOperation::FetchAdd { add: swap_add }
        };
        cases.push(wqe_case(
            version,
            input,
            SendWqe::Atomic {
                common,
                remote_address,
                rkey,
                operation,
                result,
            },
        ));
    }
    for index in 0..16u64 {
        let (qid, msn) = ((inputs.next() as u32) & 0xff_ffff, inputs.next() as u32);
        let status = (index % 3 == 0).then_some((index % 14) as u32);
        let color = index % 2 == 1;
        let cqe = Cqe::send(qid, msn, status, color);
        assert_eq!(cqe.decode(), Ok(Completion::Send { qid, msn, status }));
        cases.push(Case {
            input: format!(
                "sendcqe {qid} {msn} {} {} {}",
                u8::from(status.is_some()),
                status.unwrap_or(0),
                u8::from(color)
            ),
            ours: cqe.to_bytes().to_vec(),
            wqe: None,
        });
        let (wqe_id, source_qp, length, immediate) = (
            inputs.next(),
            (inputs.next() as u32) & CQE_RECV_QPN_MASK,
            inputs.next() as u32,
            inputs.next() as u32,
        );
        let cqe = Cqe::receive_write_immediate(qid, wqe_id, (source_qp, length, immediate), color);
        cases.push(Case {
            input: format!(
                "recvcqe {qid} {wqe_id} {source_qp} {length} {immediate} {}",
                u8::from(color)
            ),
            ours: cqe.to_bytes().to_vec(),
            wqe: None,
        });
        let (queue_id, producer) = (inputs.next() as u32, inputs.next() as u16);
        cases.push(Case {
            input: format!("doorbell {queue_id} {producer}"),
            ours: sq_doorbell_value(queue_id, producer).to_le_bytes().to_vec(),
            wqe: None,
        });
    }
    cases
}

/// The layout facts and constants the reference program prints, as ours say they are.
fn expected_layouts() -> BTreeMap<String, u64> {
    let offset = |fields: &[aboleth_abi::Field], name: &str| {
        fields
            .iter()
            .find(|field| field.name == name)
            .unwrap_or_else(|| panic!("no field {name}"))
            .offset_bytes as u64
    };
    let header = |name| offset(WqeHeader::FIELDS, name);
    let body = 16u64;
    let rdma = |name| body + offset(RdmaBody::FIELDS, name);
    let atomic = |name| body + offset(AtomicBodyV1::FIELDS, name);
    let atomic_v2 = |name| body + offset(AtomicBodyV2::FIELDS, name);
    let sge = |name| offset(Sge::FIELDS, name);
    let cqe = |name| offset(Cqe::FIELDS, name);
    let mut facts: Vec<(String, u64)> = vec![
        ("sizeof.ionic_v1_wqe".into(), WQE_BYTES as u64),
        (
            "sizeof.ionic_v1_base_hdr".into(),
            WqeHeader::SIZE_BYTES as u64,
        ),
        ("sizeof.ionic_sge".into(), Sge::SIZE_BYTES as u64),
        ("sizeof.ionic_v1_cqe".into(), CQE_BYTES as u64),
    ];
    for field in ["wqe_id", "op", "num_sge_key", "flags", "imm_data_key"] {
        facts.push((format!("offsetof.ionic_v1_wqe.base.{field}"), header(field)));
    }
    for field in ["remote_va_high", "remote_va_low", "remote_rkey"] {
        facts.push((
            format!("offsetof.ionic_v1_wqe.common.rdma.{field}"),
            rdma(field),
        ));
    }
    facts.push(("offsetof.ionic_v1_wqe.common.length".into(), rdma("length")));
    facts.push(("offsetof.ionic_v1_wqe.common.pld".into(), rdma("payload")));
    facts.push((
        "offsetof.ionic_v1_wqe.atomic.swap_add_high".into(),
        atomic("swap_add_high"),
    ));
    facts.push((
        "offsetof.ionic_v1_wqe.atomic.compare_low".into(),
        atomic("compare_low"),
    ));
    facts.push(("offsetof.ionic_v1_wqe.atomic.sge".into(), atomic("sge_va")));
    facts.push((
        "offsetof.ionic_v1_wqe.atomic_v2.lkey".into(),
        atomic_v2("lkey"),
    ));
    facts.push((
        "offsetof.ionic_v1_wqe.atomic_v2.local_va".into(),
        atomic_v2("local_va"),
    ));
    for field in ["va", "len", "lkey"] {
        facts.push((format!("offsetof.ionic_sge.{field}"), sge(field)));
    }
    facts.extend([
        (
            "offsetof.ionic_v1_cqe.recv.wqe_id".into(),
            RECV_WQE_ID_OFFSET_BYTES as u64,
        ),
        (
            "offsetof.ionic_v1_cqe.recv.src_qpn_op".into(),
            RECV_SRC_QPN_OP_OFFSET_BYTES as u64,
        ),
        (
            "offsetof.ionic_v1_cqe.recv.imm_data_rkey".into(),
            RECV_IMM_DATA_OFFSET_BYTES as u64,
        ),
        (
            "offsetof.ionic_v1_cqe.send.msg_msn".into(),
            SEND_MSG_MSN_OFFSET_BYTES as u64,
        ),
        (
            "offsetof.ionic_v1_cqe.status_length".into(),
            cqe("status_length"),
        ),
        (
            "offsetof.ionic_v1_cqe.qid_type_flags".into(),
            cqe("qid_type_flags"),
        ),
    ]);
    let constants: &[(&str, u64)] = &[
        ("IONIC_V1_OP_SEND", op_v1::SEND.into()),
        ("IONIC_V1_OP_RDMA_READ", op_v1::RDMA_READ.into()),
        ("IONIC_V1_OP_RDMA_WRITE", op_v1::RDMA_WRITE.into()),
        ("IONIC_V1_OP_RDMA_WRITE_IMM", op_v1::RDMA_WRITE_IMM.into()),
        ("IONIC_V1_OP_ATOMIC_CS", op_v1::ATOMIC_CS.into()),
        ("IONIC_V1_OP_ATOMIC_FA", op_v1::ATOMIC_FA.into()),
        ("IONIC_V2_OPSL_OUT", op_v2::OPSL_OUT.into()),
        ("IONIC_V2_OPSL_IMM", op_v2::OPSL_IMM.into()),
        ("IONIC_V2_OP_SEND", op_v2::SEND.into()),
        ("IONIC_V2_OP_RDMA_WRITE", op_v2::RDMA_WRITE.into()),
        ("IONIC_V2_OP_RDMA_WRITE_IMM", op_v2::RDMA_WRITE_IMM.into()),
        ("IONIC_V2_OP_RDMA_READ", op_v2::RDMA_READ.into()),
        ("IONIC_V2_OP_ATOMIC_CS", op_v2::ATOMIC_CS.into()),
        ("IONIC_V2_OP_ATOMIC_FA", op_v2::ATOMIC_FA.into()),
        ("IONIC_V1_FLAG_FENCE", FLAG_FENCE.into()),
        ("IONIC_V1_FLAG_SOL", FLAG_SOL.into()),
        ("IONIC_V1_FLAG_INL", FLAG_INL.into()),
        ("IONIC_V1_FLAG_SIG", FLAG_SIG.into()),
        ("IONIC_V1_FLAG_COLOR", FLAG_COLOR.into()),
        ("IONIC_V1_CQE_COLOR", CQE_COLOR.into()),
        ("IONIC_V1_CQE_ERROR", CQE_ERROR.into()),
        ("IONIC_V1_CQE_TYPE_SHIFT", CQE_TYPE_SHIFT.into()),
        ("IONIC_V1_CQE_TYPE_MASK", CQE_TYPE_MASK.into()),
        ("IONIC_V1_CQE_QID_SHIFT", CQE_QID_SHIFT.into()),
        ("IONIC_V1_CQE_TYPE_RECV", CQE_TYPE_RECV.into()),
        ("IONIC_V1_CQE_TYPE_SEND_MSN", CQE_TYPE_SEND_MSN.into()),
        ("IONIC_V1_CQE_TYPE_SEND_NPG", CQE_TYPE_SEND_NPG.into()),
        ("IONIC_V1_CQE_RECV_QPN_MASK", CQE_RECV_QPN_MASK.into()),
        ("IONIC_V1_CQE_RECV_OP_SHIFT", CQE_RECV_OP_SHIFT.into()),
        ("IONIC_V1_CQE_RECV_OP_MASK", CQE_RECV_OP_MASK.into()),
        ("IONIC_V1_CQE_RECV_OP_RDMA_IMM", CQE_RECV_OP_RDMA_IMM.into()),
        ("IONIC_STS_OK", STS_OK.into()),
        ("IONIC_STS_LOCAL_LEN_ERR", STS_LOCAL_LEN_ERR.into()),
        ("IONIC_STS_LOCAL_PROT_ERR", STS_LOCAL_PROT_ERR.into()),
        ("IONIC_STS_WQE_FLUSHED_ERR", STS_WQE_FLUSHED_ERR.into()),
        ("IONIC_STS_REMOTE_ACC_ERR", STS_REMOTE_ACC_ERR.into()),
        ("IONIC_STS_RETRY_EXCEEDED", STS_RETRY_EXCEEDED.into()),
        ("IONIC_QID_MASK", QID_MASK),
        ("IONIC_DBELL_QID_SHIFT", DBELL_QID_SHIFT.into()),
        ("IONIC_DBELL_RING_ARM", DBELL_RING_ARM),
        ("IONIC_DBELL_RING_SONLY", DBELL_RING_SONLY),
    ];
    for (name, value) in constants {
        facts.push((format!("const.{name}"), *value));
    }
    facts.into_iter().collect()
}

/// Copies the doorbell definitions of `ionic_queue.h` (every `#define IONIC_QID_*` and
/// `IONIC_DBELL_*` line) into `directory/ionic_doorbell_defs.h`; they must all be there.
fn extract_doorbell_definitions(ionic: &Path, directory: &Path) {
    let header = ionic.join("ionic_queue.h");
    let text = std::fs::read_to_string(&header)
        .unwrap_or_else(|error| panic!("{}: {error}", header.display()));
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| {
            line.starts_with("#define IONIC_QID_MASK") || line.starts_with("#define IONIC_DBELL_")
        })
        .collect();
    for name in [
        "IONIC_QID_MASK",
        "IONIC_DBELL_QID_SHIFT",
        "IONIC_DBELL_RING_ARM",
        "IONIC_DBELL_RING_SONLY",
    ] {
        assert!(
            lines.iter().any(|line| line.contains(name)),
            "{} no longer defines {name}",
            header.display()
        );
    }
    std::fs::create_dir_all(directory).expect("create the build directory");
    std::fs::write(
        directory.join("ionic_doorbell_defs.h"),
        format!("{}\n", lines.join("\n")),
    )
    .expect("write the doorbell definitions");
}

fn compile_reference(directory: &Path) -> PathBuf {
    let ionic = rdma_core_source().join("providers/ionic");
    assert!(
        ionic.join("ionic_fw_types.h").exists(),
        "rdma-core's providers/ionic/ionic_fw_types.h not found under {}: run `make \
         rdma-core-source` (python3 crates/aboleth-abi/tests/c/fetch_rdma_core.py), or point \
         ABOLETH_RDMA_CORE_IONIC_SOURCE at an rdma-core 61+ source tree",
        ionic.display()
    );
    extract_doorbell_definitions(&ionic, directory);
    common::compile_reference(directory, "ionic_reference", &[&ionic, directory])
}

#[test]
fn encoders_match_rdma_core_ionic_fw_types_h() {
    let directory = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ionic_crosscheck");
    let executable = compile_reference(&directory);
    let cases = cases();
    let inputs: Vec<String> = cases.iter().map(|case| case.input.clone()).collect();
    let (layouts, case_lines) = common::run_reference(&executable, &inputs);
    common::check_layouts(&layouts, &expected_layouts());
    for (case, (label, theirs)) in cases.iter().zip(&case_lines) {
        let ours: String = case.ours.iter().map(|byte| format!("{byte:02x}")).collect();
        assert_eq!(
            &ours, theirs,
            "{label} (`{}`): ours, then rdma-core's",
            case.input
        );
        if let Some((version, wqe)) = &case.wqe {
            let bytes: [u8; WQE_BYTES] = common::bytes_of_hex(theirs).try_into().expect("64 bytes");
            assert_eq!(
                &SendWqe::decode(*version, &bytes).expect("rdma-core's WQE decodes"),
                wqe,
                "{label}"
            );
        }
    }
}
