// Epilogue of the sm80 forward: finish each row's softmax (sum the quad's partial l), scale O
// once, convert to the output dtype, stage through the warp's own smem rows so that global
// stores are 16-byte and coalesced, and write the natural-log LSE.
// Rows that saw no key get O = 0 and LSE = -inf (OnlineSoftmaxRow::output_scale / lse).
#pragma once

#include <cstdint>

#include "cuda/common/types.cuh"
#include "cuda/primitives/sm80/warp.cuh"
#include "cuda/sm80/forward/kernel_traits.cuh"
#include "math/online_softmax.h"

namespace tessera::cuda::sm80 {

// sO: the warp's 16 staging rows (swizzled like Q; only this warp touches them).
// out: global row 0 of the warp; rows_valid: rows of the warp inside the sequence (may be <= 0).
// lse: LSE of the warp's row 0 (consecutive rows are consecutive floats), or nullptr.
template <typename Tr, typename T>
__device__ __forceinline__ void epilogue_store(float (&o)[Tr::kHeadDim / 8][4], math::OnlineSoftmaxRow (&rows)[2],
                                               T* sO, T* out, std::int64_t out_row_stride, int rows_valid, float* lse,
                                               int lane) {
  const int g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    rows[h].l = quad_sum(rows[h].l);
    const float sc = rows[h].output_scale();
    const int r = g + 8 * h;
#pragma unroll
    for (int d = 0; d < Tr::kHeadDim / 8; ++d) {
      *reinterpret_cast<std::uint32_t*>(sO + swizzle<Tr::kChunks>(r, d) + 2 * q) =
          Traits<T>::pack2(o[d][2 * h] * sc, o[d][2 * h + 1] * sc);
    }
    if (lse != nullptr && q == 0 && r < rows_valid) lse[r] = rows[h].lse();
  }
  __syncwarp();
  // 16 rows x kChunks 16-byte chunks; consecutive lanes take consecutive chunks of a row.
#pragma unroll
  for (int it = 0; it < 16 * Tr::kChunks / 32; ++it) {
    const int idx = lane + 32 * it;
    const int r = idx / Tr::kChunks;
    const int c = idx % Tr::kChunks;
    if (r < rows_valid) {
      const uint4 v = *reinterpret_cast<const uint4*>(sO + swizzle<Tr::kChunks>(r, c));
      *reinterpret_cast<uint4*>(out + r * out_row_stride + c * 8) = v;
    }
  }
}

}  // namespace tessera::cuda::sm80
