//! The wait-failure log: where a bounded GPU wait that gives up records what it waited for, in
//! host-pinned memory mapped for the GPU (one log per rank; every endpoint handle of the rank
//! carries its address). The host reads it after the kernel and raises an error naming the rank,
//! the flag, the value waited for and the value seen.
//!
//! Layout: a 64-byte [`WaitFailureLogHeader`], then `capacity_records` 64-byte
//! [`WaitFailureRecord`]s. A waiting thread that gives up claims a slot with an atomic add on
//! `failure_counter`, fills the record and stores `sequence = slot + 1` last with release; the
//! host takes a record once its sequence is right. `timeout_nanoseconds` (0: wait forever) is
//! written by the host before any launch. This module only defines the bytes, and the
//! 64-bit words a reader that loads them atomically (the host, while GPUs write) decodes.

use crate::wire::wire_layout;

/// The log's header (64 B).
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitFailureLogHeader {
    /// Failures so far (also those past the capacity); GPU waits `atom.add` it to get a slot.
    pub failure_counter: u64,
    /// Records after the header.
    pub capacity_records: u32,
    /// Zero.
    pub reserved_0: u32,
    /// Nonzero: every bounded wait gives up at once (set by the host after a first failure).
    pub abort_requested: u64,
    /// How long a wait may last, from `ABOLETH_WAIT_TIMEOUT_MS`; 0: unbounded.
    pub timeout_nanoseconds: u64,
    /// Zero.
    pub reserved_1: [u8; 32],
}
wire_layout!(WaitFailureLogHeader, 64, {
    failure_counter: u64 = 0, capacity_records: u32 = 8, reserved_0: u32 = 12,
    abort_requested: u64 = 16, timeout_nanoseconds: u64 = 24, reserved_1: [u8; 32] = 32,
});

impl WaitFailureLogHeader {
    /// Offset of `failure_counter`.
    pub const FAILURE_COUNTER_OFFSET_BYTES: u64 =
        core::mem::offset_of!(Self, failure_counter) as u64;
    /// Offset of `capacity_records`.
    pub const CAPACITY_RECORDS_OFFSET_BYTES: u64 =
        core::mem::offset_of!(Self, capacity_records) as u64;
    /// Offset of `abort_requested`.
    pub const ABORT_REQUESTED_OFFSET_BYTES: u64 =
        core::mem::offset_of!(Self, abort_requested) as u64;
    /// Offset of `timeout_nanoseconds`.
    pub const TIMEOUT_NANOSECONDS_OFFSET_BYTES: u64 =
        core::mem::offset_of!(Self, timeout_nanoseconds) as u64;
}

/// `WaitFailureRecord::comparison`: a flag (`flag_address`) had to become >= `expected_value`
/// (the other comparisons of a flag wait are kinds 8 to 12).
pub const WAIT_KIND_FLAG_AT_LEAST: u32 = 0;
/// Free slots in the queue to `peer_rank`: its consumer position (at `flag_address`) had to
/// reach `expected_value`; only completions advance it.
pub const WAIT_KIND_QUEUE_SPACE: u32 = 1;
/// A completion on the queue to `peer_rank`: the completion word or counter at `flag_address`
/// had to reach `expected_value`.
pub const WAIT_KIND_COMPLETION: u32 = 2;
/// The turn to publish on a shared queue to `peer_rank`: its publication counter (at
/// `flag_address`) had to equal `expected_value`, the first slot of this program's batch.
pub const WAIT_KIND_PUBLICATION_TURN: u32 = 3;
/// The post lock at `flag_address` of a shared queue to `peer_rank` had to be free.
pub const WAIT_KIND_POST_LOCK: u32 = 4;
/// Not a wait: a packet signal or packet wait found that the flag region of `flag_address`
/// (a flag, or the start of its region) on `peer_rank` has no packet slots
/// (`REGION_FLAG_PACKET_SLOTS` clear), so it stored and read nothing and gave up at once.
pub const WAIT_KIND_PACKET_SLOTS_MISSING: u32 = 5;
/// Not a wait: an mlx5 endpoint handle (at `flag_address`, to `peer_rank`) asks for what the
/// generated code does not do: `expected_value` is its `cq_collapsed` and `observed_value` its
/// `cqe_count`. Triton kernels poll a collapsed CQ (1) or a CQ ring (0) of a power-of-two
/// `cqe_count`; the tier-1 CUDA library a collapsed CQ only, with the GPU ringing the doorbell
/// (no `ENDPOINT_FLAG_HOST_RINGS_DOORBELL`). The program gave up before posting anything.
pub const WAIT_KIND_UNSUPPORTED_ENDPOINT: u32 = 6;
/// Not a wait: a packet put to `peer_rank` it cannot send, so it sent nothing and gave up at
/// once: its flag (`flag_address`) is not an aligned word of the flag region, its value's low 32
/// bits (`observed_value`) are 0 (a zeroed slot would look landed), or its destination offset
/// (`expected_value`) or source is not 4-byte aligned or the offset is past 4 GiB.
pub const WAIT_KIND_PACKET_UNSENDABLE: u32 = 7;

/// `WaitFailureRecord::comparison`: a flag had to become == `expected_value`.
pub const WAIT_KIND_FLAG_EQUAL: u32 = 8;
/// A flag had to become != `expected_value`.
pub const WAIT_KIND_FLAG_NOT_EQUAL: u32 = 9;
/// A flag had to become > `expected_value`.
pub const WAIT_KIND_FLAG_GREATER: u32 = 10;
/// A flag had to become <= `expected_value`.
pub const WAIT_KIND_FLAG_AT_MOST: u32 = 11;
/// A flag had to become < `expected_value`.
pub const WAIT_KIND_FLAG_LESS: u32 = 12;
/// Not a wait: an Ionic endpoint handle (at `flag_address`, to `peer_rank`) the generated code
/// does not speak: `expected_value` is its queue's firmware ABI version (1 and 2 are spoken) and
/// `observed_value` its CQ's entries above bit 32 and its send queue's below (the send queue: a
/// power of two from 2 to 2^16; the CQ: a power of two at least as large). The program gave up
/// before posting anything.
pub const WAIT_KIND_UNSUPPORTED_IONIC_ENDPOINT: u32 = 13;

/// The comparison a flag wait of kind `kind` made (`">="` for [`WAIT_KIND_FLAG_AT_LEAST`]),
/// or `None` when `kind` is not a flag wait.
pub fn flag_wait_symbol(kind: u32) -> Option<&'static str> {
    Some(match kind {
        WAIT_KIND_FLAG_AT_LEAST => ">=",
        WAIT_KIND_FLAG_EQUAL => "==",
        WAIT_KIND_FLAG_NOT_EQUAL => "!=",
        WAIT_KIND_FLAG_GREATER => ">",
        WAIT_KIND_FLAG_AT_MOST => "<=",
        WAIT_KIND_FLAG_LESS => "<",
        _ => return None,
    })
}

/// Whether a record of kind `kind` is a wait that gave up (rather than an operation that
/// refused at once: [`WAIT_KIND_PACKET_SLOTS_MISSING`], [`WAIT_KIND_UNSUPPORTED_ENDPOINT`],
/// [`WAIT_KIND_PACKET_UNSENDABLE`], [`WAIT_KIND_UNSUPPORTED_IONIC_ENDPOINT`]).
pub fn is_wait(kind: u32) -> bool {
    !matches!(
        kind,
        WAIT_KIND_PACKET_SLOTS_MISSING
            | WAIT_KIND_UNSUPPORTED_ENDPOINT
            | WAIT_KIND_PACKET_UNSENDABLE
            | WAIT_KIND_UNSUPPORTED_IONIC_ENDPOINT
    )
}

/// One failed wait (64 B).
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitFailureRecord {
    /// Slot + 1, stored last.
    pub sequence: u64,
    /// The flag's address as the waiting GPU saw it.
    pub flag_address: u64,
    /// The value waited for (the flag compared with it as the kind says).
    pub expected_value: u64,
    /// The last value loaded.
    pub observed_value: u64,
    /// How long the wait lasted (`%globaltimer`).
    pub waited_nanoseconds: u64,
    /// The waiting rank.
    pub rank: u32,
    /// The rank expected to write the flag; `u32::MAX` when the compiler does not know it.
    pub peer_rank: u32,
    /// The compiler's index of the wait in the kernel (its source line is in the plan summary).
    pub site_id: u32,
    /// What was waited for: a `WAIT_KIND_*` code.
    pub comparison: u32,
    /// The program (block index x).
    pub program_id: u32,
    /// The thread (thread index x).
    pub thread_id: u32,
}
wire_layout!(WaitFailureRecord, 64, {
    sequence: u64 = 0, flag_address: u64 = 8, expected_value: u64 = 16, observed_value: u64 = 24,
    waited_nanoseconds: u64 = 32, rank: u32 = 40, peer_rank: u32 = 44, site_id: u32 = 48,
    comparison: u32 = 52, program_id: u32 = 56, thread_id: u32 = 60,
});

impl WaitFailureRecord {
    /// 64-bit words in a record: the host reads a record word by word with atomic loads, since
    /// a GPU may be writing it.
    pub const WORDS: usize = Self::SIZE_BYTES / 8;

    /// The record from its little-endian 64-bit words (word `i` holds bytes `8 i .. 8 i + 8`).
    pub fn from_words(words: [u64; Self::WORDS]) -> Self {
        let mut bytes = [0u8; Self::SIZE_BYTES];
        for (chunk, word) in bytes.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        Self::from_bytes(&bytes)
    }

    /// The record as its little-endian 64-bit words, as a GPU stores them.
    pub fn to_words(&self) -> [u64; Self::WORDS] {
        let bytes = self.to_bytes();
        core::array::from_fn(|index| {
            let start = index * 8;
            u64::from_le_bytes(bytes[start..start + 8].try_into().expect("8 bytes"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_through_its_words_at_the_fields_offsets() {
        let record = WaitFailureRecord {
            sequence: 1,
            flag_address: 0x10,
            expected_value: 0x20,
            observed_value: 0x30,
            waited_nanoseconds: 0x40,
            rank: 5,
            peer_rank: 6,
            site_id: 7,
            comparison: 8,
            program_id: 9,
            thread_id: 10,
        };
        let words = record.to_words();
        // A u32 pair shares a word, the lower offset in the low half.
        assert_eq!(words[1], 0x10);
        assert_eq!(words[5], 5 | (6 << 32));
        assert_eq!(words[6], 7 | (8 << 32));
        assert_eq!(words[7], 9 | (10 << 32));
        assert_eq!(WaitFailureRecord::from_words(words), record);
    }
}
