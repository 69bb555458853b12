//! 64-byte completion queue entries: the normal and error views of `struct mlx5_cqe64`, builders
//! for requester (send-side) CQEs as the simulated NIC writes them, the software ownership rule,
//! and a decoder.
//!
//! Requester CQEs, and the responder CQE of an RDMA write with immediate (write-with-immediate
//! signals, see [`super::receive`]), are built and decoded. 128-byte CQEs, CQE compression
//! (mini CQEs) and other responder CQEs are out of scope; the decoder rejects compressed
//! formats. The owner bit is the parity of the ring lap; a collapsed CQ (NVSHMEM's, one slot)
//! is polled by `wqe_counter` instead and ignores it.

use crate::wire::{Be16, Be32, Be64, wire_layout};

/// CQE opcode (op_own `[7:4]`): requester completion.
pub const CQE_OPCODE_REQ: u8 = 0;
/// CQE opcode: responder completion of an RDMA write with immediate (a receive was consumed).
pub const CQE_OPCODE_RESP_WR_IMM: u8 = 1;
/// CQE opcode: requester error; the error view applies.
pub const CQE_OPCODE_REQ_ERR: u8 = 13;
/// CQE opcode: responder error.
pub const CQE_OPCODE_RESP_ERR: u8 = 14;
/// CQE opcode: invalid, i.e. not yet written by the NIC.
pub const CQE_OPCODE_INVALID: u8 = 15;
/// op_own that rdma-core gives every CQE at creation (opcode INVALID, owner 0).
pub const CQE_INVALID_OP_OWN: u8 = 0xF0;
/// Byte NVSHMEM memsets its CQ buffers with (op_own = opcode INVALID, owner 1).
pub const CQE_INVALID_FILL_BYTE_NVSHMEM: u8 = 0xFF;

/// Error syndrome: local length error (a local buffer shorter than the operation).
pub const CQE_SYNDROME_LOCAL_LENGTH_ERR: u8 = 0x01;
/// Error syndrome: local QP operation error.
pub const CQE_SYNDROME_LOCAL_QP_OP_ERR: u8 = 0x02;
/// Error syndrome: local protection error.
pub const CQE_SYNDROME_LOCAL_PROT_ERR: u8 = 0x04;
/// Error syndrome: work request flushed (the QP is in error).
pub const CQE_SYNDROME_WR_FLUSH_ERR: u8 = 0x05;
/// Error syndrome: memory window bind error.
pub const CQE_SYNDROME_MW_BIND_ERR: u8 = 0x06;
/// Error syndrome: bad response.
pub const CQE_SYNDROME_BAD_RESP_ERR: u8 = 0x10;
/// Error syndrome: local access error.
pub const CQE_SYNDROME_LOCAL_ACCESS_ERR: u8 = 0x11;
/// Error syndrome: remote invalid request.
pub const CQE_SYNDROME_REMOTE_INVAL_REQ_ERR: u8 = 0x12;
/// Error syndrome: remote access error (bad rkey or bounds).
pub const CQE_SYNDROME_REMOTE_ACCESS_ERR: u8 = 0x13;
/// Error syndrome: remote operation error.
pub const CQE_SYNDROME_REMOTE_OP_ERR: u8 = 0x14;
/// Error syndrome: transport retry counter exceeded.
pub const CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR: u8 = 0x15;
/// Error syndrome: RNR retry counter exceeded.
pub const CQE_SYNDROME_RNR_RETRY_EXC_ERR: u8 = 0x16;
/// Error syndrome: remote aborted.
pub const CQE_SYNDROME_REMOTE_ABORTED_ERR: u8 = 0x22;

/// A readable name for a syndrome, for error messages.
pub fn cqe_syndrome_name(syndrome: u8) -> Option<&'static str> {
    Some(match syndrome {
        CQE_SYNDROME_LOCAL_LENGTH_ERR => "local length error",
        CQE_SYNDROME_LOCAL_QP_OP_ERR => "local QP operation error",
        CQE_SYNDROME_LOCAL_PROT_ERR => "local protection error",
        CQE_SYNDROME_WR_FLUSH_ERR => "work request flushed",
        CQE_SYNDROME_MW_BIND_ERR => "memory window bind error",
        CQE_SYNDROME_BAD_RESP_ERR => "bad response",
        CQE_SYNDROME_LOCAL_ACCESS_ERR => "local access error",
        CQE_SYNDROME_REMOTE_INVAL_REQ_ERR => "remote invalid request",
        CQE_SYNDROME_REMOTE_ACCESS_ERR => "remote access error",
        CQE_SYNDROME_REMOTE_OP_ERR => "remote operation error",
        CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR => "transport retry counter exceeded",
        CQE_SYNDROME_RNR_RETRY_EXC_ERR => "RNR retry counter exceeded",
        CQE_SYNDROME_REMOTE_ABORTED_ERR => "remote aborted",
        _ => return None,
    })
}

/// `struct mlx5_cqe64`, normal view (64 B).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cqe64 {
    /// Responder information (union in rdma-core); zero in requester CQEs.
    pub responder_info: [u8; 32],
    /// SRQ number or user index.
    pub srqn_uidx: Be32,
    /// Immediate, invalidated key or pkey (responder).
    pub imm_inval_pkey: Be32,
    /// Application field.
    pub app: u8,
    /// Application opcode.
    pub app_op: u8,
    /// Application info.
    pub app_info: Be16,
    /// Bytes transferred (for requester reads and atomics: the bytes written locally).
    pub byte_cnt: Be32,
    /// Completion timestamp.
    pub timestamp: Be64,
    /// Requester: opcode of the completed WQE `[31:24]` and QPN `[23:0]`.
    pub sop_drop_qpn: Be32,
    /// Requester: `wqe_index` of the completed WQE.
    pub wqe_counter: Be16,
    /// CQE signature.
    pub signature: u8,
    /// Opcode `[7:4]`, format `[3:2]`, solicited `[1]`, owner `[0]`.
    pub op_own: u8,
}
wire_layout!(Cqe64, 64, {
    responder_info: [u8; 32] = 0, srqn_uidx: Be32 = 32, imm_inval_pkey: Be32 = 36, app: u8 = 40,
    app_op: u8 = 41, app_info: Be16 = 42, byte_cnt: Be32 = 44, timestamp: Be64 = 48,
    sop_drop_qpn: Be32 = 56, wqe_counter: Be16 = 60, signature: u8 = 62, op_own: u8 = 63,
});

/// `struct mlx5_err_cqe`, the error view of the same 64 bytes (NVSHMEM's hardware fields at 52/53).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrorCqe64 {
    /// Reserved.
    pub reserved_0: [u8; 32],
    /// SRQ number.
    pub srqn: Be32,
    /// Reserved.
    pub reserved_1: [u8; 16],
    /// Hardware error syndrome.
    pub hw_err_synd: u8,
    /// Hardware syndrome type.
    pub hw_synd_type: u8,
    /// Vendor-specific syndrome.
    pub vendor_err_synd: u8,
    /// Syndrome (`CQE_SYNDROME_*`).
    pub syndrome: u8,
    /// Opcode of the failed WQE `[31:24]` and QPN `[23:0]`.
    pub s_wqe_opcode_qpn: Be32,
    /// `wqe_index` of the failed WQE.
    pub wqe_counter: Be16,
    /// CQE signature.
    pub signature: u8,
    /// Opcode `[7:4]` (= REQ_ERR), format, solicited, owner `[0]`.
    pub op_own: u8,
}
wire_layout!(ErrorCqe64, 64, {
    reserved_0: [u8; 32] = 0, srqn: Be32 = 32, reserved_1: [u8; 16] = 36, hw_err_synd: u8 = 52,
    hw_synd_type: u8 = 53, vendor_err_synd: u8 = 54, syndrome: u8 = 55,
    s_wqe_opcode_qpn: Be32 = 56, wqe_counter: Be16 = 60, signature: u8 = 62, op_own: u8 = 63,
});

/// The fields a requester CQE reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequesterCompletion {
    /// Opcode of the completed send WQE (`OPCODE_*`).
    pub send_opcode: u8,
    /// QPN (24 bits).
    pub qpn: u32,
    /// `wqe_index` of the completed WQE; RC completions retire every earlier WQE too.
    pub wqe_counter: u16,
}

fn op_own(opcode: u8, owner: bool) -> u8 {
    (opcode << 4) | u8::from(owner)
}

fn opcode_qpn(completion: &RequesterCompletion) -> Be32 {
    Be32::new((u32::from(completion.send_opcode) << 24) | (completion.qpn & 0x00ff_ffff))
}

impl Cqe64 {
    /// A CQE slot as rdma-core initialises it: all zero but `op_own = 0xF0`.
    pub fn invalid() -> Self {
        let mut bytes = [0u8; 64];
        bytes[63] = CQE_INVALID_OP_OWN;
        Self::from_bytes(&bytes)
    }

    /// A successful requester CQE (opcode REQ) with the given owner bit.
    pub fn requester(completion: &RequesterCompletion, byte_count: u32, owner: bool) -> Self {
        let mut cqe = Self::from_bytes(&[0u8; 64]);
        cqe.byte_cnt = Be32::new(byte_count);
        cqe.sop_drop_qpn = opcode_qpn(completion);
        cqe.wqe_counter = Be16::new(completion.wqe_counter);
        cqe.op_own = op_own(CQE_OPCODE_REQ, owner);
        cqe
    }
}

impl Cqe64 {
    /// The responder CQE of an RDMA write with immediate: the receiving QP, the index of the
    /// receive WQE it consumed, the bytes written and the immediate (host value).
    pub fn responder_write_immediate(
        qpn: u32,
        receive_wqe_counter: u16,
        byte_count: u32,
        immediate: u32,
        owner: bool,
    ) -> Self {
        let mut cqe = Self::from_bytes(&[0u8; 64]);
        cqe.imm_inval_pkey = Be32::new(immediate);
        cqe.byte_cnt = Be32::new(byte_count);
        cqe.sop_drop_qpn = Be32::new(qpn & 0x00ff_ffff);
        cqe.wqe_counter = Be16::new(receive_wqe_counter);
        cqe.op_own = op_own(CQE_OPCODE_RESP_WR_IMM, owner);
        cqe
    }
}

impl ErrorCqe64 {
    /// A requester error CQE (opcode REQ_ERR) with the given owner bit.
    pub fn requester_error(
        completion: &RequesterCompletion,
        syndrome: u8,
        vendor_err_synd: u8,
        owner: bool,
    ) -> Self {
        let mut cqe = Self::from_bytes(&[0u8; 64]);
        cqe.syndrome = syndrome;
        cqe.vendor_err_synd = vendor_err_synd;
        cqe.s_wqe_opcode_qpn = opcode_qpn(completion);
        cqe.wqe_counter = Be16::new(completion.wqe_counter);
        cqe.op_own = op_own(CQE_OPCODE_REQ_ERR, owner);
        cqe
    }
}

/// The owner bit the NIC writes into CQE number `cqe_index` (unbounded consumer counter) of a
/// ring of `cqe_count` entries (a power of two): the parity of the lap.
pub fn cqe_owner_for_index(cqe_index: u32, cqe_count: u32) -> bool {
    cqe_index & cqe_count != 0
}

/// rdma-core's `get_sw_cqe` rule: CQE `cqe_index` is ready for software when its opcode is not
/// INVALID and its owner bit equals the lap parity.
pub fn cqe_is_software_owned(op_own: u8, cqe_index: u32, cqe_count: u32) -> bool {
    op_own >> 4 != CQE_OPCODE_INVALID
        && (op_own & 1 != 0) == cqe_owner_for_index(cqe_index, cqe_count)
}

/// A decoded CQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodedCqe {
    /// Not written yet (opcode INVALID).
    Invalid {
        /// Owner bit as found.
        owner: bool,
    },
    /// Successful requester completion.
    Requester {
        /// Opcode, QPN and WQE counter.
        completion: RequesterCompletion,
        /// `byte_cnt`.
        byte_count: u32,
        /// Owner bit.
        owner: bool,
    },
    /// Responder completion of an RDMA write with immediate.
    ResponderWriteImmediate {
        /// The receiving QP.
        qpn: u32,
        /// Index of the receive WQE consumed.
        receive_wqe_counter: u16,
        /// Bytes written.
        byte_count: u32,
        /// The immediate (host value).
        immediate: u32,
        /// Owner bit.
        owner: bool,
    },
    /// Requester error.
    RequesterError {
        /// Opcode, QPN and WQE counter of the failed WQE.
        completion: RequesterCompletion,
        /// `CQE_SYNDROME_*`.
        syndrome: u8,
        /// Vendor syndrome.
        vendor_err_synd: u8,
        /// Owner bit.
        owner: bool,
    },
}

/// Why a CQE could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CqeDecodeError {
    /// A responder or other CQE opcode this crate does not decode.
    #[error("CQE opcode {opcode} is not a requester completion")]
    UnsupportedOpcode {
        /// op_own `[7:4]`.
        opcode: u8,
    },
    /// A compressed (mini-CQE) format.
    #[error("CQE format {format} (compressed) is not supported")]
    CompressedFormat {
        /// op_own `[3:2]`.
        format: u8,
    },
}

/// Decodes a 64-byte CQE.
pub fn decode_cqe(bytes: &[u8; 64]) -> Result<DecodedCqe, CqeDecodeError> {
    let cqe = Cqe64::from_bytes(bytes);
    let (opcode, format, owner) = (cqe.op_own >> 4, (cqe.op_own >> 2) & 3, cqe.op_own & 1 != 0);
    if opcode == CQE_OPCODE_INVALID {
        return Ok(DecodedCqe::Invalid { owner });
    }
    if format != 0 {
        return Err(CqeDecodeError::CompressedFormat { format });
    }
    let completion_of = |opcode_qpn: Be32, wqe_counter: Be16| RequesterCompletion {
        send_opcode: (opcode_qpn.get() >> 24) as u8,
        qpn: opcode_qpn.get() & 0x00ff_ffff,
        wqe_counter: wqe_counter.get(),
    };
    match opcode {
        CQE_OPCODE_REQ => Ok(DecodedCqe::Requester {
            completion: completion_of(cqe.sop_drop_qpn, cqe.wqe_counter),
            byte_count: cqe.byte_cnt.get(),
            owner,
        }),
        CQE_OPCODE_RESP_WR_IMM => Ok(DecodedCqe::ResponderWriteImmediate {
            qpn: cqe.sop_drop_qpn.get() & 0x00ff_ffff,
            receive_wqe_counter: cqe.wqe_counter.get(),
            byte_count: cqe.byte_cnt.get(),
            immediate: cqe.imm_inval_pkey.get(),
            owner,
        }),
        CQE_OPCODE_REQ_ERR => {
            let error = ErrorCqe64::from_bytes(bytes);
            Ok(DecodedCqe::RequesterError {
                completion: completion_of(error.s_wqe_opcode_qpn, error.wqe_counter),
                syndrome: error.syndrome,
                vendor_err_synd: error.vendor_err_synd,
                owner,
            })
        }
        _ => Err(CqeDecodeError::UnsupportedOpcode { opcode }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ownership_follows_rdma_core_get_sw_cqe() {
        // Ring of 4: first lap expects owner 0, second lap owner 1.
        let requester = |owner| Cqe64::requester(&RequesterCompletion::default(), 0, owner).op_own;
        assert!(cqe_is_software_owned(requester(false), 3, 4));
        assert!(!cqe_is_software_owned(requester(true), 3, 4));
        assert!(cqe_is_software_owned(requester(true), 5, 4));
        assert!(!cqe_is_software_owned(requester(false), 5, 4));
        // Fresh slots are never valid, whatever the lap.
        for index in 0..8 {
            assert!(!cqe_is_software_owned(CQE_INVALID_OP_OWN, index, 4));
            assert!(!cqe_is_software_owned(
                CQE_INVALID_FILL_BYTE_NVSHMEM,
                index,
                4
            ));
        }
    }

    #[test]
    fn builders_put_fields_at_the_documented_offsets() {
        let completion = RequesterCompletion {
            send_opcode: 0x15,
            qpn: 0x12_3456,
            wqe_counter: 0xbeef,
        };
        let bytes = Cqe64::requester(&completion, 0x0102_0304, true).to_bytes();
        assert_eq!(&bytes[44..48], &[1, 2, 3, 4]);
        assert_eq!(
            &bytes[56..64],
            &[0x15, 0x12, 0x34, 0x56, 0xbe, 0xef, 0, 0x01]
        );
        let bytes =
            ErrorCqe64::requester_error(&completion, CQE_SYNDROME_REMOTE_ACCESS_ERR, 0x88, false)
                .to_bytes();
        assert_eq!(
            &bytes[54..64],
            &[0x88, 0x13, 0x15, 0x12, 0x34, 0x56, 0xbe, 0xef, 0, 0xd0]
        );
        assert_eq!(cqe_syndrome_name(bytes[55]), Some("remote access error"));
    }

    #[test]
    fn decoder_handles_invalid_and_rejects_others() {
        assert_eq!(
            decode_cqe(&Cqe64::invalid().to_bytes()),
            Ok(DecodedCqe::Invalid { owner: false })
        );
        assert_eq!(
            decode_cqe(&[0xff; 64]),
            Ok(DecodedCqe::Invalid { owner: true })
        );
        let mut bytes = [0u8; 64];
        bytes[63] = CQE_OPCODE_RESP_ERR << 4;
        assert_eq!(
            decode_cqe(&bytes),
            Err(CqeDecodeError::UnsupportedOpcode { opcode: 14 })
        );
        bytes[63] = 0x0c;
        assert_eq!(
            decode_cqe(&bytes),
            Err(CqeDecodeError::CompressedFormat { format: 3 })
        );
    }
}
