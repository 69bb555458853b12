//! The host runtime's Python classes: thin wrappers of `aboleth-runtime`'s
//! [`TcpStoreBootstrap`](aboleth_runtime::TcpStoreBootstrap), [`World`](aboleth_runtime::World)
//! and what they return, registered in `aboleth._aboleth`.
//!
//! Everything here converts: arguments in, results and errors out. Addresses and lengths are
//! plain integers; the Python package (`python/aboleth/runtime.py`) turns tensors into them and
//! the device tables into torch tensors, and is what users call (`aboleth.World`). Errors map by
//! [`ErrorKind`]: `TypeError`, `ValueError` or `RuntimeError`; bootstrap errors map by variant
//! ([`bootstrap_error`]). Every call that may wait for other ranks or for the GPU
//! (`TcpStoreBootstrap.from_env` and `connect`, `World(...)`, `connect_all`, `exchange_regions`, `barrier`,
//! `close`) releases the GIL, so that other Python threads run meanwhile.
//!
//! What it does not do: inspect tensors, choose a compilation target, or launch anything.

use std::collections::BTreeMap;
use std::sync::Mutex;

use aboleth_abi::{LocalRegionDescriptor, Transport};
use aboleth_runtime::{
    BootstrapConfig, BootstrapError, DeviceTable, ErrorKind, ExchangedRegions, Region,
    Registration, RuntimeError, TcpStoreBootstrap, TransportRequest, World,
};
use pyo3::exceptions::{PyRuntimeError, PyTimeoutError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// The Python exception for a runtime error: its [`ErrorKind`] picks the class, its message is
/// the error's text.
pub fn runtime_error(error: RuntimeError) -> PyErr {
    let message = error.to_string();
    match error.kind() {
        ErrorKind::Type => PyTypeError::new_err(message),
        ErrorKind::Value => PyValueError::new_err(message),
        ErrorKind::Runtime => PyRuntimeError::new_err(message),
    }
}

/// The Python exception for a bootstrap error: a missing or invalid environment variable is a
/// `ValueError`, ranks that never arrived a `TimeoutError`, anything else a `RuntimeError`.
pub fn bootstrap_error(error: BootstrapError) -> PyErr {
    let message = error.to_string();
    match error {
        BootstrapError::MissingEnvironmentVariable { .. }
        | BootstrapError::InvalidEnvironmentVariable { .. }
        | BootstrapError::InvalidArgument { .. } => PyValueError::new_err(message),
        BootstrapError::Timeout { .. } | BootstrapError::KeyTimeout { .. } => {
            PyTimeoutError::new_err(message)
        }
        _ => PyRuntimeError::new_err(message),
    }
}

/// The name the Python API uses for a transport (`connect_all`'s strings, `compilation`'s
/// targets).
pub fn transport_name(kind: Transport) -> &'static str {
    kind.name()
}

/// connect_kinds() -> list of str: what `World.connect_all(kind)` accepts
/// (`aboleth_runtime::TransportRequest::names`).
#[pyfunction]
pub fn connect_kinds() -> Vec<&'static str> {
    TransportRequest::names()
}

/// Locks, ignoring poisoning: a panic inside the runtime already became a Python exception, and
/// the state it guards stays usable (the runtime's own checks refuse what is no longer valid).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// TcpStoreBootstrap: this rank's connection to the job's rendezvous store (PyTorch's TCPStore
/// protocol; under torchrun, the elastic agent's store).
///
/// `TcpStoreBootstrap.from_env()` reads MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE (and
/// optionally ABOLETH_BOOTSTRAP_TIMEOUT_S, ABOLETH_JOB_TOKEN) and waits until every rank has
/// joined. One bootstrap serves one World: `World(...)` takes it over (also when creating the
/// World fails, which closes it).
#[pyclass(module = "aboleth._aboleth", name = "TcpStoreBootstrap", frozen)]
pub struct PyTcpStoreBootstrap {
    rank: u32,
    world_size: u32,
    inner: Mutex<Option<TcpStoreBootstrap>>,
}

#[pymethods]
impl PyTcpStoreBootstrap {
    /// Reads the environment and joins the rendezvous (GIL released). Raises ValueError naming
    /// a missing or invalid variable, TimeoutError naming ranks that never arrived, RuntimeError
    /// otherwise.
    #[staticmethod]
    fn from_env(py: Python<'_>) -> PyResult<Self> {
        let bootstrap = py
            .detach(TcpStoreBootstrap::from_env)
            .map_err(bootstrap_error)?;
        Ok(Self {
            rank: bootstrap.rank(),
            world_size: bootstrap.world_size(),
            inner: Mutex::new(Some(bootstrap)),
        })
    }

    /// Joins the rendezvous of a store at `master_address:master_port` (rank 0 hosts it there)
    /// as `rank` of `world_size`, for launchers that set no MASTER_ADDR, MASTER_PORT, RANK and
    /// WORLD_SIZE; the optional variables of `from_env` are still read (GIL released). Raises
    /// ValueError naming an invalid argument, TimeoutError naming ranks that never arrived,
    /// RuntimeError otherwise.
    #[staticmethod]
    fn connect(
        py: Python<'_>,
        master_address: String,
        master_port: u16,
        rank: u32,
        world_size: u32,
    ) -> PyResult<Self> {
        let config =
            BootstrapConfig::for_rendezvous(&master_address, master_port, rank, world_size)
                .map_err(bootstrap_error)?;
        let bootstrap = py
            .detach(move || TcpStoreBootstrap::connect(config))
            .map_err(bootstrap_error)?;
        Ok(Self {
            rank: bootstrap.rank(),
            world_size: bootstrap.world_size(),
            inner: Mutex::new(Some(bootstrap)),
        })
    }

    /// This rank.
    #[getter]
    fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks.
    #[getter]
    fn world_size(&self) -> u32 {
        self.world_size
    }

    /// Whether it can still be given to a World (not taken over, not closed).
    #[getter]
    fn available(&self) -> bool {
        lock(&self.inner).is_some()
    }

    /// Leaves the job (GIL released; rank 0, when it hosts the store, waits until the other
    /// ranks disconnected). Does nothing once a World took it over or after a first close.
    fn close(&self, py: Python<'_>) {
        if let Some(bootstrap) = lock(&self.inner).take() {
            py.detach(move || bootstrap.close());
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "TcpStoreBootstrap(rank={}, world_size={}, available={})",
            self.rank,
            self.world_size,
            self.available()
        )
    }
}

/// Registration: a registered span of GPU memory (`World.register`).
#[pyclass(module = "aboleth._aboleth", name = "Registration", frozen)]
pub struct PyRegistration {
    inner: Registration,
}

#[pymethods]
impl PyRegistration {
    /// The first registered byte.
    #[getter]
    fn address(&self) -> u64 {
        self.inner.address()
    }

    /// Registered bytes.
    #[getter]
    fn length_bytes(&self) -> u64 {
        self.inner.length_bytes()
    }

    /// Position among the World's registrations.
    #[getter]
    fn index(&self) -> u32 {
        self.inner.index()
    }

    fn __repr__(&self) -> String {
        format!(
            "Registration(index={}, address={:#x}, length_bytes={})",
            self.inner.index(),
            self.inner.address(),
            self.inner.length_bytes()
        )
    }
}

/// Region: a named span of a registration, ready to be exchanged (`World.region`).
#[pyclass(module = "aboleth._aboleth", name = "Region", frozen)]
pub struct PyRegion {
    inner: Region,
}

#[pymethods]
impl PyRegion {
    /// The region's name.
    #[getter]
    fn name(&self) -> &str {
        self.inner.name()
    }

    /// Offset from the registration's first byte.
    #[getter]
    fn offset(&self) -> u64 {
        self.inner.offset_bytes()
    }

    /// Bytes.
    #[getter]
    fn length(&self) -> u64 {
        self.inner.length_bytes()
    }

    /// Local address of the first byte.
    #[getter]
    fn address(&self) -> u64 {
        self.inner.address()
    }

    fn __repr__(&self) -> String {
        format!(
            "Region(name={:?}, offset={}, length={}, address={:#x})",
            self.inner.name(),
            self.inner.offset_bytes(),
            self.inner.length_bytes(),
            self.inner.address()
        )
    }
}

/// LocalRegion: this rank's view of an exchanged region: `.address` (its first byte) and
/// `.lkey` (its RDMA local key; 0 without RDMA), the `src`/`source_key` arguments of kernels.
#[pyclass(module = "aboleth._aboleth", name = "LocalRegion", frozen)]
pub struct PyLocalRegion {
    inner: LocalRegionDescriptor,
}

#[pymethods]
impl PyLocalRegion {
    /// Local address of the region's first byte.
    #[getter]
    fn address(&self) -> u64 {
        self.inner.address
    }

    /// RDMA local key (0 without RDMA).
    #[getter]
    fn lkey(&self) -> u32 {
        self.inner.lkey
    }

    fn __repr__(&self) -> String {
        format!(
            "LocalRegion(address={:#x}, lkey={:#x})",
            self.inner.address, self.inner.lkey
        )
    }
}

/// DeviceTable: where a table lies in GPU memory: `entry_count` entries of `entry_bytes` bytes
/// at `address`, valid while the ExchangedRegions that returned it lives.
#[pyclass(module = "aboleth._aboleth", name = "DeviceTable", frozen)]
pub struct PyDeviceTable {
    inner: DeviceTable,
}

#[pymethods]
impl PyDeviceTable {
    /// Device address of entry 0.
    #[getter]
    fn address(&self) -> u64 {
        self.inner.address
    }

    /// Entries (one per rank).
    #[getter]
    fn entry_count(&self) -> usize {
        self.inner.entry_count
    }

    /// Bytes per entry.
    #[getter]
    fn entry_bytes(&self) -> usize {
        self.inner.entry_bytes
    }

    /// Bytes of the whole table.
    #[getter]
    fn length_bytes(&self) -> usize {
        self.inner.length_bytes()
    }

    fn __repr__(&self) -> String {
        format!(
            "DeviceTable(address={:#x}, entry_count={}, entry_bytes={})",
            self.inner.address, self.inner.entry_count, self.inner.entry_bytes
        )
    }
}

/// ExchangedRegions: what `World.exchange_regions` returns: per region, this rank's
/// LocalRegion and the GPU table of every rank's remote descriptors; and the GPU table of
/// endpoint handles. Owns those GPU tables: they are freed when this object is.
#[pyclass(module = "aboleth._aboleth", name = "ExchangedRegions", frozen)]
pub struct PyExchangedRegions {
    inner: ExchangedRegions,
}

#[pymethods]
impl PyExchangedRegions {
    /// Region names in exchange order (a region's index is its position).
    #[getter]
    fn names(&self) -> Vec<String> {
        self.inner.names().to_vec()
    }

    /// This rank's region `name`. ValueError for a name that was not exchanged.
    fn local(&self, name: &str) -> PyResult<PyLocalRegion> {
        let inner = self.inner.local(name).map_err(runtime_error)?;
        Ok(PyLocalRegion { inner })
    }

    /// The GPU table of region `name` (one remote descriptor per rank, indexed by rank).
    fn regions(&self, name: &str) -> PyResult<PyDeviceTable> {
        let inner = self.inner.regions(name).map_err(runtime_error)?;
        Ok(PyDeviceTable { inner })
    }

    /// The GPU table of endpoint handles (one per rank, indexed by rank).
    fn endpoint_handles(&self) -> PyDeviceTable {
        PyDeviceTable {
            inner: self.inner.endpoint_handles(),
        }
    }

    /// The bytes region `name`'s GPU table holds (its host copy).
    fn region_table_bytes<'py>(
        &self,
        py: Python<'py>,
        name: &str,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = self.inner.region_table_bytes(name).map_err(runtime_error)?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// The bytes the endpoint handle GPU table holds (its host copy).
    fn endpoint_handle_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.endpoint_handle_bytes())
    }

    /// Reads the GPU tables back and compares them with the host copies (GIL released).
    fn verify_device_copies(&self, py: Python<'_>) -> PyResult<bool> {
        py.detach(|| self.inner.verify_device_copies())
            .map_err(runtime_error)
    }

    fn __repr__(&self) -> String {
        format!("ExchangedRegions(names={:?})", self.inner.names())
    }
}

/// World: one rank of a job on one GPU (the runtime's `World`), taking integer addresses.
///
/// `World(rank, size, device, bootstrap)` opens the device (its primary context, shared with
/// PyTorch) and takes the bootstrap over. Use `aboleth.World`, which accepts tensors.
#[pyclass(module = "aboleth._aboleth", name = "World", frozen)]
pub struct PyWorld {
    rank: u32,
    world_size: u32,
    device: i32,
    inner: Mutex<World>,
}

#[pymethods]
impl PyWorld {
    /// Creates rank `rank` of `size` on CUDA device `device` (GIL released). Raises ValueError
    /// if `bootstrap` was already taken over or closed, or disagrees on rank and size;
    /// RuntimeError if the CUDA driver or the device cannot be used.
    #[new]
    fn new(
        py: Python<'_>,
        rank: u32,
        size: u32,
        device: i32,
        bootstrap: &PyTcpStoreBootstrap,
    ) -> PyResult<Self> {
        let taken = lock(&bootstrap.inner).take().ok_or_else(|| {
            PyValueError::new_err(
                "this TcpStoreBootstrap already serves a World or was closed: create one bootstrap per World (TcpStoreBootstrap.from_env())",
            )
        })?;
        let world = py
            .detach(move || World::new(rank, size, device, Box::new(taken)))
            .map_err(runtime_error)?;
        Ok(Self {
            rank,
            world_size: size,
            device,
            inner: Mutex::new(world),
        })
    }

    /// This rank.
    #[getter]
    fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks.
    #[getter]
    fn world_size(&self) -> u32 {
        self.world_size
    }

    /// The CUDA device ordinal.
    #[getter]
    fn device(&self) -> i32 {
        self.device
    }

    /// Connects to every rank with `kind` (one of `TransportRequest::names`: "rdma", "proxy", "p2p" or "auto"); returns the
    /// transport to each rank, by rank (this rank's own is "p2p"). Collective; GIL released.
    fn connect_all(&self, py: Python<'_>, kind: &str) -> PyResult<Vec<&'static str>> {
        let choice = TransportRequest::parse(kind).map_err(runtime_error)?;
        let transports = py
            .detach(|| lock(&self.inner).connect_all(choice))
            .map_err(runtime_error)?;
        Ok(transports.into_iter().map(transport_name).collect())
    }

    /// Registers `length_bytes` bytes of this World's GPU memory at `address`. Not collective.
    fn register(&self, address: u64, length_bytes: u64) -> PyResult<PyRegistration> {
        let inner = lock(&self.inner)
            .register(address, length_bytes)
            .map_err(runtime_error)?;
        Ok(PyRegistration { inner })
    }

    /// The region `name` = `[offset, offset + length)` of `registration`, with packet staging
    /// slots after it when `packet_slots`. ValueError when it (or its slots) leaves the
    /// registration or the name is invalid. Not collective.
    #[pyo3(signature = (name, registration, offset, length, packet_slots = false))]
    fn region(
        &self,
        name: &str,
        registration: &PyRegistration,
        offset: u64,
        length: u64,
        packet_slots: bool,
    ) -> PyResult<PyRegion> {
        let mut inner = lock(&self.inner)
            .region(name, &registration.inner, offset, length)
            .map_err(runtime_error)?;
        if packet_slots {
            inner = inner.with_packet_slots().map_err(runtime_error)?;
        }
        Ok(PyRegion { inner })
    }

    /// Exchanges `regions` ((key, Region) pairs, keys equal to the regions' names, in the same
    /// order on every rank) and builds the GPU tables. Collective; GIL released.
    fn exchange_regions(
        &self,
        py: Python<'_>,
        regions: Vec<(String, PyRef<'_, PyRegion>)>,
    ) -> PyResult<PyExchangedRegions> {
        let regions: Vec<(String, Region)> = regions
            .into_iter()
            .map(|(key, region)| (key, region.inner.clone()))
            .collect();
        let inner = py
            .detach(|| {
                lock(&self.inner)
                    .exchange_regions(regions.iter().map(|(key, region)| (key.as_str(), region)))
            })
            .map_err(runtime_error)?;
        Ok(PyExchangedRegions { inner })
    }

    /// Returns once every rank called `barrier` with the same `name`. Collective; GIL released.
    #[pyo3(signature = (name = "aboleth/barrier"))]
    fn barrier(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        py.detach(|| lock(&self.inner).barrier(name))
            .map_err(runtime_error)
    }

    /// Waits for every rank, stops the proxy thread, unmaps peers' memory and leaves the
    /// bootstrap. Collective; GIL released; a second close does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| lock(&self.inner).close())
            .map_err(runtime_error)
    }

    /// RuntimeError describing the first GPU wait that gave up, if any did.
    fn check_waits(&self) -> PyResult<()> {
        lock(&self.inner).check_waits().map_err(runtime_error)
    }

    /// The waits that gave up, each as its record's fields (`flag_address`, `expected_value`,
    /// `observed_value`, `waited_nanoseconds`, `rank`, `peer_rank`, `site_id`, `comparison`,
    /// `program_id`, `thread_id`), oldest first: what a library on top names a flag by.
    fn wait_failures(&self) -> Vec<BTreeMap<&'static str, u64>> {
        lock(&self.inner)
            .wait_failures()
            .iter()
            .map(|record| {
                BTreeMap::from([
                    ("flag_address", record.flag_address),
                    ("expected_value", record.expected_value),
                    ("observed_value", record.observed_value),
                    ("waited_nanoseconds", record.waited_nanoseconds),
                    ("rank", u64::from(record.rank)),
                    ("peer_rank", u64::from(record.peer_rank)),
                    ("site_id", u64::from(record.site_id)),
                    ("comparison", u64::from(record.comparison)),
                    ("program_id", u64::from(record.program_id)),
                    ("thread_id", u64::from(record.thread_id)),
                ])
            })
            .collect()
    }

    /// Forgets the waits that gave up and the abort they requested (no kernel may be running).
    fn clear_waits(&self) {
        lock(&self.inner).clear_waits();
    }

    /// RuntimeError if the proxy thread stopped a ring, with each ring's reason.
    fn check_proxy(&self) -> PyResult<()> {
        lock(&self.inner).check_proxy().map_err(runtime_error)
    }

    /// Commands the proxy thread has executed.
    #[getter]
    fn proxy_commands_executed(&self) -> u64 {
        lock(&self.inner).proxy_commands_executed()
    }

    /// The proxy thread's work and host time by phase since it started: a dict from each field
    /// of `aboleth_runtime::transport::proxy::ProxyStatistics` (counts, and `*_ns` totals in
    /// nanoseconds) to its value; zeros without a proxy thread.
    fn proxy_statistics(&self) -> BTreeMap<&'static str, u64> {
        lock(&self.inner)
            .proxy_statistics()
            .fields()
            .into_iter()
            .collect()
    }

    /// The software NIC's counters (`doorbells_observed`, `host_doorbells_rung`,
    /// `wqes_executed`, `wqes_failed`, `polls`), or None when no peer is reached over rdma with
    /// the software NIC.
    fn soft_nic_statistics(&self) -> Option<BTreeMap<&'static str, u64>> {
        Some(
            lock(&self.inner)
                .soft_nic_statistics()?
                .into_iter()
                .collect(),
        )
    }

    /// RuntimeError if the software NIC ended with an error of its model.
    fn check_soft_nic(&self) -> PyResult<()> {
        lock(&self.inner).check_soft_nic().map_err(runtime_error)
    }

    /// Stops the software NIC's thread (kernels waiting for it then give up at their bound).
    fn stop_soft_nic(&self) -> PyResult<()> {
        lock(&self.inner).stop_soft_nic().map_err(runtime_error)
    }

    /// Device address of the wait-failure log (for kernels' bounded waits).
    #[getter]
    fn wait_failure_log_address(&self) -> u64 {
        lock(&self.inner).wait_failure_log_address()
    }

    fn __repr__(&self) -> String {
        format!(
            "World(rank={}, size={}, device={})",
            self.rank, self.world_size, self.device
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exception_name(error: PyErr) -> String {
        Python::initialize();
        Python::attach(|py| error.get_type(py).name().unwrap().to_string())
    }

    #[test]
    fn runtime_errors_map_to_the_exception_of_their_kind() {
        let out_of_bounds = RuntimeError::RegionOutOfBounds {
            name: "recv".into(),
            offset_bytes: 8,
            end_bytes: 24,
            registration_length_bytes: 16,
        };
        assert_eq!(exception_name(runtime_error(out_of_bounds)), "ValueError");
        let host_memory = RuntimeError::NotDeviceMemory {
            address: 0x1000,
            memory: "host memory".into(),
        };
        assert_eq!(exception_name(runtime_error(host_memory)), "TypeError");
        let no_driver = RuntimeError::CudaDriverNotFound {
            tried: "libcuda.so".into(),
        };
        assert_eq!(exception_name(runtime_error(no_driver)), "RuntimeError");
    }

    #[test]
    fn bootstrap_errors_map_by_variant() {
        let missing = BootstrapError::MissingEnvironmentVariable { name: "RANK" };
        assert_eq!(exception_name(bootstrap_error(missing)), "ValueError");
        let timeout = BootstrapError::KeyTimeout {
            rank: 0,
            key: "k".into(),
            timeout_seconds: 1.0,
        };
        assert_eq!(exception_name(bootstrap_error(timeout)), "TimeoutError");
        let refused = BootstrapError::DuplicateRank { rank: 1 };
        assert_eq!(exception_name(bootstrap_error(refused)), "RuntimeError");
    }

    #[test]
    fn transport_names_are_the_python_strings() {
        assert_eq!(transport_name(Transport::P2p), "p2p");
        assert_eq!(transport_name(Transport::Proxy), "proxy");
        assert_eq!(transport_name(Transport::Mlx5), "mlx5");
    }
}
