//! mlx5 send-queue ops in C++: the leader reserves basic blocks on the queue's management block
//! (reclaiming ring space from the collapsed CQ while it waits), writes each WQE's segments
//! big-endian into its blocks (RDMA_WRITE, RDMA_WRITE_IMM, a NOP for a false predicate,
//! ATOMIC_FA for an add signal, the 8-byte masked compare-and-swap for a set), publishes in
//! ticket order, takes the post lock of a shared queue, writes the doorbell record and rings
//! the UAR; a completion wait polls the collapsed CQ's CQE. The same protocol, ordering and
//! bytes as the TTIR encoding (`crate::emit::mlx5`, `crate::emit::queue`), on
//! `aboleth_abi::mlx5`'s layouts, declared in the header from the abi's field lists (the code
//! names fields; segment offsets within a WQE are the abi's sizes). An endpoint the code does
//! not support (a host-rung doorbell, a non-collapsed CQ) is refused at its `ab.endpoint`
//! through the wait-failure log, as tier 2 does. Inline puts and reservations every thread
//! writes are refused with an error (the library's operations, whose sizes are run-time values,
//! never produce them). Simulated and compiled, not run: no machine here has an RDMA NIC.

use std::fmt::Write as _;

use aboleth_abi::mlx5::wqe::{
    AtomicSegment, ControlSegment, DataSegment, MaskedCompareSwap64Segment, RemoteAddressSegment,
};
use aboleth_abi::mlx5::{WQE_BASIC_BLOCK_BYTES, WQE_DS_UNIT_BYTES};
use aboleth_ir::{
    ab::attributes::SignalOperation,
    attrs,
    pliron::{context::Ptr, operation::Operation, value::Value},
};

use super::{CudaGenerator, CudaMutation, Repr, Wait};
use crate::BridgeError;

/// Where the segments of the WQEs generated here start, in bytes from the WQE's start: the
/// control segment, the remote address, then the data segment, or the atomic operands followed
/// by the data segment of the fetched value's buffer (`crate::emit::mlx5` uses the same).
const REMOTE_OFFSET: usize = size_of::<ControlSegment>();
const DATA_OFFSET: usize = REMOTE_OFFSET + size_of::<RemoteAddressSegment>();
const FETCH_ADD_RESULT_OFFSET: usize = DATA_OFFSET + size_of::<AtomicSegment>();
const SWAP_RESULT_OFFSET: usize = DATA_OFFSET + size_of::<MaskedCompareSwap64Segment>();

/// A WQE of `bytes` in the control segment's `ds` units (16 bytes, rounded up).
const fn ds_units(bytes: usize) -> usize {
    bytes.div_ceil(WQE_DS_UNIT_BYTES)
}

/// The basic blocks a WQE ending at byte `end` spans.
const fn basic_blocks(end: usize) -> usize {
    end.div_ceil(WQE_BASIC_BLOCK_BYTES)
}

impl CudaGenerator<'_> {
    /// The endpoint's handle and its queue management block (C++ variables).
    fn mlx5_queue(&mut self, endpoint: Value) -> Result<(String, String), BridgeError> {
        let handle = self.u64(endpoint)?;
        let management = self.handle_field(&handle, "management", "management_address", "uint64_t");
        Ok((handle, management))
    }

    fn management_field(management: &str, field: &str) -> String {
        format!(
            "reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>({management})->{field})"
        )
    }

    /// The expression for the newest CQE's word that completion polls and ring reclaims read
    /// (`wqe_counter` and, in its top byte, `op_own`): slot 0 of a collapsed CQ, or, after one
    /// step of following a CQ ring, the ring-progress word ([`helpers`]' `mlx5_newest_cqe_word`).
    fn newest_cqe_word(&mut self, handle: &str, management: &str) -> String {
        format!("detail::mlx5_newest_cqe_word({handle}, {management})")
    }

    /// The send ring's size in basic blocks (a `uint64_t` variable).
    fn ring_blocks(&mut self, handle: &str) -> String {
        let count = self.handle_field(handle, "sq", "sq_wqe_basic_block_count", "uint32_t");
        format!("static_cast<uint64_t>({count})")
    }

    /// At an mlx5 `ab.endpoint`: a handle whose `cq_collapsed` is above 1, or whose CQ ring's
    /// `cqe_count` is not a power of two, makes the calling threads record
    /// `WAIT_KIND_UNSUPPORTED_ENDPOINT` and exit before posting anything (tier 2's check).
    pub(super) fn exit_unless_supported_mlx5_endpoint(&mut self, handle: &str) {
        let site = self.first_site + self.wait_sites.len() as u32;
        self.wait_sites
            .push("an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)");
        self.line(format!(
            "detail::mlx5_exit_unless_supported_endpoint({handle}, {site}u);"
        ));
    }

    /// `mlx5.reserve`: after the scope's barrier, the leader takes basic blocks and waits for
    /// ring space, reclaiming it from the collapsed CQ while it waits.
    pub(super) fn mlx5_reserve(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (handle, management) = self.mlx5_queue(self.operand(op, 0))?;
        let ring = self.ring_blocks(&handle);
        let head = Self::management_field(&management, "reserved_head");
        let consumer = Self::management_field(&management, "consumer_index");
        let newest = self.newest_cqe_word(&handle, &management);
        // The management block is device memory used by this GPU's programs only: GPU scope.
        let poll = format!(
            "detail::mlx5_reclaim_from_cq({newest}, {consumer}); asm volatile(\"ld.volatile.global.u64 %0, [%1];\" : \"=l\"(ab_seen) : \"l\"({consumer}) : \"memory\");"
        );
        let base = self.reserve_slots(
            op,
            &head,
            &consumer,
            &ring,
            "gpu",
            &poll,
            "free basic blocks in the mlx5 send queue",
        )?;
        self.define_scalar(op, base, "uint64_t".into());
        Ok(())
    }

    /// The addresses of basic blocks `slot .. slot + blocks` of the send ring (it wraps).
    fn basic_blocks(&mut self, handle: &str, slot: &str, blocks: usize) -> Vec<String> {
        let sq = self.handle_field(handle, "sq", "sq_buffer_address", "uint64_t");
        let ring = self.ring_blocks(handle);
        (0..blocks)
            .map(|index| {
                self.assign(
                    "block",
                    "uint64_t",
                    format!("{sq} + (({slot} + {index}u) % {ring}) * {WQE_BASIC_BLOCK_BYTES}u"),
                )
            })
            .collect()
    }

    /// A pointer to the segment of C++ type `segment` at byte `offset` of the WQE whose basic
    /// blocks are `blocks` (segments never straddle a block).
    fn segment(blocks: &[String], offset: usize, segment: &str) -> String {
        let block = offset / WQE_BASIC_BLOCK_BYTES;
        assert!(
            block < blocks.len(),
            "WQE offset {offset} past its basic blocks"
        );
        format!(
            "reinterpret_cast<{segment}*>({} + {}u)",
            blocks[block],
            offset % WQE_BASIC_BLOCK_BYTES
        )
    }

    /// The control segment's first two words: `opmod << 24 | wqe_index << 8 | opcode` and
    /// `qpn << 8 | ds` (host order; the helper stores them big-endian).
    fn control_words(
        &mut self,
        handle: &str,
        slot: &str,
        opcode: &str,
        opmod: &str,
        ds: usize,
    ) -> (String, String) {
        let qpn = self.handle_field(handle, "qpn", "qpn", "uint32_t");
        (
            format!(
                "(({opmod} << 24) | ((static_cast<uint32_t>({slot}) & 0xffffu) << 8) | {opcode})"
            ),
            format!("(({qpn} << 8) | {ds}u)"),
        )
    }

    /// The completion operand, or (for an op marked `periodic_completion`) 1 where the WQE at
    /// `slot` spanning `blocks` basic blocks starts at or covers a quarter of the ring
    /// ([`aboleth_abi::mlx5::periodic_completion`]), so that a full ring can be reclaimed by
    /// polling the CQ.
    fn effective_completion(
        &mut self,
        op: Ptr<Operation>,
        handle: &str,
        slot: &str,
        blocks: usize,
        completion: &str,
    ) -> String {
        if !attrs::get_bool(self.ctx, op, "periodic_completion") {
            return completion.to_string();
        }
        let ring = self.ring_blocks(handle);
        self.assign(
            "completion",
            "int64_t",
            format!(
                "detail::mlx5_periodic_completion({slot}, {blocks}u, {ring}, {completion} != 0)"
            ),
        )
    }

    /// `fm_ce_se`: CQ_UPDATE when the completion operand is nonzero, and the fence bit.
    fn completion_flags(completion: &str, fenced: bool) -> String {
        let fence = if fenced {
            "mlx5::FENCE_MODE_INITIATOR_SMALL"
        } else {
            "0u"
        };
        format!(
            "static_cast<uint8_t>(({completion} != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | {fence})"
        )
    }

    /// Remembers in the management block the last WQE that asks for a completion (its first
    /// basic block, and its end): what a drain waits for and then frees (`atom.max`: several
    /// programs may post to one queue).
    fn note_posted(&mut self, management: &str, slot: &str, blocks: usize, completion: &str) {
        self.leader_only(format!(
            "if ({completion} != 0) detail::mlx5_note_posted({management}, {slot}, {slot} + {blocks}u);"
        ));
    }

    /// The remote address and rkey of operand 2, the remote element a WQE writes.
    fn wqe_target(&mut self, op: Ptr<Operation>) -> Result<(String, String), BridgeError> {
        let Repr::RemotePointer { descriptor, .. } = self.repr(self.operand(op, 2))? else {
            return Err(BridgeError::plain(
                "internal: an mlx5 WQE without a remote pointer",
            ));
        };
        let remote = self.remote_address(self.operand(op, 2))?;
        let rkey = self.assign(
            "rkey",
            "uint32_t",
            format!("detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>({descriptor})->rkey)"),
        );
        Ok((remote, rkey))
    }

    /// `mlx5.write`: RDMA_WRITE (RDMA_WRITE_IMM when a signal rides on it) of the source's
    /// registered bytes, or a NOP over the same slot when the predicate is false.
    pub(super) fn mlx5_write(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        if attrs::get_bool(self.ctx, op, "inline") {
            return Err(BridgeError::not_built(
                "CUDA code generation (the device library) has no translation of an inline mlx5 put (its size must be a constant; the library's sizes are arguments)",
            ));
        }
        // A write-with-immediate signal: the immediate (operand 8) in the control segment; the
        // flag (operand 9) is named by a 20-bit element index, so a flag further into its
        // region would signal another one: that traps.
        let immediate = if attrs::get_bool(self.ctx, op, "with_immediate") {
            let Repr::RemotePointer { offset, .. } = self.repr(self.operand(op, 9))? else {
                return Err(BridgeError::plain(
                    "internal: a write with immediate without its flag",
                ));
            };
            let limit = 1u64 << (aboleth_abi::mlx5::receive::IMMEDIATE_INDEX_BITS + 3);
            self.line(format!("if ({offset} >= {limit}u) __trap();"));
            Some(self.use_as(self.operand(op, 8), "uint32_t")?)
        } else {
            None
        };
        let (handle, management) = self.mlx5_queue(self.operand(op, 0))?;
        let slot = self.u64(self.operand(op, 1))?;
        let (remote, rkey) = self.wqe_target(op)?;
        let source = self.u64(self.operand(op, 3))?;
        let bytes = self.use_as(self.operand(op, 4), "uint32_t")?;
        let key = self.use_as(self.operand(op, 5), "uint32_t")?;
        let predicate = self.i64(self.operand(op, 6))?;
        let completion = self.i64(self.operand(op, 7))?;
        let end = DATA_OFFSET + size_of::<DataSegment>();
        let blocks = self.basic_blocks(&handle, &slot, basic_blocks(end));
        let completion = self.effective_completion(op, &handle, &slot, blocks.len(), &completion);
        let flags = Self::completion_flags(&completion, false);
        let opcode = if immediate.is_some() {
            "mlx5::OPCODE_RDMA_WRITE_IMM"
        } else {
            "mlx5::OPCODE_RDMA_WRITE"
        };
        let (word0, word1) = self.control_words(&handle, &slot, opcode, "0u", ds_units(end));
        let (nop0, nop1) =
            self.control_words(&handle, &slot, "mlx5::OPCODE_NOP", "0u", blocks.len() * 4);
        let control = Self::segment(&blocks, 0, "Mlx5ControlSegment");
        let mut statement = format!(
            "if ({predicate} != 0) {{ detail::mlx5_control({control}, {word0}, {word1}, {flags}, {}); detail::mlx5_remote({}, {remote}, {rkey}); detail::mlx5_data({}, {bytes}, {key}, {source}); }}",
            immediate.as_deref().unwrap_or("0u"),
            Self::segment(&blocks, REMOTE_OFFSET, "Mlx5RemoteAddressSegment"),
            Self::segment(&blocks, DATA_OFFSET, "Mlx5DataSegment"),
        );
        // A false predicate posts a NOP over the same slots (the batch's size is static).
        let _ = write!(
            statement,
            " else {{ detail::mlx5_control({control}, {nop0}, {nop1}, {flags}, 0u); }}"
        );
        self.leader_only(statement);
        self.note_posted(&management, &slot, blocks.len(), &completion);
        Ok(())
    }

    /// `mlx5.atomic`: the signal as ATOMIC_FA (add) or as the 8-byte masked compare-and-swap
    /// with compare mask 0 (an unconditional set); the old value lands in the handle's
    /// atomic-result buffer.
    pub(super) fn mlx5_atomic(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (handle, management) = self.mlx5_queue(self.operand(op, 0))?;
        let slot = self.u64(self.operand(op, 1))?;
        let (remote, rkey) = self.wqe_target(op)?;
        let value = self.u64(self.operand(op, 3))?;
        let completion = self.i64(self.operand(op, 4))?;
        let add =
            attrs::get_typed::<SignalOperation>(self.ctx, op, "op") == Some(SignalOperation::Add);
        let end = if add {
            FETCH_ADD_RESULT_OFFSET + size_of::<DataSegment>()
        } else {
            SWAP_RESULT_OFFSET + size_of::<DataSegment>()
        };
        let blocks = self.basic_blocks(&handle, &slot, basic_blocks(end));
        let completion = self.effective_completion(op, &handle, &slot, blocks.len(), &completion);
        let flags = Self::completion_flags(&completion, attrs::get_bool(self.ctx, op, "fence"));
        let result_address =
            self.handle_field(&handle, "atomic", "atomic_result_address", "uint64_t");
        let result_key = self.handle_field(&handle, "atomic", "atomic_result_lkey", "uint32_t");
        let (opcode, opmod, operands, result_offset) = if add {
            (
                "mlx5::OPCODE_ATOMIC_FA",
                "0u",
                format!(
                    "detail::mlx5_fetch_add({}, {value});",
                    Self::segment(&blocks, DATA_OFFSET, "Mlx5AtomicSegment")
                ),
                FETCH_ADD_RESULT_OFFSET,
            )
        } else {
            (
                "mlx5::OPCODE_ATOMIC_MASKED_CS",
                "mlx5::EXTENDED_ATOMIC_OPMOD_8_BYTES",
                format!(
                    "detail::mlx5_masked_swap({}, {value});",
                    Self::segment(&blocks, DATA_OFFSET, "Mlx5MaskedCompareSwap64Segment")
                ),
                SWAP_RESULT_OFFSET,
            )
        };
        let (word0, word1) = self.control_words(&handle, &slot, opcode, opmod, ds_units(end));
        self.leader_only(format!(
            "detail::mlx5_control({}, {word0}, {word1}, {flags}, 0u); detail::mlx5_remote({}, {remote}, {rkey}); {operands} detail::mlx5_data({}, 8u, {result_key}, {result_address});",
            Self::segment(&blocks, 0, "Mlx5ControlSegment"),
            Self::segment(&blocks, REMOTE_OFFSET, "Mlx5RemoteAddressSegment"),
            Self::segment(&blocks, result_offset, "Mlx5DataSegment"),
        ));
        self.note_posted(&management, &slot, blocks.len(), &completion);
        Ok(())
    }

    /// `mlx5.publish`: in ticket order on the management block (GPU scope), or the one-owner
    /// store.
    pub(super) fn mlx5_publish(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (_, management) = self.mlx5_queue(self.operand(op, 0))?;
        let ready = Self::management_field(&management, "ready_head");
        self.publish_in_order(
            op,
            &ready,
            "gpu",
            "the turn to publish on the mlx5 send queue",
        )
    }

    /// `mlx5.lock`: the leader swaps the post lock 0 -> 1 until it gets it.
    pub(super) fn mlx5_lock(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let endpoint = self.operand(op, 0);
        let (handle, management) = self.mlx5_queue(endpoint)?;
        let lock = Self::management_field(&management, "post_send_lock");
        let peer = self.peer_of(&handle);
        let poll = format!(
            "asm volatile(\"atom.acquire.gpu.global.cas.b64 %0, [%1], 0, 1;\" : \"=l\"(ab_seen) : \"l\"({lock}) : \"memory\");"
        );
        self.bounded_poll(
            &poll,
            Wait {
                address: &lock,
                keep_waiting: "ab_seen != 0",
                expected: "0u",
                seen: "ab_seen",
                peer: &peer,
                kind: aboleth_abi::wait_failure::WAIT_KIND_POST_LOCK,
                what: "the post lock of the mlx5 send queue",
                leader_only: true,
            },
        );
        Ok(())
    }

    /// `mlx5.unlock`: the leader releases the post lock.
    pub(super) fn mlx5_unlock(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (_, management) = self.mlx5_queue(self.operand(op, 0))?;
        let lock = Self::management_field(&management, "post_send_lock");
        self.leader_only(format!(
            "asm volatile(\"st.release.gpu.global.u64 [%0], %1;\" :: \"l\"({lock}), \"l\"(uint64_t{{0}}) : \"memory\");"
        ));
        Ok(())
    }

    /// `mlx5.doorbell_record`: the send counter (the low 16 bits of the end, big-endian); with
    /// several producers the largest end wins (`atom.max` on the producer index, under the
    /// post lock).
    pub(super) fn mlx5_doorbell_record(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (handle, management) = self.mlx5_queue(self.operand(op, 0))?;
        let end = self.u64(self.operand(op, 1))?;
        let record = self.handle_field(&handle, "doorbell", "doorbell_record_address", "uint64_t");
        let producer = Self::management_field(&management, "producer_index");
        let relaxed = attrs::get_string(self.ctx, op, "order").as_deref() == Some("relaxed");
        let atomic_max = attrs::get_bool(self.ctx, op, "atomic_max");
        let flags = self.handle_field(&handle, "flags", "flags", "uint32_t");
        self.leader_only(format!(
            "detail::mlx5_doorbell_record(reinterpret_cast<Mlx5DoorbellRecord*>({record}), {producer}, {end}, {atomic_max}, {relaxed}, {flags});"
        ));
        Ok(())
    }

    /// `mlx5.doorbell`: the 8-byte UAR store of the largest recorded producer index, after a
    /// system fence.
    pub(super) fn mlx5_doorbell(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (handle, management) = self.mlx5_queue(self.operand(op, 0))?;
        let end = self.u64(self.operand(op, 1))?;
        let uar = self.handle_field(&handle, "uar", "uar_doorbell_address", "uint64_t");
        let qpn = self.handle_field(&handle, "qpn", "qpn", "uint32_t");
        let flags = self.handle_field(&handle, "flags", "flags", "uint32_t");
        let producer = Self::management_field(&management, "producer_index");
        self.leader_only(format!(
            "detail::mlx5_ring_doorbell({uar}, {producer}, {end}, {qpn}, {flags});"
        ));
        Ok(())
    }

    /// `mlx5.wait_completion`: the leader polls the collapsed CQ's CQE until its counter is at
    /// or after the target (a token's first basic block, or the last WQE that asked for a
    /// completion), frees the blocks up to its end, then the scope's barrier.
    pub(super) fn mlx5_wait_completion(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let endpoint = self.operand(op, 0);
        let (handle, management) = self.mlx5_queue(endpoint)?;
        let (target, freed) = if op.deref(self.ctx).get_num_operands() > 2 {
            (
                self.u64(self.operand(op, 1))?,
                self.u64(self.operand(op, 2))?,
            )
        } else {
            let last = Self::management_field(&management, "reserved");
            (
                self.assign(
                    "target",
                    "uint64_t",
                    format!("ab_leader ? detail::mlx5_last_posted({last}, 0) : 0"),
                ),
                self.assign(
                    "freed",
                    "uint64_t",
                    format!("ab_leader ? detail::mlx5_last_posted({last}, 1) : 0"),
                ),
            )
        };
        let newest = self.newest_cqe_word(&handle, &management);
        let counter_word = self.handle_field(&handle, "cq", "cq_buffer_address", "uint64_t");
        let peer = self.peer_of(&handle);
        let poll = format!("ab_seen = {newest};");
        let keep_waiting =
            format!("detail::mlx5_completion_pending(static_cast<uint32_t>(ab_seen), {target})");
        self.bounded_poll(
            &poll,
            Wait {
                address: &counter_word,
                keep_waiting: &keep_waiting,
                expected: &target,
                seen: "detail::mlx5_cqe_counter(static_cast<uint32_t>(ab_seen))",
                peer: &peer,
                kind: aboleth_abi::wait_failure::WAIT_KIND_COMPLETION,
                what: "a completion on the mlx5 CQ",
                leader_only: true,
            },
        );
        let consumer = Self::management_field(&management, "consumer_index");
        self.leader_only(format!(
            "[[maybe_unused]] uint64_t ab_old; asm volatile(\"atom.relaxed.gpu.global.max.u64 %0, [%1], %2;\" : \"=l\"(ab_old) : \"l\"({consumer}), \"l\"({freed}) : \"memory\");"
        ));
        if let Some(barrier) = self.scope.barrier() {
            self.line(barrier.into());
        }
        Ok(())
    }
}

/// The mlx5 layouts the generated bodies write and read, declared from `aboleth_abi`.
pub fn declarations() -> Vec<aboleth_abi::c_declarations::Declaration> {
    use aboleth_abi::declaration;
    vec![
        declaration!(aboleth_abi::Mlx5QueueManagement, "Mlx5QueueManagement"),
        declaration!(aboleth_abi::mlx5::wqe::ControlSegment, "Mlx5ControlSegment"),
        declaration!(
            aboleth_abi::mlx5::wqe::RemoteAddressSegment,
            "Mlx5RemoteAddressSegment"
        ),
        declaration!(aboleth_abi::mlx5::wqe::DataSegment, "Mlx5DataSegment"),
        declaration!(aboleth_abi::mlx5::wqe::AtomicSegment, "Mlx5AtomicSegment"),
        declaration!(
            aboleth_abi::mlx5::wqe::MaskedCompareSwap64Segment,
            "Mlx5MaskedCompareSwap64Segment"
        ),
        declaration!(
            aboleth_abi::mlx5::doorbell::DoorbellRecord,
            "Mlx5DoorbellRecord"
        ),
        declaration!(aboleth_abi::mlx5::cqe::Cqe64, "Mlx5Cqe64"),
    ]
}

/// The mlx5 constants and helpers the generated bodies call (in the implementation header of
/// the mlx5 library, after [`super::helpers`]): values from `aboleth_abi`, the big-endian
/// segment stores, the doorbell record and UAR stores, the CQE decoding of the completion poll
/// and of the ring reclaim (the PTX of `emit/ptx/completion_poll.ptx` and
/// `reclaim_from_cq.ptx`, in C++), and the endpoint check.
/// With [`CudaMutation::HostOrderWqes`], the big-endian stores keep the GPU's byte order.
pub fn helpers(mutation: Option<CudaMutation>) -> String {
    use aboleth_abi::mlx5::cqe::{CQE_OPCODE_INVALID, CQE_OPCODE_REQ_ERR, CQE_OPCODE_RESP_ERR};
    use aboleth_abi::mlx5::*;
    let constants: [(&str, u64); 17] = [
        ("OPCODE_NOP", OPCODE_NOP.into()),
        ("OPCODE_RDMA_WRITE", OPCODE_RDMA_WRITE.into()),
        ("OPCODE_RDMA_WRITE_IMM", OPCODE_RDMA_WRITE_IMM.into()),
        ("OPCODE_ATOMIC_FA", OPCODE_ATOMIC_FA.into()),
        ("OPCODE_ATOMIC_MASKED_CS", OPCODE_ATOMIC_MASKED_CS.into()),
        (
            "EXTENDED_ATOMIC_OPMOD_8_BYTES",
            EXTENDED_ATOMIC_OPMOD_8_BYTES.into(),
        ),
        ("WQE_CTRL_CQ_UPDATE", WQE_CTRL_CQ_UPDATE.into()),
        (
            "FENCE_MODE_INITIATOR_SMALL",
            FENCE_MODE_INITIATOR_SMALL.into(),
        ),
        (
            "PERIODIC_COMPLETION_RING_FRACTION",
            PERIODIC_COMPLETION_RING_FRACTION,
        ),
        ("CQE_OPCODE_INVALID", CQE_OPCODE_INVALID.into()),
        ("CQE_OPCODE_REQUESTER_ERROR", CQE_OPCODE_REQ_ERR.into()),
        ("CQE_OPCODE_RESPONDER_ERROR", CQE_OPCODE_RESP_ERR.into()),
        ("TRANSPORT_MLX5", aboleth_abi::Transport::Mlx5 as u64),
        (
            "ENDPOINT_FLAG_HOST_RINGS_DOORBELL",
            aboleth_abi::endpoint::ENDPOINT_FLAG_HOST_RINGS_DOORBELL.into(),
        ),
        (
            "WAIT_KIND_UNSUPPORTED_ENDPOINT",
            aboleth_abi::wait_failure::WAIT_KIND_UNSUPPORTED_ENDPOINT.into(),
        ),
        // A CQ ring's progress word (tier 2's `emit/mlx5.rs`): the third spare word.
        (
            "CQ_RING_PROGRESS_WORD",
            crate::emit::MLX5_CQ_RING_PROGRESS_SPARE_WORD,
        ),
        (
            "CQ_RING_WORD_XOR",
            crate::emit::MLX5_CQ_RING_WORD_XOR.into(),
        ),
    ];
    let mut text = String::from(
        "// The values of aboleth_abi's mlx5 constants the bodies use.\nnamespace mlx5 {\n",
    );
    for (name, value) in constants {
        let _ = writeln!(text, "constexpr uint32_t {name} = {value:#x}u;");
    }
    text.push_str("}  // namespace mlx5\n\n");
    if mutation == Some(CudaMutation::HostOrderWqes) {
        let swapped = "*reinterpret_cast<uint32_t*>(field) = byte_permute(value, 0, 0x0123);";
        assert!(MLX5_HELPERS.contains(swapped));
        text.push_str(&MLX5_HELPERS.replace(
            swapped,
            "*reinterpret_cast<uint32_t*>(field) = value;  // DELIBERATELY BROKEN: host byte order",
        ));
    } else {
        text.push_str(MLX5_HELPERS);
    }
    text
}

const MLX5_HELPERS: &str = r#"namespace detail {

// PTX prmt (nvcc's __byte_perm, which clang's header-less bitcode build lacks).
__device__ __forceinline__ uint32_t byte_permute(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t result;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(result) : "r"(a), "r"(b), "r"(selector));
  return result;
}

// A big-endian field: the bytes of `value`, most significant first.
__device__ __forceinline__ void store_be32(uint8_t* field, uint32_t value) {
  *reinterpret_cast<uint32_t*>(field) = byte_permute(value, 0, 0x0123);
}

__device__ __forceinline__ void store_be64(uint8_t* field, uint64_t value) {
  store_be32(field, static_cast<uint32_t>(value >> 32));
  store_be32(field + 4, static_cast<uint32_t>(value));
}

// The control segment: both words big-endian, signature and DC stream channel 0, fm_ce_se,
// and the immediate (big-endian; 0 when there is none).
__device__ __forceinline__ void mlx5_control(Mlx5ControlSegment* control, uint32_t opmod_idx_opcode,
                                             uint32_t qpn_ds, uint8_t fm_ce_se, uint32_t immediate) {
  store_be32(control->opmod_idx_opcode, opmod_idx_opcode);
  store_be32(control->qpn_ds, qpn_ds);
  // signature, dci_stream_channel_id and fm_ce_se as one word, fm_ce_se in its last byte.
  *reinterpret_cast<uint32_t*>(&control->signature) = static_cast<uint32_t>(fm_ce_se) << 24;
  store_be32(control->imm, immediate);
}

__device__ __forceinline__ void mlx5_remote(Mlx5RemoteAddressSegment* remote, uint64_t address, uint32_t rkey) {
  store_be64(remote->raddr, address);
  store_be32(remote->rkey, rkey);
  store_be32(remote->reserved, 0);
}

__device__ __forceinline__ void mlx5_data(Mlx5DataSegment* data, uint32_t bytes, uint32_t lkey, uint64_t address) {
  store_be32(data->byte_count, bytes);
  store_be32(data->lkey, lkey);
  store_be64(data->addr, address);
}

__device__ __forceinline__ void mlx5_fetch_add(Mlx5AtomicSegment* atomic, uint64_t value) {
  store_be64(atomic->swap_add, value);
  store_be64(atomic->compare, 0);
}

// An 8-byte masked compare-and-swap with compare mask 0: an unconditional swap.
__device__ __forceinline__ void mlx5_masked_swap(Mlx5MaskedCompareSwap64Segment* swap, uint64_t value) {
  store_be64(swap->swap, value);
  store_be64(swap->compare, 0);
  store_be64(swap->swap_mask, ~uint64_t{0});
  store_be64(swap->compare_mask, 0);
}

// aboleth_abi::mlx5::periodic_completion: a WQE asks for a completion where it starts at or
// covers a quarter of the ring, or where the program asked for one.
__device__ __forceinline__ int64_t mlx5_periodic_completion(uint64_t slot, uint64_t blocks, uint64_t ring,
                                                            bool requested) {
  int64_t quarter = static_cast<int64_t>(ring) / mlx5::PERIODIC_COMPLETION_RING_FRACTION;
  if (quarter < 1) quarter = 1;
  const int64_t within = static_cast<int64_t>(slot) % quarter;
  return (within == 0 || within + static_cast<int64_t>(blocks) > quarter || requested) ? 1 : 0;
}

// The management block's spare words: the last WQE that asked for a completion (its first
// basic block, then its end).
__device__ __forceinline__ void mlx5_note_posted(uint64_t management, uint64_t slot, uint64_t end) {
  uint64_t* last = reinterpret_cast<uint64_t*>(reinterpret_cast<Mlx5QueueManagement*>(management)->reserved);
  [[maybe_unused]] uint64_t old;
  asm volatile("atom.relaxed.gpu.global.max.u64 %0, [%1], %2;" : "=l"(old) : "l"(last), "l"(slot) : "memory");
  asm volatile("atom.relaxed.gpu.global.max.u64 %0, [%1], %2;" : "=l"(old) : "l"(last + 1), "l"(end) : "memory");
}

__device__ __forceinline__ uint64_t mlx5_last_posted(uint64_t last, int word) {
  uint64_t value;
  asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(value) : "l"(reinterpret_cast<uint64_t*>(last) + word)
               : "memory");
  return value;
}

// The send counter (the low 16 bits of the end, big-endian) in the doorbell record; with
// `atomic_max` the largest end any producer recorded in `producer` wins.
// On the staged path (ENDPOINT_FLAG_HOST_RINGS_DOORBELL) a host thread reads the record as the
// doorbell, before any later fence of this thread: the store releases the WQEs itself.
__device__ __forceinline__ void mlx5_doorbell_record(Mlx5DoorbellRecord* record, uint64_t producer, uint64_t end,
                                                     bool atomic_max, bool relaxed, uint32_t flags) {
  if ((flags & mlx5::ENDPOINT_FLAG_HOST_RINGS_DOORBELL) != 0) relaxed = false;
  if (atomic_max) {
    uint64_t old;
    asm volatile("atom.relaxed.gpu.global.max.u64 %0, [%1], %2;" : "=l"(old) : "l"(producer), "l"(end) : "memory");
    if (old > end) end = old;
  }
  const uint32_t counter = byte_permute(static_cast<uint32_t>(end) & 0xffffu, 0, 0x0123);
  if (relaxed) {
    asm volatile("st.volatile.global.b32 [%0], %1;" :: "l"(record->send_counter), "r"(counter) : "memory");
  } else {
    asm volatile("st.release.sys.global.b32 [%0], %1;" :: "l"(record->send_counter), "r"(counter) : "memory");
  }
}

// {BE32(producer_index << 8), BE32(qpn << 8)}: one 8-byte MMIO store, after a system fence (the
// WQE and doorbell-record stores must reach the NIC first; a release orders only what precedes
// it, not the MMIO store after it). On a shared queue another producer may already have
// recorded a larger index: ring the largest (never backwards).
// On the staged path the host rings: no store (the handle has no UAR address then).
__device__ __forceinline__ void mlx5_ring_doorbell(uint64_t uar, uint64_t producer, uint64_t end, uint32_t qpn,
                                                   uint32_t flags) {
  if ((flags & mlx5::ENDPOINT_FLAG_HOST_RINGS_DOORBELL) != 0) return;
  uint64_t largest;
  asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(largest) : "l"(producer) : "memory");
  if (end > largest) largest = end;
  const uint32_t low = byte_permute((static_cast<uint32_t>(largest) & 0xffffu) << 8, 0, 0x0123);
  const uint32_t high = byte_permute(qpn << 8, 0, 0x0123);
  const uint64_t value = (static_cast<uint64_t>(high) << 32) | low;
  asm volatile("fence.sc.sys;" ::: "memory");
  asm volatile("st.mmio.relaxed.sys.global.b64 [%0], %1;" :: "l"(uar), "l"(value) : "memory");
}

// The collapsed CQ's CQE word at wqe_counter, read as one little-endian word: the counter
// (big-endian 16 bits) in its low half, op_own in its top byte.
__device__ __forceinline__ uint32_t mlx5_cqe_counter(uint32_t word) { return byte_permute(word, 0, 0x4401); }

// True while the CQE does not yet report the WQE at `target` (no CQE yet, or an earlier one); a
// requester-error CQE traps.
__device__ __forceinline__ bool mlx5_completion_pending(uint32_t word, uint64_t target) {
  const uint32_t opcode = word >> 28;
  if (opcode == mlx5::CQE_OPCODE_REQUESTER_ERROR) __trap();
  const uint32_t distance = (mlx5_cqe_counter(word) - static_cast<uint32_t>(target)) & 0xffffu;
  return opcode == mlx5::CQE_OPCODE_INVALID || distance >= 0x8000u;
}

// The newest CQE's word (wqe_counter in its low half, op_own in its top byte). A collapsed CQ:
// slot 0's. A CQ ring (cq_collapsed 0): one step of following it first, as tier 2's
// cq_ring_advance.ptx does: the management block's ring-progress word holds the CQEs consumed
// (high half) and the newest one's word XOR CQ_RING_WORD_XOR (low half: a zeroed word reads as no
// CQE); a CQE of this lap (opcode valid, owner bit the lap's parity) is taken with one
// compare-and-swap (another thread that took it first leaves it to the next step).
__device__ __forceinline__ uint32_t mlx5_newest_cqe_word(uint64_t handle, uint64_t management) {
  const EndpointHandle* endpoint = reinterpret_cast<const EndpointHandle*>(handle);
  const uint64_t cq = table_load(&endpoint->cq_buffer_address);
  const uint64_t counter_offset = __builtin_offsetof(Mlx5Cqe64, wqe_counter);
  uint32_t word;
  if (table_load(&endpoint->cq_collapsed) != 0) {
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(word) : "l"(cq + counter_offset) : "memory");
    return word;
  }
  uint64_t* progress = reinterpret_cast<uint64_t*>(reinterpret_cast<Mlx5QueueManagement*>(management)->reserved) +
                       mlx5::CQ_RING_PROGRESS_WORD;
  uint64_t seen;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(seen) : "l"(progress) : "memory");
  const uint32_t consumed = static_cast<uint32_t>(seen >> 32);
  const uint32_t count = table_load(&endpoint->cqe_count);
  const uint64_t slot = cq + static_cast<uint64_t>(consumed & (count - 1)) * sizeof(Mlx5Cqe64);
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(word) : "l"(slot + counter_offset) : "memory");
  const uint32_t lap = (consumed / count) & 1u;
  if ((word >> 28) != mlx5::CQE_OPCODE_INVALID && ((word >> 24) & 1u) == lap) {
    const uint64_t next = (static_cast<uint64_t>(consumed + 1) << 32) | (word ^ mlx5::CQ_RING_WORD_XOR);
    [[maybe_unused]] uint64_t old;
    asm volatile("atom.acq_rel.gpu.global.cas.b64 %0, [%1], %2, %3;"
                 : "=l"(old) : "l"(progress), "l"(seen), "l"(next) : "memory");
    seen = next;
  }
  return static_cast<uint32_t>(seen) ^ mlx5::CQ_RING_WORD_XOR;
}

// While a reservation waits for ring space: when the CQE reports a WQE at or past the consumer
// index, free through that WQE's first block (completions are cumulative; the WQE's size is
// not in the CQE). An error CQE traps. The simulator's `reclaim_mlx5_ring` does the same.
__device__ __forceinline__ void mlx5_reclaim_from_cq(uint32_t word, uint64_t consumer) {
  const uint32_t opcode = word >> 28;
  if (opcode == mlx5::CQE_OPCODE_REQUESTER_ERROR || opcode == mlx5::CQE_OPCODE_RESPONDER_ERROR) __trap();
  if (opcode == mlx5::CQE_OPCODE_INVALID) return;
  uint64_t consumed;
  asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(consumed) : "l"(consumer) : "memory");
  const uint32_t distance = (mlx5_cqe_counter(word) - static_cast<uint32_t>(consumed)) & 0xffffu;
  if (distance < 0x8000u) {
    [[maybe_unused]] uint64_t old;
    asm volatile("atom.relaxed.gpu.global.max.u64 %0, [%1], %2;"
                 : "=l"(old) : "l"(consumer), "l"(consumed + distance + 1) : "memory");
  }
}

// The endpoint check: this library polls a collapsed CQ (cq_collapsed 1) or follows a CQ ring
// (0) of a power-of-two cqe_count; an mlx5 handle that says otherwise is recorded
// (WAIT_KIND_UNSUPPORTED_ENDPOINT, with its cq_collapsed and cqe_count) and the thread exits
// before posting anything. (A handle to this rank itself is p2p.)
__device__ __forceinline__ void mlx5_exit_unless_supported_endpoint(uint64_t handle, uint32_t site) {
  const EndpointHandle* endpoint = reinterpret_cast<const EndpointHandle*>(handle);
  const uint32_t collapsed = table_load(&endpoint->cq_collapsed);
  const uint32_t count = table_load(&endpoint->cqe_count);
  const bool bad_ring = collapsed == 0 && (count == 0 || (count & (count - 1)) != 0);
  if (table_load(&endpoint->transport) == mlx5::TRANSPORT_MLX5 && (collapsed > 1 || bad_ring)) {
    give_up(table_load(&endpoint->wait_failure_log_address), handle, collapsed,
            table_load(&endpoint->cqe_count), 0,
            table_load(&endpoint->local_rank), site, static_cast<int32_t>(table_load(&endpoint->peer_rank)),
            mlx5::WAIT_KIND_UNSUPPORTED_ENDPOINT);
  }
}

}  // namespace detail
"#;
