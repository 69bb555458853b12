//! The interpreter: runs a lowered kernel ([`SimKernel`]) on every program of every simulated
//! rank, against the device models, under one random schedule, and checks it as it goes.
//!
//! Set-up follows the kernel's launch attributes ([`crate::launch`]): every region on every
//! rank (registered, initialised from the data seed), region-descriptor tables, and one
//! endpoint per peer pair whose handle ([`aboleth_abi::EndpointHandle`]) the kernel reads from
//! memory: an RC QP with its SQ ring, doorbell record and collapsed CQ (mlx5), a host-pinned
//! command ring (proxy), or nothing but peer addresses (p2p).
//!
//! Execution: each program is one thread of instructions whose memory effects go through its
//! own [`GpuStoreBuffer`]; WQEs and ring entries are the bytes `aboleth-abi` encodes, stored
//! like any other store, so the NIC and proxy models see exactly what has become visible. At
//! every step the schedule (a seeded rng) picks one agent that can move: a program (pure
//! instructions run on until the next effect), a store buffer making one store visible, the
//! NIC executing one WQE, or a proxy executing one ring entry. A program waiting on a flag, a
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

use std::{
    collections::{BTreeMap, HashMap},
    rc::Rc,
};

use aboleth_abi::{
    EndpointHandle, Mlx5QueueManagement, ProxyCommand, ProxyRingEntry, ProxyRingHeader,
    RemoteRegionDescriptor, Transport,
    mlx5::{
        DoorbellRecord, FENCE_MODE_INITIATOR_SMALL, LocalBuffer, MaskedCompareSwap64,
        RemoteAddress, UarDoorbell, WQE_CTRL_CQ_UPDATE, WqeCommon, atomic_fetch_add,
        masked_compare_swap_64, nop_spanning_basic_blocks, rdma_write, rdma_write_imm,
        rdma_write_imm_inline, rdma_write_inline,
    },
    proxy::{ProxyOperation, ProxyPut, ProxySignal, SignalOperation as ProxySignalOperation},
};
use aboleth_ir::{
    ab::attributes::SignalOperation,
    scalar::{evaluate_binary, truncate_signed},
};
use aboleth_passes::{stats::Counts, support::queue_slots::inline_write_basic_blocks};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use aboleth_abi::mlx5::receive::{
    ImmediateSignal, Mlx5ReceiveContext, Mlx5ReceiveQueue, RECEIVE_WQE_BYTES, ReceiveDataSegment,
};

use crate::{
    CostModel, CqPollResult, GpuStoreBuffer, Memory, MemoryKind, Nic, ProxyEngine, QueuePairConfig,
    RegionTable,
    gpu_store_buffer::DrainedStore,
    launch::{ArgumentBinding, RegionInit, ValueBinding},
    nic::WqeOutcome,
    nic::{ReceiveCqConfig, ReceiveQueueConfig},
    program::{
        FenceScope, Instruction, InstructionKind, Register, SimKernel, StoreOrder, WaitReceives,
    },
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
    let peers = ranks.saturating_sub(1);
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
        Transport::Mlx5 => {
            let receive_cq = (u64::from(RECEIVES_PER_QUEUE_PAIR) * ranks).next_power_of_two() * 64;
            let peer_of_qpn = (u64::from(QPN_BASE) + ranks).next_power_of_two() * 4;
            let receive_side = receive_cq
                + peer_of_qpn
                + ranks * Mlx5ReceiveQueue::SIZE_BYTES as u64
                + Mlx5ReceiveContext::SIZE_BYTES as u64
                + 8;
            let per_peer = u64::from(options.sq_basic_block_count) * 64
                + 8
                + 64
                + core::mem::size_of::<Mlx5QueueManagement>() as u64
                + 8
                + u64::from(RECEIVES_PER_QUEUE_PAIR) * RECEIVE_WQE_BYTES as u64;
            receive_side + peers * per_peer
        }
        Transport::Proxy => {
            let ring = ProxyRingHeader::new(options.proxy_ring_capacity_entries)
                .map_or(0, |header| header.ring_total_bytes() as u64);
            peers * ring
        }
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
    options: SimulationOptions,
    memory: Memory,
    nic: Nic,
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

const ENDPOINT_HANDLE_BYTES: u64 = 128;
/// Where an endpoint handle keeps the receive context's address.
const RECEIVE_CONTEXT_FIELD: u64 =
    core::mem::offset_of!(EndpointHandle, receive_context_address) as u64;
/// Receive WQEs per mlx5 QP (write-with-immediate signals each take one until a wait posts it
/// again).
const RECEIVES_PER_QUEUE_PAIR: u32 = 64;

/// Where a rank's receive side lives.
struct ReceiveSide {
    context_address: u64,
    queues_address: u64,
}

/// Writes `handle` into slot `peer` of `rank`'s endpoint table at `table`.
fn write_endpoint_handle(
    memory: &mut Memory,
    rank: u32,
    table: u64,
    peer: u32,
    handle: &EndpointHandle,
) -> Result<(), SimulationError> {
    memory
        .write(
            rank,
            table + u64::from(peer) * ENDPOINT_HANDLE_BYTES,
            &handle.to_bytes(),
        )
        .map_err(|e| SimulationError::Setup(e.to_string()))
}

/// Allocates `rank`'s receive CQ (room for every QP's receives), its context and its tables
/// (the queue table is written once the QPs exist).
fn allocate_receive_side(
    memory: &mut Memory,
    nic: &mut Nic,
    rank: u32,
    ranks: u32,
) -> Result<ReceiveSide, SimulationError> {
    let setup = |e: &dyn std::fmt::Display| SimulationError::Setup(e.to_string());
    let cqe_count = (RECEIVES_PER_QUEUE_PAIR * ranks).next_power_of_two();
    let cq = memory.allocate(
        rank,
        u64::from(cqe_count) * 64,
        MemoryKind::Device,
        "receive cq",
    );
    let cq_doorbell = memory.allocate(rank, 8, MemoryKind::Device, "receive cq doorbell record");
    nic.create_receive_cq(
        memory,
        ReceiveCqConfig {
            rank,
            buffer_address: cq,
            cqe_count,
            doorbell_record_address: cq_doorbell,
        },
    )
    .map_err(|e| setup(&e))?;
    let queues = memory.allocate(
        rank,
        u64::from(ranks) * Mlx5ReceiveQueue::SIZE_BYTES as u64,
        MemoryKind::Device,
        "receive queues",
    );
    let qpn_mask = (QPN_BASE + ranks).next_power_of_two() - 1;
    let peer_of_qpn = memory.allocate(
        rank,
        u64::from(qpn_mask + 1) * 4,
        MemoryKind::Device,
        "peer of qpn",
    );
    for peer in 0..ranks {
        memory
            .write(
                rank,
                peer_of_qpn + u64::from((QPN_BASE + peer) & qpn_mask) * 4,
                &peer.to_le_bytes(),
            )
            .map_err(|e| setup(&e))?;
    }
    let context_address = memory.allocate(
        rank,
        Mlx5ReceiveContext::SIZE_BYTES as u64,
        MemoryKind::Device,
        "receive context",
    );
    let context = Mlx5ReceiveContext {
        cq_buffer_address: cq,
        cqe_count,
        poll_lock: 0,
        consumer_index: 0,
        cq_doorbell_record_address: cq_doorbell,
        queues_address: queues,
        queue_count: ranks,
        qpn_mask,
        peer_of_qpn_address: peer_of_qpn,
        local_rank: rank,
        reserved: [0; 4],
    };
    memory
        .write(rank, context_address, &context.to_bytes())
        .map_err(|e| setup(&e))?;
    Ok(ReceiveSide {
        context_address,
        queues_address: queues,
    })
}
const REGION_DESCRIPTOR_BYTES: u64 = 32;
const QPN_BASE: u32 = 0x100;

fn management_offset(field: usize) -> u64 {
    field as u64
}

const MANAGEMENT_RESERVED_HEAD: usize = core::mem::offset_of!(Mlx5QueueManagement, reserved_head);
const MANAGEMENT_READY_HEAD: usize = core::mem::offset_of!(Mlx5QueueManagement, ready_head);
const MANAGEMENT_PRODUCER_INDEX: usize = core::mem::offset_of!(Mlx5QueueManagement, producer_index);
const MANAGEMENT_POST_SEND_LOCK: usize = core::mem::offset_of!(Mlx5QueueManagement, post_send_lock);
const MANAGEMENT_CONSUMER_INDEX: usize = core::mem::offset_of!(Mlx5QueueManagement, consumer_index);

impl<'k> World<'k> {
    fn new(
        rank_kernels: &'k [SimKernel],
        options: &SimulationOptions,
    ) -> Result<Self, SimulationError> {
        let kernel = &rank_kernels[0];
        let ranks = options.ranks;
        if ranks < 2 {
            return Err(SimulationError::Setup(format!(
                "{ranks} rank(s): communication needs at least 2 ranks (--ranks)"
            )));
        }
        check_memory(kernel, options).map_err(SimulationError::Setup)?;
        let mut memory = Memory::new();
        let mut data_rng = ChaCha8Rng::seed_from_u64(options.data_seed);
        let mut regions = Vec::new();
        for rank in 0..ranks {
            let mut by_name = BTreeMap::new();
            for (name, size) in &kernel.launch.regions {
                let length_bytes = size.evaluate(ranks);
                if length_bytes <= 0 {
                    return Err(SimulationError::Setup(format!(
                        "region `{name}` has {length_bytes} bytes for {ranks} ranks; sizes must be positive"
                    )));
                }
                let length_bytes = length_bytes as u64;
                // A flag region of packet signals carries its slots after its own bytes; the
                // descriptors (and the final contents compared) keep the region's length.
                let staging_bytes = if kernel.packet_staging_regions.contains(name) {
                    aboleth_abi::packet::staging_bytes(length_bytes)
                } else {
                    0
                };
                let address =
                    memory.allocate(rank, length_bytes + staging_bytes, MemoryKind::Device, name);
                let (lkey, rkey) = memory
                    .register(rank, address, length_bytes + staging_bytes)
                    .map_err(|e| SimulationError::Setup(e.to_string()))?;
                let mut bytes = vec![0u8; length_bytes as usize];
                match kernel.launch.init.get(name) {
                    None | Some(RegionInit::Zero) => {}
                    Some(RegionInit::Random) => data_rng.fill_bytes(&mut bytes),
                    Some(RegionInit::RandomModulo(modulus)) => {
                        let modulus = modulus.evaluate(ranks).max(1) as u64;
                        for word in bytes.chunks_mut(8) {
                            let value = data_rng.next_u64() % modulus;
                            word.copy_from_slice(&value.to_le_bytes()[..word.len()]);
                        }
                    }
                }
                memory
                    .write(rank, address, &bytes)
                    .map_err(|e| SimulationError::Setup(e.to_string()))?;
                by_name.insert(
                    name.clone(),
                    RegionAllocation {
                        address,
                        length_bytes,
                        lkey,
                        rkey,
                    },
                );
            }
            regions.push(by_name);
        }
        let transport = match kernel.target {
            Transport::Mlx5 => Transport::Mlx5,
            Transport::Proxy => Transport::Proxy,
            Transport::P2p => Transport::P2p,
            other => {
                return Err(SimulationError::Setup(format!(
                    "the simulator has no model of `{}` yet",
                    other.name()
                )));
            }
        };
        // Region-descriptor tables: one per region per rank, indexed by rank.
        let mut region_tables = HashMap::new();
        let mut proxy_region_table = RegionTable::new();
        for (index, (name, _)) in kernel.launch.regions.iter().enumerate() {
            let descriptors: Vec<RemoteRegionDescriptor> = (0..ranks)
                .map(|peer| {
                    let allocation = &regions[peer as usize][name];
                    RemoteRegionDescriptor {
                        base_address: allocation.address,
                        length_bytes: allocation.length_bytes,
                        rkey: allocation.rkey,
                        peer_rank: peer,
                        transport: transport as u32
                            | if kernel.packet_staging_regions.contains(name) {
                                aboleth_abi::region::REGION_FLAG_PACKET_SLOTS
                            } else {
                                0
                            },
                        region_index: index as u32,
                    }
                })
                .collect();
            let table_bytes = aboleth_abi::region::encode_region_table(&descriptors);
            for rank in 0..ranks {
                let address = memory.allocate(
                    rank,
                    table_bytes.len() as u64,
                    MemoryKind::Device,
                    &format!("region table {name}"),
                );
                memory
                    .write(rank, address, &table_bytes)
                    .map_err(|e| SimulationError::Setup(e.to_string()))?;
                region_tables.insert((rank, address), index as u32);
            }
            proxy_region_table.insert(index as u32, descriptors);
        }
        let mut nic = Nic::new(options.cost_model.clone());
        let mut proxies = Vec::new();
        let mut endpoint_tables = Vec::new();
        for rank in 0..ranks {
            let mut proxy =
                ProxyEngine::new(rank, proxy_region_table.clone(), options.cost_model.clone());
            let table = memory.allocate(
                rank,
                u64::from(ranks) * ENDPOINT_HANDLE_BYTES,
                MemoryKind::Device,
                "endpoint table",
            );
            // mlx5: the rank's receive side (write-with-immediate signals): one receive CQ, a
            // context every handle points to, and a receive queue per QP.
            let receive = if transport == Transport::Mlx5 {
                Some(allocate_receive_side(&mut memory, &mut nic, rank, ranks)?)
            } else {
                None
            };
            let mut receive_queues = vec![Mlx5ReceiveQueue::default(); ranks as usize];
            for peer in 0..ranks {
                if peer == rank {
                    continue;
                }
                let mut handle = EndpointHandle {
                    transport: transport as u32,
                    peer_rank: peer,
                    local_rank: rank,
                    ..EndpointHandle::default()
                };
                match transport {
                    Transport::Mlx5 => {
                        let sq_bytes = u64::from(options.sq_basic_block_count) * 64;
                        let sq = memory.allocate(
                            rank,
                            sq_bytes,
                            MemoryKind::Device,
                            &format!("sq to {peer}"),
                        );
                        let dbr =
                            memory.allocate(rank, 8, MemoryKind::Device, &format!("dbr to {peer}"));
                        let cq =
                            memory.allocate(rank, 64, MemoryKind::Device, &format!("cq to {peer}"));
                        let management = memory.allocate(
                            rank,
                            core::mem::size_of::<Mlx5QueueManagement>() as u64,
                            MemoryKind::Device,
                            &format!("queue management to {peer}"),
                        );
                        let atomic_result = memory.allocate(
                            rank,
                            8,
                            MemoryKind::Device,
                            &format!("atomic result to {peer}"),
                        );
                        let (atomic_lkey, _) = memory
                            .register(rank, atomic_result, 8)
                            .map_err(|e| SimulationError::Setup(e.to_string()))?;
                        let qpn = QPN_BASE + peer;
                        let receive_buffer = memory.allocate(
                            rank,
                            u64::from(RECEIVES_PER_QUEUE_PAIR) * RECEIVE_WQE_BYTES as u64,
                            MemoryKind::Device,
                            &format!("receive queue from {peer}"),
                        );
                        let empty = ReceiveDataSegment::empty().to_bytes();
                        memory
                            .write(
                                rank,
                                receive_buffer,
                                &empty.repeat(RECEIVES_PER_QUEUE_PAIR as usize),
                            )
                            .map_err(|e| SimulationError::Setup(e.to_string()))?;
                        // Every receive posted: the doorbell record's receive word at +0.
                        memory
                            .write(rank, dbr, &RECEIVES_PER_QUEUE_PAIR.to_be_bytes())
                            .map_err(|e| SimulationError::Setup(e.to_string()))?;
                        receive_queues[peer as usize] = Mlx5ReceiveQueue {
                            qpn,
                            wqe_count: RECEIVES_PER_QUEUE_PAIR,
                            doorbell_record_address: dbr,
                            posted: u64::from(RECEIVES_PER_QUEUE_PAIR),
                            buffer_address: receive_buffer,
                        };
                        nic.create_queue_pair(
                            &mut memory,
                            QueuePairConfig {
                                rank,
                                peer_rank: peer,
                                qpn,
                                sq_buffer_address: sq,
                                sq_basic_block_count: options.sq_basic_block_count,
                                doorbell_record_address: dbr,
                                cq_buffer_address: cq,
                                cqe_count: 1,
                                cq_collapsed: true,
                                receive: Some(ReceiveQueueConfig {
                                    buffer_address: receive_buffer,
                                    wqe_count: RECEIVES_PER_QUEUE_PAIR,
                                    doorbell_record_address: dbr,
                                }),
                            },
                        )
                        .map_err(|e| SimulationError::Setup(e.to_string()))?;
                        handle.sq_buffer_address = sq;
                        handle.sq_wqe_basic_block_count = options.sq_basic_block_count;
                        handle.qpn = qpn;
                        handle.doorbell_record_address = dbr;
                        handle.uar_doorbell_address = dbr;
                        handle.cq_buffer_address = cq;
                        handle.cqe_count = 1;
                        handle.cq_collapsed = 1;
                        handle.management_address = management;
                        handle.atomic_result_address = atomic_result;
                        handle.atomic_result_lkey = atomic_lkey;
                        handle.receive_context_address =
                            receive.as_ref().map_or(0, |side| side.context_address);
                    }
                    Transport::Proxy => {
                        let header = ProxyRingHeader::new(options.proxy_ring_capacity_entries)
                            .map_err(|e| SimulationError::Setup(e.to_string()))?;
                        let ring = memory.allocate(
                            rank,
                            header.ring_total_bytes() as u64,
                            MemoryKind::HostPinned,
                            &format!("proxy ring to {peer}"),
                        );
                        memory
                            .write(rank, ring, &header.to_bytes())
                            .map_err(|e| SimulationError::Setup(e.to_string()))?;
                        proxy
                            .register_ring(
                                &mut memory,
                                peer,
                                ring,
                                options.proxy_ring_capacity_entries,
                            )
                            .map_err(|e| SimulationError::Setup(e.to_string()))?;
                        handle.proxy_ring_address = ring;
                        handle.proxy_ring_capacity_entries = options.proxy_ring_capacity_entries;
                    }
                    _ => {
                        handle.peer_base_delta = crate::memory::rank_address_space_base(peer)
                            .wrapping_sub(crate::memory::rank_address_space_base(rank))
                            as i64;
                    }
                }
                write_endpoint_handle(&mut memory, rank, table, peer, &handle)?;
            }
            if let Some(side) = &receive {
                let queues: Vec<u8> = receive_queues.iter().flat_map(|q| q.to_bytes()).collect();
                memory
                    .write(rank, side.queues_address, &queues)
                    .map_err(|e| SimulationError::Setup(e.to_string()))?;
                // This rank's own slot carries what a wait needs (the receive context).
                let own = EndpointHandle {
                    transport: transport as u32,
                    peer_rank: rank,
                    local_rank: rank,
                    receive_context_address: side.context_address,
                    ..EndpointHandle::default()
                };
                write_endpoint_handle(&mut memory, rank, table, rank, &own)?;
            }
            endpoint_tables.push(table);
            proxies.push(proxy);
        }
        Ok(World {
            kernel,
            rank_kernels,
            options: options.clone(),
            memory,
            nic,
            proxies,
            store_buffers: Vec::new(),
            threads: Vec::new(),
            rng: ChaCha8Rng::seed_from_u64(options.schedule_seed),
            regions,
            region_tables,
            endpoint_tables,
            endpoint_handles: Vec::new(),
            endpoint_handle_index: HashMap::new(),
            posted: HashMap::new(),
            p2p_signal_stores: HashMap::new(),
            flag_histories: HashMap::new(),
            checked_updates: HashMap::new(),
            early_waits: Vec::new(),
            landed_puts: Vec::new(),
            pending_immediates: HashMap::new(),
            immediate_flag_tables: BTreeMap::new(),
            packet_transfers: BTreeMap::new(),
            write_times: HashMap::new(),
            doorbell_times: HashMap::new(),
            nic_clocks: vec![0; ranks as usize],
            proxy_clocks: vec![0; ranks as usize],
            counts: Counts::default(),
            steps: 0,
            epoch: 0,
            time_origin: 0,
            observations: Observations::new(),
        })
    }

    /// The kernel rank `rank` runs.
    fn kernel_of(&self, rank: u32) -> &'k SimKernel {
        self.rank_kernels
            .get(rank as usize)
            .unwrap_or(&self.rank_kernels[0])
    }

    /// An instruction's `file:line:column (op)` in the kernel that rank `rank` runs.
    fn site_of(&self, rank: u32, site: usize) -> String {
        let site = &self.kernel_of(rank).sites[site];
        format!("{} ({})", site.location, site.op_name)
    }

    fn run_round(&mut self, round: u32) -> Result<RoundReport, SimulationError> {
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

    /// At a launch's end every queue's publication counter must have caught up with its
    /// reservation counter, whichever protocol posted to it: the next kernel on the queue may
    /// post with the shared protocol, which waits until the counter equals its base.
    fn check_queue_counters(&self, round: u32) -> Result<(), SimulationError> {
        if !matches!(self.kernel.target, Transport::Mlx5 | Transport::Proxy) {
            return Ok(());
        }
        let mut handles: Vec<(&(u32, u64), &usize)> = self.endpoint_handle_index.iter().collect();
        handles.sort();
        for ((rank, _), index) in handles {
            let handle = &self.endpoint_handles[*index];
            let reserved_address = match self.kernel.target {
                Transport::Mlx5 => {
                    handle.management_address + management_offset(MANAGEMENT_RESERVED_HEAD)
                }
                _ => {
                    handle.proxy_ring_address
                        + ProxyRingHeader::PRODUCER_RESERVATION_COUNTER_OFFSET_BYTES
                }
            };
            let read = |address| {
                self.memory
                    .read_u64(*rank, address)
                    .map_err(|e| SimulationError::Program(e.to_string()))
            };
            let reserved = read(reserved_address)?;
            let published = read(self.ready_counter_address(handle))?;
            if reserved != published {
                return Err(SimulationError::Program(format!(
                    "after launch {}: rank {rank}'s queue to rank {} has {reserved} slots reserved but its publication counter is at {published}: a later kernel posting to it with the shared protocol would wait forever",
                    round + 1,
                    handle.peer_rank
                )));
            }
        }
        Ok(())
    }

    /// A packet transfer must be unpacked by a wait of its receiver in the launch that sends
    /// it (`--packet-signals` declares so): nothing else sets its flag or moves its data.
    fn check_packet_transfers_unpacked(&self, round: u32) -> Result<(), SimulationError> {
        match self.packet_transfers.iter().next() {
            None => Ok(()),
            Some(((rank, _), transfer)) => {
                let signal = &transfer.signal;
                Err(SimulationError::Program(format!(
                    "after launch {}: rank {} program {}'s packet signal at {} (value {}) to flag {} on rank {rank} was never unpacked: with packet signals every signal must be awaited by its receiver in the launch that sends it",
                    round + 1,
                    signal.rank,
                    signal.program,
                    self.site_of(signal.rank, signal.site),
                    transfer.value,
                    self.memory.describe_address(*rank, signal.flag.1),
                )))
            }
        }
    }

    fn latest_clock(&self) -> u64 {
        self.threads
            .iter()
            .map(|thread| thread.clock_nanoseconds)
            .chain(self.nic_clocks.iter().copied())
            .chain(self.proxy_clocks.iter().copied())
            .max()
            .unwrap_or(0)
    }

    fn argument(&self, rank: u32, binding: &ArgumentBinding) -> Value {
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

    // -----------------------------------------------------------------------------------------
    // Scheduling

    fn schedule(&mut self) -> Result<(), SimulationError> {
        #[derive(Clone, Copy)]
        enum Agent {
            Thread(usize),
            StoreBuffer(usize),
            Nic,
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
                Agent::Proxy(index) => self.step_proxy(index)?,
            }
        }
    }

    /// Runs NICs, proxies and store buffers until nothing is pending (after the last launch).
    fn quiesce(&mut self) -> Result<(), SimulationError> {
        loop {
            let mut moved = false;
            if self.nic.pending_work(&self.memory) {
                self.step_nic()?;
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

    fn final_regions(&self) -> Result<Vec<RegionContents>, SimulationError> {
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

    fn describe_waits(&self) -> Result<String, SimulationError> {
        let mut lines = Vec::new();
        for (index, thread) in self.threads.iter().enumerate() {
            if thread.finished {
                continue;
            }
            let who = format!("rank {} program {}", thread.rank, thread.program);
            let line = match &thread.blocked {
                None => format!("{who} is runnable"),
                Some(Block::Flag {
                    address,
                    expected,
                    site,
                    ..
                }) => {
                    let seen = self.load_i64(index, thread.rank, *address)?;
                    format!(
                        "{who} waits at {} for flag {} on rank {} to reach {expected} (epoch {}); it holds {seen}: {}",
                        self.site_of(thread.rank, *site),
                        self.memory.describe_address(thread.rank, *address),
                        thread.rank,
                        self.epoch,
                        self.why_flag_short(thread.rank, *address, *expected)
                    )
                }
                Some(Block::Mlx5Completion {
                    qpn,
                    peer,
                    slot,
                    site,
                }) => format!(
                    "{who} waits at {} for the completion of the WQE at slot {slot} on its QP to rank {peer}; {}",
                    self.site_of(thread.rank, *site),
                    self.nic.describe_queue(thread.rank, *qpn)
                ),
                Some(Block::ProxyCompletion {
                    peer, ticket, site, ..
                }) => format!(
                    "{who} waits at {} for the proxy to complete ticket {ticket} of its ring to rank {peer}; {}",
                    self.site_of(thread.rank, *site),
                    self.proxies[thread.rank as usize].describe_rings(&self.memory)
                ),
                Some(Block::Space {
                    peer,
                    site,
                    consumer_address,
                    needed,
                    ..
                }) => format!(
                    "{who} waits at {} for free slots in its queue to rank {peer}: the consumer position is {} and must reach {needed}, and no completion it can see frees more",
                    self.site_of(thread.rank, *site),
                    self.memory
                        .read_u64(thread.rank, *consumer_address)
                        .unwrap_or(u64::MAX)
                ),
                Some(Block::Publication { base, site, .. }) => format!(
                    "{who} waits at {} for the commands before slot {base} to be published by another program",
                    self.site_of(thread.rank, *site)
                ),
                Some(Block::Lock { site, .. }) => {
                    format!(
                        "{who} waits at {} for the post lock",
                        self.site_of(thread.rank, *site)
                    )
                }
                Some(Block::Lanes { site }) => format!(
                    "{who} waits at the barrier at {} for its lanes to finish the loop",
                    self.site_of(thread.rank, *site)
                ),
            };
            lines.push(line);
        }
        Ok(lines.join("; "))
    }

    /// Why a flag is still short of `expected` when nothing can move any more: it went down
    /// (an add of a negative amount, or a set to a smaller value), or the signals that arrived
    /// were not enough, or none arrived.
    fn why_flag_short(&self, rank: u32, address: u64, expected: i64) -> String {
        let updates = self
            .flag_histories
            .get(&(rank, address))
            .map_or(&[][..], |history| &history.updates[..]);
        let mut before = self
            .flag_histories
            .get(&(rank, address))
            .and_then(|history| history.launch_start_value);
        for update in updates {
            let went_down = match update.signal.operation {
                SignalOperation::Add => update.signal.operand < 0,
                SignalOperation::Set => before.is_some_and(|before| update.value_after < before),
            };
            if went_down {
                let signal = &update.signal;
                let what = match signal.operation {
                    SignalOperation::Add => format!("added {}", signal.operand),
                    SignalOperation::Set => format!("set it to {}", signal.operand),
                };
                let from = before.map_or(String::new(), |before| format!(" from {before}"));
                return format!(
                    "the flag went down: the signal at {} (rank {} program {}) {what}, taking it{from} to {}, and nothing else will signal it, so this `>=` wait can never reach {expected}; signals a `>=` wait counts must add positive amounts or set growing values",
                    self.site_of(signal.rank, signal.site),
                    signal.rank,
                    signal.program,
                    update.value_after
                );
            }
            before = Some(update.value_after);
        }
        match updates.last() {
            None => "the signal that should set it never arrived".to_owned(),
            Some(last) => format!(
                "{} signal(s) reached it in this launch (the last at {} from rank {} program {}), and the ones that would bring it to {expected} never arrived",
                updates.len(),
                self.site_of(last.signal.rank, last.signal.site),
                last.signal.rank,
                last.signal.program
            ),
        }
    }

    /// An out-of-bounds error unless `[address, address + length_bytes)` lies inside one of
    /// `rank`'s regions: what a program's own pointers (loads, stores, waits, put sources) may
    /// reach. The simulator's allocations (queues, rings, tables, receive sides) are never
    /// addressable through them, as on a GPU they would be someone else's memory.
    fn check_in_user_region(
        &self,
        thread: usize,
        site: usize,
        access: &str,
        address: u64,
        length_bytes: u64,
    ) -> Result<(), SimulationError> {
        let rank = self.threads[thread].rank;
        let regions = &self.regions[rank as usize];
        let inside = regions.values().any(|region| {
            address >= region.address
                && address
                    .checked_add(length_bytes)
                    .is_some_and(|end| end <= region.address + region.length_bytes)
        });
        if inside {
            return Ok(());
        }
        let distance = |region: &RegionAllocation| {
            let end = region.address + region.length_bytes;
            if address < region.address {
                region.address - address
            } else {
                address.saturating_sub(end)
            }
        };
        let nearest = regions
            .iter()
            .min_by_key(|(_, region)| distance(region))
            .map_or("none".to_owned(), |(name, region)| {
                let end = region.address + region.length_bytes;
                let relation = if address < region.address {
                    format!("{:#x} bytes before its start", region.address - address)
                } else if address >= end {
                    format!("{:#x} bytes past its end", address - end)
                } else {
                    format!(
                        "starting at its byte {:#x} and running {:#x} bytes past its end",
                        address - region.address,
                        (address + length_bytes).saturating_sub(end)
                    )
                };
                format!(
                    "'{name}' [{:#x}, {end:#x}), {} bytes ({relation})",
                    region.address, region.length_bytes
                )
            });
        Err(self.program_error(
            thread,
            format!(
                "out of bounds: the {} at {} {access} {length_bytes} bytes at {address:#x}, outside every region of rank {rank}; the nearest region is {nearest}",
                self.kernel_of(rank).sites[site].op_name,
                self.kernel_of(rank).sites[site].location,
            ),
        ))
    }

    // -----------------------------------------------------------------------------------------
    // Memory through a program's store buffer

    /// A load of the program: memory with its own pending stores and those of its other
    /// threads not yet ordered by a barrier (a scalar load sees the program's scalar stores).
    fn load(
        &self,
        thread: usize,
        rank: u32,
        address: u64,
        length_bytes: u64,
    ) -> Result<Vec<u8>, SimulationError> {
        let mut bytes = self.load_after_barrier(thread, rank, address, length_bytes)?;
        if let Some(other) = self.threads[thread].other_threads {
            self.store_buffers[other].overlay_pending(rank, address, &mut bytes);
        }
        Ok(bytes)
    }

    /// A load by the program's threads in general (a copy's): memory with the stores ordered
    /// before it, not the other threads' stores since the last barrier.
    fn load_after_barrier(
        &self,
        thread: usize,
        rank: u32,
        address: u64,
        length_bytes: u64,
    ) -> Result<Vec<u8>, SimulationError> {
        self.store_buffers[thread]
            .load(&self.memory, rank, address, length_bytes)
            .map_err(|e| self.program_error(thread, format!("load: {e}")))
    }

    /// The source of a p2p copy or packet put as its threads read it: an error when the
    /// program stored other bytes there that no barrier has ordered before the copy.
    fn load_copy_source(
        &self,
        thread: usize,
        site: usize,
        source: u64,
        length_bytes: u64,
    ) -> Result<Vec<u8>, SimulationError> {
        let rank = self.threads[thread].rank;
        let seen = self.load_after_barrier(thread, rank, source, length_bytes)?;
        let stored = self.load(thread, rank, source, length_bytes)?;
        if let Some(offset) = (0..seen.len()).find(|&offset| seen[offset] != stored[offset]) {
            let state = &self.threads[thread];
            return Err(SimulationError::StaleSource(format!(
                "rank {rank} program {}'s copy at {} read {:#04x} at byte {offset} of its source {} where the program had stored {:#04x}: the store is not ordered before the copy's loads (a gpu.barrier must separate them)",
                state.program,
                self.site_of(rank, site),
                seen[offset],
                self.memory.describe_address(rank, source),
                stored[offset],
            )));
        }
        Ok(seen)
    }

    fn load_i64(&self, thread: usize, rank: u32, address: u64) -> Result<i64, SimulationError> {
        let bytes = self.load(thread, rank, address, 8)?;
        Ok(i64::from_le_bytes(bytes.try_into().expect("8 bytes")))
    }

    fn store(
        &mut self,
        thread: usize,
        rank: u32,
        address: u64,
        bytes: &[u8],
        order: StoreOrder,
    ) -> Result<u64, SimulationError> {
        let program_order = self.store_buffers[thread].next_program_order();
        match order {
            StoreOrder::Relaxed => self.store_buffers[thread]
                .store(&self.memory, rank, address, bytes)
                .map_err(|e| self.program_error(thread, format!("store: {e}")))?,
            StoreOrder::Release => {
                let drained = self.store_buffers[thread]
                    .store_release(&mut self.memory, &mut self.rng, rank, address, bytes)
                    .map_err(|e| self.program_error(thread, format!("store: {e}")))?;
                self.on_drained(thread, drained);
            }
        }
        Ok(program_order)
    }

    fn flush(&mut self, thread: usize) -> Result<(), SimulationError> {
        let drained = self.store_buffers[thread]
            .fence(&mut self.memory, &mut self.rng)
            .map_err(|e| SimulationError::Program(e.to_string()))?;
        self.on_drained(thread, drained);
        Ok(())
    }

    /// An atomic read-modify-write on memory (it does not wait in the store buffer).
    fn atomic_update(
        &mut self,
        thread: usize,
        rank: u32,
        address: u64,
        update: impl FnOnce(u64) -> u64,
    ) -> Result<u64, SimulationError> {
        // The program's own earlier stores to this word are ordered before its atomic on it.
        let drained = self.store_buffers[thread]
            .drain_overlapping(&mut self.memory, rank, address, 8)
            .map_err(|e| self.program_error(thread, format!("atomic: {e}")))?;
        self.on_drained(thread, drained);
        let old = self
            .memory
            .read_u64(rank, address)
            .map_err(|e| self.program_error(thread, format!("atomic: {e}")))?;
        self.memory
            .write_u64(rank, address, update(old))
            .map_err(|e| self.program_error(thread, format!("atomic: {e}")))?;
        Ok(old)
    }

    fn on_drained(&mut self, thread: usize, drained: Vec<DrainedStore>) {
        for store in drained {
            if let Some(signal) = self
                .p2p_signal_stores
                .remove(&(thread, store.program_order))
            {
                let time = self.threads[thread].clock_nanoseconds
                    + self.options.cost_model.nvlink_one_way_latency_nanoseconds;
                self.deliver(store.target_rank, store.address, signal, time);
            }
        }
    }

    fn deliver(&mut self, rank: u32, address: u64, signal: Rc<SignalRecord>, time: u64) {
        // Called right after the update reached memory; a relaxed store may drain together
        // with a later one to the same word, so a set's value is its own.
        let value_after = match signal.operation {
            SignalOperation::Set => signal.operand,
            SignalOperation::Add => self
                .memory
                .read_u64(rank, address)
                .map_or(signal.operand, |value| value as i64),
        };
        self.flag_histories
            .entry((rank, address))
            .or_default()
            .updates
            .push(FlagUpdate {
                signal,
                value_after,
            });
        let entry = self.write_times.entry((rank, address)).or_insert(0);
        *entry = (*entry).max(time);
    }

    fn program_error(&self, thread: usize, message: String) -> SimulationError {
        let thread = &self.threads[thread];
        SimulationError::Program(format!(
            "rank {} program {}: {message}",
            thread.rank, thread.program
        ))
    }

    // -----------------------------------------------------------------------------------------
    // Waits

    fn block_released(&self, thread: usize, block: &Block) -> Result<bool, SimulationError> {
        let rank = self.threads[thread].rank;
        Ok(match block {
            Block::Flag {
                address,
                expected,
                receive_context,
                packet_slot,
                ..
            } => {
                self.load_i64(thread, rank, *address)? >= *expected
                    || receive_context
                        .is_some_and(|context| self.next_receive_cqe(rank, context).is_some())
                    || match packet_slot {
                        Some(slot) => self.landed_packets(thread, rank, slot)?.is_some(),
                        None => false,
                    }
            }
            Block::Mlx5Completion { qpn, slot, .. } => !matches!(
                self.nic
                    .poll_cq_for_index(&self.memory, rank, *qpn, *slot)
                    .map_err(|e| SimulationError::Nic(e.to_string()))?,
                CqPollResult::Pending
            ),
            Block::ProxyCompletion {
                ring_address,
                ticket,
                ..
            } => {
                self.memory
                    .read_u64(
                        rank,
                        ring_address + ProxyRingHeader::COMPLETION_COUNTER_OFFSET_BYTES,
                    )
                    .map_err(|e| SimulationError::Proxy(e.to_string()))?
                    > *ticket
            }
            // Re-evaluated by running the instruction again.
            Block::Space {
                consumer_address,
                needed,
                cq_counter_address,
                ..
            } => {
                let consumer = self
                    .memory
                    .read_u64(rank, *consumer_address)
                    .map_err(|e| SimulationError::Program(e.to_string()))?;
                consumer >= *needed
                    || cq_counter_address.is_some_and(|address| {
                        // A CQE past the consumer position: reclaiming it makes progress.
                        self.memory.read(rank, address, 4).is_ok_and(|word| {
                            let opcode = word[3] >> 4;
                            let counter = u16::from_be_bytes([word[0], word[1]]);
                            opcode != aboleth_abi::mlx5::cqe::CQE_OPCODE_INVALID
                                && counter.wrapping_sub(consumer as u16) < 0x8000
                        })
                    })
            }
            Block::Publication { address, base, .. } => {
                self.memory
                    .read_u64(rank, *address)
                    .map_err(|e| SimulationError::Program(e.to_string()))?
                    == *base
            }
            Block::Lock { address, .. } => {
                self.memory
                    .read_u64(rank, *address)
                    .map_err(|e| SimulationError::Program(e.to_string()))?
                    == 0
            }
            Block::Lanes { .. } => self.lanes_finished(thread),
        })
    }

    /// At a launch's start: what each flag received becomes the previous launch's, and its
    /// value now is where this launch's updates start from.
    fn start_flag_histories(&mut self) -> Result<(), SimulationError> {
        self.checked_updates.clear();
        self.early_waits.clear();
        self.landed_puts.clear();
        for (&(rank, address), history) in &mut self.flag_histories {
            history.previous_launch = std::mem::take(&mut history.updates);
            history.launch_start_value = Some(
                self.memory
                    .read_u64(rank, address)
                    .map_err(|e| SimulationError::Program(e.to_string()))? as i64,
            );
        }
        Ok(())
    }

    /// The updates of this launch a wait for `flag >= expected` needs, as a range of
    /// [`FlagHistory::updates`]: the first update that brought the flag to `expected` or more
    /// (in arrival order), and, when it is an add, every update since the last set before it
    /// (the sum needs them all; the set heads the chain). None when no update of this launch
    /// reached it, or the flag already held enough when the launch started (the wait may pass
    /// on a value from before the launch: then it guards nothing of this launch).
    fn needed_updates(history: &FlagHistory, expected: i64) -> Option<(usize, usize)> {
        // A flag first signaled in this launch: its value before an add is known; before a
        // set it is not, and the set is taken to have crossed the awaited value.
        let start = history.launch_start_value.or_else(|| {
            let first = history.updates.first()?;
            (first.signal.operation == SignalOperation::Add)
                .then(|| first.value_after.wrapping_sub(first.signal.operand))
        });
        if start.is_some_and(|start| start >= expected) {
            return None;
        }
        let reached = history
            .updates
            .iter()
            .position(|update| update.value_after >= expected)?;
        let chain_start = history.updates[..=reached]
            .iter()
            .rposition(|update| update.signal.operation == SignalOperation::Set)
            .unwrap_or(0);
        Some((chain_start, reached))
    }

    /// Checks, when a wait for `flag >= expected` at `(rank, address)` passes, the data the
    /// awaited value guarantees: the puts guarded by the signals whose updates were needed to
    /// reach it ([`Self::needed_updates`]) and that no earlier wait of this thread on the flag
    /// checked, must be visible; and the data the reference run's same wait guarded must be
    /// here. Signals that arrived but were not needed guard nothing yet: a later wait that needs
    /// them checks them.
    fn check_delivered_data(
        &mut self,
        thread: usize,
        address: u64,
        site: usize,
        seen: i64,
        expected: i64,
    ) -> Result<(), SimulationError> {
        let (rank, program) = (self.threads[thread].rank, self.threads[thread].program);
        let round = (self.epoch - 1) as u32;
        let key: ObservationKey = (round, rank, program, self.threads[thread].waits_passed);
        self.threads[thread].waits_passed += 1;
        let describe_wait = |world: &Self| {
            format!(
                "rank {rank} program {program} passed the wait at {} (flag {} = {seen}, awaited >= {expected})",
                world.site_of(rank, site),
                world.memory.describe_address(rank, address)
            )
        };
        let mut observation = Observation {
            flag: (rank, address),
            ranges: Vec::new(),
        };
        let needed = self
            .flag_histories
            .get(&(rank, address))
            .and_then(|history| Self::needed_updates(history, expected));
        let mut signals = Vec::new();
        match needed {
            Some((first, last)) => {
                let checked = self
                    .checked_updates
                    .entry((thread, rank, address))
                    .or_default();
                let history = &self.flag_histories[&(rank, address)];
                for index in first..=last {
                    if !checked.contains(&index) {
                        checked.push(index);
                        signals.push(history.updates[index].signal.clone());
                    }
                }
            }
            None => {
                if self
                    .flag_histories
                    .get(&(rank, address))
                    .and_then(|history| history.launch_start_value)
                    .is_some_and(|value| value >= expected)
                {
                    self.early_waits.push(EarlyWait {
                        rank,
                        program,
                        site,
                        flag: (rank, address),
                        expected,
                    });
                }
            }
        }
        for signal in signals {
            for put in &signal.guarded {
                let landed = self
                    .memory
                    .read(
                        put.destination_rank,
                        put.destination_address,
                        put.expected.len() as u64,
                    )
                    .map_err(|e| SimulationError::Program(e.to_string()))?;
                if let Some(offset) = first_difference(&landed, &put.expected) {
                    let at = put.destination_address + offset as u64;
                    if let Some(writer) =
                        self.overwriting_put(put.destination_rank, at, landed[offset], Some(put))
                    {
                        return Err(SimulationError::DataOverwritten(format!(
                            "{}, which guards {} on rank {} (byte {offset} of the put at {} from rank {} program {}), but the put at {} from rank {} program {} has overwritten it ({:#04x} where the guarded put carried {:#04x}) while rank {rank} program {program} is still reading it: the writer must wait until the reader is done (e.g. for an acknowledgement flag) before reusing the destination",
                            describe_wait(self),
                            self.memory.describe_address(put.destination_rank, at),
                            put.destination_rank,
                            self.site_of(put.rank, put.site),
                            put.rank,
                            put.program,
                            self.site_of(writer.rank, writer.site),
                            writer.rank,
                            writer.program,
                            landed[offset],
                            put.expected[offset],
                        )));
                    }
                    return Err(SimulationError::DataNotVisible(format!(
                        "{}, but the put at {} from rank {} program {} to {} on rank {} is not visible yet (byte {offset} is {:#04x}, the put carries {:#04x}); its signal at {} (rank {} program {}) was published before its data",
                        describe_wait(self),
                        self.site_of(put.rank, put.site),
                        put.rank,
                        put.program,
                        self.memory
                            .describe_address(put.destination_rank, put.destination_address),
                        put.destination_rank,
                        landed[offset],
                        put.expected[offset],
                        self.site_of(signal.rank, signal.site),
                        signal.rank,
                        signal.program,
                    )));
                }
                observation
                    .ranges
                    .push((put.destination_rank, put.destination_address, landed));
            }
        }
        if let Some(expected) = self
            .options
            .expected_observations
            .as_ref()
            .and_then(|observations| observations.get(&key))
        {
            if expected.flag != (rank, address) {
                return Err(SimulationError::DataNotVisible(format!(
                    "{}, which is wait number {} of this program; in the library-style run that wait was on flag {} of rank {}",
                    describe_wait(self),
                    key.3,
                    self.memory
                        .describe_address(expected.flag.0, expected.flag.1),
                    expected.flag.0
                )));
            }
            for (range_rank, range_address, bytes) in &expected.ranges {
                let here = self
                    .memory
                    .read(*range_rank, *range_address, bytes.len() as u64)
                    .map_err(|e| SimulationError::Program(e.to_string()))?;
                if let Some(offset) = first_difference(&here, bytes) {
                    let at = *range_address + offset as u64;
                    if let Some(writer) = self.overwriting_put(*range_rank, at, here[offset], None)
                    {
                        return Err(SimulationError::DataOverwritten(format!(
                            "{}, which guards {} on rank {range_rank} (the library-style run had {:#04x} there when this wait passed), but the put at {} from rank {} program {} has overwritten it ({:#04x}) while rank {rank} program {program} is still reading it: the writer must wait until the reader is done (e.g. for an acknowledgement flag) before reusing the destination",
                            describe_wait(self),
                            self.memory.describe_address(*range_rank, at),
                            bytes[offset],
                            self.site_of(writer.rank, writer.site),
                            writer.rank,
                            writer.program,
                            here[offset],
                        )));
                    }
                    return Err(SimulationError::DataNotVisible(format!(
                        "{}, but {} on rank {} holds {:#04x} at byte {offset} where the library-style run had {:#04x} when this wait passed: data the signal guards was issued or published after the signal",
                        describe_wait(self),
                        self.memory.describe_address(*range_rank, *range_address),
                        range_rank,
                        here[offset],
                        bytes[offset],
                    )));
                }
            }
        }
        self.observations.insert(key, observation);
        Ok(())
    }

    /// The put of this launch that last wrote `byte` at `(rank, address)`, landing after
    /// `guarded` (when given): the writer that overwrote data a wait guards.
    fn overwriting_put(
        &self,
        rank: u32,
        address: u64,
        byte: u8,
        guarded: Option<&Rc<PutRecord>>,
    ) -> Option<Rc<PutRecord>> {
        let after = match guarded {
            Some(guarded) => {
                self.landed_puts
                    .iter()
                    .position(|put| Rc::ptr_eq(put, guarded))?
                    + 1
            }
            None => 0,
        };
        self.landed_puts[after..]
            .iter()
            .rev()
            .find(|put| {
                put.destination_rank == rank
                    && address >= put.destination_address
                    && address < put.destination_address + put.expected.len() as u64
                    && put.expected[(address - put.destination_address) as usize] == byte
                    && guarded.is_none_or(|guarded| !Rc::ptr_eq(put, guarded))
            })
            .cloned()
    }

    /// At a launch's end: a wait that passed on the value its flag held from the previous
    /// launch, when this launch's signals bring the flag to no more than that value, could not
    /// tell the launches apart (a stale epoch).
    fn check_stale_epochs(&self, round: u32) -> Result<(), SimulationError> {
        for wait in &self.early_waits {
            let Some(history) = self.flag_histories.get(&wait.flag) else {
                continue;
            };
            let Some(start) = history.launch_start_value else {
                continue;
            };
            let Some(this_launch) = history
                .updates
                .iter()
                .find(|update| update.value_after >= wait.expected)
            else {
                continue;
            };
            let Some(previous) = history
                .previous_launch
                .iter()
                .rev()
                .find(|update| update.value_after == start)
            else {
                continue;
            };
            if this_launch.value_after > start {
                continue;
            }
            let flag = self.memory.describe_address(wait.flag.0, wait.flag.1);
            let received = if this_launch.value_after == start {
                format!(
                    "flag {flag} on rank {} receives the same value {start} in launch {} (the signal at {} from rank {} program {}) as in launch {round} (the signal at {})",
                    wait.flag.0,
                    round + 1,
                    self.site_of(this_launch.signal.rank, this_launch.signal.site),
                    this_launch.signal.rank,
                    this_launch.signal.program,
                    self.site_of(previous.signal.rank, previous.signal.site),
                )
            } else {
                format!(
                    "flag {flag} on rank {} receives {} in launch {} (the signal at {} from rank {} program {}) but already holds {start} from launch {round} (the signal at {})",
                    wait.flag.0,
                    this_launch.value_after,
                    round + 1,
                    self.site_of(this_launch.signal.rank, this_launch.signal.site),
                    this_launch.signal.rank,
                    this_launch.signal.program,
                    self.site_of(previous.signal.rank, previous.signal.site),
                )
            };
            return Err(SimulationError::StaleEpoch(format!(
                "{received}; waits cannot tell the launches apart: the wait at {} (rank {} program {}, for >= {}) passes on launch {round}'s value in launch {}; make the value grow with the launch (e.g. set the epoch, or wait for epoch * count with adds)",
                self.site_of(wait.rank, wait.site),
                wait.rank,
                wait.program,
                wait.expected,
                round + 1,
            )));
        }
        Ok(())
    }

    // -----------------------------------------------------------------------------------------
    // Programs

    fn step_thread(&mut self, thread: usize) -> Result<(), SimulationError> {
        self.threads[thread].blocked = None;
        // Pure instructions run on; a step ends at the first effect, wait or the end.
        for _ in 0..256 {
            let Some(instruction) = self.fetch(thread) else {
                self.threads[thread].finished = true;
                return Ok(());
            };
            match self.execute(thread, &instruction)? {
                Step::Continue => {}
                Step::Effect => return Ok(()),
                Step::Blocked(block) => {
                    // Undo the fetch: the instruction runs again once released.
                    self.threads[thread]
                        .frames
                        .last_mut()
                        .expect("fetched from a frame")
                        .pc -= 1;
                    self.threads[thread].blocked = Some(block);
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// The next instruction (advancing the pc), closing finished loop iterations and bodies.
    fn fetch(&mut self, thread: usize) -> Option<Instruction> {
        let state = &mut self.threads[thread];
        loop {
            let frame = state.frames.last_mut()?;
            if frame.pc < frame.body.len() {
                frame.pc += 1;
                return Some(frame.body[frame.pc - 1].clone());
            }
            match frame.induction {
                Some((register, current, upper, step)) if current + step < upper => {
                    frame.induction = Some((register, current + step, upper, step));
                    frame.pc = 0;
                    state.registers[register] = Value::Integer(current + step);
                }
                _ => {
                    state.frames.pop();
                }
            }
        }
    }

    fn integer(&self, thread: usize, register: Register) -> Result<i64, SimulationError> {
        match self.threads[thread].registers[register] {
            Value::Integer(value) => Ok(value),
            other => Err(self.program_error(
                thread,
                format!("expected an integer in a register, found {other:?}"),
            )),
        }
    }

    fn endpoint(
        &self,
        thread: usize,
        register: Register,
    ) -> Result<(u32, EndpointHandle), SimulationError> {
        match self.threads[thread].registers[register] {
            Value::Endpoint(endpoint) => {
                Ok((endpoint.peer, self.endpoint_handles[endpoint.handle]))
            }
            other => {
                Err(self.program_error(thread, format!("expected an endpoint, found {other:?}")))
            }
        }
    }

    fn remote_pointer(
        &self,
        thread: usize,
        register: Register,
    ) -> Result<RemotePointerValue, SimulationError> {
        match self.threads[thread].registers[register] {
            Value::RemotePointer(pointer) => Ok(pointer),
            other => Err(self.program_error(
                thread,
                format!("expected a remote pointer, found {other:?}"),
            )),
        }
    }

    fn set(&mut self, thread: usize, register: Register, value: Value) {
        self.threads[thread].registers[register] = value;
    }

    fn advance_clock(&mut self, thread: usize, nanoseconds: u64) {
        self.threads[thread].clock_nanoseconds += nanoseconds;
    }

    fn execute(
        &mut self,
        thread: usize,
        instruction: &Instruction,
    ) -> Result<Step, SimulationError> {
        let rank = self.threads[thread].rank;
        let site = instruction.site;
        let cost = self.options.cost_model.clone();
        match &instruction.kind {
            InstructionKind::Constant { result, value } => {
                self.set(thread, *result, Value::Integer(*value))
            }
            InstructionKind::ProgramId { result } => {
                let program = self.threads[thread].program;
                self.set(thread, *result, Value::Integer(i64::from(program)));
            }
            InstructionKind::Rank { result } => {
                self.set(thread, *result, Value::Integer(i64::from(rank)))
            }
            InstructionKind::WorldSize { result } => {
                let ranks = self.options.ranks;
                self.set(thread, *result, Value::Integer(i64::from(ranks)));
            }
            InstructionKind::Binary {
                result,
                operator,
                lhs,
                rhs,
                width,
            } => {
                let (lhs, rhs) = (self.integer(thread, *lhs)?, self.integer(thread, *rhs)?);
                let value = evaluate_binary(*operator, lhs, rhs).ok_or_else(|| {
                    self.program_error(
                        thread,
                        format!("{:?} by zero at {}", operator, self.site_of(rank, site)),
                    )
                })?;
                self.set(
                    thread,
                    *result,
                    Value::Integer(truncate_signed(value, *width)),
                );
            }
            InstructionKind::Cast {
                result,
                source,
                width,
            } => {
                let value = self.integer(thread, *source)?;
                self.set(
                    thread,
                    *result,
                    Value::Integer(truncate_signed(value, *width)),
                );
            }
            InstructionKind::PointerAdd {
                result,
                base,
                offset,
            } => {
                let value = self
                    .integer(thread, *base)?
                    .wrapping_add(self.integer(thread, *offset)?);
                self.set(thread, *result, Value::Integer(value));
            }
            InstructionKind::Load {
                result,
                address,
                width_bytes,
            } => {
                let address = self.integer(thread, *address)? as u64;
                self.check_in_user_region(thread, site, "reads", address, *width_bytes)?;
                let bytes = self.load(thread, rank, address, *width_bytes)?;
                let mut word = [0u8; 8];
                word[..bytes.len()].copy_from_slice(&bytes);
                let value = truncate_signed(i64::from_le_bytes(word), (*width_bytes * 8) as u32);
                self.set(thread, *result, Value::Integer(value));
            }
            InstructionKind::Store {
                address,
                value,
                width_bytes,
            } => {
                let address = self.integer(thread, *address)? as u64;
                self.check_in_user_region(thread, site, "writes", address, *width_bytes)?;
                let value = self.integer(thread, *value)?;
                let bytes = value.to_le_bytes()[..*width_bytes as usize].to_vec();
                // Stores a barrier ordered before this one (now in the program's buffer) to the
                // same bytes come first in their coherence order: they become visible now, so
                // this one, from the other buffer, cannot land before them.
                let drained = self.store_buffers[thread]
                    .drain_overlapping(&mut self.memory, rank, address, *width_bytes)
                    .map_err(|e| self.program_error(thread, format!("store: {e}")))?;
                self.on_drained(thread, drained);
                let other = self.other_threads_of(thread);
                self.store_buffers[other]
                    .store(&self.memory, rank, address, &bytes)
                    .map_err(|e| self.program_error(thread, format!("store: {e}")))?;
                self.advance_clock(thread, cost.gpu_global_store_nanoseconds);
                return Ok(Step::Effect);
            }
            InstructionKind::For {
                lower,
                upper,
                step,
                induction,
                body,
                lanes,
            } => {
                let (lower, upper, step) = (
                    self.integer(thread, *lower)?,
                    self.integer(thread, *upper)?,
                    self.integer(thread, *step)?,
                );
                if step <= 0 {
                    return Err(self.program_error(
                        thread,
                        format!(
                            "loop step {step} at {} is not positive",
                            self.site_of(rank, site)
                        ),
                    ));
                }
                if lower < upper {
                    let trip = (upper - lower + step - 1) / step;
                    let lane_count = i64::from(*lanes).min(trip).max(1);
                    for lane in 1..lane_count {
                        self.spawn_lane(
                            thread,
                            *induction,
                            lower + lane * step,
                            upper,
                            step * lane_count,
                            body,
                        );
                    }
                    self.set(thread, *induction, Value::Integer(lower));
                    self.threads[thread].frames.push(Frame {
                        body: body.clone(),
                        pc: 0,
                        induction: Some((*induction, lower, upper, step * lane_count)),
                    });
                }
            }
            InstructionKind::If { condition, body } => {
                if self.integer(thread, *condition)? != 0 {
                    self.threads[thread].frames.push(Frame {
                        body: body.clone(),
                        pc: 0,
                        induction: None,
                    });
                }
            }
            InstructionKind::Return => {
                self.threads[thread].frames.clear();
            }
            InstructionKind::Endpoint {
                result,
                table,
                peer,
            } => {
                let table = self.integer(thread, *table)? as u64;
                let peer = self.integer(thread, *peer)?;
                if peer < 0 || peer >= i64::from(self.options.ranks) || peer == i64::from(rank) {
                    return Err(self.program_error(
                        thread,
                        format!(
                            "endpoint to peer {peer} at {}: peers are the other ranks 0..{}",
                            self.site_of(rank, site),
                            self.options.ranks
                        ),
                    ));
                }
                let address = table + peer as u64 * ENDPOINT_HANDLE_BYTES;
                let handle = match self.endpoint_handle_index.get(&(rank, address)) {
                    Some(&handle) => handle,
                    None => {
                        let bytes = self.load(thread, rank, address, ENDPOINT_HANDLE_BYTES)?;
                        let decoded =
                            EndpointHandle::from_bytes(&bytes.try_into().expect("128 bytes"));
                        decoded.validate().map_err(|e| {
                            self.program_error(
                                thread,
                                format!(
                                    "the endpoint handle at {} is not valid: {e}",
                                    self.memory.describe_address(rank, address)
                                ),
                            )
                        })?;
                        self.endpoint_handles.push(decoded);
                        let index = self.endpoint_handles.len() - 1;
                        self.endpoint_handle_index.insert((rank, address), index);
                        index
                    }
                };
                self.set(
                    thread,
                    *result,
                    Value::Endpoint(EndpointValue {
                        peer: peer as u32,
                        handle,
                    }),
                );
            }
            InstructionKind::Remote {
                result,
                table,
                peer,
                element_bytes,
            } => {
                let table = self.integer(thread, *table)? as u64;
                let peer = self.integer(thread, *peer)?;
                if peer < 0 || peer >= i64::from(self.options.ranks) {
                    return Err(self.program_error(
                        thread,
                        format!(
                            "remote region of rank {peer} at {}: ranks are 0..{}",
                            self.site_of(rank, site),
                            self.options.ranks
                        ),
                    ));
                }
                let region_index = *self.region_tables.get(&(rank, table)).ok_or_else(|| {
                    self.program_error(
                        thread,
                        format!(
                            "`ab.remote` at {} was given {}, which is not a region table",
                            self.site_of(rank, site),
                            self.memory.describe_address(rank, table)
                        ),
                    )
                })?;
                let descriptor = self.region_descriptor(thread, table, peer as u64)?;
                self.set(
                    thread,
                    *result,
                    Value::Remote(RemoteValue {
                        peer: peer as u32,
                        base_address: descriptor.base_address,
                        length_bytes: descriptor.length_bytes,
                        rkey: descriptor.rkey,
                        region_index,
                        element_bytes: *element_bytes,
                    }),
                );
            }
            InstructionKind::At {
                result,
                remote,
                index,
            } => {
                let Value::Remote(region) = self.threads[thread].registers[*remote] else {
                    return Err(
                        self.program_error(thread, "`ab.at` of a non-remote value".to_owned())
                    );
                };
                let index = self.integer(thread, *index)?;
                let offset_bytes = (index as u64).wrapping_mul(region.element_bytes);
                self.set(
                    thread,
                    *result,
                    Value::RemotePointer(RemotePointerValue {
                        peer: region.peer,
                        address: region.base_address.wrapping_add(offset_bytes),
                        rkey: region.rkey,
                        region_index: region.region_index,
                        offset_bytes,
                        region_length_bytes: region.length_bytes,
                    }),
                );
            }
            InstructionKind::Reserve {
                result,
                endpoint,
                slots,
                atomic,
            } => return self.reserve(thread, site, *result, *endpoint, *slots, *atomic),
            InstructionKind::Put {
                endpoint,
                slot,
                destination,
                source,
                bytes,
                key,
                predicate,
                completion,
                inline,
                immediate,
                periodic_completion,
            } => {
                let (peer, handle) = self.endpoint(thread, *endpoint)?;
                let slot = self.integer(thread, *slot)? as u64;
                let destination = self.remote_pointer(thread, *destination)?;
                let immediate = match immediate {
                    Some((value, flag)) => {
                        Some(self.immediate_signal(thread, site, peer, *value, *flag)?)
                    }
                    None => None,
                };
                self.check_same_peer(thread, site, peer, destination.peer)?;
                let source = self.integer(thread, *source)? as u64;
                let length_bytes = self.integer(thread, *bytes)?;
                let key = self.integer(thread, *key)? as u32;
                let predicate = self.integer(thread, *predicate)? != 0;
                let completion = self.integer(thread, *completion)? != 0;
                if length_bytes < 0 {
                    return Err(self.program_error(
                        thread,
                        format!(
                            "put of {length_bytes} bytes at {}",
                            self.site_of(rank, site)
                        ),
                    ));
                }
                let length_bytes = length_bytes as u64;
                if predicate {
                    self.check_in_user_region(thread, site, "reads", source, length_bytes)?;
                }
                let expected = if predicate {
                    self.load(thread, rank, source, length_bytes)?
                } else {
                    Vec::new()
                };
                let visible_at_post = if predicate {
                    self.memory
                        .read(rank, source, length_bytes)
                        .map_err(|e| self.program_error(thread, format!("put source: {e}")))?
                } else {
                    Vec::new()
                };
                let record = Rc::new(PutRecord {
                    rank,
                    program: self.threads[thread].program,
                    site,
                    destination_rank: peer,
                    destination_address: destination.address,
                    expected: expected.clone(),
                    visible_at_post,
                });
                if predicate {
                    self.threads[thread]
                        .unsignaled_puts
                        .entry(peer)
                        .or_default()
                        .push(record.clone());
                    self.counts.payload_bytes += length_bytes;
                    if *inline {
                        self.counts.inline_bytes += length_bytes;
                    }
                }
                self.counts.wqes += 1;
                self.counts.completions_requested += u64::from(completion);
                let posted = match (predicate, &immediate) {
                    (true, Some((value, flag_address))) => {
                        // The signal guards this put and the earlier ones on the endpoint.
                        let decoded = ImmediateSignal::decode(*value);
                        let operation = if decoded.add {
                            SignalOperation::Add
                        } else {
                            SignalOperation::Set
                        };
                        let signal = self.take_signal_record(
                            thread,
                            peer,
                            site,
                            *flag_address,
                            (operation, i64::from(decoded.value)),
                        );
                        PostedCommand::PutWithImmediate(record, signal)
                    }
                    (true, None) => PostedCommand::Put(record),
                    (false, _) => PostedCommand::Other,
                };
                let immediate = immediate.map(|(value, _)| value);
                match self.kernel.target {
                    Transport::Mlx5 => {
                        let common = WqeCommon {
                            wqe_index: slot as u16,
                            qpn: handle.qpn,
                            fm_ce_se: if completion { WQE_CTRL_CQ_UPDATE } else { 0 },
                        };
                        let remote = RemoteAddress {
                            address: destination.address,
                            rkey: destination.rkey,
                        };
                        let wqe = if !predicate {
                            let blocks = if *inline {
                                inline_write_basic_blocks(length_bytes as i64) as usize
                            } else {
                                1
                            };
                            nop_spanning_basic_blocks(&common, blocks)
                        } else if *inline {
                            match immediate {
                                Some(value) => {
                                    rdma_write_imm_inline(&common, remote, &expected, value)
                                }
                                None => rdma_write_inline(&common, remote, &expected),
                            }
                            .map_err(|e| {
                                self.program_error(
                                    thread,
                                    format!("inline put at {}: {e}", self.site_of(rank, site)),
                                )
                            })?
                        } else if let Some(value) = immediate {
                            rdma_write_imm(
                                &common,
                                remote,
                                LocalBuffer {
                                    address: source,
                                    lkey: key,
                                    length_bytes: length_bytes as u32,
                                },
                                value,
                            )
                        } else {
                            rdma_write(
                                &common,
                                remote,
                                LocalBuffer {
                                    address: source,
                                    lkey: key,
                                    length_bytes: length_bytes as u32,
                                },
                            )
                        };
                        self.write_wqe(
                            thread,
                            peer,
                            &handle,
                            slot,
                            wqe.basic_blocks(),
                            completion,
                            *periodic_completion,
                            posted,
                        )?;
                    }
                    Transport::Proxy => {
                        let operation = if predicate {
                            if destination.offset_bytes + length_bytes
                                > destination.region_length_bytes
                            {
                                // The proxy would reject it; say so at the source line.
                                return Err(self.program_error(
                                    thread,
                                    format!(
                                        "put at {} writes past the end of its region ({} + {length_bytes} > {} bytes)",
                                        self.site_of(rank, site),
                                        destination.offset_bytes,
                                        destination.region_length_bytes
                                    ),
                                ));
                            }
                            ProxyOperation::Put(ProxyPut {
                                source_address: source,
                                source_key: key,
                                destination_region_index: destination.region_index,
                                destination_offset_bytes: destination.offset_bytes,
                                length_bytes,
                            })
                        } else {
                            ProxyOperation::Nop
                        };
                        self.write_ring_entry(
                            thread, peer, &handle, slot, completion, operation, posted,
                        )?;
                    }
                    _ => unreachable!("p2p kernels have no queue commands"),
                }
                return Ok(Step::Effect);
            }
            InstructionKind::SignalCommand {
                endpoint,
                slot,
                flag,
                value,
                completion,
                operation,
                fenced,
                periodic_completion,
            } => {
                let (peer, handle) = self.endpoint(thread, *endpoint)?;
                let slot = self.integer(thread, *slot)? as u64;
                let flag = self.remote_pointer(thread, *flag)?;
                self.check_same_peer(thread, site, peer, flag.peer)?;
                let value = self.integer(thread, *value)? as u64;
                let completion = self.integer(thread, *completion)? != 0;
                let record = self.take_signal_record(
                    thread,
                    peer,
                    site,
                    flag.address,
                    (*operation, value as i64),
                );
                self.counts.wqes += 1;
                self.counts.completions_requested += u64::from(completion);
                match self.kernel.target {
                    Transport::Mlx5 => {
                        let mut fm_ce_se = if completion { WQE_CTRL_CQ_UPDATE } else { 0 };
                        if *fenced {
                            fm_ce_se |= FENCE_MODE_INITIATOR_SMALL;
                        }
                        let common = WqeCommon {
                            wqe_index: slot as u16,
                            qpn: handle.qpn,
                            fm_ce_se,
                        };
                        let remote = RemoteAddress {
                            address: flag.address,
                            rkey: flag.rkey,
                        };
                        let result = LocalBuffer {
                            address: handle.atomic_result_address,
                            lkey: handle.atomic_result_lkey,
                            length_bytes: 8,
                        };
                        let wqe = match operation {
                            SignalOperation::Add => {
                                atomic_fetch_add(&common, remote, value, result)
                            }
                            SignalOperation::Set => masked_compare_swap_64(
                                &common,
                                remote,
                                MaskedCompareSwap64 {
                                    swap: value,
                                    compare: 0,
                                    swap_mask: u64::MAX,
                                    compare_mask: 0,
                                },
                                result,
                            ),
                        };
                        self.write_wqe(
                            thread,
                            peer,
                            &handle,
                            slot,
                            wqe.basic_blocks(),
                            completion,
                            *periodic_completion,
                            PostedCommand::Signal(record),
                        )?;
                    }
                    Transport::Proxy => {
                        let operation = ProxyOperation::Signal(ProxySignal {
                            region_index: flag.region_index,
                            offset_bytes: flag.offset_bytes as u32,
                            value,
                            operation: match operation {
                                SignalOperation::Add => ProxySignalOperation::Add,
                                SignalOperation::Set => ProxySignalOperation::Set,
                            },
                        });
                        self.write_ring_entry(
                            thread,
                            peer,
                            &handle,
                            slot,
                            completion,
                            operation,
                            PostedCommand::Signal(record),
                        )?;
                    }
                    _ => unreachable!("p2p kernels have no queue commands"),
                }
                return Ok(Step::Effect);
            }
            InstructionKind::Publish {
                endpoint,
                base,
                count,
                owner_only,
            } => {
                let (_, handle) = self.endpoint(thread, *endpoint)?;
                let base = self.integer(thread, *base)? as u64;
                let count = self.integer(thread, *count)? as u64;
                let address = self.ready_counter_address(&handle);
                if *owner_only {
                    self.store(
                        thread,
                        rank,
                        address,
                        &(base + count).to_le_bytes(),
                        StoreOrder::Relaxed,
                    )?;
                    self.advance_clock(thread, cost.gpu_global_store_nanoseconds);
                    return Ok(Step::Effect);
                }
                if self.memory.read_u64(rank, address).unwrap_or(u64::MAX) != base {
                    return Ok(Step::Blocked(Block::Publication {
                        address,
                        base,
                        site,
                    }));
                }
                self.atomic_update(thread, rank, address, |_| base + count)?;
                self.counts.atomics += 1;
                self.advance_clock(thread, cost.gpu_scope_atomic_nanoseconds);
                return Ok(Step::Effect);
            }
            InstructionKind::Lock { endpoint } => {
                let (_, handle) = self.endpoint(thread, *endpoint)?;
                let address =
                    handle.management_address + management_offset(MANAGEMENT_POST_SEND_LOCK);
                if self.memory.read_u64(rank, address).unwrap_or(1) != 0 {
                    return Ok(Step::Blocked(Block::Lock { address, site }));
                }
                self.atomic_update(thread, rank, address, |_| 1)?;
                self.counts.atomics += 1;
                self.advance_clock(thread, cost.gpu_scope_atomic_nanoseconds);
                return Ok(Step::Effect);
            }
            InstructionKind::Unlock { endpoint } => {
                let (_, handle) = self.endpoint(thread, *endpoint)?;
                let address =
                    handle.management_address + management_offset(MANAGEMENT_POST_SEND_LOCK);
                self.store(
                    thread,
                    rank,
                    address,
                    &0u64.to_le_bytes(),
                    StoreOrder::Release,
                )?;
                self.advance_clock(thread, cost.gpu_global_store_nanoseconds);
                return Ok(Step::Effect);
            }
            InstructionKind::DoorbellRecord {
                endpoint,
                end,
                atomic_max,
                order,
            } => {
                let (_, handle) = self.endpoint(thread, *endpoint)?;
                let mut end = self.integer(thread, *end)? as u64;
                if *atomic_max {
                    let address =
                        handle.management_address + management_offset(MANAGEMENT_PRODUCER_INDEX);
                    end = end.max(self.atomic_update(thread, rank, address, |old| old.max(end))?);
                    self.counts.atomics += 1;
                    self.advance_clock(thread, cost.gpu_scope_atomic_nanoseconds);
                }
                let word = DoorbellRecord::send_counter_value(end as u32);
                self.store(
                    thread,
                    rank,
                    handle.doorbell_record_address + 4,
                    &word.0,
                    *order,
                )?;
                self.counts.doorbell_record_updates += 1;
                self.advance_clock(thread, store_cost(&cost, *order));
                return Ok(Step::Effect);
            }
            InstructionKind::Doorbell {
                endpoint,
                end,
                atomic_max,
                order,
            } => {
                let (peer, handle) = self.endpoint(thread, *endpoint)?;
                let end = self.integer(thread, *end)? as u64;
                self.counts.doorbells += 1;
                match self.kernel.target {
                    Transport::Mlx5 => {
                        let doorbell = UarDoorbell::next_producer_index(end as u16, handle.qpn);
                        self.nic
                            .ring_doorbell(rank, doorbell.to_bytes())
                            .map_err(|e| SimulationError::Nic(e.to_string()))?;
                        self.advance_clock(thread, cost.pcie_mmio_doorbell_write_nanoseconds);
                        let time = self.threads[thread].clock_nanoseconds;
                        self.doorbell_times
                            .insert((rank, u64::from(handle.qpn)), time);
                    }
                    Transport::Proxy => {
                        let address =
                            handle.proxy_ring_address + ProxyRingHeader::PRODUCER_HEAD_OFFSET_BYTES;
                        if *atomic_max {
                            // One `atom.release.sys.max`: a separate store of the maximum could
                            // land after another producer's larger head and move it backwards.
                            if *order == StoreOrder::Release {
                                self.flush(thread)?;
                            }
                            self.atomic_update(thread, rank, address, |old| old.max(end))?;
                            self.counts.atomics += 1;
                            self.advance_clock(thread, cost.gpu_scope_atomic_nanoseconds);
                        } else {
                            self.store(thread, rank, address, &end.to_le_bytes(), *order)?;
                            self.advance_clock(thread, store_cost(&cost, *order));
                        }
                        let time = self.threads[thread].clock_nanoseconds
                            + cost.gpu_host_one_way_latency_nanoseconds;
                        self.doorbell_times
                            .insert((rank, handle.proxy_ring_address), time);
                    }
                    _ => unreachable!("p2p kernels have no doorbells"),
                }
                let _ = peer;
                return Ok(Step::Effect);
            }
            InstructionKind::WaitCompletion { endpoint, slot } => {
                let (peer, handle) = self.endpoint(thread, *endpoint)?;
                let (slot, end) = match slot {
                    Some((first, end)) => (
                        self.integer(thread, *first)? as u64,
                        self.integer(thread, *end)? as u64,
                    ),
                    None => match self.threads[thread].last_completion_slot.get(&peer) {
                        Some(command) => *command,
                        None => return Ok(Step::Continue),
                    },
                };
                let block = match self.kernel.target {
                    Transport::Mlx5 => Block::Mlx5Completion {
                        qpn: handle.qpn,
                        peer,
                        slot,
                        site,
                    },
                    _ => Block::ProxyCompletion {
                        ring_address: handle.proxy_ring_address,
                        peer,
                        ticket: slot,
                        site,
                    },
                };
                if let Block::Mlx5Completion { qpn, .. } = block
                    && let CqPollResult::Error {
                        syndrome,
                        wqe_counter,
                    } = self
                        .nic
                        .poll_cq_for_index(&self.memory, rank, qpn, slot)
                        .map_err(|e| SimulationError::Nic(e.to_string()))?
                {
                    return Err(SimulationError::Nic(format!(
                        "rank {rank} program {} waiting at {} found an error completion (syndrome {syndrome:#04x}) for the WQE at index {wqe_counter} on its QP to rank {peer}",
                        self.threads[thread].program,
                        self.site_of(rank, site)
                    )));
                }
                if !self.block_released(thread, &block)? {
                    return Ok(Step::Blocked(block));
                }
                let key = match block {
                    Block::Mlx5Completion { qpn, .. } => (rank, u64::from(qpn)),
                    _ => (rank, handle.proxy_ring_address),
                };
                let completed_at = self.write_times.get(&key).copied().unwrap_or(0);
                if self.kernel.target == Transport::Mlx5 {
                    // As the generated code does: the completed command's slots are free again.
                    self.atomic_update(
                        thread,
                        rank,
                        Self::mlx5_consumer_address(&handle),
                        |old| old.max(end),
                    )?;
                }
                let state = &mut self.threads[thread];
                state.clock_nanoseconds = state.clock_nanoseconds.max(completed_at);
                return Ok(Step::Effect);
            }
            InstructionKind::P2pCopy {
                endpoint,
                destination,
                source,
                bytes,
                predicate,
            } => {
                let (peer, _) = self.endpoint(thread, *endpoint)?;
                let destination = self.remote_pointer(thread, *destination)?;
                self.check_same_peer(thread, site, peer, destination.peer)?;
                let source = self.integer(thread, *source)? as u64;
                let length_bytes = self.integer(thread, *bytes)?.max(0) as u64;
                if self.integer(thread, *predicate)? == 0 {
                    return Ok(Step::Continue);
                }
                self.check_inside_region(thread, "copy", site, &destination, length_bytes)?;
                self.check_in_user_region(thread, site, "reads", source, length_bytes)?;
                let payload = self.load_copy_source(thread, site, source, length_bytes)?;
                let chunk = self.options.p2p_store_bytes.max(1) as usize;
                for (index, piece) in payload.chunks(chunk).enumerate() {
                    self.store(
                        thread,
                        peer,
                        destination.address + (index * chunk) as u64,
                        piece,
                        StoreOrder::Relaxed,
                    )?;
                }
                let record = Rc::new(PutRecord {
                    rank,
                    program: self.threads[thread].program,
                    site,
                    destination_rank: peer,
                    destination_address: destination.address,
                    expected: payload,
                    visible_at_post: Vec::new(),
                });
                self.landed_puts.push(record.clone());
                self.threads[thread]
                    .unsignaled_puts
                    .entry(peer)
                    .or_default()
                    .push(record);
                self.counts.payload_bytes += length_bytes;
                self.advance_clock(thread, cost.nvlink_store(length_bytes).0);
                return Ok(Step::Effect);
            }
            InstructionKind::P2pPutPackets {
                endpoint,
                flag,
                destination,
                source,
                bytes,
                value,
            } => {
                return self.put_packets(
                    thread,
                    site,
                    [*endpoint, *flag, *destination, *source, *bytes, *value],
                );
            }
            InstructionKind::P2pSignal {
                endpoint,
                flag,
                value,
                operation,
                order,
            } => {
                let (peer, _) = self.endpoint(thread, *endpoint)?;
                let flag = self.remote_pointer(thread, *flag)?;
                self.check_same_peer(thread, site, peer, flag.peer)?;
                let value = self.integer(thread, *value)?;
                let record =
                    self.take_signal_record(thread, peer, site, flag.address, (*operation, value));
                let latency = cost.nvlink_one_way_latency_nanoseconds;
                match operation {
                    SignalOperation::Set => {
                        self.counts.flag_stores += 1;
                        let program_order =
                            self.store(thread, peer, flag.address, &value.to_le_bytes(), *order)?;
                        match order {
                            StoreOrder::Release => {
                                let time = self.threads[thread].clock_nanoseconds + latency;
                                self.deliver(peer, flag.address, record, time);
                            }
                            StoreOrder::Relaxed => {
                                self.p2p_signal_stores
                                    .insert((thread, program_order), record);
                            }
                        }
                        self.advance_clock(thread, store_cost(&cost, *order));
                    }
                    SignalOperation::Add => {
                        if *order == StoreOrder::Release {
                            self.flush(thread)?;
                        }
                        self.atomic_update(thread, peer, flag.address, |old| {
                            old.wrapping_add(value as u64)
                        })?;
                        self.counts.atomics += 1;
                        self.advance_clock(thread, cost.gpu_scope_atomic_nanoseconds);
                        let time = self.threads[thread].clock_nanoseconds + latency;
                        self.deliver(peer, flag.address, record, time);
                    }
                }
                return Ok(Step::Effect);
            }
            InstructionKind::Fence { scope } => {
                self.flush(thread)?;
                let nanoseconds = match scope {
                    FenceScope::Cta => {
                        self.counts.fences.cta += 1;
                        cost.gpu_global_store_nanoseconds
                    }
                    FenceScope::Gpu => {
                        self.counts.fences.gpu += 1;
                        cost.fence_gpu_nanoseconds
                    }
                    FenceScope::Sys => {
                        self.counts.fences.sys += 1;
                        cost.fence_sys_nanoseconds
                    }
                };
                self.advance_clock(thread, nanoseconds);
                return Ok(Step::Effect);
            }
            InstructionKind::Barrier => {
                self.counts.barriers += 1;
                self.order_other_threads(thread);
                if !self.threads[thread].lanes.is_empty() {
                    if !self.lanes_finished(thread) {
                        return Ok(Step::Blocked(Block::Lanes { site }));
                    }
                    self.join_lanes(thread);
                }
            }
            InstructionKind::WaitFlag {
                flag,
                value,
                acquire: _,
                receives,
            } => {
                let address = self.integer(thread, *flag)? as u64;
                self.check_in_user_region(thread, site, "waits on", address, 8)?;
                let expected = self.integer(thread, *value)?;
                let mut packet_slot = None;
                let receive_context = match receives {
                    Some(WaitReceives::Packets {
                        flag_table,
                        data_table,
                        check_payload_flags,
                        payload_bytes_max,
                    }) => {
                        packet_slot = self
                            .packet_slot_of(thread, address, *flag_table, *data_table)?
                            .map(|slot| PacketSlot {
                                check_payload_flags: *check_payload_flags,
                                payload_bytes_max: *payload_bytes_max,
                                ..slot
                            });
                        if let Some(slot) = packet_slot {
                            self.unpack_packets(thread, site, address, &slot)?;
                        }
                        None
                    }
                    Some(WaitReceives::Immediates(flag_table, endpoint_table)) => {
                        let flag_table = self.integer(thread, *flag_table)? as u64;
                        let endpoint_table = self.integer(thread, *endpoint_table)? as u64;
                        // Every handle of the rank (the first one included) names the context.
                        let context = self
                            .memory
                            .read_u64(rank, endpoint_table + RECEIVE_CONTEXT_FIELD)
                            .map_err(|e| self.program_error(thread, e.to_string()))?;
                        self.immediate_flag_tables
                            .insert(rank, (context, flag_table));
                        self.drain_receive_cq(rank, context, flag_table, Some(thread))?;
                        Some(context)
                    }
                    None => None,
                };
                let seen = self.load_i64(thread, rank, address)?;
                if seen < expected {
                    return Ok(Step::Blocked(Block::Flag {
                        address,
                        expected,
                        site,
                        receive_context,
                        packet_slot,
                    }));
                }
                self.check_delivered_data(thread, address, site, seen, expected)?;
                let written_at = self.write_times.get(&(rank, address)).copied().unwrap_or(0);
                let state = &mut self.threads[thread];
                state.clock_nanoseconds = state.clock_nanoseconds.max(written_at);
                return Ok(Step::Effect);
            }
        }
        Ok(Step::Continue)
    }

    /// Adds `thread` with a store buffer of its own; returns its index.
    fn add_thread(&mut self, thread: Thread) -> usize {
        self.store_buffers
            .push(GpuStoreBuffer::new(thread.rank, thread.program));
        self.threads.push(thread);
        self.threads.len() - 1
    }

    /// Starts a lane of `thread`'s `doorbell_scope` loop: a thread of the same program with a
    /// copy of its registers and its own store buffer, running the iterations from `first`.
    fn spawn_lane(
        &mut self,
        thread: usize,
        induction: Register,
        first: i64,
        upper: i64,
        stride: i64,
        body: &Rc<[Instruction]>,
    ) {
        let parent = &self.threads[thread];
        let mut registers = parent.registers.clone();
        registers[induction] = Value::Integer(first);
        let frame = Frame {
            body: body.clone(),
            pc: 0,
            induction: Some((induction, first, upper, stride)),
        };
        let lane = Thread::new(
            parent.rank,
            parent.program,
            registers,
            vec![frame],
            parent.clock_nanoseconds,
        );
        let index = self.add_thread(lane);
        self.threads[thread].lanes.push(index);
    }

    /// The thread whose buffer holds `thread`'s stores not yet ordered by a barrier (made on
    /// first use; it never runs, only its buffer drains).
    fn other_threads_of(&mut self, thread: usize) -> usize {
        if let Some(other) = self.threads[thread].other_threads {
            return other;
        }
        let parent = &self.threads[thread];
        let mut other = Thread::new(
            parent.rank,
            parent.program,
            Vec::new(),
            Vec::new(),
            parent.clock_nanoseconds,
        );
        other.finished = true;
        let index = self.add_thread(other);
        self.threads[thread].other_threads = Some(index);
        index
    }

    /// A barrier of `thread`'s program: its other threads' stores so far are ordered before
    /// what the program does next (its loads see them, its next release covers them).
    fn order_other_threads(&mut self, thread: usize) {
        if let Some(other) = self.threads[thread].other_threads {
            let (rank, program) = (self.threads[other].rank, self.threads[other].program);
            let buffer = std::mem::replace(
                &mut self.store_buffers[other],
                GpuStoreBuffer::new(rank, program),
            );
            self.store_buffers[thread].absorb(buffer);
        }
    }

    fn lanes_finished(&self, thread: usize) -> bool {
        self.threads[thread]
            .lanes
            .iter()
            .all(|lane| self.threads[*lane].finished)
    }

    /// The barrier after a `doorbell_scope` loop: the lanes' invisible stores now precede the
    /// program's later ones, their unsignaled puts are the program's, and its clock waits for
    /// the slowest lane.
    fn join_lanes(&mut self, thread: usize) {
        for lane in std::mem::take(&mut self.threads[thread].lanes) {
            let (rank, program) = (self.threads[lane].rank, self.threads[lane].program);
            let buffer = std::mem::replace(
                &mut self.store_buffers[lane],
                GpuStoreBuffer::new(rank, program),
            );
            self.store_buffers[thread].absorb(buffer);
            let puts = std::mem::take(&mut self.threads[lane].unsignaled_puts);
            let completions = std::mem::take(&mut self.threads[lane].last_completion_slot);
            let clock = self.threads[lane].clock_nanoseconds;
            let state = &mut self.threads[thread];
            for (peer, records) in puts {
                state
                    .unsignaled_puts
                    .entry(peer)
                    .or_default()
                    .extend(records);
            }
            for (peer, command) in completions {
                let entry = state.last_completion_slot.entry(peer).or_insert(command);
                *entry = (*entry).max(command);
            }
            state.clock_nanoseconds = state.clock_nanoseconds.max(clock);
        }
    }

    /// The immediate of a write with immediate (checked against the flag it names) and the
    /// flag's address on `peer`.
    fn immediate_signal(
        &self,
        thread: usize,
        site: usize,
        peer: u32,
        value: Register,
        flag: Register,
    ) -> Result<(u32, u64), SimulationError> {
        let rank = self.threads[thread].rank;
        let immediate = self.integer(thread, value)?;
        let flag = self.remote_pointer(thread, flag)?;
        let signal = u32::try_from(immediate)
            .ok()
            .map(ImmediateSignal::decode)
            .filter(|signal| {
                u64::from(signal.flag_index) * 8 == flag.offset_bytes && flag.peer == peer
            });
        match signal {
            Some(_) => Ok((immediate as u32, flag.address)),
            None => Err(self.program_error(
                thread,
                format!(
                    "the write with immediate at {} carries {immediate:#x}, which does not name its flag (element {} of its region on rank {}): the flag index must fit {} bits",
                    self.site_of(rank, site),
                    flag.offset_bytes / 8,
                    flag.peer,
                    aboleth_abi::mlx5::receive::IMMEDIATE_INDEX_BITS
                ),
            )),
        }
    }

    /// The number of the next receive CQE of `rank`'s context at `context`, if one is ready.
    fn next_receive_cqe(&self, rank: u32, context: u64) -> Option<u64> {
        let bytes = self
            .memory
            .read(rank, context, Mlx5ReceiveContext::SIZE_BYTES as u64)
            .ok()?;
        let context = Mlx5ReceiveContext::from_bytes(&bytes.try_into().ok()?);
        let number = context.consumer_index;
        let slot = number % u64::from(context.cqe_count);
        let op_own = self
            .memory
            .read(rank, context.cq_buffer_address + slot * 64 + 63, 1)
            .ok()?[0];
        aboleth_abi::mlx5::cqe::cqe_is_software_owned(op_own, number as u32, context.cqe_count)
            .then_some(number)
    }

    /// What a receiving wait does (and the host, at the end): applies every ready receive CQE
    /// of `rank` to its flag in the region of `flag_table` on this rank, posts its receive
    /// again, advances the CQ's consumer index and its doorbell record, and delivers the signal
    /// for the data checks. One step: the generated code does it under the context's lock.
    fn drain_receive_cq(
        &mut self,
        rank: u32,
        context_address: u64,
        flag_table: u64,
        thread: Option<usize>,
    ) -> Result<(), SimulationError> {
        let fail = |message: String| SimulationError::Program(format!("rank {rank}: {message}"));
        let read = |world: &Self, address: u64, length: u64| {
            world
                .memory
                .read(rank, address, length)
                .map_err(|e| fail(e.to_string()))
        };
        while let Some(number) = self.next_receive_cqe(rank, context_address) {
            let context = Mlx5ReceiveContext::from_bytes(
                &read(self, context_address, 64)?
                    .try_into()
                    .expect("64 bytes"),
            );
            let slot = number % u64::from(context.cqe_count);
            let cqe = aboleth_abi::mlx5::cqe::decode_cqe(
                &read(self, context.cq_buffer_address + slot * 64, 64)?
                    .try_into()
                    .expect("64 bytes"),
            )
            .map_err(|e| fail(format!("receive CQE {number}: {e}")))?;
            let aboleth_abi::mlx5::DecodedCqe::ResponderWriteImmediate { qpn, immediate, .. } = cqe
            else {
                return Err(fail(format!(
                    "receive CQE {number} is not a write with immediate: {cqe:?}"
                )));
            };
            let peer_word = read(
                self,
                context.peer_of_qpn_address + u64::from(qpn & context.qpn_mask) * 4,
                4,
            )?;
            let peer = u32::from_le_bytes(peer_word.try_into().expect("4 bytes"));
            let signal = ImmediateSignal::decode(immediate);
            let descriptor = RemoteRegionDescriptor::from_bytes(
                &read(
                    self,
                    flag_table + u64::from(context.local_rank) * REGION_DESCRIPTOR_BYTES,
                    REGION_DESCRIPTOR_BYTES,
                )?
                .try_into()
                .expect("32 bytes"),
            );
            let offset = u64::from(signal.flag_index) * 8;
            if offset + 8 > descriptor.length_bytes {
                return Err(fail(format!(
                    "an immediate from rank {peer} names flag {} beyond its region ({} bytes)",
                    signal.flag_index, descriptor.length_bytes
                )));
            }
            let flag = descriptor.base_address + offset;
            let old = self
                .memory
                .read_u64(rank, flag)
                .map_err(|e| fail(e.to_string()))?;
            let new = if signal.add {
                old.wrapping_add(u64::from(signal.value))
            } else {
                u64::from(signal.value)
            };
            self.memory
                .write_u64(rank, flag, new)
                .map_err(|e| fail(e.to_string()))?;
            let now = thread.map_or(0, |thread| self.threads[thread].clock_nanoseconds);
            if let Some((record, landed_at)) = self.pending_immediates.remove(&(rank, number)) {
                self.deliver(rank, flag, record, now.max(landed_at));
            }
            // Post the receive again: the queue's counter and its doorbell record.
            let queue_address =
                context.queues_address + u64::from(peer) * Mlx5ReceiveQueue::SIZE_BYTES as u64;
            let mut queue = Mlx5ReceiveQueue::from_bytes(
                &read(self, queue_address, Mlx5ReceiveQueue::SIZE_BYTES as u64)?
                    .try_into()
                    .expect("32 bytes"),
            );
            queue.posted += 1;
            let write = |world: &mut Self, address: u64, bytes: &[u8]| {
                world
                    .memory
                    .write(rank, address, bytes)
                    .map_err(|e| fail(e.to_string()))
            };
            write(self, queue_address, &queue.to_bytes())?;
            write(
                self,
                queue.doorbell_record_address,
                &((queue.posted as u32) & 0xffff).to_be_bytes(),
            )?;
            let consumer = number + 1;
            write(
                self,
                context_address + core::mem::offset_of!(Mlx5ReceiveContext, consumer_index) as u64,
                &consumer.to_le_bytes(),
            )?;
            write(
                self,
                context.cq_doorbell_record_address,
                &((consumer as u32) & 0x00ff_ffff).to_be_bytes(),
            )?;
            if let Some(thread) = thread {
                self.advance_clock(
                    thread,
                    self.options.cost_model.gpu_global_store_nanoseconds * 4,
                );
            }
        }
        Ok(())
    }

    // -----------------------------------------------------------------------------------------
    // Flag-in-data packets (`aboleth_abi::packet`)

    /// `p2p.put_packets`: the payload as packets into the flag's slot on the peer, relaxed
    /// stores only; the signal (guarding this put alone) is delivered when a wait unpacks it.
    fn put_packets(
        &mut self,
        thread: usize,
        site: usize,
        [endpoint, flag, destination, source, bytes, value]: [Register; 6],
    ) -> Result<Step, SimulationError> {
        use aboleth_abi::packet::{FLAG_BYTES, encode_slot, slot_offset_bytes};
        let rank = self.threads[thread].rank;
        let (peer, _) = self.endpoint(thread, endpoint)?;
        let flag = self.remote_pointer(thread, flag)?;
        let destination = self.remote_pointer(thread, destination)?;
        self.check_same_peer(thread, site, peer, flag.peer)?;
        self.check_same_peer(thread, site, peer, destination.peer)?;
        let source = self.integer(thread, source)? as u64;
        let length_bytes = self.integer(thread, bytes)?.max(0) as u64;
        let value = self.integer(thread, value)?;
        let at = self.site_of(rank, site);
        self.check_inside_region(thread, "packet put", site, &destination, length_bytes)?;
        if flag.offset_bytes % FLAG_BYTES != 0
            || flag.offset_bytes + FLAG_BYTES > flag.region_length_bytes
        {
            return Err(self.program_error(
                thread,
                format!(
                    "packet signal at {at} names flag byte {} of a {}-byte region: flags are aligned 8-byte words inside it",
                    flag.offset_bytes, flag.region_length_bytes
                ),
            ));
        }
        if !destination.offset_bytes.is_multiple_of(4) || !source.is_multiple_of(4) {
            return Err(self.program_error(
                thread,
                format!(
                    "packet put at {at} copies from {source:#x} to byte {} of its region: packets carry 4-byte words, so both must be 4-byte aligned",
                    destination.offset_bytes
                ),
            ));
        }
        if aboleth_abi::packet::packet_flag(value) == 0 {
            return Err(self.program_error(
                thread,
                format!(
                    "packet signal at {at} sets value {value}, whose low 32 bits are 0: a zeroed slot carries that flag already, so its packets would look landed; packet signals need values whose low 32 bits are not 0"
                ),
            ));
        }
        self.check_in_user_region(thread, site, "reads", source, length_bytes)?;
        let payload = self.load_copy_source(thread, site, source, length_bytes)?;
        let packets = encode_slot(destination.offset_bytes, value, &payload)
            .map_err(|e| self.program_error(thread, format!("packet put at {at}: {e}")))?;
        let region_start = flag.address - flag.offset_bytes;
        let slot_address = region_start
            + slot_offset_bytes(flag.region_length_bytes, flag.offset_bytes / FLAG_BYTES);
        if let Some(earlier) = self.packet_transfers.get(&(peer, slot_address)) {
            return Err(self.program_error(
                thread,
                format!(
                    "packet signal at {at} (value {value}) overwrites flag {}'s slot on rank {peer} before a wait unpacked the transfer sent at {} (value {}): with packet signals a flag carries one transfer at a time; give each transfer its own flag, or wait for the first before sending the second",
                    self.memory.describe_address(peer, flag.address),
                    self.site_of(earlier.signal.rank, earlier.signal.site),
                    earlier.value
                ),
            ));
        }
        // Each 8-byte half is its own store (single-copy atomic); the two halves of a packet may
        // become visible in either order, which is why each carries the flag.
        for (index, packet) in packets.iter().enumerate() {
            let bytes = packet.to_bytes();
            let address = slot_address + (index * aboleth_abi::packet::Packet::SIZE_BYTES) as u64;
            for (half, half_bytes) in bytes.chunks(8).enumerate() {
                self.store(
                    thread,
                    peer,
                    address + 8 * half as u64,
                    half_bytes,
                    StoreOrder::Relaxed,
                )?;
            }
        }
        let put = Rc::new(PutRecord {
            rank,
            program: self.threads[thread].program,
            site,
            destination_rank: peer,
            destination_address: destination.address,
            expected: payload,
            visible_at_post: Vec::new(),
        });
        let signal = Rc::new(SignalRecord {
            rank,
            program: self.threads[thread].program,
            site,
            flag: (peer, flag.address),
            operation: SignalOperation::Set,
            operand: value,
            guarded: vec![put],
        });
        self.packet_transfers
            .insert((peer, slot_address), PacketTransfer { value, signal });
        self.counts.payload_bytes += length_bytes;
        let wire_bytes = (packets.len() * aboleth_abi::packet::Packet::SIZE_BYTES) as u64;
        let cost = self.options.cost_model.nvlink_store(wire_bytes).0;
        self.advance_clock(thread, cost);
        Ok(Step::Effect)
    }

    /// A program error unless `length_bytes` from `destination` stay inside its region.
    fn check_inside_region(
        &self,
        thread: usize,
        what: &str,
        site: usize,
        destination: &RemotePointerValue,
        length_bytes: u64,
    ) -> Result<(), SimulationError> {
        if destination.offset_bytes + length_bytes <= destination.region_length_bytes {
            return Ok(());
        }
        Err(self.program_error(
            thread,
            format!(
                "{what} at {} writes past the end of its region ({} + {length_bytes} > {} bytes)",
                self.site_of(self.threads[thread].rank, site),
                destination.offset_bytes,
                destination.region_length_bytes
            ),
        ))
    }

    /// Entry `index` of the region-descriptor table at `table`, as `thread` sees it.
    fn region_descriptor(
        &self,
        thread: usize,
        table: u64,
        index: u64,
    ) -> Result<RemoteRegionDescriptor, SimulationError> {
        let rank = self.threads[thread].rank;
        let bytes = self.load(
            thread,
            rank,
            table + index * REGION_DESCRIPTOR_BYTES,
            REGION_DESCRIPTOR_BYTES,
        )?;
        Ok(RemoteRegionDescriptor::from_bytes(
            &bytes.try_into().expect("32 bytes"),
        ))
    }

    /// The slot of the flag at local `address` when it lies in this rank's entry of `flag_table`
    /// (else the flag is not one packets can target, and the wait only polls it).
    fn packet_slot_of(
        &self,
        thread: usize,
        address: u64,
        flag_table: Register,
        data_table: Register,
    ) -> Result<Option<PacketSlot>, SimulationError> {
        use aboleth_abi::packet::{FLAG_BYTES, slot_offset_bytes};
        let rank = self.threads[thread].rank;
        let descriptor = |table: Register| -> Result<RemoteRegionDescriptor, SimulationError> {
            let table = self.integer(thread, table)? as u64;
            self.region_descriptor(thread, table, u64::from(rank))
        };
        let flags = descriptor(flag_table)?;
        let data = descriptor(data_table)?;
        let Some(offset) = address.checked_sub(flags.base_address) else {
            return Ok(None);
        };
        if offset % FLAG_BYTES != 0 || offset + FLAG_BYTES > flags.length_bytes {
            return Ok(None);
        }
        if !flags.has_packet_slots() {
            return Err(self.program_error(
                thread,
                "a packet wait's flag region has no packet slots (REGION_FLAG_PACKET_SLOTS)".into(),
            ));
        }
        Ok(Some(PacketSlot {
            slot_address: flags.base_address
                + slot_offset_bytes(flags.length_bytes, offset / FLAG_BYTES),
            data_base_address: data.base_address,
            data_length_bytes: data.length_bytes,
            check_payload_flags: true,
            payload_bytes_max: aboleth_abi::packet::PACKET_PUT_BYTES_LIMIT,
        }))
    }

    /// The header and payload of `slot` when a whole transfer has landed there: both header
    /// packets and every payload packet carry the header's flag.
    fn landed_packets(
        &self,
        thread: usize,
        rank: u32,
        slot: &PacketSlot,
    ) -> Result<Option<(aboleth_abi::packet::SlotHeader, Vec<u8>)>, SimulationError> {
        use aboleth_abi::packet::{HEADER_PACKETS, Packet, decode_header};
        let packet_at = |index: u64| -> Result<Packet, SimulationError> {
            let bytes = self.load(
                thread,
                rank,
                slot.slot_address + index * Packet::SIZE_BYTES as u64,
                Packet::SIZE_BYTES as u64,
            )?;
            Ok(Packet::from_bytes(
                bytes.as_slice().try_into().expect("packet bytes"),
            ))
        };
        let Some(header) = decode_header(&packet_at(0)?, &packet_at(1)?) else {
            return Ok(None);
        };
        // Generated code unrolls the check for the kernel's longest packet put: a longer
        // transfer (another rank's kernel put more) is never unpacked.
        if u64::from(header.payload_bytes) > slot.payload_bytes_max {
            return Ok(None);
        }
        let mut payload = Vec::with_capacity(header.payload_bytes as usize);
        let payload_packets = u64::from(header.payload_bytes) / 8;
        for index in 0..payload_packets {
            let packet = packet_at(HEADER_PACKETS + index)?;
            if slot.check_payload_flags && !packet.carries(header.flag) {
                return Ok(None);
            }
            payload.extend_from_slice(&packet.payload());
        }
        Ok(Some((header, payload)))
    }

    /// Unpacks `slot` when a whole transfer has landed: its payload goes to the data region at
    /// the header's offset, the flag at `flag_address` is set to its value, the slot is marked
    /// consumed, and its signal is delivered (so the wait checks the data is there).
    fn unpack_packets(
        &mut self,
        thread: usize,
        site: usize,
        flag_address: u64,
        slot: &PacketSlot,
    ) -> Result<(), SimulationError> {
        use aboleth_abi::packet::CONSUMED_HEADER;
        let rank = self.threads[thread].rank;
        let Some((header, payload)) = self.landed_packets(thread, rank, slot)? else {
            return Ok(());
        };
        let offset = u64::from(header.destination_offset_bytes);
        if offset + payload.len() as u64 > slot.data_length_bytes {
            return Err(self.program_error(
                thread,
                format!(
                    "the wait at {} found a packet transfer for bytes {offset}..{} of a {}-byte data region",
                    self.site_of(rank, site),
                    offset + payload.len() as u64,
                    slot.data_length_bytes
                ),
            ));
        }
        // As the generated code does: thread 0 stores the payload, marks the slot consumed, then
        // releases the flag (ordering both before it for every acquire poll).
        self.store(
            thread,
            rank,
            slot.data_base_address + offset,
            &payload,
            StoreOrder::Relaxed,
        )?;
        self.store(
            thread,
            rank,
            slot.slot_address,
            &CONSUMED_HEADER.to_bytes(),
            StoreOrder::Relaxed,
        )?;
        self.store(
            thread,
            rank,
            flag_address,
            &header.value.to_le_bytes(),
            StoreOrder::Release,
        )?;
        if let Some(transfer) = self.packet_transfers.remove(&(rank, slot.slot_address)) {
            self.landed_puts
                .extend(transfer.signal.guarded.iter().cloned());
            let time = self.threads[thread].clock_nanoseconds;
            self.deliver(rank, flag_address, transfer.signal, time);
        }
        // As the generated code does it: the header, then the payload packets checked in groups
        // of 16 loads issued together, then (past one group) loaded again to copy.
        let cost = &self.options.cost_model;
        let packets = payload.len() as u64 / 8;
        let groups = packets.div_ceil(16);
        let load_rounds = 1 + groups + if groups > 1 { groups } else { 0 };
        let nanoseconds = cost.gpu_system_load_nanoseconds * load_rounds
            + cost.gpu_global_store_nanoseconds * (2 + 2 * packets);
        self.advance_clock(thread, nanoseconds);
        Ok(())
    }

    /// After the last launch: the host applies what is left in every receive CQ.
    fn drain_every_receive_cq(&mut self) -> Result<(), SimulationError> {
        let tables: Vec<(u32, (u64, u64))> = self
            .immediate_flag_tables
            .iter()
            .map(|(rank, tables)| (*rank, *tables))
            .collect();
        for (rank, (context, flag_table)) in tables {
            self.drain_receive_cq(rank, context, flag_table, None)?;
        }
        Ok(())
    }

    fn take_signal_record(
        &mut self,
        thread: usize,
        peer: u32,
        site: usize,
        flag_address: u64,
        (operation, operand): (SignalOperation, i64),
    ) -> Rc<SignalRecord> {
        let state = &mut self.threads[thread];
        Rc::new(SignalRecord {
            rank: state.rank,
            program: state.program,
            site,
            flag: (peer, flag_address),
            operation,
            operand,
            guarded: state.unsignaled_puts.remove(&peer).unwrap_or_default(),
        })
    }

    fn check_same_peer(
        &self,
        thread: usize,
        site: usize,
        endpoint_peer: u32,
        target_peer: u32,
    ) -> Result<(), SimulationError> {
        if endpoint_peer == target_peer {
            return Ok(());
        }
        Err(self.program_error(
            thread,
            format!(
                "the command at {} goes through the endpoint to rank {endpoint_peer} but targets memory of rank {target_peer}: use the endpoint of the rank whose region it writes",
                self.site_of(self.threads[thread].rank, site)
            ),
        ))
    }

    /// The management word where the generated code keeps the first send-ring block not yet
    /// known to be free.
    fn mlx5_consumer_address(handle: &EndpointHandle) -> u64 {
        handle.management_address + management_offset(MANAGEMENT_CONSUMER_INDEX)
    }

    /// What the generated reservation does when the ring looks full: it polls the queue's
    /// collapsed CQ and, if the CQE there reports a WQE at or past the consumer index, frees
    /// through that WQE's first block (RC completions are cumulative; its size is not in the
    /// CQE). Returns the consumer index. Periodic completions
    /// ([`aboleth_abi::mlx5::periodic_completion`]) guarantee such a CQE comes.
    fn reclaim_mlx5_ring(
        &mut self,
        thread: usize,
        rank: u32,
        peer: u32,
        handle: &EndpointHandle,
    ) -> Result<u64, SimulationError> {
        let consumer_address = Self::mlx5_consumer_address(handle);
        let consumer = self
            .memory
            .read_u64(rank, consumer_address)
            .map_err(|e| SimulationError::Nic(e.to_string()))?;
        let cqe = self
            .memory
            .read(rank, handle.cq_buffer_address + 60, 4)
            .map_err(|e| SimulationError::Nic(e.to_string()))?;
        let opcode = cqe[3] >> 4;
        if opcode == aboleth_abi::mlx5::cqe::CQE_OPCODE_REQ_ERR
            || opcode == aboleth_abi::mlx5::cqe::CQE_OPCODE_RESP_ERR
        {
            return Err(SimulationError::Nic(format!(
                "rank {rank} program {}: its QP to rank {peer} holds an error completion (the reservation's ring reclamation found it)",
                self.threads[thread].program
            )));
        }
        if opcode == aboleth_abi::mlx5::cqe::CQE_OPCODE_INVALID {
            return Ok(consumer);
        }
        let counter = u16::from_be_bytes([cqe[0], cqe[1]]);
        let ahead = counter.wrapping_sub(consumer as u16);
        if ahead >= 0x8000 {
            return Ok(consumer);
        }
        let freed = consumer + u64::from(ahead) + 1;
        self.atomic_update(thread, rank, consumer_address, |old| old.max(freed))?;
        Ok(freed.max(consumer))
    }

    fn ready_counter_address(&self, handle: &EndpointHandle) -> u64 {
        match self.kernel.target {
            Transport::Mlx5 => handle.management_address + management_offset(MANAGEMENT_READY_HEAD),
            _ => handle.proxy_ring_address + ProxyRingHeader::PRODUCER_READY_COUNTER_OFFSET_BYTES,
        }
    }

    fn reserve(
        &mut self,
        thread: usize,
        site: usize,
        result: Register,
        endpoint: Register,
        slots: Register,
        atomic: bool,
    ) -> Result<Step, SimulationError> {
        // Generated code starts every reservation with a barrier of the program's threads (the
        // commands and their sources follow the other threads' stores: emit.rs `reserve_slots`).
        self.order_other_threads(thread);
        let rank = self.threads[thread].rank;
        let (peer, handle) = self.endpoint(thread, endpoint)?;
        let slots = self.integer(thread, slots)? as u64;
        let (counter, capacity, consumed) = match self.kernel.target {
            // What the generated code knows: the consumer index its completion waits advanced
            // (see `reclaim_mlx5_ring` for when that is not enough).
            Transport::Mlx5 => (
                handle.management_address + management_offset(MANAGEMENT_RESERVED_HEAD),
                u64::from(handle.sq_wqe_basic_block_count),
                self.memory
                    .read_u64(rank, Self::mlx5_consumer_address(&handle))
                    .map_err(|e| SimulationError::Nic(e.to_string()))?,
            ),
            _ => (
                handle.proxy_ring_address
                    + ProxyRingHeader::PRODUCER_RESERVATION_COUNTER_OFFSET_BYTES,
                u64::from(handle.proxy_ring_capacity_entries),
                self.memory
                    .read_u64(
                        rank,
                        handle.proxy_ring_address + ProxyRingHeader::CONSUMER_HEAD_OFFSET_BYTES,
                    )
                    .map_err(|e| SimulationError::Proxy(e.to_string()))?,
            ),
        };
        if slots > capacity {
            return Err(self.program_error(
                thread,
                format!(
                    "reservation of {slots} slots at {} exceeds the queue to rank {peer} ({capacity} slots): raise the ring size",
                    self.site_of(rank, site)
                ),
            ));
        }
        let (consumer_address, cq_counter_address) = match self.kernel.target {
            Transport::Mlx5 => (
                Self::mlx5_consumer_address(&handle),
                Some(handle.cq_buffer_address + 60),
            ),
            _ => (
                handle.proxy_ring_address + ProxyRingHeader::CONSUMER_HEAD_OFFSET_BYTES,
                None,
            ),
        };
        let space_block = |end: u64| Block::Space {
            peer,
            site,
            consumer_address,
            needed: end.saturating_sub(capacity),
            cq_counter_address,
        };
        let cost = self.options.cost_model.clone();
        let head_now = if atomic {
            self.memory.read_u64(rank, counter).unwrap_or(0)
        } else {
            self.threads[thread].reservation_loaded.map_or_else(
                || self.load_i64(thread, rank, counter).map(|v| v as u64),
                Ok,
            )?
        };
        let consumed =
            if self.kernel.target == Transport::Mlx5 && head_now + slots > consumed + capacity {
                self.reclaim_mlx5_ring(thread, rank, peer, &handle)?
            } else {
                consumed
            };
        if atomic {
            let head = head_now;
            if head + slots > consumed + capacity {
                return Ok(Step::Blocked(space_block(head + slots)));
            }
            let base = self.atomic_update(thread, rank, counter, |old| old + slots)?;
            self.set(thread, result, Value::Integer(base as i64));
            self.counts.reservations += 1;
            self.counts.atomics += 1;
            self.advance_clock(thread, cost.gpu_scope_atomic_nanoseconds);
            return Ok(Step::Effect);
        }
        // One owner: a plain load and a plain store, two steps apart, so that two programs
        // wrongly believed to own one queue can interleave and collide.
        match self.threads[thread].reservation_loaded.take() {
            None => {
                let head = self.load_i64(thread, rank, counter)? as u64;
                if head + slots > consumed + capacity {
                    return Ok(Step::Blocked(space_block(head + slots)));
                }
                self.threads[thread].reservation_loaded = Some(head);
                // Run this instruction again for the store.
                self.threads[thread]
                    .frames
                    .last_mut()
                    .expect("executing in a frame")
                    .pc -= 1;
                self.advance_clock(thread, cost.gpu_global_store_nanoseconds);
                Ok(Step::Effect)
            }
            Some(base) => {
                self.store(
                    thread,
                    rank,
                    counter,
                    &(base + slots).to_le_bytes(),
                    StoreOrder::Relaxed,
                )?;
                self.set(thread, result, Value::Integer(base as i64));
                self.counts.reservations += 1;
                self.advance_clock(thread, cost.gpu_global_store_nanoseconds);
                Ok(Step::Effect)
            }
        }
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "one WQE's placement and its bookkeeping"
    )]
    fn write_wqe(
        &mut self,
        thread: usize,
        peer: u32,
        handle: &EndpointHandle,
        slot: u64,
        basic_blocks: &[[u8; 64]],
        completion: bool,
        periodic_completion: bool,
        posted: PostedCommand,
    ) -> Result<(), SimulationError> {
        let rank = self.threads[thread].rank;
        let ring = u64::from(handle.sq_wqe_basic_block_count);
        let blocks = basic_blocks.len() as u64;
        // The generated code asks for a CQE on WQEs at ring-quarter boundaries too, so that a
        // full ring can always be reclaimed.
        let mut basic_blocks = basic_blocks.to_vec();
        let completion = if !completion
            && periodic_completion
            && aboleth_abi::mlx5::periodic_completion(slot, blocks, ring)
        {
            basic_blocks[0][11] |= WQE_CTRL_CQ_UPDATE;
            self.counts.completions_requested += 1;
            true
        } else {
            completion
        };
        for (offset, block) in basic_blocks.iter().enumerate() {
            let index = (slot + offset as u64) % ring;
            self.store(
                thread,
                rank,
                handle.sq_buffer_address + index * 64,
                block,
                StoreOrder::Relaxed,
            )?;
        }
        self.advance_clock(
            thread,
            self.options.cost_model.gpu_global_store_nanoseconds * basic_blocks.len() as u64,
        );
        self.post(
            thread,
            CommandKey::Mlx5 {
                rank,
                qpn: handle.qpn,
                slot,
            },
            peer,
            completion.then_some(slot + blocks),
            posted,
        )?;
        Ok(())
    }

    /// Records a posted command (with the slot after it when it requests a completion); a slot still holding an unexecuted command means two programs
    /// took the same slots (a queue posted as if it had one owner when it has several).
    fn post(
        &mut self,
        thread: usize,
        key: CommandKey,
        peer: u32,
        completion_end: Option<u64>,
        posted: PostedCommand,
    ) -> Result<(), SimulationError> {
        if let Some(end) = completion_end {
            // What a drain of this queue waits for, and frees.
            let first = match key {
                CommandKey::Mlx5 { slot, .. } => slot,
                CommandKey::Proxy { ticket, .. } => ticket,
            };
            self.threads[thread]
                .last_completion_slot
                .insert(peer, (first, end));
        }
        if self.posted.contains_key(&key) {
            let (rank, slot) = match key {
                CommandKey::Mlx5 { rank, slot, .. }
                | CommandKey::Proxy {
                    rank, ticket: slot, ..
                } => (rank, slot),
            };
            return Err(SimulationError::SlotCollision(format!(
                "rank {rank} program {} wrote slot {slot} of its queue to rank {peer} while an earlier command there had not executed yet: two programs reserved the same slots (is the queue really owned by one program?)",
                self.threads[thread].program
            )));
        }
        self.posted.insert(key, posted);
        Ok(())
    }

    #[allow(clippy::too_many_arguments, reason = "one ring entry's fields")]
    fn write_ring_entry(
        &mut self,
        thread: usize,
        peer: u32,
        handle: &EndpointHandle,
        ticket: u64,
        completion: bool,
        operation: ProxyOperation,
        posted: PostedCommand,
    ) -> Result<(), SimulationError> {
        let rank = self.threads[thread].rank;
        let entry = ProxyCommand {
            ticket,
            peer_rank: peer,
            completion_requested: completion,
            operation,
        }
        .encode();
        let bytes = entry.to_bytes();
        let address = handle.proxy_ring_address
            + ProxyRingHeader::ENTRIES_OFFSET_BYTES as u64
            + aboleth_abi::proxy::slot_index(ticket, handle.proxy_ring_capacity_entries) as u64
                * ProxyRingEntry::SIZE_BYTES as u64;
        // The fields, then the sequence word last (both plain: the doorbell's release orders them).
        self.store(thread, rank, address + 8, &bytes[8..], StoreOrder::Relaxed)?;
        self.store(thread, rank, address, &bytes[..8], StoreOrder::Relaxed)?;
        self.advance_clock(
            thread,
            2 * self.options.cost_model.gpu_global_store_nanoseconds,
        );
        self.post(
            thread,
            CommandKey::Proxy { rank, peer, ticket },
            peer,
            completion.then_some(ticket + 1),
            posted,
        )?;
        Ok(())
    }

    // -----------------------------------------------------------------------------------------
    // NIC and proxy

    fn step_nic(&mut self) -> Result<(), SimulationError> {
        let Some(event) = self
            .nic
            .step(&mut self.memory, &mut self.rng)
            .map_err(|e| SimulationError::Nic(e.to_string()))?
        else {
            return Ok(());
        };
        let rank = event.rank;
        let rung_at = self
            .doorbell_times
            .get(&(rank, u64::from(event.qpn)))
            .copied()
            .unwrap_or(0);
        let clock = &mut self.nic_clocks[rank as usize];
        *clock = (*clock).max(rung_at) + event.cost.0;
        let now = *clock;
        let Some(execution) = event.wqe else {
            return Ok(());
        };
        let key = CommandKey::Mlx5 {
            rank,
            qpn: event.qpn,
            slot: execution.basic_block_index,
        };
        let posted = self.posted.remove(&key);
        match execution.outcome {
            WqeOutcome::Failed { syndrome, reason } => {
                let site = match &posted {
                    Some(PostedCommand::Put(put)) => {
                        format!(" (the put at {})", self.site_of(put.rank, put.site))
                    }
                    Some(PostedCommand::Signal(signal)) => {
                        format!(
                            " (the signal at {})",
                            self.site_of(signal.rank, signal.site)
                        )
                    }
                    _ => String::new(),
                };
                return Err(SimulationError::Nic(format!(
                    "rank {rank}'s QP to rank {}: the WQE at slot {}{site} failed with syndrome {syndrome:#04x}: {reason}",
                    event.peer_rank, execution.basic_block_index
                )));
            }
            WqeOutcome::Completed { .. } => {}
        }
        if execution.cqe_slot.is_some() {
            self.write_times.insert((rank, u64::from(event.qpn)), now);
        }
        if let Some(PostedCommand::PutWithImmediate(_, signal)) = &posted {
            // Its signal reaches the flag when a wait of the receiver applies the CQE.
            let responder = event.responder_completion.ok_or_else(|| {
                SimulationError::Nic(format!(
                    "rank {rank}'s write with immediate at slot {} left no receive CQE",
                    execution.basic_block_index
                ))
            })?;
            self.pending_immediates
                .insert(responder, (signal.clone(), now));
        }
        self.on_command_executed(posted, now)
    }

    fn step_proxy(&mut self, index: usize) -> Result<(), SimulationError> {
        let Some(event) = self.proxies[index]
            .step(&mut self.memory, &mut self.rng)
            .map_err(|e| SimulationError::Proxy(e.to_string()))?
        else {
            return Ok(());
        };
        let rank = event.rank;
        let ring_address = self.endpoint_handles_ring(rank, event.peer_rank);
        let rung_at = self
            .doorbell_times
            .get(&(rank, ring_address))
            .copied()
            .unwrap_or(0);
        let clock = &mut self.proxy_clocks[rank as usize];
        *clock = (*clock).max(rung_at) + event.cost.0;
        let now = *clock;
        if event.completion_counter.is_some() {
            self.write_times.insert(
                (rank, ring_address),
                now + self.options.cost_model.gpu_host_one_way_latency_nanoseconds,
            );
        }
        let posted = self.posted.remove(&CommandKey::Proxy {
            rank,
            peer: event.peer_rank,
            ticket: event.command.ticket,
        });
        self.on_command_executed(posted, now)
    }

    fn endpoint_handles_ring(&self, rank: u32, peer: u32) -> u64 {
        let address = self.endpoint_tables[rank as usize] + u64::from(peer) * ENDPOINT_HANDLE_BYTES;
        self.memory
            .read(rank, address, ENDPOINT_HANDLE_BYTES)
            .map(|bytes| {
                EndpointHandle::from_bytes(&bytes.try_into().expect("128 bytes")).proxy_ring_address
            })
            .unwrap_or(0)
    }

    /// A NIC or proxy executed a command: check a put's bytes, deliver a signal.
    fn on_command_executed(
        &mut self,
        posted: Option<PostedCommand>,
        now: u64,
    ) -> Result<(), SimulationError> {
        match posted {
            Some(PostedCommand::Put(put) | PostedCommand::PutWithImmediate(put, _)) => {
                let landed = self
                    .memory
                    .read(
                        put.destination_rank,
                        put.destination_address,
                        put.expected.len() as u64,
                    )
                    .map_err(|e| SimulationError::Program(e.to_string()))?;
                if let Some(offset) = first_difference(&landed, &put.expected) {
                    // Older bytes than posted: the program's stores had not reached memory;
                    // anything else: something wrote the source after the put was posted.
                    let still_buffered = landed == put.visible_at_post;
                    let why = if still_buffered {
                        "the stores that wrote the source were not yet visible to the NIC or proxy (a missing fence before submission)"
                    } else {
                        "the source was overwritten before the transfer read it (a reuse without waiting for the put's completion)"
                    };
                    return Err(SimulationError::SourceChanged(format!(
                        "the put at {} from rank {} program {} delivered {:#04x} at byte {offset} of {} on rank {} where the source held {:#04x} when it was posted: {why}",
                        self.site_of(put.rank, put.site),
                        put.rank,
                        put.program,
                        landed[offset],
                        self.memory
                            .describe_address(put.destination_rank, put.destination_address),
                        put.destination_rank,
                        put.expected[offset],
                    )));
                }
                self.landed_puts.push(put);
            }
            Some(PostedCommand::Signal(signal)) => {
                let (rank, address) = signal.flag;
                self.deliver(rank, address, signal, now);
            }
            Some(PostedCommand::Other) | None => {}
        }
        Ok(())
    }
}

fn store_cost(cost: &CostModel, order: StoreOrder) -> u64 {
    match order {
        StoreOrder::Relaxed => cost.gpu_global_store_nanoseconds,
        // A release orders the earlier stores first: charged as an acq_rel fence plus the store.
        StoreOrder::Release => cost.fence_gpu_nanoseconds + cost.gpu_global_store_nanoseconds,
    }
}

fn first_difference(landed: &[u8], expected: &[u8]) -> Option<usize> {
    landed
        .iter()
        .zip(expected)
        .position(|(landed, expected)| landed != expected)
}
