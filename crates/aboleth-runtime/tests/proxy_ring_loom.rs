//! The proxy ring's memory orderings under `loom`, which, unlike shuttle, models the C11 weak
//! memory model (a relaxed or acquire load may return an older store). Scenario: one producer,
//! one consumer, a 1-slot ring and two commands, so the second command waits on a full ring and
//! reuses the slot. Checked: the consumer sees each command's exact payload. A producer that
//! publishes the sequence with a relaxed store (no release) must be caught.
//!
//! Loom explores exhaustively (up to a preemption bound), so the scenario is kept tiny; the
//! interleaving-heavy scenarios (several producers, several laps) are in
//! `tests/proxy_ring_model.rs` under shuttle.

use std::sync::atomic::Ordering;

use aboleth_abi::proxy::{ProxyCommand, ProxyOperation, ProxyPut, slot_index};
use aboleth_runtime::proxy_ring::{
    CommandExecutor, PollOutcome, RingConsumer, RingMemory, RingProducer, RingWord, entry_words,
    ring_word_count,
};
use loom::sync::Arc;
use loom::sync::atomic::AtomicU64;

struct LoomRing {
    words: Vec<AtomicU64>,
    capacity_entries: u32,
}

impl RingMemory for LoomRing {
    fn capacity_entries(&self) -> u32 {
        self.capacity_entries
    }
    fn load(&self, word: RingWord, ordering: Ordering) -> u64 {
        self.words[word.word_offset()].load(ordering)
    }
    fn store(&self, word: RingWord, value: u64, ordering: Ordering) {
        self.words[word.word_offset()].store(value, ordering);
    }
    fn fetch_add(&self, word: RingWord, value: u64, ordering: Ordering) -> u64 {
        self.words[word.word_offset()].fetch_add(value, ordering)
    }
    fn wait_hint(&self) {
        loom::thread::yield_now();
    }
}

fn put(identity: u64) -> ProxyOperation {
    ProxyOperation::Put(ProxyPut {
        source_address: identity,
        source_key: identity as u32,
        destination_region_index: identity as u32,
        destination_offset_bytes: identity,
        length_bytes: identity,
    })
}

struct Recorder(Vec<ProxyCommand>);

#[derive(Debug, thiserror::Error)]
#[error("never fails")]
struct Never;

impl CommandExecutor for Recorder {
    type Error = Never;
    fn execute(&mut self, command: &ProxyCommand) -> Result<(), Never> {
        self.0.push(*command);
        Ok(())
    }
}

/// The broken producer: every store relaxed, so nothing orders the payload before the sequence.
fn submit_without_release(ring: &LoomRing, operation: ProxyOperation) {
    let ticket = ring.fetch_add(RingWord::ProducerReservationCounter, 1, Ordering::Relaxed);
    // Capacity 1: the slot is free once the consumer has passed every earlier ticket.
    while ticket > ring.load(RingWord::ConsumerHead, Ordering::Acquire) {
        ring.wait_hint();
    }
    let words = entry_words(
        &ProxyCommand {
            ticket,
            peer_rank: 0,
            completion_requested: false,
            operation,
        }
        .encode(),
    );
    let slot = slot_index(ticket, ring.capacity_entries);
    for word_index in (1..words.len()).chain([0]) {
        ring.store(
            RingWord::EntryWord { slot, word_index },
            words[word_index],
            Ordering::Relaxed,
        );
    }
}

fn scenario(broken: bool) {
    let ring = Arc::new(LoomRing {
        words: (0..ring_word_count(1)).map(|_| AtomicU64::new(0)).collect(),
        capacity_entries: 1,
    });
    let producer_ring = Arc::clone(&ring);
    let producer = loom::thread::spawn(move || {
        for identity in [11, 22] {
            if broken {
                submit_without_release(&producer_ring, put(identity));
            } else {
                RingProducer::new(&*producer_ring).submit(0, false, put(identity));
            }
        }
    });
    let mut consumer = RingConsumer::new(&*ring);
    let mut recorder = Recorder(Vec::new());
    while consumer.next_ticket() < 2 {
        if !matches!(
            consumer.poll(&mut recorder).unwrap(),
            PollOutcome::Executed { .. }
        ) {
            loom::thread::yield_now();
        }
    }
    producer.join().unwrap();
    for (ticket, identity) in [(0, 11), (1, 22)] {
        assert_eq!(
            recorder.0[ticket].operation,
            put(identity),
            "ticket {ticket} was read with a stale payload"
        );
    }
}

fn model(broken: bool) {
    let mut builder = loom::model::Builder::new();
    // Bound 3 explores 712 schedules in about 0.1 s; every preemption pattern up to 3.
    builder.preemption_bound = Some(3);
    builder.check(move || scenario(broken));
}

#[test]
fn release_and_acquire_order_the_payload() {
    model(false);
}

#[test]
fn loom_catches_a_sequence_published_without_release() {
    let failed = std::panic::catch_unwind(|| model(true)).is_err();
    assert!(failed, "loom should find a stale payload read");
}
