// fp32 to fp8 e4m3 conversion (cvt ... e4m3x2, sm_89+).
#pragma once

#include <cstdint>

namespace tessera::cuda::sm90 {

// Two floats to two e4m3 bytes, rounded to nearest even and saturated to +-448 (NaN stays NaN):
// `hi` in the upper byte, `lo` in the lower.
__device__ __forceinline__ std::uint16_t cvt_e4m3x2(float hi, float lo) {
  std::uint16_t packed;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(packed) : "f"(hi), "f"(lo));
  return packed;
}

}  // namespace tessera::cuda::sm90
