// Shared by the sm90 primitive GPU suites (test_primitives_sm90.cu, test_wgmma_sm90.cu; each
// includes it once): the sm_90a skip, the bounded mbarrier wait, 1024-byte aligned dynamic shared
// memory, the 128-byte swizzle, and the exact 16-bit GEMM case (A (rows x 64) times B^T) with the
// warpgroup's accumulator scatter. Everything is internal to the including file (unnamed namespace).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/common/types.cuh"
#include "cuda/primitives/sm90/mbarrier.cuh"
#include "gpu/gpu_support.h"

namespace tessera::testing {
namespace {

using cuda::Traits;
namespace sm90 = tessera::cuda::sm90;

#define TESSERA_REQUIRE_SM90()                                                                   \
  do {                                                                                           \
    int dev_ = 0, major_ = 0;                                                                    \
    TESSERA_TEST_CUDA(cudaGetDevice(&dev_));                                                     \
    TESSERA_TEST_CUDA(cudaDeviceGetAttribute(&major_, cudaDevAttrComputeCapabilityMajor, dev_)); \
    if (major_ < 9) GTEST_SKIP() << "needs compute capability 9.0 (sm_90a), device has " << major_; \
  } while (0)

// Bounded mbarrier wait: traps (launch error) instead of hanging when a phase never completes.
__device__ __forceinline__ void wait_or_trap(std::uint32_t bar, std::uint32_t parity) {
#pragma unroll 1
  for (long i = 0; i < (1l << 26); ++i)
    if (sm90::mbarrier_try_wait_parity(bar, parity)) return;
  __trap();
}

// Dynamic shared memory, its start rounded up to 1024 bytes (launch with 1024 extra bytes):
// the 128-byte swizzle pattern and the wgmma descriptors assume 1024-byte aligned tiles.
extern __shared__ unsigned char dyn_smem[];
__device__ __forceinline__ unsigned char* smem_1024() {
  const std::uint32_t a = sm90::smem_u32(dyn_smem);
  return dyn_smem + ((1024u - (a & 1023u)) & 1023u);
}

// Offset in elements (16-bit) of logical element (row r, col c) of a tile of 128-byte rows
// written by TMA with SWIZZLE_128B: chunk c/8 of row r sits at chunk (c/8) ^ (r%8).
__host__ __device__ constexpr int swz128(int r, int c) { return r * 64 + (((c / 8) ^ (r % 8)) * 8) + c % 8; }

// Exact small values: integers and halves, exact in bf16, f16 and e4m3, and in every fp32 sum.
float a_value(int m, int k) { return static_cast<float>((m * 7 + k * 3) % 9 - 4) * 0.5f; }
float b_value(int n, int k) { return static_cast<float>((n * 5 + k * 11) % 7 - 3); }

template <typename T>
std::vector<T> to_type(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if constexpr (Traits<T>::is_bf16) out[i] = __float2bfloat16(v[i]);
    else out[i] = __float2half(v[i]);
  }
  return out;
}

// A (rows x 64) and B (N x 64) row-major floats, and the host product C = A * B^T.
struct GemmCase {
  int rows, n;
  std::vector<float> a, b, c;
  GemmCase(int rows_, int n_) : rows(rows_), n(n_), a(rows_ * 64), b(n_ * 64), c(rows_ * n_) {
    for (int m = 0; m < rows; ++m)
      for (int k = 0; k < 64; ++k) a[m * 64 + k] = a_value(m, k);
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < 64; ++k) b[j * 64 + k] = b_value(j, k);
    for (int m = 0; m < rows; ++m)
      for (int j = 0; j < n; ++j) {
        float s = 0.0f;
        for (int k = 0; k < 64; ++k) s += a[m * 64 + k] * b[j * 64 + k];
        c[m * n + j] = s;
      }
  }
  void check(const std::vector<float>& got, const char* what) const {
    int bad = 0;
    for (int m = 0; m < rows; ++m)
      for (int j = 0; j < n; ++j)
        if (got[m * n + j] != c[m * n + j] && ++bad <= 10)
          ADD_FAILURE() << what << " row " << m << " col " << j << ": got " << got[m * n + j] << ", want "
                        << c[m * n + j];
    EXPECT_EQ(bad, 0) << what;
  }
};

// Scatters the warpgroup's accumulators (documented layout) into C (64 x N, row-major),
// rows offset by row0. t = thread index within the warpgroup.
template <int N>
__device__ void store_accumulators(const float (&d)[N / 2], float* c, int t, int row0) {
  const int w = t / 32, g = (t % 32) / 4, q = t % 4;
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
    const int r = row0 + 16 * w + g, col = 8 * j + 2 * q;
    c[r * N + col] = d[4 * j + 0];
    c[r * N + col + 1] = d[4 * j + 1];
    c[(r + 8) * N + col] = d[4 * j + 2];
    c[(r + 8) * N + col + 1] = d[4 * j + 3];
  }
}

}  // namespace
}  // namespace tessera::testing
