// Deterministic dQ accumulation, shared by the sm80 and sm90 backward kernels: the KV tiles that
// see one query tile add their dQ into the fp32 workspace in ascending tile order, so the sums
// are bitwise the same run to run. Each query tile has a counter (the lock) of the KV tiles that
// have added; a CTA waits for its turn, adds, then passes the turn on.
#pragma once

namespace tessera::cuda::backward {

// Blocks the CTA until `expected` KV tiles have added to this query tile (thread 0 polls with
// acquire loads; the barrier then lets the whole CTA go).
__device__ __forceinline__ void wait_for_dq_turn(const int* lock, int expected, int tid) {
  if (tid == 0) {
    int seen;
    while (true) {
      asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(seen) : "l"(lock) : "memory");
      if (seen == expected) break;
      __nanosleep(32);
    }
  }
  __syncthreads();
}

// Passes the turn on once every thread's additions are visible device-wide.
__device__ __forceinline__ void pass_dq_turn(int* lock, int tid) {
  __threadfence();
  __syncthreads();
  if (tid == 0) asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(lock), "r"(1) : "memory");
}

}  // namespace tessera::cuda::backward
