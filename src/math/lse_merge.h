// Exact merge of attention states over disjoint key sets (split-KV, cascade attention):
//   lse = log(sum_i exp(lse_i)),   O = sum_i exp(lse_i - lse) * O_i.
// Streaming form: states arrive one at a time; empty states (lse = -inf) contribute nothing,
// and a merge of only empty states stays empty (O = 0, lse = -inf).
#pragma once

#include <math.h>

#include "math/host_device.h"

namespace tessera::math {

struct LseMerger {
  float max = -INFINITY;  // largest lse seen
  float sum = 0.0f;       // sum of exp(lse_i - max)

  // Adds a state with log-sum-exp `lse`. The caller updates its accumulator as
  //   acc = acc * scale_old + weight_new * O_i.
  TESSERA_HD void add(float lse, float* scale_old, float* weight_new) {
    if (lse == -INFINITY) {  // empty state: nothing changes
      *scale_old = 1.0f;
      *weight_new = 0.0f;
      return;
    }
    const float m_new = fmaxf(max, lse);
    *scale_old = (max == -INFINITY) ? 0.0f : expf(max - m_new);
    *weight_new = expf(lse - m_new);
    sum = sum * *scale_old + *weight_new;
    max = m_new;
  }
  // Factor that normalises the accumulator (0 when every state was empty).
  TESSERA_HD float output_scale() const { return sum > 0.0f ? 1.0f / sum : 0.0f; }
  TESSERA_HD float lse() const { return sum > 0.0f ? max + logf(sum) : -INFINITY; }
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
