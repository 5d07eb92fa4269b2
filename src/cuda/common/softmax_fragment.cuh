// Masking and the online softmax of one S tile held as mma accumulator fragments, in registers,
// shared by the sm80 (mma.sync) and sm90 (wgmma) forwards: both lay a 16-row slab out the same
// way (thread = 4 g + q holds rows g and g + 8 and, per 8-column n-tile n, columns 8n + 2q and
// 8n + 2q + 1; the quad's other lanes hold the rest of the row, hence the quad shuffles).
//
// Semantics come from src/math: per-row key ranges are math::visible_keys, the running state is
// math::OnlineSoftmaxRow (base-2 units, -inf while a row is empty). The steps are separate so
// that a kernel whose O accumulator is still being written by an asynchronous GEMM (sm90) can
// turn scores into weights first and rescale O / pack P after its wait:
//   scores_to_weights -> rescale_rows -> pack_weights.
#pragma once

#include <math.h>

#include <cstdint>

#include "cuda/common/fast_math.cuh"
#include "cuda/common/softcap_score.cuh"
#include "cuda/common/types.cuh"
#include "cuda/primitives/sm80/warp.cuh"
#include "math/mask.h"
#include "math/online_softmax.h"

namespace tessera::cuda {

// s (raw q.k of keys n0 + 8n + 2q + {0,1}; rows g (e = 0,1) and g + 8 (e = 2,3)) becomes the
// unnormalised weights exp2(t - m) in place; rows[] enter the tile (m, l updated; the thread's
// partial l, the quad's parts are summed at the end) and alpha[h] is the factor by which row h's
// O accumulator must be multiplied. `masked` false: the whole tile is visible to every row;
// `masked` must be the same in every lane of the warp (the mask votes).
// capped: the soft cap (softcap_score.cuh's form, or any type with on() and the score in log2
// units as fragment_score()); capped.on() false: no soft cap, and t = s * scale_log2.
// log2_weight_scale w: the weights come out as 2^w exp2(t - m) (fp8 P needs them away from the
// bottom of its range); l then sums the scaled weights, and the caller divides out 2^w.
//
// kLazyRescale: the running max m moves only when some row of the warp sees a tile max above
// m + lazy_log2; otherwise every row keeps its m, alpha is 1 and the result is false, so the
// caller skips the O rescale (one vote per tile, warp-uniform). Exact in real arithmetic: m is
// any common offset of the row's exponents as long as l and O use the same one, and the LSE is
// m + log2 l. The weights then reach 2^(w + lazy_log2) instead of 2^w (the caller picks
// lazy_log2 so that P's type holds them). With lazy_log2 0 it is the exact skip: a rescale
// whenever any row's max rose. Returns whether O must be rescaled (always true without it).
// votes[h] false: row h does not take part in the vote (a row past its sequence, whose Q may be
// another sequence's: the other rows' rounding must not depend on it); its weights are then
// unbounded, and the caller never stores it.
// kFirstTile: the rows' first tile (m = -inf, l = 0, O still zero): m becomes the tile max at
// once, without the vote and enter_tile's exp2 (alpha 1, returns false: O needs no rescale).
// Rows that would not have voted may then take a finite m where the vote would have left -inf;
// no such row is stored, and every stored row ends as without the flag, bit for bit.
// kMaskInThreadFrame: the mask's form (below; both exact). The sm90 forward takes the frame form
// (d64 causal 512-1024 5-11 % faster); the portable forward keeps the per-score form, which the
// frame form made 2 % slower there (d128 causal 4k; bench/RESULTS.md, twenty-seventh session).
template <int kBlockN, bool kLazyRescale = false, bool kFirstTile = false, bool kMaskInThreadFrame = false,
          typename Softcap = SoftcapScore>
__device__ __forceinline__ bool scores_to_weights(float (&s)[kBlockN / 8][4], math::OnlineSoftmaxRow (&rows)[2],
                                                  const math::KeyRange (&keys)[2], bool masked, int n0, int q,
                                                  float scale_log2, const Softcap& capped, float (&alpha)[2],
                                                  float log2_weight_scale = 0.0f, float lazy_log2 = 0.0f,
                                                  bool vote0 = true, bool vote1 = true) {
  // After this block, t = s * mul is the score in base-2 units. Without a soft cap the
  // multiply is folded into the exponent's FFMA below.
  float mul = scale_log2;
  if (capped.on()) {
    cap_fragment<Softcap::kChainTiles>(s, capped);
    mul = 1.0f;
  }
  // Soft cap first, then the mask: masked scores become -inf whatever the cap made of them.
  // Per-score form: key n0 + 8n + 2q + (e & 1) against the row's range (an add, two compares).
  // Thread-frame form: key n0 + 2q + c (c = 8n + (e & 1), a constant) is visible to row h iff
  // lo[h] <= c < hi[h], the row's bounds moved into the thread's frame once, so that each score
  // costs a compare with an immediate. A row that starts inside the tile (a window's left edge, a
  // ragged or bottom-right offset) takes the lower bound too; on a causal diagonal no row does,
  // and the warp skips it (one vote). Exact: the same integer tests.
  if (masked) {
    if constexpr (kMaskInThreadFrame) {
      const int c0 = n0 + 2 * q;
      const int lo[2] = {keys[0].begin - c0, keys[1].begin - c0};
      const int hi[2] = {keys[0].end - c0, keys[1].end - c0};
      if (__any_sync(0xffffffffu, lo[0] > 0 || lo[1] > 0)) {
#pragma unroll
        for (int n = 0; n < kBlockN / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int c = 8 * n + (e & 1);
            if (c < lo[e >> 1] || c >= hi[e >> 1]) s[n][e] = -INFINITY;
          }
      } else {
#pragma unroll
        for (int n = 0; n < kBlockN / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (8 * n + (e & 1) >= hi[e >> 1]) s[n][e] = -INFINITY;
      }
    } else {
#pragma unroll
      for (int n = 0; n < kBlockN / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = n0 + 8 * n + 2 * q + (e & 1);
          const math::KeyRange& r = keys[e >> 1];
          if (col < r.begin || col >= r.end) s[n][e] = -INFINITY;
        }
    }
  }
  // The row max and the row sum run in four independent chains (n-tile n feeds chain
  // n % kPartials), joined by a tree at the end: one running chain per row made the softmax of
  // a tile a string of dependent FMNMX and FADD (~32 deep per row), which left a warp waiting
  // on fixed latencies a third of the time where no other warp's softmax hid them (ncu, FP8 d256).
  constexpr int kTiles = kBlockN / 8;
  constexpr int kPartials = 4;
  static_assert(kTiles >= kPartials, "scores_to_weights: tiles of at least 32 keys (every partial chain starts from a value)");
  float m_use[2], tile_max[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float part[kPartials];
#pragma unroll
    for (int n = 0; n < kTiles; ++n) {
      const float v = fmaxf(s[n][2 * h], s[n][2 * h + 1]);
      part[n % kPartials] = n < kPartials ? v : fmaxf(part[n % kPartials], v);
    }
#pragma unroll
    for (int w = kPartials / 2; w > 0; w /= 2)
#pragma unroll
      for (int k = 0; k < w; ++k) part[k] = fmaxf(part[k], part[k + w]);
    // mul > 0, so the max of s * mul is mx * mul (and -inf stays -inf).
    tile_max[h] = sm80::quad_max(part[0]) * mul;
    if constexpr (kFirstTile) {
      rows[h].m = fmaxf(rows[h].m, tile_max[h]);  // tile_max, or -inf for a NaN tile, as enter_tile
      alpha[h] = 1.0f;
      m_use[h] = (rows[h].m == -INFINITY ? 0.0f : rows[h].m) - log2_weight_scale;  // as below
    } else if constexpr (!kLazyRescale) {
      alpha[h] = rows[h].enter_tile(tile_max[h]);
      // OnlineSoftmaxRow::weight gives 0 while the row is empty (m = -inf); then every t of the
      // row is -inf too, and exp2(-inf - 0) = 0 gives the same without a per-element select.
      m_use[h] = (rows[h].m == -INFINITY ? 0.0f : rows[h].m) - log2_weight_scale;
    }
  }
  bool rescale = !kFirstTile;
  if constexpr (kLazyRescale && !kFirstTile) {
    // The rise as a difference (m + lazy_log2 would round at large m and let a rise through):
    // an empty row's first visible key rises by +inf, a tile with no visible key by -inf or NaN
    // (-inf - -inf), which compares false.
    // Bitwise & and |, not && and ||: four compares and a PLOP3 without the branches (and their
    // BSSY / BSYNC) that short-circuit evaluation compiles to. The same truth value.
    const bool rise0 = tile_max[0] - rows[0].m > lazy_log2, rise1 = tile_max[1] - rows[1].m > lazy_log2;
    const bool rises = (vote0 & rise0) | (vote1 & rise1);
    rescale = __any_sync(0xffffffffu, rises);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      alpha[h] = rescale ? rows[h].enter_tile(tile_max[h]) : 1.0f;
      m_use[h] = (rows[h].m == -INFINITY ? 0.0f : rows[h].m) - log2_weight_scale;  // as above
    }
  }
  // The partial sums start from the first pair, not from 0 (no adds of 0).
  float sum[2][kPartials];
#pragma unroll
  for (int n = 0; n < kTiles; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = fast_exp2(fmaf(s[n][e], mul, -m_use[e >> 1]));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float pair = s[n][2 * h] + s[n][2 * h + 1];
      sum[h][n % kPartials] = n < kPartials ? pair : sum[h][n % kPartials] + pair;
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int w = kPartials / 2; w > 0; w /= 2)
#pragma unroll
      for (int k = 0; k < w; ++k) sum[h][k] += sum[h][k + w];
    rows[h].add(sum[h][0]);
  }
  return rescale;
}

// O rows *= alpha. kSkipWhenUnchanged: skip when no row of the warp changed its max (every
// alpha is then exactly 1, so skipping is exact); the vote keeps the branch warp-uniform. On
// long rows the max settles and most tiles skip; it costs a vote and a branch per tile.
template <int kHeadDim, bool kSkipWhenUnchanged>
__device__ __forceinline__ void rescale_rows(float (&o)[kHeadDim / 8][4], const float (&alpha)[2]) {
  if (!kSkipWhenUnchanged || __any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
    for (int d = 0; d < kHeadDim / 8; ++d) {
      o[d][0] *= alpha[0];
      o[d][1] *= alpha[0];
      o[d][2] *= alpha[1];
      o[d][3] *= alpha[1];
    }
  }
}

// Weights -> 16-bit A fragments of the P V product: the C fragments of n-tiles 2t and 2t + 1
// are the A fragment of k-step t (the same for mma.sync m16n8k16 and wgmma with A in registers).
template <typename T, int kBlockN>
__device__ __forceinline__ void pack_weights(const float (&s)[kBlockN / 8][4], std::uint32_t (&p)[kBlockN / 16][4]) {
#pragma unroll
  for (int t = 0; t < kBlockN / 16; ++t) {
    p[t][0] = Traits<T>::pack2(s[2 * t][0], s[2 * t][1]);
    p[t][1] = Traits<T>::pack2(s[2 * t][2], s[2 * t][3]);
    p[t][2] = Traits<T>::pack2(s[2 * t + 1][0], s[2 * t + 1][1]);
    p[t][3] = Traits<T>::pack2(s[2 * t + 1][2], s[2 * t + 1][3]);
  }
}

}  // namespace tessera::cuda
