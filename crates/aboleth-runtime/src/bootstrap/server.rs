//! Our own TCPStore server, for jobs that no torchrun agent serves: a listener thread plus one
//! thread per connection, over one locked key/value map, answering the queries of
//! [`super::protocol`] with the semantics of torch's libuv server, so that both our client and
//! torch's `TCPStore(..., is_master=False)` can use it.
//!
//! What it does not do: persist anything, authenticate anyone (like torch's, it trusts whoever
//! can connect; the job token of [`super::TcpStoreBootstrap`] guards against accidental joins,
//! not attackers), serve torch's queue queries (QUEUE_PUSH/POP/LEN), or scale to thousands of
//! clients (one thread each; fine for one rank per GPU).

use std::collections::HashMap;
use std::io::{self, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use super::protocol::{
    self, CheckResponse, MAX_KEY_BYTES, MAX_VALUE_BYTES, QueryType, VALIDATION_MAGIC_NUMBER,
    WaitResponse,
};

/// How often the listener looks for new connections and for a shutdown request.
const ACCEPT_POLL_INTERVAL: Duration = Duration::from_millis(10);
/// Bound on one reply write, so that a client that stops reading cannot stall the store.
const REPLY_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// A running store server; dropping it stops it.
#[derive(Debug)]
pub struct TcpStoreServer {
    local_address: SocketAddr,
    shared: Arc<Shared>,
    listener_thread: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<StoreState>,
    stopping: AtomicBool,
    connection_threads: Mutex<Vec<JoinHandle<()>>>,
}

#[derive(Debug, Default)]
struct StoreState {
    values: HashMap<Vec<u8>, Vec<u8>>,
    connections: HashMap<u64, ConnectionState>,
    /// Key -> connections waiting for it.
    waiting_by_key: HashMap<Vec<u8>, Vec<u64>>,
    next_connection_id: u64,
}

#[derive(Debug)]
struct ConnectionState {
    /// Write half. Every write happens under the state lock, so replies and wake-ups written by
    /// different threads never interleave.
    writer: TcpStream,
    /// Keys of the pending WAIT not yet set; 0 when not waiting.
    keys_awaited: usize,
}

impl TcpStoreServer {
    /// Listens on `address` (port 0 picks a free port) and starts serving.
    pub fn bind(address: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind(address)?;
        // Non-blocking accept so that the listener thread can notice a shutdown request.
        listener.set_nonblocking(true)?;
        let local_address = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let listener_shared = Arc::clone(&shared);
        let listener_thread = std::thread::Builder::new()
            .name("aboleth-store".to_owned())
            .spawn(move || accept_loop(listener, listener_shared))?;
        tracing::info!(%local_address, "TCPStore server listening");
        Ok(Self {
            local_address,
            shared,
            listener_thread: Some(listener_thread),
        })
    }

    /// The address actually bound.
    pub fn local_address(&self) -> SocketAddr {
        self.local_address
    }

    /// Connections currently open (validated or not).
    pub fn open_connection_count(&self) -> usize {
        lock(&self.shared.state).connections.len()
    }

    /// Stops accepting, closes every connection and joins the server's threads.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        if let Some(thread) = self.listener_thread.take() {
            let _ = thread.join();
        }
        for connection in lock(&self.shared.state).connections.values() {
            // Wakes the connection's reader thread with end-of-file.
            let _ = connection.writer.shutdown(std::net::Shutdown::Both);
        }
        let threads = std::mem::take(&mut *lock(&self.shared.connection_threads));
        for thread in threads {
            let _ = thread.join();
        }
        tracing::debug!(local_address = %self.local_address, "TCPStore server stopped");
    }
}

impl Drop for TcpStoreServer {
    fn drop(&mut self) {
        if self.listener_thread.is_some() {
            self.stop();
        }
    }
}

/// Locks, ignoring poisoning: a panicking connection thread leaves the map consistent, since
/// every update is a single insert or remove.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    while !shared.stopping.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, peer)) => {
                if let Err(error) = start_connection(stream, peer, &shared) {
                    tracing::warn!(%peer, %error, "TCPStore server could not serve a connection");
                }
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(ACCEPT_POLL_INTERVAL);
            }
            Err(error) => {
                tracing::warn!(%error, "TCPStore server accept failed");
                std::thread::sleep(ACCEPT_POLL_INTERVAL);
            }
        }
    }
}

fn start_connection(stream: TcpStream, peer: SocketAddr, shared: &Arc<Shared>) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    let writer = stream.try_clone()?;
    writer.set_write_timeout(Some(REPLY_WRITE_TIMEOUT))?;
    let connection_id = {
        let mut state = lock(&shared.state);
        let connection_id = state.next_connection_id;
        state.next_connection_id += 1;
        state.connections.insert(
            connection_id,
            ConnectionState {
                writer,
                keys_awaited: 0,
            },
        );
        connection_id
    };
    let thread_shared = Arc::clone(shared);
    let thread = std::thread::Builder::new()
        .name(format!("aboleth-store-{connection_id}"))
        .spawn(move || {
            let result = serve_connection(stream, connection_id, &thread_shared);
            if let Err(error) = result
                && !thread_shared.stopping.load(Ordering::SeqCst)
            {
                tracing::warn!(%peer, %error, "TCPStore server closed a connection");
            }
            let mut state = lock(&thread_shared.state);
            clear_wait_state(&mut state, connection_id);
            state.connections.remove(&connection_id);
        })?;
    let mut threads = lock(&shared.connection_threads);
    // Dropping the handle of a finished thread only detaches it; keeps the list short.
    threads.retain(|thread| !thread.is_finished());
    threads.push(thread);
    Ok(())
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// Serves one connection until end-of-file (`Ok`) or a protocol violation (`Err`).
fn serve_connection(stream: TcpStream, connection_id: u64, shared: &Shared) -> io::Result<()> {
    let mut reader = BufReader::new(stream);
    let mut validated = false;
    loop {
        let code = match protocol::read_u8(&mut reader) {
            Ok(code) => code,
            Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(error) => return Err(error),
        };
        let query = QueryType::from_u8(code)
            .ok_or_else(|| invalid(format!("unknown or unsupported query code {code}")))?;
        if !validated {
            // torch's libuv server accepts nothing before VALIDATE: neither do we.
            if query != QueryType::Validate {
                return Err(invalid(format!(
                    "first query is {query:?}, not VALIDATE: not a TCPStore client"
                )));
            }
            let magic = protocol::read_u32(&mut reader)?;
            if magic != VALIDATION_MAGIC_NUMBER {
                return Err(invalid(format!(
                    "validation magic number {magic:#x} is not {VALIDATION_MAGIC_NUMBER:#x}"
                )));
            }
            validated = true;
            continue;
        }
        serve_query(query, &mut reader, connection_id, shared)?;
    }
}

fn read_key(reader: &mut BufReader<TcpStream>) -> io::Result<Vec<u8>> {
    protocol::read_bytes(reader, MAX_KEY_BYTES)
}

fn read_value(reader: &mut BufReader<TcpStream>) -> io::Result<Vec<u8>> {
    protocol::read_bytes(reader, MAX_VALUE_BYTES)
}

fn read_keys(reader: &mut BufReader<TcpStream>) -> io::Result<Vec<Vec<u8>>> {
    let count = protocol::read_key_count(reader)?;
    (0..count).map(|_| read_key(reader)).collect()
}

fn encode_bytes(reply: &mut Vec<u8>, value: &[u8]) {
    reply.extend_from_slice(&(value.len() as u64).to_le_bytes());
    reply.extend_from_slice(value);
}

fn serve_query(
    query: QueryType,
    reader: &mut BufReader<TcpStream>,
    connection_id: u64,
    shared: &Shared,
) -> io::Result<()> {
    // Read the whole request before taking the lock: a slow sender must not stall the store.
    match query {
        QueryType::Validate => {
            // A second VALIDATE is harmless; torch's server ignores it too.
            let _ = protocol::read_u32(reader)?;
        }
        QueryType::Ping => {
            let nonce = protocol::read_u32(reader)?;
            reply(shared, connection_id, &nonce.to_le_bytes())?;
        }
        QueryType::Set => {
            let key = read_key(reader)?;
            let value = read_value(reader)?;
            let mut state = lock(&shared.state);
            state.values.insert(key.clone(), value);
            wake_waiters(&mut state, &key);
        }
        QueryType::Append => {
            let key = read_key(reader)?;
            let value = read_value(reader)?;
            let mut state = lock(&shared.state);
            let stored = state.values.entry(key.clone()).or_default();
            if stored.len() + value.len() > MAX_VALUE_BYTES {
                return Err(invalid(format!(
                    "append would grow a value past {MAX_VALUE_BYTES} bytes"
                )));
            }
            stored.extend_from_slice(&value);
            wake_waiters(&mut state, &key);
        }
        QueryType::CompareSet => {
            let key = read_key(reader)?;
            let expected = read_value(reader)?;
            let desired = read_value(reader)?;
            let mut state = lock(&shared.state);
            let current = match state.values.get_mut(&key) {
                None if expected.is_empty() => {
                    state.values.insert(key.clone(), desired.clone());
                    desired
                }
                // torch answers `expected` for a missing key: keep its semantics.
                None => expected,
                Some(stored) => {
                    if *stored == expected {
                        *stored = desired;
                    }
                    stored.clone()
                }
            };
            wake_waiters(&mut state, &key);
            let mut bytes = Vec::with_capacity(8 + current.len());
            encode_bytes(&mut bytes, &current);
            write_locked(&mut state, connection_id, &bytes)?;
        }
        QueryType::Get => {
            let key = read_key(reader)?;
            let mut state = lock(&shared.state);
            let mut bytes = Vec::new();
            encode_bytes(
                &mut bytes,
                state.values.get(&key).map_or(&[][..], Vec::as_slice),
            );
            write_locked(&mut state, connection_id, &bytes)?;
        }
        QueryType::Add => {
            let key = read_key(reader)?;
            let delta = protocol::read_i64(reader)?;
            let mut state = lock(&shared.state);
            let current = match state.values.get(&key) {
                None => 0,
                Some(text) => std::str::from_utf8(text)
                    .ok()
                    .and_then(|text| text.parse::<i64>().ok())
                    .ok_or_else(|| {
                        invalid(format!(
                            "ADD on key {:?}, whose value is not a decimal integer",
                            String::from_utf8_lossy(&key)
                        ))
                    })?,
            };
            let updated = current.wrapping_add(delta);
            state
                .values
                .insert(key.clone(), updated.to_string().into_bytes());
            wake_waiters(&mut state, &key);
            write_locked(&mut state, connection_id, &updated.to_le_bytes())?;
        }
        QueryType::Check => {
            let keys = read_keys(reader)?;
            let mut state = lock(&shared.state);
            let ready = keys.iter().all(|key| state.values.contains_key(key));
            let response = if ready {
                CheckResponse::Ready
            } else {
                CheckResponse::NotReady
            };
            write_locked(&mut state, connection_id, &[response as u8])?;
        }
        QueryType::Wait => {
            let keys = read_keys(reader)?;
            let mut state = lock(&shared.state);
            let missing: Vec<Vec<u8>> = keys
                .into_iter()
                .filter(|key| !state.values.contains_key(key))
                .collect();
            if missing.is_empty() {
                write_locked(
                    &mut state,
                    connection_id,
                    &[WaitResponse::StopWaiting as u8],
                )?;
            } else {
                if let Some(connection) = state.connections.get_mut(&connection_id) {
                    connection.keys_awaited = missing.len();
                }
                for key in missing {
                    state
                        .waiting_by_key
                        .entry(key)
                        .or_default()
                        .push(connection_id);
                }
            }
        }
        QueryType::CancelWait => {
            let mut state = lock(&shared.state);
            clear_wait_state(&mut state, connection_id);
            write_locked(
                &mut state,
                connection_id,
                &[WaitResponse::WaitCanceled as u8],
            )?;
        }
        QueryType::GetNumKeys => {
            let mut state = lock(&shared.state);
            let count = state.values.len() as i64;
            write_locked(&mut state, connection_id, &count.to_le_bytes())?;
        }
        QueryType::DeleteKey => {
            let key = read_key(reader)?;
            let mut state = lock(&shared.state);
            let deleted = i64::from(state.values.remove(&key).is_some());
            write_locked(&mut state, connection_id, &deleted.to_le_bytes())?;
        }
        QueryType::MultiGet => {
            let keys = read_keys(reader)?;
            let mut state = lock(&shared.state);
            let mut bytes = Vec::new();
            for key in &keys {
                encode_bytes(
                    &mut bytes,
                    state.values.get(key).map_or(&[][..], Vec::as_slice),
                );
            }
            write_locked(&mut state, connection_id, &bytes)?;
        }
        QueryType::MultiSet => {
            let count = protocol::read_key_count(reader)?;
            let mut pairs = Vec::with_capacity(count);
            for _ in 0..count {
                let key = read_key(reader)?;
                let value = read_value(reader)?;
                pairs.push((key, value));
            }
            let mut state = lock(&shared.state);
            for (key, value) in pairs {
                state.values.insert(key.clone(), value);
                wake_waiters(&mut state, &key);
            }
        }
    }
    Ok(())
}

fn reply(shared: &Shared, connection_id: u64, bytes: &[u8]) -> io::Result<()> {
    write_locked(&mut lock(&shared.state), connection_id, bytes)
}

fn write_locked(state: &mut StoreState, connection_id: u64, bytes: &[u8]) -> io::Result<()> {
    match state.connections.get(&connection_id) {
        Some(connection) => (&connection.writer).write_all(bytes),
        None => Err(io::Error::new(
            io::ErrorKind::NotConnected,
            "connection already unregistered",
        )),
    }
}

/// Sends STOP_WAITING to every connection whose last awaited key is `key`.
fn wake_waiters(state: &mut StoreState, key: &[u8]) {
    let Some(waiting) = state.waiting_by_key.remove(key) else {
        return;
    };
    for connection_id in waiting {
        let Some(connection) = state.connections.get_mut(&connection_id) else {
            continue;
        };
        connection.keys_awaited = connection.keys_awaited.saturating_sub(1);
        if connection.keys_awaited == 0
            && let Err(error) = (&connection.writer).write_all(&[WaitResponse::StopWaiting as u8])
        {
            // Its reader thread will see the broken socket and clean up.
            tracing::debug!(connection_id, %error, "TCPStore server could not wake a waiter");
        }
    }
}

fn clear_wait_state(state: &mut StoreState, connection_id: u64) {
    if let Some(connection) = state.connections.get_mut(&connection_id) {
        if connection.keys_awaited == 0 {
            return;
        }
        connection.keys_awaited = 0;
    }
    state.waiting_by_key.retain(|_, waiting| {
        waiting.retain(|&waiter| waiter != connection_id);
        !waiting.is_empty()
    });
}
