// The bitcode entry points of aboleth::quiet (generated; do not edit): scalar arguments, an int
// result, C linkage, for Triton's extern_libs and CuTe DSL.
#include <aboleth/device.cuh>

extern "C" __device__ int aboleth_tier1_quiet(uint64_t endpoint_handles, uint32_t rank, uint32_t world_size, int32_t peer) {
  const aboleth::DeviceContext ctx{endpoint_handles, rank, world_size};
  aboleth::quiet(ctx, peer);
  return 0;
}

extern "C" __device__ int aboleth_tier1_quiet_warp(uint64_t endpoint_handles, uint32_t rank, uint32_t world_size, int32_t peer) {
  const aboleth::DeviceContext ctx{endpoint_handles, rank, world_size};
  aboleth::quiet_warp(ctx, peer);
  return 0;
}

extern "C" __device__ int aboleth_tier1_quiet_block(uint64_t endpoint_handles, uint32_t rank, uint32_t world_size, int32_t peer) {
  const aboleth::DeviceContext ctx{endpoint_handles, rank, world_size};
  aboleth::quiet_block(ctx, peer);
  return 0;
}

