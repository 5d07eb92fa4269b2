// Unit tests of the semantics headers every backend shares: masks, online softmax, LSE
// merge and storage conversions. Each is checked against a brute-force definition.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "math/dtype_convert.h"
#include "math/lse_merge.h"
#include "math/mask.h"
#include "math/online_softmax.h"
#include "support/test_support.h"

namespace tessera::testing {
namespace {

// The documented rule, written independently of mask.h.
bool visible_by_definition(int sq, int sk, bool causal, int left, int right, int i, int j) {
  if (j < 0 || j >= sk) return false;
  const long long diag = static_cast<long long>(i) + sk - sq;
  if (causal && (right < 0 || right > 0)) right = 0;
  if (left >= 0 && j < diag - left) return false;
  if (right >= 0 && j > diag + right) return false;
  return true;
}

TEST(Mask, VisibleKeysMatchDefinition) {
  for (int sq = 0; sq <= 9; ++sq)
    for (int sk = 0; sk <= 9; ++sk)
      for (bool causal : {false, true})
        for (int left : {-1, 0, 1, 3, 12})
          for (int right : {-1, 0, 2, 12}) {
            const math::MaskSpec m = math::MaskSpec::make(sq, sk, causal, left, right);
            for (int i = 0; i < sq; ++i) {
              const math::KeyRange r = math::visible_keys(m, i);
              EXPECT_GE(r.begin, 0);
              EXPECT_LE(r.end, sk);
              for (int j = -1; j <= sk; ++j) {
                const bool want = visible_by_definition(sq, sk, causal, left, right, i, j);
                ASSERT_EQ(math::key_visible(m, i, j), want)
                    << "sq " << sq << " sk " << sk << " causal " << causal << " window " << left << "," << right
                    << " i " << i << " j " << j;
                ASSERT_EQ(j >= r.begin && j < r.end, want);
              }
            }
          }
}

TEST(Mask, NarrowVisibleKeysAgreeOverTheIntRange) {
  // visible_keys_narrow (32-bit) against visible_keys (64-bit), at the ends of the int range too.
  constexpr int kMax = 2147483647;
  // Lengths, rows and window bounds near 0, near each other and near 2^31 - 1.
  const std::vector<int> lengths = {0, 1, 2, 7, 128, 1023, 1 << 20, (1 << 30) - 1, 1 << 30, kMax - 200, kMax - 1, kMax};
  const std::vector<int> bounds = {-1, 0, 1, 2, 127, 1 << 20, 1 << 30, kMax - 1, kMax};
  std::vector<int> rows = {-1, 0, 1, 2, 200};
  for (int n : lengths)
    for (int d : {-200, -129, -128, -9, -8, -1, 0, 1, 8, 127, 128, 200})
      if (static_cast<long long>(n) + d >= -1 && static_cast<long long>(n) + d <= kMax) rows.push_back(n + d);
  long long checked = 0;
  for (int sq : lengths)
    for (int sk : lengths)
      for (int left : bounds)
        for (int right : bounds) {
          math::MaskSpec m;
          m.seq_q = sq;
          m.seq_k = sk;
          m.left = left;
          m.right = right;
          for (int i : rows) {
            const math::KeyRange got = math::visible_keys_narrow(m, i), want = math::visible_keys(m, i);
            ASSERT_TRUE(got.begin == want.begin && got.end == want.end)
                << "sq " << sq << " sk " << sk << " left " << left << " right " << right << " i " << i << ": got ["
                << got.begin << ", " << got.end << "), want [" << want.begin << ", " << want.end << ")";
            ++checked;
            if (i >= 0 && i < kMax) {  // and the row range built on it
              const math::KeyRange rows_narrow = math::visible_keys_of_rows<true>(m, i, i + 1);
              const math::KeyRange rows_wide = math::visible_keys_of_rows(m, i, i + 1);
              ASSERT_TRUE(rows_narrow.begin == rows_wide.begin && rows_narrow.end == rows_wide.end) << "rows of " << i;
            }
          }
        }
  // And random ones: lengths and bounds of every size, rows near the diagonal and anywhere.
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  auto any_int = [&](int max) { return static_cast<int>(next() % (static_cast<std::uint64_t>(max) + 1)); };
  auto sized = [&] { return any_int(1 << (next() % 31)); };  // magnitudes 1 .. 2^30
  for (int n = 0; n < 2000000; ++n) {
    math::MaskSpec m;
    m.seq_q = (next() % 8 == 0) ? kMax - any_int(300) : sized();
    m.seq_k = (next() % 8 == 0) ? kMax - any_int(300) : sized();
    m.left = (next() % 4 == 0) ? -1 : (next() % 8 == 0 ? kMax - any_int(300) : sized());
    m.right = (next() % 4 == 0) ? -1 : (next() % 8 == 0 ? kMax - any_int(300) : sized());
    const long long near = static_cast<long long>(m.seq_q) + static_cast<long long>(next() % 600) - 300;
    const int i = (next() % 2 == 0 && near >= -1 && near <= kMax) ? static_cast<int>(near) : any_int(kMax);
    const math::KeyRange got = math::visible_keys_narrow(m, i), want = math::visible_keys(m, i);
    ASSERT_TRUE(got.begin == want.begin && got.end == want.end)
        << "sq " << m.seq_q << " sk " << m.seq_k << " left " << m.left << " right " << m.right << " i " << i;
    ++checked;
  }
  EXPECT_GT(checked, 2000000);
}

TEST(Mask, RowAndTileRangesMatchBruteForce) {
  for (int sq : {1, 5, 13})
    for (int sk : {0, 4, 13, 20})
      for (bool causal : {false, true})
        for (int left : {-1, 0, 3})
          for (int right : {-1, 1}) {
            const math::MaskSpec m = math::MaskSpec::make(sq, sk, causal, left, right);
            for (int r0 = 0; r0 < sq; ++r0)
              for (int r1 = r0 + 1; r1 <= sq; ++r1) {
                // visible_keys_of_rows covers every visible key of every row.
                const math::KeyRange u = math::visible_keys_of_rows(m, r0, r1);
                for (int i = r0; i < r1; ++i)
                  for (int j = 0; j < sk; ++j) {
                    if (visible_by_definition(sq, sk, causal, left, right, i, j)) {
                      ASSERT_TRUE(j >= u.begin && j < u.end) << "rows " << r0 << ".." << r1 << " key " << j;
                    }
                  }
                // tile_fully_visible is exactly "every pair of the tile is visible".
                for (int c0 = 0; c0 < sk; ++c0)
                  for (int c1 = c0 + 1; c1 <= sk; ++c1) {
                    bool all = true;
                    for (int i = r0; i < r1 && all; ++i)
                      for (int j = c0; j < c1 && all; ++j) all = visible_by_definition(sq, sk, causal, left, right, i, j);
                    ASSERT_EQ(math::tile_fully_visible(m, r0, r1, c0, c1), all)
                        << "sq " << sq << " sk " << sk << " causal " << causal << " window " << left << "," << right
                        << " rows " << r0 << ".." << r1 << " cols " << c0 << ".." << c1;
                  }
              }
          }
}

TEST(OnlineSoftmax, TilesEqualDirectSoftmax) {
  auto rng = fresh_rng();
  std::normal_distribution<float> dist(0.0f, 8.0f);
  std::uniform_int_distribution<int> tile(1, 9);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + trial % 40;
    std::vector<float> t(static_cast<std::size_t>(n));
    for (auto& x : t) x = (trial % 3 == 0 && dist(rng) > 6.0f) ? -INFINITY : dist(rng);
    // Direct, in double.
    double mx = -INFINITY;
    for (float x : t) mx = std::max(mx, static_cast<double>(x));
    double sum = 0.0;
    for (float x : t) sum += x == -INFINITY ? 0.0 : std::exp2(x - mx);
    const double want_lse = mx == -INFINITY ? -INFINITY : (mx + std::log2(sum)) * std::log(2.0);
    // Streamed: acc holds sum of weights times the key index, rescaled like an O row.
    math::OnlineSoftmaxRow row;
    double acc = 0.0, want_acc = 0.0;
    for (int j = 0; j < n; ++j) {
      if (t[j] != -INFINITY) want_acc += std::exp2(t[j] - mx) / sum * j;
    }
    for (int b = 0; b < n;) {
      const int e = std::min(n, b + tile(rng));
      float tmax = -INFINITY;
      for (int j = b; j < e; ++j) tmax = std::max(tmax, t[j]);
      acc *= row.enter_tile(tmax);
      for (int j = b; j < e; ++j) {
        const float p = row.weight(t[j]);
        ASSERT_FALSE(std::isnan(p));
        row.add(p);
        acc += p * j;
      }
      b = e;
    }
    if (want_lse == -INFINITY) {
      EXPECT_EQ(row.lse(), -INFINITY);
      EXPECT_EQ(row.output_scale(), 0.0f);
      EXPECT_EQ(acc * row.output_scale(), 0.0);
    } else {
      EXPECT_NEAR(row.lse(), want_lse, 1e-5 * std::max(1.0, std::fabs(want_lse)));
      EXPECT_NEAR(acc * row.output_scale(), want_acc, 1e-4 * std::max(1.0, want_acc));
    }
  }
}

TEST(OnlineSoftmax, EmptyTilesLeaveAnEmptyRow) {
  math::OnlineSoftmaxRow row;
  EXPECT_EQ(row.enter_tile(-INFINITY), 1.0f);
  EXPECT_EQ(row.weight(-INFINITY), 0.0f);
  EXPECT_EQ(row.weight(3.0f), 0.0f);
  EXPECT_EQ(row.output_scale(), 0.0f);
  EXPECT_EQ(row.lse(), -INFINITY);
  // A real tile after empty ones: its first rescale factor multiplies a zero accumulator.
  const float alpha = row.enter_tile(2.0f);
  EXPECT_FALSE(std::isnan(alpha));
  row.add(row.weight(2.0f));
  EXPECT_FLOAT_EQ(row.lse(), 2.0f * math::kLn2);
}

TEST(OnlineSoftmax, Softcap) {
  EXPECT_EQ(math::apply_softcap(123.0f, 0.0f), 123.0f);
  EXPECT_FLOAT_EQ(math::apply_softcap(10.0f, 5.0f), 5.0f * std::tanh(2.0f));
  EXPECT_FLOAT_EQ(math::apply_softcap(-1e4f, 30.0f), -30.0f);
}

TEST(LseMerge, MatchesDirectFormula) {
  auto rng = fresh_rng();
  std::uniform_real_distribution<float> dist(-50.0f, 50.0f);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + trial % 6;
    std::vector<float> lse(static_cast<std::size_t>(n)), val(lse.size());
    for (int i = 0; i < n; ++i) {
      lse[i] = (trial + i) % 4 == 0 ? -INFINITY : dist(rng);
      val[i] = dist(rng);
    }
    double mx = -INFINITY;
    for (float l : lse) mx = std::max(mx, static_cast<double>(l));
    double sum = 0.0, want = 0.0;
    for (int i = 0; i < n; ++i) sum += lse[i] == -INFINITY ? 0.0 : std::exp(lse[i] - mx);
    const double want_lse = mx == -INFINITY ? -INFINITY : mx + std::log(sum);
    for (int i = 0; i < n; ++i)
      if (lse[i] != -INFINITY) want += std::exp(lse[i] - want_lse) * val[i];
    math::LseMerger m;
    float acc = 0.0f;
    for (int i = 0; i < n; ++i) {
      float a, w;
      m.add(lse[i], &a, &w);
      acc = acc * a + w * val[i];
    }
    if (want_lse == -INFINITY) {
      EXPECT_EQ(m.lse(), -INFINITY);
      EXPECT_EQ(acc * m.output_scale(), 0.0f);
    } else {
      EXPECT_NEAR(m.lse(), want_lse, 1e-5 * std::max(1.0, std::fabs(want_lse)));
      EXPECT_NEAR(acc * m.output_scale(), want, 1e-4 * std::max(1.0, std::fabs(want)));
    }
    if (n == 2) {
      float wa, wb;
      const float l2 = math::merge_two_lse(lse[0], lse[1], &wa, &wb);
      if (want_lse == -INFINITY) {
        EXPECT_EQ(l2, -INFINITY);
        EXPECT_EQ(wa + wb, 0.0f);
      } else {
        EXPECT_NEAR(l2, want_lse, 1e-5 * std::max(1.0, std::fabs(want_lse)));
        EXPECT_NEAR(wa * val[0] + wb * val[1], want, 1e-4 * std::max(1.0, std::fabs(want)));
      }
    }
  }
  // The loop's n == 2 trials (trial % 6 == 1) never have both states empty ((trial + i) % 4
  // cannot be 0 for i = 0 and 1), so merge_two_lse's empty case is checked here.
  float wa = 1.0f, wb = 1.0f;
  EXPECT_EQ(math::merge_two_lse(-INFINITY, -INFINITY, &wa, &wb), -INFINITY);
  EXPECT_EQ(wa, 0.0f);
  EXPECT_EQ(wb, 0.0f);
  EXPECT_EQ(math::merge_two_lse(-INFINITY, 2.5f, &wa, &wb), 2.5f);
  EXPECT_EQ(wa, 0.0f);
  EXPECT_EQ(wb, 1.0f);
}

// --- dtype conversions --------------------------------------------------------------------

// Nearest-even rounding checked by comparing with the neighbouring codes.
template <typename ToCode, typename FromCode>
void expect_nearest_even(float x, ToCode to, FromCode from, std::uint16_t max_finite_code) {
  const std::uint16_t c = to(x);
  const float r = from(c);
  if (std::isinf(r)) {
    EXPECT_GE(std::fabs(x), from(max_finite_code)) << x;
    return;
  }
  const std::uint16_t mag = c & 0x7fff;
  const double err = std::fabs(static_cast<double>(x) - r);
  for (int delta : {-1, 1}) {
    const int nm = mag + delta;
    if (nm < 0 || nm > max_finite_code) continue;
    const float nb = from(static_cast<std::uint16_t>((c & 0x8000) | nm));
    const double nerr = std::fabs(static_cast<double>(x) - nb);
    ASSERT_LE(err, nerr) << "x " << x << " chose " << r << " over " << nb;
    if (err == nerr) {
      ASSERT_EQ(mag & 1, 0) << "tie of x " << x << " not to even";
    }
  }
}

TEST(DtypeConvert, Fp16RoundTripsEveryCode) {
  for (std::uint32_t c = 0; c < 0x10000; ++c) {
    const float f = math::fp16_to_float(static_cast<std::uint16_t>(c));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(math::fp16_to_float(math::float_to_fp16(f))));
      continue;
    }
    ASSERT_EQ(math::float_to_fp16(f), c) << std::hex << c;
  }
}

TEST(DtypeConvert, Bf16RoundTripsEveryCode) {
  for (std::uint32_t c = 0; c < 0x10000; ++c) {
    const float f = math::bf16_to_float(static_cast<std::uint16_t>(c));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(math::bf16_to_float(math::float_to_bf16(f))));
      continue;
    }
    ASSERT_EQ(math::float_to_bf16(f), c) << std::hex << c;
  }
}

TEST(DtypeConvert, RoundsToNearestEven) {
  auto rng = fresh_rng();
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> exp(-30, 17);
  for (int t = 0; t < 20000; ++t) {
    const float x = std::ldexp(mant(rng), exp(rng)) * (t % 2 ? -1.0f : 1.0f);
    expect_nearest_even(x, math::float_to_fp16, math::fp16_to_float, 0x7bff);
    expect_nearest_even(x, math::float_to_bf16, math::bf16_to_float, 0x7f7f);
  }
  // Exact ties and boundaries.
  EXPECT_EQ(math::fp16_to_float(math::float_to_fp16(1.0f + std::ldexp(1.0f, -11))), 1.0f);  // tie -> even
  EXPECT_EQ(math::fp16_to_float(math::float_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11))), 1.0f + std::ldexp(1.0f, -9));
  EXPECT_EQ(math::fp16_to_float(math::float_to_fp16(65519.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(math::fp16_to_float(math::float_to_fp16(65520.0f))));
  EXPECT_EQ(math::fp16_to_float(math::float_to_fp16(std::ldexp(1.0f, -25))), 0.0f);  // tie with 0 -> 0
  EXPECT_EQ(math::fp16_to_float(math::float_to_fp16(std::ldexp(3.0f, -26))), std::ldexp(1.0f, -24));
  EXPECT_EQ(math::bf16_to_float(math::float_to_bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);  // tie -> even
  EXPECT_TRUE(std::isinf(math::bf16_to_float(math::float_to_bf16(INFINITY))));
  EXPECT_TRUE(std::signbit(math::fp16_to_float(math::float_to_fp16(-0.0f))));
}

TEST(DtypeConvert, Fp8) {
  for (int exp_bits : {4, 5}) {
    for (int c = 0; c < 256; ++c) {
      const float f = math::fp8_to_float(static_cast<std::uint8_t>(c), exp_bits);
      if (std::isnan(f)) continue;
      ASSERT_EQ(math::float_to_fp8(f, exp_bits), c) << "e" << exp_bits << " code " << c;
    }
  }
  EXPECT_EQ(math::fp8_to_float(math::float_to_fp8(1000.0f, 4), 4), 448.0f);  // e4m3 saturates
  EXPECT_EQ(math::fp8_to_float(math::float_to_fp8(-1000.0f, 4), 4), -448.0f);
  EXPECT_EQ(math::round_to(DType::e4m3, 1.0625f), 1.0f);  // tie between 1 and 1.125 -> even
}

TEST(DtypeConvert, LoadStoreEveryDtype) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::e4m3, DType::e5m2}) {
    unsigned char buf[16] = {};
    math::store_from_float(buf, 1, dt, 1.5f);
    EXPECT_EQ(math::load_as_float(buf, 1, dt), 1.5f) << dtype_name(dt);
    math::store_from_float(buf, 2, dt, NAN);
    EXPECT_TRUE(std::isnan(math::load_as_float(buf, 2, dt))) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace tessera::testing
