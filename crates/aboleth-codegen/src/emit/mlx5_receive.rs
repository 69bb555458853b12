//! The receive side of mlx5 write-with-immediate signals, inside a flag wait: the rank's
//! receive context read once before the loop (`aboleth_abi::mlx5::receive`), and one step of
//! draining its receive CQ per poll (the `receive_drain.ptx` template: apply the immediate to
//! its flag, post the receive again, advance the consumer index). The simulator's
//! `drain_receive_cq` does the same. The sending side is `mlx5.rs`'s RDMA_WRITE_IMM.

use super::ptx::fill_ptx;
use super::*;

impl Generator<'_> {
    /// What a receiving wait needs, read once before its loop: the rank's receive context
    /// (named by every endpoint handle; the first one's is used), its CQ, tables and doorbell
    /// record, and where the flags of `flag_table`'s region start on this rank.
    pub(super) fn receive_side(
        &mut self,
        flag_table: Value,
        endpoint_table: Value,
    ) -> Result<Vec<(String, &'static str, char)>, BridgeError> {
        use aboleth_abi::mlx5::receive::Mlx5ReceiveContext as Context;
        let endpoints = self.i64(endpoint_table)?;
        let context = self.load_field(
            &endpoints,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, receive_context_address) as u64,
            64,
        );
        let field = |this: &mut Self, offset: usize, width: u32| {
            this.load_field(&context, offset as u64, width)
        };
        let cq = field(self, core::mem::offset_of!(Context, cq_buffer_address), 64);
        // The 32-bit fields go to the PTX as i32 (`r` registers).
        let narrow = |this: &mut Self, value: String| {
            this.assign("ab_narrow", format!("arith.trunci {value} : i64 to i32"))
        };
        let cqe_count = field(self, core::mem::offset_of!(Context, cqe_count), 32);
        let cqe_count = narrow(self, cqe_count);
        let cq_doorbell = field(
            self,
            core::mem::offset_of!(Context, cq_doorbell_record_address),
            64,
        );
        let queues = field(self, core::mem::offset_of!(Context, queues_address), 64);
        let qpn_mask = field(self, core::mem::offset_of!(Context, qpn_mask), 32);
        let qpn_mask = narrow(self, qpn_mask);
        let peer_of_qpn = field(
            self,
            core::mem::offset_of!(Context, peer_of_qpn_address),
            64,
        );
        let local_rank = field(self, core::mem::offset_of!(Context, local_rank), 32);
        let table = self.i64(flag_table)?;
        let size = self.constant_i64(aboleth_abi::RemoteRegionDescriptor::SIZE_BYTES as i64);
        let offset = self.binary_i64("arith.muli", &local_rank, &size);
        let descriptor = self.binary_i64("arith.addi", &table, &offset);
        let flags_base = self.load_field(
            &descriptor,
            core::mem::offset_of!(aboleth_abi::RemoteRegionDescriptor, base_address) as u64,
            64,
        );
        let flags_bytes = self.load_field(
            &descriptor,
            core::mem::offset_of!(aboleth_abi::RemoteRegionDescriptor, length_bytes) as u64,
            64,
        );
        let wide = |name: String| (name, "i64", 'l');
        Ok(vec![
            wide(context),
            wide(cq),
            (cqe_count, "i32", 'r'),
            wide(cq_doorbell),
            wide(queues),
            (qpn_mask, "i32", 'r'),
            wide(peer_of_qpn),
            wide(flags_base),
            wide(flags_bytes),
        ])
    }

    /// One step of draining the receive CQ, by thread 0 under the context's poll lock: if the
    /// CQE at the consumer index is this lap's RDMA_WRITE_IMM completion, apply its immediate
    /// (`aboleth_abi::mlx5::receive::ImmediateSignal`: add or set a small value on flag `index`
    /// of this rank's flag region, with release), post the QP's receive again (its counter and
    /// its doorbell-record word), and advance the consumer index and the CQ doorbell record.
    /// Any other CQE opcode traps. The simulator's `drain_receive_cq` does the same.
    pub(super) fn drain_one_receive(&mut self, receives: &[(String, &'static str, char)]) {
        use aboleth_abi::mlx5::cqe::{CQE_OPCODE_INVALID, CQE_OPCODE_RESP_WR_IMM, Cqe64};
        use aboleth_abi::mlx5::receive::{
            IMMEDIATE_ADD_BIT, IMMEDIATE_INDEX_BITS, IMMEDIATE_VALUE_BITS, Mlx5ReceiveContext,
            Mlx5ReceiveQueue,
        };
        use core::mem::offset_of;
        // The owner word is the CQE's last 4 bytes read as one little-endian u32: op_own is its
        // top byte (opcode bits 31..28, format 27..26, owner 24).
        const _: () = assert!(offset_of!(Cqe64, op_own) == offset_of!(Cqe64, wqe_counter) + 3);
        const TEMPLATE: &str = "{ .reg .pred %ab_leader, %ab_got, %ab_valid, %ab_add, %ab_set, %ab_bad, %ab_odd_lap, %ab_not_add; .reg .u32 %ab_fmt, %ab_tid, %ab_lock, %ab_w, %ab_op, %ab_own, %ab_lap, %ab_imm, %ab_qpn, %ab_peer, %ab_index, %ab_value, %ab_posted32, %ab_ci32; .reg .u64 %ab_ci, %ab_slot, %ab_cqe, %ab_flag, %ab_value64, %ab_queue, %ab_posted, %ab_dbr, %ab_count64, %ab_peer64, %ab_index64, %ab_qpn64; mov.u32 %ab_tid, %tid.x; setp.eq.u32 %ab_leader, %ab_tid, 0; mov.u32 %ab_lock, 1; @%ab_leader atom.acquire.gpu.global.cas.b32 %ab_lock, [$1+@POLL_LOCK@], 0, 1; setp.eq.u32 %ab_got, %ab_lock, 0; and.pred %ab_got, %ab_got, %ab_leader; mov.u64 %ab_ci, 0; @%ab_got ld.volatile.global.u64 %ab_ci, [$1+@CONSUMER_INDEX@]; cvt.u64.u32 %ab_count64, $3; sub.u64 %ab_slot, %ab_count64, 1; and.b64 %ab_slot, %ab_slot, %ab_ci; mad.lo.u64 %ab_cqe, %ab_slot, @CQE_BYTES@, $2; mov.u32 %ab_w, 0xf0000000; @%ab_got ld.acquire.sys.global.u32 %ab_w, [%ab_cqe+@CQE_OWNER_WORD@]; shr.u32 %ab_op, %ab_w, 28; shr.u32 %ab_own, %ab_w, 24; and.b32 %ab_own, %ab_own, 1; cvt.u32.u64 %ab_ci32, %ab_ci; and.b32 %ab_lap, %ab_ci32, $3; setp.ne.u32 %ab_odd_lap, %ab_lap, 0; selp.u32 %ab_lap, 1, 0, %ab_odd_lap; setp.eq.u32 %ab_valid, %ab_own, %ab_lap; setp.ne.u32 %ab_bad, %ab_op, @OPCODE_INVALID@; and.pred %ab_valid, %ab_valid, %ab_bad; and.pred %ab_valid, %ab_valid, %ab_got; setp.ne.u32 %ab_bad, %ab_op, @OPCODE_WRITE_IMMEDIATE@; and.pred %ab_bad, %ab_bad, %ab_valid; @%ab_bad trap; shr.u32 %ab_fmt, %ab_w, 26; and.b32 %ab_fmt, %ab_fmt, 3; setp.ne.u32 %ab_bad, %ab_fmt, 0; and.pred %ab_bad, %ab_bad, %ab_valid; @%ab_bad trap; @%ab_valid ld.global.u32 %ab_imm, [%ab_cqe+@CQE_IMMEDIATE@]; prmt.b32 %ab_imm, %ab_imm, 0, 0x0123; @%ab_valid ld.global.u32 %ab_qpn, [%ab_cqe+@CQE_QPN@]; prmt.b32 %ab_qpn, %ab_qpn, 0, 0x0123; and.b32 %ab_qpn, %ab_qpn, $6; cvt.u64.u32 %ab_qpn64, %ab_qpn; mad.lo.u64 %ab_qpn64, %ab_qpn64, 4, $7; mov.u32 %ab_peer, 0; @%ab_valid ld.global.u32 %ab_peer, [%ab_qpn64]; and.b32 %ab_index, %ab_imm, @INDEX_MASK@; shr.u32 %ab_value, %ab_imm, @INDEX_BITS@; and.b32 %ab_value, %ab_value, @VALUE_MASK@; cvt.u64.u32 %ab_value64, %ab_value; cvt.u64.u32 %ab_index64, %ab_index; mad.lo.u64 %ab_flag, %ab_index64, 8, 8; setp.gt.u64 %ab_bad, %ab_flag, $9; and.pred %ab_bad, %ab_bad, %ab_valid; @%ab_bad trap; mad.lo.u64 %ab_flag, %ab_index64, 8, $8; setp.ge.u32 %ab_add, %ab_imm, @ADD_BIT_VALUE@; not.pred %ab_not_add, %ab_add; and.pred %ab_set, %ab_valid, %ab_not_add; and.pred %ab_add, %ab_add, %ab_valid; @%ab_add red.release.sys.global.add.u64 [%ab_flag], %ab_value64; @%ab_set st.release.sys.global.u64 [%ab_flag], %ab_value64; cvt.u64.u32 %ab_peer64, %ab_peer; mad.lo.u64 %ab_queue, %ab_peer64, @QUEUE_BYTES@, $5; mov.u64 %ab_posted, 0; @%ab_valid ld.global.u64 %ab_posted, [%ab_queue+@QUEUE_POSTED@]; add.u64 %ab_posted, %ab_posted, 1; @%ab_valid st.global.u64 [%ab_queue+@QUEUE_POSTED@], %ab_posted; mov.u64 %ab_dbr, 0; @%ab_valid ld.global.u64 %ab_dbr, [%ab_queue+@QUEUE_DOORBELL_RECORD@]; cvt.u32.u64 %ab_posted32, %ab_posted; and.b32 %ab_posted32, %ab_posted32, 65535; prmt.b32 %ab_posted32, %ab_posted32, 0, 0x0123; @%ab_valid st.relaxed.sys.global.b32 [%ab_dbr], %ab_posted32; add.u64 %ab_ci, %ab_ci, 1; @%ab_valid st.global.u64 [$1+@CONSUMER_INDEX@], %ab_ci; cvt.u32.u64 %ab_ci32, %ab_ci; and.b32 %ab_ci32, %ab_ci32, 16777215; prmt.b32 %ab_ci32, %ab_ci32, 0, 0x0123; @%ab_valid st.relaxed.sys.global.b32 [$4], %ab_ci32; @%ab_got st.release.gpu.global.b32 [$1+@POLL_LOCK@], 0; mov.u32 $0, 0; }";
        let ptx = fill_ptx(
            TEMPLATE,
            &[
                (
                    "POLL_LOCK",
                    offset_of!(Mlx5ReceiveContext, poll_lock) as u64,
                ),
                (
                    "CONSUMER_INDEX",
                    offset_of!(Mlx5ReceiveContext, consumer_index) as u64,
                ),
                ("CQE_BYTES", Cqe64::SIZE_BYTES as u64),
                ("CQE_OWNER_WORD", offset_of!(Cqe64, wqe_counter) as u64),
                ("OPCODE_INVALID", u64::from(CQE_OPCODE_INVALID)),
                ("OPCODE_WRITE_IMMEDIATE", u64::from(CQE_OPCODE_RESP_WR_IMM)),
                ("CQE_IMMEDIATE", offset_of!(Cqe64, imm_inval_pkey) as u64),
                ("CQE_QPN", offset_of!(Cqe64, sop_drop_qpn) as u64),
                ("INDEX_MASK", (1 << IMMEDIATE_INDEX_BITS) - 1),
                ("INDEX_BITS", u64::from(IMMEDIATE_INDEX_BITS)),
                ("VALUE_MASK", (1 << IMMEDIATE_VALUE_BITS) - 1),
                ("ADD_BIT_VALUE", 1 << IMMEDIATE_ADD_BIT),
                ("QUEUE_BYTES", Mlx5ReceiveQueue::SIZE_BYTES as u64),
                ("QUEUE_POSTED", offset_of!(Mlx5ReceiveQueue, posted) as u64),
                (
                    "QUEUE_DOORBELL_RECORD",
                    offset_of!(Mlx5ReceiveQueue, doorbell_record_address) as u64,
                ),
            ],
        );
        let typed: Vec<(&str, &str, char)> = receives
            .iter()
            .map(|(name, type_text, constraint)| (name.as_str(), *type_text, *constraint))
            .collect();
        self.asm(&ptx, &typed);
    }
}
