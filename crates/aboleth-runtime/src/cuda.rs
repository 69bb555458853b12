//! Small safe wrappers over the CUDA driver API (`cudarc::driver::sys`, loaded with dlopen at
//! run time): driver loading with a clear error when `libcuda.so` is missing ([`initialize`]),
//! the device and its primary context ([`Device`]), device allocations ([`DeviceMemory`]),
//! host-pinned device-mapped allocations ([`PinnedHostMemory`]), pointer queries
//! ([`Device::pointer_facts`]), CUDA IPC export and mapping ([`Device::ipc_handle`],
//! [`IpcMapping`]), streams ([`Stream`]) and the runtime's own PTX kernels ([`RuntimeKernels`]:
//! signal add and set, the reference bounded wait, the software NIC's compare-and-swap).
//!
//! cudarc's safe layer does not wrap IPC, pinned mapped memory or stream memory operations, so
//! this module calls `sys` directly; every call's result is checked and turned into a
//! [`RuntimeError::Cuda`] naming the call and what the runtime was doing. Before any call the
//! driver is loaded and every symbol used here is looked up once, so an old driver fails with
//! the missing names instead of cudarc's panic at first use. Objects hold an `Arc<Device>` and
//! make its primary context current before each call (PyTorch uses the same primary context),
//! since callers' threads (Python's, the proxy's) may have none current.
//!
//! What it does not do: choose transports, track registrations, or run anything on its own.

use std::ffi::{CStr, CString, c_void};
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys;

use crate::error::{RuntimeError, RuntimeResult};
use crate::exchange::IPC_HANDLE_BYTES;
use crate::registration::{PointerFacts, PointerMemory};
use crate::transport::PeerAccess;

/// The driver functions this module calls, checked at [`initialize`] (all exist in CUDA 13.0,
/// the version cudarc is built for).
const DRIVER_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetPCIBusId",
    "cuDeviceGetByPCIBusId",
    "cuDeviceGetUuid_v2",
    "cuDeviceGetAttribute",
    "cuDeviceCanAccessPeer",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemHostAlloc",
    "cuMemHostGetDevicePointer_v2",
    "cuMemFreeHost",
    "cuMemGetAddressRange_v2",
    "cuPointerGetAttribute",
    "cuIpcGetMemHandle",
    "cuIpcOpenMemHandle_v2",
    "cuIpcCloseMemHandle",
    "cuMemcpyHtoD_v2",
    "cuMemcpyDtoH_v2",
    "cuMemcpyDtoD_v2",
    "cuMemcpyAsync",
    "cuMemsetD8_v2",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamWriteValue64_v2",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuModuleUnload",
    "cuLaunchKernel",
];

/// Why the driver could not be brought up (cached: loading is tried once per process).
#[derive(Clone, Debug)]
enum InitializationFailure {
    NotFound { tried: String },
    MissingSymbols { names: String, version: i32 },
    Init { code: String, description: String },
}

impl InitializationFailure {
    fn to_error(&self) -> RuntimeError {
        match self.clone() {
            Self::NotFound { tried } => RuntimeError::CudaDriverNotFound { tried },
            Self::MissingSymbols { names, version } => RuntimeError::Cuda {
                call: "dlsym",
                code: "missing driver functions".to_owned(),
                description: format!(
                    "the loaded libcuda (driver API version {version}) lacks {names}; install an NVIDIA driver for CUDA 13.0 or later (driver 580+)"
                ),
                doing: "loading the CUDA driver".to_owned(),
            },
            Self::Init { code, description } => RuntimeError::Cuda {
                call: "cuInit",
                code,
                description,
                doing: "initializing the CUDA driver".to_owned(),
            },
        }
    }
}

/// Whether `libcuda.so` can be loaded here (no other driver call is made).
pub fn driver_library_present() -> bool {
    // SAFETY: only tries to dlopen the library names; calls no driver function.
    unsafe { sys::is_culib_present() }
}

/// Loads the driver, checks that it has every function this module calls, and runs `cuInit`.
/// Called by everything in this module before the first driver call; cheap after the first time.
pub fn initialize() -> RuntimeResult<()> {
    static STATE: OnceLock<Result<(), InitializationFailure>> = OnceLock::new();
    STATE
        .get_or_init(|| {
            if !driver_library_present() {
                let mut tried = cudarc::get_lib_name_candidates("cuda");
                let mut seen = std::collections::HashSet::new();
                tried.retain(|name| seen.insert(name.clone()));
                return Err(InitializationFailure::NotFound {
                    tried: tried.join(", "),
                });
            }
            // SAFETY: the library is present (checked above); `culib` loads it once and keeps
            // it loaded; `get` only looks a symbol up.
            let library = unsafe { sys::culib() };
            let missing: Vec<&str> = DRIVER_SYMBOLS
                .iter()
                .copied()
                // SAFETY: looking a symbol up calls nothing.
                .filter(|name| unsafe { library.get::<*const c_void>(name.as_bytes()) }.is_err())
                .collect();
            if !missing.is_empty() {
                let mut version = 0;
                // SAFETY: cuDriverGetVersion writes one int; if it is itself missing, `missing`
                // names it and we do not call it.
                if !missing.contains(&"cuDriverGetVersion") {
                    let _ = unsafe { sys::cuDriverGetVersion(&mut version) };
                }
                return Err(InitializationFailure::MissingSymbols {
                    names: missing.join(", "),
                    version,
                });
            }
            // SAFETY: every symbol is present; cuInit takes flags 0.
            let result = unsafe { sys::cuInit(0) };
            if result != sys::CUresult::CUDA_SUCCESS {
                let (code, description) = describe_result(result);
                return Err(InitializationFailure::Init { code, description });
            }
            Ok(())
        })
        .clone()
        .map_err(|failure| failure.to_error())
}

/// The driver's CUDA version as `major * 1000 + minor * 10` (13000 for CUDA 13.0).
pub fn driver_version() -> RuntimeResult<i32> {
    initialize()?;
    let mut version = 0;
    // SAFETY: writes one int.
    check(
        unsafe { sys::cuDriverGetVersion(&mut version) },
        "cuDriverGetVersion",
        || "reading the driver version".to_owned(),
    )?;
    Ok(version)
}

/// The error's name and the driver's description of it.
fn describe_result(result: sys::CUresult) -> (String, String) {
    let mut text: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: cuGetErrorString stores a pointer to a static NUL-terminated string or fails.
    let described = unsafe { sys::cuGetErrorString(result, &mut text) };
    let description = if described == sys::CUresult::CUDA_SUCCESS && !text.is_null() {
        // SAFETY: the driver returned a static NUL-terminated string.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    } else {
        "no description".to_owned()
    };
    (format!("{result:?}"), description)
}

/// Reads a string the driver writes into a caller-provided buffer of `LENGTH` bytes.
fn read_driver_string<const LENGTH: usize>(
    fill: impl FnOnce(*mut std::ffi::c_char, i32) -> sys::CUresult,
    call: &'static str,
    doing: &str,
) -> RuntimeResult<String> {
    let mut buffer = [0 as std::ffi::c_char; LENGTH];
    check(fill(buffer.as_mut_ptr(), LENGTH as i32), call, || {
        doing.to_owned()
    })?;
    // The driver may fill the whole buffer; the last byte stays NUL so the read below ends.
    buffer[LENGTH - 1] = 0;
    // SAFETY: NUL-terminated (ensured above).
    Ok(unsafe { CStr::from_ptr(buffer.as_ptr()) }
        .to_string_lossy()
        .into_owned())
}

/// Turns a driver result into the runtime's error.
fn check(
    result: sys::CUresult,
    call: &'static str,
    doing: impl FnOnce() -> String,
) -> RuntimeResult<()> {
    if result == sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let (code, description) = describe_result(result);
    Err(RuntimeError::Cuda {
        call,
        code,
        description,
        doing: doing(),
    })
}

/// One GPU and its primary context, retained while this lives.
#[derive(Debug)]
pub struct Device {
    ordinal: i32,
    device: sys::CUdevice,
    context: sys::CUcontext,
}

// SAFETY: a CUcontext handle may be made current and used on any thread; the driver serializes
// what needs it. `Device` holds no other state.
unsafe impl Send for Device {}
// SAFETY: as above; every method takes `&self` and only passes the handles to the driver.
unsafe impl Sync for Device {}

impl Device {
    /// Retains the primary context of device `ordinal` and makes it current on this thread.
    pub fn open(ordinal: i32) -> RuntimeResult<Arc<Self>> {
        initialize()?;
        let mut count = 0;
        // SAFETY: writes one int.
        check(
            unsafe { sys::cuDeviceGetCount(&mut count) },
            "cuDeviceGetCount",
            || "counting devices".to_owned(),
        )?;
        if ordinal < 0 || ordinal >= count {
            return Err(RuntimeError::NoSuchDevice {
                device_ordinal: ordinal,
                device_count: count,
            });
        }
        let mut device = 0;
        // SAFETY: writes one CUdevice; the ordinal is in range.
        check(
            unsafe { sys::cuDeviceGet(&mut device, ordinal) },
            "cuDeviceGet",
            || format!("opening device {ordinal}"),
        )?;
        let mut context = std::ptr::null_mut();
        // SAFETY: writes one context handle; released in Drop.
        check(
            unsafe { sys::cuDevicePrimaryCtxRetain(&mut context, device) },
            "cuDevicePrimaryCtxRetain",
            || format!("retaining the primary context of device {ordinal}"),
        )?;
        let device = Arc::new(Self {
            ordinal,
            device,
            context,
        });
        device.make_current()?;
        Ok(device)
    }

    /// The ordinal in this process.
    pub fn ordinal(&self) -> i32 {
        self.ordinal
    }

    /// Makes the primary context current on the calling thread.
    pub fn make_current(&self) -> RuntimeResult<()> {
        // SAFETY: the context is retained while `self` lives.
        check(
            unsafe { sys::cuCtxSetCurrent(self.context) },
            "cuCtxSetCurrent",
            || format!("making device {}'s context current", self.ordinal),
        )
    }

    /// Waits for all work on the device (every stream of the context).
    pub fn synchronize(&self) -> RuntimeResult<()> {
        self.make_current()?;
        // SAFETY: no arguments; the context is current.
        check(
            unsafe { sys::cuCtxSynchronize() },
            "cuCtxSynchronize",
            || format!("waiting for device {}", self.ordinal),
        )
    }

    /// The device's name, e.g. "NVIDIA H200".
    pub fn name(&self) -> RuntimeResult<String> {
        read_driver_string::<256>(
            // SAFETY: the driver writes at most `length` bytes, NUL-terminated.
            |buffer, length| unsafe { sys::cuDeviceGetName(buffer, length, self.device) },
            "cuDeviceGetName",
            "reading the device name",
        )
    }

    /// The PCI bus id, e.g. "0000:1B:00.0" (the same in every process of the host).
    pub fn pci_bus_id(&self) -> RuntimeResult<String> {
        read_driver_string::<64>(
            // SAFETY: the driver writes at most `length` bytes, NUL-terminated.
            |buffer, length| unsafe { sys::cuDeviceGetPCIBusId(buffer, length, self.device) },
            "cuDeviceGetPCIBusId",
            "reading the device's PCI bus id",
        )
    }

    /// The device UUID.
    pub fn uuid(&self) -> RuntimeResult<[u8; 16]> {
        let mut uuid = sys::CUuuid_st { bytes: [0; 16] };
        // SAFETY: writes one CUuuid.
        check(
            unsafe { sys::cuDeviceGetUuid_v2(&mut uuid, self.device) },
            "cuDeviceGetUuid_v2",
            || "reading the device UUID".to_owned(),
        )?;
        Ok(uuid.bytes.map(|byte| byte as u8))
    }

    /// Whether `cuStreamWriteValue64` works on this device.
    pub fn supports_64_bit_stream_memory_operations(&self) -> bool {
        let mut value = 0;
        // SAFETY: writes one int.
        let result = unsafe {
            sys::cuDeviceGetAttribute(
                &mut value,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
                self.device,
            )
        };
        result == sys::CUresult::CUDA_SUCCESS && value != 0
    }

    /// Whether this GPU can access the GPU at `peer_pci_bus_id` directly.
    pub fn peer_access(&self, peer_pci_bus_id: &str) -> PeerAccess {
        let Ok(bus_id) = CString::new(peer_pci_bus_id) else {
            return PeerAccess::DeviceNotVisible;
        };
        let mut peer = 0;
        // SAFETY: reads a NUL-terminated string, writes one CUdevice.
        let found = unsafe { sys::cuDeviceGetByPCIBusId(&mut peer, bus_id.as_ptr()) };
        if found != sys::CUresult::CUDA_SUCCESS {
            return PeerAccess::DeviceNotVisible;
        }
        if peer == self.device {
            return PeerAccess::SameDevice;
        }
        let mut can_access = 0;
        // SAFETY: writes one int.
        let result = unsafe { sys::cuDeviceCanAccessPeer(&mut can_access, self.device, peer) };
        if result == sys::CUresult::CUDA_SUCCESS && can_access != 0 {
            PeerAccess::Yes
        } else {
            PeerAccess::No
        }
    }

    /// What the driver knows about `address`: kind of memory, device, and the allocation
    /// holding it.
    pub fn pointer_facts(&self, address: u64) -> RuntimeResult<PointerFacts> {
        self.make_current()?;
        let unknown = PointerFacts {
            memory: PointerMemory::Unknown,
            device_ordinal: None,
            allocation_base: 0,
            allocation_length_bytes: 0,
        };
        let mut memory_type: u32 = 0;
        // SAFETY: MEMORY_TYPE writes one 32-bit CUmemorytype.
        let result = unsafe {
            sys::cuPointerGetAttribute(
                (&mut memory_type as *mut u32).cast(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                address,
            )
        };
        if result == sys::CUresult::CUDA_ERROR_INVALID_VALUE {
            // Unknown to the driver: pageable host memory (or nothing at all).
            return Ok(unknown);
        }
        check(result, "cuPointerGetAttribute", || {
            format!("asking the driver what {address:#x} points to")
        })?;
        let mut is_managed: u32 = 0;
        // SAFETY: IS_MANAGED writes one 32-bit boolean.
        check(
            unsafe {
                sys::cuPointerGetAttribute(
                    (&mut is_managed as *mut u32).cast(),
                    sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED,
                    address,
                )
            },
            "cuPointerGetAttribute",
            || format!("asking whether {address:#x} is managed memory"),
        )?;
        let memory = if is_managed != 0 {
            PointerMemory::Managed
        } else if memory_type == sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 {
            PointerMemory::Device
        } else {
            PointerMemory::Host
        };
        if memory != PointerMemory::Device {
            return Ok(PointerFacts { memory, ..unknown });
        }
        let mut device_ordinal: i32 = -1;
        // SAFETY: DEVICE_ORDINAL writes one int.
        check(
            unsafe {
                sys::cuPointerGetAttribute(
                    (&mut device_ordinal as *mut i32).cast(),
                    sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                    address,
                )
            },
            "cuPointerGetAttribute",
            || format!("asking which device holds {address:#x}"),
        )?;
        let mut base: sys::CUdeviceptr = 0;
        let mut size: usize = 0;
        // SAFETY: writes the base and size of the allocation holding `address`.
        check(
            unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, address) },
            "cuMemGetAddressRange_v2",
            || format!("finding the allocation that holds {address:#x}"),
        )?;
        Ok(PointerFacts {
            memory,
            device_ordinal: Some(device_ordinal),
            allocation_base: base,
            allocation_length_bytes: size as u64,
        })
    }

    /// The CUDA IPC handle of the allocation starting at `allocation_base`, or the driver's
    /// error name (VMM allocations, e.g. PyTorch's expandable segments, cannot be exported).
    pub fn ipc_handle(&self, allocation_base: u64) -> Result<[u8; IPC_HANDLE_BYTES], String> {
        self.make_current().map_err(|error| error.to_string())?;
        let mut handle = sys::CUipcMemHandle_st {
            reserved: [0; IPC_HANDLE_BYTES],
        };
        // SAFETY: writes one 64-byte handle.
        let result = unsafe { sys::cuIpcGetMemHandle(&mut handle, allocation_base) };
        if result != sys::CUresult::CUDA_SUCCESS {
            let (code, description) = describe_result(result);
            return Err(format!("{code}: {description}"));
        }
        Ok(handle.reserved.map(|byte| byte as u8))
    }

    /// Copies host bytes to device memory (synchronous).
    pub fn copy_to_device(&self, address: u64, bytes: &[u8]) -> RuntimeResult<()> {
        self.make_current()?;
        // SAFETY: reads `bytes.len()` bytes from a live slice; the caller names device memory
        // of at least that size (the driver checks the range and fails otherwise).
        check(
            unsafe { sys::cuMemcpyHtoD_v2(address, bytes.as_ptr().cast(), bytes.len()) },
            "cuMemcpyHtoD_v2",
            || format!("copying {} bytes to {address:#x}", bytes.len()),
        )
    }

    /// Copies device memory to host bytes (synchronous).
    pub fn copy_from_device(&self, address: u64, bytes: &mut [u8]) -> RuntimeResult<()> {
        self.make_current()?;
        // SAFETY: writes `bytes.len()` bytes into a live exclusive slice.
        check(
            unsafe { sys::cuMemcpyDtoH_v2(bytes.as_mut_ptr().cast(), address, bytes.len()) },
            "cuMemcpyDtoH_v2",
            || format!("copying {} bytes from {address:#x}", bytes.len()),
        )
    }

    /// Copies between two device addresses (synchronous; peer-mapped addresses included).
    pub fn copy_device_to_device(
        &self,
        destination: u64,
        source: u64,
        length_bytes: usize,
    ) -> RuntimeResult<()> {
        self.make_current()?;
        // SAFETY: device addresses only; the driver checks them.
        check(
            unsafe { sys::cuMemcpyDtoD_v2(destination, source, length_bytes) },
            "cuMemcpyDtoD_v2",
            || format!("copying {length_bytes} bytes from {source:#x} to {destination:#x}"),
        )
    }

    /// Sets `length_bytes` bytes of device memory to `value` (synchronous).
    pub fn fill(&self, address: u64, value: u8, length_bytes: usize) -> RuntimeResult<()> {
        self.make_current()?;
        // SAFETY: device address only; the driver checks it.
        check(
            unsafe { sys::cuMemsetD8_v2(address, value, length_bytes) },
            "cuMemsetD8_v2",
            || format!("filling {length_bytes} bytes at {address:#x}"),
        )?;
        self.synchronize()
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: balances the retain in `open`.
        let result = unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.device) };
        if result != sys::CUresult::CUDA_SUCCESS {
            tracing::warn!(?result, "releasing the primary context failed");
        }
    }
}

/// A device allocation (`cuMemAlloc`), freed on drop.
#[derive(Debug)]
pub struct DeviceMemory {
    device: Arc<Device>,
    address: u64,
    length_bytes: usize,
}

impl DeviceMemory {
    /// Allocates `length_bytes` bytes on `device` (not initialized).
    pub fn allocate(device: &Arc<Device>, length_bytes: usize) -> RuntimeResult<Self> {
        device.make_current()?;
        let mut address = 0;
        // SAFETY: writes one device pointer; freed in Drop.
        check(
            unsafe { sys::cuMemAlloc_v2(&mut address, length_bytes.max(1)) },
            "cuMemAlloc_v2",
            || format!("allocating {length_bytes} bytes of device memory"),
        )?;
        Ok(Self {
            device: device.clone(),
            address,
            length_bytes,
        })
    }

    /// Allocates and fills with `bytes`.
    pub fn from_bytes(device: &Arc<Device>, bytes: &[u8]) -> RuntimeResult<Self> {
        let memory = Self::allocate(device, bytes.len())?;
        if !bytes.is_empty() {
            device.copy_to_device(memory.address, bytes)?;
        }
        Ok(memory)
    }

    /// The device address.
    pub fn address(&self) -> u64 {
        self.address
    }

    /// Bytes.
    pub fn length_bytes(&self) -> usize {
        self.length_bytes
    }

    /// Reads the whole allocation back.
    pub fn to_bytes(&self) -> RuntimeResult<Vec<u8>> {
        let mut bytes = vec![0; self.length_bytes];
        self.device.copy_from_device(self.address, &mut bytes)?;
        Ok(bytes)
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        let _ = self.device.make_current();
        // SAFETY: allocated by cuMemAlloc in `allocate`, freed once.
        let result = unsafe { sys::cuMemFree_v2(self.address) };
        if result != sys::CUresult::CUDA_SUCCESS {
            tracing::warn!(?result, address = self.address, "cuMemFree failed");
        }
    }
}

/// Page-locked host memory mapped into the device's address space (`cuMemHostAlloc` with
/// DEVICEMAP and PORTABLE), zeroed, freed on drop. The host writes through
/// [`Self::host_pointer`], kernels through [`Self::device_address`].
#[derive(Debug)]
pub struct PinnedHostMemory {
    device: Arc<Device>,
    host_pointer: *mut u8,
    device_address: u64,
    length_bytes: usize,
}

// SAFETY: the allocation is plain host memory owned by this value until drop; sharing the
// pointer across threads is the point (the proxy thread and GPUs access it atomically).
unsafe impl Send for PinnedHostMemory {}
// SAFETY: as above; `&self` gives out only the raw pointer and addresses.
unsafe impl Sync for PinnedHostMemory {}

impl PinnedHostMemory {
    /// Allocates `length_bytes` bytes (page-aligned), zeroed.
    pub fn allocate(device: &Arc<Device>, length_bytes: usize) -> RuntimeResult<Self> {
        device.make_current()?;
        let mut host: *mut c_void = std::ptr::null_mut();
        // SAFETY: writes one host pointer; freed with cuMemFreeHost in Drop.
        check(
            unsafe {
                sys::cuMemHostAlloc(
                    &mut host,
                    length_bytes.max(1),
                    sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE,
                )
            },
            "cuMemHostAlloc",
            || format!("allocating {length_bytes} bytes of pinned host memory"),
        )?;
        let host_pointer = host.cast::<u8>();
        // SAFETY: the allocation has `length_bytes` bytes and nobody else knows it yet.
        unsafe { std::ptr::write_bytes(host_pointer, 0, length_bytes) };
        let mut memory = Self {
            device: device.clone(),
            host_pointer,
            device_address: 0,
            length_bytes,
        };
        let mut device_address = 0;
        // SAFETY: the pointer is a DEVICEMAP allocation; writes one device pointer.
        check(
            unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device_address, host, 0) },
            "cuMemHostGetDevicePointer_v2",
            || "mapping pinned host memory for the GPU".to_owned(),
        )?;
        memory.device_address = device_address;
        Ok(memory)
    }

    /// The host address.
    pub fn host_pointer(&self) -> *mut u8 {
        self.host_pointer
    }

    /// The address kernels use.
    pub fn device_address(&self) -> u64 {
        self.device_address
    }

    /// Bytes.
    pub fn length_bytes(&self) -> usize {
        self.length_bytes
    }
}

impl Drop for PinnedHostMemory {
    fn drop(&mut self) {
        let _ = self.device.make_current();
        // SAFETY: allocated by cuMemHostAlloc in `allocate`, freed once; users are gone (the
        // owners of views into it drop them first).
        let result = unsafe { sys::cuMemFreeHost(self.host_pointer.cast()) };
        if result != sys::CUresult::CUDA_SUCCESS {
            tracing::warn!(?result, "cuMemFreeHost failed");
        }
    }
}

/// A peer process's allocation mapped into this process (`cuIpcOpenMemHandle` with lazy peer
/// access), unmapped on drop.
#[derive(Debug)]
pub struct IpcMapping {
    device: Arc<Device>,
    address: u64,
}

impl IpcMapping {
    /// Maps the allocation `handle` exports. Opening a handle this context already opened
    /// returns the same address (the driver counts references).
    pub fn open(device: &Arc<Device>, handle: &[u8; IPC_HANDLE_BYTES]) -> RuntimeResult<Self> {
        device.make_current()?;
        let handle = sys::CUipcMemHandle_st {
            reserved: handle.map(|byte| byte as std::ffi::c_char),
        };
        let mut address = 0;
        // SAFETY: writes one device pointer; closed in Drop.
        check(
            unsafe {
                sys::cuIpcOpenMemHandle_v2(
                    &mut address,
                    handle,
                    sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32,
                )
            },
            "cuIpcOpenMemHandle_v2",
            || {
                "mapping a peer's allocation (is the peer on this host, in another process, and is its GPU reachable?)".to_owned()
            },
        )?;
        Ok(Self {
            device: device.clone(),
            address,
        })
    }

    /// The mapped base in this process.
    pub fn address(&self) -> u64 {
        self.address
    }
}

impl Drop for IpcMapping {
    fn drop(&mut self) {
        let _ = self.device.make_current();
        // SAFETY: opened by cuIpcOpenMemHandle in `open`, closed once.
        let result = unsafe { sys::cuIpcCloseMemHandle(self.address) };
        if result != sys::CUresult::CUDA_SUCCESS {
            tracing::warn!(
                ?result,
                address = self.address,
                "cuIpcCloseMemHandle failed"
            );
        }
    }
}

/// A non-blocking stream (it does not synchronize with the legacy default stream).
#[derive(Debug)]
pub struct Stream {
    device: Arc<Device>,
    stream: sys::CUstream,
}

// SAFETY: a stream handle may be used from any thread with its context current (every method
// makes it current first).
unsafe impl Send for Stream {}

impl Stream {
    /// Creates a stream on `device`.
    pub fn create(device: &Arc<Device>) -> RuntimeResult<Self> {
        device.make_current()?;
        let mut stream = std::ptr::null_mut();
        // SAFETY: writes one stream handle; destroyed in Drop.
        check(
            unsafe {
                sys::cuStreamCreate(
                    &mut stream,
                    sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
                )
            },
            "cuStreamCreate",
            || "creating a stream".to_owned(),
        )?;
        Ok(Self {
            device: device.clone(),
            stream,
        })
    }

    /// The device.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// Enqueues a copy of `length_bytes` bytes. `cuMemcpyAsync` infers the direction from the
    /// unified address space, so it also serves mapped host memory and peer memory.
    pub fn copy_async(
        &self,
        destination: u64,
        source: u64,
        length_bytes: u64,
    ) -> RuntimeResult<()> {
        self.device.make_current()?;
        self.copy_async_in_current_context(destination, source, length_bytes)
    }

    /// [`Self::copy_async`] on a thread where the device's context is already current (the
    /// proxy thread's: it saves a `cuCtxSetCurrent` per command); elsewhere the driver refuses
    /// it.
    pub fn copy_async_in_current_context(
        &self,
        destination: u64,
        source: u64,
        length_bytes: u64,
    ) -> RuntimeResult<()> {
        // SAFETY: addresses only; the driver checks them when it enqueues.
        check(
            unsafe { sys::cuMemcpyAsync(destination, source, length_bytes as usize, self.stream) },
            "cuMemcpyAsync",
            || format!("copying {length_bytes} bytes from {source:#x} to {destination:#x}"),
        )
    }

    /// Enqueues a store of `value` to the 8-byte word at `address`, after everything enqueued
    /// before it, preceded by a system-wide memory fence (the default flags: the driver's
    /// "similar semantics to __threadfence_system() but scoped to the stream").
    pub fn write_value_64(&self, address: u64, value: u64) -> RuntimeResult<()> {
        self.device.make_current()?;
        self.write_value_64_in_current_context(address, value)
    }

    /// [`Self::write_value_64`] where the context is already current (as
    /// [`Self::copy_async_in_current_context`]).
    pub fn write_value_64_in_current_context(&self, address: u64, value: u64) -> RuntimeResult<()> {
        // SAFETY: address only; the driver checks it when it enqueues.
        check(
            unsafe {
                sys::cuStreamWriteValue64_v2(
                    self.stream,
                    address,
                    value,
                    sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32,
                )
            },
            "cuStreamWriteValue64_v2",
            || format!("writing signal value {value} to {address:#x}"),
        )
    }

    /// Waits until everything enqueued has completed.
    pub fn synchronize(&self) -> RuntimeResult<()> {
        self.device.make_current()?;
        self.synchronize_in_current_context()
    }

    /// [`Self::synchronize`] where the context is already current (as
    /// [`Self::copy_async_in_current_context`]).
    pub fn synchronize_in_current_context(&self) -> RuntimeResult<()> {
        // SAFETY: the stream lives while `self` does.
        check(
            unsafe { sys::cuStreamSynchronize(self.stream) },
            "cuStreamSynchronize",
            || "waiting for the copy stream".to_owned(),
        )
    }

    fn handle(&self) -> sys::CUstream {
        self.stream
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let _ = self.device.make_current();
        // SAFETY: created in `create`, destroyed once.
        let result = unsafe { sys::cuStreamDestroy_v2(self.stream) };
        if result != sys::CUresult::CUDA_SUCCESS {
            tracing::warn!(?result, "cuStreamDestroy failed");
        }
    }
}

/// The PTX of the runtime's kernels (see the file's comments).
pub const RUNTIME_KERNELS_PTX: &str = include_str!("kernels/runtime_kernels.ptx");

/// The runtime's kernels, compiled by the driver from [`RUNTIME_KERNELS_PTX`].
#[derive(Debug)]
pub struct RuntimeKernels {
    device: Arc<Device>,
    module: sys::CUmodule,
    signal_add: sys::CUfunction,
    signal_set: sys::CUfunction,
    bounded_wait: sys::CUfunction,
    compare_and_swap: sys::CUfunction,
}

// SAFETY: module and function handles may be used from any thread with the context current.
unsafe impl Send for RuntimeKernels {}
// SAFETY: launching takes `&self` and only reads the handles.
unsafe impl Sync for RuntimeKernels {}

impl RuntimeKernels {
    /// Loads the module (the driver JIT-compiles the PTX for this GPU).
    pub fn load(device: &Arc<Device>) -> RuntimeResult<Self> {
        device.make_current()?;
        let source = CString::new(RUNTIME_KERNELS_PTX).expect("the PTX has no NUL");
        let mut module = std::ptr::null_mut();
        // SAFETY: reads a NUL-terminated PTX image; unloaded in Drop.
        check(
            unsafe { sys::cuModuleLoadData(&mut module, source.as_ptr().cast()) },
            "cuModuleLoadData",
            || "compiling the runtime's PTX kernels".to_owned(),
        )?;
        let function = |name: &CStr| -> RuntimeResult<sys::CUfunction> {
            let mut function = std::ptr::null_mut();
            // SAFETY: the module is loaded; writes one function handle.
            check(
                unsafe { sys::cuModuleGetFunction(&mut function, module, name.as_ptr()) },
                "cuModuleGetFunction",
                || format!("finding kernel {name:?}"),
            )?;
            Ok(function)
        };
        let functions = (|| {
            Ok((
                function(c"aboleth_signal_add_u64")?,
                function(c"aboleth_signal_set_u64")?,
                function(c"aboleth_bounded_wait_u64")?,
                function(c"aboleth_compare_and_swap_u64")?,
            ))
        })();
        let (signal_add, signal_set, bounded_wait, compare_and_swap) = match functions {
            Ok(functions) => functions,
            Err(error) => {
                // SAFETY: loaded above, unloaded once.
                unsafe { sys::cuModuleUnload(module) };
                return Err(error);
            }
        };
        Ok(Self {
            device: device.clone(),
            module,
            signal_add,
            signal_set,
            bounded_wait,
            compare_and_swap,
        })
    }

    /// Launches `parameters` (pointers to each argument) on one thread.
    fn launch_one_thread(
        &self,
        function: sys::CUfunction,
        stream: &Stream,
        parameters: &mut [*mut c_void],
        name: &'static str,
    ) -> RuntimeResult<()> {
        self.device.make_current()?;
        // SAFETY: `parameters` points to one live value per kernel parameter, of the kernel's
        // types (the callers below match the PTX signatures); grid and block of one thread.
        check(
            unsafe {
                sys::cuLaunchKernel(
                    function,
                    1,
                    1,
                    1,
                    1,
                    1,
                    1,
                    0,
                    stream.handle(),
                    parameters.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            },
            "cuLaunchKernel",
            || format!("launching {name}"),
        )
    }

    /// Enqueues an atomic add of `value` to the 8-byte word at `address`, after everything
    /// enqueued on `stream` before it (see the kernel's ordering comment).
    pub fn signal_add(&self, stream: &Stream, address: u64, value: u64) -> RuntimeResult<()> {
        let mut address = address;
        let mut value = value;
        let mut parameters = [
            (&mut address as *mut u64).cast::<c_void>(),
            (&mut value as *mut u64).cast::<c_void>(),
        ];
        self.launch_one_thread(
            self.signal_add,
            stream,
            &mut parameters,
            "aboleth_signal_add_u64",
        )
    }

    /// Enqueues a store of `value` to the 8-byte word at `address`, ordered like
    /// [`Self::signal_add`] (for devices without 64-bit stream memory operations).
    pub fn signal_set(&self, stream: &Stream, address: u64, value: u64) -> RuntimeResult<()> {
        let mut address = address;
        let mut value = value;
        let mut parameters = [
            (&mut address as *mut u64).cast::<c_void>(),
            (&mut value as *mut u64).cast::<c_void>(),
        ];
        self.launch_one_thread(
            self.signal_set,
            stream,
            &mut parameters,
            "aboleth_signal_set_u64",
        )
    }

    /// Enqueues a system-scope compare-and-swap of the 8-byte word at `address` (`desired` if it
    /// equals `expected`) that stores the word it found to `result_address`, after everything
    /// enqueued on `stream` before it (the software NIC's atomics).
    pub fn compare_and_swap(
        &self,
        stream: &Stream,
        address: u64,
        (expected, desired): (u64, u64),
        result_address: u64,
    ) -> RuntimeResult<()> {
        let mut arguments = [address, expected, desired, result_address];
        let [address, expected, desired, result] = &mut arguments;
        let mut parameters = [
            (address as *mut u64).cast::<c_void>(),
            (expected as *mut u64).cast(),
            (desired as *mut u64).cast(),
            (result as *mut u64).cast(),
        ];
        self.launch_one_thread(
            self.compare_and_swap,
            stream,
            &mut parameters,
            "aboleth_compare_and_swap_u64",
        )
    }

    /// Enqueues the reference bounded wait (one thread): waits until the word at
    /// `flag_address` is >= `expected_value`, or records a failure in the wait-failure log at
    /// `log_address` after `timeout_nanoseconds`.
    #[expect(
        clippy::too_many_arguments,
        reason = "one argument per kernel parameter"
    )]
    pub fn bounded_wait(
        &self,
        stream: &Stream,
        flag_address: u64,
        expected_value: u64,
        timeout_nanoseconds: u64,
        log_address: u64,
        rank: u32,
        peer_rank: u32,
        site_id: u32,
    ) -> RuntimeResult<()> {
        let mut arguments_64 = [
            flag_address,
            expected_value,
            timeout_nanoseconds,
            log_address,
        ];
        let mut arguments_32 = [rank, peer_rank, site_id];
        let [flag, expected, timeout, log] = &mut arguments_64;
        let [rank, peer, site] = &mut arguments_32;
        let mut parameters = [
            (flag as *mut u64).cast::<c_void>(),
            (expected as *mut u64).cast(),
            (timeout as *mut u64).cast(),
            (log as *mut u64).cast(),
            (rank as *mut u32).cast(),
            (peer as *mut u32).cast(),
            (site as *mut u32).cast(),
        ];
        self.launch_one_thread(
            self.bounded_wait,
            stream,
            &mut parameters,
            "aboleth_bounded_wait_u64",
        )
    }
}

impl Drop for RuntimeKernels {
    fn drop(&mut self) {
        let _ = self.device.make_current();
        // SAFETY: loaded in `load`, unloaded once.
        let result = unsafe { sys::cuModuleUnload(self.module) };
        if result != sys::CUresult::CUDA_SUCCESS {
            tracing::warn!(?result, "cuModuleUnload failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_driver_is_an_error_not_a_panic() {
        if driver_library_present() {
            // A machine with a driver: nothing to check here (the GPU check covers it).
            return;
        }
        let error = initialize().unwrap_err();
        let message = error.to_string();
        assert!(
            message.starts_with("the CUDA driver library was not found (tried libcuda.so"),
            "{message}"
        );
        assert!(message.contains("libcuda.so.1"), "{message}");
        assert!(matches!(
            Device::open(0),
            Err(RuntimeError::CudaDriverNotFound { .. })
        ));
    }

    #[test]
    fn the_kernels_are_embedded_with_their_entry_points() {
        assert!(RUNTIME_KERNELS_PTX.contains(".entry aboleth_signal_add_u64("));
        assert!(RUNTIME_KERNELS_PTX.contains(".entry aboleth_signal_set_u64("));
        assert!(RUNTIME_KERNELS_PTX.contains(".entry aboleth_bounded_wait_u64("));
        assert!(RUNTIME_KERNELS_PTX.contains(".entry aboleth_compare_and_swap_u64("));
        assert!(!RUNTIME_KERNELS_PTX.contains('\0'));
    }
}
