//! The Ionic (RC) device model over a flat memory: the writes of one queue pair land in posting
//! order (a flag queued behind its data is never seen first, unlike EFA's), a WQE of an earlier
//! lap (a doorbell rung before the WQE was written) is refused, a bad rkey completes with an error
//! and stops the queue pair, atomics return the old value, and a signaled WQE's completion names
//! it by its message sequence number in the lap's color.

mod common;

use aboleth_abi::ionic::cqe::Completion;
use aboleth_abi::ionic::wqe::{AtomicOperation, LocalBuffer, SendWqe, WqeCommon, WritePayload};
use aboleth_abi::ionic::{
    IonicVersion, STS_REMOTE_ACC_ERR, WQE_BYTES, sq_color_of, sq_doorbell_value,
};
use aboleth_nic::NicMemory;
use aboleth_nic::ionic::{IonicDevice, IonicError, IonicQueuePairConfig};
use common::{BUFFER, FlatMemory, LKEY, RANK_BYTES, RKEY};
use rand::SeedableRng;
use rand::rngs::StdRng;

const QUEUE: u32 = 0x21;
const SQ: u64 = 0;
const CQ: u64 = 0x1000;
const ENTRIES: u32 = 8;

fn setup(version: IonicVersion) -> (IonicDevice, FlatMemory) {
    let memory = FlatMemory {
        ranks: vec![vec![0; RANK_BYTES as usize]; 2],
        atomics: 0,
    };
    let mut device = IonicDevice::new();
    for rank in 0..2 {
        device
            .create_queue_pair(IonicQueuePairConfig {
                rank,
                queue_id: QUEUE,
                peer_rank: 1 - rank,
                version,
                sq_address: SQ,
                sq_entries: ENTRIES,
                cq_address: CQ,
                cq_entries: ENTRIES,
            })
            .unwrap();
    }
    (device, memory)
}

fn common_at(index: u64, signaled: bool) -> WqeCommon {
    WqeCommon {
        wqe_id: index,
        color: sq_color_of(index, u64::from(ENTRIES)),
        signaled,
        fence: false,
    }
}

fn write_at(memory: &mut FlatMemory, version: IonicVersion, index: u64, wqe: &SendWqe) {
    let bytes = wqe.encode(version).unwrap();
    memory
        .write(
            0,
            SQ + (index % u64::from(ENTRIES)) * WQE_BYTES as u64,
            &bytes,
        )
        .unwrap();
}

fn put(index: u64, source: u64, destination: u64, length: u32, rkey: u32) -> SendWqe {
    SendWqe::RdmaWrite {
        common: common_at(index, true),
        remote_address: destination,
        rkey,
        payload: WritePayload::Buffers(vec![LocalBuffer {
            address: source,
            length_bytes: length,
            lkey: LKEY,
        }]),
        immediate: None,
    }
}

#[test]
fn a_flag_queued_behind_its_data_never_lands_first() {
    for seed in 0..64 {
        let version = if seed % 2 == 0 {
            IonicVersion::V1
        } else {
            IonicVersion::V2
        };
        let (mut device, mut memory) = setup(version);
        memory.write(0, BUFFER, &[7; 256]).unwrap();
        memory.write(0, BUFFER + 512, &[1]).unwrap();
        write_at(
            &mut memory,
            version,
            0,
            &put(0, BUFFER, BUFFER, 256, RKEY + 1),
        );
        write_at(
            &mut memory,
            version,
            1,
            &put(1, BUFFER + 512, BUFFER + 1024, 1, RKEY + 1),
        );
        device
            .ring_doorbell(&memory, 0, sq_doorbell_value(QUEUE, 2))
            .unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        while device.step(&mut memory, &mut rng).unwrap().is_some() {
            let flag = memory.read(1, BUFFER + 1024, 1).unwrap()[0];
            let data = memory.read(1, BUFFER, 256).unwrap();
            assert!(
                flag == 0 || data.iter().all(|byte| *byte == 7),
                "seed {seed}"
            );
        }
        assert_eq!(memory.read(1, BUFFER + 1024, 1).unwrap()[0], 1);
        // Two signaled WQEs: two CQEs naming messages 1 and 2, in the first lap's color.
        for (position, msn) in [(0, 1), (1, 2)] {
            let cqe = device.completion_at(&memory, 0, QUEUE, position).unwrap();
            assert_eq!(
                cqe.expect("written").decode(),
                Ok(Completion::Send {
                    qid: QUEUE,
                    msn,
                    status: None
                })
            );
        }
        assert_eq!(device.completion_at(&memory, 0, QUEUE, 2).unwrap(), None);
    }
}

#[test]
fn a_wqe_of_an_earlier_lap_is_refused_at_the_doorbell() {
    let version = IonicVersion::V2;
    let (mut device, mut memory) = setup(version);
    let mut stale = put(0, BUFFER, BUFFER, 8, RKEY + 1);
    if let SendWqe::RdmaWrite { common, .. } = &mut stale {
        common.color = !common.color;
    }
    write_at(&mut memory, version, 0, &stale);
    let error = device
        .ring_doorbell(&memory, 0, sq_doorbell_value(QUEUE, 1))
        .unwrap_err();
    assert!(
        matches!(&error, IonicError::BadWqe { reason, .. } if reason.contains("earlier lap")),
        "{error}"
    );
    assert!(!device.pending_work());
    // A doorbell past the ring's capacity (entries - 1 outstanding) takes nothing either.
    assert!(matches!(
        device.ring_doorbell(&memory, 0, sq_doorbell_value(QUEUE, 0x10)),
        Err(IonicError::BadDoorbell { .. })
    ));
}

#[test]
fn a_bad_rkey_completes_with_an_error_and_stops_the_queue_pair() {
    let version = IonicVersion::V1;
    let (mut device, mut memory) = setup(version);
    write_at(
        &mut memory,
        version,
        0,
        &put(0, BUFFER, BUFFER, 8, RKEY + 9),
    );
    write_at(
        &mut memory,
        version,
        1,
        &put(1, BUFFER, BUFFER, 8, RKEY + 1),
    );
    device
        .ring_doorbell(&memory, 0, sq_doorbell_value(QUEUE, 2))
        .unwrap();
    let mut rng = StdRng::seed_from_u64(1);
    let event = device.step(&mut memory, &mut rng).unwrap().unwrap();
    assert_eq!(event.status, STS_REMOTE_ACC_ERR);
    assert!(!device.pending_work(), "the queue pair stopped");
    let cqe = device.completion_at(&memory, 0, QUEUE, 0).unwrap().unwrap();
    assert_eq!(
        cqe.decode(),
        Ok(Completion::Send {
            qid: QUEUE,
            msn: 1,
            status: Some(STS_REMOTE_ACC_ERR)
        })
    );
}

#[test]
fn atomics_return_the_old_value_on_both_versions() {
    for version in [IonicVersion::V1, IonicVersion::V2] {
        let (mut device, mut memory) = setup(version);
        memory.write_u64(1, BUFFER + 64, 40).unwrap();
        let atomic = |index: u64, operation| SendWqe::Atomic {
            common: common_at(index, index == 1),
            remote_address: BUFFER + 64,
            rkey: RKEY + 1,
            operation,
            result: LocalBuffer {
                address: BUFFER + 8 * index,
                length_bytes: 8,
                lkey: LKEY,
            },
        };
        write_at(
            &mut memory,
            version,
            0,
            &atomic(0, AtomicOperation::FetchAdd { add: 2 }),
        );
        write_at(
            &mut memory,
            version,
            1,
            &atomic(
                1,
                AtomicOperation::CompareSwap {
                    compare: 42,
                    swap: 100,
                },
            ),
        );
        device
            .ring_doorbell(&memory, 0, sq_doorbell_value(QUEUE, 2))
            .unwrap();
        let mut rng = StdRng::seed_from_u64(2);
        while device.step(&mut memory, &mut rng).unwrap().is_some() {}
        let word = |rank, address| {
            u64::from_le_bytes(memory.read(rank, address, 8).unwrap().try_into().unwrap())
        };
        assert_eq!(word(1, BUFFER + 64), 100);
        assert_eq!((word(0, BUFFER), word(0, BUFFER + 8)), (40, 42));
        // Only the signaled second WQE completed: one CQE, message 2 (the first implied).
        let cqe = device.completion_at(&memory, 0, QUEUE, 0).unwrap().unwrap();
        assert!(matches!(cqe.decode(), Ok(Completion::Send { msn: 2, .. })));
    }
}
