// The NVSHMEM baseline of the all-to-all suite (experiments/bench/README.md): the seed's
// all-to-all written with NVSHMEM 3.4.5's put-with-signal, built on the GPU machine by run.sh
// against the `nvidia-nvshmem-cu13` wheel (`-rdc=true`, libnvshmem_device.a, libnvshmem_host),
// loaded by baselines.py through ctypes. One CTA per peer; per round: the put with its signal
// (thread: thread 0 calls `nvshmem_putmem_signal_nbi`; warp: warp 0 calls the `_warp` form;
// block: every thread calls the `_block` form), thread 0 waits for the peer's signal
// (`nvshmem_signal_wait_until`, >= epoch) and calls `nvshmem_quiet` (the send buffer is reusable,
// as after Aboleth's `wait(s)`), and a CTA barrier. ROUNDS rounds inside one launch. PEs are
// bootstrapped with NVSHMEM's unique-id method; baselines.py passes the id between ranks.
// Buffers are on NVSHMEM's symmetric heap; checking copies them to the host.

#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <cstdint>
#include <cstring>

namespace {

enum Variant { kThread = 0, kWarp = 1, kBlock = 2 };

unsigned char *g_send = nullptr;
unsigned char *g_recv = nullptr;
uint64_t *g_flags = nullptr;
long long g_capacity = 0;

__global__ void alltoall_rounds(unsigned char *recv, const unsigned char *send, uint64_t *flags, int rank,
                                long long bytes_per_peer, long long first_epoch, int rounds, int variant) {
    const int peer = blockIdx.x + (blockIdx.x >= rank ? 1 : 0);
    unsigned char *destination = recv + rank * bytes_per_peer;
    const unsigned char *source = send + peer * bytes_per_peer;
    for (int round = 0; round < rounds; ++round) {
        const uint64_t epoch = static_cast<uint64_t>(first_epoch + round);
        if (variant == kBlock) {
            nvshmemx_putmem_signal_nbi_block(destination, source, bytes_per_peer, flags + rank, epoch,
                                             NVSHMEM_SIGNAL_SET, peer);
        } else if (variant == kWarp) {
            if (threadIdx.x < 32) {
                nvshmemx_putmem_signal_nbi_warp(destination, source, bytes_per_peer, flags + rank, epoch,
                                                NVSHMEM_SIGNAL_SET, peer);
            }
        } else if (threadIdx.x == 0) {
            nvshmem_putmem_signal_nbi(destination, source, bytes_per_peer, flags + rank, epoch, NVSHMEM_SIGNAL_SET,
                                      peer);
        }
        if (threadIdx.x == 0) {
            nvshmem_signal_wait_until(flags + peer, NVSHMEM_CMP_GE, epoch);
            nvshmem_quiet();
        }
        __syncthreads();
    }
}

}  // namespace

extern "C" {

int bench_nvshmem_unique_id_bytes() { return static_cast<int>(sizeof(nvshmemx_uniqueid_t)); }

// Rank 0 fills `id` (bench_nvshmem_unique_id_bytes() bytes); the others receive it from baselines.py.
int bench_nvshmem_get_unique_id(void *id) {
    nvshmemx_uniqueid_t unique_id = NVSHMEMX_UNIQUEID_INITIALIZER;
    int status = nvshmemx_get_uniqueid(&unique_id);
    std::memcpy(id, &unique_id, sizeof(unique_id));
    return status;
}

// Initializes this PE and allocates send | recv (capacity bytes per peer each) and the flags.
int bench_nvshmem_setup(int rank, int world_size, const void *id, long long capacity_bytes_per_peer) {
    nvshmemx_uniqueid_t unique_id;
    std::memcpy(&unique_id, id, sizeof(unique_id));
    nvshmemx_init_attr_t attributes = NVSHMEMX_INIT_ATTR_INITIALIZER;
    int status = nvshmemx_set_attr_uniqueid_args(rank, world_size, &unique_id, &attributes);
    if (status != 0) return status;
    status = nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attributes);
    if (status != 0) return status;
    g_capacity = capacity_bytes_per_peer;
    g_send = static_cast<unsigned char *>(nvshmem_malloc(world_size * capacity_bytes_per_peer));
    g_recv = static_cast<unsigned char *>(nvshmem_malloc(world_size * capacity_bytes_per_peer));
    g_flags = static_cast<uint64_t *>(nvshmem_calloc(world_size, sizeof(uint64_t)));
    if (g_send == nullptr || g_recv == nullptr || g_flags == nullptr) return -2;
    return 0;
}

// Device addresses of the symmetric buffers (send, recv, flags), for baselines.py to fill and check.
void bench_nvshmem_buffers(unsigned long long *addresses) {
    addresses[0] = reinterpret_cast<unsigned long long>(g_send);
    addresses[1] = reinterpret_cast<unsigned long long>(g_recv);
    addresses[2] = reinterpret_cast<unsigned long long>(g_flags);
}

int bench_nvshmem_barrier() {
    nvshmem_barrier_all();
    return static_cast<int>(cudaDeviceSynchronize());
}

int bench_nvshmem_alltoall(int rank, int world_size, long long bytes_per_peer, long long first_epoch, int rounds,
                     int variant, int threads, cudaStream_t stream) {
    if (bytes_per_peer > g_capacity) return -3;
    alltoall_rounds<<<world_size - 1, threads, 0, stream>>>(g_recv, g_send, g_flags, rank, bytes_per_peer,
                                                            first_epoch, rounds, variant);
    return static_cast<int>(cudaGetLastError());
}

void bench_nvshmem_teardown() {
    nvshmem_free(g_send);
    nvshmem_free(g_recv);
    nvshmem_free(g_flags);
    nvshmem_finalize();
}

}  // extern "C"
