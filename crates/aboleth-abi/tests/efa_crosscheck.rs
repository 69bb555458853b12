//! Cross-check of the EFA encoders against rdma-core's own `providers/efa/efa_io_defs.h`
//! (rdma-core 56.1's source, which `make rdma-core-source` fetches and pins; no Debian package
//! installs the header): `tests/c/efa_reference.c` is compiled with the system C compiler
//! against it, fed the same inputs as our encoders on stdin, and must print the same bytes,
//! layouts and constants. Without the source this test fails, naming the command that fetches
//! it; it never passes silently.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use aboleth_abi::efa::cqe::*;
use aboleth_abi::efa::wqe::*;
use aboleth_abi::efa::*;

/// The extracted rdma-core source: `ABOLETH_RDMA_CORE_SOURCE`, else `.cache/rdma-core/rdma-core-56.1`.
fn rdma_core_source() -> PathBuf {
    if let Some(path) = std::env::var_os("ABOLETH_RDMA_CORE_SOURCE") {
        return PathBuf::from(path);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/rdma-core/rdma-core-56.1")
}

use common::Inputs;

/// One input line for the C program and our bytes for it.
struct Case {
    input: String,
    ours: Vec<u8>,
}

fn cases() -> Vec<Case> {
    let mut inputs = Inputs(0x5eed_efa0_0000_0001);
    let mut cases = Vec::new();
    for index in 0..64u64 {
        let write = RdmaWrite {
            req_id: inputs.next() as u16,
            phase: index % 2 == 1,
            completion_requested: index % 3 == 0,
            dest_qp_num: inputs.next() as u16,
            ah: inputs.next() as u16,
            qkey: inputs.next() as u32,
            remote_address: inputs.next(),
            rkey: inputs.next() as u32,
            local_address: inputs.next(),
            lkey: inputs.next() as u32 & BUF_DESC_LKEY_MASK,
            length_bytes: inputs.next() as u32,
            immediate: (index % 4 < 2).then(|| inputs.next() as u32),
        };
        let wqe = RdmaWriteWqe::encode(&write);
        assert_eq!(wqe.decode().expect("our own WQE decodes"), write);
        cases.push(Case {
            input: format!(
                "write {} {} {} {} {} {} {} {} {} {} {} {} {}",
                write.req_id,
                u8::from(write.phase),
                u8::from(write.completion_requested),
                write.dest_qp_num,
                write.ah,
                write.qkey,
                write.remote_address,
                write.rkey,
                write.local_address,
                write.lkey,
                write.length_bytes,
                u8::from(write.immediate.is_some()),
                write.immediate.unwrap_or(0)
            ),
            ours: wqe.to_bytes().to_vec(),
        });
    }
    for index in 0..16u64 {
        let (req_id, status, qp) = (
            inputs.next() as u16,
            (index % 16) as u8,
            inputs.next() as u16,
        );
        let phase = index % 2 == 0;
        let operation = (index % 3) as u8;
        cases.push(Case {
            input: format!("txc {req_id} {status} {} {qp} {operation}", u8::from(phase)),
            ours: TxCompletion::new(req_id, status, phase, qp, operation)
                .to_bytes()
                .to_vec(),
        });
        let (length, ah, source, imm) = (
            inputs.next() as u16,
            inputs.next() as u16,
            inputs.next() as u16,
            inputs.next() as u32,
        );
        let completion =
            RxCompletion::write_with_immediate(req_id, phase, qp, length, ah, source, imm);
        assert_eq!(completion.immediate(), Some(imm));
        cases.push(Case {
            input: format!(
                "rxc {req_id} {} {qp} {length} {ah} {source} {imm}",
                u8::from(phase)
            ),
            ours: completion.to_bytes().to_vec(),
        });
    }
    cases
}

/// The layout facts and constants the reference program prints, as ours say they are.
fn expected_layouts() -> BTreeMap<String, u64> {
    let offset = |name: &str| {
        RdmaWriteWqe::FIELDS
            .iter()
            .find(|field| field.name == name)
            .unwrap_or_else(|| panic!("no field {name}"))
            .offset_bytes as u64
    };
    let tx = |name: &str| {
        TxCompletion::FIELDS
            .iter()
            .find(|field| field.name == name)
            .expect("field")
            .offset_bytes as u64
    };
    let rx = |name: &str| {
        RxCompletion::FIELDS
            .iter()
            .find(|field| field.name == name)
            .expect("field")
            .offset_bytes as u64
    };
    let mut facts: Vec<(String, u64)> = vec![("sizeof.efa_io_tx_meta_desc".into(), 32)];
    for field in [
        "req_id",
        "ctrl1",
        "ctrl2",
        "dest_qp_num",
        "length",
        "immediate_data",
        "ah",
        "qkey",
    ] {
        facts.push((
            format!("offsetof.efa_io_tx_meta_desc.{field}"),
            offset(field),
        ));
    }
    facts.extend([
        ("sizeof.efa_io_tx_buf_desc".into(), 16),
        ("sizeof.efa_io_remote_mem_addr".into(), 16),
        ("sizeof.efa_io_tx_wqe".into(), TX_WQE_BYTES as u64),
    ]);
    for (c_name, ours) in [
        ("remote_mem.length", "remote_length"),
        ("remote_mem.rkey", "rkey"),
        ("remote_mem.buf_addr_lo", "remote_address_low"),
        ("remote_mem.buf_addr_hi", "remote_address_high"),
        ("local_mem[0].length", "local_length"),
        ("local_mem[0].lkey", "lkey"),
        ("local_mem[0].buf_addr_lo", "local_address_low"),
        ("local_mem[0].buf_addr_hi", "local_address_high"),
    ] {
        facts.push((
            format!("offsetof.efa_io_tx_wqe.data.rdma_req.{c_name}"),
            offset(ours),
        ));
    }
    facts.push((
        "sizeof.efa_io_tx_cdesc".into(),
        TxCompletion::SIZE_BYTES as u64,
    ));
    for field in ["req_id", "status", "flags", "qp_num"] {
        facts.push((
            format!("offsetof.efa_io_tx_cdesc.common.{field}"),
            tx(field),
        ));
    }
    facts.push((
        "sizeof.efa_io_rx_cdesc".into(),
        RxCompletion::SIZE_BYTES as u64,
    ));
    for field in ["length", "ah", "src_qp_num", "imm"] {
        facts.push((format!("offsetof.efa_io_rx_cdesc.{field}"), rx(field)));
    }
    let constants: &[(&str, u64)] = &[
        ("EFA_IO_TX_DESC_NUM_RDMA_BUFS", TX_DESC_NUM_RDMA_BUFS.into()),
        ("EFA_IO_TX_DESC_IMM_DATA_SIZE", TX_DESC_IMM_DATA_SIZE as u64),
        ("EFA_IO_SEND", SEND.into()),
        ("EFA_IO_RDMA_READ", RDMA_READ.into()),
        ("EFA_IO_RDMA_WRITE", RDMA_WRITE.into()),
        ("EFA_IO_SEND_QUEUE", SEND_QUEUE.into()),
        ("EFA_IO_RECV_QUEUE", RECV_QUEUE.into()),
        ("EFA_IO_COMP_STATUS_OK", COMP_STATUS_OK.into()),
        ("EFA_IO_COMP_STATUS_FLUSHED", COMP_STATUS_FLUSHED.into()),
        (
            "EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_AH",
            COMP_STATUS_LOCAL_ERROR_INVALID_AH.into(),
        ),
        (
            "EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_DEST_QPN",
            COMP_STATUS_REMOTE_ERROR_BAD_DEST_QPN.into(),
        ),
        (
            "EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY",
            COMP_STATUS_LOCAL_ERROR_INVALID_LKEY.into(),
        ),
        (
            "EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH",
            COMP_STATUS_LOCAL_ERROR_BAD_LENGTH.into(),
        ),
        (
            "EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS",
            COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS.into(),
        ),
        (
            "EFA_IO_COMP_STATUS_REMOTE_ERROR_RNR",
            COMP_STATUS_REMOTE_ERROR_RNR.into(),
        ),
        (
            "EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE",
            COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE.into(),
        ),
        ("EFA_IO_TX_META_DESC_OP_TYPE_MASK", META_OP_TYPE_MASK.into()),
        ("EFA_IO_TX_META_DESC_HAS_IMM_MASK", META_HAS_IMM.into()),
        (
            "EFA_IO_TX_META_DESC_INLINE_MSG_MASK",
            META_INLINE_MSG.into(),
        ),
        ("EFA_IO_TX_META_DESC_META_DESC_MASK", META_META_DESC.into()),
        (
            "EFA_IO_TX_META_DESC_META_EXTENSION_MASK",
            META_EXTENSION.into(),
        ),
        ("EFA_IO_TX_META_DESC_PHASE_MASK", META_PHASE.into()),
        ("EFA_IO_TX_META_DESC_FIRST_MASK", META_FIRST.into()),
        ("EFA_IO_TX_META_DESC_LAST_MASK", META_LAST.into()),
        ("EFA_IO_TX_META_DESC_COMP_REQ_MASK", META_COMP_REQ.into()),
        ("EFA_IO_TX_BUF_DESC_LKEY_MASK", BUF_DESC_LKEY_MASK.into()),
        ("EFA_IO_CDESC_COMMON_PHASE_MASK", FLAGS_PHASE.into()),
        ("EFA_IO_CDESC_COMMON_Q_TYPE_MASK", FLAGS_Q_TYPE_MASK.into()),
        ("EFA_IO_CDESC_COMMON_HAS_IMM_MASK", FLAGS_HAS_IMM.into()),
        (
            "EFA_IO_CDESC_COMMON_OP_TYPE_MASK",
            FLAGS_OP_TYPE_MASK.into(),
        ),
        (
            "EFA_IO_CDESC_COMMON_UNSOLICITED_MASK",
            FLAGS_UNSOLICITED.into(),
        ),
    ];
    for (name, value) in constants {
        facts.push((format!("const.{name}"), *value));
    }
    facts.into_iter().collect()
}

fn compile_reference(directory: &Path) -> PathBuf {
    let efa = rdma_core_source().join("providers/efa");
    assert!(
        efa.join("efa_io_defs.h").exists(),
        "rdma-core's providers/efa/efa_io_defs.h not found under {}: run `make rdma-core-source` \
         (python3 crates/aboleth-abi/tests/c/fetch_rdma_core.py), or point ABOLETH_RDMA_CORE_SOURCE \
         at an rdma-core source tree",
        efa.display()
    );
    common::compile_reference(directory, "efa_reference", &[&efa])
}

#[test]
fn encoders_match_rdma_core_efa_io_defs_h() {
    let directory = Path::new(env!("CARGO_TARGET_TMPDIR")).join("efa_crosscheck");
    let executable = compile_reference(&directory);
    let cases = cases();
    let inputs: Vec<String> = cases.iter().map(|case| case.input.clone()).collect();
    let (layouts, case_lines) = common::run_reference(&executable, &inputs);
    common::check_layouts(&layouts, &expected_layouts());
    for (case, (label, theirs)) in cases.iter().zip(&case_lines) {
        let command = case.input.split(' ').next().unwrap_or_default();
        let ours: String = case.ours.iter().map(|byte| format!("{byte:02x}")).collect();
        assert_eq!(
            &ours, theirs,
            "{label} (`{}`): ours, then rdma-core's",
            case.input
        );
        if command == "write" {
            let bytes = common::bytes_of_hex(theirs);
            let wqe = RdmaWriteWqe::from_bytes(bytes.as_slice().try_into().expect("64 bytes"));
            wqe.decode().expect("rdma-core's WQE decodes");
        }
    }
}

#[test]
fn a_wqe_the_device_would_refuse_does_not_decode() {
    let write = RdmaWrite {
        req_id: 1,
        phase: false,
        completion_requested: true,
        dest_qp_num: 2,
        ah: 3,
        qkey: 4,
        remote_address: 0x1000,
        rkey: 5,
        local_address: 0x2000,
        lkey: 6,
        length_bytes: 64,
        immediate: None,
    };
    let good = RdmaWriteWqe::encode(&write);
    let mut no_meta = good;
    no_meta.ctrl1 &= !META_META_DESC;
    assert!(matches!(
        no_meta.decode(),
        Err(WqeDecodeError::NotRdmaWrite { .. })
    ));
    let mut not_last = good;
    not_last.ctrl2 &= !META_LAST;
    assert!(matches!(
        not_last.decode(),
        Err(WqeDecodeError::NotOneDescriptor { .. })
    ));
    let mut extension = good;
    extension.ctrl1 |= META_EXTENSION;
    assert!(matches!(
        extension.decode(),
        Err(WqeDecodeError::NotRdmaWrite { .. })
    ));
    let mut reserved = good;
    reserved.ctrl2 |= 1 << 1;
    assert!(matches!(
        reserved.decode(),
        Err(WqeDecodeError::NotOneDescriptor { .. })
    ));
    // rdma-core's empty write carries no buffer; it decodes as one of 0 bytes.
    let mut empty = RdmaWriteWqe::encode(&RdmaWrite {
        length_bytes: 0,
        ..write
    });
    empty.length = 0;
    assert_eq!(empty.decode().map(|decoded| decoded.length_bytes), Ok(0));
    let mut lengths = good;
    lengths.remote_length = 63;
    assert_eq!(
        lengths.decode().unwrap_err().to_string(),
        "EFA WQE carries 1 buffer(s), local length 64 and remote length 63"
    );
}
