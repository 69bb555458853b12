//! The software NIC and its memory: [`MappedNicMemory`], the `aboleth-nic` model's
//! [`NicMemory`] over the memory of this process — host memory it dereferences (the host-pinned
//! send rings, doorbell records, CQs and UAR words the GPU writes) and GPU memory it reaches
//! through a [`DeviceAccess`] (the rank's own registered buffers, and its peers' mapped through
//! CUDA IPC: copies on a stream of the copy engine, atomics through a one-thread kernel). Each
//! [`MappedRegion`] says which rank's address range it is (the addresses WQEs carry), where it
//! lives in this process ([`RegionBacking`]), and the lkey and rkey registered on it.
//!
//! Atomics are real. On host memory an 8-byte atomic of a WQE is a sequentially consistent
//! `fetch_update` on the word through [`AtomicU64`], so it is atomic against the GPU's and other
//! threads' atomics on host-pinned memory (PCIe atomics from the GPU to pinned memory are
//! system-scope on Hopper). On GPU memory it is a compare-and-swap loop through
//! [`DeviceAccess::compare_and_swap_u64`] (a system-scope `atom.cas` on the GPU), so a kernel's
//! concurrent atomics on the word are never lost. Host reads and writes are byte copies, except
//! that an aligned 4- or 8-byte read is one atomic load (acquire), and an aligned write of whole
//! words ends with a release store of its last word, so that doorbell records, UAR values and
//! consumer indices written by another agent are never read torn, and a consumer acquiring a
//! CQE's last word (its owner byte) sees the whole CQE. A producer writes the doorbell record as
//! one 8-byte store (not its 4-byte send word alone). Every [`DeviceAccess`] operation has
//! completed when it returns, so the WQE order is the order of effects, and a CQE written after
//! them (host memory) is seen only after the data. Host regions must map aligned addresses to
//! aligned host addresses (`add_region` refuses others). Regions of one rank may overlap (two
//! registered regions of one buffer) only where they translate alike.
//!
//! A write of whole words to GPU memory also lands its last word last (two copies).
//!
//! [`SoftNic`] is the NIC over that memory: each QP has a UAR word in mapped memory that the
//! producer (a GPU thread, or a host thread for the staged path) stores its doorbell to; a poll
//! ([`SoftNic::poll`]) turns every UAR word that changed into a doorbell of the `aboleth-nic`
//! model (on the staged path, [`DoorbellSource::HostRings`], a changed doorbell record: the
//! thread then plays the host thread that rings), then runs each QP with work, in turn, until none has. [`SoftNicThread`] polls on a
//! thread of its own until stopped, publishing [`SoftNicStatistics`] in atomics. Two doorbells
//! stored between two polls are seen as one (the later names the higher producer index and the
//! doorbell record is what the model executes up to), so `doorbells_observed` counts at most the
//! doorbells rung. It runs Ionic queue pairs too (`aboleth_nic::ionic::IonicDevice`, in order
//! per queue pair): each has an 8-byte doorbell word (its slot of the doorbell page) whose
//! change is a doorbell of the value stored (queue id and producer position); CQEs land in the
//! queue's CQ with the lap's color, written last word last as every host write here.
//!
//! What it does not do: allocate queues or choose keys (`transport::soft_rdma` does), or talk to
//! CUDA itself (the runtime's `DeviceAccess` over `cuda.rs` does).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::thread::JoinHandle;

use aboleth_abi::mlx5::{DecodedUarDoorbell, DoorbellRecord, UarDoorbell};
use aboleth_nic::ionic::{IonicDevice, IonicError, IonicQueuePairConfig};
use aboleth_nic::{Nic, NicError, NicMemory, NicMemoryError, QueuePairConfig, WqeOutcome};

/// Where a region's first byte is in this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionBacking {
    /// Host memory this process dereferences (host-pinned queues, staged buffers).
    Host {
        /// The first byte.
        pointer: *mut u8,
    },
    /// GPU memory at this device address of this process (the rank's own allocation, or a
    /// peer's mapped through CUDA IPC), reached through the memory's [`DeviceAccess`].
    Device {
        /// The first byte's device address here.
        address: u64,
    },
}

impl RegionBacking {
    /// Where byte `offset` of the region is, in this process's terms.
    fn at(self, offset: u64) -> u64 {
        match self {
            RegionBacking::Host { pointer } => pointer as u64 + offset,
            RegionBacking::Device { address } => address + offset,
        }
    }
}

/// GPU memory of this process, for a [`MappedNicMemory`]: every operation has completed (its
/// effects visible to the GPU and the host) when it returns. Errors are the driver's, in words.
pub trait DeviceAccess: Send + std::fmt::Debug {
    /// Reads `bytes.len()` bytes at `address`.
    fn read(&self, address: u64, bytes: &mut [u8]) -> Result<(), String>;
    /// Writes `bytes` at `address`.
    fn write(&self, address: u64, bytes: &[u8]) -> Result<(), String>;
    /// Copies `length` bytes from `source` to `destination` (both device addresses here).
    fn copy(&self, destination: u64, source: u64, length: u64) -> Result<(), String>;
    /// Atomically replaces the 8-byte word at `address` (aligned) by `desired` if it equals
    /// `expected`; returns the word it found.
    fn compare_and_swap_u64(
        &self,
        address: u64,
        expected: u64,
        desired: u64,
    ) -> Result<u64, String>;
}

/// One range of some rank's addresses that this process can reach.
#[derive(Clone, Debug)]
pub struct MappedRegion {
    /// The rank whose address space the range belongs to.
    pub rank: u32,
    /// First address, as that rank's WQEs name it.
    pub address: u64,
    /// Bytes.
    pub length_bytes: u64,
    /// Where the first byte is in this process.
    pub backing: RegionBacking,
    /// The local key registered on the range, if any (gather lists and atomic results).
    pub lkey: Option<u32>,
    /// The remote key registered on the range, if any (targets of writes, reads and atomics).
    pub rkey: Option<u32>,
    /// What the range is, for error messages ("send ring", "destination", ...).
    pub name: String,
}

/// The memory a software NIC works on: every mapped region, looked up by (rank, address), and
/// the access to GPU memory that device-backed regions go through.
#[derive(Debug, Default)]
pub struct MappedNicMemory {
    regions: Vec<MappedRegion>,
    device: Option<Box<dyn DeviceAccess>>,
}

// SAFETY: the regions' pointers are only dereferenced through `&self`/`&mut self` methods, and
// `add_region`'s contract makes the memory valid for the whole life of this value.
unsafe impl Send for MappedNicMemory {}

impl MappedNicMemory {
    /// No regions, no GPU memory.
    pub fn new() -> Self {
        Self::default()
    }

    /// No regions yet; device-backed regions go through `device`.
    pub fn with_device(device: Box<dyn DeviceAccess>) -> Self {
        Self {
            regions: Vec::new(),
            device: Some(device),
        }
    }

    /// Adds a region. Overlapping ranges of one rank are refused.
    ///
    /// # Safety
    /// `region.pointer` must be valid for reads and writes of `region.length_bytes` bytes, and
    /// 8-byte aligned wherever an atomic may target, for as long as this memory is used; other
    /// agents may write it concurrently only with atomics or where the protocol orders them.
    pub unsafe fn add_region(&mut self, region: MappedRegion) -> Result<(), NicMemoryError> {
        let end = region.address.checked_add(region.length_bytes);
        // Two registrations of one buffer overlap; they must then reach the same bytes.
        let translates_alike = |other: &MappedRegion| match (other.backing, region.backing) {
            (RegionBacking::Host { .. }, RegionBacking::Host { .. })
            | (RegionBacking::Device { .. }, RegionBacking::Device { .. }) => {
                other.backing.at(0).wrapping_sub(other.address)
                    == region.backing.at(0).wrapping_sub(region.address)
            }
            _ => false,
        };
        let conflicting = self.regions.iter().find(|other| {
            other.rank == region.rank
                && region.address < other.address + other.length_bytes
                && other.address < end.unwrap_or(u64::MAX)
                && !translates_alike(other)
        });
        if end.is_none() || region.length_bytes == 0 {
            return Err(NicMemoryError {
                message: format!(
                    "rank {}: region {} ({} B at {:#x}) is empty or wraps",
                    region.rank, region.name, region.length_bytes, region.address
                ),
            });
        }
        if let Some(other) = conflicting {
            return Err(NicMemoryError {
                message: format!(
                    "rank {}: region {} ({} B at {:#x}) overlaps {} ({} B at {:#x}) but maps to other memory",
                    region.rank,
                    region.name,
                    region.length_bytes,
                    region.address,
                    other.name,
                    other.length_bytes,
                    other.address
                ),
            });
        }
        match region.backing {
            // An aligned address must map to an aligned host address, or the words that must be
            // accessed whole (doorbell records, UAR values, CQE words, atomics' targets) could
            // not be.
            RegionBacking::Host { pointer } if (pointer as u64) % 8 != region.address % 8 => {
                return Err(NicMemoryError {
                    message: format!(
                        "rank {}: region {} at {:#x} is mapped at host address {pointer:p}, not 8-byte congruent",
                        region.rank, region.name, region.address
                    ),
                });
            }
            // The same for GPU memory: the compare-and-swap kernel needs aligned words.
            RegionBacking::Device { address } if address % 8 != region.address % 8 => {
                return Err(NicMemoryError {
                    message: format!(
                        "rank {}: region {} at {:#x} is mapped at device address {address:#x}, not 8-byte congruent",
                        region.rank, region.name, region.address
                    ),
                });
            }
            RegionBacking::Device { .. } if self.device.is_none() => {
                return Err(NicMemoryError {
                    message: format!(
                        "rank {}: region {} at {:#x} is GPU memory, and this memory has no device access (make it with MappedNicMemory::with_device)",
                        region.rank, region.name, region.address
                    ),
                });
            }
            _ => {}
        }
        self.regions.push(region);
        Ok(())
    }

    /// The device access of a device-backed region (present: `add_region` checked it).
    fn device(&self) -> &dyn DeviceAccess {
        self.device
            .as_deref()
            .expect("device regions need a device access")
    }

    /// A driver error on a device region, naming the rank, the access and the region.
    fn device_error(
        rank: u32,
        region: &MappedRegion,
        what: &str,
        address: u64,
    ) -> impl Fn(String) -> NicMemoryError {
        let name = region.name.clone();
        move |error| NicMemoryError {
            message: format!(
                "rank {rank}: {what} at {address:#x} of {name} (GPU memory) failed: {error}"
            ),
        }
    }

    fn locate(
        &self,
        rank: u32,
        address: u64,
        length: u64,
    ) -> Result<(&MappedRegion, usize), NicMemoryError> {
        self.regions
            .iter()
            .find(|region| {
                region.rank == rank
                    && address >= region.address
                    && address.checked_add(length).is_some_and(|end| end <= region.address + region.length_bytes)
            })
            .map(|region| (region, (address - region.address) as usize))
            .ok_or_else(|| NicMemoryError {
                message: format!(
                    "rank {rank}: access of {length} B at {address:#x} is in no mapped region (mapped: {})",
                    self.describe_rank(rank)
                ),
            })
    }

    fn describe_rank(&self, rank: u32) -> String {
        let names: Vec<String> = self
            .regions
            .iter()
            .filter(|region| region.rank == rank)
            .map(|region| {
                format!(
                    "{} [{:#x}, +{})",
                    region.name, region.address, region.length_bytes
                )
            })
            .collect();
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    }

    fn check_key(
        &self,
        rank: u32,
        key: u32,
        remote: bool,
        address: u64,
        length: u64,
    ) -> Result<(), NicMemoryError> {
        let kind = if remote { "rkey" } else { "lkey" };
        let registered = |region: &MappedRegion| if remote { region.rkey } else { region.lkey };
        let Some(region) = self
            .regions
            .iter()
            .find(|region| region.rank == rank && registered(region) == Some(key))
        else {
            return Err(NicMemoryError {
                message: format!(
                    "rank {rank}: {kind} {key:#x} is not a registered {kind} of this rank"
                ),
            });
        };
        if address < region.address
            || address
                .checked_add(length)
                .is_none_or(|end| end > region.address + region.length_bytes)
        {
            return Err(NicMemoryError {
                message: format!(
                    "rank {rank}: {kind} {key:#x} covers {} [{:#x}, +{}) but the access is {length} B at {address:#x}",
                    region.name, region.address, region.length_bytes
                ),
            });
        }
        Ok(())
    }
}

impl NicMemory for MappedNicMemory {
    fn read(&self, rank: u32, address: u64, length: u64) -> Result<Vec<u8>, NicMemoryError> {
        let (region, offset) = self.locate(rank, address, length)?;
        let pointer = match region.backing {
            // SAFETY: `locate` keeps the range inside the region, valid by `add_region`'s
            // contract.
            RegionBacking::Host { pointer } => unsafe { pointer.add(offset) },
            RegionBacking::Device { .. } => {
                let mut bytes = vec![0; length as usize];
                self.device()
                    .read(region.backing.at(offset as u64), &mut bytes)
                    .map_err(Self::device_error(rank, region, "a read", address))?;
                return Ok(bytes);
            }
        };
        // An aligned word (a doorbell record, a UAR value, a CQE word) is read in one atomic load,
        // so a concurrent store by the GPU or a host producer is never seen torn.
        if length == 8 && (pointer as usize).is_multiple_of(8) {
            // SAFETY: aligned and valid; racing agents store it whole.
            let word = unsafe { AtomicU64::from_ptr(pointer.cast::<u64>()) };
            return Ok(word.load(Ordering::Acquire).to_ne_bytes().to_vec());
        }
        // The same for a 4-byte word (the receive doorbell word, a CQ consumer index).
        if length == 4 && (pointer as usize).is_multiple_of(4) {
            // SAFETY: aligned and valid; racing agents store it whole.
            let word = unsafe { AtomicU32::from_ptr(pointer.cast::<u32>()) };
            return Ok(word.load(Ordering::Acquire).to_ne_bytes().to_vec());
        }
        let mut bytes = vec![0; length as usize];
        // SAFETY: as above.
        unsafe { std::ptr::copy_nonoverlapping(pointer, bytes.as_mut_ptr(), bytes.len()) };
        Ok(bytes)
    }

    fn check_mapped(&self, rank: u32, address: u64, length: u64) -> Result<(), NicMemoryError> {
        self.locate(rank, address, length).map(|_| ())
    }

    fn write(&mut self, rank: u32, address: u64, bytes: &[u8]) -> Result<(), NicMemoryError> {
        let (region, offset) = self.locate(rank, address, bytes.len() as u64)?;
        let pointer = match region.backing {
            // SAFETY: as in `read`.
            RegionBacking::Host { pointer } => unsafe { pointer.add(offset) },
            RegionBacking::Device { .. } => {
                // As on host memory, a write of whole words lands its last word last (a second
                // copy, after the first has completed): a GPU polling a CQE's owner byte, its
                // last, then sees the whole CQE.
                let target = region.backing.at(offset as u64);
                let failed = Self::device_error(rank, region, "a write", address);
                let device = self.device();
                if bytes.len() > 8 && bytes.len().is_multiple_of(8) {
                    let (head, last) = bytes.split_at(bytes.len() - 8);
                    device.write(target, head).map_err(&failed)?;
                    return device
                        .write(target + head.len() as u64, last)
                        .map_err(&failed);
                }
                return device.write(target, bytes).map_err(failed);
            }
        };
        // An aligned write of whole words ends with a release store of its last word: a CQE's
        // owner and opcode byte is its last, so a consumer that acquires that word sees the
        // whole CQE (and whatever the NIC wrote before it); a single word is stored whole.
        if bytes.len() >= 8 && bytes.len().is_multiple_of(8) && (pointer as usize).is_multiple_of(8)
        {
            let (head, last) = bytes.split_at(bytes.len() - 8);
            // SAFETY: in range; the head is not read by others before the last word is released.
            unsafe { std::ptr::copy_nonoverlapping(head.as_ptr(), pointer, head.len()) };
            // SAFETY: aligned and valid.
            let target = unsafe { AtomicU64::from_ptr(pointer.add(head.len()).cast::<u64>()) };
            let word: [u8; 8] = last.try_into().expect("8 bytes");
            target.store(u64::from_ne_bytes(word), Ordering::Release);
            return Ok(());
        }
        // SAFETY: as above.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), pointer, bytes.len()) };
        Ok(())
    }

    fn copy(
        &mut self,
        (source_rank, source_address): (u32, u64),
        (destination_rank, destination_address): (u32, u64),
        length: u64,
    ) -> Result<(), NicMemoryError> {
        let (source, source_offset) = self.locate(source_rank, source_address, length)?;
        let (destination, destination_offset) =
            self.locate(destination_rank, destination_address, length)?;
        if let (RegionBacking::Device { .. }, RegionBacking::Device { .. }) =
            (source.backing, destination.backing)
        {
            // GPU to GPU (the rank's buffer to a peer's IPC mapping): one copy-engine copy.
            return self
                .device()
                .copy(
                    destination.backing.at(destination_offset as u64),
                    source.backing.at(source_offset as u64),
                    length,
                )
                .map_err(Self::device_error(
                    destination_rank,
                    destination,
                    &format!("a {length} B copy from rank {source_rank}'s {source_address:#x}"),
                    destination_address,
                ));
        }
        let bytes = self.read(source_rank, source_address, length)?;
        self.write(destination_rank, destination_address, &bytes)
    }

    fn check_local_key(
        &self,
        rank: u32,
        lkey: u32,
        address: u64,
        length: u64,
    ) -> Result<(), NicMemoryError> {
        self.check_key(rank, lkey, false, address, length)
    }

    fn check_remote_key(
        &self,
        rank: u32,
        rkey: u32,
        address: u64,
        length: u64,
    ) -> Result<(), NicMemoryError> {
        self.check_key(rank, rkey, true, address, length)
    }

    fn atomic_update_u64(
        &mut self,
        rank: u32,
        address: u64,
        update: &dyn Fn(u64) -> u64,
    ) -> Result<u64, NicMemoryError> {
        let (region, offset) = self.locate(rank, address, 8)?;
        let pointer = match region.backing {
            // SAFETY: in range as above; WQE targets are 8-byte aligned (the model checks it), so
            // the word is aligned when the region's pointer is, which `add_region` requires.
            RegionBacking::Host { pointer } => unsafe { pointer.add(offset) },
            RegionBacking::Device { .. } => {
                // A compare-and-swap loop: the GPU's atomics on the word between the read and
                // the swap make the swap fail and the loop retry with what they left.
                let device = self.device();
                let target = region.backing.at(offset as u64);
                let failed = Self::device_error(rank, region, "an atomic", address);
                let mut expected = device.compare_and_swap_u64(target, 0, 0).map_err(&failed)?;
                loop {
                    let found = device
                        .compare_and_swap_u64(target, expected, update(expected))
                        .map_err(&failed)?;
                    if found == expected {
                        return Ok(expected);
                    }
                    expected = found;
                }
            }
        };
        if !(pointer as usize).is_multiple_of(8) {
            return Err(NicMemoryError {
                message: format!(
                    "rank {rank}: atomic at {address:#x} maps to an unaligned host address"
                ),
            });
        }
        // SAFETY: aligned, valid, and only accessed atomically by agents that race on it.
        let word = unsafe { AtomicU64::from_ptr(pointer.cast::<u64>()) };
        let old = word
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |native| {
                // The word is little-endian in memory, as the NIC's atomics see it.
                Some(update(u64::from_le(native)).to_le())
            })
            .expect("the closure always returns Some");
        Ok(u64::from_le(old))
    }
}

/// What a [`SoftNic`] did so far, published in atomics so another thread can read it while the
/// NIC runs.
#[derive(Debug, Default)]
pub struct SoftNicStatistics {
    /// UAR stores seen (at most the doorbells rung: see the module documentation).
    pub doorbells_observed: AtomicU64,
    /// Doorbells the host rang for staged QPs ([`DoorbellSource::HostRings`]): doorbell-record
    /// changes seen (at most the records stored, as for UAR stores).
    pub host_doorbells_rung: AtomicU64,
    /// WQEs executed successfully.
    pub wqes_executed: AtomicU64,
    /// WQEs that failed (each wrote an error CQE and stopped its QP).
    pub wqes_failed: AtomicU64,
    /// Polls made.
    pub polls: AtomicU64,
    /// Polls in a row, up to the last one, that executed nothing (kept by [`SoftNicThread`]).
    pub idle_polls_in_a_row: AtomicU64,
}

impl SoftNicStatistics {
    /// Each counter by its field's name (what Python's `World.soft_nic_statistics()` returns);
    /// the thread's idle-poll run is bookkeeping and not among them.
    pub fn fields(&self) -> Vec<(&'static str, u64)> {
        [
            ("doorbells_observed", &self.doorbells_observed),
            ("host_doorbells_rung", &self.host_doorbells_rung),
            ("wqes_executed", &self.wqes_executed),
            ("wqes_failed", &self.wqes_failed),
            ("polls", &self.polls),
        ]
        .into_iter()
        .map(|(name, counter)| (name, counter.load(Ordering::Acquire)))
        .collect()
    }
}

/// Who rings a QP's doorbell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DoorbellSource {
    /// The producer stores doorbells to the 8-byte UAR word at this address of the QP's rank.
    Uar(u64),
    /// The staged path (`ENDPOINT_FLAG_HOST_RINGS_DOORBELL`): the producer only stores the
    /// doorbell record, and the host (this NIC's thread, standing in for the host thread that
    /// would store to a ConnectX's UAR) rings when it sees the record change.
    HostRings,
}

/// Why a [`SoftNic`] poll cannot go on: an error of the mlx5 model or of the Ionic one (a
/// programming error of a producer or the setup; a failed WQE is an error CQE instead).
#[derive(Debug, thiserror::Error)]
pub enum SoftNicError {
    /// The mlx5 model's.
    #[error(transparent)]
    Mlx5(#[from] NicError),
    /// The Ionic model's.
    #[error(transparent)]
    Ionic(#[from] IonicError),
}

/// The 8-byte doorbell word of an Ionic queue pair (its slot of the doorbell page) and the last
/// value seen in it.
#[derive(Debug)]
struct WatchedIonicDoorbell {
    rank: u32,
    queue_id: u32,
    address: u64,
    last_value: u64,
}

/// A word that rings a QP's doorbell when it changes (its UAR word, or on the staged path its
/// doorbell record), and the last value seen in it.
#[derive(Debug)]
struct WatchedUar {
    rank: u32,
    qpn: u32,
    address: u64,
    host_rings: bool,
    last_value: [u8; 8],
}

/// The software NIC of one process: the `aboleth-nic` models (mlx5's `Nic` and the Ionic
/// device) over [`MappedNicMemory`], with the UAR and doorbell words it watches.
#[derive(Debug)]
pub struct SoftNic {
    nic: Nic,
    ionic: IonicDevice,
    memory: MappedNicMemory,
    uars: Vec<WatchedUar>,
    ionic_doorbells: Vec<WatchedIonicDoorbell>,
    statistics: Arc<SoftNicStatistics>,
}

fn uar_error(rank: u32, qpn: u32) -> impl Fn(NicMemoryError) -> NicError {
    move |source| NicError::QueueMemory {
        rank,
        qpn,
        structure: "UAR",
        source,
    }
}

impl SoftNic {
    /// A NIC with no QPs over `memory`.
    pub fn new(memory: MappedNicMemory) -> Self {
        Self {
            nic: Nic::new(),
            ionic: IonicDevice::new(),
            memory,
            uars: Vec::new(),
            ionic_doorbells: Vec::new(),
            statistics: Arc::new(SoftNicStatistics::default()),
        }
    }

    /// Creates an Ionic queue pair whose doorbells are 64-bit stores to the word at
    /// `doorbell_address` of `config.rank` (its slot of the doorbell page; its current value is
    /// not a doorbell).
    pub fn create_ionic_queue_pair(
        &mut self,
        config: IonicQueuePairConfig,
        doorbell_address: u64,
    ) -> Result<(), IonicError> {
        let memory_error = |error: NicMemoryError| IonicError::BadConfig {
            rank: config.rank,
            queue_id: config.queue_id,
            reason: format!("its doorbell word at {doorbell_address:#x}: {error}"),
        };
        let taken = self
            .uars
            .iter()
            .any(|uar| uar.rank == config.rank && uar.address.abs_diff(doorbell_address) < 8)
            || self.ionic_doorbells.iter().any(|doorbell| {
                doorbell.rank == config.rank && doorbell.address.abs_diff(doorbell_address) < 8
            });
        if taken {
            return Err(IonicError::BadConfig {
                rank: config.rank,
                queue_id: config.queue_id,
                reason: format!(
                    "the doorbell word at {doorbell_address:#x} already serves another queue"
                ),
            });
        }
        let value = self
            .memory
            .read(config.rank, doorbell_address, 8)
            .map_err(memory_error)?;
        self.ionic.create_queue_pair(config)?;
        self.ionic_doorbells.push(WatchedIonicDoorbell {
            rank: config.rank,
            queue_id: config.queue_id,
            address: doorbell_address,
            last_value: u64::from_le_bytes(value.try_into().expect("8 bytes")),
        });
        Ok(())
    }

    /// Creates a QP whose doorbells come from `doorbell` (its UAR word in mapped memory of
    /// `config.rank`, or the host watching its doorbell record); the word's current value is
    /// not a doorbell.
    pub fn create_queue_pair(
        &mut self,
        config: QueuePairConfig,
        doorbell: DoorbellSource,
    ) -> Result<(), NicError> {
        let (uar_address, host_rings) = match doorbell {
            DoorbellSource::Uar(address) => (address, false),
            DoorbellSource::HostRings => (config.doorbell_record_address, true),
        };
        if self
            .uars
            .iter()
            .any(|uar| uar.rank == config.rank && uar.address == uar_address)
        {
            return Err(NicError::InvalidConfig {
                rank: config.rank,
                qpn: config.qpn,
                reason: format!("the UAR word at {uar_address:#x} already serves another QP"),
            });
        }
        let value = self
            .memory
            .read(config.rank, uar_address, 8)
            .map_err(uar_error(config.rank, config.qpn))?;
        self.nic.create_queue_pair(&mut self.memory, config)?;
        self.uars.push(WatchedUar {
            rank: config.rank,
            qpn: config.qpn,
            address: uar_address,
            host_rings,
            last_value: value.try_into().expect("8 bytes"),
        });
        Ok(())
    }

    /// The counters, shared: they stay readable after the NIC moved to its thread.
    pub fn statistics(&self) -> Arc<SoftNicStatistics> {
        Arc::clone(&self.statistics)
    }

    /// The model, for status and CQ polls.
    pub fn nic(&self) -> &Nic {
        &self.nic
    }

    /// The memory it works on.
    pub fn memory(&self) -> &MappedNicMemory {
        &self.memory
    }

    /// The model, to create QPs' remote responder halves and receive CQs
    /// ([`Nic::create_remote_responder`], [`Nic::create_receive_cq`]) over this NIC's memory.
    pub fn nic_and_memory(&mut self) -> (&mut Nic, &mut MappedNicMemory) {
        (&mut self.nic, &mut self.memory)
    }

    /// Adds a region to its memory ([`MappedNicMemory::add_region`]), e.g. the buffers of a later
    /// region exchange.
    ///
    /// # Safety
    /// As [`MappedNicMemory::add_region`].
    pub unsafe fn add_region(&mut self, region: MappedRegion) -> Result<(), NicMemoryError> {
        // SAFETY: the caller's contract.
        unsafe { self.memory.add_region(region) }
    }

    /// One pass: every changed UAR or Ionic doorbell word becomes a doorbell, then the QPs with
    /// work run in turn until none has. Returns the number of WQEs executed (failed ones
    /// included).
    pub fn poll(&mut self) -> Result<u64, SoftNicError> {
        self.statistics.polls.fetch_add(1, Ordering::Relaxed);
        let mut executed = self.poll_ionic()?;
        for uar in &mut self.uars {
            let value: [u8; 8] = self
                .memory
                .read(uar.rank, uar.address, 8)
                .map_err(uar_error(uar.rank, uar.qpn))?
                .try_into()
                .expect("8 bytes");
            if value != uar.last_value && uar.host_rings {
                // The staged path: the record changed, so the host rings with the producer
                // index it names (what a host thread would store to a ConnectX's UAR).
                uar.last_value = value;
                let record = DoorbellRecord::from_bytes(&value);
                let doorbell =
                    UarDoorbell::next_producer_index(record.send_producer_index(), uar.qpn);
                self.nic.ring_doorbell(uar.rank, doorbell.to_bytes())?;
                self.statistics
                    .host_doorbells_rung
                    .fetch_add(1, Ordering::Relaxed);
            } else if value != uar.last_value {
                uar.last_value = value;
                // Each QP has its own UAR word: a doorbell naming another QP is the producer's
                // error (on a ConnectX it would ring that QP), refused with both numbers.
                let named = match UarDoorbell::from_bytes(&value).decode() {
                    Ok(DecodedUarDoorbell::NextProducerIndex { qpn, .. })
                    | Ok(DecodedUarDoorbell::LastWqeControl { qpn, .. }) => Some(qpn),
                    Err(_) => None, // ring_doorbell reports the malformed value
                };
                if named.is_some_and(|qpn| qpn != uar.qpn) {
                    return Err(NicError::InvalidConfig {
                        rank: uar.rank,
                        qpn: uar.qpn,
                        reason: format!(
                            "the doorbell stored to its UAR word at {:#x} names QP {:#x}",
                            uar.address,
                            named.unwrap_or_default()
                        ),
                    }
                    .into());
                }
                self.nic.ring_doorbell(uar.rank, value)?;
                self.statistics
                    .doorbells_observed
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        loop {
            let runnable = self.nic.runnable_queue_pairs(&self.memory);
            if runnable.is_empty() {
                return Ok(executed);
            }
            for (rank, qpn) in runnable {
                let event = self.nic.step_queue_pair(&mut self.memory, rank, qpn)?;
                let counter = match event.wqe.map(|wqe| wqe.outcome) {
                    Some(WqeOutcome::Completed { .. }) => &self.statistics.wqes_executed,
                    Some(WqeOutcome::Failed { .. }) => &self.statistics.wqes_failed,
                    None => continue,
                };
                // Release: a reader that sees the count also sees the WQE's effects.
                counter.fetch_add(1, Ordering::Release);
                executed += 1;
            }
        }
    }
}

impl SoftNic {
    /// The Ionic half of [`SoftNic::poll`]: each changed doorbell word rings its queue (a later
    /// store names a later producer position, so two stores between polls are one doorbell),
    /// then the queues with fetched WQEs run in turn until none has.
    fn poll_ionic(&mut self) -> Result<u64, SoftNicError> {
        for doorbell in &mut self.ionic_doorbells {
            let bytes = self
                .memory
                .read(doorbell.rank, doorbell.address, 8)
                .map_err(|error| IonicError::Memory(error.to_string()))?;
            let value = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
            if value == doorbell.last_value {
                continue;
            }
            doorbell.last_value = value;
            // Each queue has its own doorbell word: a value naming another queue is the
            // producer's error, refused with both ids.
            let named = ((value >> aboleth_abi::ionic::DBELL_QID_SHIFT)
                & aboleth_abi::ionic::QID_MASK) as u32;
            if named != doorbell.queue_id {
                return Err(IonicError::BadConfig {
                    rank: doorbell.rank,
                    queue_id: doorbell.queue_id,
                    reason: format!(
                        "the doorbell {value:#x} stored to its word at {:#x} names queue {named:#x}",
                        doorbell.address
                    ),
                }
                .into());
            }
            self.ionic
                .ring_doorbell(&self.memory, doorbell.rank, value)?;
            self.statistics
                .doorbells_observed
                .fetch_add(1, Ordering::Relaxed);
        }
        let mut executed = 0;
        loop {
            let runnable = self.ionic.runnable_queues();
            if runnable.is_empty() {
                return Ok(executed);
            }
            for (rank, queue_id) in runnable {
                let Some(event) = self.ionic.step_queue(&mut self.memory, rank, queue_id)? else {
                    continue;
                };
                let counter = if event.status == aboleth_abi::ionic::STS_OK {
                    &self.statistics.wqes_executed
                } else {
                    &self.statistics.wqes_failed
                };
                // Release: a reader that sees the count also sees the WQE's effects.
                counter.fetch_add(1, Ordering::Release);
                executed += 1;
            }
        }
    }
}

/// A [`SoftNic`] polling on a thread of its own.
#[derive(Debug)]
pub struct SoftNicThread {
    stop: Arc<AtomicBool>,
    statistics: Arc<SoftNicStatistics>,
    handle: Option<JoinHandle<(SoftNic, Result<(), SoftNicError>)>>,
}

impl SoftNicThread {
    /// Starts polling `nic` until [`SoftNicThread::stop`]; an error of the model (not a failed
    /// WQE, which is an error CQE) ends the thread and is returned by `stop`.
    pub fn start(mut nic: SoftNic) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let statistics = nic.statistics();
        let stop_flag = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name("aboleth-soft-nic".to_owned())
            .spawn(move || {
                while !stop_flag.load(Ordering::Acquire) {
                    match nic.poll() {
                        // Idle: let a producer sharing the core run (2-core machines).
                        Ok(0) => {
                            nic.statistics
                                .idle_polls_in_a_row
                                .fetch_add(1, Ordering::Release);
                            std::thread::yield_now();
                        }
                        Ok(_) => nic
                            .statistics
                            .idle_polls_in_a_row
                            .store(0, Ordering::Release),
                        Err(error) => return (nic, Err(error)),
                    }
                }
                (nic, Ok(()))
            })?;
        Ok(Self {
            stop,
            statistics,
            handle: Some(handle),
        })
    }

    /// The running NIC's counters.
    pub fn statistics(&self) -> &SoftNicStatistics {
        &self.statistics
    }

    /// Whether the thread has ended (an error of the model ends it; `stop` returns the error).
    pub fn is_finished(&self) -> bool {
        self.handle.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Stops the thread after its current poll and returns the NIC with how the thread ended.
    pub fn stop(mut self) -> (SoftNic, Result<(), SoftNicError>) {
        self.stop.store(true, Ordering::Release);
        let handle = self.handle.take().expect("stopped once");
        handle.join().expect("the software NIC thread panicked")
    }
}

impl Drop for SoftNicThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}
