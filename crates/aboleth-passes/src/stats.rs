//! Static counts of what a lowered kernel does, per program instance (`--emit stats`).
//!
//! Counts transport ops, multiplying by the trip counts of enclosing constant loops. Ops in
//! loops whose trip count is unknown are counted once and the kernel is flagged
//! `per_iteration`; ops under `ab.if` or a runtime predicate are counted as if executed and
//! flagged `conditional`. The simulator reports executed counts with the same keys.

use serde::Serialize;

use aboleth_ir::{
    ab::attributes::SignalOperation,
    attrs,
    pliron::{
        context::{Context, Ptr},
        operation::Operation,
    },
    scalar::{constant_trip_count, constant_value, enclosing_loops},
    text::op_name,
    walk::all_ops,
};

/// Fence counts by scope.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FenceCounts {
    /// `fence.acq_rel.cta` and CTA-scope fences.
    pub cta: u64,
    /// `fence.acq_rel.gpu` / `__threadfence()`.
    pub gpu: u64,
    /// `fence.sc.sys` / `__threadfence_system()`.
    pub sys: u64,
}

/// The counters of `--emit stats` and `aboleth sim --stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Queue reservations (mlx5 or EFA send queue, proxy ring).
    pub reservations: u64,
    /// Commands written: WQEs on mlx5 and EFA, ring entries on proxy.
    pub wqes: u64,
    /// Doorbells: UAR MMIO writes (mlx5), SQ doorbell MMIO writes (EFA) or producer-head
    /// release stores (proxy).
    pub doorbells: u64,
    /// mlx5 doorbell-record stores.
    pub doorbell_record_updates: u64,
    /// Memory fences by scope.
    pub fences: FenceCounts,
    /// GPU atomic read-modify-writes (reservation, publication, lock, atomicMax, red.add).
    pub atomics: u64,
    /// Commands that ask for a completion (CQ_UPDATE / completion counter).
    pub completions_requested: u64,
    /// Payload bytes carried inside commands.
    pub inline_bytes: u64,
    /// Payload bytes moved.
    pub payload_bytes: u64,
    /// Barriers of a program's threads (`bar.sync`, `bar.warp.sync`) before a leader acts.
    pub barriers: u64,
    /// Stores of a flag to a peer over NVLink (p2p signals that set; adds are atomics).
    pub flag_stores: u64,
}

impl Counts {
    /// Adds `other` to `self` (saturating, as every count here: loops with constant trip
    /// counts near i64::MAX must not overflow them).
    pub fn add(&mut self, other: &Counts) {
        self.reservations = self.reservations.saturating_add(other.reservations);
        self.wqes = self.wqes.saturating_add(other.wqes);
        self.doorbells = self.doorbells.saturating_add(other.doorbells);
        self.doorbell_record_updates = self
            .doorbell_record_updates
            .saturating_add(other.doorbell_record_updates);
        self.fences.cta = self.fences.cta.saturating_add(other.fences.cta);
        self.fences.gpu = self.fences.gpu.saturating_add(other.fences.gpu);
        self.fences.sys = self.fences.sys.saturating_add(other.fences.sys);
        self.atomics = self.atomics.saturating_add(other.atomics);
        self.completions_requested = self
            .completions_requested
            .saturating_add(other.completions_requested);
        self.inline_bytes = self.inline_bytes.saturating_add(other.inline_bytes);
        self.payload_bytes = self.payload_bytes.saturating_add(other.payload_bytes);
        self.barriers = self.barriers.saturating_add(other.barriers);
        self.flag_stores = self.flag_stores.saturating_add(other.flag_stores);
    }
}

/// Statistics of one kernel.
#[derive(Clone, Debug, Serialize)]
pub struct KernelStats {
    /// Kernel name.
    pub name: String,
    /// Target transport.
    pub target: String,
    /// Passes that ran, in order.
    pub passes: Vec<String>,
    /// Static counts per program instance.
    pub counts: Counts,
    /// Some counted ops sit in loops of unknown trip count (counted once per iteration).
    pub per_iteration: bool,
    /// Some counted ops run only under a runtime condition (counted as if they ran).
    pub conditional: bool,
}

/// Counts the transport ops of a lowered kernel.
pub fn count_kernel(ctx: &Context, kernel: Ptr<Operation>) -> (Counts, bool, bool) {
    let mut counts = Counts::default();
    let mut per_iteration = false;
    let mut conditional = false;
    for op in all_ops(ctx, kernel) {
        let name = op_name(ctx, op);
        if !(name.starts_with("mlx5.")
            || name.starts_with("proxy.")
            || name.starts_with("efa.")
            || name.starts_with("ionic.")
            || name.starts_with("p2p.")
            || name.starts_with("gpu."))
        {
            continue;
        }
        let loops = enclosing_loops(ctx, op);
        let mut multiplicity: u64 = 1;
        let mut innermost_trip: u64 = 1;
        for (depth, loop_op) in loops.iter().enumerate() {
            match constant_trip_count(ctx, *loop_op) {
                Some(trip) => {
                    multiplicity = multiplicity.saturating_mul(trip.max(0) as u64);
                    if depth == 0 {
                        innermost_trip = trip.max(1) as u64;
                    }
                }
                None => per_iteration = true,
            }
        }
        if aboleth_ir::scalar::inside_if(ctx, op) {
            conditional = true;
        }
        let operand_constant = |index: usize| -> Option<i64> {
            let operation = op.deref(ctx);
            (index < operation.get_num_operands())
                .then(|| constant_value(ctx, operation.get_operand(index)))
                .flatten()
        };
        let completion = |index: usize| -> u64 {
            if attrs::get_bool(ctx, op, "completion_once") {
                multiplicity / innermost_trip
            } else if operand_constant(index).unwrap_or(1) != 0 {
                multiplicity
            } else {
                0
            }
        };
        let bytes_of = |index: usize, conditional: &mut bool| -> u64 {
            if operand_constant(index + 2).is_none_or(|p| p != 1) {
                *conditional = true;
            }
            (operand_constant(index).unwrap_or(0).max(0) as u64).saturating_mul(multiplicity)
        };
        match name.as_str() {
            "mlx5.reserve" | "proxy.reserve" | "efa.reserve" | "ionic.reserve" => {
                counts.reservations = counts.reservations.saturating_add(multiplicity);
                if attrs::get_bool(ctx, op, "atomic") {
                    counts.atomics = counts.atomics.saturating_add(multiplicity);
                }
            }
            "mlx5.write" | "proxy.put" | "efa.write" | "ionic.write" => {
                counts.wqes = counts.wqes.saturating_add(multiplicity);
                let bytes = bytes_of(4, &mut conditional);
                counts.payload_bytes = counts.payload_bytes.saturating_add(bytes);
                if attrs::get_bool(ctx, op, "inline") {
                    counts.inline_bytes = counts.inline_bytes.saturating_add(bytes);
                }
                counts.completions_requested =
                    counts.completions_requested.saturating_add(completion(7));
            }
            "mlx5.atomic" | "proxy.signal" | "efa.signal" | "ionic.signal" => {
                counts.wqes = counts.wqes.saturating_add(multiplicity);
                counts.completions_requested =
                    counts.completions_requested.saturating_add(completion(4));
            }
            // A one-owner queue's publication is a plain store.
            "mlx5.publish" | "proxy.publish" | "efa.publish" | "ionic.publish"
                if attrs::get_bool(ctx, op, "owner_only") => {}
            "mlx5.publish" | "proxy.publish" | "efa.publish" | "ionic.publish" | "mlx5.lock"
            | "efa.lock" | "ionic.lock" => {
                counts.atomics = counts.atomics.saturating_add(multiplicity)
            }
            "mlx5.doorbell_record" => {
                counts.doorbell_record_updates =
                    counts.doorbell_record_updates.saturating_add(multiplicity);
                if attrs::get_bool(ctx, op, "atomic_max") {
                    counts.atomics = counts.atomics.saturating_add(multiplicity);
                }
            }
            "mlx5.doorbell" => counts.doorbells = counts.doorbells.saturating_add(multiplicity),
            "proxy.doorbell" | "efa.doorbell" | "ionic.doorbell" => {
                counts.doorbells = counts.doorbells.saturating_add(multiplicity);
                if attrs::get_bool(ctx, op, "atomic_max") {
                    counts.atomics = counts.atomics.saturating_add(multiplicity);
                }
            }
            "p2p.copy" => {
                counts.payload_bytes = counts
                    .payload_bytes
                    .saturating_add(bytes_of(3, &mut conditional))
            }
            // Unpredicated: only unpredicated puts travel as packets.
            "p2p.put_packets" => {
                counts.payload_bytes = counts.payload_bytes.saturating_add(
                    (operand_constant(4).unwrap_or(0).max(0) as u64).saturating_mul(multiplicity),
                )
            }
            "p2p.signal"
                if attrs::get_typed::<SignalOperation>(ctx, op, "op")
                    == Some(SignalOperation::Add) =>
            {
                counts.atomics = counts.atomics.saturating_add(multiplicity);
            }
            "p2p.signal" => counts.flag_stores = counts.flag_stores.saturating_add(multiplicity),
            "gpu.barrier" => counts.barriers = counts.barriers.saturating_add(multiplicity),
            "gpu.fence" => match attrs::get_string(ctx, op, "scope").as_deref() {
                Some("cta") => counts.fences.cta = counts.fences.cta.saturating_add(multiplicity),
                Some("sys") => counts.fences.sys = counts.fences.sys.saturating_add(multiplicity),
                _ => counts.fences.gpu = counts.fences.gpu.saturating_add(multiplicity),
            },
            _ => {}
        }
    }
    (counts, per_iteration, conditional)
}
