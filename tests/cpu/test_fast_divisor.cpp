// math/fast_divisor.h against the / and % operators: every divisor up to 4096 with edge and
// random dividends, divisors around every power of two, the largest divisors, and random pairs
// over the whole range the kernels use (0 <= n < 2^31, 1 <= d < 2^31).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "math/fast_divisor.h"

namespace tessera::testing {
namespace {

constexpr int kMaxInt = 0x7fffffff;

void expect_divides(int d, int n) {
  const math::FastDivisor f(d);
  const int q = f.div(n);
  ASSERT_EQ(q, n / d) << n << " / " << d;
  ASSERT_EQ(f.rem(n, q), n % d) << n << " % " << d;
}

// Dividends where a rounding error would show first: multiples of d and their neighbours, and
// the top of the range.
std::vector<int> edge_dividends(int d) {
  std::vector<int> n = {0, 1, kMaxInt, kMaxInt - 1, kMaxInt - d + 1};
  for (std::int64_t k : {std::int64_t{1}, std::int64_t{2}, std::int64_t{3}, std::int64_t{kMaxInt} / d - 1,
                         std::int64_t{kMaxInt} / d}) {
    for (std::int64_t delta : {-1, 0, 1}) {
      const std::int64_t v = k * d + delta;
      if (v >= 0 && v <= kMaxInt) n.push_back(static_cast<int>(v));
    }
  }
  return n;
}

TEST(FastDivisor, EverySmallDivisor) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> any(0, kMaxInt);
  for (int d = 1; d <= 4096; ++d) {
    for (int n : edge_dividends(d)) expect_divides(d, n);
    for (int n = 0; n < 3 * d; n += 1 + d / 64) expect_divides(d, n);
    for (int i = 0; i < 64; ++i) expect_divides(d, any(rng));
  }
}

TEST(FastDivisor, AroundPowersOfTwoAndTheTop) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> any(0, kMaxInt);
  std::vector<int> divisors = {kMaxInt, kMaxInt - 1, kMaxInt / 2, kMaxInt / 3, 46341, 65535, 65536, 65537};
  for (int k = 1; k <= 30; ++k) {
    for (int delta : {-1, 0, 1}) divisors.push_back((1 << k) + delta);
  }
  divisors.push_back(1 << 30 | 1);
  for (int d : divisors) {
    for (int n : edge_dividends(d)) expect_divides(d, n);
    for (int i = 0; i < 4096; ++i) expect_divides(d, any(rng));
  }
}

TEST(FastDivisor, RandomPairs) {
  std::mt19937 rng(13);
  std::uniform_int_distribution<int> any(0, kMaxInt);
  std::uniform_int_distribution<int> small(1, 1 << 16);
  for (int i = 0; i < 2000000; ++i) {
    // Divisors spread over every magnitude (a log-uniform draw) and grid-sized ones.
    const std::uint32_t wide = static_cast<std::uint32_t>(any(rng));
    const int shift = any(rng) % 31;
    const int d = i % 2 ? small(rng) : static_cast<int>(std::max<std::uint32_t>(1u, wide >> shift));
    expect_divides(d, any(rng));
  }
}

TEST(FastDivisor, ZeroDividesByOne) {
  // A launch without tiles may build one from 0; it then divides by 1 (and is not used).
  const math::FastDivisor f(0);
  EXPECT_EQ(f.divisor, 1);
  EXPECT_EQ(f.div(12345), 12345);
}

}  // namespace
}  // namespace tessera::testing
