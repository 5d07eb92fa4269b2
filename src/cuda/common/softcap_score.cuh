// The soft cap's score in log2 units, t = c tanh(s scale / c) log2(e), with the division by c
// folded into a multiplier (scale / c, made once by the host) and log2(e) into c. The sm90
// forward, the batch kernels and the backward's recomputation of P from the LSE all form it so:
// the same bits for the same score, so the backward recomputes the sm90 forward's probabilities
// exactly. math::apply_softcap, the CPU backend's form (and the portable forward's, see
// sm80/forward/softmax.cuh), differs from this one by rounding only.
// Why not c * tanhf(s / c) as written: the IEEE division's check and slow-path call took ~13 of
// the ~36 instructions a score, and ~30 % of the sm90 forward's code (the unmasked head_dim 128 x
// 128 instance: 8.2k instructions, 5.7k in this form).
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
