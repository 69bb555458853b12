//! The host proxy thread of one rank: it polls one host-pinned command ring per peer and
//! executes the commands GPU threads wrote there (aboleth-abi's [`ProxyRingHeader`] followed by
//! [`ProxyRingEntry`] slots).
//!
//! What it models: a command for ticket `t` is consumed only when the ring's producer head
//! (`producer_head`, release-stored by the GPU after a batch) is above `t` and the slot's `sequence` equals `t + 1`, both as
//! visible in [`Memory`] (so a GPU store still in its [`crate::gpu_store_buffer`] is not seen);
//! commands of one ring run in ticket order, each to completion: put (copy-engine copy), signal
//! (SET or ADD of the peer's little-endian 8-byte word), put-signal (put, then signal), NOP and
//! drain (nothing to do, since every earlier command is already complete). After a command the
//! engine stores `consumer_head = t + 1`, and, when the command requests a completion,
//! `completion_counter = t + 1` (cumulative: in-order execution completes every earlier ticket).
//! A command that fails stops its ring, with a [`ProxyError`] naming rank, peer, ticket and fields.
//!
//! Region lookup: the engine holds a [`RegionTable`], the exchanged region table: for each region
//! index, one [`RemoteRegionDescriptor`] per rank, indexed by rank. A put's destination is
//! `table[destination_region_index][peer_rank].base_address + destination_offset_bytes`, bounds-
//! checked against the descriptor; a signal's word is found the same way.
//!
//! What it does not model: the ibverbs path (the proxy posting WQEs to a NIC), asynchronous copy
//! completion (a put is complete when its step returns), several proxy threads per rank, and the
//! GPU side's flow control (the GPU reads `consumer_head` itself).

use std::collections::BTreeMap;

use aboleth_abi::proxy::{
    ProxyCommand, ProxyDecodeError, ProxyPut, ProxyRegions, ProxySignal, SignalOperation,
    slot_index,
};
use aboleth_abi::{ProxyRingEntry, ProxyRingHeader, RemoteRegionDescriptor};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::cost_model::{CostModel, SimulatedNanoseconds};
use crate::memory::{Memory, MemoryError, MemoryKind};

/// Offset of `producer_head` in the ring header.
pub const PRODUCER_HEAD_OFFSET_BYTES: u64 = ProxyRingHeader::PRODUCER_HEAD_OFFSET_BYTES;
const CONSUMER_HEAD_OFFSET_BYTES: u64 = ProxyRingHeader::CONSUMER_HEAD_OFFSET_BYTES;
const COMPLETION_COUNTER_OFFSET_BYTES: u64 = ProxyRingHeader::COMPLETION_COUNTER_OFFSET_BYTES;

/// The exchanged region table: for each region index, one descriptor per rank (indexed by rank).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegionTable {
    regions: BTreeMap<u32, Vec<RemoteRegionDescriptor>>,
}

impl RegionTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) region `region_index`, with `descriptors_by_rank[r]` describing it on
    /// rank `r`.
    pub fn insert(&mut self, region_index: u32, descriptors_by_rank: Vec<RemoteRegionDescriptor>) {
        self.regions.insert(region_index, descriptors_by_rank);
    }
}

impl ProxyRegions for RegionTable {
    type Error = ProxyFailure;

    fn descriptor(
        &self,
        _what: &'static str,
        region_index: u32,
        peer_rank: u32,
    ) -> Result<&RemoteRegionDescriptor, ProxyFailure> {
        let descriptor = self
            .regions
            .get(&region_index)
            .and_then(|by_rank| by_rank.get(peer_rank as usize))
            .ok_or(ProxyFailure::UnknownRegion {
                region_index,
                peer_rank,
            })?;
        if descriptor.peer_rank != peer_rank {
            return Err(ProxyFailure::DescriptorForWrongRank {
                region_index,
                peer_rank,
                descriptor_rank: descriptor.peer_rank,
            });
        }
        Ok(descriptor)
    }

    fn out_of_bounds(
        &self,
        _what: &'static str,
        region_index: u32,
        offset_bytes: u64,
        length_bytes: u64,
        region_length_bytes: u64,
    ) -> ProxyFailure {
        ProxyFailure::RegionOutOfBounds {
            region_index,
            offset_bytes,
            length_bytes,
            region_length_bytes,
        }
    }

    fn misaligned_signal(&self, address: u64) -> ProxyFailure {
        ProxyFailure::MisalignedSignal { address }
    }

    fn wrong_peer(&self, _ring_peer_rank: u32, entry_peer_rank: u32) -> ProxyFailure {
        ProxyFailure::WrongPeer { entry_peer_rank }
    }
}

/// Why one command failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProxyFailure {
    /// The slot does not decode (bad opcode or flags).
    #[error("{0}")]
    Decode(#[from] ProxyDecodeError),
    /// The entry's `peer_rank` is not the ring's peer.
    #[error("entry names peer rank {entry_peer_rank} but the ring belongs to another peer")]
    WrongPeer {
        /// The rank in the entry.
        entry_peer_rank: u32,
    },
    /// No such region, or no descriptor for this peer.
    #[error("region {region_index} has no descriptor for rank {peer_rank}")]
    UnknownRegion {
        /// Region index.
        region_index: u32,
        /// Peer.
        peer_rank: u32,
    },
    /// The descriptor at the peer's position describes another rank.
    #[error(
        "region {region_index}'s descriptor for rank {peer_rank} points into rank {descriptor_rank}"
    )]
    DescriptorForWrongRank {
        /// Region index.
        region_index: u32,
        /// Peer.
        peer_rank: u32,
        /// The descriptor's `peer_rank`.
        descriptor_rank: u32,
    },
    /// The range runs past the region.
    #[error(
        "{length_bytes} B at offset {offset_bytes:#x} of region {region_index} run past its {region_length_bytes} B"
    )]
    RegionOutOfBounds {
        /// Region index.
        region_index: u32,
        /// Offset.
        offset_bytes: u64,
        /// Length.
        length_bytes: u64,
        /// The region's length.
        region_length_bytes: u64,
    },
    /// The signal word is not 8-byte aligned.
    #[error("signal word at {address:#x} is not 8-byte aligned")]
    MisalignedSignal {
        /// The word's address on the peer.
        address: u64,
    },
    /// The source cannot be read (bad key, out of bounds, unmapped).
    #[error("source: {0}")]
    Source(MemoryError),
    /// The destination cannot be written.
    #[error("destination: {0}")]
    Destination(MemoryError),
}

/// Errors of the proxy model: ring set-up, unreadable rings, and failed commands.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProxyError {
    /// The ring cannot be registered.
    #[error("rank {rank}: proxy ring to peer {peer_rank} at {ring_address:#x}: {reason}")]
    InvalidRing {
        /// Rank.
        rank: u32,
        /// Peer.
        peer_rank: u32,
        /// Ring address.
        ring_address: u64,
        /// What is wrong.
        reason: String,
    },
    /// The ring's header or slots cannot be read or written.
    #[error("rank {rank}: proxy ring to peer {peer_rank}: {source}")]
    RingMemory {
        /// Rank.
        rank: u32,
        /// Peer.
        peer_rank: u32,
        /// The memory error.
        source: MemoryError,
    },
    /// A command failed; its ring is stopped.
    #[error("rank {rank}: proxy ring to peer {peer_rank}, ticket {ticket} ({entry}): {reason}")]
    CommandFailed {
        /// Rank.
        rank: u32,
        /// Peer.
        peer_rank: u32,
        /// Ticket of the command.
        ticket: u64,
        /// The entry's fields, for the message.
        entry: String,
        /// Why it failed.
        reason: ProxyFailure,
    },
}

/// One executed command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyEvent {
    /// The proxy's rank.
    pub rank: u32,
    /// The ring's peer.
    pub peer_rank: u32,
    /// The decoded command (its ticket included).
    pub command: ProxyCommand,
    /// The value stored to `completion_counter`, if the command requested a completion.
    pub completion_counter: Option<u64>,
    /// Simulated time of this step.
    pub cost: SimulatedNanoseconds,
}

#[derive(Clone, Debug)]
struct ProxyRing {
    ring_address: u64,
    capacity_entries: u32,
    next_ticket: u64,
    stopped: Option<String>,
}

/// The proxy thread of one rank.
#[derive(Clone, Debug)]
pub struct ProxyEngine {
    rank: u32,
    regions: RegionTable,
    cost_model: CostModel,
    /// Keyed by peer rank.
    rings: BTreeMap<u32, ProxyRing>,
}

fn describe_entry(entry: &ProxyRingEntry) -> String {
    format!(
        "sequence {} opcode {} flags {:#x} peer {} source {:#x} key {:#x} length {} -> region {} +{:#x}; signal region {} +{:#x} value {}",
        entry.sequence,
        entry.opcode,
        entry.flags,
        entry.peer_rank,
        entry.source_address,
        entry.source_key,
        entry.length_bytes,
        entry.destination_region_index,
        entry.destination_offset_bytes,
        entry.signal_region_index,
        entry.signal_offset_bytes,
        entry.signal_value
    )
}

impl ProxyEngine {
    /// The proxy of `rank`, resolving destinations through `regions`.
    pub fn new(rank: u32, regions: RegionTable, cost_model: CostModel) -> Self {
        Self {
            rank,
            regions,
            cost_model,
            rings: BTreeMap::new(),
        }
    }

    /// The rank this proxy serves.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Registers the ring to `peer_rank` at `ring_address` (host-pinned, on this rank, holding the
    /// header and `capacity_entries` slots) and writes a fresh header into it.
    pub fn register_ring(
        &mut self,
        memory: &mut Memory,
        peer_rank: u32,
        ring_address: u64,
        capacity_entries: u32,
    ) -> Result<(), ProxyError> {
        let invalid = |reason: String| ProxyError::InvalidRing {
            rank: self.rank,
            peer_rank,
            ring_address,
            reason,
        };
        if self.rings.contains_key(&peer_rank) {
            return Err(invalid(
                "a ring to this peer is already registered".to_owned(),
            ));
        }
        let header =
            ProxyRingHeader::new(capacity_entries).map_err(|error| invalid(error.to_string()))?;
        memory
            .check_mapped(self.rank, ring_address, header.ring_total_bytes() as u64)
            .map_err(|error| invalid(error.to_string()))?;
        if memory.allocation_kind(self.rank, ring_address) != Some(MemoryKind::HostPinned) {
            return Err(invalid("the ring is not in host-pinned memory".to_owned()));
        }
        memory
            .write(self.rank, ring_address, &header.to_bytes())
            .map_err(|error| invalid(error.to_string()))?;
        self.rings.insert(
            peer_rank,
            ProxyRing {
                ring_address,
                capacity_entries,
                next_ticket: 0,
                stopped: None,
            },
        );
        Ok(())
    }

    fn ring_memory_error(&self, peer_rank: u32) -> impl Fn(MemoryError) -> ProxyError {
        let rank = self.rank;
        move |source| ProxyError::RingMemory {
            rank,
            peer_rank,
            source,
        }
    }

    /// The entry for the ring's next ticket, if the producer head and its sequence both show it.
    fn ready_entry(
        &self,
        memory: &Memory,
        peer_rank: u32,
        ring: &ProxyRing,
    ) -> Result<Option<ProxyRingEntry>, ProxyError> {
        if ring.stopped.is_some() {
            return Ok(None);
        }
        let producer_head = memory
            .read_u64(self.rank, ring.ring_address + PRODUCER_HEAD_OFFSET_BYTES)
            .map_err(self.ring_memory_error(peer_rank))?;
        if producer_head <= ring.next_ticket {
            return Ok(None);
        }
        let slot = slot_index(ring.next_ticket, ring.capacity_entries) as u64;
        let address = ring.ring_address
            + ProxyRingHeader::ENTRIES_OFFSET_BYTES as u64
            + slot * ProxyRingEntry::SIZE_BYTES as u64;
        let bytes = memory
            .read(self.rank, address, ProxyRingEntry::SIZE_BYTES as u64)
            .map_err(self.ring_memory_error(peer_rank))?;
        let entry = ProxyRingEntry::from_bytes(&bytes.try_into().expect("64 bytes"));
        // The head may be visible before the slot's last store: wait for the sequence.
        Ok(entry
            .is_filled_for_ticket(ring.next_ticket)
            .then_some(entry))
    }

    /// Whether some ring's producer head is ahead of the proxy, ready or not (a ring whose next
    /// slot is not yet visible still counts: the GPU has promised it).
    pub fn pending_work(&self, memory: &Memory) -> bool {
        self.rings.iter().any(|(_, ring)| {
            ring.stopped.is_none()
                && memory
                    .read_u64(self.rank, ring.ring_address + PRODUCER_HEAD_OFFSET_BYTES)
                    .is_ok_and(|producer_head| producer_head > ring.next_ticket)
        })
    }

    /// Executes the next command of one ring chosen by `rng` among the ready ones. `None` when no
    /// ring has a visible command.
    pub fn step(
        &mut self,
        memory: &mut Memory,
        rng: &mut ChaCha8Rng,
    ) -> Result<Option<ProxyEvent>, ProxyError> {
        let mut ready = Vec::new();
        for (&peer_rank, ring) in &self.rings {
            if let Some(entry) = self.ready_entry(memory, peer_rank, ring)? {
                ready.push((peer_rank, entry));
            }
        }
        if ready.is_empty() {
            return Ok(None);
        }
        let (peer_rank, entry) = ready.swap_remove(rng.random_range(0..ready.len()));
        let ticket = self.rings[&peer_rank].next_ticket;
        let mut cost = self.cost_model.proxy_entry_handling();
        let result = entry
            .decode()
            .map_err(ProxyFailure::from)
            .and_then(|command| {
                self.execute(memory, peer_rank, &command, &mut cost)?;
                Ok(command)
            });
        let command = match result {
            Ok(command) => command,
            Err(reason) => {
                let entry = describe_entry(&entry);
                let ring = self.rings.get_mut(&peer_rank).expect("ready ring");
                ring.stopped = Some(format!("ticket {ticket}: {reason}"));
                return Err(ProxyError::CommandFailed {
                    rank: self.rank,
                    peer_rank,
                    ticket,
                    entry,
                    reason,
                });
            }
        };
        let ring_address = self.rings[&peer_rank].ring_address;
        memory
            .write_u64(
                self.rank,
                ring_address + CONSUMER_HEAD_OFFSET_BYTES,
                ticket + 1,
            )
            .map_err(self.ring_memory_error(peer_rank))?;
        let completion_counter = command.completion_requested.then_some(ticket + 1);
        if let Some(value) = completion_counter {
            memory
                .write_u64(
                    self.rank,
                    ring_address + COMPLETION_COUNTER_OFFSET_BYTES,
                    value,
                )
                .map_err(self.ring_memory_error(peer_rank))?;
            cost += self.cost_model.host_store_to_device();
        }
        self.rings
            .get_mut(&peer_rank)
            .expect("ready ring")
            .next_ticket = ticket + 1;
        Ok(Some(ProxyEvent {
            rank: self.rank,
            peer_rank,
            command,
            completion_counter,
            cost,
        }))
    }

    fn execute(
        &self,
        memory: &mut Memory,
        peer_rank: u32,
        command: &ProxyCommand,
        cost: &mut SimulatedNanoseconds,
    ) -> Result<(), ProxyFailure> {
        self.regions.check_peer(command, peer_rank)?;
        let (put, signal) = command.operation.parts();
        if let Some(put) = put {
            self.put(memory, peer_rank, put, cost)?;
        }
        if let Some(signal) = signal {
            self.signal(memory, peer_rank, signal, cost)?;
        }
        Ok(())
    }

    /// A copy-engine copy. `source_key` 0 is the copy-engine convention of aboleth-abi (no
    /// registration needed: only mapping is checked); any other key must be a valid lkey of this
    /// rank covering the source, as on the ibverbs path.
    fn put(
        &self,
        memory: &mut Memory,
        peer_rank: u32,
        put: &ProxyPut,
        cost: &mut SimulatedNanoseconds,
    ) -> Result<(), ProxyFailure> {
        let length = put.length_bytes;
        let destination = self.regions.put_destination(put, peer_rank)?;
        if put.source_key == 0 {
            memory.check_mapped(self.rank, put.source_address, length)
        } else {
            memory.check_local_key(self.rank, put.source_key, put.source_address, length)
        }
        .map_err(ProxyFailure::Source)?;
        let data = memory
            .read(self.rank, put.source_address, length)
            .map_err(ProxyFailure::Source)?;
        memory
            .write(peer_rank, destination, &data)
            .map_err(ProxyFailure::Destination)?;
        *cost += self.cost_model.copy_engine_copy(length);
        Ok(())
    }

    fn signal(
        &self,
        memory: &mut Memory,
        peer_rank: u32,
        signal: &ProxySignal,
        cost: &mut SimulatedNanoseconds,
    ) -> Result<(), ProxyFailure> {
        let address = self.regions.signal_address(signal, peer_rank)?;
        let value = match signal.operation {
            SignalOperation::Set => signal.value,
            SignalOperation::Add => memory
                .read_u64(peer_rank, address)
                .map_err(ProxyFailure::Destination)?
                .wrapping_add(signal.value),
        };
        memory
            .write_u64(peer_rank, address, value)
            .map_err(ProxyFailure::Destination)?;
        *cost += self.cost_model.host_store_to_device();
        Ok(())
    }

    /// One line per ring for deadlock reports: tickets consumed, producer head, stop reason.
    pub fn describe_rings(&self, memory: &Memory) -> String {
        let mut lines = Vec::new();
        for (&peer_rank, ring) in &self.rings {
            let producer_head = memory
                .read_u64(self.rank, ring.ring_address + PRODUCER_HEAD_OFFSET_BYTES)
                .map_or_else(|error| error.to_string(), |head| head.to_string());
            let waiting = match self.ready_entry(memory, peer_rank, ring) {
                Ok(Some(_)) => "next entry ready",
                Ok(None) => "next entry not visible or none",
                Err(_) => "ring unreadable",
            };
            lines.push(format!(
                "rank {} proxy ring to peer {peer_rank} ({} slots): consumed {} ticket(s), producer head {producer_head}, {waiting}{}",
                self.rank,
                ring.capacity_entries,
                ring.next_ticket,
                ring.stopped
                    .as_ref()
                    .map_or(String::new(), |reason| format!(", STOPPED at {reason}")),
            ));
        }
        lines.join("\n")
    }
}
