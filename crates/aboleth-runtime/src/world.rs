//! The [`World`]: one rank's view of the job on its GPU, the object behind the Python API of
//! the seed (`World(rank, size, device, bootstrap)`, `connect_all`, `register`, `region`,
//! `exchange_regions` returning an [`ExchangedRegions`] table with `local(name)`,
//! `regions(name)` and `endpoint_handles`, and `close`).
//!
//! Lifecycle: [`World::new`] opens the device (its primary context, shared with PyTorch) and a
//! wait-failure log; [`World::connect_all`] gathers every rank's identity, chooses a transport
//! per peer, allocates a proxy ring per proxy peer and starts the proxy thread, and the software
//! NIC with a queue pair per mlx5 peer;
//! [`World::register`] checks and exports GPU memory; [`World::exchange_regions`] all-gathers
//! region records, maps peers' allocations (CUDA IPC), and uploads the region and endpoint
//! tables to the GPU (and gives the software NIC the regions and their keys); [`World::close`]
//! waits for every rank, stops the proxy and the software NIC, and unmaps.
//! Every collective step ends with an agreement round, so that when one rank fails, every rank
//! fails with that rank's reason instead of waiting for it.
//!
//! What it does not do: launch kernels or compile (the Python layer and the code generator do),
//! move data on the host's behalf outside the proxy and the software NIC, or set up a real RDMA
//! NIC (refused with the reason).

use std::collections::{BTreeMap, HashSet};
use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use aboleth_abi::region::encode_region_table;
use aboleth_abi::{EndpointHandle, LocalRegionDescriptor, RemoteRegionDescriptor, Transport};

use crate::bootstrap::TcpStoreBootstrap;
use crate::cuda::{Device, DeviceMemory, PinnedHostMemory, RuntimeKernels};
use crate::error::{RuntimeError, RuntimeResult};
use crate::exchange::{
    PeerBaseDelta, PeerIdentity, ProxyRingPlacement, RegionRecord, RegionTables,
    build_endpoint_handles, build_region_tables, decode_region_records, encode_region_records,
    peer_base_deltas,
};
use crate::proxy_ring::{RingConsumer, RingMemory};
use crate::registration::{AllocationSpan, Region, Registration, classify_registration};
use crate::soft_nic::MappedRegion;
use crate::transport::p2p::PeerMappings;
use crate::transport::proxy::{
    CudaCopyEngine, DEFAULT_PROXY_RING_CAPACITY_ENTRIES, PinnedRing, ProxyCompletion,
    ProxyExecutor, ProxyRingService, ProxyStatistics, ProxyThread, ProxyThreadOptions,
    SharedRegionTable,
};
use crate::transport::soft_rdma::{SoftRdma, SoftRdmaOptions};
use crate::transport::{
    PROVIDER_TRANSPORTS, TransportRequest, choose_transports, describe_transports,
    provider_discovery, rdma_devices,
};
use crate::wait_failure::{
    WaitFailureLog, WaitFailureRecord, describe_wait_failure, wait_failure_log_bytes,
};

/// The rank-collective operations a World needs from its bootstrap. Implemented by
/// [`TcpStoreBootstrap`]; the Python layer may implement it over a `torch.distributed` store.
pub trait RankCollective: Send {
    /// This rank.
    fn rank(&self) -> u32;
    /// Number of ranks.
    fn world_size(&self) -> u32;
    /// Every rank contributes `blob`; returns the contributions indexed by rank.
    fn all_gather(
        &mut self,
        name: &str,
        blob: &[u8],
    ) -> Result<Vec<Vec<u8>>, Box<dyn Error + Send + Sync>>;
    /// Returns once every rank has called it with the same `name`.
    fn barrier(&mut self, name: &str) -> Result<(), Box<dyn Error + Send + Sync>>;
    /// Leaves the job.
    fn close(self: Box<Self>);
}

impl RankCollective for TcpStoreBootstrap {
    fn rank(&self) -> u32 {
        TcpStoreBootstrap::rank(self)
    }
    fn world_size(&self) -> u32 {
        TcpStoreBootstrap::world_size(self)
    }
    fn all_gather(
        &mut self,
        name: &str,
        blob: &[u8],
    ) -> Result<Vec<Vec<u8>>, Box<dyn Error + Send + Sync>> {
        Ok(TcpStoreBootstrap::all_gather(self, name, blob)?)
    }
    fn barrier(&mut self, name: &str) -> Result<(), Box<dyn Error + Send + Sync>> {
        Ok(TcpStoreBootstrap::barrier(self, name)?)
    }
    fn close(self: Box<Self>) {
        TcpStoreBootstrap::close(*self);
    }
}

/// Settings of a World.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorldOptions {
    /// Slots of each proxy ring (a power of two).
    pub proxy_ring_capacity_entries: u32,
    /// How the proxy thread polls.
    pub proxy_thread: ProxyThreadOptions,
    /// Records the wait-failure log holds.
    pub wait_failure_log_capacity_records: u32,
}

impl Default for WorldOptions {
    fn default() -> Self {
        Self {
            proxy_ring_capacity_entries: DEFAULT_PROXY_RING_CAPACITY_ENTRIES,
            proxy_thread: ProxyThreadOptions::default(),
            wait_failure_log_capacity_records: 64,
        }
    }
}

/// A device table: an array of fixed-size entries in GPU memory, owned by the table that
/// returned it (valid while that lives).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceTable {
    /// Device address of entry 0.
    pub address: u64,
    /// Entries.
    pub entry_count: usize,
    /// Bytes per entry.
    pub entry_bytes: usize,
}

impl DeviceTable {
    /// Bytes of the whole table.
    pub fn length_bytes(&self) -> usize {
        self.entry_count * self.entry_bytes
    }
}

/// What `exchange_regions` returns: the host copies of the tables and their GPU copies. The GPU
/// memory is freed when this is dropped; the addresses in it stay valid until the World closes.
#[derive(Debug)]
pub struct ExchangedRegions {
    tables: RegionTables,
    deltas: Vec<PeerBaseDelta>,
    endpoint_handles: Vec<EndpointHandle>,
    region_table_memory: Vec<DeviceMemory>,
    endpoint_handle_memory: DeviceMemory,
}

impl ExchangedRegions {
    /// Region names in exchange order (a region's index, which proxy commands carry, is its
    /// position).
    pub fn names(&self) -> &[String] {
        &self.tables.names
    }

    /// The index of region `name`.
    pub fn region_index(&self, name: &str) -> RuntimeResult<u32> {
        self.tables
            .names
            .iter()
            .position(|candidate| candidate == name)
            .map(|index| index as u32)
            .ok_or_else(|| RuntimeError::UnknownRegion {
                name: name.to_owned(),
                exchanged: self.tables.names.join(", "),
            })
    }

    /// This rank's region `name`: its local address and key (0 without RDMA).
    pub fn local(&self, name: &str) -> RuntimeResult<LocalRegionDescriptor> {
        Ok(self.tables.local[self.region_index(name)? as usize])
    }

    /// The GPU table of region `name`: one [`RemoteRegionDescriptor`] per rank, indexed by rank.
    pub fn regions(&self, name: &str) -> RuntimeResult<DeviceTable> {
        let index = self.region_index(name)? as usize;
        Ok(DeviceTable {
            address: self.region_table_memory[index].address(),
            entry_count: self.tables.remote[index].len(),
            entry_bytes: RemoteRegionDescriptor::SIZE_BYTES,
        })
    }

    /// The host copy of region `name`'s table.
    pub fn remote_descriptors(&self, name: &str) -> RuntimeResult<&[RemoteRegionDescriptor]> {
        Ok(&self.tables.remote[self.region_index(name)? as usize])
    }

    /// The GPU table of endpoint handles: one [`EndpointHandle`] per rank, indexed by rank.
    pub fn endpoint_handles(&self) -> DeviceTable {
        DeviceTable {
            address: self.endpoint_handle_memory.address(),
            entry_count: self.endpoint_handles.len(),
            entry_bytes: EndpointHandle::SIZE_BYTES,
        }
    }

    /// The bytes of region `name`'s table (what [`Self::regions`] holds on the GPU), for a
    /// caller that prefers to upload its own copy (e.g. into a PyTorch-owned tensor).
    pub fn region_table_bytes(&self, name: &str) -> RuntimeResult<Vec<u8>> {
        Ok(encode_region_table(self.remote_descriptors(name)?))
    }

    /// The bytes of the endpoint handle table (what [`Self::endpoint_handles`] holds on the GPU).
    pub fn endpoint_handle_bytes(&self) -> Vec<u8> {
        endpoint_table_bytes(&self.endpoint_handles)
    }

    /// The host copy of the endpoint handles.
    pub fn endpoint_handle_list(&self) -> &[EndpointHandle] {
        &self.endpoint_handles
    }

    /// The p2p address delta to each rank, and whether it holds for every region.
    pub fn peer_base_deltas(&self) -> &[PeerBaseDelta] {
        &self.deltas
    }

    /// Reads the GPU tables back and checks them against the host copies (a self-test).
    pub fn verify_device_copies(&self) -> RuntimeResult<bool> {
        for (memory, descriptors) in self.region_table_memory.iter().zip(&self.tables.remote) {
            if memory.to_bytes()? != encode_region_table(descriptors) {
                return Ok(false);
            }
        }
        Ok(self.endpoint_handle_memory.to_bytes()? == endpoint_table_bytes(&self.endpoint_handles))
    }
}

fn endpoint_table_bytes(handles: &[EndpointHandle]) -> Vec<u8> {
    handles
        .iter()
        .flat_map(|handle| handle.to_bytes())
        .collect()
}

/// What a World remembers of a registration.
#[derive(Clone, Copy, Debug)]
struct RegistrationRecord {
    address: u64,
    length_bytes: u64,
    span: AllocationSpan,
    ipc_handle: [u8; crate::exchange::IPC_HANDLE_BYTES],
}

/// The state `connect_all` creates.
#[derive(Debug)]
struct Connection {
    transports: Vec<Transport>,
    identities: Vec<PeerIdentity>,
    rings: BTreeMap<u32, Arc<PinnedRing>>,
    proxy_regions: Arc<SharedRegionTable>,
    proxy_thread: Option<ProxyThread>,
    /// The software NIC serving the mlx5 peers, if any.
    soft_rdma: Option<SoftRdma>,
}

// The Python layer keeps these in `Mutex`es inside `#[pyclass]`es, which must be Send.
const _: fn() = || {
    fn assert_send<T: Send>() {}
    assert_send::<World>();
    assert_send::<ExchangedRegions>();
    assert_send::<Registration>();
    assert_send::<Region>();
};

/// Numbers Worlds, so registrations cannot cross them.
static NEXT_WORLD_ID: AtomicU64 = AtomicU64::new(1);

/// One rank of a job, on one GPU (see the module comment).
pub struct World {
    id: u64,
    rank: u32,
    world_size: u32,
    options: WorldOptions,
    bootstrap: Option<Box<dyn RankCollective>>,
    registrations: Vec<RegistrationRecord>,
    connection: Option<Connection>,
    peer_mappings: PeerMappings,
    kernels: Option<Arc<RuntimeKernels>>,
    wait_failure_log: WaitFailureLog,
    // Declared after the log: the view is dropped before the memory it points into.
    wait_failure_memory: PinnedHostMemory,
    device: Arc<Device>,
}

impl std::fmt::Debug for World {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("World")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("device", &self.device.ordinal())
            .field(
                "transports",
                &self.connection.as_ref().map(|c| &c.transports),
            )
            .field("closed", &self.bootstrap.is_none())
            .finish()
    }
}

impl World {
    /// Rank `rank` of `world_size`, on device `device_ordinal` of this process, with default
    /// options.
    pub fn new(
        rank: u32,
        world_size: u32,
        device_ordinal: i32,
        bootstrap: Box<dyn RankCollective>,
    ) -> RuntimeResult<Self> {
        let mut options = WorldOptions::default();
        if let Some(completion) = proxy_completion_from_env()? {
            options.proxy_thread.completion = completion;
        }
        Self::with_options(rank, world_size, device_ordinal, bootstrap, options)
    }

    /// [`Self::new`] with explicit options.
    pub fn with_options(
        rank: u32,
        world_size: u32,
        device_ordinal: i32,
        bootstrap: Box<dyn RankCollective>,
        options: WorldOptions,
    ) -> RuntimeResult<Self> {
        if bootstrap.rank() != rank || bootstrap.world_size() != world_size {
            return Err(RuntimeError::BootstrapMismatch {
                rank,
                world_size,
                bootstrap_rank: bootstrap.rank(),
                bootstrap_world_size: bootstrap.world_size(),
            });
        }
        let device = Device::open(device_ordinal)?;
        let capacity_records = options.wait_failure_log_capacity_records;
        let wait_failure_memory =
            PinnedHostMemory::allocate(&device, wait_failure_log_bytes(capacity_records))?;
        // SAFETY: the pinned allocation is page-aligned, has the log's size, outlives the view
        // (field order), and GPUs access it only with aligned 64- and 32-bit accesses.
        let wait_failure_log = unsafe {
            WaitFailureLog::initialize_at(wait_failure_memory.host_pointer(), capacity_records)
        };
        wait_failure_log.set_timeout_nanoseconds(wait_timeout_nanoseconds_from_env()?);
        Ok(Self {
            id: NEXT_WORLD_ID.fetch_add(1, Ordering::Relaxed),
            rank,
            world_size,
            options,
            bootstrap: Some(bootstrap),
            registrations: Vec::new(),
            connection: None,
            peer_mappings: PeerMappings::new(device.clone()),
            kernels: None,
            wait_failure_log,
            wait_failure_memory,
            device,
        })
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks.
    pub fn world_size(&self) -> u32 {
        self.world_size
    }

    /// The device.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// The transport to each rank, once connected.
    pub fn transports(&self) -> Option<&[Transport]> {
        self.connection
            .as_ref()
            .map(|connection| connection.transports.as_slice())
    }

    /// Every rank's identity, once connected.
    pub fn peer_identities(&self) -> Option<&[PeerIdentity]> {
        self.connection
            .as_ref()
            .map(|connection| connection.identities.as_slice())
    }

    fn bootstrap(&mut self, operation: &'static str) -> RuntimeResult<&mut dyn RankCollective> {
        match self.bootstrap.as_deref_mut() {
            Some(bootstrap) => Ok(bootstrap),
            None => Err(RuntimeError::Closed { operation }),
        }
    }

    fn all_gather(&mut self, name: &str, blob: &[u8]) -> RuntimeResult<Vec<Vec<u8>>> {
        let rank = self.rank;
        self.bootstrap("a collective step")?
            .all_gather(name, blob)
            .map_err(|source| RuntimeError::Collective {
                rank,
                operation: format!("all-gather '{name}'"),
                source,
            })
    }

    /// Ends a collective step: every rank says whether its part succeeded, and a rank that
    /// succeeded fails anyway, naming the one that did not, rather than go on without it.
    fn agree<T>(&mut self, operation: &str, local: RuntimeResult<T>) -> RuntimeResult<T> {
        let status = match &local {
            Ok(_) => vec![0],
            Err(error) => [&[1u8][..], error.to_string().as_bytes()].concat(),
        };
        let gathered = self.all_gather(&format!("{operation}/status"), &status)?;
        let value = local?;
        for (peer_rank, status) in gathered.iter().enumerate() {
            if status.first() != Some(&0) {
                return Err(RuntimeError::PeerFailed {
                    peer_rank: peer_rank as u32,
                    operation: operation.to_owned(),
                    message: String::from_utf8_lossy(status.get(1..).unwrap_or_default())
                        .into_owned(),
                });
            }
        }
        Ok(value)
    }

    /// Returns once every rank has called it (with the same `name`). Collective.
    pub fn barrier(&mut self, name: &str) -> RuntimeResult<()> {
        let rank = self.rank;
        self.bootstrap("barrier")?
            .barrier(name)
            .map_err(|source| RuntimeError::Collective {
                rank,
                operation: format!("barrier '{name}'"),
                source,
            })
    }

    /// The runtime's PTX kernels (loaded on first use).
    pub fn runtime_kernels(&mut self) -> RuntimeResult<Arc<RuntimeKernels>> {
        if let Some(kernels) = &self.kernels {
            return Ok(kernels.clone());
        }
        let kernels = Arc::new(RuntimeKernels::load(&self.device)?);
        self.kernels = Some(kernels.clone());
        Ok(kernels)
    }

    fn local_identity(&self) -> RuntimeResult<PeerIdentity> {
        let read = |path: &str| {
            std::fs::read_to_string(path)
                .map(|text| text.trim().to_owned())
                .unwrap_or_else(|_| "unknown".to_owned())
        };
        Ok(PeerIdentity {
            rank: self.rank,
            host: format!(
                "{}/{}",
                read("/proc/sys/kernel/hostname"),
                read("/proc/sys/kernel/random/boot_id")
            ),
            process_id: std::process::id(),
            device_ordinal: self.device.ordinal(),
            device_pci_bus_id: self.device.pci_bus_id()?,
            device_uuid: self.device.uuid()?,
        })
    }

    /// Connects to every rank: gathers identities, chooses the transport to each peer
    /// ([`choose_transports`]), and for proxy peers allocates a ring and starts the proxy
    /// thread. Returns the transport to each rank (this rank's own is p2p). Collective: every
    /// rank must call it.
    pub fn connect_all(&mut self, choice: TransportRequest) -> RuntimeResult<Vec<Transport>> {
        self.bootstrap("connect_all")?;
        if let Some(connection) = &self.connection {
            return Err(RuntimeError::AlreadyConnected {
                transports: describe_transports(&connection.transports),
            });
        }
        self.device.make_current()?;
        let identity = self.local_identity()?;
        let gathered = self.all_gather("aboleth/connect/identity", &identity.encode())?;
        let identities = gathered
            .iter()
            .enumerate()
            .map(|(rank, bytes)| PeerIdentity::decode(bytes, rank as u32))
            .collect::<RuntimeResult<Vec<_>>>();
        let local = identities.and_then(|identities| {
            let rdma_devices = rdma_devices()?;
            // Ionic runs over the software NIC; otherwise the providers are refused with what
            // was found of their devices and libraries.
            if let TransportRequest::Only(transport) = choice
                && PROVIDER_TRANSPORTS.contains(&transport)
                && !(transport == Transport::Ionic && rdma_devices.software_nic)
            {
                return Err(provider_discovery::discover(transport).unavailable_error());
            }
            let device = self.device.clone();
            let transports = choose_transports(
                choice,
                self.rank,
                &identities,
                |peer| device.peer_access(&peer.device_pci_bus_id),
                &rdma_devices,
            )?;
            let connection = self.start_connection(transports, identities)?;
            Ok(connection)
        });
        let mut connection = self.agree("aboleth/connect", local)?;
        if connection.soft_rdma.is_some() {
            // Every rank asked for rdma, so every rank has a software NIC and takes part.
            self.connect_receive_sides(&mut connection)?;
        }
        let transports = connection.transports.clone();
        tracing::info!(
            rank = self.rank,
            transports = %describe_transports(&transports),
            "connected"
        );
        self.connection = Some(connection);
        Ok(transports)
    }

    /// The software NIC's second step: all-gathers every rank's receive-side record, maps the
    /// mlx5 peers' receive sides and gives them to the NIC (writes with immediate deliver there).
    fn connect_receive_sides(&mut self, connection: &mut Connection) -> RuntimeResult<()> {
        let soft_rdma = connection
            .soft_rdma
            .as_mut()
            .expect("checked by the caller");
        let record = soft_rdma.receive_side_record(&self.device);
        let blob = record.as_deref().unwrap_or_default().to_vec();
        let gathered = self.all_gather("aboleth/connect/receive-sides", &blob)?;
        let (rank, peer_mappings) = (self.rank, &mut self.peer_mappings);
        let local = record.and_then(|_| {
            let mut peers = Vec::new();
            for (peer, bytes) in gathered.iter().enumerate() {
                let peer = peer as u32;
                if connection.transports[peer as usize] != Transport::Mlx5 {
                    continue;
                }
                let (address, handle) = SoftRdma::decode_receive_side_record(rank, peer, bytes)?;
                peers.push((peer, address, peer_mappings.map(peer, &handle)?));
            }
            // SAFETY: the mappings stay open until `tear_down`, which stops the NIC first.
            unsafe { soft_rdma.attach_receive_sides(&peers) }
        });
        self.agree("aboleth/connect/receive-sides", local)
    }

    fn start_connection(
        &mut self,
        transports: Vec<Transport>,
        identities: Vec<PeerIdentity>,
    ) -> RuntimeResult<Connection> {
        let proxy_regions = Arc::new(SharedRegionTable::default());
        // Puts read only registered memory: those registered so far, and later ones (register).
        let sources: Vec<(u64, u64)> = self
            .registrations
            .iter()
            .map(|record| (record.address, record.length_bytes))
            .collect();
        proxy_regions.add_sources(&sources);
        let mut rings = BTreeMap::new();
        for (peer, &transport) in transports.iter().enumerate() {
            if transport == Transport::Proxy {
                let peer = peer as u32;
                let ring = PinnedRing::allocate(
                    &self.device,
                    peer,
                    self.options.proxy_ring_capacity_entries,
                )?;
                rings.insert(peer, Arc::new(ring));
            }
        }
        let proxy_thread = if rings.is_empty() {
            None
        } else {
            let kernels = self.runtime_kernels()?;
            let mut services = Vec::new();
            for (&peer_rank, ring) in &rings {
                let engine = CudaCopyEngine::new(&self.device, kernels.clone())?;
                services.push(ProxyRingService {
                    peer_rank,
                    consumer: RingConsumer::new(ring.clone()),
                    executor: ProxyExecutor::with_completion(
                        peer_rank,
                        proxy_regions.clone(),
                        engine,
                        self.options.proxy_thread.completion,
                    ),
                });
            }
            let device = self.device.clone();
            let thread =
                ProxyThread::spawn(self.rank, services, self.options.proxy_thread, move || {
                    device.make_current().map_err(|error| error.to_string())
                })
                .map_err(|error| RuntimeError::ProxyStopped {
                    rank: self.rank,
                    failures: format!("the proxy thread could not start: {error}"),
                })?;
            Some(thread)
        };
        let soft_rdma = if transports
            .iter()
            .any(|&transport| SoftRdma::serves(transport))
        {
            let kernels = self.runtime_kernels()?;
            let options = SoftRdmaOptions::from_environment()?;
            Some(SoftRdma::start(
                &self.device,
                kernels,
                self.rank,
                &transports,
                options,
            )?)
        } else {
            None
        };
        Ok(Connection {
            transports,
            identities,
            rings,
            proxy_regions,
            proxy_thread,
            soft_rdma,
        })
    }

    /// Registers `length_bytes` bytes of GPU memory at `address` (e.g. a tensor's
    /// `data_ptr()`): checks that it is device memory of this World's device inside one
    /// allocation, and exports the allocation's CUDA IPC handle. Not collective.
    pub fn register(&mut self, address: u64, length_bytes: u64) -> RuntimeResult<Registration> {
        self.bootstrap("register")?;
        let facts = self.device.pointer_facts(address)?;
        let span = classify_registration(address, length_bytes, self.device.ordinal(), &facts)?;
        let ipc_handle = self
            .device
            .ipc_handle(span.allocation_base)
            .map_err(|code| RuntimeError::NotExportable {
                allocation_base: span.allocation_base,
                code,
            })?;
        let index = self.registrations.len() as u32;
        if let Some(connection) = &self.connection {
            connection
                .proxy_regions
                .add_sources(&[(address, length_bytes)]);
        }
        self.registrations.push(RegistrationRecord {
            address,
            length_bytes,
            span,
            ipc_handle,
        });
        Ok(Registration {
            world_id: self.id,
            index,
            address,
            length_bytes,
        })
    }

    fn registration_record(
        &self,
        registration: &Registration,
    ) -> RuntimeResult<RegistrationRecord> {
        let foreign = RuntimeError::ForeignRegistration {
            registration_index: registration.index,
        };
        if registration.world_id != self.id {
            return Err(foreign);
        }
        let record = *self
            .registrations
            .get(registration.index as usize)
            .ok_or(foreign)?;
        debug_assert_eq!(
            (record.address, record.length_bytes),
            (registration.address, registration.length_bytes)
        );
        Ok(record)
    }

    /// The region `name` = `[offset_bytes, offset_bytes + length_bytes)` of `registration`.
    /// Not collective.
    pub fn region(
        &self,
        name: &str,
        registration: &Registration,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> RuntimeResult<Region> {
        self.registration_record(registration)?;
        Region::new(name, registration, offset_bytes, length_bytes)
    }

    /// Exchanges `regions` (key, region) with every rank and builds the tables kernels read.
    /// Keys must be the regions' names; the order gives each region its index and must be the
    /// same on every rank. Collective. The regions are appended to the table the proxy
    /// resolves commands against, at indices after every region exchanged before (their
    /// descriptors' `region_index`), so the kernels of earlier exchanges keep reaching their
    /// own regions.
    pub fn exchange_regions<'a>(
        &mut self,
        regions: impl IntoIterator<Item = (&'a str, &'a Region)>,
    ) -> RuntimeResult<ExchangedRegions> {
        self.bootstrap("exchange_regions")?;
        if self.connection.is_none() {
            return Err(RuntimeError::NotConnected {
                operation: "exchange_regions",
            });
        }
        let mut records = Vec::new();
        let mut seen = HashSet::new();
        for (key, region) in regions {
            if key != region.name() {
                return Err(RuntimeError::RegionKeyMismatch {
                    key: key.to_owned(),
                    name: region.name().to_owned(),
                });
            }
            if !seen.insert(key) {
                return Err(RuntimeError::DuplicateRegion {
                    name: key.to_owned(),
                });
            }
            let registration = self.registration_record(region.registration())?;
            records.push(RegionRecord {
                name: region.name().to_owned(),
                address: region.address(),
                length_bytes: region.length_bytes(),
                allocation_base: registration.span.allocation_base,
                offset_in_allocation_bytes: registration.span.offset_in_allocation_bytes
                    + region.offset_bytes(),
                ipc_handle: registration.ipc_handle,
                packet_slots: region.has_packet_slots(),
            });
        }
        crate::exchange::check_packet_staging_overlaps(&records)?;
        self.device.make_current()?;
        let gathered =
            self.all_gather("aboleth/exchange/regions", &encode_region_records(&records))?;
        let local = self.build_exchange(&gathered);
        let (exchanged, nic_regions) = self.agree("aboleth/exchange", local)?;
        let connection = self.connection.as_mut().expect("checked above");
        // Only an exchange every rank agreed on gets region indices (and so keys): a failed one
        // leaves neither the proxy's table nor the NIC with regions under keys a retry reuses.
        connection
            .proxy_regions
            .append(exchanged.tables.remote.clone());
        if let Some(soft_rdma) = &mut connection.soft_rdma {
            // SAFETY: registered tensors stay alive while the World is open (the Python layer
            // keeps them), and the peers' mappings until `tear_down`, which stops the NIC first.
            unsafe { soft_rdma.add_regions(nic_regions) }?;
        }
        Ok(exchanged)
    }

    /// The tables of an exchange, and the regions the software NIC (if any) must learn once
    /// every rank has agreed.
    fn build_exchange(
        &mut self,
        gathered: &[Vec<u8>],
    ) -> RuntimeResult<(ExchangedRegions, Vec<MappedRegion>)> {
        let lists = gathered
            .iter()
            .enumerate()
            .map(|(rank, bytes)| decode_region_records(bytes, rank as u32))
            .collect::<RuntimeResult<Vec<_>>>()?;
        let connection = self.connection.as_mut().expect("connected");
        let peer_mappings = &mut self.peer_mappings;
        let first_region_index = connection.proxy_regions.region_count();
        let mut tables = build_region_tables(
            self.rank,
            &connection.transports,
            &lists,
            first_region_index,
            |peer, record| peer_mappings.map(peer, &record.ipc_handle),
        )?;
        let mut nic_regions = Vec::new();
        if let Some(soft_rdma) = &connection.soft_rdma {
            SoftRdma::assign_keys(
                &connection.transports,
                &mut tables.local,
                &mut tables.remote,
            );
            nic_regions = soft_rdma.regions_of_exchange(
                &connection.transports,
                &lists,
                first_region_index,
                |peer, record| peer_mappings.map(peer, &record.ipc_handle),
            )?;
        }
        let deltas = peer_base_deltas(self.rank, &tables);
        for (peer, delta) in deltas.iter().enumerate() {
            if !delta.uniform && connection.transports[peer] == Transport::P2p {
                tracing::warn!(
                    rank = self.rank,
                    peer,
                    "the regions do not lie at the same offsets on this rank and the peer, so the endpoint's peer_base_delta holds for region 0 only"
                );
            }
        }
        let placements = connection
            .rings
            .iter()
            .map(|(&peer, ring)| {
                (
                    peer,
                    ProxyRingPlacement {
                        device_address: ring.device_address(),
                        capacity_entries: ring.host_ring().capacity_entries(),
                    },
                )
            })
            .collect();
        let mut endpoint_handles =
            build_endpoint_handles(self.rank, &connection.transports, &placements, &deltas);
        for handle in &mut endpoint_handles {
            handle.wait_failure_log_address = self.wait_failure_memory.device_address();
            if let Some(soft_rdma) = &connection.soft_rdma {
                // Every handle names the receive context, this rank's own too: a wait reads
                // it from the table's first handle, which may be this rank's (p2p) one.
                handle.receive_context_address = soft_rdma.receive_context_address();
                if SoftRdma::serves(connection.transports[handle.peer_rank as usize]) {
                    soft_rdma.fill_endpoint_handle(handle);
                }
            }
        }
        let region_table_memory = tables
            .remote
            .iter()
            .map(|descriptors| {
                DeviceMemory::from_bytes(&self.device, &encode_region_table(descriptors))
            })
            .collect::<RuntimeResult<Vec<_>>>()?;
        let endpoint_handle_memory =
            DeviceMemory::from_bytes(&self.device, &endpoint_table_bytes(&endpoint_handles))?;
        let exchanged = ExchangedRegions {
            tables,
            deltas,
            endpoint_handles,
            region_table_memory,
            endpoint_handle_memory,
        };
        Ok((exchanged, nic_regions))
    }

    /// The proxy ring to `peer_rank` (to post commands from the host, as the GPU does).
    pub fn proxy_ring(&self, peer_rank: u32) -> RuntimeResult<Arc<PinnedRing>> {
        let connection = self.connection.as_ref().ok_or(RuntimeError::NotConnected {
            operation: "proxy_ring",
        })?;
        connection
            .rings
            .get(&peer_rank)
            .cloned()
            .ok_or_else(|| RuntimeError::PeerUnreachable {
                rank: self.rank,
                peer_rank,
                transport: Transport::Proxy,
                reason: format!(
                    "the transport to it is not the proxy (transports: {})",
                    describe_transports(&connection.transports)
                ),
            })
    }

    /// Commands the proxy thread has executed.
    pub fn proxy_commands_executed(&self) -> u64 {
        self.connection
            .as_ref()
            .and_then(|connection| connection.proxy_thread.as_ref())
            .map_or(0, ProxyThread::commands_executed)
    }

    /// The proxy thread's work and host time by phase since it started (zeros without a proxy
    /// thread); see [`ProxyStatistics`]. Idle time is at most
    /// [`crate::transport::proxy::STATISTICS_IDLE_TURNS`] turns old.
    pub fn proxy_statistics(&self) -> ProxyStatistics {
        self.connection
            .as_ref()
            .and_then(|connection| connection.proxy_thread.as_ref())
            .map(ProxyThread::statistics)
            .unwrap_or_default()
    }

    /// Fails if the proxy thread stopped a ring, with each ring's reason.
    pub fn check_proxy(&self) -> RuntimeResult<()> {
        let failures = self
            .connection
            .as_ref()
            .and_then(|connection| connection.proxy_thread.as_ref())
            .map(ProxyThread::failures)
            .unwrap_or_default();
        if failures.is_empty() {
            Ok(())
        } else {
            Err(RuntimeError::ProxyStopped {
                rank: self.rank,
                failures: failures.join("; "),
            })
        }
    }

    /// The software NIC's counters by name ([`crate::soft_nic::SoftNicStatistics::fields`]), or
    /// `None` without mlx5 peers.
    pub fn soft_nic_statistics(&self) -> Option<Vec<(&'static str, u64)>> {
        let soft_rdma = self.connection.as_ref()?.soft_rdma.as_ref()?;
        Some(soft_rdma.statistics().fields())
    }

    /// Fails if the software NIC ended with an error of its model.
    pub fn check_soft_nic(&self) -> RuntimeResult<()> {
        match self.connection.as_ref().and_then(|c| c.soft_rdma.as_ref()) {
            Some(soft_rdma) => soft_rdma.check(),
            None => Ok(()),
        }
    }

    /// Stops the software NIC's thread: nothing posted afterwards executes, and kernels waiting
    /// for its completions give up at their bound (what the bounded-wait tests need). Not
    /// collective; the World stays usable for everything else.
    pub fn stop_soft_nic(&mut self) -> RuntimeResult<()> {
        let rank = self.rank;
        let soft_rdma = self
            .connection
            .as_mut()
            .and_then(|connection| connection.soft_rdma.as_mut())
            .ok_or_else(|| RuntimeError::SoftNicStopped {
                rank,
                reason: "this World has no software NIC (connect_all(\"rdma\") with ABOLETH_RDMA_DEVICE=soft makes one)".to_owned(),
            })?;
        match soft_rdma.stop() {
            None => Ok(()),
            Some(reason) => Err(RuntimeError::SoftNicStopped { rank, reason }),
        }
    }

    /// Device address of the wait-failure log, for kernels' bounded waits.
    pub fn wait_failure_log_address(&self) -> u64 {
        self.wait_failure_memory.device_address()
    }

    /// The host view of the wait-failure log.
    pub fn wait_failure_log(&self) -> &WaitFailureLog {
        &self.wait_failure_log
    }

    /// The failed waits recorded so far.
    pub fn wait_failures(&self) -> Vec<WaitFailureRecord> {
        self.wait_failure_log.records()
    }

    /// Forgets the GPU waits that gave up and clears `abort_requested` (which the first of
    /// them set, making every later bounded wait of this rank give up at once). Call it after
    /// handling a failure, when no kernel of this World is running.
    pub fn clear_waits(&self) {
        self.wait_failure_log.clear();
    }

    /// Fails if a GPU wait gave up, describing the first one.
    pub fn check_waits(&self) -> RuntimeResult<()> {
        let count = self.wait_failure_log.failure_count();
        if count == 0 {
            return Ok(());
        }
        let first = self
            .wait_failure_log
            .records()
            .first()
            .map(describe_wait_failure)
            .unwrap_or_else(|| "its record is still being written".to_owned());
        Err(RuntimeError::WaitTimedOut {
            rank: self.rank,
            count,
            first,
        })
    }

    /// Waits for every rank, then stops the proxy thread (after it ran what was published),
    /// unmaps peers' memory and leaves the bootstrap. Collective. Later calls on the World fail
    /// with [`RuntimeError::Closed`]; a second close does nothing.
    pub fn close(&mut self) -> RuntimeResult<()> {
        if self.bootstrap.is_none() {
            return Ok(());
        }
        let rank = self.rank;
        if let Some(soft_rdma) = self.connection.as_ref().and_then(|c| c.soft_rdma.as_ref())
            && !soft_rdma.wait_until_idle(std::time::Duration::from_secs(10))
        {
            tracing::warn!(
                rank,
                "the software NIC did not become idle within 10 s of close(): WQEs posted before it may not have run"
            );
        }
        let barrier = self
            .bootstrap("close")?
            .barrier("aboleth/close")
            .map_err(|source| RuntimeError::Collective {
                rank,
                operation: "the closing barrier".to_owned(),
                source,
            });
        let failures = self.tear_down();
        barrier?;
        if failures.is_empty() {
            Ok(())
        } else {
            Err(RuntimeError::ProxyStopped {
                rank,
                failures: failures.join("; "),
            })
        }
    }

    fn tear_down(&mut self) -> Vec<String> {
        let mut failures = Vec::new();
        if let Some(mut connection) = self.connection.take() {
            if let Some(thread) = connection.proxy_thread.take() {
                failures = thread.stop();
            }
            // Before the peers' memory is unmapped: the NIC writes into it.
            if let Some(reason) = connection.soft_rdma.as_mut().and_then(SoftRdma::stop) {
                failures.push(format!("the software NIC had stopped: {reason}"));
            }
        }
        self.peer_mappings.clear();
        if let Some(bootstrap) = self.bootstrap.take() {
            bootstrap.close();
        }
        failures
    }
}

impl Drop for World {
    fn drop(&mut self) {
        // Without the closing barrier: a drop cannot wait for other ranks or report failures.
        let failures = self.tear_down();
        if !failures.is_empty() {
            tracing::warn!(rank = self.rank, ?failures, "proxy failures at drop");
        }
    }
}

/// `ABOLETH_PROXY_COMPLETION` (`markers` or `synchronize`, see [`ProxyCompletion`]), if set:
/// how [`World::new`]'s proxy completes the commands that request a completion.
fn proxy_completion_from_env() -> Result<Option<ProxyCompletion>, RuntimeError> {
    match std::env::var("ABOLETH_PROXY_COMPLETION") {
        Err(_) => Ok(None),
        Ok(text) => {
            ProxyCompletion::parse(text.trim())
                .map(Some)
                .ok_or(RuntimeError::InvalidEnvironment {
                    variable: "ABOLETH_PROXY_COMPLETION",
                    value: text.clone(),
                    expected: "markers (the default) or synchronize",
                })
        }
    }
}

/// Default bound of a GPU wait when `ABOLETH_WAIT_TIMEOUT_MS` is not set.
pub const DEFAULT_WAIT_TIMEOUT_MILLISECONDS: u64 = 10_000;

/// `ABOLETH_WAIT_TIMEOUT_MS` in nanoseconds (0 means wait forever); the default when unset.
fn wait_timeout_nanoseconds_from_env() -> Result<u64, RuntimeError> {
    let milliseconds = match std::env::var("ABOLETH_WAIT_TIMEOUT_MS") {
        Err(_) => DEFAULT_WAIT_TIMEOUT_MILLISECONDS,
        Ok(text) => text
            .trim()
            .parse::<u64>()
            .map_err(|_| RuntimeError::InvalidEnvironment {
                variable: "ABOLETH_WAIT_TIMEOUT_MS",
                value: text.clone(),
                expected: "a whole number of milliseconds (0: wait forever)",
            })?,
    };
    Ok(milliseconds.saturating_mul(1_000_000))
}
