//! The 64-byte EFA send WQE of an RDMA write (with or without immediate data): `struct
//! efa_io_tx_wqe` with its metadata descriptor (`struct efa_io_tx_meta_desc`) and the `rdma_req`
//! arm of its data union (`struct efa_io_remote_mem_addr`, then one `struct
//! efa_io_tx_buf_desc`), flattened into one struct so that every field has its offset asserted.
//! An encoder and a decoder; the decoder checks the bits the device requires.
//!
//! The metadata's last bytes differ across rdma-core releases (56.1: `reserved` and
//! `reserved2[12]`; later ones: `ctrl3` processing hints and an extended request id), all of them
//! zero here: the WQE means the same to both.

use crate::wire::wire_layout;

use super::{RDMA_WRITE, TX_DESC_NUM_RDMA_BUFS};

/// `ctrl1` bits 3:0: the operation (`EFA_IO_TX_META_DESC_OP_TYPE_MASK`).
pub const META_OP_TYPE_MASK: u8 = 0x0f;
/// `ctrl1` bit 4: `immediate_data` is valid (`EFA_IO_TX_META_DESC_HAS_IMM_MASK`).
pub const META_HAS_IMM: u8 = 1 << 4;
/// `ctrl1` bit 5: inline message (`EFA_IO_TX_META_DESC_INLINE_MSG_MASK`); never set here.
pub const META_INLINE_MSG: u8 = 1 << 5;
/// `ctrl1` bit 6: extended metadata, must be zero (`EFA_IO_TX_META_DESC_META_EXTENSION_MASK`).
pub const META_EXTENSION: u8 = 1 << 6;
/// `ctrl1` bit 7: this is a metadata descriptor, must be set (`EFA_IO_TX_META_DESC_META_DESC_MASK`).
pub const META_META_DESC: u8 = 1 << 7;
/// `ctrl2` bit 0: the phase of the ring lap (`EFA_IO_TX_META_DESC_PHASE_MASK`).
pub const META_PHASE: u8 = 1 << 0;
/// `ctrl2` bit 2: first descriptor of the transaction, must be set.
pub const META_FIRST: u8 = 1 << 2;
/// `ctrl2` bit 3: last descriptor of the transaction, must be set.
pub const META_LAST: u8 = 1 << 3;
/// `ctrl2` bit 4: post a send completion once transmitted (`EFA_IO_TX_META_DESC_COMP_REQ_MASK`).
pub const META_COMP_REQ: u8 = 1 << 4;
/// `ctrl2`'s must-be-zero bits: 1 and 7:5.
pub const META_CTRL2_RESERVED: u8 = 0b1110_0010;
/// Bits 23:0 of a buffer descriptor's `lkey` (`EFA_IO_TX_BUF_DESC_LKEY_MASK`).
pub const BUF_DESC_LKEY_MASK: u32 = 0x00ff_ffff;

/// An RDMA write as one 64-byte send WQE.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RdmaWriteWqe {
    /// Request id, reported back in the completion.
    pub req_id: u16,
    /// Operation, has-immediate and metadata bits.
    pub ctrl1: u8,
    /// Phase, first, last and completion-request bits.
    pub ctrl2: u8,
    /// The destination QP number.
    pub dest_qp_num: u16,
    /// Buffer descriptors that follow (1 for RDMA).
    pub length: u16,
    /// Immediate data, delivered in the responder's receive completion when `has_imm`.
    pub immediate_data: u32,
    /// Address handle of the destination.
    pub ah: u16,
    /// Processing hints in newer rdma-core, reserved in 56.1: zero.
    pub ctrl3: u8,
    /// Reserved: zero.
    pub reserved: u8,
    /// The destination QP's queue key.
    pub qkey: u32,
    /// Reserved (and, in newer rdma-core, the extended request id): zero.
    pub reserved2: [u8; 12],
    /// Remote memory: bytes to write.
    pub remote_length: u32,
    /// Remote memory: the rkey.
    pub rkey: u32,
    /// Remote memory: address bits 31:0.
    pub remote_address_low: u32,
    /// Remote memory: address bits 63:32.
    pub remote_address_high: u32,
    /// Local buffer: bytes to read.
    pub local_length: u32,
    /// Local buffer: the lkey (bits 23:0).
    pub lkey: u32,
    /// Local buffer: address bits 31:0.
    pub local_address_low: u32,
    /// Local buffer: address bits 63:32.
    pub local_address_high: u32,
}
wire_layout!(RdmaWriteWqe, 64, {
    req_id: u16 = 0, ctrl1: u8 = 2, ctrl2: u8 = 3, dest_qp_num: u16 = 4, length: u16 = 6,
    immediate_data: u32 = 8, ah: u16 = 12, ctrl3: u8 = 14, reserved: u8 = 15, qkey: u32 = 16,
    reserved2: [u8; 12] = 20, remote_length: u32 = 32, rkey: u32 = 36, remote_address_low: u32 = 40,
    remote_address_high: u32 = 44, local_length: u32 = 48, lkey: u32 = 52, local_address_low: u32 = 56,
    local_address_high: u32 = 60,
});

/// What one RDMA write says, in host terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdmaWrite {
    /// Request id, reported back in the completion (the ring index modulo 2^16).
    pub req_id: u16,
    /// The ring lap's phase bit.
    pub phase: bool,
    /// Whether a send completion is posted once it is transmitted.
    pub completion_requested: bool,
    /// The destination QP number.
    pub dest_qp_num: u16,
    /// The destination's address handle.
    pub ah: u16,
    /// The destination QP's queue key.
    pub qkey: u32,
    /// The remote address written.
    pub remote_address: u64,
    /// Its rkey.
    pub rkey: u32,
    /// The local address read.
    pub local_address: u64,
    /// Its lkey (24 bits).
    pub lkey: u32,
    /// Bytes written.
    pub length_bytes: u32,
    /// Immediate data, delivered to the responder's receive completion.
    pub immediate: Option<u32>,
}

/// Why 64 bytes are not an RDMA write WQE this module would have written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WqeDecodeError {
    /// `ctrl1` lacks the metadata bit, has the inline or extension bit, or names another
    /// operation.
    #[error("EFA WQE ctrl1 {ctrl1:#04x} is not an RDMA write metadata descriptor")]
    NotRdmaWrite {
        /// The byte found.
        ctrl1: u8,
    },
    /// `ctrl2` lacks first or last (the device needs both on a one-descriptor transaction), or
    /// sets a must-be-zero bit.
    #[error(
        "EFA WQE ctrl2 {ctrl2:#04x} lacks the first or the last bit, or sets a must-be-zero bit"
    )]
    NotOneDescriptor {
        /// The byte found.
        ctrl2: u8,
    },
    /// The buffer count is not one (or zero, for an empty write), or the lengths differ.
    #[error(
        "EFA WQE carries {buffers} buffer(s), local length {local_length} and remote length {remote_length}"
    )]
    BadLengths {
        /// The metadata's `length`.
        buffers: u16,
        /// The local buffer's length.
        local_length: u32,
        /// The remote memory's length.
        remote_length: u32,
    },
    /// An lkey wider than 24 bits.
    #[error("EFA WQE lkey {lkey:#x} does not fit 24 bits")]
    WideLkey {
        /// The word found.
        lkey: u32,
    },
}

impl RdmaWriteWqe {
    /// The WQE for `write`. Panics on an lkey wider than 24 bits (a caller bug: keys come from
    /// registration, which never makes one).
    pub fn encode(write: &RdmaWrite) -> Self {
        assert!(
            write.lkey & !BUF_DESC_LKEY_MASK == 0,
            "EFA lkeys are 24 bits"
        );
        let mut ctrl1 = (RDMA_WRITE & META_OP_TYPE_MASK) | META_META_DESC;
        if write.immediate.is_some() {
            ctrl1 |= META_HAS_IMM;
        }
        let mut ctrl2 = META_FIRST | META_LAST;
        if write.phase {
            ctrl2 |= META_PHASE;
        }
        if write.completion_requested {
            ctrl2 |= META_COMP_REQ;
        }
        Self {
            req_id: write.req_id,
            ctrl1,
            ctrl2,
            dest_qp_num: write.dest_qp_num,
            length: TX_DESC_NUM_RDMA_BUFS,
            immediate_data: write.immediate.unwrap_or(0),
            ah: write.ah,
            ctrl3: 0,
            reserved: 0,
            qkey: write.qkey,
            reserved2: [0; 12],
            remote_length: write.length_bytes,
            rkey: write.rkey,
            remote_address_low: write.remote_address as u32,
            remote_address_high: (write.remote_address >> 32) as u32,
            local_length: write.length_bytes,
            lkey: write.lkey,
            local_address_low: write.local_address as u32,
            local_address_high: (write.local_address >> 32) as u32,
        }
    }

    /// What the WQE says, checking the bits the device requires and this module's own rules
    /// (one buffer, equal lengths).
    pub fn decode(&self) -> Result<RdmaWrite, WqeDecodeError> {
        if self.ctrl1 & META_META_DESC == 0
            || self.ctrl1 & (META_INLINE_MSG | META_EXTENSION) != 0
            || self.ctrl1 & META_OP_TYPE_MASK != RDMA_WRITE
        {
            return Err(WqeDecodeError::NotRdmaWrite { ctrl1: self.ctrl1 });
        }
        if self.ctrl2 & (META_FIRST | META_LAST) != META_FIRST | META_LAST
            || self.ctrl2 & META_CTRL2_RESERVED != 0
        {
            return Err(WqeDecodeError::NotOneDescriptor { ctrl2: self.ctrl2 });
        }
        // rdma-core writes an empty RDMA write with no buffer; this encoder with one of 0 bytes.
        let empty_without_buffer =
            self.length == 0 && self.local_length == 0 && self.remote_length == 0;
        if !(self.length == TX_DESC_NUM_RDMA_BUFS || empty_without_buffer)
            || self.local_length != self.remote_length
        {
            return Err(WqeDecodeError::BadLengths {
                buffers: self.length,
                local_length: self.local_length,
                remote_length: self.remote_length,
            });
        }
        if self.lkey & !BUF_DESC_LKEY_MASK != 0 {
            return Err(WqeDecodeError::WideLkey { lkey: self.lkey });
        }
        Ok(RdmaWrite {
            req_id: self.req_id,
            phase: self.ctrl2 & META_PHASE != 0,
            completion_requested: self.ctrl2 & META_COMP_REQ != 0,
            dest_qp_num: self.dest_qp_num,
            ah: self.ah,
            qkey: self.qkey,
            remote_address: u64::from(self.remote_address_low)
                | (u64::from(self.remote_address_high) << 32),
            rkey: self.rkey,
            local_address: u64::from(self.local_address_low)
                | (u64::from(self.local_address_high) << 32),
            lkey: self.lkey,
            length_bytes: self.local_length,
            immediate: (self.ctrl1 & META_HAS_IMM != 0).then_some(self.immediate_data),
        })
    }
}
