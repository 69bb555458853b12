// The bitcode entry points of aboleth::put (generated; do not edit): scalar arguments, an int
// result, C linkage, for Triton's extern_libs and CuTe DSL.
#include <aboleth/device.cuh>

extern "C" __device__ int aboleth_tier1_put(uint64_t endpoint_handles, uint32_t rank, uint32_t world_size, int32_t peer, uint64_t dst_descriptors, uint64_t dst_offset_bytes, uint64_t src_address, uint32_t src_key, uint64_t bytes) {
  const aboleth::DeviceContext ctx{endpoint_handles, rank, world_size};
  aboleth::put(ctx, peer, aboleth::RemoteRegion{dst_descriptors, dst_offset_bytes}, aboleth::LocalRegion{src_address, src_key, 0}, bytes);
  return 0;
}

extern "C" __device__ int aboleth_tier1_put_warp(uint64_t endpoint_handles, uint32_t rank, uint32_t world_size, int32_t peer, uint64_t dst_descriptors, uint64_t dst_offset_bytes, uint64_t src_address, uint32_t src_key, uint64_t bytes) {
  const aboleth::DeviceContext ctx{endpoint_handles, rank, world_size};
  aboleth::put_warp(ctx, peer, aboleth::RemoteRegion{dst_descriptors, dst_offset_bytes}, aboleth::LocalRegion{src_address, src_key, 0}, bytes);
  return 0;
}

extern "C" __device__ int aboleth_tier1_put_block(uint64_t endpoint_handles, uint32_t rank, uint32_t world_size, int32_t peer, uint64_t dst_descriptors, uint64_t dst_offset_bytes, uint64_t src_address, uint32_t src_key, uint64_t bytes) {
  const aboleth::DeviceContext ctx{endpoint_handles, rank, world_size};
  aboleth::put_block(ctx, peer, aboleth::RemoteRegion{dst_descriptors, dst_offset_bytes}, aboleth::LocalRegion{src_address, src_key, 0}, bytes);
  return 0;
}

