//! Rank rendezvous over a key/value store that speaks PyTorch's TCPStore protocol: the ranks of
//! one job find each other, check that they belong to the same job, and exchange small blobs
//! (region descriptors, IPC handles) with [`TcpStoreBootstrap::all_gather`] and
//! [`TcpStoreBootstrap::barrier`].
//!
//! Where the store lives. Under torchrun (`TORCHELASTIC_USE_AGENT_STORE=True`) the elastic
//! agent already hosts a TCPStore on `MASTER_PORT`: every rank connects to it as a client and
//! puts its keys under the prefix `/worker/attempt_{TORCHELASTIC_RESTART_COUNT}`, as torch's
//! own worker store (a `PrefixStore` over a `TCPStore`) does, so a restarted attempt never sees
//! the keys of the previous one; keys are named on the wire exactly as torch names them (see
//! [`TcpStoreClient::connect`]).
//! Otherwise rank 0 hosts our own [`TcpStoreServer`] on `MASTER_PORT` and every rank (rank 0
//! included) connects to `MASTER_ADDR:MASTER_PORT`; if the port is already taken (for example by
//! a `torch.distributed` store of the same job), rank 0 joins that store as a client instead.
//! Our keys live under a namespace `aboleth/{n}`, where `n` counts the configurations this
//! process read with [`BootstrapConfig::from_env`] (so a process may create several bootstraps,
//! as long as every rank creates them in the same order).
//!
//! Job token. Every rank presents a token: `ABOLETH_JOB_TOKEN` if set, otherwise one derived on
//! each rank from the job identity its launcher put in the environment (`WORLD_SIZE`,
//! `MASTER_PORT`, and whichever of `TORCHELASTIC_RUN_ID`, `TORCHELASTIC_RESTART_COUNT`,
//! `SLURM_JOB_ID`, `SLURM_STEP_ID`, `PMIX_NAMESPACE` are set). Rank 0 publishes a digest of its
//! token in the session record; every other rank compares its own digest with it and, on a
//! mismatch, refuses itself with [`BootstrapError::JobTokenMismatch`] and posts a "refused"
//! alert that the other ranks log (and name if they later time out waiting for that rank). A
//! refused process never writes rank keys, so the real rank can still join. The token guards
//! against accidents (a stray process of another job reaching the same port), not attackers:
//! the TCPStore protocol has no authentication, and the digest (FNV-1a) is not cryptographic.
//! Rank 0 also refuses to start on a store that already holds a session it did not create.
//!
//! Limits. `WORLD_SIZE` must be 1 to [`MAX_WORLD_SIZE`] (65536) and `RANK` below it: both are
//! checked by [`BootstrapConfig::from_lookup`] and again by [`TcpStoreBootstrap::connect`]
//! before anything proportional to them is allocated or sent, and the error names the variable,
//! its value, the limit and the fix.
//!
//! Collectives. A rank publishes its record (`collective/{n}/{rank}`), appends its rank number to
//! the collective's arrival list, and adds one to its count; the rank that brings the count to
//! `WORLD_SIZE` sets the collective's `complete` key, which is all the others wait for. So no wait
//! request carries one key per rank, and an `all_gather` reads the records in a few MULTI_GETs
//! once they are all there. Rank 0 deletes the shared keys of collective `n - 1` at the end of
//! collective `n` (each rank deletes its own record), when every rank is known to be done with
//! them.
//!
//! Timeouts. Every blocking operation has a deadline (`ABOLETH_BOOTSTRAP_TIMEOUT_S`, default
//! 300 s, measured from the start of the operation; for [`TcpStoreBootstrap::connect`], from
//! its start) that bounds the whole operation, not each peer or request: every store reply is
//! awaited until the deadline at most (plus [`DEADLINE_GRACE`] for the replies already asked
//! for when it passes), so an operation and its diagnosis end within the timeout plus half a
//! second whatever `WORLD_SIZE` is; reporting a failure to the other ranks adds at most another
//! [`DEADLINE_GRACE`] (and [`FAILURE_LINGER`] on a store-hosting rank 0). Waiting is done in short slices, between which a rank polls the job's
//! alerts: a rank that fails a collective posts an "abort" alert naming the missing ranks, so
//! every other rank fails promptly with the same diagnosis instead of a lost connection. A rank
//! that times out reads the arrival list once and names the missing ranks: the first
//! [`NAMED_MISSING_RANKS`] (8), then how many more of how many ("ranks 1, 2, 3, 4, 5, 6, 7, 8
//! and 4991 more (4999 of 5000) did not arrive"), so the message stays short at any world size.
//! Rank 0, when it hosts the store, keeps it up after a failure for at most [`FAILURE_LINGER`]
//! so the others can read that alert, and at a normal close until every other rank has
//! disconnected (at most the bootstrap timeout).
//!
//! What it does not do: tolerate rank failures (one missing rank fails the whole rendezvous),
//! authenticate, or move large data (values are limited to torch's 8 MiB).

pub mod client;
pub mod protocol;
pub mod server;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use client::{StoreError, TcpStoreClient};
pub use server::TcpStoreServer;

/// Most ranks one bootstrap accepts (`WORLD_SIZE`); a larger value is refused by
/// [`BootstrapConfig::from_lookup`] and [`TcpStoreBootstrap::connect`] before anything is
/// allocated or sent. Why 65536: every rank holds one TCP connection to the single store (rank 0's
/// server spends a thread on each), and a timeout reads the collective's arrival list (4 bytes
/// a rank, 256 KiB at this limit) while `all_gather` returns a table of `WORLD_SIZE` entries:
/// this bound keeps all of them small and a failure report fast, and is well above the
/// number of GPUs of any job one store rendezvous serves today. A larger value is almost always
/// a launcher mistake (a garbled or multiplied `WORLD_SIZE`).
pub const MAX_WORLD_SIZE: u32 = 65536;
/// Missing ranks a timeout message names; the others are counted, so that the message stays
/// short whatever `WORLD_SIZE` is.
pub const NAMED_MISSING_RANKS: usize = 8;
/// Refused processes a timeout message describes; the others are counted.
const NAMED_REFUSALS: usize = 3;
/// How long past an operation's deadline a rank may spend on replies already asked for (the
/// cancellation of the last wait, the read of the arrival list that names the missing ranks),
/// and how long posting a failure alert may take. Every operation therefore ends within its
/// timeout plus this, whatever `WORLD_SIZE` is (see the module comment for failure reports).
pub const DEADLINE_GRACE: Duration = Duration::from_millis(500);
/// Records one MULTI_GET reads when an `all_gather` collects the other ranks' contributions.
const GATHER_KEYS_PER_REQUEST: usize = 1024;

/// Default of `ABOLETH_BOOTSTRAP_TIMEOUT_S`, in seconds.
pub const DEFAULT_TIMEOUT_SECONDS: f64 = 300.0;
/// How long a store-hosting rank 0 keeps the store up after a failure, so that the other ranks
/// can read its abort alert.
pub const FAILURE_LINGER: Duration = Duration::from_secs(1);

/// First wait slice; doubled up to [`MAXIMUM_WAIT_SLICE`]. Between slices a rank polls alerts.
const FIRST_WAIT_SLICE: Duration = Duration::from_millis(20);
/// Longest wait slice: bounds how late a rank notices another rank's abort.
const MAXIMUM_WAIT_SLICE: Duration = Duration::from_millis(250);
/// How long to wait for an alert whose counter was bumped but whose text is not yet stored.
const ALERT_FETCH_TIMEOUT: Duration = Duration::from_secs(1);
/// Environment variables that identify a job, hashed into the derived job token.
const JOB_IDENTITY_VARIABLES: [&str; 7] = [
    "WORLD_SIZE",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "PMIX_NAMESPACE",
];
/// Version tag of the session record, so that incompatible Aboleth builds refuse each other.
const SESSION_VERSION: &str = "aboleth-bootstrap-v1";

/// Configurations this process read from its environment; numbers the key namespaces.
static BOOTSTRAPS_CREATED: AtomicU64 = AtomicU64::new(0);

/// Why the bootstrap failed.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// A required environment variable is not set.
    #[error(
        "environment variable {name} is not set; the bootstrap reads MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE (torchrun sets them; otherwise export them for every rank)"
    )]
    MissingEnvironmentVariable {
        /// The variable.
        name: &'static str,
    },
    /// An environment variable has an unusable value.
    #[error("environment variable {name}={value:?} is invalid: expected {expected}")]
    InvalidEnvironmentVariable {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// What would be valid.
        expected: String,
    },
    /// An argument of [`BootstrapConfig::for_rendezvous`] has an unusable value.
    #[error("{name}={value:?} is invalid: expected {expected}")]
    InvalidArgument {
        /// The argument.
        name: &'static str,
        /// Its value.
        value: String,
        /// What would be valid.
        expected: String,
    },
    /// Rank 0 cannot listen on `MASTER_PORT`.
    #[error("rank 0 cannot host the TCPStore on port {port}: {source}; choose another MASTER_PORT")]
    HostStore {
        /// The port.
        port: u16,
        /// The error.
        source: std::io::Error,
    },
    /// The store failed or cannot be reached.
    #[error("rank {rank}: {source}")]
    Store {
        /// This rank.
        rank: u32,
        /// The store error.
        source: StoreError,
    },
    /// Some ranks did not arrive in time. The message names the first [`NAMED_MISSING_RANKS`]
    /// missing ranks and counts the others.
    #[error(
        "rank {rank}: {operation} timed out after {timeout_seconds:.1} s: {missing} did not arrive{refusals}; check that every rank was started with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE, or raise ABOLETH_BOOTSTRAP_TIMEOUT_S",
        missing = format_missing_ranks(missing_ranks, *world_size),
        refusals = format_refusals(refused_ranks)
    )]
    Timeout {
        /// This rank.
        rank: u32,
        /// What was being waited for.
        operation: String,
        /// The timeout.
        timeout_seconds: f64,
        /// Ranks whose keys are missing, ascending (at most [`MAX_WORLD_SIZE`]).
        missing_ranks: Vec<u32>,
        /// Number of ranks of the job.
        world_size: u32,
        /// Missing ranks that were seen refused, with the reason.
        refused_ranks: BTreeMap<u32, String>,
    },
    /// This process presented a job token other than rank 0's.
    #[error(
        "rank {rank} refused: its job token (digest {own_digest}, {own_source}) differs from the one rank 0 published (digest {host_digest}); this process belongs to another job, or the ranks were given different tokens: set ABOLETH_JOB_TOKEN to one value for every rank of the job"
    )]
    JobTokenMismatch {
        /// This rank.
        rank: u32,
        /// Digest of this rank's token.
        own_digest: String,
        /// Where this rank's token came from.
        own_source: String,
        /// Digest rank 0 published.
        host_digest: String,
    },
    /// This process disagrees with rank 0 on the world size.
    #[error(
        "rank {rank} refused: WORLD_SIZE is {own_world_size} here but {host_world_size} on rank 0; give every rank the same WORLD_SIZE"
    )]
    WorldSizeMismatch {
        /// This rank.
        rank: u32,
        /// This rank's world size.
        own_world_size: u32,
        /// Rank 0's.
        host_world_size: u32,
    },
    /// Another process already joined with this rank.
    #[error(
        "rank {rank} refused: another process already joined as rank {rank}; give every process a distinct RANK"
    )]
    DuplicateRank {
        /// The contested rank.
        rank: u32,
    },
    /// The store already holds a session rank 0 did not create.
    #[error(
        "rank 0: the TCPStore at {address} already holds an Aboleth session it did not create ({existing}); another job, or a leftover process, uses the same MASTER_PORT: stop it or choose another MASTER_PORT"
    )]
    StoreInUse {
        /// `host:port`.
        address: String,
        /// The session record found.
        existing: String,
    },
    /// Rank 0's session record is not one this build understands.
    #[error(
        "rank {rank}: rank 0's session record {record:?} is not understood by this build; run the same Aboleth version on every rank"
    )]
    IncompatibleSession {
        /// This rank.
        rank: u32,
        /// The record.
        record: String,
    },
    /// Another rank failed and told the others.
    #[error("rank {rank}: rank {peer_rank} aborted the bootstrap: {message}")]
    AbortedByPeer {
        /// This rank.
        rank: u32,
        /// The rank that aborted.
        peer_rank: u32,
        /// Its error.
        message: String,
    },
    /// Ranks called different collectives at the same point.
    #[error(
        "rank {rank}: collective #{sequence} is {expected} here but {found} on rank {peer_rank}; every rank must call barrier and all_gather in the same order with the same names"
    )]
    CollectiveMismatch {
        /// This rank.
        rank: u32,
        /// Collective number.
        sequence: u64,
        /// What this rank called.
        expected: String,
        /// The other rank.
        peer_rank: u32,
        /// What it called.
        found: String,
    },
    /// An all_gather contribution larger than the store accepts.
    #[error(
        "rank {rank}: all_gather {name:?}: {blob_bytes} bytes exceed the {limit_bytes} bytes one store value can carry; gather smaller pieces"
    )]
    BlobTooLarge {
        /// This rank.
        rank: u32,
        /// The collective's name.
        name: String,
        /// Blob size.
        blob_bytes: usize,
        /// Largest allowed.
        limit_bytes: usize,
    },
    /// A user key did not appear in time.
    #[error(
        "rank {rank}: key {key:?} did not appear within {timeout_seconds:.1} s; check that the rank expected to set it runs, or raise ABOLETH_BOOTSTRAP_TIMEOUT_S"
    )]
    KeyTimeout {
        /// This rank.
        rank: u32,
        /// The key (without namespace).
        key: String,
        /// The timeout.
        timeout_seconds: f64,
    },
    /// A record in the store is garbled.
    #[error(
        "rank {rank}: store record {key:?} is garbled ({detail}); another program may write to this store"
    )]
    CorruptRecord {
        /// This rank.
        rank: u32,
        /// The key.
        key: String,
        /// What is wrong.
        detail: String,
    },
    /// An earlier collective failed, so the ranks are out of step.
    #[error(
        "rank {rank}: an earlier bootstrap operation failed ({first_error}); this bootstrap cannot continue: create a new one"
    )]
    AlreadyFailed {
        /// This rank.
        rank: u32,
        /// The first failure.
        first_error: String,
    },
}

/// `rank 2 of 3`, `ranks 1, 2 and 3 of 5`, or `ranks 1, 2, ..., 8 and 4991 more (4999 of
/// 5000)`: at most [`NAMED_MISSING_RANKS`] ranks named, whatever their number.
fn format_missing_ranks(missing_ranks: &[u32], world_size: u32) -> String {
    let named = &missing_ranks[..missing_ranks.len().min(NAMED_MISSING_RANKS)];
    let unnamed = missing_ranks.len() - named.len();
    let mut text = String::from(if missing_ranks.len() == 1 {
        "rank "
    } else {
        "ranks "
    });
    for (index, rank) in named.iter().enumerate() {
        if index > 0 {
            text.push_str(if index + 1 == named.len() && unnamed == 0 {
                " and "
            } else {
                ", "
            });
        }
        let _ = write!(text, "{rank}");
    }
    if unnamed > 0 {
        let _ = write!(
            text,
            " and {unnamed} more ({} of {world_size})",
            missing_ranks.len()
        );
    } else {
        let _ = write!(text, " of {world_size}");
    }
    text
}

/// The first [`NAMED_REFUSALS`] refusals with their reasons, then a count of the others.
fn format_refusals(refused_ranks: &BTreeMap<u32, String>) -> String {
    let mut text = String::new();
    for (rank, reason) in refused_ranks.iter().take(NAMED_REFUSALS) {
        let _ = write!(
            text,
            " (a process claiming rank {rank} was refused: {reason})"
        );
    }
    if refused_ranks.len() > NAMED_REFUSALS {
        let _ = write!(
            text,
            " (and {} more processes claiming missing ranks were refused)",
            refused_ranks.len() - NAMED_REFUSALS
        );
    }
    text
}

/// What `WORLD_SIZE` must be, for its error message.
fn world_size_expected() -> String {
    format!(
        "a number of ranks from 1 to {MAX_WORLD_SIZE} (the bootstrap's limit); set WORLD_SIZE to the number of processes in the job (torchrun sets it to nnodes x nproc_per_node)"
    )
}

/// What `RANK` must be, for its error message.
fn rank_expected(world_size: u32) -> String {
    format!(
        "a rank from 0 to {} (below WORLD_SIZE={world_size}); give every process a distinct RANK",
        world_size - 1
    )
}

/// 64-bit FNV-1a followed by the splitmix64 finalizer (so that similar tokens get visibly
/// different digests): stable across builds and platforms, unlike `DefaultHasher`. Not
/// cryptographic (see the module comment).
fn fnv1a_64(bytes: &[u8]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash = (hash ^ (hash >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash = (hash ^ (hash >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
}

/// The token a rank presents; only its digest ever leaves the process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobToken {
    digest: u64,
    source: String,
}

impl JobToken {
    /// A token from a secret string (what `ABOLETH_JOB_TOKEN` holds); `source` says where it
    /// came from, for error messages.
    pub fn from_secret(secret: &str, source: &str) -> Self {
        let mut input = b"aboleth-job-token\0".to_vec();
        input.extend_from_slice(secret.as_bytes());
        Self {
            digest: fnv1a_64(&input),
            source: source.to_owned(),
        }
    }

    /// The token derived from the job identity in the environment (see the module comment).
    pub fn derive(lookup: &dyn Fn(&str) -> Option<String>) -> Self {
        let mut identity = String::new();
        let mut description = String::new();
        for name in JOB_IDENTITY_VARIABLES {
            if let Some(value) = lookup(name) {
                let _ = writeln!(identity, "{name}={value}");
                if !description.is_empty() {
                    description.push(' ');
                }
                let _ = write!(description, "{name}={value}");
            }
        }
        Self::from_secret(
            &identity,
            &format!("derived from {description} since ABOLETH_JOB_TOKEN is unset"),
        )
    }

    /// The digest as 16 hex digits.
    pub fn digest_hex(&self) -> String {
        format!("{:016x}", self.digest)
    }

    /// Where the token came from.
    pub fn source(&self) -> &str {
        &self.source
    }
}

/// Who hosts the key/value store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreHosting {
    /// torchrun's elastic agent hosts it on `MASTER_PORT`; keys go under
    /// `/worker/attempt_{restart_count}/`.
    TorchElasticAgent {
        /// `TORCHELASTIC_RESTART_COUNT`.
        restart_count: u32,
    },
    /// Rank 0 hosts it on `MASTER_PORT`, or joins a store already listening there.
    RankZero,
}

/// Everything [`TcpStoreBootstrap::connect`] needs.
#[derive(Clone, Debug)]
pub struct BootstrapConfig {
    /// Host of the store (`MASTER_ADDR`).
    pub master_address: String,
    /// Port of the store (`MASTER_PORT`).
    pub master_port: u16,
    /// This process's rank (`RANK`).
    pub rank: u32,
    /// Number of ranks (`WORLD_SIZE`).
    pub world_size: u32,
    /// Deadline of every blocking operation (`ABOLETH_BOOTSTRAP_TIMEOUT_S`).
    pub timeout: Duration,
    /// The token this rank presents.
    pub job_token: JobToken,
    /// Who hosts the store.
    pub hosting: StoreHosting,
    /// Prefix of every key this bootstrap uses (default `aboleth/{n}`, see the module comment).
    pub key_namespace: String,
}

fn required(
    lookup: &dyn Fn(&str) -> Option<String>,
    name: &'static str,
) -> Result<String, BootstrapError> {
    lookup(name).ok_or(BootstrapError::MissingEnvironmentVariable { name })
}

fn parse_variable<T: std::str::FromStr>(
    name: &'static str,
    value: &str,
    expected: &str,
) -> Result<T, BootstrapError> {
    value
        .trim()
        .parse()
        .map_err(|_| BootstrapError::InvalidEnvironmentVariable {
            name,
            value: value.to_owned(),
            expected: expected.to_owned(),
        })
}

impl BootstrapConfig {
    /// Checks the fields that come from `WORLD_SIZE` and `RANK` (for a configuration built in
    /// code rather than read by [`Self::from_lookup`], which checks them too): a world of 1 to
    /// [`MAX_WORLD_SIZE`] ranks, and a rank inside it. The error names the variable the field
    /// stands for.
    pub fn validate(&self) -> Result<(), BootstrapError> {
        if self.world_size == 0 || self.world_size > MAX_WORLD_SIZE {
            return Err(BootstrapError::InvalidEnvironmentVariable {
                name: "WORLD_SIZE",
                value: self.world_size.to_string(),
                expected: world_size_expected(),
            });
        }
        if self.rank >= self.world_size {
            return Err(BootstrapError::InvalidEnvironmentVariable {
                name: "RANK",
                value: self.rank.to_string(),
                expected: rank_expected(self.world_size),
            });
        }
        Ok(())
    }

    /// The configuration of a rendezvous whose store address, rank and world size the caller
    /// knows (a launcher that sets no `MASTER_ADDR`/`MASTER_PORT`/`RANK`/`WORLD_SIZE`, such as
    /// vLLM's workers): those four come from the arguments, the optional variables of
    /// [`Self::from_lookup`] from the environment, and rank 0 hosts the store (never torchrun's
    /// agent: the port is the caller's). Errors name the argument.
    pub fn for_rendezvous(
        master_address: &str,
        master_port: u16,
        rank: u32,
        world_size: u32,
    ) -> Result<Self, BootstrapError> {
        let invalid = |name, value: String, expected: String| BootstrapError::InvalidArgument {
            name,
            value,
            expected,
        };
        if master_address.trim().is_empty() {
            return Err(invalid(
                "master_address",
                master_address.to_owned(),
                "the host name or IP address rank 0 listens on".to_owned(),
            ));
        }
        if master_port == 0 {
            return Err(invalid(
                "master_port",
                "0".to_owned(),
                "a TCP port number (1-65535)".to_owned(),
            ));
        }
        if world_size == 0 || world_size > MAX_WORLD_SIZE {
            return Err(invalid(
                "world_size",
                world_size.to_string(),
                format!("a number of ranks from 1 to {MAX_WORLD_SIZE}"),
            ));
        }
        if rank >= world_size {
            return Err(invalid(
                "rank",
                rank.to_string(),
                format!("a rank from 0 to {} (below world_size)", world_size - 1),
            ));
        }
        let given = [
            ("MASTER_ADDR", master_address.to_owned()),
            ("MASTER_PORT", master_port.to_string()),
            ("RANK", rank.to_string()),
            ("WORLD_SIZE", world_size.to_string()),
        ];
        Self::from_lookup(&|name| {
            if let Some((_, value)) = given.iter().find(|(given_name, _)| *given_name == name) {
                return Some(value.clone());
            }
            if name == "TORCHELASTIC_USE_AGENT_STORE" {
                return None;
            }
            std::env::var(name).ok()
        })
    }

    /// Reads the configuration from the process environment (see [`Self::from_lookup`]).
    pub fn from_env() -> Result<Self, BootstrapError> {
        Self::from_lookup(&|name| std::env::var(name).ok())
    }

    /// Reads `MASTER_ADDR`, `MASTER_PORT`, `RANK`, `WORLD_SIZE` (required),
    /// `ABOLETH_BOOTSTRAP_TIMEOUT_S`, `ABOLETH_JOB_TOKEN`, `TORCHELASTIC_USE_AGENT_STORE` and
    /// `TORCHELASTIC_RESTART_COUNT` (optional) through `lookup`, which returns a variable's value.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, BootstrapError> {
        let master_address = required(lookup, "MASTER_ADDR")?;
        if master_address.trim().is_empty() {
            return Err(BootstrapError::InvalidEnvironmentVariable {
                name: "MASTER_ADDR",
                value: master_address,
                expected: "the host name or IP address of rank 0's machine".to_owned(),
            });
        }
        let master_port: u16 = parse_variable(
            "MASTER_PORT",
            &required(lookup, "MASTER_PORT")?,
            "a TCP port number (1-65535)",
        )?;
        if master_port == 0 {
            return Err(BootstrapError::InvalidEnvironmentVariable {
                name: "MASTER_PORT",
                value: "0".to_owned(),
                expected: "a TCP port number (1-65535)".to_owned(),
            });
        }
        // Checked here, before anything proportional to it is allocated or sent.
        let world_size_text = required(lookup, "WORLD_SIZE")?;
        let world_size: u32 =
            parse_variable("WORLD_SIZE", &world_size_text, &world_size_expected())?;
        if world_size == 0 || world_size > MAX_WORLD_SIZE {
            return Err(BootstrapError::InvalidEnvironmentVariable {
                name: "WORLD_SIZE",
                value: world_size_text,
                expected: world_size_expected(),
            });
        }
        let rank_text = required(lookup, "RANK")?;
        let rank: u32 = parse_variable("RANK", &rank_text, &rank_expected(world_size))?;
        if rank >= world_size {
            return Err(BootstrapError::InvalidEnvironmentVariable {
                name: "RANK",
                value: rank_text,
                expected: rank_expected(world_size),
            });
        }
        let timeout = match lookup("ABOLETH_BOOTSTRAP_TIMEOUT_S") {
            None => Duration::from_secs_f64(DEFAULT_TIMEOUT_SECONDS),
            Some(text) => {
                let expected = "a positive number of seconds, e.g. 300";
                let seconds: f64 = parse_variable("ABOLETH_BOOTSTRAP_TIMEOUT_S", &text, expected)?;
                Duration::try_from_secs_f64(seconds)
                    .ok()
                    .filter(|timeout| !timeout.is_zero())
                    .ok_or_else(|| BootstrapError::InvalidEnvironmentVariable {
                        name: "ABOLETH_BOOTSTRAP_TIMEOUT_S",
                        value: text.clone(),
                        expected: expected.to_owned(),
                    })?
            }
        };
        let job_token = match lookup("ABOLETH_JOB_TOKEN") {
            Some(secret) if !secret.is_empty() => {
                JobToken::from_secret(&secret, "from ABOLETH_JOB_TOKEN")
            }
            _ => JobToken::derive(lookup),
        };
        let use_agent_store = lookup("TORCHELASTIC_USE_AGENT_STORE")
            .is_some_and(|value| matches!(value.trim(), "True" | "true" | "1"));
        let hosting = if use_agent_store {
            let restart_count = parse_variable(
                "TORCHELASTIC_RESTART_COUNT",
                &lookup("TORCHELASTIC_RESTART_COUNT").ok_or(
                    BootstrapError::MissingEnvironmentVariable {
                        name: "TORCHELASTIC_RESTART_COUNT",
                    },
                )?,
                "the attempt number torchrun sets",
            )?;
            StoreHosting::TorchElasticAgent { restart_count }
        } else {
            StoreHosting::RankZero
        };
        let bootstrap_index = BOOTSTRAPS_CREATED.fetch_add(1, Ordering::Relaxed);
        Ok(Self {
            master_address,
            master_port,
            rank,
            world_size,
            timeout,
            job_token,
            hosting,
            key_namespace: format!("aboleth/{bootstrap_index}"),
        })
    }
}

/// What one rank contributed to a collective: `[kind u8][name length u32 LE][name][payload]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CollectiveKind {
    Barrier = 1,
    AllGather = 2,
}

impl CollectiveKind {
    fn describe(self, name: &str) -> String {
        match self {
            Self::Barrier => format!("barrier {name:?}"),
            Self::AllGather => format!("all_gather {name:?}"),
        }
    }
}

fn encode_record(kind: CollectiveKind, name: &str, payload: &[u8]) -> Vec<u8> {
    let mut record = Vec::with_capacity(5 + name.len() + payload.len());
    record.push(kind as u8);
    record.extend_from_slice(&(name.len() as u32).to_le_bytes());
    record.extend_from_slice(name.as_bytes());
    record.extend_from_slice(payload);
    record
}

/// Splits a record into (kind code, name, payload).
fn decode_record(record: &[u8]) -> Option<(u8, &str, &[u8])> {
    let (&kind, rest) = record.split_first()?;
    let name_length = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let name = std::str::from_utf8(rest.get(4..4 + name_length)?).ok()?;
    Some((kind, name, &rest[4 + name_length..]))
}

/// One rank's connection to the job's rendezvous store.
#[derive(Debug)]
pub struct TcpStoreBootstrap {
    config: BootstrapConfig,
    client: TcpStoreClient,
    server: Option<TcpStoreServer>,
    next_collective: u64,
    alerts_seen: i64,
    refused_ranks: BTreeMap<u32, String>,
    failure: Option<String>,
}

impl TcpStoreBootstrap {
    /// Reads the configuration from the environment ([`BootstrapConfig::from_lookup`]) and
    /// connects ([`Self::connect`]).
    pub fn from_env() -> Result<Self, BootstrapError> {
        Self::connect(BootstrapConfig::from_env()?)
    }

    /// Joins the rendezvous: hosts the store if this is rank 0 and nobody else does, connects,
    /// checks the job token and world size against rank 0's session record, claims the rank and
    /// waits until every rank has done the same. Fails within `config.timeout`, naming the
    /// ranks that never arrived.
    pub fn connect(config: BootstrapConfig) -> Result<Self, BootstrapError> {
        config.validate()?;
        let started = Instant::now();
        let deadline = started + config.timeout;
        let rank = config.rank;
        let (server, key_prefix) = match config.hosting {
            StoreHosting::TorchElasticAgent { restart_count } => {
                (None, format!("/worker/attempt_{restart_count}"))
            }
            StoreHosting::RankZero if rank == 0 => (host_store(config.master_port)?, String::new()),
            StoreHosting::RankZero => (None, String::new()),
        };
        let mut client = TcpStoreClient::connect(
            &config.master_address,
            config.master_port,
            &key_prefix,
            deadline,
            config.timeout,
        )
        .map_err(|source| BootstrapError::Store { rank, source })?;
        client.set_deadline(Some(deadline + DEADLINE_GRACE));
        let mut bootstrap = Self {
            config,
            client,
            server,
            next_collective: 0,
            alerts_seen: 0,
            refused_ranks: BTreeMap::new(),
            failure: None,
        };
        match bootstrap.rendezvous(deadline) {
            Ok(()) => {
                tracing::info!(
                    rank,
                    world_size = bootstrap.config.world_size,
                    store = bootstrap.client.address(),
                    hosting_store = bootstrap.server.is_some(),
                    elapsed_seconds = started.elapsed().as_secs_f64(),
                    "bootstrap rendezvous complete"
                );
                Ok(bootstrap)
            }
            Err(error) => {
                bootstrap.record_failure(&error);
                Err(error)
            }
        }
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.config.rank
    }

    /// Number of ranks.
    pub fn world_size(&self) -> u32 {
        self.config.world_size
    }

    /// The configuration in use.
    pub fn config(&self) -> &BootstrapConfig {
        &self.config
    }

    /// Whether this rank hosts the store.
    pub fn hosts_store(&self) -> bool {
        self.server.is_some()
    }

    fn key(&self, suffix: &str) -> String {
        format!("{}/{suffix}", self.config.key_namespace)
    }

    fn collective_key(&self, sequence: u64, rank: u32) -> String {
        self.key(&format!("collective/{sequence}/{rank}"))
    }

    /// A key of collective `sequence` that every rank writes: `arrived` (the numbers of the
    /// ranks that published, 4 bytes little-endian each, appended), `count` (how many
    /// published) and `complete` (set by the last one to publish).
    fn collective_shared_key(&self, sequence: u64, name: &str) -> String {
        self.key(&format!("collective/{sequence}/{name}"))
    }

    /// Bounds every store reply of the operation that ends at `deadline`.
    fn begin_operation(&mut self, deadline: Instant) {
        self.client.set_deadline(Some(deadline + DEADLINE_GRACE));
    }

    fn store_error(&self, source: StoreError) -> BootstrapError {
        BootstrapError::Store {
            rank: self.config.rank,
            source,
        }
    }

    fn rendezvous(&mut self, deadline: Instant) -> Result<(), BootstrapError> {
        let rank = self.config.rank;
        let session_key = self.key("session");
        if rank == 0 {
            let session = format!(
                "{SESSION_VERSION} token={} world_size={} session={:016x}",
                self.config.job_token.digest_hex(),
                self.config.world_size,
                session_nonce(),
            );
            let stored = self
                .client
                .compare_set(&session_key, b"", session.as_bytes())
                .map_err(|source| self.store_error(source))?;
            if stored != session.as_bytes() {
                return Err(BootstrapError::StoreInUse {
                    address: self.client.address().to_owned(),
                    existing: String::from_utf8_lossy(&stored).into_owned(),
                });
            }
        } else {
            if !self.wait_for_key(&session_key, deadline)? {
                return Err(
                    self.timeout_error("rendezvous (waiting for rank 0's session record)", vec![0])
                );
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            let record = self
                .client
                .get(&session_key, remaining)
                .map_err(|source| self.store_error(source))?
                .unwrap_or_default();
            self.check_session(&String::from_utf8_lossy(&record))?;
        }
        let claims = self
            .client
            .add(&self.key(&format!("claim/{rank}")), 1)
            .map_err(|source| self.store_error(source))?;
        if claims > 1 {
            return Err(BootstrapError::DuplicateRank { rank });
        }
        self.collective_until(CollectiveKind::Barrier, "rendezvous", &[], deadline)
            .map(|_| ())
    }

    /// Compares rank 0's session record with this rank's token and world size.
    fn check_session(&self, record: &str) -> Result<(), BootstrapError> {
        let rank = self.config.rank;
        let incompatible = || BootstrapError::IncompatibleSession {
            rank,
            record: record.to_owned(),
        };
        let mut fields = record.split(' ');
        if fields.next() != Some(SESSION_VERSION) {
            return Err(incompatible());
        }
        let mut host_digest = None;
        let mut host_world_size = None;
        for field in fields {
            match field.split_once('=') {
                Some(("token", digest)) => host_digest = Some(digest.to_owned()),
                Some(("world_size", size)) => host_world_size = size.parse::<u32>().ok(),
                _ => {}
            }
        }
        let (Some(host_digest), Some(host_world_size)) = (host_digest, host_world_size) else {
            return Err(incompatible());
        };
        if host_digest != self.config.job_token.digest_hex() {
            return Err(BootstrapError::JobTokenMismatch {
                rank,
                own_digest: self.config.job_token.digest_hex(),
                own_source: self.config.job_token.source().to_owned(),
                host_digest,
            });
        }
        if host_world_size != self.config.world_size {
            return Err(BootstrapError::WorldSizeMismatch {
                rank,
                own_world_size: self.config.world_size,
                host_world_size,
            });
        }
        Ok(())
    }

    /// Logs the failure, tells the other ranks, and (when hosting) gives them a moment to read it.
    fn record_failure(&mut self, error: &BootstrapError) {
        let rank = self.config.rank;
        let message = error.to_string();
        if self.failure.is_none() {
            self.failure = Some(message.clone());
        }
        let alert = match error {
            // Refusals: this process is the odd one out; the real rank may still come. The
            // others get a short reason, for their own log and timeout message.
            BootstrapError::JobTokenMismatch {
                own_digest,
                own_source,
                host_digest,
                ..
            } => Some((
                "refused",
                format!(
                    "its job token digest {own_digest} ({own_source}) is not rank 0's {host_digest}"
                ),
            )),
            BootstrapError::WorldSizeMismatch { own_world_size, .. } => {
                Some(("refused", format!("it has WORLD_SIZE={own_world_size}")))
            }
            BootstrapError::DuplicateRank { .. } => Some((
                "refused",
                "another process had already joined with that rank".to_owned(),
            )),
            BootstrapError::IncompatibleSession { .. } => Some((
                "refused",
                "it runs an Aboleth version that does not understand rank 0's session".to_owned(),
            )),
            // Failures learnt from others, or of the store itself: nothing useful to post.
            BootstrapError::AbortedByPeer { .. }
            | BootstrapError::Store { .. }
            | BootstrapError::AlreadyFailed { .. }
            | BootstrapError::StoreInUse { .. } => None,
            _ => Some((
                "abort",
                message
                    .strip_prefix(&format!("rank {rank}: "))
                    .unwrap_or(&message)
                    .to_owned(),
            )),
        };
        tracing::error!(rank, %message, "bootstrap failed");
        if let Some((kind, text)) = alert
            && let Err(post_error) = self.post_alert(kind, &text)
        {
            tracing::warn!(rank, %post_error, "could not tell the other ranks about the failure");
        }
        if let Some(server) = &self.server {
            let linger_deadline = Instant::now() + FAILURE_LINGER;
            while server.open_connection_count() > 1 && Instant::now() < linger_deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    fn post_alert(&mut self, kind: &str, message: &str) -> Result<(), StoreError> {
        // The failed operation's deadline may have passed: posting gets its own short one.
        self.client
            .set_deadline(Some(Instant::now() + DEADLINE_GRACE));
        let index = self.client.add(&self.key("alerts"), 1)? - 1;
        let text = format!("{kind} {} {message}", self.config.rank);
        self.client
            .set(&self.key(&format!("alert/{index}")), text.as_bytes())
    }

    /// Reads alerts posted since the last poll: logs refusals, fails on aborts. An alert whose
    /// text is not stored yet is awaited until `deadline` at most.
    fn poll_alerts(&mut self, deadline: Instant) -> Result<(), BootstrapError> {
        let count = self
            .client
            .add(&self.key("alerts"), 0)
            .map_err(|source| self.store_error(source))?;
        while self.alerts_seen < count {
            let index = self.alerts_seen;
            self.alerts_seen += 1;
            let key = self.key(&format!("alert/{index}"));
            let Some(text) = self
                .client
                .get(
                    &key,
                    ALERT_FETCH_TIMEOUT.min(deadline.saturating_duration_since(Instant::now())),
                )
                .map_err(|source| self.store_error(source))?
            else {
                continue;
            };
            let text = String::from_utf8_lossy(&text);
            let mut parts = text.splitn(3, ' ');
            let (kind, peer_rank, message) = (
                parts.next().unwrap_or_default(),
                parts.next().and_then(|rank| rank.parse::<u32>().ok()),
                parts.next().unwrap_or_default().to_owned(),
            );
            let Some(peer_rank) = peer_rank else {
                return Err(BootstrapError::CorruptRecord {
                    rank: self.config.rank,
                    key,
                    detail: format!("alert {text:?}"),
                });
            };
            match kind {
                "refused" => {
                    tracing::warn!(
                        rank = self.config.rank,
                        refused_rank = peer_rank,
                        %message,
                        "a process claiming a rank of this job was refused"
                    );
                    self.refused_ranks.insert(peer_rank, message);
                }
                "abort" if peer_rank != self.config.rank => {
                    return Err(BootstrapError::AbortedByPeer {
                        rank: self.config.rank,
                        peer_rank,
                        message,
                    });
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Waits until `key` exists or `deadline` passes, in slices between which it polls the
    /// alerts; whether the key appeared. Each slice is one request of one key, whatever
    /// `WORLD_SIZE` is.
    fn wait_for_key(&mut self, key: &str, deadline: Instant) -> Result<bool, BootstrapError> {
        let keys = [key.to_owned()];
        let mut slice = FIRST_WAIT_SLICE;
        loop {
            self.poll_alerts(deadline)?;
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                // It may have appeared just as the deadline passed.
                return self
                    .client
                    .check(&keys)
                    .map_err(|source| self.store_error(source));
            }
            let arrived = self
                .client
                .wait(&keys, slice.min(remaining))
                .map_err(|source| self.store_error(source))?;
            if arrived {
                return Ok(true);
            }
            slice = (slice * 2).min(MAXIMUM_WAIT_SLICE);
        }
    }

    /// The ranks that have not published collective `sequence`, ascending, read from its
    /// arrival list in one request (at most 4 bytes a rank).
    fn missing_ranks(&mut self, sequence: u64) -> Result<Vec<u32>, BootstrapError> {
        let world_size = self.config.world_size;
        let key = self.collective_shared_key(sequence, "arrived");
        let list = self
            .client
            .multi_get(std::slice::from_ref(&key))
            .map_err(|source| self.store_error(source))?
            .pop()
            .unwrap_or_default();
        let corrupt = |detail: String| BootstrapError::CorruptRecord {
            rank: self.config.rank,
            key: key.clone(),
            detail,
        };
        if list.len() % 4 != 0 {
            return Err(corrupt(format!(
                "{} bytes, not a list of 4-byte rank numbers",
                list.len()
            )));
        }
        let mut arrived = vec![false; world_size as usize];
        for chunk in list.chunks_exact(4) {
            let &[b0, b1, b2, b3] = chunk else {
                continue;
            };
            let rank = u32::from_le_bytes([b0, b1, b2, b3]);
            match arrived.get_mut(rank as usize) {
                Some(slot) => *slot = true,
                None => {
                    return Err(corrupt(format!(
                        "names rank {rank}, beyond WORLD_SIZE={world_size}"
                    )));
                }
            }
        }
        Ok((0..world_size)
            .filter(|&rank| !arrived[rank as usize])
            .collect())
    }

    /// The timeout of `operation`, naming `missing_ranks` and the refusals seen among them.
    fn timeout_error(&self, operation: &str, missing_ranks: Vec<u32>) -> BootstrapError {
        let refused_ranks = self
            .refused_ranks
            .iter()
            .filter(|(rank, _)| missing_ranks.binary_search(rank).is_ok())
            .map(|(rank, reason)| (*rank, reason.clone()))
            .collect();
        BootstrapError::Timeout {
            rank: self.config.rank,
            operation: operation.to_owned(),
            timeout_seconds: self.config.timeout.as_secs_f64(),
            missing_ranks,
            world_size: self.config.world_size,
            refused_ranks,
        }
    }

    fn check_not_failed(&self) -> Result<(), BootstrapError> {
        match &self.failure {
            Some(first_error) => Err(BootstrapError::AlreadyFailed {
                rank: self.config.rank,
                first_error: first_error.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Runs one collective: publishes this rank's record, waits for every other rank's, and
    /// (for all_gather) reads them, indexed by rank.
    fn collective_until(
        &mut self,
        kind: CollectiveKind,
        name: &str,
        payload: &[u8],
        deadline: Instant,
    ) -> Result<Vec<Vec<u8>>, BootstrapError> {
        let rank = self.config.rank;
        let sequence = self.next_collective;
        self.next_collective += 1;
        let record = encode_record(kind, name, payload);
        let limit_bytes = protocol::MAX_VALUE_BYTES - (record.len() - payload.len());
        if payload.len() > limit_bytes {
            return Err(BootstrapError::BlobTooLarge {
                rank,
                name: name.to_owned(),
                blob_bytes: payload.len(),
                limit_bytes,
            });
        }
        // Publish: the record, then this rank's number on the arrival list, then the count;
        // one connection's requests are served in order, so a rank that sees `complete` (set
        // by whoever brings the count to WORLD_SIZE) finds every record in place. Waiting is
        // then on that one key, and a timeout reads the arrival list once: no request carries
        // one key per rank.
        let world_size = self.config.world_size;
        self.client
            .set(&self.collective_key(sequence, rank), &record)
            .map_err(|source| self.store_error(source))?;
        self.client
            .append(
                &self.collective_shared_key(sequence, "arrived"),
                &rank.to_le_bytes(),
            )
            .map_err(|source| self.store_error(source))?;
        let count_key = self.collective_shared_key(sequence, "count");
        let count = self
            .client
            .add(&count_key, 1)
            .map_err(|source| self.store_error(source))?;
        let complete_key = self.collective_shared_key(sequence, "complete");
        if count == i64::from(world_size) {
            self.client
                .set(&complete_key, b"1")
                .map_err(|source| self.store_error(source))?;
        } else if count < 1 || count > i64::from(world_size) {
            return Err(BootstrapError::CorruptRecord {
                rank,
                key: count_key,
                detail: format!("count {count} is outside 1..={world_size}"),
            });
        }
        let operation = kind.describe(name);
        if !self.wait_for_key(&complete_key, deadline)? {
            let missing_ranks = self.missing_ranks(sequence)?;
            // An empty list: the last rank published just as the deadline passed.
            if !missing_ranks.is_empty() {
                return Err(self.timeout_error(&operation, missing_ranks));
            }
        }
        let mut gathered = Vec::new();
        if kind == CollectiveKind::AllGather {
            gathered = vec![Vec::new(); world_size as usize];
            gathered[rank as usize] = payload.to_vec();
            let others: Vec<u32> = (0..world_size).filter(|&other| other != rank).collect();
            for chunk in others.chunks(GATHER_KEYS_PER_REQUEST) {
                let keys: Vec<String> = chunk
                    .iter()
                    .map(|&other| self.collective_key(sequence, other))
                    .collect();
                let records = self
                    .client
                    .multi_get(&keys)
                    .map_err(|source| self.store_error(source))?;
                for ((&other, key), record) in chunk.iter().zip(&keys).zip(&records) {
                    let Some((found_kind, found_name, found_payload)) = decode_record(record)
                    else {
                        return Err(BootstrapError::CorruptRecord {
                            rank,
                            key: key.clone(),
                            detail: format!("{} bytes, not a collective record", record.len()),
                        });
                    };
                    if found_kind != kind as u8 || found_name != name {
                        let found = match found_kind {
                            1 => CollectiveKind::Barrier.describe(found_name),
                            2 => CollectiveKind::AllGather.describe(found_name),
                            code => format!("an unknown collective (kind {code})"),
                        };
                        return Err(BootstrapError::CollectiveMismatch {
                            rank,
                            sequence,
                            expected: kind.describe(name),
                            peer_rank: other,
                            found,
                        });
                    }
                    gathered[other as usize] = found_payload.to_vec();
                }
            }
        }
        // Every rank has published collective `sequence`, so every rank has finished reading
        // collective `sequence - 1`: our record of it can go.
        if sequence > 0 {
            self.client
                .delete_key(&self.collective_key(sequence - 1, rank))
                .map_err(|source| self.store_error(source))?;
            if rank == 0 {
                for shared in ["arrived", "count", "complete"] {
                    self.client
                        .delete_key(&self.collective_shared_key(sequence - 1, shared))
                        .map_err(|source| self.store_error(source))?;
                }
            }
        }
        Ok(gathered)
    }

    fn run_collective(
        &mut self,
        kind: CollectiveKind,
        name: &str,
        payload: &[u8],
    ) -> Result<Vec<Vec<u8>>, BootstrapError> {
        self.check_not_failed()?;
        let deadline = Instant::now() + self.config.timeout;
        self.begin_operation(deadline);
        let result = self.collective_until(kind, name, payload, deadline);
        if let Err(error) = &result {
            self.record_failure(error);
        }
        result
    }

    /// Returns once every rank has called `barrier` with the same `name` at the same point.
    pub fn barrier(&mut self, name: &str) -> Result<(), BootstrapError> {
        self.run_collective(CollectiveKind::Barrier, name, &[])
            .map(|_| ())
    }

    /// Every rank contributes `blob`; returns all contributions indexed by rank. Every rank
    /// must call it at the same point with the same `name`.
    pub fn all_gather(&mut self, name: &str, blob: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> {
        self.run_collective(CollectiveKind::AllGather, name, blob)
    }

    /// Stores `value` under the job-wide `key`.
    pub fn set(&mut self, key: &str, value: &[u8]) -> Result<(), BootstrapError> {
        self.begin_operation(Instant::now() + self.config.timeout);
        let full = self.key(&format!("user/{key}"));
        self.client
            .set(&full, value)
            .map_err(|source| self.store_error(source))
    }

    /// The value of `key`, waiting for it up to the bootstrap timeout.
    pub fn get(&mut self, key: &str) -> Result<Vec<u8>, BootstrapError> {
        self.get_with_timeout(key, self.config.timeout)
    }

    /// The value of `key`, waiting for it up to `timeout`.
    pub fn get_with_timeout(
        &mut self,
        key: &str,
        timeout: Duration,
    ) -> Result<Vec<u8>, BootstrapError> {
        self.begin_operation(Instant::now() + timeout);
        let full = self.key(&format!("user/{key}"));
        self.client
            .get(&full, timeout)
            .map_err(|source| self.store_error(source))?
            .ok_or_else(|| BootstrapError::KeyTimeout {
                rank: self.config.rank,
                key: key.to_owned(),
                timeout_seconds: timeout.as_secs_f64(),
            })
    }

    /// Adds `delta` to the job-wide counter `key` (missing counts as 0); returns the new value.
    pub fn add(&mut self, key: &str, delta: i64) -> Result<i64, BootstrapError> {
        self.begin_operation(Instant::now() + self.config.timeout);
        let full = self.key(&format!("user/{key}"));
        self.client
            .add(&full, delta)
            .map_err(|source| self.store_error(source))
    }

    /// Waits until every key exists, up to the bootstrap timeout.
    pub fn wait(&mut self, keys: &[&str]) -> Result<(), BootstrapError> {
        self.wait_with_timeout(keys, self.config.timeout)
    }

    /// Waits until every key exists, up to `timeout`; the error names the first missing key.
    pub fn wait_with_timeout(
        &mut self,
        keys: &[&str],
        timeout: Duration,
    ) -> Result<(), BootstrapError> {
        self.begin_operation(Instant::now() + timeout);
        let full: Vec<String> = keys
            .iter()
            .map(|key| self.key(&format!("user/{key}")))
            .collect();
        if self
            .client
            .wait(&full, timeout)
            .map_err(|source| self.store_error(source))?
        {
            return Ok(());
        }
        let mut first_missing = keys.first().copied().unwrap_or_default();
        for (key, full_key) in keys.iter().zip(&full) {
            let present = self
                .client
                .check(std::slice::from_ref(full_key))
                .map_err(|source| self.store_error(source))?;
            if !present {
                first_missing = key;
                break;
            }
        }
        Err(BootstrapError::KeyTimeout {
            rank: self.config.rank,
            key: first_missing.to_owned(),
            timeout_seconds: timeout.as_secs_f64(),
        })
    }

    /// Leaves the job. On a store-hosting rank 0, keeps the store up until every other rank has
    /// disconnected (at most the bootstrap timeout; after a failure, [`FAILURE_LINGER`]), since
    /// they may still be reading the last collective. Dropping does the same.
    pub fn close(mut self) {
        self.release_store();
    }

    fn release_store(&mut self) {
        let Some(server) = self.server.take() else {
            return;
        };
        let linger = if self.failure.is_some() {
            FAILURE_LINGER
        } else {
            self.config.timeout
        };
        let deadline = Instant::now() + linger;
        // Our own client is the one connection allowed to remain.
        while server.open_connection_count() > 1 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let still_connected = server.open_connection_count().saturating_sub(1);
        if still_connected > 0 {
            tracing::warn!(
                still_connected,
                "rank 0 stops the TCPStore while other processes are still connected"
            );
        }
        server.shutdown();
    }
}

impl Drop for TcpStoreBootstrap {
    fn drop(&mut self) {
        self.release_store();
    }
}

/// Starts rank 0's store on `port`, IPv6 dual-stack if the host has IPv6; `None` when the port
/// is taken (someone, e.g. a torch store of this job, already serves it: we join as a client).
fn host_store(port: u16) -> Result<Option<TcpStoreServer>, BootstrapError> {
    let dual_stack = SocketAddr::from((Ipv6Addr::UNSPECIFIED, port));
    let error = match TcpStoreServer::bind(dual_stack) {
        Ok(server) => return Ok(Some(server)),
        Err(error) => error,
    };
    let error = if error.kind() == std::io::ErrorKind::AddrInUse {
        error
    } else {
        // No IPv6 on this host: IPv4 only.
        match TcpStoreServer::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port))) {
            Ok(server) => return Ok(Some(server)),
            Err(error) => error,
        }
    };
    if error.kind() == std::io::ErrorKind::AddrInUse {
        tracing::info!(
            port,
            "MASTER_PORT is already in use; rank 0 joins the TCPStore listening there as a client"
        );
        return Ok(None);
    }
    Err(BootstrapError::HostStore {
        port,
        source: error,
    })
}

/// A number unlikely to repeat between two sessions (time and pid); not secret.
fn session_nonce() -> u64 {
    let nanoseconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    let mut input = nanoseconds.to_le_bytes().to_vec();
    input.extend_from_slice(&std::process::id().to_le_bytes());
    fnv1a_64(&input)
}

#[cfg(test)]
mod tests;
