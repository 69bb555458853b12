//! The wire protocol of PyTorch's `c10d::TCPStore` (torch 2.x), shared by our client and our
//! server: query codes, response codes, the validation magic number, the encoding of integers,
//! strings and byte vectors, and the size limits of torch's libuv server. It does no I/O policy
//! (timeouts, retries): it only turns values into bytes and back.
//!
//! Facts relied on, read from the public PyTorch sources (no code copied):
//! - `torch/csrc/distributed/c10d/TCPStoreBackend.hpp`: `validationMagicNumber = 0x3C85F7CE`; the
//!   `QueryType` enum is a `uint8_t` in the order VALIDATE, SET, COMPARE_SET, GET, ADD, CHECK,
//!   WAIT, GETNUMKEYS, DELETE_KEY, APPEND, MULTI_GET, MULTI_SET, CANCEL_WAIT, PING (newer torch
//!   appends QUEUE_PUSH, QUEUE_POP, QUEUE_LEN after PING, which we neither send nor serve);
//!   `CheckResponseType` {READY, NOT_READY} and `WaitResponseType` {STOP_WAITING, WAIT_CANCELED}
//!   are `uint8_t`.
//! - `torch/csrc/distributed/c10d/TCPStore.cpp` (client): a request is one query byte followed by
//!   its arguments; a string or byte vector is a `uint64_t` length then the bytes; integers are
//!   sent in host byte order (little-endian on every machine we target); every key goes on the
//!   wire after the client's `keyPrefix_ = "/"` (declared in `TCPStore.hpp`), and a
//!   `PrefixStore` (`PrefixStore.cpp`) joins its prefix and the key with `/`. After connecting, the
//!   client sends VALIDATE + `uint32` magic (no reply), then PING + `uint32` nonce (the pid) and
//!   expects the nonce echoed back. GET is preceded by WAIT on the key; WAIT is answered by one
//!   STOP_WAITING byte once every key exists; a client that gives up sends CANCEL_WAIT and reads
//!   WAIT_CANCELED (possibly after a STOP_WAITING that crossed it). ADD sends an `int64` delta and
//!   reads the new `int64`; the server stores counters as decimal ASCII text.
//! - `torch/csrc/distributed/c10d/TCPStoreLibUvBackend.cpp` (the default server since torch
//!   2.4): a new connection's first query must be VALIDATE with the magic number; keys are limited
//!   to 8 KiB, values to 8 MiB, and one request to 128 Ki keys; GET of a missing key returns an
//!   empty vector, and MULTI_GET answers one vector per key, empty for a missing one; APPEND
//!   (key, bytes) has no reply; COMPARE_SET on a missing key stores the desired value only when
//!   the expected value is empty, and returns the current value otherwise.

use std::io::{self, Read};

/// Sent once, first, by every client (`TCPStoreBackend.hpp`).
pub const VALIDATION_MAGIC_NUMBER: u32 = 0x3C85_F7CE;

/// Longest key torch's libuv server accepts, in bytes.
pub const MAX_KEY_BYTES: usize = 8 * 1024;
/// Longest value torch's libuv server accepts, in bytes.
pub const MAX_VALUE_BYTES: usize = 8 * 1024 * 1024;
/// Most keys one WAIT, CHECK, MULTI_GET or MULTI_SET may carry in torch's libuv server.
pub const MAX_KEYS_PER_REQUEST: usize = 128 * 1024;

/// The first byte of every request (`c10d::detail::QueryType`).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryType {
    /// `u32` magic number; no reply.
    Validate = 0,
    /// key, value; no reply.
    Set = 1,
    /// key, expected value, desired value; reply: the value now stored (see module comment).
    CompareSet = 2,
    /// key; reply: the value (empty when missing).
    Get = 3,
    /// key, `i64` delta; reply: `i64` new value.
    Add = 4,
    /// `u64` count, keys; reply: one [`CheckResponse`] byte.
    Check = 5,
    /// `u64` count, keys; reply: [`WaitResponse::StopWaiting`] once all exist.
    Wait = 6,
    /// reply: `i64` number of keys.
    GetNumKeys = 7,
    /// key; reply: `i64` number deleted.
    DeleteKey = 8,
    /// key, value; no reply.
    Append = 9,
    /// `u64` count, keys; reply: one value per key.
    MultiGet = 10,
    /// `u64` count, (key, value) pairs; no reply.
    MultiSet = 11,
    /// reply: [`WaitResponse::WaitCanceled`].
    CancelWait = 12,
    /// `u32` nonce; reply: the same nonce.
    Ping = 13,
}

impl QueryType {
    /// Decodes a query byte; `None` for a code we do not serve.
    pub fn from_u8(code: u8) -> Option<Self> {
        Some(match code {
            0 => Self::Validate,
            1 => Self::Set,
            2 => Self::CompareSet,
            3 => Self::Get,
            4 => Self::Add,
            5 => Self::Check,
            6 => Self::Wait,
            7 => Self::GetNumKeys,
            8 => Self::DeleteKey,
            9 => Self::Append,
            10 => Self::MultiGet,
            11 => Self::MultiSet,
            12 => Self::CancelWait,
            13 => Self::Ping,
            _ => return None,
        })
    }
}

/// Reply to CHECK (`c10d::detail::CheckResponseType`).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckResponse {
    /// Every key exists.
    Ready = 0,
    /// Some key is missing.
    NotReady = 1,
}

/// Replies on a waiting connection (`c10d::detail::WaitResponseType`).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitResponse {
    /// Every awaited key now exists.
    StopWaiting = 0,
    /// The wait was cancelled at the client's request.
    WaitCanceled = 1,
}

/// A request being built: the query byte, then arguments in torch's encoding.
#[derive(Debug)]
pub struct RequestBuilder {
    bytes: Vec<u8>,
}

impl RequestBuilder {
    /// Starts a request of `query`.
    pub fn new(query: QueryType) -> Self {
        let mut bytes = Vec::with_capacity(64);
        bytes.push(query as u8);
        Self { bytes }
    }

    /// Appends a `u32` (host order = little-endian).
    pub fn u32(mut self, value: u32) -> Self {
        self.bytes.extend_from_slice(&value.to_le_bytes());
        self
    }

    /// Appends a `u64`.
    pub fn u64(mut self, value: u64) -> Self {
        self.bytes.extend_from_slice(&value.to_le_bytes());
        self
    }

    /// Appends an `i64`.
    pub fn i64(mut self, value: i64) -> Self {
        self.bytes.extend_from_slice(&value.to_le_bytes());
        self
    }

    /// Appends a length-prefixed byte string (keys and values are encoded alike).
    pub fn bytes(mut self, value: &[u8]) -> Self {
        self.bytes
            .extend_from_slice(&(value.len() as u64).to_le_bytes());
        self.bytes.extend_from_slice(value);
        self
    }

    /// The encoded request.
    pub fn finish(self) -> Vec<u8> {
        self.bytes
    }
}

/// Reads one byte.
pub fn read_u8(reader: &mut impl Read) -> io::Result<u8> {
    let mut buffer = [0u8; 1];
    reader.read_exact(&mut buffer)?;
    Ok(buffer[0])
}

/// Reads a little-endian `u32`.
pub fn read_u32(reader: &mut impl Read) -> io::Result<u32> {
    let mut buffer = [0u8; 4];
    reader.read_exact(&mut buffer)?;
    Ok(u32::from_le_bytes(buffer))
}

/// Reads a little-endian `u64`.
pub fn read_u64(reader: &mut impl Read) -> io::Result<u64> {
    let mut buffer = [0u8; 8];
    reader.read_exact(&mut buffer)?;
    Ok(u64::from_le_bytes(buffer))
}

/// Reads a little-endian `i64`.
pub fn read_i64(reader: &mut impl Read) -> io::Result<i64> {
    let mut buffer = [0u8; 8];
    reader.read_exact(&mut buffer)?;
    Ok(i64::from_le_bytes(buffer))
}

/// Reads a length-prefixed byte string of at most `max_bytes` (a longer length is refused
/// before allocating, so a garbled or hostile length cannot exhaust memory).
pub fn read_bytes(reader: &mut impl Read, max_bytes: usize) -> io::Result<Vec<u8>> {
    let length = read_u64(reader)?;
    if length > max_bytes as u64 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("length {length} exceeds the limit of {max_bytes} bytes"),
        ));
    }
    let mut value = vec![0u8; length as usize];
    reader.read_exact(&mut value)?;
    Ok(value)
}

/// Reads a key count of at most [`MAX_KEYS_PER_REQUEST`].
pub fn read_key_count(reader: &mut impl Read) -> io::Result<usize> {
    let count = read_u64(reader)?;
    if count > MAX_KEYS_PER_REQUEST as u64 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("key count {count} exceeds the limit of {MAX_KEYS_PER_REQUEST}"),
        ));
    }
    Ok(count as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_request_matches_torch_encoding() {
        let request = RequestBuilder::new(QueryType::Set)
            .bytes(b"ab")
            .bytes(&[7])
            .finish();
        let mut expected = vec![1u8];
        expected.extend_from_slice(&2u64.to_le_bytes());
        expected.extend_from_slice(b"ab");
        expected.extend_from_slice(&1u64.to_le_bytes());
        expected.push(7);
        assert_eq!(request, expected);
    }

    #[test]
    fn validate_request_is_query_then_magic() {
        let request = RequestBuilder::new(QueryType::Validate)
            .u32(VALIDATION_MAGIC_NUMBER)
            .finish();
        assert_eq!(request, [0, 0xCE, 0xF7, 0x85, 0x3C]);
    }

    #[test]
    fn oversized_lengths_are_refused_before_allocating() {
        let mut input: &[u8] = &u64::MAX.to_le_bytes();
        let error = read_bytes(&mut input, MAX_VALUE_BYTES).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        let mut input: &[u8] = &(MAX_KEYS_PER_REQUEST as u64 + 1).to_le_bytes();
        assert!(read_key_count(&mut input).is_err());
    }

    #[test]
    fn query_codes_round_trip() {
        for code in 0..=13u8 {
            assert_eq!(QueryType::from_u8(code).unwrap() as u8, code);
        }
        assert_eq!(QueryType::from_u8(14), None);
    }
}
