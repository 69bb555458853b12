// aboleth/detail/device_mlx5.cuh: the implementation of aboleth/device.cuh (generated; do not edit).
// The bodies in `generated` are the mlx5 lowering of each operation, encoded for a thread, a
// warp and a block. Wait sites (the site ids World.check_waits() reports):
//   site 4096: put_thread, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4097: put_thread, waiting for free basic blocks in the mlx5 send queue
//   site 4098: put_thread, waiting for the turn to publish on the mlx5 send queue
//   site 4099: put_thread, waiting for the post lock of the mlx5 send queue
//   site 4100: put_warp, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4101: put_warp, waiting for free basic blocks in the mlx5 send queue
//   site 4102: put_warp, waiting for the turn to publish on the mlx5 send queue
//   site 4103: put_warp, waiting for the post lock of the mlx5 send queue
//   site 4104: put_block, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4105: put_block, waiting for free basic blocks in the mlx5 send queue
//   site 4106: put_block, waiting for the turn to publish on the mlx5 send queue
//   site 4107: put_block, waiting for the post lock of the mlx5 send queue
//   site 4108: put_signal_set_thread, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4109: put_signal_set_thread, waiting for free basic blocks in the mlx5 send queue
//   site 4110: put_signal_set_thread, waiting for the turn to publish on the mlx5 send queue
//   site 4111: put_signal_set_thread, waiting for the post lock of the mlx5 send queue
//   site 4112: put_signal_set_warp, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4113: put_signal_set_warp, waiting for free basic blocks in the mlx5 send queue
//   site 4114: put_signal_set_warp, waiting for the turn to publish on the mlx5 send queue
//   site 4115: put_signal_set_warp, waiting for the post lock of the mlx5 send queue
//   site 4116: put_signal_set_block, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4117: put_signal_set_block, waiting for free basic blocks in the mlx5 send queue
//   site 4118: put_signal_set_block, waiting for the turn to publish on the mlx5 send queue
//   site 4119: put_signal_set_block, waiting for the post lock of the mlx5 send queue
//   site 4120: put_signal_add_thread, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4121: put_signal_add_thread, waiting for free basic blocks in the mlx5 send queue
//   site 4122: put_signal_add_thread, waiting for the turn to publish on the mlx5 send queue
//   site 4123: put_signal_add_thread, waiting for the post lock of the mlx5 send queue
//   site 4124: put_signal_add_warp, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4125: put_signal_add_warp, waiting for free basic blocks in the mlx5 send queue
//   site 4126: put_signal_add_warp, waiting for the turn to publish on the mlx5 send queue
//   site 4127: put_signal_add_warp, waiting for the post lock of the mlx5 send queue
//   site 4128: put_signal_add_block, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4129: put_signal_add_block, waiting for free basic blocks in the mlx5 send queue
//   site 4130: put_signal_add_block, waiting for the turn to publish on the mlx5 send queue
//   site 4131: put_signal_add_block, waiting for the post lock of the mlx5 send queue
//   site 4132: signal_set_thread, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4133: signal_set_thread, waiting for free basic blocks in the mlx5 send queue
//   site 4134: signal_set_thread, waiting for the turn to publish on the mlx5 send queue
//   site 4135: signal_set_thread, waiting for the post lock of the mlx5 send queue
//   site 4136: signal_set_warp, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4137: signal_set_warp, waiting for free basic blocks in the mlx5 send queue
//   site 4138: signal_set_warp, waiting for the turn to publish on the mlx5 send queue
//   site 4139: signal_set_warp, waiting for the post lock of the mlx5 send queue
//   site 4140: signal_set_block, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4141: signal_set_block, waiting for free basic blocks in the mlx5 send queue
//   site 4142: signal_set_block, waiting for the turn to publish on the mlx5 send queue
//   site 4143: signal_set_block, waiting for the post lock of the mlx5 send queue
//   site 4144: signal_add_thread, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4145: signal_add_thread, waiting for free basic blocks in the mlx5 send queue
//   site 4146: signal_add_thread, waiting for the turn to publish on the mlx5 send queue
//   site 4147: signal_add_thread, waiting for the post lock of the mlx5 send queue
//   site 4148: signal_add_warp, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4149: signal_add_warp, waiting for free basic blocks in the mlx5 send queue
//   site 4150: signal_add_warp, waiting for the turn to publish on the mlx5 send queue
//   site 4151: signal_add_warp, waiting for the post lock of the mlx5 send queue
//   site 4152: signal_add_block, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4153: signal_add_block, waiting for free basic blocks in the mlx5 send queue
//   site 4154: signal_add_block, waiting for the turn to publish on the mlx5 send queue
//   site 4155: signal_add_block, waiting for the post lock of the mlx5 send queue
//   site 4156: fence_thread, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4157: fence_warp, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4158: fence_block, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4159: quiet_thread, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4160: quiet_thread, waiting for a completion on the mlx5 CQ
//   site 4161: quiet_warp, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4162: quiet_warp, waiting for a completion on the mlx5 CQ
//   site 4163: quiet_block, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4164: quiet_block, waiting for a completion on the mlx5 CQ
//   site 4165: wait_signal_eq_thread, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4166: wait_signal_eq_thread, waiting for a flag to equal the value
//   site 4167: wait_signal_eq_warp, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4168: wait_signal_eq_warp, waiting for a flag to equal the value
//   site 4169: wait_signal_eq_block, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4170: wait_signal_eq_block, waiting for a flag to equal the value
//   site 4171: wait_signal_ne_thread, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4172: wait_signal_ne_thread, waiting for a flag to differ from the value
//   site 4173: wait_signal_ne_warp, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4174: wait_signal_ne_warp, waiting for a flag to differ from the value
//   site 4175: wait_signal_ne_block, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4176: wait_signal_ne_block, waiting for a flag to differ from the value
//   site 4177: wait_signal_gt_thread, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4178: wait_signal_gt_thread, waiting for a flag to exceed the value
//   site 4179: wait_signal_gt_warp, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4180: wait_signal_gt_warp, waiting for a flag to exceed the value
//   site 4181: wait_signal_gt_block, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4182: wait_signal_gt_block, waiting for a flag to exceed the value
//   site 4183: wait_signal_le_thread, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4184: wait_signal_le_thread, waiting for a flag to be at most the value
//   site 4185: wait_signal_le_warp, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4186: wait_signal_le_warp, waiting for a flag to be at most the value
//   site 4187: wait_signal_le_block, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4188: wait_signal_le_block, waiting for a flag to be at most the value
//   site 4189: wait_signal_lt_thread, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4190: wait_signal_lt_thread, waiting for a flag to be below the value
//   site 4191: wait_signal_lt_warp, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4192: wait_signal_lt_warp, waiting for a flag to be below the value
//   site 4193: wait_signal_lt_block, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4194: wait_signal_lt_block, waiting for a flag to be below the value
//   site 4195: wait_signal_ge_thread, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4196: wait_signal_ge_thread, waiting for a flag to reach the value
//   site 4197: wait_signal_ge_warp, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4198: wait_signal_ge_warp, waiting for a flag to reach the value
//   site 4199: wait_signal_ge_block, waiting for an endpoint this code supports (a collapsed CQ or a power-of-two CQ ring)
//   site 4200: wait_signal_ge_block, waiting for a flag to reach the value
#pragma once
#include <cstdio>

#if defined(ABOLETH_DEVICE_ARCHIVE_BUILD)
#define ABOLETH_DEVICE_DEFINITION __device__
#else
#define ABOLETH_DEVICE_DEFINITION __device__ inline
#endif

namespace aboleth {

namespace detail {

__device__ __forceinline__ uint32_t lane_in_warp() {
  uint32_t lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  return lane;
}

__device__ __forceinline__ uint32_t thread_in_block() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

__device__ __forceinline__ uint32_t threads_in_block() {
  return blockDim.x * blockDim.y * blockDim.z;
}

__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now) :: "memory");
  return now;
}

// A field of an endpoint handle or a region descriptor: tables the host wrote before the
// launch and nobody writes while kernels run, so a read-only, non-coherent global load
// (ld.global.nc) is correct, and it stays in the read-only cache across the waits' acquires.
__device__ __forceinline__ uint64_t table_load(const uint64_t* field) {
  uint64_t value;
  asm("ld.global.nc.u64 %0, [%1];" : "=l"(value) : "l"(field));
  return value;
}

__device__ __forceinline__ int64_t table_load(const int64_t* field) {
  int64_t value;
  asm("ld.global.nc.s64 %0, [%1];" : "=l"(value) : "l"(field));
  return value;
}

__device__ __forceinline__ uint32_t table_load(const uint32_t* field) {
  uint32_t value;
  asm("ld.global.nc.u32 %0, [%1];" : "=r"(value) : "l"(field));
  return value;
}

// Thread `lane` of `lanes` stores its share of `count` elements from `from` to `to` (plain,
// weakly ordered stores, as tier 2's copies). Each thread loads COPY_UNROLL elements before it
// stores them, so that a lone thread keeps that many loads in flight instead of waiting for
// each; source and destination do not overlap (__restrict__), so the compiler may also start
// the next loads before the stores. (Global-space PTX accesses in program order measured
// slower at 16 KiB-1 MiB: 2026-12-02-bench-nvidia-h200-2ranks-mps-tier1-nc.)
template <typename Element>
__device__ __forceinline__ void copy_elements(Element* __restrict__ to, const Element* __restrict__ from,
                                              uint64_t count, uint32_t lane, uint32_t lanes) {
  constexpr uint32_t COPY_UNROLL = 8;
  uint64_t i = lane;
  for (; i + (COPY_UNROLL - 1) * uint64_t(lanes) < count; i += COPY_UNROLL * uint64_t(lanes)) {
    Element staged[COPY_UNROLL];
#pragma unroll
    for (uint32_t k = 0; k < COPY_UNROLL; ++k) staged[k] = from[i + k * uint64_t(lanes)];
#pragma unroll
    for (uint32_t k = 0; k < COPY_UNROLL; ++k) to[i + k * uint64_t(lanes)] = staged[k];
  }
  for (; i < count; i += lanes) to[i] = from[i];
}

// The copy of a put: 16-byte vectors when source, destination and size are 16-byte aligned,
// words when 8-byte aligned, bytes otherwise.
__device__ __forceinline__ void copy_to_peer(uint64_t destination, uint64_t source, uint64_t bytes,
                                             uint32_t lane, uint32_t lanes) {
  const uint64_t all = destination | source | bytes;
  if ((all & 15) == 0) {
    copy_elements(reinterpret_cast<uint4*>(destination), reinterpret_cast<const uint4*>(source), bytes / 16, lane,
                  lanes);
  } else if ((all & 7) == 0) {
    copy_elements(reinterpret_cast<uint64_t*>(destination), reinterpret_cast<const uint64_t*>(source), bytes / 8,
                  lane, lanes);
  } else {
    copy_elements(reinterpret_cast<uint8_t*>(destination), reinterpret_cast<const uint8_t*>(source), bytes, lane,
                  lanes);
  }
}

// A bounded wait that has polled for 100000 ns reads the bound (ABOLETH_WAIT_TIMEOUT_MS,
// 0: forever) and the abort word from the wait-failure log of `handle`'s rank; past the bound
// or once another wait gave up, it records what it waited for (the tier-2 record) and exits.
static __device__ __noinline__ void give_up(uint64_t log, uint64_t address, uint64_t expected, uint64_t seen,
                                     uint64_t elapsed, uint32_t rank, uint32_t site, int32_t peer,
                                     uint32_t kind) {
  [[maybe_unused]] uint32_t ignored;
  asm volatile("{ .reg .pred %%ab_fits; .reg .u32 %%ab_tid, %%ab_cap32, %%ab_cta; .reg .u64 %%ab_slot, %%ab_cap, %%ab_rec, %%ab_seq; mov.u32 %%ab_tid, %%tid.x; mov.u32 %%ab_cta, %%ctaid.x; atom.relaxed.sys.global.add.u64 %%ab_slot, [%1+0], 1; ld.global.u32 %%ab_cap32, [%1+8]; cvt.u64.u32 %%ab_cap, %%ab_cap32; setp.lt.u64 %%ab_fits, %%ab_slot, %%ab_cap; mad.lo.u64 %%ab_rec, %%ab_slot, 64, %1; add.u64 %%ab_rec, %%ab_rec, 64; @%%ab_fits st.global.u64 [%%ab_rec+8], %2; @%%ab_fits st.global.u64 [%%ab_rec+16], %3; @%%ab_fits st.global.u64 [%%ab_rec+24], %4; @%%ab_fits st.global.u64 [%%ab_rec+32], %5; @%%ab_fits st.global.u32 [%%ab_rec+40], %6; @%%ab_fits st.global.u32 [%%ab_rec+44], %8; @%%ab_fits st.global.u32 [%%ab_rec+48], %7; @%%ab_fits st.global.u32 [%%ab_rec+52], %9; @%%ab_fits st.global.u32 [%%ab_rec+56], %%ab_cta; @%%ab_fits st.global.u32 [%%ab_rec+60], %%ab_tid; add.u64 %%ab_seq, %%ab_slot, 1; @%%ab_fits st.release.sys.global.u64 [%%ab_rec+0], %%ab_seq; st.relaxed.sys.global.u64 [%1+16], 1; exit; mov.u32 %0, 0; }"
               : "=r"(ignored)
               : "l"(log), "l"(address), "l"(expected), "l"(seen), "l"(elapsed), "r"(rank), "r"(site),
                 "r"(peer), "r"(kind)
               : "memory");
}

__device__ __forceinline__ void give_up_if_overdue(uint64_t handle, uint64_t start, uint64_t address,
                                                   uint64_t expected, uint64_t seen, int32_t peer,
                                                   uint32_t site, uint32_t kind) {
  const uint64_t elapsed = globaltimer() - start;
  if (elapsed <= 100000u) return;
  const EndpointHandle* endpoint = reinterpret_cast<const EndpointHandle*>(handle);
  const WaitFailureLogHeader* log =
      reinterpret_cast<const WaitFailureLogHeader*>(endpoint->wait_failure_log_address);
  uint64_t timeout, abort;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(timeout) : "l"(&log->timeout_nanoseconds) : "memory");
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(abort) : "l"(&log->abort_requested) : "memory");
  if ((timeout != 0 && elapsed > timeout) || abort != 0) {
    give_up(endpoint->wait_failure_log_address, address, expected, seen, elapsed, endpoint->local_rank,
            site, peer, kind);
  }
}

}  // namespace detail

// The values of aboleth_abi's mlx5 constants the bodies use.
namespace mlx5 {
constexpr uint32_t OPCODE_NOP = 0x0u;
constexpr uint32_t OPCODE_RDMA_WRITE = 0x8u;
constexpr uint32_t OPCODE_RDMA_WRITE_IMM = 0x9u;
constexpr uint32_t OPCODE_ATOMIC_FA = 0x12u;
constexpr uint32_t OPCODE_ATOMIC_MASKED_CS = 0x14u;
constexpr uint32_t EXTENDED_ATOMIC_OPMOD_8_BYTES = 0x9u;
constexpr uint32_t WQE_CTRL_CQ_UPDATE = 0x8u;
constexpr uint32_t FENCE_MODE_INITIATOR_SMALL = 0x20u;
constexpr uint32_t PERIODIC_COMPLETION_RING_FRACTION = 0x4u;
constexpr uint32_t CQE_OPCODE_INVALID = 0xfu;
constexpr uint32_t CQE_OPCODE_REQUESTER_ERROR = 0xdu;
constexpr uint32_t CQE_OPCODE_RESPONDER_ERROR = 0xeu;
constexpr uint32_t TRANSPORT_MLX5 = 0x1u;
constexpr uint32_t ENDPOINT_FLAG_HOST_RINGS_DOORBELL = 0x2u;
constexpr uint32_t WAIT_KIND_UNSUPPORTED_ENDPOINT = 0x6u;
constexpr uint32_t CQ_RING_PROGRESS_WORD = 0x2u;
constexpr uint32_t CQ_RING_WORD_XOR = 0xf0000000u;
}  // namespace mlx5

namespace detail {

// PTX prmt (nvcc's __byte_perm, which clang's header-less bitcode build lacks).
__device__ __forceinline__ uint32_t byte_permute(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t result;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(result) : "r"(a), "r"(b), "r"(selector));
  return result;
}

// A big-endian field: the bytes of `value`, most significant first.
__device__ __forceinline__ void store_be32(uint8_t* field, uint32_t value) {
  *reinterpret_cast<uint32_t*>(field) = byte_permute(value, 0, 0x0123);
}

__device__ __forceinline__ void store_be64(uint8_t* field, uint64_t value) {
  store_be32(field, static_cast<uint32_t>(value >> 32));
  store_be32(field + 4, static_cast<uint32_t>(value));
}

// The control segment: both words big-endian, signature and DC stream channel 0, fm_ce_se,
// and the immediate (big-endian; 0 when there is none).
__device__ __forceinline__ void mlx5_control(Mlx5ControlSegment* control, uint32_t opmod_idx_opcode,
                                             uint32_t qpn_ds, uint8_t fm_ce_se, uint32_t immediate) {
  store_be32(control->opmod_idx_opcode, opmod_idx_opcode);
  store_be32(control->qpn_ds, qpn_ds);
  // signature, dci_stream_channel_id and fm_ce_se as one word, fm_ce_se in its last byte.
  *reinterpret_cast<uint32_t*>(&control->signature) = static_cast<uint32_t>(fm_ce_se) << 24;
  store_be32(control->imm, immediate);
}

__device__ __forceinline__ void mlx5_remote(Mlx5RemoteAddressSegment* remote, uint64_t address, uint32_t rkey) {
  store_be64(remote->raddr, address);
  store_be32(remote->rkey, rkey);
  store_be32(remote->reserved, 0);
}

__device__ __forceinline__ void mlx5_data(Mlx5DataSegment* data, uint32_t bytes, uint32_t lkey, uint64_t address) {
  store_be32(data->byte_count, bytes);
  store_be32(data->lkey, lkey);
  store_be64(data->addr, address);
}

__device__ __forceinline__ void mlx5_fetch_add(Mlx5AtomicSegment* atomic, uint64_t value) {
  store_be64(atomic->swap_add, value);
  store_be64(atomic->compare, 0);
}

// An 8-byte masked compare-and-swap with compare mask 0: an unconditional swap.
__device__ __forceinline__ void mlx5_masked_swap(Mlx5MaskedCompareSwap64Segment* swap, uint64_t value) {
  store_be64(swap->swap, value);
  store_be64(swap->compare, 0);
  store_be64(swap->swap_mask, ~uint64_t{0});
  store_be64(swap->compare_mask, 0);
}

// aboleth_abi::mlx5::periodic_completion: a WQE asks for a completion where it starts at or
// covers a quarter of the ring, or where the program asked for one.
__device__ __forceinline__ int64_t mlx5_periodic_completion(uint64_t slot, uint64_t blocks, uint64_t ring,
                                                            bool requested) {
  int64_t quarter = static_cast<int64_t>(ring) / mlx5::PERIODIC_COMPLETION_RING_FRACTION;
  if (quarter < 1) quarter = 1;
  const int64_t within = static_cast<int64_t>(slot) % quarter;
  return (within == 0 || within + static_cast<int64_t>(blocks) > quarter || requested) ? 1 : 0;
}

// The management block's spare words: the last WQE that asked for a completion (its first
// basic block, then its end).
__device__ __forceinline__ void mlx5_note_posted(uint64_t management, uint64_t slot, uint64_t end) {
  uint64_t* last = reinterpret_cast<uint64_t*>(reinterpret_cast<Mlx5QueueManagement*>(management)->reserved);
  [[maybe_unused]] uint64_t old;
  asm volatile("atom.relaxed.gpu.global.max.u64 %0, [%1], %2;" : "=l"(old) : "l"(last), "l"(slot) : "memory");
  asm volatile("atom.relaxed.gpu.global.max.u64 %0, [%1], %2;" : "=l"(old) : "l"(last + 1), "l"(end) : "memory");
}

__device__ __forceinline__ uint64_t mlx5_last_posted(uint64_t last, int word) {
  uint64_t value;
  asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(value) : "l"(reinterpret_cast<uint64_t*>(last) + word)
               : "memory");
  return value;
}

// The send counter (the low 16 bits of the end, big-endian) in the doorbell record; with
// `atomic_max` the largest end any producer recorded in `producer` wins.
// On the staged path (ENDPOINT_FLAG_HOST_RINGS_DOORBELL) a host thread reads the record as the
// doorbell, before any later fence of this thread: the store releases the WQEs itself.
__device__ __forceinline__ void mlx5_doorbell_record(Mlx5DoorbellRecord* record, uint64_t producer, uint64_t end,
                                                     bool atomic_max, bool relaxed, uint32_t flags) {
  if ((flags & mlx5::ENDPOINT_FLAG_HOST_RINGS_DOORBELL) != 0) relaxed = false;
  if (atomic_max) {
    uint64_t old;
    asm volatile("atom.relaxed.gpu.global.max.u64 %0, [%1], %2;" : "=l"(old) : "l"(producer), "l"(end) : "memory");
    if (old > end) end = old;
  }
  const uint32_t counter = byte_permute(static_cast<uint32_t>(end) & 0xffffu, 0, 0x0123);
  if (relaxed) {
    asm volatile("st.volatile.global.b32 [%0], %1;" :: "l"(record->send_counter), "r"(counter) : "memory");
  } else {
    asm volatile("st.release.sys.global.b32 [%0], %1;" :: "l"(record->send_counter), "r"(counter) : "memory");
  }
}

// {BE32(producer_index << 8), BE32(qpn << 8)}: one 8-byte MMIO store, after a system fence (the
// WQE and doorbell-record stores must reach the NIC first; a release orders only what precedes
// it, not the MMIO store after it). On a shared queue another producer may already have
// recorded a larger index: ring the largest (never backwards).
// On the staged path the host rings: no store (the handle has no UAR address then).
__device__ __forceinline__ void mlx5_ring_doorbell(uint64_t uar, uint64_t producer, uint64_t end, uint32_t qpn,
                                                   uint32_t flags) {
  if ((flags & mlx5::ENDPOINT_FLAG_HOST_RINGS_DOORBELL) != 0) return;
  uint64_t largest;
  asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(largest) : "l"(producer) : "memory");
  if (end > largest) largest = end;
  const uint32_t low = byte_permute((static_cast<uint32_t>(largest) & 0xffffu) << 8, 0, 0x0123);
  const uint32_t high = byte_permute(qpn << 8, 0, 0x0123);
  const uint64_t value = (static_cast<uint64_t>(high) << 32) | low;
  asm volatile("fence.sc.sys;" ::: "memory");
  asm volatile("st.mmio.relaxed.sys.global.b64 [%0], %1;" :: "l"(uar), "l"(value) : "memory");
}

// The collapsed CQ's CQE word at wqe_counter, read as one little-endian word: the counter
// (big-endian 16 bits) in its low half, op_own in its top byte.
__device__ __forceinline__ uint32_t mlx5_cqe_counter(uint32_t word) { return byte_permute(word, 0, 0x4401); }

// True while the CQE does not yet report the WQE at `target` (no CQE yet, or an earlier one); a
// requester-error CQE traps.
__device__ __forceinline__ bool mlx5_completion_pending(uint32_t word, uint64_t target) {
  const uint32_t opcode = word >> 28;
  if (opcode == mlx5::CQE_OPCODE_REQUESTER_ERROR) __trap();
  const uint32_t distance = (mlx5_cqe_counter(word) - static_cast<uint32_t>(target)) & 0xffffu;
  return opcode == mlx5::CQE_OPCODE_INVALID || distance >= 0x8000u;
}

// The newest CQE's word (wqe_counter in its low half, op_own in its top byte). A collapsed CQ:
// slot 0's. A CQ ring (cq_collapsed 0): one step of following it first, as tier 2's
// cq_ring_advance.ptx does: the management block's ring-progress word holds the CQEs consumed
// (high half) and the newest one's word XOR CQ_RING_WORD_XOR (low half: a zeroed word reads as no
// CQE); a CQE of this lap (opcode valid, owner bit the lap's parity) is taken with one
// compare-and-swap (another thread that took it first leaves it to the next step).
__device__ __forceinline__ uint32_t mlx5_newest_cqe_word(uint64_t handle, uint64_t management) {
  const EndpointHandle* endpoint = reinterpret_cast<const EndpointHandle*>(handle);
  const uint64_t cq = table_load(&endpoint->cq_buffer_address);
  const uint64_t counter_offset = __builtin_offsetof(Mlx5Cqe64, wqe_counter);
  uint32_t word;
  if (table_load(&endpoint->cq_collapsed) != 0) {
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(word) : "l"(cq + counter_offset) : "memory");
    return word;
  }
  uint64_t* progress = reinterpret_cast<uint64_t*>(reinterpret_cast<Mlx5QueueManagement*>(management)->reserved) +
                       mlx5::CQ_RING_PROGRESS_WORD;
  uint64_t seen;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(seen) : "l"(progress) : "memory");
  const uint32_t consumed = static_cast<uint32_t>(seen >> 32);
  const uint32_t count = table_load(&endpoint->cqe_count);
  const uint64_t slot = cq + static_cast<uint64_t>(consumed & (count - 1)) * sizeof(Mlx5Cqe64);
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(word) : "l"(slot + counter_offset) : "memory");
  const uint32_t lap = (consumed / count) & 1u;
  if ((word >> 28) != mlx5::CQE_OPCODE_INVALID && ((word >> 24) & 1u) == lap) {
    const uint64_t next = (static_cast<uint64_t>(consumed + 1) << 32) | (word ^ mlx5::CQ_RING_WORD_XOR);
    [[maybe_unused]] uint64_t old;
    asm volatile("atom.acq_rel.gpu.global.cas.b64 %0, [%1], %2, %3;"
                 : "=l"(old) : "l"(progress), "l"(seen), "l"(next) : "memory");
    seen = next;
  }
  return static_cast<uint32_t>(seen) ^ mlx5::CQ_RING_WORD_XOR;
}

// While a reservation waits for ring space: when the CQE reports a WQE at or past the consumer
// index, free through that WQE's first block (completions are cumulative; the WQE's size is
// not in the CQE). An error CQE traps. The simulator's `reclaim_mlx5_ring` does the same.
__device__ __forceinline__ void mlx5_reclaim_from_cq(uint32_t word, uint64_t consumer) {
  const uint32_t opcode = word >> 28;
  if (opcode == mlx5::CQE_OPCODE_REQUESTER_ERROR || opcode == mlx5::CQE_OPCODE_RESPONDER_ERROR) __trap();
  if (opcode == mlx5::CQE_OPCODE_INVALID) return;
  uint64_t consumed;
  asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(consumed) : "l"(consumer) : "memory");
  const uint32_t distance = (mlx5_cqe_counter(word) - static_cast<uint32_t>(consumed)) & 0xffffu;
  if (distance < 0x8000u) {
    [[maybe_unused]] uint64_t old;
    asm volatile("atom.relaxed.gpu.global.max.u64 %0, [%1], %2;"
                 : "=l"(old) : "l"(consumer), "l"(consumed + distance + 1) : "memory");
  }
}

// The endpoint check: this library polls a collapsed CQ (cq_collapsed 1) or follows a CQ ring
// (0) of a power-of-two cqe_count; an mlx5 handle that says otherwise is recorded
// (WAIT_KIND_UNSUPPORTED_ENDPOINT, with its cq_collapsed and cqe_count) and the thread exits
// before posting anything. (A handle to this rank itself is p2p.)
__device__ __forceinline__ void mlx5_exit_unless_supported_endpoint(uint64_t handle, uint32_t site) {
  const EndpointHandle* endpoint = reinterpret_cast<const EndpointHandle*>(handle);
  const uint32_t collapsed = table_load(&endpoint->cq_collapsed);
  const uint32_t count = table_load(&endpoint->cqe_count);
  const bool bad_ring = collapsed == 0 && (count == 0 || (count & (count - 1)) != 0);
  if (table_load(&endpoint->transport) == mlx5::TRANSPORT_MLX5 && (collapsed > 1 || bad_ring)) {
    give_up(table_load(&endpoint->wait_failure_log_address), handle, collapsed,
            table_load(&endpoint->cqe_count), 0,
            table_load(&endpoint->local_rank), site, static_cast<int32_t>(table_load(&endpoint->peer_rank)),
            mlx5::WAIT_KIND_UNSUPPORTED_ENDPOINT);
  }
}

}  // namespace detail

namespace detail {

// A call the library cannot carry out: say why, then stop the kernel (the host sees the launch fail).
static __device__ __noinline__ void refuse(const char* why) {
  printf("%s\n", why);
  __trap();
}

}  // namespace detail

namespace generated {

__device__ __forceinline__ void put_thread(uint64_t endpoints, int64_t peer, uint64_t dst_table, int64_t dst_offset, uint64_t src, int32_t src_key, int64_t bytes) {
  [[maybe_unused]] const uint32_t ab_lane = 0u;
  [[maybe_unused]] const uint32_t ab_lanes = 1u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4096u);
  [[maybe_unused]] const uint64_t ab_descriptor1 = dst_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_offset2 = static_cast<uint64_t>(dst_offset) * 1u;
  [[maybe_unused]] const uint64_t ab_management3 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->management_address);
  [[maybe_unused]] const uint32_t ab_sq4 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_wqe_basic_block_count);
  uint64_t ab_base5 = 0;
  if (ab_leader) { asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(ab_base5) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->reserved_head)), "l"(static_cast<uint64_t>(INT64_C(1))) : "memory"); }
  [[maybe_unused]] const uint64_t ab_end6 = ab_base5 + static_cast<uint64_t>(INT64_C(1));
  [[maybe_unused]] const uint64_t ab_needed7 = ab_end6 - static_cast<uint64_t>(ab_sq4);
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        detail::mlx5_reclaim_from_cq(detail::mlx5_newest_cqe_word(ab_endpoint0, ab_management3), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index)); asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index)) : "memory");
        if (!(static_cast<int64_t>(ab_end6 - ab_seen) > static_cast<int64_t>(static_cast<uint64_t>(ab_sq4)))) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index), ab_needed7, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4097u, 1u);
      }
    }
  }
  [[maybe_unused]] const int64_t ab_v8 = static_cast<int64_t>(ab_base5) + INT64_C(0);
  [[maybe_unused]] const int64_t ab_v9 = static_cast<int64_t>(src_key);
  [[maybe_unused]] const uint64_t ab_address10 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address) + ab_offset2;
  [[maybe_unused]] const uint32_t ab_rkey11 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->rkey);
  [[maybe_unused]] const uint64_t ab_sq12 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_buffer_address);
  [[maybe_unused]] const uint64_t ab_block13 = ab_sq12 + ((static_cast<uint64_t>(ab_v8) + 0u) % static_cast<uint64_t>(ab_sq4)) * 64u;
  [[maybe_unused]] const int64_t ab_completion14 = detail::mlx5_periodic_completion(static_cast<uint64_t>(ab_v8), 1u, static_cast<uint64_t>(ab_sq4), INT64_C(1) != 0);
  [[maybe_unused]] const uint32_t ab_qpn15 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->qpn);
  if (ab_leader) { if (INT64_C(1) != 0) { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block13 + 0u), ((0u << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v8)) & 0xffffu) << 8) | mlx5::OPCODE_RDMA_WRITE), ((ab_qpn15 << 8) | 3u), static_cast<uint8_t>((ab_completion14 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); detail::mlx5_remote(reinterpret_cast<Mlx5RemoteAddressSegment*>(ab_block13 + 16u), ab_address10, ab_rkey11); detail::mlx5_data(reinterpret_cast<Mlx5DataSegment*>(ab_block13 + 32u), static_cast<uint32_t>(bytes), static_cast<uint32_t>(ab_v9), src); } else { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block13 + 0u), ((0u << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v8)) & 0xffffu) << 8) | mlx5::OPCODE_NOP), ((ab_qpn15 << 8) | 4u), static_cast<uint8_t>((ab_completion14 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); } }
  if (ab_leader) { if (ab_completion14 != 0) detail::mlx5_note_posted(ab_management3, static_cast<uint64_t>(ab_v8), static_cast<uint64_t>(ab_v8) + 1u); }
  [[maybe_unused]] const int64_t ab_v16 = static_cast<int64_t>(ab_base5) + INT64_C(1);
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  [[maybe_unused]] const uint64_t ab_end17 = ab_base5 + static_cast<uint64_t>(INT64_C(1));
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head)) : "memory");
        if (!(ab_seen != ab_base5)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head), ab_base5, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4098u, 3u);
      }
    }
  }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head)), "l"(ab_end17) : "memory"); }
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("atom.acquire.gpu.global.cas.b64 %0, [%1], 0, 1;" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock)) : "memory");
        if (!(ab_seen != 0)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock), 0u, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4099u, 4u);
      }
    }
  }
  [[maybe_unused]] const uint64_t ab_doorbell18 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->doorbell_record_address);
  [[maybe_unused]] const uint32_t ab_flags19 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->flags);
  if (ab_leader) { detail::mlx5_doorbell_record(reinterpret_cast<Mlx5DoorbellRecord*>(ab_doorbell18), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->producer_index), static_cast<uint64_t>(ab_v16), true, false, ab_flags19); }
  [[maybe_unused]] const uint64_t ab_uar20 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->uar_doorbell_address);
  if (ab_leader) { detail::mlx5_ring_doorbell(ab_uar20, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->producer_index), static_cast<uint64_t>(ab_v16), ab_qpn15, ab_flags19); }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock)), "l"(uint64_t{0}) : "memory"); }
}

__device__ __forceinline__ void put_warp(uint64_t endpoints, int64_t peer, uint64_t dst_table, int64_t dst_offset, uint64_t src, int32_t src_key, int64_t bytes) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4100u);
  [[maybe_unused]] const uint64_t ab_descriptor1 = dst_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_offset2 = static_cast<uint64_t>(dst_offset) * 1u;
  [[maybe_unused]] const uint64_t ab_management3 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->management_address);
  [[maybe_unused]] const uint32_t ab_sq4 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_wqe_basic_block_count);
  __syncwarp();
  uint64_t ab_base5 = 0;
  if (ab_leader) { asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(ab_base5) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->reserved_head)), "l"(static_cast<uint64_t>(INT64_C(1))) : "memory"); }
  [[maybe_unused]] const uint64_t ab_end6 = ab_base5 + static_cast<uint64_t>(INT64_C(1));
  [[maybe_unused]] const uint64_t ab_needed7 = ab_end6 - static_cast<uint64_t>(ab_sq4);
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        detail::mlx5_reclaim_from_cq(detail::mlx5_newest_cqe_word(ab_endpoint0, ab_management3), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index)); asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index)) : "memory");
        if (!(static_cast<int64_t>(ab_end6 - ab_seen) > static_cast<int64_t>(static_cast<uint64_t>(ab_sq4)))) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index), ab_needed7, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4101u, 1u);
      }
    }
  }
  [[maybe_unused]] const int64_t ab_v8 = static_cast<int64_t>(ab_base5) + INT64_C(0);
  [[maybe_unused]] const int64_t ab_v9 = static_cast<int64_t>(src_key);
  [[maybe_unused]] const uint64_t ab_address10 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address) + ab_offset2;
  [[maybe_unused]] const uint32_t ab_rkey11 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->rkey);
  [[maybe_unused]] const uint64_t ab_sq12 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_buffer_address);
  [[maybe_unused]] const uint64_t ab_block13 = ab_sq12 + ((static_cast<uint64_t>(ab_v8) + 0u) % static_cast<uint64_t>(ab_sq4)) * 64u;
  [[maybe_unused]] const int64_t ab_completion14 = detail::mlx5_periodic_completion(static_cast<uint64_t>(ab_v8), 1u, static_cast<uint64_t>(ab_sq4), INT64_C(1) != 0);
  [[maybe_unused]] const uint32_t ab_qpn15 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->qpn);
  if (ab_leader) { if (INT64_C(1) != 0) { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block13 + 0u), ((0u << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v8)) & 0xffffu) << 8) | mlx5::OPCODE_RDMA_WRITE), ((ab_qpn15 << 8) | 3u), static_cast<uint8_t>((ab_completion14 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); detail::mlx5_remote(reinterpret_cast<Mlx5RemoteAddressSegment*>(ab_block13 + 16u), ab_address10, ab_rkey11); detail::mlx5_data(reinterpret_cast<Mlx5DataSegment*>(ab_block13 + 32u), static_cast<uint32_t>(bytes), static_cast<uint32_t>(ab_v9), src); } else { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block13 + 0u), ((0u << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v8)) & 0xffffu) << 8) | mlx5::OPCODE_NOP), ((ab_qpn15 << 8) | 4u), static_cast<uint8_t>((ab_completion14 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); } }
  if (ab_leader) { if (ab_completion14 != 0) detail::mlx5_note_posted(ab_management3, static_cast<uint64_t>(ab_v8), static_cast<uint64_t>(ab_v8) + 1u); }
  [[maybe_unused]] const int64_t ab_v16 = static_cast<int64_t>(ab_base5) + INT64_C(1);
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  [[maybe_unused]] const uint64_t ab_end17 = ab_base5 + static_cast<uint64_t>(INT64_C(1));
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head)) : "memory");
        if (!(ab_seen != ab_base5)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head), ab_base5, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4102u, 3u);
      }
    }
  }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head)), "l"(ab_end17) : "memory"); }
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("atom.acquire.gpu.global.cas.b64 %0, [%1], 0, 1;" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock)) : "memory");
        if (!(ab_seen != 0)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock), 0u, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4103u, 4u);
      }
    }
  }
  [[maybe_unused]] const uint64_t ab_doorbell18 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->doorbell_record_address);
  [[maybe_unused]] const uint32_t ab_flags19 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->flags);
  if (ab_leader) { detail::mlx5_doorbell_record(reinterpret_cast<Mlx5DoorbellRecord*>(ab_doorbell18), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->producer_index), static_cast<uint64_t>(ab_v16), true, false, ab_flags19); }
  [[maybe_unused]] const uint64_t ab_uar20 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->uar_doorbell_address);
  if (ab_leader) { detail::mlx5_ring_doorbell(ab_uar20, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->producer_index), static_cast<uint64_t>(ab_v16), ab_qpn15, ab_flags19); }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock)), "l"(uint64_t{0}) : "memory"); }
}

__device__ __forceinline__ void put_block(uint64_t endpoints, int64_t peer, uint64_t dst_table, int64_t dst_offset, uint64_t src, int32_t src_key, int64_t bytes) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4104u);
  [[maybe_unused]] const uint64_t ab_descriptor1 = dst_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_offset2 = static_cast<uint64_t>(dst_offset) * 1u;
  [[maybe_unused]] const uint64_t ab_management3 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->management_address);
  [[maybe_unused]] const uint32_t ab_sq4 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_wqe_basic_block_count);
  __syncthreads();
  uint64_t ab_base5 = 0;
  if (ab_leader) { asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(ab_base5) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->reserved_head)), "l"(static_cast<uint64_t>(INT64_C(1))) : "memory"); }
  [[maybe_unused]] const uint64_t ab_end6 = ab_base5 + static_cast<uint64_t>(INT64_C(1));
  [[maybe_unused]] const uint64_t ab_needed7 = ab_end6 - static_cast<uint64_t>(ab_sq4);
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        detail::mlx5_reclaim_from_cq(detail::mlx5_newest_cqe_word(ab_endpoint0, ab_management3), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index)); asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index)) : "memory");
        if (!(static_cast<int64_t>(ab_end6 - ab_seen) > static_cast<int64_t>(static_cast<uint64_t>(ab_sq4)))) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index), ab_needed7, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4105u, 1u);
      }
    }
  }
  [[maybe_unused]] const int64_t ab_v8 = static_cast<int64_t>(ab_base5) + INT64_C(0);
  [[maybe_unused]] const int64_t ab_v9 = static_cast<int64_t>(src_key);
  [[maybe_unused]] const uint64_t ab_address10 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address) + ab_offset2;
  [[maybe_unused]] const uint32_t ab_rkey11 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->rkey);
  [[maybe_unused]] const uint64_t ab_sq12 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_buffer_address);
  [[maybe_unused]] const uint64_t ab_block13 = ab_sq12 + ((static_cast<uint64_t>(ab_v8) + 0u) % static_cast<uint64_t>(ab_sq4)) * 64u;
  [[maybe_unused]] const int64_t ab_completion14 = detail::mlx5_periodic_completion(static_cast<uint64_t>(ab_v8), 1u, static_cast<uint64_t>(ab_sq4), INT64_C(1) != 0);
  [[maybe_unused]] const uint32_t ab_qpn15 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->qpn);
  if (ab_leader) { if (INT64_C(1) != 0) { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block13 + 0u), ((0u << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v8)) & 0xffffu) << 8) | mlx5::OPCODE_RDMA_WRITE), ((ab_qpn15 << 8) | 3u), static_cast<uint8_t>((ab_completion14 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); detail::mlx5_remote(reinterpret_cast<Mlx5RemoteAddressSegment*>(ab_block13 + 16u), ab_address10, ab_rkey11); detail::mlx5_data(reinterpret_cast<Mlx5DataSegment*>(ab_block13 + 32u), static_cast<uint32_t>(bytes), static_cast<uint32_t>(ab_v9), src); } else { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block13 + 0u), ((0u << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v8)) & 0xffffu) << 8) | mlx5::OPCODE_NOP), ((ab_qpn15 << 8) | 4u), static_cast<uint8_t>((ab_completion14 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); } }
  if (ab_leader) { if (ab_completion14 != 0) detail::mlx5_note_posted(ab_management3, static_cast<uint64_t>(ab_v8), static_cast<uint64_t>(ab_v8) + 1u); }
  [[maybe_unused]] const int64_t ab_v16 = static_cast<int64_t>(ab_base5) + INT64_C(1);
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  [[maybe_unused]] const uint64_t ab_end17 = ab_base5 + static_cast<uint64_t>(INT64_C(1));
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head)) : "memory");
        if (!(ab_seen != ab_base5)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head), ab_base5, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4106u, 3u);
      }
    }
  }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head)), "l"(ab_end17) : "memory"); }
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("atom.acquire.gpu.global.cas.b64 %0, [%1], 0, 1;" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock)) : "memory");
        if (!(ab_seen != 0)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock), 0u, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4107u, 4u);
      }
    }
  }
  [[maybe_unused]] const uint64_t ab_doorbell18 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->doorbell_record_address);
  [[maybe_unused]] const uint32_t ab_flags19 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->flags);
  if (ab_leader) { detail::mlx5_doorbell_record(reinterpret_cast<Mlx5DoorbellRecord*>(ab_doorbell18), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->producer_index), static_cast<uint64_t>(ab_v16), true, false, ab_flags19); }
  [[maybe_unused]] const uint64_t ab_uar20 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->uar_doorbell_address);
  if (ab_leader) { detail::mlx5_ring_doorbell(ab_uar20, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->producer_index), static_cast<uint64_t>(ab_v16), ab_qpn15, ab_flags19); }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock)), "l"(uint64_t{0}) : "memory"); }
}

__device__ __forceinline__ void put_signal_set_thread(uint64_t endpoints, int64_t peer, uint64_t dst_table, int64_t dst_offset, uint64_t src, int32_t src_key, int64_t bytes, uint64_t flag_table, int64_t flag_index, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = 0u;
  [[maybe_unused]] const uint32_t ab_lanes = 1u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4108u);
  [[maybe_unused]] const uint64_t ab_descriptor1 = dst_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_descriptor2 = flag_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_offset3 = static_cast<uint64_t>(dst_offset) * 1u;
  [[maybe_unused]] const uint64_t ab_management4 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->management_address);
  [[maybe_unused]] const uint32_t ab_sq5 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_wqe_basic_block_count);
  uint64_t ab_base6 = 0;
  if (ab_leader) { asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(ab_base6) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->reserved_head)), "l"(static_cast<uint64_t>(INT64_C(3))) : "memory"); }
  [[maybe_unused]] const uint64_t ab_end7 = ab_base6 + static_cast<uint64_t>(INT64_C(3));
  [[maybe_unused]] const uint64_t ab_needed8 = ab_end7 - static_cast<uint64_t>(ab_sq5);
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        detail::mlx5_reclaim_from_cq(detail::mlx5_newest_cqe_word(ab_endpoint0, ab_management4), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->consumer_index)); asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->consumer_index)) : "memory");
        if (!(static_cast<int64_t>(ab_end7 - ab_seen) > static_cast<int64_t>(static_cast<uint64_t>(ab_sq5)))) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->consumer_index), ab_needed8, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4109u, 1u);
      }
    }
  }
  [[maybe_unused]] const int64_t ab_v9 = static_cast<int64_t>(ab_base6) + INT64_C(0);
  [[maybe_unused]] const int64_t ab_v10 = static_cast<int64_t>(src_key);
  [[maybe_unused]] const uint64_t ab_address11 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address) + ab_offset3;
  [[maybe_unused]] const uint32_t ab_rkey12 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->rkey);
  [[maybe_unused]] const uint64_t ab_sq13 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_buffer_address);
  [[maybe_unused]] const uint64_t ab_block14 = ab_sq13 + ((static_cast<uint64_t>(ab_v9) + 0u) % static_cast<uint64_t>(ab_sq5)) * 64u;
  [[maybe_unused]] const int64_t ab_completion15 = detail::mlx5_periodic_completion(static_cast<uint64_t>(ab_v9), 1u, static_cast<uint64_t>(ab_sq5), INT64_C(0) != 0);
  [[maybe_unused]] const uint32_t ab_qpn16 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->qpn);
  if (ab_leader) { if (INT64_C(1) != 0) { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block14 + 0u), ((0u << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v9)) & 0xffffu) << 8) | mlx5::OPCODE_RDMA_WRITE), ((ab_qpn16 << 8) | 3u), static_cast<uint8_t>((ab_completion15 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); detail::mlx5_remote(reinterpret_cast<Mlx5RemoteAddressSegment*>(ab_block14 + 16u), ab_address11, ab_rkey12); detail::mlx5_data(reinterpret_cast<Mlx5DataSegment*>(ab_block14 + 32u), static_cast<uint32_t>(bytes), static_cast<uint32_t>(ab_v10), src); } else { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block14 + 0u), ((0u << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v9)) & 0xffffu) << 8) | mlx5::OPCODE_NOP), ((ab_qpn16 << 8) | 4u), static_cast<uint8_t>((ab_completion15 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); } }
  if (ab_leader) { if (ab_completion15 != 0) detail::mlx5_note_posted(ab_management4, static_cast<uint64_t>(ab_v9), static_cast<uint64_t>(ab_v9) + 1u); }
  [[maybe_unused]] const uint64_t ab_offset17 = static_cast<uint64_t>(flag_index) * 8u;
  [[maybe_unused]] const int64_t ab_v18 = static_cast<int64_t>(ab_base6) + INT64_C(1);
  [[maybe_unused]] const uint64_t ab_address19 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor2)->base_address) + ab_offset17;
  [[maybe_unused]] const uint32_t ab_rkey20 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor2)->rkey);
  [[maybe_unused]] const uint64_t ab_block21 = ab_sq13 + ((static_cast<uint64_t>(ab_v18) + 0u) % static_cast<uint64_t>(ab_sq5)) * 64u;
  [[maybe_unused]] const uint64_t ab_block22 = ab_sq13 + ((static_cast<uint64_t>(ab_v18) + 1u) % static_cast<uint64_t>(ab_sq5)) * 64u;
  [[maybe_unused]] const int64_t ab_completion23 = detail::mlx5_periodic_completion(static_cast<uint64_t>(ab_v18), 2u, static_cast<uint64_t>(ab_sq5), INT64_C(1) != 0);
  [[maybe_unused]] const uint64_t ab_atomic24 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->atomic_result_address);
  [[maybe_unused]] const uint32_t ab_atomic25 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->atomic_result_lkey);
  if (ab_leader) { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block21 + 0u), ((mlx5::EXTENDED_ATOMIC_OPMOD_8_BYTES << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v18)) & 0xffffu) << 8) | mlx5::OPCODE_ATOMIC_MASKED_CS), ((ab_qpn16 << 8) | 5u), static_cast<uint8_t>((ab_completion23 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); detail::mlx5_remote(reinterpret_cast<Mlx5RemoteAddressSegment*>(ab_block21 + 16u), ab_address19, ab_rkey20); detail::mlx5_masked_swap(reinterpret_cast<Mlx5MaskedCompareSwap64Segment*>(ab_block21 + 32u), static_cast<uint64_t>(value)); detail::mlx5_data(reinterpret_cast<Mlx5DataSegment*>(ab_block22 + 0u), 8u, ab_atomic25, ab_atomic24); }
  if (ab_leader) { if (ab_completion23 != 0) detail::mlx5_note_posted(ab_management4, static_cast<uint64_t>(ab_v18), static_cast<uint64_t>(ab_v18) + 2u); }
  [[maybe_unused]] const int64_t ab_v26 = static_cast<int64_t>(ab_base6) + INT64_C(3);
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  [[maybe_unused]] const uint64_t ab_end27 = ab_base6 + static_cast<uint64_t>(INT64_C(3));
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->ready_head)) : "memory");
        if (!(ab_seen != ab_base6)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->ready_head), ab_base6, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4110u, 3u);
      }
    }
  }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->ready_head)), "l"(ab_end27) : "memory"); }
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("atom.acquire.gpu.global.cas.b64 %0, [%1], 0, 1;" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->post_send_lock)) : "memory");
        if (!(ab_seen != 0)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->post_send_lock), 0u, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4111u, 4u);
      }
    }
  }
  [[maybe_unused]] const uint64_t ab_doorbell28 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->doorbell_record_address);
  [[maybe_unused]] const uint32_t ab_flags29 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->flags);
  if (ab_leader) { detail::mlx5_doorbell_record(reinterpret_cast<Mlx5DoorbellRecord*>(ab_doorbell28), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->producer_index), static_cast<uint64_t>(ab_v26), true, false, ab_flags29); }
  [[maybe_unused]] const uint64_t ab_uar30 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->uar_doorbell_address);
  if (ab_leader) { detail::mlx5_ring_doorbell(ab_uar30, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->producer_index), static_cast<uint64_t>(ab_v26), ab_qpn16, ab_flags29); }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->post_send_lock)), "l"(uint64_t{0}) : "memory"); }
}

__device__ __forceinline__ void put_signal_set_warp(uint64_t endpoints, int64_t peer, uint64_t dst_table, int64_t dst_offset, uint64_t src, int32_t src_key, int64_t bytes, uint64_t flag_table, int64_t flag_index, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4112u);
  [[maybe_unused]] const uint64_t ab_descriptor1 = dst_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_descriptor2 = flag_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_offset3 = static_cast<uint64_t>(dst_offset) * 1u;
  [[maybe_unused]] const uint64_t ab_management4 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->management_address);
  [[maybe_unused]] const uint32_t ab_sq5 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_wqe_basic_block_count);
  __syncwarp();
  uint64_t ab_base6 = 0;
  if (ab_leader) { asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(ab_base6) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->reserved_head)), "l"(static_cast<uint64_t>(INT64_C(3))) : "memory"); }
  [[maybe_unused]] const uint64_t ab_end7 = ab_base6 + static_cast<uint64_t>(INT64_C(3));
  [[maybe_unused]] const uint64_t ab_needed8 = ab_end7 - static_cast<uint64_t>(ab_sq5);
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        detail::mlx5_reclaim_from_cq(detail::mlx5_newest_cqe_word(ab_endpoint0, ab_management4), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->consumer_index)); asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->consumer_index)) : "memory");
        if (!(static_cast<int64_t>(ab_end7 - ab_seen) > static_cast<int64_t>(static_cast<uint64_t>(ab_sq5)))) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->consumer_index), ab_needed8, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4113u, 1u);
      }
    }
  }
  [[maybe_unused]] const int64_t ab_v9 = static_cast<int64_t>(ab_base6) + INT64_C(0);
  [[maybe_unused]] const int64_t ab_v10 = static_cast<int64_t>(src_key);
  [[maybe_unused]] const uint64_t ab_address11 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address) + ab_offset3;
  [[maybe_unused]] const uint32_t ab_rkey12 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->rkey);
  [[maybe_unused]] const uint64_t ab_sq13 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_buffer_address);
  [[maybe_unused]] const uint64_t ab_block14 = ab_sq13 + ((static_cast<uint64_t>(ab_v9) + 0u) % static_cast<uint64_t>(ab_sq5)) * 64u;
  [[maybe_unused]] const int64_t ab_completion15 = detail::mlx5_periodic_completion(static_cast<uint64_t>(ab_v9), 1u, static_cast<uint64_t>(ab_sq5), INT64_C(0) != 0);
  [[maybe_unused]] const uint32_t ab_qpn16 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->qpn);
  if (ab_leader) { if (INT64_C(1) != 0) { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block14 + 0u), ((0u << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v9)) & 0xffffu) << 8) | mlx5::OPCODE_RDMA_WRITE), ((ab_qpn16 << 8) | 3u), static_cast<uint8_t>((ab_completion15 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); detail::mlx5_remote(reinterpret_cast<Mlx5RemoteAddressSegment*>(ab_block14 + 16u), ab_address11, ab_rkey12); detail::mlx5_data(reinterpret_cast<Mlx5DataSegment*>(ab_block14 + 32u), static_cast<uint32_t>(bytes), static_cast<uint32_t>(ab_v10), src); } else { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block14 + 0u), ((0u << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v9)) & 0xffffu) << 8) | mlx5::OPCODE_NOP), ((ab_qpn16 << 8) | 4u), static_cast<uint8_t>((ab_completion15 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); } }
  if (ab_leader) { if (ab_completion15 != 0) detail::mlx5_note_posted(ab_management4, static_cast<uint64_t>(ab_v9), static_cast<uint64_t>(ab_v9) + 1u); }
  [[maybe_unused]] const uint64_t ab_offset17 = static_cast<uint64_t>(flag_index) * 8u;
  [[maybe_unused]] const int64_t ab_v18 = static_cast<int64_t>(ab_base6) + INT64_C(1);
  [[maybe_unused]] const uint64_t ab_address19 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor2)->base_address) + ab_offset17;
  [[maybe_unused]] const uint32_t ab_rkey20 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor2)->rkey);
  [[maybe_unused]] const uint64_t ab_block21 = ab_sq13 + ((static_cast<uint64_t>(ab_v18) + 0u) % static_cast<uint64_t>(ab_sq5)) * 64u;
  [[maybe_unused]] const uint64_t ab_block22 = ab_sq13 + ((static_cast<uint64_t>(ab_v18) + 1u) % static_cast<uint64_t>(ab_sq5)) * 64u;
  [[maybe_unused]] const int64_t ab_completion23 = detail::mlx5_periodic_completion(static_cast<uint64_t>(ab_v18), 2u, static_cast<uint64_t>(ab_sq5), INT64_C(1) != 0);
  [[maybe_unused]] const uint64_t ab_atomic24 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->atomic_result_address);
  [[maybe_unused]] const uint32_t ab_atomic25 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->atomic_result_lkey);
  if (ab_leader) { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block21 + 0u), ((mlx5::EXTENDED_ATOMIC_OPMOD_8_BYTES << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v18)) & 0xffffu) << 8) | mlx5::OPCODE_ATOMIC_MASKED_CS), ((ab_qpn16 << 8) | 5u), static_cast<uint8_t>((ab_completion23 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); detail::mlx5_remote(reinterpret_cast<Mlx5RemoteAddressSegment*>(ab_block21 + 16u), ab_address19, ab_rkey20); detail::mlx5_masked_swap(reinterpret_cast<Mlx5MaskedCompareSwap64Segment*>(ab_block21 + 32u), static_cast<uint64_t>(value)); detail::mlx5_data(reinterpret_cast<Mlx5DataSegment*>(ab_block22 + 0u), 8u, ab_atomic25, ab_atomic24); }
  if (ab_leader) { if (ab_completion23 != 0) detail::mlx5_note_posted(ab_management4, static_cast<uint64_t>(ab_v18), static_cast<uint64_t>(ab_v18) + 2u); }
  [[maybe_unused]] const int64_t ab_v26 = static_cast<int64_t>(ab_base6) + INT64_C(3);
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  [[maybe_unused]] const uint64_t ab_end27 = ab_base6 + static_cast<uint64_t>(INT64_C(3));
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->ready_head)) : "memory");
        if (!(ab_seen != ab_base6)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->ready_head), ab_base6, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4114u, 3u);
      }
    }
  }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->ready_head)), "l"(ab_end27) : "memory"); }
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("atom.acquire.gpu.global.cas.b64 %0, [%1], 0, 1;" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->post_send_lock)) : "memory");
        if (!(ab_seen != 0)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->post_send_lock), 0u, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4115u, 4u);
      }
    }
  }
  [[maybe_unused]] const uint64_t ab_doorbell28 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->doorbell_record_address);
  [[maybe_unused]] const uint32_t ab_flags29 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->flags);
  if (ab_leader) { detail::mlx5_doorbell_record(reinterpret_cast<Mlx5DoorbellRecord*>(ab_doorbell28), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->producer_index), static_cast<uint64_t>(ab_v26), true, false, ab_flags29); }
  [[maybe_unused]] const uint64_t ab_uar30 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->uar_doorbell_address);
  if (ab_leader) { detail::mlx5_ring_doorbell(ab_uar30, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->producer_index), static_cast<uint64_t>(ab_v26), ab_qpn16, ab_flags29); }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->post_send_lock)), "l"(uint64_t{0}) : "memory"); }
}

__device__ __forceinline__ void put_signal_set_block(uint64_t endpoints, int64_t peer, uint64_t dst_table, int64_t dst_offset, uint64_t src, int32_t src_key, int64_t bytes, uint64_t flag_table, int64_t flag_index, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4116u);
  [[maybe_unused]] const uint64_t ab_descriptor1 = dst_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_descriptor2 = flag_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_offset3 = static_cast<uint64_t>(dst_offset) * 1u;
  [[maybe_unused]] const uint64_t ab_management4 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->management_address);
  [[maybe_unused]] const uint32_t ab_sq5 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_wqe_basic_block_count);
  __syncthreads();
  uint64_t ab_base6 = 0;
  if (ab_leader) { asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(ab_base6) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->reserved_head)), "l"(static_cast<uint64_t>(INT64_C(3))) : "memory"); }
  [[maybe_unused]] const uint64_t ab_end7 = ab_base6 + static_cast<uint64_t>(INT64_C(3));
  [[maybe_unused]] const uint64_t ab_needed8 = ab_end7 - static_cast<uint64_t>(ab_sq5);
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        detail::mlx5_reclaim_from_cq(detail::mlx5_newest_cqe_word(ab_endpoint0, ab_management4), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->consumer_index)); asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->consumer_index)) : "memory");
        if (!(static_cast<int64_t>(ab_end7 - ab_seen) > static_cast<int64_t>(static_cast<uint64_t>(ab_sq5)))) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->consumer_index), ab_needed8, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4117u, 1u);
      }
    }
  }
  [[maybe_unused]] const int64_t ab_v9 = static_cast<int64_t>(ab_base6) + INT64_C(0);
  [[maybe_unused]] const int64_t ab_v10 = static_cast<int64_t>(src_key);
  [[maybe_unused]] const uint64_t ab_address11 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address) + ab_offset3;
  [[maybe_unused]] const uint32_t ab_rkey12 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->rkey);
  [[maybe_unused]] const uint64_t ab_sq13 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_buffer_address);
  [[maybe_unused]] const uint64_t ab_block14 = ab_sq13 + ((static_cast<uint64_t>(ab_v9) + 0u) % static_cast<uint64_t>(ab_sq5)) * 64u;
  [[maybe_unused]] const int64_t ab_completion15 = detail::mlx5_periodic_completion(static_cast<uint64_t>(ab_v9), 1u, static_cast<uint64_t>(ab_sq5), INT64_C(0) != 0);
  [[maybe_unused]] const uint32_t ab_qpn16 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->qpn);
  if (ab_leader) { if (INT64_C(1) != 0) { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block14 + 0u), ((0u << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v9)) & 0xffffu) << 8) | mlx5::OPCODE_RDMA_WRITE), ((ab_qpn16 << 8) | 3u), static_cast<uint8_t>((ab_completion15 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); detail::mlx5_remote(reinterpret_cast<Mlx5RemoteAddressSegment*>(ab_block14 + 16u), ab_address11, ab_rkey12); detail::mlx5_data(reinterpret_cast<Mlx5DataSegment*>(ab_block14 + 32u), static_cast<uint32_t>(bytes), static_cast<uint32_t>(ab_v10), src); } else { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block14 + 0u), ((0u << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v9)) & 0xffffu) << 8) | mlx5::OPCODE_NOP), ((ab_qpn16 << 8) | 4u), static_cast<uint8_t>((ab_completion15 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); } }
  if (ab_leader) { if (ab_completion15 != 0) detail::mlx5_note_posted(ab_management4, static_cast<uint64_t>(ab_v9), static_cast<uint64_t>(ab_v9) + 1u); }
  [[maybe_unused]] const uint64_t ab_offset17 = static_cast<uint64_t>(flag_index) * 8u;
  [[maybe_unused]] const int64_t ab_v18 = static_cast<int64_t>(ab_base6) + INT64_C(1);
  [[maybe_unused]] const uint64_t ab_address19 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor2)->base_address) + ab_offset17;
  [[maybe_unused]] const uint32_t ab_rkey20 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor2)->rkey);
  [[maybe_unused]] const uint64_t ab_block21 = ab_sq13 + ((static_cast<uint64_t>(ab_v18) + 0u) % static_cast<uint64_t>(ab_sq5)) * 64u;
  [[maybe_unused]] const uint64_t ab_block22 = ab_sq13 + ((static_cast<uint64_t>(ab_v18) + 1u) % static_cast<uint64_t>(ab_sq5)) * 64u;
  [[maybe_unused]] const int64_t ab_completion23 = detail::mlx5_periodic_completion(static_cast<uint64_t>(ab_v18), 2u, static_cast<uint64_t>(ab_sq5), INT64_C(1) != 0);
  [[maybe_unused]] const uint64_t ab_atomic24 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->atomic_result_address);
  [[maybe_unused]] const uint32_t ab_atomic25 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->atomic_result_lkey);
  if (ab_leader) { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block21 + 0u), ((mlx5::EXTENDED_ATOMIC_OPMOD_8_BYTES << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v18)) & 0xffffu) << 8) | mlx5::OPCODE_ATOMIC_MASKED_CS), ((ab_qpn16 << 8) | 5u), static_cast<uint8_t>((ab_completion23 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); detail::mlx5_remote(reinterpret_cast<Mlx5RemoteAddressSegment*>(ab_block21 + 16u), ab_address19, ab_rkey20); detail::mlx5_masked_swap(reinterpret_cast<Mlx5MaskedCompareSwap64Segment*>(ab_block21 + 32u), static_cast<uint64_t>(value)); detail::mlx5_data(reinterpret_cast<Mlx5DataSegment*>(ab_block22 + 0u), 8u, ab_atomic25, ab_atomic24); }
  if (ab_leader) { if (ab_completion23 != 0) detail::mlx5_note_posted(ab_management4, static_cast<uint64_t>(ab_v18), static_cast<uint64_t>(ab_v18) + 2u); }
  [[maybe_unused]] const int64_t ab_v26 = static_cast<int64_t>(ab_base6) + INT64_C(3);
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  [[maybe_unused]] const uint64_t ab_end27 = ab_base6 + static_cast<uint64_t>(INT64_C(3));
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->ready_head)) : "memory");
        if (!(ab_seen != ab_base6)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->ready_head), ab_base6, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4118u, 3u);
      }
    }
  }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->ready_head)), "l"(ab_end27) : "memory"); }
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("atom.acquire.gpu.global.cas.b64 %0, [%1], 0, 1;" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->post_send_lock)) : "memory");
        if (!(ab_seen != 0)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->post_send_lock), 0u, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4119u, 4u);
      }
    }
  }
  [[maybe_unused]] const uint64_t ab_doorbell28 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->doorbell_record_address);
  [[maybe_unused]] const uint32_t ab_flags29 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->flags);
  if (ab_leader) { detail::mlx5_doorbell_record(reinterpret_cast<Mlx5DoorbellRecord*>(ab_doorbell28), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->producer_index), static_cast<uint64_t>(ab_v26), true, false, ab_flags29); }
  [[maybe_unused]] const uint64_t ab_uar30 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->uar_doorbell_address);
  if (ab_leader) { detail::mlx5_ring_doorbell(ab_uar30, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->producer_index), static_cast<uint64_t>(ab_v26), ab_qpn16, ab_flags29); }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->post_send_lock)), "l"(uint64_t{0}) : "memory"); }
}

__device__ __forceinline__ void put_signal_add_thread(uint64_t endpoints, int64_t peer, uint64_t dst_table, int64_t dst_offset, uint64_t src, int32_t src_key, int64_t bytes, uint64_t flag_table, int64_t flag_index, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = 0u;
  [[maybe_unused]] const uint32_t ab_lanes = 1u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4120u);
  [[maybe_unused]] const uint64_t ab_descriptor1 = dst_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_descriptor2 = flag_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_offset3 = static_cast<uint64_t>(dst_offset) * 1u;
  [[maybe_unused]] const uint64_t ab_management4 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->management_address);
  [[maybe_unused]] const uint32_t ab_sq5 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_wqe_basic_block_count);
  uint64_t ab_base6 = 0;
  if (ab_leader) { asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(ab_base6) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->reserved_head)), "l"(static_cast<uint64_t>(INT64_C(2))) : "memory"); }
  [[maybe_unused]] const uint64_t ab_end7 = ab_base6 + static_cast<uint64_t>(INT64_C(2));
  [[maybe_unused]] const uint64_t ab_needed8 = ab_end7 - static_cast<uint64_t>(ab_sq5);
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        detail::mlx5_reclaim_from_cq(detail::mlx5_newest_cqe_word(ab_endpoint0, ab_management4), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->consumer_index)); asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->consumer_index)) : "memory");
        if (!(static_cast<int64_t>(ab_end7 - ab_seen) > static_cast<int64_t>(static_cast<uint64_t>(ab_sq5)))) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->consumer_index), ab_needed8, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4121u, 1u);
      }
    }
  }
  [[maybe_unused]] const int64_t ab_v9 = static_cast<int64_t>(ab_base6) + INT64_C(0);
  [[maybe_unused]] const int64_t ab_v10 = static_cast<int64_t>(src_key);
  [[maybe_unused]] const uint64_t ab_address11 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address) + ab_offset3;
  [[maybe_unused]] const uint32_t ab_rkey12 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->rkey);
  [[maybe_unused]] const uint64_t ab_sq13 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_buffer_address);
  [[maybe_unused]] const uint64_t ab_block14 = ab_sq13 + ((static_cast<uint64_t>(ab_v9) + 0u) % static_cast<uint64_t>(ab_sq5)) * 64u;
  [[maybe_unused]] const int64_t ab_completion15 = detail::mlx5_periodic_completion(static_cast<uint64_t>(ab_v9), 1u, static_cast<uint64_t>(ab_sq5), INT64_C(0) != 0);
  [[maybe_unused]] const uint32_t ab_qpn16 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->qpn);
  if (ab_leader) { if (INT64_C(1) != 0) { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block14 + 0u), ((0u << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v9)) & 0xffffu) << 8) | mlx5::OPCODE_RDMA_WRITE), ((ab_qpn16 << 8) | 3u), static_cast<uint8_t>((ab_completion15 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); detail::mlx5_remote(reinterpret_cast<Mlx5RemoteAddressSegment*>(ab_block14 + 16u), ab_address11, ab_rkey12); detail::mlx5_data(reinterpret_cast<Mlx5DataSegment*>(ab_block14 + 32u), static_cast<uint32_t>(bytes), static_cast<uint32_t>(ab_v10), src); } else { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block14 + 0u), ((0u << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v9)) & 0xffffu) << 8) | mlx5::OPCODE_NOP), ((ab_qpn16 << 8) | 4u), static_cast<uint8_t>((ab_completion15 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); } }
  if (ab_leader) { if (ab_completion15 != 0) detail::mlx5_note_posted(ab_management4, static_cast<uint64_t>(ab_v9), static_cast<uint64_t>(ab_v9) + 1u); }
  [[maybe_unused]] const uint64_t ab_offset17 = static_cast<uint64_t>(flag_index) * 8u;
  [[maybe_unused]] const int64_t ab_v18 = static_cast<int64_t>(ab_base6) + INT64_C(1);
  [[maybe_unused]] const uint64_t ab_address19 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor2)->base_address) + ab_offset17;
  [[maybe_unused]] const uint32_t ab_rkey20 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor2)->rkey);
  [[maybe_unused]] const uint64_t ab_block21 = ab_sq13 + ((static_cast<uint64_t>(ab_v18) + 0u) % static_cast<uint64_t>(ab_sq5)) * 64u;
  [[maybe_unused]] const int64_t ab_completion22 = detail::mlx5_periodic_completion(static_cast<uint64_t>(ab_v18), 1u, static_cast<uint64_t>(ab_sq5), INT64_C(1) != 0);
  [[maybe_unused]] const uint64_t ab_atomic23 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->atomic_result_address);
  [[maybe_unused]] const uint32_t ab_atomic24 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->atomic_result_lkey);
  if (ab_leader) { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block21 + 0u), ((0u << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v18)) & 0xffffu) << 8) | mlx5::OPCODE_ATOMIC_FA), ((ab_qpn16 << 8) | 4u), static_cast<uint8_t>((ab_completion22 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); detail::mlx5_remote(reinterpret_cast<Mlx5RemoteAddressSegment*>(ab_block21 + 16u), ab_address19, ab_rkey20); detail::mlx5_fetch_add(reinterpret_cast<Mlx5AtomicSegment*>(ab_block21 + 32u), static_cast<uint64_t>(value)); detail::mlx5_data(reinterpret_cast<Mlx5DataSegment*>(ab_block21 + 48u), 8u, ab_atomic24, ab_atomic23); }
  if (ab_leader) { if (ab_completion22 != 0) detail::mlx5_note_posted(ab_management4, static_cast<uint64_t>(ab_v18), static_cast<uint64_t>(ab_v18) + 1u); }
  [[maybe_unused]] const int64_t ab_v25 = static_cast<int64_t>(ab_base6) + INT64_C(2);
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  [[maybe_unused]] const uint64_t ab_end26 = ab_base6 + static_cast<uint64_t>(INT64_C(2));
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->ready_head)) : "memory");
        if (!(ab_seen != ab_base6)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->ready_head), ab_base6, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4122u, 3u);
      }
    }
  }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->ready_head)), "l"(ab_end26) : "memory"); }
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("atom.acquire.gpu.global.cas.b64 %0, [%1], 0, 1;" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->post_send_lock)) : "memory");
        if (!(ab_seen != 0)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->post_send_lock), 0u, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4123u, 4u);
      }
    }
  }
  [[maybe_unused]] const uint64_t ab_doorbell27 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->doorbell_record_address);
  [[maybe_unused]] const uint32_t ab_flags28 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->flags);
  if (ab_leader) { detail::mlx5_doorbell_record(reinterpret_cast<Mlx5DoorbellRecord*>(ab_doorbell27), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->producer_index), static_cast<uint64_t>(ab_v25), true, false, ab_flags28); }
  [[maybe_unused]] const uint64_t ab_uar29 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->uar_doorbell_address);
  if (ab_leader) { detail::mlx5_ring_doorbell(ab_uar29, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->producer_index), static_cast<uint64_t>(ab_v25), ab_qpn16, ab_flags28); }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->post_send_lock)), "l"(uint64_t{0}) : "memory"); }
}

__device__ __forceinline__ void put_signal_add_warp(uint64_t endpoints, int64_t peer, uint64_t dst_table, int64_t dst_offset, uint64_t src, int32_t src_key, int64_t bytes, uint64_t flag_table, int64_t flag_index, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4124u);
  [[maybe_unused]] const uint64_t ab_descriptor1 = dst_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_descriptor2 = flag_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_offset3 = static_cast<uint64_t>(dst_offset) * 1u;
  [[maybe_unused]] const uint64_t ab_management4 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->management_address);
  [[maybe_unused]] const uint32_t ab_sq5 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_wqe_basic_block_count);
  __syncwarp();
  uint64_t ab_base6 = 0;
  if (ab_leader) { asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(ab_base6) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->reserved_head)), "l"(static_cast<uint64_t>(INT64_C(2))) : "memory"); }
  [[maybe_unused]] const uint64_t ab_end7 = ab_base6 + static_cast<uint64_t>(INT64_C(2));
  [[maybe_unused]] const uint64_t ab_needed8 = ab_end7 - static_cast<uint64_t>(ab_sq5);
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        detail::mlx5_reclaim_from_cq(detail::mlx5_newest_cqe_word(ab_endpoint0, ab_management4), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->consumer_index)); asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->consumer_index)) : "memory");
        if (!(static_cast<int64_t>(ab_end7 - ab_seen) > static_cast<int64_t>(static_cast<uint64_t>(ab_sq5)))) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->consumer_index), ab_needed8, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4125u, 1u);
      }
    }
  }
  [[maybe_unused]] const int64_t ab_v9 = static_cast<int64_t>(ab_base6) + INT64_C(0);
  [[maybe_unused]] const int64_t ab_v10 = static_cast<int64_t>(src_key);
  [[maybe_unused]] const uint64_t ab_address11 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address) + ab_offset3;
  [[maybe_unused]] const uint32_t ab_rkey12 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->rkey);
  [[maybe_unused]] const uint64_t ab_sq13 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_buffer_address);
  [[maybe_unused]] const uint64_t ab_block14 = ab_sq13 + ((static_cast<uint64_t>(ab_v9) + 0u) % static_cast<uint64_t>(ab_sq5)) * 64u;
  [[maybe_unused]] const int64_t ab_completion15 = detail::mlx5_periodic_completion(static_cast<uint64_t>(ab_v9), 1u, static_cast<uint64_t>(ab_sq5), INT64_C(0) != 0);
  [[maybe_unused]] const uint32_t ab_qpn16 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->qpn);
  if (ab_leader) { if (INT64_C(1) != 0) { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block14 + 0u), ((0u << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v9)) & 0xffffu) << 8) | mlx5::OPCODE_RDMA_WRITE), ((ab_qpn16 << 8) | 3u), static_cast<uint8_t>((ab_completion15 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); detail::mlx5_remote(reinterpret_cast<Mlx5RemoteAddressSegment*>(ab_block14 + 16u), ab_address11, ab_rkey12); detail::mlx5_data(reinterpret_cast<Mlx5DataSegment*>(ab_block14 + 32u), static_cast<uint32_t>(bytes), static_cast<uint32_t>(ab_v10), src); } else { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block14 + 0u), ((0u << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v9)) & 0xffffu) << 8) | mlx5::OPCODE_NOP), ((ab_qpn16 << 8) | 4u), static_cast<uint8_t>((ab_completion15 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); } }
  if (ab_leader) { if (ab_completion15 != 0) detail::mlx5_note_posted(ab_management4, static_cast<uint64_t>(ab_v9), static_cast<uint64_t>(ab_v9) + 1u); }
  [[maybe_unused]] const uint64_t ab_offset17 = static_cast<uint64_t>(flag_index) * 8u;
  [[maybe_unused]] const int64_t ab_v18 = static_cast<int64_t>(ab_base6) + INT64_C(1);
  [[maybe_unused]] const uint64_t ab_address19 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor2)->base_address) + ab_offset17;
  [[maybe_unused]] const uint32_t ab_rkey20 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor2)->rkey);
  [[maybe_unused]] const uint64_t ab_block21 = ab_sq13 + ((static_cast<uint64_t>(ab_v18) + 0u) % static_cast<uint64_t>(ab_sq5)) * 64u;
  [[maybe_unused]] const int64_t ab_completion22 = detail::mlx5_periodic_completion(static_cast<uint64_t>(ab_v18), 1u, static_cast<uint64_t>(ab_sq5), INT64_C(1) != 0);
  [[maybe_unused]] const uint64_t ab_atomic23 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->atomic_result_address);
  [[maybe_unused]] const uint32_t ab_atomic24 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->atomic_result_lkey);
  if (ab_leader) { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block21 + 0u), ((0u << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v18)) & 0xffffu) << 8) | mlx5::OPCODE_ATOMIC_FA), ((ab_qpn16 << 8) | 4u), static_cast<uint8_t>((ab_completion22 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); detail::mlx5_remote(reinterpret_cast<Mlx5RemoteAddressSegment*>(ab_block21 + 16u), ab_address19, ab_rkey20); detail::mlx5_fetch_add(reinterpret_cast<Mlx5AtomicSegment*>(ab_block21 + 32u), static_cast<uint64_t>(value)); detail::mlx5_data(reinterpret_cast<Mlx5DataSegment*>(ab_block21 + 48u), 8u, ab_atomic24, ab_atomic23); }
  if (ab_leader) { if (ab_completion22 != 0) detail::mlx5_note_posted(ab_management4, static_cast<uint64_t>(ab_v18), static_cast<uint64_t>(ab_v18) + 1u); }
  [[maybe_unused]] const int64_t ab_v25 = static_cast<int64_t>(ab_base6) + INT64_C(2);
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  [[maybe_unused]] const uint64_t ab_end26 = ab_base6 + static_cast<uint64_t>(INT64_C(2));
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->ready_head)) : "memory");
        if (!(ab_seen != ab_base6)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->ready_head), ab_base6, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4126u, 3u);
      }
    }
  }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->ready_head)), "l"(ab_end26) : "memory"); }
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("atom.acquire.gpu.global.cas.b64 %0, [%1], 0, 1;" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->post_send_lock)) : "memory");
        if (!(ab_seen != 0)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->post_send_lock), 0u, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4127u, 4u);
      }
    }
  }
  [[maybe_unused]] const uint64_t ab_doorbell27 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->doorbell_record_address);
  [[maybe_unused]] const uint32_t ab_flags28 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->flags);
  if (ab_leader) { detail::mlx5_doorbell_record(reinterpret_cast<Mlx5DoorbellRecord*>(ab_doorbell27), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->producer_index), static_cast<uint64_t>(ab_v25), true, false, ab_flags28); }
  [[maybe_unused]] const uint64_t ab_uar29 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->uar_doorbell_address);
  if (ab_leader) { detail::mlx5_ring_doorbell(ab_uar29, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->producer_index), static_cast<uint64_t>(ab_v25), ab_qpn16, ab_flags28); }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->post_send_lock)), "l"(uint64_t{0}) : "memory"); }
}

__device__ __forceinline__ void put_signal_add_block(uint64_t endpoints, int64_t peer, uint64_t dst_table, int64_t dst_offset, uint64_t src, int32_t src_key, int64_t bytes, uint64_t flag_table, int64_t flag_index, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4128u);
  [[maybe_unused]] const uint64_t ab_descriptor1 = dst_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_descriptor2 = flag_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_offset3 = static_cast<uint64_t>(dst_offset) * 1u;
  [[maybe_unused]] const uint64_t ab_management4 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->management_address);
  [[maybe_unused]] const uint32_t ab_sq5 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_wqe_basic_block_count);
  __syncthreads();
  uint64_t ab_base6 = 0;
  if (ab_leader) { asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(ab_base6) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->reserved_head)), "l"(static_cast<uint64_t>(INT64_C(2))) : "memory"); }
  [[maybe_unused]] const uint64_t ab_end7 = ab_base6 + static_cast<uint64_t>(INT64_C(2));
  [[maybe_unused]] const uint64_t ab_needed8 = ab_end7 - static_cast<uint64_t>(ab_sq5);
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        detail::mlx5_reclaim_from_cq(detail::mlx5_newest_cqe_word(ab_endpoint0, ab_management4), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->consumer_index)); asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->consumer_index)) : "memory");
        if (!(static_cast<int64_t>(ab_end7 - ab_seen) > static_cast<int64_t>(static_cast<uint64_t>(ab_sq5)))) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->consumer_index), ab_needed8, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4129u, 1u);
      }
    }
  }
  [[maybe_unused]] const int64_t ab_v9 = static_cast<int64_t>(ab_base6) + INT64_C(0);
  [[maybe_unused]] const int64_t ab_v10 = static_cast<int64_t>(src_key);
  [[maybe_unused]] const uint64_t ab_address11 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address) + ab_offset3;
  [[maybe_unused]] const uint32_t ab_rkey12 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->rkey);
  [[maybe_unused]] const uint64_t ab_sq13 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_buffer_address);
  [[maybe_unused]] const uint64_t ab_block14 = ab_sq13 + ((static_cast<uint64_t>(ab_v9) + 0u) % static_cast<uint64_t>(ab_sq5)) * 64u;
  [[maybe_unused]] const int64_t ab_completion15 = detail::mlx5_periodic_completion(static_cast<uint64_t>(ab_v9), 1u, static_cast<uint64_t>(ab_sq5), INT64_C(0) != 0);
  [[maybe_unused]] const uint32_t ab_qpn16 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->qpn);
  if (ab_leader) { if (INT64_C(1) != 0) { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block14 + 0u), ((0u << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v9)) & 0xffffu) << 8) | mlx5::OPCODE_RDMA_WRITE), ((ab_qpn16 << 8) | 3u), static_cast<uint8_t>((ab_completion15 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); detail::mlx5_remote(reinterpret_cast<Mlx5RemoteAddressSegment*>(ab_block14 + 16u), ab_address11, ab_rkey12); detail::mlx5_data(reinterpret_cast<Mlx5DataSegment*>(ab_block14 + 32u), static_cast<uint32_t>(bytes), static_cast<uint32_t>(ab_v10), src); } else { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block14 + 0u), ((0u << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v9)) & 0xffffu) << 8) | mlx5::OPCODE_NOP), ((ab_qpn16 << 8) | 4u), static_cast<uint8_t>((ab_completion15 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); } }
  if (ab_leader) { if (ab_completion15 != 0) detail::mlx5_note_posted(ab_management4, static_cast<uint64_t>(ab_v9), static_cast<uint64_t>(ab_v9) + 1u); }
  [[maybe_unused]] const uint64_t ab_offset17 = static_cast<uint64_t>(flag_index) * 8u;
  [[maybe_unused]] const int64_t ab_v18 = static_cast<int64_t>(ab_base6) + INT64_C(1);
  [[maybe_unused]] const uint64_t ab_address19 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor2)->base_address) + ab_offset17;
  [[maybe_unused]] const uint32_t ab_rkey20 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor2)->rkey);
  [[maybe_unused]] const uint64_t ab_block21 = ab_sq13 + ((static_cast<uint64_t>(ab_v18) + 0u) % static_cast<uint64_t>(ab_sq5)) * 64u;
  [[maybe_unused]] const int64_t ab_completion22 = detail::mlx5_periodic_completion(static_cast<uint64_t>(ab_v18), 1u, static_cast<uint64_t>(ab_sq5), INT64_C(1) != 0);
  [[maybe_unused]] const uint64_t ab_atomic23 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->atomic_result_address);
  [[maybe_unused]] const uint32_t ab_atomic24 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->atomic_result_lkey);
  if (ab_leader) { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block21 + 0u), ((0u << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v18)) & 0xffffu) << 8) | mlx5::OPCODE_ATOMIC_FA), ((ab_qpn16 << 8) | 4u), static_cast<uint8_t>((ab_completion22 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); detail::mlx5_remote(reinterpret_cast<Mlx5RemoteAddressSegment*>(ab_block21 + 16u), ab_address19, ab_rkey20); detail::mlx5_fetch_add(reinterpret_cast<Mlx5AtomicSegment*>(ab_block21 + 32u), static_cast<uint64_t>(value)); detail::mlx5_data(reinterpret_cast<Mlx5DataSegment*>(ab_block21 + 48u), 8u, ab_atomic24, ab_atomic23); }
  if (ab_leader) { if (ab_completion22 != 0) detail::mlx5_note_posted(ab_management4, static_cast<uint64_t>(ab_v18), static_cast<uint64_t>(ab_v18) + 1u); }
  [[maybe_unused]] const int64_t ab_v25 = static_cast<int64_t>(ab_base6) + INT64_C(2);
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  [[maybe_unused]] const uint64_t ab_end26 = ab_base6 + static_cast<uint64_t>(INT64_C(2));
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->ready_head)) : "memory");
        if (!(ab_seen != ab_base6)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->ready_head), ab_base6, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4130u, 3u);
      }
    }
  }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->ready_head)), "l"(ab_end26) : "memory"); }
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("atom.acquire.gpu.global.cas.b64 %0, [%1], 0, 1;" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->post_send_lock)) : "memory");
        if (!(ab_seen != 0)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->post_send_lock), 0u, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4131u, 4u);
      }
    }
  }
  [[maybe_unused]] const uint64_t ab_doorbell27 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->doorbell_record_address);
  [[maybe_unused]] const uint32_t ab_flags28 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->flags);
  if (ab_leader) { detail::mlx5_doorbell_record(reinterpret_cast<Mlx5DoorbellRecord*>(ab_doorbell27), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->producer_index), static_cast<uint64_t>(ab_v25), true, false, ab_flags28); }
  [[maybe_unused]] const uint64_t ab_uar29 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->uar_doorbell_address);
  if (ab_leader) { detail::mlx5_ring_doorbell(ab_uar29, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->producer_index), static_cast<uint64_t>(ab_v25), ab_qpn16, ab_flags28); }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management4)->post_send_lock)), "l"(uint64_t{0}) : "memory"); }
}

__device__ __forceinline__ void signal_set_thread(uint64_t endpoints, int64_t peer, uint64_t flag_table, int64_t flag_index, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = 0u;
  [[maybe_unused]] const uint32_t ab_lanes = 1u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4132u);
  [[maybe_unused]] const uint64_t ab_descriptor1 = flag_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_offset2 = static_cast<uint64_t>(flag_index) * 8u;
  [[maybe_unused]] const uint64_t ab_management3 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->management_address);
  [[maybe_unused]] const uint32_t ab_sq4 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_wqe_basic_block_count);
  uint64_t ab_base5 = 0;
  if (ab_leader) { asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(ab_base5) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->reserved_head)), "l"(static_cast<uint64_t>(INT64_C(2))) : "memory"); }
  [[maybe_unused]] const uint64_t ab_end6 = ab_base5 + static_cast<uint64_t>(INT64_C(2));
  [[maybe_unused]] const uint64_t ab_needed7 = ab_end6 - static_cast<uint64_t>(ab_sq4);
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        detail::mlx5_reclaim_from_cq(detail::mlx5_newest_cqe_word(ab_endpoint0, ab_management3), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index)); asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index)) : "memory");
        if (!(static_cast<int64_t>(ab_end6 - ab_seen) > static_cast<int64_t>(static_cast<uint64_t>(ab_sq4)))) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index), ab_needed7, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4133u, 1u);
      }
    }
  }
  [[maybe_unused]] const int64_t ab_v8 = static_cast<int64_t>(ab_base5) + INT64_C(0);
  [[maybe_unused]] const uint64_t ab_address9 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address) + ab_offset2;
  [[maybe_unused]] const uint32_t ab_rkey10 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->rkey);
  [[maybe_unused]] const uint64_t ab_sq11 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_buffer_address);
  [[maybe_unused]] const uint64_t ab_block12 = ab_sq11 + ((static_cast<uint64_t>(ab_v8) + 0u) % static_cast<uint64_t>(ab_sq4)) * 64u;
  [[maybe_unused]] const uint64_t ab_block13 = ab_sq11 + ((static_cast<uint64_t>(ab_v8) + 1u) % static_cast<uint64_t>(ab_sq4)) * 64u;
  [[maybe_unused]] const int64_t ab_completion14 = detail::mlx5_periodic_completion(static_cast<uint64_t>(ab_v8), 2u, static_cast<uint64_t>(ab_sq4), INT64_C(1) != 0);
  [[maybe_unused]] const uint64_t ab_atomic15 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->atomic_result_address);
  [[maybe_unused]] const uint32_t ab_atomic16 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->atomic_result_lkey);
  [[maybe_unused]] const uint32_t ab_qpn17 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->qpn);
  if (ab_leader) { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block12 + 0u), ((mlx5::EXTENDED_ATOMIC_OPMOD_8_BYTES << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v8)) & 0xffffu) << 8) | mlx5::OPCODE_ATOMIC_MASKED_CS), ((ab_qpn17 << 8) | 5u), static_cast<uint8_t>((ab_completion14 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); detail::mlx5_remote(reinterpret_cast<Mlx5RemoteAddressSegment*>(ab_block12 + 16u), ab_address9, ab_rkey10); detail::mlx5_masked_swap(reinterpret_cast<Mlx5MaskedCompareSwap64Segment*>(ab_block12 + 32u), static_cast<uint64_t>(value)); detail::mlx5_data(reinterpret_cast<Mlx5DataSegment*>(ab_block13 + 0u), 8u, ab_atomic16, ab_atomic15); }
  if (ab_leader) { if (ab_completion14 != 0) detail::mlx5_note_posted(ab_management3, static_cast<uint64_t>(ab_v8), static_cast<uint64_t>(ab_v8) + 2u); }
  [[maybe_unused]] const int64_t ab_v18 = static_cast<int64_t>(ab_base5) + INT64_C(2);
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  [[maybe_unused]] const uint64_t ab_end19 = ab_base5 + static_cast<uint64_t>(INT64_C(2));
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head)) : "memory");
        if (!(ab_seen != ab_base5)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head), ab_base5, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4134u, 3u);
      }
    }
  }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head)), "l"(ab_end19) : "memory"); }
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("atom.acquire.gpu.global.cas.b64 %0, [%1], 0, 1;" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock)) : "memory");
        if (!(ab_seen != 0)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock), 0u, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4135u, 4u);
      }
    }
  }
  [[maybe_unused]] const uint64_t ab_doorbell20 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->doorbell_record_address);
  [[maybe_unused]] const uint32_t ab_flags21 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->flags);
  if (ab_leader) { detail::mlx5_doorbell_record(reinterpret_cast<Mlx5DoorbellRecord*>(ab_doorbell20), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->producer_index), static_cast<uint64_t>(ab_v18), true, false, ab_flags21); }
  [[maybe_unused]] const uint64_t ab_uar22 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->uar_doorbell_address);
  if (ab_leader) { detail::mlx5_ring_doorbell(ab_uar22, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->producer_index), static_cast<uint64_t>(ab_v18), ab_qpn17, ab_flags21); }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock)), "l"(uint64_t{0}) : "memory"); }
}

__device__ __forceinline__ void signal_set_warp(uint64_t endpoints, int64_t peer, uint64_t flag_table, int64_t flag_index, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4136u);
  [[maybe_unused]] const uint64_t ab_descriptor1 = flag_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_offset2 = static_cast<uint64_t>(flag_index) * 8u;
  [[maybe_unused]] const uint64_t ab_management3 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->management_address);
  [[maybe_unused]] const uint32_t ab_sq4 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_wqe_basic_block_count);
  __syncwarp();
  uint64_t ab_base5 = 0;
  if (ab_leader) { asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(ab_base5) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->reserved_head)), "l"(static_cast<uint64_t>(INT64_C(2))) : "memory"); }
  [[maybe_unused]] const uint64_t ab_end6 = ab_base5 + static_cast<uint64_t>(INT64_C(2));
  [[maybe_unused]] const uint64_t ab_needed7 = ab_end6 - static_cast<uint64_t>(ab_sq4);
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        detail::mlx5_reclaim_from_cq(detail::mlx5_newest_cqe_word(ab_endpoint0, ab_management3), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index)); asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index)) : "memory");
        if (!(static_cast<int64_t>(ab_end6 - ab_seen) > static_cast<int64_t>(static_cast<uint64_t>(ab_sq4)))) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index), ab_needed7, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4137u, 1u);
      }
    }
  }
  [[maybe_unused]] const int64_t ab_v8 = static_cast<int64_t>(ab_base5) + INT64_C(0);
  [[maybe_unused]] const uint64_t ab_address9 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address) + ab_offset2;
  [[maybe_unused]] const uint32_t ab_rkey10 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->rkey);
  [[maybe_unused]] const uint64_t ab_sq11 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_buffer_address);
  [[maybe_unused]] const uint64_t ab_block12 = ab_sq11 + ((static_cast<uint64_t>(ab_v8) + 0u) % static_cast<uint64_t>(ab_sq4)) * 64u;
  [[maybe_unused]] const uint64_t ab_block13 = ab_sq11 + ((static_cast<uint64_t>(ab_v8) + 1u) % static_cast<uint64_t>(ab_sq4)) * 64u;
  [[maybe_unused]] const int64_t ab_completion14 = detail::mlx5_periodic_completion(static_cast<uint64_t>(ab_v8), 2u, static_cast<uint64_t>(ab_sq4), INT64_C(1) != 0);
  [[maybe_unused]] const uint64_t ab_atomic15 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->atomic_result_address);
  [[maybe_unused]] const uint32_t ab_atomic16 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->atomic_result_lkey);
  [[maybe_unused]] const uint32_t ab_qpn17 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->qpn);
  if (ab_leader) { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block12 + 0u), ((mlx5::EXTENDED_ATOMIC_OPMOD_8_BYTES << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v8)) & 0xffffu) << 8) | mlx5::OPCODE_ATOMIC_MASKED_CS), ((ab_qpn17 << 8) | 5u), static_cast<uint8_t>((ab_completion14 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); detail::mlx5_remote(reinterpret_cast<Mlx5RemoteAddressSegment*>(ab_block12 + 16u), ab_address9, ab_rkey10); detail::mlx5_masked_swap(reinterpret_cast<Mlx5MaskedCompareSwap64Segment*>(ab_block12 + 32u), static_cast<uint64_t>(value)); detail::mlx5_data(reinterpret_cast<Mlx5DataSegment*>(ab_block13 + 0u), 8u, ab_atomic16, ab_atomic15); }
  if (ab_leader) { if (ab_completion14 != 0) detail::mlx5_note_posted(ab_management3, static_cast<uint64_t>(ab_v8), static_cast<uint64_t>(ab_v8) + 2u); }
  [[maybe_unused]] const int64_t ab_v18 = static_cast<int64_t>(ab_base5) + INT64_C(2);
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  [[maybe_unused]] const uint64_t ab_end19 = ab_base5 + static_cast<uint64_t>(INT64_C(2));
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head)) : "memory");
        if (!(ab_seen != ab_base5)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head), ab_base5, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4138u, 3u);
      }
    }
  }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head)), "l"(ab_end19) : "memory"); }
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("atom.acquire.gpu.global.cas.b64 %0, [%1], 0, 1;" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock)) : "memory");
        if (!(ab_seen != 0)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock), 0u, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4139u, 4u);
      }
    }
  }
  [[maybe_unused]] const uint64_t ab_doorbell20 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->doorbell_record_address);
  [[maybe_unused]] const uint32_t ab_flags21 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->flags);
  if (ab_leader) { detail::mlx5_doorbell_record(reinterpret_cast<Mlx5DoorbellRecord*>(ab_doorbell20), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->producer_index), static_cast<uint64_t>(ab_v18), true, false, ab_flags21); }
  [[maybe_unused]] const uint64_t ab_uar22 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->uar_doorbell_address);
  if (ab_leader) { detail::mlx5_ring_doorbell(ab_uar22, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->producer_index), static_cast<uint64_t>(ab_v18), ab_qpn17, ab_flags21); }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock)), "l"(uint64_t{0}) : "memory"); }
}

__device__ __forceinline__ void signal_set_block(uint64_t endpoints, int64_t peer, uint64_t flag_table, int64_t flag_index, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4140u);
  [[maybe_unused]] const uint64_t ab_descriptor1 = flag_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_offset2 = static_cast<uint64_t>(flag_index) * 8u;
  [[maybe_unused]] const uint64_t ab_management3 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->management_address);
  [[maybe_unused]] const uint32_t ab_sq4 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_wqe_basic_block_count);
  __syncthreads();
  uint64_t ab_base5 = 0;
  if (ab_leader) { asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(ab_base5) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->reserved_head)), "l"(static_cast<uint64_t>(INT64_C(2))) : "memory"); }
  [[maybe_unused]] const uint64_t ab_end6 = ab_base5 + static_cast<uint64_t>(INT64_C(2));
  [[maybe_unused]] const uint64_t ab_needed7 = ab_end6 - static_cast<uint64_t>(ab_sq4);
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        detail::mlx5_reclaim_from_cq(detail::mlx5_newest_cqe_word(ab_endpoint0, ab_management3), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index)); asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index)) : "memory");
        if (!(static_cast<int64_t>(ab_end6 - ab_seen) > static_cast<int64_t>(static_cast<uint64_t>(ab_sq4)))) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index), ab_needed7, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4141u, 1u);
      }
    }
  }
  [[maybe_unused]] const int64_t ab_v8 = static_cast<int64_t>(ab_base5) + INT64_C(0);
  [[maybe_unused]] const uint64_t ab_address9 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address) + ab_offset2;
  [[maybe_unused]] const uint32_t ab_rkey10 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->rkey);
  [[maybe_unused]] const uint64_t ab_sq11 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_buffer_address);
  [[maybe_unused]] const uint64_t ab_block12 = ab_sq11 + ((static_cast<uint64_t>(ab_v8) + 0u) % static_cast<uint64_t>(ab_sq4)) * 64u;
  [[maybe_unused]] const uint64_t ab_block13 = ab_sq11 + ((static_cast<uint64_t>(ab_v8) + 1u) % static_cast<uint64_t>(ab_sq4)) * 64u;
  [[maybe_unused]] const int64_t ab_completion14 = detail::mlx5_periodic_completion(static_cast<uint64_t>(ab_v8), 2u, static_cast<uint64_t>(ab_sq4), INT64_C(1) != 0);
  [[maybe_unused]] const uint64_t ab_atomic15 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->atomic_result_address);
  [[maybe_unused]] const uint32_t ab_atomic16 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->atomic_result_lkey);
  [[maybe_unused]] const uint32_t ab_qpn17 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->qpn);
  if (ab_leader) { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block12 + 0u), ((mlx5::EXTENDED_ATOMIC_OPMOD_8_BYTES << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v8)) & 0xffffu) << 8) | mlx5::OPCODE_ATOMIC_MASKED_CS), ((ab_qpn17 << 8) | 5u), static_cast<uint8_t>((ab_completion14 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); detail::mlx5_remote(reinterpret_cast<Mlx5RemoteAddressSegment*>(ab_block12 + 16u), ab_address9, ab_rkey10); detail::mlx5_masked_swap(reinterpret_cast<Mlx5MaskedCompareSwap64Segment*>(ab_block12 + 32u), static_cast<uint64_t>(value)); detail::mlx5_data(reinterpret_cast<Mlx5DataSegment*>(ab_block13 + 0u), 8u, ab_atomic16, ab_atomic15); }
  if (ab_leader) { if (ab_completion14 != 0) detail::mlx5_note_posted(ab_management3, static_cast<uint64_t>(ab_v8), static_cast<uint64_t>(ab_v8) + 2u); }
  [[maybe_unused]] const int64_t ab_v18 = static_cast<int64_t>(ab_base5) + INT64_C(2);
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  [[maybe_unused]] const uint64_t ab_end19 = ab_base5 + static_cast<uint64_t>(INT64_C(2));
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head)) : "memory");
        if (!(ab_seen != ab_base5)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head), ab_base5, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4142u, 3u);
      }
    }
  }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head)), "l"(ab_end19) : "memory"); }
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("atom.acquire.gpu.global.cas.b64 %0, [%1], 0, 1;" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock)) : "memory");
        if (!(ab_seen != 0)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock), 0u, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4143u, 4u);
      }
    }
  }
  [[maybe_unused]] const uint64_t ab_doorbell20 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->doorbell_record_address);
  [[maybe_unused]] const uint32_t ab_flags21 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->flags);
  if (ab_leader) { detail::mlx5_doorbell_record(reinterpret_cast<Mlx5DoorbellRecord*>(ab_doorbell20), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->producer_index), static_cast<uint64_t>(ab_v18), true, false, ab_flags21); }
  [[maybe_unused]] const uint64_t ab_uar22 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->uar_doorbell_address);
  if (ab_leader) { detail::mlx5_ring_doorbell(ab_uar22, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->producer_index), static_cast<uint64_t>(ab_v18), ab_qpn17, ab_flags21); }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock)), "l"(uint64_t{0}) : "memory"); }
}

__device__ __forceinline__ void signal_add_thread(uint64_t endpoints, int64_t peer, uint64_t flag_table, int64_t flag_index, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = 0u;
  [[maybe_unused]] const uint32_t ab_lanes = 1u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4144u);
  [[maybe_unused]] const uint64_t ab_descriptor1 = flag_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_offset2 = static_cast<uint64_t>(flag_index) * 8u;
  [[maybe_unused]] const uint64_t ab_management3 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->management_address);
  [[maybe_unused]] const uint32_t ab_sq4 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_wqe_basic_block_count);
  uint64_t ab_base5 = 0;
  if (ab_leader) { asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(ab_base5) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->reserved_head)), "l"(static_cast<uint64_t>(INT64_C(1))) : "memory"); }
  [[maybe_unused]] const uint64_t ab_end6 = ab_base5 + static_cast<uint64_t>(INT64_C(1));
  [[maybe_unused]] const uint64_t ab_needed7 = ab_end6 - static_cast<uint64_t>(ab_sq4);
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        detail::mlx5_reclaim_from_cq(detail::mlx5_newest_cqe_word(ab_endpoint0, ab_management3), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index)); asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index)) : "memory");
        if (!(static_cast<int64_t>(ab_end6 - ab_seen) > static_cast<int64_t>(static_cast<uint64_t>(ab_sq4)))) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index), ab_needed7, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4145u, 1u);
      }
    }
  }
  [[maybe_unused]] const int64_t ab_v8 = static_cast<int64_t>(ab_base5) + INT64_C(0);
  [[maybe_unused]] const uint64_t ab_address9 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address) + ab_offset2;
  [[maybe_unused]] const uint32_t ab_rkey10 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->rkey);
  [[maybe_unused]] const uint64_t ab_sq11 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_buffer_address);
  [[maybe_unused]] const uint64_t ab_block12 = ab_sq11 + ((static_cast<uint64_t>(ab_v8) + 0u) % static_cast<uint64_t>(ab_sq4)) * 64u;
  [[maybe_unused]] const int64_t ab_completion13 = detail::mlx5_periodic_completion(static_cast<uint64_t>(ab_v8), 1u, static_cast<uint64_t>(ab_sq4), INT64_C(1) != 0);
  [[maybe_unused]] const uint64_t ab_atomic14 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->atomic_result_address);
  [[maybe_unused]] const uint32_t ab_atomic15 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->atomic_result_lkey);
  [[maybe_unused]] const uint32_t ab_qpn16 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->qpn);
  if (ab_leader) { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block12 + 0u), ((0u << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v8)) & 0xffffu) << 8) | mlx5::OPCODE_ATOMIC_FA), ((ab_qpn16 << 8) | 4u), static_cast<uint8_t>((ab_completion13 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); detail::mlx5_remote(reinterpret_cast<Mlx5RemoteAddressSegment*>(ab_block12 + 16u), ab_address9, ab_rkey10); detail::mlx5_fetch_add(reinterpret_cast<Mlx5AtomicSegment*>(ab_block12 + 32u), static_cast<uint64_t>(value)); detail::mlx5_data(reinterpret_cast<Mlx5DataSegment*>(ab_block12 + 48u), 8u, ab_atomic15, ab_atomic14); }
  if (ab_leader) { if (ab_completion13 != 0) detail::mlx5_note_posted(ab_management3, static_cast<uint64_t>(ab_v8), static_cast<uint64_t>(ab_v8) + 1u); }
  [[maybe_unused]] const int64_t ab_v17 = static_cast<int64_t>(ab_base5) + INT64_C(1);
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  [[maybe_unused]] const uint64_t ab_end18 = ab_base5 + static_cast<uint64_t>(INT64_C(1));
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head)) : "memory");
        if (!(ab_seen != ab_base5)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head), ab_base5, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4146u, 3u);
      }
    }
  }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head)), "l"(ab_end18) : "memory"); }
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("atom.acquire.gpu.global.cas.b64 %0, [%1], 0, 1;" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock)) : "memory");
        if (!(ab_seen != 0)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock), 0u, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4147u, 4u);
      }
    }
  }
  [[maybe_unused]] const uint64_t ab_doorbell19 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->doorbell_record_address);
  [[maybe_unused]] const uint32_t ab_flags20 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->flags);
  if (ab_leader) { detail::mlx5_doorbell_record(reinterpret_cast<Mlx5DoorbellRecord*>(ab_doorbell19), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->producer_index), static_cast<uint64_t>(ab_v17), true, false, ab_flags20); }
  [[maybe_unused]] const uint64_t ab_uar21 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->uar_doorbell_address);
  if (ab_leader) { detail::mlx5_ring_doorbell(ab_uar21, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->producer_index), static_cast<uint64_t>(ab_v17), ab_qpn16, ab_flags20); }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock)), "l"(uint64_t{0}) : "memory"); }
}

__device__ __forceinline__ void signal_add_warp(uint64_t endpoints, int64_t peer, uint64_t flag_table, int64_t flag_index, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4148u);
  [[maybe_unused]] const uint64_t ab_descriptor1 = flag_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_offset2 = static_cast<uint64_t>(flag_index) * 8u;
  [[maybe_unused]] const uint64_t ab_management3 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->management_address);
  [[maybe_unused]] const uint32_t ab_sq4 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_wqe_basic_block_count);
  __syncwarp();
  uint64_t ab_base5 = 0;
  if (ab_leader) { asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(ab_base5) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->reserved_head)), "l"(static_cast<uint64_t>(INT64_C(1))) : "memory"); }
  [[maybe_unused]] const uint64_t ab_end6 = ab_base5 + static_cast<uint64_t>(INT64_C(1));
  [[maybe_unused]] const uint64_t ab_needed7 = ab_end6 - static_cast<uint64_t>(ab_sq4);
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        detail::mlx5_reclaim_from_cq(detail::mlx5_newest_cqe_word(ab_endpoint0, ab_management3), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index)); asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index)) : "memory");
        if (!(static_cast<int64_t>(ab_end6 - ab_seen) > static_cast<int64_t>(static_cast<uint64_t>(ab_sq4)))) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index), ab_needed7, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4149u, 1u);
      }
    }
  }
  [[maybe_unused]] const int64_t ab_v8 = static_cast<int64_t>(ab_base5) + INT64_C(0);
  [[maybe_unused]] const uint64_t ab_address9 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address) + ab_offset2;
  [[maybe_unused]] const uint32_t ab_rkey10 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->rkey);
  [[maybe_unused]] const uint64_t ab_sq11 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_buffer_address);
  [[maybe_unused]] const uint64_t ab_block12 = ab_sq11 + ((static_cast<uint64_t>(ab_v8) + 0u) % static_cast<uint64_t>(ab_sq4)) * 64u;
  [[maybe_unused]] const int64_t ab_completion13 = detail::mlx5_periodic_completion(static_cast<uint64_t>(ab_v8), 1u, static_cast<uint64_t>(ab_sq4), INT64_C(1) != 0);
  [[maybe_unused]] const uint64_t ab_atomic14 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->atomic_result_address);
  [[maybe_unused]] const uint32_t ab_atomic15 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->atomic_result_lkey);
  [[maybe_unused]] const uint32_t ab_qpn16 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->qpn);
  if (ab_leader) { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block12 + 0u), ((0u << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v8)) & 0xffffu) << 8) | mlx5::OPCODE_ATOMIC_FA), ((ab_qpn16 << 8) | 4u), static_cast<uint8_t>((ab_completion13 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); detail::mlx5_remote(reinterpret_cast<Mlx5RemoteAddressSegment*>(ab_block12 + 16u), ab_address9, ab_rkey10); detail::mlx5_fetch_add(reinterpret_cast<Mlx5AtomicSegment*>(ab_block12 + 32u), static_cast<uint64_t>(value)); detail::mlx5_data(reinterpret_cast<Mlx5DataSegment*>(ab_block12 + 48u), 8u, ab_atomic15, ab_atomic14); }
  if (ab_leader) { if (ab_completion13 != 0) detail::mlx5_note_posted(ab_management3, static_cast<uint64_t>(ab_v8), static_cast<uint64_t>(ab_v8) + 1u); }
  [[maybe_unused]] const int64_t ab_v17 = static_cast<int64_t>(ab_base5) + INT64_C(1);
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  [[maybe_unused]] const uint64_t ab_end18 = ab_base5 + static_cast<uint64_t>(INT64_C(1));
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head)) : "memory");
        if (!(ab_seen != ab_base5)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head), ab_base5, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4150u, 3u);
      }
    }
  }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head)), "l"(ab_end18) : "memory"); }
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("atom.acquire.gpu.global.cas.b64 %0, [%1], 0, 1;" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock)) : "memory");
        if (!(ab_seen != 0)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock), 0u, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4151u, 4u);
      }
    }
  }
  [[maybe_unused]] const uint64_t ab_doorbell19 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->doorbell_record_address);
  [[maybe_unused]] const uint32_t ab_flags20 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->flags);
  if (ab_leader) { detail::mlx5_doorbell_record(reinterpret_cast<Mlx5DoorbellRecord*>(ab_doorbell19), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->producer_index), static_cast<uint64_t>(ab_v17), true, false, ab_flags20); }
  [[maybe_unused]] const uint64_t ab_uar21 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->uar_doorbell_address);
  if (ab_leader) { detail::mlx5_ring_doorbell(ab_uar21, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->producer_index), static_cast<uint64_t>(ab_v17), ab_qpn16, ab_flags20); }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock)), "l"(uint64_t{0}) : "memory"); }
}

__device__ __forceinline__ void signal_add_block(uint64_t endpoints, int64_t peer, uint64_t flag_table, int64_t flag_index, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4152u);
  [[maybe_unused]] const uint64_t ab_descriptor1 = flag_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_offset2 = static_cast<uint64_t>(flag_index) * 8u;
  [[maybe_unused]] const uint64_t ab_management3 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->management_address);
  [[maybe_unused]] const uint32_t ab_sq4 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_wqe_basic_block_count);
  __syncthreads();
  uint64_t ab_base5 = 0;
  if (ab_leader) { asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(ab_base5) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->reserved_head)), "l"(static_cast<uint64_t>(INT64_C(1))) : "memory"); }
  [[maybe_unused]] const uint64_t ab_end6 = ab_base5 + static_cast<uint64_t>(INT64_C(1));
  [[maybe_unused]] const uint64_t ab_needed7 = ab_end6 - static_cast<uint64_t>(ab_sq4);
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        detail::mlx5_reclaim_from_cq(detail::mlx5_newest_cqe_word(ab_endpoint0, ab_management3), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index)); asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index)) : "memory");
        if (!(static_cast<int64_t>(ab_end6 - ab_seen) > static_cast<int64_t>(static_cast<uint64_t>(ab_sq4)))) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->consumer_index), ab_needed7, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4153u, 1u);
      }
    }
  }
  [[maybe_unused]] const int64_t ab_v8 = static_cast<int64_t>(ab_base5) + INT64_C(0);
  [[maybe_unused]] const uint64_t ab_address9 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address) + ab_offset2;
  [[maybe_unused]] const uint32_t ab_rkey10 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->rkey);
  [[maybe_unused]] const uint64_t ab_sq11 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->sq_buffer_address);
  [[maybe_unused]] const uint64_t ab_block12 = ab_sq11 + ((static_cast<uint64_t>(ab_v8) + 0u) % static_cast<uint64_t>(ab_sq4)) * 64u;
  [[maybe_unused]] const int64_t ab_completion13 = detail::mlx5_periodic_completion(static_cast<uint64_t>(ab_v8), 1u, static_cast<uint64_t>(ab_sq4), INT64_C(1) != 0);
  [[maybe_unused]] const uint64_t ab_atomic14 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->atomic_result_address);
  [[maybe_unused]] const uint32_t ab_atomic15 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->atomic_result_lkey);
  [[maybe_unused]] const uint32_t ab_qpn16 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->qpn);
  if (ab_leader) { detail::mlx5_control(reinterpret_cast<Mlx5ControlSegment*>(ab_block12 + 0u), ((0u << 24) | ((static_cast<uint32_t>(static_cast<uint64_t>(ab_v8)) & 0xffffu) << 8) | mlx5::OPCODE_ATOMIC_FA), ((ab_qpn16 << 8) | 4u), static_cast<uint8_t>((ab_completion13 != 0 ? mlx5::WQE_CTRL_CQ_UPDATE : 0u) | 0u), 0u); detail::mlx5_remote(reinterpret_cast<Mlx5RemoteAddressSegment*>(ab_block12 + 16u), ab_address9, ab_rkey10); detail::mlx5_fetch_add(reinterpret_cast<Mlx5AtomicSegment*>(ab_block12 + 32u), static_cast<uint64_t>(value)); detail::mlx5_data(reinterpret_cast<Mlx5DataSegment*>(ab_block12 + 48u), 8u, ab_atomic15, ab_atomic14); }
  if (ab_leader) { if (ab_completion13 != 0) detail::mlx5_note_posted(ab_management3, static_cast<uint64_t>(ab_v8), static_cast<uint64_t>(ab_v8) + 1u); }
  [[maybe_unused]] const int64_t ab_v17 = static_cast<int64_t>(ab_base5) + INT64_C(1);
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  [[maybe_unused]] const uint64_t ab_end18 = ab_base5 + static_cast<uint64_t>(INT64_C(1));
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head)) : "memory");
        if (!(ab_seen != ab_base5)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head), ab_base5, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4154u, 3u);
      }
    }
  }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->ready_head)), "l"(ab_end18) : "memory"); }
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        asm volatile("atom.acquire.gpu.global.cas.b64 %0, [%1], 0, 1;" : "=l"(ab_seen) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock)) : "memory");
        if (!(ab_seen != 0)) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock), 0u, ab_seen, static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4155u, 4u);
      }
    }
  }
  [[maybe_unused]] const uint64_t ab_doorbell19 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->doorbell_record_address);
  [[maybe_unused]] const uint32_t ab_flags20 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->flags);
  if (ab_leader) { detail::mlx5_doorbell_record(reinterpret_cast<Mlx5DoorbellRecord*>(ab_doorbell19), reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->producer_index), static_cast<uint64_t>(ab_v17), true, false, ab_flags20); }
  [[maybe_unused]] const uint64_t ab_uar21 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->uar_doorbell_address);
  if (ab_leader) { detail::mlx5_ring_doorbell(ab_uar21, reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->producer_index), static_cast<uint64_t>(ab_v17), ab_qpn16, ab_flags20); }
  if (ab_leader) { asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management3)->post_send_lock)), "l"(uint64_t{0}) : "memory"); }
}

__device__ __forceinline__ void fence_thread(uint64_t endpoints, int64_t peer) {
  [[maybe_unused]] const uint32_t ab_lane = 0u;
  [[maybe_unused]] const uint32_t ab_lanes = 1u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4156u);
}

__device__ __forceinline__ void fence_warp(uint64_t endpoints, int64_t peer) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4157u);
}

__device__ __forceinline__ void fence_block(uint64_t endpoints, int64_t peer) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4158u);
}

__device__ __forceinline__ void quiet_thread(uint64_t endpoints, int64_t peer) {
  [[maybe_unused]] const uint32_t ab_lane = 0u;
  [[maybe_unused]] const uint32_t ab_lanes = 1u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4159u);
  [[maybe_unused]] const uint64_t ab_management1 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->management_address);
  [[maybe_unused]] const uint64_t ab_target2 = ab_leader ? detail::mlx5_last_posted(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management1)->reserved), 0) : 0;
  [[maybe_unused]] const uint64_t ab_freed3 = ab_leader ? detail::mlx5_last_posted(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management1)->reserved), 1) : 0;
  [[maybe_unused]] const uint64_t ab_cq4 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->cq_buffer_address);
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        ab_seen = detail::mlx5_newest_cqe_word(ab_endpoint0, ab_management1);
        if (!(detail::mlx5_completion_pending(static_cast<uint32_t>(ab_seen), ab_target2))) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, ab_cq4, ab_target2, detail::mlx5_cqe_counter(static_cast<uint32_t>(ab_seen)), static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4160u, 2u);
      }
    }
  }
  if (ab_leader) { [[maybe_unused]] uint64_t ab_old; asm volatile("atom.relaxed.gpu.global.max.u64 %0, [%1], %2;" : "=l"(ab_old) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management1)->consumer_index)), "l"(ab_freed3) : "memory"); }
}

__device__ __forceinline__ void quiet_warp(uint64_t endpoints, int64_t peer) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4161u);
  [[maybe_unused]] const uint64_t ab_management1 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->management_address);
  [[maybe_unused]] const uint64_t ab_target2 = ab_leader ? detail::mlx5_last_posted(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management1)->reserved), 0) : 0;
  [[maybe_unused]] const uint64_t ab_freed3 = ab_leader ? detail::mlx5_last_posted(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management1)->reserved), 1) : 0;
  [[maybe_unused]] const uint64_t ab_cq4 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->cq_buffer_address);
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        ab_seen = detail::mlx5_newest_cqe_word(ab_endpoint0, ab_management1);
        if (!(detail::mlx5_completion_pending(static_cast<uint32_t>(ab_seen), ab_target2))) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, ab_cq4, ab_target2, detail::mlx5_cqe_counter(static_cast<uint32_t>(ab_seen)), static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4162u, 2u);
      }
    }
  }
  if (ab_leader) { [[maybe_unused]] uint64_t ab_old; asm volatile("atom.relaxed.gpu.global.max.u64 %0, [%1], %2;" : "=l"(ab_old) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management1)->consumer_index)), "l"(ab_freed3) : "memory"); }
  __syncwarp();
}

__device__ __forceinline__ void quiet_block(uint64_t endpoints, int64_t peer) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4163u);
  [[maybe_unused]] const uint64_t ab_management1 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->management_address);
  [[maybe_unused]] const uint64_t ab_target2 = ab_leader ? detail::mlx5_last_posted(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management1)->reserved), 0) : 0;
  [[maybe_unused]] const uint64_t ab_freed3 = ab_leader ? detail::mlx5_last_posted(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management1)->reserved), 1) : 0;
  [[maybe_unused]] const uint64_t ab_cq4 = detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->cq_buffer_address);
  if (ab_leader) {
    {
      const uint64_t ab_start = detail::globaltimer();
      uint64_t ab_seen;
      for (;;) {
        ab_seen = detail::mlx5_newest_cqe_word(ab_endpoint0, ab_management1);
        if (!(detail::mlx5_completion_pending(static_cast<uint32_t>(ab_seen), ab_target2))) break;
        detail::give_up_if_overdue(ab_endpoint0, ab_start, ab_cq4, ab_target2, detail::mlx5_cqe_counter(static_cast<uint32_t>(ab_seen)), static_cast<int32_t>(detail::table_load(&reinterpret_cast<const EndpointHandle*>(ab_endpoint0)->peer_rank)), 4164u, 2u);
      }
    }
  }
  if (ab_leader) { [[maybe_unused]] uint64_t ab_old; asm volatile("atom.relaxed.gpu.global.max.u64 %0, [%1], %2;" : "=l"(ab_old) : "l"(reinterpret_cast<uint64_t>(&reinterpret_cast<Mlx5QueueManagement*>(ab_management1)->consumer_index)), "l"(ab_freed3) : "memory"); }
  __syncthreads();
}

__device__ __forceinline__ void wait_signal_eq_thread(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = 0u;
  [[maybe_unused]] const uint32_t ab_lanes = 1u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4165u);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen == static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4166u, 8u);
    }
  }
}

__device__ __forceinline__ void wait_signal_eq_warp(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4167u);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen == static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4168u, 8u);
    }
  }
}

__device__ __forceinline__ void wait_signal_eq_block(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4169u);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen == static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4170u, 8u);
    }
  }
}

__device__ __forceinline__ void wait_signal_ne_thread(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = 0u;
  [[maybe_unused]] const uint32_t ab_lanes = 1u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4171u);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen != static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4172u, 9u);
    }
  }
}

__device__ __forceinline__ void wait_signal_ne_warp(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4173u);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen != static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4174u, 9u);
    }
  }
}

__device__ __forceinline__ void wait_signal_ne_block(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4175u);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen != static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4176u, 9u);
    }
  }
}

__device__ __forceinline__ void wait_signal_gt_thread(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = 0u;
  [[maybe_unused]] const uint32_t ab_lanes = 1u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4177u);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen > static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4178u, 10u);
    }
  }
}

__device__ __forceinline__ void wait_signal_gt_warp(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4179u);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen > static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4180u, 10u);
    }
  }
}

__device__ __forceinline__ void wait_signal_gt_block(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4181u);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen > static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4182u, 10u);
    }
  }
}

__device__ __forceinline__ void wait_signal_le_thread(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = 0u;
  [[maybe_unused]] const uint32_t ab_lanes = 1u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4183u);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen <= static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4184u, 11u);
    }
  }
}

__device__ __forceinline__ void wait_signal_le_warp(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4185u);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen <= static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4186u, 11u);
    }
  }
}

__device__ __forceinline__ void wait_signal_le_block(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4187u);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen <= static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4188u, 11u);
    }
  }
}

__device__ __forceinline__ void wait_signal_lt_thread(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = 0u;
  [[maybe_unused]] const uint32_t ab_lanes = 1u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4189u);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen < static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4190u, 12u);
    }
  }
}

__device__ __forceinline__ void wait_signal_lt_warp(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4191u);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen < static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4192u, 12u);
    }
  }
}

__device__ __forceinline__ void wait_signal_lt_block(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4193u);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen < static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4194u, 12u);
    }
  }
}

__device__ __forceinline__ void wait_signal_ge_thread(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = 0u;
  [[maybe_unused]] const uint32_t ab_lanes = 1u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4195u);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen >= static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4196u, 0u);
    }
  }
}

__device__ __forceinline__ void wait_signal_ge_warp(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4197u);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen >= static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4198u, 0u);
    }
  }
}

__device__ __forceinline__ void wait_signal_ge_block(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  detail::mlx5_exit_unless_supported_endpoint(ab_endpoint0, 4199u);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen >= static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4200u, 0u);
    }
  }
}

}  // namespace generated

ABOLETH_DEVICE_DEFINITION void put(DeviceContext ctx, int peer, RemoteRegion dst, LocalRegion src, uint64_t bytes) {
  generated::put_thread(ctx.endpoint_handles_address, static_cast<int64_t>(peer), dst.descriptors_address, static_cast<int64_t>(dst.offset_bytes), src.address, static_cast<int32_t>(src.lkey), static_cast<int64_t>(bytes));
}

ABOLETH_DEVICE_DEFINITION void put_warp(DeviceContext ctx, int peer, RemoteRegion dst, LocalRegion src, uint64_t bytes) {
  generated::put_warp(ctx.endpoint_handles_address, static_cast<int64_t>(peer), dst.descriptors_address, static_cast<int64_t>(dst.offset_bytes), src.address, static_cast<int32_t>(src.lkey), static_cast<int64_t>(bytes));
}

ABOLETH_DEVICE_DEFINITION void put_block(DeviceContext ctx, int peer, RemoteRegion dst, LocalRegion src, uint64_t bytes) {
  generated::put_block(ctx.endpoint_handles_address, static_cast<int64_t>(peer), dst.descriptors_address, static_cast<int64_t>(dst.offset_bytes), src.address, static_cast<int32_t>(src.lkey), static_cast<int64_t>(bytes));
}

ABOLETH_DEVICE_DEFINITION void put_signal(DeviceContext ctx, int peer, RemoteRegion dst, LocalRegion src, uint64_t bytes, RemoteRegion flag, uint64_t value, SignalOp op) {
  if (flag.offset_bytes % 8 != 0) detail::refuse("aboleth::put_signal: the flag's offset is not a multiple of 8 bytes (flags are aligned 64-bit words)");
  if (op == SignalOp::add) {
    generated::put_signal_add_thread(ctx.endpoint_handles_address, static_cast<int64_t>(peer), dst.descriptors_address, static_cast<int64_t>(dst.offset_bytes), src.address, static_cast<int32_t>(src.lkey), static_cast<int64_t>(bytes), flag.descriptors_address, static_cast<int64_t>(flag.offset_bytes / 8), static_cast<int64_t>(value));
  } else {
    generated::put_signal_set_thread(ctx.endpoint_handles_address, static_cast<int64_t>(peer), dst.descriptors_address, static_cast<int64_t>(dst.offset_bytes), src.address, static_cast<int32_t>(src.lkey), static_cast<int64_t>(bytes), flag.descriptors_address, static_cast<int64_t>(flag.offset_bytes / 8), static_cast<int64_t>(value));
  }
}

ABOLETH_DEVICE_DEFINITION void put_signal_warp(DeviceContext ctx, int peer, RemoteRegion dst, LocalRegion src, uint64_t bytes, RemoteRegion flag, uint64_t value, SignalOp op) {
  if (flag.offset_bytes % 8 != 0) detail::refuse("aboleth::put_signal_warp: the flag's offset is not a multiple of 8 bytes (flags are aligned 64-bit words)");
  if (op == SignalOp::add) {
    generated::put_signal_add_warp(ctx.endpoint_handles_address, static_cast<int64_t>(peer), dst.descriptors_address, static_cast<int64_t>(dst.offset_bytes), src.address, static_cast<int32_t>(src.lkey), static_cast<int64_t>(bytes), flag.descriptors_address, static_cast<int64_t>(flag.offset_bytes / 8), static_cast<int64_t>(value));
  } else {
    generated::put_signal_set_warp(ctx.endpoint_handles_address, static_cast<int64_t>(peer), dst.descriptors_address, static_cast<int64_t>(dst.offset_bytes), src.address, static_cast<int32_t>(src.lkey), static_cast<int64_t>(bytes), flag.descriptors_address, static_cast<int64_t>(flag.offset_bytes / 8), static_cast<int64_t>(value));
  }
}

ABOLETH_DEVICE_DEFINITION void put_signal_block(DeviceContext ctx, int peer, RemoteRegion dst, LocalRegion src, uint64_t bytes, RemoteRegion flag, uint64_t value, SignalOp op) {
  if (flag.offset_bytes % 8 != 0) detail::refuse("aboleth::put_signal_block: the flag's offset is not a multiple of 8 bytes (flags are aligned 64-bit words)");
  if (op == SignalOp::add) {
    generated::put_signal_add_block(ctx.endpoint_handles_address, static_cast<int64_t>(peer), dst.descriptors_address, static_cast<int64_t>(dst.offset_bytes), src.address, static_cast<int32_t>(src.lkey), static_cast<int64_t>(bytes), flag.descriptors_address, static_cast<int64_t>(flag.offset_bytes / 8), static_cast<int64_t>(value));
  } else {
    generated::put_signal_set_block(ctx.endpoint_handles_address, static_cast<int64_t>(peer), dst.descriptors_address, static_cast<int64_t>(dst.offset_bytes), src.address, static_cast<int32_t>(src.lkey), static_cast<int64_t>(bytes), flag.descriptors_address, static_cast<int64_t>(flag.offset_bytes / 8), static_cast<int64_t>(value));
  }
}

ABOLETH_DEVICE_DEFINITION void signal(DeviceContext ctx, int peer, RemoteRegion flag, uint64_t value, SignalOp op) {
  if (flag.offset_bytes % 8 != 0) detail::refuse("aboleth::signal: the flag's offset is not a multiple of 8 bytes (flags are aligned 64-bit words)");
  if (op == SignalOp::add) {
    generated::signal_add_thread(ctx.endpoint_handles_address, static_cast<int64_t>(peer), flag.descriptors_address, static_cast<int64_t>(flag.offset_bytes / 8), static_cast<int64_t>(value));
  } else {
    generated::signal_set_thread(ctx.endpoint_handles_address, static_cast<int64_t>(peer), flag.descriptors_address, static_cast<int64_t>(flag.offset_bytes / 8), static_cast<int64_t>(value));
  }
}

ABOLETH_DEVICE_DEFINITION void signal_warp(DeviceContext ctx, int peer, RemoteRegion flag, uint64_t value, SignalOp op) {
  if (flag.offset_bytes % 8 != 0) detail::refuse("aboleth::signal_warp: the flag's offset is not a multiple of 8 bytes (flags are aligned 64-bit words)");
  if (op == SignalOp::add) {
    generated::signal_add_warp(ctx.endpoint_handles_address, static_cast<int64_t>(peer), flag.descriptors_address, static_cast<int64_t>(flag.offset_bytes / 8), static_cast<int64_t>(value));
  } else {
    generated::signal_set_warp(ctx.endpoint_handles_address, static_cast<int64_t>(peer), flag.descriptors_address, static_cast<int64_t>(flag.offset_bytes / 8), static_cast<int64_t>(value));
  }
}

ABOLETH_DEVICE_DEFINITION void signal_block(DeviceContext ctx, int peer, RemoteRegion flag, uint64_t value, SignalOp op) {
  if (flag.offset_bytes % 8 != 0) detail::refuse("aboleth::signal_block: the flag's offset is not a multiple of 8 bytes (flags are aligned 64-bit words)");
  if (op == SignalOp::add) {
    generated::signal_add_block(ctx.endpoint_handles_address, static_cast<int64_t>(peer), flag.descriptors_address, static_cast<int64_t>(flag.offset_bytes / 8), static_cast<int64_t>(value));
  } else {
    generated::signal_set_block(ctx.endpoint_handles_address, static_cast<int64_t>(peer), flag.descriptors_address, static_cast<int64_t>(flag.offset_bytes / 8), static_cast<int64_t>(value));
  }
}

ABOLETH_DEVICE_DEFINITION void fence(DeviceContext ctx, int peer) {
  generated::fence_thread(ctx.endpoint_handles_address, static_cast<int64_t>(peer));
}

ABOLETH_DEVICE_DEFINITION void fence_warp(DeviceContext ctx, int peer) {
  generated::fence_warp(ctx.endpoint_handles_address, static_cast<int64_t>(peer));
}

ABOLETH_DEVICE_DEFINITION void fence_block(DeviceContext ctx, int peer) {
  generated::fence_block(ctx.endpoint_handles_address, static_cast<int64_t>(peer));
}

ABOLETH_DEVICE_DEFINITION void quiet(DeviceContext ctx, int peer) {
  generated::quiet_thread(ctx.endpoint_handles_address, static_cast<int64_t>(peer));
}

ABOLETH_DEVICE_DEFINITION void quiet_warp(DeviceContext ctx, int peer) {
  generated::quiet_warp(ctx.endpoint_handles_address, static_cast<int64_t>(peer));
}

ABOLETH_DEVICE_DEFINITION void quiet_block(DeviceContext ctx, int peer) {
  generated::quiet_block(ctx.endpoint_handles_address, static_cast<int64_t>(peer));
}

ABOLETH_DEVICE_DEFINITION void wait_signal(DeviceContext ctx, const uint64_t* my_flag, uint64_t value, Comparison comparison) {
  switch (comparison) {
    case Comparison::eq: generated::wait_signal_eq_thread(ctx.endpoint_handles_address, static_cast<int64_t>(ctx.rank), reinterpret_cast<uint64_t>(my_flag), static_cast<int64_t>(value)); return;
    case Comparison::ne: generated::wait_signal_ne_thread(ctx.endpoint_handles_address, static_cast<int64_t>(ctx.rank), reinterpret_cast<uint64_t>(my_flag), static_cast<int64_t>(value)); return;
    case Comparison::gt: generated::wait_signal_gt_thread(ctx.endpoint_handles_address, static_cast<int64_t>(ctx.rank), reinterpret_cast<uint64_t>(my_flag), static_cast<int64_t>(value)); return;
    case Comparison::le: generated::wait_signal_le_thread(ctx.endpoint_handles_address, static_cast<int64_t>(ctx.rank), reinterpret_cast<uint64_t>(my_flag), static_cast<int64_t>(value)); return;
    case Comparison::lt: generated::wait_signal_lt_thread(ctx.endpoint_handles_address, static_cast<int64_t>(ctx.rank), reinterpret_cast<uint64_t>(my_flag), static_cast<int64_t>(value)); return;
    case Comparison::ge: generated::wait_signal_ge_thread(ctx.endpoint_handles_address, static_cast<int64_t>(ctx.rank), reinterpret_cast<uint64_t>(my_flag), static_cast<int64_t>(value)); return;
  }
  detail::refuse("aboleth::wait_signal: the comparison is not one of Comparison::eq, ne, gt, le, lt, ge (NVSHMEM_CMP_* 0 to 5)");
}

ABOLETH_DEVICE_DEFINITION void wait_signal_warp(DeviceContext ctx, const uint64_t* my_flag, uint64_t value, Comparison comparison) {
  switch (comparison) {
    case Comparison::eq: generated::wait_signal_eq_warp(ctx.endpoint_handles_address, static_cast<int64_t>(ctx.rank), reinterpret_cast<uint64_t>(my_flag), static_cast<int64_t>(value)); return;
    case Comparison::ne: generated::wait_signal_ne_warp(ctx.endpoint_handles_address, static_cast<int64_t>(ctx.rank), reinterpret_cast<uint64_t>(my_flag), static_cast<int64_t>(value)); return;
    case Comparison::gt: generated::wait_signal_gt_warp(ctx.endpoint_handles_address, static_cast<int64_t>(ctx.rank), reinterpret_cast<uint64_t>(my_flag), static_cast<int64_t>(value)); return;
    case Comparison::le: generated::wait_signal_le_warp(ctx.endpoint_handles_address, static_cast<int64_t>(ctx.rank), reinterpret_cast<uint64_t>(my_flag), static_cast<int64_t>(value)); return;
    case Comparison::lt: generated::wait_signal_lt_warp(ctx.endpoint_handles_address, static_cast<int64_t>(ctx.rank), reinterpret_cast<uint64_t>(my_flag), static_cast<int64_t>(value)); return;
    case Comparison::ge: generated::wait_signal_ge_warp(ctx.endpoint_handles_address, static_cast<int64_t>(ctx.rank), reinterpret_cast<uint64_t>(my_flag), static_cast<int64_t>(value)); return;
  }
  detail::refuse("aboleth::wait_signal_warp: the comparison is not one of Comparison::eq, ne, gt, le, lt, ge (NVSHMEM_CMP_* 0 to 5)");
}

ABOLETH_DEVICE_DEFINITION void wait_signal_block(DeviceContext ctx, const uint64_t* my_flag, uint64_t value, Comparison comparison) {
  switch (comparison) {
    case Comparison::eq: generated::wait_signal_eq_block(ctx.endpoint_handles_address, static_cast<int64_t>(ctx.rank), reinterpret_cast<uint64_t>(my_flag), static_cast<int64_t>(value)); return;
    case Comparison::ne: generated::wait_signal_ne_block(ctx.endpoint_handles_address, static_cast<int64_t>(ctx.rank), reinterpret_cast<uint64_t>(my_flag), static_cast<int64_t>(value)); return;
    case Comparison::gt: generated::wait_signal_gt_block(ctx.endpoint_handles_address, static_cast<int64_t>(ctx.rank), reinterpret_cast<uint64_t>(my_flag), static_cast<int64_t>(value)); return;
    case Comparison::le: generated::wait_signal_le_block(ctx.endpoint_handles_address, static_cast<int64_t>(ctx.rank), reinterpret_cast<uint64_t>(my_flag), static_cast<int64_t>(value)); return;
    case Comparison::lt: generated::wait_signal_lt_block(ctx.endpoint_handles_address, static_cast<int64_t>(ctx.rank), reinterpret_cast<uint64_t>(my_flag), static_cast<int64_t>(value)); return;
    case Comparison::ge: generated::wait_signal_ge_block(ctx.endpoint_handles_address, static_cast<int64_t>(ctx.rank), reinterpret_cast<uint64_t>(my_flag), static_cast<int64_t>(value)); return;
  }
  detail::refuse("aboleth::wait_signal_block: the comparison is not one of Comparison::eq, ne, gt, le, lt, ge (NVSHMEM_CMP_* 0 to 5)");
}

ABOLETH_DEVICE_DEFINITION void* ptr(DeviceContext ctx, int peer, RemoteRegion region) {
  (void)ctx;
  (void)ctx; (void)region; (void)peer;
  return nullptr;  // the NIC reaches peers: no load/store address
}

}  // namespace aboleth
