//! The QP doorbell record (two BE32 words in memory the NIC reads) and the 8-byte UAR doorbell
//! (one MMIO store that tells the NIC to look).
//!
//! The doorbell record's send word is the authoritative producer count (16 bits, next free WQE
//! basic block). The UAR doorbell is a trigger carrying the QPN and a 16-bit index; two encodings
//! exist and both are decoded: NVSHMEM/DOCA write `{BE32(pi << 8), BE32(qpn << 8)}` with the next
//! free index, rdma-core writes the first 8 bytes of the last WQE's control segment. BlueFlame
//! (copying whole WQEs to the UAR) and CQ doorbells are not modelled here.

use super::wqe::ControlSegment;
use super::{RCV_DBR, SND_DBR};
use crate::wire::{Be32, wire_layout};

/// The QP doorbell record: `[RCV_DBR]` receive counter, `[SND_DBR]` send counter.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DoorbellRecord {
    /// Receive queue counter (unused by Aboleth: no receives are posted).
    pub receive_counter: Be32,
    /// `BE32(sq_producer_index & 0xffff)`.
    pub send_counter: Be32,
}
wire_layout!(DoorbellRecord, 8, { receive_counter: Be32 = 0, send_counter: Be32 = 4 });
const _: () = assert!(RCV_DBR == 0 && SND_DBR == 1);

impl DoorbellRecord {
    /// The send word for a producer index (the next free basic block); only 16 bits are kept.
    pub fn send_counter_value(producer_index: u32) -> Be32 {
        Be32::new(producer_index & 0xffff)
    }

    /// A record with the send word set and the receive word zero.
    pub fn for_send_producer_index(producer_index: u32) -> Self {
        Self {
            receive_counter: Be32::default(),
            send_counter: Self::send_counter_value(producer_index),
        }
    }

    /// The 16-bit send producer index.
    pub fn send_producer_index(&self) -> u16 {
        self.send_counter.get() as u16
    }
}

/// The 8-byte value stored to the UAR doorbell register (one 64-bit store of these bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UarDoorbell {
    /// opmod `[31:24]`, index `[23:8]`, opcode `[7:0]` (the control segment's first word).
    pub opmod_idx_opcode: Be32,
    /// QPN `[31:8]`, ds `[5:0]` (the control segment's second word).
    pub qpn_ds: Be32,
}
wire_layout!(UarDoorbell, 8, { opmod_idx_opcode: Be32 = 0, qpn_ds: Be32 = 4 });

/// Which of the two doorbell conventions a UAR value follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodedUarDoorbell {
    /// NVSHMEM/DOCA: the next free producer index (ds is 0).
    NextProducerIndex {
        /// Next free basic block index (16 bits).
        producer_index: u16,
        /// QPN.
        qpn: u32,
    },
    /// rdma-core: the first 8 bytes of the last posted WQE's control segment.
    LastWqeControl {
        /// `wqe_index` of the last WQE.
        wqe_index: u16,
        /// QPN.
        qpn: u32,
        /// Opcode of the last WQE.
        opcode: u8,
        /// `ds` of the last WQE (never 0).
        ds: u8,
    },
}

/// Why a UAR doorbell value is malformed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DoorbellDecodeError {
    /// ds = 0 says "producer index" but the opcode or opmod byte is not zero.
    #[error("UAR doorbell with ds 0 has opmod {opmod:#04x} / opcode {opcode:#04x}; expected zeros")]
    MalformedProducerIndex {
        /// opmod byte.
        opmod: u8,
        /// opcode byte.
        opcode: u8,
    },
}

impl UarDoorbell {
    /// NVSHMEM/DOCA style: `{BE32(producer_index << 8), BE32(qpn << 8)}`.
    pub fn next_producer_index(producer_index: u16, qpn: u32) -> Self {
        Self {
            opmod_idx_opcode: Be32::new(u32::from(producer_index) << 8),
            qpn_ds: Be32::new(qpn << 8),
        }
    }

    /// rdma-core style: the first 8 bytes of the last WQE's control segment.
    pub fn last_wqe_control(control: &ControlSegment) -> Self {
        Self {
            opmod_idx_opcode: control.opmod_idx_opcode,
            qpn_ds: control.qpn_ds,
        }
    }

    /// The value a little-endian 64-bit store must write so that memory holds [`Self::to_bytes`].
    pub fn store_value_u64_little_endian(&self) -> u64 {
        u64::from_le_bytes(self.to_bytes())
    }

    /// Decodes either convention; ds = 0 marks the producer-index one (a WQE always has ds >= 1).
    pub fn decode(&self) -> Result<DecodedUarDoorbell, DoorbellDecodeError> {
        let first = self.opmod_idx_opcode.get();
        let second = self.qpn_ds.get();
        let (opmod, index, opcode) = ((first >> 24) as u8, (first >> 8) as u16, first as u8);
        let (qpn, ds) = (second >> 8, (second & 0x3f) as u8);
        if ds == 0 {
            if opmod != 0 || opcode != 0 {
                return Err(DoorbellDecodeError::MalformedProducerIndex { opmod, opcode });
            }
            return Ok(DecodedUarDoorbell::NextProducerIndex {
                producer_index: index,
                qpn,
            });
        }
        Ok(DecodedUarDoorbell::LastWqeControl {
            wqe_index: index,
            qpn,
            opcode,
            ds,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mlx5::{OPCODE_RDMA_WRITE, WqeCommon, rdma_write};

    #[test]
    fn doorbell_record_keeps_sixteen_bits_big_endian() {
        assert_eq!(
            DoorbellRecord::for_send_producer_index(0x1_2345).to_bytes(),
            [0, 0, 0, 0, 0, 0, 0x23, 0x45]
        );
    }

    #[test]
    fn uar_doorbell_both_conventions() {
        let value = UarDoorbell::next_producer_index(0x0102, 0xabcdef);
        assert_eq!(value.to_bytes(), [0, 0x01, 0x02, 0, 0xab, 0xcd, 0xef, 0]);
        assert_eq!(value.store_value_u64_little_endian(), 0x00ef_cdab_0002_0100);
        let common = WqeCommon {
            wqe_index: 7,
            qpn: 0x55,
            fm_ce_se: 0,
        };
        let wqe = rdma_write(&common, Default::default(), Default::default());
        let control = ControlSegment::from_bytes(wqe.as_bytes()[..16].try_into().unwrap());
        assert_eq!(
            UarDoorbell::last_wqe_control(&control).decode(),
            Ok(DecodedUarDoorbell::LastWqeControl {
                wqe_index: 7,
                qpn: 0x55,
                opcode: OPCODE_RDMA_WRITE,
                ds: 3
            })
        );
        let malformed = UarDoorbell {
            opmod_idx_opcode: Be32::new(0x0000_0108),
            qpn_ds: Be32::new(0x5500),
        };
        assert_eq!(
            malformed.decode(),
            Err(DoorbellDecodeError::MalformedProducerIndex {
                opmod: 0,
                opcode: 8
            })
        );
    }
}
