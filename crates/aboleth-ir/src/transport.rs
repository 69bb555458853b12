//! The transport dialects: `mlx5`, `proxy`, `p2p`, `efa`, `ionic` and the target-neutral `gpu`
//! ops they share.
//!
//! These are what the transport-specialization passes emit and what the simulator executes and
//! the code generator prints. Every op here is one concrete device action (a WQE write, a
//! doorbell record store, a ring-entry store, a fence), so counting ops gives the cost the
//! statistics report. Operands are positional (documented per op); options are attributes in
//! the op's dictionary (`completion`, `atomic`, ...), read with [`crate::attrs`].
//! This module does not decide anything: the passes in `aboleth-passes` do.

use pliron::{
    builtin::op_interfaces::{NResultsInterface, OneResultInterface},
    derive::pliron_op,
};

macro_rules! transport_op_without_result {
    ($(#[$doc:meta])* $rust:ident, $name:literal) => {
        $(#[$doc])*
        #[pliron_op(
            name = $name,
            format = "operands(CharSpace(`,`)) ` ` attr_dict",
            interfaces = [NResultsInterface<0>],
            verifier = "succ"
        )]
        pub struct $rust;
    };
}

macro_rules! transport_op_with_result {
    ($(#[$doc:meta])* $rust:ident, $name:literal) => {
        $(#[$doc])*
        #[pliron_op(
            name = $name,
            format = "operands(CharSpace(`,`)) ` ` attr_dict ` : ` type($0)",
            interfaces = [OneResultInterface],
            verifier = "succ"
        )]
        pub struct $rust;
    };
}

transport_op_without_result!(
    /// `gpu.fence [scope: "cta"|"gpu"|"sys"]`: a memory fence (`fence.acq_rel.<scope>`).
    GpuFenceOp, "gpu.fence");
transport_op_without_result!(
    /// `gpu.barrier [scope: "warp"|"cta"]`: a barrier of the program's threads (`bar.sync 0`; with
    /// `warp`, `bar.warp.sync` of the leader's warp), so a leader acts after their stores. With
    /// `source_stores`, the one `lower-p2p` puts before a copy whose source the program may have
    /// written, so the copy's loads see those stores.
    GpuBarrierOp, "gpu.barrier");
transport_op_without_result!(
    /// `gpu.wait_flag %ptr, %value [order: "acquire"|"volatile", comparison]`: spin until
    /// `*ptr >= value` (or the `ab.comparison` it carries: `*ptr == value`, ...).
    /// `volatile` is the library form: a volatile poll followed by a `gpu.fence`.
    /// With `%flag_table, %endpoint_table` it also drains the receive CQ (write-with-immediate);
    /// with `%flag_table, %data_table [packets, packet_bytes_max]` it also unpacks the flag's
    /// packet slot (flag-in-data): whenever the slot holds a complete transfer (both header
    /// packets and every payload packet carry the header's flag, whatever its value), thread 0
    /// copies the payload to `%data_table[rank]` at the header's offset, releases the flag with
    /// the header's value and marks the slot consumed; the poll then compares the flag as usual.
    GpuWaitFlagOp, "gpu.wait_flag");
transport_op_without_result!(
    /// `gpu.store %ptr, %value`: a plain local store (compute writing a buffer).
    GpuStoreOp, "gpu.store");

transport_op_with_result!(
    /// `%base = mlx5.reserve %ep, %basic_blocks [atomic: bool]`: reserve WQE basic blocks in the SQ.
    /// Waits while the ring is full. `atomic` is a GPU-scope `atomicAdd` on the shared head.
    Mlx5ReserveOp, "mlx5.reserve");
transport_op_without_result!(
    /// `mlx5.write %ep, %slot, %dst, %src, %bytes, %lkey [completion, inline, fence, predicated]`:
    /// write an RDMA WRITE WQE at basic block `%slot` (inline: the payload is copied into the WQE).
    /// With a trailing predicate operand, a NOP of the same size is written when it is 0.
    Mlx5WriteOp, "mlx5.write");
transport_op_without_result!(
    /// `mlx5.atomic %ep, %slot, %flag, %value [op: set|add, completion, fence]`: a signal WQE:
    /// ATOMIC_FA for add (1 basic block), masked compare-and-swap for set (2 basic blocks).
    Mlx5AtomicOp, "mlx5.atomic");
transport_op_without_result!(
    /// `mlx5.publish %ep, %base, %basic_blocks`: in-order publication on a shared queue: spin on
    /// `atomicCAS(ready_head, base, base + n)` so earlier reservations are written first.
    Mlx5PublishOp, "mlx5.publish");
transport_op_without_result!(
    /// `mlx5.lock %ep`: take the queue's post lock (`atomicCAS`), as NVSHMEM's shared QPs do.
    Mlx5LockOp, "mlx5.lock");
transport_op_without_result!(
    /// `mlx5.unlock %ep`: release the post lock (a release store).
    Mlx5UnlockOp, "mlx5.unlock");
transport_op_without_result!(
    /// `mlx5.doorbell_record %ep, %producer [atomic_max: bool]`: `st.release` of the SQ doorbell
    /// record (`BE32(producer & 0xffff)`); with `atomic_max`, an `atomicMax` on the shared index first.
    Mlx5DoorbellRecordOp, "mlx5.doorbell_record");
transport_op_without_result!(
    /// `mlx5.doorbell %ep, %producer`: the 8-byte MMIO store to the UAR that makes the NIC fetch.
    Mlx5DoorbellOp, "mlx5.doorbell");
transport_op_without_result!(
    /// `mlx5.wait_completion %ep, %slot`: poll the CQ until the WQE at `%slot` has completed.
    Mlx5WaitCompletionOp, "mlx5.wait_completion");

transport_op_with_result!(
    /// `%base = efa.reserve %ep, %wqes [atomic: bool]`: reserve send-queue WQEs (64 bytes each).
    /// Waits while the queue is full: the completion log's consumer index (every WQE before it
    /// completed, `aboleth_abi::efa::queue`) is at least `base + wqes - entries`, polling the
    /// send CQ when it is not.
    EfaReserveOp, "efa.reserve");
transport_op_without_result!(
    /// `efa.write %ep, %slot, %dst, %src, %bytes, %lkey, %predicate, %completion`: an RDMA write
    /// WQE at `%slot` (an empty write when the predicate is 0: no NOP exists on EFA). Every EFA
    /// WQE requests a completion (rdma-core requires it, and the consumer index needs each one).
    EfaWriteOp, "efa.write");
transport_op_without_result!(
    /// `efa.signal %ep, %slot, %flag, %value, %completion [op: set|add]`: a signal WQE at
    /// `%slot`. Set: the value is staged in the slot's staging word and written to the flag by
    /// an 8-byte RDMA write. Add: an empty RDMA write with immediate
    /// (`aboleth_abi::mlx5::receive::ImmediateSignal`) that a wait of the target applies. SRD
    /// does not order it behind earlier WQEs: the lowering waits for their completions first.
    EfaSignalOp, "efa.signal");
transport_op_without_result!(
    /// `efa.publish %ep, %base, %wqes`: in-order publication on a shared queue (`atomicCAS` on
    /// the ready head), as `mlx5.publish`.
    EfaPublishOp, "efa.publish");
transport_op_without_result!(
    /// `efa.lock %ep`: take the queue's doorbell lock, so that doorbells reach the device in
    /// producer order (it refuses one that goes back).
    EfaLockOp, "efa.lock");
transport_op_without_result!(
    /// `efa.unlock %ep`: release the doorbell lock (a release store).
    EfaUnlockOp, "efa.unlock");
transport_op_without_result!(
    /// `efa.doorbell %ep, %producer [atomic_max: bool, order]`: a system-scope release (the
    /// WQEs and staged values become visible to the device), then the 32-bit MMIO write of the
    /// producer index's low 16 bits (rdma-core's producer counter); with `atomic_max`, an
    /// `atomicMax` on the shared producer index first.
    EfaDoorbellOp, "efa.doorbell");
transport_op_without_result!(
    /// `efa.wait_completion %ep [, %slot, %end] [publishes]`: poll the send CQ into the
    /// completion log (under the queue's poll lock) until the WQE at `%slot` has completed, or,
    /// without a slot, until every WQE up to and including this program's last command on the
    /// queue has (the consumer index reaches that command's end). `publishes`: the wait that
    /// orders a signal after its data (SRD does not).
    EfaWaitCompletionOp, "efa.wait_completion");

transport_op_with_result!(
    /// `%base = ionic.reserve %ep, %wqes [atomic: bool]`: reserve send-queue WQEs (64 bytes each);
    /// waits while the queue is full, polling the CQ (completions are cumulative: RC).
    IonicReserveOp, "ionic.reserve");
transport_op_without_result!(
    /// `ionic.write %ep, %slot, %dst, %src, %bytes, %lkey, %predicate, %completion
    /// [periodic_completion]`: an RDMA write WQE at `%slot` (an empty inline write when the
    /// predicate is 0: no NOP exists).
    IonicWriteOp, "ionic.write");
transport_op_without_result!(
    /// `ionic.signal %ep, %slot, %flag, %value, %completion [op: set|add, fence,
    /// periodic_completion]`: a signal WQE: a fetch-add for add (the old value to the endpoint's
    /// scratch word), an 8-byte inline RDMA write of the value for set (no masked swap exists).
    /// The queue is in order (RC): it lands after the puts before it.
    IonicSignalOp, "ionic.signal");
transport_op_without_result!(
    /// `ionic.publish %ep, %base, %wqes`: in-order publication on a shared queue.
    IonicPublishOp, "ionic.publish");
transport_op_without_result!(
    /// `ionic.lock %ep`: take the doorbell lock (doorbells reach the device in producer order).
    IonicLockOp, "ionic.lock");
transport_op_without_result!(
    /// `ionic.unlock %ep`: release the doorbell lock (a release store).
    IonicUnlockOp, "ionic.unlock");
transport_op_without_result!(
    /// `ionic.doorbell %ep, %producer [atomic_max: bool, order]`: a system-scope release, then the
    /// 64-bit MMIO store of `queue id << 24 | producer index mod ring`
    /// (`aboleth_abi::ionic::sq_doorbell_value`); with `atomic_max`, an `atomicMax` on the
    /// shared producer index first.
    IonicDoorbellOp, "ionic.doorbell");
transport_op_without_result!(
    /// `ionic.wait_completion %ep [, %slot, %end]`: poll the CQ until a CQE covers the WQE at
    /// `%slot` (or, without a slot, the program's last command with a completion).
    IonicWaitCompletionOp, "ionic.wait_completion");

transport_op_with_result!(
    /// `%base = proxy.reserve %ep, %entries [atomic: bool]`: reserve ring entries (waits while full).
    ProxyReserveOp, "proxy.reserve");
transport_op_without_result!(
    /// `proxy.put %ep, %slot, %dst, %src, %bytes, %lkey [completion] [, %predicate]`: write a put entry.
    ProxyPutOp, "proxy.put");
transport_op_without_result!(
    /// `proxy.signal %ep, %slot, %flag, %value [op, completion, fence]`: write a signal entry; the proxy
    /// executes it after every earlier entry of the ring (same stream).
    ProxySignalOp, "proxy.signal");
transport_op_without_result!(
    /// `proxy.publish %ep, %base, %entries`: in-order publication on a shared ring (`atomicCAS`).
    ProxyPublishOp, "proxy.publish");
transport_op_without_result!(
    /// `proxy.doorbell %ep, %producer [atomic_max]`: `st.release.sys` of the producer head the
    /// host thread polls.
    ProxyDoorbellOp, "proxy.doorbell");
transport_op_without_result!(
    /// `proxy.wait_completion %ep, %slot`: poll the host-written completion counter past `%slot`.
    ProxyWaitCompletionOp, "proxy.wait_completion");

transport_op_without_result!(
    /// `p2p.copy %ep, %dst, %src, %bytes [, %predicate]`: every thread of the program stores its share
    /// of the payload into the peer's memory over NVLink (plain, weakly ordered stores).
    P2pCopyOp, "p2p.copy");
transport_op_without_result!(
    /// `p2p.signal %ep, %flag, %value [op, order: "release"|"relaxed"]`: one thread updates the
    /// peer's flag: `st.release.sys` / `red.release.sys.add`, or a relaxed (volatile) store.
    P2pSignalOp, "p2p.signal");
transport_op_without_result!(
    /// `p2p.put_packets %ep, %flag, %dst, %src, %bytes, %value`: flag-in-data. Every thread stores
    /// its share of the payload as LL16 packets (`aboleth_abi::packet`) carrying the low half of
    /// `%value`, into the slot of `%flag` in the staging area after the peer's flag region, with
    /// relaxed 16-byte stores; one thread also stores the two header packets (where in `%dst`'s
    /// region the payload goes, its length, the value's high half). No barrier, fence or flag
    /// store: a wait of the receiving rank unpacks the slot and sets the flag.
    P2pPutPacketsOp, "p2p.put_packets");
