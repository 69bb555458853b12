//! [`Transport`]: the one enum naming how a rank reaches a peer, shared by every layer: the
//! pipeline's target (`--target`, `aboleth.install(target=...)`), the code generator, the
//! simulator, the runtime's `connect_all` and the `transport` field of endpoint handles and region
//! descriptors (its wire code).
//!
//! It says, per transport, its names, its wire code, whether the pipeline lowers it, whether
//! the code generator generates code for it and whether the host runtime can connect with it;
//! nothing else in the project keeps its own list.
//!
//! Names: each transport has one name (`mlx5`, `proxy`, `p2p`, `efa`, `ionic`), used by the
//! compiler, the statistics, the simulator and messages. The runtime's `connect_all` also accepts
//! `rdma` for `mlx5`, the name users know GPU-initiated RDMA by ([`Transport::from_runtime_name`]);
//! that alias is the only one, and it is explained here only.
//!
//! This module decides nothing about which transport to use (the runtime's `choose_transports`
//! does) and holds no layout beyond the wire code.

/// How a rank reaches a peer. The discriminant is the wire code stored in
/// [`crate::EndpointHandle::transport`] and the low bits of
/// [`crate::RemoteRegionDescriptor::transport`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Transport {
    /// GPU-initiated RDMA on ConnectX (mlx5 WQEs, doorbell record, UAR doorbell).
    Mlx5 = 1,
    /// Host proxy: the GPU writes commands into a host-pinned ring that a host thread executes
    /// with the copy engine.
    Proxy = 2,
    /// NVLink / PCIe peer memory: plain loads and stores over peer pointers.
    P2p = 3,
    /// AWS EFA (SRD): lowered and simulated (experimental); no code generation, no runtime.
    Efa = 4,
    /// AMD Pensando Ionic (RoCEv2 RC): lowered and simulated (experimental); no code
    /// generation, no runtime.
    Ionic = 5,
}

/// A wire code that names no [`Transport`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown transport kind {value} (expected 1..=5: mlx5, proxy, p2p, efa, ionic)")]
pub struct TransportCodeError {
    /// The value found.
    pub value: u32,
}

impl Transport {
    /// Every transport, in wire-code order (the order the command line lists them).
    pub const ALL: [Transport; 5] = [
        Transport::Mlx5,
        Transport::Proxy,
        Transport::P2p,
        Transport::Efa,
        Transport::Ionic,
    ];

    /// The transports the pipeline lowers (and the simulator runs).
    pub const LOWERED: [Transport; 5] = [
        Transport::Mlx5,
        Transport::Proxy,
        Transport::P2p,
        Transport::Efa,
        Transport::Ionic,
    ];

    /// The transports the code generator generates TTIR for (Triton kernels compile for these;
    /// Ionic's is experimental: generated for NVIDIA GPUs, never run on a device).
    pub const GENERATED: [Transport; 4] = [
        Transport::Mlx5,
        Transport::Proxy,
        Transport::P2p,
        Transport::Ionic,
    ];

    /// The transports the tier-1 device library (CUDA C++) is generated for.
    pub const DEVICE_LIBRARY: [Transport; 3] = [Transport::Mlx5, Transport::Proxy, Transport::P2p];

    /// The name of every transport, in [`Transport::ALL`]'s order.
    pub const NAMES: [&'static str; 5] = ["mlx5", "proxy", "p2p", "efa", "ionic"];

    /// The transport's name.
    pub const fn name(self) -> &'static str {
        match self {
            Transport::Mlx5 => "mlx5",
            Transport::Proxy => "proxy",
            Transport::P2p => "p2p",
            Transport::Efa => "efa",
            Transport::Ionic => "ionic",
        }
    }

    /// Parses a transport's name (the compiler's spelling: `rdma` is not accepted here).
    pub fn from_name(name: &str) -> Option<Transport> {
        Transport::ALL
            .into_iter()
            .find(|transport| transport.name() == name)
    }

    /// The name `connect_all` knows the transport by: `rdma` for mlx5, the name otherwise.
    pub const fn runtime_name(self) -> &'static str {
        match self {
            Transport::Mlx5 => "rdma",
            other => other.name(),
        }
    }

    /// Parses a name `connect_all` accepts: a transport's name, or `rdma` for mlx5.
    pub fn from_runtime_name(name: &str) -> Option<Transport> {
        Transport::ALL
            .into_iter()
            .find(|transport| transport.runtime_name() == name || transport.name() == name)
    }

    /// Whether the pipeline has a lowering for it (and the simulator a model).
    pub const fn is_lowered(self) -> bool {
        matches!(
            self,
            Transport::Mlx5 | Transport::Proxy | Transport::P2p | Transport::Efa | Transport::Ionic
        )
    }

    /// Whether the code generator generates TTIR for it (Triton kernels compile for it).
    pub const fn has_code_generation(self) -> bool {
        matches!(
            self,
            Transport::Mlx5 | Transport::Proxy | Transport::P2p | Transport::Ionic
        )
    }

    /// Whether the tier-1 device library (CUDA C++) is generated for it.
    pub const fn has_device_library(self) -> bool {
        matches!(self, Transport::Mlx5 | Transport::Proxy | Transport::P2p)
    }

    /// Whether the host runtime can connect peers with it (mlx5 is detected and refused with the
    /// reason until its queue setup exists).
    pub const fn has_runtime(self) -> bool {
        matches!(self, Transport::Proxy | Transport::P2p)
    }

    /// The wire code.
    pub const fn code(self) -> u32 {
        self as u32
    }

    /// Decodes a wire code.
    pub fn from_code(value: u32) -> Result<Transport, TransportCodeError> {
        Transport::ALL
            .into_iter()
            .find(|transport| transport.code() == value)
            .ok_or(TransportCodeError { value })
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_codes_and_lists_agree() {
        for (transport, name) in Transport::ALL.into_iter().zip(Transport::NAMES) {
            assert_eq!(transport.name(), name);
            assert_eq!(Transport::from_name(name), Some(transport));
            assert_eq!(Transport::from_code(transport.code()), Ok(transport));
            assert_eq!(transport.to_string(), name);
        }
        let lowered: Vec<Transport> = Transport::ALL
            .into_iter()
            .filter(|transport| transport.is_lowered())
            .collect();
        assert_eq!(lowered, Transport::LOWERED);
        let generated: Vec<Transport> = Transport::ALL
            .into_iter()
            .filter(|transport| transport.has_code_generation())
            .collect();
        assert_eq!(generated, Transport::GENERATED);
        let libraries: Vec<Transport> = Transport::ALL
            .into_iter()
            .filter(|transport| transport.has_device_library())
            .collect();
        assert_eq!(libraries, Transport::DEVICE_LIBRARY);
        assert!(Transport::ALL.into_iter().all(|transport| {
            (!transport.has_runtime() || transport.has_device_library())
                && (!transport.has_device_library() || transport.has_code_generation())
                && (!transport.has_code_generation() || transport.is_lowered())
        }));
        assert_eq!(
            Transport::from_code(0),
            Err(TransportCodeError { value: 0 })
        );
        assert_eq!(
            Transport::from_code(6),
            Err(TransportCodeError { value: 6 })
        );
    }

    #[test]
    fn rdma_is_the_runtime_name_of_mlx5_only() {
        assert_eq!(Transport::from_name("rdma"), None);
        assert_eq!(Transport::from_runtime_name("rdma"), Some(Transport::Mlx5));
        assert_eq!(Transport::from_runtime_name("mlx5"), Some(Transport::Mlx5));
        assert_eq!(Transport::from_runtime_name("p2p"), Some(Transport::P2p));
        assert_eq!(Transport::from_runtime_name("auto"), None);
        assert_eq!(Transport::Mlx5.runtime_name(), "rdma");
        assert_eq!(Transport::Proxy.runtime_name(), "proxy");
    }
}
