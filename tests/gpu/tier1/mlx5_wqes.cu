// The mlx5 device library's posting, for tests/gpu/tier1_mlx5_wqes.py: each kernel calls put,
// put_signal (set) and signal (add) to `peer`, then quiet, in one scope (a thread, a warp, a
// block); the test decodes the WQEs, the doorbell record and the UAR store they leave in memory
// that stands in for a NIC. `waits_only` calls quiet alone (the bounded-wait case).
#include <aboleth/device.cuh>

extern "C" __global__ void post_thread(aboleth::DeviceContext ctx, int peer, aboleth::RemoteRegion dst,
                                       aboleth::LocalRegion src, uint64_t bytes, aboleth::RemoteRegion flag,
                                       uint64_t value, int waits_only) {
  if (threadIdx.x != 0) return;
  if (!waits_only) {
    aboleth::put(ctx, peer, dst, src, bytes);
    aboleth::put_signal(ctx, peer, dst, src, bytes, flag, value, aboleth::SignalOp::set);
    aboleth::signal(ctx, peer, flag, value, aboleth::SignalOp::add);
  }
  aboleth::quiet(ctx, peer);
}

extern "C" __global__ void post_warp(aboleth::DeviceContext ctx, int peer, aboleth::RemoteRegion dst,
                                     aboleth::LocalRegion src, uint64_t bytes, aboleth::RemoteRegion flag,
                                     uint64_t value, int waits_only) {
  if (threadIdx.x >= 32) return;
  if (!waits_only) {
    aboleth::put_warp(ctx, peer, dst, src, bytes);
    aboleth::put_signal_warp(ctx, peer, dst, src, bytes, flag, value, aboleth::SignalOp::set);
    aboleth::signal_warp(ctx, peer, flag, value, aboleth::SignalOp::add);
  }
  aboleth::quiet_warp(ctx, peer);
}

extern "C" __global__ void post_block(aboleth::DeviceContext ctx, int peer, aboleth::RemoteRegion dst,
                                      aboleth::LocalRegion src, uint64_t bytes, aboleth::RemoteRegion flag,
                                      uint64_t value, int waits_only) {
  if (!waits_only) {
    aboleth::put_block(ctx, peer, dst, src, bytes);
    aboleth::put_signal_block(ctx, peer, dst, src, bytes, flag, value, aboleth::SignalOp::set);
    aboleth::signal_block(ctx, peer, flag, value, aboleth::SignalOp::add);
  }
  aboleth::quiet_block(ctx, peer);
}
