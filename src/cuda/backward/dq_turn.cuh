// Deterministic dQ accumulation, shared by the sm80 and sm90 backward kernels: the KV tiles that
// see one query tile add their dQ into the fp32 workspace in ascending tile order, so the sums
// are bitwise the same run to run. Each query tile has a counter (the lock) of the KV tiles that
// have added; a CTA waits for its turn, adds, then passes the turn on.
#pragma once

#include "cuda/primitives/sm80/acquire_release.cuh"

namespace tessera::cuda::backward {

// Blocks the CTA until `expected` KV tiles have added to this query tile (thread 0 polls with
// acquire loads; the barrier then lets the whole CTA go).
__device__ __forceinline__ void wait_for_dq_turn(const int* lock, int expected, int tid) {
  if (tid == 0) {
    while (sm80::ld_acquire_gpu(lock) != expected) __nanosleep(32);
  }
  __syncthreads();
}

// Passes the turn on once every thread's additions are visible device-wide.
__device__ __forceinline__ void pass_dq_turn(int* lock, int tid) {
  __threadfence();
  __syncthreads();
  if (tid == 0) sm80::red_release_gpu_add(lock, 1);
}

}  // namespace tessera::cuda::backward
