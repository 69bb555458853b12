//! Types of the `ab` dialect: endpoints, remote regions, pointers and tokens.
//!
//! Scalars use pliron's `builtin.integer`; this module only adds the handles that communication
//! operations take. It does not describe memory layouts: those live in `aboleth-abi`.

use pliron::derive::pliron_type;

/// A connection to one peer: which queue (RC QP, proxy ring or NVLink peer) commands go to.
#[pliron_type(name = "ab.endpoint", generate_get = true, format, verifier = "succ")]
#[derive(Hash, PartialEq, Eq, Debug)]
pub struct EndpointType;

/// A completion token: produced by `ab.put`/`ab.signal`, consumed by `ab.wait` and `after`.
#[pliron_type(name = "ab.token", generate_get = true, format, verifier = "succ")]
#[derive(Hash, PartialEq, Eq, Debug)]
pub struct TokenType;

/// A local address (the byte address of a buffer in this rank's memory).
#[pliron_type(name = "ab.ptr", generate_get = true, format, verifier = "succ")]
#[derive(Hash, PartialEq, Eq, Debug)]
pub struct PointerType;

/// One peer's descriptor of a registered region; `.at(i)` indexes it in elements.
#[pliron_type(
    name = "ab.remote",
    generate_get = true,
    format = "`<` $element_bytes `>`",
    verifier = "succ"
)]
#[derive(Hash, PartialEq, Eq, Debug)]
pub struct RemoteType {
    /// Size of one element of the region, in bytes (`.at(i)` is `i * element_bytes`).
    pub element_bytes: u32,
}

/// An address inside a peer's region (a remote region plus an element offset).
#[pliron_type(
    name = "ab.remote_ptr",
    generate_get = true,
    format = "`<` $element_bytes `>`",
    verifier = "succ"
)]
#[derive(Hash, PartialEq, Eq, Debug)]
pub struct RemotePointerType {
    /// Size of one element of the region, in bytes.
    pub element_bytes: u32,
}
