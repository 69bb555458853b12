//! The software NIC's memory (`aboleth_runtime::soft_nic::MappedNicMemory`, real bytes in this
//! process with real atomics) and the simulator's `Memory` fed the same WQE streams through the
//! one NIC model (`aboleth-nic`): after each stream the destination, the atomics' results and
//! every CQE must be byte-identical in the two, and so must each step's outcome (but the wording
//! of a failure's reason, which each memory gives in its own words). The streams are
//! random (seeded): writes (gathered, inline, with immediate), fetch-adds, compare-swaps, masked
//! atomics, NOPs, and now and then a WQE with a wrong key, a misaligned atomic or an
//! out-of-bounds target, which stops the queue with an error CQE in both.

use aboleth_abi::mlx5::{
    DoorbellRecord, LocalBuffer, RemoteAddress, UarDoorbell, WQE_CTRL_CQ_UPDATE, Wqe, WqeCommon,
    atomic_compare_swap, atomic_fetch_add, masked_fetch_add_64, nop, rdma_write, rdma_write_imm,
    rdma_write_inline,
};
use aboleth_nic::{Nic, NicMemory, QueuePairConfig};
use aboleth_runtime::soft_nic::{MappedNicMemory, MappedRegion, RegionBacking};

mod common;
use aboleth_sim::{Memory, MemoryKind};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const QPN: u32 = 0x31;
const SQ_BLOCKS: u32 = 256;
const CQES: u32 = 64;
const BUFFER_BYTES: u64 = 4096;

/// Where the queues and buffers are: the simulator's addresses, which the mapped memory reuses.
#[derive(Clone, Copy)]
struct Layout {
    sq: u64,
    dbr: u64,
    cq: u64,
    source: u64,
    destination: u64,
    lkey: u32,
    rkey: u32,
}

/// Heap memory standing in for pinned memory: 8-byte aligned words.
struct Backing {
    words: Vec<Vec<u64>>,
}

fn build(seed: u64, buffers_on_device: bool) -> (Memory, MappedNicMemory, Backing, Layout) {
    let mut simulated = Memory::new();
    let sq = simulated.allocate(0, u64::from(SQ_BLOCKS) * 64, MemoryKind::HostPinned, "sq");
    let dbr = simulated.allocate(0, 8, MemoryKind::HostPinned, "dbr");
    let cq = simulated.allocate(0, u64::from(CQES) * 64, MemoryKind::HostPinned, "cq");
    let source = simulated.allocate(0, BUFFER_BYTES, MemoryKind::Device, "source");
    let destination = simulated.allocate(1, BUFFER_BYTES, MemoryKind::Device, "destination");
    let (lkey, _) = simulated.register(0, source, BUFFER_BYTES).unwrap();
    let (_, rkey) = simulated.register(1, destination, BUFFER_BYTES).unwrap();
    let layout = Layout {
        sq,
        dbr,
        cq,
        source,
        destination,
        lkey,
        rkey,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let initial_source: Vec<u8> = (0..BUFFER_BYTES).map(|_| rng.random()).collect();
    let initial_destination: Vec<u8> = (0..BUFFER_BYTES).map(|_| rng.random()).collect();
    simulated.write(0, source, &initial_source).unwrap();
    simulated
        .write(1, destination, &initial_destination)
        .unwrap();
    let ranges = [
        (0, sq, u64::from(SQ_BLOCKS) * 64, None, None, "sq"),
        (0, dbr, 8, None, None, "dbr"),
        (0, cq, u64::from(CQES) * 64, None, None, "cq"),
        (0, source, BUFFER_BYTES, Some(lkey), None, "source"),
        (
            1,
            destination,
            BUFFER_BYTES,
            None,
            Some(rkey),
            "destination",
        ),
    ];
    let mut backing = Backing {
        words: ranges
            .iter()
            .map(|range| vec![0u64; range.2.div_ceil(8) as usize])
            .collect(),
    };
    // SAFETY: the backing vectors outlive `mapped` in every test and are never resized.
    let on_device: &[&str] = if buffers_on_device {
        &["source", "destination"]
    } else {
        &[]
    };
    let mut mapped = unsafe { common::map_regions(&mut backing.words, &ranges, on_device) };
    mapped.write(0, source, &initial_source).unwrap();
    mapped.write(1, destination, &initial_destination).unwrap();
    (simulated, mapped, backing, layout)
}

fn random_wqe(rng: &mut ChaCha8Rng, layout: &Layout, index: u16) -> Wqe {
    let fm_ce_se = if rng.random_bool(0.3) {
        WQE_CTRL_CQ_UPDATE
    } else {
        0
    };
    let common = WqeCommon {
        wqe_index: index,
        qpn: QPN,
        fm_ce_se,
    };
    let faulty = rng.random_bool(0.03);
    let mut remote = |length: u64, align: u64| {
        let offset = rng.random_range(0..(BUFFER_BYTES - length) / align) * align;
        RemoteAddress {
            address: layout.destination + offset,
            rkey: layout.rkey,
        }
    };
    let mut target = remote(64, 8);
    let length = rng.random_range(0..=256u32);
    let local_offset = rng.random_range(0..(BUFFER_BYTES - 512) / 8) * 8;
    let local = LocalBuffer {
        address: layout.source + local_offset,
        lkey: layout.lkey,
        length_bytes: length,
    };
    let result = LocalBuffer {
        address: layout.source + BUFFER_BYTES - 8 * rng.random_range(1..=8u64),
        lkey: layout.lkey,
        length_bytes: 8,
    };
    if faulty {
        match rng.random_range(0..3) {
            0 => target.rkey ^= 0x55,
            1 => target.address += 4, // misaligned for an atomic
            _ => target.address = layout.destination + BUFFER_BYTES - 4, // runs past the region
        }
    }
    match rng.random_range(0..7) {
        0 => rdma_write(&common, target, local),
        1 => rdma_write_inline(
            &common,
            target,
            &vec![index as u8; rng.random_range(1..=40)],
        )
        .unwrap(),
        2 => rdma_write_imm(&common, target, local, rng.random()),
        3 => atomic_fetch_add(&common, target, rng.random(), result),
        4 => atomic_compare_swap(
            &common,
            target,
            rng.random_range(0..4),
            rng.random(),
            result,
        ),
        5 => masked_fetch_add_64(&common, target, rng.random(), 1 << 31 | 1 << 63, result),
        _ => nop(&common),
    }
}

/// Posts `wqes` from basic block `start`, stores the doorbell record, rings the doorbell.
fn post(
    nic: &mut Nic,
    memory: &mut impl NicMemory,
    layout: &Layout,
    wqes: &[Wqe],
    start: u64,
) -> u64 {
    let mut block = start;
    for wqe in wqes {
        for bytes in wqe.basic_blocks() {
            let slot = block % u64::from(SQ_BLOCKS);
            memory.write(0, layout.sq + slot * 64, bytes).unwrap();
            block += 1;
        }
    }
    let record = DoorbellRecord::for_send_producer_index(block as u32);
    memory.write(0, layout.dbr, &record.to_bytes()).unwrap();
    nic.ring_doorbell(
        0,
        UarDoorbell::next_producer_index(block as u16, QPN).to_bytes(),
    )
    .unwrap();
    block
}

fn queue_pair(layout: &Layout) -> QueuePairConfig {
    QueuePairConfig {
        rank: 0,
        peer_rank: 1,
        qpn: QPN,
        sq_buffer_address: layout.sq,
        sq_basic_block_count: SQ_BLOCKS,
        doorbell_record_address: layout.dbr,
        cq_buffer_address: layout.cq,
        cqe_count: CQES,
        cq_collapsed: false,
        receive: None,
    }
}

/// The event with a failure's wording blanked: the two memories word their errors apiece, the
/// syndrome, the CQE and everything else must agree.
fn without_reason(mut event: aboleth_nic::NicEvent) -> aboleth_nic::NicEvent {
    if let Some(aboleth_nic::WqeExecution {
        outcome: aboleth_nic::WqeOutcome::Failed { reason, .. },
        ..
    }) = &mut event.wqe
    {
        reason.clear();
    }
    event
}

fn run_stream(seed: u64, buffers_on_device: bool) -> usize {
    let (mut simulated, mut mapped, _backing, layout) = build(seed, buffers_on_device);
    let (mut simulated_nic, mut mapped_nic) = (Nic::new(), Nic::new());
    simulated_nic
        .create_queue_pair(&mut simulated, queue_pair(&layout))
        .unwrap();
    mapped_nic
        .create_queue_pair(&mut mapped, queue_pair(&layout))
        .unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    let (mut block, mut steps) = (0u64, 0usize);
    for _batch in 0..6 {
        let count = rng.random_range(1..=12);
        // Fewer outstanding CQEs than the CQ holds: at most 12 * 6 WQEs, 30% of them signaled.
        // Each WQE carries the index of the basic block it starts at.
        let mut at = block as u16;
        let wqes: Vec<Wqe> = (0..count)
            .map(|_| {
                let wqe = random_wqe(&mut rng, &layout, at);
                at = at.wrapping_add(wqe.basic_blocks().len() as u16);
                wqe
            })
            .collect();
        let end = post(&mut simulated_nic, &mut simulated, &layout, &wqes, block);
        post(&mut mapped_nic, &mut mapped, &layout, &wqes, block);
        block = end;
        while !simulated_nic.runnable_queue_pairs(&simulated).is_empty() {
            let expected = simulated_nic
                .step_queue_pair(&mut simulated, 0, QPN)
                .unwrap();
            let found = mapped_nic.step_queue_pair(&mut mapped, 0, QPN).unwrap();
            assert_eq!(
                without_reason(found),
                without_reason(expected),
                "seed {seed}: step {steps} differs"
            );
            steps += 1;
        }
        assert!(
            mapped_nic.runnable_queue_pairs(&mapped).is_empty(),
            "seed {seed}: the mapped NIC has work left"
        );
        for (rank, address, length) in [
            (1, layout.destination, BUFFER_BYTES),
            (0, layout.source, BUFFER_BYTES),
            (0, layout.cq, u64::from(CQES) * 64),
        ] {
            assert_eq!(
                NicMemory::read(&mapped, rank, address, length).unwrap(),
                NicMemory::read(&simulated, rank, address, length).unwrap(),
                "seed {seed}: rank {rank} bytes at {address:#x} differ"
            );
        }
    }
    steps
}

#[test]
fn the_software_nics_memory_and_the_simulators_agree_on_random_wqe_streams() {
    let steps: usize = (0..40).map(|seed| run_stream(seed, false)).sum();
    assert!(steps > 400, "the streams executed only {steps} steps");
}

/// The same streams with the buffers in "GPU memory" (heap words behind a `DeviceAccess`): the
/// gathers go through `DeviceAccess::copy`, the atomics through the compare-and-swap loop.
#[test]
fn the_device_paths_agree_with_the_simulator_on_random_wqe_streams() {
    let steps: usize = (0..40).map(|seed| run_stream(seed, true)).sum();
    assert!(steps > 400, "the streams executed only {steps} steps");
}

#[test]
fn an_unmapped_access_a_wrong_key_and_a_misaligned_mapping_are_refused_by_name() {
    let (_simulated, mapped, _backing, layout) = build(1, false);
    let error = NicMemory::read(&mapped, 1, layout.destination + BUFFER_BYTES - 4, 8).unwrap_err();
    assert!(
        error.message.contains("rank 1") && error.message.contains("destination"),
        "{error}"
    );
    let error = mapped
        .check_remote_key(1, layout.rkey ^ 1, layout.destination, 8)
        .unwrap_err();
    assert!(error.message.contains("rkey"), "{error}");
    let mut words = vec![0u64; 4];
    let region = MappedRegion {
        rank: 2,
        address: 0x1000,
        length_bytes: 16,
        // One byte in: an aligned address would map to an unaligned host address.
        backing: RegionBacking::Host {
            pointer: words.as_mut_ptr().cast::<u8>().wrapping_add(1),
        },
        lkey: None,
        rkey: None,
        name: "shifted".to_owned(),
    };
    let mut memory = MappedNicMemory::new();
    // SAFETY: refused before anything is dereferenced.
    let error = unsafe { memory.add_region(region) }.unwrap_err();
    assert!(
        error.message.contains("shifted") && error.message.contains("congruent"),
        "{error}"
    );
}
