// The soft cap's score in log2 units, t = c tanh(s scale / c) log2(e), with the division by c
// folded into a multiplier (scale / c, made once per call: by the host for the forwards and the
// batch kernels, per tile by the backward's recomputation, with the same IEEE division) and
// log2(e) into c. Two forms of tanh: libm's tanhf (operator(): the backward's recomputation
// and the batch decode kernel) and the SFU's (fragment_score: the softmax fragment of the sm90
// forward and the batch prefill, ~5e-6 of t apart). math::apply_softcap, the CPU backend's form
// (and the portable forward's, see sm80/forward/softmax.cuh), differs from both by rounding
// only. Caps whose factors would overflow are rejected by the API (math::softcap_foldable).
// Why not c * tanhf(s / c) as written: the IEEE division's check and slow-path branch took ~13 of
// the ~36 instructions a score, and ~30 % of the sm90 forward's code (the unmasked head_dim 128 x
// 128 instance: 8.2k instructions, 5.7k in this form); and each score's division sat in its own
// convergence region, so the scores' chains ran one after another (capped forwards 1.7-1.9x
// faster without it, forward_sm90.md, thirty-seventh session).
#pragma once

#include <math.h>

#include "cuda/common/fast_math.cuh"
#include "math/online_softmax.h"

namespace tessera::cuda {

// Value-initialised ({}): no soft cap (on() false).
struct SoftcapScore {
  float scale_over_cap = 0.0f;  // scale / c
  float cap_log2 = 0.0f;        // c log2(e)

  __host__ __device__ static SoftcapScore make(float scale, float cap) { return {scale / cap, cap * math::kLog2e}; }
  __host__ __device__ bool on() const { return cap_log2 > 0.0f; }
  __device__ __forceinline__ float operator()(float s) const { return cap_log2 * tanhf(s * scale_over_cap); }

  // The softmax fragment's form (scores_to_weights, through cap_fragment: the sm90 forward and
  // the batch prefill): tanh on the SFU, ~13 instructions a score against tanhf's ~22, the same
  // two MUFU. Its t differs from operator()'s (the backward's, the batch decode's) by ~5e-6 of
  // itself at most, so the backward no longer recomputes these forwards' scores bit for bit.
  __device__ __forceinline__ float fragment_score(float s) const { return cap_log2 * tanh_of(s * scale_over_cap); }
  // Scores capped at once in cap_fragment: n-tiles per group (below).
  static constexpr int kChainTiles = 2;

  // tanh(y): 1 - 2 / (e^(2y) + 1) on the SFU (ex2, rcp) for |y| >= 1/16, an absolute error of
  // at most ~3e-7 (their relative errors, 2^-22 and 2^-23, times 2 / (e^(2y) + 1) <= 1), i.e. a
  // relative one below ~5e-6 there; below 1/16 the odd series y - y^3/3 + 2y^5/15 (truncation
  // < 4e-9 relative), where the first form's absolute error would not be small against y.
  // Saturates to +-1 (ex2 gives +inf or 0, rcp(+inf) = 0); NaN stays NaN.
  __device__ __forceinline__ static float tanh_of(float y) {
    const float far = fmaf(-2.0f, fast_rcp(fast_exp2(2.8853900817779268f * y) + 1.0f), 1.0f);  // 2 log2(e)
    const float y2 = y * y;
    const float near = fmaf(y * y2, fmaf(y2, 0.13333334f, -0.33333334f), y);
    return fabsf(y) < 0.0625f ? near : far;
  }
};

// SoftcapScore whose fragments cap_fragment caps kGroup n-tiles at a time (0: all at once); a
// kernel picks kGroup per instance (the sm90 forward: FwdTraits::kCapGroup).
template <int kGroup>
struct GroupedSoftcapScore : SoftcapScore {
  static constexpr int kChainTiles = kGroup;
};

// Caps an accumulator fragment of scores in place with capped.fragment_score (s[n][e]: n-tile n,
// element e; e >> 1 picks the row, a query's), kGroup n-tiles at a time: each group's arguments are x + 0 * (the capped score of
// the same row and element kGroup n-tiles back), i.e. x itself (a NaN there makes the row NaN
// anyway; not foldable, 0 * inf being NaN) but ordered after that score, so that at most
// kGroup n-tiles' chains are in flight at once. kGroup 0: all at once.
template <int kGroup, int kTiles, class Cap>
__device__ __forceinline__ void cap_fragment(float (&s)[kTiles][4], const Cap& capped) {
#pragma unroll
  for (int n = 0; n < kTiles; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float x = s[n][e];
      if constexpr (kGroup > 0) {
        if (n >= kGroup) x = fmaf(s[n - kGroup][e], 0.0f, x);
      }
      s[n][e] = capped.fragment_score(x);
    }
}

}  // namespace tessera::cuda
