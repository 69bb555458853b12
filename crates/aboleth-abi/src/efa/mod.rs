//! The AWS EFA (SRD) send-queue and completion encodings, written clean-room from the public
//! layouts of rdma-core's `providers/efa/efa_io_defs.h` and cross-checked against that header
//! (rdma-core 56.1's, fetched and pinned by `tests/c/fetch_rdma_core.py`) by
//! `tests/efa_crosscheck.rs`.
//!
//! Every field is little-endian (the device's order). One send WQE is 64 bytes: a 32-byte
//! metadata descriptor, then for RDMA a remote-memory descriptor and one local buffer descriptor
//! ([`wqe`]); completions are 8-byte send and 16-byte receive descriptors with a phase bit
//! ([`cqe`]); the GPU-side queue counters and receive context are [`queue`]. What this module
//! does not do: allocate queues, ring doorbells (the doorbell is a 32-bit MMIO write of the
//! producer index that `efadv_query_qp_wqs` exposes), or model SRD's delivery; and it does not encode sends, inline messages or receive descriptors, which the
//! lowering does not use.
//!
//! Constant names follow rdma-core's `EFA_IO_*` names without the prefix, so they can be grepped.

pub mod cqe;
pub mod queue;
pub mod wqe;

/// Bytes of one send queue entry (`sizeof(struct efa_io_tx_wqe)`).
pub const TX_WQE_BYTES: usize = 64;
/// Local buffer descriptors an RDMA operation carries (`EFA_IO_TX_DESC_NUM_RDMA_BUFS`).
pub const TX_DESC_NUM_RDMA_BUFS: u16 = 1;
/// Bytes of immediate data an RDMA write may carry (`EFA_IO_TX_DESC_IMM_DATA_SIZE`).
pub const TX_DESC_IMM_DATA_SIZE: usize = 4;

/// Send operation: send message (`EFA_IO_SEND`).
pub const SEND: u8 = 0;
/// Send operation: RDMA read (`EFA_IO_RDMA_READ`).
pub const RDMA_READ: u8 = 1;
/// Send operation: RDMA write (`EFA_IO_RDMA_WRITE`).
pub const RDMA_WRITE: u8 = 2;

/// Queue type in a completion: send queue (`EFA_IO_SEND_QUEUE`).
pub const SEND_QUEUE: u8 = 1;
/// Queue type in a completion: receive queue (`EFA_IO_RECV_QUEUE`).
pub const RECV_QUEUE: u8 = 2;

/// Completion status: success (`EFA_IO_COMP_STATUS_OK`).
pub const COMP_STATUS_OK: u8 = 0;
/// Completion status: flushed during QP destroy.
pub const COMP_STATUS_FLUSHED: u8 = 1;
/// Completion status: the address handle is not valid.
pub const COMP_STATUS_LOCAL_ERROR_INVALID_AH: u8 = 4;
/// Completion status: the lkey is not registered or does not match the address.
pub const COMP_STATUS_LOCAL_ERROR_INVALID_LKEY: u8 = 5;
/// Completion status: message too long.
pub const COMP_STATUS_LOCAL_ERROR_BAD_LENGTH: u8 = 6;
/// Completion status: the rkey is not registered or does not match the remote address.
pub const COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS: u8 = 7;
/// Completion status: the destination QP does not exist (or is in error).
pub const COMP_STATUS_REMOTE_ERROR_BAD_DEST_QPN: u8 = 9;
/// Completion status: no receive posted at the destination (RNR).
pub const COMP_STATUS_REMOTE_ERROR_RNR: u8 = 10;
/// Completion status: an unreachable remote that never responded.
pub const COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE: u8 = 15;
