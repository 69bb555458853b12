//! The proxy ring protocol under the `shuttle` model checker: several producer threads posting
//! batches of 1 to 3 commands, and one consumer, on rings of 2 and 4 slots (so commands wrap
//! around and producers wait on a full ring and on each other's publication), checked over
//! thousands of schedules chosen by shuttle's PCT and random schedulers with fixed seeds, for
//! shared rings and for a ring with a sole owner. Checked in every schedule: every command runs
//! exactly once, in ticket order, with the payload its producer wrote; a batch gets consecutive
//! tickets and a producer's batches run in the order it posted them; `consumer_head`,
//! `completion_counter`, `producer_head` and the producer counters never go backwards, and
//! `completion_counter` is never ahead of execution; a batch larger than the ring is refused.
//! Each scenario also runs with an executor that defers completions (it returns
//! `Execution::Enqueued` and lets one more command's effects land at each
//! `completions_reached`), where `completion_counter` must never be ahead of the effects
//! landed, and every requested completion is published once the consumer waits for them.
//!
//! Also checked: the consumer never finds `producer_head` above a ticket whose entry is not
//! written ([`PollOutcome::Pending`]). The consumer would wait for the entry (it checks the
//! sequence too), so in a sequentially consistent model publishing too early does no visible
//! harm; but it is the protocol's central rule (the head publishes only written entries, and the
//! consumer trusts the head's acquire for the payload on weakly ordered memory), so the checker
//! treats a `Pending` as a violation. Two deliberately broken producers must be caught by it:
//! one that publishes the head before writing its entries, and a shared-ring one that raises the
//! head with its atomic max without waiting its turn on `producer_ready_counter`.
//!
//! Why shuttle here: the properties are about interleavings of many steps (three producers, two
//! batches each, several laps of a small ring, spin-waits on both sides); loom explores
//! exhaustively and its state space explodes on such scenarios, while shuttle's PCT scheduler
//! finds ordering bugs of small depth with probabilistic guarantees, in well under a millisecond
//! per schedule. What shuttle does not model is weak memory: it runs every atomic as
//! sequentially consistent. The release/acquire choices of `proxy_ring` are therefore checked
//! separately, by loom (which models the C11 memory model) on tiny scenarios in
//! `tests/proxy_ring_loom.rs`, and exercised on real threads in `tests/proxy_ring_threads.rs`.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aboleth_abi::proxy::{
    ProxyCommand, ProxyOperation, ProxyPut, ProxySignal, SignalOperation, slot_index,
};
use aboleth_runtime::proxy_ring::{
    CommandExecutor, ENTRY_WORDS, Execution, PollOutcome, ProducerCommand, ProxyRingError,
    RingConsumer, RingMemory, RingOwnership, RingProducer, RingWord, entry_words, ring_word_count,
};
use shuttle::scheduler::{PctScheduler, RandomScheduler, Scheduler};
use shuttle::sync::Mutex;
use shuttle::sync::atomic::AtomicU64;
use shuttle::{Config, FailurePersistence, Runner};

/// Ring memory made of shuttle atomics: every access is a scheduling point.
struct ModelRing {
    words: Vec<AtomicU64>,
    capacity_entries: u32,
}

impl ModelRing {
    fn new(capacity_entries: u32) -> Self {
        let words: Vec<AtomicU64> = (0..ring_word_count(capacity_entries))
            .map(|_| AtomicU64::new(0))
            .collect();
        words[RingWord::CapacityEntries.word_offset()]
            .store(u64::from(capacity_entries), Ordering::SeqCst);
        Self {
            words,
            capacity_entries,
        }
    }
}

impl RingMemory for ModelRing {
    fn capacity_entries(&self) -> u32 {
        self.capacity_entries
    }
    fn load(&self, word: RingWord, ordering: Ordering) -> u64 {
        self.words[word.word_offset()].load(ordering)
    }
    fn store(&self, word: RingWord, value: u64, ordering: Ordering) {
        // A swap, so that the counters' monotonicity is checked atomically with the store.
        let previous = self.words[word.word_offset()].swap(value, ordering);
        if !matches!(word, RingWord::EntryWord { .. }) {
            assert!(
                value >= previous,
                "{word:?} went back from {previous} to {value}"
            );
        }
    }
    fn fetch_add(&self, word: RingWord, value: u64, ordering: Ordering) -> u64 {
        self.words[word.word_offset()].fetch_add(value, ordering)
    }
    fn fetch_max(&self, word: RingWord, value: u64, ordering: Ordering) -> u64 {
        self.words[word.word_offset()].fetch_max(value, ordering)
    }
    fn wait_hint(&self) {
        shuttle::thread::yield_now();
    }
}

/// How the producers behave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    /// `RingProducer::submit_batch`.
    Correct,
    /// Publishes the head (its ownership's way) before writing its entries.
    HeadBeforeEntries,
    /// Shared ring: raises the head with the atomic max right after writing its entries,
    /// without waiting for (or advancing) `producer_ready_counter`.
    UnorderedPublication,
}

#[derive(Clone, Copy, Debug)]
struct Scenario {
    variant: Variant,
    ownership: RingOwnership,
    /// Per producer, the sizes of the batches it posts, in order.
    batches: &'static [&'static [u32]],
    capacity_entries: u32,
    /// The executor returns `Execution::Enqueued` and reports completions later.
    deferred_completions: bool,
}

impl Scenario {
    fn total_commands(&self) -> u64 {
        self.batches
            .iter()
            .flat_map(|sizes| sizes.iter())
            .map(|&size| u64::from(size))
            .sum()
    }
}

/// The command producer `producer` posts as its `index`-th: every field identifies the pair, so
/// a payload from the wrong slot or lap cannot pass for the right one.
fn command_of(producer: u32, index: u32) -> ProducerCommand {
    let identity = (u64::from(producer) << 32) | u64::from(index);
    let put = ProxyPut {
        source_address: 0x1000_0000 + identity,
        source_key: index + 1,
        destination_region_index: producer + 1,
        destination_offset_bytes: identity * 64,
        length_bytes: u64::from(index) + 8,
    };
    let signal = ProxySignal {
        region_index: producer + 2,
        offset_bytes: index * 8,
        value: identity,
        operation: if index.is_multiple_of(2) {
            SignalOperation::Add
        } else {
            SignalOperation::Set
        },
    };
    let operation = match index % 3 {
        0 => ProxyOperation::Put(put),
        1 => ProxyOperation::Signal(signal),
        _ => ProxyOperation::PutSignal(put, signal),
    };
    ProducerCommand::new(producer, (producer + index).is_multiple_of(2), operation)
}

/// Checks, at each execution, ticket order and that no completion is published ahead of it.
/// Deferring, it counts a command's effects as landed only when `completions_reached` moves
/// `landed_count` past it (one command per call, all when waiting).
struct CheckingExecutor {
    ring: Arc<ModelRing>,
    executed: Vec<ProxyCommand>,
    executed_count: Arc<AtomicU64>,
    deferred: bool,
    landed_count: Arc<AtomicU64>,
}

#[derive(Debug, thiserror::Error)]
#[error("never fails")]
struct Never;

impl CommandExecutor for CheckingExecutor {
    type Error = Never;
    fn execute(&mut self, command: &ProxyCommand) -> Result<Execution, Never> {
        assert_eq!(
            command.ticket,
            self.executed.len() as u64,
            "commands must run once each, in ticket order"
        );
        let completion = self
            .ring
            .load(RingWord::CompletionCounter, Ordering::SeqCst);
        assert!(
            completion <= command.ticket,
            "completion_counter {completion} is ahead of ticket {} being executed",
            command.ticket
        );
        self.executed.push(*command);
        self.executed_count.fetch_add(1, Ordering::SeqCst);
        if self.deferred {
            Ok(Execution::Enqueued)
        } else {
            self.landed_count.fetch_add(1, Ordering::SeqCst);
            Ok(Execution::Complete)
        }
    }

    fn completions_reached(&mut self, wait: bool) -> Result<u64, Never> {
        assert!(
            wait || self.deferred,
            "polled for completions it never deferred"
        );
        let executed = self.executed.len() as u64;
        let landed = self.landed_count.load(Ordering::SeqCst);
        let landed = if wait {
            executed
        } else {
            (landed + 1).min(executed)
        };
        self.landed_count.store(landed, Ordering::SeqCst);
        Ok(landed)
    }
}

/// The broken producers: `RingProducer::submit_batch`'s steps, written out, with the variant's
/// mistake.
fn submit_batch_broken(
    ring: &ModelRing,
    variant: Variant,
    ownership: RingOwnership,
    commands: &[ProducerCommand],
) -> Range<u64> {
    let count = commands.len() as u64;
    let base = match ownership {
        RingOwnership::Shared => ring.fetch_add(
            RingWord::ProducerReservationCounter,
            count,
            Ordering::Relaxed,
        ),
        RingOwnership::SoleOwner => {
            let base = ring.load(RingWord::ProducerReservationCounter, Ordering::Relaxed);
            ring.store(
                RingWord::ProducerReservationCounter,
                base + count,
                Ordering::Relaxed,
            );
            base
        }
    };
    let end = base + count;
    let capacity = u64::from(ring.capacity_entries);
    while end > ring.load(RingWord::ConsumerHead, Ordering::Acquire) + capacity {
        ring.wait_hint();
    }
    let publish_in_order = || match ownership {
        RingOwnership::Shared => {
            while ring.load(RingWord::ProducerReadyCounter, Ordering::Acquire) != base {
                ring.wait_hint();
            }
            ring.store(RingWord::ProducerReadyCounter, end, Ordering::Release);
            ring.fetch_max(RingWord::ProducerHead, end, Ordering::Release);
        }
        RingOwnership::SoleOwner => ring.store(RingWord::ProducerHead, end, Ordering::Release),
    };
    if variant == Variant::HeadBeforeEntries {
        publish_in_order();
    }
    for (ticket, command) in (base..end).zip(commands) {
        let words = entry_words(&command.with_ticket(ticket).encode());
        let slot = slot_index(ticket, ring.capacity_entries);
        for word_index in (1..ENTRY_WORDS).chain([0]) {
            ring.store(
                RingWord::EntryWord { slot, word_index },
                words[word_index],
                Ordering::Relaxed,
            );
        }
    }
    if variant == Variant::UnorderedPublication {
        assert_eq!(ownership, RingOwnership::Shared);
        ring.fetch_max(RingWord::ProducerHead, end, Ordering::Release);
    }
    base..end
}

/// One execution of the scenario; panics on any violated property.
fn run_scenario(scenario: Scenario) {
    let ring = Arc::new(ModelRing::new(scenario.capacity_entries));
    let executed_count = Arc::new(AtomicU64::new(0));
    let landed_count = Arc::new(AtomicU64::new(0));
    // (ticket, producer, index) of every submitted command.
    let submitted = Arc::new(Mutex::new(Vec::new()));
    let total = scenario.total_commands();
    let capacity = scenario.capacity_entries as usize;

    // A batch larger than the ring is refused up front, without touching the ring.
    let oversized = vec![command_of(0, 0); capacity + 1];
    let refusal = RingProducer::with_ownership(Arc::clone(&ring), scenario.ownership)
        .submit_batch(&oversized)
        .unwrap_err();
    assert!(
        matches!(refusal, ProxyRingError::BatchTooLarge { commands, .. } if commands == capacity + 1),
        "{refusal}"
    );

    let consumer_thread = {
        let ring = Arc::clone(&ring);
        let executed_count = Arc::clone(&executed_count);
        let landed_count = Arc::clone(&landed_count);
        shuttle::thread::spawn(move || {
            let mut executor = CheckingExecutor {
                ring: Arc::clone(&ring),
                executed: Vec::new(),
                executed_count,
                deferred: scenario.deferred_completions,
                landed_count,
            };
            let mut consumer = RingConsumer::new(Arc::clone(&ring));
            while consumer.next_ticket() < total {
                match consumer.poll(&mut executor).unwrap() {
                    PollOutcome::Executed { .. } => {}
                    PollOutcome::Empty => shuttle::thread::yield_now(),
                    PollOutcome::Pending { ticket } => panic!(
                        "published too early: producer_head covers ticket {ticket} before its entry is written"
                    ),
                }
            }
            // What is still outstanding is published once its effects land.
            consumer.publish_completions(&mut executor, true).unwrap();
            assert!(!consumer.completion_outstanding());
            executor.executed
        })
    };

    let producer_threads: Vec<_> = (0u32..)
        .zip(scenario.batches)
        .map(|(producer, &batch_sizes)| {
            let ring = Arc::clone(&ring);
            let executed_count = Arc::clone(&executed_count);
            let landed_count = Arc::clone(&landed_count);
            let submitted = Arc::clone(&submitted);
            shuttle::thread::spawn(move || {
                let host_producer =
                    RingProducer::with_ownership(Arc::clone(&ring), scenario.ownership);
                let mut next_index = 0;
                let mut last_end = 0;
                let mut last_completion = 0;
                for &size in batch_sizes {
                    let commands: Vec<_> = (next_index..next_index + size)
                        .map(|index| command_of(producer, index))
                        .collect();
                    let tickets = match scenario.variant {
                        Variant::Correct => host_producer.submit_batch(&commands).unwrap(),
                        broken => {
                            submit_batch_broken(&ring, broken, scenario.ownership, &commands)
                        }
                    };
                    // Consecutive tickets, after this producer's earlier batches.
                    assert_eq!(tickets.end - tickets.start, u64::from(size));
                    assert!(tickets.start >= last_end, "batch {tickets:?} before {last_end}");
                    last_end = tickets.end;
                    submitted.lock().unwrap().extend(
                        tickets
                            .zip(next_index..)
                            .map(|(ticket, index)| (ticket, producer, index)),
                    );
                    next_index += size;
                    // Completion as a producer sees it: monotone, never ahead of execution, nor
                    // of the effects landed.
                    let completion = ring.load(RingWord::CompletionCounter, Ordering::SeqCst);
                    let landed = landed_count.load(Ordering::SeqCst);
                    let executed = executed_count.load(Ordering::SeqCst);
                    assert!(
                        completion <= landed,
                        "completion_counter {completion} is ahead of the {landed} commands whose effects landed"
                    );
                    assert!(
                        completion >= last_completion,
                        "completion_counter went back from {last_completion} to {completion}"
                    );
                    assert!(
                        completion <= executed,
                        "completion_counter {completion} is ahead of the {executed} executed commands"
                    );
                    last_completion = completion;
                }
            })
        })
        .collect();

    for thread in producer_threads {
        thread.join().unwrap();
    }
    let executed = consumer_thread.join().unwrap();

    assert_eq!(executed.len() as u64, total);
    let mut submitted = submitted.lock().unwrap().clone();
    submitted.sort_unstable();
    assert_eq!(submitted.len() as u64, total);
    let mut last_index_of_producer = vec![None; scenario.batches.len()];
    for (position, &(ticket, producer, index)) in submitted.iter().enumerate() {
        assert_eq!(
            ticket, position as u64,
            "tickets are handed out exactly once"
        );
        assert_eq!(
            executed[ticket as usize],
            command_of(producer, index).with_ticket(ticket),
            "ticket {ticket} ran with another payload than its producer wrote"
        );
        // Each producer's commands run in the order it posted them.
        let last = &mut last_index_of_producer[producer as usize];
        assert!(last.is_none_or(|last| last < index));
        *last = Some(index);
    }
    let word = |word| ring.load(word, Ordering::SeqCst);
    assert_eq!(word(RingWord::ConsumerHead), total);
    assert_eq!(word(RingWord::ProducerHead), total);
    assert_eq!(word(RingWord::ProducerReservationCounter), total);
    if scenario.ownership == RingOwnership::Shared && scenario.variant == Variant::Correct {
        assert_eq!(word(RingWord::ProducerReadyCounter), total);
    }
    let last_completion_requested = executed
        .iter()
        .filter(|command| command.completion_requested)
        .map(|command| command.ticket + 1)
        .max()
        .unwrap_or(0);
    assert_eq!(word(RingWord::CompletionCounter), last_completion_requested);
}

/// Three producers, two batches each, on a 2-slot ring: four laps.
const SHARED_2_SLOTS: Scenario = Scenario {
    variant: Variant::Correct,
    ownership: RingOwnership::Shared,
    batches: &[&[1, 2], &[2, 1], &[1, 1]],
    capacity_entries: 2,
    deferred_completions: false,
};

/// Three producers with batches of up to 3 on a 4-slot ring.
const SHARED_4_SLOTS: Scenario = Scenario {
    variant: Variant::Correct,
    ownership: RingOwnership::Shared,
    batches: &[&[3, 1], &[2, 3], &[1, 2]],
    capacity_entries: 4,
    deferred_completions: false,
};

/// The sole owner, with batches of up to the ring's size.
const SOLE_OWNER_2_SLOTS: Scenario = Scenario {
    variant: Variant::Correct,
    ownership: RingOwnership::SoleOwner,
    batches: &[&[1, 2, 1, 2, 1]],
    capacity_entries: 2,
    deferred_completions: false,
};

const SOLE_OWNER_4_SLOTS: Scenario = Scenario {
    variant: Variant::Correct,
    ownership: RingOwnership::SoleOwner,
    batches: &[&[3, 1, 2, 3]],
    capacity_entries: 4,
    deferred_completions: false,
};

fn quiet_config() -> Config {
    let mut config = Config::new();
    config.silence_warnings = true;
    config.failure_persistence = FailurePersistence::None;
    config
}

fn check(scheduler: impl Scheduler + 'static, scenario: Scenario) -> usize {
    Runner::new(scheduler, quiet_config()).run(move || run_scenario(scenario))
}

/// Like [`check`], counting the schedules started in `schedules`.
fn check_counting(
    scheduler: impl Scheduler + 'static,
    scenario: Scenario,
    schedules: &Arc<AtomicUsize>,
) -> usize {
    let schedules = Arc::clone(schedules);
    Runner::new(scheduler, quiet_config()).run(move || {
        schedules.fetch_add(1, Ordering::Relaxed);
        run_scenario(scenario);
    })
}

/// Runs the broken scenario until the checker fails (shuttle panics on the first failing
/// schedule); returns how many schedules that took and the failure's message, or `None` if
/// every schedule passed.
fn schedules_until_failure(
    scheduler: impl Scheduler + 'static,
    scenario: Scenario,
) -> Option<(usize, String)> {
    let schedules = Arc::new(AtomicUsize::new(0));
    let failure = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        check_counting(scheduler, scenario, &schedules)
    }))
    .err()?;
    let message = failure
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| {
            failure
                .downcast_ref::<&str>()
                .map(|text| (*text).to_owned())
        })
        .unwrap_or_default();
    Some((schedules.load(Ordering::Relaxed), message))
}

/// Asserts that PCT finds the broken variant within `bound` schedules, for several seeds, and
/// that what it finds is the early publication.
fn assert_caught(scenario: Scenario, seeds: &[u64], bound: usize) {
    for &seed in seeds {
        let found = schedules_until_failure(PctScheduler::new_from_seed(seed, 3, bound), scenario);
        let (schedules, message) = found.unwrap_or_else(|| {
            panic!("{scenario:?} passed {bound} schedules (seed {seed:#x}): the checker missed it")
        });
        assert!(
            message.contains("published too early"),
            "{scenario:?} failed for another reason: {message}"
        );
        println!(
            "{:?}/{:?} seed {seed:#x}: caught after {schedules} schedule(s)",
            scenario.variant, scenario.ownership
        );
    }
}

#[test]
fn the_protocol_holds_under_pct_schedules() {
    assert_eq!(
        check(PctScheduler::new_from_seed(0xab01, 3, 2000), SHARED_2_SLOTS),
        2000
    );
    assert_eq!(
        check(PctScheduler::new_from_seed(0xab02, 3, 1000), SHARED_4_SLOTS),
        1000
    );
    check(
        PctScheduler::new_from_seed(0xab03, 3, 500),
        SOLE_OWNER_2_SLOTS,
    );
    check(
        PctScheduler::new_from_seed(0xab04, 3, 500),
        SOLE_OWNER_4_SLOTS,
    );
}

#[test]
fn the_protocol_holds_under_random_schedules() {
    check(RandomScheduler::new_from_seed(0xab05, 2000), SHARED_2_SLOTS);
    check(RandomScheduler::new_from_seed(0xab06, 1000), SHARED_4_SLOTS);
    // Four producers on four slots: more concurrent publishers than slots.
    check(
        RandomScheduler::new_from_seed(0xab07, 500),
        Scenario {
            batches: &[&[1, 3], &[2, 2], &[3, 1], &[1, 1]],
            ..SHARED_4_SLOTS
        },
    );
    check(
        RandomScheduler::new_from_seed(0xab08, 500),
        SOLE_OWNER_4_SLOTS,
    );
}

#[test]
fn deferred_completions_follow_the_effects_under_pct_and_random_schedules() {
    for (seed, scenario) in [
        (0xab31, SHARED_2_SLOTS),
        (0xab32, SHARED_4_SLOTS),
        (0xab33, SOLE_OWNER_2_SLOTS),
        (0xab34, SOLE_OWNER_4_SLOTS),
    ] {
        let deferred = Scenario {
            deferred_completions: true,
            ..scenario
        };
        assert_eq!(
            check(PctScheduler::new_from_seed(seed, 3, 500), deferred),
            500
        );
        check(RandomScheduler::new_from_seed(seed + 0x100, 300), deferred);
    }
}

#[test]
fn the_checker_catches_a_head_published_before_the_entries() {
    for scenario in [SHARED_2_SLOTS, SOLE_OWNER_2_SLOTS] {
        assert_caught(
            Scenario {
                variant: Variant::HeadBeforeEntries,
                ..scenario
            },
            &[0xab10, 0xab11, 0xab12],
            200,
        );
    }
}

#[test]
fn the_checker_catches_a_shared_producer_publishing_out_of_turn() {
    for scenario in [SHARED_2_SLOTS, SHARED_4_SLOTS] {
        assert_caught(
            Scenario {
                variant: Variant::UnorderedPublication,
                ..scenario
            },
            &[0xab20, 0xab21, 0xab22],
            200,
        );
    }
}
