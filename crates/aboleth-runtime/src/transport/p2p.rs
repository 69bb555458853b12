//! The p2p transport's host side: mapping peers' allocations into this process with CUDA IPC,
//! once per allocation ([`PeerMappings`]). Kernels then load and store the peer's memory at the
//! mapped addresses the region tables hold (and at `local address + peer_base_delta` for
//! symmetric layouts); nothing runs on the host per transfer.
//!
//! The proxy transport's copy engine writes through the same mappings. This module neither
//! exports handles (registration does) nor builds tables (`crate::exchange` does).

use std::collections::HashMap;
use std::sync::Arc;

use crate::cuda::{Device, IpcMapping};
use crate::error::RuntimeResult;
use crate::exchange::IPC_HANDLE_BYTES;

/// The peers' allocations mapped into this process, by (peer, IPC handle); unmapped on drop.
#[derive(Debug)]
pub struct PeerMappings {
    device: Arc<Device>,
    mappings: HashMap<(u32, [u8; IPC_HANDLE_BYTES]), IpcMapping>,
}

impl PeerMappings {
    /// No mappings yet.
    pub fn new(device: Arc<Device>) -> Self {
        Self {
            device,
            mappings: HashMap::new(),
        }
    }

    /// The base, in this process, of `peer_rank`'s allocation that `handle` exports; maps it on
    /// first use. Later exchanges of regions in the same allocation reuse the mapping.
    pub fn map(&mut self, peer_rank: u32, handle: &[u8; IPC_HANDLE_BYTES]) -> RuntimeResult<u64> {
        if let Some(mapping) = self.mappings.get(&(peer_rank, *handle)) {
            return Ok(mapping.address());
        }
        let mapping = IpcMapping::open(&self.device, handle)?;
        let address = mapping.address();
        tracing::debug!(peer_rank, address, "mapped a peer allocation");
        self.mappings.insert((peer_rank, *handle), mapping);
        Ok(address)
    }

    /// Number of mapped allocations.
    pub fn len(&self) -> usize {
        self.mappings.len()
    }

    /// Whether nothing is mapped.
    pub fn is_empty(&self) -> bool {
        self.mappings.is_empty()
    }

    /// Unmaps everything (the addresses in earlier tables become invalid).
    pub fn clear(&mut self) {
        self.mappings.clear();
    }
}
