//! The proxy executor and proxy thread against a fake copy engine (no GPU): commands posted by
//! host producers with the ring protocol are resolved through the region table and executed
//! in order; signals follow their data; a requested completion means the effects landed; bad
//! commands stop their ring with a reason and enqueue nothing; stopping runs what was
//! published.
//!
//! The fake engine is asynchronous on purpose: enqueued operations take effect only when it is
//! asked to wait, or one at a time as its completion markers are polled (the device making
//! progress while the proxy keeps consuming), so a completion published before the effects
//! would be caught. It can also take a set time per call, to check the proxy thread's
//! accounting of its time by phase.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aboleth_abi::RemoteRegionDescriptor;
use aboleth_abi::proxy::{ProxyOperation, ProxyPut, ProxySignal, SignalOperation};
use aboleth_runtime::proxy_ring::{
    CommandExecutor, Execution, HostRing, PollOutcome, ProducerCommand, RingConsumer, RingMemory,
    RingProducer, RingWord,
};
use aboleth_runtime::transport::proxy::{
    CopyEngine, ProxyCompletion, ProxyExecutionError, ProxyExecutor, ProxyRegionTable,
    ProxyRingService, ProxyThread, ProxyThreadOptions, SharedRegionTable,
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
    /// Engine `engine`'s marker `value`.
    Marker {
        engine: usize,
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
    /// Per engine, the latest marker value that took effect.
    markers_reached: Vec<u64>,
    /// Host time each engine call takes (a spin), for the accounting tests.
    call_time: Duration,
}

impl FakeState {
    fn new() -> Self {
        Self {
            memory: vec![0; SPACE_BYTES],
            pending: Vec::new(),
            log: Vec::new(),
            waits: 0,
            fail_copies: false,
            markers_reached: Vec::new(),
            call_time: Duration::ZERO,
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
        while self.apply_one() {}
    }
    /// Lets the oldest pending operation take effect; false when none is pending.
    fn apply_one(&mut self) -> bool {
        if self.pending.is_empty() {
            return false;
        }
        let operation = self.pending.remove(0);
        {
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
                Operation::Marker { engine, value } => {
                    if self.markers_reached.len() <= engine {
                        self.markers_reached.resize(engine + 1, 0);
                    }
                    assert!(value > self.markers_reached[engine], "markers only grow");
                    self.markers_reached[engine] = value;
                }
            }
        }
        true
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the fake copy engine refused the copy")]
struct FakeEngineError;

/// An engine over the shared fake memory, with its own log of what it was asked (one per ring)
/// and its index (for its markers).
#[derive(Clone, Debug)]
struct FakeEngine(Arc<Mutex<FakeState>>, Arc<Mutex<Vec<Operation>>>, usize);

impl FakeEngine {
    fn new(state: &Arc<Mutex<FakeState>>) -> Self {
        Self::numbered(state, 0)
    }
    fn numbered(state: &Arc<Mutex<FakeState>>, index: usize) -> Self {
        Self(state.clone(), Arc::default(), index)
    }
    /// The ring's log without the markers.
    fn effects_log(&self) -> Vec<Operation> {
        let log = self.1.lock().unwrap();
        log.iter()
            .filter(|operation| !matches!(operation, Operation::Marker { .. }))
            .cloned()
            .collect()
    }
    /// Spins for the state's call time (a driver call's host time).
    fn take_call_time(&self) {
        let call_time = self.0.lock().unwrap().call_time;
        let start = Instant::now();
        while start.elapsed() < call_time {
            std::hint::spin_loop();
        }
    }
    fn enqueue(&self, operation: Operation) {
        self.take_call_time();
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
        self.take_call_time();
        let mut state = self.0.lock().unwrap();
        state.waits += 1;
        state.apply();
        Ok(())
    }
    fn record_marker(&mut self, value: u64) -> Result<(), FakeEngineError> {
        self.enqueue(Operation::Marker {
            engine: self.2,
            value,
        });
        Ok(())
    }
    /// The device progresses by one operation per poll.
    fn reached_marker(&mut self) -> Result<u64, FakeEngineError> {
        self.take_call_time();
        let mut state = self.0.lock().unwrap();
        state.apply_one();
        Ok(state.markers_reached.get(self.2).copied().unwrap_or(0))
    }
}

/// Region 0 = recv (4 KiB), region 1 = flags (64 B), for ranks 0..3, as rank 0 sees them.
fn region_table() -> Arc<SharedRegionTable> {
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
    Arc::new(SharedRegionTable::new(ProxyRegionTable::new(vec![
        table(recv_base, 4096),
        table(flags_base, 64),
    ])))
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
    for completion in [ProxyCompletion::Synchronize, ProxyCompletion::Markers] {
        let state = Arc::new(Mutex::new(FakeState::new()));
        fill_source(&state);
        let mut executor =
            ProxyExecutor::with_completion(2, region_table(), FakeEngine::new(&state), completion);
        let command = ProducerCommand::new(
            2,
            false,
            ProxyOperation::PutSignal(put(16, 100, 8), signal(8, 5, SignalOperation::Set)),
        )
        .with_ticket(0);
        assert_eq!(executor.execute(&command).unwrap(), Execution::Enqueued);
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
        let execution = executor.execute(&add).unwrap();
        if completion == ProxyCompletion::Synchronize {
            assert_eq!(execution, Execution::Complete);
            assert_eq!(
                state.lock().unwrap().waits,
                1,
                "a requested completion waits for the engine"
            );
        } else {
            assert_eq!(execution, Execution::Enqueued);
            assert_eq!(state.lock().unwrap().waits, 0, "markers never wait");
            assert_eq!(
                state.lock().unwrap().log.last(),
                Some(&Operation::Marker {
                    engine: 0,
                    value: 2
                })
            );
            // The fake device lands one operation per poll: copy, SET, ADD, then the marker.
            let mut polls = 0;
            while executor.completions_reached(false).unwrap() < 2 {
                polls += 1;
                assert!(
                    state.lock().unwrap().pending.len() == 4 - polls,
                    "the marker is reported only after every operation before it landed"
                );
            }
            assert_eq!(polls, 3);
            assert!(state.lock().unwrap().pending.is_empty());
            assert_eq!(
                executor.completions_reached(true).unwrap(),
                2,
                "waiting covers the last marker"
            );
        }
        let state = state.lock().unwrap();
        assert_eq!(state.read_u64(flags_base(2) + 8), 8);
        let start = (recv_base(2) + 8 - BASE) as usize;
        assert_eq!(state.memory[start..start + 100], state.memory[16..116]);
    }
}

#[test]
fn a_long_put_is_copied_in_chunks_in_order_before_its_signal() {
    let state = Arc::new(Mutex::new(FakeState::new()));
    fill_source(&state);
    let engine = FakeEngine::new(&state);
    let mut executor = ProxyExecutor::new(2, region_table(), engine.clone());
    executor.set_copy_chunk_bytes(32);
    let command = ProducerCommand::new(
        2,
        true,
        ProxyOperation::PutSignal(put(16, 100, 8), signal(0, 1, SignalOperation::Add)),
    )
    .with_ticket(0);
    executor.execute(&command).unwrap();
    executor.wait_until_complete().unwrap();
    let copy = |offset: u64, length_bytes: u64| Operation::Copy {
        destination: recv_base(2) + 8 + offset,
        source: SOURCE + 16 + offset,
        length_bytes,
    };
    assert_eq!(
        engine.effects_log(),
        [
            copy(0, 32),
            copy(32, 32),
            copy(64, 32),
            copy(96, 4),
            Operation::Add {
                address: flags_base(2),
                value: 1
            }
        ]
    );
    let state = state.lock().unwrap();
    let start = (recv_base(2) + 8 - BASE) as usize;
    assert_eq!(state.memory[start..start + 100], state.memory[16..116]);
    assert_eq!(executor.engine_times().copies, 4);
}

#[test]
fn a_deferred_completion_is_published_after_the_effects_while_the_consumer_keeps_consuming() {
    let state = Arc::new(Mutex::new(FakeState::new()));
    fill_source(&state);
    let ring = HostRing::allocate(8).unwrap();
    let producer = RingProducer::new(&ring);
    let mut consumer = RingConsumer::new(&ring);
    let mut executor = ProxyExecutor::new(1, region_table(), FakeEngine::new(&state));
    assert_eq!(executor.completion(), ProxyCompletion::Markers);
    let first = producer.submit(ProducerCommand::new(
        1,
        true,
        ProxyOperation::PutSignal(put(0, 64, 0), signal(0, 7, SignalOperation::Set)),
    ));
    let completion = || ring.load(RingWord::CompletionCounter, Ordering::Acquire);
    assert!(matches!(
        consumer.poll(&mut executor).unwrap(),
        PollOutcome::Executed { .. }
    ));
    assert!(consumer.completion_outstanding());
    assert_eq!(completion(), 0, "nothing landed yet");
    // The next entry is consumed while the first one's completion is outstanding; that poll
    // also lands one operation (the copy) and reports no marker yet.
    let second = producer.submit(ProducerCommand::new(
        1,
        false,
        ProxyOperation::Signal(signal(8, 1, SignalOperation::Add)),
    ));
    assert!(matches!(
        consumer.poll(&mut executor).unwrap(),
        PollOutcome::Executed { .. }
    ));
    assert_eq!(consumer.next_ticket(), second + 1);
    assert_eq!(completion(), 0);
    // Then the SET lands, then the marker: only then is the completion published, and the
    // data and signal are there.
    assert_eq!(consumer.poll(&mut executor).unwrap(), PollOutcome::Empty);
    assert_eq!(completion(), 0, "the marker has not landed");
    assert_eq!(consumer.poll(&mut executor).unwrap(), PollOutcome::Empty);
    assert_eq!(completion(), first + 1);
    assert!(!consumer.completion_outstanding());
    {
        let state = state.lock().unwrap();
        assert_eq!(state.read_u64(flags_base(1)), 7);
        let start = (recv_base(1) - BASE) as usize;
        assert_eq!(state.memory[start..start + 64], state.memory[..64]);
        assert_eq!(
            state.pending,
            [Operation::Add {
                address: flags_base(1) + 8,
                value: 1
            }],
            "the second command requested no completion: its effect may still be pending"
        );
    }
    // Nothing outstanding: polling an empty ring asks the engine nothing.
    let polls = executor.engine_times().completion_polls;
    assert_eq!(consumer.poll(&mut executor).unwrap(), PollOutcome::Empty);
    assert_eq!(executor.engine_times().completion_polls, polls);
    assert_eq!(consumer.completions_published(), 1);
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
    for completion in [ProxyCompletion::Markers, ProxyCompletion::Synchronize] {
        serve_every_ring(completion);
    }
}

fn serve_every_ring(completion: ProxyCompletion) {
    let state = Arc::new(Mutex::new(FakeState::new()));
    fill_source(&state);
    let regions = region_table();
    let rings: Vec<Arc<HostRing>> = (0..2)
        .map(|_| Arc::new(HostRing::allocate(8).unwrap()))
        .collect();
    let engines = [
        FakeEngine::numbered(&state, 0),
        FakeEngine::numbered(&state, 1),
    ];
    let services = [1u32, 2]
        .iter()
        .zip(&rings)
        .zip(&engines)
        .map(|((&peer_rank, ring), engine)| ProxyRingService {
            peer_rank,
            consumer: RingConsumer::new(ring.clone()),
            executor: ProxyExecutor::with_completion(
                peer_rank,
                regions.clone(),
                engine.clone(),
                completion,
            ),
        })
        .collect();
    let options = ProxyThreadOptions {
        maximum_commands_per_turn: 3,
        spin_turns_before_yield: 16,
        completion,
    };
    let thread = ProxyThread::spawn(0, services, options, || Ok(())).unwrap();

    // Two host producers per ring, as several GPU programs sharing a ring would be. Each
    // checks, once its batch's completion is published, that the batch's effects are there:
    // its own flag counts every round so far.
    let rounds = 40u64;
    std::thread::scope(|scope| {
        for (ring_index, ring) in rings.iter().enumerate() {
            let peer_rank = ring_index as u32 + 1;
            for producer_index in 0..2u64 {
                let ring = ring.clone();
                let state = state.clone();
                scope.spawn(move || {
                    let producer = RingProducer::new(ring);
                    let flag = flags_base(peer_rank) + 8 * producer_index;
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
                        let state = state.lock().unwrap();
                        assert_eq!(
                            state.read_u64(flag),
                            round + 1,
                            "{completion:?}: completion published before the signal landed"
                        );
                        let start = (recv_base(peer_rank) + slice - BASE) as usize;
                        assert_eq!(
                            state.memory[start..start + 512],
                            state.memory[slice as usize..slice as usize + 512],
                            "{completion:?}: completion published before the data landed"
                        );
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
        let log = engine.effects_log();
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

    // What is published before stop still runs; its effects land before stop returns, and a
    // completion it requested is published.
    let producer = RingProducer::new(rings[0].clone());
    let last = producer.submit(ProducerCommand::new(
        1,
        true,
        ProxyOperation::Signal(signal(16, 77, SignalOperation::Set)),
    ));
    let (failures, statistics) = thread.stop_with_statistics();
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(state.lock().unwrap().read_u64(flags_base(1) + 16), 77);
    assert_eq!(
        rings[0].load(RingWord::CompletionCounter, Ordering::Acquire),
        last + 1
    );
    // The accounting counted what the producers asked for, and the command before the stop.
    let requested = 2 * 2 * rounds + 1;
    assert_eq!(statistics.commands_executed, 2 * 2 * 2 * rounds + 1);
    assert_eq!(statistics.engine.copies, 2 * 2 * rounds);
    assert_eq!(statistics.engine.signals, requested);
    // The stop waits for each ring's stream once.
    match completion {
        ProxyCompletion::Markers => {
            assert_eq!(statistics.engine.markers, requested, "{statistics:?}");
            assert_eq!(statistics.engine.completion_waits, 2, "{statistics:?}");
            assert!(statistics.engine.completion_polls > 0, "{statistics:?}");
        }
        ProxyCompletion::Synchronize => {
            assert_eq!(statistics.engine.markers, 0, "{statistics:?}");
            assert_eq!(
                statistics.engine.completion_waits,
                requested + 2,
                "{statistics:?}"
            );
        }
    }
    // Completions of one ring's two producers may be published by one store.
    assert!(
        statistics.completions_published >= 2 * rounds
            && statistics.completions_published <= requested,
        "{statistics:?}"
    );
    assert!(statistics.busy_turns > 0 && statistics.busy_turns <= statistics.commands_executed);
}

#[test]
fn the_proxy_thread_accounts_its_time_by_phase() {
    // Every engine call spins for CALL_TIME: the phases' totals are at least that per call,
    // and all phases together at most the thread's lifetime.
    const CALL_TIME: Duration = Duration::from_micros(200);
    for completion in [ProxyCompletion::Markers, ProxyCompletion::Synchronize] {
        let state = Arc::new(Mutex::new(FakeState::new()));
        state.lock().unwrap().call_time = CALL_TIME;
        let ring = Arc::new(HostRing::allocate(8).unwrap());
        let services = vec![ProxyRingService {
            peer_rank: 1,
            consumer: RingConsumer::new(ring.clone()),
            executor: ProxyExecutor::with_completion(
                1,
                region_table(),
                FakeEngine::new(&state),
                completion,
            ),
        }];
        let started = Instant::now();
        let thread =
            ProxyThread::spawn(0, services, ProxyThreadOptions::default(), || Ok(())).unwrap();
        let producer = RingProducer::new(ring.clone());
        let rounds = 10u64;
        for round in 0..rounds {
            let ticket = producer.submit(ProducerCommand::new(
                1,
                true,
                ProxyOperation::PutSignal(
                    put(0, 64, 0),
                    signal(0, round + 1, SignalOperation::Set),
                ),
            ));
            producer.wait_for_completion(ticket);
        }
        // The totals are published by the turn that executed the last command, before or
        // after its completion, and idle turns every few of them: wait until they cover every
        // command and completion and an idle turn (on a loaded machine the producer's next
        // command can arrive before the thread ever finds its ring empty), for at most 10 s.
        let deadline = Instant::now() + Duration::from_secs(10);
        let statistics = loop {
            let statistics = thread.statistics();
            let idled = statistics.idle_turns >= 1;
            if (statistics.completions_published == rounds && idled) || Instant::now() > deadline {
                break statistics;
            }
            std::thread::yield_now();
        };
        assert!(thread.stop().is_empty());
        let lifetime_ns = started.elapsed().as_nanos() as u64;
        let call_ns = CALL_TIME.as_nanos() as u64;
        assert_eq!(statistics.commands_executed, rounds, "{statistics:?}");
        assert_eq!(
            (statistics.engine.copies, statistics.engine.signals),
            (rounds, rounds)
        );
        assert!(
            statistics.engine.copy_ns >= rounds * call_ns,
            "{statistics:?}"
        );
        assert!(
            statistics.engine.signal_ns >= rounds * call_ns,
            "{statistics:?}"
        );
        match completion {
            ProxyCompletion::Markers => {
                assert_eq!(statistics.engine.markers, rounds, "{statistics:?}");
                assert!(
                    statistics.engine.marker_ns >= rounds * call_ns,
                    "{statistics:?}"
                );
                assert!(
                    statistics.engine.completion_poll_ns
                        >= statistics.engine.completion_polls * call_ns,
                    "{statistics:?}"
                );
                assert_eq!(statistics.engine.completion_waits, 0, "{statistics:?}");
            }
            ProxyCompletion::Synchronize => {
                assert_eq!(statistics.engine.completion_waits, rounds, "{statistics:?}");
                assert!(
                    statistics.engine.completion_wait_ns >= rounds * call_ns,
                    "{statistics:?}"
                );
                assert_eq!(
                    (
                        statistics.engine.markers,
                        statistics.engine.completion_polls
                    ),
                    (0, 0),
                    "{statistics:?}"
                );
            }
        }
        assert!(
            statistics.busy_turns >= 1 && statistics.idle_turns >= 1,
            "{statistics:?}"
        );
        assert!(
            statistics.total_ns() <= lifetime_ns,
            "{} ns accounted in a thread that lived {lifetime_ns} ns: {statistics:?}",
            statistics.total_ns()
        );
        let names: Vec<&str> = statistics.fields().iter().map(|(name, _)| *name).collect();
        assert_eq!(names[0], "commands_executed");
        assert_eq!(
            statistics
                .fields()
                .iter()
                .find(|(name, _)| *name == "copy_ns")
                .unwrap()
                .1,
            statistics.engine.copy_ns
        );
    }
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

#[test]
fn an_executor_reads_the_table_that_replaced_the_one_it_started_with() {
    // As in a World: the executors start before exchange_regions, with an empty table.
    let state = Arc::new(Mutex::new(FakeState::new()));
    let regions = Arc::new(SharedRegionTable::default());
    let mut executor = ProxyExecutor::new(1, regions.clone(), FakeEngine::new(&state));
    let command = ProducerCommand::new(
        1,
        false,
        ProxyOperation::Signal(signal(0, 4, SignalOperation::Set)),
    )
    .with_ticket(0);
    let error = executor.execute(&command).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("region index 1 was not exchanged (0 regions"),
        "{error}"
    );
    assert_eq!(regions.generation(), 0);
    regions.replace(region_table().snapshot().1.as_ref().clone());
    assert_eq!(regions.generation(), 1);
    assert_eq!(executor.execute(&command).unwrap(), Execution::Enqueued);
    assert_eq!(
        state.lock().unwrap().log,
        [Operation::Set {
            address: flags_base(1),
            value: 4
        }]
    );
}
