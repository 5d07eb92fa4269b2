// The backward kernels' recomputation of the forward's probabilities from its saved LSE: one
// definition for the sm80 and the sm90 backward (P must match the forward's and each other's
// bit for bit in the deterministic tests; both kernels inline these, so the expressions, and
// the instructions ptxas makes of them, are the ones each kernel had written out before).
//   score in log2 units:  t = s * scale * log2(e),  or with softcap c:  c * tanh(s * scale / c) * log2(e)
//   P = exp2(t - lse2)    (lse2 = LSE * log2(e); +inf for a row that saw no key, so P = 0)
//   softcap's dS factor:  1 - tanh^2, tanh recovered from P itself: tanh = (log2 P + lse2) ln(2) / c
#pragma once

#include <math.h>

#include "cuda/common/fast_math.cuh"
#include "cuda/common/softcap_score.cuh"

namespace tessera::cuda {

// The score of s = q.k in log2 units, as the forward exponentiated it.
__device__ __forceinline__ float score_log2(float s, bool softcap_on, float scale, float scale_log2, float softcap) {
  return softcap_on ? SoftcapScore::make(scale, softcap)(s) : s * scale_log2;
}

// P of a score in log2 units; 0 where the key is masked for the row.
__device__ __forceinline__ float recompute_p(float t, float lse2, bool visible = true) {
  return visible ? fast_exp2(t - lse2) : 0.0f;
}

// The factor 1 - tanh^2 of dS under softcap, for P > 0 (P = 0: a masked key, dS = 0 anyway).
// Recovering tanh from P spares keeping it alive from the P step to the dS step.
__device__ __forceinline__ float softcap_dtanh(float p, float lse2, float softcap) {
  const float log2_to_t = 0.6931471805599453f / softcap;
  const float tt = (fast_log2(p) + lse2) * log2_to_t;
  return 1.0f - tt * tt;
}

}  // namespace tessera::cuda
