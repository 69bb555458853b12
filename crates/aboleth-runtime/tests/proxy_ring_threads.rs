//! The proxy ring over real host memory ([`HostRing`]) and real threads: several producers
//! post thousands of commands through a small ring while one consumer executes them, checking
//! the same properties as the model-checking test (exactly once, ticket order, the producer's
//! payload, completion never ahead of execution). This exercises the real atomics and
//! orderings on this machine, which the model checker (sequentially consistent) does not.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use aboleth_abi::proxy::{ProxyCommand, ProxyOperation, ProxyPut};
use aboleth_runtime::proxy_ring::{
    CommandExecutor, HostRing, PollOutcome, RingConsumer, RingMemory, RingProducer, RingWord,
};

const PRODUCERS: u32 = 4;
const COMMANDS_PER_PRODUCER: u32 = 5_000;
const CAPACITY_ENTRIES: u32 = 4;

fn command_of(producer: u32, index: u32) -> (bool, ProxyOperation) {
    let identity = (u64::from(producer) << 32) | u64::from(index);
    let operation = ProxyOperation::Put(ProxyPut {
        source_address: identity,
        source_key: producer,
        destination_region_index: index,
        destination_offset_bytes: identity.rotate_left(17),
        length_bytes: identity ^ 0x5555,
    });
    (index.is_multiple_of(7), operation)
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
    fn execute(&mut self, command: &ProxyCommand) -> Result<(), Never> {
        assert_eq!(command.ticket, self.executed.len() as u64);
        assert!(
            self.ring
                .load(RingWord::CompletionCounter, Ordering::Acquire)
                <= command.ticket
        );
        self.executed.push(*command);
        self.executed_count.fetch_add(1, Ordering::Release);
        Ok(())
    }
}

#[test]
fn producers_and_a_consumer_on_real_threads_agree() {
    let ring = Arc::new(HostRing::allocate(CAPACITY_ENTRIES).unwrap());
    let executed_count = Arc::new(AtomicU64::new(0));
    let submitted = Arc::new(Mutex::new(Vec::new()));
    let total = u64::from(PRODUCERS * COMMANDS_PER_PRODUCER);

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
                if !matches!(
                    consumer.poll(&mut checker).unwrap(),
                    PollOutcome::Executed { .. }
                ) {
                    std::thread::yield_now();
                }
            }
            checker.executed
        })
    };
    let producer_threads: Vec<_> = (0..PRODUCERS)
        .map(|producer| {
            let ring = Arc::clone(&ring);
            let executed_count = Arc::clone(&executed_count);
            let submitted = Arc::clone(&submitted);
            std::thread::spawn(move || {
                let host_producer = RingProducer::new(Arc::clone(&ring));
                let mut tickets = Vec::new();
                let mut last_completion = 0;
                for index in 0..COMMANDS_PER_PRODUCER {
                    let (completion_requested, operation) = command_of(producer, index);
                    tickets.push((
                        host_producer.submit(producer, completion_requested, operation),
                        producer,
                        index,
                    ));
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
        let (completion_requested, operation) = command_of(producer, index);
        assert_eq!(
            executed[ticket as usize],
            ProxyCommand {
                ticket,
                peer_rank: producer,
                completion_requested,
                operation
            }
        );
    }
    assert_eq!(ring.load(RingWord::ConsumerHead, Ordering::Acquire), total);
}
