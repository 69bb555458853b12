//! Byte-order newtypes and the `wire_layout!` macro that gives every shared struct a checked,
//! safe `to_bytes`/`from_bytes` pair.
//!
//! The big-endian newtypes (`Be16`, `Be32`, `Be64`) hold the wire bytes themselves, so a struct made
//! of them has the same bytes in memory as on the wire, on any host. Plain `u16`/`u32`/`u64`/`i64`
//! fields are host-native little-endian (every machine we target, GPU included, is little-endian);
//! the conversions here write them with `to_le_bytes` so that the encoding does not depend on the
//! host running the simulator. This module does not know any particular layout.

/// A big-endian 16-bit field, stored as its wire bytes.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Be16(pub [u8; 2]);

/// A big-endian 32-bit field, stored as its wire bytes.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Be32(pub [u8; 4]);

/// A big-endian 64-bit field, stored as its wire bytes.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Be64(pub [u8; 8]);

macro_rules! big_endian_accessors {
    ($name:ident, $int:ty) => {
        impl $name {
            /// Encodes a host value in network byte order.
            pub const fn new(value: $int) -> Self {
                Self(value.to_be_bytes())
            }

            /// Decodes the wire bytes into a host value.
            pub const fn get(self) -> $int {
                <$int>::from_be_bytes(self.0)
            }
        }
    };
}
big_endian_accessors!(Be16, u16);
big_endian_accessors!(Be32, u32);
big_endian_accessors!(Be64, u64);

/// A field type that `wire_layout!` can copy to and from a byte slice of exactly its size.
pub(crate) trait WireField: Sized {
    fn write_to(&self, bytes: &mut [u8]);
    fn read_from(bytes: &[u8]) -> Self;
}

macro_rules! wire_field_for_byte_arrays {
    ($($ty:ty => |$value:ident| $to:expr, |$bytes:ident| $from:expr;)*) => {$(
        impl WireField for $ty {
            fn write_to(&self, bytes: &mut [u8]) {
                let $value = self;
                bytes.copy_from_slice(&$to);
            }
            fn read_from($bytes: &[u8]) -> Self {
                // The macro slices exactly size_of::<Self>() bytes, so the conversion cannot fail.
                $from
            }
        }
    )*};
}
wire_field_for_byte_arrays! {
    u8 => |v| [*v], |b| b[0];
    u16 => |v| v.to_le_bytes(), |b| u16::from_le_bytes(b.try_into().expect("2 bytes"));
    u32 => |v| v.to_le_bytes(), |b| u32::from_le_bytes(b.try_into().expect("4 bytes"));
    u64 => |v| v.to_le_bytes(), |b| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    i64 => |v| v.to_le_bytes(), |b| i64::from_le_bytes(b.try_into().expect("8 bytes"));
    Be16 => |v| v.0, |b| Be16(b.try_into().expect("2 bytes"));
    Be32 => |v| v.0, |b| Be32(b.try_into().expect("4 bytes"));
    Be64 => |v| v.0, |b| Be64(b.try_into().expect("8 bytes"));
}

impl<const N: usize> WireField for [u8; N] {
    fn write_to(&self, bytes: &mut [u8]) {
        bytes.copy_from_slice(self);
    }
    fn read_from(bytes: &[u8]) -> Self {
        bytes.try_into().expect("slice of exactly N bytes")
    }
}

/// One field of a [`wire_layout!`] struct, as its C declaration needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// The field's name (the same in C).
    pub name: &'static str,
    /// Its Rust type as written (`u64`, `[u8; 56]`, `Be32`).
    pub rust_type: &'static str,
    /// Offset from the start of the struct.
    pub offset_bytes: usize,
    /// Size of the field.
    pub size_bytes: usize,
}

/// Asserts a struct's size and every field's offset at compile time, and implements
/// `SIZE_BYTES`, `FIELDS`, `to_bytes` and `from_bytes` for it without `unsafe`. Padding bytes between fields
/// (there should be none) would encode as zero.
macro_rules! wire_layout {
    ($ty:ident, $size:literal, { $($field:ident : $field_ty:ty = $offset:literal),* $(,)? }) => {
        const _: () = assert!(core::mem::size_of::<$ty>() == $size);
        $(const _: () = assert!(core::mem::offset_of!($ty, $field) == $offset);)*

        impl $ty {
            /// Size of the encoded struct in bytes (equal to `size_of::<Self>()`).
            pub const SIZE_BYTES: usize = $size;

            /// Every field in layout order: what a C declaration of the struct is written from
            /// ([`crate::c_declarations`]).
            pub const FIELDS: &'static [crate::wire::Field] = &[$(crate::wire::Field {
                name: stringify!($field),
                rust_type: stringify!($field_ty),
                offset_bytes: $offset,
                size_bytes: core::mem::size_of::<$field_ty>(),
            }),*];

            /// The struct's exact bytes in shared memory.
            pub fn to_bytes(&self) -> [u8; $size] {
                let mut bytes = [0u8; $size];
                $(crate::wire::WireField::write_to(
                    &self.$field,
                    &mut bytes[$offset..$offset + core::mem::size_of::<$field_ty>()],
                );)*
                bytes
            }

            /// Reads the struct back from its bytes; no field is validated here.
            pub fn from_bytes(bytes: &[u8; $size]) -> Self {
                Self {
                    $($field: crate::wire::WireField::read_from(
                        &bytes[$offset..$offset + core::mem::size_of::<$field_ty>()],
                    ),)*
                }
            }
        }
    };
}
pub(crate) use wire_layout;
