// The seed's tier-1 example (shared/seed/aboleth-overview.txt), verbatim: `exchange`. The other
// kernels are this test's: the same exchange through the warp and block variants, and rounds
// inside one launch (the benchmark's tier-1 row), each with the seed's argument list.
#include <aboleth/device.cuh>
__global__ void exchange(aboleth::DeviceContext ctx, int peer,
aboleth::RemoteRegion dst, aboleth::LocalRegion src,
uint32_t bytes, aboleth::RemoteRegion flag,
const uint64_t* my_flag, uint64_t epoch) {
if (threadIdx.x != 0) return;
aboleth::put_signal(ctx, peer, dst, src, bytes, flag, epoch); // one batch
aboleth::quiet(ctx, peer); // source buffer reusable
aboleth::wait_signal(ctx, my_flag, epoch); // peer's data arrived
}

// One warp calls the warp variants (launch with 32 or more threads).
__global__ void exchange_warp(aboleth::DeviceContext ctx, int peer, aboleth::RemoteRegion dst,
                              aboleth::LocalRegion src, uint32_t bytes, aboleth::RemoteRegion flag,
                              const uint64_t* my_flag, uint64_t epoch) {
  if (threadIdx.x >= 32) return;
  aboleth::put_signal_warp(ctx, peer, dst, src, bytes, flag, epoch);
  aboleth::quiet_warp(ctx, peer);
  aboleth::wait_signal_warp(ctx, my_flag, epoch);
}

// Every thread of the block calls the block variants.
__global__ void exchange_block(aboleth::DeviceContext ctx, int peer, aboleth::RemoteRegion dst,
                               aboleth::LocalRegion src, uint32_t bytes, aboleth::RemoteRegion flag,
                               const uint64_t* my_flag, uint64_t epoch) {
  aboleth::put_signal_block(ctx, peer, dst, src, bytes, flag, epoch);
  aboleth::quiet_block(ctx, peer);
  aboleth::wait_signal_block(ctx, my_flag, epoch);
}

// `rounds` exchanges in one launch, epochs epoch .. epoch + rounds - 1, by one thread (the seed's
// pattern, repeated): what one round costs without the launch.
__global__ void exchange_rounds(aboleth::DeviceContext ctx, int peer, aboleth::RemoteRegion dst,
                                aboleth::LocalRegion src, uint32_t bytes, aboleth::RemoteRegion flag,
                                const uint64_t* my_flag, uint64_t epoch, uint32_t rounds) {
  if (threadIdx.x != 0) return;
  for (uint32_t round = 0; round < rounds; ++round) {
    aboleth::put_signal(ctx, peer, dst, src, bytes, flag, epoch + round);
    aboleth::quiet(ctx, peer);
    aboleth::wait_signal(ctx, my_flag, epoch + round);
  }
}

// The same rounds through the warp variants.
__global__ void exchange_rounds_warp(aboleth::DeviceContext ctx, int peer, aboleth::RemoteRegion dst,
                                     aboleth::LocalRegion src, uint32_t bytes, aboleth::RemoteRegion flag,
                                     const uint64_t* my_flag, uint64_t epoch, uint32_t rounds) {
  if (threadIdx.x >= 32) return;
  for (uint32_t round = 0; round < rounds; ++round) {
    aboleth::put_signal_warp(ctx, peer, dst, src, bytes, flag, epoch + round);
    aboleth::quiet_warp(ctx, peer);
    aboleth::wait_signal_warp(ctx, my_flag, epoch + round);
  }
}

// The exchange split over two blocks: block 0 puts and signals, block 1 waits and at once copies
// what arrived into `snapshot` (what a receiver reads once it has seen the flag, while this
// rank's own put may still run). The mutation check (tier1_exchange.py) builds a deliberately
// broken library (signal before copy) and must see stale bytes here. Launch with 2 blocks.
__global__ void exchange_snapshot(aboleth::DeviceContext ctx, int peer, aboleth::RemoteRegion dst,
                                  aboleth::LocalRegion src, uint32_t bytes, aboleth::RemoteRegion flag,
                                  const uint64_t* my_flag, uint64_t epoch, const uint8_t* received,
                                  uint8_t* snapshot) {
  if (blockIdx.x == 0) {
    if (threadIdx.x == 0) {
      aboleth::put_signal(ctx, peer, dst, src, bytes, flag, epoch);
      aboleth::quiet(ctx, peer);
    }
    return;
  }
  if (threadIdx.x == 0) aboleth::wait_signal(ctx, my_flag, epoch);
  __syncthreads();
  const volatile uint8_t* arrived = received;
  for (uint32_t i = threadIdx.x; i < bytes; i += blockDim.x) snapshot[i] = arrived[i];
}
