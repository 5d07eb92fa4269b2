// The backward kernels' cp.async copy of a row tile into a swizzled shared-memory tile, shared
// by the sm80 and sm90 kernels (each passes its swizzle as `offset(r, ch)`: the byte offset of
// 16-byte chunk ch of row r).
#pragma once

#include <cstdint>

#include "cuda/primitives/sm80/cp_async.cuh"

namespace tessera::cuda::backward {

// Copies R rows of W 16-bit elements (rows past `valid` zero-filled) with kThreads threads.
// kStepRows: each thread keeps its chunk column in every pass and steps its row pointer by the
// pass's rows (one 64-bit multiply a tile, an add a pass), where the plain form's
// `r * row_stride` cost every copy a 64-bit multiply and a branch around it (~12 instructions a
// copy). It needs passes of a multiple of 8 rows, so that a row keeps its swizzle key: then a
// pass's chunk sits offset(pass rows, 0) past the first pass's. Kernels take it only where
// ptxas allocates it without spilling (the callers say which).
template <int R, int W, int kThreads, bool kStepRows, typename T, typename Offset>
__device__ __forceinline__ void copy_rows_async(std::uint32_t s_tile, Offset offset, const T* base,
                                                std::int64_t tile_off, std::int64_t row_stride, int valid,
                                                int tid) {
  constexpr int kChunks = W / 8;
  constexpr int kTotal = R * kChunks;
  static_assert(kTotal % kThreads == 0, "whole rounds of 16-byte copies");
  if constexpr (kStepRows) {
    static_assert(kThreads % kChunks == 0 && (kThreads / kChunks) % 8 == 0,
                  "a thread's chunk column and swizzle key are the same in every pass");
    constexpr int kRowsPerPass = kThreads / kChunks;
    const int r0 = tid / kChunks, ch = tid % kChunks;
    const T* src = base + tile_off + r0 * row_stride + ch * 8;
    const std::int64_t step = kRowsPerPass * row_stride;
    const std::uint32_t dst = s_tile + offset(r0, ch);
#pragma unroll
    for (int it = 0; it < kTotal / kThreads; ++it) {
      const bool ok = r0 + it * kRowsPerPass < valid;
      sm80::cp_async_16_zfill(dst + offset(it * kRowsPerPass, 0), ok ? src : base, ok);
      src += step;
    }
  } else {
#pragma unroll
    for (int it = 0; it < kTotal / kThreads; ++it) {
      const int c = tid + it * kThreads;
      const int r = c / kChunks, ch = c % kChunks;
      const bool ok = r < valid;
      const T* src = ok ? base + tile_off + r * row_stride + ch * 8 : base;
      sm80::cp_async_16_zfill(s_tile + offset(r, ch), src, ok);
    }
  }
}

}  // namespace tessera::cuda::backward
