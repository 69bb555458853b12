//! Proxy code generation: ring entries (`aboleth_abi::ProxyRingEntry`) stored by thread 0 and
//! made visible by a release store of the producer head, which the host proxy thread polls;
//! reservations and publication through `queue.rs`; completion waits on the ring's completion
//! counter. It does not run the proxy (`aboleth-runtime` does, `aboleth-sim` models it).

use aboleth_ir::{
    ab::attributes::SignalOperation,
    attrs,
    pliron::{context::Ptr, operation::Operation, value::Value},
};

use super::ptx::fill_ptx;
use super::{BridgeError, Generator, Repr};

impl Generator<'_> {
    pub(super) fn ring_of(&mut self, endpoint: Value) -> Result<(String, String), BridgeError> {
        let handle = self.i64(endpoint)?;
        let ring = self.load_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, proxy_ring_address) as u64,
            64,
        );
        let capacity = self.load_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, proxy_ring_capacity_entries) as u64,
            32,
        );
        Ok((ring, capacity))
    }

    pub(super) fn proxy_reserve(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (ring, capacity) = self.ring_of(self.operand(op, 0))?;
        let counter = self.offset_address(
            &ring,
            aboleth_abi::ProxyRingHeader::PRODUCER_RESERVATION_COUNTER_OFFSET_BYTES,
        );
        let consumer = self.offset_address(
            &ring,
            aboleth_abi::ProxyRingHeader::CONSUMER_HEAD_OFFSET_BYTES,
        );
        // Shared rings are host memory that several programs' leaders update: system scope.
        self.reserve_slots(
            op,
            &counter,
            &consumer,
            &capacity,
            "sys",
            "ld.acquire.sys.global.u64",
            None,
        )
    }

    /// `proxy.put`: a put entry (a NOP when its predicate is false).
    pub(super) fn proxy_put(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        self.proxy_command(op, false)
    }

    /// `proxy.signal`: a signal entry.
    pub(super) fn proxy_signal(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        self.proxy_command(op, true)
    }

    /// A ring entry: put (or NOP when its predicate is false) or signal.
    fn proxy_command(&mut self, op: Ptr<Operation>, signal: bool) -> Result<(), BridgeError> {
        let endpoint = self.operand(op, 0);
        let (ring, capacity) = self.ring_of(endpoint)?;
        let handle = self.i64(endpoint)?;
        let peer = self.load_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, peer_rank) as u64,
            32,
        );
        let slot = self.i64(self.operand(op, 1))?;
        let target = self.operand(op, 2);
        let Repr::RemotePointer { descriptor, offset } = self.repr(target)? else {
            return Err(BridgeError::plain(
                "internal: a proxy command without a remote pointer",
            ));
        };
        let region_index = self.load_field(
            &descriptor,
            core::mem::offset_of!(aboleth_abi::RemoteRegionDescriptor, region_index) as u64,
            32,
        );
        let zero = self.constant_i64(0);
        let thirty_two = self.constant_i64(32);
        let sixteen = self.constant_i64(16);
        let completion_operand = if signal { 4 } else { 7 };
        let completion = self.i64(self.operand(op, completion_operand))?;
        let completion_flag = self.assign(
            "ab_flag",
            format!("arith.cmpi ne, {completion}, {zero} : i64"),
        );
        let completion_bit = self.assign(
            "ab_flag",
            format!("arith.extui {completion_flag} : i1 to i64"),
        );
        let (opcode, flags, word16, word24, word32, word40, word48, word56);
        if signal {
            let add = attrs::get_typed::<SignalOperation>(self.ctx, op, "op")
                == Some(SignalOperation::Add);
            opcode = self.constant_i64(aboleth_abi::proxy::ProxyOpcode::Signal as i64);
            flags = if add {
                let add_bit =
                    self.constant_i64(i64::from(aboleth_abi::proxy::PROXY_FLAG_SIGNAL_ADD));
                self.binary_i64("arith.ori", &completion_bit, &add_bit)
            } else {
                completion_bit
            };
            word16 = zero.clone();
            word24 = zero.clone();
            let shifted = self.binary_i64("arith.shli", &offset, &thirty_two);
            word32 = self.binary_i64("arith.ori", &region_index, &shifted);
            word40 = zero.clone();
            word48 = zero.clone();
            word56 = self.i64(self.operand(op, 3))?;
        } else {
            let predicate = self.i64(self.operand(op, 6))?;
            let sends = self.assign(
                "ab_sends",
                format!("arith.cmpi ne, {predicate}, {zero} : i64"),
            );
            // Put = 1, NOP = 0: the predicate itself.
            opcode = self.fresh("ab_opcode");
            self.emit(format!("{opcode} = arith.extui {sends} : i1 to i64"));
            flags = completion_bit;
            let key = self.i64(self.operand(op, 5))?;
            let mask = self.constant_i64(0xffff_ffff);
            let key = self.binary_i64("arith.andi", &key, &mask);
            let shifted = self.binary_i64("arith.shli", &region_index, &thirty_two);
            word16 = self.binary_i64("arith.ori", &key, &shifted);
            word24 = self.use_as(self.operand(op, 3), "i64")?;
            word32 = zero.clone();
            word40 = offset;
            word48 = self.i64(self.operand(op, 4))?;
            word56 = zero.clone();
        }
        let flags_shifted = self.binary_i64("arith.shli", &flags, &sixteen);
        let peer_shifted = self.binary_i64("arith.shli", &peer, &thirty_two);
        let low = self.binary_i64("arith.ori", &opcode, &flags_shifted);
        let word8 = self.binary_i64("arith.ori", &low, &peer_shifted);
        let one = self.constant_i64(1);
        let sequence = self.binary_i64("arith.addi", &slot, &one);
        let index = self.binary_i64("arith.remsi", &slot, &capacity);
        let entry_bytes = self.constant_i64(aboleth_abi::ProxyRingEntry::SIZE_BYTES as i64);
        let entry_offset = self.binary_i64("arith.muli", &index, &entry_bytes);
        let entries = self.constant_i64(aboleth_abi::ProxyRingHeader::ENTRIES_OFFSET_BYTES as i64);
        let slots = self.binary_i64("arith.addi", &ring, &entries);
        let entry = self.binary_i64("arith.addi", &slots, &entry_offset);
        // Every field, then the sequence word; plain stores: the doorbell's release orders them.
        // (16-byte vector stores only at 16-byte-aligned offsets of the 64-byte entry.)
        let stores = fill_ptx(
            "@%ab_leader st.global.u64 [$1+@OPCODE@], $2; @%ab_leader st.global.v2.u64 [$1+@SOURCE_KEY@], {$3, $4}; @%ab_leader st.global.v2.u64 [$1+@SIGNAL_REGION@], {$5, $6}; @%ab_leader st.global.v2.u64 [$1+@LENGTH@], {$7, $8}; @%ab_leader st.global.u64 [$1+@SEQUENCE@], $9;",
            &entry_words(),
        )
        // The sequence word is at offset 0, written `[$1]`.
        .replace("[$1+0]", "[$1]");
        let operands = [
            entry.as_str(),
            &word8,
            &word16,
            &word24,
            &word32,
            &word40,
            &word48,
            &word56,
            &sequence,
        ];
        let typed: Vec<(&str, &str, char)> =
            operands.iter().map(|name| (*name, "i64", 'l')).collect();
        self.asm(&Self::leader_block(&stores), &typed);
        Ok(())
    }

    pub(super) fn proxy_publish(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (ring, _) = self.ring_of(self.operand(op, 0))?;
        // The ring header is host memory the proxy thread reads: system scope.
        self.publish_in_order(
            op,
            &ring,
            aboleth_abi::ProxyRingHeader::PRODUCER_READY_COUNTER_OFFSET_BYTES,
            "sys",
        )
    }

    pub(super) fn proxy_doorbell(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (ring, _) = self.ring_of(self.operand(op, 0))?;
        let end = self.i64(self.operand(op, 1))?;
        let head = self.offset_address(
            &ring,
            aboleth_abi::ProxyRingHeader::PRODUCER_HEAD_OFFSET_BYTES,
        );
        let relaxed = attrs::get_string(self.ctx, op, "order").as_deref() == Some("relaxed");
        let store = match (attrs::get_bool(self.ctx, op, "atomic_max"), relaxed) {
            // One release atomic: a separate store could move a larger head backwards.
            (true, false) => "atom.release.sys.global.max.u64 %ab_old, [$1], $2;",
            (true, true) => "atom.relaxed.sys.global.max.u64 %ab_old, [$1], $2;",
            (false, false) => "st.release.sys.global.u64 [$1], $2;",
            (false, true) => "st.volatile.global.u64 [$1], $2;",
        };
        let ptx = format!(
            "{{ .reg .pred %ab_leader; .reg .u32 %ab_tid; .reg .u64 %ab_old; mov.u32 %ab_tid, %tid.x; setp.eq.u32 %ab_leader, %ab_tid, 0; @%ab_leader {store} mov.u32 $0, 0; }}"
        );
        self.asm(&ptx, &[(&head, "i64", 'l'), (&end, "i64", 'l')]);
        Ok(())
    }

    pub(super) fn proxy_wait_completion(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (ring, _) = self.ring_of(self.operand(op, 0))?;
        let one = self.constant_i64(1);
        let target = if op.deref(self.ctx).get_num_operands() > 1 {
            let slot = self.i64(self.operand(op, 1))?;
            self.binary_i64("arith.addi", &slot, &one)
        } else {
            // Everything reserved so far on the ring (the program's last command asks for a
            // completion; completions are cumulative).
            let counter = self.offset_address(
                &ring,
                aboleth_abi::ProxyRingHeader::PRODUCER_RESERVATION_COUNTER_OFFSET_BYTES,
            );
            let zero = self.constant_i64(0);
            self.leader_load("ld.volatile.global.u64", &counter, &zero)
        };
        let completion = self.offset_address(
            &ring,
            aboleth_abi::ProxyRingHeader::COMPLETION_COUNTER_OFFSET_BYTES,
        );
        let overdue = self.queue_overdue(
            op,
            self.operand(op, 0),
            &completion,
            &target,
            aboleth_abi::wait_failure::WAIT_KIND_COMPLETION,
        )?;
        self.leader_wait(
            "ld.acquire.sys.global.u64",
            &completion,
            &target,
            |this, seen| {
                this.assign(
                    "ab_waiting",
                    format!("arith.cmpi slt, {seen}, {target} : i64"),
                )
            },
            overdue,
        );
        // The other threads may reuse the source next: they wait for the leader here.
        self.emit("gpu.barrier".into());
        Ok(())
    }
}

/// Where the entry's 8-byte words start, as `proxy_command` packs them: `opcode | flags << 16
/// | peer_rank << 32` at `opcode`, `{source_key | destination_region_index << 32,
/// source_address}`, `{signal_region_index | signal_offset_bytes << 32,
/// destination_offset_bytes}` and `{length_bytes, signal_value}` as 16-byte pairs, and the
/// sequence word (stored last).
fn entry_words() -> [(&'static str, u64); 5] {
    use aboleth_abi::ProxyRingEntry as Entry;
    use core::mem::offset_of;
    const _: () = {
        assert!(offset_of!(Entry, flags) == offset_of!(Entry, opcode) + 2);
        assert!(offset_of!(Entry, peer_rank) == offset_of!(Entry, opcode) + 4);
        assert!(offset_of!(Entry, destination_region_index) == offset_of!(Entry, source_key) + 4);
        assert!(offset_of!(Entry, source_address) == offset_of!(Entry, source_key) + 8);
        assert!(
            offset_of!(Entry, signal_offset_bytes) == offset_of!(Entry, signal_region_index) + 4
        );
        assert!(
            offset_of!(Entry, destination_offset_bytes)
                == offset_of!(Entry, signal_region_index) + 8
        );
        assert!(offset_of!(Entry, signal_value) == offset_of!(Entry, length_bytes) + 8);
        // `st.global.v2.u64` needs 16-byte alignment.
        assert!(offset_of!(Entry, source_key) % 16 == 0);
        assert!(offset_of!(Entry, signal_region_index) % 16 == 0);
        assert!(offset_of!(Entry, length_bytes) % 16 == 0);
    };
    [
        ("OPCODE", offset_of!(Entry, opcode) as u64),
        ("SOURCE_KEY", offset_of!(Entry, source_key) as u64),
        (
            "SIGNAL_REGION",
            offset_of!(Entry, signal_region_index) as u64,
        ),
        ("LENGTH", offset_of!(Entry, length_bytes) as u64),
        ("SEQUENCE", offset_of!(Entry, sequence) as u64),
    ]
}
