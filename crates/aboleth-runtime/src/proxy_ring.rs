//! The host side of the proxy command ring of `aboleth_abi::proxy`: the consumer the proxy
//! thread runs ([`RingConsumer`]), a host producer that speaks the GPU producers' protocol
//! ([`RingProducer`]), and the word-level memory abstraction both run over ([`RingMemory`]):
//! real host memory ([`HostRing`], over an owned allocation or a pinned buffer given by raw
//! pointer), or a model checker's atomics in the tests.
//!
//! The protocol, word by word (every access is a 64-bit atomic on the ring's memory):
//! - a producer takes ticket `t = fetch_add(producer_reservation_counter, 1)`;
//! - it waits while the ring is full, i.e. while `t - consumer_head >= capacity_entries`
//!   (acquire load, pairing with the consumer's release store, so the consumer's reads of the
//!   slot's previous occupant happen before the producer overwrites it);
//! - it writes the entry's payload words 1..7 of slot `t mod capacity`, then word 0, the
//!   sequence, `= t + 1`, last and with release: the sequence is what publishes the entry;
//! - the consumer, expecting ticket `t`, reads the producer head (the reservation counter, as in
//!   the simulator's `ProxyEngine`: the ABI has no separate published head) and does nothing
//!   unless it is above `t`; it then loads the slot's sequence with acquire and waits unless it
//!   is `t + 1`; it reads the payload, decodes it, hands it to a [`CommandExecutor`], and then
//!   stores, with release, `consumer_head = t + 1` and, when the command asked for one,
//!   `completion_counter = t + 1` (cumulative: commands run in ticket order, each to
//!   completion).
//!
//! Producers publish in any order; the consumer executes in ticket order, so a later ticket's
//! entry waits in its slot until every earlier one is done. While waiting for ticket `t`, the
//! slot can only hold the previous lap's sequence (`t + 1 - capacity`, or 0 on the first lap) or
//! `t + 1`; anything else means some writer broke the protocol, and the consumer stops the ring
//! with [`ProxyRingError::CorruptSequence`] rather than guess.
//!
//! What it does not do: execute anything itself (the executor does: copy engine, ibverbs, or a
//! test double), track asynchronous completions (an executor returns once the command's effects
//! are complete), poll several rings (the proxy thread owns one consumer per ring), or let a
//! host producer give up a ticket it reserved (the consumer would wait for it forever, exactly
//! as with a GPU producer that dies).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use aboleth_abi::proxy::{
    ProxyCommand, ProxyDecodeError, ProxyOperation, slot_index, validate_capacity_entries,
};
use aboleth_abi::{ProxyRingEntry, ProxyRingHeader};

/// 64-bit words in one ring entry; word 0 is the sequence.
pub const ENTRY_WORDS: usize = ProxyRingEntry::SIZE_BYTES / 8;

/// A 64-bit word of a ring: a header counter or one word of one entry slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RingWord {
    /// `producer_reservation_counter`: the next ticket, and the producer head.
    ProducerReservationCounter,
    /// `consumer_head`: the next ticket the consumer will read.
    ConsumerHead,
    /// `completion_counter`: tickets below it are complete.
    CompletionCounter,
    /// The header word holding `capacity_entries` (low 32 bits; the high 32 are reserved zero).
    CapacityEntries,
    /// Word `word_index` (0 = sequence) of entry slot `slot`.
    EntryWord {
        /// Slot index, below the capacity.
        slot: usize,
        /// Word index, below [`ENTRY_WORDS`].
        word_index: usize,
    },
}

impl RingWord {
    /// Byte offset of the word from the start of the ring (the header).
    pub fn offset_bytes(self) -> usize {
        match self {
            Self::ProducerReservationCounter => {
                core::mem::offset_of!(ProxyRingHeader, producer_reservation_counter)
            }
            Self::ConsumerHead => core::mem::offset_of!(ProxyRingHeader, consumer_head),
            Self::CompletionCounter => core::mem::offset_of!(ProxyRingHeader, completion_counter),
            Self::CapacityEntries => core::mem::offset_of!(ProxyRingHeader, capacity_entries),
            Self::EntryWord { slot, word_index } => {
                debug_assert!(word_index < ENTRY_WORDS);
                ProxyRingHeader::ENTRIES_OFFSET_BYTES
                    + slot * ProxyRingEntry::SIZE_BYTES
                    + word_index * 8
            }
        }
    }

    /// Index of the word counting 8-byte words from the start of the ring.
    pub fn word_offset(self) -> usize {
        self.offset_bytes() / 8
    }
}

/// Number of 64-bit words of a ring of `capacity_entries` slots (header included).
pub fn ring_word_count(capacity_entries: u32) -> usize {
    (ProxyRingHeader::ENTRIES_OFFSET_BYTES + capacity_entries as usize * ProxyRingEntry::SIZE_BYTES)
        / 8
}

/// Word-level atomic access to one ring's memory. Implemented over real host memory
/// ([`HostRing`]) and, in the tests, over a model checker's atomics.
pub trait RingMemory {
    /// Number of entry slots (a power of two).
    fn capacity_entries(&self) -> u32;
    /// Atomically loads a word.
    fn load(&self, word: RingWord, ordering: Ordering) -> u64;
    /// Atomically stores a word.
    fn store(&self, word: RingWord, value: u64, ordering: Ordering);
    /// Atomically adds to a word, returning the previous value.
    fn fetch_add(&self, word: RingWord, value: u64, ordering: Ordering) -> u64;
    /// Called on every turn of a wait loop: a spin hint, a yield, or a model checker's
    /// scheduling point (without one, a checker cannot leave a spinning thread).
    fn wait_hint(&self);
}

impl<T: RingMemory + ?Sized> RingMemory for &T {
    fn capacity_entries(&self) -> u32 {
        (**self).capacity_entries()
    }
    fn load(&self, word: RingWord, ordering: Ordering) -> u64 {
        (**self).load(word, ordering)
    }
    fn store(&self, word: RingWord, value: u64, ordering: Ordering) {
        (**self).store(word, value, ordering);
    }
    fn fetch_add(&self, word: RingWord, value: u64, ordering: Ordering) -> u64 {
        (**self).fetch_add(word, value, ordering)
    }
    fn wait_hint(&self) {
        (**self).wait_hint();
    }
}

impl<T: RingMemory + ?Sized> RingMemory for std::sync::Arc<T> {
    fn capacity_entries(&self) -> u32 {
        (**self).capacity_entries()
    }
    fn load(&self, word: RingWord, ordering: Ordering) -> u64 {
        (**self).load(word, ordering)
    }
    fn store(&self, word: RingWord, value: u64, ordering: Ordering) {
        (**self).store(word, value, ordering);
    }
    fn fetch_add(&self, word: RingWord, value: u64, ordering: Ordering) -> u64 {
        (**self).fetch_add(word, value, ordering)
    }
    fn wait_hint(&self) {
        (**self).wait_hint();
    }
}

/// Why a ring cannot be set up or used.
#[derive(Debug, thiserror::Error)]
pub enum ProxyRingError {
    /// The capacity is not a power of two.
    #[error("proxy ring: {0}; use a power of two")]
    InvalidCapacity(ProxyDecodeError),
    /// The memory given for a ring is unusable.
    #[error("proxy ring memory at {address:#x}: {reason}")]
    InvalidMemory {
        /// Base address.
        address: usize,
        /// What is wrong.
        reason: String,
    },
    /// The slot holds a sequence no correct producer could have written.
    #[error(
        "proxy ring stopped at ticket {ticket}: slot {slot} holds sequence {sequence_found}, neither {expected_sequence} (this ticket) nor the previous lap's {previous_lap_sequence}; a producer broke the ring protocol"
    )]
    CorruptSequence {
        /// The ticket awaited.
        ticket: u64,
        /// Its slot.
        slot: usize,
        /// What was found.
        sequence_found: u64,
        /// `ticket + 1`.
        expected_sequence: u64,
        /// What the slot holds before this ticket's producer writes.
        previous_lap_sequence: u64,
    },
    /// The entry does not decode.
    #[error("proxy ring stopped at ticket {ticket} ({entry:?}): {source}")]
    InvalidEntry {
        /// The ticket.
        ticket: u64,
        /// The raw entry.
        entry: ProxyRingEntry,
        /// Why it does not decode.
        source: ProxyDecodeError,
    },
    /// The executor failed.
    #[error("proxy ring stopped at ticket {ticket}: executing {command:?} failed: {source}")]
    ExecutionFailed {
        /// The ticket.
        ticket: u64,
        /// The command.
        command: ProxyCommand,
        /// The executor's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An earlier failure stopped the ring.
    #[error(
        "proxy ring is stopped at ticket {ticket} after an earlier failure; the producers' remaining commands will not run"
    )]
    Stopped {
        /// The ticket that failed.
        ticket: u64,
    },
}

/// Runs the commands the consumer hands over.
pub trait CommandExecutor {
    /// The executor's failure.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Executes `command` and returns once its effects are complete (puts landed, signal
    /// written), since the consumer may then publish its completion.
    fn execute(&mut self, command: &ProxyCommand) -> Result<(), Self::Error>;
}

/// What one [`RingConsumer::poll`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollOutcome {
    /// No producer holds the next ticket.
    Empty,
    /// A producer holds the next ticket, but its entry is not published yet.
    Pending {
        /// The ticket awaited.
        ticket: u64,
    },
    /// The next command was executed.
    Executed {
        /// The command, its ticket included.
        command: ProxyCommand,
    },
}

/// The consumer of one ring: executes its commands in ticket order.
#[derive(Debug)]
pub struct RingConsumer<M> {
    memory: M,
    capacity_entries: u32,
    next_ticket: u64,
    stopped_at: Option<u64>,
}

impl<M: RingMemory> RingConsumer<M> {
    /// A consumer resuming at the ring's `consumer_head` (0 on a fresh ring).
    pub fn new(memory: M) -> Self {
        let capacity_entries = memory.capacity_entries();
        let next_ticket = memory.load(RingWord::ConsumerHead, Ordering::Acquire);
        Self {
            memory,
            capacity_entries,
            next_ticket,
            stopped_at: None,
        }
    }

    /// The next ticket this consumer will execute.
    pub fn next_ticket(&self) -> u64 {
        self.next_ticket
    }

    /// The ring memory.
    pub fn memory(&self) -> &M {
        &self.memory
    }

    /// Executes the next command if it is published; never waits.
    pub fn poll<E: CommandExecutor>(
        &mut self,
        executor: &mut E,
    ) -> Result<PollOutcome, ProxyRingError> {
        if let Some(ticket) = self.stopped_at {
            return Err(ProxyRingError::Stopped { ticket });
        }
        let ticket = self.next_ticket;
        // Relaxed: the head is only a hint that the slot is worth looking at; the entry's data
        // is published by its sequence word, loaded with acquire below.
        let producer_head = self
            .memory
            .load(RingWord::ProducerReservationCounter, Ordering::Relaxed);
        if producer_head <= ticket {
            return Ok(PollOutcome::Empty);
        }
        let slot = slot_index(ticket, self.capacity_entries);
        let sequence = self.memory.load(
            RingWord::EntryWord {
                slot,
                word_index: 0,
            },
            Ordering::Acquire,
        );
        let expected_sequence = ticket + 1;
        if sequence != expected_sequence {
            let capacity = u64::from(self.capacity_entries);
            let previous_lap_sequence = (ticket + 1).saturating_sub(capacity);
            if sequence == previous_lap_sequence {
                return Ok(PollOutcome::Pending { ticket });
            }
            self.stopped_at = Some(ticket);
            return Err(ProxyRingError::CorruptSequence {
                ticket,
                slot,
                sequence_found: sequence,
                expected_sequence,
                previous_lap_sequence,
            });
        }
        // Ordered after the acquire above, so they see everything the producer wrote before its
        // release of the sequence; no producer rewrites the slot before we advance
        // consumer_head.
        let mut bytes = [0u8; ProxyRingEntry::SIZE_BYTES];
        bytes[..8].copy_from_slice(&sequence.to_le_bytes());
        for word_index in 1..ENTRY_WORDS {
            let word = self
                .memory
                .load(RingWord::EntryWord { slot, word_index }, Ordering::Relaxed);
            bytes[word_index * 8..word_index * 8 + 8].copy_from_slice(&word.to_le_bytes());
        }
        let entry = ProxyRingEntry::from_bytes(&bytes);
        let command = match entry.decode() {
            Ok(command) => command,
            Err(source) => {
                self.stopped_at = Some(ticket);
                return Err(ProxyRingError::InvalidEntry {
                    ticket,
                    entry,
                    source,
                });
            }
        };
        if let Err(source) = executor.execute(&command) {
            self.stopped_at = Some(ticket);
            return Err(ProxyRingError::ExecutionFailed {
                ticket,
                command,
                source: Box::new(source),
            });
        }
        // Release: our reads of the slot, and the executor's effects, happen before a producer
        // that sees the new head reuses the slot or a waiter that sees the completion proceeds.
        self.memory
            .store(RingWord::ConsumerHead, ticket + 1, Ordering::Release);
        if command.completion_requested {
            self.memory
                .store(RingWord::CompletionCounter, ticket + 1, Ordering::Release);
        }
        self.next_ticket = ticket + 1;
        Ok(PollOutcome::Executed { command })
    }

    /// Executes published commands until the ring has none ready or `maximum_commands` ran;
    /// returns how many ran.
    pub fn poll_batch<E: CommandExecutor>(
        &mut self,
        executor: &mut E,
        maximum_commands: usize,
    ) -> Result<usize, ProxyRingError> {
        let mut executed = 0;
        while executed < maximum_commands {
            match self.poll(executor)? {
                PollOutcome::Executed { .. } => executed += 1,
                PollOutcome::Empty | PollOutcome::Pending { .. } => break,
            }
        }
        Ok(executed)
    }
}

/// A host-side producer: posts commands with the GPU producers' protocol (it may share a ring
/// with them). Every method takes `&self`: any number of threads may produce at once.
#[derive(Debug)]
pub struct RingProducer<M> {
    memory: M,
    capacity_entries: u32,
}

impl<M: RingMemory> RingProducer<M> {
    /// A producer on `memory`.
    pub fn new(memory: M) -> Self {
        let capacity_entries = memory.capacity_entries();
        Self {
            memory,
            capacity_entries,
        }
    }

    /// The ring memory.
    pub fn memory(&self) -> &M {
        &self.memory
    }

    /// Posts one command and returns its ticket. Blocks while the ring is full (until the
    /// consumer has read the slot's previous occupant).
    pub fn submit(
        &self,
        peer_rank: u32,
        completion_requested: bool,
        operation: ProxyOperation,
    ) -> u64 {
        // Relaxed: the reservation only has to hand out distinct tickets; no data travels
        // through it (the sequence word publishes the entry).
        let ticket =
            self.memory
                .fetch_add(RingWord::ProducerReservationCounter, 1, Ordering::Relaxed);
        let capacity = u64::from(self.capacity_entries);
        // Flow control. Acquire pairs with the consumer's release of consumer_head: its reads
        // of this slot's previous entry happen before our writes below.
        while ticket >= self.memory.load(RingWord::ConsumerHead, Ordering::Acquire) + capacity {
            self.memory.wait_hint();
        }
        let entry = ProxyCommand {
            ticket,
            peer_rank,
            completion_requested,
            operation,
        }
        .encode();
        let words = entry_words(&entry);
        let slot = slot_index(ticket, self.capacity_entries);
        for (word_index, &word) in words.iter().enumerate().skip(1) {
            self.memory.store(
                RingWord::EntryWord { slot, word_index },
                word,
                Ordering::Relaxed,
            );
        }
        // Last, with release: publishes the payload above.
        self.memory.store(
            RingWord::EntryWord {
                slot,
                word_index: 0,
            },
            words[0],
            Ordering::Release,
        );
        ticket
    }

    /// Waits until `completion_counter` is above `ticket`: a command at or after `ticket` that
    /// requested a completion has completed, and with it every earlier command.
    pub fn wait_for_completion(&self, ticket: u64) {
        while self
            .memory
            .load(RingWord::CompletionCounter, Ordering::Acquire)
            <= ticket
        {
            self.memory.wait_hint();
        }
    }
}

/// An entry as the 8 little-endian words the ring stores (word 0 = sequence).
pub fn entry_words(entry: &ProxyRingEntry) -> [u64; ENTRY_WORDS] {
    let bytes = entry.to_bytes();
    let mut words = [0u64; ENTRY_WORDS];
    for (index, word) in words.iter_mut().enumerate() {
        *word = u64::from_le_bytes(bytes[index * 8..index * 8 + 8].try_into().expect("8 bytes"));
    }
    words
}

/// One 64-byte line of an owned ring allocation (alignment as the ABI's structs).
#[repr(C, align(64))]
struct RingLine([AtomicU64; 8]);

/// A ring in host memory: an owned allocation ([`Self::allocate`]) or memory allocated
/// elsewhere, e.g. CUDA host-pinned ([`Self::initialize_at`], [`Self::attach`]).
pub struct HostRing {
    words: NonNull<AtomicU64>,
    word_count: usize,
    capacity_entries: u32,
    /// The owned allocation (from `Box::into_raw`), freed on drop; `None` for borrowed memory.
    /// Held as a raw pointer so that moving the `HostRing` never asserts uniqueness over memory
    /// that `words` points into.
    owned_lines: Option<NonNull<[RingLine]>>,
}

impl std::fmt::Debug for HostRing {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("HostRing")
            .field("address", &self.words)
            .field("capacity_entries", &self.capacity_entries)
            .field("owned", &self.owned_lines.is_some())
            .finish()
    }
}

impl Drop for HostRing {
    fn drop(&mut self) {
        if let Some(lines) = self.owned_lines.take() {
            // SAFETY: `lines` came from `Box::into_raw` in `allocate` and is freed only here.
            drop(unsafe { Box::from_raw(lines.as_ptr()) });
        }
    }
}

// SAFETY: a HostRing only hands out `&AtomicU64`s (which are Send and Sync) into memory that
// stays valid while it lives: its own allocation, or memory the creator of a borrowed ring
// promised (in `initialize_at`/`attach`) to keep valid and to access only atomically.
unsafe impl Send for HostRing {}
// SAFETY: as above; every access through a shared HostRing is an atomic operation.
unsafe impl Sync for HostRing {}

impl HostRing {
    /// A fresh, zeroed ring of `capacity_entries` slots in an owned, 64-byte-aligned allocation.
    pub fn allocate(capacity_entries: u32) -> Result<Self, ProxyRingError> {
        validate_capacity_entries(capacity_entries).map_err(ProxyRingError::InvalidCapacity)?;
        let line_count = ring_word_count(capacity_entries) / 8;
        let allocation: Box<[RingLine]> = (0..line_count)
            .map(|_| RingLine(std::array::from_fn(|_| AtomicU64::new(0))))
            .collect();
        let lines = NonNull::from(Box::leak(allocation));
        let ring = Self {
            words: lines.cast::<AtomicU64>(),
            word_count: line_count * 8,
            capacity_entries,
            owned_lines: Some(lines),
        };
        ring.word(RingWord::CapacityEntries)
            .store(u64::from(capacity_entries), Ordering::Release);
        Ok(ring)
    }

    /// Writes a fresh ring (zero counters and entries, the capacity) at `base` and returns it.
    ///
    /// # Safety
    /// `base` must point to `ProxyRingHeader::ring_total_bytes` bytes for a ring of
    /// `capacity_entries` slots, valid for reads and writes for as long as the returned value
    /// lives, and accessed by anyone else (GPU included) only with aligned 64-bit-or-smaller
    /// atomic or device-coherent accesses, never through Rust references to non-atomic data.
    pub unsafe fn initialize_at(
        base: *mut u8,
        capacity_entries: u32,
    ) -> Result<Self, ProxyRingError> {
        validate_capacity_entries(capacity_entries).map_err(ProxyRingError::InvalidCapacity)?;
        // SAFETY: forwarded to our caller's contract.
        let ring = unsafe { Self::borrowed(base, capacity_entries)? };
        for index in 0..ring.word_count {
            ring.word_at(index).store(0, Ordering::Relaxed);
        }
        ring.word(RingWord::CapacityEntries)
            .store(u64::from(capacity_entries), Ordering::Release);
        Ok(ring)
    }

    /// Uses the ring already at `base`, reading its capacity from the header.
    ///
    /// # Safety
    /// As for [`Self::initialize_at`]; the header at `base` must have been written (its
    /// capacity is trusted to size the memory).
    pub unsafe fn attach(base: *mut u8) -> Result<Self, ProxyRingError> {
        // SAFETY: the header alone is in bounds by the caller's contract.
        let header = unsafe { Self::borrowed(base, 0)? };
        let capacity_word = header
            .word(RingWord::CapacityEntries)
            .load(Ordering::Acquire);
        let capacity_entries = u32::try_from(capacity_word)
            .ok()
            .filter(|capacity| capacity.is_power_of_two())
            .ok_or_else(|| ProxyRingError::InvalidMemory {
                address: base as usize,
                reason: format!(
                    "header capacity word {capacity_word:#x} is not a power-of-two u32: not an initialized ring"
                ),
            })?;
        // SAFETY: the caller guarantees the ring's full extent.
        unsafe { Self::borrowed(base, capacity_entries) }
    }

    /// # Safety
    /// `base` valid for the ring's extent as in [`Self::initialize_at`].
    unsafe fn borrowed(base: *mut u8, capacity_entries: u32) -> Result<Self, ProxyRingError> {
        let invalid = |reason: &str| ProxyRingError::InvalidMemory {
            address: base as usize,
            reason: reason.to_owned(),
        };
        let words = NonNull::new(base.cast::<AtomicU64>()).ok_or_else(|| invalid("null"))?;
        if !(base as usize).is_multiple_of(64) {
            return Err(invalid(
                "not 64-byte aligned (the ring's lines must not straddle)",
            ));
        }
        Ok(Self {
            words,
            word_count: ring_word_count(capacity_entries),
            capacity_entries,
            owned_lines: None,
        })
    }

    /// Address of the ring's first byte (to register it with CUDA or hand it to a GPU).
    pub fn as_ptr(&self) -> *const u8 {
        self.words.as_ptr().cast::<u8>().cast_const()
    }

    fn word_at(&self, index: usize) -> &AtomicU64 {
        assert!(
            index < self.word_count,
            "ring word {index} is outside the {} words of the ring",
            self.word_count
        );
        // SAFETY: in bounds (checked above) of memory that is valid and 8-byte aligned while
        // `self` lives (see the `Send`/`Sync` comment), and only accessed atomically.
        unsafe { &*self.words.as_ptr().add(index) }
    }

    fn word(&self, word: RingWord) -> &AtomicU64 {
        self.word_at(word.word_offset())
    }
}

impl RingMemory for HostRing {
    fn capacity_entries(&self) -> u32 {
        self.capacity_entries
    }
    fn load(&self, word: RingWord, ordering: Ordering) -> u64 {
        self.word(word).load(ordering)
    }
    fn store(&self, word: RingWord, value: u64, ordering: Ordering) {
        self.word(word).store(value, ordering);
    }
    fn fetch_add(&self, word: RingWord, value: u64, ordering: Ordering) -> u64 {
        self.word(word).fetch_add(value, ordering)
    }
    fn wait_hint(&self) {
        std::hint::spin_loop();
        // Host producers may outnumber cores (tests on two cores): let the consumer run.
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aboleth_abi::proxy::{ProxyPut, ProxySignal, SignalOperation};

    #[derive(Default)]
    struct Recorder {
        executed: Vec<ProxyCommand>,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("refused")]
    struct Refused;

    impl CommandExecutor for Recorder {
        type Error = Refused;
        fn execute(&mut self, command: &ProxyCommand) -> Result<(), Refused> {
            if command.peer_rank == 99 {
                return Err(Refused);
            }
            self.executed.push(*command);
            Ok(())
        }
    }

    fn put(source_address: u64) -> ProxyOperation {
        ProxyOperation::Put(ProxyPut {
            source_address,
            source_key: 0,
            destination_region_index: 1,
            destination_offset_bytes: 64,
            length_bytes: 256,
        })
    }

    #[test]
    fn word_offsets_follow_the_abi_layout() {
        assert_eq!(RingWord::ProducerReservationCounter.offset_bytes(), 0);
        assert_eq!(RingWord::ConsumerHead.offset_bytes(), 64);
        assert_eq!(RingWord::CompletionCounter.offset_bytes(), 128);
        assert_eq!(RingWord::CapacityEntries.offset_bytes(), 192);
        assert_eq!(
            RingWord::EntryWord {
                slot: 2,
                word_index: 3
            }
            .offset_bytes(),
            256 + 2 * 64 + 24
        );
        let header = ProxyRingHeader::new(4).unwrap();
        assert_eq!(ring_word_count(4) * 8, header.ring_total_bytes());
    }

    #[test]
    fn a_single_thread_round_trip_wraps_around() {
        let ring = HostRing::allocate(2).unwrap();
        let producer = RingProducer::new(&ring);
        let mut consumer = RingConsumer::new(&ring);
        let mut recorder = Recorder::default();
        assert_eq!(consumer.poll(&mut recorder).unwrap(), PollOutcome::Empty);
        for round in 0..5u64 {
            let signal = ProxySignal {
                region_index: 2,
                offset_bytes: 8,
                value: round,
                operation: SignalOperation::Add,
            };
            let first = producer.submit(1, false, put(round));
            let second = producer.submit(1, true, ProxyOperation::Signal(signal));
            assert_eq!((first, second), (2 * round, 2 * round + 1));
            assert_eq!(consumer.poll_batch(&mut recorder, 10).unwrap(), 2);
            producer.wait_for_completion(second);
            assert_eq!(
                ring.load(RingWord::ConsumerHead, Ordering::Acquire),
                second + 1
            );
        }
        assert_eq!(recorder.executed.len(), 10);
        for (ticket, command) in recorder.executed.iter().enumerate() {
            assert_eq!(command.ticket, ticket as u64);
            assert_eq!(command.completion_requested, ticket % 2 == 1);
        }
    }

    #[test]
    fn a_reserved_but_unpublished_ticket_is_pending() {
        let ring = HostRing::allocate(4).unwrap();
        ring.fetch_add(RingWord::ProducerReservationCounter, 1, Ordering::Relaxed);
        let mut consumer = RingConsumer::new(&ring);
        assert_eq!(
            consumer.poll(&mut Recorder::default()).unwrap(),
            PollOutcome::Pending { ticket: 0 }
        );
    }

    #[test]
    fn corrupt_sequences_bad_entries_and_executor_failures_stop_the_ring() {
        let ring = HostRing::allocate(4).unwrap();
        ring.fetch_add(RingWord::ProducerReservationCounter, 1, Ordering::Relaxed);
        ring.store(
            RingWord::EntryWord {
                slot: 0,
                word_index: 0,
            },
            7,
            Ordering::Release,
        );
        let mut consumer = RingConsumer::new(&ring);
        let error = consumer.poll(&mut Recorder::default()).unwrap_err();
        assert!(
            matches!(
                error,
                ProxyRingError::CorruptSequence {
                    sequence_found: 7,
                    ..
                }
            ),
            "{error}"
        );
        assert!(matches!(
            consumer.poll(&mut Recorder::default()),
            Err(ProxyRingError::Stopped { ticket: 0 })
        ));

        let ring = HostRing::allocate(4).unwrap();
        let producer = RingProducer::new(&ring);
        producer.submit(99, false, ProxyOperation::Nop);
        let mut consumer = RingConsumer::new(&ring);
        let error = consumer.poll(&mut Recorder::default()).unwrap_err();
        assert!(error.to_string().contains("refused"), "{error}");

        let ring = HostRing::allocate(4).unwrap();
        ring.fetch_add(RingWord::ProducerReservationCounter, 1, Ordering::Relaxed);
        // Opcode 9 in word 1 (bytes 8..10), then the sequence.
        ring.store(
            RingWord::EntryWord {
                slot: 0,
                word_index: 1,
            },
            9,
            Ordering::Relaxed,
        );
        ring.store(
            RingWord::EntryWord {
                slot: 0,
                word_index: 0,
            },
            1,
            Ordering::Release,
        );
        let error = RingConsumer::new(&ring)
            .poll(&mut Recorder::default())
            .unwrap_err();
        assert!(
            matches!(
                error,
                ProxyRingError::InvalidEntry {
                    source: ProxyDecodeError::UnknownOpcode { opcode: 9 },
                    ..
                }
            ),
            "{error}"
        );
    }

    #[test]
    fn rings_in_foreign_memory_are_initialized_and_attached() {
        let mut lines: Vec<RingLine> = (0..ring_word_count(8) / 8)
            .map(|_| RingLine(std::array::from_fn(|_| AtomicU64::new(u64::MAX))))
            .collect();
        let base = lines.as_mut_ptr().cast::<u8>();
        // SAFETY: `lines` covers the ring, outlives both rings, and is only accessed atomically.
        let ring = unsafe { HostRing::initialize_at(base, 8) }.unwrap();
        assert_eq!(ring.load(RingWord::ConsumerHead, Ordering::Acquire), 0);
        RingProducer::new(&ring).submit(3, true, ProxyOperation::Drain);
        // SAFETY: as above.
        let attached = unsafe { HostRing::attach(base) }.unwrap();
        assert_eq!(attached.capacity_entries(), 8);
        let mut recorder = Recorder::default();
        assert_eq!(
            RingConsumer::new(&attached)
                .poll_batch(&mut recorder, 8)
                .unwrap(),
            1
        );
        assert_eq!(recorder.executed[0].operation, ProxyOperation::Drain);
        // SAFETY: a misaligned pointer is refused before any access.
        let misaligned = unsafe { HostRing::initialize_at(base.wrapping_add(8), 8) };
        assert!(matches!(
            misaligned,
            Err(ProxyRingError::InvalidMemory { .. })
        ));
        assert!(matches!(
            HostRing::allocate(3),
            Err(ProxyRingError::InvalidCapacity(_))
        ));
    }
}
