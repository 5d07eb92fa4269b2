// The FP8 (e4m3) forward on the CPU against the fp64 oracle, which reads the very fp8 values
// stored (the round-tripped inputs) and multiplies them by their descales in double. Rule:
//   max |kernel - oracle| <= 2 * max |naive_fp8 - oracle| + rounding_floor(bf16, max |oracle|)
// where naive_fp8 (tests/support) is the baseline of an fp8 kernel: S in fp32 from the
// dequantised inputs, P scaled by 256 and rounded to e4m3, P.V in fp32 on the fp8 V, bf16 out.
// The CPU computes P in fp32 and so sits far inside the bound; the GPU test uses the same rule.
// Max error and RMSE are printed for each case.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "cpu/reference.h"
#include "math/dtype_convert.h"
#include "support/test_support.h"
#include "tessera/attention.h"

namespace tessera::testing {
namespace {

std::vector<CaseSpec> grid() {
  return {
      dense_fp8(2, 113, 113, 4, 1, 64, opts(false)),
      dense_fp8(1, 17, 1023, 8, 1, 128, opts(true)),              // seq_q < seq_k, GQA 8, causal
      dense_fp8(2, 113, 17, 2, 2, 256, opts(true), 8),            // seq_q > seq_k: top rows masked; padded
      dense_fp8(1, 1023, 1023, 2, 2, 64, opts(false, 128, 16)),   // sliding window
      dense_fp8(3, 1, 1, 4, 1, 128, opts(false, -1, -1, 3.0f)),   // seq 1, softcap
      dense_fp8(1, 1, 113, 8, 8, 256, opts(true, -1, -1, 2.0f), 3),  // decode row, softcap + causal
      dense_fp8(1, 113, 1023, 8, 2, 64, opts(true, 200, -1)),     // causal + window, GQA 4
      dense_fp8(2, 17, 17, 1, 1, 256, opts(false, 3, 3, 1.5f), 2),  // narrow band + softcap
      ragged_fp8({17, 0, 113, 1, 5}, {113, 0, 17, 1, 0}, 4, 1, 64, opts(true), 8),  // empty seq, empty KV
      ragged_fp8({113, 1, 17}, {1023, 17, 17}, 8, 1, 128, opts(false, 64, 0, 5.0f)),
      ragged_fp8({33, 0}, {65, 0}, 4, 4, 256, opts(true), 3),
      without_descales(dense_fp8(2, 17, 113, 4, 2, 128, opts(false)), true, true, true),  // no descales: all 1
      without_descales(dense_fp8(2, 113, 113, 4, 2, 64, opts(true)), false, true, false),  // only q and v
      without_descales(ragged_fp8({1, 17, 113}, {113, 17, 1}, 2, 1, 128, opts(false)), true, false, true),  // only k
  };
}

class Fp8Grid : public ::testing::TestWithParam<CaseSpec> {};

TEST_P(Fp8Grid, MatchesOracleWithinRule) {
  const CaseSpec spec = GetParam();
  SCOPED_TRACE(spec.name());
  auto rng = fresh_rng();
  AttentionCase c(spec, rng);
  ExecutionContext ctx;
  ctx.num_threads = 2;
  c.forward(ctx);

  EXPECT_EQ(c.out.count_nan(), 0);
  EXPECT_EQ(c.lse.count_nan(), 0);
  EXPECT_TRUE(c.out.margins_intact());
  EXPECT_TRUE(c.lse.margins_intact());

  const AttentionParams p = c.forward_params();
  ASSERT_EQ(p.out_dtype(), DType::bf16);
  const auto oracle = cpu::reference::forward(p);
  std::vector<double> naive_lse;
  const auto naive = naive_fp8_forward(p, &naive_lse);

  const ErrorStats got = error_stats(c.out_packed(), oracle.o);
  const ErrorStats base = error_stats(naive, oracle.o);
  const double tol_o = tolerance(naive, oracle.o, p.out_dtype());
  std::printf("[ fp8      ] %s: out max %.3g rmse %.3g | naive fp8 max %.3g rmse %.3g | bound %.3g (max|o| %.3g)\n",
              spec.name().c_str(), got.max_abs, got.rmse, base.max_abs, base.rmse, tol_o, max_abs(oracle.o));
  EXPECT_LE(got.max_abs, tol_o) << "naive error " << base.max_abs;

  const double tol_l = tolerance(naive_lse, oracle.lse, DType::f32);
  const ErrorStats lse = error_stats(c.lse_packed(), oracle.lse);
  std::printf("[ fp8      ]   lse max %.3g rmse %.3g | bound %.3g\n", lse.max_abs, lse.rmse, tol_l);
  EXPECT_LE(lse.max_abs, tol_l) << "naive error " << max_abs_error(naive_lse, oracle.lse);
}

INSTANTIATE_TEST_SUITE_P(Cpu, Fp8Grid, ::testing::ValuesIn(grid()),
                         [](const ::testing::TestParamInfo<CaseSpec>& info) { return "case" + std::to_string(info.index); });

// The rule discriminates: an output computed with any one descale ignored is far outside it.
TEST(Fp8Forward, RuleRejectsAMissingDescale) {
  auto rng = fresh_rng();
  AttentionCase c(dense_fp8(1, 113, 113, 4, 2, 64, opts(false)), rng);
  c.forward();
  const AttentionParams p = c.forward_params();
  const auto oracle = cpu::reference::forward(p);
  const double bound = tolerance(naive_fp8_forward(p), oracle.o, DType::bf16);
  EXPECT_LE(max_abs_error(c.out_packed(), oracle.o), bound);
  for (DescalePtr AttentionParams::*which :
       {&AttentionParams::q_descale, &AttentionParams::k_descale, &AttentionParams::v_descale}) {
    AttentionParams wrong = p;
    (wrong.*which).ptr = nullptr;  // as if that factor were 1
    const double err = max_abs_error(cpu::reference::forward(wrong).o, oracle.o);
    EXPECT_GT(err, 4 * bound);
  }
}

// A zero q or k factor (an all-zero head quantised as amax / 448) makes every score 0: uniform
// weights over the visible keys, never NaN (masked scores must stay out of the sum).
TEST(Fp8Forward, ZeroDescaleGivesUniformWeights) {
  auto rng = fresh_rng();
  AttentionCase c(dense_fp8(2, 100, 100, 4, 2, 128, opts(true)), rng);
  c.descale_k.set(0, 0.0f);  // (sequence 0, kv head 0)
  c.descale_q.set(3, 0.0f);  // (sequence 1, kv head 1)
  c.forward();
  EXPECT_EQ(c.out.count_nan(), 0);
  EXPECT_EQ(c.lse.count_nan(), 0);
  const AttentionParams p = c.forward_params();
  const auto oracle = cpu::reference::forward(p);
  EXPECT_LE(max_abs_error(c.out_packed(), oracle.o), tolerance(naive_fp8_forward(p), oracle.o, DType::bf16));
}

// An absent descale is exactly a tensor of ones, and one factor broadcast with strides (0, 0)
// is exactly the full tensor holding it everywhere.
TEST(Fp8Forward, AbsentAndBroadcastDescales) {
  auto rng = fresh_rng();
  CaseSpec s = dense_fp8(2, 17, 33, 4, 2, 64, opts(true));
  s.descale_q = s.descale_k = s.descale_v = false;
  AttentionCase c(s, rng);
  c.forward();
  EXPECT_EQ(c.out.count_nan(), 0);
  const auto absent = c.out.bytes();
  // Each call starts from poisoned outputs: otherwise a call that wrote nothing would leave the
  // previous call's bytes and pass the comparison.
  const auto run = [&](const Fp8Descale& d) {
    c.out.poison();
    c.lse.poison();
    attention_forward_fp8(c.q.view(), c.k.view(), c.v.view(), d, c.out.view(), c.lse.view(), c.options());
    EXPECT_EQ(c.out.count_nan(), 0);
    EXPECT_EQ(c.lse.count_nan(), 0);
    return c.out.bytes();
  };
  float one = 1.0f;
  const Tensor ones(&one, DType::f32, {2, 2}, {0, 0});
  EXPECT_EQ(absent, run(Fp8Descale{ones, ones, ones}));

  float f = 0.03125f;
  const std::vector<float> full(4, f);
  const Tensor scalar(&f, DType::f32, {2, 2}, {0, 0});
  const Tensor dense_t(const_cast<float*>(full.data()), DType::f32, {2, 2});
  const auto broadcast = run(Fp8Descale{scalar, Tensor{}, dense_t});
  EXPECT_EQ(broadcast, run(Fp8Descale{dense_t, Tensor{}, scalar}));
  EXPECT_NE(absent, broadcast);
}

// The fp8 forward is the fp32 forward of the dequantised inputs, up to the bf16 output rounding:
// element by element within one bf16 rounding (plus fp32 noise), LSE within fp32 noise.
TEST(Fp8Forward, EqualsFp32ForwardOfDequantisedInputs) {
  auto rng = fresh_rng();
  const int B = 2, sq = 37, sk = 80, hq = 6, hk = 2, D = 64;
  const AttentionOptions o = opts(true, 50, -1, 4.0f);
  AttentionCase c(dense_fp8(B, sq, sk, hq, hk, D, o, 8), rng);
  AttentionCase f(dense(DType::f32, B, sq, sk, hq, hk, D, o), rng);
  const auto dequantise = [&](const HostTensor& from, const HostTensor& descale, HostTensor& to, int seq, int heads) {
    for (std::int64_t i = 0; i < from.numel(); ++i) {
      const std::int64_t b = i / (static_cast<std::int64_t>(seq) * heads * D);
      const std::int64_t g = (i / D) % heads / (heads / hk);
      to.set(i, from.get(i) * descale.get(b * hk + g));
    }
  };
  dequantise(c.q, c.descale_q, f.q, sq, hq);
  dequantise(c.k, c.descale_k, f.k, sk, hk);
  dequantise(c.v, c.descale_v, f.v, sk, hk);
  c.forward();
  f.forward();
  const auto a = c.out_packed(), b = f.out_packed();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    ASSERT_LE(std::fabs(a[i] - b[i]), std::ldexp(std::fabs(b[i]), -7) + 1e-6) << "element " << i;
  const auto la = c.lse_packed(), lb = f.lse_packed();
  for (std::size_t i = 0; i < la.size(); ++i) {
    if (std::isinf(lb[i])) {
      ASSERT_EQ(la[i], lb[i]) << "row " << i;
      continue;
    }
    ASSERT_LE(std::fabs(la[i] - lb[i]), 1e-5 * std::max(1.0, std::fabs(lb[i]))) << "row " << i;
  }
}

// Thread count does not change the fp8 result either.
TEST(Fp8Forward, IndependentOfThreadCount) {
  auto rng = fresh_rng();
  AttentionCase c(ragged_fp8({113, 0, 40}, {200, 7, 40}, 4, 2, 128, opts(true)), rng);
  ExecutionContext one, many;
  one.num_threads = 1;
  many.num_threads = 3;
  c.forward(one);
  EXPECT_EQ(c.out.count_nan(), 0);  // equal bytes prove nothing if neither run wrote them
  EXPECT_EQ(c.lse.count_nan(), 0);
  const auto o1 = c.out.bytes(), l1 = c.lse.bytes();
  c.forward(many);
  EXPECT_EQ(o1, c.out.bytes());
  EXPECT_EQ(l1, c.lse.bytes());
}

// The support's fast e4m3 rounding (used for test data and the naive baseline) is the library's
// conversion bit for bit: at every code, every midpoint (ties), around saturation, and at random.
TEST(Fp8Support, FastRoundingMatchesMath) {
  std::vector<float> xs{0.0f, -0.0f, 447.0f, 448.0f, 460.0f, 464.0f, 470.0f, 1e6f, 1e-30f};
  for (int c = 0; c < 0x7e; ++c) {
    const float a = math::fp8_to_float(static_cast<std::uint8_t>(c), 4);
    const float b = math::fp8_to_float(static_cast<std::uint8_t>(c + 1), 4);
    xs.insert(xs.end(), {a, 0.5f * (a + b), std::nextafter(0.5f * (a + b), 0.0f), std::nextafter(0.5f * (a + b), 1e9f)});
  }
  auto rng = fresh_rng();
  std::uniform_real_distribution<float> expo(-14.0f, 10.0f);
  for (int i = 0; i < 20000; ++i) xs.push_back(std::exp2(expo(rng)));
  for (float x : xs)
    for (float v : {x, -x}) {
      ASSERT_EQ(encode_e4m3(v), math::float_to_fp8(v, 4)) << v;
      ASSERT_EQ(round_e4m3(v), math::round_to(DType::e4m3, v)) << v;
    }
}

// The case builder quantises as a framework would: descales of amax / 448 with amax in
// [4, 8] std, so the dequantised values have the requested spread and nothing saturates often.
TEST(Fp8Support, CaseBuilderMagnitudes) {
  auto rng = fresh_rng();
  CaseSpec s = dense_fp8(2, 64, 64, 4, 2, 128, opts(false));
  s.input_std = 2.0f;
  AttentionCase c(s, rng);
  ASSERT_EQ(c.descale_q.shape(), (std::vector<std::int64_t>{2, 2}));
  double sum2 = 0.0;
  std::int64_t saturated = 0;
  for (std::int64_t i = 0; i < c.k.numel(); ++i) {
    const std::int64_t row = i / (2 * 128), g = (i / 128) % 2, b = row / 64;
    const float x = c.k.get(i);
    saturated += std::fabs(x) == 448.0f;
    const double deq = static_cast<double>(x) * c.descale_k.get(b * 2 + g);
    sum2 += deq * deq;
  }
  const double std_k = std::sqrt(sum2 / static_cast<double>(c.k.numel()));
  EXPECT_NEAR(std_k, 2.0, 0.1);
  EXPECT_LT(saturated, c.k.numel() / 1000 + 1);
  for (std::int64_t i = 0; i < c.descale_v.numel(); ++i) {
    EXPECT_GE(c.descale_v.get(i), 4.0f / 448.0f);
    EXPECT_LE(c.descale_v.get(i), 8.0f / 448.0f);
  }
}

}  // namespace
}  // namespace tessera::testing
