//! The receive side of mlx5 write-with-immediate signals, inside a flag wait: the rank's
//! receive context read once before the loop (`aboleth_abi::mlx5::receive`), and one step of
//! draining its receive CQ per poll (the `receive_drain.ptx` template: apply the immediate to
//! its flag, post the receive again, advance the consumer index). The simulator's
//! `drain_receive_cq` does the same. The sending side is `mlx5.rs`'s RDMA_WRITE_IMM.

use aboleth_ir::pliron::value::Value;

use super::ptx::fill_ptx;
use super::{BridgeError, Generator};

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
        let descriptor = self.table_entry(
            &table,
            &local_rank,
            aboleth_abi::RemoteRegionDescriptor::SIZE_BYTES,
        );
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
        const TEMPLATE: &str = include_str!("ptx/receive_drain.ptx");
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
