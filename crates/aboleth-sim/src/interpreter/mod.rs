//! The interpreter: runs a lowered kernel ([`SimKernel`]) on every program of every simulated
//! rank, against the device models, under one random schedule, and checks it as it goes.
//!
//! Set-up follows the kernel's launch attributes ([`crate::launch`]): every region on every
//! rank (registered, initialised from the data seed), region-descriptor tables, and one
//! endpoint per peer pair whose handle ([`aboleth_abi::EndpointHandle`]) the kernel reads from
//! memory: an RC QP with its SQ ring, doorbell record and collapsed CQ (mlx5), an SRD queue
//! pair with its send queue, send CQ and completion log (efa), an RC queue pair with its send
//! queue and CQ (ionic), a host-pinned command ring (proxy), or nothing but peer addresses
//! (p2p).
//!
//! Execution: each program is one thread of instructions whose memory effects go through its
//! own [`GpuStoreBuffer`]; WQEs and ring entries are the bytes `aboleth-abi` encodes, stored
//! like any other store, so the NIC and proxy models see exactly what has become visible. At
//! every step the schedule (a seeded rng) picks one agent that can move: a program (pure
//! instructions run on until the next effect), a store buffer making one store visible, the
//! NIC executing one WQE, the EFA device executing one write in flight (any of them: SRD has no
//! order), the Ionic device executing the oldest WQE of one queue pair, or a proxy executing one
//! ring entry. A program waiting on a flag, a
//! completion, ring space, in-order publication or a lock is not runnable until its condition
//! holds; when nothing can move and a program has not finished, that is a deadlock, reported
//! with each waiting program, what it waits for and what it sees.
//!
//! Checks made during the run: when a NIC or proxy executes a put, the bytes that landed must
//! be the source as the program saw it when it posted the put (otherwise the source was
//! overwritten early, or its stores were not yet visible); when a `wait_flag` for `>= v`
//! passes, the data its value guarantees must be visible at the destination: the puts guarded
//! by the signals (each signal guards the program's puts on that endpoint since its previous
//! signal there) whose updates were needed to reach `v`, in arrival order: the first update
//! that brought the flag to `v`, and, when it is an add, every update back to the last set
//! before it. Signals that arrived but were not needed guard nothing yet. A mismatch whose
//! bytes a later put wrote is an overwrite while the reader reads. At a launch's end, a wait
//! that passed on its flag's value from the previous launch, which this launch only repeats,
//! is a stale epoch. A program's own pointers (loads, stores, waits, put sources) must stay
//! inside its rank's regions: the simulator's own allocations are never addressable through
//! them. Final memory is returned for the caller ([`crate::validation`]) to compare across
//! configurations. [`memory_estimate`] says what a run allocates, and a run over
//! [`SimulationOptions::memory_limit_bytes`] is refused before set-up.
//!
//! Threads inside a program: one program is one thread (the leader that the lowering elects),
//! except in a `doorbell_scope` loop, whose iterations run on lane threads with their own
//! store buffers; they join the program at the next `gpu.barrier`, which hands their invisible
//! stores to the program's buffer (so its next release covers them), or at the launch's end.
//! A program's `ab.store`s are the compute of its other threads (a tile stored with `tl.store`
//! is spread over the CTA): they go to a buffer of their own and join the program's at its next
//! barrier (`gpu.barrier`, or the one every queue reservation starts with). Until then they may
//! become visible at any time, and a p2p copy or packet put, whose loads are spread over the
//! threads too, does not see them: a copy whose source differs from what the program stored
//! reads a stale source (`stale-source`), the race a missing barrier before a copy is.
//! What it does not model: fence scopes (every fence and release is system-wide), caches,
//! and time beyond the estimate of [`CostModel`]: each agent has a clock advanced by its own
//! costs, and a program released from a wait jumps to the time the awaited write happened.

//!
//! The files: `setup.rs` builds the world from the launch attributes; `step.rs` runs a
//! program's instructions and dispatches each to its handler; `memory_access.rs` is memory as
//! a program sees it; `waits.rs` the waits and what blocks a program; `checks.rs` the checks
//! and their records; `queue.rs` the queue protocol mlx5, EFA and the proxy share; `mlx5.rs`,
//! `efa.rs`, `ionic.rs`, `proxy.rs`, `p2p.rs` and `packets.rs` each transport's commands (and the set-up of its
//! endpoints). This file holds the public API, the world's state (values, threads, records)
//! and the scheduler.

mod checks;
mod efa;
mod ionic;
mod memory_access;
mod mlx5;
mod p2p;
mod packets;
mod proxy;
mod queue;
mod setup;
mod step;
mod waits;

use setup::{ENDPOINT_HANDLE_BYTES, REGION_DESCRIPTOR_BYTES};

use std::{
    collections::{BTreeMap, HashMap},
    rc::Rc,
};

use aboleth_abi::{EndpointHandle, Transport};
use aboleth_ir::ab::attributes::{Comparison, SignalOperation};
use aboleth_passes::stats::Counts;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::{
    CostModel, GpuStoreBuffer, Memory, Nic, ProxyEngine,
    launch::{ArgumentBinding, ValueBinding},
    program::{Instruction, Register, SimKernel, StoreOrder},
};

/// How to run a simulation.
#[derive(Clone, Debug)]
pub struct SimulationOptions {
    /// Number of ranks.
    pub ranks: u32,
    /// Kernel launches, one after the other; `value:epoch` arguments get the round number + 1.
    pub rounds: u32,
    /// Seed of the schedule (which agent moves at each step).
    pub schedule_seed: u64,
    /// Seed of the regions' initial contents (keep it fixed across configurations).
    pub data_seed: u64,
    /// Steps after which the run is stopped and reported as not terminating.
    pub step_limit: u64,
    /// Latencies and bandwidths.
    pub cost_model: CostModel,
    /// mlx5 send-ring size per QP, in 64-byte basic blocks (a power of two).
    pub sq_basic_block_count: u32,
    /// Proxy ring capacity per peer, in entries (a power of two).
    pub proxy_ring_capacity_entries: u32,
    /// Bytes per store of a p2p copy (how finely its stores may be reordered).
    pub p2p_store_bytes: u64,
    /// What the reference run saw at each wait (see [`Observations`]): when set, every wait
    /// must see the same bytes there.
    pub expected_observations: Option<Rc<Observations>>,
    /// Most bytes of simulated memory (regions, queues and tables of every rank) a run may
    /// allocate; checked up front ([`memory_estimate`]) so a huge launch is an error, not an
    /// abort or an out-of-memory kill.
    pub memory_limit_bytes: u64,
    /// Called every [`PROGRESS_STEPS`] scheduler steps with the launch (1-based) and the steps
    /// so far, so a caller can show that a long run is moving. It never affects the run.
    pub progress: Option<ProgressHook>,
}

/// Scheduler steps between two calls of [`SimulationOptions::progress`].
pub const PROGRESS_STEPS: u64 = 1 << 10;

/// The default of [`SimulationOptions::memory_limit_bytes`]: 4 GiB.
pub const DEFAULT_MEMORY_LIMIT_BYTES: u64 = 4 << 30;

/// A progress callback: `(launch, steps)`.
#[derive(Clone)]
pub struct ProgressHook(pub Rc<dyn Fn(u32, u64)>);

impl std::fmt::Debug for ProgressHook {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("ProgressHook")
    }
}

/// The simulated memory a run of a kernel allocates, per rank, in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryEstimate {
    /// Each region's bytes on one rank (packet slots included), in the launch's order.
    pub regions: Vec<(String, u64)>,
    /// Queues, rings, receive sides and tables of one rank.
    pub infrastructure_bytes: u64,
}

impl MemoryEstimate {
    /// All ranks together.
    pub fn total_bytes(&self, ranks: u32) -> u64 {
        let per_rank = self
            .regions
            .iter()
            .fold(self.infrastructure_bytes, |sum, (_, bytes)| {
                sum.saturating_add(*bytes)
            });
        per_rank.saturating_mul(u64::from(ranks))
    }
}

/// What [`simulate`] will allocate for `kernel` under `options`, without allocating: the
/// regions at `options.ranks` and, per rank, what the transport's set-up allocates (mirrors
/// `World::new`). A region whose size is not positive is left for the set-up to report.
pub fn memory_estimate(kernel: &SimKernel, options: &SimulationOptions) -> MemoryEstimate {
    let ranks = u64::from(options.ranks);
    let regions: Vec<(String, u64)> = kernel
        .launch
        .regions
        .iter()
        .map(|(name, size)| {
            let length_bytes = size.evaluate(options.ranks).max(0) as u64;
            let staging_bytes = if kernel.packet_staging_regions.contains(name) {
                aboleth_abi::packet::staging_bytes(length_bytes)
            } else {
                0
            };
            (name.clone(), length_bytes.saturating_add(staging_bytes))
        })
        .collect();
    let tables =
        regions.len() as u64 * ranks * REGION_DESCRIPTOR_BYTES + ranks * ENDPOINT_HANDLE_BYTES;
    let transport = match kernel.target {
        Transport::Mlx5 => mlx5::infrastructure_bytes(ranks, options),
        Transport::Proxy => proxy::infrastructure_bytes(ranks, options),
        Transport::Efa => efa::infrastructure_bytes(ranks, options),
        Transport::Ionic => ionic::infrastructure_bytes(ranks, options),
        _ => 0,
    };
    MemoryEstimate {
        regions,
        infrastructure_bytes: tables + transport,
    }
}

/// `bytes` for messages: "12345 bytes (1.5 GiB)" above a MiB.
pub fn describe_bytes(bytes: u64) -> String {
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    if bytes >= GIB {
        format!("{bytes} bytes ({:.1} GiB)", bytes as f64 / GIB as f64)
    } else if bytes >= MIB {
        format!("{bytes} bytes ({:.1} MiB)", bytes as f64 / MIB as f64)
    } else {
        format!("{bytes} bytes")
    }
}

/// A setup error when the run would need more simulated memory than `options` allows: one
/// region too large by itself (named, with its size), or everything together.
pub fn check_memory(kernel: &SimKernel, options: &SimulationOptions) -> Result<(), String> {
    let estimate = memory_estimate(kernel, options);
    let limit = options.memory_limit_bytes;
    for (name, bytes) in &estimate.regions {
        let all_ranks = bytes.saturating_mul(u64::from(options.ranks));
        if all_ranks > limit {
            return Err(format!(
                "region `{name}` has {} per rank for {} ranks, {} in all, more than the simulator's memory limit of {}: make the region smaller in the kernel's `regions` attribute",
                describe_bytes(*bytes),
                options.ranks,
                describe_bytes(all_ranks),
                describe_bytes(limit)
            ));
        }
    }
    let total = estimate.total_bytes(options.ranks);
    if total > limit {
        let regions = estimate
            .regions
            .iter()
            .fold(0u64, |sum, (_, bytes)| sum.saturating_add(*bytes));
        return Err(format!(
            "{} ranks need {} of simulated memory ({} of regions and {} of queues and tables per rank; the queues grow with the square of the ranks), more than the simulator's memory limit of {}: use fewer ranks or smaller regions",
            options.ranks,
            describe_bytes(total),
            describe_bytes(regions),
            describe_bytes(estimate.infrastructure_bytes),
            describe_bytes(limit)
        ));
    }
    Ok(())
}

/// Which wait: (round, rank, program, how many waits that program passed before it).
pub type ObservationKey = (u32, u32, u32, u64);

/// The data a passed wait guards, as one run saw it: `(rank, address, bytes)` per guarded put.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observation {
    /// The flag waited on: (rank, address).
    pub flag: (u32, u64),
    /// The guarded ranges and their bytes when the wait passed.
    pub ranges: Vec<(u32, u64, Vec<u8>)>,
}

/// Every wait's observation in one run. The library-style run's, taken as the reference,
/// defines what each wait guards in the program's own order, independently of how another
/// lowering orders its commands.
pub type Observations = HashMap<ObservationKey, Observation>;

impl SimulationOptions {
    /// Defaults for `ranks` ranks: one round, seeds 0.
    pub fn new(ranks: u32) -> Self {
        SimulationOptions {
            ranks,
            rounds: 1,
            schedule_seed: 0,
            data_seed: 0,
            step_limit: 2_000_000,
            cost_model: CostModel::default(),
            sq_basic_block_count: 1024,
            proxy_ring_capacity_entries: 256,
            p2p_store_bytes: 32,
            expected_observations: None,
            memory_limit_bytes: DEFAULT_MEMORY_LIMIT_BYTES,
            progress: None,
        }
    }
}

/// One launch's figures.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RoundReport {
    /// Simulated time from the launch until its last program finished.
    pub simulated_time_nanoseconds: u64,
    /// Executed counts, all programs of all ranks.
    pub counts: Counts,
}

/// The final contents of one region on one rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionContents {
    /// Rank.
    pub rank: u32,
    /// Region name.
    pub region: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// What a finished simulation returns.
#[derive(Clone, Debug)]
pub struct SimulationOutcome {
    /// Per launch.
    pub rounds: Vec<RoundReport>,
    /// Every region on every rank, after the last launch and once the NICs and proxies are idle.
    pub final_regions: Vec<RegionContents>,
    /// Scheduler steps taken.
    pub steps: u64,
    /// What each wait guarded and saw.
    pub observations: Observations,
}

impl SimulationOutcome {
    /// Executed counts summed over the launches.
    pub fn total_counts(&self) -> Counts {
        let mut total = Counts::default();
        for round in &self.rounds {
            total.add(&round.counts);
        }
        total
    }
}

/// Why a simulation failed. Each message names ranks, programs, source lines and addresses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SimulationError {
    /// The launch attributes or the world cannot be set up.
    #[error("cannot set up the simulation: {0}")]
    Setup(String),
    /// No agent can move and some program has not finished.
    #[error("deadlock: {0}")]
    Deadlock(String),
    /// The step limit was reached.
    #[error(
        "no termination after {steps} steps (the step limit, --step-limit): a loop that never ends, or a run that needs more steps (raise --step-limit): {state}"
    )]
    StepLimit {
        /// Steps taken.
        steps: u64,
        /// What each unfinished program was doing.
        state: String,
    },
    /// A `wait_flag` passed before the data its signal guards was visible.
    #[error("a wait passed before the data it guards was visible: {0}")]
    DataNotVisible(String),
    /// A put overwrote data that a passed wait guards while its reader still reads it.
    #[error("a put overwrote data its reader was still reading: {0}")]
    DataOverwritten(String),
    /// A flag receives the value it already held from the previous launch.
    #[error("stale epoch: {0}")]
    StaleEpoch(String),
    /// A transfer delivered bytes other than its source at posting time.
    #[error("a transfer did not deliver its source as posted: {0}")]
    SourceChanged(String),
    /// A p2p copy read its source while the program's stores to it were not ordered before it.
    #[error("a copy read its source before the program's stores to it: {0}")]
    StaleSource(String),
    /// Two commands were written to the same queue slot before the first one executed.
    #[error("two commands in one queue slot: {0}")]
    SlotCollision(String),
    /// The NIC model reported an error (bad key, out of bounds, malformed WQE, ...).
    #[error("NIC error: {0}")]
    Nic(String),
    /// The proxy model reported an error.
    #[error("proxy error: {0}")]
    Proxy(String),
    /// The program itself did something invalid (bad address, division by zero, ...).
    #[error("program error: {0}")]
    Program(String),
}

impl SimulationError {
    /// A short name of the kind, for tests and summaries.
    pub fn kind(&self) -> &'static str {
        match self {
            SimulationError::Setup(_) => "setup",
            SimulationError::Deadlock(_) => "deadlock",
            SimulationError::StepLimit { .. } => "step-limit",
            SimulationError::DataNotVisible(_) => "data-not-visible",
            SimulationError::DataOverwritten(_) => "data-overwritten",
            SimulationError::StaleEpoch(_) => "stale-epoch",
            SimulationError::SourceChanged(_) => "source-changed",
            SimulationError::StaleSource(_) => "stale-source",
            SimulationError::SlotCollision(_) => "slot-collision",
            SimulationError::Nic(_) => "nic",
            SimulationError::Proxy(_) => "proxy",
            SimulationError::Program(_) => "program",
        }
    }
}

/// Runs `kernel` under one schedule.
pub fn simulate(
    kernel: &SimKernel,
    options: &SimulationOptions,
) -> Result<SimulationOutcome, SimulationError> {
    simulate_per_rank(std::slice::from_ref(kernel), options)
}

/// Runs one kernel per rank (`kernels[r]` on rank `r`: a Triton kernel specialized on its rank
/// as a constexpr is compiled once per rank), or one kernel on every rank when `kernels` has one
/// element. The launch description (grid, regions, bindings) is the first kernel's; the kernels
/// must agree on it and on their parameters.
pub fn simulate_per_rank(
    kernels: &[SimKernel],
    options: &SimulationOptions,
) -> Result<SimulationOutcome, SimulationError> {
    if kernels.is_empty() || (kernels.len() != 1 && kernels.len() != options.ranks as usize) {
        return Err(SimulationError::Setup(format!(
            "{} kernel(s) for {} ranks: give one kernel, or one per rank",
            kernels.len(),
            options.ranks
        )));
    }
    for (rank, kernel) in kernels.iter().enumerate().skip(1) {
        let names = |k: &SimKernel| {
            k.parameters
                .iter()
                .map(|p| p.name.clone())
                .collect::<Vec<_>>()
        };
        if kernel.launch != kernels[0].launch || names(kernel) != names(&kernels[0]) {
            return Err(SimulationError::Setup(format!(
                "the kernel of rank {rank} differs from rank 0's in its launch attributes or parameters ({:?} vs {:?})",
                names(kernel),
                names(&kernels[0])
            )));
        }
    }
    let mut world = World::new(kernels, options)?;
    let mut rounds = Vec::new();
    for round in 0..options.rounds {
        rounds.push(world.run_round(round)?);
    }
    world.quiesce()?;
    // What the host does before it reads flags (the runtime's drain of receive CQs): apply the
    // write-with-immediate signals no wait of the last launch applied.
    world.drain_every_receive_cq()?;
    Ok(SimulationOutcome {
        rounds,
        final_regions: world.final_regions()?,
        steps: world.steps,
        observations: std::mem::take(&mut world.observations),
    })
}

// ---------------------------------------------------------------------------------------------
// Values

#[derive(Clone, Copy, Debug, Default)]
enum Value {
    #[default]
    Undefined,
    Integer(i64),
    Endpoint(EndpointValue),
    Remote(RemoteValue),
    RemotePointer(RemotePointerValue),
}

#[derive(Clone, Copy, Debug)]
struct EndpointValue {
    peer: u32,
    /// Index into [`World::endpoint_handles`].
    handle: usize,
}

#[derive(Clone, Copy, Debug)]
struct RemoteValue {
    peer: u32,
    base_address: u64,
    length_bytes: u64,
    rkey: u32,
    region_index: u32,
    element_bytes: u64,
}

#[derive(Clone, Copy, Debug)]
struct RemotePointerValue {
    peer: u32,
    address: u64,
    rkey: u32,
    region_index: u32,
    offset_bytes: u64,
    region_length_bytes: u64,
}

// ---------------------------------------------------------------------------------------------
// Records the checks use

/// A put as posted: where its bytes must land and what they must be.
#[derive(Debug)]
struct PutRecord {
    rank: u32,
    program: u32,
    site: usize,
    destination_rank: u32,
    destination_address: u64,
    expected: Vec<u8>,
    /// The source bytes visible to the NIC or proxy when the put was posted.
    visible_at_post: Vec<u8>,
}

/// A signal as posted, with the puts it guards.
#[derive(Debug)]
struct SignalRecord {
    rank: u32,
    program: u32,
    site: usize,
    /// The flag word: (rank, address).
    flag: (u32, u64),
    /// How it updates the flag, and by what: a wait's guarantee depends on both.
    operation: SignalOperation,
    operand: i64,
    guarded: Vec<Rc<PutRecord>>,
}

/// One signal's update of a flag, in the order the updates reached it.
#[derive(Debug)]
struct FlagUpdate {
    signal: Rc<SignalRecord>,
    /// The flag's value once this update was applied.
    value_after: i64,
}

/// What a flag received: in this launch (in arrival order) and in the previous one.
#[derive(Debug, Default)]
struct FlagHistory {
    /// Its value when this launch started (none: first signaled in this launch).
    launch_start_value: Option<i64>,
    updates: Vec<FlagUpdate>,
    previous_launch: Vec<FlagUpdate>,
}

/// A wait that passed on a value its flag already held when the launch started: if this
/// launch's signals only bring the flag back to such a value, the waits cannot tell the
/// launches apart (checked at the launch's end).
#[derive(Debug)]
struct EarlyWait {
    rank: u32,
    program: u32,
    site: usize,
    flag: (u32, u64),
    expected: i64,
    comparison: Comparison,
}

/// A packet transfer in a staging slot, until a wait of the receiver unpacks it.
#[derive(Debug)]
struct PacketTransfer {
    value: i64,
    /// The signal it carries (guarding only its own put), delivered when it is unpacked.
    signal: Rc<SignalRecord>,
}

/// Where a packet wait looks: its flag's slot and this rank's data region.
#[derive(Clone, Copy, Debug)]
struct PacketSlot {
    slot_address: u64,
    data_base_address: u64,
    data_length_bytes: u64,
    check_payload_flags: bool,
    payload_bytes_max: u64,
}

#[derive(Debug)]
enum PostedCommand {
    Put(Rc<PutRecord>),
    Signal(Rc<SignalRecord>),
    /// A write with immediate: the put, and the signal a wait of the receiver applies.
    PutWithImmediate(Rc<PutRecord>, Rc<SignalRecord>),
    Other,
}

/// Which command a NIC or proxy event refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum CommandKey {
    Mlx5 { rank: u32, qpn: u32, slot: u64 },
    Efa { rank: u32, qp_num: u16, slot: u64 },
    Ionic { rank: u32, queue_id: u32, slot: u64 },
    Proxy { rank: u32, peer: u32, ticket: u64 },
}

// ---------------------------------------------------------------------------------------------
// Threads

struct Frame {
    body: Rc<[Instruction]>,
    pc: usize,
    /// `(induction register, current, upper, step)` for a loop body.
    induction: Option<(Register, i64, i64, i64)>,
}

#[derive(Clone, Debug)]
enum Block {
    Flag {
        address: u64,
        expected: i64,
        comparison: Comparison,
        site: usize,
        /// The receive context a receiving wait drains (write-with-immediate signals).
        receive_context: Option<u64>,
        /// The packet slot a receiving wait unpacks (packet signals).
        packet_slot: Option<PacketSlot>,
    },
    Mlx5Completion {
        qpn: u32,
        peer: u32,
        slot: u64,
        site: usize,
    },
    /// An `efa.wait_completion` whose WQE (or prefix) has not completed: released when the
    /// device writes another send completion.
    EfaCompletion {
        queue: efa::EfaQueue,
        peer: u32,
        target: queue::QueueWaitTarget,
        site: usize,
    },
    /// An `ionic.wait_completion` whose WQE (or prefix) has not completed: released when the
    /// device writes another CQE.
    IonicCompletion {
        queue: ionic::IonicQueue,
        peer: u32,
        target: queue::QueueWaitTarget,
        site: usize,
    },
    ProxyCompletion {
        ring_address: u64,
        peer: u32,
        ticket: u64,
        site: usize,
    },
    Space {
        peer: u32,
        site: usize,
        /// The consumer position the reservation reads, and what it must reach.
        consumer_address: u64,
        needed: u64,
        /// mlx5: the collapsed CQ's `wqe_counter` word, from which a full ring is reclaimed.
        cq_counter_address: Option<u64>,
        /// EFA: the queue, whose send CQ a reservation polls when the queue looks full.
        efa_queue: Option<efa::EfaQueue>,
        /// Ionic: likewise, its CQ.
        ionic_queue: Option<ionic::IonicQueue>,
    },
    Publication {
        address: u64,
        base: u64,
        site: usize,
    },
    Lock {
        address: u64,
        site: usize,
    },
    /// At a barrier until the program's lanes have finished their iterations.
    Lanes {
        site: usize,
    },
}

struct Thread {
    rank: u32,
    program: u32,
    registers: Vec<Value>,
    frames: Vec<Frame>,
    finished: bool,
    blocked: Option<Block>,
    clock_nanoseconds: u64,
    /// Puts posted on each endpoint (by peer) since this program's last signal there.
    unsignaled_puts: BTreeMap<u32, Vec<Rc<PutRecord>>>,
    /// The last command this program posted with a completion requested, per queue (by peer):
    /// its first slot (what a drain waits for) and the slot after it (what the drain frees).
    /// Commands posted after it without a completion are not covered, so a drain relies on the
    /// compiler having requested one on its endpoint's last transfer.
    last_completion_slot: BTreeMap<u32, (u64, u64)>,
    /// A non-atomic reservation between its load and its store.
    reservation_loaded: Option<u64>,
    /// Waits passed so far in this launch.
    waits_passed: u64,
    /// The lane threads running a `doorbell_scope` loop for this program, until they join it
    /// at its next barrier.
    lanes: Vec<usize>,
    /// The thread (never scheduled) whose store buffer holds this program's `ab.store`s not yet
    /// ordered by a barrier: the compute of the program's other threads.
    other_threads: Option<usize>,
}

impl Thread {
    /// A running thread of `program` on `rank` with nothing posted, waited or spawned yet.
    fn new(
        rank: u32,
        program: u32,
        registers: Vec<Value>,
        frames: Vec<Frame>,
        clock_nanoseconds: u64,
    ) -> Self {
        Thread {
            rank,
            program,
            registers,
            frames,
            finished: false,
            blocked: None,
            clock_nanoseconds,
            unsignaled_puts: BTreeMap::new(),
            last_completion_slot: BTreeMap::new(),
            reservation_loaded: None,
            waits_passed: 0,
            lanes: Vec::new(),
            other_threads: None,
        }
    }
}

enum Step {
    /// A pure instruction ran; keep going.
    Continue,
    /// An effect happened (or the program finished): the step ends.
    Effect,
    /// The instruction cannot run yet; the program waits.
    Blocked(Block),
}

// ---------------------------------------------------------------------------------------------
// The world

struct RegionAllocation {
    address: u64,
    length_bytes: u64,
    lkey: u32,
    rkey: u32,
}

struct World<'k> {
    /// Rank 0's kernel: the launch description and the transport.
    kernel: &'k SimKernel,
    /// The kernel each rank runs (one entry: every rank runs it).
    rank_kernels: &'k [SimKernel],
    /// The kernel's transport: which handlers run its queue commands.
    transport: Transport,
    options: SimulationOptions,
    memory: Memory,
    nic: Nic,
    /// The EFA device (SRD: writes executed in an rng-chosen order), for efa kernels.
    efa: aboleth_nic::efa::EfaDevice,
    /// The Ionic device (RC: in order per queue pair), for ionic kernels.
    ionic: aboleth_nic::ionic::IonicDevice,
    proxies: Vec<ProxyEngine>,
    store_buffers: Vec<GpuStoreBuffer>,
    threads: Vec<Thread>,
    rng: ChaCha8Rng,
    /// Per rank: region name -> allocation.
    regions: Vec<BTreeMap<String, RegionAllocation>>,
    /// (rank, table address) -> region index.
    region_tables: HashMap<(u32, u64), u32>,
    /// Per rank: endpoint table address.
    endpoint_tables: Vec<u64>,
    /// Decoded endpoint handles, and where they are: (rank, address).
    endpoint_handles: Vec<EndpointHandle>,
    endpoint_handle_index: HashMap<(u32, u64), usize>,
    posted: HashMap<CommandKey, PostedCommand>,
    /// p2p flag stores still in a store buffer: (thread, program order) -> signal.
    p2p_signal_stores: HashMap<(usize, u64), Rc<SignalRecord>>,
    /// The signals each flag (rank, address) received, in arrival order (see
    /// [`World::check_delivered_data`] for what a wait guards).
    flag_histories: HashMap<(u32, u64), FlagHistory>,
    /// Per (thread, flag): the updates of this launch whose data a wait of the thread checked.
    checked_updates: HashMap<(usize, u32, u64), Vec<usize>>,
    /// Waits of this launch that passed on their flag's value from before the launch.
    early_waits: Vec<EarlyWait>,
    /// The puts of this launch in the order their bytes landed (p2p: when posted), to name
    /// the put that overwrote data a wait guards.
    landed_puts: Vec<Rc<PutRecord>>,
    /// Write-with-immediate signals whose data landed, by (receiving rank, receive CQE number),
    /// with when: delivered when a wait (or the host) applies that CQE.
    pending_immediates: HashMap<(u32, u64), (Rc<SignalRecord>, u64)>,
    /// The flag table the kernel's immediates name flags in, once a receiving wait ran.
    immediate_flag_tables: BTreeMap<u32, (u64, u64)>,
    /// Packet transfers sent and not yet unpacked, by (receiving rank, slot address).
    packet_transfers: BTreeMap<(u32, u64), PacketTransfer>,
    /// When each (rank, address) word the programs wait on was last written (simulated ns).
    write_times: HashMap<(u32, u64), u64>,
    /// When each mlx5 QP (rank, qpn) or proxy ring (rank, ring) was last rung.
    doorbell_times: HashMap<(u32, u64), u64>,
    /// Per rank: the NIC's and the proxy's clocks.
    nic_clocks: Vec<u64>,
    proxy_clocks: Vec<u64>,
    counts: Counts,
    steps: u64,
    epoch: i64,
    time_origin: u64,
    observations: Observations,
}

impl<'k> World<'k> {
    /// The kernel rank `rank` runs.
    pub(super) fn kernel_of(&self, rank: u32) -> &'k SimKernel {
        self.rank_kernels
            .get(rank as usize)
            .unwrap_or(&self.rank_kernels[0])
    }

    /// An instruction's `file:line:column (op)` in the kernel that rank `rank` runs.
    pub(super) fn site_of(&self, rank: u32, site: usize) -> String {
        let site = &self.kernel_of(rank).sites[site];
        format!("{} ({})", site.location, site.op_name)
    }

    pub(super) fn run_round(&mut self, round: u32) -> Result<RoundReport, SimulationError> {
        self.epoch = i64::from(round) + 1;
        self.counts = Counts::default();
        let start = self.latest_clock();
        self.time_origin = start;
        let grid = self.kernel.launch.grid.evaluate(self.options.ranks);
        if !(1..=4096).contains(&grid) {
            return Err(SimulationError::Setup(format!(
                "the grid is {grid} programs per rank for {} ranks; it must be 1 to 4096",
                self.options.ranks
            )));
        }
        self.threads.clear();
        self.store_buffers.clear();
        self.p2p_signal_stores.clear();
        self.start_flag_histories()?;
        for rank in 0..self.options.ranks {
            for program in 0..grid as u32 {
                let kernel = self.kernel_of(rank);
                let mut registers = vec![Value::Undefined; kernel.register_count];
                for parameter in &kernel.parameters {
                    registers[parameter.register] =
                        self.argument(rank, &self.kernel.launch.bindings[&parameter.name]);
                }
                let frame = Frame {
                    body: kernel.body.clone(),
                    pc: 0,
                    induction: None,
                };
                self.add_thread(Thread::new(rank, program, registers, vec![frame], start));
            }
        }
        self.schedule()?;
        // Kernel end: every store of every program becomes visible.
        for index in 0..self.store_buffers.len() {
            self.flush(index)?;
        }
        self.check_queue_counters(round)?;
        self.check_packet_transfers_unpacked(round)?;
        self.check_stale_epochs(round)?;
        let end = self
            .threads
            .iter()
            .map(|thread| thread.clock_nanoseconds)
            .max()
            .unwrap_or(start);
        Ok(RoundReport {
            simulated_time_nanoseconds: end - start,
            counts: self.counts,
        })
    }

    pub(super) fn latest_clock(&self) -> u64 {
        self.threads
            .iter()
            .map(|thread| thread.clock_nanoseconds)
            .chain(self.nic_clocks.iter().copied())
            .chain(self.proxy_clocks.iter().copied())
            .max()
            .unwrap_or(0)
    }

    pub(super) fn argument(&self, rank: u32, binding: &ArgumentBinding) -> Value {
        let regions = &self.regions[rank as usize];
        Value::Integer(match binding {
            ArgumentBinding::Endpoints => self.endpoint_tables[rank as usize] as i64,
            ArgumentBinding::RegionTable(name) => {
                let index = self
                    .kernel
                    .launch
                    .regions
                    .iter()
                    .position(|(region, _)| region == name)
                    .expect("checked by the launch parser") as u32;
                let (&(_, address), _) = self
                    .region_tables
                    .iter()
                    .find(|((table_rank, _), table_index)| {
                        *table_rank == rank && **table_index == index
                    })
                    .expect("one table per region per rank");
                address as i64
            }
            ArgumentBinding::LocalAddress(name) => regions[name].address as i64,
            ArgumentBinding::LocalKey(name) => i64::from(regions[name].lkey),
            ArgumentBinding::Value(ValueBinding::Constant(value)) => *value,
            ArgumentBinding::Value(ValueBinding::Epoch) => self.epoch,
        })
    }

    pub(super) fn schedule(&mut self) -> Result<(), SimulationError> {
        #[derive(Clone, Copy)]
        enum Agent {
            Thread(usize),
            StoreBuffer(usize),
            Nic,
            Efa,
            Ionic,
            Proxy(usize),
        }
        let mut candidates = Vec::new();
        loop {
            candidates.clear();
            let mut unfinished = false;
            for index in 0..self.threads.len() {
                if self.threads[index].finished {
                    continue;
                }
                unfinished = true;
                let runnable = match self.threads[index].blocked.clone() {
                    None => true,
                    Some(block) => self.block_released(index, &block)?,
                };
                if runnable {
                    candidates.push(Agent::Thread(index));
                }
            }
            for (index, buffer) in self.store_buffers.iter().enumerate() {
                if buffer.has_pending() {
                    candidates.push(Agent::StoreBuffer(index));
                }
            }
            if self.nic.pending_work(&self.memory) {
                candidates.push(Agent::Nic);
            }
            if self.efa.pending_work() {
                candidates.push(Agent::Efa);
            }
            if self.ionic.pending_work() {
                candidates.push(Agent::Ionic);
            }
            for (index, proxy) in self.proxies.iter().enumerate() {
                if proxy.pending_work(&self.memory) {
                    candidates.push(Agent::Proxy(index));
                }
            }
            if !unfinished {
                return Ok(());
            }
            if candidates.is_empty() {
                return Err(SimulationError::Deadlock(self.describe_waits()?));
            }
            self.steps += 1;
            if self.steps > self.options.step_limit {
                return Err(SimulationError::StepLimit {
                    steps: self.steps - 1,
                    state: self.describe_waits()?,
                });
            }
            if self.steps.is_multiple_of(PROGRESS_STEPS)
                && let Some(progress) = &self.options.progress
            {
                (progress.0)(self.epoch as u32, self.steps);
            }
            match candidates[self.rng.random_range(0..candidates.len())] {
                Agent::Thread(index) => self.step_thread(index)?,
                Agent::StoreBuffer(index) => {
                    let drained = self.store_buffers[index]
                        .drain_one_random(&mut self.memory, &mut self.rng)
                        .map_err(|e| SimulationError::Program(e.to_string()))?;
                    self.on_drained(index, drained.into_iter().collect());
                }
                Agent::Nic => self.step_nic()?,
                Agent::Efa => self.step_efa()?,
                Agent::Ionic => self.step_ionic()?,
                Agent::Proxy(index) => self.step_proxy(index)?,
            }
        }
    }

    /// Runs NICs, proxies and store buffers until nothing is pending (after the last launch).
    pub(super) fn quiesce(&mut self) -> Result<(), SimulationError> {
        loop {
            let mut moved = false;
            if self.nic.pending_work(&self.memory) {
                self.step_nic()?;
                moved = true;
            }
            if self.efa.pending_work() {
                self.step_efa()?;
                moved = true;
            }
            if self.ionic.pending_work() {
                self.step_ionic()?;
                moved = true;
            }
            for index in 0..self.proxies.len() {
                if self.proxies[index].pending_work(&self.memory) {
                    self.step_proxy(index)?;
                    moved = true;
                }
            }
            if !moved {
                return Ok(());
            }
            self.steps += 1;
            if self.steps > self.options.step_limit {
                return Err(SimulationError::StepLimit {
                    steps: self.steps - 1,
                    state: "the NICs and proxies still had work after the last launch".into(),
                });
            }
        }
    }

    pub(super) fn final_regions(&self) -> Result<Vec<RegionContents>, SimulationError> {
        let mut contents = Vec::new();
        for (rank, regions) in self.regions.iter().enumerate() {
            for (name, allocation) in regions {
                contents.push(RegionContents {
                    rank: rank as u32,
                    region: name.clone(),
                    bytes: self
                        .memory
                        .read(rank as u32, allocation.address, allocation.length_bytes)
                        .map_err(|e| SimulationError::Program(e.to_string()))?,
                });
            }
        }
        Ok(contents)
    }

    pub(super) fn program_error(&self, thread: usize, message: String) -> SimulationError {
        let thread = &self.threads[thread];
        SimulationError::Program(format!(
            "rank {} program {}: {message}",
            thread.rank, thread.program
        ))
    }
}

fn store_cost(cost: &CostModel, order: StoreOrder) -> u64 {
    match order {
        StoreOrder::Relaxed => cost.gpu_global_store_nanoseconds,
        // A release orders the earlier stores first: charged as an acq_rel fence plus the store.
        StoreOrder::Release => cost.fence_gpu_nanoseconds + cost.gpu_global_store_nanoseconds,
    }
}
