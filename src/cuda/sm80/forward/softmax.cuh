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
#include "cuda/common/softmax_fragment.cuh"
#include "cuda/primitives/sm80/warp.cuh"
#include "math/mask.h"
#include "math/online_softmax.h"

namespace tessera::cuda::sm80 {

// The portable forward's soft cap: c tanh(s scale / c) log2(e) with a division per score
// (math::apply_softcap), not softcap_score.cuh's folded multiplier. Its kernels sit at 255
// registers, and with the folded form ptxas spilled (68 bytes at head_dim 64 for sm_80, 12 at 128
// for sm_90, in the loop every tile takes: the division's slow-path call had kept the scores'
// chains apart). The two forms differ by rounding only.
struct DividingSoftcap {
  static constexpr int kChainTiles = 0;
  float scale, cap;
  __device__ __forceinline__ bool on() const { return cap > 0.0f; }
  __device__ __forceinline__ float fragment_score(float s) const { return math::apply_softcap(s * scale, cap) * math::kLog2e; }
};

// Turns raw dot products s into softmax weights for the warp's rows, updating rows[] and
// rescaling o; writes P as 16-bit A fragments of the P*V mma (p[t] = keys 16t..16t+15).
// The steps live in cuda/common/softmax_fragment.cuh (shared with the sm90 forward).
template <typename T, int kBlockN, int kHeadDim>
__device__ __forceinline__ void softmax_tile(float (&s)[kBlockN / 8][4], std::uint32_t (&p)[kBlockN / 16][4],
                                             float (&o)[kHeadDim / 8][4], math::OnlineSoftmaxRow (&rows)[2],
                                             const math::KeyRange (&keys)[2], bool masked, int n0, int q,
                                             float scale_log2, DividingSoftcap capped) {
  float alpha[2];
  scores_to_weights<kBlockN>(s, rows, keys, masked, n0, q, scale_log2, capped, alpha);
  // head_dim 256 (128 accumulators a thread) measured 4-6% slower with the skip branch (H200,
  // bench/RESULTS.md), so it always rescales; d64/d128 need the saved registers (no spills).
  rescale_rows<kHeadDim, (kHeadDim <= 128)>(o, alpha);
  pack_weights<T, kBlockN>(s, p);
}

}  // namespace tessera::cuda::sm80
