// Masking and the online softmax of one S tile, in registers.
//
// Semantics come from src/math: per-row key ranges are math::visible_keys (computed once per
// row), the running state is math::OnlineSoftmaxRow (base-2 units, -inf while a row is empty).
// Each thread holds two rows of its warp (g and g + 8) and, per n-tile, two adjacent columns
// of each; the other 3/4 of a row live in the quad's other lanes, hence the quad shuffles.
#pragma once

#include <math.h>

#include <cstdint>

#include "cuda/common/types.cuh"
#include "cuda/primitives/sm80/warp.cuh"
#include "math/mask.h"
#include "math/online_softmax.h"

namespace tessera::cuda::sm80 {

// 2^x via the SFU (ex2.approx.ftz: ~2 ulp, ex2(-inf) = +0), the hot loop's only transcendental.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Turns raw dot products s into softmax weights for the warp's rows, updating rows[] and
// rescaling o; writes P as 16-bit A fragments of the P*V mma (p[t] = keys 16t..16t+15).
//   s         raw q.k of keys n0 + 8n + 2q + {0,1} (n-tile n), rows g (e = 0,1) and g+8 (e = 2,3)
//   keys      visible key range of each of the thread's two rows
//   masked    false when the whole tile is visible to every row of the warp (no compares)
template <typename T, int kBlockN, int kHeadDim>
__device__ __forceinline__ void softmax_tile(float (&s)[kBlockN / 8][4], std::uint32_t (&p)[kBlockN / 16][4],
                                             float (&o)[kHeadDim / 8][4], math::OnlineSoftmaxRow (&rows)[2],
                                             const math::KeyRange (&keys)[2], bool masked, int n0, int q,
                                             float scale, float scale_log2, float softcap) {
  // After this block, t = s * mul is the score in base-2 units. Without a soft cap the
  // multiply is folded into the exponent's FFMA below.
  float mul = scale_log2;
  if (softcap > 0.0f) {
#pragma unroll
    for (int n = 0; n < kBlockN / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = math::apply_softcap(s[n][e] * scale, softcap) * math::kLog2e;
    mul = 1.0f;
  }
  // Soft cap first, then the mask: masked scores become -inf whatever the cap made of them.
  if (masked) {
#pragma unroll
    for (int n = 0; n < kBlockN / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = n0 + 8 * n + 2 * q + (e & 1);
        const math::KeyRange& r = keys[e >> 1];
        if (col < r.begin || col >= r.end) s[n][e] = -INFINITY;
      }
  }
  float m_use[2], alpha[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < kBlockN / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * h], s[n][2 * h + 1]));
    mx = quad_max(mx);
    // mul > 0, so the max of s * mul is mx * mul (and -inf stays -inf).
    alpha[h] = rows[h].enter_tile(mx * mul);
    // OnlineSoftmaxRow::weight gives 0 while the row is empty (m = -inf); then every t of the
    // row is -inf too, and exp2(-inf - 0) = 0 gives the same without a per-element select.
    m_use[h] = rows[h].m == -INFINITY ? 0.0f : rows[h].m;
  }
  // O rescale only when some row of the warp changed its max: otherwise every alpha is
  // exactly 1 (exp2(0), or the empty row's 1) and o * 1 == o, so skipping is exact. The vote
  // keeps the branch warp-uniform; on long rows the max settles and most tiles skip it.
  // head_dim 256 (128 accumulators a thread) measured 4-6% slower with the branch (H200,
  // bench/RESULTS.md), so it always rescales; d64/d128 need the saved registers (no spills).
  constexpr bool kSkipWhenUnchanged = kHeadDim <= 128;
  if (!kSkipWhenUnchanged || __any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
    for (int d = 0; d < kHeadDim / 8; ++d) {
      o[d][0] *= alpha[0];
      o[d][1] *= alpha[0];
      o[d][2] *= alpha[1];
      o[d][3] *= alpha[1];
    }
  }
  float sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int n = 0; n < kBlockN / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[n][e] = fast_exp2(fmaf(s[n][e], mul, -m_use[e >> 1]));
      sum[e >> 1] += s[n][e];
    }
  rows[0].add(sum[0]);  // thread-partial sums; the quad's parts are added in the epilogue
  rows[1].add(sum[1]);
  // C fragments of n-tiles 2t and 2t+1 are the A fragment of k-step t (see mma.cuh).
#pragma unroll
  for (int t = 0; t < kBlockN / 16; ++t) {
    p[t][0] = Traits<T>::pack2(s[2 * t][0], s[2 * t][1]);
    p[t][1] = Traits<T>::pack2(s[2 * t][2], s[2 * t][3]);
    p[t][2] = Traits<T>::pack2(s[2 * t + 1][0], s[2 * t + 1][1]);
    p[t][3] = Traits<T>::pack2(s[2 * t + 1][2], s[2 * t + 1][3]);
  }
}

}  // namespace tessera::cuda::sm80
