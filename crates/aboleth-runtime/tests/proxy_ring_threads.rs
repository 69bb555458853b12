//! The proxy ring over real host memory ([`HostRing`]) and real threads: several shared-ring
//! producers post thousands of commands, in batches of 1 to 4, through a small ring while one
//! consumer executes them (and, separately, a sole owner does the same), checking the same
//! properties as the model-checking test (exactly once, ticket order, consecutive tickets per
//! batch, the producer's payload, completion never ahead of execution, the head never seen
//! ahead of its entries). This exercises the real atomics and orderings on this machine, which
//! the shuttle model checker (sequentially consistent) does not.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use aboleth_abi::proxy::{ProxyCommand, ProxyOperation, ProxyPut};
use aboleth_runtime::proxy_ring::{
    CommandExecutor, Execution, HostRing, PollOutcome, ProducerCommand, RingConsumer, RingMemory,
    RingOwnership, RingProducer, RingWord,
};

const PRODUCERS: u32 = 4;
const COMMANDS_PER_PRODUCER: u32 = 5_000;
const CAPACITY_ENTRIES: u32 = 4;

fn command_of(producer: u32, index: u32) -> ProducerCommand {
    let identity = (u64::from(producer) << 32) | u64::from(index);
    let operation = ProxyOperation::Put(ProxyPut {
        source_address: identity,
        source_key: producer,
        destination_region_index: index,
        destination_offset_bytes: identity.rotate_left(17),
        length_bytes: identity ^ 0x5555,
    });
    ProducerCommand::new(producer, index.is_multiple_of(7), operation)
}

/// The size of a producer's batch starting at command `index`: 1 to 4, varying.
fn batch_size(producer: u32, index: u32) -> u32 {
    ((index / 3 + producer) % CAPACITY_ENTRIES + 1).min(COMMANDS_PER_PRODUCER - index)
}

struct Checker {
    ring: Arc<HostRing>,
    executed: Vec<ProxyCommand>,
    executed_count: Arc<AtomicU64>,
}

#[derive(Debug, thiserror::Error)]
#[error("never fails")]
struct Never;

impl CommandExecutor for Checker {
    type Error = Never;
    fn execute(&mut self, command: &ProxyCommand) -> Result<Execution, Never> {
        assert_eq!(command.ticket, self.executed.len() as u64);
        assert!(
            self.ring
                .load(RingWord::CompletionCounter, Ordering::Acquire)
                <= command.ticket
        );
        self.executed.push(*command);
        self.executed_count.fetch_add(1, Ordering::Release);
        Ok(Execution::Complete)
    }
}

#[test]
fn shared_ring_producers_and_a_consumer_on_real_threads_agree() {
    run(RingOwnership::Shared, PRODUCERS);
}

#[test]
fn a_sole_owner_and_a_consumer_on_real_threads_agree() {
    run(RingOwnership::SoleOwner, 1);
}

fn run(ownership: RingOwnership, producers: u32) {
    let ring = Arc::new(HostRing::allocate(CAPACITY_ENTRIES).unwrap());
    let executed_count = Arc::new(AtomicU64::new(0));
    let submitted = Arc::new(Mutex::new(Vec::new()));
    let total = u64::from(producers * COMMANDS_PER_PRODUCER);

    let consumer_thread = {
        let ring = Arc::clone(&ring);
        let executed_count = Arc::clone(&executed_count);
        std::thread::spawn(move || {
            let mut checker = Checker {
                ring: Arc::clone(&ring),
                executed: Vec::new(),
                executed_count,
            };
            let mut consumer = RingConsumer::new(ring);
            while consumer.next_ticket() < total {
                match consumer.poll(&mut checker).unwrap() {
                    PollOutcome::Executed { .. } => {}
                    PollOutcome::Empty => std::thread::yield_now(),
                    PollOutcome::Pending { ticket } => {
                        panic!("producer_head covers ticket {ticket} before its entry is visible")
                    }
                }
            }
            checker.executed
        })
    };
    let producer_threads: Vec<_> = (0..producers)
        .map(|producer| {
            let ring = Arc::clone(&ring);
            let executed_count = Arc::clone(&executed_count);
            let submitted = Arc::clone(&submitted);
            std::thread::spawn(move || {
                let host_producer = RingProducer::with_ownership(Arc::clone(&ring), ownership);
                let mut tickets = Vec::new();
                let mut last_completion = 0;
                let mut index = 0;
                while index < COMMANDS_PER_PRODUCER {
                    let size = batch_size(producer, index);
                    let batch: Vec<_> = (index..index + size)
                        .map(|index| command_of(producer, index))
                        .collect();
                    let batch_tickets = if size == 1 {
                        let ticket = host_producer.submit(batch[0]);
                        ticket..ticket + 1
                    } else {
                        host_producer.submit_batch(&batch).unwrap()
                    };
                    assert_eq!(batch_tickets.end - batch_tickets.start, u64::from(size));
                    tickets.extend(
                        batch_tickets
                            .zip(index..)
                            .map(|(ticket, index)| (ticket, producer, index)),
                    );
                    index += size;
                    // Acquire on the completion counter, then the count of executed commands:
                    // the consumer published the former after the latter grew.
                    let completion = ring.load(RingWord::CompletionCounter, Ordering::Acquire);
                    let executed = executed_count.load(Ordering::Acquire);
                    assert!(completion >= last_completion && completion <= executed);
                    last_completion = completion;
                }
                submitted.lock().unwrap().extend(tickets);
            })
        })
        .collect();
    for thread in producer_threads {
        thread.join().unwrap();
    }
    let executed = consumer_thread.join().unwrap();
    let submitted = submitted.lock().unwrap();
    assert_eq!(executed.len() as u64, total);
    assert_eq!(submitted.len() as u64, total);
    for &(ticket, producer, index) in submitted.iter() {
        assert_eq!(
            executed[ticket as usize],
            command_of(producer, index).with_ticket(ticket)
        );
    }
    for word in [
        RingWord::ConsumerHead,
        RingWord::ProducerHead,
        RingWord::ProducerReservationCounter,
    ] {
        assert_eq!(ring.load(word, Ordering::Acquire), total, "{word:?}");
    }
}
