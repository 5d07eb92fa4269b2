// The hot loops' transcendentals, straight to the SFU (MUFU): one instruction each instead of
// the libdevice sequences that handle denormals and large arguments, which softmax never needs.
#pragma once

namespace tessera::cuda {

// 2^x, ex2.approx.ftz: ~2 ulp, ex2(-inf) = +0 (so masked scores give zero weight).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 1/x, rcp.approx.ftz: ~1 ulp, rcp(+inf) = +0.
__device__ __forceinline__ float fast_rcp(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// log2(x), lg2.approx.ftz: lg2(0) = -inf.
__device__ __forceinline__ float fast_log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace tessera::cuda
