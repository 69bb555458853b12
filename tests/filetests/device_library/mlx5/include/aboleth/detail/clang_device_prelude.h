// aboleth/detail/clang_device_prelude.h: what nvcc's headers give aboleth/device.cuh, for
// clang's CUDA device compilation without the CUDA headers (the per-operation bitcode build,
// `clang++ -x cuda --cuda-device-only -nocudainc -include` this file). Generated; do not edit.
#pragma once
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#include <__clang_cuda_builtin_vars.h>
extern "C" __device__ int printf(const char*, ...);
static __device__ __forceinline__ void __syncwarp(unsigned mask = 0xffffffffu) {
  asm volatile("bar.warp.sync %0;" ::"r"(mask) : "memory");
}
static __device__ __forceinline__ void __trap() { __builtin_trap(); }
struct __attribute__((aligned(16))) uint4 {
  unsigned int x, y, z, w;
};
