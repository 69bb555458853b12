//! The GPU-side state of an EFA send queue and of a rank's EFA receive side: the 128-byte
//! [`EfaQueueManagement`] block an endpoint handle's `management_address` names on the efa
//! transport, and the 64-byte [`EfaReceiveContext`] its `receive_context_address` names.
//!
//! SRD completes writes out of order, so a send queue's free space cannot be read off one
//! completion as on an mlx5 RC queue: each polled send completion marks its WQE done in the
//! completion log (one word per send-queue slot holding `index + 1` of the WQE that completed
//! there), and `consumer_index` is the first WQE not yet known done (everything before it
//! completed). A reservation waits for `consumer_index`, a wait for one command checks its log
//! word, a wait for everything checks `consumer_index`. Signals that set a flag are 8-byte RDMA
//! writes of a value staged in `signal_staging_address` (one word per slot); signals that add
//! are empty writes with immediate ([`crate::mlx5::receive::ImmediateSignal`]'s encoding), which
//! a waiting program of the target rank applies while it drains the receive CQ described by
//! [`EfaReceiveContext`].
//!
//! Layouts only: nothing here allocates, polls or rings; the simulator implements the protocol
//! (`aboleth-sim`'s `interpreter/efa.rs`), and no runtime creates EFA queues here (no device).

use crate::wire::wire_layout;

/// Device-side counters and constants of one EFA send queue (128 B, in GPU memory). Counters
/// are 64-bit WQE indices that never wrap; only their low 16 bits go into a WQE's request id and
/// into the doorbell (rdma-core's 16-bit producer counter, in a 32-bit MMIO store).
#[repr(C, align(128))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EfaQueueManagement {
    /// Last reserved WQE + 1 (producers `atomicAdd` it).
    pub reserved_head: u64,
    /// Last filled WQE + 1 (published in reservation order).
    pub ready_head: u64,
    /// Last doorbelled WQE + 1.
    pub producer_index: u64,
    /// First WQE not known to have completed: every WQE before it has.
    pub consumer_index: u64,
    /// Doorbell lock for shared queues (0 free, 1 held): two doorbells must reach the device in
    /// producer order.
    pub post_send_lock: u64,
    /// Send completions polled from the queue's CQ so far (the CQ's consumer index).
    pub completions_polled: u64,
    /// The completion log: `sq_entries` u64 words, word `i % sq_entries` holding `i + 1` once
    /// WQE `i`'s completion was polled.
    pub completion_log_address: u64,
    /// `sq_entries` registered u64 words: the value a set signal at slot `i` writes is staged in
    /// word `i % sq_entries`.
    pub signal_staging_address: u64,
    /// The lkey of the staging words (24 bits).
    pub signal_staging_lkey: u32,
    /// The destination QP's queue key.
    pub queue_key: u32,
    /// The destination QP number.
    pub destination_qp_number: u16,
    /// The address handle of the destination.
    pub address_handle: u16,
    /// Zero.
    pub reserved_0: u32,
    /// Held (1) by the program polling the send CQ into the completion log (0 free): several
    /// programs of a shared queue poll it.
    pub poll_lock: u64,
    /// Zero.
    pub reserved_1: [u8; 32],
    /// Zero.
    pub reserved_2: [u8; 8],
}
wire_layout!(EfaQueueManagement, 128, {
    reserved_head: u64 = 0, ready_head: u64 = 8, producer_index: u64 = 16,
    consumer_index: u64 = 24, post_send_lock: u64 = 32, completions_polled: u64 = 40,
    completion_log_address: u64 = 48, signal_staging_address: u64 = 56,
    signal_staging_lkey: u32 = 64, queue_key: u32 = 68, destination_qp_number: u16 = 72,
    address_handle: u16 = 74, reserved_0: u32 = 76, poll_lock: u64 = 80, reserved_1: [u8; 32] = 88,
    reserved_2: [u8; 8] = 120,
});

/// A rank's receive side on EFA (64 B): the receive CQ where the writes with immediate it is
/// the target of complete (unsolicited: no receive WQE is consumed), drained by its waits.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EfaReceiveContext {
    /// The receive CQ: `cq_entries` 16-byte receive completions.
    pub cq_address: u64,
    /// Entries of the receive CQ (a power of two).
    pub cq_entries: u32,
    /// This rank.
    pub local_rank: u32,
    /// Receive completions applied so far.
    pub consumer_index: u64,
    /// Held (1) by the program draining the CQ.
    pub poll_lock: u64,
    /// Zero.
    pub reserved: [u8; 32],
}
wire_layout!(EfaReceiveContext, 64, {
    cq_address: u64 = 0, cq_entries: u32 = 8, local_rank: u32 = 12, consumer_index: u64 = 16,
    poll_lock: u64 = 24, reserved: [u8; 32] = 32,
});

/// The largest send queue the protocol supports: a request id carries a WQE index's low 16
/// bits, and the poller recovers the index from them only while fewer than 2^15 WQEs are in
/// flight.
pub const SQ_ENTRIES_MAX: u32 = 1 << 15;

/// The WQE index a completion's `req_id` names, given that every WQE in flight lies in
/// `[consumer_index, consumer_index + SQ_ENTRIES_MAX)`.
pub fn index_of_request(consumer_index: u64, req_id: u16) -> u64 {
    consumer_index + u64::from(req_id.wrapping_sub(consumer_index as u16))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_name_wqes_across_the_16_bit_wrap() {
        assert_eq!(index_of_request(0, 5), 5);
        assert_eq!(index_of_request(65_530, 3), 65_539);
        assert_eq!(index_of_request(131_072, 0), 131_072);
        let bytes = EfaQueueManagement {
            consumer_index: 7,
            address_handle: 0x1234,
            ..Default::default()
        }
        .to_bytes();
        assert_eq!(bytes[24], 7);
        assert_eq!(&bytes[74..76], &[0x34, 0x12]);
    }
}
