// aboleth/detail/device_p2p.cuh: the implementation of aboleth/device.cuh (generated; do not edit).
// The bodies in `generated` are the p2p lowering of each operation, encoded for a thread, a
// warp and a block. Wait sites (the site ids World.check_waits() reports):
//   site 4096: wait_signal_eq_thread, waiting for a flag to equal the value
//   site 4097: wait_signal_eq_warp, waiting for a flag to equal the value
//   site 4098: wait_signal_eq_block, waiting for a flag to equal the value
//   site 4099: wait_signal_ne_thread, waiting for a flag to differ from the value
//   site 4100: wait_signal_ne_warp, waiting for a flag to differ from the value
//   site 4101: wait_signal_ne_block, waiting for a flag to differ from the value
//   site 4102: wait_signal_gt_thread, waiting for a flag to exceed the value
//   site 4103: wait_signal_gt_warp, waiting for a flag to exceed the value
//   site 4104: wait_signal_gt_block, waiting for a flag to exceed the value
//   site 4105: wait_signal_le_thread, waiting for a flag to be at most the value
//   site 4106: wait_signal_le_warp, waiting for a flag to be at most the value
//   site 4107: wait_signal_le_block, waiting for a flag to be at most the value
//   site 4108: wait_signal_lt_thread, waiting for a flag to be below the value
//   site 4109: wait_signal_lt_warp, waiting for a flag to be below the value
//   site 4110: wait_signal_lt_block, waiting for a flag to be below the value
//   site 4111: wait_signal_ge_thread, waiting for a flag to reach the value
//   site 4112: wait_signal_ge_warp, waiting for a flag to reach the value
//   site 4113: wait_signal_ge_block, waiting for a flag to reach the value
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
  [[maybe_unused]] const uint64_t ab_descriptor1 = dst_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_base2 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address);
  [[maybe_unused]] const uint64_t ab_offset3 = static_cast<uint64_t>(dst_offset) * 1u;
  [[maybe_unused]] const int64_t ab_v4 = static_cast<int64_t>(src_key);
  [[maybe_unused]] const uint64_t ab_address5 = ab_base2 + ab_offset3;
  detail::copy_to_peer(ab_address5, src, static_cast<uint64_t>(bytes), ab_lane, ab_lanes);
}

__device__ __forceinline__ void put_warp(uint64_t endpoints, int64_t peer, uint64_t dst_table, int64_t dst_offset, uint64_t src, int32_t src_key, int64_t bytes) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  [[maybe_unused]] const uint64_t ab_descriptor1 = dst_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_base2 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address);
  [[maybe_unused]] const uint64_t ab_offset3 = static_cast<uint64_t>(dst_offset) * 1u;
  [[maybe_unused]] const int64_t ab_v4 = static_cast<int64_t>(src_key);
  [[maybe_unused]] const uint64_t ab_address5 = ab_base2 + ab_offset3;
  detail::copy_to_peer(ab_address5, src, static_cast<uint64_t>(bytes), ab_lane, ab_lanes);
}

__device__ __forceinline__ void put_block(uint64_t endpoints, int64_t peer, uint64_t dst_table, int64_t dst_offset, uint64_t src, int32_t src_key, int64_t bytes) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  [[maybe_unused]] const uint64_t ab_descriptor1 = dst_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_base2 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address);
  [[maybe_unused]] const uint64_t ab_offset3 = static_cast<uint64_t>(dst_offset) * 1u;
  [[maybe_unused]] const int64_t ab_v4 = static_cast<int64_t>(src_key);
  [[maybe_unused]] const uint64_t ab_address5 = ab_base2 + ab_offset3;
  detail::copy_to_peer(ab_address5, src, static_cast<uint64_t>(bytes), ab_lane, ab_lanes);
}

__device__ __forceinline__ void put_signal_set_thread(uint64_t endpoints, int64_t peer, uint64_t dst_table, int64_t dst_offset, uint64_t src, int32_t src_key, int64_t bytes, uint64_t flag_table, int64_t flag_index, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = 0u;
  [[maybe_unused]] const uint32_t ab_lanes = 1u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  [[maybe_unused]] const uint64_t ab_descriptor1 = dst_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_base2 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address);
  [[maybe_unused]] const uint64_t ab_descriptor3 = flag_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_base4 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor3)->base_address);
  [[maybe_unused]] const uint64_t ab_offset5 = static_cast<uint64_t>(dst_offset) * 1u;
  [[maybe_unused]] const int64_t ab_v6 = static_cast<int64_t>(src_key);
  [[maybe_unused]] const uint64_t ab_address7 = ab_base2 + ab_offset5;
  detail::copy_to_peer(ab_address7, src, static_cast<uint64_t>(bytes), ab_lane, ab_lanes);
  [[maybe_unused]] const uint64_t ab_offset8 = static_cast<uint64_t>(flag_index) * 8u;
  [[maybe_unused]] const uint64_t ab_address9 = ab_base4 + ab_offset8;
  if (ab_leader) { asm volatile("st.release.sys.global.u64 [%0], %1;" :: "l"(ab_address9), "l"(static_cast<uint64_t>(value)) : "memory"); }
}

__device__ __forceinline__ void put_signal_set_warp(uint64_t endpoints, int64_t peer, uint64_t dst_table, int64_t dst_offset, uint64_t src, int32_t src_key, int64_t bytes, uint64_t flag_table, int64_t flag_index, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  [[maybe_unused]] const uint64_t ab_descriptor1 = dst_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_base2 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address);
  [[maybe_unused]] const uint64_t ab_descriptor3 = flag_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_base4 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor3)->base_address);
  [[maybe_unused]] const uint64_t ab_offset5 = static_cast<uint64_t>(dst_offset) * 1u;
  [[maybe_unused]] const int64_t ab_v6 = static_cast<int64_t>(src_key);
  [[maybe_unused]] const uint64_t ab_address7 = ab_base2 + ab_offset5;
  detail::copy_to_peer(ab_address7, src, static_cast<uint64_t>(bytes), ab_lane, ab_lanes);
  [[maybe_unused]] const uint64_t ab_offset8 = static_cast<uint64_t>(flag_index) * 8u;
  __syncwarp();
  [[maybe_unused]] const uint64_t ab_address9 = ab_base4 + ab_offset8;
  if (ab_leader) { asm volatile("st.release.sys.global.u64 [%0], %1;" :: "l"(ab_address9), "l"(static_cast<uint64_t>(value)) : "memory"); }
}

__device__ __forceinline__ void put_signal_set_block(uint64_t endpoints, int64_t peer, uint64_t dst_table, int64_t dst_offset, uint64_t src, int32_t src_key, int64_t bytes, uint64_t flag_table, int64_t flag_index, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  [[maybe_unused]] const uint64_t ab_descriptor1 = dst_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_base2 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address);
  [[maybe_unused]] const uint64_t ab_descriptor3 = flag_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_base4 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor3)->base_address);
  [[maybe_unused]] const uint64_t ab_offset5 = static_cast<uint64_t>(dst_offset) * 1u;
  [[maybe_unused]] const int64_t ab_v6 = static_cast<int64_t>(src_key);
  [[maybe_unused]] const uint64_t ab_address7 = ab_base2 + ab_offset5;
  detail::copy_to_peer(ab_address7, src, static_cast<uint64_t>(bytes), ab_lane, ab_lanes);
  [[maybe_unused]] const uint64_t ab_offset8 = static_cast<uint64_t>(flag_index) * 8u;
  __syncthreads();
  [[maybe_unused]] const uint64_t ab_address9 = ab_base4 + ab_offset8;
  if (ab_leader) { asm volatile("st.release.sys.global.u64 [%0], %1;" :: "l"(ab_address9), "l"(static_cast<uint64_t>(value)) : "memory"); }
}

__device__ __forceinline__ void put_signal_add_thread(uint64_t endpoints, int64_t peer, uint64_t dst_table, int64_t dst_offset, uint64_t src, int32_t src_key, int64_t bytes, uint64_t flag_table, int64_t flag_index, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = 0u;
  [[maybe_unused]] const uint32_t ab_lanes = 1u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  [[maybe_unused]] const uint64_t ab_descriptor1 = dst_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_base2 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address);
  [[maybe_unused]] const uint64_t ab_descriptor3 = flag_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_base4 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor3)->base_address);
  [[maybe_unused]] const uint64_t ab_offset5 = static_cast<uint64_t>(dst_offset) * 1u;
  [[maybe_unused]] const int64_t ab_v6 = static_cast<int64_t>(src_key);
  [[maybe_unused]] const uint64_t ab_address7 = ab_base2 + ab_offset5;
  detail::copy_to_peer(ab_address7, src, static_cast<uint64_t>(bytes), ab_lane, ab_lanes);
  [[maybe_unused]] const uint64_t ab_offset8 = static_cast<uint64_t>(flag_index) * 8u;
  [[maybe_unused]] const uint64_t ab_address9 = ab_base4 + ab_offset8;
  if (ab_leader) { asm volatile("red.release.sys.global.add.u64 [%0], %1;" :: "l"(ab_address9), "l"(static_cast<uint64_t>(value)) : "memory"); }
}

__device__ __forceinline__ void put_signal_add_warp(uint64_t endpoints, int64_t peer, uint64_t dst_table, int64_t dst_offset, uint64_t src, int32_t src_key, int64_t bytes, uint64_t flag_table, int64_t flag_index, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  [[maybe_unused]] const uint64_t ab_descriptor1 = dst_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_base2 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address);
  [[maybe_unused]] const uint64_t ab_descriptor3 = flag_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_base4 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor3)->base_address);
  [[maybe_unused]] const uint64_t ab_offset5 = static_cast<uint64_t>(dst_offset) * 1u;
  [[maybe_unused]] const int64_t ab_v6 = static_cast<int64_t>(src_key);
  [[maybe_unused]] const uint64_t ab_address7 = ab_base2 + ab_offset5;
  detail::copy_to_peer(ab_address7, src, static_cast<uint64_t>(bytes), ab_lane, ab_lanes);
  [[maybe_unused]] const uint64_t ab_offset8 = static_cast<uint64_t>(flag_index) * 8u;
  __syncwarp();
  [[maybe_unused]] const uint64_t ab_address9 = ab_base4 + ab_offset8;
  if (ab_leader) { asm volatile("red.release.sys.global.add.u64 [%0], %1;" :: "l"(ab_address9), "l"(static_cast<uint64_t>(value)) : "memory"); }
}

__device__ __forceinline__ void put_signal_add_block(uint64_t endpoints, int64_t peer, uint64_t dst_table, int64_t dst_offset, uint64_t src, int32_t src_key, int64_t bytes, uint64_t flag_table, int64_t flag_index, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  [[maybe_unused]] const uint64_t ab_descriptor1 = dst_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_base2 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address);
  [[maybe_unused]] const uint64_t ab_descriptor3 = flag_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_base4 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor3)->base_address);
  [[maybe_unused]] const uint64_t ab_offset5 = static_cast<uint64_t>(dst_offset) * 1u;
  [[maybe_unused]] const int64_t ab_v6 = static_cast<int64_t>(src_key);
  [[maybe_unused]] const uint64_t ab_address7 = ab_base2 + ab_offset5;
  detail::copy_to_peer(ab_address7, src, static_cast<uint64_t>(bytes), ab_lane, ab_lanes);
  [[maybe_unused]] const uint64_t ab_offset8 = static_cast<uint64_t>(flag_index) * 8u;
  __syncthreads();
  [[maybe_unused]] const uint64_t ab_address9 = ab_base4 + ab_offset8;
  if (ab_leader) { asm volatile("red.release.sys.global.add.u64 [%0], %1;" :: "l"(ab_address9), "l"(static_cast<uint64_t>(value)) : "memory"); }
}

__device__ __forceinline__ void signal_set_thread(uint64_t endpoints, int64_t peer, uint64_t flag_table, int64_t flag_index, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = 0u;
  [[maybe_unused]] const uint32_t ab_lanes = 1u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  [[maybe_unused]] const uint64_t ab_descriptor1 = flag_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_base2 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address);
  [[maybe_unused]] const uint64_t ab_offset3 = static_cast<uint64_t>(flag_index) * 8u;
  [[maybe_unused]] const uint64_t ab_address4 = ab_base2 + ab_offset3;
  if (ab_leader) { asm volatile("st.release.sys.global.u64 [%0], %1;" :: "l"(ab_address4), "l"(static_cast<uint64_t>(value)) : "memory"); }
}

__device__ __forceinline__ void signal_set_warp(uint64_t endpoints, int64_t peer, uint64_t flag_table, int64_t flag_index, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  [[maybe_unused]] const uint64_t ab_descriptor1 = flag_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_base2 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address);
  [[maybe_unused]] const uint64_t ab_offset3 = static_cast<uint64_t>(flag_index) * 8u;
  __syncwarp();
  [[maybe_unused]] const uint64_t ab_address4 = ab_base2 + ab_offset3;
  if (ab_leader) { asm volatile("st.release.sys.global.u64 [%0], %1;" :: "l"(ab_address4), "l"(static_cast<uint64_t>(value)) : "memory"); }
}

__device__ __forceinline__ void signal_set_block(uint64_t endpoints, int64_t peer, uint64_t flag_table, int64_t flag_index, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  [[maybe_unused]] const uint64_t ab_descriptor1 = flag_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_base2 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address);
  [[maybe_unused]] const uint64_t ab_offset3 = static_cast<uint64_t>(flag_index) * 8u;
  __syncthreads();
  [[maybe_unused]] const uint64_t ab_address4 = ab_base2 + ab_offset3;
  if (ab_leader) { asm volatile("st.release.sys.global.u64 [%0], %1;" :: "l"(ab_address4), "l"(static_cast<uint64_t>(value)) : "memory"); }
}

__device__ __forceinline__ void signal_add_thread(uint64_t endpoints, int64_t peer, uint64_t flag_table, int64_t flag_index, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = 0u;
  [[maybe_unused]] const uint32_t ab_lanes = 1u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  [[maybe_unused]] const uint64_t ab_descriptor1 = flag_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_base2 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address);
  [[maybe_unused]] const uint64_t ab_offset3 = static_cast<uint64_t>(flag_index) * 8u;
  [[maybe_unused]] const uint64_t ab_address4 = ab_base2 + ab_offset3;
  if (ab_leader) { asm volatile("red.release.sys.global.add.u64 [%0], %1;" :: "l"(ab_address4), "l"(static_cast<uint64_t>(value)) : "memory"); }
}

__device__ __forceinline__ void signal_add_warp(uint64_t endpoints, int64_t peer, uint64_t flag_table, int64_t flag_index, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  [[maybe_unused]] const uint64_t ab_descriptor1 = flag_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_base2 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address);
  [[maybe_unused]] const uint64_t ab_offset3 = static_cast<uint64_t>(flag_index) * 8u;
  __syncwarp();
  [[maybe_unused]] const uint64_t ab_address4 = ab_base2 + ab_offset3;
  if (ab_leader) { asm volatile("red.release.sys.global.add.u64 [%0], %1;" :: "l"(ab_address4), "l"(static_cast<uint64_t>(value)) : "memory"); }
}

__device__ __forceinline__ void signal_add_block(uint64_t endpoints, int64_t peer, uint64_t flag_table, int64_t flag_index, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  [[maybe_unused]] const uint64_t ab_descriptor1 = flag_table + static_cast<uint64_t>(peer) * sizeof(RemoteRegionDescriptor);
  [[maybe_unused]] const uint64_t ab_base2 = detail::table_load(&reinterpret_cast<const RemoteRegionDescriptor*>(ab_descriptor1)->base_address);
  [[maybe_unused]] const uint64_t ab_offset3 = static_cast<uint64_t>(flag_index) * 8u;
  __syncthreads();
  [[maybe_unused]] const uint64_t ab_address4 = ab_base2 + ab_offset3;
  if (ab_leader) { asm volatile("red.release.sys.global.add.u64 [%0], %1;" :: "l"(ab_address4), "l"(static_cast<uint64_t>(value)) : "memory"); }
}

__device__ __forceinline__ void fence_thread(uint64_t endpoints, int64_t peer) {
  [[maybe_unused]] const uint32_t ab_lane = 0u;
  [[maybe_unused]] const uint32_t ab_lanes = 1u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  asm volatile("fence.sc.sys;" ::: "memory");
}

__device__ __forceinline__ void fence_warp(uint64_t endpoints, int64_t peer) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  asm volatile("fence.sc.sys;" ::: "memory");
}

__device__ __forceinline__ void fence_block(uint64_t endpoints, int64_t peer) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  asm volatile("fence.sc.sys;" ::: "memory");
}

__device__ __forceinline__ void quiet_thread(uint64_t endpoints, int64_t peer) {
  [[maybe_unused]] const uint32_t ab_lane = 0u;
  [[maybe_unused]] const uint32_t ab_lanes = 1u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  asm volatile("fence.sc.sys;" ::: "memory");
}

__device__ __forceinline__ void quiet_warp(uint64_t endpoints, int64_t peer) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  asm volatile("fence.sc.sys;" ::: "memory");
}

__device__ __forceinline__ void quiet_block(uint64_t endpoints, int64_t peer) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(peer) * sizeof(EndpointHandle);
  asm volatile("fence.sc.sys;" ::: "memory");
}

__device__ __forceinline__ void wait_signal_eq_thread(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = 0u;
  [[maybe_unused]] const uint32_t ab_lanes = 1u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen == static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4096u, 8u);
    }
  }
}

__device__ __forceinline__ void wait_signal_eq_warp(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen == static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4097u, 8u);
    }
  }
}

__device__ __forceinline__ void wait_signal_eq_block(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen == static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4098u, 8u);
    }
  }
}

__device__ __forceinline__ void wait_signal_ne_thread(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = 0u;
  [[maybe_unused]] const uint32_t ab_lanes = 1u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen != static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4099u, 9u);
    }
  }
}

__device__ __forceinline__ void wait_signal_ne_warp(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen != static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4100u, 9u);
    }
  }
}

__device__ __forceinline__ void wait_signal_ne_block(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen != static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4101u, 9u);
    }
  }
}

__device__ __forceinline__ void wait_signal_gt_thread(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = 0u;
  [[maybe_unused]] const uint32_t ab_lanes = 1u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen > static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4102u, 10u);
    }
  }
}

__device__ __forceinline__ void wait_signal_gt_warp(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen > static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4103u, 10u);
    }
  }
}

__device__ __forceinline__ void wait_signal_gt_block(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen > static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4104u, 10u);
    }
  }
}

__device__ __forceinline__ void wait_signal_le_thread(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = 0u;
  [[maybe_unused]] const uint32_t ab_lanes = 1u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen <= static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4105u, 11u);
    }
  }
}

__device__ __forceinline__ void wait_signal_le_warp(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen <= static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4106u, 11u);
    }
  }
}

__device__ __forceinline__ void wait_signal_le_block(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen <= static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4107u, 11u);
    }
  }
}

__device__ __forceinline__ void wait_signal_lt_thread(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = 0u;
  [[maybe_unused]] const uint32_t ab_lanes = 1u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen < static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4108u, 12u);
    }
  }
}

__device__ __forceinline__ void wait_signal_lt_warp(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen < static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4109u, 12u);
    }
  }
}

__device__ __forceinline__ void wait_signal_lt_block(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen < static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4110u, 12u);
    }
  }
}

__device__ __forceinline__ void wait_signal_ge_thread(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = 0u;
  [[maybe_unused]] const uint32_t ab_lanes = 1u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen >= static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4111u, 0u);
    }
  }
}

__device__ __forceinline__ void wait_signal_ge_warp(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::lane_in_warp();
  [[maybe_unused]] const uint32_t ab_lanes = 32u;
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen >= static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4112u, 0u);
    }
  }
}

__device__ __forceinline__ void wait_signal_ge_block(uint64_t endpoints, int64_t rank, uint64_t my_flag, int64_t value) {
  [[maybe_unused]] const uint32_t ab_lane = detail::thread_in_block();
  [[maybe_unused]] const uint32_t ab_lanes = detail::threads_in_block();
  [[maybe_unused]] const bool ab_leader = ab_lane == 0;
  [[maybe_unused]] const uint64_t ab_endpoint0 = endpoints + static_cast<uint64_t>(rank) * sizeof(EndpointHandle);
  {
    const uint64_t ab_start = detail::globaltimer();
    uint64_t ab_seen;
    for (;;) {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(ab_seen) : "l"(my_flag) : "memory");
      if (!(!(ab_seen >= static_cast<uint64_t>(value)))) break;
      detail::give_up_if_overdue(ab_endpoint0, ab_start, my_flag, static_cast<uint64_t>(value), ab_seen, -1, 4113u, 0u);
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
  const RemoteRegionDescriptor* descriptor =
      reinterpret_cast<const RemoteRegionDescriptor*>(region.descriptors_address) + peer;
  return reinterpret_cast<void*>(descriptor->base_address + region.offset_bytes);
}

}  // namespace aboleth
