//! Registered memory and the regions carved out of it, as checks that need no GPU: what a
//! [`Registration`] and a [`Region`] are, the bounds and name rules of `World::region`, and the
//! classification of a pointer from the facts the driver reports about it
//! ([`classify_registration`]: device memory of the World's device, inside one allocation).
//!
//! Why the allocation matters: PyTorch's caching allocator hands out tensors at offsets inside
//! larger `cudaMalloc` blocks, and CUDA IPC exports whole blocks, so a registration remembers
//! its block's base (from `cuMemGetAddressRange`) and its own offset in it; a peer maps the block
//! and adds that offset. This module asks the driver nothing (`crate::world` does) and exports
//! nothing.

use crate::error::{RuntimeError, RuntimeResult};

/// Longest region name, in bytes (names travel to every rank with each exchange).
pub const MAXIMUM_REGION_NAME_BYTES: usize = 255;

/// A registered span of GPU memory of one World. Cheap to clone; the World keeps what it needs
/// to export it (the allocation and its IPC handle).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    pub(crate) world_id: u64,
    pub(crate) index: u32,
    pub(crate) address: u64,
    pub(crate) length_bytes: u64,
}

impl Registration {
    /// The first registered byte (the pointer given to `register`).
    pub fn address(&self) -> u64 {
        self.address
    }

    /// Registered bytes.
    pub fn length_bytes(&self) -> u64 {
        self.length_bytes
    }

    /// Position among the World's registrations.
    pub fn index(&self) -> u32 {
        self.index
    }
}

/// A named span of a registration, ready to be exchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    pub(crate) name: String,
    pub(crate) registration: Registration,
    pub(crate) offset_bytes: u64,
    pub(crate) length_bytes: u64,
    pub(crate) packet_slots: bool,
}

impl Region {
    /// Checks the name and that `[offset_bytes, offset_bytes + length_bytes)` lies inside the
    /// registration, then makes the region. `World::region` calls this after checking that the
    /// registration is its own.
    pub fn new(
        name: &str,
        registration: &Registration,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> RuntimeResult<Self> {
        check_region_name(name)?;
        if length_bytes == 0 {
            return Err(RuntimeError::EmptyRegion {
                name: name.to_owned(),
            });
        }
        let end_bytes = u128::from(offset_bytes) + u128::from(length_bytes);
        if end_bytes > u128::from(registration.length_bytes) {
            return Err(RuntimeError::RegionOutOfBounds {
                name: name.to_owned(),
                offset_bytes,
                end_bytes,
                registration_length_bytes: registration.length_bytes,
            });
        }
        Ok(Self {
            name: name.to_owned(),
            registration: registration.clone(),
            offset_bytes,
            length_bytes,
            packet_slots: false,
        })
    }

    /// The region, declared as the flag region of packet signals: its flags are 8-byte words
    /// and [`aboleth_abi::packet::staging_bytes`] more bytes of the registration after it hold
    /// their staging slots (exchanged as [`aboleth_abi::region::REGION_FLAG_PACKET_SLOTS`]).
    pub fn with_packet_slots(mut self) -> RuntimeResult<Self> {
        // Slots are read with 16-byte loads: they, and so the region, start 16-byte aligned.
        if !self
            .address()
            .is_multiple_of(aboleth_abi::packet::Packet::SIZE_BYTES as u64)
        {
            return Err(RuntimeError::PacketSlotsMisaligned {
                name: self.name.clone(),
                address: self.address(),
            });
        }
        let staging_bytes = aboleth_abi::packet::staging_bytes(self.length_bytes);
        let end_bytes = u128::from(self.offset_bytes)
            + u128::from(self.length_bytes)
            + u128::from(staging_bytes);
        if !self
            .length_bytes
            .is_multiple_of(aboleth_abi::packet::FLAG_BYTES)
            || end_bytes > u128::from(self.registration.length_bytes)
        {
            return Err(RuntimeError::PacketSlotsDoNotFit {
                name: self.name.clone(),
                length_bytes: self.length_bytes,
                staging_bytes,
                end_bytes,
                registration_length_bytes: self.registration.length_bytes,
            });
        }
        self.packet_slots = true;
        Ok(self)
    }

    /// Whether packet staging slots follow it ([`Region::with_packet_slots`]).
    pub fn has_packet_slots(&self) -> bool {
        self.packet_slots
    }

    /// The region's name (its key in the exchanged table).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The registration it lies in.
    pub fn registration(&self) -> &Registration {
        &self.registration
    }

    /// Offset from the registration's first byte.
    pub fn offset_bytes(&self) -> u64 {
        self.offset_bytes
    }

    /// Bytes.
    pub fn length_bytes(&self) -> u64 {
        self.length_bytes
    }

    /// Local address of the first byte.
    pub fn address(&self) -> u64 {
        self.registration.address + self.offset_bytes
    }
}

/// Checks a region name: non-empty, at most [`MAXIMUM_REGION_NAME_BYTES`] bytes, no NUL.
pub fn check_region_name(name: &str) -> RuntimeResult<()> {
    let invalid = |reason| RuntimeError::InvalidRegionName {
        name: name.to_owned(),
        reason,
    };
    if name.is_empty() {
        return Err(invalid("it is empty"));
    }
    if name.len() > MAXIMUM_REGION_NAME_BYTES {
        return Err(invalid("it is longer than 255 bytes"));
    }
    if name.contains('\0') {
        return Err(invalid("it contains a NUL character"));
    }
    Ok(())
}

/// What kind of memory a pointer points to, as `cuPointerGetAttribute` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointerMemory {
    /// The driver does not know the pointer: pageable host memory (or garbage).
    Unknown,
    /// Page-locked host memory (`cudaHostAlloc`, `cudaHostRegister`).
    Host,
    /// Device memory (`cudaMalloc`, the caching allocator, `cuMemCreate`).
    Device,
    /// Managed (unified) memory.
    Managed,
}

/// What the driver reports about a pointer given to `register`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PointerFacts {
    /// Its kind.
    pub memory: PointerMemory,
    /// Ordinal of the device that holds it (device memory only).
    pub device_ordinal: Option<i32>,
    /// First byte of the allocation holding it (`cuMemGetAddressRange`).
    pub allocation_base: u64,
    /// Bytes of that allocation.
    pub allocation_length_bytes: u64,
}

/// Where a registration lies in its allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocationSpan {
    /// First byte of the allocation.
    pub allocation_base: u64,
    /// Bytes of the allocation.
    pub allocation_length_bytes: u64,
    /// Offset of the registration's first byte from the allocation base.
    pub offset_in_allocation_bytes: u64,
}

/// Accepts `[address, address + length_bytes)` for registration with a World on
/// `world_device_ordinal`, given what the driver reported about `address`, or says what is
/// wrong: a host pointer is a [`crate::ErrorKind::Type`] error, a zero length, another device
/// or a span leaving its allocation are [`crate::ErrorKind::Value`] errors.
pub fn classify_registration(
    address: u64,
    length_bytes: u64,
    world_device_ordinal: i32,
    facts: &PointerFacts,
) -> RuntimeResult<AllocationSpan> {
    let memory = match facts.memory {
        PointerMemory::Device => None,
        PointerMemory::Unknown => Some("not known to CUDA (pageable host memory)"),
        PointerMemory::Host => Some("page-locked host memory"),
        PointerMemory::Managed => {
            Some("CUDA managed memory (which CUDA IPC cannot share between processes)")
        }
    };
    if let Some(memory) = memory {
        return Err(RuntimeError::NotDeviceMemory {
            address,
            memory: memory.to_owned(),
        });
    }
    if let Some(pointer_device_ordinal) = facts.device_ordinal
        && pointer_device_ordinal != world_device_ordinal
    {
        return Err(RuntimeError::WrongDevice {
            pointer_device_ordinal,
            world_device_ordinal,
        });
    }
    if length_bytes == 0 {
        return Err(RuntimeError::EmptyRegistration { address });
    }
    let allocation_end = facts
        .allocation_base
        .saturating_add(facts.allocation_length_bytes);
    let inside = address >= facts.allocation_base
        && address
            .checked_add(length_bytes)
            .is_some_and(|end| end <= allocation_end);
    if !inside {
        return Err(RuntimeError::RegistrationOutsideAllocation {
            address,
            length_bytes,
            allocation_base: facts.allocation_base,
            allocation_end,
        });
    }
    Ok(AllocationSpan {
        allocation_base: facts.allocation_base,
        allocation_length_bytes: facts.allocation_length_bytes,
        offset_in_allocation_bytes: address - facts.allocation_base,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn registration(length_bytes: u64) -> Registration {
        Registration {
            world_id: 1,
            index: 0,
            address: 0x7000_0000,
            length_bytes,
        }
    }

    #[test]
    fn regions_must_lie_inside_their_registration() {
        let registration = registration(4096);
        let region = Region::new("recv", &registration, 1024, 3072).unwrap();
        assert_eq!(region.address(), 0x7000_0400);
        assert_eq!(region.name(), "recv");
        let error = Region::new("recv", &registration, 1024, 3073).unwrap_err();
        assert_eq!(
            error.to_string(),
            "region 'recv' [1024, 4097) exceeds its registration of 4096 bytes"
        );
        assert_eq!(error.kind(), ErrorKind::Value);
        // No overflow at the top of the address range.
        let error = Region::new("flags", &registration, u64::MAX, 2).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "region 'flags' [{}, {}) exceeds its registration of 4096 bytes",
                u64::MAX,
                u128::from(u64::MAX) + 2
            )
        );
        let error = Region::new("send", &registration, 0, 0).unwrap_err();
        assert!(error.to_string().contains("length 0"), "{error}");
        assert_eq!(
            Region::new("", &registration, 0, 1).unwrap_err().kind(),
            ErrorKind::Value
        );
        assert!(Region::new(&"x".repeat(256), &registration, 0, 1).is_err());
        assert!(Region::new("a\0b", &registration, 0, 1).is_err());
    }

    #[test]
    fn packet_slots_must_fit_after_the_flag_region() {
        // 2 flags: 2 slots of 1056 bytes after 16 bytes of flags.
        let registration = registration(16 + 2 * 1056);
        let flags = Region::new("flags", &registration, 0, 16).unwrap();
        assert!(!flags.has_packet_slots());
        assert!(
            flags
                .clone()
                .with_packet_slots()
                .unwrap()
                .has_packet_slots()
        );
        let late = Region::new("flags", &registration, 8, 16).unwrap();
        assert_eq!(
            late.with_packet_slots().unwrap_err().to_string(),
            "region 'flags' cannot carry packet slots: it starts at 0x70000008, and packet slots are read with 16-byte loads; place it at a 16-byte-aligned offset of its registration"
        );
        let late = Region::new("flags", &registration, 16, 16).unwrap();
        assert_eq!(
            late.with_packet_slots().unwrap_err().to_string(),
            "region 'flags' cannot carry packet slots: it needs whole 8-byte flags (16 bytes given) and 2112 bytes of staging after it, up to byte 2144 of its registration, which has 2128; allocate aboleth.packet_staging_bytes(16) more bytes after the region"
        );
        let ragged = Region::new("flags", &registration, 0, 12).unwrap();
        assert!(ragged.with_packet_slots().is_err());
    }

    #[test]
    fn pointers_are_classified() {
        let device = PointerFacts {
            memory: PointerMemory::Device,
            device_ordinal: Some(1),
            allocation_base: 0x1000_0000,
            allocation_length_bytes: 2 << 20,
        };
        let span = classify_registration(0x1000_0200, 512, 1, &device).unwrap();
        assert_eq!(span.offset_in_allocation_bytes, 0x200);
        assert_eq!(span.allocation_base, 0x1000_0000);

        let host = PointerFacts {
            memory: PointerMemory::Host,
            device_ordinal: None,
            ..device
        };
        let error = classify_registration(0x1000_0200, 512, 1, &host).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Type);
        assert!(
            error
                .to_string()
                .starts_with("register() takes GPU memory, but 0x10000200 is page-locked host"),
            "{error}"
        );
        let unknown = PointerFacts {
            memory: PointerMemory::Unknown,
            ..host
        };
        assert!(
            classify_registration(8, 8, 1, &unknown)
                .unwrap_err()
                .to_string()
                .contains("pageable host memory")
        );
        let managed = PointerFacts {
            memory: PointerMemory::Managed,
            ..host
        };
        assert_eq!(
            classify_registration(8, 8, 1, &managed).unwrap_err().kind(),
            ErrorKind::Type
        );

        let error = classify_registration(0x1000_0200, 512, 0, &device).unwrap_err();
        assert!(error.to_string().contains("device 1"), "{error}");
        let error = classify_registration(0x1000_0200, 0, 1, &device).unwrap_err();
        assert!(matches!(error, RuntimeError::EmptyRegistration { .. }));
        let error = classify_registration(0x1000_0200, 2 << 20, 1, &device).unwrap_err();
        assert!(
            error.to_string().contains("spans [0x10000000, 0x10200000)"),
            "{error}"
        );
        assert!(classify_registration(u64::MAX - 1, 4, 1, &device).is_err());
    }
}
