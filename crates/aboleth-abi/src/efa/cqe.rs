//! EFA completion descriptors: the 8-byte send completion (`struct efa_io_tx_cdesc`) and the
//! 16-byte receive completion (`struct efa_io_rx_cdesc`, which an RDMA write with immediate
//! produces at the responder), their `flags` bits, builders (as a simulated device writes them)
//! and decoders. The phase bit alternates with the ring lap (1 in a CQ's first lap, in rdma-core).
//!
//! What this does not cover: the extended receive completion (`efa_io_rx_cdesc_ex`, source
//! addresses and write lengths above 64 KiB) and completion counters.

use crate::wire::wire_layout;

/// `flags` bit 0: phase (`EFA_IO_CDESC_COMMON_PHASE_MASK`).
pub const FLAGS_PHASE: u8 = 1 << 0;
/// `flags` bits 2:1: the queue type (`EFA_IO_CDESC_COMMON_Q_TYPE_MASK`).
pub const FLAGS_Q_TYPE_SHIFT: u32 = 1;
/// The mask of the queue type, in place.
pub const FLAGS_Q_TYPE_MASK: u8 = 0b11 << 1;
/// `flags` bit 3: the receive completion carries immediate data.
pub const FLAGS_HAS_IMM: u8 = 1 << 3;
/// `flags` bits 6:4: the operation (`EFA_IO_CDESC_COMMON_OP_TYPE_MASK`).
pub const FLAGS_OP_TYPE_SHIFT: u32 = 4;
/// The mask of the operation, in place.
pub const FLAGS_OP_TYPE_MASK: u8 = 0b111 << 4;
/// `flags` bit 7: no matching receive was posted (RDMA write with immediate, receive only).
pub const FLAGS_UNSOLICITED: u8 = 1 << 7;

/// A send completion.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxCompletion {
    /// The completed WQE's request id.
    pub req_id: u16,
    /// `COMP_STATUS_*`.
    pub status: u8,
    /// Phase, queue type, operation.
    pub flags: u8,
    /// The local QP.
    pub qp_num: u16,
    /// Reserved: zero.
    pub reserved16: u16,
}
wire_layout!(TxCompletion, 8, {
    req_id: u16 = 0, status: u8 = 2, flags: u8 = 3, qp_num: u16 = 4, reserved16: u16 = 6,
});

/// A receive completion.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxCompletion {
    /// The consumed receive's request id.
    pub req_id: u16,
    /// `COMP_STATUS_*`.
    pub status: u8,
    /// Phase, queue type, has-immediate, operation, unsolicited.
    pub flags: u8,
    /// The local QP.
    pub qp_num: u16,
    /// Bytes transferred, bits 15:0.
    pub length: u16,
    /// The sender's address handle index (0xFFFF: unknown).
    pub ah: u16,
    /// The sender's QP.
    pub src_qp_num: u16,
    /// The immediate data.
    pub imm: u32,
}
wire_layout!(RxCompletion, 16, {
    req_id: u16 = 0, status: u8 = 2, flags: u8 = 3, qp_num: u16 = 4, length: u16 = 6, ah: u16 = 8,
    src_qp_num: u16 = 10, imm: u32 = 12,
});

/// The `flags` byte of a completion.
pub fn flags(
    phase: bool,
    queue_type: u8,
    operation: u8,
    has_immediate: bool,
    unsolicited: bool,
) -> u8 {
    let mut flags = ((queue_type << FLAGS_Q_TYPE_SHIFT) & FLAGS_Q_TYPE_MASK)
        | ((operation << FLAGS_OP_TYPE_SHIFT) & FLAGS_OP_TYPE_MASK);
    if phase {
        flags |= FLAGS_PHASE;
    }
    if has_immediate {
        flags |= FLAGS_HAS_IMM;
    }
    if unsolicited {
        flags |= FLAGS_UNSOLICITED;
    }
    flags
}

impl TxCompletion {
    /// A send completion of WQE `req_id` on QP `qp_num`, written in lap `phase`.
    pub fn new(req_id: u16, status: u8, phase: bool, qp_num: u16, operation: u8) -> Self {
        Self {
            req_id,
            status,
            flags: flags(phase, super::SEND_QUEUE, operation, false, false),
            qp_num,
            reserved16: 0,
        }
    }

    /// Whether the device wrote it in lap `phase` (a consumer's test for a new entry).
    pub fn is_written_in(&self, phase: bool) -> bool {
        (self.flags & FLAGS_PHASE != 0) == phase
    }
}

impl RxCompletion {
    /// The receive completion of an RDMA write with immediate `imm` of `length` bytes, which
    /// consumed no posted receive (`unsolicited`); `ah` is the responder's address handle of the
    /// sender (0xFFFF when it has none).
    pub fn write_with_immediate(
        req_id: u16,
        phase: bool,
        qp_num: u16,
        length: u16,
        ah: u16,
        src_qp_num: u16,
        imm: u32,
    ) -> Self {
        Self {
            req_id,
            status: super::COMP_STATUS_OK,
            flags: flags(phase, super::RECV_QUEUE, super::RDMA_WRITE, true, true),
            qp_num,
            length,
            ah,
            src_qp_num,
            imm,
        }
    }

    /// The immediate data, when the completion carries one.
    pub fn immediate(&self) -> Option<u32> {
        (self.flags & FLAGS_HAS_IMM != 0).then_some(self.imm)
    }
}
