// The bitcode entry points of aboleth::wait_signal (generated; do not edit): scalar arguments, an int
// result, C linkage, for Triton's extern_libs and CuTe DSL.
#include <aboleth/device.cuh>

extern "C" __device__ int aboleth_tier1_wait_signal(uint64_t endpoint_handles, uint32_t rank, uint32_t world_size, uint64_t my_flag, uint64_t value, uint32_t comparison) {
  const aboleth::DeviceContext ctx{endpoint_handles, rank, world_size};
  aboleth::wait_signal(ctx, reinterpret_cast<const uint64_t*>(my_flag), value, static_cast<aboleth::Comparison>(comparison));
  return 0;
}

extern "C" __device__ int aboleth_tier1_wait_signal_warp(uint64_t endpoint_handles, uint32_t rank, uint32_t world_size, uint64_t my_flag, uint64_t value, uint32_t comparison) {
  const aboleth::DeviceContext ctx{endpoint_handles, rank, world_size};
  aboleth::wait_signal_warp(ctx, reinterpret_cast<const uint64_t*>(my_flag), value, static_cast<aboleth::Comparison>(comparison));
  return 0;
}

extern "C" __device__ int aboleth_tier1_wait_signal_block(uint64_t endpoint_handles, uint32_t rank, uint32_t world_size, uint64_t my_flag, uint64_t value, uint32_t comparison) {
  const aboleth::DeviceContext ctx{endpoint_handles, rank, world_size};
  aboleth::wait_signal_block(ctx, reinterpret_cast<const uint64_t*>(my_flag), value, static_cast<aboleth::Comparison>(comparison));
  return 0;
}

