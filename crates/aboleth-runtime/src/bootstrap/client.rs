//! A blocking client of a TCPStore: torch's (hosted by torchrun's agent or by a rank's
//! `torch.distributed.TCPStore`) or ours ([`super::server::TcpStoreServer`]); both speak the
//! protocol of [`super::protocol`]. It connects with retries until a deadline, validates and
//! pings like torch's own client, and offers the key/value operations the bootstrap needs.
//! Every reply is awaited for at most the reply timeout in all (not per read), and never past
//! the deadline set with [`TcpStoreClient::set_deadline`], so that a caller running several
//! requests under one deadline is bounded by it.
//!
//! What it does not do: share one connection between threads (every operation takes `&mut
//! self`), reconnect after a failure (a connection that failed mid-request is marked broken,
//! since the byte stream may be out of step), or know anything about ranks (that is
//! [`super::TcpStoreBootstrap`]'s job).

use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::protocol::{
    self, CheckResponse, MAX_KEY_BYTES, MAX_KEYS_PER_REQUEST, MAX_VALUE_BYTES, QueryType,
    RequestBuilder, VALIDATION_MAGIC_NUMBER, WaitResponse,
};

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No connection could be made before the deadline.
    #[error(
        "cannot reach the TCPStore at {address} within {waited_seconds:.1} s ({attempts} attempt(s)): {source}; check MASTER_ADDR and MASTER_PORT, and that rank 0 (or torchrun's agent) is running and reachable"
    )]
    Connect {
        /// `host:port`.
        address: String,
        /// Seconds spent trying.
        waited_seconds: f64,
        /// Connection attempts made.
        attempts: u32,
        /// The last error.
        source: io::Error,
    },
    /// Something answers at the address, but not as a TCPStore.
    #[error(
        "the service at {address} does not speak the TCPStore protocol ({detail}); MASTER_PORT may point at another program"
    )]
    NotATcpStore {
        /// `host:port`.
        address: String,
        /// What went wrong.
        detail: String,
    },
    /// An I/O error during an operation.
    #[error(
        "TCPStore at {address}: {operation} failed: {source}; the process hosting the store (rank 0 or torchrun's agent) may have exited"
    )]
    Io {
        /// `host:port`.
        address: String,
        /// The operation, with its key.
        operation: String,
        /// The error.
        source: io::Error,
    },
    /// The store answered something the protocol does not allow.
    #[error("TCPStore at {address}: unexpected reply to {operation}: {detail}")]
    Protocol {
        /// `host:port`.
        address: String,
        /// The operation.
        operation: String,
        /// What arrived.
        detail: String,
    },
    /// No (complete) reply came in time.
    #[error(
        "TCPStore at {address}: no reply to {operation} within {waited_seconds:.1} s; the process hosting the store (rank 0 or torchrun's agent) is stopped or overloaded, or raise ABOLETH_BOOTSTRAP_TIMEOUT_S"
    )]
    ReplyTimeout {
        /// `host:port`.
        address: String,
        /// The operation, with its key.
        operation: String,
        /// Seconds waited for the reply.
        waited_seconds: f64,
    },
    /// An earlier failure left the connection unusable.
    #[error(
        "TCPStore connection to {address} is unusable after an earlier failure; create a new bootstrap"
    )]
    ConnectionBroken {
        /// `host:port`.
        address: String,
    },
    /// A key longer than torch's server accepts.
    #[error(
        "TCPStore key of {key_bytes} bytes (with prefix) exceeds torch's limit of {MAX_KEY_BYTES} bytes; use a shorter key"
    )]
    KeyTooLong {
        /// Length with prefix.
        key_bytes: usize,
    },
    /// A value larger than torch's server accepts.
    #[error(
        "TCPStore value of {value_bytes} bytes for key {key:?} exceeds torch's limit of {MAX_VALUE_BYTES} bytes; split it"
    )]
    ValueTooLarge {
        /// The key.
        key: String,
        /// The value's length.
        value_bytes: usize,
    },
    /// Too many keys in one request.
    #[error(
        "{key_count} keys in one TCPStore request exceed torch's limit of {MAX_KEYS_PER_REQUEST}"
    )]
    TooManyKeys {
        /// Keys requested.
        key_count: usize,
    },
}

/// A connection to a TCPStore.
#[derive(Debug)]
pub struct TcpStoreClient {
    stream: TcpStream,
    address: String,
    key_prefix: String,
    reply_timeout: Duration,
    deadline: Option<Instant>,
    broken: bool,
}

/// Reads from the stream until `deadline` in all: before every read it sets the socket's
/// timeout to the time left, since `set_read_timeout` alone bounds each read call, not a reply
/// that arrives a few bytes at a time.
struct DeadlineReader<'a> {
    stream: &'a mut TcpStream,
    deadline: Instant,
}

impl io::Read for DeadlineReader<'_> {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        let remaining = self.deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "reply deadline passed",
            ));
        }
        self.stream.set_read_timeout(Some(remaining))?;
        self.stream.read(buffer)
    }
}

/// Shortest read timeout we ask for: `set_read_timeout(Some(0))` is an error.
const MINIMUM_READ_TIMEOUT: Duration = Duration::from_millis(1);
/// First pause between connection attempts; doubled up to [`MAXIMUM_RETRY_PAUSE`].
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(10);
/// Longest pause between connection attempts.
const MAXIMUM_RETRY_PAUSE: Duration = Duration::from_millis(250);

impl TcpStoreClient {
    /// Connects to the store at `host:port`, retrying (the host may not listen yet) until
    /// `deadline`, then validates and pings as torch's client does. Keys are named as torch
    /// names them: `key_prefix` (pass `""` for none) is joined to each key with `/`, as
    /// torch's `PrefixStore` does, and the result goes on the wire after a leading `/`, as
    /// torch's `TCPStore` client sends every key (its `keyPrefix_`), so that
    /// `torch.distributed.TCPStore.get(key)` and our `get(key)` read the same entry.
    /// `reply_timeout` bounds the wait for any reply other than WAIT's.
    pub fn connect(
        host: &str,
        port: u16,
        key_prefix: &str,
        deadline: Instant,
        reply_timeout: Duration,
    ) -> Result<Self, StoreError> {
        let address = format!("{host}:{port}");
        let started = Instant::now();
        let mut attempts = 0u32;
        let mut pause = FIRST_RETRY_PAUSE;
        loop {
            attempts += 1;
            let last_error = match Self::connect_once(host, port, deadline) {
                Ok(stream) => {
                    // A store that stops reading must not block a request forever either.
                    let _ = stream.set_write_timeout(Some(reply_timeout.max(MINIMUM_READ_TIMEOUT)));
                    let mut client = Self {
                        stream,
                        address: address.clone(),
                        key_prefix: wire_key_prefix(key_prefix),
                        reply_timeout,
                        deadline: None,
                        broken: false,
                    };
                    let remaining = deadline.saturating_duration_since(Instant::now());
                    match client.validate_and_ping(remaining.min(reply_timeout)) {
                        Ok(()) => {
                            tracing::debug!(%address, attempts, "connected to the TCPStore");
                            return Ok(client);
                        }
                        // A listener whose backlog overflowed resets us: worth another try.
                        Err(StoreError::Io { source, .. })
                            if matches!(
                                source.kind(),
                                io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof
                            ) =>
                        {
                            source
                        }
                        Err(error) => return Err(error),
                    }
                }
                Err(error) => error,
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(StoreError::Connect {
                    address,
                    waited_seconds: now.duration_since(started).as_secs_f64(),
                    attempts,
                    source: last_error,
                });
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(MAXIMUM_RETRY_PAUSE);
        }
    }

    fn connect_once(host: &str, port: u16, deadline: Instant) -> io::Result<TcpStream> {
        let addresses: Vec<SocketAddr> = (host, port).to_socket_addrs()?.collect();
        let mut last_error = io::Error::new(
            io::ErrorKind::NotFound,
            format!("{host} resolves to no address"),
        );
        for address in addresses {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match TcpStream::connect_timeout(&address, remaining.max(MINIMUM_READ_TIMEOUT)) {
                Ok(stream) => {
                    // Requests are small and answered one at a time: do not let Nagle delay them.
                    stream.set_nodelay(true)?;
                    return Ok(stream);
                }
                Err(error) => last_error = error,
            }
        }
        Err(last_error)
    }

    /// Torch's handshake: VALIDATE (no reply), then PING, whose nonce must come back within
    /// `ping_timeout`.
    fn validate_and_ping(&mut self, ping_timeout: Duration) -> Result<(), StoreError> {
        let validate = RequestBuilder::new(QueryType::Validate)
            .u32(VALIDATION_MAGIC_NUMBER)
            .finish();
        self.send("validate", &validate)?;
        let nonce = std::process::id();
        let ping = RequestBuilder::new(QueryType::Ping).u32(nonce).finish();
        self.send("ping", &ping)?;
        let reply = self
            .stream
            .set_read_timeout(Some(ping_timeout.max(MINIMUM_READ_TIMEOUT)))
            .and_then(|()| protocol::read_u32(&mut self.stream));
        let echoed = match reply {
            Ok(echoed) => echoed,
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                self.broken = true;
                return Err(StoreError::NotATcpStore {
                    address: self.address.clone(),
                    detail: format!(
                        "no reply to PING within {:.1} s",
                        ping_timeout.as_secs_f64()
                    ),
                });
            }
            Err(source) => {
                self.broken = true;
                return Err(StoreError::Io {
                    address: self.address.clone(),
                    operation: "ping".to_owned(),
                    source,
                });
            }
        };
        if echoed != nonce {
            self.broken = true;
            return Err(StoreError::NotATcpStore {
                address: self.address.clone(),
                detail: format!("ping nonce {nonce:#x} came back as {echoed:#x}"),
            });
        }
        Ok(())
    }

    /// `host:port` of the store.
    pub fn address(&self) -> &str {
        &self.address
    }

    fn full_key(&self, key: &str) -> Result<String, StoreError> {
        let full = format!("{}{key}", self.key_prefix);
        if full.len() > MAX_KEY_BYTES {
            return Err(StoreError::KeyTooLong {
                key_bytes: full.len(),
            });
        }
        Ok(full)
    }

    fn send(&mut self, operation: &str, request: &[u8]) -> Result<(), StoreError> {
        if self.broken {
            return Err(StoreError::ConnectionBroken {
                address: self.address.clone(),
            });
        }
        self.stream.write_all(request).map_err(|source| {
            self.broken = true;
            StoreError::Io {
                address: self.address.clone(),
                operation: operation.to_owned(),
                source,
            }
        })
    }

    /// Bounds every later reply wait, in addition to the reply timeout, by `deadline`; `None`
    /// lifts the bound. A caller running several requests under one deadline sets it once.
    pub fn set_deadline(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
    }

    /// When a reply awaited from now must be complete.
    fn reply_deadline(&self) -> Instant {
        let deadline = Instant::now() + self.reply_timeout.max(MINIMUM_READ_TIMEOUT);
        self.deadline.map_or(deadline, |bound| deadline.min(bound))
    }

    fn receive<T>(
        &mut self,
        operation: &str,
        read: impl FnOnce(&mut DeadlineReader<'_>) -> io::Result<T>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let deadline = self.reply_deadline();
        let result = read(&mut DeadlineReader {
            stream: &mut self.stream,
            deadline,
        });
        result.map_err(|source| {
            self.broken = true;
            if matches!(
                source.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) {
                StoreError::ReplyTimeout {
                    address: self.address.clone(),
                    operation: operation.to_owned(),
                    waited_seconds: started.elapsed().as_secs_f64(),
                }
            } else {
                StoreError::Io {
                    address: self.address.clone(),
                    operation: operation.to_owned(),
                    source,
                }
            }
        })
    }

    /// Stores `value` under `key` (waking waiters).
    pub fn set(&mut self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        let full = self.full_key(key)?;
        check_value(key, value)?;
        let request = RequestBuilder::new(QueryType::Set)
            .bytes(full.as_bytes())
            .bytes(value)
            .finish();
        self.send(&format!("set {key:?}"), &request)
    }

    /// Appends `value` to the value at `key` (missing counts as empty), waking waiters.
    pub fn append(&mut self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        let full = self.full_key(key)?;
        check_value(key, value)?;
        let request = RequestBuilder::new(QueryType::Append)
            .bytes(full.as_bytes())
            .bytes(value)
            .finish();
        self.send(&format!("append {key:?}"), &request)
    }

    /// The values of `keys` in one request, without waiting (a missing key reads as empty, as
    /// torch's server answers).
    pub fn multi_get(&mut self, keys: &[String]) -> Result<Vec<Vec<u8>>, StoreError> {
        let operation = describe_keys("multi_get", keys);
        let request = self.key_list_request(QueryType::MultiGet, keys)?;
        self.send(&operation, &request)?;
        self.receive(&operation, |reader| {
            (0..keys.len())
                .map(|_| protocol::read_bytes(reader, MAX_VALUE_BYTES))
                .collect()
        })
    }

    /// Adds `delta` to the decimal counter at `key` (missing counts as 0); returns the new value.
    pub fn add(&mut self, key: &str, delta: i64) -> Result<i64, StoreError> {
        let full = self.full_key(key)?;
        let operation = format!("add {key:?}");
        let request = RequestBuilder::new(QueryType::Add)
            .bytes(full.as_bytes())
            .i64(delta)
            .finish();
        self.send(&operation, &request)?;
        self.receive(&operation, |reader| protocol::read_i64(reader))
    }

    /// Stores `desired` if the key holds `expected` (or is missing and `expected` is empty);
    /// returns the value stored afterwards (torch's semantics, see [`super::protocol`]).
    pub fn compare_set(
        &mut self,
        key: &str,
        expected: &[u8],
        desired: &[u8],
    ) -> Result<Vec<u8>, StoreError> {
        let full = self.full_key(key)?;
        check_value(key, expected)?;
        check_value(key, desired)?;
        let operation = format!("compare_set {key:?}");
        let request = RequestBuilder::new(QueryType::CompareSet)
            .bytes(full.as_bytes())
            .bytes(expected)
            .bytes(desired)
            .finish();
        self.send(&operation, &request)?;
        self.receive(&operation, |stream| {
            protocol::read_bytes(stream, MAX_VALUE_BYTES)
        })
    }

    /// Whether every key exists, without waiting.
    pub fn check(&mut self, keys: &[String]) -> Result<bool, StoreError> {
        let operation = describe_keys("check", keys);
        let request = self.key_list_request(QueryType::Check, keys)?;
        self.send(&operation, &request)?;
        let reply = self.receive(&operation, |reader| protocol::read_u8(reader))?;
        match reply {
            code if code == CheckResponse::Ready as u8 => Ok(true),
            code if code == CheckResponse::NotReady as u8 => Ok(false),
            code => Err(self.protocol_error(&operation, format!("check response {code}"))),
        }
    }

    /// Waits until every key exists or `timeout` passes; `Ok(false)` on timeout (the wait is
    /// then cancelled on the server, as torch's client does, so the connection stays usable).
    pub fn wait(&mut self, keys: &[String], timeout: Duration) -> Result<bool, StoreError> {
        let operation = describe_keys("wait", keys);
        let request = self.key_list_request(QueryType::Wait, keys)?;
        self.send(&operation, &request)?;
        let timeout = self.deadline.map_or(timeout, |bound| {
            timeout.min(bound.saturating_duration_since(Instant::now()))
        });
        let first = self
            .stream
            .set_read_timeout(Some(timeout.max(MINIMUM_READ_TIMEOUT)))
            .and_then(|()| protocol::read_u8(&mut self.stream));
        match first {
            Ok(code) if code == WaitResponse::StopWaiting as u8 => return Ok(true),
            Ok(code) => {
                return Err(self.protocol_error(&operation, format!("wait response {code}")));
            }
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(source) => {
                self.broken = true;
                return Err(StoreError::Io {
                    address: self.address.clone(),
                    operation,
                    source,
                });
            }
        }
        let cancel = RequestBuilder::new(QueryType::CancelWait).finish();
        self.send("cancel_wait", &cancel)?;
        let mut all_arrived = false;
        loop {
            let code = self.receive("cancel_wait", |reader| protocol::read_u8(reader))?;
            match code {
                // The keys arrived while our cancel was in flight: the wait succeeded after all.
                code if code == WaitResponse::StopWaiting as u8 && !all_arrived => {
                    all_arrived = true;
                }
                code if code == WaitResponse::WaitCanceled as u8 => return Ok(all_arrived),
                code => {
                    return Err(self.protocol_error("cancel_wait", format!("wait response {code}")));
                }
            }
        }
    }

    /// The value at `key`, waiting up to `timeout` for it to exist; `Ok(None)` on timeout.
    pub fn get(&mut self, key: &str, timeout: Duration) -> Result<Option<Vec<u8>>, StoreError> {
        if !self.wait(&[key.to_owned()], timeout)? {
            return Ok(None);
        }
        let full = self.full_key(key)?;
        let operation = format!("get {key:?}");
        let request = RequestBuilder::new(QueryType::Get)
            .bytes(full.as_bytes())
            .finish();
        self.send(&operation, &request)?;
        self.receive(&operation, |stream| {
            protocol::read_bytes(stream, MAX_VALUE_BYTES)
        })
        .map(Some)
    }

    /// Deletes `key`; whether it existed.
    pub fn delete_key(&mut self, key: &str) -> Result<bool, StoreError> {
        let full = self.full_key(key)?;
        let operation = format!("delete_key {key:?}");
        let request = RequestBuilder::new(QueryType::DeleteKey)
            .bytes(full.as_bytes())
            .finish();
        self.send(&operation, &request)?;
        Ok(self.receive(&operation, |reader| protocol::read_i64(reader))? == 1)
    }

    /// Number of keys in the whole store (every prefix).
    pub fn num_keys(&mut self) -> Result<i64, StoreError> {
        let request = RequestBuilder::new(QueryType::GetNumKeys).finish();
        self.send("getnumkeys", &request)?;
        self.receive("getnumkeys", |reader| protocol::read_i64(reader))
    }

    fn key_list_request(&self, query: QueryType, keys: &[String]) -> Result<Vec<u8>, StoreError> {
        if keys.len() > MAX_KEYS_PER_REQUEST {
            return Err(StoreError::TooManyKeys {
                key_count: keys.len(),
            });
        }
        let mut request = RequestBuilder::new(query).u64(keys.len() as u64);
        for key in keys {
            request = request.bytes(self.full_key(key)?.as_bytes());
        }
        Ok(request.finish())
    }

    fn protocol_error(&mut self, operation: &str, detail: String) -> StoreError {
        self.broken = true;
        StoreError::Protocol {
            address: self.address.clone(),
            operation: operation.to_owned(),
            detail,
        }
    }
}

/// What goes on the wire before a key: torch's client prefix `/`, then the `PrefixStore`
/// prefix and its `/` separator when there is one.
fn wire_key_prefix(key_prefix: &str) -> String {
    if key_prefix.is_empty() {
        "/".to_owned()
    } else {
        format!("/{}/", key_prefix.trim_end_matches('/'))
    }
}

fn check_value(key: &str, value: &[u8]) -> Result<(), StoreError> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(StoreError::ValueTooLarge {
            key: key.to_owned(),
            value_bytes: value.len(),
        });
    }
    Ok(())
}

fn describe_keys(operation: &str, keys: &[String]) -> String {
    match keys {
        [] => format!("{operation} (no keys)"),
        [key] => format!("{operation} {key:?}"),
        [first, ..] => format!("{operation} {first:?} and {} more key(s)", keys.len() - 1),
    }
}
