// Division by a divisor fixed at launch time, as a multiply-high and a shift (Granlund and
// Montgomery's round-up method): a kernel that turns a tile index into its coordinates at every
// tile's start divides by the grid's shape, and the GPU has no integer divide: nvcc emits a
// reciprocal and two correction steps, about 20 dependent instructions per quotient, where this
// takes 3. The host computes the multiplier once per launch.
#pragma once

#include <cstdint>

#include "math/host_device.h"

namespace tessera::math {

struct FastDivisor {
  int divisor = 1;
  std::uint32_t multiplier = 1;  // 2^32 (2^shift - divisor) / divisor + 1, rounded down before the + 1
  int shift = 0;                 // ceil(log2(divisor))

  FastDivisor() = default;
  // divisor >= 1 (a launch with no tiles may pass 0: it then divides by 1, and must not use it).
  explicit FastDivisor(int d) {
    divisor = d < 1 ? 1 : d;
    shift = 0;
    while ((std::int64_t{1} << shift) < divisor) ++shift;
    const std::uint64_t excess = (std::uint64_t{1} << shift) - static_cast<std::uint64_t>(divisor);
    multiplier = static_cast<std::uint32_t>((excess << 32) / static_cast<std::uint64_t>(divisor) + 1);
  }

  // n / divisor for 0 <= n < 2^31: with n below 2^31 the sum high + n cannot overflow 32 bits.
  TESSERA_HD int div(int n) const {
    const std::uint32_t u = static_cast<std::uint32_t>(n);
#if defined(__CUDA_ARCH__)
    const std::uint32_t high = __umulhi(u, multiplier);
#else
    const std::uint32_t high = static_cast<std::uint32_t>((static_cast<std::uint64_t>(u) * multiplier) >> 32);
#endif
    return static_cast<int>((high + u) >> shift);
  }

  // n % divisor, given q = div(n).
  TESSERA_HD int rem(int n, int q) const { return n - q * divisor; }
};

}  // namespace tessera::math
