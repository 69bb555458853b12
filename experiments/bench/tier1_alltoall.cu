// The tier-1 row of the all-to-all suite: the seed's exchange pattern (put_signal, quiet,
// wait_signal) through aboleth/device.cuh, shaped exactly as the NVSHMEM baseline
// (nvshmem_alltoall.cu): one CTA per peer, `rounds` rounds inside one launch, the thread, warp
// or block form of put_signal, then thread 0 waits for the peer's flag and quiets. run.sh
// builds it per transport against that transport's libaboleth_device.a (-rdc=true,
// ABOLETH_DEVICE_EXTERN) into libtier1_<transport>.so; tier1.py launches it.
#include <cstring>

#include <aboleth/device.cuh>
#include <cuda_runtime.h>

namespace {

// Variant codes (tier1.py's VARIANTS); 0 is the thread form.
constexpr int kWarp = 1;
constexpr int kBlock = 2;

__global__ void alltoall_rounds(aboleth::DeviceContext ctx, aboleth::RemoteRegion recv, aboleth::LocalRegion send,
                                aboleth::RemoteRegion flags, const uint64_t *my_flags, long long bytes_per_peer,
                                long long first_epoch, int rounds, int variant) {
    const int rank = static_cast<int>(ctx.rank);
    const int peer = blockIdx.x + (blockIdx.x >= rank ? 1 : 0);
    aboleth::RemoteRegion destination = recv;
    destination.offset_bytes += rank * bytes_per_peer;
    aboleth::LocalRegion source = send;
    source.address += peer * bytes_per_peer;
    aboleth::RemoteRegion flag = flags;
    flag.offset_bytes += 8 * rank;
    for (int round = 0; round < rounds; ++round) {
        const uint64_t epoch = static_cast<uint64_t>(first_epoch + round);
        if (variant == kBlock) {
            aboleth::put_signal_block(ctx, peer, destination, source, bytes_per_peer, flag, epoch);
        } else if (variant == kWarp) {
            if (threadIdx.x < 32) aboleth::put_signal_warp(ctx, peer, destination, source, bytes_per_peer, flag, epoch);
        } else if (threadIdx.x == 0) {
            aboleth::put_signal(ctx, peer, destination, source, bytes_per_peer, flag, epoch);
        }
        if (threadIdx.x == 0) {
            aboleth::wait_signal(ctx, my_flags + peer, epoch);
            aboleth::quiet(ctx, peer);
        }
        __syncthreads();
    }
}

template <typename T>
T from_bytes(const void *bytes) {
    T value;
    std::memcpy(&value, bytes, sizeof(T));
    return value;
}

}  // namespace

extern "C" {

// The structs' sizes as this build sees them: tier1.py checks them against aboleth-abi's.
int bench_tier1_struct_bytes(int which) {
    switch (which) {
        case 0: return static_cast<int>(sizeof(aboleth::DeviceContext));
        case 1: return static_cast<int>(sizeof(aboleth::RemoteRegion));
        default: return static_cast<int>(sizeof(aboleth::LocalRegion));
    }
}

// The arguments are the kernel's by-value structs as bytes (aboleth.device_library makes them).
int bench_tier1_alltoall(const void *context, const void *recv, const void *send, const void *flags,
                         unsigned long long my_flags, int world_size, long long bytes_per_peer,
                         long long first_epoch, int rounds, int variant, int threads, cudaStream_t stream) {
    alltoall_rounds<<<world_size - 1, threads, 0, stream>>>(
        from_bytes<aboleth::DeviceContext>(context), from_bytes<aboleth::RemoteRegion>(recv),
        from_bytes<aboleth::LocalRegion>(send), from_bytes<aboleth::RemoteRegion>(flags),
        reinterpret_cast<const uint64_t *>(my_flags), bytes_per_peer, first_epoch, rounds, variant);
    return static_cast<int>(cudaGetLastError());
}

}  // extern "C"
