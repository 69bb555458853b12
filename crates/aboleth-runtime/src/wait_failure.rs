//! The wait-failure log: where a GPU wait that gave up (every bounded wait) records
//! what it waited for, in host-pinned memory mapped for the GPU, so the host can say which rank
//! waited on which flag of which peer for which value, and what it saw.
//!
//! The layout, the `WAIT_KIND_*` codes and the decoding of a record are
//! `aboleth_abi::wait_failure`'s, read here, never restated: [`WaitFailureRecord`] is
//! aboleth-abi's struct, and the header words below are derived from its offsets. This module is
//! the host side: initialisation, the timeout, reading, and the message that describes a
//! record ([`describe_wait_failure`]). The reference wait kernel (`aboleth_bounded_wait_u64` in
//! `src/kernels/runtime_kernels.ptx`) stores at the same offsets.
//!
//! The host reads with atomic 64-bit loads (the GPU writes concurrently); a record is taken once
//! its `sequence` equals its slot + 1 (acquire), so its other words are complete. This module
//! allocates nothing itself: `crate::world` gives it pinned memory.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use aboleth_abi::WaitFailureLogHeader;
pub use aboleth_abi::WaitFailureRecord;
use aboleth_abi::wait_failure::{
    WAIT_KIND_COMPLETION, WAIT_KIND_PACKET_SLOTS_MISSING, WAIT_KIND_PACKET_UNSENDABLE,
    WAIT_KIND_POST_LOCK, WAIT_KIND_PUBLICATION_TURN, WAIT_KIND_QUEUE_SPACE,
    WAIT_KIND_UNSUPPORTED_ENDPOINT, WAIT_KIND_UNSUPPORTED_IONIC_ENDPOINT, flag_wait_symbol,
    is_wait,
};

/// The 8-byte word index of a header field at `offset_bytes` (a `u32` field sits in the low
/// half of its word); refuses, at compile time, a field that does not start a word.
const fn header_word(offset_bytes: u64) -> usize {
    assert!(offset_bytes.is_multiple_of(8));
    (offset_bytes / 8) as usize
}
/// Header word of `failure_counter`.
const FAILURE_COUNTER_WORD: usize = header_word(WaitFailureLogHeader::FAILURE_COUNTER_OFFSET_BYTES);
/// Header word of `capacity_records` (low 32 bits).
const CAPACITY_WORD: usize = header_word(WaitFailureLogHeader::CAPACITY_RECORDS_OFFSET_BYTES);
/// Header word of `abort_requested`.
const ABORT_REQUESTED_WORD: usize = header_word(WaitFailureLogHeader::ABORT_REQUESTED_OFFSET_BYTES);
/// Header word of `timeout_nanoseconds`.
const TIMEOUT_NANOSECONDS_WORD: usize =
    header_word(WaitFailureLogHeader::TIMEOUT_NANOSECONDS_OFFSET_BYTES);
/// Words of the header; records follow it.
const HEADER_WORDS: usize = WaitFailureLogHeader::SIZE_BYTES / 8;

/// One line for error messages: which rank waited, where, how long, for what.
pub fn describe_wait_failure(record: &WaitFailureRecord) -> String {
    let peer = if record.peer_rank == u32::MAX {
        "an unknown peer".to_owned()
    } else {
        format!("rank {}", record.peer_rank)
    };
    let (address, expected, seen) = (
        record.flag_address,
        record.expected_value,
        record.observed_value,
    );
    let what = match record.comparison {
        kind if flag_wait_symbol(kind).is_some() => format!(
            "for the flag at {address:#x}, written by {peer}, to become {} {expected} but last saw {seen}",
            flag_wait_symbol(kind).unwrap_or(">=")
        ),
        WAIT_KIND_QUEUE_SPACE => format!(
            "for free slots in its queue to {peer}: the consumer position at {address:#x} had to reach {expected} but last saw {seen} (no completion freed them)"
        ),
        WAIT_KIND_COMPLETION => format!(
            "for a completion on its queue to {peer}: the completion word at {address:#x} had to reach {expected} but last saw {seen}"
        ),
        WAIT_KIND_PUBLICATION_TURN => format!(
            "for its turn to publish on its queue to {peer}: the publication counter at {address:#x} had to equal {expected} but last saw {seen} (an earlier producer never published)"
        ),
        WAIT_KIND_POST_LOCK => {
            format!("for the post lock at {address:#x} of its queue to {peer} (still held)")
        }
        WAIT_KIND_UNSUPPORTED_ENDPOINT => format!(
            "gave up: the mlx5 endpoint handle at {address:#x} to {peer} has cq_collapsed = {expected} and cqe_count = {seen}, and generated code supports a collapsed CQ (cq_collapsed = 1) or, in Triton kernels, a CQ ring (cq_collapsed = 0) of a power-of-two cqe_count (the tier-1 CUDA library: a collapsed CQ and a doorbell the GPU rings only)"
        ),
        WAIT_KIND_UNSUPPORTED_IONIC_ENDPOINT => format!(
            "gave up: the Ionic endpoint handle at {address:#x} to {peer} has firmware ABI version {expected}, {} send-queue entries and {} CQ entries, and generated code speaks versions 1 and 2 on send queues of 2 to 65536 entries whose CQ has at least as many, all powers of two",
            seen & u64::from(u32::MAX),
            seen >> 32
        ),
        WAIT_KIND_PACKET_UNSENDABLE => format!(
            "gave up: a packet put to {peer} names the flag at {address:#x} with value low bits {seen:#x} and destination offset {expected:#x}; packet signals need an aligned flag inside the flag region, a value whose low 32 bits are not 0, and a 4-byte-aligned source and destination offset below 4 GiB"
        ),
        WAIT_KIND_PACKET_SLOTS_MISSING => format!(
            "gave up: a packet signal or wait names the flag at {address:#x} on {peer}, whose region has no packet slots; declare the flag region with world.region(..., packet_slots=True) on every rank"
        ),
        other => format!(
            "on the word at {address:#x} (unknown wait kind {other}) for {expected} but last saw {seen}"
        ),
    };
    // Refusals are recorded before any waiting: no duration.
    let (site, waited) = if !is_wait(record.comparison) {
        ("site", String::new())
    } else {
        (
            "wait site",
            format!(" waited {:.3} ms", record.waited_nanoseconds as f64 / 1e6),
        )
    };
    format!(
        "rank {} (block {}, thread {}, {site} {}){waited} {what}",
        record.rank, record.program_id, record.thread_id, record.site_id,
    )
}

/// Bytes of a log of `capacity_records` records.
pub fn wait_failure_log_bytes(capacity_records: u32) -> usize {
    WaitFailureLogHeader::SIZE_BYTES + capacity_records as usize * WaitFailureRecord::SIZE_BYTES
}

/// The host's view of a log in memory it does not own (host-pinned, written by GPUs).
#[derive(Debug)]
pub struct WaitFailureLog {
    words: NonNull<AtomicU64>,
    capacity_records: u32,
}

// SAFETY: the log only hands out atomic accesses to memory its creator promised (in
// `initialize_at`) to keep valid and to access only atomically or from the GPU.
unsafe impl Send for WaitFailureLog {}
// SAFETY: as above; every access is atomic.
unsafe impl Sync for WaitFailureLog {}

impl WaitFailureLog {
    /// Writes an empty log of `capacity_records` records at `base` and returns its view.
    ///
    /// # Safety
    /// `base` must be 8-byte aligned, point to [`wait_failure_log_bytes`] bytes valid for reads
    /// and writes while the view lives, and be accessed by others (GPUs) only with aligned
    /// 64-bit-or-smaller accesses, never through Rust references to non-atomic data.
    pub unsafe fn initialize_at(base: *mut u8, capacity_records: u32) -> Self {
        assert!(
            (base as usize).is_multiple_of(8),
            "a wait-failure log must be 8-byte aligned"
        );
        let words = NonNull::new(base.cast::<AtomicU64>()).expect("a wait-failure log is not null");
        let log = Self {
            words,
            capacity_records,
        };
        for index in 0..wait_failure_log_bytes(capacity_records) / 8 {
            log.word(index).store(0, Ordering::Relaxed);
        }
        log.word(CAPACITY_WORD)
            .store(u64::from(capacity_records), Ordering::Release);
        log
    }

    fn word(&self, index: usize) -> &AtomicU64 {
        assert!(index < wait_failure_log_bytes(self.capacity_records) / 8);
        // SAFETY: in bounds (checked above) of memory valid while `self` lives, 8-byte aligned,
        // accessed only atomically (the contract of `initialize_at`).
        unsafe { &*self.words.as_ptr().add(index) }
    }

    /// Sets how long bounded waits may last (0: forever); read by GPU waits at each wait.
    pub fn set_timeout_nanoseconds(&self, timeout_nanoseconds: u64) {
        self.word(TIMEOUT_NANOSECONDS_WORD)
            .store(timeout_nanoseconds, Ordering::Release);
    }

    /// Records the log can hold.
    pub fn capacity_records(&self) -> u32 {
        self.capacity_records
    }

    /// Failures counted so far (can exceed the capacity: later ones were counted, not recorded).
    pub fn failure_count(&self) -> u64 {
        self.word(FAILURE_COUNTER_WORD).load(Ordering::Acquire)
    }

    /// The records fully written so far, in slot order.
    pub fn records(&self) -> Vec<WaitFailureRecord> {
        let claimed = self.failure_count().min(u64::from(self.capacity_records));
        (0..claimed)
            .filter_map(|slot| {
                let first = HEADER_WORDS + slot as usize * WaitFailureRecord::WORDS;
                // Acquire: pairs with the GPU's release store of the sequence, which it makes
                // after the other words.
                let sequence = self.word(first).load(Ordering::Acquire);
                if sequence != slot + 1 {
                    return None;
                }
                let mut words = [0u64; WaitFailureRecord::WORDS];
                words[0] = sequence;
                for (offset, word) in words.iter_mut().enumerate().skip(1) {
                    *word = self.word(first + offset).load(Ordering::Relaxed);
                }
                Some(WaitFailureRecord::from_words(words))
            })
            .collect()
    }

    /// Asks every bounded wait that reads this log to give up at once.
    pub fn request_abort(&self) {
        self.word(ABORT_REQUESTED_WORD).store(1, Ordering::Release);
    }

    /// Whether an abort was requested.
    pub fn abort_requested(&self) -> bool {
        self.word(ABORT_REQUESTED_WORD).load(Ordering::Acquire) != 0
    }

    /// Empties the log and clears `abort_requested` (between runs; no GPU may be waiting on
    /// it). The capacity and the timeout stay.
    pub fn clear(&self) {
        for index in 0..wait_failure_log_bytes(self.capacity_records) / 8 {
            if index != CAPACITY_WORD && index != TIMEOUT_NANOSECONDS_WORD {
                self.word(index).store(0, Ordering::Relaxed);
            }
        }
        std::sync::atomic::fence(Ordering::Release);
    }

    /// Plays a GPU that gave up: claims a slot and writes `record` (its sequence is set here),
    /// as the reference kernel does. For tests of everything that reads the log.
    pub fn record_as_device(&self, record: &WaitFailureRecord) {
        let slot = self
            .word(FAILURE_COUNTER_WORD)
            .fetch_add(1, Ordering::Relaxed);
        if slot >= u64::from(self.capacity_records) {
            return;
        }
        let first = HEADER_WORDS + slot as usize * WaitFailureRecord::WORDS;
        let words = WaitFailureRecord {
            sequence: slot + 1,
            ..*record
        }
        .to_words();
        for (offset, &word) in words.iter().enumerate().skip(1) {
            self.word(first + offset).store(word, Ordering::Relaxed);
        }
        self.word(first).store(words[0], Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aboleth_abi::wait_failure::WAIT_KIND_FLAG_AT_LEAST;

    #[repr(C, align(64))]
    struct Line([AtomicU64; 8]);

    fn lines(capacity_records: u32) -> Vec<Line> {
        (0..wait_failure_log_bytes(capacity_records) / 64)
            .map(|_| Line(std::array::from_fn(|_| AtomicU64::new(u64::MAX))))
            .collect()
    }

    /// The reference wait kernel's loads and stores, written as literal offsets in PTX, are at
    /// aboleth-abi's offsets: each line below is built from the struct and must be in the PTX.
    #[test]
    fn the_reference_wait_kernel_uses_the_abi_offsets() {
        use core::mem::offset_of;
        type Header = WaitFailureLogHeader;
        type Record = WaitFailureRecord;
        let ptx = crate::cuda::RUNTIME_KERNELS_PTX;
        let kernel = &ptx[ptx
            .find(".entry aboleth_bounded_wait_u64(")
            .expect("the reference wait kernel")..];
        // Fields at offset 0 are addressed without a displacement.
        assert_eq!(Header::FAILURE_COUNTER_OFFSET_BYTES, 0);
        assert_eq!(offset_of!(Record, sequence), 0);
        assert!(Record::SIZE_BYTES.is_power_of_two());
        let store = |width: &str, field_offset: usize, register: &str| {
            format!("\tst.relaxed.sys.{width} \t[%rd13+{field_offset}], {register};\n")
        };
        let expected = [
            format!(
                "\tld.relaxed.sys.u64 \t%rd9, [%rd4+{}];\n",
                Header::ABORT_REQUESTED_OFFSET_BYTES
            ),
            "\tatom.relaxed.sys.add.u64 \t%rd10, [%rd4], 1;\n".to_owned(),
            format!(
                "\tld.relaxed.sys.u32 \t%r4, [%rd4+{}];\n",
                Header::CAPACITY_RECORDS_OFFSET_BYTES
            ),
            format!(
                "\tshl.b64 \t%rd12, %rd10, {};\n",
                Record::SIZE_BYTES.trailing_zeros()
            ),
            format!("\tadd.u64 \t%rd13, %rd13, {};\n", Header::SIZE_BYTES),
            store("u64", offset_of!(Record, flag_address), "%rd1"),
            store("u64", offset_of!(Record, expected_value), "%rd2"),
            store("u64", offset_of!(Record, observed_value), "%rd6"),
            store("u64", offset_of!(Record, waited_nanoseconds), "%rd8"),
            store("u32", offset_of!(Record, rank), "%r1"),
            store("u32", offset_of!(Record, peer_rank), "%r2"),
            store("u32", offset_of!(Record, site_id), "%r3"),
            format!("\tmov.u32 \t%r5, {WAIT_KIND_FLAG_AT_LEAST};\n"),
            store("u32", offset_of!(Record, comparison), "%r5"),
            store("u32", offset_of!(Record, program_id), "%r6"),
            store("u32", offset_of!(Record, thread_id), "%r7"),
            "\tst.release.sys.u64 \t[%rd13], %rd14;\n".to_owned(),
        ];
        for line in expected {
            assert!(
                kernel.contains(&line),
                "runtime_kernels.ptx: aboleth_bounded_wait_u64 lacks {line:?}"
            );
        }
    }

    #[test]
    fn each_wait_kind_says_what_was_waited_for() {
        let record = |comparison| WaitFailureRecord {
            sequence: 1,
            flag_address: 0x1000,
            expected_value: 96,
            observed_value: 32,
            waited_nanoseconds: 200_000_000,
            rank: 1,
            peer_rank: 0,
            site_id: 2,
            comparison,
            program_id: 0,
            thread_id: 0,
        };
        let prefix = "rank 1 (block 0, thread 0, wait site 2) waited 200.000 ms ";
        let refusal = "rank 1 (block 0, thread 0, site 2) ";
        assert_eq!(
            describe_wait_failure(&record(WAIT_KIND_QUEUE_SPACE)),
            format!(
                "{prefix}for free slots in its queue to rank 0: the consumer position at 0x1000 had to reach 96 but last saw 32 (no completion freed them)"
            )
        );
        assert_eq!(
            describe_wait_failure(&record(WAIT_KIND_COMPLETION)),
            format!(
                "{prefix}for a completion on its queue to rank 0: the completion word at 0x1000 had to reach 96 but last saw 32"
            )
        );
        assert_eq!(
            describe_wait_failure(&record(WAIT_KIND_PUBLICATION_TURN)),
            format!(
                "{prefix}for its turn to publish on its queue to rank 0: the publication counter at 0x1000 had to equal 96 but last saw 32 (an earlier producer never published)"
            )
        );
        assert_eq!(
            describe_wait_failure(&record(WAIT_KIND_POST_LOCK)),
            format!("{prefix}for the post lock at 0x1000 of its queue to rank 0 (still held)")
        );
        assert_eq!(
            describe_wait_failure(&record(WAIT_KIND_PACKET_SLOTS_MISSING)),
            format!(
                "{refusal}gave up: a packet signal or wait names the flag at 0x1000 on rank 0, whose region has no packet slots; declare the flag region with world.region(..., packet_slots=True) on every rank"
            )
        );
        assert_eq!(
            describe_wait_failure(&record(WAIT_KIND_UNSUPPORTED_ENDPOINT)),
            format!(
                "{refusal}gave up: the mlx5 endpoint handle at 0x1000 to rank 0 has cq_collapsed = 96 and cqe_count = 32, and generated code supports a collapsed CQ (cq_collapsed = 1) or, in Triton kernels, a CQ ring (cq_collapsed = 0) of a power-of-two cqe_count (the tier-1 CUDA library: a collapsed CQ and a doorbell the GPU rings only)"
            )
        );
        assert_eq!(
            describe_wait_failure(&WaitFailureRecord {
                observed_value: 16 << 32 | 32,
                ..record(WAIT_KIND_UNSUPPORTED_IONIC_ENDPOINT)
            }),
            format!(
                "{refusal}gave up: the Ionic endpoint handle at 0x1000 to rank 0 has firmware ABI version 96, 32 send-queue entries and 16 CQ entries, and generated code speaks versions 1 and 2 on send queues of 2 to 65536 entries whose CQ has at least as many, all powers of two"
            )
        );
        assert!(
            describe_wait_failure(&record(WAIT_KIND_PACKET_UNSENDABLE))
                .contains("(block 0, thread 0, site 2) gave up: a packet put to rank 0 names the flag at 0x1000")
        );
        for (kind, symbol) in [
            (WAIT_KIND_FLAG_AT_LEAST, ">="),
            (aboleth_abi::wait_failure::WAIT_KIND_FLAG_EQUAL, "=="),
            (aboleth_abi::wait_failure::WAIT_KIND_FLAG_NOT_EQUAL, "!="),
            (aboleth_abi::wait_failure::WAIT_KIND_FLAG_GREATER, ">"),
            (aboleth_abi::wait_failure::WAIT_KIND_FLAG_AT_MOST, "<="),
            (aboleth_abi::wait_failure::WAIT_KIND_FLAG_LESS, "<"),
        ] {
            assert_eq!(
                describe_wait_failure(&record(kind)),
                format!(
                    "{prefix}for the flag at 0x1000, written by rank 0, to become {symbol} 96 but last saw 32"
                )
            );
        }
        assert!(describe_wait_failure(&record(99)).contains("unknown wait kind 99"));
    }

    #[test]
    fn records_are_read_once_published_and_counted_past_capacity() {
        let mut memory = lines(2);
        // SAFETY: `memory` covers the log, outlives it, and is accessed only atomically.
        let log = unsafe { WaitFailureLog::initialize_at(memory.as_mut_ptr().cast(), 2) };
        assert_eq!(log.failure_count(), 0);
        assert!(log.records().is_empty());
        let record = WaitFailureRecord {
            sequence: 0,
            flag_address: 0x7f00_0000_1008,
            expected_value: 3,
            observed_value: 2,
            waited_nanoseconds: 2_000_000_000,
            rank: 1,
            peer_rank: 0,
            site_id: 4,
            comparison: WAIT_KIND_FLAG_AT_LEAST,
            program_id: 0,
            thread_id: 0,
        };
        for _ in 0..3 {
            log.record_as_device(&record);
        }
        assert_eq!(log.failure_count(), 3);
        let records = log.records();
        assert_eq!(records.len(), 2);
        assert_eq!(records[1].sequence, 2);
        assert_eq!(
            describe_wait_failure(&records[0]),
            "rank 1 (block 0, thread 0, wait site 4) waited 2000.000 ms for the flag at 0x7f0000001008, written by rank 0, to become >= 3 but last saw 2"
        );
        // A claimed slot whose sequence is not yet written is not read. Clearing keeps the
        // timeout (a cleared bound would make every later wait unbounded).
        log.set_timeout_nanoseconds(200_000_000);
        log.clear();
        assert_eq!(
            log.word(TIMEOUT_NANOSECONDS_WORD).load(Ordering::Relaxed),
            200_000_000
        );
        log.word(FAILURE_COUNTER_WORD).store(1, Ordering::Relaxed);
        assert!(log.records().is_empty());
        assert_eq!(log.capacity_records(), 2);
        assert!(!log.abort_requested());
        log.request_abort();
        assert!(log.abort_requested());
    }
}
