//! The software NIC's Ionic queue pairs on its own thread (`aboleth_runtime::soft_nic`) serving
//! a producer on another thread that follows the protocol the generated code follows
//! (`aboleth-codegen`'s `emit/ionic.rs`): 64-byte WQEs with the lap's color stored into the send
//! queue, then the 64-bit doorbell value (queue id and producer position within the ring) in the
//! queue's doorbell word; ring space comes back by polling the CQ in order, by each CQE's color,
//! the consumer index raised to the WQE its message number names (its bits within the ring).
//! Memory is heap memory standing in for host-pinned memory. Checked: every write and every
//! fetch-add lands, no WQE fails, the ring wraps several laps, at most one doorbell per batch is
//! observed, and a doorbell naming another queue is refused with both ids.

use std::time::{Duration, Instant};

use aboleth_abi::ionic::{
    IonicVersion,
    cqe::Completion,
    cqe::Cqe,
    sq_color_of, sq_doorbell_value,
    wqe::{AtomicOperation, LocalBuffer, SendWqe, WqeCommon, WritePayload},
};
use aboleth_nic::NicMemory;
use aboleth_nic::ionic::{IonicQueuePairConfig, cq_color_of};
use aboleth_runtime::soft_nic::{MappedNicMemory, SoftNic, SoftNicThread};

mod common;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const QUEUE_ID: u32 = 0x101;
const ENTRIES: u64 = 64;
const BUFFER_BYTES: u64 = 1 << 14;
const LKEY: u32 = 0x11;
const RKEY: u32 = 0x22;
const RESULT_LKEY: u32 = 0x33;
const COUNTER_RKEY: u32 = 0x44;
const SQ: u64 = 0x10_0000;
const CQ: u64 = 0x20_0000;
const DOORBELL: u64 = 0x30_0000;
const RESULT: u64 = 0x40_0000;
const SOURCE: u64 = 0x50_0000;
const DESTINATION: u64 = 0x60_0000;
/// The peer's word that fetch-adds count into.
const COUNTER: u64 = 0x70_0000;
const BATCHES: usize = 200;

fn memories(backing: &mut [Vec<u64>]) -> (MappedNicMemory, MappedNicMemory) {
    let ranges = [
        (0, SQ, ENTRIES * 64, None, None, "send queue"),
        (0, CQ, ENTRIES * 32, None, None, "completion queue"),
        (0, DOORBELL, 8, None, None, "doorbell"),
        (0, RESULT, 8, Some(RESULT_LKEY), None, "atomic result"),
        (0, SOURCE, BUFFER_BYTES, Some(LKEY), None, "source"),
        (
            1,
            DESTINATION,
            BUFFER_BYTES,
            None,
            Some(RKEY),
            "destination",
        ),
        (1, COUNTER, 8, None, Some(COUNTER_RKEY), "counter"),
    ];
    // SAFETY: `backing` outlives both views (the test joins the NIC thread before it returns)
    // and is never resized; the threads share only what the doorbell protocol orders (WQEs
    // before the doorbell word) or words accessed whole (CQEs end with their released last word).
    unsafe {
        (
            common::map_regions(backing, &ranges, &[]),
            common::map_regions(backing, &ranges, &[]),
        )
    }
}

fn backing() -> Vec<Vec<u64>> {
    [
        ENTRIES * 64,
        ENTRIES * 32,
        8,
        8,
        BUFFER_BYTES,
        BUFFER_BYTES,
        8,
    ]
    .iter()
    .map(|bytes| vec![0u64; (*bytes / 8) as usize])
    .collect()
}

fn config() -> IonicQueuePairConfig {
    IonicQueuePairConfig {
        rank: 0,
        queue_id: QUEUE_ID,
        peer_rank: 1,
        version: IonicVersion::V2,
        sq_address: SQ,
        sq_entries: ENTRIES as u32,
        cq_address: CQ,
        cq_entries: ENTRIES as u32,
    }
}

/// The producer's CQ poll, as the generated code's: CQEs of the current lap's color, in order;
/// each raises the consumer index to the WQE its message number names.
struct CompletionPoller {
    polled: u64,
    consumer: u64,
}

impl CompletionPoller {
    fn poll(&mut self, memory: &MappedNicMemory) {
        loop {
            let address = CQ + (self.polled % ENTRIES) * 32;
            let bytes: [u8; 32] = memory.read(0, address, 32).unwrap().try_into().unwrap();
            let cqe = Cqe::from_bytes(&bytes);
            if !cqe.has_color(cq_color_of(self.polled, ENTRIES as u32)) {
                return;
            }
            match cqe.decode().unwrap() {
                Completion::Send {
                    qid,
                    msn,
                    status: None,
                } => {
                    assert_eq!(qid, QUEUE_ID);
                    let through = self.consumer
                        + (u64::from(msn).wrapping_sub(self.consumer) & (ENTRIES - 1));
                    self.consumer = self.consumer.max(through);
                }
                other => panic!("CQE {} is {other:?}", self.polled),
            }
            self.polled += 1;
        }
    }
}

#[test]
fn a_producer_posts_ionic_batches_through_the_doorbell_word_and_every_write_lands() {
    let mut words = backing();
    let (nic_view, mut producer) = memories(&mut words);
    let source: Vec<u8> = (0..BUFFER_BYTES)
        .map(|index| (index * 5 + 1) as u8)
        .collect();
    producer.write(0, SOURCE, &source).unwrap();
    let mut soft_nic = SoftNic::new(nic_view);
    soft_nic
        .create_ionic_queue_pair(config(), DOORBELL)
        .unwrap();
    let thread = SoftNicThread::start(soft_nic).unwrap();
    let mut expected = vec![0u8; BUFFER_BYTES as usize];
    let mut expected_counter = 0u64;
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mut poller = CompletionPoller {
        polled: 0,
        consumer: 0,
    };
    let mut posted = 0u64;
    let deadline = Instant::now() + Duration::from_secs(20);
    for _ in 0..BATCHES {
        let count = rng.random_range(1..=8u64);
        // One slot stays empty: at most ENTRIES - 1 WQEs outstanding.
        while posted + count - poller.consumer > ENTRIES - 1 {
            assert!(!thread.is_finished(), "the NIC thread ended early");
            assert!(Instant::now() < deadline, "no completion freed the ring");
            poller.poll(&producer);
        }
        for offset in 0..count {
            let index = posted + offset;
            let common = WqeCommon {
                wqe_id: index % ENTRIES,
                color: sq_color_of(index, ENTRIES),
                // The batch's last WQE, and every WQE at a ring quarter (periodic completions).
                signaled: offset + 1 == count || index.is_multiple_of(ENTRIES / 4),
                fence: false,
            };
            let wqe = if rng.random_bool(0.2) {
                let add = rng.random_range(1..100u64);
                expected_counter += add;
                SendWqe::Atomic {
                    common,
                    remote_address: COUNTER,
                    rkey: COUNTER_RKEY,
                    operation: AtomicOperation::FetchAdd { add },
                    result: LocalBuffer {
                        address: RESULT,
                        length_bytes: 8,
                        lkey: RESULT_LKEY,
                    },
                }
            } else {
                let length = rng.random_range(1..=256u64);
                let from = rng.random_range(0..BUFFER_BYTES - length);
                let to = rng.random_range(0..BUFFER_BYTES - length);
                expected[to as usize..(to + length) as usize]
                    .copy_from_slice(&source[from as usize..(from + length) as usize]);
                SendWqe::RdmaWrite {
                    common,
                    remote_address: DESTINATION + to,
                    rkey: RKEY,
                    payload: WritePayload::Buffers(vec![LocalBuffer {
                        address: SOURCE + from,
                        length_bytes: length as u32,
                        lkey: LKEY,
                    }]),
                    immediate: None,
                }
            };
            let bytes = wqe.encode(IonicVersion::V2).unwrap();
            producer
                .write(0, SQ + (index % ENTRIES) * 64, &bytes)
                .unwrap();
        }
        posted += count;
        let value = sq_doorbell_value(QUEUE_ID, (posted % ENTRIES) as u16);
        producer.write(0, DOORBELL, &value.to_le_bytes()).unwrap();
    }
    while poller.consumer < posted {
        assert!(!thread.is_finished(), "the NIC thread ended early");
        assert!(
            Instant::now() < deadline,
            "{} of {posted} WQEs completed",
            poller.consumer
        );
        poller.poll(&producer);
    }
    let (soft_nic, ended) = thread.stop();
    ended.unwrap();
    let statistics = soft_nic.statistics();
    let load =
        |counter: &std::sync::atomic::AtomicU64| counter.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(load(&statistics.wqes_executed), posted);
    assert_eq!(load(&statistics.wqes_failed), 0);
    assert!((1..=BATCHES as u64).contains(&load(&statistics.doorbells_observed)));
    assert!(posted > 4 * ENTRIES, "the ring wrapped only {posted} WQEs");
    assert_eq!(
        producer.read(1, DESTINATION, BUFFER_BYTES).unwrap(),
        expected
    );
    assert_eq!(
        producer.read(1, COUNTER, 8).unwrap(),
        expected_counter.to_le_bytes()
    );
}

#[test]
fn a_doorbell_naming_another_queue_stops_the_nic_with_both_ids() {
    let mut words = backing();
    let (nic_view, mut producer) = memories(&mut words);
    let mut soft_nic = SoftNic::new(nic_view);
    soft_nic
        .create_ionic_queue_pair(config(), DOORBELL)
        .unwrap();
    producer
        .write(
            0,
            DOORBELL,
            &sq_doorbell_value(QUEUE_ID + 1, 0).to_le_bytes(),
        )
        .unwrap();
    let error = soft_nic.poll().unwrap_err().to_string();
    assert!(
        error.contains("Ionic queue 257 of rank 0") && error.contains("names queue 0x102"),
        "{error}"
    );
    // A second queue cannot share the word.
    let mut other = config();
    other.queue_id = QUEUE_ID + 1;
    let error = soft_nic
        .create_ionic_queue_pair(other, DOORBELL)
        .unwrap_err()
        .to_string();
    assert!(error.contains("already serves another queue"), "{error}");
}
