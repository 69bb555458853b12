//! The proxy executor and proxy thread against a fake copy engine (no GPU): commands posted by
//! host producers with the ring protocol are resolved through the region table and executed
//! in order; signals follow their data; a requested completion means the effects landed; bad
//! commands stop their ring with a reason and enqueue nothing; stopping runs what was
//! published.
//!
//! The fake engine is asynchronous on purpose: enqueued operations take effect only when it is
//! asked to wait, so a completion published before the effects would be caught.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};

use aboleth_abi::RemoteRegionDescriptor;
use aboleth_abi::proxy::{ProxyOperation, ProxyPut, ProxySignal, SignalOperation};
use aboleth_runtime::proxy_ring::{
    CommandExecutor, HostRing, ProducerCommand, RingConsumer, RingMemory, RingProducer, RingWord,
};
use aboleth_runtime::transport::proxy::{
    CopyEngine, ProxyExecutionError, ProxyExecutor, ProxyRegionTable, ProxyRingService,
    ProxyThread, ProxyThreadOptions, SharedRegionTable,
};

/// Fake "device" memory: one flat space starting at `BASE`.
const BASE: u64 = 0x1_0000;
const SPACE_BYTES: usize = 1 << 16;
/// Rank 0's source buffer, and rank `r`'s regions (as mapped on rank 0): recv and flags.
const SOURCE: u64 = BASE;
fn recv_base(rank: u32) -> u64 {
    BASE + 0x4000 + u64::from(rank) * 0x2000
}
fn flags_base(rank: u32) -> u64 {
    recv_base(rank) + 0x1000
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Operation {
    Copy {
        destination: u64,
        source: u64,
        length_bytes: u64,
    },
    Set {
        address: u64,
        value: u64,
    },
    Add {
        address: u64,
        value: u64,
    },
}

#[derive(Debug)]
struct FakeState {
    memory: Vec<u8>,
    pending: Vec<Operation>,
    log: Vec<Operation>,
    waits: usize,
    fail_copies: bool,
}

impl FakeState {
    fn new() -> Self {
        Self {
            memory: vec![0; SPACE_BYTES],
            pending: Vec::new(),
            log: Vec::new(),
            waits: 0,
            fail_copies: false,
        }
    }
    fn range(address: u64, length: u64) -> std::ops::Range<usize> {
        let start = (address - BASE) as usize;
        start..start + length as usize
    }
    fn read_u64(&self, address: u64) -> u64 {
        u64::from_le_bytes(self.memory[Self::range(address, 8)].try_into().unwrap())
    }
    fn apply(&mut self) {
        for operation in std::mem::take(&mut self.pending) {
            match operation {
                Operation::Copy {
                    destination,
                    source,
                    length_bytes,
                } => {
                    let data = self.memory[Self::range(source, length_bytes)].to_vec();
                    self.memory[Self::range(destination, length_bytes)].copy_from_slice(&data);
                }
                Operation::Set { address, value } => {
                    self.memory[Self::range(address, 8)].copy_from_slice(&value.to_le_bytes());
                }
                Operation::Add { address, value } => {
                    let sum = self.read_u64(address).wrapping_add(value);
                    self.memory[Self::range(address, 8)].copy_from_slice(&sum.to_le_bytes());
                }
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the fake copy engine refused the copy")]
struct FakeEngineError;

/// An engine over the shared fake memory, with its own log of what it was asked (one per ring).
#[derive(Clone, Debug)]
struct FakeEngine(Arc<Mutex<FakeState>>, Arc<Mutex<Vec<Operation>>>);

impl FakeEngine {
    fn new(state: &Arc<Mutex<FakeState>>) -> Self {
        Self(state.clone(), Arc::default())
    }
    fn enqueue(&self, operation: Operation) {
        self.1.lock().unwrap().push(operation.clone());
        let mut state = self.0.lock().unwrap();
        state.log.push(operation.clone());
        state.pending.push(operation);
    }
}

impl CopyEngine for FakeEngine {
    type Error = FakeEngineError;
    fn copy(
        &mut self,
        destination: u64,
        source: u64,
        length_bytes: u64,
    ) -> Result<(), FakeEngineError> {
        if self.0.lock().unwrap().fail_copies {
            return Err(FakeEngineError);
        }
        self.enqueue(Operation::Copy {
            destination,
            source,
            length_bytes,
        });
        Ok(())
    }
    fn signal_set(&mut self, address: u64, value: u64) -> Result<(), FakeEngineError> {
        self.enqueue(Operation::Set { address, value });
        Ok(())
    }
    fn signal_add(&mut self, address: u64, value: u64) -> Result<(), FakeEngineError> {
        self.enqueue(Operation::Add { address, value });
        Ok(())
    }
    fn wait_until_complete(&mut self) -> Result<(), FakeEngineError> {
        let mut state = self.0.lock().unwrap();
        state.waits += 1;
        state.apply();
        Ok(())
    }
}

/// Region 0 = recv (4 KiB), region 1 = flags (64 B), for ranks 0..3, as rank 0 sees them.
fn region_table() -> SharedRegionTable {
    let table = |base: fn(u32) -> u64, length_bytes| {
        (0..3)
            .map(|rank| RemoteRegionDescriptor {
                base_address: base(rank),
                length_bytes,
                peer_rank: rank,
                transport: 2,
                ..Default::default()
            })
            .collect()
    };
    Arc::new(RwLock::new(Arc::new(ProxyRegionTable::new(vec![
        table(recv_base, 4096),
        table(flags_base, 64),
    ]))))
}

fn put(offset: u64, length_bytes: u64, destination_offset_bytes: u64) -> ProxyPut {
    ProxyPut {
        source_address: SOURCE + offset,
        source_key: 0,
        destination_region_index: 0,
        destination_offset_bytes,
        length_bytes,
    }
}

fn signal(offset_bytes: u32, value: u64, operation: SignalOperation) -> ProxySignal {
    ProxySignal {
        region_index: 1,
        offset_bytes,
        value,
        operation,
    }
}

fn fill_source(state: &Arc<Mutex<FakeState>>) {
    let mut state = state.lock().unwrap();
    for (index, byte) in state.memory[..0x4000].iter_mut().enumerate() {
        *byte = (index * 7 + 3) as u8;
    }
}

#[test]
fn put_signal_resolves_regions_and_orders_the_signal_after_the_data() {
    let state = Arc::new(Mutex::new(FakeState::new()));
    fill_source(&state);
    let mut executor = ProxyExecutor::new(2, region_table(), FakeEngine::new(&state));
    let command = ProducerCommand::new(
        2,
        false,
        ProxyOperation::PutSignal(put(16, 100, 8), signal(8, 5, SignalOperation::Set)),
    )
    .with_ticket(0);
    executor.execute(&command).unwrap();
    {
        let state = state.lock().unwrap();
        assert_eq!(
            state.log,
            [
                Operation::Copy {
                    destination: recv_base(2) + 8,
                    source: SOURCE + 16,
                    length_bytes: 100
                },
                Operation::Set {
                    address: flags_base(2) + 8,
                    value: 5
                }
            ]
        );
        assert_eq!(
            state.waits, 0,
            "no completion requested: nothing waited for"
        );
    }
    let add = ProducerCommand::new(
        2,
        true,
        ProxyOperation::Signal(signal(8, 3, SignalOperation::Add)),
    )
    .with_ticket(1);
    executor.execute(&add).unwrap();
    let state = state.lock().unwrap();
    assert_eq!(
        state.waits, 1,
        "a requested completion waits for the engine"
    );
    assert_eq!(state.read_u64(flags_base(2) + 8), 8);
    let start = (recv_base(2) + 8 - BASE) as usize;
    assert_eq!(state.memory[start..start + 100], state.memory[16..116]);
}

#[test]
fn bad_commands_are_refused_before_anything_is_enqueued() {
    let state = Arc::new(Mutex::new(FakeState::new()));
    let mut executor = ProxyExecutor::new(1, region_table(), FakeEngine::new(&state));
    let cases = [
        (
            ProducerCommand::new(2, false, ProxyOperation::Nop),
            "the entry is for rank 2 but sits in the ring to rank 1",
        ),
        (
            ProducerCommand::new(1, false, ProxyOperation::Put(put(0, 4097, 0))),
            "put destination: 4097 bytes at offset 0 of region 0 run past its 4096 bytes",
        ),
        (
            // The put is fine, the signal is not: neither is enqueued.
            ProducerCommand::new(
                1,
                false,
                ProxyOperation::PutSignal(put(0, 8, 0), signal(60, 1, SignalOperation::Set)),
            ),
            "signal: 8 bytes at offset 60 of region 1 run past its 64 bytes",
        ),
        (
            ProducerCommand::new(
                1,
                false,
                ProxyOperation::Signal(ProxySignal {
                    region_index: 7,
                    ..signal(0, 1, SignalOperation::Set)
                }),
            ),
            "signal: region index 7 was not exchanged (2 regions; indices follow exchange_regions' order)",
        ),
        (
            ProducerCommand::new(
                1,
                false,
                ProxyOperation::Signal(signal(4, 1, SignalOperation::Add)),
            ),
            "is not 8-byte aligned",
        ),
    ];
    for (command, expected) in cases {
        let error = executor.execute(&command.with_ticket(0)).unwrap_err();
        assert!(error.to_string().contains(expected), "{error}");
    }
    assert!(state.lock().unwrap().log.is_empty());
    state.lock().unwrap().fail_copies = true;
    let error = executor
        .execute(&ProducerCommand::new(1, false, ProxyOperation::Put(put(0, 8, 0))).with_ticket(0))
        .unwrap_err();
    assert!(matches!(error, ProxyExecutionError::Engine(_)));
    assert_eq!(
        error.to_string(),
        "copy engine: the fake copy engine refused the copy"
    );
}

#[test]
fn the_proxy_thread_serves_every_ring_and_publishes_completions_after_the_effects() {
    let state = Arc::new(Mutex::new(FakeState::new()));
    fill_source(&state);
    let regions = region_table();
    let rings: Vec<Arc<HostRing>> = (0..2)
        .map(|_| Arc::new(HostRing::allocate(8).unwrap()))
        .collect();
    let engines = [FakeEngine::new(&state), FakeEngine::new(&state)];
    let services = [1u32, 2]
        .iter()
        .zip(&rings)
        .zip(&engines)
        .map(|((&peer_rank, ring), engine)| ProxyRingService {
            peer_rank,
            consumer: RingConsumer::new(ring.clone()),
            executor: ProxyExecutor::new(peer_rank, regions.clone(), engine.clone()),
        })
        .collect();
    let options = ProxyThreadOptions {
        maximum_commands_per_turn: 3,
        spin_turns_before_yield: 16,
    };
    let thread = ProxyThread::spawn(0, services, options, || Ok(())).unwrap();

    // Two host producers per ring, as several GPU programs sharing a ring would be.
    let rounds = 40u64;
    std::thread::scope(|scope| {
        for (ring_index, ring) in rings.iter().enumerate() {
            let peer_rank = ring_index as u32 + 1;
            for producer_index in 0..2u64 {
                let ring = ring.clone();
                scope.spawn(move || {
                    let producer = RingProducer::new(ring);
                    for round in 0..rounds {
                        let slice = producer_index * 2048 + (round % 4) * 512;
                        let batch = [
                            ProducerCommand::new(
                                peer_rank,
                                false,
                                ProxyOperation::Put(put(slice, 512, slice)),
                            ),
                            ProducerCommand::new(
                                peer_rank,
                                true,
                                ProxyOperation::Signal(signal(
                                    8 * producer_index as u32,
                                    1,
                                    SignalOperation::Add,
                                )),
                            ),
                        ];
                        let tickets = producer.submit_batch(&batch).unwrap();
                        producer.wait_for_completion(tickets.end - 1);
                    }
                });
            }
        }
    });
    assert_eq!(thread.commands_executed(), 2 * 2 * 2 * rounds);
    {
        let state = state.lock().unwrap();
        for peer_rank in 1..=2 {
            for producer_index in 0..2 {
                assert_eq!(
                    state.read_u64(flags_base(peer_rank) + 8 * producer_index),
                    rounds,
                    "every ADD landed exactly once"
                );
            }
            let start = (recv_base(peer_rank) - BASE) as usize;
            assert_eq!(state.memory[start..start + 4096], state.memory[..4096]);
        }
    }
    // Each ring ran its batches whole and in order: put, then its signal.
    for engine in &engines {
        let log = engine.1.lock().unwrap();
        assert_eq!(log.len() as u64, 4 * rounds);
        for pair in log.chunks(2) {
            assert!(
                matches!(pair, [Operation::Copy { .. }, Operation::Add { .. }]),
                "{pair:?}"
            );
        }
    }
    for ring in &rings {
        assert_eq!(
            ring.load(RingWord::CompletionCounter, Ordering::Acquire),
            4 * rounds
        );
    }

    // What is published before stop still runs; its effects land before stop returns.
    let producer = RingProducer::new(rings[0].clone());
    producer.submit(ProducerCommand::new(
        1,
        false,
        ProxyOperation::Signal(signal(16, 77, SignalOperation::Set)),
    ));
    assert!(thread.stop().is_empty());
    assert_eq!(state.lock().unwrap().read_u64(flags_base(1) + 16), 77);
}

#[test]
fn a_failing_command_stops_only_its_ring_and_is_reported() {
    let state = Arc::new(Mutex::new(FakeState::new()));
    let regions = region_table();
    let rings: Vec<Arc<HostRing>> = (0..2)
        .map(|_| Arc::new(HostRing::allocate(4).unwrap()))
        .collect();
    let services = [1u32, 2]
        .iter()
        .zip(&rings)
        .map(|(&peer_rank, ring)| ProxyRingService {
            peer_rank,
            consumer: RingConsumer::new(ring.clone()),
            executor: ProxyExecutor::new(peer_rank, regions.clone(), FakeEngine::new(&state)),
        })
        .collect();
    let thread = ProxyThread::spawn(0, services, ProxyThreadOptions::default(), || Ok(())).unwrap();
    RingProducer::new(rings[0].clone()).submit(ProducerCommand::new(
        1,
        false,
        ProxyOperation::Put(put(0, 8, 4096)),
    ));
    let healthy = RingProducer::new(rings[1].clone());
    let ticket = healthy.submit(ProducerCommand::new(
        2,
        true,
        ProxyOperation::Signal(signal(0, 9, SignalOperation::Set)),
    ));
    healthy.wait_for_completion(ticket);
    while thread.failures().is_empty() {
        std::thread::yield_now();
    }
    let failures = thread.stop();
    assert_eq!(failures.len(), 1);
    assert!(
        failures[0].starts_with("ring to rank 1: proxy ring stopped at ticket 0"),
        "{}",
        failures[0]
    );
    assert!(
        failures[0].contains("run past its 4096 bytes"),
        "{}",
        failures[0]
    );
    assert_eq!(state.lock().unwrap().read_u64(flags_base(2)), 9);

    let failing_start = ProxyThread::spawn::<Arc<HostRing>, FakeEngine>(
        0,
        Vec::new(),
        ProxyThreadOptions::default(),
        || Err("no CUDA context".to_owned()),
    )
    .unwrap();
    while failing_start.failures().is_empty() {
        std::thread::yield_now();
    }
    assert_eq!(failing_start.stop(), ["no CUDA context"]);
}
