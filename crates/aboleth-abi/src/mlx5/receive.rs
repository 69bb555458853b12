//! The receive side of write-with-immediate signals: receive WQEs, responder CQEs, the signal
//! an immediate carries, and the per-rank receive context the GPU polls.
//!
//! A signal published with write-with-immediate is an RDMA_WRITE_IMM whose 32-bit immediate
//! names the flag (its element index in the signal's flag region) and what to do to it (set or
//! add a small value). At the responder the write consumes one receive WQE of the QP's receive
//! queue and leaves a responder CQE (opcode RESP_WR_IMM) carrying the immediate in the rank's
//! receive CQ, shared by all its QPs. A waiting program of that rank drains the receive CQ
//! under the context's poll lock: for each CQE it applies the signal to the local flag, and
//! posts the receive again (every receive WQE is the same empty scatter entry, written once at
//! set-up, so posting is advancing the queue's counter and its doorbell record).
//!
//! What this module does not do: allocate anything, or model the NIC. No SRQ, no scatter of
//! SEND payloads: receives here only carry immediates. Used by the lowering and code generation
//! (`--immediate-signals`) and by the simulator's NIC and interpreter; the runtime creates no
//! mlx5 receive side yet (no NIC here). Design: `docs/rationale/write-with-immediate.md`.

use crate::wire::{Be32, Be64, wire_layout};

/// `MLX5_INVALID_LKEY`: the lkey of a scatter entry that must never be written.
pub const INVALID_LKEY: u32 = 0x100;
/// Bytes of one receive WQE: one data segment.
pub const RECEIVE_WQE_BYTES: usize = 16;

/// Bits of the flag's element index in a signal immediate.
pub const IMMEDIATE_INDEX_BITS: u32 = 20;
/// Bits of the signal value in a signal immediate (above the index).
pub const IMMEDIATE_VALUE_BITS: u32 = 11;
/// The immediate's top bit: add the value (else set the flag to it).
pub const IMMEDIATE_ADD_BIT: u32 = 31;

/// `struct mlx5_wqe_data_seg` as a receive WQE: where a SEND's payload would be scattered.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiveDataSegment {
    /// Bytes the entry can take (bit 31 must be 0).
    pub byte_count: Be32,
    /// The buffer's lkey.
    pub lkey: Be32,
    /// The buffer.
    pub address: Be64,
}
wire_layout!(ReceiveDataSegment, 16, { byte_count: Be32 = 0, lkey: Be32 = 4, address: Be64 = 8 });

impl ReceiveDataSegment {
    /// The receive every queue is filled with: no buffer (an RDMA_WRITE_IMM scatters nothing).
    pub fn empty() -> Self {
        ReceiveDataSegment {
            byte_count: Be32::new(0),
            lkey: Be32::new(INVALID_LKEY),
            address: Be64::new(0),
        }
    }
}

/// A signal carried by an immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImmediateSignal {
    /// Element index of the flag in the signal's flag region.
    pub flag_index: u32,
    /// The value set or added.
    pub value: u32,
    /// Add (else set).
    pub add: bool,
}

impl ImmediateSignal {
    /// The immediate, or `None` when the index or the value does not fit.
    pub fn encode(&self) -> Option<u32> {
        if self.flag_index >> IMMEDIATE_INDEX_BITS != 0 || self.value >> IMMEDIATE_VALUE_BITS != 0 {
            return None;
        }
        Some(
            (u32::from(self.add) << IMMEDIATE_ADD_BIT)
                | (self.value << IMMEDIATE_INDEX_BITS)
                | self.flag_index,
        )
    }

    /// The signal an immediate carries (every 32-bit value decodes).
    pub fn decode(immediate: u32) -> Self {
        ImmediateSignal {
            flag_index: immediate & ((1 << IMMEDIATE_INDEX_BITS) - 1),
            value: (immediate >> IMMEDIATE_INDEX_BITS) & ((1 << IMMEDIATE_VALUE_BITS) - 1),
            add: immediate >> IMMEDIATE_ADD_BIT != 0,
        }
    }
}

/// A rank's receive side (64 B, device memory), pointed to by every endpoint handle of the rank.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mlx5ReceiveContext {
    /// The receive CQ shared by the rank's QPs: `cqe_count` 64-byte CQEs.
    pub cq_buffer_address: u64,
    /// CQEs in the receive CQ (a power of two).
    pub cqe_count: u32,
    /// 0 free, 1 held: the program draining the receive CQ.
    pub poll_lock: u32,
    /// CQEs consumed so far (the next one is at `consumer_index % cqe_count`).
    pub consumer_index: u64,
    /// The receive CQ's doorbell record (SET_CI word at +0).
    pub cq_doorbell_record_address: u64,
    /// `[Mlx5ReceiveQueue; queue_count]`, indexed by peer rank.
    pub queues_address: u64,
    /// Entries at `queues_address` (the world size).
    pub queue_count: u32,
    /// Mask applied to a CQE's QPN to index `peer_of_qpn_address`.
    pub qpn_mask: u32,
    /// `[u32; qpn_mask + 1]`: the peer rank of each of this rank's QPs, by `qpn & qpn_mask`.
    pub peer_of_qpn_address: u64,
    /// This rank.
    pub local_rank: u32,
    /// Zero.
    pub reserved: [u8; 4],
}
wire_layout!(Mlx5ReceiveContext, 64, {
    cq_buffer_address: u64 = 0, cqe_count: u32 = 8, poll_lock: u32 = 12, consumer_index: u64 = 16,
    cq_doorbell_record_address: u64 = 24, queues_address: u64 = 32, queue_count: u32 = 40,
    qpn_mask: u32 = 44, peer_of_qpn_address: u64 = 48, local_rank: u32 = 56, reserved: [u8; 4] = 60,
});

/// One QP's receive queue (32 B), an entry of [`Mlx5ReceiveContext::queues_address`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mlx5ReceiveQueue {
    /// The QP.
    pub qpn: u32,
    /// Receive WQEs in the queue (a power of two).
    pub wqe_count: u32,
    /// The QP's doorbell record; its receive word (`BE32(posted & 0xffff)`) is at +0.
    pub doorbell_record_address: u64,
    /// Receives posted so far.
    pub posted: u64,
    /// The queue's WQEs ([`RECEIVE_WQE_BYTES`] each).
    pub buffer_address: u64,
}
wire_layout!(Mlx5ReceiveQueue, 32, {
    qpn: u32 = 0, wqe_count: u32 = 4, doorbell_record_address: u64 = 8, posted: u64 = 16,
    buffer_address: u64 = 24,
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_immediates_round_trip_and_refuse_what_does_not_fit() {
        let signal = ImmediateSignal {
            flag_index: 0xabcde,
            value: 2047,
            add: true,
        };
        let immediate = signal.encode().unwrap();
        assert_eq!(immediate, 0x8000_0000 | (2047 << 20) | 0xabcde);
        assert_eq!(ImmediateSignal::decode(immediate), signal);
        let set = ImmediateSignal {
            flag_index: 3,
            value: 1,
            add: false,
        };
        assert_eq!(ImmediateSignal::decode(set.encode().unwrap()), set);
        assert_eq!(
            ImmediateSignal {
                flag_index: 1 << 20,
                ..set
            }
            .encode(),
            None
        );
        assert_eq!(ImmediateSignal { value: 2048, ..set }.encode(), None);
    }

    #[test]
    fn the_empty_receive_has_no_buffer() {
        let bytes = ReceiveDataSegment::empty().to_bytes();
        assert_eq!(bytes[..8], [0, 0, 0, 0, 0, 0, 1, 0]);
        assert_eq!(bytes[8..], [0; 8]);
    }
}
