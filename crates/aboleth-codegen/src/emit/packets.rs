//! Code generation for flag-in-data packets on NVLink (`p2p.put_packets` and the unpacking
//! `gpu.wait_flag [packets]`), in the layout of `aboleth_abi::packet`.
//!
//! Sender: every thread stores its share of the payload as 8-byte packet halves
//! `{4 data bytes, flag}` with `st.relaxed.sys` (single-copy atomic, so each half is
//! recognisable alone and no ordering between the stores is needed), and thread 0 stores the
//! two header packets. No barrier, fence or flag store.
//!
//! Receiver: thread 0 of the waiting program reads the flag's slot on each poll, in one
//! straight-line statement whose loads issue back to back (`unpack_ptx`); once both header
//! packets and every payload packet carry the header's flag, it copies the payload into this
//! rank's data region, publishes the flag with `st.release.sys` (so the other threads' acquire
//! polls see the data) and zeroes the first header packet (consumed). The other threads only
//! poll the flag, so no barrier or warp-synchronous instruction sits in the divergent poll loop.
//! Transfers longer than the kernel's longest packet put (`packet_bytes_max` on the wait) are
//! not unpacked: every packet put of a kernel is the same program's.
//!
//! Both sides check the region's `REGION_FLAG_PACKET_SLOTS` first: without slots after the flag
//! region they record `WAIT_KIND_PACKET_SLOTS_MISSING` in the wait-failure log and exit instead
//! of touching memory past the region. This module does not decide anything: the passes do.

use aboleth_abi::packet::{HEADER_PACKETS, PACKET_PUT_BYTES_LIMIT, Packet, SLOT_BYTES};
use aboleth_abi::region::REGION_FLAG_PACKET_SLOTS;
use aboleth_abi::wait_failure::WAIT_KIND_PACKET_SLOTS_MISSING;
use aboleth_abi::{EndpointHandle, RemoteRegionDescriptor};
use aboleth_ir::pliron::{context::Ptr, operation::Operation, value::Value};
use core::mem::offset_of;

use super::{BridgeError, Generator, Repr, WaitBound, WaitLog, WaitReport};

// The PTX below reads packets as two little-endian u64 halves {payload, flag}.
const _: () = assert!(offset_of!(Packet, payload_low) == 0 && offset_of!(Packet, flag_first) == 4);
const _: () =
    assert!(offset_of!(Packet, payload_high) == 8 && offset_of!(Packet, flag_second) == 12);

/// Payload words (4 bytes) one packet put carries at most: the lanes of the store tensor.
const PAYLOAD_WORDS: u64 = PACKET_PUT_BYTES_LIMIT / 4;
/// Bytes of the header packets, where the payload halves start in a slot.
const HEADER_BYTES: u64 = HEADER_PACKETS * Packet::SIZE_BYTES as u64;

/// What a packet wait reads before its poll loop.
pub(super) struct PacketWait {
    /// Whether the polled flag lies in this rank's flag region (i1): only then is there a slot.
    in_region: String,
    /// The flag's slot (i64).
    slot: String,
    /// This rank's data region: start and length (i64).
    data_base: String,
    data_length: String,
    /// The flag (i64).
    flag: String,
    /// The most payload packets a transfer of this kernel carries.
    payload_packets_max: u64,
}

impl Generator<'_> {
    /// (base, length, transport word) of the region descriptor at `descriptor` (i64 each).
    fn descriptor_fields(&mut self, descriptor: &str) -> (String, String, String) {
        let base = self.load_field(
            descriptor,
            offset_of!(RemoteRegionDescriptor, base_address) as u64,
            64,
        );
        let length = self.load_field(
            descriptor,
            offset_of!(RemoteRegionDescriptor, length_bytes) as u64,
            64,
        );
        let transport = self.load_field(
            descriptor,
            offset_of!(RemoteRegionDescriptor, transport) as u64,
            32,
        );
        (base, length, transport)
    }

    /// Whether the transport word says no packet slots follow the region (i1).
    fn lacks_packet_slots(&mut self, transport: &str) -> String {
        let bit = self.constant_i64(i64::from(REGION_FLAG_PACKET_SLOTS));
        let masked = self.binary_i64("arith.andi", transport, &bit);
        let zero = self.constant_i64(0);
        self.assign(
            "ab_missing",
            format!("arith.cmpi eq, {masked}, {zero} : i64"),
        )
    }

    /// The slot of the flag at byte `flag_offset` of a flag region at `base` of `length` bytes:
    /// `base + round_up(length, 16) + flag_offset / 8 * SLOT_BYTES` (`packet::slot_offset_bytes`).
    fn packet_slot(&mut self, base: &str, length: &str, flag_offset: &str) -> String {
        let fifteen = self.constant_i64(Packet::SIZE_BYTES as i64 - 1);
        let round = self.constant_i64(-(Packet::SIZE_BYTES as i64));
        let padded = self.binary_i64("arith.addi", length, &fifteen);
        let staging = self.binary_i64("arith.andi", &padded, &round);
        let three = self.constant_i64(3);
        let index = self.binary_i64("arith.shrui", flag_offset, &three);
        let slot_bytes = self.constant_i64(SLOT_BYTES as i64);
        let slot_offset = self.binary_i64("arith.muli", &index, &slot_bytes);
        let start = self.binary_i64("arith.addi", base, &staging);
        self.binary_i64("arith.addi", &start, &slot_offset)
    }

    /// Records a missing staging area (`WAIT_KIND_PACKET_SLOTS_MISSING`) and exits, in every
    /// thread where `missing` (i1) holds.
    fn exit_if_packet_slots_missing(
        &mut self,
        bound: &WaitBound,
        missing: &str,
        flag: &str,
        peer: String,
    ) {
        let zero = self.constant_i64(0);
        let report = WaitReport {
            waiting: missing.to_owned(),
            address: flag.to_owned(),
            expected: zero.clone(),
            seen: zero.clone(),
            peer,
            kind: WAIT_KIND_PACKET_SLOTS_MISSING,
        };
        self.record_failure_if(bound, missing, &zero, &report);
    }

    /// Records `WAIT_KIND_PACKET_UNSENDABLE` and exits unless the flag at byte `flag_offset` is
    /// an aligned word of a flag region of `length` bytes, the flag word (the value's low half)
    /// is not 0, and the destination offset and the source are 4-byte aligned with the offset
    /// below 4 GiB: what the header and the receiver's stores can carry.
    fn exit_if_packet_unsendable(
        &mut self,
        bound: &WaitBound,
        [flag_offset, length, flag_word, destination_offset, source]: [&String; 5],
        flag: &str,
        peer: String,
    ) {
        let zero = self.constant_i64(0);
        let seven = self.constant_i64(7);
        let three = self.constant_i64(3);
        let eight = self.constant_i64(8);
        let misaligned_flag = self.binary_i64("arith.andi", flag_offset, &seven);
        let flag_end = self.binary_i64("arith.addi", flag_offset, &eight);
        let aligned_words = self.binary_i64("arith.ori", destination_offset, source);
        let misaligned_words = self.binary_i64("arith.andi", &aligned_words, &three);
        let high_mask = self.constant_i64(!0xffff_ffff_i64);
        let far = self.binary_i64("arith.andi", destination_offset, &high_mask);
        let mut bad = self.assign(
            "ab_unsendable",
            format!("arith.cmpi ugt, {flag_end}, {length} : i64"),
        );
        for condition in [
            format!("arith.cmpi ne, {misaligned_flag}, {zero} : i64"),
            format!("arith.cmpi eq, {flag_word}, {zero} : i64"),
            format!("arith.cmpi ne, {misaligned_words}, {zero} : i64"),
            format!("arith.cmpi ne, {far}, {zero} : i64"),
        ] {
            let holds = self.assign("ab_unsendable", condition);
            bad = self.assign("ab_unsendable", format!("arith.ori {bad}, {holds} : i1"));
        }
        let report = WaitReport {
            waiting: bad.clone(),
            address: flag.to_owned(),
            expected: destination_offset.to_string(),
            seen: flag_word.to_string(),
            peer,
            kind: aboleth_abi::wait_failure::WAIT_KIND_PACKET_UNSENDABLE,
        };
        self.record_failure_if(bound, &bad, &zero, &report);
    }

    /// `p2p.put_packets %ep, %flag, %dst, %src, %bytes, %value`.
    pub(super) fn p2p_put_packets(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let endpoint = self.i64(self.operand(op, 0))?;
        let Repr::RemotePointer {
            descriptor,
            offset: flag_offset,
        } = self.repr(self.operand(op, 1))?
        else {
            return Err(BridgeError::plain(
                "internal: a packet signal's flag is not a remote pointer",
            ));
        };
        let Repr::RemotePointer {
            offset: destination_offset,
            ..
        } = self.repr(self.operand(op, 2))?
        else {
            return Err(BridgeError::plain(
                "internal: a packet put's destination is not a remote pointer",
            ));
        };
        let source = self.use_as(self.operand(op, 3), "i64")?;
        let bytes = self.i64(self.operand(op, 4))?;
        let value = self.i64(self.operand(op, 5))?;

        let (base, length, transport) = self.descriptor_fields(&descriptor);
        let flag = self.binary_i64("arith.addi", &base, &flag_offset);
        // The handle names this rank's wait-failure log: where a missing staging area is told.
        let log = self.load_field(
            &endpoint,
            offset_of!(EndpointHandle, wait_failure_log_address) as u64,
            64,
        );
        let rank = self.load_field(&endpoint, offset_of!(EndpointHandle, local_rank) as u64, 32);
        let peer = self.load_field(&endpoint, offset_of!(EndpointHandle, peer_rank) as u64, 32);
        let peer = self.assign("ab_peer", format!("arith.trunci {peer} : i64 to i32"));
        let bound = self.failure_site(op, log, rank);
        let missing = self.lacks_packet_slots(&transport);
        self.exit_if_packet_slots_missing(&bound, &missing, &flag, peer.clone());
        let low_mask = self.constant_i64(0xffff_ffff);
        let flag_word = self.binary_i64("arith.andi", &value, &low_mask);
        self.exit_if_packet_unsendable(
            &bound,
            [
                &flag_offset,
                &length,
                &flag_word,
                &destination_offset,
                &source,
            ],
            &flag,
            peer,
        );
        let slot = self.packet_slot(&base, &length, &flag_offset);

        // Header: {destination offset, flag, length, flag}, {value's high half, flag, 0, flag}.
        let thirty_two = self.constant_i64(32);
        let flag_high = self.binary_i64("arith.shli", &flag_word, &thirty_two);
        let half = |this: &mut Self, low: &str| {
            let masked = this.binary_i64("arith.andi", low, &low_mask);
            this.binary_i64("arith.ori", &masked, &flag_high)
        };
        let first = half(self, &destination_offset);
        let second = half(self, &bytes);
        let value_high = self.binary_i64("arith.shrui", &value, &thirty_two);
        let third = half(self, &value_high);
        let header = Self::leader_block(
            "@%ab_leader st.relaxed.sys.global.u64 [$1], $2; @%ab_leader st.relaxed.sys.global.u64 [$1+8], $3; @%ab_leader st.relaxed.sys.global.u64 [$1+16], $4; @%ab_leader st.relaxed.sys.global.u64 [$1+24], $5;",
        );
        self.asm(
            &header,
            &[
                (&slot, "i64", 'l'),
                (&first, "i64", 'l'),
                (&second, "i64", 'l'),
                (&third, "i64", 'l'),
                (&flag_high, "i64", 'l'),
            ],
        );

        // Payload: word k of the source becomes half k of the slot's payload packets.
        let lanes_count = PAYLOAD_WORDS;
        let words_i32 = format!("tensor<{lanes_count}xi32>");
        let words_i64 = format!("tensor<{lanes_count}xi64>");
        let pointers = format!("tensor<{lanes_count}x!tt.ptr<i32>>");
        let lanes = self.assign(
            "ab_lanes",
            format!("tt.make_range {{end = {lanes_count} : i32, start = 0 : i32}} : {words_i32}"),
        );
        let two = self.constant_i64(2);
        let words = self.binary_i64("arith.shrui", &bytes, &two);
        let words = self.assign("ab_words", format!("arith.trunci {words} : i64 to i32"));
        let words = self.assign("ab_splat", format!("tt.splat {words} : i32 -> {words_i32}"));
        let mask = self.assign(
            "ab_mask",
            format!("arith.cmpi slt, {lanes}, {words} : {words_i32}"),
        );
        let source_pointer = self.assign(
            "ab_src",
            format!("tt.int_to_ptr {source} : i64 -> !tt.ptr<i32>"),
        );
        let source_pointers = self.assign(
            "ab_splat",
            format!("tt.splat {source_pointer} : !tt.ptr<i32> -> {pointers}"),
        );
        let source_pointers = self.assign(
            "ab_src",
            format!("tt.addptr {source_pointers}, {lanes} : {pointers}, {words_i32}"),
        );
        let data = self.assign(
            "ab_data",
            format!("tt.load {source_pointers}, {mask} : {pointers}"),
        );
        let data = self.assign(
            "ab_data",
            format!("arith.extui {data} : {words_i32} to {words_i64}"),
        );
        let flags = self.assign(
            "ab_splat",
            format!("tt.splat {flag_high} : i64 -> {words_i64}"),
        );
        let halves = self.assign(
            "ab_halves",
            format!("arith.ori {data}, {flags} : {words_i64}"),
        );
        let lanes_wide = self.assign(
            "ab_lanes",
            format!("arith.extsi {lanes} : {words_i32} to {words_i64}"),
        );
        let half_bytes = self.constant_i64(8);
        let half_bytes = self.assign(
            "ab_splat",
            format!("tt.splat {half_bytes} : i64 -> {words_i64}"),
        );
        let offsets = self.assign(
            "ab_offsets",
            format!("arith.muli {lanes_wide}, {half_bytes} : {words_i64}"),
        );
        let payload = self.offset_address(&slot, HEADER_BYTES);
        let payload = self.assign(
            "ab_splat",
            format!("tt.splat {payload} : i64 -> {words_i64}"),
        );
        let addresses = self.assign(
            "ab_addresses",
            format!("arith.addi {payload}, {offsets} : {words_i64}"),
        );
        let mask = self.assign(
            "ab_mask",
            format!("arith.extui {mask} : tensor<{lanes_count}xi1> to {words_i32}"),
        );
        self.assign(
            "ab_stored",
            format!(
                "tt.elementwise_inline_asm \"{{ .reg .pred %ab_p; setp.ne.u32 %ab_p, $3, 0; @%ab_p st.relaxed.sys.global.u64 [$1], $2; mov.u32 $0, 0; }}\" {{constraints = \"=r,l,l,r\", packed_element = 1 : i32, pure = false}} {addresses}, {halves}, {mask} : {words_i64}, {words_i64}, {words_i32} -> {words_i32}"
            ),
        );
        Ok(())
    }

    /// A failure site for `op` that is not a timed wait: the log and rank it records into.
    pub(super) fn failure_site(
        &mut self,
        op: Ptr<Operation>,
        log: String,
        rank: String,
    ) -> WaitBound {
        let site = self.wait_sites.len();
        let diagnostic = aboleth_ir::Diagnostic::at_op(self.ctx, op, "");
        self.wait_sites.push(diagnostic.line);
        let zero = self.constant_i64(0);
        WaitBound {
            log,
            rank,
            site,
            timeout: zero.clone(),
            start: zero,
        }
    }

    /// Before a packet wait's loop: this rank's flag and data regions (from the tables'
    /// entries for this rank), whether the flag at `flag` has a slot, and the slot.
    pub(super) fn packet_wait(
        &mut self,
        op: Ptr<Operation>,
        flag_table: Value,
        data_table: Value,
        flag: &str,
        bound: Option<&WaitBound>,
    ) -> Result<PacketWait, BridgeError> {
        let (Some(bound), Some(WaitLog { rank, .. })) = (bound, self.wait_log.clone()) else {
            return Err(BridgeError::plain(format!(
                "a wait of a kernel with packet signals (line {}) needs an endpoint created at the kernel's top level: its handle names this rank and its wait-failure log",
                aboleth_ir::Diagnostic::at_op(self.ctx, op, "").line
            )));
        };
        let descriptor_bytes = self.constant_i64(RemoteRegionDescriptor::SIZE_BYTES as i64);
        let own_entry = self.binary_i64("arith.muli", &rank, &descriptor_bytes);
        let flag_table = self.i64(flag_table)?;
        let data_table = self.i64(data_table)?;
        let flag_descriptor = self.binary_i64("arith.addi", &flag_table, &own_entry);
        let data_descriptor = self.binary_i64("arith.addi", &data_table, &own_entry);
        let (flag_base, flag_length, transport) = self.descriptor_fields(&flag_descriptor);
        let (data_base, data_length, _) = self.descriptor_fields(&data_descriptor);
        let offset = self.binary_i64("arith.subi", flag, &flag_base);
        let above = self.assign(
            "ab_in",
            format!("arith.cmpi uge, {flag}, {flag_base} : i64"),
        );
        let eight = self.constant_i64(8);
        let end = self.binary_i64("arith.addi", &offset, &eight);
        let below = self.assign(
            "ab_in",
            format!("arith.cmpi ule, {end}, {flag_length} : i64"),
        );
        let seven = self.constant_i64(7);
        let misalignment = self.binary_i64("arith.andi", &offset, &seven);
        let zero = self.constant_i64(0);
        let aligned = self.assign(
            "ab_in",
            format!("arith.cmpi eq, {misalignment}, {zero} : i64"),
        );
        let in_region = self.assign("ab_in", format!("arith.andi {above}, {below} : i1"));
        let in_region = self.assign("ab_in", format!("arith.andi {in_region}, {aligned} : i1"));
        let lacking = self.lacks_packet_slots(&transport);
        let missing = self.assign(
            "ab_missing",
            format!("arith.andi {in_region}, {lacking} : i1"),
        );
        let own = self.assign("ab_peer", format!("arith.trunci {rank} : i64 to i32"));
        self.exit_if_packet_slots_missing(bound, &missing, flag, own);
        let slot = self.packet_slot(&flag_base, &flag_length, &offset);
        let payload_bytes_max = aboleth_ir::attrs::get_int(self.ctx, op, "packet_bytes_max")
            .map_or(PACKET_PUT_BYTES_LIMIT, |bytes| {
                bytes.clamp(8, PACKET_PUT_BYTES_LIMIT as i64) as u64
            });
        Ok(PacketWait {
            in_region,
            slot,
            data_base,
            data_length,
            flag: flag.to_owned(),
            payload_packets_max: payload_bytes_max.div_ceil(8),
        })
    }

    /// Inside a packet wait's loop: thread 0 unpacks the flag's slot when a whole transfer has
    /// landed there (see the module comment), in one straight-line PTX statement
    /// ([`unpack_ptx`]) so that its loads issue back to back.
    pub(super) fn unpack_packets(&mut self, wait: &PacketWait) {
        self.emit(format!("scf.if {} {{", wait.in_region));
        let ptx = unpack_ptx(wait.payload_packets_max);
        self.asm(
            &ptx,
            &[
                (&wait.slot, "i64", 'l'),
                (&wait.data_base, "i64", 'l'),
                (&wait.data_length, "i64", 'l'),
                (&wait.flag, "i64", 'l'),
            ],
        );
        self.emit("}".into());
    }
}

/// Payload packets one group of loads covers: their halves stay in registers.
const UNPACK_GROUP_PACKETS: u64 = 16;

/// Thread 0's unpacking of a slot (`$1` the slot, `$2`/`$3` this rank's data region start and
/// length, `$4` the flag), for transfers of up to `payload_packets_max` packets, unrolled:
/// 1. the two header packets (one 16-byte load each; each 8-byte half is single-copy atomic):
///    valid when their four flag words agree and the length and destination are in range;
/// 2. every payload packet the header announces, in groups of [`UNPACK_GROUP_PACKETS`] loads
///    issued back to back, checked to carry the flag in both halves;
/// 3. only when all did: the payload copied to the data region (from the registers when one
///    group holds it all, else loaded again: landed packets do not change), the flag released
///    with the header's value, and the first header packet zeroed (consumed).
///
/// No loop and no label (the statement may be duplicated by the compiler); every effect is
/// predicated, so the other threads run it as no-ops.
fn unpack_ptx(payload_packets_max: u64) -> String {
    use std::fmt::Write;
    let group = payload_packets_max.clamp(1, UNPACK_GROUP_PACKETS);
    let mut ptx = String::from("{ .reg .pred %ab_lead, %ab_hv, %ab_bad, %ab_t, %ab_q, %ab_go; ");
    ptx += ".reg .u32 %ab_tid, %ab_f, %ab_x, %ab_bytes, %ab_off, %ab_hi, %ab_count; ";
    ptx += ".reg .u64 %ab_h0, %ab_h1, %ab_h2, %ab_h3, %ab_d, %ab_end, %ab_w, %ab_value";
    for index in 0..group {
        let _ = write!(ptx, ", %ab_a{index}, %ab_b{index}");
    }
    ptx += "; ";
    ptx += "mov.u32 %ab_tid, %tid.x; setp.eq.u32 %ab_lead, %ab_tid, 0; ";
    ptx += "mov.u64 %ab_h0, 0; mov.u64 %ab_h1, 0; mov.u64 %ab_h2, 0; mov.u64 %ab_h3, 0; ";
    ptx += "@%ab_lead ld.relaxed.sys.global.v2.u64 {%ab_h0, %ab_h1}, [$1]; ";
    ptx += "@%ab_lead ld.relaxed.sys.global.v2.u64 {%ab_h2, %ab_h3}, [$1+16]; ";
    ptx += "shr.u64 %ab_w, %ab_h0, 32; cvt.u32.u64 %ab_f, %ab_w; mov.pred %ab_hv, %ab_lead; ";
    for half in ["%ab_h1", "%ab_h2", "%ab_h3"] {
        let _ = write!(
            ptx,
            "shr.u64 %ab_w, {half}, 32; cvt.u32.u64 %ab_x, %ab_w; setp.eq.and.u32 %ab_hv, %ab_x, %ab_f, %ab_hv; "
        );
    }
    let _ = write!(
        ptx,
        "cvt.u32.u64 %ab_off, %ab_h0; cvt.u32.u64 %ab_bytes, %ab_h1; cvt.u32.u64 %ab_hi, %ab_h2;          setp.ne.and.u32 %ab_hv, %ab_bytes, 0, %ab_hv; setp.le.and.u32 %ab_hv, %ab_bytes, {limit}, %ab_hv;          and.b32 %ab_x, %ab_bytes, 7; setp.eq.and.u32 %ab_hv, %ab_x, 0, %ab_hv;          and.b32 %ab_x, %ab_off, 3; setp.eq.and.u32 %ab_hv, %ab_x, 0, %ab_hv;          cvt.u64.u32 %ab_end, %ab_off; cvt.u64.u32 %ab_w, %ab_bytes; add.u64 %ab_end, %ab_end, %ab_w;          setp.le.and.u64 %ab_hv, %ab_end, $3, %ab_hv;          shr.u32 %ab_count, %ab_bytes, 3; setp.ne.u32 %ab_bad, 0, 0; ",
        limit = payload_packets_max * 8,
    );
    let load = |ptx: &mut String, packet: u64, slot: u64, predicate: &str| {
        let _ = write!(
            ptx,
            "setp.lt.and.u32 %ab_q, {packet}, %ab_count, {predicate}; @%ab_q ld.relaxed.sys.global.v2.u64 {{%ab_a{slot}, %ab_b{slot}}}, [$1+{offset}]; ",
            offset = HEADER_BYTES + packet * Packet::SIZE_BYTES as u64,
        );
    };
    for start in (0..payload_packets_max).step_by(group as usize) {
        let end = (start + group).min(payload_packets_max);
        for packet in start..end {
            load(&mut ptx, packet, packet - start, "%ab_hv");
        }
        for packet in start..end {
            let slot = packet - start;
            let _ = write!(ptx, "setp.lt.and.u32 %ab_q, {packet}, %ab_count, %ab_hv; ");
            for half in ["a", "b"] {
                let _ = write!(
                    ptx,
                    "shr.u64 %ab_w, %ab_{half}{slot}, 32; cvt.u32.u64 %ab_x, %ab_w; setp.ne.and.u32 %ab_t, %ab_x, %ab_f, %ab_q; or.pred %ab_bad, %ab_bad, %ab_t; "
                );
            }
        }
    }
    ptx += "cvt.u64.u32 %ab_d, %ab_off; add.u64 %ab_d, %ab_d, $2; ";
    ptx += "cvt.u32.u64 %ab_x, %ab_d; and.b32 %ab_x, %ab_x, 3; setp.ne.u32 %ab_t, %ab_x, 0; or.pred %ab_bad, %ab_bad, %ab_t; ";
    ptx += "not.pred %ab_go, %ab_bad; and.pred %ab_go, %ab_go, %ab_hv; ";
    let reload = payload_packets_max > group;
    for start in (0..payload_packets_max).step_by(group as usize) {
        let end = (start + group).min(payload_packets_max);
        if reload {
            for packet in start..end {
                load(&mut ptx, packet, packet - start, "%ab_go");
            }
        }
        for packet in start..end {
            let slot = packet - start;
            let _ = write!(
                ptx,
                "setp.lt.and.u32 %ab_q, {packet}, %ab_count, %ab_go;                  cvt.u32.u64 %ab_x, %ab_a{slot}; @%ab_q st.global.u32 [%ab_d+{low}], %ab_x;                  cvt.u32.u64 %ab_x, %ab_b{slot}; @%ab_q st.global.u32 [%ab_d+{high}], %ab_x; ",
                low = packet * 8,
                high = packet * 8 + 4,
            );
        }
    }
    ptx += "cvt.u64.u32 %ab_value, %ab_hi; shl.b64 %ab_value, %ab_value, 32; cvt.u64.u32 %ab_w, %ab_f; or.b64 %ab_value, %ab_value, %ab_w; ";
    // The slot is marked consumed before the flag is released: whoever sees the flag (and may
    // let the sender start its next transfer into this slot) sees the slot consumed.
    ptx +=
        "@%ab_go st.relaxed.sys.global.u64 [$1], 0; @%ab_go st.relaxed.sys.global.u64 [$1+8], 0; ";
    ptx += "@%ab_go st.release.sys.global.u64 [$4], %ab_value; ";
    ptx += "mov.u32 $0, 0; }";
    ptx
}
