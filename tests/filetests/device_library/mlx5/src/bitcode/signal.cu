// The bitcode entry points of aboleth::signal (generated; do not edit): scalar arguments, an int
// result, C linkage, for Triton's extern_libs and CuTe DSL.
#include <aboleth/device.cuh>

extern "C" __device__ int aboleth_tier1_signal(uint64_t endpoint_handles, uint32_t rank, uint32_t world_size, int32_t peer, uint64_t flag_descriptors, uint64_t flag_offset_bytes, uint64_t value, uint32_t op) {
  const aboleth::DeviceContext ctx{endpoint_handles, rank, world_size};
  aboleth::signal(ctx, peer, aboleth::RemoteRegion{flag_descriptors, flag_offset_bytes}, value, static_cast<aboleth::SignalOp>(op));
  return 0;
}

extern "C" __device__ int aboleth_tier1_signal_warp(uint64_t endpoint_handles, uint32_t rank, uint32_t world_size, int32_t peer, uint64_t flag_descriptors, uint64_t flag_offset_bytes, uint64_t value, uint32_t op) {
  const aboleth::DeviceContext ctx{endpoint_handles, rank, world_size};
  aboleth::signal_warp(ctx, peer, aboleth::RemoteRegion{flag_descriptors, flag_offset_bytes}, value, static_cast<aboleth::SignalOp>(op));
  return 0;
}

extern "C" __device__ int aboleth_tier1_signal_block(uint64_t endpoint_handles, uint32_t rank, uint32_t world_size, int32_t peer, uint64_t flag_descriptors, uint64_t flag_offset_bytes, uint64_t value, uint32_t op) {
  const aboleth::DeviceContext ctx{endpoint_handles, rank, world_size};
  aboleth::signal_block(ctx, peer, aboleth::RemoteRegion{flag_descriptors, flag_offset_bytes}, value, static_cast<aboleth::SignalOp>(op));
  return 0;
}

