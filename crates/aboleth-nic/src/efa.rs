//! The EFA (SRD) device model: send queues of 64-byte RDMA-write WQEs (aboleth-abi's
//! `efa::wqe::RdmaWriteWqe`) and send completion queues in a [`NicMemory`], a 32-bit doorbell
//! per queue pair carrying the producer index, and **unordered** execution: each
//! [`EfaDevice::step`] performs one posted write chosen by the caller's rng among every write of
//! every queue pair that is in flight, so two writes of one queue pair land in either order, as
//! SRD delivers them (reliable, not ordered). A program that publishes a signal by a write
//! queued behind its data can therefore be seen to expose the signal first; that is what this
//! model exists to show.
//!
//! What it models: the doorbell (the device fetches the WQEs up to the new producer index at
//! once, refusing a producer index that goes back or leaves more than a ring of WQEs unexecuted,
//! and a WQE whose phase bit is not its lap's, i.e. one written in an earlier lap: a doorbell rung
//! before the WQE was written; a refused doorbell takes nothing); the address handle of each destination (`ah` to a rank, per requester
//! rank) and the destination QP number, which must name a QP of that rank; lkey and rkey checks
//! through the memory; the copy; the responder's receive completion, with its immediate, for a
//! write with immediate (into the rank's receive CQ, [`EfaDevice::create_receive_cq`]); and the
//! send completion, written in execution order (so out of posting order), with the lap's phase
//! bit, when the WQE asked for one, or always when it failed (with the failure's status).
//!
//! Phase bits follow rdma-core: a send queue's first lap has phase 0, a CQ's first lap phase 1
//! (so a zeroed CQ holds no completion). Errors are checked local first (lkey, address handle),
//! then remote (destination QP, rkey); a failed write writes nothing.
//!
//! What it does not model: packet loss and retries (SRD hides them), sends, reads, inline
//! data, queue keys, completion counters, CQ doorbells and CQ overrun, slot reuse tied to the
//! completions the producer has polled (WQEs are copied at the doorbell, so a slot rewritten
//! while its write is in flight does no harm here; rdma-core also refuses writes without a
//! completion request, which the model accepts), a cap on WQEs per doorbell, receive queues
//! (writes with immediate complete at the responder unsolicited), and time (each event reports
//! the bytes it moved; a caller prices it).

use std::collections::BTreeMap;

use aboleth_abi::efa::cqe::{RxCompletion, TxCompletion};
use aboleth_abi::efa::wqe::{RdmaWrite, RdmaWriteWqe};
use aboleth_abi::efa::{
    COMP_STATUS_LOCAL_ERROR_INVALID_AH, COMP_STATUS_LOCAL_ERROR_INVALID_LKEY, COMP_STATUS_OK,
    COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS, COMP_STATUS_REMOTE_ERROR_BAD_DEST_QPN, RDMA_WRITE,
    TX_WQE_BYTES,
};
use rand::Rng;

use crate::memory::NicMemory;

/// Where an EFA queue pair's send queue and send CQ live (memory allocated by the caller).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EfaQueuePairConfig {
    /// The requester's rank.
    pub rank: u32,
    /// Its QP number (unique per rank).
    pub qp_num: u16,
    /// The send queue: `sq_entries` WQEs of 64 bytes.
    pub sq_address: u64,
    /// Entries of the send queue (a power of two).
    pub sq_entries: u32,
    /// The send CQ: `cq_entries` completions of 8 bytes.
    pub cq_address: u64,
    /// Entries of the send CQ (a power of two).
    pub cq_entries: u32,
}

/// Where a rank's receive completions go (writes with immediate it is the target of).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EfaReceiveCqConfig {
    /// The responder's rank.
    pub rank: u32,
    /// `entries` completions of 16 bytes.
    pub address: u64,
    /// Entries (a power of two).
    pub entries: u32,
    /// Where the consumer keeps how many completions it has taken (a little-endian u64 the
    /// device reads before writing one), if it says: a completion that would overwrite one not
    /// yet taken is then refused ([`EfaError::ReceiveCqOverrun`]) instead of lost.
    pub consumer_index_address: Option<u64>,
}

/// One write performed by [`EfaDevice::step`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EfaEvent {
    /// The requester.
    pub rank: u32,
    /// Its QP.
    pub qp_num: u16,
    /// The WQE's ring index (counting from 0 across laps).
    pub index: u32,
    /// What the WQE said.
    pub write: RdmaWrite,
    /// The rank written, when the address handle named one.
    pub target_rank: Option<u32>,
    /// `COMP_STATUS_OK`, or why it failed (nothing was written then).
    pub status: u8,
    /// Whether a send completion was written.
    pub completed: bool,
    /// For a write with immediate that landed: the index of the receive completion it left in
    /// the target's receive CQ (counting from 0 across laps).
    pub receive_index: Option<u32>,
}

/// Why the device cannot go on: a programming error of the queue's producer, or of the setup.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EfaError {
    /// A configuration the model refuses.
    #[error("EFA queue pair {qp_num} of rank {rank}: {reason}")]
    BadConfig {
        /// The rank.
        rank: u32,
        /// The QP.
        qp_num: u16,
        /// What is wrong.
        reason: String,
    },
    /// No such queue pair.
    #[error("rank {rank} has no EFA queue pair {qp_num}")]
    UnknownQueuePair {
        /// The rank.
        rank: u32,
        /// The QP.
        qp_num: u16,
    },
    /// A doorbell whose producer counter runs more than a ring past what is in flight (a counter
    /// that went back reads as one almost 2^16 ahead).
    #[error(
        "EFA queue pair {qp_num} of rank {rank}: doorbell with producer index {producer} after {fetched} (ring of {entries}): it may only grow, by at most the ring"
    )]
    BadDoorbell {
        /// The rank.
        rank: u32,
        /// The QP.
        qp_num: u16,
        /// The index the counter rung names.
        producer: u32,
        /// WQEs fetched before.
        fetched: u32,
        /// The ring's entries.
        entries: u32,
    },
    /// A WQE at a doorbelled index that is not an RDMA write of the current lap.
    #[error("EFA queue pair {qp_num} of rank {rank}: WQE {index} (slot {slot}): {reason}")]
    BadWqe {
        /// The rank.
        rank: u32,
        /// The QP.
        qp_num: u16,
        /// The ring index.
        index: u32,
        /// Its slot.
        slot: u32,
        /// Why.
        reason: String,
    },
    /// A write with immediate to a rank without a receive CQ.
    #[error(
        "rank {rank} received a write with immediate from rank {from} but has no receive CQ (create_receive_cq)"
    )]
    NoReceiveCq {
        /// The target.
        rank: u32,
        /// The requester.
        from: u32,
    },
    /// A receive completion would overwrite one its consumer has not taken.
    #[error(
        "rank {rank}'s receive CQ overran: {entries} receive completions not yet taken when a write with immediate from rank {from} arrived (a wait of rank {rank} must drain them; fewer add signals in flight to one rank, or a larger receive CQ)"
    )]
    ReceiveCqOverrun {
        /// The target.
        rank: u32,
        /// The requester.
        from: u32,
        /// The CQ's entries.
        entries: u32,
    },
    /// The memory refused a queue access (not a WQE's own buffers: those complete with an
    /// error status).
    #[error("EFA device memory access: {0}")]
    Memory(String),
}

#[derive(Clone, Debug)]
struct SendQueue {
    config: EfaQueuePairConfig,
    /// WQEs fetched (the producer index of the last doorbell).
    fetched: u32,
    /// Send completions written.
    completions: u32,
}

#[derive(Clone, Copy, Debug)]
struct InFlight {
    rank: u32,
    qp_num: u16,
    index: u32,
    write: RdmaWrite,
}

/// The device: every rank's EFA queue pairs, address handles and receive CQs.
#[derive(Clone, Debug, Default)]
pub struct EfaDevice {
    queue_pairs: BTreeMap<(u32, u16), SendQueue>,
    /// (requester rank, ah) -> target rank.
    address_handles: BTreeMap<(u32, u16), u32>,
    /// rank -> (config, completions written).
    receive_cqs: BTreeMap<u32, (EfaReceiveCqConfig, u32)>,
    in_flight: Vec<InFlight>,
}

/// The phase bit of send-queue index `index` on a ring of `entries`, as rdma-core writes it:
/// 0 in the first lap, then alternating (a zeroed slot is refused anyway: it lacks the metadata
/// bit).
pub fn send_queue_phase_of(index: u32, entries: u32) -> bool {
    !(index / entries).is_multiple_of(2)
}

/// The phase bit of completion-queue index `index` on a ring of `entries`: 1 in the first lap,
/// then alternating, so that a zeroed CQ holds no completion (rdma-core starts its CQ phase at 1).
pub fn completion_queue_phase_of(index: u32, entries: u32) -> bool {
    (index / entries).is_multiple_of(2)
}

impl EfaDevice {
    /// A device with nothing configured.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a queue pair; its rings must be powers of two.
    pub fn create_queue_pair(&mut self, config: EfaQueuePairConfig) -> Result<(), EfaError> {
        let bad = |reason: &str| EfaError::BadConfig {
            rank: config.rank,
            qp_num: config.qp_num,
            reason: reason.to_owned(),
        };
        if !config.sq_entries.is_power_of_two() || !config.cq_entries.is_power_of_two() {
            return Err(bad(
                "the send queue and the CQ must have a power-of-two number of entries",
            ));
        }
        if self.queue_pairs.contains_key(&(config.rank, config.qp_num)) {
            return Err(bad("created twice"));
        }
        self.queue_pairs.insert(
            (config.rank, config.qp_num),
            SendQueue {
                config,
                fetched: 0,
                completions: 0,
            },
        );
        Ok(())
    }

    /// Makes address handle `ah` of `rank` name `target_rank`.
    pub fn add_address_handle(&mut self, rank: u32, ah: u16, target_rank: u32) {
        self.address_handles.insert((rank, ah), target_rank);
    }

    /// Gives `config.rank` a receive CQ for the writes with immediate it is the target of.
    pub fn create_receive_cq(&mut self, config: EfaReceiveCqConfig) -> Result<(), EfaError> {
        if !config.entries.is_power_of_two() {
            return Err(EfaError::BadConfig {
                rank: config.rank,
                qp_num: 0,
                reason: "the receive CQ must have a power-of-two number of entries".to_owned(),
            });
        }
        self.receive_cqs.insert(config.rank, (config, 0));
        Ok(())
    }

    /// The doorbell: queue pair `qp_num` of `rank` has WQEs up to the ring index whose low 16
    /// bits are `producer_counter` (rdma-core's `efa_sq_ring_doorbell` writes its 16-bit `pc`
    /// in a 32-bit MMIO store); the index is the one at most 2^16 past those fetched. The
    /// device fetches and checks them now (a WQE written after the doorbell is the producer's
    /// bug, and shows as a WQE of the wrong lap or not an RDMA write).
    pub fn ring_doorbell(
        &mut self,
        memory: &impl NicMemory,
        rank: u32,
        qp_num: u16,
        producer_counter: u16,
    ) -> Result<(), EfaError> {
        let queue = self
            .queue_pairs
            .get_mut(&(rank, qp_num))
            .ok_or(EfaError::UnknownQueuePair { rank, qp_num })?;
        let entries = queue.config.sq_entries;
        let producer =
            queue.fetched + u32::from(producer_counter.wrapping_sub(queue.fetched as u16));
        let outstanding = self
            .in_flight
            .iter()
            .filter(|write| write.rank == rank && write.qp_num == qp_num)
            .count() as u32;
        if producer < queue.fetched || producer - queue.fetched + outstanding > entries {
            return Err(EfaError::BadDoorbell {
                rank,
                qp_num,
                producer,
                fetched: queue.fetched,
                entries,
            });
        }
        // Every WQE is checked before any is taken: a refused doorbell changes nothing.
        let mut fetched = Vec::new();
        for index in queue.fetched..producer {
            let slot = index % entries;
            let address = queue.config.sq_address + u64::from(slot) * TX_WQE_BYTES as u64;
            let bytes = memory
                .read(rank, address, TX_WQE_BYTES as u64)
                .map_err(|error| EfaError::Memory(error.message))?;
            let wqe = RdmaWriteWqe::from_bytes(bytes.as_slice().try_into().map_err(|_| {
                EfaError::Memory(format!("rank {rank}: a short read of WQE slot {slot}"))
            })?);
            let bad = |reason: String| EfaError::BadWqe {
                rank,
                qp_num,
                index,
                slot,
                reason,
            };
            let write = wqe.decode().map_err(|error| bad(error.to_string()))?;
            if write.phase != send_queue_phase_of(index, entries) {
                return Err(bad(format!(
                    "its phase bit is {}, and lap {} of the ring has {}: a WQE of an earlier lap (the doorbell was rung before it was written)",
                    u8::from(write.phase),
                    index / entries,
                    u8::from(send_queue_phase_of(index, entries))
                )));
            }
            fetched.push(InFlight {
                rank,
                qp_num,
                index,
                write,
            });
        }
        self.in_flight.extend(fetched);
        queue.fetched = producer;
        Ok(())
    }

    /// Whether a write is in flight.
    pub fn pending_work(&self) -> bool {
        !self.in_flight.is_empty()
    }

    /// Writes in flight.
    pub fn in_flight_count(&self) -> usize {
        self.in_flight.len()
    }

    /// Performs one write chosen by `rng` among every write in flight (SRD's order: none), and
    /// writes its completions; `None` when nothing is in flight.
    pub fn step(
        &mut self,
        memory: &mut impl NicMemory,
        rng: &mut impl Rng,
    ) -> Result<Option<EfaEvent>, EfaError> {
        if self.in_flight.is_empty() {
            return Ok(None);
        }
        let chosen = self
            .in_flight
            .swap_remove(rng.random_range(0..self.in_flight.len()));
        self.execute(memory, chosen).map(Some)
    }

    fn execute(
        &mut self,
        memory: &mut impl NicMemory,
        flight: InFlight,
    ) -> Result<EfaEvent, EfaError> {
        let write = flight.write;
        let target = self.address_handles.get(&(flight.rank, write.ah)).copied();
        let length = u64::from(write.length_bytes);
        let mut receive_index = None;
        // Local errors first (the requester's own key and address handle), then the remote ones.
        let status = if memory
            .check_local_key(flight.rank, write.lkey, write.local_address, length)
            .is_err()
        {
            COMP_STATUS_LOCAL_ERROR_INVALID_LKEY
        } else {
            match target {
                None => COMP_STATUS_LOCAL_ERROR_INVALID_AH,
                Some(target) if !self.queue_pairs.contains_key(&(target, write.dest_qp_num)) => {
                    COMP_STATUS_REMOTE_ERROR_BAD_DEST_QPN
                }
                Some(target)
                    if memory
                        .check_remote_key(target, write.rkey, write.remote_address, length)
                        .is_err() =>
                {
                    COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS
                }
                Some(target) => {
                    if write.immediate.is_some() && !self.receive_cqs.contains_key(&target) {
                        return Err(EfaError::NoReceiveCq {
                            rank: target,
                            from: flight.rank,
                        });
                    }
                    memory
                        .copy(
                            (flight.rank, write.local_address),
                            (target, write.remote_address),
                            length,
                        )
                        .map_err(|error| EfaError::Memory(error.message))?;
                    if let Some(immediate) = write.immediate {
                        receive_index =
                            Some(self.complete_receive(memory, target, flight, immediate)?);
                    }
                    COMP_STATUS_OK
                }
            }
        };
        let completed = write.completion_requested || status != COMP_STATUS_OK;
        if completed {
            let queue = self
                .queue_pairs
                .get_mut(&(flight.rank, flight.qp_num))
                .ok_or(EfaError::UnknownQueuePair {
                    rank: flight.rank,
                    qp_num: flight.qp_num,
                })?;
            let entries = queue.config.cq_entries;
            let index = queue.completions;
            let completion = TxCompletion::new(
                write.req_id,
                status,
                completion_queue_phase_of(index, entries),
                flight.qp_num,
                RDMA_WRITE,
            );
            let address = queue.config.cq_address
                + u64::from(index % entries) * TxCompletion::SIZE_BYTES as u64;
            memory
                .write(flight.rank, address, &completion.to_bytes())
                .map_err(|error| EfaError::Memory(error.message))?;
            queue.completions += 1;
        }
        Ok(EfaEvent {
            rank: flight.rank,
            qp_num: flight.qp_num,
            index: flight.index,
            write,
            target_rank: target,
            status,
            completed,
            receive_index,
        })
    }

    fn complete_receive(
        &mut self,
        memory: &mut impl NicMemory,
        target: u32,
        flight: InFlight,
        immediate: u32,
    ) -> Result<u32, EfaError> {
        let (config, produced) =
            self.receive_cqs
                .get_mut(&target)
                .ok_or(EfaError::NoReceiveCq {
                    rank: target,
                    from: flight.rank,
                })?;
        let index = *produced;
        if let Some(address) = config.consumer_index_address {
            let bytes = memory
                .read(target, address, 8)
                .map_err(|error| EfaError::Memory(error.message))?;
            let consumed = u64::from_le_bytes(bytes.as_slice().try_into().map_err(|_| {
                EfaError::Memory(format!(
                    "rank {target}: a short read of the receive consumer"
                ))
            })?);
            if u64::from(index).saturating_sub(consumed) >= u64::from(config.entries) {
                return Err(EfaError::ReceiveCqOverrun {
                    rank: target,
                    from: flight.rank,
                    entries: config.entries,
                });
            }
        }
        // The responder's own handle for the requester, when it has one (0xFFFF: unknown).
        let source_ah = self
            .address_handles
            .iter()
            .find(|(key, rank)| key.0 == target && **rank == flight.rank)
            .map_or(0xFFFF, |(key, _)| key.1);
        let completion = RxCompletion::write_with_immediate(
            0,
            completion_queue_phase_of(index, config.entries),
            flight.write.dest_qp_num,
            flight.write.length_bytes as u16,
            source_ah,
            flight.qp_num,
            immediate,
        );
        let address =
            config.address + u64::from(index % config.entries) * RxCompletion::SIZE_BYTES as u64;
        memory
            .write(target, address, &completion.to_bytes())
            .map_err(|error| EfaError::Memory(error.message))?;
        *produced += 1;
        Ok(index)
    }

    /// The send completion at ring index `index` of queue pair `qp_num`'s CQ, if the device
    /// has written it in that index's lap (what a consumer polls).
    pub fn poll_send_completion(
        &self,
        memory: &impl NicMemory,
        rank: u32,
        qp_num: u16,
        index: u32,
    ) -> Result<Option<TxCompletion>, EfaError> {
        let queue = self
            .queue_pairs
            .get(&(rank, qp_num))
            .ok_or(EfaError::UnknownQueuePair { rank, qp_num })?;
        let entries = queue.config.cq_entries;
        let address =
            queue.config.cq_address + u64::from(index % entries) * TxCompletion::SIZE_BYTES as u64;
        let bytes = memory
            .read(rank, address, TxCompletion::SIZE_BYTES as u64)
            .map_err(|error| EfaError::Memory(error.message))?;
        let completion = TxCompletion::from_bytes(
            bytes
                .as_slice()
                .try_into()
                .map_err(|_| EfaError::Memory("a short CQ read".to_owned()))?,
        );
        Ok(completion
            .is_written_in(completion_queue_phase_of(index, entries))
            .then_some(completion))
    }
}
