//! C++ declarations of the shared layouts, written from their [`crate::wire::Field`] lists: the
//! structs a CUDA program needs to read what the host wrote (the tier-1 library's arguments and
//! the descriptors and handles they point at), each followed by `static_assert`s of its size and
//! of every field's offset, so a compiler that lays a struct out differently stops the build.
//! Big-endian fields are declared as byte arrays (they are read as bytes). This module writes
//! text only; which structs a header needs is the caller's choice.

use crate::wire::Field;

/// One struct: its C++ name, size, alignment and fields (a [`wire_layout!`] struct's `FIELDS`).
#[derive(Clone, Copy, Debug)]
pub struct Declaration {
    /// The name in C++ (inside the caller's namespace).
    pub c_name: &'static str,
    /// The Rust type it mirrors (named in the comment above the declaration).
    pub rust_name: &'static str,
    /// `size_of` in bytes.
    pub size_bytes: usize,
    /// `align_of` in bytes.
    pub align_bytes: usize,
    /// The fields, in layout order.
    pub fields: &'static [Field],
}

/// `Declaration` for a [`wire_layout!`] struct `$ty`, named `$c_name` in C++.
#[macro_export]
macro_rules! declaration {
    ($ty:ty, $c_name:literal) => {
        $crate::c_declarations::Declaration {
            c_name: $c_name,
            rust_name: stringify!($ty),
            size_bytes: <$ty>::SIZE_BYTES,
            align_bytes: core::mem::align_of::<$ty>(),
            fields: <$ty>::FIELDS,
        }
    };
}

/// The C++ type of a field's Rust type, and the array length for byte arrays.
fn c_type(rust_type: &str) -> (&'static str, Option<usize>) {
    let compact: String = rust_type.chars().filter(|c| !c.is_whitespace()).collect();
    match compact.as_str() {
        "u8" => ("uint8_t", None),
        "u16" => ("uint16_t", None),
        "u32" => ("uint32_t", None),
        "u64" => ("uint64_t", None),
        "i32" => ("int32_t", None),
        "i64" => ("int64_t", None),
        "Be16" => ("uint8_t", Some(2)),
        "Be32" => ("uint8_t", Some(4)),
        "Be64" => ("uint8_t", Some(8)),
        other => match other
            .strip_prefix("[u8;")
            .and_then(|rest| rest.strip_suffix(']'))
            .and_then(|length| length.parse().ok())
        {
            Some(length) => ("uint8_t", Some(length)),
            None => panic!("no C++ type for the layout field type `{rust_type}`"),
        },
    }
}

/// The declaration's C++ text: the struct, then its size and offset assertions.
pub fn struct_text(declaration: &Declaration) -> String {
    let mut text = format!(
        "// aboleth_abi::{} ({} bytes).\nstruct alignas({}) {} {{\n",
        declaration.rust_name, declaration.size_bytes, declaration.align_bytes, declaration.c_name
    );
    for field in declaration.fields {
        match c_type(field.rust_type) {
            (c_type, Some(length)) => {
                text.push_str(&format!("  {c_type} {}[{length}];\n", field.name))
            }
            (c_type, None) => text.push_str(&format!("  {c_type} {};\n", field.name)),
        }
    }
    text.push_str("};\n");
    text.push_str(&format!(
        "static_assert(sizeof({}) == {}, \"aboleth ABI: {} size\");\n",
        declaration.c_name, declaration.size_bytes, declaration.c_name
    ));
    for field in declaration.fields {
        text.push_str(&format!(
            "static_assert(offsetof({}, {}) == {}, \"aboleth ABI: {}::{}\");\n",
            declaration.c_name, field.name, field.offset_bytes, declaration.c_name, field.name
        ));
    }
    text
}

/// The structs the tier-1 device library's header declares, in dependency order.
pub fn device_library_declarations() -> Vec<Declaration> {
    vec![
        declaration!(crate::device_library::DeviceContext, "DeviceContext"),
        declaration!(crate::device_library::RemoteRegion, "RemoteRegion"),
        declaration!(crate::LocalRegionDescriptor, "LocalRegion"),
        declaration!(crate::RemoteRegionDescriptor, "RemoteRegionDescriptor"),
        declaration!(crate::EndpointHandle, "EndpointHandle"),
        declaration!(crate::WaitFailureLogHeader, "WaitFailureLogHeader"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_declaration_states_every_field_and_asserts_every_offset() {
        let text = struct_text(&declaration!(
            crate::RemoteRegionDescriptor,
            "RemoteRegionDescriptor"
        ));
        assert!(
            text.contains("struct alignas(8) RemoteRegionDescriptor {"),
            "{text}"
        );
        assert!(text.contains("  uint64_t base_address;\n"));
        assert!(text.contains("static_assert(sizeof(RemoteRegionDescriptor) == 32"));
        assert!(
            text.contains("static_assert(offsetof(RemoteRegionDescriptor, region_index) == 28")
        );
        let fields = crate::RemoteRegionDescriptor::FIELDS.len();
        assert_eq!(text.matches("static_assert(offsetof").count(), fields);
    }

    #[test]
    fn byte_arrays_and_big_endian_fields_are_byte_arrays() {
        assert_eq!(c_type("[u8; 56]"), ("uint8_t", Some(56)));
        assert_eq!(c_type("Be32"), ("uint8_t", Some(4)));
        let text = struct_text(&declaration!(
            crate::WaitFailureLogHeader,
            "WaitFailureLogHeader"
        ));
        assert!(text.contains("uint8_t reserved"), "{text}");
    }

    #[test]
    fn every_library_declaration_has_a_c_type_for_each_field() {
        for declaration in device_library_declarations() {
            let text = struct_text(&declaration);
            assert!(text.contains(&format!(
                "struct alignas({}) {} {{",
                declaration.align_bytes, declaration.c_name
            )));
        }
    }
}
