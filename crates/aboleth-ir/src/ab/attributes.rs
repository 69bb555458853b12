//! Attributes of the `ab` dialect: operator kinds and the facts that passes attach to operations.
//!
//! Each attribute here is a small enum printed by name. Passes record their decisions as these
//! attributes (how a signal is published, who owns a queue) so that every decision is visible
//! in the printed IR and checked by golden tests. They carry no behaviour of their own.

use pliron::derive::pliron_attr;

/// The operator of `ab.binop`. Comparisons give 0 or 1 in the operands' type.
#[pliron_attr(name = "ab.binop_kind", format, verifier = "succ")]
#[derive(PartialEq, Eq, Clone, Copy, Debug, Hash)]
pub enum BinaryOperator {
    /// Wrapping addition.
    Add,
    /// Wrapping subtraction.
    Sub,
    /// Wrapping multiplication.
    Mul,
    /// Signed division; division by zero is an error in the simulator.
    Div,
    /// Signed remainder.
    Rem,
    /// Signed minimum.
    Min,
    /// Signed maximum.
    Max,
    /// Bitwise and.
    And,
    /// Bitwise or.
    Or,
    /// `a == b`.
    Eq,
    /// `a != b`.
    Ne,
    /// Signed `a < b`.
    Lt,
    /// Signed `a <= b`.
    Le,
    /// Signed `a > b`.
    Gt,
    /// Signed `a >= b`.
    Ge,
}

/// How `ab.signal` updates the flag: overwrite it or add to it.
#[pliron_attr(name = "ab.signal_op", format, verifier = "succ")]
#[derive(PartialEq, Eq, Clone, Copy, Debug, Hash)]
pub enum SignalOperation {
    /// Store the value (the flag becomes `value`).
    Set,
    /// Atomically add the value to the flag.
    Add,
}

/// What `ab.wait_signal` waits for: the flag compared with the value (`flag OP value`), on signed
/// 64-bit integers as the IR, the simulator and tier 2's code compute; tier 1's C++ encoding
/// compares unsigned, as NVSHMEM's `uint64_t` signals (the same for values below 2^63).
/// Absent, the wait is `Ge` (a flag that reaches an epoch).
/// The variants are NVSHMEM's `NVSHMEM_CMP_*` in its order, so [`Comparison::nvshmem_code`] is
/// the number a `signal_wait_until` port passes.
#[pliron_attr(name = "ab.comparison", format, verifier = "succ")]
#[derive(PartialEq, Eq, Clone, Copy, Debug, Hash)]
pub enum Comparison {
    /// `flag == value`.
    Eq,
    /// `flag != value`.
    Ne,
    /// `flag > value`.
    Gt,
    /// `flag <= value`.
    Le,
    /// `flag < value`.
    Lt,
    /// `flag >= value` (the default).
    Ge,
}

impl Comparison {
    /// Every comparison, in NVSHMEM's order.
    pub const ALL: [Comparison; 6] = [
        Comparison::Eq,
        Comparison::Ne,
        Comparison::Gt,
        Comparison::Le,
        Comparison::Lt,
        Comparison::Ge,
    ];

    /// The name Python, C++ and the symbols use (`eq`, `ne`, `gt`, `le`, `lt`, `ge`).
    pub fn name(self) -> &'static str {
        match self {
            Comparison::Eq => "eq",
            Comparison::Ne => "ne",
            Comparison::Gt => "gt",
            Comparison::Le => "le",
            Comparison::Lt => "lt",
            Comparison::Ge => "ge",
        }
    }

    /// The comparison named `name`, if any.
    pub fn from_name(name: &str) -> Option<Comparison> {
        Comparison::ALL
            .into_iter()
            .find(|comparison| comparison.name() == name)
    }

    /// The operator as C and Python write it (`==`, `>=`, ...).
    pub fn symbol(self) -> &'static str {
        match self {
            Comparison::Eq => "==",
            Comparison::Ne => "!=",
            Comparison::Gt => ">",
            Comparison::Le => "<=",
            Comparison::Lt => "<",
            Comparison::Ge => ">=",
        }
    }

    /// NVSHMEM's `NVSHMEM_CMP_*` value (EQ 0, NE 1, GT 2, LE 3, LT 4, GE 5).
    pub fn nvshmem_code(self) -> u32 {
        self as u32
    }

    /// Whether a flag holding `seen` satisfies a wait for `expected`.
    pub fn holds(self, seen: i64, expected: i64) -> bool {
        match self {
            Comparison::Eq => seen == expected,
            Comparison::Ne => seen != expected,
            Comparison::Gt => seen > expected,
            Comparison::Le => seen <= expected,
            Comparison::Lt => seen < expected,
            Comparison::Ge => seen >= expected,
        }
    }
}

/// How a signal is made visible after the data it publishes (chosen by `choose-signal-publication`).
#[pliron_attr(name = "ab.publication", format, verifier = "succ")]
#[derive(PartialEq, Eq, Clone, Copy, Debug, Hash)]
pub enum Publication {
    /// Library style: a full fence (or a fenced WQE / a completion wait) before the signal.
    Fenced,
    /// The data went on the same in-order queue (RC QP or proxy ring): no fence is needed.
    InOrderOnQueue,
    /// NVLink: one `st.release.sys` (or `red.release.sys.add`) after a CTA barrier.
    ReleaseStore,
    /// The data went on another queue: wait for its completion, then signal.
    AfterCompletion,
    /// mlx5: the signal rides on its put as an RDMA_WRITE_IMM whose immediate names the flag;
    /// a wait of the receiving rank applies it (see `choose-signal-publication`).
    WriteWithImmediate,
    /// NVLink: the signal rides in its put's packets (flag-in-data, LL16): every 8 bytes of
    /// payload travel with the flag, a wait of the receiving rank unpacks them.
    FlagInData,
}

/// Who posts to an endpoint's queue (found by `assign-queue-owners`).
#[pliron_attr(name = "ab.queue_owner", format, verifier = "succ")]
#[derive(PartialEq, Eq, Clone, Copy, Debug, Hash)]
pub enum QueueOwner {
    /// Any program may post: reservations need atomics and publication needs ordering.
    Shared,
    /// Exactly one program posts to each queue: plain loads and stores of the producer index.
    Program,
}
