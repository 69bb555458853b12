//! What proxy rings and mlx5 and Ionic send queues share: the reservation of slots (a plain
//! read-modify-write for one owner, `atom.add` when shared, then a wait for space past the
//! consumer), leader-only polls with their bound, and the in-order publication of a batch on a
//! shared queue (wait for the producers before it, then advance the ready counter), or its
//! one-owner form. The transports differ only in where the counters live and the memory scope,
//! which they pass in, and the post lock of a shared queue. It does not write commands or ring
//! doorbells (`proxy.rs`, `mlx5.rs`, `ionic.rs`).

use aboleth_ir::{
    attrs,
    pliron::{context::Ptr, operation::Operation, value::Value},
};

use super::waits::Overdue;
use super::{BridgeError, Generator};

/// How a reservation that waits for ring space frees it: by reading an mlx5 CQ, or by polling
/// an Ionic CQ.
#[derive(Clone, Debug)]
pub(super) enum Reclaim {
    Mlx5(super::mlx5::CqPoll),
    Ionic(super::ionic::IonicCq),
}

impl Generator<'_> {
    /// A leader-only load of `[address]` with `load` (`ld.acquire.sys...`); the other threads
    /// get `otherwise`, chosen so that their wait condition is already met.
    pub(super) fn leader_load(&mut self, load: &str, address: &str, otherwise: &str) -> String {
        self.assign("ab_seen", format!("tt.elementwise_inline_asm \"{{ .reg .pred %ab_leader; .reg .u32 %ab_tid; mov.u32 %ab_tid, %tid.x; setp.eq.u32 %ab_leader, %ab_tid, 0; @%ab_leader {load} $0, [$1]; @!%ab_leader mov.u64 $0, $2; }}\" {{constraints = \"=l,l,l\", packed_element = 1 : i32, pure = false}} {address}, {otherwise} : i64, i64 -> i64"))
    }

    /// `scf.while` until `condition(seen)` is false, where `seen` is a leader-only load.
    pub(super) fn leader_wait(
        &mut self,
        load: &str,
        address: &str,
        otherwise: &str,
        keep_waiting: impl Fn(&mut Self, &str) -> String,
        overdue: Option<Overdue>,
    ) {
        self.leader_wait_after(|_| {}, load, address, otherwise, keep_waiting, overdue);
    }

    /// What a queue wait of `op` on `endpoint` reports if it gives up: the word at `address`
    /// had to reach `expected` (see the `WAIT_KIND_*` codes). `None` when the wait is unbounded
    /// (no wait-failure log known yet).
    pub(super) fn queue_overdue(
        &mut self,
        op: Ptr<Operation>,
        endpoint: Value,
        address: &str,
        expected: &str,
        kind: u32,
    ) -> Result<Option<Overdue>, BridgeError> {
        let Some(bound) = self.wait_bound(op) else {
            return Ok(None);
        };
        let handle = self.i64(endpoint)?;
        let peer = self.load_field(
            &handle,
            core::mem::offset_of!(aboleth_abi::EndpointHandle, peer_rank) as u64,
            32,
        );
        let peer = self.assign("ab_peer", format!("arith.trunci {peer} : i64 to i32"));
        Ok(Some(Overdue {
            bound,
            address: address.to_string(),
            expected: expected.to_string(),
            peer,
            kind,
        }))
    }

    /// [`Self::leader_wait`], running `prelude` at the top of every iteration, before the load.
    pub(super) fn leader_wait_after(
        &mut self,
        prelude: impl Fn(&mut Self),
        load: &str,
        address: &str,
        otherwise: &str,
        keep_waiting: impl Fn(&mut Self, &str) -> String,
        overdue: Option<Overdue>,
    ) {
        self.spin_while(|this| {
            prelude(this);
            let seen = this.leader_load(load, address, otherwise);
            let waiting = keep_waiting(this, &seen);
            if let Some(overdue) = overdue {
                // Only the leader waits here (the others' `otherwise` already satisfies them).
                this.give_up_if_queue_overdue(overdue, &waiting, seen);
            }
            waiting
        });
    }

    /// `*.publish` of a batch (`base`, `count`: operands 1 and 2) on the queue of operand 0,
    /// whose ready counter is at `counters + ready_offset_bytes`: in ticket order on a shared
    /// queue (thread 0 waits with an acquire at `scope` until the counter equals `base`, then
    /// release-stores `base + count`), or the one-owner form. Proxy rings are host memory
    /// (`sys`); an mlx5 queue's management block is this GPU's (`gpu`).
    pub(super) fn publish_in_order(
        &mut self,
        op: Ptr<Operation>,
        counters: &str,
        ready_offset_bytes: u64,
        scope: &str,
    ) -> Result<(), BridgeError> {
        let base = self.i64(self.operand(op, 1))?;
        let count = self.i64(self.operand(op, 2))?;
        let ready = self.offset_address(counters, ready_offset_bytes);
        if attrs::get_bool(self.ctx, op, "owner_only") {
            self.owner_only_publication(&ready, &base, &count);
            return Ok(());
        }
        // In ticket order: wait for the producers before us, then advance past our batch.
        let overdue = self.queue_overdue(
            op,
            self.operand(op, 0),
            &ready,
            &base,
            aboleth_abi::wait_failure::WAIT_KIND_PUBLICATION_TURN,
        )?;
        self.leader_wait(
            &format!("ld.acquire.{scope}.global.u64"),
            &ready,
            &base,
            |this, seen| this.assign("ab_waiting", format!("arith.cmpi ne, {seen}, {base} : i64")),
            overdue,
        );
        let end = self.binary_i64("arith.addi", &base, &count);
        self.asm(
            &Self::leader(&format!("st.release.{scope}.global.u64 [$1], $2;")),
            &[(&ready, "i64", 'l'), (&end, "i64", 'l')],
        );
        Ok(())
    }

    /// Thread 0 takes `slots` (operand 1) on a queue whose reservation counter is at `counter`
    /// (`atom.add` at `scope` when shared, a plain read-modify-write for one owner), then waits
    /// until `capacity` covers them past the consumer position at `consumer` (read with
    /// `consumer_load`). Posting follows the program's other threads' source stores: a barrier
    /// comes first, so thread 0's later release store covers them too.
    #[allow(
        clippy::too_many_arguments,
        reason = "a queue's counter, consumer, capacity and how each is read"
    )]
    pub(super) fn reserve_slots(
        &mut self,
        op: Ptr<Operation>,
        counter: &str,
        consumer: &str,
        capacity: &str,
        scope: &str,
        consumer_load: &str,
        reclaim: Option<&Reclaim>,
    ) -> Result<(), BridgeError> {
        self.emit("gpu.barrier".into());
        let count = self.i64(self.operand(op, 1))?;
        let base = self.fresh("ab_base");
        let reserve = if attrs::get_bool(self.ctx, op, "atomic") {
            format!("@%ab_leader atom.relaxed.{scope}.global.add.u64 $0, [$1], $2;")
        } else {
            "@%ab_leader ld.volatile.global.u64 $0, [$1]; @%ab_leader add.u64 %ab_next, $0, $2; @%ab_leader st.volatile.global.u64 [$1], %ab_next;".to_string()
        };
        self.emit(format!(
            "{base} = tt.elementwise_inline_asm \"{{ .reg .pred %ab_leader; .reg .u32 %ab_tid; .reg .u64 %ab_next; mov.u32 %ab_tid, %tid.x; setp.eq.u32 %ab_leader, %ab_tid, 0; mov.u64 $0, 0; {reserve} }}\" {{constraints = \"=l,l,l\", packed_element = 1 : i32, pure = false}} {counter}, {count} : i64, i64 -> i64"
        ));
        let end = self.binary_i64("arith.addi", &base, &count);
        let consumer_owned = consumer.to_string();
        let reclaim_owned = reclaim.cloned();
        // Past the bound: the consumer position had to reach end - capacity.
        let needed = self.binary_i64("arith.subi", &end, capacity);
        let overdue = self.queue_overdue(
            op,
            self.operand(op, 0),
            consumer,
            &needed,
            aboleth_abi::wait_failure::WAIT_KIND_QUEUE_SPACE,
        )?;
        self.leader_wait_after(
            |this| match &reclaim_owned {
                Some(Reclaim::Mlx5(cq_poll)) => this.reclaim_from_cq(cq_poll, &consumer_owned),
                Some(Reclaim::Ionic(cq)) => this.advance_ionic_cq(cq),
                None => {}
            },
            consumer_load,
            consumer,
            &end,
            |this, seen| {
                let used = this.binary_i64("arith.subi", &end, seen);
                this.assign(
                    "ab_full",
                    format!("arith.cmpi sgt, {used}, {capacity} : i64"),
                )
            },
            overdue,
        );
        let base = if attrs::get_bool(self.ctx, op, "broadcast") {
            // Every thread writes commands of this batch: all need the base. The queue has
            // one owner (this program's leader), so after a barrier the counter reads back as
            // base + count in every thread.
            self.emit("gpu.barrier".into());
            let head = self.assign("ab_head", format!("tt.elementwise_inline_asm \"ld.volatile.global.u64 $0, [$1];\" {{constraints = \"=l,l\", packed_element = 1 : i32, pure = false}} {counter} : i64 -> i64"));
            if reclaim.is_some() {
                // mlx5 and Ionic: a leader that gave up waiting for space exited before the
                // barrier; the others must not write into slots the NIC has not freed (its
                // consumer position is device memory: one cheap read).
                let seen = self.assign("ab_consumer", format!("tt.elementwise_inline_asm \"ld.volatile.global.u64 $0, [$1];\" {{constraints = \"=l,l\", packed_element = 1 : i32, pure = false}} {consumer} : i64 -> i64"));
                let used = self.binary_i64("arith.subi", &head, &seen);
                let full = self.assign(
                    "ab_full",
                    format!("arith.cmpi sgt, {used}, {capacity} : i64"),
                );
                self.emit(format!("scf.if {full} {{"));
                let dummy = self.constant_i64(0);
                self.asm("exit; mov.u32 $0, 0;", &[(&dummy, "i64", 'l')]);
                self.emit("}".into());
            }
            self.binary_i64("arith.subi", &head, &count)
        } else {
            base
        };
        self.define_scalar(op, base, "i64".into());
        Ok(())
    }

    /// Takes a queue's post (or doorbell) lock at `lock` for `op`: thread 0 swaps 0 -> 1 until it
    /// gets it (bounded, `WAIT_KIND_POST_LOCK`); the others see "free" at once.
    pub(super) fn take_post_lock(
        &mut self,
        op: Ptr<Operation>,
        lock: &str,
    ) -> Result<(), BridgeError> {
        let zero_expected = self.constant_i64(0);
        let overdue = self.queue_overdue(
            op,
            self.operand(op, 0),
            lock,
            &zero_expected,
            aboleth_abi::wait_failure::WAIT_KIND_POST_LOCK,
        )?;
        self.spin_while(|this| {
            let old = this.assign("ab_lock", format!("tt.elementwise_inline_asm \"{{ .reg .pred %ab_leader; .reg .u32 %ab_tid; mov.u32 %ab_tid, %tid.x; setp.eq.u32 %ab_leader, %ab_tid, 0; mov.u64 $0, 0; @%ab_leader atom.acquire.gpu.global.cas.b64 $0, [$1], 0, 1; }}\" {{constraints = \"=l,l\", packed_element = 1 : i32, pure = false}} {lock} : i64 -> i64"));
            let zero = this.constant_i64(0);
            let held = this.assign("ab_held", format!("arith.cmpi ne, {old}, {zero} : i64"));
            if let Some(overdue) = overdue {
                this.give_up_if_queue_overdue(overdue, &held, old);
            }
            held
        });
        Ok(())
    }

    /// Releases the lock at `lock` (a release store of 0 by thread 0).
    pub(super) fn release_post_lock(&mut self, lock: &str) {
        let zero = self.constant_i64(0);
        self.asm(
            &Self::leader("st.release.gpu.global.u64 [$1], $2;"),
            &[(lock, "i64", 'l'), (&zero, "i64", 'l')],
        );
    }

    /// A one-owner queue's publication: nobody else posts, so there is nothing to wait for;
    /// the counter is only kept in step (a plain store) for a later kernel that posts to the
    /// queue with the shared protocol, which waits until it equals its base.
    pub(super) fn owner_only_publication(&mut self, ready: &str, base: &str, count: &str) {
        let end = self.binary_i64("arith.addi", base, count);
        self.asm(
            &Self::leader("st.volatile.global.u64 [$1], $2;"),
            &[(ready, "i64", 'l'), (&end, "i64", 'l')],
        );
    }
}
