//! Operations of the `ab` dialect at the semantic level, and the scalar computation around them.
//!
//! The scalar ops (`ab.program_id`, `ab.binop`, `ab.cast`, `ab.ptr_add`, `ab.load`, `ab.store`,
//! `ab.for`, `ab.if`) keep sizes, offsets, predicates and trip counts visible to the passes. The
//! communication ops (`ab.endpoint`, `ab.remote`, `ab.at`, `ab.put`, `ab.signal`,
//! `ab.wait_signal`, `ab.wait`, `ab.drain`, `ab.fence`) state what is communicated, not how: the
//! transport dialects (`mlx5`, `proxy`, `p2p`) say how. Verification of operand kinds lives in
//! `crate::verify`, so that every rule and its message sit in one place.

use pliron::{
    builtin::op_interfaces::{
        IsTerminatorInterface, NOpdsInterface, NRegionsInterface, NResultsInterface,
        OneResultInterface, SingleBlockRegionInterface,
    },
    context::{Context, Ptr},
    derive::pliron_op,
    op::Op,
    operation::Operation,
    region::Region,
    value::Value,
};

use crate::ab::attributes::BinaryOperator;

/// `%p = ab.program_id : i32`: this program's index along grid axis 0 (Triton's `program_id(0)`).
#[pliron_op(
    name = "ab.program_id",
    format = "`: ` type($0)",
    interfaces = [NOpdsInterface<0>, OneResultInterface],
    verifier = "succ"
)]
pub struct ProgramIdOp;

/// `%r = ab.rank : i64`: this process's rank (Triton's `RANK` constexpr; uniform in a kernel).
#[pliron_op(
    name = "ab.rank",
    format = "`: ` type($0)",
    interfaces = [NOpdsInterface<0>, OneResultInterface],
    verifier = "succ"
)]
pub struct RankOp;

/// `%n = ab.world_size : i64`: the number of ranks.
#[pliron_op(
    name = "ab.world_size",
    format = "`: ` type($0)",
    interfaces = [NOpdsInterface<0>, OneResultInterface],
    verifier = "succ"
)]
pub struct WorldSizeOp;

/// `%r = ab.binop <add> %a, %b : i64`: integer arithmetic and comparison (0 or 1).
#[pliron_op(
    name = "ab.binop",
    format = "attr($ab_binop_kind, $BinaryOperator) ` ` $0 `, ` $1 ` : ` type($0)",
    interfaces = [NOpdsInterface<2>, OneResultInterface],
    attributes = (ab_binop_kind: BinaryOperator),
    verifier = "succ"
)]
pub struct BinaryOp;

impl BinaryOp {
    /// The operator.
    pub fn operator(&self, ctx: &Context) -> BinaryOperator {
        *self
            .get_attr_ab_binop_kind(ctx)
            .expect("the parser and builders always set ab_binop_kind")
    }
}

/// `%r = ab.cast %a : i64`: sign-extend or truncate an integer to the result type.
#[pliron_op(
    name = "ab.cast",
    format = "$0 ` : ` type($0)",
    interfaces = [NOpdsInterface<1>, OneResultInterface],
    verifier = "succ"
)]
pub struct CastOp;

/// `%q = ab.ptr_add %p, %bytes : ab.ptr`: a local address plus a byte offset.
#[pliron_op(
    name = "ab.ptr_add",
    format = "$0 `, ` $1 ` : ` type($0)",
    interfaces = [NOpdsInterface<2>, OneResultInterface],
    verifier = "succ"
)]
pub struct PointerAddOp;

/// `%v = ab.load %p : i64`: a plain load from local memory.
#[pliron_op(
    name = "ab.load",
    format = "$0 ` : ` type($0)",
    interfaces = [NOpdsInterface<1>, OneResultInterface],
    verifier = "succ"
)]
pub struct LoadOp;

/// `ab.store %p, %v`: a plain store to local memory (the width is the value's type).
#[pliron_op(
    name = "ab.store",
    format = "$0 `, ` $1",
    interfaces = [NOpdsInterface<2>, NResultsInterface<0>],
    verifier = "succ"
)]
pub struct StoreOp;

/// `ab.for %lower, %upper, %step [attrs] { ^body(%i: i64): ... ab.yield }`: a counted loop.
#[pliron_op(
    name = "ab.for",
    format = "$0 `, ` $1 `, ` $2 ` ` attr_dict ` ` region($0)",
    interfaces = [NOpdsInterface<3>, NResultsInterface<0>, NRegionsInterface<1>, SingleBlockRegionInterface],
    verifier = "succ"
)]
pub struct ForOp;

impl ForOp {
    /// The loop body (one block whose single argument is the induction variable).
    pub fn body(&self, ctx: &Context) -> Ptr<Region> {
        self.get_operation().deref(ctx).get_region(0)
    }
}

/// `ab.if %cond { ... ab.yield }`: runs its region when `%cond != 0`.
#[pliron_op(
    name = "ab.if",
    format = "$0 ` ` region($0)",
    interfaces = [NOpdsInterface<1>, NResultsInterface<0>, NRegionsInterface<1>, SingleBlockRegionInterface],
    verifier = "succ"
)]
pub struct IfOp;

/// `ab.yield`: ends the region of `ab.for`, `ab.if` and `ab.batch`.
#[pliron_op(
    name = "ab.yield",
    format = "",
    interfaces = [IsTerminatorInterface, NOpdsInterface<0>, NResultsInterface<0>],
    verifier = "succ"
)]
pub struct YieldOp;

/// `ab.return`: ends a kernel.
#[pliron_op(
    name = "ab.return",
    format = "",
    interfaces = [IsTerminatorInterface, NOpdsInterface<0>, NResultsInterface<0>],
    verifier = "succ"
)]
pub struct ReturnOp;

/// `%ep = ab.endpoint %handles, %peer : ab.endpoint`: the queue to `%peer`.
#[pliron_op(
    name = "ab.endpoint",
    format = "$0 `, ` $1 ` ` attr_dict ` : ` type($0)",
    interfaces = [NOpdsInterface<2>, OneResultInterface],
    verifier = "succ"
)]
pub struct EndpointOp;

/// `%r = ab.remote %regions, %peer [length_bytes: N] : ab.remote<E>`: `%peer`'s descriptor of a
/// region (`length_bytes`, when known, lets the verifier bound puts).
#[pliron_op(
    name = "ab.remote",
    format = "$0 `, ` $1 ` ` attr_dict ` : ` type($0)",
    interfaces = [NOpdsInterface<2>, OneResultInterface],
    verifier = "succ"
)]
pub struct RemoteOp;

/// `%d = ab.at %remote, %index : ab.remote_ptr<N>`: element `%index` of a remote region.
#[pliron_op(
    name = "ab.at",
    format = "$0 `, ` $1 ` : ` type($0)",
    interfaces = [NOpdsInterface<2>, OneResultInterface],
    verifier = "succ"
)]
pub struct AtOp;

/// `%t = ab.put %ep, %dst, %src, %bytes, %source_key [, %predicate] [attrs] : ab.token`.
///
/// Copies `%bytes` from local `%src` to remote `%dst`. `%src` may be reused after `ab.wait %t`.
/// With a predicate, nothing is sent when it is 0 (the token is then complete at once).
#[pliron_op(
    name = "ab.put",
    format = "operands(CharSpace(`,`)) ` ` attr_dict ` : ` type($0)",
    interfaces = [OneResultInterface],
    verifier = "succ"
)]
pub struct PutOp;

/// `%s = ab.signal %ep, %flag, %value [, %after] [op: set|add] : ab.token`.
///
/// Updates the remote flag, becoming visible only after the data of `%after` (and of every
/// earlier put on `%ep`) is visible at the peer.
#[pliron_op(
    name = "ab.signal",
    format = "operands(CharSpace(`,`)) ` ` attr_dict ` : ` type($0)",
    interfaces = [OneResultInterface],
    verifier = "succ"
)]
pub struct SignalOp;

/// `ab.wait_signal %flag, %value [comparison: ab.comparison C]`: spin until the local flag
/// satisfies `flag C %value` (`>=` without the attribute), then acquire.
#[pliron_op(
    name = "ab.wait_signal",
    format = "$0 `, ` $1 ` ` attr_dict",
    interfaces = [NOpdsInterface<2>, NResultsInterface<0>],
    verifier = "succ"
)]
pub struct WaitSignalOp;

/// `ab.wait %t`: block until the source of the transfer behind `%t` may be reused.
#[pliron_op(
    name = "ab.wait",
    format = "$0 ` ` attr_dict",
    interfaces = [NOpdsInterface<1>, NResultsInterface<0>],
    verifier = "succ"
)]
pub struct WaitOp;

/// `ab.drain %ep`: block until every transfer posted on `%ep` is complete (NVSHMEM's quiet).
#[pliron_op(
    name = "ab.drain",
    format = "$0 ` ` attr_dict",
    interfaces = [NOpdsInterface<1>, NResultsInterface<0>],
    verifier = "succ"
)]
pub struct DrainOp;

/// `ab.fence %ep`: later puts on `%ep` are delivered after earlier ones (NVSHMEM's fence).
#[pliron_op(
    name = "ab.fence",
    format = "$0 ` ` attr_dict",
    interfaces = [NOpdsInterface<1>, NResultsInterface<0>],
    verifier = "succ"
)]
pub struct FenceOp;

/// Operand accessors shared by the communication ops, so passes read them by name.
pub mod operand {
    /// `ab.put` operand positions.
    pub mod put {
        /// The endpoint.
        pub const ENDPOINT: usize = 0;
        /// The remote destination.
        pub const DESTINATION: usize = 1;
        /// The local source address.
        pub const SOURCE: usize = 2;
        /// The byte count.
        pub const BYTES: usize = 3;
        /// The source's registration key (lkey).
        pub const SOURCE_KEY: usize = 4;
        /// The optional predicate.
        pub const PREDICATE: usize = 5;
    }
    /// `ab.signal` operand positions.
    pub mod signal {
        /// The endpoint.
        pub const ENDPOINT: usize = 0;
        /// The remote flag.
        pub const FLAG: usize = 1;
        /// The value.
        pub const VALUE: usize = 2;
        /// The optional `after` token.
        pub const AFTER: usize = 3;
    }
}

/// Returns the `index`th operand of `op`.
pub fn operand_of(ctx: &Context, op: Ptr<Operation>, index: usize) -> Value {
    op.deref(ctx).get_operand(index)
}
