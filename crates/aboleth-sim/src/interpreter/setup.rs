//! Set-up of a simulated world from a kernel's launch attributes: every region on every rank
//! (registered, initialised from the data seed, with packet staging slots where the kernel
//! needs them), one region-descriptor table per region per rank, and an endpoint table per
//! rank holding one [`EndpointHandle`] per peer.
//!
//! The transport's own part of an endpoint (an mlx5 QP, an EFA QP, an Ionic QP, a proxy ring, a
//! p2p peer address) is made by `setup_mlx5_endpoint`, `setup_efa_endpoint`,
//! `setup_ionic_endpoint`, `setup_proxy_endpoint` and `setup_p2p_endpoint` in the transport's
//! file; this file only walks the ranks and peers. It runs nothing: the run
//! starts in `mod.rs` ([`World::run_round`]).

use std::collections::{BTreeMap, HashMap};

use aboleth_abi::{
    EndpointHandle, RemoteRegionDescriptor, Transport, mlx5::receive::Mlx5ReceiveQueue,
};
use aboleth_passes::stats::Counts;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{
    Observations, RegionAllocation, SimulationError, SimulationOptions, World, check_memory,
    mlx5::{allocate_receive_side, setup_mlx5_endpoint},
    p2p::setup_p2p_endpoint,
    proxy::setup_proxy_endpoint,
};
use crate::{
    Memory, MemoryKind, Nic, ProxyEngine, RegionTable, launch::RegionInit, program::SimKernel,
};

/// Bytes of one endpoint-table slot: one [`EndpointHandle`].
pub(super) const ENDPOINT_HANDLE_BYTES: u64 = EndpointHandle::SIZE_BYTES as u64;
/// Bytes of one region-descriptor table entry: one [`RemoteRegionDescriptor`].
pub(super) const REGION_DESCRIPTOR_BYTES: u64 = RemoteRegionDescriptor::SIZE_BYTES as u64;

/// A set-up failure of a device model or of memory.
pub(super) fn setup_error(error: impl std::fmt::Display) -> SimulationError {
    SimulationError::Setup(error.to_string())
}

/// Writes `handle` into slot `peer` of `rank`'s endpoint table at `table`.
pub(super) fn write_endpoint_handle(
    memory: &mut Memory,
    rank: u32,
    table: u64,
    peer: u32,
    handle: &EndpointHandle,
) -> Result<(), SimulationError> {
    memory
        .write(
            rank,
            table + u64::from(peer) * ENDPOINT_HANDLE_BYTES,
            &handle.to_bytes(),
        )
        .map_err(setup_error)
}

impl<'k> World<'k> {
    /// Sets up every rank: its regions (initialised from the data seed), the region-descriptor
    /// tables, and the endpoint table with a handle per peer in the kernel's transport.
    pub(super) fn new(
        rank_kernels: &'k [SimKernel],
        options: &SimulationOptions,
    ) -> Result<Self, SimulationError> {
        let kernel = &rank_kernels[0];
        let ranks = options.ranks;
        if ranks < 2 {
            return Err(SimulationError::Setup(format!(
                "{ranks} rank(s): communication needs at least 2 ranks (--ranks)"
            )));
        }
        check_memory(kernel, options).map_err(SimulationError::Setup)?;
        let mut memory = Memory::new();
        let mut data_rng = ChaCha8Rng::seed_from_u64(options.data_seed);
        let mut regions = Vec::new();
        for rank in 0..ranks {
            let mut by_name = BTreeMap::new();
            for (name, size) in &kernel.launch.regions {
                let length_bytes = size.evaluate(ranks);
                if length_bytes <= 0 {
                    return Err(SimulationError::Setup(format!(
                        "region `{name}` has {length_bytes} bytes for {ranks} ranks; sizes must be positive"
                    )));
                }
                let length_bytes = length_bytes as u64;
                // A flag region of packet signals carries its slots after its own bytes; the
                // descriptors (and the final contents compared) keep the region's length.
                let staging_bytes = if kernel.packet_staging_regions.contains(name) {
                    aboleth_abi::packet::staging_bytes(length_bytes)
                } else {
                    0
                };
                let address =
                    memory.allocate(rank, length_bytes + staging_bytes, MemoryKind::Device, name);
                let (lkey, rkey) = memory
                    .register(rank, address, length_bytes + staging_bytes)
                    .map_err(setup_error)?;
                let mut bytes = vec![0u8; length_bytes as usize];
                for entry in kernel.launch.init.get(name).into_iter().flatten() {
                    let (start, end) = match &entry.range {
                        None => (0, length_bytes as i64),
                        Some((start, end)) => (start.evaluate(ranks), end.evaluate(ranks)),
                    };
                    if start < 0 || end < start || end > length_bytes as i64 {
                        return Err(SimulationError::Setup(format!(
                            "init: bytes [{start}, {end}) of region `{name}` are not inside its \
                             {length_bytes} bytes for {ranks} ranks"
                        )));
                    }
                    let part = &mut bytes[start as usize..end as usize];
                    match &entry.how {
                        RegionInit::Zero => part.fill(0),
                        RegionInit::Random => data_rng.fill_bytes(part),
                        RegionInit::RandomModulo(modulus) => {
                            let modulus = modulus.evaluate(ranks).max(1) as u64;
                            for word in part.chunks_mut(8) {
                                let value = data_rng.next_u64() % modulus;
                                word.copy_from_slice(&value.to_le_bytes()[..word.len()]);
                            }
                        }
                        RegionInit::Sequence(step) => {
                            let step = step.evaluate(ranks);
                            for (index, word) in part.chunks_mut(8).enumerate() {
                                let value = (index as i64).wrapping_mul(step);
                                word.copy_from_slice(&value.to_le_bytes()[..word.len()]);
                            }
                        }
                    }
                }
                memory.write(rank, address, &bytes).map_err(setup_error)?;
                by_name.insert(
                    name.clone(),
                    RegionAllocation {
                        address,
                        length_bytes,
                        lkey,
                        rkey,
                    },
                );
            }
            regions.push(by_name);
        }
        // Every lowered transport has a model (the pipeline refuses the others).
        let transport = kernel.target;
        // Region-descriptor tables: one per region per rank, indexed by rank.
        let mut region_tables = HashMap::new();
        let mut proxy_region_table = RegionTable::new();
        for (index, (name, _)) in kernel.launch.regions.iter().enumerate() {
            let descriptors: Vec<RemoteRegionDescriptor> = (0..ranks)
                .map(|peer| {
                    let allocation = &regions[peer as usize][name];
                    RemoteRegionDescriptor {
                        base_address: allocation.address,
                        length_bytes: allocation.length_bytes,
                        rkey: allocation.rkey,
                        peer_rank: peer,
                        transport: transport as u32
                            | if kernel.packet_staging_regions.contains(name) {
                                aboleth_abi::region::REGION_FLAG_PACKET_SLOTS
                            } else {
                                0
                            },
                        region_index: index as u32,
                    }
                })
                .collect();
            let table_bytes = aboleth_abi::region::encode_region_table(&descriptors);
            for rank in 0..ranks {
                let address = memory.allocate(
                    rank,
                    table_bytes.len() as u64,
                    MemoryKind::Device,
                    &format!("region table {name}"),
                );
                memory
                    .write(rank, address, &table_bytes)
                    .map_err(setup_error)?;
                region_tables.insert((rank, address), index as u32);
            }
            proxy_region_table.insert(index as u32, descriptors);
        }
        let mut nic = Nic::new();
        let mut efa = aboleth_nic::efa::EfaDevice::new();
        let mut ionic = aboleth_nic::ionic::IonicDevice::new();
        let mut proxies = Vec::new();
        let mut endpoint_tables = Vec::new();
        for rank in 0..ranks {
            let mut proxy =
                ProxyEngine::new(rank, proxy_region_table.clone(), options.cost_model.clone());
            let table = memory.allocate(
                rank,
                u64::from(ranks) * ENDPOINT_HANDLE_BYTES,
                MemoryKind::Device,
                "endpoint table",
            );
            // mlx5: the rank's receive side (write-with-immediate signals): one receive CQ, a
            // context every handle points to, and a receive queue per QP.
            let receive = if transport == Transport::Mlx5 {
                Some(allocate_receive_side(&mut memory, &mut nic, rank, ranks)?)
            } else {
                None
            };
            // efa: the rank's receive CQ and context (add signals arrive there).
            let efa_receive_context = if transport == Transport::Efa {
                Some(super::efa::allocate_efa_receive_side(
                    &mut memory,
                    &mut efa,
                    rank,
                    ranks,
                )?)
            } else {
                None
            };
            let mut receive_queues = vec![Mlx5ReceiveQueue::default(); ranks as usize];
            for peer in 0..ranks {
                if peer == rank {
                    continue;
                }
                let mut handle = EndpointHandle {
                    transport: transport as u32,
                    peer_rank: peer,
                    local_rank: rank,
                    ..EndpointHandle::default()
                };
                match transport {
                    Transport::Mlx5 => setup_mlx5_endpoint(
                        &mut memory,
                        &mut nic,
                        options,
                        (rank, peer),
                        &mut handle,
                        &mut receive_queues[peer as usize],
                        receive.as_ref(),
                    )?,
                    Transport::Proxy => setup_proxy_endpoint(
                        &mut memory,
                        &mut proxy,
                        options,
                        (rank, peer),
                        &mut handle,
                    )?,
                    Transport::Efa => super::efa::setup_efa_endpoint(
                        &mut memory,
                        &mut efa,
                        options,
                        (rank, peer),
                        &mut handle,
                        efa_receive_context.expect("allocated for efa above"),
                    )?,
                    Transport::Ionic => super::ionic::setup_ionic_endpoint(
                        &mut memory,
                        &mut ionic,
                        options,
                        (rank, peer),
                        &mut handle,
                    )?,
                    _ => setup_p2p_endpoint((rank, peer), &mut handle),
                }
                write_endpoint_handle(&mut memory, rank, table, peer, &handle)?;
            }
            if let Some(side) = &receive {
                let queues: Vec<u8> = receive_queues.iter().flat_map(|q| q.to_bytes()).collect();
                memory
                    .write(rank, side.queues_address, &queues)
                    .map_err(setup_error)?;
                // This rank's own slot carries what a wait needs (the receive context).
                let own = EndpointHandle {
                    transport: transport as u32,
                    peer_rank: rank,
                    local_rank: rank,
                    receive_context_address: side.context_address,
                    ..EndpointHandle::default()
                };
                write_endpoint_handle(&mut memory, rank, table, rank, &own)?;
            }
            if let Some(context) = efa_receive_context {
                // This rank's own slot names its receive context, as on mlx5.
                let own = EndpointHandle {
                    transport: transport as u32,
                    peer_rank: rank,
                    local_rank: rank,
                    receive_context_address: context,
                    ..EndpointHandle::default()
                };
                write_endpoint_handle(&mut memory, rank, table, rank, &own)?;
            }
            endpoint_tables.push(table);
            proxies.push(proxy);
        }
        Ok(World {
            kernel,
            rank_kernels,
            transport,
            options: options.clone(),
            memory,
            nic,
            efa,
            ionic,
            proxies,
            store_buffers: Vec::new(),
            threads: Vec::new(),
            rng: ChaCha8Rng::seed_from_u64(options.schedule_seed),
            regions,
            region_tables,
            endpoint_tables,
            endpoint_handles: Vec::new(),
            endpoint_handle_index: HashMap::new(),
            posted: HashMap::new(),
            p2p_signal_stores: HashMap::new(),
            flag_histories: HashMap::new(),
            checked_updates: HashMap::new(),
            early_waits: Vec::new(),
            landed_puts: Vec::new(),
            pending_immediates: HashMap::new(),
            immediate_flag_tables: BTreeMap::new(),
            packet_transfers: BTreeMap::new(),
            write_times: HashMap::new(),
            doorbell_times: HashMap::new(),
            nic_clocks: vec![0; ranks as usize],
            proxy_clocks: vec![0; ranks as usize],
            counts: Counts::default(),
            steps: 0,
            epoch: 0,
            time_origin: 0,
            observations: Observations::new(),
        })
    }
}
