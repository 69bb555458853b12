//! The proxy ring's memory orderings under `loom`, which, unlike shuttle, models the C11 weak
//! memory model (a relaxed or acquire load may return an older store). Producers write their
//! entries with relaxed stores; what publishes them is the release of `producer_head`, paired
//! with the consumer's acquire of it (and, on a shared ring, the release/acquire chain through
//! `producer_ready_counter`).
//!
//! Scenarios, each checked for the exact payload of every command the consumer executes and,
//! for the correct protocol, that the consumer never sees the head before the entry it covers:
//! - the sole owner posts two commands through a 1-slot ring, so the second waits on a full
//!   ring and reuses the slot; a variant that stores the head relaxed must be caught;
//! - two shared-ring producers post one command each through a 2-slot ring, publishing in ticket
//!   order; variants that raise the head with a relaxed atomic max, or advance the ready counter
//!   with a relaxed store (so the later producer's head raise does not carry the earlier
//!   producer's entry), must be caught.
//!
//! Loom explores exhaustively (up to a preemption bound), so the scenarios are kept tiny; the
//! interleaving-heavy scenarios (several producers, batches, several laps) are in
//! `tests/proxy_ring_model.rs` under shuttle.

use std::sync::atomic::Ordering;

use aboleth_abi::proxy::{ProxyCommand, ProxyOperation, ProxyPut, slot_index};
use aboleth_runtime::proxy_ring::{
    CommandExecutor, ENTRY_WORDS, Execution, PollOutcome, ProducerCommand, RingConsumer,
    RingMemory, RingProducer, RingWord, entry_words, ring_word_count,
};
use loom::sync::Arc;
use loom::sync::atomic::AtomicU64;

struct LoomRing {
    words: Vec<AtomicU64>,
    capacity_entries: u32,
}

impl LoomRing {
    fn new(capacity_entries: u32) -> Self {
        Self {
            words: (0..ring_word_count(capacity_entries))
                .map(|_| AtomicU64::new(0))
                .collect(),
            capacity_entries,
        }
    }
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
    fn fetch_max(&self, word: RingWord, value: u64, ordering: Ordering) -> u64 {
        self.words[word.word_offset()].fetch_max(value, ordering)
    }
    fn wait_hint(&self) {
        loom::thread::yield_now();
    }
}

fn command(identity: u64) -> ProducerCommand {
    ProducerCommand::new(
        identity as u32,
        false,
        ProxyOperation::Put(ProxyPut {
            source_address: identity,
            source_key: identity as u32,
            destination_region_index: identity as u32,
            destination_offset_bytes: identity,
            length_bytes: identity,
        }),
    )
}

#[derive(Default)]
struct Recorder(Vec<ProxyCommand>);

#[derive(Debug, thiserror::Error)]
#[error("never fails")]
struct Never;

impl CommandExecutor for Recorder {
    type Error = Never;
    fn execute(&mut self, command: &ProxyCommand) -> Result<Execution, Never> {
        self.0.push(*command);
        Ok(Execution::Complete)
    }
}

/// How the producers publish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    /// `RingProducer`.
    Correct,
    /// The head is stored (sole owner) or raised (shared) with relaxed ordering.
    RelaxedHead,
    /// Shared ring: the ready counter is advanced with a relaxed store.
    RelaxedReadyCounter,
}

/// A producer with `RingProducer`'s steps and the variant's orderings: `shared` selects the
/// atomic reservation and the in-order publication.
fn submit_broken(ring: &LoomRing, variant: Variant, shared: bool, command: ProducerCommand) {
    let ticket = if shared {
        ring.fetch_add(RingWord::ProducerReservationCounter, 1, Ordering::Relaxed)
    } else {
        let ticket = ring.load(RingWord::ProducerReservationCounter, Ordering::Relaxed);
        ring.store(
            RingWord::ProducerReservationCounter,
            ticket + 1,
            Ordering::Relaxed,
        );
        ticket
    };
    let capacity = u64::from(ring.capacity_entries);
    while ticket + 1 > ring.load(RingWord::ConsumerHead, Ordering::Acquire) + capacity {
        ring.wait_hint();
    }
    let words = entry_words(&command.with_ticket(ticket).encode());
    let slot = slot_index(ticket, ring.capacity_entries);
    for word_index in (1..ENTRY_WORDS).chain([0]) {
        ring.store(
            RingWord::EntryWord { slot, word_index },
            words[word_index],
            Ordering::Relaxed,
        );
    }
    let head_ordering = if variant == Variant::RelaxedHead {
        Ordering::Relaxed
    } else {
        Ordering::Release
    };
    if shared {
        while ring.load(RingWord::ProducerReadyCounter, Ordering::Acquire) != ticket {
            ring.wait_hint();
        }
        let ready_ordering = if variant == Variant::RelaxedReadyCounter {
            Ordering::Relaxed
        } else {
            Ordering::Release
        };
        ring.store(RingWord::ProducerReadyCounter, ticket + 1, ready_ordering);
        ring.fetch_max(RingWord::ProducerHead, ticket + 1, head_ordering);
    } else {
        ring.store(RingWord::ProducerHead, ticket + 1, head_ordering);
    }
}

/// Polls until `count` commands ran, spinning on `Empty` and `Pending`, or, with
/// `maximum_polls`, until that many polls were made; returns how many polls found the head
/// ahead of its entry.
fn consume(
    consumer: &mut RingConsumer<&LoomRing>,
    recorder: &mut Recorder,
    count: usize,
    maximum_polls: Option<usize>,
) -> usize {
    let mut pending_polls = 0;
    let mut polls = 0;
    while consumer.next_ticket() < count as u64
        && maximum_polls.is_none_or(|maximum| polls < maximum)
    {
        polls += 1;
        match consumer.poll(recorder).unwrap() {
            PollOutcome::Executed { .. } => {}
            PollOutcome::Empty => loom::thread::yield_now(),
            PollOutcome::Pending { .. } => {
                pending_polls += 1;
                loom::thread::yield_now();
            }
        }
    }
    pending_polls
}

/// Checks every executed command against the one its producer posted, identified by its peer
/// rank (which producer gets which ticket varies), and, for the correct protocol, that the head
/// was never seen ahead of its entry.
fn check_payloads(executed: &[ProxyCommand], pending_polls: usize, variant: Variant) {
    for (ticket, command) in executed.iter().enumerate() {
        let identity = u64::from(command.peer_rank);
        assert_eq!(
            *command,
            crate::command(identity).with_ticket(ticket as u64),
            "ticket {ticket} was read with a stale payload"
        );
    }
    if variant == Variant::Correct {
        assert_eq!(
            pending_polls, 0,
            "the head's acquire must make its entries visible"
        );
    }
}

/// The sole owner: two commands through one slot.
fn sole_owner_scenario(variant: Variant) {
    let ring = Arc::new(LoomRing::new(1));
    let producer_ring = Arc::clone(&ring);
    let producer = loom::thread::spawn(move || {
        for identity in [11, 22] {
            if variant == Variant::Correct {
                RingProducer::sole_owner(&*producer_ring).submit(command(identity));
            } else {
                submit_broken(&producer_ring, variant, false, command(identity));
            }
        }
    });
    let mut consumer = RingConsumer::new(&*ring);
    let mut recorder = Recorder::default();
    let pending_polls = consume(&mut consumer, &mut recorder, 2, None);
    producer.join().unwrap();
    let executed = recorder.0;
    // One producer: the identities are known in ticket order.
    assert!(
        executed
            .iter()
            .zip([11, 22])
            .all(|(command, identity)| command.peer_rank == identity),
        "a command was read with a stale payload: {executed:?}"
    );
    check_payloads(&executed, pending_polls, variant);
}

/// Polls the consumer makes while the shared ring's producers run.
const CONCURRENT_POLLS: usize = 3;

/// Two shared-ring producers, one command each, through two slots.
fn shared_scenario(variant: Variant) {
    let ring = Arc::new(LoomRing::new(2));
    let producers: Vec<_> = [11, 22]
        .into_iter()
        .map(|identity| {
            let producer_ring = Arc::clone(&ring);
            loom::thread::spawn(move || {
                if variant == Variant::Correct {
                    RingProducer::new(&*producer_ring).submit(command(identity));
                } else {
                    submit_broken(&producer_ring, variant, true, command(identity));
                }
            })
        })
        .collect();
    // A few polls while the producers run (a consumer spinning on two spinning producers
    // would exceed loom's branch budget), then the rest after they are done.
    let mut consumer = RingConsumer::new(&*ring);
    let mut recorder = Recorder::default();
    let pending_polls = consume(&mut consumer, &mut recorder, 2, Some(CONCURRENT_POLLS));
    for producer in producers {
        producer.join().unwrap();
    }
    consume(&mut consumer, &mut recorder, 2, None);
    let executed = recorder.0;
    let mut identities: Vec<_> = executed.iter().map(|command| command.peer_rank).collect();
    identities.sort_unstable();
    assert_eq!(
        identities,
        [11, 22],
        "a command was read with a stale payload: {executed:?}"
    );
    check_payloads(&executed, pending_polls, variant);
}

/// Explores `scenario` up to `preemption_bound` preemptions, counting executions in
/// `executions`; panics on the first failing execution.
fn model_counting(
    preemption_bound: usize,
    executions: &std::sync::Arc<std::sync::atomic::AtomicUsize>,
    scenario: impl Fn() + Sync + Send + 'static,
) {
    let executions = std::sync::Arc::clone(executions);
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(preemption_bound);
    builder.check(move || {
        executions.fetch_add(1, Ordering::Relaxed);
        scenario();
    });
}

/// Explores `scenario`, which must pass every execution.
fn model(preemption_bound: usize, scenario: impl Fn() + Sync + Send + 'static) {
    let executions = std::sync::Arc::default();
    model_counting(preemption_bound, &executions, scenario);
    println!("passed {} executions", executions.load(Ordering::Relaxed));
}

/// Whether loom finds a stale payload in the scenario (it panics on the first failing
/// execution; the message tells what failed).
fn loom_finds_stale_payload(preemption_bound: usize, scenario: fn()) -> bool {
    let executions = std::sync::Arc::default();
    let failure =
        std::panic::catch_unwind(|| model_counting(preemption_bound, &executions, scenario));
    let Err(failure) = failure else {
        return false;
    };
    let message = failure
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| {
            failure
                .downcast_ref::<&str>()
                .map(|text| (*text).to_owned())
        })
        .unwrap_or_default();
    assert!(
        message.contains("stale payload"),
        "loom failed for another reason: {message}"
    );
    println!(
        "caught after {} executions",
        executions.load(Ordering::Relaxed)
    );
    true
}

#[test]
fn a_release_of_the_head_publishes_the_sole_owners_entries() {
    // Bound 8: 228 executions, every one (a higher bound adds none), in about 0.02 s.
    model(8, || sole_owner_scenario(Variant::Correct));
}

#[test]
fn loom_catches_a_sole_owner_storing_the_head_relaxed() {
    assert!(loom_finds_stale_payload(3, || sole_owner_scenario(
        Variant::RelaxedHead
    )));
}

#[test]
fn in_order_publication_carries_earlier_entries_on_a_shared_ring() {
    // Bound 3: about 13,000 executions in about 1 s; both broken variants below are found
    // within bound 2 (about 1,700 executions).
    model(3, || shared_scenario(Variant::Correct));
}

#[test]
fn loom_catches_a_shared_producer_raising_the_head_relaxed() {
    assert!(loom_finds_stale_payload(2, || shared_scenario(
        Variant::RelaxedHead
    )));
}

#[test]
fn loom_catches_a_ready_counter_advanced_without_release() {
    assert!(loom_finds_stale_payload(2, || shared_scenario(
        Variant::RelaxedReadyCounter
    )));
}
