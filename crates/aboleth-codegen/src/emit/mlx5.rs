//! mlx5 code generation: WQEs (RDMA_WRITE, RDMA_WRITE_IMM, inline writes, NOPs, fetch-add and
//! masked-swap signals) written into the send queue's basic blocks by thread 0 through the
//! typed builder in `ptx/wqe.rs`, the doorbell record and the MMIO doorbell (skipped on the
//! staged path, `ENDPOINT_FLAG_HOST_RINGS_DOORBELL`, where a host thread rings), the post lock of
//! a shared queue, the completion poll of a collapsed CQ or of a CQ ring (followed one CQE at a
//! time in the management block's ring-progress word; the polls also reclaim ring space), and
//! the check that refuses an endpoint handle the generated code does not support. Layouts come
//! from `aboleth_abi::mlx5`; reservation and publication from `queue.rs`; the receive side of
//! immediates from `mlx5_receive.rs`. Simulated and cross-checked against rdma-core's layouts,
//! not run on hardware here.

use aboleth_ir::{
    ab::attributes::SignalOperation,
    attrs,
    pliron::{context::Ptr, operation::Operation, value::Value},
    text::op_name,
};

use super::ptx::{WqePtx, fill_ptx};
use super::{BridgeError, Generator, Repr, WaitReport};

impl Generator<'_> {
    /// mlx5: the generated code polls a collapsed CQ (`cq_collapsed` 1) or a CQ ring of
    /// `cqe_count` CQEs (`cq_collapsed` 0, `cqe_count` a power of two), and rings the doorbell
    /// itself unless the handle has `ENDPOINT_FLAG_HOST_RINGS_DOORBELL` (the staged path: a
    /// host thread watching the doorbell record rings it). A handle that says anything else
    /// makes every thread record `WAIT_KIND_UNSUPPORTED_ENDPOINT` and exit before posting
    /// anything, instead of polling CQEs where none land.
    pub(super) fn exit_unless_supported_mlx5_endpoint(&mut self, op: Ptr<Operation>, handle: &str) {
        use aboleth_abi::EndpointHandle;
        use core::mem::offset_of;
        let log = self.load_field(
            handle,
            offset_of!(EndpointHandle, wait_failure_log_address) as u64,
            64,
        );
        let rank = self.load_field(handle, offset_of!(EndpointHandle, local_rank) as u64, 32);
        let peer = self.load_field(handle, offset_of!(EndpointHandle, peer_rank) as u64, 32);
        let peer = self.assign("ab_peer", format!("arith.trunci {peer} : i64 to i32"));
        let collapsed =
            self.load_field(handle, offset_of!(EndpointHandle, cq_collapsed) as u64, 32);
        let cqe_count = self.load_field(handle, offset_of!(EndpointHandle, cqe_count) as u64, 32);
        let zero = self.constant_i64(0);
        let one = self.constant_i64(1);
        // Unsupported: cq_collapsed above 1, or a ring whose cqe_count is 0 or not a power of two.
        let garbage = self.assign(
            "ab_unsupported",
            format!("arith.cmpi ugt, {collapsed}, {one} : i64"),
        );
        let ring = self.assign(
            "ab_unsupported",
            format!("arith.cmpi eq, {collapsed}, {zero} : i64"),
        );
        let below = self.binary_i64("arith.subi", &cqe_count, &one);
        let shared_bits = self.binary_i64("arith.andi", &cqe_count, &below);
        let not_power = self.assign(
            "ab_unsupported",
            format!("arith.cmpi ne, {shared_bits}, {zero} : i64"),
        );
        let empty = self.assign(
            "ab_unsupported",
            format!("arith.cmpi eq, {cqe_count}, {zero} : i64"),
        );
        let bad_size = self.assign(
            "ab_unsupported",
            format!("arith.ori {not_power}, {empty} : i1"),
        );
        let bad_ring = self.assign(
            "ab_unsupported",
            format!("arith.andi {ring}, {bad_size} : i1"),
        );
        let either = self.assign(
            "ab_unsupported",
            format!("arith.ori {garbage}, {bad_ring} : i1"),
        );
        // Only mlx5 handles (a kernel's endpoint to its own rank is p2p).
        let transport = self.load_field(handle, offset_of!(EndpointHandle, transport) as u64, 32);
        let mlx5 = self.constant_i64(aboleth_abi::Transport::Mlx5 as i64);
        let is_mlx5 = self.assign(
            "ab_unsupported",
            format!("arith.cmpi eq, {transport}, {mlx5} : i64"),
        );
        let unsupported = self.assign(
            "ab_unsupported",
            format!("arith.andi {either}, {is_mlx5} : i1"),
        );
        let bound = self.failure_site(op, log, rank);
        let report = WaitReport {
            waiting: unsupported.clone(),
            address: handle.to_owned(),
            expected: collapsed,
            seen: cqe_count,
            peer,
            kind: aboleth_abi::wait_failure::WAIT_KIND_UNSUPPORTED_ENDPOINT,
        };
        self.record_failure_if(&bound, &unsupported, &zero, &report);
    }

    /// Where the completion polls of the endpoint read the newest CQE's counter word, and what
    /// advancing a CQ ring needs ([`CqPoll`]): on a collapsed CQ the word is slot 0's; on a ring
    /// it is the management block's ring-progress word, which [`Self::advance_cq_ring`] keeps.
    pub(super) fn cq_poll(&mut self, handle: &str, management: &str) -> CqPoll {
        use aboleth_abi::EndpointHandle;
        use core::mem::offset_of;
        let cq = self.handle_field(handle, offset_of!(EndpointHandle, cq_buffer_address), 64);
        let collapsed = self.handle_field(handle, offset_of!(EndpointHandle, cq_collapsed), 32);
        let cqe_count = self.handle_field(handle, offset_of!(EndpointHandle, cqe_count), 32);
        let slot_zero_word = self.offset_address(&cq, CQE_COUNTER_WORD_OFFSET_BYTES);
        let ring_progress =
            self.offset_address(management, MANAGEMENT_CQ_RING_PROGRESS_OFFSET_BYTES);
        let zero = self.constant_i64(0);
        let is_ring = self.assign(
            "ab_cq_ring",
            format!("arith.cmpi eq, {collapsed}, {zero} : i64"),
        );
        let counter_word = self.assign(
            "ab_cq_word",
            format!("arith.select {is_ring}, {ring_progress}, {slot_zero_word} : i64"),
        );
        let invalid = self.constant_i64(i64::from(MLX5_CQ_RING_WORD_XOR));
        let word_xor = self.assign(
            "ab_cq_xor",
            format!("arith.select {is_ring}, {invalid}, {zero} : i64"),
        );
        CqPoll {
            counter_word,
            word_xor,
            ring_progress,
            cq,
            cqe_count,
            collapsed,
        }
    }

    /// One step of following a CQ ring (nothing on a collapsed CQ): the leader reads the CQE at
    /// the ring position kept in the ring-progress word and, when it is this lap's (opcode not
    /// invalid, owner bit the lap's parity), moves the position past it and keeps its counter
    /// word, with one compare-and-swap (acq_rel: a program that learns of the completion from
    /// the word also sees what the NIC wrote before the CQE; another program may have taken the
    /// CQE first: the next step retries). The polls then read that word as they read a
    /// collapsed CQ's.
    pub(super) fn advance_cq_ring(&mut self, cq_poll: &CqPoll) {
        self.asm(
            &fill_ptx(
                include_str!("ptx/cq_ring_advance.ptx"),
                &[
                    cqe_opcodes()[0],
                    (
                        "CQE_BYTES",
                        aboleth_abi::mlx5::cqe::Cqe64::SIZE_BYTES as u64,
                    ),
                    ("CQE_COUNTER_WORD", CQE_COUNTER_WORD_OFFSET_BYTES),
                    ("INVALID_WORD", u64::from(MLX5_CQ_RING_WORD_XOR)),
                ],
            ),
            &[
                (&cq_poll.ring_progress, "i64", 'l'),
                (&cq_poll.cq, "i64", 'l'),
                (&cq_poll.cqe_count, "i64", 'l'),
                (&cq_poll.collapsed, "i64", 'l'),
            ],
        );
    }

    pub(super) fn handle_field(&mut self, handle: &str, offset: usize, width: u32) -> String {
        self.load_field(handle, offset as u64, width)
    }

    /// The endpoint's handle address and its queue management block (mlx5 and Ionic).
    pub(super) fn queue_of(&mut self, endpoint: Value) -> Result<(String, String), BridgeError> {
        let handle = self.i64(endpoint)?;
        let management = self.handle_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, management_address),
            64,
        );
        Ok((handle, management))
    }

    pub(super) fn mlx5_reserve(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (handle, management) = self.queue_of(self.operand(op, 0))?;
        let ring = self.handle_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, sq_wqe_basic_block_count),
            32,
        );
        let head = self.offset_address(
            &management,
            core::mem::offset_of!(aboleth_abi::Mlx5QueueManagement, reserved_head) as u64,
        );
        // Ring space: the completion waits advance `consumer_index`.
        let consumer = self.offset_address(
            &management,
            core::mem::offset_of!(aboleth_abi::Mlx5QueueManagement, consumer_index) as u64,
        );
        // The CQE word a full ring is reclaimed from.
        let cq_poll = self.cq_poll(&handle, &management);
        // The management block is device memory used by this GPU's programs only: GPU scope.
        self.reserve_slots(
            op,
            &head,
            &consumer,
            &ring,
            "gpu",
            "ld.volatile.global.u64",
            Some(&super::queue::Reclaim::Mlx5(cq_poll)),
        )
    }

    /// While a reservation waits for send-ring space: the leader reads the collapsed CQ's CQE
    /// (`wqe_counter` big-endian at byte 60, `op_own` at 63) and, when it reports a WQE at or
    /// past the consumer index, frees through that WQE's first block (completions are
    /// cumulative; the WQE's size is not in the CQE). An error CQE traps. The simulator's
    /// `reclaim_mlx5_ring` does the same.
    pub(super) fn reclaim_from_cq(&mut self, cq_poll: &CqPoll, consumer: &str) {
        self.advance_cq_ring(cq_poll);
        self.asm(
            &fill_ptx(include_str!("ptx/reclaim_from_cq.ptx"), &cqe_opcodes()),
            &[
                (&cq_poll.counter_word, "i64", 'l'),
                (consumer, "i64", 'l'),
                (&cq_poll.word_xor, "i64", 'l'),
            ],
        );
    }

    /// The address of basic block `slot + index` of the send ring (the ring wraps).
    pub(super) fn basic_block_address(&mut self, handle: &str, slot: &str, index: i64) -> String {
        let sq = self.handle_field(
            handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, sq_buffer_address),
            64,
        );
        let ring = self.handle_field(
            handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, sq_wqe_basic_block_count),
            32,
        );
        let offset = self.constant_i64(index);
        let position = self.binary_i64("arith.addi", slot, &offset);
        let wrapped = self.binary_i64("arith.remsi", &position, &ring);
        let bytes = self.constant_i64(aboleth_abi::mlx5::WQE_BASIC_BLOCK_BYTES as i64);
        let within = self.binary_i64("arith.muli", &wrapped, &bytes);
        self.binary_i64("arith.addi", &sq, &within)
    }

    /// The raw control words: `opmod << 24 | wqe_index << 8 | opcode` and `qpn << 8 | ds`
    /// (byte-swapped to big-endian by the PTX that stores them).
    pub(super) fn control_words(
        &mut self,
        handle: &str,
        slot: &str,
        opcode: u8,
        opmod: u8,
        ds: &str,
    ) -> (String, String) {
        let mask = self.constant_i64(0xffff);
        let index = self.binary_i64("arith.andi", slot, &mask);
        let eight = self.constant_i64(8);
        let shifted = self.binary_i64("arith.shli", &index, &eight);
        let fixed = self.constant_i64((i64::from(opmod) << 24) | i64::from(opcode));
        let word0 = self.binary_i64("arith.ori", &shifted, &fixed);
        let qpn = self.handle_field(
            handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, qpn),
            32,
        );
        let qpn_shifted = self.binary_i64("arith.shli", &qpn, &eight);
        let word1 = self.binary_i64("arith.ori", &qpn_shifted, ds);
        (word0, word1)
    }

    /// Runs `ptx` (thread 0 stores) with the WQE words.
    pub(super) fn store_wqe(&mut self, wqe: WqePtx) {
        let (ptx, operands) = wqe.finish();
        let typed: Vec<(&str, &str, char)> = operands
            .iter()
            .map(|(name, ty, c)| (name.as_str(), *ty, *c))
            .collect();
        self.asm(&ptx, &typed);
    }

    /// The remote address and rkey of operand 2, the remote element a WQE writes.
    pub(super) fn wqe_target(
        &mut self,
        op: Ptr<Operation>,
    ) -> Result<(String, String), BridgeError> {
        let Repr::RemotePointer { descriptor, .. } = self.repr(self.operand(op, 2))? else {
            return Err(BridgeError::plain(format!(
                "internal: {} without a remote pointer",
                op_name(self.ctx, op)
            )));
        };
        let remote = self.remote_address(self.operand(op, 2))?;
        let rkey = self.load_field(
            &descriptor,
            core::mem::offset_of!(aboleth_abi::RemoteRegionDescriptor, rkey) as u64,
            32,
        );
        Ok((remote, rkey))
    }

    pub(super) fn mlx5_write(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        // A write-with-immediate signal rides on this put: RDMA_WRITE_IMM, the immediate in the
        // control segment (operand 8; operand 9, the flag, is only for the simulator's checks).
        let immediate = if attrs::get_bool(self.ctx, op, "with_immediate") {
            // The immediate names the flag by a 20-bit element index: a flag further into its
            // region would signal another one, so that traps.
            let Repr::RemotePointer { offset, .. } = self.repr(self.operand(op, 9))? else {
                return Err(BridgeError::plain(
                    "internal: a write with immediate without its flag",
                ));
            };
            let limit =
                self.constant_i64(1 << (aboleth_abi::mlx5::receive::IMMEDIATE_INDEX_BITS + 3));
            let beyond = self.assign(
                "ab_beyond",
                format!("arith.cmpi uge, {offset}, {limit} : i64"),
            );
            self.emit(format!("scf.if {beyond} {{"));
            let dummy = self.constant_i64(0);
            self.asm("trap; mov.u32 $0, 0;", &[(&dummy, "i64", 'l')]);
            self.emit("}".into());
            Some(self.i64(self.operand(op, 8))?)
        } else {
            None
        };
        let endpoint = self.operand(op, 0);
        let (handle, management) = self.queue_of(endpoint)?;
        let slot = self.i64(self.operand(op, 1))?;
        let (remote, rkey) = self.wqe_target(op)?;
        let source = self.use_as(self.operand(op, 3), "i64")?;
        let bytes_value = self.operand(op, 4);
        let bytes = self.i64(bytes_value)?;
        let key = self.i64(self.operand(op, 5))?;
        let predicate = self.i64(self.operand(op, 6))?;
        let completion = self.i64(self.operand(op, 7))?;
        let inline = attrs::get_bool(self.ctx, op, "inline");
        let inline_bytes = if inline {
            Some(
                aboleth_ir::scalar::constant_value(self.ctx, bytes_value).ok_or_else(|| {
                    BridgeError::plain("internal: an inline put without a constant size")
                })?,
            )
        } else {
            None
        };
        let blocks = match inline_bytes {
            Some(length) => aboleth_passes::support::queue_slots::inline_write_basic_blocks(length),
            None => 1,
        };
        let addresses: Vec<String> = (0..blocks)
            .map(|index| self.basic_block_address(&handle, &slot, index))
            .collect();
        let zero = self.constant_i64(0);
        let sends = self.assign(
            "ab_sends",
            format!("arith.cmpi ne, {predicate}, {zero} : i64"),
        );
        let completion = self.effective_completion(op, &handle, &slot, blocks, &completion);
        let flags = self.completion_flags(&completion, false);
        // A false predicate posts a NOP over the same slots (the batch's size is static).
        self.emit(format!("scf.if {sends} {{"));
        let write_ds = match inline_bytes {
            Some(length) => ds_units(INLINE_DATA_OFFSET + length as u32),
            None => ds_units(DATA_OFFSET + DATA_SEGMENT_BYTES),
        };
        let ds = self.constant_i64(write_ds);
        let opcode = if immediate.is_some() {
            aboleth_abi::mlx5::OPCODE_RDMA_WRITE_IMM
        } else {
            aboleth_abi::mlx5::OPCODE_RDMA_WRITE
        };
        let (word0, word1) = self.control_words(&handle, &slot, opcode, 0, &ds);
        let mut wqe = WqePtx::new(&addresses);
        match &immediate {
            Some(immediate) => wqe.control_with_immediate(&word0, &word1, &flags, immediate),
            None => wqe.control(&word0, &word1, &flags),
        }
        wqe.remote(REMOTE_OFFSET, &remote, &rkey);
        match inline_bytes {
            Some(length) => {
                let header = self.constant_i64(i64::from(aboleth_abi::mlx5::INLINE_SEG) | length);
                wqe.word_be32(DATA_OFFSET, &header);
                wqe.copy_bytes(&source, INLINE_DATA_OFFSET, length as u32);
            }
            None => {
                wqe.data(DATA_OFFSET, &bytes, &key, &source);
            }
        }
        self.store_wqe(wqe);
        self.emit("} else {".into());
        let nop_ds = self.constant_i64(blocks * 4);
        let (nop0, nop1) =
            self.control_words(&handle, &slot, aboleth_abi::mlx5::OPCODE_NOP, 0, &nop_ds);
        let mut nop = WqePtx::new(&addresses);
        nop.control(&nop0, &nop1, &flags);
        self.store_wqe(nop);
        self.emit("}".into());
        self.note_posted(&management, &slot, blocks, &completion);
        Ok(())
    }

    /// The completion operand, or (for an op marked `periodic_completion`) 1 where the WQE at
    /// `slot` spanning `blocks` basic blocks starts at or covers a quarter of the ring: the
    /// formula of
    /// [`aboleth_abi::mlx5::periodic_completion`], so that a full ring can be reclaimed by polling
    /// the CQ (see `reserve_slots`).
    pub(super) fn effective_completion(
        &mut self,
        op: Ptr<Operation>,
        handle: &str,
        slot: &str,
        blocks: i64,
        completion: &str,
    ) -> String {
        if !attrs::get_bool(self.ctx, op, "periodic_completion") {
            return completion.to_string();
        }
        let ring = self.handle_field(
            handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, sq_wqe_basic_block_count),
            32,
        );
        let fraction =
            self.constant_i64(aboleth_abi::mlx5::PERIODIC_COMPLETION_RING_FRACTION as i64);
        let one = self.constant_i64(1);
        let zero = self.constant_i64(0);
        let quarter = self.binary_i64("arith.divsi", &ring, &fraction);
        let quarter = self.binary_i64("arith.maxsi", &quarter, &one);
        let within = self.binary_i64("arith.remsi", slot, &quarter);
        let size = self.constant_i64(blocks);
        let reach = self.binary_i64("arith.addi", &within, &size);
        let at_start = self.assign("ab_at", format!("arith.cmpi eq, {within}, {zero} : i64"));
        let crosses = self.assign(
            "ab_cross",
            format!("arith.cmpi sgt, {reach}, {quarter} : i64"),
        );
        let requested = self.assign(
            "ab_req",
            format!("arith.cmpi ne, {completion}, {zero} : i64"),
        );
        let periodic = self.assign(
            "ab_periodic",
            format!("arith.ori {at_start}, {crosses} : i1"),
        );
        let wanted = self.assign(
            "ab_wanted",
            format!("arith.ori {periodic}, {requested} : i1"),
        );
        self.assign("ab_completion", format!("arith.extui {wanted} : i1 to i64"))
    }

    /// `fm_ce_se`: CQ_UPDATE when the completion operand is nonzero, and the fence bit.
    pub(super) fn completion_flags(&mut self, completion: &str, fenced: bool) -> String {
        let zero = self.constant_i64(0);
        let requested = self.assign(
            "ab_cq",
            format!("arith.cmpi ne, {completion}, {zero} : i64"),
        );
        let update = self.constant_i64(i64::from(aboleth_abi::mlx5::WQE_CTRL_CQ_UPDATE));
        let fence = self.constant_i64(if fenced {
            i64::from(aboleth_abi::mlx5::FENCE_MODE_INITIATOR_SMALL)
        } else {
            0
        });
        let chosen = self.assign(
            "ab_flags",
            format!("arith.select {requested}, {update}, {zero} : i64"),
        );
        self.binary_i64("arith.ori", &chosen, &fence)
    }

    /// Remembers, in the management block, the last WQE that asks for a completion (its first
    /// basic block, and its end): what a drain waits for and then frees. `atom.max`, because
    /// several programs may post to one queue.
    pub(super) fn note_posted(
        &mut self,
        management: &str,
        slot: &str,
        blocks: i64,
        completion: &str,
    ) {
        let last = self.offset_address(management, MANAGEMENT_LAST_POSTED_OFFSET_BYTES);
        let size = self.constant_i64(blocks);
        let end = self.binary_i64("arith.addi", slot, &size);
        self.asm(
            &fill_ptx(
                "{ .reg .pred %ab_leader, %ab_wanted; .reg .u32 %ab_tid; .reg .u64 %ab_old; mov.u32 %ab_tid, %tid.x; setp.eq.u32 %ab_leader, %ab_tid, 0; setp.ne.u64 %ab_wanted, $4, 0; and.pred %ab_wanted, %ab_wanted, %ab_leader; @%ab_wanted atom.relaxed.gpu.global.max.u64 %ab_old, [$1], $2; @%ab_wanted atom.relaxed.gpu.global.max.u64 %ab_old, [$1+@LAST_POSTED_END@], $3; mov.u32 $0, 0; }",
                &[("LAST_POSTED_END", LAST_POSTED_END_BYTES)],
            ),
            &[
                (&last, "i64", 'l'),
                (slot, "i64", 'l'),
                (&end, "i64", 'l'),
                (completion, "i64", 'l'),
            ],
        );
    }

    pub(super) fn mlx5_atomic(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let endpoint = self.operand(op, 0);
        let (handle, management) = self.queue_of(endpoint)?;
        let slot = self.i64(self.operand(op, 1))?;
        let (remote, rkey) = self.wqe_target(op)?;
        let value = self.i64(self.operand(op, 3))?;
        let completion = self.i64(self.operand(op, 4))?;
        let add =
            attrs::get_typed::<SignalOperation>(self.ctx, op, "op") == Some(SignalOperation::Add);
        let completion =
            self.effective_completion(op, &handle, &slot, if add { 1 } else { 2 }, &completion);
        let fenced = attrs::get_bool(self.ctx, op, "fence");
        let flags = self.completion_flags(&completion, fenced);
        let result_address = self.handle_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, atomic_result_address),
            64,
        );
        let result_key = self.handle_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, atomic_result_lkey),
            32,
        );
        let eight = self.constant_i64(8);
        let zero = self.constant_i64(0);
        let all_ones = self.constant_i64(-1);
        if add {
            // ATOMIC_FA: ctrl, raddr, atomic (add, 0), data (the fetched value's buffer); ds 4.
            let address = self.basic_block_address(&handle, &slot, 0);
            let ds = self.constant_i64(ds_units(FETCH_ADD_RESULT_OFFSET + DATA_SEGMENT_BYTES));
            let (word0, word1) =
                self.control_words(&handle, &slot, aboleth_abi::mlx5::OPCODE_ATOMIC_FA, 0, &ds);
            let mut wqe = WqePtx::new(&[address]);
            wqe.control(&word0, &word1, &flags);
            wqe.remote(REMOTE_OFFSET, &remote, &rkey);
            wqe.be64(DATA_OFFSET + ATOMIC_SWAP_ADD, &value);
            wqe.be64(DATA_OFFSET + ATOMIC_COMPARE, &zero);
            wqe.data(
                FETCH_ADD_RESULT_OFFSET,
                &eight,
                &result_key,
                &result_address,
            );
            self.store_wqe(wqe);
        } else {
            // 8-byte masked compare-and-swap with compare_mask 0: an unconditional swap; ds 5.
            let addresses = vec![
                self.basic_block_address(&handle, &slot, 0),
                self.basic_block_address(&handle, &slot, 1),
            ];
            let ds = self.constant_i64(ds_units(SWAP_RESULT_OFFSET + DATA_SEGMENT_BYTES));
            let (word0, word1) = self.control_words(
                &handle,
                &slot,
                aboleth_abi::mlx5::OPCODE_ATOMIC_MASKED_CS,
                aboleth_abi::mlx5::EXTENDED_ATOMIC_OPMOD_8_BYTES,
                &ds,
            );
            let mut wqe = WqePtx::new(&addresses);
            wqe.control(&word0, &word1, &flags);
            wqe.remote(REMOTE_OFFSET, &remote, &rkey);
            wqe.be64(DATA_OFFSET + MASKED_SWAP, &value);
            wqe.be64(DATA_OFFSET + MASKED_COMPARE, &zero);
            wqe.be64(DATA_OFFSET + MASKED_SWAP_MASK, &all_ones);
            wqe.be64(DATA_OFFSET + MASKED_COMPARE_MASK, &zero);
            wqe.data(SWAP_RESULT_OFFSET, &eight, &result_key, &result_address);
            self.store_wqe(wqe);
        }
        self.note_posted(&management, &slot, if add { 1 } else { 2 }, &completion);
        Ok(())
    }

    pub(super) fn mlx5_publish(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (_, management) = self.queue_of(self.operand(op, 0))?;
        // The management block is device memory of this GPU's programs: GPU scope.
        self.publish_in_order(
            op,
            &management,
            core::mem::offset_of!(aboleth_abi::Mlx5QueueManagement, ready_head) as u64,
            "gpu",
        )
    }

    /// The queue's post lock in its management block.
    fn post_lock_address(&mut self, management: &str) -> String {
        self.offset_address(
            management,
            core::mem::offset_of!(aboleth_abi::Mlx5QueueManagement, post_send_lock) as u64,
        )
    }

    pub(super) fn mlx5_lock(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (_, management) = self.queue_of(self.operand(op, 0))?;
        let lock = self.post_lock_address(&management);
        self.take_post_lock(op, &lock)
    }

    pub(super) fn mlx5_unlock(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (_, management) = self.queue_of(self.operand(op, 0))?;
        let lock = self.post_lock_address(&management);
        self.release_post_lock(&lock);
        Ok(())
    }

    pub(super) fn mlx5_doorbell_record(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (handle, management) = self.queue_of(self.operand(op, 0))?;
        let end = self.i64(self.operand(op, 1))?;
        let record = self.handle_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, doorbell_record_address),
            64,
        );
        let send_word = self.offset_address(
            &record,
            core::mem::offset_of!(aboleth_abi::mlx5::doorbell::DoorbellRecord, send_counter) as u64,
        );
        let producer = self.offset_address(
            &management,
            core::mem::offset_of!(aboleth_abi::Mlx5QueueManagement, producer_index) as u64,
        );
        let relaxed = attrs::get_string(self.ctx, op, "order").as_deref() == Some("relaxed");
        // The send counter is the low 16 bits, big-endian; with several producers the largest
        // end wins (atom.max on the management block, under the post lock).
        let max = if attrs::get_bool(self.ctx, op, "atomic_max") {
            "@%ab_leader atom.relaxed.gpu.global.max.u64 %ab_old, [$3], $2; max.u64 %ab_end, $2, %ab_old;"
        } else {
            "mov.u64 %ab_end, $2;"
        };
        // On the staged path a host thread reads the record as the doorbell, before any fence
        // of this thread: the store must release the WQEs itself.
        let flags = self.handle_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, flags),
            32,
        );
        let stores = if relaxed {
            "@%ab_gpu st.volatile.global.b32 [$1], %ab_be; @%ab_host st.release.sys.global.b32 [$1], %ab_be;"
        } else {
            "@%ab_leader st.release.sys.global.b32 [$1], %ab_be;"
        };
        let ptx = format!(
            "{{ .reg .pred %ab_leader, %ab_host, %ab_gpu; .reg .u32 %ab_tid, %ab_low, %ab_be, %ab_flags; .reg .u64 %ab_old, %ab_end; mov.u32 %ab_tid, %tid.x; setp.eq.u32 %ab_leader, %ab_tid, 0; cvt.u32.u64 %ab_flags, $4; and.b32 %ab_flags, %ab_flags, {host_bit}; setp.ne.and.u32 %ab_host, %ab_flags, 0, %ab_leader; setp.eq.and.u32 %ab_gpu, %ab_flags, 0, %ab_leader; mov.u64 %ab_old, 0; {max} cvt.u32.u64 %ab_low, %ab_end; and.b32 %ab_low, %ab_low, 65535; prmt.b32 %ab_be, %ab_low, 0, 0x0123; {stores} mov.u32 $0, 0; }}",
            host_bit = aboleth_abi::endpoint::ENDPOINT_FLAG_HOST_RINGS_DOORBELL
        );
        self.asm(
            &ptx,
            &[
                (&send_word, "i64", 'l'),
                (&end, "i64", 'l'),
                (&producer, "i64", 'l'),
                (&flags, "i64", 'l'),
            ],
        );
        Ok(())
    }

    pub(super) fn mlx5_doorbell(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (handle, management) = self.queue_of(self.operand(op, 0))?;
        let end = self.i64(self.operand(op, 1))?;
        let uar = self.handle_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, uar_doorbell_address),
            64,
        );
        let qpn = self.handle_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, qpn),
            32,
        );
        let producer = self.offset_address(
            &management,
            core::mem::offset_of!(aboleth_abi::Mlx5QueueManagement, producer_index) as u64,
        );
        // {BE32(producer_index << 8), BE32(qpn << 8)}: one 8-byte MMIO store, after a system
        // fence (the WQE and doorbell-record stores must reach the NIC first; a release orders
        // only what precedes it, not the MMIO store after it). On a shared queue another
        // producer may already have recorded a larger index: ring the largest (never backwards).
        // On the staged path (ENDPOINT_FLAG_HOST_RINGS_DOORBELL) the host rings: no store.
        let flags = self.handle_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, flags),
            32,
        );
        let ptx = format!(
            "{{ .reg .pred %ab_leader; .reg .u32 %ab_tid, %ab_a, %ab_b, %ab_flags; .reg .u64 %ab_v, %ab_max; mov.u32 %ab_tid, %tid.x; cvt.u32.u64 %ab_flags, $5; and.b32 %ab_flags, %ab_flags, {host_bit}; setp.eq.u32 %ab_leader, %ab_tid, 0; ld.volatile.global.u64 %ab_max, [$4]; max.u64 %ab_max, %ab_max, $2; cvt.u32.u64 %ab_a, %ab_max; and.b32 %ab_a, %ab_a, 65535; shl.b32 %ab_a, %ab_a, 8; prmt.b32 %ab_a, %ab_a, 0, 0x0123; cvt.u32.u64 %ab_b, $3; shl.b32 %ab_b, %ab_b, 8; prmt.b32 %ab_b, %ab_b, 0, 0x0123; mov.b64 %ab_v, {{%ab_a, %ab_b}}; @%ab_leader fence.sc.sys; setp.eq.and.u32 %ab_leader, %ab_flags, 0, %ab_leader; @%ab_leader st.mmio.relaxed.sys.global.b64 [$1], %ab_v; mov.u32 $0, 0; }}",
            host_bit = aboleth_abi::endpoint::ENDPOINT_FLAG_HOST_RINGS_DOORBELL
        );
        self.asm(
            &ptx,
            &[
                (&uar, "i64", 'l'),
                (&end, "i64", 'l'),
                (&qpn, "i64", 'l'),
                (&producer, "i64", 'l'),
                (&flags, "i64", 'l'),
            ],
        );
        Ok(())
    }

    pub(super) fn mlx5_wait_completion(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (handle, management) = self.queue_of(self.operand(op, 0))?;
        let one = self.constant_i64(1);
        let (target, freed) = if op.deref(self.ctx).get_num_operands() > 2 {
            // A token: its WQE's first basic block; once it completed, its blocks are free.
            let slot = self.i64(self.operand(op, 1))?;
            let end = self.i64(self.operand(op, 2))?;
            (slot, end)
        } else {
            // The last WQE that asked for a completion (completions are cumulative), and its end.
            let last = self.offset_address(&management, MANAGEMENT_LAST_POSTED_OFFSET_BYTES);
            let zero = self.constant_i64(0);
            let start = self.leader_load("ld.volatile.global.u64", &last, &zero);
            let last_end = self.offset_address(&last, LAST_POSTED_END_BYTES);
            let end = self.leader_load("ld.volatile.global.u64", &last_end, &one);
            (start, end)
        };
        // The newest CQE's word (slot 0 of a collapsed CQ, or the ring-progress word of a CQ
        // ring): wqe_counter (big-endian 16 bits), then op_own (an opcode of 0xf is "no CQE
        // yet"). Done when the counter is at or after the target. Thread 0 decides (the target
        // may be its own reservation); the others wait at the barrier below.
        let cq_poll = self.cq_poll(&handle, &management);
        let counter_word = cq_poll.counter_word.clone();
        let word_xor = cq_poll.word_xor.clone();
        let overdue = self.queue_overdue(
            op,
            self.operand(op, 0),
            &counter_word,
            &target,
            aboleth_abi::wait_failure::WAIT_KIND_COMPLETION,
        )?;
        let poll = fill_ptx(include_str!("ptx/completion_poll.ptx"), &cqe_opcodes()[..2]);
        self.spin_while(|this| {
            this.advance_cq_ring(&cq_poll);
            let pending = this.assign("ab_pending", format!("tt.elementwise_inline_asm \"{poll}\" {{constraints = \"=r,l,l,l\", packed_element = 1 : i32, pure = false}} {counter_word}, {target}, {word_xor} : i64, i64, i64 -> i32"));
            let zero32 = this.assign("ab_zero", "arith.constant 0 : i32".to_string());
            let waiting = this.assign(
                "ab_waiting",
                format!("arith.cmpi ne, {pending}, {zero32} : i32"),
            );
            if let Some(overdue) = overdue {
                // Report the CQE's counter (host order) the leader last saw.
                let seen = this.assign("ab_seen", format!("tt.elementwise_inline_asm \"{{ .reg .u32 %ab_w, %ab_c, %ab_x; ld.volatile.global.u32 %ab_w, [$1]; cvt.u32.u64 %ab_x, $2; xor.b32 %ab_w, %ab_w, %ab_x; prmt.b32 %ab_c, %ab_w, 0, 0x4401; cvt.u64.u32 $0, %ab_c; }}\" {{constraints = \"=l,l,l\", packed_element = 1 : i32, pure = false}} {counter_word}, {word_xor} : i64, i64 -> i64"));
                this.give_up_if_queue_overdue(overdue, &waiting, seen);
            }
            waiting
        });
        // Those basic blocks are free again for reservations.
        let consumer = self.offset_address(
            &management,
            core::mem::offset_of!(aboleth_abi::Mlx5QueueManagement, consumer_index) as u64,
        );
        self.asm(
            &Self::leader("atom.relaxed.gpu.global.max.u64 %ab_old, [$1], $2;").replace(
                ".reg .u32 %ab_tid;",
                ".reg .u32 %ab_tid; .reg .u64 %ab_old;",
            ),
            &[(&consumer, "i64", 'l'), (&freed, "i64", 'l')],
        );
        self.emit("gpu.barrier".into());
        Ok(())
    }
}

/// The management block's spare words where code records the queue's last completion-requesting
/// WQE: its first basic block, then its end (24 spare bytes; two are used).
const MANAGEMENT_LAST_POSTED_OFFSET_BYTES: u64 =
    core::mem::offset_of!(aboleth_abi::Mlx5QueueManagement, reserved) as u64;

/// The third spare word of the management block: a CQ ring's progress, the CQEs consumed
/// (high 32 bits) and the newest one's counter word XOR [`MLX5_CQ_RING_WORD_XOR`] (low 32 bits), so
/// that the zeroed word of a fresh queue reads as an invalid CQE.
const MANAGEMENT_CQ_RING_PROGRESS_OFFSET_BYTES: u64 =
    MANAGEMENT_LAST_POSTED_OFFSET_BYTES + 8 * MLX5_CQ_RING_PROGRESS_SPARE_WORD;
/// Which 8-byte spare word of the management block holds a CQ ring's progress (the tier-1
/// library reads the same one).
pub(crate) const MLX5_CQ_RING_PROGRESS_SPARE_WORD: u64 = 2;
const _: () = assert!(
    MANAGEMENT_CQ_RING_PROGRESS_OFFSET_BYTES + 8
        <= core::mem::size_of::<aboleth_abi::Mlx5QueueManagement>() as u64
);
/// What the ring-progress word's low half is XORed with: an invalid opcode in `op_own`.
pub(crate) const MLX5_CQ_RING_WORD_XOR: u32 =
    (aboleth_abi::mlx5::cqe::CQE_OPCODE_INVALID as u32) << 28;

/// What the completion polls of one endpoint need ([`Generator::cq_poll`]): the word they read
/// (the newest CQE's `wqe_counter` and `op_own`), what to XOR it with (0 on a collapsed CQ), and
/// for [`Generator::advance_cq_ring`] the ring-progress word, the CQ, its size and whether it
/// is collapsed (handle fields, i64).
#[derive(Clone, Debug)]
pub(super) struct CqPoll {
    pub(super) counter_word: String,
    pub(super) word_xor: String,
    pub(super) ring_progress: String,
    pub(super) cq: String,
    pub(super) cqe_count: String,
    pub(super) collapsed: String,
}

/// The collapsed CQ's CQE word the code polls: `wqe_counter` (big-endian) and, in its top
/// byte, `op_own`, read as one little-endian u32.
const CQE_COUNTER_WORD_OFFSET_BYTES: u64 =
    core::mem::offset_of!(aboleth_abi::mlx5::cqe::Cqe64, wqe_counter) as u64;
const _: () = assert!(
    core::mem::offset_of!(aboleth_abi::mlx5::cqe::Cqe64, op_own)
        == core::mem::offset_of!(aboleth_abi::mlx5::cqe::Cqe64, wqe_counter) + 3
);

/// The CQE opcodes the completion poll and the ring reclaim test (`op_own >> 4`).
fn cqe_opcodes() -> [(&'static str, u64); 3] {
    use aboleth_abi::mlx5::cqe::{CQE_OPCODE_INVALID, CQE_OPCODE_REQ_ERR, CQE_OPCODE_RESP_ERR};
    [
        ("OPCODE_INVALID", u64::from(CQE_OPCODE_INVALID)),
        ("OPCODE_REQUESTER_ERROR", u64::from(CQE_OPCODE_REQ_ERR)),
        ("OPCODE_RESPONDER_ERROR", u64::from(CQE_OPCODE_RESP_ERR)),
    ]
}

/// The second spare word: the end of that WQE (its first basic block is the first word).
const LAST_POSTED_END_BYTES: u64 = 8;
const _: () = assert!(
    MANAGEMENT_LAST_POSTED_OFFSET_BYTES + LAST_POSTED_END_BYTES + 8
        <= core::mem::size_of::<aboleth_abi::Mlx5QueueManagement>() as u64
);

// Where the segments of the WQEs generated here start, in bytes from the WQE's start: the
// control segment, the remote address, then the data segment, the inline header and its
// bytes, or the atomic operands followed by the data segment of the fetched value's buffer.
use aboleth_abi::mlx5::wqe::{
    AtomicSegment, ControlSegment, DataSegment, InlineHeader, MaskedCompareSwap64Segment,
    RemoteAddressSegment,
};
use core::mem::{offset_of, size_of};
const REMOTE_OFFSET: u32 = size_of::<ControlSegment>() as u32;
const DATA_OFFSET: u32 = REMOTE_OFFSET + size_of::<RemoteAddressSegment>() as u32;
const DATA_SEGMENT_BYTES: u32 = size_of::<DataSegment>() as u32;
const INLINE_DATA_OFFSET: u32 = DATA_OFFSET + size_of::<InlineHeader>() as u32;
const ATOMIC_SWAP_ADD: u32 = offset_of!(AtomicSegment, swap_add) as u32;
const ATOMIC_COMPARE: u32 = offset_of!(AtomicSegment, compare) as u32;
const FETCH_ADD_RESULT_OFFSET: u32 = DATA_OFFSET + size_of::<AtomicSegment>() as u32;
const MASKED_SWAP: u32 = offset_of!(MaskedCompareSwap64Segment, swap) as u32;
const MASKED_COMPARE: u32 = offset_of!(MaskedCompareSwap64Segment, compare) as u32;
const MASKED_SWAP_MASK: u32 = offset_of!(MaskedCompareSwap64Segment, swap_mask) as u32;
const MASKED_COMPARE_MASK: u32 = offset_of!(MaskedCompareSwap64Segment, compare_mask) as u32;
const SWAP_RESULT_OFFSET: u32 = DATA_OFFSET + size_of::<MaskedCompareSwap64Segment>() as u32;

/// A WQE of `bytes` in the control segment's `ds` units (16 bytes, rounded up).
const fn ds_units(bytes: u32) -> i64 {
    bytes.div_ceil(aboleth_abi::mlx5::WQE_DS_UNIT_BYTES as u32) as i64
}
