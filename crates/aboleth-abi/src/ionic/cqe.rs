//! Ionic completions (`struct ionic_v1_cqe`, 32 bytes): the send form, which completes every
//! WQE of a QP up to a message sequence number (`CQE_TYPE_SEND_MSN`), and the receive form of an
//! RDMA write with immediate (`CQE_TYPE_RECV` with operation `CQE_RECV_OP_RDMA_IMM`), built as a
//! device writes them and decoded as rdma-core's `ionic_poll_cq` reads them. The last word holds
//! the queue id, the type, the error bit and the lap's color (a CQ's first lap has color 1).
//!
//! What it does not build: receives of sends, local (`SEND_NPG`) completions of memory
//! operations, indirect receives.

use super::{
    CQE_COLOR, CQE_ERROR, CQE_QID_SHIFT, CQE_RECV_OP_MASK, CQE_RECV_OP_RDMA_IMM, CQE_RECV_OP_SHIFT,
    CQE_RECV_QPN_MASK, CQE_TYPE_MASK, CQE_TYPE_RECV, CQE_TYPE_SEND_MSN, CQE_TYPE_SHIFT,
};
use crate::wire::{Be32, wire_layout};

/// `struct ionic_v1_cqe`, with the union's 24 bytes kept as bytes (their form depends on the
/// type in `qid_type_flags`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    /// `recv` or `send`, by type.
    pub body: [u8; 24],
    /// The status when `CQE_ERROR` is set, else the received length.
    pub status_length: Be32,
    /// Queue id, type, error, color.
    pub qid_type_flags: Be32,
}
wire_layout!(Cqe, 32, { body: [u8; 24] = 0, status_length: Be32 = 24, qid_type_flags: Be32 = 28 });

/// Where the send form keeps its message sequence number (`send.msg_msn`).
pub const SEND_MSG_MSN_OFFSET_BYTES: usize = 4;
/// Where the receive form keeps the receive WQE id (`recv.wqe_id`, host order).
pub const RECV_WQE_ID_OFFSET_BYTES: usize = 0;
/// Where the receive form keeps the source QP and the operation (`recv.src_qpn_op`).
pub const RECV_SRC_QPN_OP_OFFSET_BYTES: usize = 8;
/// Where the receive form keeps the immediate data (`recv.imm_data_rkey`).
pub const RECV_IMM_DATA_OFFSET_BYTES: usize = 20;

/// A completion in host terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Every send WQE of QP `qid` up to message `msn` completed (or, with `status`, failed).
    Send {
        /// The QP.
        qid: u32,
        /// The message sequence number.
        msn: u32,
        /// `Some(status)` for an error completion.
        status: Option<u32>,
    },
    /// An RDMA write with immediate landed at QP `qid`, consuming receive WQE `wqe_id`.
    ReceiveWriteImmediate {
        /// The QP.
        qid: u32,
        /// The receive WQE's id.
        wqe_id: u64,
        /// The sender's QP.
        source_qp: u32,
        /// Bytes written.
        length: u32,
        /// The immediate (host order).
        immediate: u32,
    },
}

/// Why 32 bytes are not a completion this module reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CqeDecodeError {
    /// A type or receive operation this module does not read.
    #[error(
        "Ionic CQE of type {kind} (receive operation {operation}) is not a send or a write-with-immediate receive"
    )]
    Kind {
        /// The type field.
        kind: u32,
        /// The receive operation field (0 for sends).
        operation: u32,
    },
}

fn qid_type_flags(qid: u32, kind: u32, error: bool, color: bool) -> Be32 {
    let mut word = (qid << CQE_QID_SHIFT) | ((kind & CQE_TYPE_MASK) << CQE_TYPE_SHIFT);
    if error {
        word |= CQE_ERROR;
    }
    if color {
        word |= CQE_COLOR;
    }
    Be32::new(word)
}

impl Cqe {
    /// The send completion of QP `qid` up to message `msn`, in a lap of `color`.
    pub fn send(qid: u32, msn: u32, status: Option<u32>, color: bool) -> Self {
        let mut body = [0u8; 24];
        body[SEND_MSG_MSN_OFFSET_BYTES..SEND_MSG_MSN_OFFSET_BYTES + 4]
            .copy_from_slice(&msn.to_be_bytes());
        Cqe {
            body,
            status_length: Be32::new(status.unwrap_or(0)),
            qid_type_flags: qid_type_flags(qid, CQE_TYPE_SEND_MSN, status.is_some(), color),
        }
    }

    /// The receive completion of an RDMA write with immediate at QP `qid`.
    pub fn receive_write_immediate(
        qid: u32,
        wqe_id: u64,
        (source_qp, length, immediate): (u32, u32, u32),
        color: bool,
    ) -> Self {
        let mut body = [0u8; 24];
        body[RECV_WQE_ID_OFFSET_BYTES..RECV_WQE_ID_OFFSET_BYTES + 8]
            .copy_from_slice(&wqe_id.to_le_bytes());
        let src_qpn_op =
            (source_qp & CQE_RECV_QPN_MASK) | (CQE_RECV_OP_RDMA_IMM << CQE_RECV_OP_SHIFT);
        body[RECV_SRC_QPN_OP_OFFSET_BYTES..RECV_SRC_QPN_OP_OFFSET_BYTES + 4]
            .copy_from_slice(&src_qpn_op.to_be_bytes());
        body[RECV_IMM_DATA_OFFSET_BYTES..RECV_IMM_DATA_OFFSET_BYTES + 4]
            .copy_from_slice(&immediate.to_be_bytes());
        Cqe {
            body,
            status_length: Be32::new(length),
            qid_type_flags: qid_type_flags(qid, CQE_TYPE_RECV, false, color),
        }
    }

    /// Whether the device wrote this CQE in the lap of `color` (what a poller compares).
    pub fn has_color(&self, color: bool) -> bool {
        (self.qid_type_flags.get() & CQE_COLOR != 0) == color
    }

    /// What the CQE says.
    pub fn decode(&self) -> Result<Completion, CqeDecodeError> {
        let word = self.qid_type_flags.get();
        let qid = word >> CQE_QID_SHIFT;
        let kind = (word >> CQE_TYPE_SHIFT) & CQE_TYPE_MASK;
        let be32_at = |offset: usize| {
            u32::from_be_bytes(self.body[offset..offset + 4].try_into().expect("4 bytes"))
        };
        match kind {
            CQE_TYPE_SEND_MSN => Ok(Completion::Send {
                qid,
                msn: be32_at(SEND_MSG_MSN_OFFSET_BYTES),
                status: (word & CQE_ERROR != 0).then(|| self.status_length.get()),
            }),
            CQE_TYPE_RECV => {
                let src_qpn_op = be32_at(RECV_SRC_QPN_OP_OFFSET_BYTES);
                let operation = (src_qpn_op >> CQE_RECV_OP_SHIFT) & CQE_RECV_OP_MASK;
                if operation != CQE_RECV_OP_RDMA_IMM {
                    return Err(CqeDecodeError::Kind { kind, operation });
                }
                Ok(Completion::ReceiveWriteImmediate {
                    qid,
                    wqe_id: u64::from_le_bytes(
                        self.body[RECV_WQE_ID_OFFSET_BYTES..RECV_WQE_ID_OFFSET_BYTES + 8]
                            .try_into()
                            .expect("8 bytes"),
                    ),
                    source_qp: src_qpn_op & CQE_RECV_QPN_MASK,
                    length: self.status_length.get(),
                    immediate: be32_at(RECV_IMM_DATA_OFFSET_BYTES),
                })
            }
            _ => Err(CqeDecodeError::Kind { kind, operation: 0 }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_and_receive_completions_round_trip() {
        let send = Cqe::send(0x12_3456, 99, None, true);
        assert!(send.has_color(true) && !send.has_color(false));
        assert_eq!(
            send.decode(),
            Ok(Completion::Send {
                qid: 0x12_3456,
                msn: 99,
                status: None
            })
        );
        let failed = Cqe::send(5, 1, Some(crate::ionic::STS_REMOTE_ACC_ERR), false);
        assert_eq!(
            failed.decode(),
            Ok(Completion::Send {
                qid: 5,
                msn: 1,
                status: Some(crate::ionic::STS_REMOTE_ACC_ERR)
            })
        );
        let receive = Cqe::receive_write_immediate(8, 3, (0x77, 4096, 0xcafe), true);
        assert_eq!(
            receive.decode(),
            Ok(Completion::ReceiveWriteImmediate {
                qid: 8,
                wqe_id: 3,
                source_qp: 0x77,
                length: 4096,
                immediate: 0xcafe
            })
        );
    }
}
