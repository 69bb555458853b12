//! The software NIC on its own thread (`aboleth_runtime::soft_nic::SoftNicThread`) serving a
//! producer on another thread, the way a GPU posts: WQEs into the send ring, the doorbell record,
//! then the doorbell stored to the UAR word (or, on the staged path, nothing more: the NIC thread
//! rings when it sees the record change), in batches, with flow control on the executed count.
//! Memory is heap memory standing in for host-pinned memory. Checked: every write lands (the
//! destination equals the writes applied in order), no WQE fails, the NIC observed at least one
//! and at most one doorbell per batch, and the CQ reports the last WQE completed.

use std::time::{Duration, Instant};

use aboleth_abi::mlx5::{
    DoorbellRecord, LocalBuffer, RemoteAddress, UarDoorbell, WQE_CTRL_CQ_UPDATE, WqeCommon,
    rdma_write,
};
use aboleth_nic::{CqPollResult, NicMemory, QueuePairConfig};
use aboleth_runtime::soft_nic::{DoorbellSource, MappedNicMemory, SoftNic, SoftNicThread};

mod common;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const QPN: u32 = 0x52;
const SQ_BLOCKS: u64 = 256;
const BUFFER_BYTES: u64 = 1 << 16;
const LKEY: u32 = 0x11;
const RKEY: u32 = 0x22;
// Each rank's addresses as its WQEs name them.
const SQ: u64 = 0x10_0000;
const DBR: u64 = 0x20_0000;
const UAR: u64 = 0x30_0000;
const CQ: u64 = 0x40_0000;
const SOURCE: u64 = 0x50_0000;
const DESTINATION: u64 = 0x60_0000;
const BATCHES: usize = 300;

/// Two views of the same heap words: the NIC's and the producer's.
fn memories(backing: &mut [Vec<u64>]) -> (MappedNicMemory, MappedNicMemory) {
    let ranges = [
        (0, SQ, SQ_BLOCKS * 64, None, None, "send ring"),
        (0, DBR, 8, None, None, "doorbell record"),
        (0, UAR, 8, None, None, "UAR"),
        (0, CQ, 64 * 64, None, None, "completion queue"),
        (0, SOURCE, BUFFER_BYTES, Some(LKEY), None, "source"),
        (
            1,
            DESTINATION,
            BUFFER_BYTES,
            None,
            Some(RKEY),
            "destination",
        ),
    ];
    // SAFETY: `backing` outlives both views (the test joins the NIC thread before it returns)
    // and is never resized; the two threads share only what the doorbell protocol orders (ring
    // slots before the UAR release store) or words accessed whole.
    unsafe {
        (
            common::map_regions(backing, &ranges, &[]),
            common::map_regions(backing, &ranges, &[]),
        )
    }
}

#[test]
fn a_producer_thread_posts_batches_and_the_nic_thread_executes_every_write() {
    post_batches(DoorbellSource::Uar(UAR));
}

/// The staged path: the producer stores only the doorbell record; the NIC thread rings.
#[test]
fn on_the_staged_path_the_doorbell_record_alone_makes_the_nic_execute() {
    post_batches(DoorbellSource::HostRings);
}

fn post_batches(doorbell: DoorbellSource) {
    let staged = doorbell == DoorbellSource::HostRings;
    let sizes = [SQ_BLOCKS * 64, 8, 8, 64 * 64, BUFFER_BYTES, BUFFER_BYTES];
    let mut backing: Vec<Vec<u64>> = sizes
        .iter()
        .map(|bytes| vec![0u64; (*bytes / 8) as usize])
        .collect();
    let (nic_view, mut producer) = memories(&mut backing);
    let source: Vec<u8> = (0..BUFFER_BYTES)
        .map(|index| (index * 7 + 3) as u8)
        .collect();
    producer.write(0, SOURCE, &source).unwrap();
    let mut soft_nic = SoftNic::new(nic_view);
    let config = QueuePairConfig {
        rank: 0,
        peer_rank: 1,
        qpn: QPN,
        sq_buffer_address: SQ,
        sq_basic_block_count: SQ_BLOCKS as u32,
        doorbell_record_address: DBR,
        cq_buffer_address: CQ,
        cqe_count: 64,
        cq_collapsed: false,
        receive: None,
    };
    soft_nic.create_queue_pair(config, doorbell).unwrap();
    let thread = SoftNicThread::start(soft_nic).unwrap();
    let statistics = thread.statistics();
    let mut expected = vec![0u8; BUFFER_BYTES as usize];
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let mut posted = 0u64;
    let deadline = Instant::now() + Duration::from_secs(20);
    for _ in 0..BATCHES {
        let count = rng.random_range(1..=8u64);
        // Flow control: the ring's slots are free once executed (the GPU reads the CQ; the
        // executed count is what this test has).
        while posted + count
            - statistics
                .wqes_executed
                .load(std::sync::atomic::Ordering::Acquire)
            > SQ_BLOCKS
        {
            assert!(
                !thread.is_finished(),
                "the NIC thread ended early (stop() returns why)"
            );
            assert!(
                Instant::now() < deadline,
                "the NIC thread stopped executing"
            );
            std::hint::spin_loop();
        }
        for offset in 0..count {
            let index = posted + offset;
            let length = rng.random_range(1..=512u64);
            let from = rng.random_range(0..BUFFER_BYTES - length);
            let to = rng.random_range(0..BUFFER_BYTES - length);
            expected[to as usize..(to + length) as usize]
                .copy_from_slice(&source[from as usize..(from + length) as usize]);
            let signaled = if offset + 1 == count {
                WQE_CTRL_CQ_UPDATE
            } else {
                0
            };
            let wqe = rdma_write(
                &WqeCommon {
                    wqe_index: index as u16,
                    qpn: QPN,
                    fm_ce_se: signaled,
                },
                RemoteAddress {
                    address: DESTINATION + to,
                    rkey: RKEY,
                },
                LocalBuffer {
                    address: SOURCE + from,
                    lkey: LKEY,
                    length_bytes: length as u32,
                },
            );
            assert_eq!(wqe.basic_blocks().len(), 1);
            producer
                .write(0, SQ + (index % SQ_BLOCKS) * 64, &wqe.basic_blocks()[0])
                .unwrap();
        }
        posted += count;
        let record = DoorbellRecord::for_send_producer_index(posted as u32);
        producer.write(0, DBR, &record.to_bytes()).unwrap();
        if !staged {
            let doorbell = UarDoorbell::next_producer_index(posted as u16, QPN);
            producer.write(0, UAR, &doorbell.to_bytes()).unwrap();
        }
    }
    while statistics
        .wqes_executed
        .load(std::sync::atomic::Ordering::Acquire)
        < posted
    {
        assert!(
            !thread.is_finished(),
            "the NIC thread ended early (stop() returns why)"
        );
        assert!(
            Instant::now() < deadline,
            "the NIC thread executed {} of {posted} WQEs",
            statistics
                .wqes_executed
                .load(std::sync::atomic::Ordering::Acquire)
        );
        std::hint::spin_loop();
    }
    // With nothing left to do the thread counts its idle polls (what World::close waits on).
    while statistics
        .idle_polls_in_a_row
        .load(std::sync::atomic::Ordering::Acquire)
        < 2
    {
        assert!(Instant::now() < deadline, "the NIC thread never went idle");
        std::hint::spin_loop();
    }
    let (soft_nic, ended) = thread.stop();
    ended.unwrap();
    let counter = if staged {
        &soft_nic.statistics().host_doorbells_rung
    } else {
        &soft_nic.statistics().doorbells_observed
    };
    let observed = counter.load(std::sync::atomic::Ordering::Relaxed);
    let other = if staged {
        &soft_nic.statistics().doorbells_observed
    } else {
        &soft_nic.statistics().host_doorbells_rung
    };
    assert_eq!(other.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert!(
        (1..=BATCHES as u64).contains(&observed),
        "{observed} doorbells observed for {BATCHES} batches"
    );
    assert_eq!(
        soft_nic
            .statistics()
            .wqes_failed
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    assert_eq!(
        producer.read(1, DESTINATION, BUFFER_BYTES).unwrap(),
        expected
    );
    assert_eq!(
        soft_nic
            .nic()
            .poll_cq_for_index(soft_nic.memory(), 0, QPN, posted - 1)
            .unwrap(),
        CqPollResult::Completed
    );
    drop(soft_nic);
    drop(backing);
}
