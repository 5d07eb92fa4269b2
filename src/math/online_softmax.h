// Online softmax (FlashAttention): one pass over key tiles with a running max m and a running
// sum l, rescaling the output accumulator when m grows, dividing by l once at the end.
// Scores are kept in base 2 (t = s * log2 e) so kernels can use exp2; the LSE leaves in
// natural log. Rows that see no key keep m = -inf and finish with O = 0, LSE = -inf.
#pragma once

#include <math.h>

#include "math/host_device.h"

namespace tessera::math {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

TESSERA_HD float neg_inf() { return -INFINITY; }

// Soft cap c > 0 on a scaled score s: c * tanh(s / c). Applied before masking.
TESSERA_HD float apply_softcap(float s, float cap) { return cap > 0.0f ? cap * tanhf(s / cap) : s; }

// Whether a cap c >= 0 can be applied with this scale in the forms the CUDA kernels fold it into:
// scale / c and c * log2(e) (cuda/common/softcap_score.cuh) and ln(2) / c (the backward's
// tanh recovered from P, cuda/common/recompute_p.cuh) finite floats, i.e. c at most ~2.36e38 and
// at least max(scale, ln 2) / FLT_MAX. (Past those bounds the folded factors would turn scores
// or gradients into inf or NaN; the API rejects such caps on every backend alike.)
TESSERA_HD bool softcap_foldable(float scale, float cap) {
  return cap == 0.0f || (isfinite(scale / cap) && isfinite(kLn2 / cap) && isfinite(cap * kLog2e));
}

struct OnlineSoftmaxRow {
  float m = -INFINITY;  // running max of t over visible keys (base-2 units)
  float l = 0.0f;       // running sum of exp2(t - m)

  // Enter a tile whose visible maximum is tile_max (-inf if the tile has no visible key).
  // Returns the factor by which the caller multiplies its accumulator row and l is updated
  // for (l is rescaled here).
  TESSERA_HD float enter_tile(float tile_max) {
    const float m_new = fmaxf(m, tile_max);
    const float alpha = (m_new == -INFINITY) ? 1.0f : exp2f(m - m_new);  // exp2(-inf) = 0
    m = m_new;
    l *= alpha;
    return alpha;
  }
  // Probability weight of a visible score t after enter_tile(); 0 while the row is empty.
  TESSERA_HD float weight(float t) const { return m == -INFINITY ? 0.0f : exp2f(t - m); }
  TESSERA_HD void add(float p) { l += p; }

  // Factor that turns the accumulator into O (0 for an empty row, so O = 0, never NaN).
  TESSERA_HD float output_scale() const { return l > 0.0f ? 1.0f / l : 0.0f; }
  // Natural-log LSE of the row's scaled scores, -inf for an empty row.
  TESSERA_HD float lse() const { return l > 0.0f ? (m + log2f(l)) * kLn2 : -INFINITY; }
};

}  // namespace tessera::math
