// The read loop of the bandwidth microbenchmarks (sm_read_bandwidth.cu, l2_contention.cu): the
// block's threads read p[0, n) in 16-byte loads, kUnroll loads in flight per thread, and fold
// the values into one int (returned; the caller stores it under an impossible condition so that
// the loads stay alive). Load: the load instruction (e.g. __ldg, __ldcs).
#pragma once

#include <cuda_runtime.h>

template <int kUnroll, typename Load>
__device__ __forceinline__ int read_loop(const int4* __restrict__ p, long long n, Load load) {
  int acc = 0;
  for (long long base = threadIdx.x; base < n; base += (long long)blockDim.x * kUnroll) {
    int4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const long long i = base + (long long)u * blockDim.x;
      v[u] = i < n ? load(p + i) : make_int4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  return acc;
}
