//! Ionic send WQEs: the 16-byte header (`struct ionic_v1_base_hdr`) and the 48-byte bodies of an
//! RDMA write (`struct ionic_v1_common_bdy`, rdma form, with scatter entries or inline data)
//! and of an atomic (`struct ionic_v1_atomic_bdy` in firmware ABI 1, `struct
//! ionic_v2_atomic_bdy` from ABI 2), encoded as rdma-core's `ionic_v1_prep_rdma` and
//! `ionic_v1_prep_atomic` fill them, and decoded back for a device model.
//!
//! What it does not encode: sends, reads, the `spec` scatter formats, memory registration and
//! windows, and WQEs larger than 64 bytes (more than two scatter entries or 32 inline bytes).

use super::{
    FLAG_COLOR, FLAG_FENCE, FLAG_INL, FLAG_SIG, IonicVersion, WQE_BYTES, WQE_INLINE_BYTES,
    WQE_SGES, op_v1, op_v2,
};
use crate::wire::{Be16, Be32, Be64, wire_layout};

/// `struct ionic_v1_base_hdr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WqeHeader {
    /// The WQE's ring index, handed back in completions (host order).
    pub wqe_id: u64,
    /// The operation (`op_v1::*` or `op_v2::*`).
    pub op: u8,
    /// Scatter entries (0 for inline data, 1 for an atomic).
    pub num_sge_key: u8,
    /// `FLAG_*` bits.
    pub flags: Be16,
    /// Immediate data of a write with immediate.
    pub imm_data_key: Be32,
}
wire_layout!(WqeHeader, 16, {
    wqe_id: u64 = 0, op: u8 = 8, num_sge_key: u8 = 9, flags: Be16 = 10, imm_data_key: Be32 = 12,
});

/// `struct ionic_sge`: one scatter-gather entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sge {
    /// The local address.
    pub va: Be64,
    /// Bytes.
    pub len: Be32,
    /// Its lkey.
    pub lkey: Be32,
}
wire_layout!(Sge, 16, { va: Be64 = 0, len: Be32 = 8, lkey: Be32 = 12 });

/// `struct ionic_v1_common_bdy` in its rdma form: the remote memory, the length, the payload
/// (`WQE_SGES` scatter entries or `WQE_INLINE_BYTES` of inline data).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdmaBody {
    /// Remote address, bits 63:32.
    pub remote_va_high: Be32,
    /// Remote address, bits 31:0.
    pub remote_va_low: Be32,
    /// Its rkey.
    pub remote_rkey: Be32,
    /// Bytes written.
    pub length: Be32,
    /// `union ionic_v1_pld`.
    pub payload: [u8; 32],
}
wire_layout!(RdmaBody, 48, {
    remote_va_high: Be32 = 0, remote_va_low: Be32 = 4, remote_rkey: Be32 = 8, length: Be32 = 12,
    payload: [u8; 32] = 16,
});

/// `struct ionic_v1_atomic_bdy` (firmware ABI 1).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomicBodyV1 {
    /// Remote address, bits 63:32.
    pub remote_va_high: Be32,
    /// Remote address, bits 31:0.
    pub remote_va_low: Be32,
    /// Its rkey.
    pub remote_rkey: Be32,
    /// The swap value (compare-swap) or the addend (fetch-add), bits 63:32.
    pub swap_add_high: Be32,
    /// Bits 31:0.
    pub swap_add_low: Be32,
    /// The compare value, bits 63:32.
    pub compare_high: Be32,
    /// Bits 31:0.
    pub compare_low: Be32,
    /// Reserved.
    pub reserved: [u8; 4],
    /// Where the old value goes (`sge.va`).
    pub sge_va: Be64,
    /// Its length, 8 (`sge.len`).
    pub sge_len: Be32,
    /// Its lkey (`sge.lkey`).
    pub sge_lkey: Be32,
}
wire_layout!(AtomicBodyV1, 48, {
    remote_va_high: Be32 = 0, remote_va_low: Be32 = 4, remote_rkey: Be32 = 8,
    swap_add_high: Be32 = 12, swap_add_low: Be32 = 16, compare_high: Be32 = 20,
    compare_low: Be32 = 24, reserved: [u8; 4] = 28, sge_va: Be64 = 32, sge_len: Be32 = 40,
    sge_lkey: Be32 = 44,
});

/// `struct ionic_v2_atomic_bdy` (firmware ABI 2 and later).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomicBodyV2 {
    /// Remote address, bits 63:32.
    pub remote_va_high: Be32,
    /// Remote address, bits 31:0.
    pub remote_va_low: Be32,
    /// Its rkey.
    pub remote_rkey: Be32,
    /// The swap value or the addend, bits 63:32.
    pub swap_add_high: Be32,
    /// Bits 31:0.
    pub swap_add_low: Be32,
    /// The compare value, bits 63:32.
    pub compare_high: Be32,
    /// Bits 31:0.
    pub compare_low: Be32,
    /// The lkey of the old value's buffer.
    pub lkey: Be32,
    /// Where the old value goes.
    pub local_va: Be64,
    /// Reserved (an express doorbell when the queue has one).
    pub reserved_expdb: [u8; 8],
}
wire_layout!(AtomicBodyV2, 48, {
    remote_va_high: Be32 = 0, remote_va_low: Be32 = 4, remote_rkey: Be32 = 8,
    swap_add_high: Be32 = 12, swap_add_low: Be32 = 16, compare_high: Be32 = 20,
    compare_low: Be32 = 24, lkey: Be32 = 28, local_va: Be64 = 32, reserved_expdb: [u8; 8] = 40,
});

/// What every send WQE says besides its operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WqeCommon {
    /// The ring index (rdma-core writes the producer index).
    pub wqe_id: u64,
    /// The ring lap's color ([`super::sq_color_of`]).
    pub color: bool,
    /// Post a completion.
    pub signaled: bool,
    /// Wait for earlier reads and atomics first.
    pub fence: bool,
}

/// A local scatter entry in host terms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalBuffer {
    /// Address.
    pub address: u64,
    /// Bytes.
    pub length_bytes: u32,
    /// lkey.
    pub lkey: u32,
}

/// What an RDMA write carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WritePayload {
    /// One or two scatter entries.
    Buffers(Vec<LocalBuffer>),
    /// Inline data (at most [`WQE_INLINE_BYTES`]).
    Inline(Vec<u8>),
}

/// An atomic's operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOperation {
    /// Add to the remote 64-bit word.
    FetchAdd {
        /// The addend.
        add: u64,
    },
    /// Replace the remote word with `swap` if it equals `compare`.
    CompareSwap {
        /// Compared with the remote word.
        compare: u64,
        /// Written when equal.
        swap: u64,
    },
}

/// A send WQE in host terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SendWqe {
    /// RDMA write, with immediate data when `immediate` is set.
    RdmaWrite {
        /// Header fields.
        common: WqeCommon,
        /// Remote address.
        remote_address: u64,
        /// Its rkey.
        rkey: u32,
        /// The data.
        payload: WritePayload,
        /// Immediate data (host order; the WQE holds it big-endian, as `htobe32` of it).
        immediate: Option<u32>,
    },
    /// An 8-byte atomic whose old value lands in `result`.
    Atomic {
        /// Header fields.
        common: WqeCommon,
        /// Remote address (8-byte aligned).
        remote_address: u64,
        /// Its rkey.
        rkey: u32,
        /// What it does.
        operation: AtomicOperation,
        /// Where the old value goes (8 bytes).
        result: LocalBuffer,
    },
}

/// Why a send WQE cannot be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WqeEncodeError {
    /// No scatter entry, or more than a 64-byte WQE holds.
    #[error("an Ionic RDMA write in a 64-byte WQE takes 1 or 2 scatter entries, not {count}")]
    BufferCount {
        /// Entries given.
        count: usize,
    },
    /// Inline data longer than a 64-byte WQE holds.
    #[error("an Ionic 64-byte WQE holds {WQE_INLINE_BYTES} inline bytes, not {length}")]
    InlineTooLong {
        /// Bytes given.
        length: usize,
    },
    /// A write of 2 GiB or more (rdma-core refuses it).
    #[error("an Ionic write of {length} bytes: it must be below 2 GiB")]
    TooLong {
        /// Bytes given.
        length: u64,
    },
    /// An atomic's result buffer that is not 8 bytes.
    #[error("an Ionic atomic returns 8 bytes, not {length}")]
    AtomicResultLength {
        /// Bytes given.
        length: u32,
    },
}

/// Why 64 bytes are not a send WQE this module would have written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WqeDecodeError {
    /// Another operation than an RDMA write (with immediate) or an atomic.
    #[error(
        "Ionic WQE operation {op:#04x} is not an RDMA write or an atomic of firmware ABI {version}"
    )]
    Operation {
        /// The byte found.
        op: u8,
        /// 1 or 2.
        version: u8,
    },
    /// Flags outside fence, inline, signaled and color.
    #[error("Ionic WQE flags {flags:#06x} set bits this encoder never writes")]
    Flags {
        /// The word found.
        flags: u16,
    },
    /// A scatter count the WQE cannot hold, or a length that disagrees with the entries.
    #[error("Ionic WQE with {entries} scatter entries and length {length}")]
    Lengths {
        /// `num_sge_key`.
        entries: u8,
        /// The body's length.
        length: u32,
    },
}

fn opcode(version: IonicVersion, v1: u8, v2: u8) -> u8 {
    match version {
        IonicVersion::V1 => v1,
        IonicVersion::V2 => v2,
    }
}

fn flags_of(common: &WqeCommon, inline: bool) -> u16 {
    let mut flags = 0;
    if common.fence {
        flags |= FLAG_FENCE;
    }
    if inline {
        flags |= FLAG_INL;
    }
    if common.signaled {
        flags |= FLAG_SIG;
    }
    if common.color {
        flags |= FLAG_COLOR;
    }
    flags
}

fn split(address: u64) -> (Be32, Be32) {
    (Be32::new((address >> 32) as u32), Be32::new(address as u32))
}

fn join(high: Be32, low: Be32) -> u64 {
    (u64::from(high.get()) << 32) | u64::from(low.get())
}

impl SendWqe {
    /// The 64 bytes of this WQE for a device of `version`.
    pub fn encode(&self, version: IonicVersion) -> Result<[u8; WQE_BYTES], WqeEncodeError> {
        let mut bytes = [0u8; WQE_BYTES];
        match self {
            SendWqe::RdmaWrite {
                common,
                remote_address,
                rkey,
                payload,
                immediate,
            } => {
                let mut body_payload = [0u8; 32];
                let (entries, length, inline) = match payload {
                    WritePayload::Buffers(buffers) => {
                        if buffers.is_empty() || buffers.len() > WQE_SGES {
                            return Err(WqeEncodeError::BufferCount {
                                count: buffers.len(),
                            });
                        }
                        let mut length = 0u64;
                        for (index, buffer) in buffers.iter().enumerate() {
                            let sge = Sge {
                                va: Be64::new(buffer.address),
                                len: Be32::new(buffer.length_bytes),
                                lkey: Be32::new(buffer.lkey),
                            };
                            body_payload[index * 16..index * 16 + 16]
                                .copy_from_slice(&sge.to_bytes());
                            length += u64::from(buffer.length_bytes);
                        }
                        (buffers.len() as u8, length, false)
                    }
                    WritePayload::Inline(data) => {
                        if data.len() > WQE_INLINE_BYTES {
                            return Err(WqeEncodeError::InlineTooLong { length: data.len() });
                        }
                        body_payload[..data.len()].copy_from_slice(data);
                        (0, data.len() as u64, true)
                    }
                };
                if length >= 1 << 31 {
                    return Err(WqeEncodeError::TooLong { length });
                }
                let op = match immediate {
                    Some(_) => opcode(version, op_v1::RDMA_WRITE_IMM, op_v2::RDMA_WRITE_IMM),
                    None => opcode(version, op_v1::RDMA_WRITE, op_v2::RDMA_WRITE),
                };
                let header = WqeHeader {
                    wqe_id: common.wqe_id,
                    op,
                    num_sge_key: entries,
                    flags: Be16::new(flags_of(common, inline)),
                    imm_data_key: Be32::new(immediate.unwrap_or(0)),
                };
                let (remote_va_high, remote_va_low) = split(*remote_address);
                let body = RdmaBody {
                    remote_va_high,
                    remote_va_low,
                    remote_rkey: Be32::new(*rkey),
                    length: Be32::new(length as u32),
                    payload: body_payload,
                };
                bytes[..16].copy_from_slice(&header.to_bytes());
                bytes[16..].copy_from_slice(&body.to_bytes());
            }
            SendWqe::Atomic {
                common,
                remote_address,
                rkey,
                operation,
                result,
            } => {
                if result.length_bytes != 8 {
                    return Err(WqeEncodeError::AtomicResultLength {
                        length: result.length_bytes,
                    });
                }
                let (op, swap_add, compare) = match *operation {
                    AtomicOperation::FetchAdd { add } => {
                        (opcode(version, op_v1::ATOMIC_FA, op_v2::ATOMIC_FA), add, 0)
                    }
                    AtomicOperation::CompareSwap { compare, swap } => (
                        opcode(version, op_v1::ATOMIC_CS, op_v2::ATOMIC_CS),
                        swap,
                        compare,
                    ),
                };
                let header = WqeHeader {
                    wqe_id: common.wqe_id,
                    op,
                    num_sge_key: 1,
                    flags: Be16::new(flags_of(common, false)),
                    imm_data_key: Be32::new(0),
                };
                let (remote_va_high, remote_va_low) = split(*remote_address);
                let (swap_add_high, swap_add_low) = split(swap_add);
                let (compare_high, compare_low) = split(compare);
                bytes[..16].copy_from_slice(&header.to_bytes());
                let body = match version {
                    IonicVersion::V1 => AtomicBodyV1 {
                        remote_va_high,
                        remote_va_low,
                        remote_rkey: Be32::new(*rkey),
                        swap_add_high,
                        swap_add_low,
                        compare_high,
                        compare_low,
                        reserved: [0; 4],
                        sge_va: Be64::new(result.address),
                        sge_len: Be32::new(8),
                        sge_lkey: Be32::new(result.lkey),
                    }
                    .to_bytes(),
                    IonicVersion::V2 => AtomicBodyV2 {
                        remote_va_high,
                        remote_va_low,
                        remote_rkey: Be32::new(*rkey),
                        swap_add_high,
                        swap_add_low,
                        compare_high,
                        compare_low,
                        lkey: Be32::new(result.lkey),
                        local_va: Be64::new(result.address),
                        reserved_expdb: [0; 8],
                    }
                    .to_bytes(),
                };
                bytes[16..].copy_from_slice(&body);
            }
        }
        Ok(bytes)
    }

    /// What 64 bytes written for a device of `version` say, checking what this module would
    /// have written (an RDMA write or an atomic, known flags, scatter counts that fit).
    pub fn decode(version: IonicVersion, bytes: &[u8; WQE_BYTES]) -> Result<Self, WqeDecodeError> {
        let header = WqeHeader::from_bytes(bytes[..16].try_into().expect("16 bytes"));
        let flags = header.flags.get();
        if flags & !(FLAG_FENCE | FLAG_INL | FLAG_SIG | FLAG_COLOR) != 0 {
            return Err(WqeDecodeError::Flags { flags });
        }
        let common = WqeCommon {
            wqe_id: header.wqe_id,
            color: flags & FLAG_COLOR != 0,
            signaled: flags & FLAG_SIG != 0,
            fence: flags & FLAG_FENCE != 0,
        };
        let body: &[u8; 48] = bytes[16..].try_into().expect("48 bytes");
        let is = |v1: u8, v2: u8| header.op == opcode(version, v1, v2);
        if is(op_v1::RDMA_WRITE, op_v2::RDMA_WRITE)
            || is(op_v1::RDMA_WRITE_IMM, op_v2::RDMA_WRITE_IMM)
        {
            let rdma = RdmaBody::from_bytes(body);
            let length = rdma.length.get();
            let lengths = WqeDecodeError::Lengths {
                entries: header.num_sge_key,
                length,
            };
            let payload = if flags & FLAG_INL != 0 {
                if header.num_sge_key != 0 || length as usize > WQE_INLINE_BYTES {
                    return Err(lengths);
                }
                WritePayload::Inline(rdma.payload[..length as usize].to_vec())
            } else {
                let entries = usize::from(header.num_sge_key);
                if entries == 0 || entries > WQE_SGES {
                    return Err(lengths);
                }
                let buffers: Vec<LocalBuffer> = (0..entries)
                    .map(|index| {
                        let sge = Sge::from_bytes(
                            rdma.payload[index * 16..index * 16 + 16]
                                .try_into()
                                .expect("16 bytes"),
                        );
                        LocalBuffer {
                            address: sge.va.get(),
                            length_bytes: sge.len.get(),
                            lkey: sge.lkey.get(),
                        }
                    })
                    .collect();
                let total: u64 = buffers
                    .iter()
                    .map(|buffer| u64::from(buffer.length_bytes))
                    .sum();
                if total != u64::from(length) {
                    return Err(lengths);
                }
                WritePayload::Buffers(buffers)
            };
            return Ok(SendWqe::RdmaWrite {
                common,
                remote_address: join(rdma.remote_va_high, rdma.remote_va_low),
                rkey: rdma.remote_rkey.get(),
                payload,
                immediate: is(op_v1::RDMA_WRITE_IMM, op_v2::RDMA_WRITE_IMM)
                    .then(|| header.imm_data_key.get()),
            });
        }
        let fetch_add = is(op_v1::ATOMIC_FA, op_v2::ATOMIC_FA);
        if fetch_add || is(op_v1::ATOMIC_CS, op_v2::ATOMIC_CS) {
            let (remote, rkey, swap_add, compare, result) = match version {
                IonicVersion::V1 => {
                    let atomic = AtomicBodyV1::from_bytes(body);
                    (
                        join(atomic.remote_va_high, atomic.remote_va_low),
                        atomic.remote_rkey.get(),
                        join(atomic.swap_add_high, atomic.swap_add_low),
                        join(atomic.compare_high, atomic.compare_low),
                        LocalBuffer {
                            address: atomic.sge_va.get(),
                            length_bytes: atomic.sge_len.get(),
                            lkey: atomic.sge_lkey.get(),
                        },
                    )
                }
                IonicVersion::V2 => {
                    let atomic = AtomicBodyV2::from_bytes(body);
                    (
                        join(atomic.remote_va_high, atomic.remote_va_low),
                        atomic.remote_rkey.get(),
                        join(atomic.swap_add_high, atomic.swap_add_low),
                        join(atomic.compare_high, atomic.compare_low),
                        LocalBuffer {
                            address: atomic.local_va.get(),
                            length_bytes: 8,
                            lkey: atomic.lkey.get(),
                        },
                    )
                }
            };
            if header.num_sge_key != 1 || result.length_bytes != 8 || flags & FLAG_INL != 0 {
                return Err(WqeDecodeError::Lengths {
                    entries: header.num_sge_key,
                    length: result.length_bytes,
                });
            }
            return Ok(SendWqe::Atomic {
                common,
                remote_address: remote,
                rkey,
                operation: if fetch_add {
                    AtomicOperation::FetchAdd { add: swap_add }
                } else {
                    AtomicOperation::CompareSwap {
                        compare,
                        swap: swap_add,
                    }
                },
                result,
            });
        }
        Err(WqeDecodeError::Operation {
            op: header.op,
            version: match version {
                IonicVersion::V1 => 1,
                IonicVersion::V2 => 2,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn common() -> WqeCommon {
        WqeCommon {
            wqe_id: 7,
            color: true,
            signaled: true,
            fence: false,
        }
    }

    #[test]
    fn writes_and_atomics_round_trip_on_both_versions() {
        for version in [IonicVersion::V1, IonicVersion::V2] {
            for wqe in [
                SendWqe::RdmaWrite {
                    common: common(),
                    remote_address: 0x1234_5678_9abc_def0,
                    rkey: 0x42,
                    payload: WritePayload::Buffers(vec![LocalBuffer {
                        address: 0x1000,
                        length_bytes: 4096,
                        lkey: 9,
                    }]),
                    immediate: Some(0xdead_beef),
                },
                SendWqe::RdmaWrite {
                    common: common(),
                    remote_address: 0x2000,
                    rkey: 3,
                    payload: WritePayload::Inline(vec![1, 2, 3, 4, 5]),
                    immediate: None,
                },
                SendWqe::Atomic {
                    common: common(),
                    remote_address: 0x3000,
                    rkey: 5,
                    operation: AtomicOperation::CompareSwap {
                        compare: 1,
                        swap: 2,
                    },
                    result: LocalBuffer {
                        address: 0x4000,
                        length_bytes: 8,
                        lkey: 11,
                    },
                },
            ] {
                let bytes = wqe.encode(version).unwrap();
                assert_eq!(SendWqe::decode(version, &bytes).unwrap(), wqe);
            }
        }
    }

    #[test]
    fn what_a_64_byte_wqe_cannot_hold_is_refused() {
        let write = |payload| SendWqe::RdmaWrite {
            common: common(),
            remote_address: 0,
            rkey: 0,
            payload,
            immediate: None,
        };
        assert_eq!(
            write(WritePayload::Buffers(vec![LocalBuffer::default(); 3])).encode(IonicVersion::V2),
            Err(WqeEncodeError::BufferCount { count: 3 })
        );
        assert_eq!(
            write(WritePayload::Inline(vec![0; 33])).encode(IonicVersion::V2),
            Err(WqeEncodeError::InlineTooLong { length: 33 })
        );
        let mut bytes = write(WritePayload::Inline(vec![0; 4]))
            .encode(IonicVersion::V1)
            .unwrap();
        bytes[8] = op_v1::SEND;
        assert!(matches!(
            SendWqe::decode(IonicVersion::V1, &bytes),
            Err(WqeDecodeError::Operation { op: 0, version: 1 })
        ));
    }
}
