//! What the ranks tell each other, and the tables built from it, with no CUDA call: the
//! records all-gathered through the bootstrap ([`PeerIdentity`] at `connect_all`, one
//! [`RegionRecord`] per region at `exchange_regions`), their byte encoding, and the pure
//! functions that turn gathered records into the device tables kernels read
//! ([`build_region_tables`], [`build_endpoint_handles`]).
//!
//! Mapping a peer's memory is the one step that needs the driver; [`build_region_tables`]
//! takes it as a closure (`crate::world` passes `cuIpcOpenMemHandle`, the tests a fake), so the
//! addressing rules are tested without a GPU: a p2p or proxy peer's region is seen at
//! `mapped base of the peer's allocation + the region's offset in it`, this rank's own regions
//! at their local address. This module uploads nothing and opens nothing.

use std::collections::BTreeMap;

use aboleth_abi::{EndpointHandle, LocalRegionDescriptor, RemoteRegionDescriptor, Transport};

use crate::error::{RuntimeError, RuntimeResult};

/// Bytes of a CUDA IPC memory handle (`CUipcMemHandle`).
pub const IPC_HANDLE_BYTES: usize = 64;

/// First byte of every record, bumped when an encoding changes, so mixed builds refuse each
/// other instead of misreading.
const RECORD_FORMAT_VERSION: u8 = 2;

/// Little-endian writer of the records.
#[derive(Default)]
struct RecordWriter {
    bytes: Vec<u8>,
}

impl RecordWriter {
    fn u32(&mut self, value: u32) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }
    fn u64(&mut self, value: u64) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }
    fn bytes(&mut self, value: &[u8]) {
        self.u32(u32::try_from(value.len()).expect("record fields are small"));
        self.bytes.extend_from_slice(value);
    }
}

/// Reader of the records; every read names what was short.
struct RecordReader<'a> {
    bytes: &'a [u8],
    rank: u32,
    what: &'static str,
}

impl<'a> RecordReader<'a> {
    fn new(bytes: &'a [u8], rank: u32, what: &'static str) -> RuntimeResult<Self> {
        let mut reader = Self { bytes, rank, what };
        let version = reader.take(1)?[0];
        if version != RECORD_FORMAT_VERSION {
            return Err(reader.malformed(format!(
                "format version {version}, this build reads {RECORD_FORMAT_VERSION}"
            )));
        }
        Ok(reader)
    }
    fn malformed(&self, reason: String) -> RuntimeError {
        RuntimeError::MalformedRecord {
            rank: self.rank,
            what: self.what,
            reason,
        }
    }
    fn take(&mut self, count: usize) -> RuntimeResult<&'a [u8]> {
        if self.bytes.len() < count {
            return Err(self.malformed(format!(
                "{count} more bytes expected, {} left",
                self.bytes.len()
            )));
        }
        let (head, tail) = self.bytes.split_at(count);
        self.bytes = tail;
        Ok(head)
    }
    fn u32(&mut self) -> RuntimeResult<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> RuntimeResult<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn bytes(&mut self) -> RuntimeResult<&'a [u8]> {
        let length = self.u32()? as usize;
        self.take(length)
    }
    fn string(&mut self) -> RuntimeResult<String> {
        let bytes = self.bytes()?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| self.malformed("a string is not UTF-8".into()))
    }
    fn finish(self) -> RuntimeResult<()> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(self.malformed(format!("{} trailing bytes", self.bytes.len())))
        }
    }
}

/// Who a rank is, as `connect_all` gathers it: where it runs and on which GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerIdentity {
    /// The rank.
    pub rank: u32,
    /// Identifies the operating-system instance: host name and boot id. Two ranks with the same
    /// value share a host (and can share GPU memory through CUDA IPC).
    pub host: String,
    /// Process id on that host.
    pub process_id: u32,
    /// The device ordinal the rank uses, in its own process's numbering.
    pub device_ordinal: i32,
    /// The device's PCI bus id (`0000:1b:00.0`), the same in every process of the host.
    pub device_pci_bus_id: String,
    /// The device's UUID.
    pub device_uuid: [u8; 16],
}

impl PeerIdentity {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = RecordWriter::default();
        writer.bytes.push(RECORD_FORMAT_VERSION);
        writer.u32(self.rank);
        writer.bytes(self.host.as_bytes());
        writer.u32(self.process_id);
        writer.u32(self.device_ordinal as u32);
        writer.bytes(self.device_pci_bus_id.as_bytes());
        writer.bytes(&self.device_uuid);
        writer.bytes
    }

    /// Reads the record `rank` sent.
    pub fn decode(bytes: &[u8], rank: u32) -> RuntimeResult<Self> {
        let mut reader = RecordReader::new(bytes, rank, "peer identity")?;
        let identity = Self {
            rank: reader.u32()?,
            host: reader.string()?,
            process_id: reader.u32()?,
            device_ordinal: reader.u32()? as i32,
            device_pci_bus_id: reader.string()?,
            device_uuid: reader
                .bytes()?
                .try_into()
                .map_err(|_| reader.malformed("the device UUID is not 16 bytes".into()))?,
        };
        if identity.rank != rank {
            return Err(reader.malformed(format!(
                "it claims rank {} at position {rank}",
                identity.rank
            )));
        }
        reader.finish()?;
        Ok(identity)
    }

    /// Whether `other` runs on the same host.
    pub fn same_host(&self, other: &Self) -> bool {
        self.host == other.host
    }

    /// Whether `other` is this very process (CUDA IPC cannot open a process's own handles).
    pub fn same_process(&self, other: &Self) -> bool {
        self.same_host(other) && self.process_id == other.process_id
    }
}

/// One region as its owner describes it at `exchange_regions`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionRecord {
    /// The region's name.
    pub name: String,
    /// Its first byte, in the owner's address space.
    pub address: u64,
    /// Its bytes.
    pub length_bytes: u64,
    /// Base of the CUDA allocation holding it, in the owner's address space.
    pub allocation_base: u64,
    /// Offset of its first byte from `allocation_base`.
    pub offset_in_allocation_bytes: u64,
    /// The allocation's CUDA IPC handle.
    pub ipc_handle: [u8; IPC_HANDLE_BYTES],
    /// Packet staging slots follow it ([`crate::Region::with_packet_slots`]).
    pub packet_slots: bool,
}

/// The bytes of one rank's region list, in exchange order.
pub fn encode_region_records(records: &[RegionRecord]) -> Vec<u8> {
    let mut writer = RecordWriter::default();
    writer.bytes.push(RECORD_FORMAT_VERSION);
    writer.u32(records.len() as u32);
    for record in records {
        writer.bytes(record.name.as_bytes());
        writer.u64(record.address);
        writer.u64(record.length_bytes);
        writer.u64(record.allocation_base);
        writer.u64(record.offset_in_allocation_bytes);
        writer.bytes(&record.ipc_handle);
        writer.u32(u32::from(record.packet_slots));
    }
    writer.bytes
}

/// Reads the region list `rank` sent.
pub fn decode_region_records(bytes: &[u8], rank: u32) -> RuntimeResult<Vec<RegionRecord>> {
    let mut reader = RecordReader::new(bytes, rank, "region list")?;
    let count = reader.u32()?;
    let mut records = Vec::new();
    for _ in 0..count {
        let name = reader.string()?;
        let address = reader.u64()?;
        let length_bytes = reader.u64()?;
        let allocation_base = reader.u64()?;
        let offset_in_allocation_bytes = reader.u64()?;
        let ipc_handle = reader
            .bytes()?
            .try_into()
            .map_err(|_| reader.malformed("an IPC handle is not 64 bytes".into()))?;
        let packet_slots = reader.u32()? != 0;
        records.push(RegionRecord {
            packet_slots,
            name,
            address,
            length_bytes,
            allocation_base,
            offset_in_allocation_bytes,
            ipc_handle,
        });
    }
    reader.finish()?;
    Ok(records)
}

/// Checks that every rank exchanged the same names in the same order: a region's index (its
/// position) is how proxy commands name it, so it must mean the same region everywhere.
pub fn check_region_lists(local_rank: u32, lists: &[Vec<RegionRecord>]) -> RuntimeResult<()> {
    let names = |list: &[RegionRecord]| {
        list.iter()
            .map(|record| record.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let own = &lists[local_rank as usize];
    for (other_rank, list) in lists.iter().enumerate() {
        let same = list.len() == own.len()
            && list
                .iter()
                .zip(own)
                .all(|(theirs, ours)| theirs.name == ours.name);
        if !same {
            return Err(RuntimeError::RegionListMismatch {
                rank: local_rank,
                rank_names: names(own),
                other_rank: other_rank as u32,
                other_names: names(list),
            });
        }
        if let Some((theirs, ours)) = list
            .iter()
            .zip(own)
            .find(|(theirs, ours)| theirs.packet_slots != ours.packet_slots)
        {
            let (rank, other_rank) = if ours.packet_slots {
                (local_rank, other_rank as u32)
            } else {
                (other_rank as u32, local_rank)
            };
            return Err(RuntimeError::PacketSlotsMismatch {
                name: theirs.name.clone(),
                rank,
                other_rank,
            });
        }
    }
    Ok(())
}

/// Checks that no region of `records` (one rank's list, in its own address space) lies in the
/// packet staging area after a flag region with packet slots: the peers' packets would land in it.
pub fn check_packet_staging_overlaps(records: &[RegionRecord]) -> RuntimeResult<()> {
    for flags in records.iter().filter(|record| record.packet_slots) {
        let start = flags.address + flags.length_bytes;
        let end = start + aboleth_abi::packet::staging_bytes(flags.length_bytes);
        if let Some(other) = records
            .iter()
            .find(|other| other.address < end && start < other.address + other.length_bytes)
        {
            return Err(RuntimeError::PacketSlotsOverlap {
                name: flags.name.clone(),
                start,
                end,
                other: other.name.clone(),
            });
        }
    }
    Ok(())
}

/// The region tables of one rank, in host memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionTables {
    /// Region names in exchange order (a region's index is its position).
    pub names: Vec<String>,
    /// `remote[region][rank]`: where this rank's GPU reaches `rank`'s copy of the region.
    pub remote: Vec<Vec<RemoteRegionDescriptor>>,
    /// This rank's own regions.
    pub local: Vec<LocalRegionDescriptor>,
}

/// Builds the region tables from every rank's list (indexed by rank, checked with
/// [`check_region_lists`]) and the transport to each rank. `map_allocation(peer, record)` maps
/// the peer's allocation holding `record` into this process and returns its base here; it is
/// called for p2p and proxy peers only (those this GPU reaches through mapped memory), and may be
/// called several times for one allocation (callers cache). The descriptors' `region_index`
/// (what proxy commands name) counts from `first_region_index`: the regions the World exchanged
/// before, so that every exchanged region keeps its own index in the proxy's table.
pub fn build_region_tables(
    local_rank: u32,
    transports: &[Transport],
    lists: &[Vec<RegionRecord>],
    first_region_index: u32,
    mut map_allocation: impl FnMut(u32, &RegionRecord) -> RuntimeResult<u64>,
) -> RuntimeResult<RegionTables> {
    check_region_lists(local_rank, lists)?;
    let own = &lists[local_rank as usize];
    let mut remote = vec![Vec::with_capacity(lists.len()); own.len()];
    for (peer, list) in lists.iter().enumerate() {
        let peer = peer as u32;
        let transport = transports[peer as usize];
        for (index, record) in list.iter().enumerate() {
            let base_address = if peer == local_rank {
                record.address
            } else {
                match transport {
                    Transport::P2p | Transport::Proxy => {
                        map_allocation(peer, record)? + record.offset_in_allocation_bytes
                    }
                    // Network transports address the peer's own virtual address.
                    Transport::Mlx5 | Transport::Efa | Transport::Ionic => record.address,
                }
            };
            remote[index].push(RemoteRegionDescriptor {
                base_address,
                length_bytes: record.length_bytes,
                rkey: 0,
                peer_rank: peer,
                transport: transport as u32
                    | if record.packet_slots {
                        aboleth_abi::region::REGION_FLAG_PACKET_SLOTS
                    } else {
                        0
                    },
                region_index: first_region_index + index as u32,
            });
        }
    }
    Ok(RegionTables {
        names: own.iter().map(|record| record.name.clone()).collect(),
        remote,
        local: own
            .iter()
            .map(|record| LocalRegionDescriptor {
                address: record.address,
                lkey: 0,
                reserved: 0,
            })
            .collect(),
    })
}

/// The p2p address delta of one peer: what a kernel adds to a local address to reach the peer's
/// copy (`EndpointHandle::peer_base_delta`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerBaseDelta {
    /// `remote[0][peer].base_address - local[0].address`, wrapping.
    pub delta: i64,
    /// Whether every region has that same delta. When false, only region 0 is symmetric and
    /// kernels must address the peer through the region descriptors, not the delta.
    pub uniform: bool,
}

/// The delta to each rank (0 and uniform for this rank, and when no region was exchanged). It
/// is one number per peer, so it holds for every region only when the regions lie at the same
/// offsets from one allocation on every rank (the seed's one-buffer layout).
pub fn peer_base_deltas(local_rank: u32, tables: &RegionTables) -> Vec<PeerBaseDelta> {
    let ranks = tables.remote.first().map_or(0, Vec::len);
    (0..ranks)
        .map(|peer| {
            if peer as u32 == local_rank {
                return PeerBaseDelta {
                    delta: 0,
                    uniform: true,
                };
            }
            let delta_of = |region: usize| {
                tables.remote[region][peer]
                    .base_address
                    .wrapping_sub(tables.local[region].address) as i64
            };
            let delta = delta_of(0);
            PeerBaseDelta {
                delta,
                uniform: (1..tables.local.len()).all(|region| delta_of(region) == delta),
            }
        })
        .collect()
}

/// Where a proxy ring is, for its endpoint handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProxyRingPlacement {
    /// The ring header's device address (host-pinned memory mapped for the GPU).
    pub device_address: u64,
    /// Its slots.
    pub capacity_entries: u32,
}

/// The endpoint handle of every rank, indexed by rank: p2p handles carry the peer base delta
/// (when no region was exchanged, 0), proxy handles their ring; this rank's own handle is p2p
/// with delta 0 (local memory is reached with plain stores). Fields of other transports stay
/// zero, as aboleth-abi requires.
pub fn build_endpoint_handles(
    local_rank: u32,
    transports: &[Transport],
    rings: &BTreeMap<u32, ProxyRingPlacement>,
    deltas: &[PeerBaseDelta],
) -> Vec<EndpointHandle> {
    transports
        .iter()
        .enumerate()
        .map(|(peer, &transport)| {
            let peer = peer as u32;
            let mut handle = EndpointHandle {
                transport: transport as u32,
                peer_rank: peer,
                local_rank,
                ..EndpointHandle::default()
            };
            match transport {
                Transport::P2p => {
                    handle.peer_base_delta = deltas.get(peer as usize).map_or(0, |d| d.delta);
                }
                Transport::Proxy => {
                    let ring = rings[&peer];
                    handle.proxy_ring_address = ring.device_address;
                    handle.proxy_ring_capacity_entries = ring.capacity_entries;
                }
                Transport::Mlx5 | Transport::Efa | Transport::Ionic => {}
            }
            handle
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn record(name: &str, address: u64, base: u64, handle_byte: u8) -> RegionRecord {
        RegionRecord {
            name: name.to_owned(),
            address,
            length_bytes: 256,
            allocation_base: base,
            offset_in_allocation_bytes: address - base,
            ipc_handle: [handle_byte; IPC_HANDLE_BYTES],
            packet_slots: name == "flags",
        }
    }

    /// Rank r's one allocation at 0x1000_0000 * (r + 1); regions at +0x100 and +0x300.
    fn lists(ranks: u32) -> Vec<Vec<RegionRecord>> {
        (0..ranks)
            .map(|rank| {
                let base = 0x1000_0000 * u64::from(rank + 1);
                vec![
                    record("recv", base + 0x100, base, rank as u8),
                    record("flags", base + 0x300, base, rank as u8),
                ]
            })
            .collect()
    }

    #[test]
    fn records_round_trip_and_refuse_garbage() {
        let identity = PeerIdentity {
            rank: 3,
            host: "node7/boot-1234".into(),
            process_id: 4242,
            device_ordinal: 1,
            device_pci_bus_id: "0000:1b:00.0".into(),
            device_uuid: [7; 16],
        };
        assert_eq!(
            PeerIdentity::decode(&identity.encode(), 3).unwrap(),
            identity
        );
        let error = PeerIdentity::decode(&identity.encode(), 2).unwrap_err();
        assert!(error.to_string().contains("claims rank 3"), "{error}");
        let mut truncated = identity.encode();
        truncated.pop();
        assert_eq!(
            PeerIdentity::decode(&truncated, 3).unwrap_err().kind(),
            ErrorKind::Runtime
        );
        let mut other_version = identity.encode();
        other_version[0] = 9;
        assert!(
            PeerIdentity::decode(&other_version, 3)
                .unwrap_err()
                .to_string()
                .contains("same Aboleth build")
        );

        let list = lists(2).remove(1);
        assert_eq!(
            decode_region_records(&encode_region_records(&list), 1).unwrap(),
            list
        );
        let mut trailing = encode_region_records(&list);
        trailing.push(0);
        assert!(decode_region_records(&trailing, 1).is_err());
    }

    #[test]
    fn packet_slots_may_not_overlap_another_region() {
        // flags at +0x300 (256 B, packet slots after it), recv at +0x100: apart.
        let mut list = lists(1).remove(0);
        check_packet_staging_overlaps(&list).unwrap();
        // recv moved right after flags: inside its staging area.
        list[0].address = list[1].address + 256;
        let error = check_packet_staging_overlaps(&list).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("the packet slots after region 'flags' ([0x10000400, "),
            "{error}"
        );
        assert!(
            error.to_string().contains("overlap region 'recv'"),
            "{error}"
        );
    }

    #[test]
    fn ranks_must_agree_on_packet_slots() {
        let mut lists = lists(3);
        lists[2][1].packet_slots = false;
        let error = check_region_lists(0, &lists).unwrap_err();
        assert_eq!(
            error.to_string(),
            "region 'flags' carries packet slots on rank 0 but not on rank 2: declare it the same way (world.region(..., packet_slots=True)) on every rank"
        );
        assert_eq!(error.kind(), ErrorKind::Value);
    }

    #[test]
    fn tables_address_peers_through_their_mapped_allocations() {
        let lists = lists(3);
        let transports = [Transport::P2p, Transport::P2p, Transport::Proxy];
        let mut mapped = Vec::new();
        // Rank 1's view: peers' allocations appear at 0xa000_0000 + peer * 0x100_0000.
        let tables = build_region_tables(1, &transports, &lists, 0, |peer, record| {
            mapped.push((peer, record.ipc_handle[0]));
            Ok(0xa000_0000 + u64::from(peer) * 0x100_0000)
        })
        .unwrap();
        assert_eq!(mapped, [(0, 0), (0, 0), (2, 2), (2, 2)]);
        assert_eq!(tables.names, ["recv", "flags"]);
        let recv = &tables.remote[0];
        assert_eq!(recv[0].base_address, 0xa000_0100);
        assert_eq!(
            recv[1].base_address, 0x2000_0100,
            "own region: local address"
        );
        assert_eq!(recv[2].base_address, 0xa200_0100);
        assert_eq!(tables.remote[1][2].base_address, 0xa200_0300);
        for (rank, descriptor) in recv.iter().enumerate() {
            assert_eq!(descriptor.peer_rank, rank as u32);
            assert_eq!(descriptor.length_bytes, 256);
            assert_eq!(descriptor.rkey, 0);
        }
        assert_eq!(recv[2].transport, Transport::Proxy as u32);
        // The flag region carries packet slots: its descriptors say so, beside the transport.
        for descriptor in &tables.remote[1] {
            assert!(descriptor.has_packet_slots());
            assert!(descriptor.decode_transport().is_ok());
        }
        assert!(recv.iter().all(|descriptor| !descriptor.has_packet_slots()));
        assert_eq!(tables.local[1].address, 0x2000_0300);
        assert_eq!(tables.local[1].lkey, 0);

        let deltas = peer_base_deltas(1, &tables);
        assert_eq!(
            deltas[0],
            PeerBaseDelta {
                delta: 0xa000_0100 - 0x2000_0100,
                uniform: true
            }
        );
        assert_eq!(deltas[1].delta, 0);

        let rings = BTreeMap::from([(
            2,
            ProxyRingPlacement {
                device_address: 0x7f00_0000_0000,
                capacity_entries: 1024,
            },
        )]);
        let handles = build_endpoint_handles(1, &transports, &rings, &deltas);
        assert_eq!(handles.len(), 3);
        for handle in &handles {
            assert_eq!(handle.local_rank, 1);
            handle.validate().unwrap();
        }
        assert_eq!(handles[0].peer_base_delta, 0x8000_0000);
        assert_eq!(handles[0].proxy_ring_address, 0);
        assert_eq!(handles[1].transport, Transport::P2p as u32);
        assert_eq!(handles[1].peer_base_delta, 0);
        assert_eq!(handles[2].transport, Transport::Proxy as u32);
        assert_eq!(handles[2].proxy_ring_address, 0x7f00_0000_0000);
        assert_eq!(handles[2].proxy_ring_capacity_entries, 1024);
        assert_eq!(handles[2].peer_base_delta, 0);
    }

    #[test]
    fn region_indices_count_from_the_regions_exchanged_before() {
        let transports = [Transport::P2p; 2];
        let tables =
            build_region_tables(1, &transports, &lists(2), 5, |_, _| Ok(0x9000_0000)).unwrap();
        for (index, per_rank) in tables.remote.iter().enumerate() {
            assert!(
                per_rank
                    .iter()
                    .all(|descriptor| descriptor.region_index == 5 + index as u32),
                "{per_rank:?}"
            );
        }
    }

    #[test]
    fn asymmetric_layouts_are_flagged_and_mismatched_lists_refused() {
        let mut lists = lists(2);
        lists[0][1].address += 8;
        lists[0][1].offset_in_allocation_bytes += 8;
        let transports = [Transport::P2p; 2];
        let tables =
            build_region_tables(1, &transports, &lists, 0, |_, _| Ok(0x9000_0000)).unwrap();
        assert!(!peer_base_deltas(1, &tables)[0].uniform);

        lists[0].swap(0, 1);
        let error = build_region_tables(1, &transports, &lists, 0, |_, _| Ok(0)).unwrap_err();
        assert_eq!(
            error.to_string(),
            "exchange_regions: rank 1 exchanged regions [recv, flags] but rank 0 exchanged [flags, recv]; every rank must exchange the same names in the same order (the order gives each region its index)"
        );
        let error = build_region_tables(1, &transports, &lists, 0, |_, _| {
            Err(RuntimeError::Closed { operation: "map" })
        });
        assert!(error.is_err());
    }
}
