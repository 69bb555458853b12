//! End-to-end checks of the device models: WQEs built with aboleth-abi's builders, written into
//! simulated memory, executed by the NIC model; proxy rings; and the GPU store buffer's ordering.

use aboleth_abi::mlx5::{
    CQE_SYNDROME_LOCAL_PROT_ERR, CQE_SYNDROME_LOCAL_QP_OP_ERR, CQE_SYNDROME_REMOTE_ACCESS_ERR,
    CQE_SYNDROME_REMOTE_INVAL_REQ_ERR, DecodedCqe, DoorbellRecord, LocalBuffer, RemoteAddress,
    UarDoorbell, WQE_CTRL_CQ_UPDATE, Wqe, WqeCommon, decode_cqe, masked_fetch_add_64, nop,
    rdma_write, rdma_write_imm, rdma_write_inline,
};
use aboleth_abi::proxy::{ProxyOperation, ProxyPut, ProxySignal, SignalOperation, slot_index};
use aboleth_abi::{ProxyCommand, ProxyRingEntry, ProxyRingHeader, RemoteRegionDescriptor};
use aboleth_sim::{
    CostModel, CqPollResult, GpuStoreBuffer, Memory, MemoryKind, Nic, NicError, ProxyEngine,
    ProxyError, QueuePairConfig, QueuePairState, RegionTable, WqeOutcome,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const QPN: u32 = 0x42;
const BUFFER_BYTES: u64 = 4096;

/// Rank 0 owns a QP to rank 1; `source` (rank 0) and `destination` (rank 1) are registered.
struct Mlx5Fixture {
    memory: Memory,
    nic: Nic,
    config: QueuePairConfig,
    source: u64,
    lkey: u32,
    destination: u64,
    rkey: u32,
    rng: ChaCha8Rng,
}

impl Mlx5Fixture {
    fn new(sq_basic_block_count: u32, cqe_count: u32, cq_collapsed: bool) -> Self {
        let mut memory = Memory::new();
        let sq_bytes = u64::from(sq_basic_block_count) * 64;
        let sq_buffer_address = memory.allocate(0, sq_bytes, MemoryKind::Device, "sq");
        let doorbell_record_address = memory.allocate(0, 8, MemoryKind::Device, "dbr");
        let cq_bytes = u64::from(cqe_count) * 64;
        let cq_buffer_address = memory.allocate(0, cq_bytes, MemoryKind::Device, "cq");
        let source = memory.allocate(0, BUFFER_BYTES, MemoryKind::Device, "source");
        let destination = memory.allocate(1, BUFFER_BYTES, MemoryKind::Device, "destination");
        let (lkey, _) = memory.register(0, source, BUFFER_BYTES).unwrap();
        let (_, rkey) = memory.register(1, destination, BUFFER_BYTES).unwrap();
        let config = QueuePairConfig {
            rank: 0,
            peer_rank: 1,
            qpn: QPN,
            sq_buffer_address,
            sq_basic_block_count,
            doorbell_record_address,
            cq_buffer_address,
            cqe_count,
            cq_collapsed,
            receive: None,
        };
        let mut nic = Nic::new();
        nic.create_queue_pair(&mut memory, config).unwrap();
        Self {
            memory,
            nic,
            config,
            source,
            lkey,
            destination,
            rkey,
            rng: ChaCha8Rng::seed_from_u64(7),
        }
    }

    fn common(index: u64, fm_ce_se: u8) -> WqeCommon {
        WqeCommon {
            wqe_index: index as u16,
            qpn: QPN,
            fm_ce_se,
        }
    }

    fn remote(&self, offset: u64) -> RemoteAddress {
        RemoteAddress {
            address: self.destination + offset,
            rkey: self.rkey,
        }
    }

    fn local(&self, offset: u64, length_bytes: u32) -> LocalBuffer {
        LocalBuffer {
            address: self.source + offset,
            lkey: self.lkey,
            length_bytes,
        }
    }

    /// Writes `wqe` into the ring at 64-bit basic-block index `index`, wrapping.
    fn post(&mut self, wqe: &Wqe, index: u64) {
        for (offset, block) in wqe.basic_blocks().iter().enumerate() {
            let slot = (index + offset as u64) % u64::from(self.config.sq_basic_block_count);
            let address = self.config.sq_buffer_address + slot * 64;
            self.memory.write(0, address, block).unwrap();
        }
    }

    fn write_doorbell_record(&mut self, producer_index: u64) {
        let record = DoorbellRecord::for_send_producer_index(producer_index as u32);
        let address = self.config.doorbell_record_address;
        self.memory.write(0, address, &record.to_bytes()).unwrap();
    }

    fn ring_doorbell(&mut self, producer_index: u64) {
        let value = UarDoorbell::next_producer_index(producer_index as u16, QPN).to_bytes();
        self.nic.ring_doorbell(0, value).unwrap();
    }

    fn run_until_idle(&mut self) -> Vec<aboleth_sim::NicEvent> {
        let mut events = Vec::new();
        while let Some(event) = self.nic.step(&mut self.memory, &mut self.rng).unwrap() {
            events.push(event);
        }
        assert!(!self.nic.pending_work(&self.memory));
        events
    }

    fn poll(&self, wqe_index: u64) -> CqPollResult {
        self.nic
            .poll_cq_for_index(&self.memory, 0, QPN, wqe_index)
            .unwrap()
    }

    fn cqe(&self, slot: u64) -> DecodedCqe {
        let address = self.config.cq_buffer_address + slot * 64;
        let bytes = self.memory.read(0, address, 64).unwrap();
        decode_cqe(&bytes.try_into().unwrap()).unwrap()
    }
}

#[test]
fn writes_inline_writes_and_a_signal_land_in_the_peer() {
    let mut fixture = Mlx5Fixture::new(16, 1, true);
    let payload: Vec<u8> = (0..=255).collect();
    fixture.memory.write(0, fixture.source, &payload).unwrap();
    let wqes = [
        rdma_write(
            &Mlx5Fixture::common(0, 0),
            fixture.remote(0),
            fixture.local(0, 256),
        ),
        rdma_write_inline(
            &Mlx5Fixture::common(1, 0),
            fixture.remote(512),
            b"hello inline",
        )
        .unwrap(),
        rdma_write_imm(
            &Mlx5Fixture::common(2, 0),
            fixture.remote(768),
            fixture.local(0, 4),
            0xfeed,
        ),
        masked_fetch_add_64(
            &Mlx5Fixture::common(3, WQE_CTRL_CQ_UPDATE),
            fixture.remote(1024),
            5,
            0,
            fixture.local(2048, 8),
        ),
    ];
    for (index, wqe) in wqes.iter().enumerate() {
        fixture.post(wqe, index as u64);
    }
    assert_eq!(fixture.poll(0), CqPollResult::Pending);
    fixture.write_doorbell_record(4);
    fixture.ring_doorbell(4);
    let events = fixture.run_until_idle();
    assert_eq!(events.len(), 4);
    assert_eq!(events[0].doorbell_record_producer_index, Some(4));
    assert!(events.iter().all(|event| {
        aboleth_sim::nic::nic_work_cost(&CostModel::default(), &event.work).0 > 0
    }));
    let immediate = events
        .iter()
        .find_map(|event| match &event.wqe.as_ref()?.outcome {
            WqeOutcome::Completed { immediate, .. } => *immediate,
            WqeOutcome::Failed { .. } => None,
        });
    assert_eq!(immediate, Some(0xfeed));
    let memory = &fixture.memory;
    assert_eq!(memory.read(1, fixture.destination, 256).unwrap(), payload);
    assert_eq!(
        memory.read(1, fixture.destination + 512, 12).unwrap(),
        b"hello inline"
    );
    assert_eq!(
        memory.read(1, fixture.destination + 768, 4).unwrap(),
        payload[..4]
    );
    assert_eq!(memory.read_u64(1, fixture.destination + 1024).unwrap(), 5);
    // The old value (0) landed in the local result buffer, little-endian.
    assert_eq!(memory.read_u64(0, fixture.source + 2048).unwrap(), 0);
    // One CQE (collapsed, slot 0) for the last WQE retires all four.
    for index in 0..4 {
        assert_eq!(fixture.poll(index), CqPollResult::Completed);
    }
    let status = fixture.nic.queue_pair_status(0, QPN).unwrap();
    assert_eq!((status.wqes_executed, status.completions_written), (4, 1));
}

#[test]
fn cqe_owner_bits_flip_every_lap_of_a_four_entry_cq() {
    let mut fixture = Mlx5Fixture::new(8, 4, false);
    for index in 0..12u64 {
        fixture.post(&nop(&Mlx5Fixture::common(index, WQE_CTRL_CQ_UPDATE)), index);
        fixture.write_doorbell_record(index + 1);
        fixture.ring_doorbell(index + 1);
        assert_eq!(fixture.poll(index), CqPollResult::Pending);
        let events = fixture.run_until_idle();
        assert_eq!(events.len(), 1);
        let slot = index % 4;
        assert_eq!(events[0].wqe.as_ref().unwrap().cqe_slot, Some(slot as u32));
        let DecodedCqe::Requester {
            completion, owner, ..
        } = fixture.cqe(slot)
        else {
            panic!("slot {slot} holds no requester CQE");
        };
        assert_eq!(owner, (index / 4) % 2 == 1, "CQE {index}");
        assert_eq!(u64::from(completion.wqe_counter), index);
        assert_eq!(completion.qpn, QPN);
        // The stateless poll finds the newest CQE through the owner bits.
        assert_eq!(fixture.poll(index), CqPollResult::Completed);
        assert_eq!(
            fixture.poll(index.saturating_sub(3)),
            CqPollResult::Completed
        );
    }
}

#[test]
fn an_out_of_bounds_rkey_gives_a_remote_access_error_and_stops_the_queue() {
    let mut fixture = Mlx5Fixture::new(8, 4, false);
    let overrun = rdma_write(
        &Mlx5Fixture::common(1, 0),
        fixture.remote(BUFFER_BYTES - 8),
        fixture.local(0, 16),
    );
    fixture.post(&nop(&Mlx5Fixture::common(0, 0)), 0);
    fixture.post(&overrun, 1);
    fixture.post(&nop(&Mlx5Fixture::common(2, WQE_CTRL_CQ_UPDATE)), 2);
    fixture.write_doorbell_record(3);
    fixture.ring_doorbell(3);
    let events = fixture.run_until_idle();
    assert_eq!(events.len(), 2, "the WQE after the error is not executed");
    let Some(WqeOutcome::Failed { syndrome, reason }) =
        events[1].wqe.as_ref().map(|wqe| &wqe.outcome)
    else {
        panic!("second WQE did not fail: {events:?}");
    };
    assert_eq!(*syndrome, CQE_SYNDROME_REMOTE_ACCESS_ERR);
    assert!(
        reason.contains("rank 1") && reason.contains("rkey"),
        "{reason}"
    );
    let DecodedCqe::RequesterError {
        completion,
        syndrome,
        ..
    } = fixture.cqe(0)
    else {
        panic!("no error CQE");
    };
    assert_eq!((syndrome, completion.wqe_counter), (0x13, 1));
    assert_eq!(fixture.poll(0), CqPollResult::Completed);
    let error = CqPollResult::Error {
        syndrome: 0x13,
        wqe_counter: 1,
    };
    assert_eq!(fixture.poll(1), error);
    assert_eq!(fixture.poll(2), error);
    let status = fixture.nic.queue_pair_status(0, QPN).unwrap();
    assert_eq!(
        status.state,
        QueuePairState::Error {
            syndrome: 0x13,
            wqe_counter: 1
        }
    );
    assert!(
        fixture
            .nic
            .describe_queue(0, QPN)
            .contains("remote access error")
    );
    // A later doorbell does not revive the queue.
    fixture.ring_doorbell(3);
    assert!(!fixture.nic.pending_work(&fixture.memory));
}

/// Builds a WQE against a fixture's buffers and keys.
type BuildWqe = fn(&Mlx5Fixture) -> Wqe;

#[test]
fn bad_keys_and_misaligned_atomics_have_their_own_syndromes() {
    let cases: [(BuildWqe, u8); 3] = [
        (
            |f| {
                rdma_write(
                    &Mlx5Fixture::common(0, 0),
                    f.remote(0),
                    LocalBuffer {
                        lkey: f.lkey + 1,
                        ..f.local(0, 8)
                    },
                )
            },
            CQE_SYNDROME_LOCAL_PROT_ERR,
        ),
        (
            |f| {
                rdma_write(
                    &Mlx5Fixture::common(0, 0),
                    RemoteAddress {
                        rkey: f.lkey,
                        ..f.remote(0)
                    },
                    f.local(0, 8),
                )
            },
            CQE_SYNDROME_REMOTE_ACCESS_ERR,
        ),
        (
            |f| masked_fetch_add_64(&Mlx5Fixture::common(0, 0), f.remote(4), 1, 0, f.local(0, 8)),
            CQE_SYNDROME_REMOTE_INVAL_REQ_ERR,
        ),
    ];
    for (build, expected) in cases {
        let mut fixture = Mlx5Fixture::new(4, 1, true);
        let wqe = build(&fixture);
        fixture.post(&wqe, 0);
        fixture.write_doorbell_record(1);
        fixture.ring_doorbell(1);
        fixture.run_until_idle();
        assert_eq!(
            fixture.poll(0),
            CqPollResult::Error {
                syndrome: expected,
                wqe_counter: 0
            }
        );
        assert_eq!(fixture.memory.read_u64(1, fixture.destination).unwrap(), 0);
    }
}

#[test]
fn a_doorbell_rung_before_the_doorbell_record_write_executes_nothing() {
    let mut fixture = Mlx5Fixture::new(8, 1, true);
    fixture.memory.write(0, fixture.source, &[9; 8]).unwrap();
    fixture.post(&write_for(&fixture), 0);
    // The bug: the doorbell is rung and the NIC looks before the record is written.
    fixture.ring_doorbell(1);
    let events = fixture.run_until_idle();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].doorbell_record_producer_index, Some(0));
    assert_eq!(events[0].wqe, None);
    assert_eq!(fixture.memory.read_u64(1, fixture.destination).unwrap(), 0);
    // Writing the record afterwards is not enough: nothing tells the NIC to look again.
    fixture.write_doorbell_record(1);
    assert!(!fixture.nic.pending_work(&fixture.memory));
    assert!(
        fixture
            .nic
            .step(&mut fixture.memory, &mut fixture.rng)
            .unwrap()
            .is_none()
    );
    assert_eq!(fixture.poll(0), CqPollResult::Pending);
    // A later doorbell, after the record write, executes the WQE.
    fixture.ring_doorbell(1);
    assert_eq!(fixture.run_until_idle().len(), 1);
    assert_eq!(
        fixture.memory.read(1, fixture.destination, 8).unwrap(),
        vec![9; 8]
    );
    assert_eq!(fixture.poll(0), CqPollResult::Completed);
}

fn write_for(fixture: &Mlx5Fixture) -> Wqe {
    rdma_write(
        &Mlx5Fixture::common(0, WQE_CTRL_CQ_UPDATE),
        fixture.remote(0),
        fixture.local(0, 8),
    )
}

#[test]
fn a_stale_slot_is_a_local_qp_operation_error() {
    let mut fixture = Mlx5Fixture::new(4, 4, false);
    for index in 0..4 {
        fixture.post(&nop(&Mlx5Fixture::common(index, 0)), index);
    }
    fixture.write_doorbell_record(4);
    fixture.ring_doorbell(4);
    assert_eq!(fixture.run_until_idle().len(), 4);
    // Second lap: WQE 4 is written to slot 0, but the producer claims 6 and slot 1 still holds
    // WQE 1 from the first lap.
    fixture.post(&nop(&Mlx5Fixture::common(4, 0)), 4);
    fixture.write_doorbell_record(6);
    fixture.ring_doorbell(6);
    let events = fixture.run_until_idle();
    assert_eq!(events.len(), 2);
    let Some(WqeOutcome::Failed { syndrome, reason }) =
        events[1].wqe.as_ref().map(|wqe| &wqe.outcome)
    else {
        panic!("stale slot executed: {events:?}");
    };
    assert_eq!(*syndrome, CQE_SYNDROME_LOCAL_QP_OP_ERR);
    assert!(reason.contains("stale"), "{reason}");
    assert_eq!(
        fixture.poll(5),
        CqPollResult::Error {
            syndrome: CQE_SYNDROME_LOCAL_QP_OP_ERR,
            wqe_counter: 5
        }
    );
}

#[test]
fn simulation_errors_name_rank_and_queue() {
    let mut fixture = Mlx5Fixture::new(4, 4, false);
    let unknown = UarDoorbell::next_producer_index(1, 0x99).to_bytes();
    let error = fixture.nic.ring_doorbell(0, unknown).unwrap_err();
    assert_eq!(error, NicError::UnknownQueuePair { rank: 0, qpn: 0x99 });
    // The record claims more than the 4-block ring holds.
    fixture.write_doorbell_record(9);
    fixture.ring_doorbell(9);
    let error = fixture
        .nic
        .step(&mut fixture.memory, &mut fixture.rng)
        .unwrap_err();
    assert!(matches!(
        error,
        NicError::DoorbellRecordOverrun {
            rank: 0,
            qpn: QPN,
            ..
        }
    ));
    assert!(error.to_string().contains("QP 0x42"), "{error}");
}

/// Rank 0's proxy ring to rank 1; region 0 is a data buffer and region 1 a signal word array.
struct ProxyFixture {
    memory: Memory,
    engine: ProxyEngine,
    ring: u64,
    source: u64,
    data: u64,
    signals: u64,
    rng: ChaCha8Rng,
}

impl ProxyFixture {
    fn new() -> Self {
        let mut memory = Memory::new();
        let ring_bytes = 256 + 4 * 64;
        let ring = memory.allocate(0, ring_bytes, MemoryKind::HostPinned, "proxy ring");
        let source = memory.allocate(0, 256, MemoryKind::Device, "source");
        let mut regions = RegionTable::new();
        let mut data = 0;
        let mut signals = 0;
        for (region_index, length_bytes) in [(0, 256), (1, 64)] {
            let mut descriptors = Vec::new();
            for rank in 0..2 {
                let name = format!("region {region_index}");
                let base_address = memory.allocate(rank, length_bytes, MemoryKind::Device, &name);
                if rank == 1 {
                    *[&mut data, &mut signals][region_index as usize] = base_address;
                }
                descriptors.push(RemoteRegionDescriptor {
                    base_address,
                    length_bytes,
                    peer_rank: rank,
                    ..Default::default()
                });
            }
            regions.insert(region_index, descriptors);
        }
        let mut engine = ProxyEngine::new(0, regions, CostModel::default());
        engine.register_ring(&mut memory, 1, ring, 4).unwrap();
        Self {
            memory,
            engine,
            ring,
            source,
            data,
            signals,
            rng: ChaCha8Rng::seed_from_u64(3),
        }
    }

    fn write_entry(&mut self, entry: &ProxyRingEntry, with_sequence: bool) {
        let ticket = entry.sequence - 1;
        let address = self.ring + 256 + slot_index(ticket, 4) as u64 * 64;
        let mut bytes = entry.to_bytes();
        if !with_sequence {
            bytes[..8].fill(0);
        }
        self.memory.write(0, address, &bytes).unwrap();
    }

    fn step(&mut self) -> Result<Option<aboleth_sim::ProxyEvent>, ProxyError> {
        self.engine.step(&mut self.memory, &mut self.rng)
    }
}

fn put_command(ticket: u64, source_key: u32, source: u64) -> ProxyCommand {
    ProxyCommand {
        ticket,
        peer_rank: 1,
        completion_requested: false,
        operation: ProxyOperation::Put(ProxyPut {
            source_address: source,
            source_key,
            destination_region_index: 0,
            destination_offset_bytes: 16,
            length_bytes: 32,
        }),
    }
}

#[test]
fn the_proxy_executes_put_then_signal_and_waits_for_unwritten_sequences() {
    let mut fixture = ProxyFixture::new();
    fixture.memory.write(0, fixture.source, &[7; 32]).unwrap();
    let put = put_command(0, 0, fixture.source).encode();
    let signal = ProxyCommand {
        ticket: 1,
        peer_rank: 1,
        completion_requested: true,
        operation: ProxyOperation::Signal(ProxySignal {
            region_index: 1,
            offset_bytes: 8,
            value: 1,
            operation: SignalOperation::Add,
        }),
    }
    .encode();
    // Both entries written, but the head not yet published: nothing is consumed.
    fixture.write_entry(&signal, true);
    fixture.write_entry(&put, false);
    assert!(fixture.step().unwrap().is_none());
    // Head published, but ticket 0's sequence store is not visible yet: still nothing, and
    // ticket 1 does not overtake it.
    fixture
        .memory
        .write_u64(
            0,
            fixture.ring + ProxyRingHeader::PRODUCER_HEAD_OFFSET_BYTES,
            2,
        )
        .unwrap();
    assert!(fixture.engine.pending_work(&fixture.memory));
    assert!(fixture.step().unwrap().is_none());
    assert!(
        fixture
            .engine
            .describe_rings(&fixture.memory)
            .contains("not visible")
    );
    fixture.write_entry(&put, true);
    let first = fixture.step().unwrap().unwrap();
    assert_eq!(first.command.ticket, 0);
    assert_eq!(
        fixture.memory.read(1, fixture.data + 16, 32).unwrap(),
        vec![7; 32]
    );
    assert_eq!(fixture.memory.read_u64(1, fixture.signals + 8).unwrap(), 0);
    let second = fixture.step().unwrap().unwrap();
    assert_eq!(
        (second.command.ticket, second.completion_counter),
        (1, Some(2))
    );
    assert_eq!(fixture.memory.read_u64(1, fixture.signals + 8).unwrap(), 1);
    let header_bytes = fixture.memory.read(0, fixture.ring, 256).unwrap();
    let header = ProxyRingHeader::from_bytes(&header_bytes.try_into().unwrap());
    assert_eq!((header.consumer_head, header.completion_counter), (2, 2));
    assert!(fixture.step().unwrap().is_none());
    assert!(!fixture.engine.pending_work(&fixture.memory));
}

#[test]
fn a_failed_proxy_command_names_its_ticket_and_stops_the_ring() {
    let mut fixture = ProxyFixture::new();
    let bad_key = put_command(0, 0xdead, fixture.source).encode();
    fixture.write_entry(&bad_key, true);
    fixture.write_entry(&put_command(1, 0, fixture.source).encode(), true);
    fixture
        .memory
        .write_u64(
            0,
            fixture.ring + ProxyRingHeader::PRODUCER_HEAD_OFFSET_BYTES,
            2,
        )
        .unwrap();
    let error = fixture.step().unwrap_err();
    let message = error.to_string();
    assert!(matches!(
        error,
        ProxyError::CommandFailed {
            ticket: 0,
            peer_rank: 1,
            ..
        }
    ));
    for needle in ["rank 0", "peer 1", "ticket 0", "0xdead"] {
        assert!(message.contains(needle), "{needle} missing from: {message}");
    }
    assert!(fixture.step().unwrap().is_none());
    assert!(
        fixture
            .engine
            .describe_rings(&fixture.memory)
            .contains("STOPPED")
    );
}

/// A writer stores 4 x 16 B of data then a flag to rank 1; a reader checks after every action
/// whether it can see the flag without all of the data.
fn flag_overtakes_data(seed: u64, release_flag: bool) -> bool {
    let mut memory = Memory::new();
    let data = memory.allocate(1, 64, MemoryKind::Device, "data");
    let flag = memory.allocate(1, 8, MemoryKind::Device, "flag");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut writer = GpuStoreBuffer::new(0, 0);
    let mut issued = 0;
    loop {
        let can_issue = issued <= 4;
        if can_issue && (!writer.has_pending() || rng.random_bool(0.5)) {
            if issued < 4 {
                writer
                    .store(&memory, 1, data + issued * 16, &[0xAB; 16])
                    .unwrap();
            } else if release_flag {
                writer
                    .store_release(&mut memory, &mut rng, 1, flag, &1u64.to_le_bytes())
                    .unwrap();
            } else {
                writer.store(&memory, 1, flag, &1u64.to_le_bytes()).unwrap();
            }
            issued += 1;
        } else if writer
            .drain_one_random(&mut memory, &mut rng)
            .unwrap()
            .is_none()
        {
            break;
        }
        let flag_seen = memory.read_u64(1, flag).unwrap() == 1;
        if flag_seen && memory.read(1, data, 64).unwrap() != vec![0xAB; 64] {
            return true;
        }
    }
    assert_eq!(memory.read(1, data, 64).unwrap(), vec![0xAB; 64]);
    false
}

#[test]
fn without_release_a_flag_can_overtake_its_data_and_with_release_never() {
    let overtaken = (0..200)
        .filter(|&seed| flag_overtakes_data(seed, false))
        .count();
    assert!(overtaken > 0, "no seed reordered the plain stores");
    for seed in 0..200 {
        assert!(!flag_overtakes_data(seed, true), "seed {seed}");
    }
}

#[test]
fn wqe_bytes_still_in_the_store_buffer_are_invisible_to_the_nic() {
    // The GPU writes the WQE with plain stores and the record with a plain store too, then rings:
    // for some seed the NIC reads the new record but the old (zero) WQE bytes.
    let mut malformed_seen = false;
    for seed in 0..50 {
        let mut fixture = Mlx5Fixture::new(4, 1, true);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut gpu = GpuStoreBuffer::new(0, 0);
        let wqe = write_for(&fixture);
        let (ring, dbr) = (
            fixture.config.sq_buffer_address,
            fixture.config.doorbell_record_address,
        );
        gpu.store(&fixture.memory, 0, ring, wqe.as_bytes()).unwrap();
        let record = DoorbellRecord::for_send_producer_index(1).to_bytes();
        gpu.store(&fixture.memory, 0, dbr, &record).unwrap();
        gpu.drain_one_random(&mut fixture.memory, &mut rng).unwrap();
        fixture.ring_doorbell(1);
        let events = fixture.run_until_idle();
        if let Some(WqeOutcome::Failed { syndrome, .. }) = events
            .first()
            .and_then(|event| event.wqe.as_ref())
            .map(|wqe| &wqe.outcome)
        {
            assert_eq!(*syndrome, CQE_SYNDROME_LOCAL_QP_OP_ERR);
            malformed_seen = true;
        }
    }
    assert!(malformed_seen);
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_fence_leaves_memory_as_program_order_would(
            seed in any::<u64>(),
            stores in proptest::collection::vec((0u64..56, 1usize..9, any::<u8>()), 1..24),
        ) {
            let mut memory = Memory::new();
            let base = memory.allocate(0, 64, MemoryKind::Device, "words");
            let mut expected = vec![0u8; 64];
            let mut buffer = GpuStoreBuffer::new(0, 0);
            for &(offset, length, value) in &stores {
                buffer.store(&memory, 0, base + offset, &vec![value; length]).unwrap();
                expected[offset as usize..offset as usize + length].fill(value);
                prop_assert_eq!(buffer.load(&memory, 0, base, 64).unwrap(), expected.clone());
            }
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            buffer.fence(&mut memory, &mut rng).unwrap();
            prop_assert_eq!(memory.read(0, base, 64).unwrap(), expected);
        }

        #[test]
        fn masked_fetch_add_without_boundaries_is_a_wrapping_add(old in any::<u64>(), add in any::<u64>()) {
            prop_assert_eq!(aboleth_sim::nic::apply_masked_fetch_add_64(old, add, 0), old.wrapping_add(add));
            prop_assert_eq!(aboleth_sim::nic::apply_masked_fetch_add_64(old, add, 1 << 63), old.wrapping_add(add));
        }
    }
}
