// The bitcode entry points of aboleth::put_signal (generated; do not edit): scalar arguments, an int
// result, C linkage, for Triton's extern_libs and CuTe DSL.
#include <aboleth/device.cuh>

extern "C" __device__ int aboleth_tier1_put_signal(uint64_t endpoint_handles, uint32_t rank, uint32_t world_size, int32_t peer, uint64_t dst_descriptors, uint64_t dst_offset_bytes, uint64_t src_address, uint32_t src_key, uint64_t bytes, uint64_t flag_descriptors, uint64_t flag_offset_bytes, uint64_t value, uint32_t op) {
  const aboleth::DeviceContext ctx{endpoint_handles, rank, world_size};
  aboleth::put_signal(ctx, peer, aboleth::RemoteRegion{dst_descriptors, dst_offset_bytes}, aboleth::LocalRegion{src_address, src_key, 0}, bytes, aboleth::RemoteRegion{flag_descriptors, flag_offset_bytes}, value, static_cast<aboleth::SignalOp>(op));
  return 0;
}

extern "C" __device__ int aboleth_tier1_put_signal_warp(uint64_t endpoint_handles, uint32_t rank, uint32_t world_size, int32_t peer, uint64_t dst_descriptors, uint64_t dst_offset_bytes, uint64_t src_address, uint32_t src_key, uint64_t bytes, uint64_t flag_descriptors, uint64_t flag_offset_bytes, uint64_t value, uint32_t op) {
  const aboleth::DeviceContext ctx{endpoint_handles, rank, world_size};
  aboleth::put_signal_warp(ctx, peer, aboleth::RemoteRegion{dst_descriptors, dst_offset_bytes}, aboleth::LocalRegion{src_address, src_key, 0}, bytes, aboleth::RemoteRegion{flag_descriptors, flag_offset_bytes}, value, static_cast<aboleth::SignalOp>(op));
  return 0;
}

extern "C" __device__ int aboleth_tier1_put_signal_block(uint64_t endpoint_handles, uint32_t rank, uint32_t world_size, int32_t peer, uint64_t dst_descriptors, uint64_t dst_offset_bytes, uint64_t src_address, uint32_t src_key, uint64_t bytes, uint64_t flag_descriptors, uint64_t flag_offset_bytes, uint64_t value, uint32_t op) {
  const aboleth::DeviceContext ctx{endpoint_handles, rank, world_size};
  aboleth::put_signal_block(ctx, peer, aboleth::RemoteRegion{dst_descriptors, dst_offset_bytes}, aboleth::LocalRegion{src_address, src_key, 0}, bytes, aboleth::RemoteRegion{flag_descriptors, flag_offset_bytes}, value, static_cast<aboleth::SignalOp>(op));
  return 0;
}

