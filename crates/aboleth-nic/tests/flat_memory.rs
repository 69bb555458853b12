//! The NIC model over a memory that is not the simulator's: one flat byte array per rank with
//! its registrations, and an atomic of its own (as the runtime's software NIC will have), driven
//! with `step_queue_pair` as a NIC thread does. It checks that the model needs nothing from
//! `aboleth-sim`, that atomics go through `NicMemory::atomic_update_u64`, and that a bad rkey
//! gives the remote access error CQE and stops the QP (the good WQE behind it never runs).

use aboleth_abi::mlx5::{
    CQE_SYNDROME_REMOTE_ACCESS_ERR, DoorbellRecord, LocalBuffer, RemoteAddress, UarDoorbell,
    WQE_CTRL_CQ_UPDATE, Wqe, WqeCommon, atomic_fetch_add, rdma_write,
};
mod common;

use aboleth_nic::{
    CqPollResult, Nic, NicMemory, NicOperationWork, QueuePairConfig, QueuePairState,
};
use common::{BUFFER, FlatMemory, LKEY, RANK_BYTES, RKEY};

const QPN: u32 = 0x17;
const SQ: u64 = 0;
const DBR: u64 = 0x1000;
const CQ: u64 = 0x2000;

fn common(index: u16, fm_ce_se: u8) -> WqeCommon {
    WqeCommon {
        wqe_index: index,
        qpn: QPN,
        fm_ce_se,
    }
}

/// Posts `wqes` from basic block 0, stores the doorbell record and rings the doorbell.
fn post(nic: &mut Nic, memory: &mut FlatMemory, wqes: &[Wqe]) {
    let mut block = 0u64;
    for wqe in wqes {
        for bytes in wqe.basic_blocks() {
            memory.write(0, SQ + block * 64, bytes).unwrap();
            block += 1;
        }
    }
    let record = DoorbellRecord::for_send_producer_index(block as u32);
    memory.write(0, DBR, &record.to_bytes()).unwrap();
    nic.ring_doorbell(
        0,
        UarDoorbell::next_producer_index(block as u16, QPN).to_bytes(),
    )
    .unwrap();
}

fn setup() -> (Nic, FlatMemory) {
    let mut memory = FlatMemory {
        ranks: vec![vec![0; RANK_BYTES as usize]; 2],
        atomics: 0,
    };
    let mut nic = Nic::new();
    let config = QueuePairConfig {
        rank: 0,
        peer_rank: 1,
        qpn: QPN,
        sq_buffer_address: SQ,
        sq_basic_block_count: 16,
        doorbell_record_address: DBR,
        cq_buffer_address: CQ,
        cqe_count: 4,
        cq_collapsed: false,
        receive: None,
    };
    nic.create_queue_pair(&mut memory, config).unwrap();
    (nic, memory)
}

fn run(nic: &mut Nic, memory: &mut FlatMemory) -> Vec<aboleth_nic::NicEvent> {
    let mut events = Vec::new();
    while nic.runnable_queue_pairs(memory) == vec![(0, QPN)] {
        events.push(nic.step_queue_pair(memory, 0, QPN).unwrap());
    }
    events
}

#[test]
fn a_write_and_a_fetch_add_run_over_a_memory_of_the_callers_own() {
    let (mut nic, mut memory) = setup();
    let payload: Vec<u8> = (0..64).collect();
    memory.write(0, BUFFER, &payload).unwrap();
    memory.write(1, BUFFER + 256, &41u64.to_le_bytes()).unwrap();
    let remote = |offset| RemoteAddress {
        address: BUFFER + offset,
        rkey: RKEY + 1,
    };
    let local = |offset, length_bytes| LocalBuffer {
        address: BUFFER + offset,
        lkey: LKEY,
        length_bytes,
    };
    let wqes = [
        rdma_write(&common(0, 0), remote(0), local(0, 64)),
        atomic_fetch_add(
            &common(1, WQE_CTRL_CQ_UPDATE),
            remote(256),
            1,
            local(512, 8),
        ),
    ];
    post(&mut nic, &mut memory, &wqes);
    let events = run(&mut nic, &mut memory);
    assert_eq!(events.len(), 2);
    assert_eq!(
        events[0].work.operation,
        Some(NicOperationWork::RdmaWrite { bytes: 64 })
    );
    assert!(events[0].work.doorbell_record_read);
    assert_eq!(events[1].work.operation, Some(NicOperationWork::Atomic));
    assert!(events[1].work.completion);
    assert_eq!(memory.read(1, BUFFER, 64).unwrap(), payload);
    assert_eq!(
        memory.read(1, BUFFER + 256, 8).unwrap(),
        42u64.to_le_bytes()
    );
    assert_eq!(
        memory.read(0, BUFFER + 512, 8).unwrap(),
        41u64.to_le_bytes()
    );
    assert_eq!(
        memory.atomics, 1,
        "the atomic must go through the memory's own atomic_update_u64"
    );
    assert_eq!(
        nic.poll_cq_for_index(&memory, 0, QPN, 1).unwrap(),
        CqPollResult::Completed
    );
}

#[test]
fn a_write_with_a_wrong_rkey_writes_a_remote_access_error_and_stops_the_queue() {
    let (mut nic, mut memory) = setup();
    let good = rdma_write(
        &common(1, WQE_CTRL_CQ_UPDATE),
        RemoteAddress {
            address: BUFFER,
            rkey: RKEY + 1,
        },
        LocalBuffer {
            address: BUFFER,
            lkey: LKEY,
            length_bytes: 8,
        },
    );
    memory.write(0, BUFFER, &[7; 8]).unwrap();
    let wqes = [
        rdma_write(
            &common(0, WQE_CTRL_CQ_UPDATE),
            RemoteAddress {
                address: BUFFER,
                rkey: RKEY + 7,
            },
            LocalBuffer {
                address: BUFFER,
                lkey: LKEY,
                length_bytes: 8,
            },
        ),
        good,
    ];
    post(&mut nic, &mut memory, &wqes);
    run(&mut nic, &mut memory);
    let error = CqPollResult::Error {
        syndrome: CQE_SYNDROME_REMOTE_ACCESS_ERR,
        wqe_counter: 0,
    };
    assert_eq!(nic.poll_cq_for_index(&memory, 0, QPN, 0).unwrap(), error);
    assert_eq!(
        nic.queue_pair_status(0, QPN).unwrap().state,
        QueuePairState::Error {
            syndrome: CQE_SYNDROME_REMOTE_ACCESS_ERR,
            wqe_counter: 0
        }
    );
    assert_eq!(
        memory.read(1, BUFFER, 8).unwrap(),
        [0; 8],
        "nothing may land"
    );
}

/// Ranks 0 and 2 each write with immediate to rank 1, each through a NIC of its own (as the
/// software NIC's processes do): each NIC knows rank 1's QP back to it only as a remote
/// responder, and both deliver into rank 1's one receive CQ, numbering CQEs from the count they
/// share in rank 1's memory. The CQEs must land in consecutive slots, each naming its receive
/// queue, and neither NIC may reinitialize the CQ.
#[test]
fn two_nics_deliver_writes_with_immediate_into_one_shared_receive_cq() {
    use aboleth_abi::mlx5::receive::ReceiveDataSegment;
    use aboleth_abi::mlx5::{Cqe64, DecodedCqe, decode_cqe, rdma_write_imm};
    use aboleth_nic::{ReceiveCqConfig, ReceiveQueueConfig, RemoteResponderConfig};
    const RECEIVE_QUEUES: u64 = 0x5000;
    const RECEIVE_DOORBELLS: u64 = 0x5200;
    const RECEIVE_CQ: u64 = 0x6000;
    const RECEIVE_CQ_DOORBELL: u64 = 0x6400;
    const SHARED_COUNTER: u64 = 0x6500;
    const CQES: u32 = 8;
    let mut memory = FlatMemory {
        ranks: vec![vec![0; RANK_BYTES as usize]; 3],
        atomics: 0,
    };
    // Rank 1, the CQ's owner, initializes its CQ and posts 4 receives per peer.
    memory
        .write(
            1,
            RECEIVE_CQ,
            &Cqe64::invalid().to_bytes().repeat(CQES as usize),
        )
        .unwrap();
    for (queue, requester) in [0u32, 2].into_iter().enumerate() {
        let queue = queue as u64;
        memory
            .write(
                1,
                RECEIVE_QUEUES + queue * 0x100,
                &ReceiveDataSegment::empty().to_bytes().repeat(4),
            )
            .unwrap();
        memory
            .write(1, RECEIVE_DOORBELLS + queue * 8, &4u32.to_be_bytes())
            .unwrap();
        memory
            .write(requester, BUFFER, &[requester as u8 + 1; 32])
            .unwrap();
    }
    let mut nics = Vec::new();
    for (queue, requester) in [0u32, 2].into_iter().enumerate() {
        let mut nic = Nic::new();
        nic.create_queue_pair(
            &mut memory,
            QueuePairConfig {
                rank: requester,
                peer_rank: 1,
                qpn: QPN,
                sq_buffer_address: SQ,
                sq_basic_block_count: 16,
                doorbell_record_address: DBR,
                cq_buffer_address: CQ,
                cqe_count: 4,
                cq_collapsed: false,
                receive: None,
            },
        )
        .unwrap();
        nic.create_remote_responder(
            &mut memory,
            RemoteResponderConfig {
                rank: 1,
                peer_rank: requester,
                qpn: 0x40 + requester,
                receive: ReceiveQueueConfig {
                    buffer_address: RECEIVE_QUEUES + queue as u64 * 0x100,
                    wqe_count: 4,
                    doorbell_record_address: RECEIVE_DOORBELLS + queue as u64 * 8,
                },
            },
        )
        .unwrap();
        nic.create_receive_cq(
            &mut memory,
            ReceiveCqConfig {
                rank: 1,
                buffer_address: RECEIVE_CQ,
                cqe_count: CQES,
                doorbell_record_address: RECEIVE_CQ_DOORBELL,
                shared_producer_counter_address: Some(SHARED_COUNTER),
            },
        )
        .unwrap();
        nics.push((requester, nic));
    }
    // Rank 2's NIC runs first, then rank 0's.
    for (requester, nic) in nics.iter_mut().rev() {
        let requester = *requester;
        let wqe = rdma_write_imm(
            &common(0, WQE_CTRL_CQ_UPDATE),
            RemoteAddress {
                address: BUFFER + 64 * u64::from(requester),
                rkey: RKEY + 1,
            },
            LocalBuffer {
                address: BUFFER,
                lkey: LKEY + requester,
                length_bytes: 32,
            },
            0xA0 + requester,
        );
        for (block, bytes) in wqe.basic_blocks().iter().enumerate() {
            memory
                .write(requester, SQ + block as u64 * 64, bytes)
                .unwrap();
        }
        let blocks = wqe.basic_blocks().len() as u32;
        memory
            .write(
                requester,
                DBR,
                &DoorbellRecord::for_send_producer_index(blocks).to_bytes(),
            )
            .unwrap();
        nic.ring_doorbell(
            requester,
            UarDoorbell::next_producer_index(blocks as u16, QPN).to_bytes(),
        )
        .unwrap();
        while !nic.runnable_queue_pairs(&memory).is_empty() {
            nic.step_queue_pair(&mut memory, requester, QPN).unwrap();
        }
        // The responder half never runs and takes no doorbell.
        assert!(
            nic.ring_doorbell(
                1,
                UarDoorbell::next_producer_index(1, 0x40 + requester).to_bytes()
            )
            .is_err()
        );
    }
    let cqe = |slot: u64| {
        let bytes: [u8; 64] = memory
            .read(1, RECEIVE_CQ + slot * 64, 64)
            .unwrap()
            .try_into()
            .unwrap();
        decode_cqe(&bytes).unwrap()
    };
    for (slot, requester) in [(0, 2u32), (1, 0)] {
        match cqe(slot) {
            DecodedCqe::ResponderWriteImmediate {
                qpn,
                receive_wqe_counter,
                byte_count,
                immediate,
                ..
            } => assert_eq!(
                (qpn, receive_wqe_counter, byte_count, immediate),
                (0x40 + requester, 0, 32, 0xA0 + requester),
                "slot {slot}"
            ),
            other => panic!("slot {slot}: {other:?}"),
        }
        assert_eq!(
            memory
                .read(1, BUFFER + 64 * u64::from(requester), 32)
                .unwrap(),
            vec![requester as u8 + 1; 32]
        );
    }
    assert!(matches!(cqe(2), DecodedCqe::Invalid { .. }));
    assert_eq!(
        memory.read(1, SHARED_COUNTER, 8).unwrap(),
        2u64.to_le_bytes()
    );
}
