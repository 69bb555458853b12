//! The host side of the proxy command ring of `aboleth_abi::proxy`: the consumer the proxy
//! thread runs ([`RingConsumer`]), a host producer that speaks the GPU producers' protocol
//! ([`RingProducer`]), and the word-level memory abstraction both run over ([`RingMemory`]):
//! real host memory ([`HostRing`], over an owned allocation or a pinned buffer given by raw
//! pointer), or a model checker's atomics in the tests.
//!
//! The protocol is specified by the module documentation of [`aboleth_abi::proxy`], which is the
//! spec (the GPU code the compiler emits and the simulator's `ProxyEngine` follow the same
//! text). Here it is word by word as this module runs it; every access is a 64-bit atomic on
//! the ring's memory, with the ordering in parentheses.
//!
//! A producer posts a batch of `n` commands, `1 <= n <= capacity_entries`:
//! 1. it reserves tickets `base..end`, `end = base + n`, on `producer_reservation_counter`: a
//!    `fetch_add(n)` on a shared ring, a plain load and store when one producer owns the ring
//!    (relaxed: the counter only hands out distinct tickets);
//! 2. it waits for space, until `end <= consumer_head + capacity_entries` (acquire, pairing with
//!    the consumer's release of `consumer_head`, so the consumer's reads of the slots' previous
//!    occupants happen before they are overwritten);
//! 3. it writes each entry: payload words 1..7 of slot `t mod capacity_entries`, then word 0,
//!    `sequence = t + 1`, last (relaxed: plain stores; nothing is published yet);
//! 4. it publishes the whole batch with one release of `producer_head` (the doorbell):
//!    - the ring's sole owner stores `producer_head = end` (release);
//!    - on a shared ring, it first waits until `producer_ready_counter == base` (acquire), then
//!      stores `producer_ready_counter = end` (release), then raises the head with
//!      `fetch_max(producer_head, end)` (release). Publication in ticket order is what makes the
//!      max safe: the head can pass an earlier producer's tickets only once that producer has
//!      moved the ready counter past them, i.e. after writing their entries, and the
//!      release/acquire chain through the ready counter carries those writes to whoever
//!      acquires the later producer's head.
//!
//! The consumer, expecting ticket `t`:
//! - loads `producer_head` (acquire); at most `t`: nothing is published ([`PollOutcome::Empty`]);
//! - loads the sequence of slot `t mod capacity_entries` (relaxed: the head's acquire already
//!   orders it after the producer's stores): `t + 1` means the entry is there; it reads the
//!   payload (relaxed), decodes it, hands it to a [`CommandExecutor`], then stores
//!   `consumer_head = t + 1` and, when the command asked for one, `completion_counter = t + 1`
//!   (release; cumulative, since commands take effect in ticket order) — at once when the
//!   executor says the command's effects and every earlier command's are complete
//!   ([`Execution::Complete`]), otherwise later, when the executor reports that they are
//!   ([`CommandExecutor::completions_reached`], asked on every poll while a completion is
//!   outstanding, so the consumer keeps reading entries meanwhile). Either way the release of
//!   `completion_counter = c` follows the effects of every command below `c`, and the counter
//!   only grows;
//! - the previous lap's sequence (`t + 1 - capacity_entries`, or 0 on the first lap) means the
//!   head covers an entry that is not visible yet ([`PollOutcome::Pending`]): the consumer waits,
//!   as the simulator does, rather than execute a stale slot. No correct producer lets that be
//!   seen (the head is only raised, with release, over written entries), so the model-checking
//!   tests treat it as a protocol violation;
//! - anything else means some writer broke the protocol, and the consumer stops the ring with
//!   [`ProxyRingError::CorruptSequence`] rather than guess.
//!
//! A ring is either shared (any number of producers, GPU threads included, each using the
//! atomic steps) or owned by one producer for its whole life ([`RingOwnership`]); the two are
//! never mixed on one ring. On a shared ring producers write their entries concurrently, but
//! batches are published in ticket order, and the consumer executes in ticket order.
//!
//! When a ring stops (a corrupt entry, a failed command), the completions of the commands before
//! it are still published: the consumer waits for them then (`completions_reached` with
//! `wait`), so a producer waiting for an earlier command is not left hanging.
//!
//! What it does not do: execute anything itself (the executor does: copy engine, ibverbs, or a
//! test double), know how an executor learns that enqueued effects are complete (a CUDA stream
//! marker, a synchronize, a test double's queue), poll several rings (the proxy thread owns one consumer per ring), or let a
//! host producer give up tickets it reserved (the consumer, and on a shared ring every later
//! producer, would wait for them forever, exactly as with a GPU producer that dies).

use std::ops::Range;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use aboleth_abi::proxy::{
    ProxyCommand, ProxyDecodeError, ProxyOperation, slot_index, validate_capacity_entries,
};
use aboleth_abi::{ProxyRingEntry, ProxyRingHeader};

/// 64-bit words in one ring entry; word 0 is the sequence.
pub const ENTRY_WORDS: usize = ProxyRingEntry::SIZE_BYTES / 8;
// The consumer reads word 0 as the sequence and the entry as whole words.
const _: () = assert!(core::mem::offset_of!(ProxyRingEntry, sequence) == 0);
const _: () = assert!(ProxyRingEntry::SIZE_BYTES.is_multiple_of(8));

/// A 64-bit word of a ring: a header counter or one word of one entry slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RingWord {
    /// `producer_reservation_counter`: the next ticket to reserve.
    ProducerReservationCounter,
    /// `consumer_head`: the next ticket the consumer will read.
    ConsumerHead,
    /// `completion_counter`: tickets below it are complete.
    CompletionCounter,
    /// The header word holding `capacity_entries` (low 32 bits; the high 32 are reserved zero).
    CapacityEntries,
    /// `producer_ready_counter`: on a shared ring, tickets below it are published in order.
    ProducerReadyCounter,
    /// `producer_head`: tickets below it are published to the consumer.
    ProducerHead,
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
                ProxyRingHeader::PRODUCER_RESERVATION_COUNTER_OFFSET_BYTES as usize
            }
            Self::ConsumerHead => ProxyRingHeader::CONSUMER_HEAD_OFFSET_BYTES as usize,
            Self::CompletionCounter => ProxyRingHeader::COMPLETION_COUNTER_OFFSET_BYTES as usize,
            Self::CapacityEntries => core::mem::offset_of!(ProxyRingHeader, capacity_entries),
            Self::ProducerReadyCounter => {
                ProxyRingHeader::PRODUCER_READY_COUNTER_OFFSET_BYTES as usize
            }
            Self::ProducerHead => ProxyRingHeader::PRODUCER_HEAD_OFFSET_BYTES as usize,
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
    /// Atomically raises a word to `max(word, value)`, returning the previous value.
    fn fetch_max(&self, word: RingWord, value: u64, ordering: Ordering) -> u64;
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
    fn fetch_max(&self, word: RingWord, value: u64, ordering: Ordering) -> u64 {
        (**self).fetch_max(word, value, ordering)
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
    fn fetch_max(&self, word: RingWord, value: u64, ordering: Ordering) -> u64 {
        (**self).fetch_max(word, value, ordering)
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
    /// A batch has more commands than the ring has slots. Nothing was reserved.
    #[error(
        "a batch of {commands} proxy commands cannot go through a ring of {capacity_entries} slots: a batch is published only after all of it is written, so its last command would wait forever for the slot its first one holds; split it into batches of at most {capacity_entries}"
    )]
    BatchTooLarge {
        /// Commands in the batch.
        commands: usize,
        /// Slots of the ring.
        capacity_entries: u32,
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
    /// The executor could not tell whether enqueued commands completed.
    #[error(
        "proxy ring stopped at ticket {ticket}: waiting for the completion of earlier commands failed: {source}"
    )]
    CompletionFailed {
        /// The next ticket the consumer would have executed.
        ticket: u64,
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

/// How far a command got when [`CommandExecutor::execute`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Execution {
    /// Its effects (puts landed, signal written), and those of every command executed before
    /// it, are complete: the consumer may publish its completion now.
    Complete,
    /// Its effects are ordered after those of every earlier command but may still be under
    /// way. When the command requested a completion, the executor reports it later through
    /// [`CommandExecutor::completions_reached`].
    Enqueued,
}

/// Runs the commands the consumer hands over, in ticket order.
pub trait CommandExecutor {
    /// The executor's failure.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Executes `command`: its effects take place after those of every command executed
    /// before it. Returns [`Execution::Complete`] once they are complete, or
    /// [`Execution::Enqueued`] when they may still be under way.
    fn execute(&mut self, command: &ProxyCommand) -> Result<Execution, Self::Error>;

    /// A ticket bound `c`: the effects of every command with a ticket below `c` are complete
    /// (0: nothing known). With `wait`, first waits until everything executed so far is
    /// complete, and then returns at least the ticket after the last command that requested a
    /// completion and returned [`Execution::Enqueued`]. The consumer asks only while such a
    /// completion is outstanding; the default, for executors that return
    /// [`Execution::Complete`] for every command that requests a completion, knows nothing.
    fn completions_reached(&mut self, wait: bool) -> Result<u64, Self::Error> {
        let _ = wait;
        Ok(0)
    }
}

/// What one [`RingConsumer::poll`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollOutcome {
    /// `producer_head` does not cover the next ticket: nothing is published (a producer may
    /// hold the ticket and be writing its entry).
    Empty,
    /// `producer_head` covers the next ticket but its slot still holds the previous lap's
    /// sequence: the head became visible before the entry. The consumer waits for the entry;
    /// no correct producer on coherent memory lets this be observed.
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
    /// The last value this consumer stored to `completion_counter`.
    completion_published: u64,
    /// The ticket after the last command that requested a completion the executor has not
    /// reported yet (outstanding while above `completion_published`).
    completion_awaited: u64,
    completions_published: u64,
}

impl<M: RingMemory> RingConsumer<M> {
    /// A consumer resuming at the ring's `consumer_head` (0 on a fresh ring).
    pub fn new(memory: M) -> Self {
        let capacity_entries = memory.capacity_entries();
        let next_ticket = memory.load(RingWord::ConsumerHead, Ordering::Acquire);
        let completion_published = memory.load(RingWord::CompletionCounter, Ordering::Acquire);
        Self {
            memory,
            capacity_entries,
            next_ticket,
            stopped_at: None,
            completion_published,
            completion_awaited: completion_published,
            completions_published: 0,
        }
    }

    /// The next ticket this consumer will execute.
    pub fn next_ticket(&self) -> u64 {
        self.next_ticket
    }

    /// Whether a command's requested completion is not published yet (its executor returned
    /// [`Execution::Enqueued`] and has not reported it).
    pub fn completion_outstanding(&self) -> bool {
        self.completion_awaited > self.completion_published
    }

    /// Stores to `completion_counter` so far.
    pub fn completions_published(&self) -> u64 {
        self.completions_published
    }

    /// Publishes what the executor reports complete. With `wait`, waits for everything
    /// executed so far first (the proxy thread does before it ends).
    ///
    /// # Errors
    /// [`ProxyRingError::CompletionFailed`] when the executor cannot tell; the ring stops.
    pub fn publish_completions<E: CommandExecutor>(
        &mut self,
        executor: &mut E,
        wait: bool,
    ) -> Result<(), ProxyRingError> {
        if !wait && !self.completion_outstanding() {
            return Ok(());
        }
        match executor.completions_reached(wait) {
            Ok(reached) => {
                debug_assert!(
                    reached <= self.next_ticket,
                    "the executor reports ticket {reached} complete before it ran"
                );
                self.publish_completion(reached.min(self.completion_awaited));
                Ok(())
            }
            Err(source) => {
                let ticket = self.next_ticket;
                self.stopped_at.get_or_insert(ticket);
                Err(ProxyRingError::CompletionFailed {
                    ticket,
                    source: Box::new(source),
                })
            }
        }
    }

    /// Release: the effects of every command below `counter` are complete (the caller knows),
    /// and become visible to a waiter that sees the counter. Never lowers it.
    fn publish_completion(&mut self, counter: u64) {
        if counter > self.completion_published {
            self.memory
                .store(RingWord::CompletionCounter, counter, Ordering::Release);
            self.completion_published = counter;
            self.completions_published += 1;
        }
    }

    /// Stops the ring at `ticket`, first publishing the completions of the commands before it
    /// (their effects were enqueued and complete on their own). The stop's own reason is what
    /// the caller reports, so a failure to learn of those completions is not reported over it.
    fn stop_at<E: CommandExecutor>(&mut self, ticket: u64, executor: &mut E) {
        self.stopped_at = Some(ticket);
        if self.completion_outstanding()
            && let Ok(reached) = executor.completions_reached(true)
        {
            self.publish_completion(reached.min(self.completion_awaited));
        }
    }

    /// The ring memory.
    pub fn memory(&self) -> &M {
        &self.memory
    }

    /// Publishes the completions the executor reports (while one is outstanding), then
    /// executes the next command if it is published; never waits.
    pub fn poll<E: CommandExecutor>(
        &mut self,
        executor: &mut E,
    ) -> Result<PollOutcome, ProxyRingError> {
        if let Some(ticket) = self.stopped_at {
            return Err(ProxyRingError::Stopped { ticket });
        }
        self.publish_completions(executor, false)?;
        let ticket = self.next_ticket;
        // Acquire: pairs with the release that raised the head (directly, or through the
        // shared ring's ready counter, for earlier producers' entries), so every entry below
        // the head is visible to the loads that follow.
        let producer_head = self.memory.load(RingWord::ProducerHead, Ordering::Acquire);
        if producer_head <= ticket {
            return Ok(PollOutcome::Empty);
        }
        let slot = slot_index(ticket, self.capacity_entries);
        // Relaxed: ordered after the head's acquire; producers store it relaxed.
        let sequence = self.memory.load(
            RingWord::EntryWord {
                slot,
                word_index: 0,
            },
            Ordering::Relaxed,
        );
        let expected_sequence = ticket + 1;
        if sequence != expected_sequence {
            let capacity = u64::from(self.capacity_entries);
            let previous_lap_sequence = (ticket + 1).saturating_sub(capacity);
            if sequence == previous_lap_sequence {
                return Ok(PollOutcome::Pending { ticket });
            }
            self.stop_at(ticket, executor);
            return Err(ProxyRingError::CorruptSequence {
                ticket,
                slot,
                sequence_found: sequence,
                expected_sequence,
                previous_lap_sequence,
            });
        }
        // Ordered after the head's acquire, so they see everything the producer wrote before
        // publishing; no producer rewrites the slot before we advance consumer_head.
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
                self.stop_at(ticket, executor);
                return Err(ProxyRingError::InvalidEntry {
                    ticket,
                    entry,
                    source,
                });
            }
        };
        let execution = match executor.execute(&command) {
            Ok(execution) => execution,
            Err(source) => {
                self.stop_at(ticket, executor);
                return Err(ProxyRingError::ExecutionFailed {
                    ticket,
                    command,
                    source: Box::new(source),
                });
            }
        };
        // Release: our reads of the slot happen before a producer that sees the new head
        // reuses the slot. (It says nothing about the command's effects: only the completion
        // counter does.)
        self.memory
            .store(RingWord::ConsumerHead, ticket + 1, Ordering::Release);
        self.next_ticket = ticket + 1;
        if command.completion_requested {
            match execution {
                // Release: the effects happen before a waiter that sees the completion proceeds.
                Execution::Complete => self.publish_completion(ticket + 1),
                Execution::Enqueued => self.completion_awaited = ticket + 1,
            }
        }
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

/// A command as a producer hands it over: a [`ProxyCommand`] before it has a ticket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerCommand {
    /// Destination rank.
    pub peer_rank: u32,
    /// Whether `completion_counter` should cover this command.
    pub completion_requested: bool,
    /// The operation.
    pub operation: ProxyOperation,
}

impl ProducerCommand {
    /// A command for `peer_rank`.
    pub fn new(peer_rank: u32, completion_requested: bool, operation: ProxyOperation) -> Self {
        Self {
            peer_rank,
            completion_requested,
            operation,
        }
    }

    /// The command as the consumer will see it under `ticket`.
    pub fn with_ticket(self, ticket: u64) -> ProxyCommand {
        ProxyCommand {
            ticket,
            peer_rank: self.peer_rank,
            completion_requested: self.completion_requested,
            operation: self.operation,
        }
    }
}

/// Who produces on a ring; fixed for the ring's whole life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingOwnership {
    /// Any number of producers, GPU threads included: tickets are reserved with an atomic add
    /// and batches are published in ticket order (ready counter, then an atomic max of the
    /// head).
    Shared,
    /// One producer, used from one thread at a time, and nothing else ever reserves on the
    /// ring: a plain reservation and a plain release store of the head.
    SoleOwner,
}

/// A host-side producer: posts commands with the GPU producers' protocol. A
/// [`RingOwnership::Shared`] producer may share its ring with other producers (GPU ones
/// included) and may be used from many threads at once; a [`RingOwnership::SoleOwner`] one
/// must be the ring's only producer.
#[derive(Debug)]
pub struct RingProducer<M> {
    memory: M,
    capacity_entries: u32,
    ownership: RingOwnership,
}

impl<M: RingMemory> RingProducer<M> {
    /// A producer on a shared ring.
    pub fn new(memory: M) -> Self {
        Self::with_ownership(memory, RingOwnership::Shared)
    }

    /// The only producer of the ring, for the ring's whole life (see
    /// [`RingOwnership::SoleOwner`]).
    pub fn sole_owner(memory: M) -> Self {
        Self::with_ownership(memory, RingOwnership::SoleOwner)
    }

    /// A producer with the given ownership of its ring.
    pub fn with_ownership(memory: M, ownership: RingOwnership) -> Self {
        let capacity_entries = memory.capacity_entries();
        Self {
            memory,
            capacity_entries,
            ownership,
        }
    }

    /// How this producer shares its ring.
    pub fn ownership(&self) -> RingOwnership {
        self.ownership
    }

    /// The ring memory.
    pub fn memory(&self) -> &M {
        &self.memory
    }

    /// Posts one command (a batch of one) and returns its ticket. Blocks as
    /// [`Self::submit_batch`] does.
    ///
    /// # Panics
    /// As [`Self::submit_batch`].
    pub fn submit(&self, command: ProducerCommand) -> u64 {
        self.submit_batch(std::slice::from_ref(&command))
            .expect("a batch of one fits every ring")
            .start
    }

    /// Posts `commands` as one batch, on consecutive tickets, published together by one
    /// release of `producer_head`; returns the batch's tickets. Blocks until the ring has room
    /// for the whole batch (until the consumer has read the slots' previous occupants) and, on
    /// a shared ring, until every earlier batch is published. An empty batch does nothing.
    ///
    /// # Errors
    /// [`ProxyRingError::BatchTooLarge`] when `commands` has more commands than the ring has
    /// slots (it could never be published); nothing is reserved then.
    ///
    /// # Panics
    /// A [`RingOwnership::SoleOwner`] producer panics when it finds another producer's
    /// reservation on its ring (the reservation counter and the head disagree before it
    /// reserves), rather than corrupt the ring.
    pub fn submit_batch(&self, commands: &[ProducerCommand]) -> Result<Range<u64>, ProxyRingError> {
        if commands.len() > self.capacity_entries as usize {
            return Err(ProxyRingError::BatchTooLarge {
                commands: commands.len(),
                capacity_entries: self.capacity_entries,
            });
        }
        if commands.is_empty() {
            let next = self
                .memory
                .load(RingWord::ProducerReservationCounter, Ordering::Relaxed);
            return Ok(next..next);
        }
        let count = commands.len() as u64;
        let base = self.reserve(count);
        let end = base + count;
        self.wait_for_space(end);
        for (ticket, command) in (base..end).zip(commands) {
            self.write_entry(command.with_ticket(ticket));
        }
        self.publish(base, end);
        Ok(base..end)
    }

    /// Step 1: tickets `base..base + count`. Relaxed: the counter only has to hand out
    /// distinct tickets; no data travels through it.
    fn reserve(&self, count: u64) -> u64 {
        match self.ownership {
            RingOwnership::Shared => self.memory.fetch_add(
                RingWord::ProducerReservationCounter,
                count,
                Ordering::Relaxed,
            ),
            RingOwnership::SoleOwner => {
                let base = self
                    .memory
                    .load(RingWord::ProducerReservationCounter, Ordering::Relaxed);
                // Between our batches everything reserved is published; only our own stores
                // write these two words, so we read them back exactly, unless someone else
                // produces on the ring too.
                let head = self.memory.load(RingWord::ProducerHead, Ordering::Relaxed);
                assert_eq!(
                    base, head,
                    "a sole-owner proxy ring producer found producer_reservation_counter {base} but producer_head {head}: another producer uses the ring (use a shared producer, RingProducer::new)"
                );
                self.memory.store(
                    RingWord::ProducerReservationCounter,
                    base + count,
                    Ordering::Relaxed,
                );
                base
            }
        }
    }

    /// Step 2: waits until the slot of ticket `end - 1`, and so of every ticket before it, is
    /// free. Acquire pairs with the consumer's release of consumer_head: its reads of the
    /// slots' previous entries happen before our writes.
    fn wait_for_space(&self, end: u64) {
        let capacity = u64::from(self.capacity_entries);
        while end > self.memory.load(RingWord::ConsumerHead, Ordering::Acquire) + capacity {
            self.memory.wait_hint();
        }
    }

    /// Step 3: every word of the entry, the sequence last. Relaxed: the head publishes it.
    fn write_entry(&self, command: ProxyCommand) {
        let words = entry_words(&command.encode());
        let slot = slot_index(command.ticket, self.capacity_entries);
        for word_index in (1..ENTRY_WORDS).chain([0]) {
            self.memory.store(
                RingWord::EntryWord { slot, word_index },
                words[word_index],
                Ordering::Relaxed,
            );
        }
    }

    /// Step 4: publishes tickets `base..end` with one release of the head.
    fn publish(&self, base: u64, end: u64) {
        match self.ownership {
            RingOwnership::Shared => {
                // In ticket order: acquire pairs with the release below of the producer whose
                // batch ends at `base`, so its entries happen before our head raise too.
                while self
                    .memory
                    .load(RingWord::ProducerReadyCounter, Ordering::Acquire)
                    != base
                {
                    self.memory.wait_hint();
                }
                // Release: our entries (and, transitively, every earlier batch's) happen
                // before the next producer's head raise.
                self.memory
                    .store(RingWord::ProducerReadyCounter, end, Ordering::Release);
                // Release: pairs with the consumer's acquire of the head. A max, since a later
                // producer may have raised the head past `end` already.
                self.memory
                    .fetch_max(RingWord::ProducerHead, end, Ordering::Release);
            }
            RingOwnership::SoleOwner => {
                self.memory
                    .store(RingWord::ProducerHead, end, Ordering::Release);
            }
        }
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
    fn fetch_max(&self, word: RingWord, value: u64, ordering: Ordering) -> u64 {
        self.word(word).fetch_max(value, ordering)
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
        fn execute(&mut self, command: &ProxyCommand) -> Result<Execution, Refused> {
            if command.peer_rank == 99 {
                return Err(Refused);
            }
            self.executed.push(*command);
            Ok(Execution::Complete)
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

    fn header_words(ring: &HostRing) -> [u64; 4] {
        [
            RingWord::ProducerReservationCounter,
            RingWord::ProducerReadyCounter,
            RingWord::ProducerHead,
            RingWord::ConsumerHead,
        ]
        .map(|word| ring.load(word, Ordering::Acquire))
    }

    #[test]
    fn word_offsets_follow_the_abi_layout() {
        assert_eq!(RingWord::ProducerReservationCounter.offset_bytes(), 0);
        assert_eq!(RingWord::ConsumerHead.offset_bytes(), 64);
        assert_eq!(RingWord::CompletionCounter.offset_bytes(), 128);
        assert_eq!(RingWord::CapacityEntries.offset_bytes(), 192);
        assert_eq!(RingWord::ProducerReadyCounter.offset_bytes(), 200);
        assert_eq!(RingWord::ProducerHead.offset_bytes(), 208);
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
        for ownership in [RingOwnership::Shared, RingOwnership::SoleOwner] {
            let ring = HostRing::allocate(2).unwrap();
            let producer = RingProducer::with_ownership(&ring, ownership);
            assert_eq!(producer.ownership(), ownership);
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
                let first = producer.submit(ProducerCommand::new(1, false, put(round)));
                let second = producer.submit(ProducerCommand::new(
                    1,
                    true,
                    ProxyOperation::Signal(signal),
                ));
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
            // Only the shared path moves the ready counter.
            let ready = if ownership == RingOwnership::Shared {
                10
            } else {
                0
            };
            assert_eq!(header_words(&ring), [10, ready, 10, 10]);
        }
    }

    #[test]
    fn a_batch_is_published_at_once_and_must_fit_the_ring() {
        for ownership in [RingOwnership::Shared, RingOwnership::SoleOwner] {
            let ring = HostRing::allocate(4).unwrap();
            let producer = RingProducer::with_ownership(&ring, ownership);
            let mut consumer = RingConsumer::new(&ring);
            let mut recorder = Recorder::default();
            let batch: Vec<_> = (0..3)
                .map(|index| ProducerCommand::new(index, index == 2, put(u64::from(index))))
                .collect();
            assert_eq!(producer.submit_batch(&batch).unwrap(), 0..3);
            assert_eq!(ring.load(RingWord::ProducerHead, Ordering::Acquire), 3);
            assert_eq!(consumer.poll_batch(&mut recorder, 10).unwrap(), 3);
            assert_eq!(ring.load(RingWord::CompletionCounter, Ordering::Acquire), 3);
            // The batch wraps around: tickets 3..7 use slots 3, 0, 1, 2.
            let full: Vec<_> = (0..4u64)
                .map(|index| ProducerCommand::new(7, false, put(10 + index)))
                .collect();
            assert_eq!(producer.submit_batch(&full).unwrap(), 3..7);
            assert_eq!(consumer.poll_batch(&mut recorder, 10).unwrap(), 4);
            for (ticket, command) in recorder.executed.iter().enumerate() {
                let expected = if ticket < 3 {
                    batch[ticket]
                } else {
                    full[ticket - 3]
                };
                assert_eq!(*command, expected.with_ticket(ticket as u64));
            }

            let error = producer.submit_batch(&[full[0]; 5]).unwrap_err();
            assert!(
                matches!(
                    error,
                    ProxyRingError::BatchTooLarge {
                        commands: 5,
                        capacity_entries: 4
                    }
                ),
                "{error}"
            );
            assert!(error.to_string().contains("at most 4"), "{error}");
            assert_eq!(producer.submit_batch(&[]).unwrap(), 7..7);
            // Neither touched the ring.
            assert_eq!(header_words(&ring)[0], 7);
            assert_eq!(header_words(&ring)[2], 7);
        }
    }

    #[test]
    fn a_reserved_but_unpublished_ticket_is_empty_and_an_early_head_is_pending() {
        let ring = HostRing::allocate(4).unwrap();
        ring.fetch_add(RingWord::ProducerReservationCounter, 1, Ordering::Relaxed);
        let mut consumer = RingConsumer::new(&ring);
        assert_eq!(
            consumer.poll(&mut Recorder::default()).unwrap(),
            PollOutcome::Empty
        );
        // A head raised over an entry that is not there: the consumer waits for it.
        ring.store(RingWord::ProducerHead, 1, Ordering::Release);
        assert_eq!(
            consumer.poll(&mut Recorder::default()).unwrap(),
            PollOutcome::Pending { ticket: 0 }
        );
        // An entry written but not covered by the head is not executed either.
        let ring = HostRing::allocate(4).unwrap();
        let producer = RingProducer::new(&ring);
        producer.submit(ProducerCommand::new(0, false, ProxyOperation::Nop));
        ring.fetch_add(RingWord::ProducerReservationCounter, 1, Ordering::Relaxed);
        let words = entry_words(
            &ProducerCommand::new(0, false, ProxyOperation::Nop)
                .with_ticket(1)
                .encode(),
        );
        for (word_index, word) in words.into_iter().enumerate() {
            ring.store(
                RingWord::EntryWord {
                    slot: 1,
                    word_index,
                },
                word,
                Ordering::Relaxed,
            );
        }
        let mut consumer = RingConsumer::new(&ring);
        let mut recorder = Recorder::default();
        assert_eq!(consumer.poll_batch(&mut recorder, 10).unwrap(), 1);
        assert_eq!(
            consumer.poll(&mut recorder).unwrap(),
            PollOutcome::Empty,
            "ticket 1 is written but not published"
        );
    }

    #[test]
    #[should_panic(expected = "another producer uses the ring")]
    fn a_sole_owner_refuses_a_ring_another_producer_reserved_on() {
        let ring = HostRing::allocate(4).unwrap();
        ring.fetch_add(RingWord::ProducerReservationCounter, 1, Ordering::Relaxed);
        RingProducer::sole_owner(&ring).submit(ProducerCommand::new(0, false, ProxyOperation::Nop));
    }

    #[test]
    fn corrupt_sequences_bad_entries_and_executor_failures_stop_the_ring() {
        let ring = HostRing::allocate(4).unwrap();
        ring.store(
            RingWord::EntryWord {
                slot: 0,
                word_index: 0,
            },
            7,
            Ordering::Relaxed,
        );
        ring.store(RingWord::ProducerHead, 1, Ordering::Release);
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
        producer.submit(ProducerCommand::new(99, false, ProxyOperation::Nop));
        let mut consumer = RingConsumer::new(&ring);
        let error = consumer.poll(&mut Recorder::default()).unwrap_err();
        assert!(error.to_string().contains("refused"), "{error}");

        let ring = HostRing::allocate(4).unwrap();
        // Opcode 9 in word 1 (bytes 8..10), then the sequence, then the head.
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
            Ordering::Relaxed,
        );
        ring.store(RingWord::ProducerHead, 1, Ordering::Release);
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
        assert_eq!(header_words(&ring), [0; 4]);
        RingProducer::new(&ring).submit(ProducerCommand::new(3, true, ProxyOperation::Drain));
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
