//! The NIC model over a memory that is not the simulator's: one flat byte array per rank with
//! its registrations, and an atomic of its own (as the runtime's software NIC will have), driven
//! with `step_queue_pair` as a NIC thread does. It checks that the model needs nothing from
//! `aboleth-sim`, that atomics go through `NicMemory::atomic_update_u64`, and that a bad rkey
//! gives the remote access error CQE and stops the QP (the good WQE behind it never runs).

use aboleth_abi::mlx5::{
    CQE_SYNDROME_REMOTE_ACCESS_ERR, DoorbellRecord, LocalBuffer, RemoteAddress, UarDoorbell,
    WQE_CTRL_CQ_UPDATE, Wqe, WqeCommon, atomic_fetch_add, rdma_write,
};
use aboleth_nic::{
    CqPollResult, Nic, NicMemory, NicMemoryError, NicOperationWork, QueuePairConfig, QueuePairState,
};

const QPN: u32 = 0x17;
const RANK_BYTES: u64 = 1 << 16;
const SQ: u64 = 0;
const DBR: u64 = 0x1000;
const CQ: u64 = 0x2000;
const BUFFER: u64 = 0x4000;
const LKEY: u32 = 0x100_0001;
const RKEY: u32 = 0x200_0001;

/// Rank r's bytes are `ranks[r]`, addressed from 0; one registration per rank covers BUFFER..
#[derive(Default)]
struct FlatMemory {
    ranks: Vec<Vec<u8>>,
    atomics: u64,
}

impl FlatMemory {
    fn range(
        &self,
        rank: u32,
        address: u64,
        length: u64,
    ) -> Result<std::ops::Range<usize>, NicMemoryError> {
        if rank as usize >= self.ranks.len() || address + length > RANK_BYTES {
            return Err(NicMemoryError {
                message: format!("rank {rank}: {length} B at {address:#x} is outside its memory"),
            });
        }
        Ok(address as usize..(address + length) as usize)
    }

    fn check_key(
        &self,
        rank: u32,
        key: u32,
        expected: u32,
        address: u64,
        length: u64,
    ) -> Result<(), NicMemoryError> {
        if key != expected + rank || address < BUFFER || address + length > RANK_BYTES {
            return Err(NicMemoryError {
                message: format!(
                    "rank {rank}: key {key:#x} does not cover {length} B at {address:#x}"
                ),
            });
        }
        Ok(())
    }
}

impl NicMemory for FlatMemory {
    fn read(&self, rank: u32, address: u64, length: u64) -> Result<Vec<u8>, NicMemoryError> {
        let range = self.range(rank, address, length)?;
        Ok(self.ranks[rank as usize][range].to_vec())
    }

    fn check_mapped(&self, rank: u32, address: u64, length: u64) -> Result<(), NicMemoryError> {
        self.range(rank, address, length).map(|_| ())
    }

    fn write(&mut self, rank: u32, address: u64, bytes: &[u8]) -> Result<(), NicMemoryError> {
        let range = self.range(rank, address, bytes.len() as u64)?;
        self.ranks[rank as usize][range].copy_from_slice(bytes);
        Ok(())
    }

    fn check_local_key(
        &self,
        rank: u32,
        lkey: u32,
        address: u64,
        length: u64,
    ) -> Result<(), NicMemoryError> {
        self.check_key(rank, lkey, LKEY, address, length)
    }

    fn check_remote_key(
        &self,
        rank: u32,
        rkey: u32,
        address: u64,
        length: u64,
    ) -> Result<(), NicMemoryError> {
        self.check_key(rank, rkey, RKEY, address, length)
    }

    fn atomic_update_u64(
        &mut self,
        rank: u32,
        address: u64,
        update: &dyn Fn(u64) -> u64,
    ) -> Result<u64, NicMemoryError> {
        self.atomics += 1;
        let range = self.range(rank, address, 8)?;
        let word = &mut self.ranks[rank as usize][range];
        let old = u64::from_le_bytes(word.try_into().expect("8 bytes"));
        word.copy_from_slice(&update(old).to_le_bytes());
        Ok(old)
    }
}

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
