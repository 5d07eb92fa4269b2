// Exact merge of attention states over disjoint key sets (split-KV, cascade attention):
//   lse = log(sum_i exp(lse_i)),   O = sum_i exp(lse_i - lse) * O_i.
// Streaming form: states arrive one at a time; empty states (lse = -inf) contribute nothing,
// and a merge of only empty states stays empty (O = 0, lse = -inf).
#pragma once

#include <math.h>

#include "math/host_device.h"

namespace tessera::math {

namespace detail {
// Single rounded operations the device compiler may not contract or reorder (on the host plain
// operators, which ISO C++ builds do not contract across statements either).
#if defined(__CUDA_ARCH__)
TESSERA_HD float sub_rn(float a, float b) { return __fsub_rn(a, b); }
TESSERA_HD float mul_rn(float a, float b) { return __fmul_rn(a, b); }
TESSERA_HD float add_rn(float a, float b) { return __fadd_rn(a, b); }
#else
TESSERA_HD float sub_rn(float a, float b) { return a - b; }
TESSERA_HD float mul_rn(float a, float b) { return a * b; }
TESSERA_HD float add_rn(float a, float b) { return a + b; }
#endif
}  // namespace detail

// One step of the recurrence, for a state of log-sum-exp `lse` with the running max before it
// (m_prev) and after it (m_new = fmaxf(m_prev, lse)): the factor of what was accumulated so far
// and the weight of the new state. Every step below is written with explicitly fused or single
// operations, so that each caller (the CPU executor, and both CUDA merge kernels, which must give
// the same bits) computes the same values: a plain `a * s + w` may or may not be contracted into
// an fma depending on the compiler, its flags and the surrounding code.
TESSERA_HD void lse_merge_weights(float lse, float m_prev, float m_new, float* scale_old, float* weight_new) {
  if (lse == -INFINITY) {  // empty state: nothing changes
    *scale_old = 1.0f;
    *weight_new = 0.0f;
    return;
  }
  *scale_old = m_prev == -INFINITY ? 0.0f : expf(detail::sub_rn(m_prev, m_new));
  *weight_new = expf(detail::sub_rn(lse, m_new));
}
TESSERA_HD float lse_merge_sum(float sum, float scale_old, float weight_new) { return fmaf(sum, scale_old, weight_new); }
// acc = acc * scale_old + weight_new * O_i. A state of weight 0 (empty, or so far below the max
// that exp underflows; scale_old is then 1) leaves acc as it is whatever its O holds (an empty
// state's O may be anything, even NaN).
TESSERA_HD float lse_merge_acc(float acc, float scale_old, float weight_new, float x) {
  const float next = fmaf(weight_new, x, detail::mul_rn(acc, scale_old));
  return weight_new == 0.0f ? acc : next;
}
// Factor that normalises the accumulator (0 when every state was empty), and the merged LSE.
// 1 / sum rounded to nearest: on the device the reciprocal instruction sequence (__frcp_rn, the
// same bits as an IEEE division of 1 and without the division routine's slow path and registers).
TESSERA_HD float lse_merge_out_scale(float sum) {
#if defined(__CUDA_ARCH__)
  return sum > 0.0f ? __frcp_rn(sum) : 0.0f;
#else
  return sum > 0.0f ? 1.0f / sum : 0.0f;
#endif
}
TESSERA_HD float lse_merge_lse(float max, float sum) { return sum > 0.0f ? detail::add_rn(max, logf(sum)) : -INFINITY; }

struct LseMerger {
  float max = -INFINITY;  // largest lse seen
  float sum = 0.0f;       // sum of exp(lse_i - max)

  // Adds a state with log-sum-exp `lse`. The caller updates its accumulator with
  // lse_merge_acc(acc, scale_old, weight_new, O_i).
  TESSERA_HD void add(float lse, float* scale_old, float* weight_new) {
    const float m_new = lse == -INFINITY ? max : fmaxf(max, lse);
    lse_merge_weights(lse, max, m_new, scale_old, weight_new);
    sum = lse_merge_sum(sum, *scale_old, *weight_new);
    max = m_new;
  }
  TESSERA_HD float output_scale() const { return lse_merge_out_scale(sum); }
  TESSERA_HD float lse() const { return lse_merge_lse(max, sum); }
};

// Two states at once: weights w_a, w_b (summing to 1, or both 0) and the merged lse.
TESSERA_HD float merge_two_lse(float lse_a, float lse_b, float* w_a, float* w_b) {
  if (lse_a == -INFINITY && lse_b == -INFINITY) {
    *w_a = 0.0f;
    *w_b = 0.0f;
    return -INFINITY;
  }
  const float m = fmaxf(lse_a, lse_b);
  const float ea = expf(lse_a - m), eb = expf(lse_b - m);
  const float s = ea + eb;
  *w_a = ea / s;
  *w_b = eb / s;
  return m + logf(s);
}

}  // namespace tessera::math
