// The hand-written limits of the all-to-all suite (experiments/bench/README.md), in CUDA C++,
// built on the GPU machine by run.sh (`nvcc -O3 -arch=sm_90 -shared`), loaded by baselines.py
// through ctypes:
// - `handwritten_alltoall`: what a person writes for one round of the seed's all-to-all over
//   peer memory: one CTA per peer (32 threads: "hand-written-warp"; up to 1024:
//   "hand-written-cta") stores BYTES into the peer's receive buffer with 16-byte vector stores
//   (byte stores for a tail), a CTA barrier, one `st.release.sys` of the epoch into the peer's
//   flag, then thread 0 polls its own flag from that peer with `ld.acquire.sys` and a barrier
//   releases the CTA. ROUNDS rounds inside one launch; the peers' addresses are CUDA IPC mappings
//   (baselines.py), so the data path is the same NVLink/peer-memory path Aboleth's p2p uses.
// - `flag_round_trip`: the proxy's floor: one GPU thread stores a counter into host-pinned
//   memory with a system-scope release, a host thread spinning on it stores it back into another
//   pinned word, the GPU polls that with an acquire; ITERATIONS round trips in one launch.
// - `handwritten_alltoall_probe`: the same rounds with the flag wait polled as Aboleth's bounded
//   wait polls (every thread, %globaltimer after each poll), and the halves apart: the
//   "hand-written-probe" rows (BENCH_BASELINES=probe) that say what the wait's shape costs.
// Nothing here is Aboleth code: it is the baseline Aboleth's generated code is measured against.

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <thread>

namespace {

__device__ __forceinline__ void store_release_system(long long *address, long long value) {
    asm volatile("st.release.sys.global.s64 [%0], %1;" ::"l"(address), "l"(value) : "memory");
}

__device__ __forceinline__ long long load_acquire_system(const long long *address) {
    long long value;
    asm volatile("ld.acquire.sys.global.s64 %0, [%1];" : "=l"(value) : "l"(address) : "memory");
    return value;
}

// The CTA's threads copy BYTES from source to destination: 16-byte vectors, then bytes for a tail.
__device__ __forceinline__ void copy_slice(unsigned char *destination, const unsigned char *source, long long bytes) {
    const long long vectors = bytes / 16;
    const int4 *source_vectors = reinterpret_cast<const int4 *>(source);
    int4 *destination_vectors = reinterpret_cast<int4 *>(destination);
    for (long long index = threadIdx.x; index < vectors; index += blockDim.x) {
        destination_vectors[index] = source_vectors[index];
    }
    for (long long index = vectors * 16 + threadIdx.x; index < bytes; index += blockDim.x) {
        destination[index] = source[index];
    }
}

// One CTA per peer: blockIdx.x = peer index skipping this rank.
__global__ void alltoall_rounds(const unsigned long long *peer_recv, const unsigned long long *peer_flags,
                                const unsigned char *send, long long *my_flags, int rank,
                                long long bytes_per_peer, long long first_epoch, int rounds) {
    const int peer = blockIdx.x + (blockIdx.x >= rank ? 1 : 0);
    unsigned char *destination = reinterpret_cast<unsigned char *>(peer_recv[peer]) + rank * bytes_per_peer;
    long long *remote_flag = reinterpret_cast<long long *>(peer_flags[peer]) + rank;
    const unsigned char *source = send + peer * bytes_per_peer;
    for (int round = 0; round < rounds; ++round) {
        const long long epoch = first_epoch + round;
        copy_slice(destination, source, bytes_per_peer);
        __syncthreads();
        if (threadIdx.x == 0) {
            store_release_system(remote_flag, epoch);
            while (load_acquire_system(my_flags + peer) < epoch) {
            }
        }
        __syncthreads();
    }
}

// How the flag wait polls, for the probe rows (`handwritten_alltoall_probe`): what the
// hand-written kernel does (thread 0 polls, a barrier releases the CTA), what Aboleth's bounded
// wait does (every thread polls, and reads %globaltimer after each poll to test the bound, loaded
// from memory once per round as Aboleth's wait-failure log's timeout is), and the two halves apart;
// and thread 0's poll followed by a system fence each round, as a quiet after the wait does
// (tier 1's p2p quiet is fence.sc.sys): what the fence costs, SC or acquire-release.
enum PollStyle : int {
    POLL_THREAD_ZERO = 0,
    POLL_EVERY_THREAD = 1,
    POLL_EVERY_THREAD_TIMED = 2,
    POLL_THREAD_ZERO_TIMED = 3,
    POLL_THREAD_ZERO_QUIET_SC = 4,
    POLL_THREAD_ZERO_QUIET_ACQ_REL = 5,
};

__device__ __forceinline__ unsigned long long global_timer() {
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    return now;
}

// Polls until *flag >= epoch; with `timed`, tests elapsed %globaltimer against *timeout_ns after
// each poll (0: unbounded) and returns false when past it.
__device__ __forceinline__ bool poll_flag(const long long *flag, long long epoch, bool timed,
                                          const volatile long long *timeout_ns) {
    if (!timed) {
        while (load_acquire_system(flag) < epoch) {
        }
        return true;
    }
    const long long bound = *timeout_ns;
    const unsigned long long start = global_timer();
    while (load_acquire_system(flag) < epoch) {
        const long long elapsed = static_cast<long long>(global_timer() - start);
        if (bound != 0 && elapsed > bound) return false;
    }
    return true;
}

__global__ void alltoall_rounds_probe(const unsigned long long *peer_recv, const unsigned long long *peer_flags,
                                      const unsigned char *send, long long *my_flags, int rank,
                                      long long bytes_per_peer, long long first_epoch, int rounds, int poll_style,
                                      const volatile long long *timeout_ns, int *gave_up) {
    const int peer = blockIdx.x + (blockIdx.x >= rank ? 1 : 0);
    unsigned char *destination = reinterpret_cast<unsigned char *>(peer_recv[peer]) + rank * bytes_per_peer;
    long long *remote_flag = reinterpret_cast<long long *>(peer_flags[peer]) + rank;
    const unsigned char *source = send + peer * bytes_per_peer;
    const bool every_thread = poll_style == POLL_EVERY_THREAD || poll_style == POLL_EVERY_THREAD_TIMED;
    const bool timed = poll_style == POLL_EVERY_THREAD_TIMED || poll_style == POLL_THREAD_ZERO_TIMED;
    for (int round = 0; round < rounds; ++round) {
        const long long epoch = first_epoch + round;
        copy_slice(destination, source, bytes_per_peer);
        __syncthreads();
        if (threadIdx.x == 0) store_release_system(remote_flag, epoch);
        if (every_thread) {
            if (!poll_flag(my_flags + peer, epoch, timed, timeout_ns)) {
                atomicExch(gave_up, 1);
                return;
            }
        } else {
            if (threadIdx.x == 0 && !poll_flag(my_flags + peer, epoch, timed, timeout_ns)) atomicExch(gave_up, 1);
            if (threadIdx.x == 0 && poll_style == POLL_THREAD_ZERO_QUIET_SC) asm volatile("fence.sc.sys;" ::: "memory");
            if (threadIdx.x == 0 && poll_style == POLL_THREAD_ZERO_QUIET_ACQ_REL) {
                asm volatile("fence.acq_rel.sys;" ::: "memory");
            }
            __syncthreads();
            if (timed && *static_cast<volatile int *>(gave_up) != 0) return;
        }
    }
}

__global__ void flag_round_trip_kernel(volatile long long *to_host, volatile long long *from_host, int iterations,
                                       long long *cycles) {
    const long long start = clock64();
    for (int iteration = 1; iteration <= iterations; ++iteration) {
        store_release_system(const_cast<long long *>(to_host), iteration);
        while (load_acquire_system(const_cast<const long long *>(from_host)) < iteration) {
        }
    }
    *cycles = clock64() - start;
}

}  // namespace

extern "C" {

// Launches ROUNDS rounds on `stream`; peer_recv/peer_flags are device arrays of world_size
// addresses. Returns the cudaError_t of the launch.
int handwritten_alltoall(const unsigned long long *peer_recv, const unsigned long long *peer_flags,
                         const unsigned char *send, long long *my_flags, int rank, int world_size,
                         long long bytes_per_peer, long long first_epoch, int rounds, int threads,
                         cudaStream_t stream) {
    alltoall_rounds<<<world_size - 1, threads, 0, stream>>>(peer_recv, peer_flags, send, my_flags, rank,
                                                            bytes_per_peer, first_epoch, rounds);
    return static_cast<int>(cudaGetLastError());
}

// The same rounds with the flag wait of POLL_STYLE (see PollStyle); timeout_ns and gave_up are
// device words (the bound, 0: none; set to 1 if a wait passed it).
int handwritten_alltoall_probe(const unsigned long long *peer_recv, const unsigned long long *peer_flags,
                               const unsigned char *send, long long *my_flags, int rank, int world_size,
                               long long bytes_per_peer, long long first_epoch, int rounds, int threads,
                               int poll_style, const long long *timeout_ns, int *gave_up, cudaStream_t stream) {
    alltoall_rounds_probe<<<world_size - 1, threads, 0, stream>>>(peer_recv, peer_flags, send, my_flags, rank,
                                                                  bytes_per_peer, first_epoch, rounds, poll_style,
                                                                  timeout_ns, gave_up);
    return static_cast<int>(cudaGetLastError());
}

// ITERATIONS GPU->host->GPU flag round trips; writes the elapsed microseconds (CUDA events)
// into *elapsed_us. Returns a cudaError_t, or -1 when the host thread saw no store for 10 s.
int flag_round_trip(int iterations, double *elapsed_us) {
    long long *words = nullptr;
    cudaError_t error = cudaHostAlloc(&words, 2 * sizeof(long long), cudaHostAllocMapped);
    if (error != cudaSuccess) return static_cast<int>(error);
    words[0] = 0;
    words[1] = 0;
    long long *device_words = nullptr;
    long long *cycles = nullptr;
    cudaHostGetDevicePointer(&device_words, words, 0);
    cudaMalloc(&cycles, sizeof(long long));
    std::atomic<bool> gave_up{false};
    std::thread host([&] {
        auto *to_host = reinterpret_cast<std::atomic<long long> *>(&words[0]);
        auto *from_host = reinterpret_cast<std::atomic<long long> *>(&words[1]);
        for (long long iteration = 1; iteration <= iterations; ++iteration) {
            long long spins = 0;
            while (to_host->load(std::memory_order_acquire) < iteration) {
                if (++spins > (1LL << 34)) {
                    gave_up = true;
                    return;
                }
            }
            from_host->store(iteration, std::memory_order_release);
        }
    });
    cudaEvent_t start, end;
    cudaEventCreate(&start);
    cudaEventCreate(&end);
    cudaEventRecord(start);
    flag_round_trip_kernel<<<1, 1>>>(device_words, device_words + 1, iterations, cycles);
    cudaEventRecord(end);
    error = cudaEventSynchronize(end);
    host.join();
    float elapsed_ms = 0;
    cudaEventElapsedTime(&elapsed_ms, start, end);
    *elapsed_us = elapsed_ms * 1000.0;
    cudaEventDestroy(start);
    cudaEventDestroy(end);
    cudaFree(cycles);
    cudaFreeHost(words);
    if (gave_up) return -1;
    return static_cast<int>(error);
}

}  // extern "C"
