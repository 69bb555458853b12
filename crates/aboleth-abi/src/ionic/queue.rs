//! The GPU-side state of an Ionic send queue: the 128-byte [`IonicQueueManagement`] block an
//! endpoint handle's `management_address` names on the ionic transport.
//!
//! An RC queue pair completes its WQEs in order and a send CQE names the last WQE it covers
//! (message sequence number = WQE index + 1, `cqe::Completion::Send`; that holds because every
//! WQE the lowering posts is a remote operation: rdma-core advances the message number only for
//! those, local operations complete through `SEND_NPG` CQEs), so the consumer index is the
//! largest such number polled (its bits within the ring, as rdma-core reads it): every WQE
//! before it has completed. The GPU never returns CQ credits (rdma-core rings the CQ's doorbell
//! with its consumer position, `ionic_reserve_sync_cq`); a device would see the CQ fill: not
//! built, and the model does not check it. Only signaled WQEs leave a
//! CQE; the lowering signals a WQE at each quarter of the ring (as mlx5's periodic completions),
//! so a full ring can always be reclaimed. Layouts only: the simulator implements the protocol
//! (`aboleth-sim`'s `interpreter/ionic.rs`) and the code generator emits it
//! (`aboleth-codegen`'s `emit/ionic.rs`); no runtime creates Ionic queues here (no device).

use crate::wire::wire_layout;

/// Device-side counters of one Ionic send queue (128 B, in GPU memory). Counters are 64-bit WQE
/// indices that never wrap; the doorbell carries the producer index modulo the ring.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IonicQueueManagement {
    /// Last reserved WQE + 1 (producers `atomicAdd` it).
    pub reserved_head: u64,
    /// Last filled WQE + 1 (published in reservation order).
    pub ready_head: u64,
    /// Last doorbelled WQE + 1.
    pub producer_index: u64,
    /// First WQE not known to have completed.
    pub consumer_index: u64,
    /// Doorbell lock for shared queues (0 free, 1 held): doorbells reach the device in producer
    /// order.
    pub post_send_lock: u64,
    /// CQEs polled from the queue's CQ so far.
    pub completions_polled: u64,
    /// Held (1) by the program polling the CQ.
    pub poll_lock: u64,
    /// The device's firmware ABI version (1 or 2), which picks the WQE encodings.
    pub firmware_version: u32,
    /// Zero.
    pub reserved: u32,
    /// The end (WQE index + 1) of the newest WQE posted with a completion, raised with
    /// `atomicMax` by generated code: what a drain of the queue waits for (the consumer index
    /// reaching it). The simulator keeps that target per program instead and leaves it 0.
    pub last_completion_end: u64,
    /// Zero.
    pub reserved_tail: [u8; 56],
}
wire_layout!(IonicQueueManagement, 128, {
    reserved_head: u64 = 0, ready_head: u64 = 8, producer_index: u64 = 16, consumer_index: u64 = 24,
    post_send_lock: u64 = 32, completions_polled: u64 = 40, poll_lock: u64 = 48,
    firmware_version: u32 = 56, reserved: u32 = 60, last_completion_end: u64 = 64,
    reserved_tail: [u8; 56] = 72,
});

impl Default for IonicQueueManagement {
    /// All zero: a fresh queue (the firmware version still to be filled in).
    fn default() -> Self {
        Self::from_bytes(&[0; Self::SIZE_BYTES])
    }
}
