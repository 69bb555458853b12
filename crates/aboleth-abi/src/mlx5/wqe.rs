//! Send-queue WQEs: the byte-exact segments, builders for the RC requester WQEs that Aboleth
//! emits, and a decoder that turns ring bytes back into a [`DecodedWqe`].
//!
//! A WQE is a control segment followed by 16-byte segments; `ds` counts them, control included,
//! and the WQE occupies `ceil(ds / 4)` consecutive 64-byte basic blocks of the ring, modulo the
//! ring (it may wrap). Builders return whole basic blocks with the unused tail zeroed. The decoder
//! is strict: it rejects any `ds` other than the one the layout implies, so that a code-generator
//! bug surfaces in the simulator instead of on a NIC. It does not decode SEND, WAIT, UD/DC
//! address vectors or 4-byte extended atomics.
//!
//! Atomic operands are always big-endian in the WQE. The target word in memory (and the old value
//! landing in the local buffer) is host-endian, i.e. little-endian, under mlx5_core's default
//! `atomic_req_8B_endianness_mode = 1`; applying that is the simulator's job, not this module's.

use super::{
    EXTENDED_ATOMIC_OPMOD_8_BYTES, INLINE_SEG, OPCODE_ATOMIC_CS, OPCODE_ATOMIC_FA,
    OPCODE_ATOMIC_MASKED_CS, OPCODE_ATOMIC_MASKED_FA, OPCODE_DUMP, OPCODE_NOP, OPCODE_RDMA_READ,
    OPCODE_RDMA_WRITE, OPCODE_RDMA_WRITE_IMM, WQE_BASIC_BLOCK_BYTES, WQE_DS_UNIT_BYTES,
};
use crate::wire::{Be16, Be32, Be64, wire_layout};

/// Largest `ds` the control segment can hold (6 bits).
pub const WQE_DS_MAX: u8 = 63;
/// Basic blocks an inline write may span: 256 B, the usual BlueFlame buffer size.
pub const INLINE_WQE_BASIC_BLOCKS_MAX: usize = 4;
/// Largest inline payload [`rdma_write_inline`] accepts: 256 B minus control (16), remote address
/// (16) and the inline header (4).
pub const INLINE_BYTES_MAX: usize = INLINE_WQE_BASIC_BLOCKS_MAX * WQE_BASIC_BLOCK_BYTES - 36;

/// `struct mlx5_wqe_ctrl_seg` (16 B). Bytes equal the wire bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ControlSegment {
    /// BE32: opmod `[31:24]`, wqe_index `[23:8]` (unmasked 16-bit producer counter), opcode `[7:0]`.
    pub opmod_idx_opcode: Be32,
    /// BE32: QPN `[31:8]`, ds `[5:0]`.
    pub qpn_ds: Be32,
    /// WQE signature; 0 because signatures are never enabled.
    pub signature: u8,
    /// DC stream channel; 0 on RC.
    pub dci_stream_channel_id: Be16,
    /// Fence mode `[7:5]`, completion-event `[3:2]`, solicited `[1]`.
    pub fm_ce_se: u8,
    /// Immediate data, in network byte order (see [`ControlFields::immediate`]).
    pub imm: Be32,
}
wire_layout!(ControlSegment, 16, {
    opmod_idx_opcode: Be32 = 0, qpn_ds: Be32 = 4, signature: u8 = 8,
    dci_stream_channel_id: Be16 = 9, fm_ce_se: u8 = 11, imm: Be32 = 12,
});

/// The control segment's fields as host values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ControlFields {
    /// WQE opcode (`OPCODE_*`).
    pub opcode: u8,
    /// Opcode modifier (0, or `EXTENDED_ATOMIC_OPMOD_*` for masked atomics).
    pub opmod: u8,
    /// The send-queue producer counter of this WQE's first basic block (not masked to the ring).
    pub wqe_index: u16,
    /// Queue pair number; only the low 24 bits are encoded.
    pub qpn: u32,
    /// Number of 16-byte units in the WQE, control segment included.
    pub ds: u8,
    /// Fence mode, CQ update and solicited bits.
    pub fm_ce_se: u8,
    /// WQE signature byte.
    pub signature: u8,
    /// DC stream channel id.
    pub dci_stream_channel_id: u16,
    /// Immediate as the responder reads it. rdma-core's `mlx5dv_set_ctrl_seg` stores `imm` as
    /// given and verbs callers pass `imm_data` already big-endian, so the wire holds it
    /// big-endian; we take the host value and do the swap here.
    pub immediate: u32,
}

impl ControlSegment {
    /// Encodes the fields exactly as `mlx5dv_set_ctrl_seg` does (QPN bits above 24 are dropped).
    pub fn encode(fields: &ControlFields) -> Self {
        Self {
            opmod_idx_opcode: Be32::new(
                (u32::from(fields.opmod) << 24)
                    | (u32::from(fields.wqe_index) << 8)
                    | u32::from(fields.opcode),
            ),
            qpn_ds: Be32::new((fields.qpn << 8) | u32::from(fields.ds)),
            signature: fields.signature,
            dci_stream_channel_id: Be16::new(fields.dci_stream_channel_id),
            fm_ce_se: fields.fm_ce_se,
            imm: Be32::new(fields.immediate),
        }
    }

    /// Decodes the fields; `ds` is the whole low byte so that a bad value is visible.
    pub fn decode(&self) -> ControlFields {
        let opmod_idx_opcode = self.opmod_idx_opcode.get();
        let qpn_ds = self.qpn_ds.get();
        ControlFields {
            opcode: opmod_idx_opcode as u8,
            opmod: (opmod_idx_opcode >> 24) as u8,
            wqe_index: (opmod_idx_opcode >> 8) as u16,
            qpn: qpn_ds >> 8,
            ds: qpn_ds as u8,
            fm_ce_se: self.fm_ce_se,
            signature: self.signature,
            dci_stream_channel_id: self.dci_stream_channel_id.get(),
            immediate: self.imm.get(),
        }
    }
}

/// `struct mlx5_wqe_raddr_seg` (16 B).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteAddressSegment {
    /// Remote virtual address.
    pub raddr: Be64,
    /// Remote key.
    pub rkey: Be32,
    /// Must be zero.
    pub reserved: Be32,
}
wire_layout!(RemoteAddressSegment, 16, { raddr: Be64 = 0, rkey: Be32 = 8, reserved: Be32 = 12 });

/// `struct mlx5_wqe_data_seg` (16 B): one local gather/scatter entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataSegment {
    /// Length in bytes; bit 31 must be clear (set, it would read as an inline header).
    pub byte_count: Be32,
    /// Local key.
    pub lkey: Be32,
    /// Local virtual address.
    pub addr: Be64,
}
wire_layout!(DataSegment, 16, { byte_count: Be32 = 0, lkey: Be32 = 4, addr: Be64 = 8 });

/// `struct mlx5_wqe_inl_data_seg` (4 B): `BE32(length | INLINE_SEG)`, then the data, padded to 16 B.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InlineHeader {
    /// `length | INLINE_SEG`, big-endian.
    pub byte_count: Be32,
}
wire_layout!(InlineHeader, 4, { byte_count: Be32 = 0 });

/// `struct mlx5_wqe_atomic_seg` (16 B) of ATOMIC_FA (swap_add = add, compare = 0) and ATOMIC_CS.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AtomicSegment {
    /// The value added (FA) or swapped in (CS).
    pub swap_add: Be64,
    /// The compare value (CS); zero for FA.
    pub compare: Be64,
}
wire_layout!(AtomicSegment, 16, { swap_add: Be64 = 0, compare: Be64 = 8 });

/// The 8-byte masked fetch-and-add segment (16 B).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MaskedFetchAdd64Segment {
    /// The value added.
    pub add: Be64,
    /// Bits where carries stop (0 = one plain 64-bit add).
    pub field_boundary: Be64,
}
wire_layout!(MaskedFetchAdd64Segment, 16, { add: Be64 = 0, field_boundary: Be64 = 8 });

/// The 8-byte masked compare-and-swap segments: two 16-byte slots.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MaskedCompareSwap64Segment {
    /// Value swapped in (under `swap_mask`).
    pub swap: Be64,
    /// Value compared (under `compare_mask`).
    pub compare: Be64,
    /// Bits of the target that `swap` replaces.
    pub swap_mask: Be64,
    /// Bits of the target that are compared (0 = always succeed: an unconditional masked SET).
    pub compare_mask: Be64,
}
wire_layout!(MaskedCompareSwap64Segment, 32, {
    swap: Be64 = 0, compare: Be64 = 8, swap_mask: Be64 = 16, compare_mask: Be64 = 24,
});

/// The control fields shared by every builder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WqeCommon {
    /// Producer counter of the WQE's first basic block.
    pub wqe_index: u16,
    /// Queue pair number (24 bits).
    pub qpn: u32,
    /// Fence mode and CQ update bits (`FENCE_MODE_*` | `WQE_CTRL_*`).
    pub fm_ce_se: u8,
}

/// The remote side of an RDMA operation (the raddr segment).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteAddress {
    /// Remote virtual address.
    pub address: u64,
    /// Remote key (host value; encoded big-endian).
    pub rkey: u32,
}

/// A local buffer (one data segment).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalBuffer {
    /// Local virtual address.
    pub address: u64,
    /// Local key (host value; encoded big-endian).
    pub lkey: u32,
    /// Length; must be below 2^31.
    pub length_bytes: u32,
}

/// Operands of an 8-byte masked compare-and-swap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MaskedCompareSwap64 {
    /// Value swapped in.
    pub swap: u64,
    /// Value compared.
    pub compare: u64,
    /// Bits replaced.
    pub swap_mask: u64,
    /// Bits compared.
    pub compare_mask: u64,
}

/// A built WQE: whole 64-byte basic blocks, unused tail bytes zero.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wqe {
    basic_blocks: Vec<[u8; WQE_BASIC_BLOCK_BYTES]>,
}

impl Wqe {
    /// Number of basic blocks the WQE occupies in the ring.
    pub fn basic_block_count(&self) -> usize {
        self.basic_blocks.len()
    }

    /// The basic blocks, in ring order.
    pub fn basic_blocks(&self) -> &[[u8; WQE_BASIC_BLOCK_BYTES]] {
        &self.basic_blocks
    }

    /// All bytes, `basic_block_count() * 64` of them.
    pub fn as_bytes(&self) -> &[u8] {
        self.basic_blocks.as_flattened()
    }

    /// The `ds` written in the control segment.
    pub fn ds(&self) -> u8 {
        self.basic_blocks[0][7] & 0x3f
    }

    /// Copies the WQE into a send ring of `ring_basic_block_count` blocks starting at block
    /// `basic_block_index` (taken modulo the ring), wrapping as the NIC does.
    pub fn write_to_ring(
        &self,
        ring: &mut [u8],
        ring_basic_block_count: u32,
        basic_block_index: u32,
    ) -> Result<(), WqeDecodeError> {
        check_ring(ring.len(), ring_basic_block_count, self.basic_block_count())?;
        for (offset, block) in self.basic_blocks.iter().enumerate() {
            let slot = (basic_block_index as usize + offset) % ring_basic_block_count as usize;
            let start = slot * WQE_BASIC_BLOCK_BYTES;
            ring[start..start + WQE_BASIC_BLOCK_BYTES].copy_from_slice(block);
        }
        Ok(())
    }

    /// Assembles control + `body` (a multiple of 16 bytes) with `ds` computed from the body.
    fn assemble(common: &WqeCommon, opcode: u8, opmod: u8, immediate: u32, body: &[u8]) -> Self {
        debug_assert_eq!(body.len() % WQE_DS_UNIT_BYTES, 0);
        let ds = 1 + body.len() / WQE_DS_UNIT_BYTES;
        let control = ControlSegment::encode(&ControlFields {
            opcode,
            opmod,
            wqe_index: common.wqe_index,
            qpn: common.qpn,
            ds: u8::try_from(ds).expect("builders never exceed 63 ds"),
            fm_ce_se: common.fm_ce_se,
            immediate,
            ..ControlFields::default()
        });
        let mut bytes = control.to_bytes().to_vec();
        bytes.extend_from_slice(body);
        bytes.resize(bytes.len().next_multiple_of(WQE_BASIC_BLOCK_BYTES), 0);
        let basic_blocks = bytes
            .chunks_exact(WQE_BASIC_BLOCK_BYTES)
            .map(|block| block.try_into().expect("chunks of 64"))
            .collect();
        Self { basic_blocks }
    }
}

fn remote_segment(remote: RemoteAddress) -> [u8; 16] {
    RemoteAddressSegment {
        raddr: Be64::new(remote.address),
        rkey: Be32::new(remote.rkey),
        reserved: Be32::default(),
    }
    .to_bytes()
}

fn data_segment(local: LocalBuffer) -> [u8; 16] {
    DataSegment {
        byte_count: Be32::new(local.length_bytes),
        lkey: Be32::new(local.lkey),
        addr: Be64::new(local.address),
    }
    .to_bytes()
}

/// NOP (ds = 1). With `WQE_CTRL_CQ_UPDATE` it is a cheap completion marker.
pub fn nop(common: &WqeCommon) -> Wqe {
    Wqe::assemble(common, OPCODE_NOP, 0, 0, &[])
}

/// NOP occupying `basic_blocks` basic blocks (ds = 4 per block, at most 15 blocks): what a
/// command under a false predicate posts so that the slots planned for it stay filled.
pub fn nop_spanning_basic_blocks(common: &WqeCommon, basic_blocks: usize) -> Wqe {
    assert!(
        (1..=15).contains(&basic_blocks),
        "a NOP spans 1 to 15 basic blocks (ds <= 63), not {basic_blocks}"
    );
    let body = vec![0u8; basic_blocks * WQE_BASIC_BLOCK_BYTES - WQE_DS_UNIT_BYTES];
    Wqe::assemble(common, OPCODE_NOP, 0, 0, &body)
}

/// RDMA write from one local buffer: ctrl + raddr + data, ds = 3, one basic block.
pub fn rdma_write(common: &WqeCommon, remote: RemoteAddress, local: LocalBuffer) -> Wqe {
    Wqe::assemble(
        common,
        OPCODE_RDMA_WRITE,
        0,
        0,
        &[remote_segment(remote), data_segment(local)].concat(),
    )
}

/// RDMA write with immediate (`immediate` is the host value the responder sees), ds = 3.
pub fn rdma_write_imm(
    common: &WqeCommon,
    remote: RemoteAddress,
    local: LocalBuffer,
    immediate: u32,
) -> Wqe {
    let body = [remote_segment(remote), data_segment(local)].concat();
    Wqe::assemble(common, OPCODE_RDMA_WRITE_IMM, 0, immediate, &body)
}

/// RDMA read into one local buffer: ctrl + raddr + data, ds = 3.
pub fn rdma_read(common: &WqeCommon, remote: RemoteAddress, local: LocalBuffer) -> Wqe {
    Wqe::assemble(
        common,
        OPCODE_RDMA_READ,
        0,
        0,
        &[remote_segment(remote), data_segment(local)].concat(),
    )
}

/// RDMA write with the payload inline: ctrl + raddr + inline header + data,
/// ds = 2 + ceil((4 + len) / 16); up to [`INLINE_BYTES_MAX`] bytes (4 basic blocks).
pub fn rdma_write_inline(
    common: &WqeCommon,
    remote: RemoteAddress,
    payload: &[u8],
) -> Result<Wqe, WqeEncodeError> {
    rdma_write_inline_with(common, remote, payload, None)
}

/// RDMA write with immediate of an inline payload (the same segments as
/// [`rdma_write_inline`], opcode `RDMA_WRITE_IMM`).
pub fn rdma_write_imm_inline(
    common: &WqeCommon,
    remote: RemoteAddress,
    payload: &[u8],
    immediate: u32,
) -> Result<Wqe, WqeEncodeError> {
    rdma_write_inline_with(common, remote, payload, Some(immediate))
}

fn rdma_write_inline_with(
    common: &WqeCommon,
    remote: RemoteAddress,
    payload: &[u8],
    immediate: Option<u32>,
) -> Result<Wqe, WqeEncodeError> {
    if payload.len() > INLINE_BYTES_MAX {
        return Err(WqeEncodeError::InlineTooLong {
            length_bytes: payload.len(),
            length_bytes_max: INLINE_BYTES_MAX,
        });
    }
    let mut body = remote_segment(remote).to_vec();
    // The length fits in 31 bits: it was bounded above.
    let header = InlineHeader {
        byte_count: Be32::new(payload.len() as u32 | INLINE_SEG),
    };
    body.extend_from_slice(&header.to_bytes());
    body.extend_from_slice(payload);
    body.resize(body.len().next_multiple_of(WQE_DS_UNIT_BYTES), 0);
    Ok(match immediate {
        Some(immediate) => Wqe::assemble(common, OPCODE_RDMA_WRITE_IMM, 0, immediate, &body),
        None => Wqe::assemble(common, OPCODE_RDMA_WRITE, 0, 0, &body),
    })
}

/// 8-byte atomic fetch-and-add; the old value lands in `result`. ds = 4.
pub fn atomic_fetch_add(
    common: &WqeCommon,
    remote: RemoteAddress,
    add: u64,
    result: LocalBuffer,
) -> Wqe {
    let atomic = AtomicSegment {
        swap_add: Be64::new(add),
        compare: Be64::default(),
    };
    let body = [
        remote_segment(remote),
        atomic.to_bytes(),
        data_segment(result),
    ]
    .concat();
    Wqe::assemble(common, OPCODE_ATOMIC_FA, 0, 0, &body)
}

/// 8-byte atomic compare-and-swap; the old value lands in `result`. ds = 4.
pub fn atomic_compare_swap(
    common: &WqeCommon,
    remote: RemoteAddress,
    compare: u64,
    swap: u64,
    result: LocalBuffer,
) -> Wqe {
    let atomic = AtomicSegment {
        swap_add: Be64::new(swap),
        compare: Be64::new(compare),
    };
    let body = [
        remote_segment(remote),
        atomic.to_bytes(),
        data_segment(result),
    ]
    .concat();
    Wqe::assemble(common, OPCODE_ATOMIC_CS, 0, 0, &body)
}

/// 8-byte masked fetch-and-add (opmod 0x09), NVSHMEM's signal ADD. ds = 4.
pub fn masked_fetch_add_64(
    common: &WqeCommon,
    remote: RemoteAddress,
    add: u64,
    field_boundary: u64,
    result: LocalBuffer,
) -> Wqe {
    let masked = MaskedFetchAdd64Segment {
        add: Be64::new(add),
        field_boundary: Be64::new(field_boundary),
    };
    let body = [
        remote_segment(remote),
        masked.to_bytes(),
        data_segment(result),
    ]
    .concat();
    Wqe::assemble(
        common,
        OPCODE_ATOMIC_MASKED_FA,
        EXTENDED_ATOMIC_OPMOD_8_BYTES,
        0,
        &body,
    )
}

/// 8-byte masked compare-and-swap (opmod 0x09), NVSHMEM's signal SET. ds = 5, two basic blocks.
pub fn masked_compare_swap_64(
    common: &WqeCommon,
    remote: RemoteAddress,
    operands: MaskedCompareSwap64,
    result: LocalBuffer,
) -> Wqe {
    let masked = MaskedCompareSwap64Segment {
        swap: Be64::new(operands.swap),
        compare: Be64::new(operands.compare),
        swap_mask: Be64::new(operands.swap_mask),
        compare_mask: Be64::new(operands.compare_mask),
    };
    let body = [
        &remote_segment(remote)[..],
        &masked.to_bytes(),
        &data_segment(result),
    ]
    .concat();
    Wqe::assemble(
        common,
        OPCODE_ATOMIC_MASKED_CS,
        EXTENDED_ATOMIC_OPMOD_8_BYTES,
        0,
        &body,
    )
}

/// DUMP: the NIC reads `local` and discards it; with a fence mode it orders after earlier reads
/// and atomics (NVSHMEM's consistency fence). ctrl + data, ds = 2.
pub fn dump(common: &WqeCommon, local: LocalBuffer) -> Wqe {
    Wqe::assemble(common, OPCODE_DUMP, 0, 0, &data_segment(local))
}

/// Why a builder refused its input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WqeEncodeError {
    /// The inline payload does not fit the WQE size this encoder supports.
    #[error("inline payload of {length_bytes} B exceeds the maximum of {length_bytes_max} B")]
    InlineTooLong {
        /// Requested payload length.
        length_bytes: usize,
        /// [`INLINE_BYTES_MAX`].
        length_bytes_max: usize,
    },
}

/// What an RDMA write carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WritePayload {
    /// Data segments, gathered in order (possibly none: a zero-length write).
    Gather(Vec<LocalBuffer>),
    /// Inline bytes.
    Inline(Vec<u8>),
}

/// The operation of a decoded WQE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WqeOperation {
    /// NOP; the segments after control (if any) are ignored.
    Nop,
    /// RDMA write, or write with immediate when `with_immediate` (the value is in
    /// [`ControlFields::immediate`]).
    RdmaWrite {
        /// Destination.
        remote: RemoteAddress,
        /// Source.
        payload: WritePayload,
        /// Opcode was `RDMA_WRITE_IMM`.
        with_immediate: bool,
    },
    /// RDMA read.
    RdmaRead {
        /// Source.
        remote: RemoteAddress,
        /// Scatter list.
        local: Vec<LocalBuffer>,
    },
    /// Atomic fetch-and-add.
    AtomicFetchAdd {
        /// Target.
        remote: RemoteAddress,
        /// Addend.
        add: u64,
        /// Where the old value lands.
        result: LocalBuffer,
    },
    /// Atomic compare-and-swap.
    AtomicCompareSwap {
        /// Target.
        remote: RemoteAddress,
        /// Compare value.
        compare: u64,
        /// Swap value.
        swap: u64,
        /// Where the old value lands.
        result: LocalBuffer,
    },
    /// 8-byte masked fetch-and-add.
    MaskedFetchAdd64 {
        /// Target.
        remote: RemoteAddress,
        /// Addend.
        add: u64,
        /// Carry boundaries.
        field_boundary: u64,
        /// Where the old value lands.
        result: LocalBuffer,
    },
    /// 8-byte masked compare-and-swap.
    MaskedCompareSwap64 {
        /// Target.
        remote: RemoteAddress,
        /// Operands.
        operands: MaskedCompareSwap64,
        /// Where the old value lands.
        result: LocalBuffer,
    },
    /// DUMP of a local buffer.
    Dump {
        /// Buffer read by the NIC.
        local: LocalBuffer,
    },
}

/// A WQE read back from memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedWqe {
    /// Control segment fields (opcode, wqe_index, qpn, ds, fm_ce_se, immediate...).
    pub control: ControlFields,
    /// The operation and its operands.
    pub operation: WqeOperation,
}

impl DecodedWqe {
    /// Basic blocks the WQE occupies: `ceil(ds / 4)`.
    pub fn basic_block_count(&self) -> usize {
        usize::from(self.control.ds).div_ceil(WQE_BASIC_BLOCK_BYTES / WQE_DS_UNIT_BYTES)
    }
}

/// Why bytes do not form a WQE this crate understands.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WqeDecodeError {
    /// The ring's byte length is not `ring_basic_block_count * 64`, or the count is zero.
    #[error("ring of {ring_length_bytes} B does not hold {ring_basic_block_count} basic blocks")]
    RingSizeMismatch {
        /// Bytes given.
        ring_length_bytes: usize,
        /// Basic blocks claimed.
        ring_basic_block_count: u32,
    },
    /// The WQE would overlap itself in a ring this small.
    #[error(
        "WQE of {wqe_basic_block_count} basic blocks does not fit a ring of {ring_basic_block_count}"
    )]
    WqeLargerThanRing {
        /// Basic blocks of the WQE.
        wqe_basic_block_count: usize,
        /// Basic blocks of the ring.
        ring_basic_block_count: u32,
    },
    /// Fewer bytes than `ds` says.
    #[error("WQE needs {needed_bytes} B but only {available_bytes} B were given")]
    Truncated {
        /// Bytes `ds` implies.
        needed_bytes: usize,
        /// Bytes given.
        available_bytes: usize,
    },
    /// Opcode unknown, or known but not decoded by this crate (SEND, WAIT, ...).
    #[error("unknown or undecoded WQE opcode {opcode:#04x}")]
    UnknownOpcode {
        /// The opcode byte.
        opcode: u8,
    },
    /// Opmod not valid for the opcode (4-byte extended atomics are not decoded).
    #[error("opmod {opmod:#04x} is not valid for opcode {opcode:#04x}")]
    UnsupportedOpmod {
        /// The opcode byte.
        opcode: u8,
        /// The opmod byte.
        opmod: u8,
    },
    /// `ds` does not match the opcode's layout.
    #[error("ds {ds} is invalid for opcode {opcode:#04x}: expected {expected}")]
    BadDs {
        /// The opcode byte.
        opcode: u8,
        /// The ds found.
        ds: u8,
        /// What the layout allows.
        expected: &'static str,
    },
    /// The inline header's length disagrees with `ds`.
    #[error("inline length {length_bytes} B does not match ds {ds}")]
    InlineLengthMismatch {
        /// Length in the inline header.
        length_bytes: u32,
        /// The ds found.
        ds: u8,
    },
    /// An inline header where only a data segment is allowed (reads, atomics, or after gather).
    #[error("inline segment not allowed here in a WQE with opcode {opcode:#04x}")]
    UnexpectedInline {
        /// The opcode byte.
        opcode: u8,
    },
}

fn check_ring(
    ring_length_bytes: usize,
    ring_basic_block_count: u32,
    wqe_basic_block_count: usize,
) -> Result<(), WqeDecodeError> {
    if ring_basic_block_count == 0
        || ring_length_bytes != ring_basic_block_count as usize * WQE_BASIC_BLOCK_BYTES
    {
        return Err(WqeDecodeError::RingSizeMismatch {
            ring_length_bytes,
            ring_basic_block_count,
        });
    }
    if wqe_basic_block_count > ring_basic_block_count as usize {
        return Err(WqeDecodeError::WqeLargerThanRing {
            wqe_basic_block_count,
            ring_basic_block_count,
        });
    }
    Ok(())
}

/// Decodes the WQE starting at basic block `basic_block_index` (modulo the ring) of a send ring of
/// `ring_basic_block_count` blocks, following it across the ring's end.
pub fn decode_wqe_in_ring(
    ring: &[u8],
    ring_basic_block_count: u32,
    basic_block_index: u32,
) -> Result<DecodedWqe, WqeDecodeError> {
    check_ring(ring.len(), ring_basic_block_count, 1)?;
    let block_at = |offset: usize| {
        let slot = (basic_block_index as usize + offset) % ring_basic_block_count as usize;
        &ring[slot * WQE_BASIC_BLOCK_BYTES..(slot + 1) * WQE_BASIC_BLOCK_BYTES]
    };
    let ds = usize::from(block_at(0)[7] & 0x3f);
    let count = (ds * WQE_DS_UNIT_BYTES)
        .div_ceil(WQE_BASIC_BLOCK_BYTES)
        .max(1);
    check_ring(ring.len(), ring_basic_block_count, count)?;
    let bytes: Vec<u8> = (0..count)
        .flat_map(|offset| block_at(offset).iter().copied())
        .collect();
    decode_wqe(&bytes)
}

/// Decodes one WQE from contiguous bytes (at least `ds * 16` of them).
pub fn decode_wqe(bytes: &[u8]) -> Result<DecodedWqe, WqeDecodeError> {
    let truncated = |needed_bytes| WqeDecodeError::Truncated {
        needed_bytes,
        available_bytes: bytes.len(),
    };
    let control_bytes: &[u8; 16] = bytes
        .get(..16)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| truncated(16))?;
    let control = ControlSegment::from_bytes(control_bytes).decode();
    let (opcode, ds) = (control.opcode, control.ds);
    let bad_ds = |expected| WqeDecodeError::BadDs {
        opcode,
        ds,
        expected,
    };
    if ds == 0 || ds > WQE_DS_MAX {
        return Err(bad_ds("1..=63"));
    }
    let wqe_length_bytes = usize::from(ds) * WQE_DS_UNIT_BYTES;
    let segments = bytes
        .get(16..wqe_length_bytes)
        .ok_or_else(|| truncated(wqe_length_bytes))?;
    let expected_opmod = match opcode {
        OPCODE_ATOMIC_MASKED_CS | OPCODE_ATOMIC_MASKED_FA => EXTENDED_ATOMIC_OPMOD_8_BYTES,
        OPCODE_NOP
        | OPCODE_RDMA_WRITE
        | OPCODE_RDMA_WRITE_IMM
        | OPCODE_RDMA_READ
        | OPCODE_ATOMIC_FA
        | OPCODE_ATOMIC_CS
        | OPCODE_DUMP => 0,
        _ => return Err(WqeDecodeError::UnknownOpcode { opcode }),
    };
    if control.opmod != expected_opmod {
        return Err(WqeDecodeError::UnsupportedOpmod {
            opcode,
            opmod: control.opmod,
        });
    }
    let slot = |index: usize| -> &[u8; 16] {
        segments[index * 16..index * 16 + 16]
            .try_into()
            .expect("16-byte slot")
    };
    let remote = || {
        let segment = RemoteAddressSegment::from_bytes(slot(0));
        RemoteAddress {
            address: segment.raddr.get(),
            rkey: segment.rkey.get(),
        }
    };
    let data = |index: usize| -> Result<LocalBuffer, WqeDecodeError> {
        let segment = DataSegment::from_bytes(slot(index));
        let byte_count = segment.byte_count.get();
        if byte_count & INLINE_SEG != 0 {
            return Err(WqeDecodeError::UnexpectedInline { opcode });
        }
        Ok(LocalBuffer {
            address: segment.addr.get(),
            lkey: segment.lkey.get(),
            length_bytes: byte_count,
        })
    };
    let exact_ds = |wanted: u8, expected| {
        if ds == wanted {
            Ok(())
        } else {
            Err(bad_ds(expected))
        }
    };
    let operation = match opcode {
        OPCODE_NOP => WqeOperation::Nop,
        OPCODE_RDMA_WRITE | OPCODE_RDMA_WRITE_IMM => {
            if ds < 2 {
                return Err(bad_ds(">= 2 (ctrl + raddr + payload)"));
            }
            let first_word = segments
                .get(16..20)
                .map(|w| u32::from_be_bytes(w.try_into().expect("4")));
            let payload = match first_word {
                Some(word) if word & INLINE_SEG != 0 => {
                    let length_bytes = word & !INLINE_SEG;
                    let needed = (4 + length_bytes as usize).next_multiple_of(WQE_DS_UNIT_BYTES);
                    if 16 + needed != segments.len() {
                        return Err(WqeDecodeError::InlineLengthMismatch { length_bytes, ds });
                    }
                    WritePayload::Inline(segments[20..20 + length_bytes as usize].to_vec())
                }
                _ => WritePayload::Gather(
                    (1..usize::from(ds) - 1)
                        .map(data)
                        .collect::<Result<_, _>>()?,
                ),
            };
            WqeOperation::RdmaWrite {
                remote: remote(),
                payload,
                with_immediate: opcode == OPCODE_RDMA_WRITE_IMM,
            }
        }
        OPCODE_RDMA_READ => {
            if ds < 2 {
                return Err(bad_ds(">= 2 (ctrl + raddr + scatter)"));
            }
            let local = (1..usize::from(ds) - 1)
                .map(data)
                .collect::<Result<_, _>>()?;
            WqeOperation::RdmaRead {
                remote: remote(),
                local,
            }
        }
        OPCODE_ATOMIC_FA | OPCODE_ATOMIC_CS => {
            exact_ds(4, "4 (ctrl + raddr + atomic + data)")?;
            let atomic = AtomicSegment::from_bytes(slot(1));
            let (remote, result) = (remote(), data(2)?);
            if opcode == OPCODE_ATOMIC_FA {
                WqeOperation::AtomicFetchAdd {
                    remote,
                    add: atomic.swap_add.get(),
                    result,
                }
            } else {
                let (compare, swap) = (atomic.compare.get(), atomic.swap_add.get());
                WqeOperation::AtomicCompareSwap {
                    remote,
                    compare,
                    swap,
                    result,
                }
            }
        }
        OPCODE_ATOMIC_MASKED_FA => {
            exact_ds(4, "4 (ctrl + raddr + masked FA + data)")?;
            let masked = MaskedFetchAdd64Segment::from_bytes(slot(1));
            WqeOperation::MaskedFetchAdd64 {
                remote: remote(),
                add: masked.add.get(),
                field_boundary: masked.field_boundary.get(),
                result: data(2)?,
            }
        }
        OPCODE_ATOMIC_MASKED_CS => {
            exact_ds(5, "5 (ctrl + raddr + 2 masked CS slots + data)")?;
            let masked = MaskedCompareSwap64Segment::from_bytes(
                segments[16..48].try_into().expect("32-byte slots"),
            );
            let operands = MaskedCompareSwap64 {
                swap: masked.swap.get(),
                compare: masked.compare.get(),
                swap_mask: masked.swap_mask.get(),
                compare_mask: masked.compare_mask.get(),
            };
            WqeOperation::MaskedCompareSwap64 {
                remote: remote(),
                operands,
                result: data(3)?,
            }
        }
        OPCODE_DUMP => {
            exact_ds(2, "2 (ctrl + data)")?;
            WqeOperation::Dump { local: data(0)? }
        }
        _ => unreachable!("opcodes were filtered when checking the opmod"),
    };
    Ok(DecodedWqe { control, operation })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mlx5::{FENCE_MODE_FENCE, OPCODE_SEND, WQE_CTRL_CQ_UPDATE};

    const COMMON: WqeCommon = WqeCommon {
        wqe_index: 0x1234,
        qpn: 0xabcdef,
        fm_ce_se: 0x08,
    };
    const REMOTE: RemoteAddress = RemoteAddress {
        address: 0x1122_3344_5566_7788,
        rkey: 0x99,
    };
    const LOCAL: LocalBuffer = LocalBuffer {
        address: 0xa0b0,
        lkey: 0x42,
        length_bytes: 8,
    };

    #[test]
    fn rdma_write_bytes_are_the_documented_wire_bytes() {
        let wqe = rdma_write(&COMMON, REMOTE, LOCAL);
        let mut expected = [0u8; 64];
        expected[..16].copy_from_slice(&[
            0, 0x12, 0x34, 0x08, 0xab, 0xcd, 0xef, 3, 0, 0, 0, 8, 0, 0, 0, 0,
        ]);
        expected[16..28].copy_from_slice(&[
            0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0, 0, 0, 0x99,
        ]);
        expected[32..48]
            .copy_from_slice(&[0, 0, 0, 8, 0, 0, 0, 0x42, 0, 0, 0, 0, 0, 0, 0xa0, 0xb0]);
        assert_eq!(wqe.as_bytes(), expected);
        assert_eq!((wqe.ds(), wqe.basic_block_count()), (3, 1));
    }

    #[test]
    fn sizes_of_every_builder() {
        let operands = MaskedCompareSwap64::default();
        let inline = |length| rdma_write_inline(&COMMON, REMOTE, &vec![7; length]).unwrap();
        let cases = [
            (nop(&COMMON), 1, 1),
            (atomic_fetch_add(&COMMON, REMOTE, 1, LOCAL), 4, 1),
            (masked_fetch_add_64(&COMMON, REMOTE, 1, 0, LOCAL), 4, 1),
            (
                masked_compare_swap_64(&COMMON, REMOTE, operands, LOCAL),
                5,
                2,
            ),
            (dump(&COMMON, LOCAL), 2, 1),
            (inline(0), 3, 1),
            (inline(12), 3, 1),
            (inline(13), 4, 1),
            (inline(28), 4, 1),
            (inline(29), 5, 2),
            (inline(INLINE_BYTES_MAX), 16, 4),
        ];
        for (wqe, ds, basic_blocks) in cases {
            assert_eq!(
                (wqe.ds(), wqe.basic_block_count()),
                (ds, basic_blocks),
                "{wqe:?}"
            );
        }
        assert_eq!(
            rdma_write_inline(&COMMON, REMOTE, &[0; INLINE_BYTES_MAX + 1]),
            Err(WqeEncodeError::InlineTooLong {
                length_bytes: 221,
                length_bytes_max: 220
            })
        );
    }

    /// Builds a WQE, lets `corrupt` edit its bytes, and decodes the result.
    fn decode_corrupted(wqe: Wqe, corrupt: impl FnOnce(&mut Vec<u8>)) -> WqeDecodeError {
        let mut bytes = wqe.as_bytes().to_vec();
        corrupt(&mut bytes);
        decode_wqe(&bytes).unwrap_err()
    }

    #[test]
    fn malformed_wqes_are_rejected_with_a_reason() {
        let write = || rdma_write(&COMMON, REMOTE, LOCAL);
        let atomic = || atomic_fetch_add(&COMMON, REMOTE, 1, LOCAL);
        assert_eq!(
            decode_corrupted(write(), |b| b[3] = OPCODE_SEND),
            WqeDecodeError::UnknownOpcode {
                opcode: OPCODE_SEND
            }
        );
        assert_eq!(
            decode_corrupted(write(), |b| b[0] = 0x09),
            WqeDecodeError::UnsupportedOpmod {
                opcode: OPCODE_RDMA_WRITE,
                opmod: 0x09
            }
        );
        assert!(matches!(
            decode_corrupted(atomic(), |b| b[7] = 3),
            WqeDecodeError::BadDs {
                opcode: OPCODE_ATOMIC_FA,
                ds: 3,
                ..
            }
        ));
        assert!(matches!(
            decode_corrupted(write(), |b| b[7] = 0),
            WqeDecodeError::BadDs { .. }
        ));
        assert_eq!(
            decode_corrupted(atomic(), |b| b[48] |= 0x80),
            WqeDecodeError::UnexpectedInline {
                opcode: OPCODE_ATOMIC_FA
            }
        );
        let inline = rdma_write_inline(&COMMON, REMOTE, &[1; 12]).unwrap();
        assert_eq!(
            decode_corrupted(inline, |b| b[35] = 13),
            WqeDecodeError::InlineLengthMismatch {
                length_bytes: 13,
                ds: 3
            }
        );
        assert_eq!(
            decode_wqe(&write().as_bytes()[..40]),
            Err(WqeDecodeError::Truncated {
                needed_bytes: 48,
                available_bytes: 40
            })
        );
        assert_eq!(
            decode_wqe_in_ring(&[0; 100], 2, 0),
            Err(WqeDecodeError::RingSizeMismatch {
                ring_length_bytes: 100,
                ring_basic_block_count: 2
            })
        );
        let big = rdma_write_inline(&COMMON, REMOTE, &[0; 100]).unwrap();
        let mut ring = [0u8; 128];
        assert!(matches!(
            big.write_to_ring(&mut ring, 2, 0),
            Err(WqeDecodeError::WqeLargerThanRing { .. })
        ));
    }

    #[test]
    fn a_wqe_written_across_the_ring_end_wraps() {
        let wqe = masked_compare_swap_64(
            &WqeCommon {
                fm_ce_se: FENCE_MODE_FENCE | WQE_CTRL_CQ_UPDATE,
                ..COMMON
            },
            REMOTE,
            MaskedCompareSwap64 {
                swap: 5,
                compare: 0,
                swap_mask: u64::MAX,
                compare_mask: 0,
            },
            LOCAL,
        );
        let mut ring = vec![0u8; 4 * 64];
        wqe.write_to_ring(&mut ring, 4, 7).unwrap();
        assert_eq!(&ring[192..256], &wqe.as_bytes()[..64]);
        assert_eq!(&ring[..64], &wqe.as_bytes()[64..]);
        assert_eq!(
            decode_wqe_in_ring(&ring, 4, 3).unwrap(),
            decode_wqe(wqe.as_bytes()).unwrap()
        );
    }

    #[test]
    fn nop_spanning_basic_blocks_decodes_as_one_nop_of_that_size() {
        for blocks in [1usize, 2, 4, 15] {
            let wqe = nop_spanning_basic_blocks(&COMMON, blocks);
            assert_eq!(wqe.basic_block_count(), blocks);
            let decoded = decode_wqe(wqe.as_bytes()).expect("decodes");
            assert_eq!(decoded.basic_block_count(), blocks);
            assert_eq!(decoded.operation, WqeOperation::Nop);
        }
    }
}
