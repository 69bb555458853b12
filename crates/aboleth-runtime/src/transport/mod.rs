//! Choosing how this rank reaches each peer ([`choose_transports`], from the gathered
//! [`PeerIdentity`] records and what the driver says about peer access), and the transports'
//! own modules: [`p2p`] (peer memory through CUDA IPC), [`proxy`] (host-pinned command rings
//! executed by a host thread with the copy engine) and [`soft_rdma`] (mlx5 and, experimentally,
//! Ionic queues executed by the software NIC, when [`SOFT_NIC_ENVIRONMENT_VARIABLE`]`=soft`).
//! RDMA devices are only detected here ([`rdma_devices`]): on a real NIC, rdma is refused with
//! the reason; efa, and ionic without the software NIC, which have no runtime on a device yet,
//! are refused with what [`provider_discovery`] found of their devices and libraries.
//!
//! Transports are chosen per direction: the transport to a peer says how this rank writes into
//! the peer's memory; the peer may choose differently for the way back. This module maps and
//! allocates nothing.

pub mod p2p;
pub mod provider_discovery;
pub mod proxy;
pub mod soft_rdma;

use std::path::Path;

use aboleth_abi::Transport;

use crate::error::{RuntimeError, RuntimeResult};
use crate::exchange::PeerIdentity;

/// The experimental provider transports `connect_all` knows by name: without a runtime yet,
/// each is refused with what [`provider_discovery::discover`] found.
pub const PROVIDER_TRANSPORTS: [Transport; 2] = [Transport::Efa, Transport::Ionic];

/// What `connect_all` is asked for: one transport to every peer, or `auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportRequest {
    /// This transport to every peer (this rank's own entry is still p2p). A transport without a
    /// runtime yet (mlx5) is refused with the reason.
    Only(Transport),
    /// Per peer: p2p where this GPU can access the peer's, proxy for the other peers of this
    /// host, RDMA for peers on other hosts.
    Auto,
}

impl TransportRequest {
    /// The names `connect_all` accepts: the runtime name ([`Transport::runtime_name`]) of every
    /// transport with a device library, the experimental providers (`"efa"`, `"ionic"`: refused
    /// with what was found), then `"auto"`; a transport's own name (`"mlx5"`) is accepted too.
    pub fn names() -> Vec<&'static str> {
        Transport::DEVICE_LIBRARY
            .into_iter()
            .chain(PROVIDER_TRANSPORTS)
            .map(Transport::runtime_name)
            .chain(["auto"])
            .collect()
    }

    /// Parses one of [`TransportRequest::names`] (the Python API's strings).
    pub fn parse(name: &str) -> RuntimeResult<Self> {
        if name == "auto" {
            return Ok(Self::Auto);
        }
        match Transport::from_runtime_name(name) {
            Some(transport)
                if transport.has_device_library() || PROVIDER_TRANSPORTS.contains(&transport) =>
            {
                Ok(Self::Only(transport))
            }
            _ => Err(RuntimeError::UnknownTransport {
                name: name.to_owned(),
                expected: TransportRequest::names()
                    .iter()
                    .map(|name| format!("{name:?}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }
}

/// Whether this rank's GPU can load and store another GPU's memory directly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerAccess {
    /// The peer uses this same GPU.
    SameDevice,
    /// `cuDeviceCanAccessPeer` says yes.
    Yes,
    /// `cuDeviceCanAccessPeer` says no.
    No,
    /// The peer's GPU is not visible in this process (CUDA_VISIBLE_DEVICES), so access cannot be
    /// checked here.
    DeviceNotVisible,
}

/// Names the transports, for messages.
pub fn describe_transports(transports: &[Transport]) -> String {
    transports
        .iter()
        .enumerate()
        .map(|(rank, transport)| format!("{rank}: {transport:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The transport to every rank (this rank's own entry is p2p: local memory is reached with
/// plain stores). `peer_access(identity)` is asked only for peers on this host;
/// `rdma_devices` is the list [`rdma_devices`] found. Errors name the peer and what to change.
pub fn choose_transports(
    request: TransportRequest,
    local_rank: u32,
    identities: &[PeerIdentity],
    mut peer_access: impl FnMut(&PeerIdentity) -> PeerAccess,
    rdma_devices: &RdmaDevices,
) -> RuntimeResult<Vec<Transport>> {
    let choice = match request {
        // The software NIC runs the mlx5 and Ionic transports between processes of one host.
        TransportRequest::Only(transport @ (Transport::Mlx5 | Transport::Ionic))
            if rdma_devices.software_nic =>
        {
            Some(transport)
        }
        TransportRequest::Only(transport) if !transport.has_runtime() => {
            return Err(rdma_devices.unavailable_error());
        }
        TransportRequest::Only(transport) => Some(transport),
        TransportRequest::Auto => None,
    };
    let own = &identities[local_rank as usize];
    let unreachable =
        |peer: &PeerIdentity, transport, reason: String| RuntimeError::PeerUnreachable {
            rank: local_rank,
            peer_rank: peer.rank,
            transport,
            reason,
        };
    let mut transports = Vec::with_capacity(identities.len());
    for peer in identities {
        if peer.rank == local_rank {
            transports.push(Transport::P2p);
            continue;
        }
        let wanted = match choice {
            Some(transport @ (Transport::P2p | Transport::Mlx5 | Transport::Ionic)) => transport,
            _ => Transport::Proxy,
        };
        let soft_nic = matches!(wanted, Transport::Mlx5 | Transport::Ionic);
        if soft_nic && !own.same_host(peer) {
            let reason = format!(
                "it runs on another host ({}, this rank on {}), and the software NIC ({SOFT_NIC_ENVIRONMENT_VARIABLE}=soft) reaches peers of its own host only, through CUDA IPC; a NIC between hosts needs an RDMA device",
                peer.host, own.host
            );
            return Err(unreachable(peer, wanted, reason));
        }
        if !own.same_host(peer) {
            let reason = format!(
                "it runs on another host ({}, this rank on {}); only the rdma transport crosses hosts, and {}",
                peer.host,
                own.host,
                rdma_devices.unavailable_error()
            );
            return Err(unreachable(peer, wanted, reason));
        }
        if own.same_process(peer) {
            let reason = "both ranks run in one process, and CUDA IPC shares memory only between processes; start one process per rank".to_owned();
            return Err(unreachable(peer, wanted, reason));
        }
        let access = peer_access(peer);
        if soft_nic {
            // The software NIC copies with the copy engine, but its atomics are a kernel that
            // dereferences the peer's CUDA IPC mapping: without peer access that kernel would
            // fault and take the process's CUDA context with it.
            if matches!(access, PeerAccess::No) {
                let reason = format!(
                    "the software NIC's atomics need this GPU ({}) to access the peer's ({}), and cuDeviceCanAccessPeer = 0; use \"proxy\"",
                    own.device_pci_bus_id, peer.device_pci_bus_id
                );
                return Err(unreachable(peer, wanted, reason));
            }
            transports.push(wanted);
            continue;
        }
        let transport = match (choice, access) {
            (Some(Transport::P2p), PeerAccess::No) => {
                let reason = format!(
                    "this GPU ({}) cannot access the peer's GPU ({}) (cuDeviceCanAccessPeer = 0: no NVLink or PCIe peer path); use \"proxy\" or \"auto\"",
                    own.device_pci_bus_id, peer.device_pci_bus_id
                );
                return Err(unreachable(peer, Transport::P2p, reason));
            }
            (Some(Transport::P2p), PeerAccess::DeviceNotVisible) => {
                tracing::warn!(
                    rank = local_rank,
                    peer = peer.rank,
                    peer_device = %peer.device_pci_bus_id,
                    "the peer's GPU is not visible in this process, so p2p access cannot be checked; mapping its memory will tell (make every GPU of the host visible to every rank to check it here)"
                );
                Transport::P2p
            }
            (Some(Transport::P2p), _) => Transport::P2p,
            (Some(Transport::Proxy), _) => Transport::Proxy,
            (None, PeerAccess::SameDevice | PeerAccess::Yes) => Transport::P2p,
            (None, PeerAccess::No | PeerAccess::DeviceNotVisible) => {
                tracing::info!(
                    rank = local_rank,
                    peer = peer.rank,
                    ?access,
                    "auto: the proxy (copy engine) reaches this peer, since peer access is not available or cannot be checked"
                );
                Transport::Proxy
            }
            (Some(transport), _) => unreachable!("{transport} has no runtime: refused above"),
        };
        transports.push(transport);
    }
    Ok(transports)
}

/// The RDMA devices of this machine, as the kernel lists them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RdmaDevices {
    /// Where they were looked for.
    pub sysfs_directory: String,
    /// Device names (`mlx5_0`, `rxe0`, ...); `None` when the directory does not exist.
    pub names: Option<Vec<String>>,
    /// Whether the environment asks for the software NIC
    /// ([`SOFT_NIC_ENVIRONMENT_VARIABLE`]`=soft`): `"rdma"` then runs mlx5 over it.
    pub software_nic: bool,
}

/// The environment variable that selects the RDMA device: `soft` runs the mlx5 transport over the
/// software NIC (`crate::soft_nic`) between processes of one host.
pub const SOFT_NIC_ENVIRONMENT_VARIABLE: &str = "ABOLETH_RDMA_DEVICE";

impl RdmaDevices {
    /// The error `connect_all("rdma")` gives on this machine: no device, no mlx5 device, or (with
    /// one) the mlx5 transport's setup, which this runtime does not have yet.
    pub fn unavailable_error(&self) -> RuntimeError {
        let directory = &self.sysfs_directory;
        let reason = match &self.names {
            None => format!(
                "{directory} does not exist: the kernel has no RDMA device (an mlx5 NIC — ConnectX — with the mlx5_ib driver loaded is needed); use \"p2p\" or \"proxy\" between GPUs of one host"
            ),
            Some(names) if names.is_empty() => format!(
                "{directory} is empty: no RDMA device (an mlx5 NIC — ConnectX — with the mlx5_ib driver loaded is needed); use \"p2p\" or \"proxy\" between GPUs of one host"
            ),
            Some(names) if !names.iter().any(|name| name.starts_with("mlx5")) => format!(
                "RDMA devices [{}] were found in {directory} but none is mlx5 (a ConnectX NIC); GPU-initiated RDMA writes mlx5 work queue entries",
                names.join(", ")
            ),
            Some(names) => format!(
                "mlx5 devices [{}] were found, but this runtime cannot set up the mlx5 transport yet (queue pairs, UAR mapping); use \"p2p\" or \"proxy\" between GPUs of one host",
                names
                    .iter()
                    .filter(|name| name.starts_with("mlx5"))
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let reason = format!(
            "{reason} (on one host, {SOFT_NIC_ENVIRONMENT_VARIABLE}=soft runs it over the software NIC)"
        );
        RuntimeError::RdmaUnavailable { reason }
    }
}

/// Lists `/sys/class/infiniband`, where the kernel shows every RDMA device (what
/// `ibv_get_device_list` reads), without loading libibverbs.
pub fn rdma_devices() -> RuntimeResult<RdmaDevices> {
    let mut devices = rdma_devices_in(Path::new("/sys/class/infiniband"));
    devices.software_nic = match std::env::var(SOFT_NIC_ENVIRONMENT_VARIABLE) {
        Err(_) => false,
        Ok(value) if value.trim() == "soft" => true,
        Ok(value) => {
            return Err(RuntimeError::InvalidEnvironment {
                variable: SOFT_NIC_ENVIRONMENT_VARIABLE,
                value,
                expected: "soft (the software NIC), or unset",
            });
        }
    };
    Ok(devices)
}

/// [`rdma_devices`] over another directory (tests).
pub fn rdma_devices_in(directory: &Path) -> RdmaDevices {
    let names = std::fs::read_dir(directory).ok().map(|entries| {
        let mut names: Vec<String> = entries
            .filter_map(|entry| entry.ok())
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    });
    RdmaDevices {
        sysfs_directory: directory.display().to_string(),
        names,
        software_nic: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn identity(rank: u32, host: &str, process_id: u32) -> PeerIdentity {
        PeerIdentity {
            rank,
            host: host.to_owned(),
            process_id,
            device_ordinal: rank as i32,
            device_pci_bus_id: format!("0000:{:02x}:00.0", rank + 0x10),
            device_uuid: [rank as u8; 16],
        }
    }

    fn no_rdma() -> RdmaDevices {
        RdmaDevices {
            sysfs_directory: "/sys/class/infiniband".into(),
            names: None,
            software_nic: false,
        }
    }

    #[test]
    fn transports_follow_the_choice_and_peer_access() {
        let identities = [
            identity(0, "a", 10),
            identity(1, "a", 11),
            identity(2, "a", 12),
        ];
        let access = |peer: &PeerIdentity| match peer.rank {
            0 => PeerAccess::Yes,
            _ => PeerAccess::No,
        };
        let auto =
            choose_transports(TransportRequest::Auto, 1, &identities, access, &no_rdma()).unwrap();
        assert_eq!(auto, [Transport::P2p, Transport::P2p, Transport::Proxy]);
        let proxy = choose_transports(
            TransportRequest::Only(Transport::Proxy),
            1,
            &identities,
            access,
            &no_rdma(),
        )
        .unwrap();
        assert_eq!(proxy, [Transport::Proxy, Transport::P2p, Transport::Proxy]);
        let error = choose_transports(
            TransportRequest::Only(Transport::P2p),
            1,
            &identities,
            access,
            &no_rdma(),
        )
        .unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("rank 1 cannot reach rank 2 with P2p: this GPU (0000:11:00.0) cannot access the peer's GPU (0000:12:00.0)"),
            "{error}"
        );
        let not_visible = |_: &PeerIdentity| PeerAccess::DeviceNotVisible;
        assert_eq!(
            choose_transports(
                TransportRequest::Only(Transport::P2p),
                0,
                &identities,
                not_visible,
                &no_rdma()
            )
            .unwrap(),
            [Transport::P2p; 3]
        );
        assert_eq!(
            choose_transports(
                TransportRequest::Auto,
                0,
                &identities,
                not_visible,
                &no_rdma()
            )
            .unwrap()[1],
            Transport::Proxy
        );
    }

    #[test]
    fn other_hosts_and_shared_processes_are_refused() {
        let identities = [identity(0, "a", 10), identity(1, "b", 10)];
        let error = choose_transports(
            TransportRequest::Auto,
            0,
            &identities,
            |_| PeerAccess::Yes,
            &no_rdma(),
        )
        .unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains("another host (b, this rank on a)"),
            "{message}"
        );
        assert!(
            message.contains("/sys/class/infiniband does not exist"),
            "{message}"
        );
        let identities = [identity(0, "a", 10), identity(1, "a", 10)];
        let error = choose_transports(
            TransportRequest::Only(Transport::P2p),
            0,
            &identities,
            |_| PeerAccess::SameDevice,
            &no_rdma(),
        )
        .unwrap_err();
        assert!(error.to_string().contains("one process"), "{error}");
    }

    #[test]
    fn rdma_is_refused_with_what_is_missing() {
        let identities = [identity(0, "a", 10)];
        let error = choose_transports(
            TransportRequest::Only(Transport::Mlx5),
            0,
            &identities,
            |_| PeerAccess::Yes,
            &no_rdma(),
        )
        .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Runtime);
        assert!(error.to_string().contains("no RDMA device"), "{error}");
        let directory = std::env::temp_dir().join(format!("aboleth-ib-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        let devices = rdma_devices_in(&directory);
        assert_eq!(devices.names, Some(vec![]));
        assert!(devices.unavailable_error().to_string().contains("is empty"));
        std::fs::create_dir_all(directory.join("rxe0")).unwrap();
        let message = rdma_devices_in(&directory).unavailable_error().to_string();
        assert!(
            message.contains("[rxe0]") && message.contains("none is mlx5"),
            "{message}"
        );
        std::fs::create_dir_all(directory.join("mlx5_0")).unwrap();
        let message = rdma_devices_in(&directory).unavailable_error().to_string();
        assert!(message.contains("mlx5 devices [mlx5_0]"), "{message}");
        std::fs::remove_dir_all(&directory).unwrap();
        assert_eq!(
            TransportRequest::parse("nvlink").unwrap_err().to_string(),
            "unknown transport \"nvlink\": expected one of \"rdma\", \"proxy\", \"p2p\", \"efa\", \"ionic\", \"auto\""
        );
        assert_eq!(
            TransportRequest::parse("efa").unwrap(),
            TransportRequest::Only(Transport::Efa)
        );
        assert_eq!(
            TransportRequest::parse("auto").unwrap(),
            TransportRequest::Auto
        );
    }

    #[test]
    fn the_software_nic_serves_rdma_between_processes_of_one_host_only() {
        let software = RdmaDevices {
            software_nic: true,
            ..no_rdma()
        };
        let message = no_rdma().unavailable_error().to_string();
        assert!(message.contains("ABOLETH_RDMA_DEVICE=soft"), "{message}");
        let identities = [identity(0, "a", 10), identity(1, "a", 11)];
        let rdma = TransportRequest::Only(Transport::Mlx5);
        let transports =
            choose_transports(rdma, 0, &identities, |_| PeerAccess::SameDevice, &software).unwrap();
        assert_eq!(transports, [Transport::P2p, Transport::Mlx5]);
        // It runs Ionic queues as well (experimental), under the same rules.
        let ionic = TransportRequest::Only(Transport::Ionic);
        let transports =
            choose_transports(ionic, 0, &identities, |_| PeerAccess::SameDevice, &software)
                .unwrap();
        assert_eq!(transports, [Transport::P2p, Transport::Ionic]);
        let error =
            choose_transports(ionic, 0, &identities, |_| PeerAccess::No, &software).unwrap_err();
        assert!(
            error.to_string().contains("cuDeviceCanAccessPeer = 0"),
            "{error}"
        );
        // Without the software NIC, Ionic has no runtime here.
        assert!(choose_transports(ionic, 0, &identities, |_| PeerAccess::Yes, &no_rdma()).is_err());
        // Its atomics dereference the peer's memory from a kernel: peer access is required.
        let error =
            choose_transports(rdma, 0, &identities, |_| PeerAccess::No, &software).unwrap_err();
        assert!(
            error.to_string().contains("cuDeviceCanAccessPeer = 0"),
            "{error}"
        );
        // Auto never picks it: rdma must be asked for.
        let transports = choose_transports(
            TransportRequest::Auto,
            0,
            &identities,
            |_| PeerAccess::Yes,
            &software,
        )
        .unwrap();
        assert_eq!(transports, [Transport::P2p, Transport::P2p]);
        let elsewhere = [identity(0, "a", 10), identity(1, "b", 11)];
        let error =
            choose_transports(rdma, 0, &elsewhere, |_| PeerAccess::Yes, &software).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("reaches peers of its own host only"),
            "{error}"
        );
        let one_process = [identity(0, "a", 10), identity(1, "a", 10)];
        let error =
            choose_transports(rdma, 0, &one_process, |_| PeerAccess::Yes, &software).unwrap_err();
        assert!(
            error.to_string().contains("one process per rank"),
            "{error}"
        );
    }
}
