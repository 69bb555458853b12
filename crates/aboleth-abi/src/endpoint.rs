//! Per-peer endpoint handles as kernels read them: the 128-byte
//! [`EndpointHandle`] (one per peer, every transport's fields present, no union; EFA's send
//! queue uses the queue fields mlx5 uses, with its own meaning said per field) and the 64-byte
//! [`Mlx5QueueManagement`] block of device-side queue counters (EFA's is
//! [`crate::efa::queue::EfaQueueManagement`]).
//!
//! The runtime fills handles after connecting; the code generator reads fields at the offsets
//! asserted here; the simulator validates them. This module creates no queue and maps no memory.

use crate::proxy::{ProxyDecodeError, validate_capacity_entries};
use crate::transport::{Transport, TransportCodeError};
use crate::wire::wire_layout;

/// Device-side counters of one mlx5 send queue, in basic blocks, in GPU memory (64 B). Modelled
/// on NVSHMEM's management block; counters are 64-bit so they never wrap, and only their low 16
/// bits go into WQEs and doorbells.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mlx5QueueManagement {
    /// Last reserved basic block + 1 (producers `atomicAdd` it).
    pub reserved_head: u64,
    /// Last filled basic block + 1 (published in reservation order).
    pub ready_head: u64,
    /// Last doorbelled basic block + 1.
    pub producer_index: u64,
    /// Last completed basic block + 1, rebuilt from CQEs.
    pub consumer_index: u64,
    /// Doorbell lock for shared queues under library-style lowering (0 free, 1 held); queues with
    /// one owner never touch it.
    pub post_send_lock: u64,
    /// Zero.
    pub reserved: [u8; 24],
}
wire_layout!(Mlx5QueueManagement, 64, {
    reserved_head: u64 = 0, ready_head: u64 = 8, producer_index: u64 = 16,
    consumer_index: u64 = 24, post_send_lock: u64 = 32, reserved: [u8; 24] = 40,
});

/// `flags` bit: the SQ, DBR or CQ are in host memory, so publishing needs a system-scope fence.
pub const ENDPOINT_FLAG_NIC_BUFFERS_IN_HOST_MEMORY: u32 = 1 << 0;
/// `flags` bit: unprivileged staged path: the GPU writes the WQEs and the doorbell record (a
/// system-scope release store) but not the UAR; a host thread that sees the record change rings
/// the UAR (`uar_doorbell_address` may then be 0).
pub const ENDPOINT_FLAG_HOST_RINGS_DOORBELL: u32 = 1 << 1;
/// Every defined `flags` bit.
pub const ENDPOINT_FLAGS_ALL: u32 =
    ENDPOINT_FLAG_NIC_BUFFERS_IN_HOST_MEMORY | ENDPOINT_FLAG_HOST_RINGS_DOORBELL;

/// What a kernel needs to talk to one peer (128 B). Fields of other transports are zero.
#[repr(C, align(128))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EndpointHandle {
    /// [`Transport`] as u32.
    pub transport: u32,
    /// The peer.
    pub peer_rank: u32,
    /// This rank.
    pub local_rank: u32,
    /// `ENDPOINT_FLAG_*` bits.
    pub flags: u32,
    /// mlx5: send ring base. efa, ionic: the send queue (64-byte WQEs).
    pub sq_buffer_address: u64,
    /// mlx5: send ring size in basic blocks (power of two). efa: send queue entries (a power of
    /// two, at most [`crate::efa::queue::SQ_ENTRIES_MAX`]). ionic: send queue entries (a power
    /// of two, at most 2^16).
    pub sq_wqe_basic_block_count: u32,
    /// mlx5: queue pair number (24 bits). efa: the local QP number (16 bits). ionic: the send
    /// queue's id (24 bits), which its doorbell names.
    pub qpn: u32,
    /// mlx5: the QP doorbell record (8 B; the send word is at +4).
    pub doorbell_record_address: u64,
    /// mlx5: the UAR doorbell register, mapped for the GPU. efa: the send queue's 32-bit
    /// doorbell register, mapped for the GPU. ionic: the send queue type's 64-bit slot of the
    /// doorbell page.
    pub uar_doorbell_address: u64,
    /// mlx5: CQ buffer (64-byte CQEs). efa: the send CQ (8-byte completions). ionic: the send
    /// CQ (32-byte CQEs).
    pub cq_buffer_address: u64,
    /// mlx5: number of CQEs (power of two). efa: send CQ entries (a power of two, at least the
    /// send queue's). ionic: likewise.
    pub cqe_count: u32,
    /// mlx5: 1 if the CQ is collapsed (every CQE in slot 0), else 0.
    pub cq_collapsed: u32,
    /// mlx5: this queue's [`Mlx5QueueManagement`] block. efa: its
    /// [`crate::efa::queue::EfaQueueManagement`] block. ionic: its
    /// [`crate::ionic::queue::IonicQueueManagement`] block.
    pub management_address: u64,
    /// proxy: the [`crate::proxy::ProxyRingHeader`], entries after it.
    pub proxy_ring_address: u64,
    /// proxy: ring capacity (power of two).
    pub proxy_ring_capacity_entries: u32,
    /// Zero.
    pub reserved_0: u32,
    /// p2p: added to a local symmetric address to get the peer's.
    pub peer_base_delta: i64,
    /// mlx5, ionic: an 8-byte registered local buffer that receives the old value of a signal's
    /// remote atomic (the NIC always writes it; nobody reads it).
    pub atomic_result_address: u64,
    /// mlx5, ionic: the lkey of `atomic_result_address`.
    pub atomic_result_lkey: u32,
    /// Zero.
    pub reserved_1: u32,
    /// This rank's wait-failure log ([`crate::wait_failure`]): where bounded waits report.
    pub wait_failure_log_address: u64,
    /// mlx5: this rank's [`crate::mlx5::receive::Mlx5ReceiveContext`] (the same in every handle
    /// of the rank), where write-with-immediate signals arrive; 0 when there is none. efa: its
    /// [`crate::efa::queue::EfaReceiveContext`].
    pub receive_context_address: u64,
}
wire_layout!(EndpointHandle, 128, {
    transport: u32 = 0, peer_rank: u32 = 4, local_rank: u32 = 8, flags: u32 = 12,
    sq_buffer_address: u64 = 16, sq_wqe_basic_block_count: u32 = 24, qpn: u32 = 28,
    doorbell_record_address: u64 = 32, uar_doorbell_address: u64 = 40, cq_buffer_address: u64 = 48,
    cqe_count: u32 = 56, cq_collapsed: u32 = 60, management_address: u64 = 64,
    proxy_ring_address: u64 = 72, proxy_ring_capacity_entries: u32 = 80, reserved_0: u32 = 84,
    peer_base_delta: i64 = 88, atomic_result_address: u64 = 96, atomic_result_lkey: u32 = 104,
    reserved_1: u32 = 108, wait_failure_log_address: u64 = 112, receive_context_address: u64 = 120,
});

/// Why an endpoint handle is unusable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// The transport field.
    #[error(transparent)]
    Transport(#[from] TransportCodeError),
    /// Undefined flag bits.
    #[error("endpoint flags {flags:#x} contain undefined bits")]
    UnknownFlags {
        /// The value found.
        flags: u32,
    },
    /// The send ring size.
    #[error("sq_wqe_basic_block_count {count} is not a power of two")]
    SqBasicBlockCountNotPowerOfTwo {
        /// The value found.
        count: u32,
    },
    /// The CQ size.
    #[error("cqe_count {count} is not a power of two")]
    CqeCountNotPowerOfTwo {
        /// The value found.
        count: u32,
    },
    /// `cq_collapsed` is neither 0 nor 1.
    #[error("cq_collapsed is {value}, expected 0 or 1")]
    InvalidCqCollapsed {
        /// The value found.
        value: u32,
    },
    /// efa: the send queue is not a power of two up to `SQ_ENTRIES_MAX` entries.
    #[error(
        "efa: sq_wqe_basic_block_count (send queue entries) {count} is not a power of two up to {}",
        crate::efa::queue::SQ_ENTRIES_MAX
    )]
    EfaSendQueueEntries {
        /// The value found.
        count: u32,
    },
    /// efa: the send CQ is not a power of two at least as large as the send queue.
    #[error("efa: cqe_count {count} is not a power of two at least the send queue's {sq_entries}")]
    EfaCompletionQueueEntries {
        /// The value found.
        count: u32,
        /// The send queue's entries.
        sq_entries: u32,
    },
    /// ionic: the send queue is not a power of two up to 2^16 entries.
    #[error(
        "ionic: sq_wqe_basic_block_count (send queue entries) {count} is not a power of two up to 65536"
    )]
    IonicSendQueueEntries {
        /// The value found.
        count: u32,
    },
    /// efa: a QP number wider than 16 bits.
    #[error("efa: qpn {qpn:#x} does not fit in 16 bits")]
    EfaQpnTooLarge {
        /// The value found.
        qpn: u32,
    },
    /// QPN wider than 24 bits.
    #[error("qpn {qpn:#x} does not fit in 24 bits")]
    QpnTooLarge {
        /// The value found.
        qpn: u32,
    },
    /// A required address is zero.
    #[error("{field} is null")]
    NullAddress {
        /// The field name.
        field: &'static str,
    },
    /// An address is not aligned as the hardware or the atomics on it need.
    #[error("{field} = {address:#x} is not {alignment_bytes}-byte aligned")]
    Misaligned {
        /// The field name.
        field: &'static str,
        /// The value found.
        address: u64,
        /// Required alignment.
        alignment_bytes: u64,
    },
    /// The proxy ring capacity.
    #[error(transparent)]
    ProxyRing(#[from] ProxyDecodeError),
}

fn check_address(
    field: &'static str,
    address: u64,
    alignment_bytes: u64,
) -> Result<(), EndpointError> {
    if address == 0 {
        return Err(EndpointError::NullAddress { field });
    }
    if !address.is_multiple_of(alignment_bytes) {
        return Err(EndpointError::Misaligned {
            field,
            address,
            alignment_bytes,
        });
    }
    Ok(())
}

impl EndpointHandle {
    /// The transport field, decoded.
    pub fn decode_transport(&self) -> Result<Transport, TransportCodeError> {
        Transport::from_code(self.transport)
    }

    /// Checks the fields of the handle's transport.
    pub fn validate(&self) -> Result<Transport, EndpointError> {
        let kind = self.decode_transport()?;
        if self.flags & !ENDPOINT_FLAGS_ALL != 0 {
            return Err(EndpointError::UnknownFlags { flags: self.flags });
        }
        match kind {
            Transport::Mlx5 => {
                if !self.sq_wqe_basic_block_count.is_power_of_two() {
                    let count = self.sq_wqe_basic_block_count;
                    return Err(EndpointError::SqBasicBlockCountNotPowerOfTwo { count });
                }
                if !self.cqe_count.is_power_of_two() {
                    return Err(EndpointError::CqeCountNotPowerOfTwo {
                        count: self.cqe_count,
                    });
                }
                if self.cq_collapsed > 1 {
                    return Err(EndpointError::InvalidCqCollapsed {
                        value: self.cq_collapsed,
                    });
                }
                if self.qpn > 0x00ff_ffff {
                    return Err(EndpointError::QpnTooLarge { qpn: self.qpn });
                }
                check_address("sq_buffer_address", self.sq_buffer_address, 64)?;
                check_address("doorbell_record_address", self.doorbell_record_address, 8)?;
                check_address("cq_buffer_address", self.cq_buffer_address, 64)?;
                // 64-bit atomics on the counters need 8; 64 keeps the block on one line.
                check_address("management_address", self.management_address, 64)?;
                if self.flags & ENDPOINT_FLAG_HOST_RINGS_DOORBELL == 0 {
                    // The doorbell is one 64-bit store.
                    check_address("uar_doorbell_address", self.uar_doorbell_address, 8)?;
                }
            }
            Transport::Proxy => {
                check_address("proxy_ring_address", self.proxy_ring_address, 64)?;
                validate_capacity_entries(self.proxy_ring_capacity_entries)?;
            }
            Transport::Efa => {
                let entries = self.sq_wqe_basic_block_count;
                if !entries.is_power_of_two() || entries > crate::efa::queue::SQ_ENTRIES_MAX {
                    return Err(EndpointError::EfaSendQueueEntries { count: entries });
                }
                if !self.cqe_count.is_power_of_two() || self.cqe_count < entries {
                    return Err(EndpointError::EfaCompletionQueueEntries {
                        count: self.cqe_count,
                        sq_entries: entries,
                    });
                }
                if self.qpn > u32::from(u16::MAX) {
                    return Err(EndpointError::EfaQpnTooLarge { qpn: self.qpn });
                }
                check_address("sq_buffer_address", self.sq_buffer_address, 64)?;
                check_address("cq_buffer_address", self.cq_buffer_address, 8)?;
                check_address("management_address", self.management_address, 128)?;
                check_address("uar_doorbell_address", self.uar_doorbell_address, 4)?;
                check_address("receive_context_address", self.receive_context_address, 64)?;
            }
            Transport::Ionic => {
                let entries = self.sq_wqe_basic_block_count;
                if !entries.is_power_of_two() || entries > 1 << 16 {
                    return Err(EndpointError::IonicSendQueueEntries { count: entries });
                }
                if !self.cqe_count.is_power_of_two() || self.cqe_count < entries {
                    return Err(EndpointError::CqeCountNotPowerOfTwo {
                        count: self.cqe_count,
                    });
                }
                if self.qpn > 0x00ff_ffff {
                    return Err(EndpointError::QpnTooLarge { qpn: self.qpn });
                }
                check_address("sq_buffer_address", self.sq_buffer_address, 64)?;
                check_address("cq_buffer_address", self.cq_buffer_address, 32)?;
                check_address("management_address", self.management_address, 64)?;
                check_address("uar_doorbell_address", self.uar_doorbell_address, 8)?;
                check_address("atomic_result_address", self.atomic_result_address, 8)?;
            }
            Transport::P2p => {}
        }
        Ok(kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mlx5_handle() -> EndpointHandle {
        EndpointHandle {
            transport: Transport::Mlx5 as u32,
            sq_buffer_address: 0x10000,
            sq_wqe_basic_block_count: 1024,
            qpn: 0x1234,
            doorbell_record_address: 0x20008,
            uar_doorbell_address: 0x30800,
            cq_buffer_address: 0x40000,
            cqe_count: 1,
            cq_collapsed: 1,
            management_address: 0x50040,
            ..Default::default()
        }
    }

    #[test]
    fn validation_accepts_good_handles_and_names_bad_fields() {
        assert_eq!(mlx5_handle().validate(), Ok(Transport::Mlx5));
        let bad = |edit: fn(&mut EndpointHandle)| {
            let mut handle = mlx5_handle();
            edit(&mut handle);
            handle.validate().unwrap_err()
        };
        assert_eq!(
            bad(|h| h.transport = 9),
            EndpointError::Transport(TransportCodeError { value: 9 })
        );
        assert_eq!(
            bad(|h| h.sq_wqe_basic_block_count = 1000),
            EndpointError::SqBasicBlockCountNotPowerOfTwo { count: 1000 }
        );
        assert_eq!(
            bad(|h| h.flags = 4),
            EndpointError::UnknownFlags { flags: 4 }
        );
        assert_eq!(
            bad(|h| h.qpn = 1 << 24),
            EndpointError::QpnTooLarge { qpn: 1 << 24 }
        );
        assert_eq!(
            bad(|h| h.cq_collapsed = 2),
            EndpointError::InvalidCqCollapsed { value: 2 }
        );
        assert_eq!(
            bad(|h| h.uar_doorbell_address = 0),
            EndpointError::NullAddress {
                field: "uar_doorbell_address"
            }
        );
        assert!(matches!(
            bad(|h| h.management_address = 0x50008),
            EndpointError::Misaligned { .. }
        ));
        let mut staged = mlx5_handle();
        (staged.flags, staged.uar_doorbell_address) = (ENDPOINT_FLAG_HOST_RINGS_DOORBELL, 0);
        assert_eq!(staged.validate(), Ok(Transport::Mlx5));
        let proxy = EndpointHandle {
            transport: Transport::Proxy as u32,
            proxy_ring_address: 0x1000,
            proxy_ring_capacity_entries: 3,
            ..Default::default()
        };
        assert!(matches!(proxy.validate(), Err(EndpointError::ProxyRing(_))));
        let p2p = EndpointHandle {
            transport: 3,
            peer_base_delta: -64,
            ..Default::default()
        };
        assert_eq!(p2p.validate(), Ok(Transport::P2p));
        let efa = EndpointHandle {
            transport: Transport::Efa as u32,
            sq_buffer_address: 0x10000,
            sq_wqe_basic_block_count: 256,
            qpn: 0x101,
            uar_doorbell_address: 0x30800,
            cq_buffer_address: 0x40000,
            cqe_count: 256,
            management_address: 0x50080,
            receive_context_address: 0x60040,
            ..Default::default()
        };
        assert_eq!(efa.validate(), Ok(Transport::Efa));
        let bad_efa = |edit: fn(&mut EndpointHandle)| {
            let mut handle = efa;
            edit(&mut handle);
            handle.validate().unwrap_err()
        };
        assert_eq!(
            bad_efa(|h| h.sq_wqe_basic_block_count = 1 << 16),
            EndpointError::EfaSendQueueEntries { count: 1 << 16 }
        );
        assert_eq!(
            bad_efa(|h| h.cqe_count = 128),
            EndpointError::EfaCompletionQueueEntries {
                count: 128,
                sq_entries: 256
            }
        );
        assert_eq!(
            bad_efa(|h| h.qpn = 1 << 16),
            EndpointError::EfaQpnTooLarge { qpn: 1 << 16 }
        );
        assert_eq!(
            bad_efa(|h| h.receive_context_address = 0),
            EndpointError::NullAddress {
                field: "receive_context_address"
            }
        );
    }
}
