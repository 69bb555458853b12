// The bitcode entry points of aboleth::fence (generated; do not edit): scalar arguments, an int
// result, C linkage, for Triton's extern_libs and CuTe DSL.
#include <aboleth/device.cuh>

extern "C" __device__ int aboleth_tier1_fence(uint64_t endpoint_handles, uint32_t rank, uint32_t world_size, int32_t peer) {
  const aboleth::DeviceContext ctx{endpoint_handles, rank, world_size};
  aboleth::fence(ctx, peer);
  return 0;
}

extern "C" __device__ int aboleth_tier1_fence_warp(uint64_t endpoint_handles, uint32_t rank, uint32_t world_size, int32_t peer) {
  const aboleth::DeviceContext ctx{endpoint_handles, rank, world_size};
  aboleth::fence_warp(ctx, peer);
  return 0;
}

extern "C" __device__ int aboleth_tier1_fence_block(uint64_t endpoint_handles, uint32_t rank, uint32_t world_size, int32_t peer) {
  const aboleth::DeviceContext ctx{endpoint_handles, rank, world_size};
  aboleth::fence_block(ctx, peer);
  return 0;
}

