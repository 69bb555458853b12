//! Waits and their bound: `gpu.wait_flag` (every thread polls the flag until it compares with
//! the value as the wait's comparison says; a receiving wait also
//! drains the mlx5 receive CQ, a packet wait unpacks), and the bookkeeping every bounded wait
//! shares: the site id, the bound (the wait-failure log's timeout, read once per launch where
//! the first top-level endpoint gives the log: [`WaitLog`]) and the start time before the loop
//! ([`WaitBound`]), the give-up test inside it, and the failure record it writes
//! (`aboleth_abi::WaitFailureRecord`, through the `wait_failure_record.ptx` template) before it
//! asks the rank's other waits to give up and exits. Queue waits (ring space, publication
//! turn, completions, the post lock) use the same bookkeeping through [`Overdue`]; their loops
//! are in `queue.rs` and the transports' files.

use aboleth_ir::{
    ab::attributes::Comparison,
    attrs,
    pliron::{context::Ptr, operation::Operation},
};

use super::ptx::fill_ptx;
use super::{BridgeError, Generator};

/// The `arith.cmpi` predicate that holds while a flag wait for `comparison` must keep polling
/// (the negation, on signed 64-bit values as the IR computes).
fn keep_waiting_predicate(comparison: Comparison) -> &'static str {
    match comparison {
        Comparison::Eq => "ne",
        Comparison::Ne => "eq",
        Comparison::Gt => "sle",
        Comparison::Le => "sgt",
        Comparison::Lt => "sge",
        Comparison::Ge => "slt",
    }
}

/// The wait-failure record's kind for a flag wait with `comparison`.
pub(crate) fn flag_wait_kind(comparison: Comparison) -> u32 {
    use aboleth_abi::wait_failure::*;
    match comparison {
        Comparison::Eq => WAIT_KIND_FLAG_EQUAL,
        Comparison::Ne => WAIT_KIND_FLAG_NOT_EQUAL,
        Comparison::Gt => WAIT_KIND_FLAG_GREATER,
        Comparison::Le => WAIT_KIND_FLAG_AT_MOST,
        Comparison::Lt => WAIT_KIND_FLAG_LESS,
        Comparison::Ge => WAIT_KIND_FLAG_AT_LEAST,
    }
}

impl Generator<'_> {
    pub(super) fn wait_flag(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let flag = self.use_as(self.operand(op, 0), "!tt.ptr<i64>")?;
        let expected = self.i64(self.operand(op, 1))?;
        let acquire = attrs::get_string(self.ctx, op, "order").as_deref() == Some("acquire");
        let comparison = attrs::comparison(self.ctx, op);
        let load = if acquire {
            "ld.acquire.sys.global.u64 $0, [$1];"
        } else {
            "ld.volatile.global.u64 $0, [$1];"
        };
        let bound = self.wait_bound(op);
        let flag_address = self.use_as(self.operand(op, 0), "i64")?;
        let unknown_peer = self.assign("ab_peer", "arith.constant -1 : i32".to_string());
        let packets = attrs::get_bool(self.ctx, op, "packets");
        let receives = if op.deref(self.ctx).get_num_operands() > 3 && !packets {
            Some(self.receive_side(self.operand(op, 2), self.operand(op, 3))?)
        } else {
            None
        };
        let packet_wait = if packets {
            Some(self.packet_wait(
                op,
                self.operand(op, 2),
                self.operand(op, 3),
                &flag_address,
                bound.as_ref(),
            )?)
        } else {
            None
        };
        // Every thread polls the same word: no election, no broadcast needed.
        self.spin_while(|this| {
            if let Some(receives) = &receives {
                this.drain_one_receive(receives);
            }
            if let Some(packet_wait) = &packet_wait {
                this.unpack_packets(packet_wait);
            }
            let seen = this.assign("ab_seen", format!("tt.elementwise_inline_asm \"{load}\" {{constraints = \"=l,l\", packed_element = 1 : i32, pure = false}} {flag} : !tt.ptr<i64> -> i64"));
            let waiting = this.assign(
                "ab_waiting",
                format!(
                    "arith.cmpi {}, {seen}, {expected} : i64",
                    keep_waiting_predicate(comparison)
                ),
            );
            if let Some(bound) = &bound {
                this.give_up_if_overdue(
                    bound,
                    &WaitReport {
                        waiting: waiting.clone(),
                        address: flag_address,
                        expected: expected.clone(),
                        seen,
                        peer: unknown_peer,
                        kind: flag_wait_kind(comparison),
                    },
                );
            }
            waiting
        });
        Ok(())
    }

    /// An `scf.while` loop whose condition `iteration` generates (its i1 result: keep waiting),
    /// with an empty `do` region: the shape of every wait.
    pub(super) fn spin_while(&mut self, iteration: impl FnOnce(&mut Self) -> String) {
        self.emit("scf.while : () -> () {".into());
        let waiting = iteration(self);
        self.emit(format!("scf.condition({waiting})"));
        self.emit("} do {".into());
        self.emit("scf.yield".into());
        self.emit("}".into());
    }

    /// Inside a queue wait's loop: [`Self::give_up_if_overdue`] with what `overdue` said to
    /// report, `waiting` (i1) and the word's value `seen`.
    pub(super) fn give_up_if_queue_overdue(
        &mut self,
        overdue: Overdue,
        waiting: &str,
        seen: String,
    ) {
        self.give_up_if_overdue(
            &overdue.bound,
            &WaitReport {
                waiting: waiting.to_string(),
                address: overdue.address,
                expected: overdue.expected,
                seen,
                peer: overdue.peer,
                kind: overdue.kind,
            },
        );
    }

    /// Before a wait's loop: its site (for the plan summary's source line), the bound (read
    /// from the wait-failure log once per launch, [`WaitLog`]) and the start time. `None` when
    /// no endpoint handle gave the log yet (the wait is then unbounded).
    pub(super) fn wait_bound(&mut self, op: Ptr<Operation>) -> Option<WaitBound> {
        let WaitLog { log, rank, timeout } = self.wait_log.clone()?;
        let site = self.wait_sites.len();
        let diagnostic = aboleth_ir::Diagnostic::at_op(self.ctx, op, "");
        self.wait_sites.push(diagnostic.line);
        let dummy = self.constant_i64(0);
        let start = self.globaltimer(&dummy);
        Some(WaitBound {
            log,
            rank,
            site,
            timeout,
            start,
        })
    }

    /// Inside a wait's loop: past the bound (ABOLETH_WAIT_TIMEOUT_MS, 0: forever), or once the
    /// log's `abort_requested` is set, a thread still waiting counts itself, records what it
    /// waited for in the wait-failure log (while records fit), sets `abort_requested` so every
    /// other wait of the rank gives up at once, and exits; the host raises it
    /// (`World.check_waits()`). Every waiting thread records, so none can vanish unreported; a
    /// thread that exits counts as arrived at later barriers (PTX `exit`).
    pub(super) fn give_up_if_overdue(&mut self, bound: &WaitBound, report: &WaitReport) {
        let now = self.globaltimer(&report.seen);
        let elapsed = self.binary_i64("arith.subi", &now, &bound.start);
        let zero = self.constant_i64(0);
        let bounded = self.assign(
            "ab_bounded",
            format!("arith.cmpi ne, {}, {zero} : i64", bound.timeout),
        );
        let over = self.assign(
            "ab_over",
            format!("arith.cmpi sgt, {elapsed}, {} : i64", bound.timeout),
        );
        let late = self.assign("ab_late", format!("arith.andi {over}, {bounded} : i1"));
        // `abort_requested` is host memory: read only once the wait is long.
        let patience = self.constant_i64(ABORT_POLL_AFTER_NANOSECONDS);
        let long = self.assign(
            "ab_long",
            format!("arith.cmpi sgt, {elapsed}, {patience} : i64"),
        );
        let abort_word = self.offset_address(
            &bound.log,
            aboleth_abi::WaitFailureLogHeader::ABORT_REQUESTED_OFFSET_BYTES,
        );
        let abort = self.fresh("ab_abort");
        self.emit(format!("{abort} = scf.if {long} -> (i64) {{"));
        let read = self.assign("ab_abort_read", format!("tt.elementwise_inline_asm \"ld.relaxed.sys.global.u64 $0, [$1];\" {{constraints = \"=l,l\", packed_element = 1 : i32, pure = false}} {abort_word} : i64 -> i64"));
        self.emit(format!("scf.yield {read} : i64"));
        self.emit("} else {".into());
        self.emit(format!("scf.yield {zero} : i64"));
        self.emit("}".into());
        let aborted = self.assign(
            "ab_aborted",
            format!("arith.cmpi ne, {abort}, {zero} : i64"),
        );
        let gives_up = self.assign("ab_gives_up", format!("arith.ori {late}, {aborted} : i1"));
        let expired = self.assign(
            "ab_expired",
            format!("arith.andi {gives_up}, {} : i1", report.waiting),
        );
        self.record_failure_if(bound, &expired, &elapsed, report);
    }

    /// In every thread for which `condition` (i1) holds: counts a failure, records `report` in
    /// the wait-failure log (while records fit), sets `abort_requested` and exits.
    pub(super) fn record_failure_if(
        &mut self,
        bound: &WaitBound,
        condition: &str,
        elapsed: &str,
        report: &WaitReport,
    ) {
        self.emit(format!("scf.if {condition} {{"));
        let site_value = self.constant_i64(bound.site as i64);
        let record = wait_failure_record_ptx();
        let rank32 = self.assign(
            "ab_rank",
            format!("arith.trunci {} : i64 to i32", bound.rank),
        );
        let site32 = self.assign("ab_site", format!("arith.trunci {site_value} : i64 to i32"));
        let kind32 = self.assign("ab_kind", format!("arith.constant {} : i32", report.kind));
        self.asm(
            &record,
            &[
                (&bound.log, "i64", 'l'),
                (&report.address, "i64", 'l'),
                (&report.expected, "i64", 'l'),
                (&report.seen, "i64", 'l'),
                (elapsed, "i64", 'l'),
                (&rank32, "i32", 'r'),
                (&site32, "i32", 'r'),
                (&report.peer, "i32", 'r'),
                (&kind32, "i32", 'r'),
            ],
        );
        self.emit("}".into());
    }

    /// `%globaltimer` (nanoseconds), read after `after` (a data dependency keeps it in place).
    pub(super) fn globaltimer(&mut self, after: &str) -> String {
        self.assign("ab_now", format!("tt.elementwise_inline_asm \"mov.u64 $0, %globaltimer;\" {{constraints = \"=l,l\", packed_element = 1 : i32, pure = false}} {after} : i64 -> i64"))
    }
}

/// The failure record of a bounded wait (`ptx/wait_failure_record.ptx` filled with the log's
/// layout): `$1` the log, `$2` the word, `$3` expected, `$4` seen, `$5` elapsed ns, `$6` rank,
/// `$7` site, `$8` peer, `$9` kind (`$0` a dummy result). Both encodings write it.
pub(crate) fn wait_failure_record_ptx() -> String {
    use aboleth_abi::{WaitFailureLogHeader as Header, WaitFailureRecord as Record};
    use core::mem::offset_of;
    const TEMPLATE: &str = include_str!("ptx/wait_failure_record.ptx");
    fill_ptx(
        TEMPLATE,
        &[
            (
                "FAILURE_COUNTER",
                offset_of!(Header, failure_counter) as u64,
            ),
            ("CAPACITY", offset_of!(Header, capacity_records) as u64),
            ("ABORT", offset_of!(Header, abort_requested) as u64),
            ("HEADER_BYTES", Header::SIZE_BYTES as u64),
            ("RECORD_BYTES", Record::SIZE_BYTES as u64),
            ("SEQUENCE", offset_of!(Record, sequence) as u64),
            ("FLAG_ADDRESS", offset_of!(Record, flag_address) as u64),
            ("EXPECTED", offset_of!(Record, expected_value) as u64),
            ("OBSERVED", offset_of!(Record, observed_value) as u64),
            ("WAITED", offset_of!(Record, waited_nanoseconds) as u64),
            ("RANK", offset_of!(Record, rank) as u64),
            ("PEER", offset_of!(Record, peer_rank) as u64),
            ("SITE", offset_of!(Record, site_id) as u64),
            ("KIND", offset_of!(Record, comparison) as u64),
            ("PROGRAM", offset_of!(Record, program_id) as u64),
            ("THREAD", offset_of!(Record, thread_id) as u64),
        ],
    )
}

/// What the first top-level `ab.endpoint` reads from its handle for every later wait
/// (`Generator::endpoint`): values defined in the kernel's body, so they dominate every wait.
#[derive(Clone)]
pub(super) struct WaitLog {
    /// The wait-failure log's address (i64).
    pub(super) log: String,
    /// This rank (i64).
    pub(super) rank: String,
    /// The log's `timeout_nanoseconds` (i64; 0: unbounded), read once per launch: the host
    /// sets it before launching (`ABOLETH_WAIT_TIMEOUT_MS`) and never while a kernel runs.
    pub(super) timeout: String,
}

/// A bounded wait's bookkeeping, computed before its loop ([`Generator::wait_bound`]).
pub(super) struct WaitBound {
    /// The wait-failure log's address (i64).
    pub(super) log: String,
    /// This rank (i64).
    pub(super) rank: String,
    /// The wait's site id.
    pub(super) site: usize,
    /// The bound in nanoseconds (i64; 0: unbounded).
    pub(super) timeout: String,
    /// `%globaltimer` when the wait began (i64).
    pub(super) start: String,
}

/// A queue wait's bound and what it reports ([`Generator::queue_overdue`]).
pub(super) struct Overdue {
    pub(super) bound: WaitBound,
    pub(super) address: String,
    pub(super) expected: String,
    pub(super) peer: String,
    pub(super) kind: u32,
}

/// What one iteration of a wait reports if it gives up ([`Generator::give_up_if_overdue`]).
pub(super) struct WaitReport {
    /// Whether this thread still waits (i1).
    pub(super) waiting: String,
    /// The word polled (i64).
    pub(super) address: String,
    /// What it had to reach (i64).
    pub(super) expected: String,
    /// What it held (i64).
    pub(super) seen: String,
    /// The rank expected to write it (i32; -1: unknown).
    pub(super) peer: String,
    /// `aboleth_abi::wait_failure::WAIT_KIND_*`.
    pub(super) kind: u32,
}

/// How long a bounded wait polls its flag before it also reads the wait-failure log's
/// `abort_requested` word (host memory, so not on every poll).
const ABORT_POLL_AFTER_NANOSECONDS: i64 = 100_000;
