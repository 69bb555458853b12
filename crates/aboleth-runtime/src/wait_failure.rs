//! The wait-failure log: where a GPU wait that gave up (every bounded wait) records
//! what it waited for, in host-pinned memory mapped for the GPU, so the host can say which rank
//! waited on which flag of which peer for which value, and what it saw.
//!
//! The layout is `aboleth_abi::wait_failure`'s (checked at compile time below); this module is
//! the host side: initialisation, the timeout, reading.
//! The byte offsets are fixed by the assertions below and by the reference wait kernel
//! (`aboleth_bounded_wait_u64` in `src/kernels/runtime_kernels.ptx`).
//!
//! Layout: a 64-byte header, then `capacity_records` 64-byte records.
//! - header: `failure_counter` u64 @0 (GPU waits `atomicAdd` 1 to claim a slot; counts every
//!   failure, also those past the capacity), `capacity_records` u32 @8, reserved u32 @12,
//!   `abort_requested` u64 @16 (nonzero makes every bounded wait give up at once: the first
//!   generated wait that gives up sets it, and the host may), 40 reserved bytes @24;
//! - record: `sequence` u64 @0 (slot + 1, stored last with release; 0 = not yet written),
//!   `flag_address` @8, `expected_value` @16, `observed_value` @24 (the last value loaded),
//!   `waited_nanoseconds` @32 (`%globaltimer` difference), `rank` u32 @40 (the waiting rank),
//!   `peer_rank` u32 @44 (the rank expected to write the flag, `u32::MAX` if unknown), `site_id`
//!   u32 @48 (the compiler's index of the wait in the kernel, for its source location),
//!   `comparison` u32 @52 (0: flag >= expected), `program_id` u32 @56 (block index x),
//!   `thread_id` u32 @60 (thread index x).
//!
//! The host reads with atomic 64-bit loads (the GPU writes concurrently); a record is taken once
//! its `sequence` equals its slot + 1 (acquire), so its other words are complete. This module
//! allocates nothing itself: `crate::world` gives it pinned memory.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of the header.
pub const WAIT_FAILURE_LOG_HEADER_BYTES: usize = 64;
/// Bytes of one record.
pub const WAIT_FAILURE_RECORD_BYTES: usize = 64;
/// Header word (8-byte index) of `failure_counter`.
const FAILURE_COUNTER_WORD: usize = 0;
/// Header word of `capacity_records` (low 32 bits).
const CAPACITY_WORD: usize = 1;
/// Header word of `abort_requested`.
const ABORT_REQUESTED_WORD: usize = 2;
/// Header word of `timeout_nanoseconds`.
const TIMEOUT_NANOSECONDS_WORD: usize = 3;

// The layout is aboleth-abi's; these word indices must match it.
const _: () = {
    use aboleth_abi::WaitFailureLogHeader as Header;
    assert!(FAILURE_COUNTER_WORD as u64 * 8 == Header::FAILURE_COUNTER_OFFSET_BYTES);
    assert!(CAPACITY_WORD as u64 * 8 == Header::CAPACITY_RECORDS_OFFSET_BYTES);
    assert!(ABORT_REQUESTED_WORD as u64 * 8 == Header::ABORT_REQUESTED_OFFSET_BYTES);
    assert!(TIMEOUT_NANOSECONDS_WORD as u64 * 8 == Header::TIMEOUT_NANOSECONDS_OFFSET_BYTES);
    assert!(WAIT_FAILURE_LOG_HEADER_BYTES == Header::SIZE_BYTES);
    assert!(WAIT_FAILURE_RECORD_BYTES == aboleth_abi::WaitFailureRecord::SIZE_BYTES);
};

/// The `comparison` of a wait: the flag must become at least the expected value.
pub const WAIT_COMPARISON_GREATER_OR_EQUAL: u32 =
    aboleth_abi::wait_failure::WAIT_KIND_FLAG_AT_LEAST;

/// One failed wait, as the GPU recorded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitFailureRecord {
    /// Slot + 1.
    pub sequence: u64,
    /// The flag's address, as the waiting GPU saw it.
    pub flag_address: u64,
    /// The value waited for.
    pub expected_value: u64,
    /// The last value loaded.
    pub observed_value: u64,
    /// How long the wait lasted.
    pub waited_nanoseconds: u64,
    /// The waiting rank.
    pub rank: u32,
    /// The rank expected to write the flag (`u32::MAX`: unknown).
    pub peer_rank: u32,
    /// The compiler's index of the wait site.
    pub site_id: u32,
    /// `WAIT_COMPARISON_*`.
    pub comparison: u32,
    /// Block index x.
    pub program_id: u32,
    /// Thread index x.
    pub thread_id: u32,
}

impl WaitFailureRecord {
    /// The record from its eight little-endian words.
    pub fn from_words(words: [u64; 8]) -> Self {
        let low = |word: u64| word as u32;
        let high = |word: u64| (word >> 32) as u32;
        Self {
            sequence: words[0],
            flag_address: words[1],
            expected_value: words[2],
            observed_value: words[3],
            waited_nanoseconds: words[4],
            rank: low(words[5]),
            peer_rank: high(words[5]),
            site_id: low(words[6]),
            comparison: high(words[6]),
            program_id: low(words[7]),
            thread_id: high(words[7]),
        }
    }

    /// The record as eight words (what a GPU writes; the tests play the GPU with it).
    pub fn to_words(&self) -> [u64; 8] {
        let pair = |low: u32, high: u32| u64::from(low) | (u64::from(high) << 32);
        [
            self.sequence,
            self.flag_address,
            self.expected_value,
            self.observed_value,
            self.waited_nanoseconds,
            pair(self.rank, self.peer_rank),
            pair(self.site_id, self.comparison),
            pair(self.program_id, self.thread_id),
        ]
    }

    /// One line for error messages.
    pub fn describe(&self) -> String {
        let peer = if self.peer_rank == u32::MAX {
            "an unknown peer".to_owned()
        } else {
            format!("rank {}", self.peer_rank)
        };
        use aboleth_abi::wait_failure::{
            WAIT_KIND_COMPLETION, WAIT_KIND_PACKET_SLOTS_MISSING, WAIT_KIND_PACKET_UNSENDABLE,
            WAIT_KIND_POST_LOCK, WAIT_KIND_PUBLICATION_TURN, WAIT_KIND_QUEUE_SPACE,
            WAIT_KIND_UNSUPPORTED_ENDPOINT,
        };
        let (address, expected, seen) =
            (self.flag_address, self.expected_value, self.observed_value);
        let what = match self.comparison {
            WAIT_COMPARISON_GREATER_OR_EQUAL => format!(
                "for the flag at {address:#x}, written by {peer}, to become >= {expected} but last saw {seen}"
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
                "gave up: the mlx5 endpoint handle at {address:#x} to {peer} has cq_collapsed = {expected} and flags = {seen:#x}, and generated code supports only a collapsed CQ (cq_collapsed = 1) with the GPU ringing the doorbell (no ENDPOINT_FLAG_HOST_RINGS_DOORBELL)"
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
        // Kinds past the waits are refusals recorded before any waiting: no duration.
        let (site, waited) =
            if self.comparison >= aboleth_abi::wait_failure::WAIT_KIND_PACKET_SLOTS_MISSING {
                ("site", String::new())
            } else {
                (
                    "wait site",
                    format!(" waited {:.3} ms", self.waited_nanoseconds as f64 / 1e6),
                )
            };
        format!(
            "rank {} (block {}, thread {}, {site} {}){waited} {what}",
            self.rank, self.program_id, self.thread_id, self.site_id,
        )
    }
}

/// Bytes of a log of `capacity_records` records.
pub fn wait_failure_log_bytes(capacity_records: u32) -> usize {
    WAIT_FAILURE_LOG_HEADER_BYTES + capacity_records as usize * WAIT_FAILURE_RECORD_BYTES
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
                let first =
                    (WAIT_FAILURE_LOG_HEADER_BYTES + slot as usize * WAIT_FAILURE_RECORD_BYTES) / 8;
                // Acquire: pairs with the GPU's release store of the sequence, which it makes
                // after the other words.
                let sequence = self.word(first).load(Ordering::Acquire);
                if sequence != slot + 1 {
                    return None;
                }
                let mut words = [0u64; 8];
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
        let first = (WAIT_FAILURE_LOG_HEADER_BYTES + slot as usize * WAIT_FAILURE_RECORD_BYTES) / 8;
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

    #[repr(C, align(64))]
    struct Line([AtomicU64; 8]);

    fn lines(capacity_records: u32) -> Vec<Line> {
        (0..wait_failure_log_bytes(capacity_records) / 64)
            .map(|_| Line(std::array::from_fn(|_| AtomicU64::new(u64::MAX))))
            .collect()
    }

    #[test]
    fn layout_matches_the_reference_kernel() {
        let record = WaitFailureRecord {
            sequence: 1,
            flag_address: 0x10,
            expected_value: 0x20,
            observed_value: 0x30,
            waited_nanoseconds: 0x40,
            rank: 5,
            peer_rank: 6,
            site_id: 7,
            comparison: 0,
            program_id: 9,
            thread_id: 10,
        };
        let words = record.to_words();
        let bytes: Vec<u8> = words.iter().flat_map(|word| word.to_le_bytes()).collect();
        // The offsets the PTX kernel stores at.
        assert_eq!(bytes[8], 0x10);
        assert_eq!(bytes[40], 5);
        assert_eq!(bytes[44], 6);
        assert_eq!(bytes[48], 7);
        assert_eq!(bytes[52], 0);
        assert_eq!(bytes[56], 9);
        assert_eq!(bytes[60], 10);
        assert_eq!(WaitFailureRecord::from_words(words), record);
        assert_eq!(wait_failure_log_bytes(64), 64 + 64 * 64);
    }

    #[test]
    fn each_wait_kind_says_what_was_waited_for() {
        use aboleth_abi::wait_failure::{
            WAIT_KIND_COMPLETION, WAIT_KIND_PACKET_SLOTS_MISSING, WAIT_KIND_POST_LOCK,
            WAIT_KIND_PUBLICATION_TURN, WAIT_KIND_QUEUE_SPACE,
        };
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
            record(WAIT_KIND_QUEUE_SPACE).describe(),
            format!(
                "{prefix}for free slots in its queue to rank 0: the consumer position at 0x1000 had to reach 96 but last saw 32 (no completion freed them)"
            )
        );
        assert_eq!(
            record(WAIT_KIND_COMPLETION).describe(),
            format!(
                "{prefix}for a completion on its queue to rank 0: the completion word at 0x1000 had to reach 96 but last saw 32"
            )
        );
        assert_eq!(
            record(WAIT_KIND_PUBLICATION_TURN).describe(),
            format!(
                "{prefix}for its turn to publish on its queue to rank 0: the publication counter at 0x1000 had to equal 96 but last saw 32 (an earlier producer never published)"
            )
        );
        assert_eq!(
            record(WAIT_KIND_POST_LOCK).describe(),
            format!("{prefix}for the post lock at 0x1000 of its queue to rank 0 (still held)")
        );
        assert_eq!(
            record(WAIT_KIND_PACKET_SLOTS_MISSING).describe(),
            format!(
                "{refusal}gave up: a packet signal or wait names the flag at 0x1000 on rank 0, whose region has no packet slots; declare the flag region with world.region(..., packet_slots=True) on every rank"
            )
        );
        assert_eq!(
            record(aboleth_abi::wait_failure::WAIT_KIND_UNSUPPORTED_ENDPOINT).describe(),
            format!(
                "{refusal}gave up: the mlx5 endpoint handle at 0x1000 to rank 0 has cq_collapsed = 96 and flags = 0x20, and generated code supports only a collapsed CQ (cq_collapsed = 1) with the GPU ringing the doorbell (no ENDPOINT_FLAG_HOST_RINGS_DOORBELL)"
            )
        );
        assert!(
            record(aboleth_abi::wait_failure::WAIT_KIND_PACKET_UNSENDABLE)
                .describe()
                .contains("(block 0, thread 0, site 2) gave up: a packet put to rank 0 names the flag at 0x1000")
        );
        assert!(record(99).describe().contains("unknown wait kind 99"));
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
            comparison: WAIT_COMPARISON_GREATER_OR_EQUAL,
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
            records[0].describe(),
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
