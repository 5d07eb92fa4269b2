// Reductions inside the 4-lane quad (lanes 4g..4g+3) that share one row of an mma
// accumulator fragment: two xor-shuffles give every lane of the quad the row's result.
#pragma once

namespace tessera::cuda::sm80 {

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
  return v;
}

__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  return v;
}

}  // namespace tessera::cuda::sm80
