//! Proxy ring ops in C++: the leader reserves ring entries (an `atom.add` at system scope, or a
//! plain read-modify-write for one owner) and waits for space past the consumer, writes each
//! entry's fields and then its sequence word, publishes in ticket order on a shared ring and
//! raises the producer head with a release (the proxy thread's doorbell); a completion wait
//! polls the host-written completion counter. The same protocol and ordering as the TTIR
//! encoding (`crate::emit::proxy`, `crate::emit::queue`), on `aboleth_abi::proxy`'s layout.

use aboleth_ir::{
    ab::attributes::SignalOperation,
    attrs,
    pliron::{context::Ptr, operation::Operation, value::Value},
};

use super::{CudaGenerator, Repr};
use crate::BridgeError;

impl CudaGenerator<'_> {
    /// The ring header and its capacity, from the endpoint handle (C++ variables), read once per
    /// handle in the function's body (every later op of that ring reuses them).
    fn ring_of(&mut self, endpoint: Value) -> Result<(String, String), BridgeError> {
        let handle = self.u64(endpoint)?;
        let ring = self.handle_field(&handle, "ring", "proxy_ring_address", "uint64_t");
        let capacity = self.handle_field(
            &handle,
            "capacity",
            "proxy_ring_capacity_entries",
            "uint64_t",
        );
        Ok((ring, capacity))
    }

    fn header_field(ring: &str, field: &str) -> String {
        format!("reinterpret_cast<uint64_t>(&reinterpret_cast<ProxyRingHeader*>({ring})->{field})")
    }

    /// `proxy.reserve`: after the scope's barrier (its threads' source stores come first), the
    /// leader takes the entries and waits until the ring has room for them.
    pub(super) fn proxy_reserve(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (ring, capacity) = self.ring_of(self.operand(op, 0))?;
        let counter = Self::header_field(&ring, "producer_reservation_counter");
        let consumer = Self::header_field(&ring, "consumer_head");
        let poll = format!(
            "asm volatile(\"ld.acquire.sys.global.u64 %0, [%1];\" : \"=l\"(ab_seen) : \"l\"({consumer}) : \"memory\");"
        );
        let base = self.reserve_slots(
            op,
            &counter,
            &consumer,
            &capacity,
            "sys",
            &poll,
            "free entries in the proxy ring",
        )?;
        self.define_scalar(op, base, "uint64_t".into());
        Ok(())
    }

    pub(super) fn proxy_put(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        self.proxy_command(op, false)
    }

    pub(super) fn proxy_signal(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        self.proxy_command(op, true)
    }

    /// A ring entry written by the leader: put (a NOP when its predicate is false) or signal,
    /// every field, then the sequence word; plain stores (the doorbell's release orders them).
    fn proxy_command(&mut self, op: Ptr<Operation>, signal: bool) -> Result<(), BridgeError> {
        use aboleth_abi::proxy::{
            PROXY_FLAG_COMPLETION_REQUESTED, PROXY_FLAG_SIGNAL_ADD, ProxyOpcode,
        };
        let endpoint = self.operand(op, 0);
        let (ring, capacity) = self.ring_of(endpoint)?;
        let handle = self.u64(endpoint)?;
        let slot = self.u64(self.operand(op, 1))?;
        let Repr::RemotePointer { descriptor, offset } = self.repr(self.operand(op, 2))? else {
            return Err(BridgeError::plain(
                "internal: a proxy command without a remote pointer",
            ));
        };
        let region_index = format!(
            "detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>({descriptor})->region_index)"
        );
        let completion = self.u64(self.operand(op, if signal { 4 } else { 7 }))?;
        let completion_flag =
            format!("({completion} != 0 ? {PROXY_FLAG_COMPLETION_REQUESTED}u : 0u)");
        let entry = self.assign(
            "entry",
            "uint64_t",
            format!(
                "{ring} + sizeof(ProxyRingHeader) + ({slot} % {capacity}) * sizeof(ProxyRingEntry)"
            ),
        );
        let mut fields: Vec<(&str, String)> = vec![(
            "peer_rank",
            format!(
                "detail::table_load(&reinterpret_cast<const EndpointHandle*>({handle})->peer_rank)"
            ),
        )];
        if signal {
            let add = attrs::get_typed::<SignalOperation>(self.ctx, op, "op")
                == Some(SignalOperation::Add);
            let add_flag = if add { PROXY_FLAG_SIGNAL_ADD } else { 0 };
            let value = self.u64(self.operand(op, 3))?;
            fields.extend([
                ("opcode", format!("{}u", ProxyOpcode::Signal as u16)),
                (
                    "flags",
                    format!("static_cast<uint16_t>({completion_flag} | {add_flag}u)"),
                ),
                ("source_key", "0u".into()),
                ("destination_region_index", "0u".into()),
                ("source_address", "0u".into()),
                ("signal_region_index", region_index),
                (
                    "signal_offset_bytes",
                    format!("static_cast<uint32_t>({offset})"),
                ),
                ("destination_offset_bytes", "0u".into()),
                ("length_bytes", "0u".into()),
                ("signal_value", value),
            ]);
        } else {
            let predicate = self.i64(self.operand(op, 6))?;
            let source = self.u64(self.operand(op, 3))?;
            let bytes = self.u64(self.operand(op, 4))?;
            let key = self.u64(self.operand(op, 5))?;
            fields.extend([
                (
                    "opcode",
                    format!(
                        "({predicate} != 0 ? {}u : {}u)",
                        ProxyOpcode::Put as u16,
                        ProxyOpcode::Nop as u16
                    ),
                ),
                ("flags", format!("static_cast<uint16_t>({completion_flag})")),
                ("source_key", format!("static_cast<uint32_t>({key})")),
                ("destination_region_index", region_index),
                ("source_address", source),
                ("signal_region_index", "0u".into()),
                ("signal_offset_bytes", "0u".into()),
                ("destination_offset_bytes", offset),
                ("length_bytes", bytes),
                ("signal_value", "0u".into()),
            ]);
        }
        let mut statement =
            format!("ProxyRingEntry* ab_e = reinterpret_cast<ProxyRingEntry*>({entry});");
        for (field, value) in fields {
            statement.push_str(&format!(" ab_e->{field} = {value};"));
        }
        statement.push_str(&format!(" ab_e->sequence = {slot} + 1;"));
        self.leader_only(statement);
        Ok(())
    }

    /// `proxy.publish`: in ticket order on a shared ring, or the one-owner store.
    pub(super) fn proxy_publish(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (ring, _) = self.ring_of(self.operand(op, 0))?;
        let ready = Self::header_field(&ring, "producer_ready_counter");
        self.publish_in_order(op, &ready, "sys", "the turn to publish on the proxy ring")
    }

    /// `proxy.doorbell`: the producer head the proxy thread polls (an atomic max on a shared
    /// ring, so a later producer's smaller end cannot move it back).
    pub(super) fn proxy_doorbell(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let (ring, _) = self.ring_of(self.operand(op, 0))?;
        let end = self.u64(self.operand(op, 1))?;
        let head = Self::header_field(&ring, "producer_head");
        let relaxed = attrs::get_string(self.ctx, op, "order").as_deref() == Some("relaxed");
        let statement = match (attrs::get_bool(self.ctx, op, "atomic_max"), relaxed) {
            (true, false) => format!(
                "[[maybe_unused]] uint64_t ab_old; asm volatile(\"atom.release.sys.global.max.u64 %0, [%1], %2;\" : \"=l\"(ab_old) : \"l\"({head}), \"l\"({end}) : \"memory\");"
            ),
            (true, true) => format!(
                "[[maybe_unused]] uint64_t ab_old; asm volatile(\"atom.relaxed.sys.global.max.u64 %0, [%1], %2;\" : \"=l\"(ab_old) : \"l\"({head}), \"l\"({end}) : \"memory\");"
            ),
            (false, false) => format!(
                "asm volatile(\"st.release.sys.global.u64 [%0], %1;\" :: \"l\"({head}), \"l\"({end}) : \"memory\");"
            ),
            (false, true) => format!("*reinterpret_cast<volatile uint64_t*>({head}) = {end};"),
        };
        self.leader_only(statement);
        Ok(())
    }

    /// `proxy.wait_completion`: the leader polls the completion counter past the slot (or past
    /// everything reserved so far), then the scope's barrier: the others may reuse the source.
    pub(super) fn proxy_wait_completion(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let endpoint = self.operand(op, 0);
        let (ring, _) = self.ring_of(endpoint)?;
        let target = if op.deref(self.ctx).get_num_operands() > 1 {
            let slot = self.u64(self.operand(op, 1))?;
            self.assign("target", "uint64_t", format!("{slot} + 1"))
        } else {
            let counter = Self::header_field(&ring, "producer_reservation_counter");
            self.assign(
                "target",
                "uint64_t",
                format!("ab_leader ? *reinterpret_cast<volatile uint64_t*>({counter}) : 0"),
            )
        };
        let completion = Self::header_field(&ring, "completion_counter");
        let handle = self.u64(endpoint)?;
        let peer = self.peer_of(&handle);
        self.bounded_wait(
            &completion,
            "ld.acquire.sys.global.u64",
            &format!("ab_seen < {target}"),
            &target,
            &peer,
            aboleth_abi::wait_failure::WAIT_KIND_COMPLETION,
            "a completion on the proxy ring",
            true,
        );
        if let Some(barrier) = self.scope.barrier() {
            self.line(barrier.into());
        }
        Ok(())
    }
}
