//! Ionic code generation (experimental, for NVIDIA GPUs: no AMD GPU here): the 64-byte send
//! WQEs (RDMA writes with one scatter entry, empty inline writes for a false predicate, 8-byte
//! inline writes for set signals, fetch-adds for add signals) written by thread 0 through the
//! typed builder in `ptx/wqe.rs`, with the lap's color and the opcodes and atomic body of the
//! queue's firmware ABI (1 or 2, read from `IonicQueueManagement::firmware_version`); the doorbell
//! (a system fence, then the 64-bit MMIO store of the queue id and the producer index within
//! the ring); the doorbell lock of a shared queue; completion waits and ring reclaiming from the
//! cumulative send CQEs (one CQE per step, under the queue's poll lock, `ionic_cq_advance.ptx`);
//! and the check that refuses an endpoint handle the generated code does not support. Layouts
//! come from `aboleth_abi::ionic`; reservation, publication and the lock from `queue.rs`. The
//! simulator's `interpreter/ionic.rs` is the protocol's reference; this is its translation.
//!
//! What it does not do: return CQ credits (the GPU never rings the CQ doorbell: a device's CQ
//! would fill), write-with-immediate signals, or check a CQE's queue id (each send queue is
//! assumed to have a CQ of its own, as the software NIC's queue pairs do). Where it runs: nowhere yet. It is generated,
//! compiled by Triton and `ptxas`, and checked by goldens; the software NIC's Ionic queue pairs
//! (`aboleth-runtime`'s `connect_all("ionic")` with `ABOLETH_RDMA_DEVICE=soft`) are what it runs
//! against on an NVIDIA GPU (`tests/gpu/run_soft_nic.sh`); never on an Ionic device or an AMD GPU.

use aboleth_abi::ionic::{
    self, CQE_COLOR, CQE_ERROR, CQE_TYPE_MASK, CQE_TYPE_SEND_MSN, CQE_TYPE_SHIFT, FLAG_COLOR,
    FLAG_FENCE, FLAG_INL, FLAG_SIG, op_v1, op_v2,
    queue::IonicQueueManagement,
    wqe::{AtomicBodyV1, AtomicBodyV2, RdmaBody, Sge, WqeHeader},
};
use aboleth_ir::{
    ab::attributes::SignalOperation,
    attrs,
    pliron::{context::Ptr, operation::Operation},
};
use core::mem::{offset_of, size_of};

use super::ptx::{WqePtx, fill_ptx};
use super::queue::Reclaim;
use super::{BridgeError, Generator, WaitReport};

/// What polling one Ionic queue's CQ needs (TTIR names of i64 values): its management block,
/// the CQ, the CQ's entries and the send queue's entries.
#[derive(Clone, Debug)]
pub(super) struct IonicCq {
    management: String,
    cq: String,
    cqe_count: String,
    sq_entries: String,
}

/// Offsets of the management block's words.
const fn management_offset(offset: usize) -> u64 {
    offset as u64
}
const RESERVED_HEAD: u64 = management_offset(offset_of!(IonicQueueManagement, reserved_head));
const READY_HEAD: u64 = management_offset(offset_of!(IonicQueueManagement, ready_head));
const PRODUCER_INDEX: u64 = management_offset(offset_of!(IonicQueueManagement, producer_index));
const CONSUMER_INDEX: u64 = management_offset(offset_of!(IonicQueueManagement, consumer_index));
const POST_SEND_LOCK: u64 = management_offset(offset_of!(IonicQueueManagement, post_send_lock));
const FIRMWARE_VERSION: u64 = management_offset(offset_of!(IonicQueueManagement, firmware_version));
const LAST_COMPLETION_END: u64 =
    management_offset(offset_of!(IonicQueueManagement, last_completion_end));

// Where a WQE's fields are, in bytes from its start: the header, then the body of a write
// (remote address, rkey, length, one scatter entry or the inline bytes) or of an atomic.
const HEADER_BYTES: u32 = size_of::<WqeHeader>() as u32;
const WQE_ID: u32 = offset_of!(WqeHeader, wqe_id) as u32;
const HEADER_WORD: u32 = offset_of!(WqeHeader, op) as u32;
const IMMEDIATE: u32 = offset_of!(WqeHeader, imm_data_key) as u32;
const REMOTE_HIGH: u32 = HEADER_BYTES + offset_of!(RdmaBody, remote_va_high) as u32;
const REMOTE_RKEY: u32 = HEADER_BYTES + offset_of!(RdmaBody, remote_rkey) as u32;
const LENGTH: u32 = HEADER_BYTES + offset_of!(RdmaBody, length) as u32;
const PAYLOAD: u32 = HEADER_BYTES + offset_of!(RdmaBody, payload) as u32;
const SGE_VA: u32 = PAYLOAD + offset_of!(Sge, va) as u32;
const SGE_LEN: u32 = PAYLOAD + offset_of!(Sge, len) as u32;
const SGE_LKEY: u32 = PAYLOAD + offset_of!(Sge, lkey) as u32;
const ATOMIC_SWAP_ADD: u32 = HEADER_BYTES + offset_of!(AtomicBodyV2, swap_add_high) as u32;
const ATOMIC_COMPARE: u32 = HEADER_BYTES + offset_of!(AtomicBodyV2, compare_high) as u32;
const ATOMIC_V2_LKEY: u32 = HEADER_BYTES + offset_of!(AtomicBodyV2, lkey) as u32;
const ATOMIC_LOCAL_VA: u32 = HEADER_BYTES + offset_of!(AtomicBodyV2, local_va) as u32;
const ATOMIC_V2_RESERVED: u32 = HEADER_BYTES + offset_of!(AtomicBodyV2, reserved_expdb) as u32;
const ATOMIC_V1_SGE_LEN: u32 = HEADER_BYTES + offset_of!(AtomicBodyV1, sge_len) as u32;
const ATOMIC_V1_SGE_LKEY: u32 = HEADER_BYTES + offset_of!(AtomicBodyV1, sge_lkey) as u32;
// The two bodies agree on everything but where the old value's lkey (and, in ABI 1, its
// length) go: the rest is written once for both.
const _: () = {
    assert!(offset_of!(AtomicBodyV1, swap_add_high) == offset_of!(AtomicBodyV2, swap_add_high));
    assert!(offset_of!(AtomicBodyV1, compare_high) == offset_of!(AtomicBodyV2, compare_high));
    assert!(offset_of!(AtomicBodyV1, sge_va) == offset_of!(AtomicBodyV2, local_va));
    assert!(offset_of!(AtomicBodyV1, reserved) == offset_of!(AtomicBodyV2, lkey));
    assert!(offset_of!(AtomicBodyV1, sge_len) == offset_of!(AtomicBodyV2, reserved_expdb));
    assert!(offset_of!(RdmaBody, remote_va_low) == offset_of!(RdmaBody, remote_va_high) + 4);
    assert!(offset_of!(WqeHeader, num_sge_key) == offset_of!(WqeHeader, op) + 1);
    assert!(offset_of!(WqeHeader, flags) == offset_of!(WqeHeader, op) + 2);
    assert!(ionic::WQE_BYTES == aboleth_abi::mlx5::WQE_BASIC_BLOCK_BYTES);
};
/// The largest write rdma-core posts (`length` below 2 GiB).
const WRITE_BYTES_LIMIT: i64 = 1 << 31;

impl Generator<'_> {
    /// Ionic: the generated code speaks firmware ABI 1 and 2 on send queues of 2 to 2^16
    /// entries (one slot stays empty; the doorbell's index has 16 bits) and CQs of at least as
    /// many entries, all powers of two. A handle that says otherwise makes every thread record
    /// `WAIT_KIND_UNSUPPORTED_IONIC_ENDPOINT` (the firmware version as expected, the CQ's entries
    /// above bit 32 and the send queue's below as seen) and exit before posting anything.
    pub(super) fn exit_unless_supported_ionic_endpoint(
        &mut self,
        op: Ptr<Operation>,
        handle: &str,
    ) {
        use aboleth_abi::EndpointHandle;
        let log = self.handle_field(
            handle,
            offset_of!(EndpointHandle, wait_failure_log_address),
            64,
        );
        let rank = self.handle_field(handle, offset_of!(EndpointHandle, local_rank), 32);
        let peer = self.handle_field(handle, offset_of!(EndpointHandle, peer_rank), 32);
        let peer = self.assign("ab_peer", format!("arith.trunci {peer} : i64 to i32"));
        let transport = self.handle_field(handle, offset_of!(EndpointHandle, transport), 32);
        let entries = self.handle_field(
            handle,
            offset_of!(EndpointHandle, sq_wqe_basic_block_count),
            32,
        );
        let cqe_count = self.handle_field(handle, offset_of!(EndpointHandle, cqe_count), 32);
        let management =
            self.handle_field(handle, offset_of!(EndpointHandle, management_address), 64);
        let ionic_code = self.constant_i64(aboleth_abi::Transport::Ionic as i64);
        // Only an Ionic handle has a management block to read (the endpoint to the kernel's own
        // rank is p2p): the others read as version 2.
        let version = self.assign("ab_version", format!("tt.elementwise_inline_asm \"{{ .reg .pred %ab_ionic; .reg .u32 %ab_v; mov.u32 %ab_v, 2; setp.eq.u64 %ab_ionic, $2, $3; @%ab_ionic ld.global.u32 %ab_v, [$1+{FIRMWARE_VERSION}]; cvt.u64.u32 $0, %ab_v; }}\" {{constraints = \"=l,l,l,l\", packed_element = 1 : i32, pure = false}} {management}, {transport}, {ionic_code} : i64, i64, i64 -> i64"));
        let zero = self.constant_i64(0);
        let one = self.constant_i64(1);
        let two = self.constant_i64(2);
        let old_version = self.assign(
            "ab_unsupported",
            format!("arith.cmpi ult, {version}, {one} : i64"),
        );
        let new_version = self.assign(
            "ab_unsupported",
            format!("arith.cmpi ugt, {version}, {two} : i64"),
        );
        let bad_version = self.assign(
            "ab_unsupported",
            format!("arith.ori {old_version}, {new_version} : i1"),
        );
        let mut bad = bad_version;
        // The send queue: a power of two from 2 (one slot stays empty) to 2^16 (the doorbell
        // carries a 16-bit index). Its CQ: a power of two no smaller, so the device never
        // overwrites a CQE the poll has not read (every WQE may ask for a completion).
        let largest_sq = self.constant_i64(1 << 16);
        let sq_too_big = self.assign(
            "ab_unsupported",
            format!("arith.cmpi ugt, {entries}, {largest_sq} : i64"),
        );
        bad = self.assign(
            "ab_unsupported",
            format!("arith.ori {bad}, {sq_too_big} : i1"),
        );
        for (ring, smallest) in [(&entries, &two), (&cqe_count, &entries)] {
            let below = self.binary_i64("arith.subi", ring, &one);
            let shared_bits = self.binary_i64("arith.andi", ring, &below);
            let not_power = self.assign(
                "ab_unsupported",
                format!("arith.cmpi ne, {shared_bits}, {zero} : i64"),
            );
            let small = self.assign(
                "ab_unsupported",
                format!("arith.cmpi ult, {ring}, {smallest} : i64"),
            );
            let wrong = self.assign(
                "ab_unsupported",
                format!("arith.ori {not_power}, {small} : i1"),
            );
            bad = self.assign("ab_unsupported", format!("arith.ori {bad}, {wrong} : i1"));
        }
        let is_ionic = self.assign(
            "ab_unsupported",
            format!("arith.cmpi eq, {transport}, {ionic_code} : i64"),
        );
        let unsupported = self.assign(
            "ab_unsupported",
            format!("arith.andi {bad}, {is_ionic} : i1"),
        );
        let bound = self.failure_site(op, log, rank);
        // Both rings' entries in one word: the CQ's above bit 32.
        let thirty_two = self.constant_i64(32);
        let cq_high = self.binary_i64("arith.shli", &cqe_count, &thirty_two);
        let seen = self.binary_i64("arith.ori", &cq_high, &entries);
        let report = WaitReport {
            waiting: unsupported.clone(),
            address: handle.to_owned(),
            expected: version,
            seen,
            peer,
            kind: aboleth_abi::wait_failure::WAIT_KIND_UNSUPPORTED_IONIC_ENDPOINT,
        };
        self.record_failure_if(&bound, &unsupported, &zero, &report);
    }

    /// What the CQ polls of the endpoint's queue need.
    fn ionic_cq(&mut self, handle: &str, management: &str) -> IonicCq {
        use aboleth_abi::EndpointHandle;
        IonicCq {
            management: management.to_owned(),
            cq: self.handle_field(handle, offset_of!(EndpointHandle, cq_buffer_address), 64),
            cqe_count: self.handle_field(handle, offset_of!(EndpointHandle, cqe_count), 32),
            sq_entries: self.sq_entries(handle),
        }
    }

    fn sq_entries(&mut self, handle: &str) -> String {
        self.handle_field(
            handle,
            offset_of!(aboleth_abi::EndpointHandle, sq_wqe_basic_block_count),
            32,
        )
    }

    /// One step of polling the CQ: the leader, if it gets the poll lock, reads the CQE at the
    /// polled position and, when it is this lap's (its color bit), raises the consumer index
    /// to the WQE its message number names (within the ring, as rdma-core reads it) and moves
    /// the polled position past it. An error CQE, or one that is not a send completion, traps.
    pub(super) fn advance_ionic_cq(&mut self, cq: &IonicCq) {
        use aboleth_abi::ionic::cqe::{Cqe, SEND_MSG_MSN_OFFSET_BYTES};
        self.asm(
            &fill_ptx(
                include_str!("ptx/ionic_cq_advance.ptx"),
                &[
                    (
                        "POLL_LOCK",
                        management_offset(offset_of!(IonicQueueManagement, poll_lock)),
                    ),
                    (
                        "COMPLETIONS_POLLED",
                        management_offset(offset_of!(IonicQueueManagement, completions_polled)),
                    ),
                    ("CONSUMER_INDEX", CONSUMER_INDEX),
                    ("CQE_BYTES", Cqe::SIZE_BYTES as u64),
                    ("QID_TYPE_FLAGS", offset_of!(Cqe, qid_type_flags) as u64),
                    ("SEND_MSG_MSN", SEND_MSG_MSN_OFFSET_BYTES as u64),
                    ("CQE_COLOR", u64::from(CQE_COLOR)),
                    ("CQE_ERROR", u64::from(CQE_ERROR)),
                    ("CQE_TYPE_SHIFT", u64::from(CQE_TYPE_SHIFT)),
                    ("CQE_TYPE_MASK", u64::from(CQE_TYPE_MASK)),
                    ("CQE_TYPE_SEND_MSN", u64::from(CQE_TYPE_SEND_MSN)),
                ],
            ),
            &[
                (&cq.management, "i64", 'l'),
                (&cq.cq, "i64", 'l'),
                (&cq.cqe_count, "i64", 'l'),
                (&cq.sq_entries, "i64", 'l'),
            ],
        );
    }

    pub(super) fn ionic_reserve(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (handle, management) = self.queue_of(self.operand(op, 0))?;
        // One slot stays empty (rdma-core's `ionic_queue_full`).
        let entries = self.sq_entries(&handle);
        let one = self.constant_i64(1);
        let capacity = self.binary_i64("arith.subi", &entries, &one);
        let head = self.offset_address(&management, RESERVED_HEAD);
        let consumer = self.offset_address(&management, CONSUMER_INDEX);
        let cq = self.ionic_cq(&handle, &management);
        // The management block is device memory used by this GPU's programs only: GPU scope.
        self.reserve_slots(
            op,
            &head,
            &consumer,
            &capacity,
            "gpu",
            "ld.volatile.global.u64",
            Some(&Reclaim::Ionic(cq)),
        )
    }

    /// The WQE at `slot` and the header fields every WQE shares: its ring position (the
    /// address and the id), the firmware version's opcode (`v1` or `v2`) and the flags word
    /// with the lap's color, the signaled bit for a nonzero `completion` and `extra_flags`.
    /// Returns the WQE builder, with the header stored.
    fn ionic_wqe_header(
        &mut self,
        (handle, management): (&str, &str),
        slot: &str,
        (v1, v2): (u8, u8),
        scatter_entries: i64,
        (completion, extra_flags): (&str, u16),
    ) -> WqePtx {
        let sq = self.handle_field(
            handle,
            offset_of!(aboleth_abi::EndpointHandle, sq_buffer_address),
            64,
        );
        let entries = self.sq_entries(handle);
        let position = self.binary_i64("arith.remsi", slot, &entries);
        let bytes = self.constant_i64(ionic::WQE_BYTES as i64);
        let within = self.binary_i64("arith.muli", &position, &bytes);
        let address = self.binary_i64("arith.addi", &sq, &within);
        // The color: set in the ring's first lap, flipped every lap (`aboleth_abi::ionic::sq_color_of`).
        let lap = self.binary_i64("arith.divsi", slot, &entries);
        let one = self.constant_i64(1);
        let zero = self.constant_i64(0);
        let parity = self.binary_i64("arith.andi", &lap, &one);
        let even = self.assign("ab_even", format!("arith.cmpi eq, {parity}, {zero} : i64"));
        let color_flag = self.constant_i64(i64::from(FLAG_COLOR));
        let color = self.assign(
            "ab_color",
            format!("arith.select {even}, {color_flag}, {zero} : i64"),
        );
        let requested = self.assign(
            "ab_cq",
            format!("arith.cmpi ne, {completion}, {zero} : i64"),
        );
        let signaled_flag = self.constant_i64(i64::from(FLAG_SIG));
        let signaled = self.assign(
            "ab_sig",
            format!("arith.select {requested}, {signaled_flag}, {zero} : i64"),
        );
        let fixed = self.constant_i64(i64::from(extra_flags));
        let flags = self.binary_i64("arith.ori", &color, &signaled);
        let flags = self.binary_i64("arith.ori", &flags, &fixed);
        // The firmware ABI picks the opcode.
        let is_v1 = self.ionic_firmware_is_v1(management);
        let op_v1_value = self.constant_i64(i64::from(v1));
        let op_v2_value = self.constant_i64(i64::from(v2));
        let opcode = self.assign(
            "ab_op",
            format!("arith.select {is_v1}, {op_v1_value}, {op_v2_value} : i64"),
        );
        // Bytes 8..11 as one little-endian word: op, num_sge_key, then the flags big-endian.
        let byte_mask = self.constant_i64(0xff);
        let eight = self.constant_i64(8);
        let sixteen = self.constant_i64(16);
        let low = self.binary_i64("arith.andi", &flags, &byte_mask);
        let low_first = self.binary_i64("arith.shli", &low, &eight);
        let high = self.binary_i64("arith.shrui", &flags, &eight);
        let swapped = self.binary_i64("arith.ori", &low_first, &high);
        let flags_word = self.binary_i64("arith.shli", &swapped, &sixteen);
        let entries_word = self.constant_i64(scatter_entries << 8);
        let word = self.binary_i64("arith.ori", &opcode, &entries_word);
        let word = self.binary_i64("arith.ori", &word, &flags_word);
        let mut wqe = WqePtx::new(&[address]);
        // rdma-core writes the ring position as the id.
        wqe.le64(WQE_ID, &position);
        wqe.word_le32(HEADER_WORD, &word);
        wqe.word_be32(IMMEDIATE, &zero);
        wqe
    }

    /// Whether the queue's firmware ABI (in its management block) is version 1 (an i1).
    fn ionic_firmware_is_v1(&mut self, management: &str) -> String {
        let version_address = self.offset_address(management, FIRMWARE_VERSION);
        let version = self.load_field(&version_address, 0, 32);
        let one = self.constant_i64(1);
        self.assign("ab_v1", format!("arith.cmpi eq, {version}, {one} : i64"))
    }

    /// Raises the management block's `last_completion_end` to `slot + 1` when `completion`
    /// is nonzero: what a drain waits for. `atom.max`: several programs may post to one queue.
    fn ionic_note_completion(&mut self, management: &str, slot: &str, completion: &str) {
        let last = self.offset_address(management, LAST_COMPLETION_END);
        let one = self.constant_i64(1);
        let end = self.binary_i64("arith.addi", slot, &one);
        self.asm(
            "{ .reg .pred %ab_leader, %ab_wanted; .reg .u32 %ab_tid; .reg .u64 %ab_old; mov.u32 %ab_tid, %tid.x; setp.eq.u32 %ab_leader, %ab_tid, 0; setp.ne.u64 %ab_wanted, $3, 0; and.pred %ab_wanted, %ab_wanted, %ab_leader; @%ab_wanted atom.relaxed.gpu.global.max.u64 %ab_old, [$1], $2; mov.u32 $0, 0; }",
            &[(&last, "i64", 'l'), (&end, "i64", 'l'), (completion, "i64", 'l')],
        );
    }

    /// `ionic.write`: an RDMA write with one scatter entry, or, when the predicate is 0, an
    /// empty inline write over the same slot (Ionic has no NOP). A sent length of 2 GiB or
    /// more traps (rdma-core refuses it).
    pub(super) fn ionic_write(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (handle, management) = self.queue_of(self.operand(op, 0))?;
        let slot = self.i64(self.operand(op, 1))?;
        let (remote, rkey) = self.wqe_target(op)?;
        let source = self.use_as(self.operand(op, 3), "i64")?;
        let bytes = self.i64(self.operand(op, 4))?;
        let key = self.i64(self.operand(op, 5))?;
        let predicate = self.i64(self.operand(op, 6))?;
        let completion = self.i64(self.operand(op, 7))?;
        let completion = self.effective_completion(op, &handle, &slot, 1, &completion);
        let zero = self.constant_i64(0);
        let sends = self.assign(
            "ab_sends",
            format!("arith.cmpi ne, {predicate}, {zero} : i64"),
        );
        // Only a write that is sent has a length (a false predicate posts an empty one).
        let limit = self.constant_i64(WRITE_BYTES_LIMIT);
        let long = self.assign("ab_long", format!("arith.cmpi uge, {bytes}, {limit} : i64"));
        let too_long = self.assign("ab_too_long", format!("arith.andi {long}, {sends} : i1"));
        self.emit(format!("scf.if {too_long} {{"));
        let dummy = self.constant_i64(0);
        self.asm("trap; mov.u32 $0, 0;", &[(&dummy, "i64", 'l')]);
        self.emit("}".into());
        let queue = (handle.as_str(), management.as_str());
        let opcodes = (op_v1::RDMA_WRITE, op_v2::RDMA_WRITE);
        self.emit(format!("scf.if {sends} {{"));
        let mut wqe = self.ionic_wqe_header(queue, &slot, opcodes, 1, (&completion, 0));
        wqe.be64(REMOTE_HIGH, &remote);
        wqe.word_be32(REMOTE_RKEY, &rkey);
        wqe.word_be32(LENGTH, &bytes);
        wqe.be64(SGE_VA, &source);
        wqe.word_be32(SGE_LEN, &bytes);
        wqe.word_be32(SGE_LKEY, &key);
        self.store_wqe(wqe);
        self.emit("} else {".into());
        let mut empty = self.ionic_wqe_header(queue, &slot, opcodes, 0, (&completion, FLAG_INL));
        empty.be64(REMOTE_HIGH, &remote);
        empty.word_be32(REMOTE_RKEY, &rkey);
        empty.word_be32(LENGTH, &zero);
        self.store_wqe(empty);
        self.emit("}".into());
        self.ionic_note_completion(&management, &slot, &completion);
        Ok(())
    }

    /// `ionic.signal`: a fetch-add of the value (add; the old value lands in the endpoint's
    /// scratch word, in ABI 1 through a scatter entry, in ABI 2 by address and lkey), or an
    /// 8-byte inline write of it (set), with the fence flag when the lowering asked for it.
    pub(super) fn ionic_signal(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        use aboleth_abi::EndpointHandle;
        let (handle, management) = self.queue_of(self.operand(op, 0))?;
        let slot = self.i64(self.operand(op, 1))?;
        let (remote, rkey) = self.wqe_target(op)?;
        let value = self.i64(self.operand(op, 3))?;
        let completion = self.i64(self.operand(op, 4))?;
        let completion = self.effective_completion(op, &handle, &slot, 1, &completion);
        let fence = if attrs::get_bool(self.ctx, op, "fence") {
            FLAG_FENCE
        } else {
            0
        };
        let queue = (handle.as_str(), management.as_str());
        let add =
            attrs::get_typed::<SignalOperation>(self.ctx, op, "op") == Some(SignalOperation::Add);
        let zero = self.constant_i64(0);
        if add {
            let result_address = self.handle_field(
                &handle,
                offset_of!(EndpointHandle, atomic_result_address),
                64,
            );
            let result_key =
                self.handle_field(&handle, offset_of!(EndpointHandle, atomic_result_lkey), 32);
            let is_v1 = self.ionic_firmware_is_v1(&management);
            let eight = self.constant_i64(8);
            let v2_lkey = self.assign(
                "ab_v2_lkey",
                format!("arith.select {is_v1}, {zero}, {result_key} : i64"),
            );
            let v1_length = self.assign(
                "ab_v1_len",
                format!("arith.select {is_v1}, {eight}, {zero} : i64"),
            );
            let v1_lkey = self.assign(
                "ab_v1_lkey",
                format!("arith.select {is_v1}, {result_key}, {zero} : i64"),
            );
            let opcodes = (op_v1::ATOMIC_FA, op_v2::ATOMIC_FA);
            let mut wqe = self.ionic_wqe_header(queue, &slot, opcodes, 1, (&completion, fence));
            wqe.be64(REMOTE_HIGH, &remote);
            wqe.word_be32(REMOTE_RKEY, &rkey);
            wqe.be64(ATOMIC_SWAP_ADD, &value);
            wqe.be64(ATOMIC_COMPARE, &zero);
            wqe.word_be32(ATOMIC_V2_LKEY, &v2_lkey);
            wqe.be64(ATOMIC_LOCAL_VA, &result_address);
            // ABI 1: the old value's length and lkey; ABI 2: its reserved express-doorbell word.
            const _: () = assert!(ATOMIC_V1_SGE_LEN == ATOMIC_V2_RESERVED);
            wqe.word_be32(ATOMIC_V1_SGE_LEN, &v1_length);
            wqe.word_be32(ATOMIC_V1_SGE_LKEY, &v1_lkey);
            self.store_wqe(wqe);
        } else {
            let opcodes = (op_v1::RDMA_WRITE, op_v2::RDMA_WRITE);
            let flags = FLAG_INL | fence;
            let mut wqe = self.ionic_wqe_header(queue, &slot, opcodes, 0, (&completion, flags));
            wqe.be64(REMOTE_HIGH, &remote);
            wqe.word_be32(REMOTE_RKEY, &rkey);
            let length = self.constant_i64(8);
            wqe.word_be32(LENGTH, &length);
            wqe.le64(PAYLOAD, &value);
            self.store_wqe(wqe);
        }
        self.ionic_note_completion(&management, &slot, &completion);
        Ok(())
    }

    pub(super) fn ionic_publish(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (_, management) = self.queue_of(self.operand(op, 0))?;
        // The management block is device memory of this GPU's programs: GPU scope.
        self.publish_in_order(op, &management, READY_HEAD, "gpu")
    }

    pub(super) fn ionic_lock(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (_, management) = self.queue_of(self.operand(op, 0))?;
        let lock = self.offset_address(&management, POST_SEND_LOCK);
        self.take_post_lock(op, &lock)
    }

    pub(super) fn ionic_unlock(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (_, management) = self.queue_of(self.operand(op, 0))?;
        let lock = self.offset_address(&management, POST_SEND_LOCK);
        self.release_post_lock(&lock);
        Ok(())
    }

    /// `ionic.doorbell`: the producer index (`atomicMax` on a shared queue, whose largest end
    /// is rung: never backwards), a system fence (the WQE stores must reach the device before
    /// the MMIO store: a release orders only what precedes it), then the 64-bit MMIO store of
    /// `queue id << 24 | producer index mod ring` (`aboleth_abi::ionic::sq_doorbell_value`).
    pub(super) fn ionic_doorbell(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        use aboleth_abi::EndpointHandle;
        let (handle, management) = self.queue_of(self.operand(op, 0))?;
        let end = self.i64(self.operand(op, 1))?;
        let doorbell = self.handle_field(
            &handle,
            offset_of!(EndpointHandle, uar_doorbell_address),
            64,
        );
        let queue_id = self.handle_field(&handle, offset_of!(EndpointHandle, qpn), 32);
        let entries = self.sq_entries(&handle);
        let producer = self.offset_address(&management, PRODUCER_INDEX);
        let advance = if attrs::get_bool(self.ctx, op, "atomic_max") {
            "@%ab_leader atom.relaxed.gpu.global.max.u64 %ab_old, [$3], $2; max.u64 %ab_end, $2, %ab_old;"
        } else {
            "@%ab_leader st.volatile.global.u64 [$3], $2;"
        };
        let ptx = format!(
            "{{ .reg .pred %ab_leader; .reg .u32 %ab_tid; .reg .u64 %ab_end, %ab_old, %ab_mask, %ab_qid, %ab_value; mov.u32 %ab_tid, %tid.x; setp.eq.u32 %ab_leader, %ab_tid, 0; mov.u64 %ab_end, $2; mov.u64 %ab_old, 0; {advance} max.u64 %ab_mask, $4, 1; sub.u64 %ab_mask, %ab_mask, 1; and.b64 %ab_value, %ab_end, %ab_mask; and.b64 %ab_qid, $5, {qid_mask}; shl.b64 %ab_qid, %ab_qid, {qid_shift}; or.b64 %ab_value, %ab_value, %ab_qid; @%ab_leader fence.sc.sys; @%ab_leader st.mmio.relaxed.sys.global.b64 [$1], %ab_value; mov.u32 $0, 0; }}",
            qid_mask = ionic::QID_MASK,
            qid_shift = ionic::DBELL_QID_SHIFT,
        );
        self.asm(
            &ptx,
            &[
                (&doorbell, "i64", 'l'),
                (&end, "i64", 'l'),
                (&producer, "i64", 'l'),
                (&entries, "i64", 'l'),
                (&queue_id, "i64", 'l'),
            ],
        );
        Ok(())
    }

    /// `ionic.wait_completion`: poll the CQ until the consumer index is past the WQE at the
    /// slot operand (a token) or reaches the queue's `last_completion_end` (a drain), then a
    /// barrier. Completions are cumulative (RC), so one index says it all.
    pub(super) fn ionic_wait_completion(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (handle, management) = self.queue_of(self.operand(op, 0))?;
        let target = if op.deref(self.ctx).get_num_operands() > 2 {
            let slot = self.i64(self.operand(op, 1))?;
            let one = self.constant_i64(1);
            self.binary_i64("arith.addi", &slot, &one)
        } else {
            let last = self.offset_address(&management, LAST_COMPLETION_END);
            let zero = self.constant_i64(0);
            self.leader_load("ld.volatile.global.u64", &last, &zero)
        };
        let cq = self.ionic_cq(&handle, &management);
        let consumer = self.offset_address(&management, CONSUMER_INDEX);
        let overdue = self.queue_overdue(
            op,
            self.operand(op, 0),
            &consumer,
            &target,
            aboleth_abi::wait_failure::WAIT_KIND_COMPLETION,
        )?;
        let wanted = target.clone();
        self.leader_wait_after(
            |this| this.advance_ionic_cq(&cq),
            "ld.volatile.global.u64",
            &consumer,
            &target,
            |this, seen| {
                this.assign(
                    "ab_waiting",
                    format!("arith.cmpi slt, {seen}, {wanted} : i64"),
                )
            },
            overdue,
        );
        self.emit("gpu.barrier".into());
        Ok(())
    }
}
