//! The Ionic (RoCEv2 RC) device model: send queues of 64-byte WQEs (aboleth-abi's
//! `ionic::wqe::SendWqe`) and CQs of 32-byte CQEs in a [`NicMemory`], a 64-bit doorbell per
//! queue carrying its queue id and the producer index (`ionic::sq_doorbell_value`), and
//! **in-order** execution per queue pair: each [`IonicDevice::step`] executes the oldest WQE
//! fetched on one queue pair chosen by the caller's rng, so the writes of one queue pair land in
//! posting order (RC) while queue pairs interleave freely.
//!
//! What it models: the doorbell (the device fetches the WQEs from the last fetched position up
//! to the new producer index, which is a ring position, at once, refusing a doorbell of another
//! queue, one that leaves more than `entries - 1` WQEs unexecuted, and a WQE whose color is not
//! its lap's: one written after the doorbell; a refused doorbell takes nothing); RDMA writes
//! from scatter entries or inline data; 8-byte fetch-add and compare-swap atomics with the old
//! value returned to the requester's buffer; lkey and rkey checks through the memory; and the
//! send completion, one `SEND_MSN` CQE per signaled WQE (and for a failed one, with the error
//! bit and status), in the CQ's lap color (1 in the first lap), whose message sequence number is
//! the WQE's index + 1 (modulo 2^24; every WQE here is a remote operation, the only kind rdma-core
//! numbers): every WQE before it has completed too (RC). A failed WQE
//! stops its queue pair (later WQEs are not executed).
//!
//! What it does not model: writes with immediate and receive queues (refused with
//! [`IonicError::NotModeled`]), sends and reads, local operations (`SEND_NPG` completions), the
//! `spec` scatter formats, the CQ credits a producer must reserve and a consumer return
//! (`ionic_reserve_cq`, the CQ doorbell), CQ overrun, express doorbells and the controller
//! memory buffer, and time (each event reports the bytes it moved; a caller prices it).

use std::collections::BTreeMap;

use aboleth_abi::ionic::cqe::Cqe;
use aboleth_abi::ionic::wqe::{AtomicOperation, SendWqe, WritePayload};
use aboleth_abi::ionic::{
    CQE_BYTES, IonicVersion, QID_MASK, STS_LOCAL_PROT_ERR, STS_OK, STS_REMOTE_ACC_ERR, WQE_BYTES,
    sq_color_of,
};
use rand::Rng;

use crate::memory::NicMemory;

/// Where an Ionic queue pair's rings live and whom it is connected to (memory allocated by
/// the caller).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IonicQueuePairConfig {
    /// The requester's rank.
    pub rank: u32,
    /// Its queue id (24 bits, unique per rank).
    pub queue_id: u32,
    /// The rank its RC connection reaches.
    pub peer_rank: u32,
    /// The device's firmware ABI version.
    pub version: IonicVersion,
    /// The send queue: `sq_entries` WQEs of 64 bytes.
    pub sq_address: u64,
    /// Entries of the send queue (a power of two, at most 2^16).
    pub sq_entries: u32,
    /// The send CQ: `cq_entries` CQEs of 32 bytes.
    pub cq_address: u64,
    /// Entries of the CQ (a power of two).
    pub cq_entries: u32,
}

/// One WQE executed by [`IonicDevice::step`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IonicEvent {
    /// The requester.
    pub rank: u32,
    /// Its queue.
    pub queue_id: u32,
    /// The WQE's index (counting from 0 across laps).
    pub index: u64,
    /// What it said.
    pub wqe: SendWqe,
    /// `STS_OK`, or why it failed (nothing was written then).
    pub status: u32,
    /// Whether a CQE was written.
    pub completed: bool,
    /// Bytes it moved to the peer.
    pub bytes: u64,
}

/// Why the device cannot go on: a programming error of the queue's producer or the setup.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IonicError {
    /// A configuration the model refuses.
    #[error("Ionic queue {queue_id} of rank {rank}: {reason}")]
    BadConfig {
        /// The rank.
        rank: u32,
        /// The queue.
        queue_id: u32,
        /// What is wrong.
        reason: String,
    },
    /// No such queue.
    #[error("rank {rank} has no Ionic queue {queue_id}")]
    UnknownQueue {
        /// The rank.
        rank: u32,
        /// The queue.
        queue_id: u32,
    },
    /// A doorbell that runs past the ring.
    #[error(
        "Ionic queue {queue_id} of rank {rank}: doorbell at ring position {position} would leave {outstanding} WQEs unexecuted in a ring of {entries} (at most entries - 1)"
    )]
    BadDoorbell {
        /// The rank.
        rank: u32,
        /// The queue.
        queue_id: u32,
        /// The producer position rung.
        position: u16,
        /// WQEs that would be outstanding.
        outstanding: u64,
        /// The ring's entries.
        entries: u32,
    },
    /// A fetched WQE that is not of the current lap or not one this model executes.
    #[error("Ionic queue {queue_id} of rank {rank}: WQE {index}: {reason}")]
    BadWqe {
        /// The rank.
        rank: u32,
        /// The queue.
        queue_id: u32,
        /// Its index.
        index: u64,
        /// Why.
        reason: String,
    },
    /// An operation the model does not execute.
    #[error("Ionic queue {queue_id} of rank {rank}: {what} is not modeled")]
    NotModeled {
        /// The rank.
        rank: u32,
        /// The queue.
        queue_id: u32,
        /// What.
        what: &'static str,
    },
    /// The memory refused a ring access.
    #[error("Ionic device memory access: {0}")]
    Memory(String),
}

#[derive(Clone, Debug)]
struct Queue {
    config: IonicQueuePairConfig,
    /// WQEs fetched so far (the next index to fetch).
    fetched: u64,
    /// Fetched, not yet executed, oldest first.
    pending: std::collections::VecDeque<(u64, SendWqe)>,
    /// CQEs written so far.
    completions: u64,
    /// Stopped by a failed WQE.
    failed: bool,
}

/// The device: every rank's Ionic queue pairs.
#[derive(Clone, Debug, Default)]
pub struct IonicDevice {
    queues: BTreeMap<(u32, u32), Queue>,
}

/// The color of CQE `index` on a CQ of `entries`: 1 in the first lap, then alternating (so a
/// zeroed CQ holds no completion), as rdma-core's CQ color starts at 1.
pub fn cq_color_of(index: u64, entries: u32) -> bool {
    (index / u64::from(entries)).is_multiple_of(2)
}

fn memory_error(error: crate::NicMemoryError) -> IonicError {
    IonicError::Memory(error.message)
}

impl IonicDevice {
    /// A device with nothing configured.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a queue pair; its rings must be powers of two.
    pub fn create_queue_pair(&mut self, config: IonicQueuePairConfig) -> Result<(), IonicError> {
        let bad = |reason: &str| IonicError::BadConfig {
            rank: config.rank,
            queue_id: config.queue_id,
            reason: reason.to_owned(),
        };
        if !config.sq_entries.is_power_of_two()
            || config.sq_entries > 1 << 16
            || !config.cq_entries.is_power_of_two()
        {
            return Err(bad(
                "the send queue (at most 2^16 entries) and the CQ need a power-of-two number of entries",
            ));
        }
        if u64::from(config.queue_id) > QID_MASK {
            return Err(bad("the queue id does not fit 24 bits"));
        }
        if self.queues.contains_key(&(config.rank, config.queue_id)) {
            return Err(bad("created twice"));
        }
        self.queues.insert(
            (config.rank, config.queue_id),
            Queue {
                config,
                fetched: 0,
                pending: Default::default(),
                completions: 0,
                failed: false,
            },
        );
        Ok(())
    }

    /// The doorbell: the 64-bit `value` (`ionic::sq_doorbell_value`) rank `rank` stored into
    /// its doorbell page names a queue and its new producer position. The device fetches and
    /// checks the WQEs up to there now.
    pub fn ring_doorbell(
        &mut self,
        memory: &impl NicMemory,
        rank: u32,
        value: u64,
    ) -> Result<(), IonicError> {
        let queue_id = ((value >> aboleth_abi::ionic::DBELL_QID_SHIFT) & QID_MASK) as u32;
        let position = value as u16;
        let queue = self
            .queues
            .get_mut(&(rank, queue_id))
            .ok_or(IonicError::UnknownQueue { rank, queue_id })?;
        let entries = u64::from(queue.config.sq_entries);
        let mask = entries - 1;
        let added = (u64::from(position) & mask).wrapping_sub(queue.fetched & mask) & mask;
        let outstanding = queue.pending.len() as u64 + added;
        if outstanding > entries - 1 || u64::from(position) > mask {
            return Err(IonicError::BadDoorbell {
                rank,
                queue_id,
                position,
                outstanding,
                entries: queue.config.sq_entries,
            });
        }
        let mut fetched = Vec::new();
        for index in queue.fetched..queue.fetched + added {
            let address = queue.config.sq_address + (index & mask) * WQE_BYTES as u64;
            let bytes: [u8; WQE_BYTES] = memory
                .read(rank, address, WQE_BYTES as u64)
                .map_err(memory_error)?
                .try_into()
                .map_err(|_| IonicError::Memory(format!("rank {rank}: a short WQE read")))?;
            let bad = |reason: String| IonicError::BadWqe {
                rank,
                queue_id,
                index,
                reason,
            };
            let wqe = SendWqe::decode(queue.config.version, &bytes)
                .map_err(|error| bad(error.to_string()))?;
            let common = match &wqe {
                SendWqe::RdmaWrite { common, .. } | SendWqe::Atomic { common, .. } => *common,
            };
            if common.color != sq_color_of(index, entries) {
                return Err(bad(format!(
                    "its color is {}, and lap {} of the ring has {}: a WQE of an earlier lap (the doorbell was rung before it was written)",
                    u8::from(common.color),
                    index / entries,
                    u8::from(sq_color_of(index, entries))
                )));
            }
            fetched.push((index, wqe));
        }
        queue.pending.extend(fetched);
        queue.fetched += added;
        Ok(())
    }

    /// Whether a WQE is waiting on a queue pair that can run.
    pub fn pending_work(&self) -> bool {
        self.queues
            .values()
            .any(|queue| !queue.failed && !queue.pending.is_empty())
    }

    /// Executes the oldest fetched WQE of one queue pair chosen by `rng` among those with work
    /// (RC: in order on a queue pair), and writes its completion; `None` when nothing waits.
    pub fn step(
        &mut self,
        memory: &mut impl NicMemory,
        rng: &mut impl Rng,
    ) -> Result<Option<IonicEvent>, IonicError> {
        let ready = self.runnable_queues();
        if ready.is_empty() {
            return Ok(None);
        }
        let (rank, queue_id) = ready[rng.random_range(0..ready.len())];
        self.step_queue(memory, rank, queue_id)
    }

    /// The queue pairs with a fetched WQE to execute, as `(rank, queue id)`.
    pub fn runnable_queues(&self) -> Vec<(u32, u32)> {
        self.queues
            .iter()
            .filter(|(_, queue)| !queue.failed && !queue.pending.is_empty())
            .map(|(key, _)| *key)
            .collect()
    }

    /// Executes the oldest fetched WQE of queue `queue_id` of `rank` and writes its completion;
    /// `None` when it has nothing to execute (or stopped at a failed WQE).
    pub fn step_queue(
        &mut self,
        memory: &mut impl NicMemory,
        rank: u32,
        queue_id: u32,
    ) -> Result<Option<IonicEvent>, IonicError> {
        let key = (rank, queue_id);
        let queue = self
            .queues
            .get_mut(&key)
            .ok_or(IonicError::UnknownQueue { rank, queue_id })?;
        if queue.failed || queue.pending.is_empty() {
            return Ok(None);
        }
        let (index, wqe) = queue.pending.pop_front().expect("has work");
        let config = queue.config;
        let (status, bytes) = execute(memory, &config, &wqe)?;
        let signaled = match &wqe {
            SendWqe::RdmaWrite { common, .. } | SendWqe::Atomic { common, .. } => common.signaled,
        };
        let completed = signaled || status != STS_OK;
        let queue = self.queues.get_mut(&key).expect("listed above");
        if completed {
            let cq_index = queue.completions;
            let cqe = Cqe::send(
                config.queue_id,
                ((index + 1) & 0x00ff_ffff) as u32,
                (status != STS_OK).then_some(status),
                cq_color_of(cq_index, config.cq_entries),
            );
            let address =
                config.cq_address + (cq_index % u64::from(config.cq_entries)) * CQE_BYTES as u64;
            memory
                .write(config.rank, address, &cqe.to_bytes())
                .map_err(memory_error)?;
            queue.completions += 1;
        }
        if status != STS_OK {
            queue.failed = true;
        }
        Ok(Some(IonicEvent {
            rank: config.rank,
            queue_id: config.queue_id,
            index,
            wqe,
            status,
            completed,
            bytes,
        }))
    }

    /// The CQE at position `index` (counting from 0 across laps) of queue `queue_id`'s CQ, if
    /// the device has written it in that position's lap (what a poller reads).
    pub fn completion_at(
        &self,
        memory: &impl NicMemory,
        rank: u32,
        queue_id: u32,
        index: u64,
    ) -> Result<Option<Cqe>, IonicError> {
        let queue = self
            .queues
            .get(&(rank, queue_id))
            .ok_or(IonicError::UnknownQueue { rank, queue_id })?;
        let entries = queue.config.cq_entries;
        let address = queue.config.cq_address + (index % u64::from(entries)) * CQE_BYTES as u64;
        let bytes: [u8; CQE_BYTES] = memory
            .read(rank, address, CQE_BYTES as u64)
            .map_err(memory_error)?
            .try_into()
            .map_err(|_| IonicError::Memory("a short CQE read".to_owned()))?;
        let cqe = Cqe::from_bytes(&bytes);
        Ok(cqe.has_color(cq_color_of(index, entries)).then_some(cqe))
    }
}

/// Executes one WQE: its status and the bytes it moved (nothing is written on failure; local
/// key errors before remote ones).
fn execute(
    memory: &mut impl NicMemory,
    config: &IonicQueuePairConfig,
    wqe: &SendWqe,
) -> Result<(u32, u64), IonicError> {
    let (rank, peer) = (config.rank, config.peer_rank);
    match wqe {
        SendWqe::RdmaWrite {
            remote_address,
            rkey,
            payload,
            immediate,
            ..
        } => {
            if immediate.is_some() {
                return Err(IonicError::NotModeled {
                    rank,
                    queue_id: config.queue_id,
                    what: "an RDMA write with immediate (no receive queues)",
                });
            }
            let data = match payload {
                WritePayload::Inline(data) => data.clone(),
                WritePayload::Buffers(buffers) => {
                    let mut data = Vec::new();
                    for buffer in buffers {
                        let length = u64::from(buffer.length_bytes);
                        if memory
                            .check_local_key(rank, buffer.lkey, buffer.address, length)
                            .is_err()
                        {
                            return Ok((STS_LOCAL_PROT_ERR, 0));
                        }
                        data.extend(
                            memory
                                .read(rank, buffer.address, length)
                                .map_err(memory_error)?,
                        );
                    }
                    data
                }
            };
            if memory
                .check_remote_key(peer, *rkey, *remote_address, data.len() as u64)
                .is_err()
            {
                return Ok((STS_REMOTE_ACC_ERR, 0));
            }
            memory
                .write(peer, *remote_address, &data)
                .map_err(memory_error)?;
            Ok((STS_OK, data.len() as u64))
        }
        SendWqe::Atomic {
            remote_address,
            rkey,
            operation,
            result,
            ..
        } => {
            if memory
                .check_local_key(rank, result.lkey, result.address, 8)
                .is_err()
            {
                return Ok((STS_LOCAL_PROT_ERR, 0));
            }
            if !remote_address.is_multiple_of(8)
                || memory
                    .check_remote_key(peer, *rkey, *remote_address, 8)
                    .is_err()
            {
                return Ok((STS_REMOTE_ACC_ERR, 0));
            }
            let operation = *operation;
            let old = memory
                .atomic_update_u64(peer, *remote_address, &move |old| match operation {
                    AtomicOperation::FetchAdd { add } => old.wrapping_add(add),
                    AtomicOperation::CompareSwap { compare, swap } => {
                        if old == compare {
                            swap
                        } else {
                            old
                        }
                    }
                })
                .map_err(memory_error)?;
            memory
                .write_u64(rank, result.address, old)
                .map_err(memory_error)?;
            Ok((STS_OK, 8))
        }
    }
}
