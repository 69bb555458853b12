//! The mlx5 send-queue, completion-queue and doorbell encodings, written clean-room from the public
//! layouts of rdma-core's `mlx5dv.h` (offset tables in `reference/gpu-initiated-comm-anchors.md`
//! section 5) and cross-checked against that header by `tests/rdma_core_crosscheck.rs`.
//!
//! Encoders serve the code generator (which emits the same bytes from GPU code) and the runtime;
//! decoders serve the simulator, which reads back what a kernel wrote. This module only encodes
//! bytes: it does not allocate queues, talk to a NIC or model NIC behaviour. RC requester
//! operations only: no UD/DC address vectors, no receive queue, no UMR. One rule is shared
//! beyond bytes: [`periodic_completion`], which WQEs request a CQE for ring reclamation.
//!
//! Constant names follow rdma-core's `MLX5_*` names without the prefix, so they can be grepped.

pub mod cqe;
pub mod doorbell;
pub mod receive;
pub mod wqe;

/// Size of one WQE basic block (WQEBB), the unit of the send ring (`MLX5_SEND_WQE_BB`).
pub const WQE_BASIC_BLOCK_BYTES: usize = 64;
/// log2 of [`WQE_BASIC_BLOCK_BYTES`] (`MLX5_SEND_WQE_SHIFT`).
pub const WQE_BASIC_BLOCK_SHIFT: u32 = 6;
/// The unit of the control segment's `ds` count: every segment is padded to 16 bytes.
pub const WQE_DS_UNIT_BYTES: usize = 16;

/// WQE opcode: no operation (still completes, so it can carry `CQ_UPDATE`).
pub const OPCODE_NOP: u8 = 0x00;
/// WQE opcode: RDMA write.
pub const OPCODE_RDMA_WRITE: u8 = 0x08;
/// WQE opcode: RDMA write with immediate (consumes a receive at the responder).
pub const OPCODE_RDMA_WRITE_IMM: u8 = 0x09;
/// WQE opcode: send.
pub const OPCODE_SEND: u8 = 0x0a;
/// WQE opcode: WAIT on another queue's index; used by NVSHMEM and DOCA, absent from `mlx5dv.h`.
pub const OPCODE_WAIT: u8 = 0x0f;
/// WQE opcode: RDMA read.
pub const OPCODE_RDMA_READ: u8 = 0x10;
/// WQE opcode: 8-byte atomic compare-and-swap.
pub const OPCODE_ATOMIC_CS: u8 = 0x11;
/// WQE opcode: 8-byte atomic fetch-and-add.
pub const OPCODE_ATOMIC_FA: u8 = 0x12;
/// WQE opcode: extended (masked) compare-and-swap; the operand size is in the opmod.
pub const OPCODE_ATOMIC_MASKED_CS: u8 = 0x14;
/// WQE opcode: extended (masked) fetch-and-add; the operand size is in the opmod.
pub const OPCODE_ATOMIC_MASKED_FA: u8 = 0x15;
/// WQE opcode: DUMP, a NIC-side local read used by NVSHMEM as a consistency fence; absent from
/// `mlx5dv.h`.
pub const OPCODE_DUMP: u8 = 0x23;

/// Send-ring space is reclaimed only through CQEs, so a WQE asks for one (`CQ_UPDATE`) whenever
/// it starts at or covers a multiple of a quarter of the ring, whatever the completion plan
/// says: once a ring is full, at least three such WQEs are outstanding, and the reservation can
/// free space by polling the CQ. This is the divisor (the ring size is a power of two).
pub const PERIODIC_COMPLETION_RING_FRACTION: u64 = 4;

/// Whether the WQE at basic block `first_basic_block` spanning `basic_blocks` blocks of a ring of
/// `ring_basic_blocks` blocks must request a completion for ring reclamation (see
/// [`PERIODIC_COMPLETION_RING_FRACTION`]). The generated code computes the same formula.
pub fn periodic_completion(
    first_basic_block: u64,
    basic_blocks: u64,
    ring_basic_blocks: u64,
) -> bool {
    let quarter = (ring_basic_blocks / PERIODIC_COMPLETION_RING_FRACTION).max(1);
    let within = first_basic_block % quarter;
    within == 0 || within + basic_blocks > quarter
}

/// `fm_ce_se` bit: always generate a CQE for this WQE (`MLX5_WQE_CTRL_CQ_UPDATE`, ce = 2).
pub const WQE_CTRL_CQ_UPDATE: u8 = 0x08;
/// `fm_ce_se` bit: solicited event (`MLX5_WQE_CTRL_SOLICITED`).
pub const WQE_CTRL_SOLICITED: u8 = 0x02;
/// `fm_ce_se` fence mode `[7:5]`: no fence.
pub const FENCE_MODE_NONE: u8 = 0x00;
/// `fm_ce_se` fence mode: initiator small fence (`MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE`).
pub const FENCE_MODE_INITIATOR_SMALL: u8 = 0x20;
/// `fm_ce_se` fence mode: fence (wait for earlier reads and atomics).
pub const FENCE_MODE_FENCE: u8 = 0x40;
/// `fm_ce_se` fence mode: strong ordering.
pub const FENCE_MODE_STRONG_ORDERING: u8 = 0x60;
/// `fm_ce_se` fence mode: small and fence (rdma-core's `MLX5_WQE_CTRL_FENCE`).
pub const FENCE_MODE_SMALL_AND_FENCE: u8 = 0x80;

/// Bit 31 of a segment's first word: this is an inline data header, not a data (gather) segment.
pub const INLINE_SEG: u32 = 0x8000_0000;
/// The lkey that marks a data segment as unused (`MLX5_INVALID_LKEY`).
pub const INVALID_LKEY: u32 = 0x100;
/// Opmod of an extended atomic on 4-byte operands (`0x08 | log2(4) - 2`).
pub const EXTENDED_ATOMIC_OPMOD_4_BYTES: u8 = 0x08;
/// Opmod of an extended atomic on 8-byte operands (`0x08 | log2(8) - 2`); the only size encoded here.
pub const EXTENDED_ATOMIC_OPMOD_8_BYTES: u8 = 0x09;

/// Index of the receive-queue word in the QP doorbell record (`MLX5_RCV_DBR`).
pub const RCV_DBR: usize = 0;
/// Index of the send-queue word in the QP doorbell record (`MLX5_SND_DBR`).
pub const SND_DBR: usize = 1;

pub use cqe::*;
pub use doorbell::*;
pub use wqe::*;

#[cfg(test)]
mod tests {
    use super::periodic_completion;

    #[test]
    fn a_wqe_starting_at_or_covering_a_quarter_boundary_requests_a_completion() {
        // A 64-block ring: quarters of 16 blocks.
        assert!(periodic_completion(0, 1, 64));
        assert!(periodic_completion(16, 1, 64));
        assert!(!periodic_completion(1, 1, 64));
        assert!(!periodic_completion(15 - 1, 2, 64));
        assert!(periodic_completion(15, 2, 64)); // covers block 16
        assert!(!periodic_completion(17, 4, 64));
        // Every run of 16 consecutive one-block WQEs holds exactly one.
        assert_eq!(
            (100..116)
                .filter(|s| periodic_completion(*s, 1, 64))
                .count(),
            1
        );
    }
}
