//! The AMD Pensando Ionic (RoCEv2 RC) send-queue, completion and doorbell encodings, written
//! clean-room from the public layouts of rdma-core's `providers/ionic/ionic_fw_types.h` and the
//! doorbell rule of `providers/ionic/ionic_queue.h`, and cross-checked against those headers
//! (rdma-core 61.0's, fetched and pinned by `tests/c/fetch_rdma_core.py`) by
//! `tests/ionic_crosscheck.rs`.
//!
//! Multi-byte WQE and CQE fields are big-endian except the 64-bit WQE and receive-CQE ids,
//! which the device hands back as written. One send WQE is 64 bytes: a 16-byte header, then a
//! 48-byte body ([`wqe`]); one CQE is 32 bytes ([`cqe`]); the doorbell is one little-endian
//! 64-bit MMIO store of the queue id and the producer index ([`sq_doorbell_value`]). Firmware
//! ABI versions 1 and 2 differ in the operation codes and the atomic body ([`IonicVersion`]).
//! The GPU-side counters of a send queue are [`queue`]. What this module does not do: allocate
//! queues, model the device, or encode sends, receives, memory registration or windows, which
//! the lowering does not use.
//!
//! Constant names follow rdma-core's `IONIC_V1_*` / `IONIC_V2_*` / `IONIC_*` names without the
//! prefix, so they can be grepped.

pub mod cqe;
pub mod queue;
pub mod wqe;

/// Bytes of one send WQE (`sizeof(struct ionic_v1_wqe)`).
pub const WQE_BYTES: usize = 64;
/// Bytes of one CQE (`sizeof(struct ionic_v1_cqe)`).
pub const CQE_BYTES: usize = 32;
/// Scatter-gather entries a 64-byte WQE's payload holds (`ionic_v1_pld.sgl`).
pub const WQE_SGES: usize = 2;
/// Inline payload bytes a 64-byte WQE holds (`ionic_v1_pld.data`).
pub const WQE_INLINE_BYTES: usize = 32;

/// The device's firmware ABI version, which picks the operation codes and the atomic body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IonicVersion {
    /// Version 1: `IONIC_V1_OP_*`, atomics carry one scatter entry for the old value.
    V1,
    /// Version 2 and later: `IONIC_V2_OP_*`, atomics carry the old value's address and lkey.
    V2,
}

/// Version 1 send operation codes (`enum ionic_v1_op`).
pub mod op_v1 {
    /// `IONIC_V1_OP_SEND`.
    pub const SEND: u8 = 0;
    /// `IONIC_V1_OP_RDMA_READ`.
    pub const RDMA_READ: u8 = 3;
    /// `IONIC_V1_OP_RDMA_WRITE`.
    pub const RDMA_WRITE: u8 = 4;
    /// `IONIC_V1_OP_RDMA_WRITE_IMM`.
    pub const RDMA_WRITE_IMM: u8 = 5;
    /// `IONIC_V1_OP_ATOMIC_CS`.
    pub const ATOMIC_CS: u8 = 6;
    /// `IONIC_V1_OP_ATOMIC_FA`.
    pub const ATOMIC_FA: u8 = 7;
}

/// Version 2 send operation codes (`enum ionic_v2_op`).
pub mod op_v2 {
    /// `IONIC_V2_OPSL_OUT`: the operation moves data out.
    pub const OPSL_OUT: u8 = 0x20;
    /// `IONIC_V2_OPSL_IMM`: it carries immediate data.
    pub const OPSL_IMM: u8 = 0x40;
    /// `IONIC_V2_OP_SEND`.
    pub const SEND: u8 = OPSL_OUT;
    /// `IONIC_V2_OP_RDMA_WRITE`.
    pub const RDMA_WRITE: u8 = 0x1 | OPSL_OUT;
    /// `IONIC_V2_OP_RDMA_WRITE_IMM`.
    pub const RDMA_WRITE_IMM: u8 = RDMA_WRITE | OPSL_IMM;
    /// `IONIC_V2_OP_RDMA_READ`.
    pub const RDMA_READ: u8 = 0x2;
    /// `IONIC_V2_OP_ATOMIC_CS`.
    pub const ATOMIC_CS: u8 = 0x4;
    /// `IONIC_V2_OP_ATOMIC_FA`.
    pub const ATOMIC_FA: u8 = 0x5;
}

/// WQE flag: wait for earlier reads and atomics first (`IONIC_V1_FLAG_FENCE`).
pub const FLAG_FENCE: u16 = 1 << 0;
/// WQE flag: solicited event (`IONIC_V1_FLAG_SOL`).
pub const FLAG_SOL: u16 = 1 << 1;
/// WQE flag: the payload is inline data (`IONIC_V1_FLAG_INL`).
pub const FLAG_INL: u16 = 1 << 2;
/// WQE flag: post a completion (`IONIC_V1_FLAG_SIG`).
pub const FLAG_SIG: u16 = 1 << 3;
/// WQE flag: the ring lap's color (`IONIC_V1_FLAG_COLOR`).
pub const FLAG_COLOR: u16 = 1 << 4;

/// CQE `qid_type_flags`: the lap's color (`IONIC_V1_CQE_COLOR`).
pub const CQE_COLOR: u32 = 1 << 0;
/// CQE `qid_type_flags`: an error completion (`IONIC_V1_CQE_ERROR`).
pub const CQE_ERROR: u32 = 1 << 1;
/// CQE `qid_type_flags`: where the type starts (`IONIC_V1_CQE_TYPE_SHIFT`).
pub const CQE_TYPE_SHIFT: u32 = 5;
/// CQE `qid_type_flags`: the type's mask after the shift (`IONIC_V1_CQE_TYPE_MASK`).
pub const CQE_TYPE_MASK: u32 = 0x7;
/// CQE `qid_type_flags`: where the queue id starts (`IONIC_V1_CQE_QID_SHIFT`).
pub const CQE_QID_SHIFT: u32 = 8;
/// CQE type: a receive (`IONIC_V1_CQE_TYPE_RECV`).
pub const CQE_TYPE_RECV: u32 = 1;
/// CQE type: send completions up to a message sequence number (`IONIC_V1_CQE_TYPE_SEND_MSN`).
pub const CQE_TYPE_SEND_MSN: u32 = 2;
/// CQE type: a local (non-packet-generating) send WQE (`IONIC_V1_CQE_TYPE_SEND_NPG`).
pub const CQE_TYPE_SEND_NPG: u32 = 3;
/// Receive CQE `src_qpn_op`: the source QP's bits (`IONIC_V1_CQE_RECV_QPN_MASK`).
pub const CQE_RECV_QPN_MASK: u32 = 0x00ff_ffff;
/// Receive CQE `src_qpn_op`: where the operation starts (`IONIC_V1_CQE_RECV_OP_SHIFT`).
pub const CQE_RECV_OP_SHIFT: u32 = 24;
/// Receive CQE `src_qpn_op`: the operation's mask (`IONIC_V1_CQE_RECV_OP_MASK`).
pub const CQE_RECV_OP_MASK: u32 = 0x1f;
/// Receive CQE operation: an RDMA write with immediate (`IONIC_V1_CQE_RECV_OP_RDMA_IMM`).
pub const CQE_RECV_OP_RDMA_IMM: u32 = 3;

/// Completion status: success (`IONIC_STS_OK`).
pub const STS_OK: u32 = 0;
/// Completion status: local length error (`IONIC_STS_LOCAL_LEN_ERR`).
pub const STS_LOCAL_LEN_ERR: u32 = 1;
/// Completion status: local protection error (`IONIC_STS_LOCAL_PROT_ERR`).
pub const STS_LOCAL_PROT_ERR: u32 = 3;
/// Completion status: flushed (`IONIC_STS_WQE_FLUSHED_ERR`).
pub const STS_WQE_FLUSHED_ERR: u32 = 4;
/// Completion status: remote access error (`IONIC_STS_REMOTE_ACC_ERR`).
pub const STS_REMOTE_ACC_ERR: u32 = 9;
/// Completion status: retries exceeded (`IONIC_STS_RETRY_EXCEEDED`).
pub const STS_RETRY_EXCEEDED: u32 = 11;

/// Bits of a queue id in a doorbell (`IONIC_QID_MASK`).
pub const QID_MASK: u64 = (1 << 24) - 1;
/// Where the queue id sits in a doorbell value (`IONIC_DBELL_QID_SHIFT`).
pub const DBELL_QID_SHIFT: u32 = 24;
/// Doorbell bit: arm the CQ (`IONIC_DBELL_RING_ARM`).
pub const DBELL_RING_ARM: u64 = 1 << 16;
/// Doorbell bit: arm for solicited events only (`IONIC_DBELL_RING_SONLY`).
pub const DBELL_RING_SONLY: u64 = 1 << 17;

/// The 64-bit value that rings a send queue: its queue id above [`DBELL_QID_SHIFT`] and the new
/// producer index (`ionic_queue_dbell_val`), stored little-endian into the context's doorbell
/// page at the send queue type's slot (`ionic_dbell_ring(&dbpage[sq_qtype], ...)`). The
/// producer index is the ring position (it wraps at the ring's size, a power of two).
pub fn sq_doorbell_value(queue_id: u32, producer_index: u16) -> u64 {
    ((u64::from(queue_id) & QID_MASK) << DBELL_QID_SHIFT) | u64::from(producer_index)
}

/// The color of WQE `index` (counting from 0 across laps) on a ring of `entries`: rdma-core
/// starts a send queue's color at 1 and flips it each time the producer wraps to 0
/// (`ionic_color_wrap`), so the first lap has it set.
pub fn sq_color_of(index: u64, entries: u64) -> bool {
    (index / entries).is_multiple_of(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_doorbell_carries_the_queue_id_above_the_producer_index() {
        assert_eq!(sq_doorbell_value(0x12, 0x0034), 0x1200_0034);
        assert_eq!(sq_doorbell_value(0xff_ffff, 0xffff), 0xffff_ff00_ffff);
        // A queue id wider than 24 bits loses its high bits, as the mask does in rdma-core.
        assert_eq!(sq_doorbell_value(0x1ff_ffff, 1), 0xffff_ff00_0001);
        assert!(sq_color_of(0, 64) && sq_color_of(63, 64));
        assert!(!sq_color_of(64, 64) && sq_color_of(128, 64));
    }
}
