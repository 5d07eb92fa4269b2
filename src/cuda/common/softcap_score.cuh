// The soft cap's score in log2 units, t = c tanh(s scale / c) log2(e), with the division by c
// folded into a multiplier (scale / c, made once per call: by the host for the forwards and the
// batch kernels, per tile by the backward's recomputation, with the same IEEE division) and
// log2(e) into c. The sm90 forward, the batch kernels and the backward's recomputation of P
// from the LSE all form it so: the same score t from the same q.k, bit for bit.
// math::apply_softcap, the CPU backend's form (and the portable forward's, see
// sm80/forward/softmax.cuh), differs from this one by rounding only. Caps whose factors would
// overflow are rejected by the API (math::softcap_foldable).
// Why not c * tanhf(s / c) as written: the IEEE division's check and slow-path branch took ~13 of
// the ~36 instructions a score, and ~30 % of the sm90 forward's code (the unmasked head_dim 128 x
// 128 instance: 8.2k instructions, 5.7k in this form); and each score's division sat in its own
// convergence region, so the scores' chains ran one after another (capped forwards 1.7-1.9x
// faster without it, forward_sm90.md, thirty-seventh session).
#pragma once

#include <math.h>

#include "math/online_softmax.h"

namespace tessera::cuda {

// Value-initialised ({}): no soft cap (on() false).
struct SoftcapScore {
  float scale_over_cap = 0.0f;  // scale / c
  float cap_log2 = 0.0f;        // c log2(e)

  __host__ __device__ static SoftcapScore make(float scale, float cap) { return {scale / cap, cap * math::kLog2e}; }
  __host__ __device__ bool on() const { return cap_log2 > 0.0f; }
  __device__ __forceinline__ float operator()(float s) const { return cap_log2 * tanhf(s * scale_over_cap); }
};

}  // namespace tessera::cuda
