//! The EFA (SRD) device model over a flat memory: writes of one queue pair land in either
//! order (so a flag queued behind its data can be seen first: the hazard an EFA lowering must
//! avoid by publishing after the data's completion), completions name their request and carry
//! the lap's phase, a WQE of an earlier lap (a doorbell rung before the WQE was written) is
//! refused, bad keys and unknown address handles complete with an error status and write
//! nothing, and a write with immediate completes at the responder with its immediate.

mod common;

use aboleth_abi::efa::cqe::{FLAGS_UNSOLICITED, RxCompletion};
use aboleth_abi::efa::wqe::{RdmaWrite, RdmaWriteWqe};
use aboleth_abi::efa::{
    COMP_STATUS_LOCAL_ERROR_INVALID_AH, COMP_STATUS_OK, COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS,
    TX_WQE_BYTES,
};
use aboleth_nic::NicMemory;
use aboleth_nic::efa::{
    EfaDevice, EfaError, EfaQueuePairConfig, EfaReceiveCqConfig, send_queue_phase_of,
};
use common::{BUFFER, FlatMemory, LKEY, RANK_BYTES, RKEY};
use rand::SeedableRng;
use rand::rngs::StdRng;

const QP: u16 = 3;
const SQ: u64 = 0;
const CQ: u64 = 0x1000;
const RECEIVE_CQ: u64 = 0x2000;
const SQ_ENTRIES: u32 = 4;
const AH: u16 = 9;
/// Rank 1's address handle of rank 0.
const RESPONDER_AH: u16 = 77;

fn setup() -> (EfaDevice, FlatMemory) {
    let memory = FlatMemory {
        ranks: vec![vec![0; RANK_BYTES as usize]; 2],
        atomics: 0,
    };
    let mut device = EfaDevice::new();
    for rank in 0..2 {
        device
            .create_queue_pair(EfaQueuePairConfig {
                rank,
                qp_num: QP,
                sq_address: SQ,
                sq_entries: SQ_ENTRIES,
                cq_address: CQ,
                cq_entries: 4,
            })
            .unwrap();
        device
            .create_receive_cq(EfaReceiveCqConfig {
                consumer_index_address: None,
                rank,
                address: RECEIVE_CQ,
                entries: 4,
            })
            .unwrap();
    }
    device.add_address_handle(0, AH, 1);
    device.add_address_handle(1, RESPONDER_AH, 0);
    (device, memory)
}

/// Rank 0 writes `length` bytes of its BUFFER + `source` to rank 1's BUFFER + `destination`.
fn write(index: u32, source: u64, destination: u64, length: u32, completion: bool) -> RdmaWrite {
    RdmaWrite {
        req_id: index as u16,
        phase: send_queue_phase_of(index, SQ_ENTRIES),
        completion_requested: completion,
        dest_qp_num: QP,
        ah: AH,
        qkey: 0x1234,
        remote_address: BUFFER + destination,
        rkey: RKEY + 1,
        local_address: BUFFER + source,
        lkey: LKEY,
        length_bytes: length,
        immediate: None,
    }
}

fn post(memory: &mut FlatMemory, index: u32, write: &RdmaWrite) {
    let slot = u64::from(index % SQ_ENTRIES);
    memory
        .write(
            0,
            SQ + slot * TX_WQE_BYTES as u64,
            &RdmaWriteWqe::encode(write).to_bytes(),
        )
        .unwrap();
}

fn run(
    device: &mut EfaDevice,
    memory: &mut FlatMemory,
    rng: &mut StdRng,
) -> Vec<aboleth_nic::efa::EfaEvent> {
    let mut events = Vec::new();
    while let Some(event) = device.step(memory, rng).unwrap() {
        events.push(event);
    }
    events
}

#[test]
fn writes_of_one_queue_pair_land_in_either_order() {
    let mut flag_first = 0;
    let seeds = 64;
    for seed in 0..seeds {
        let (mut device, mut memory) = setup();
        memory.write(0, BUFFER, &[0xab; 64]).unwrap();
        memory.write(0, BUFFER + 64, &1u64.to_le_bytes()).unwrap();
        post(&mut memory, 0, &write(0, 0, 0, 64, false)); // the data
        post(&mut memory, 1, &write(1, 64, 256, 8, true)); // the flag, queued behind it
        device.ring_doorbell(&memory, 0, QP, 2).unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        let first = device.step(&mut memory, &mut rng).unwrap().unwrap();
        if first.index == 1 {
            // What a receiver polling the flag sees now: the flag, and not yet the data.
            assert_eq!(memory.read(1, BUFFER + 256, 8).unwrap(), 1u64.to_le_bytes());
            assert_eq!(memory.read(1, BUFFER, 64).unwrap(), vec![0; 64]);
            flag_first += 1;
        }
        run(&mut device, &mut memory, &mut rng);
        assert_eq!(memory.read(1, BUFFER, 64).unwrap(), vec![0xab; 64]);
    }
    assert!(
        0 < flag_first && flag_first < seeds,
        "the flag landed first in {flag_first} of {seeds} runs: SRD orders neither way"
    );
}

#[test]
fn completions_name_their_request_and_carry_the_laps_phase() {
    let (mut device, mut memory) = setup();
    memory.write(0, BUFFER, &[7; 256]).unwrap();
    let mut rng = StdRng::seed_from_u64(5);
    let post_writes = |memory: &mut FlatMemory, range: std::ops::Range<u32>| {
        for index in range {
            post(
                memory,
                index,
                &write(index, 0, u64::from(index) * 32, 32, true),
            );
        }
    };
    let requests = |device: &EfaDevice, memory: &FlatMemory, range: std::ops::Range<u32>| {
        range
            .map(|index| {
                let completion = device
                    .poll_send_completion(memory, 0, QP, index)
                    .unwrap()
                    .unwrap_or_else(|| panic!("completion {index} not written"));
                assert_eq!(completion.status, COMP_STATUS_OK);
                u32::from(completion.req_id)
            })
            .collect::<Vec<_>>()
    };
    // Two laps of the 4-entry send queue and CQ: 4 writes, then 2 more once the first are done.
    post_writes(&mut memory, 0..4);
    device.ring_doorbell(&memory, 0, QP, 4).unwrap();
    let first_lap: Vec<u32> = run(&mut device, &mut memory, &mut rng)
        .iter()
        .map(|event| event.index)
        .collect();
    assert_ne!(
        first_lap,
        vec![0, 1, 2, 3],
        "seed 5 executes out of posting order"
    );
    // The CQ's first lap holds every request once, in execution order.
    assert_eq!(requests(&device, &memory, 0..4), first_lap);
    post_writes(&mut memory, 4..6);
    device.ring_doorbell(&memory, 0, QP, 6).unwrap();
    run(&mut device, &mut memory, &mut rng);
    let mut second_lap = requests(&device, &memory, 4..6);
    second_lap.sort();
    assert_eq!(second_lap, vec![4, 5]);
    // Slots 0 and 1 now hold lap 1's completions, slot 2 still lap 0's: neither is what a
    // consumer at index 0 or 6 waits for.
    assert!(
        device
            .poll_send_completion(&memory, 0, QP, 0)
            .unwrap()
            .is_none()
    );
    assert!(
        device
            .poll_send_completion(&memory, 0, QP, 6)
            .unwrap()
            .is_none()
    );
}

#[test]
fn a_wqe_of_an_earlier_lap_is_refused() {
    let (mut device, mut memory) = setup();
    for index in 0..4 {
        post(&mut memory, index, &write(index, 0, 0, 8, false));
    }
    device.ring_doorbell(&memory, 0, QP, 4).unwrap();
    run(&mut device, &mut memory, &mut StdRng::seed_from_u64(1));
    post(&mut memory, 4, &write(4, 0, 0, 8, false));
    // Index 5 is rung before its WQE is written: slot 1 still holds lap 0's. The good WQE 4
    // before it is not taken either.
    let error = device.ring_doorbell(&memory, 0, QP, 6).unwrap_err();
    assert!(
        matches!(
            error,
            EfaError::BadWqe {
                index: 5,
                slot: 1,
                ..
            }
        ),
        "{error}"
    );
    assert!(
        error.to_string().contains("a WQE of an earlier lap"),
        "{error}"
    );
    assert_eq!(
        device.in_flight_count(),
        0,
        "a refused doorbell takes nothing"
    );
    post(&mut memory, 5, &write(5, 0, 0, 8, false));
    device.ring_doorbell(&memory, 0, QP, 6).unwrap();
    assert_eq!(device.in_flight_count(), 2);
    let mut fresh = EfaDevice::new();
    fresh
        .create_queue_pair(EfaQueuePairConfig {
            rank: 0,
            qp_num: QP,
            sq_address: SQ,
            sq_entries: SQ_ENTRIES,
            cq_address: CQ,
            cq_entries: 8,
        })
        .unwrap();
    // A producer index more than a ring ahead.
    let error = fresh.ring_doorbell(&memory, 0, QP, 5).unwrap_err();
    assert!(
        matches!(error, EfaError::BadDoorbell { producer: 5, .. }),
        "{error}"
    );
}

#[test]
fn bad_keys_and_unknown_address_handles_complete_with_an_error_and_write_nothing() {
    let (mut device, mut memory) = setup();
    memory.write(0, BUFFER, &[9; 16]).unwrap();
    let mut bad_rkey = write(0, 0, 0, 16, false);
    bad_rkey.rkey = RKEY; // rank 0's key, not rank 1's
    let mut bad_ah = write(1, 0, 64, 16, false);
    bad_ah.ah = AH + 1;
    post(&mut memory, 0, &bad_rkey);
    post(&mut memory, 1, &bad_ah);
    device.ring_doorbell(&memory, 0, QP, 2).unwrap();
    let events = run(&mut device, &mut memory, &mut StdRng::seed_from_u64(2));
    let status_of = |index| {
        events
            .iter()
            .find(|event| event.index == index)
            .unwrap()
            .status
    };
    assert_eq!(status_of(0), COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS);
    assert_eq!(status_of(1), COMP_STATUS_LOCAL_ERROR_INVALID_AH);
    assert!(
        events.iter().all(|event| event.completed),
        "a failed write always completes"
    );
    assert_eq!(memory.read(1, BUFFER, 80).unwrap(), vec![0; 80]);
}

#[test]
fn a_write_with_immediate_completes_at_the_responder_with_its_immediate() {
    let (mut device, mut memory) = setup();
    memory.write(0, BUFFER, &[3; 8]).unwrap();
    let mut with_immediate = write(0, 0, 0, 8, false);
    with_immediate.immediate = Some(0xfeed_0001);
    post(&mut memory, 0, &with_immediate);
    device.ring_doorbell(&memory, 0, QP, 1).unwrap();
    run(&mut device, &mut memory, &mut StdRng::seed_from_u64(3));
    let bytes = memory.read(1, RECEIVE_CQ, 16).unwrap();
    let completion = RxCompletion::from_bytes(bytes.as_slice().try_into().unwrap());
    assert_eq!(completion.immediate(), Some(0xfeed_0001));
    assert_eq!((completion.length, completion.src_qp_num), (8, QP));
    assert_eq!(
        completion.ah, RESPONDER_AH,
        "the responder's handle of the sender"
    );
    assert_ne!(completion.flags & FLAGS_UNSOLICITED, 0);
    assert_eq!(memory.read(1, BUFFER, 8).unwrap(), vec![3; 8]);
}
