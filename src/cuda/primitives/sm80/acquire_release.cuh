// Acquire loads and release reductions on a global int at gpu scope (sm_70+): the two halves of
// a flag or turn counter between CTAs. A release makes this thread's earlier writes (and those it
// has observed) visible to any thread whose acquire load reads the value it produced.
#pragma once

namespace tessera::cuda::sm80 {

// *p, read with acquire semantics at gpu scope (ld.acquire.gpu).
__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
  int value;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(value) : "l"(p) : "memory");
  return value;
}

// *p += value with release semantics at gpu scope, returning nothing (red.release.gpu).
__device__ __forceinline__ void red_release_gpu_add(int* p, int value) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(p), "r"(value) : "memory");
}

}  // namespace tessera::cuda::sm80
