// Edge numerics of the CPU kernels: empty KV, fully masked rows, huge logits.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <utility>

#include "cpu/reference.h"
#include "support/test_support.h"

namespace tessera::testing {
namespace {

CaseSpec dense(DType dt, int sq, int sk, int hq, int hkv, int d) {
  CaseSpec s;
  s.dtype = dt;
  s.seq_q = sq;
  s.seq_k = sk;
  s.heads_q = hq;
  s.heads_kv = hkv;
  s.head_dim = d;
  return s;
}

void expect_empty_rows(const AttentionCase& c, int heads, int d, const std::vector<int>& rows) {
  const auto o = c.out_packed(), lse = c.lse_packed();
  const std::size_t total = lse.size() / static_cast<std::size_t>(heads);
  for (int row : rows)
    for (int h = 0; h < heads; ++h) {
      EXPECT_EQ(lse[h * total + static_cast<std::size_t>(row)], -INFINITY) << "row " << row;
      for (int k = 0; k < d; ++k) ASSERT_EQ(o[static_cast<std::size_t>((row * heads + h) * d + k)], 0.0) << "row " << row;
    }
}

std::vector<int> range(int n) {
  std::vector<int> r;
  for (int i = 0; i < n; ++i) r.push_back(i);
  return r;
}

TEST(Numerics, EmptyKvDense) {
  auto rng = fresh_rng();
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    AttentionCase c(dense(dt, 9, 0, 4, 2, 64), rng);
    c.forward();
    EXPECT_EQ(c.out.count_nan(), 0);
    EXPECT_EQ(c.lse.count_nan(), 0);
    expect_empty_rows(c, 4, 64, range(9));
    c.backward();
    EXPECT_EQ(c.dq.count_nan(), 0);
    for (double g : c.dq_packed()) ASSERT_EQ(g, 0.0);
  }
}

TEST(Numerics, EmptyKvRagged) {
  auto rng = fresh_rng();
  CaseSpec s = dense(DType::bf16, 0, 0, 2, 1, 64);
  s.q_lens = {4, 3, 0};
  s.k_lens = {0, 5, 0};
  AttentionCase c(s, rng);
  c.forward();
  EXPECT_EQ(c.out.count_nan(), 0);
  EXPECT_EQ(c.lse.count_nan(), 0);
  expect_empty_rows(c, 2, 64, {0, 1, 2, 3});
  c.backward();
  EXPECT_EQ(c.dq.count_nan(), 0);
  const auto dq = c.dq_packed();
  for (std::size_t i = 0; i < 4 * 2 * 64; ++i) ASSERT_EQ(dq[i], 0.0);
  EXPECT_EQ(c.dk.count_nan(), 0);
  EXPECT_EQ(c.dv.count_nan(), 0);
}

TEST(Numerics, FullyMaskedRows) {
  auto rng = fresh_rng();
  {
    CaseSpec s = dense(DType::f16, 50, 10, 2, 2, 64);  // causal: rows 0..39 see nothing
    s.options.causal = true;
    AttentionCase c(s, rng);
    c.forward();
    EXPECT_EQ(c.out.count_nan(), 0);
    EXPECT_EQ(c.lse.count_nan(), 0);
    expect_empty_rows(c, 2, 64, range(40));
    c.backward();
    EXPECT_EQ(c.dq.count_nan(), 0);  // rows 40..49 as well as the zero rows checked below
    const auto dq = c.dq_packed();
    for (std::size_t i = 0; i < 40 * 2 * 64; ++i) ASSERT_EQ(dq[i], 0.0);
    EXPECT_EQ(c.dk.count_nan(), 0);
    EXPECT_EQ(c.dv.count_nan(), 0);
  }
  {
    CaseSpec s = dense(DType::f32, 4, 2, 1, 1, 32);  // window (0, 0): diagonal i - 2 < 0 for rows 0, 1
    s.options.window_left = 0;
    s.options.window_right = 0;
    AttentionCase c(s, rng);
    c.forward();
    EXPECT_EQ(c.out.count_nan(), 0);  // rows 2 and 3 are written too
    EXPECT_EQ(c.lse.count_nan(), 0);
    expect_empty_rows(c, 1, 32, {0, 1});
    EXPECT_TRUE(std::isfinite(c.lse_packed()[2]));
  }
}

// Scores of ~1e4 saturate the softmax: fp32 rounds them by ~1e-3, and the outputs and
// gradients are cancellations of terms that size, so one naive variant's max error is a noisy
// draw. The bound takes the largest of the naive variants' errors (NaiveVariant, test_support.h).
// Variants of naive code that compute what the kernels compute: the forward in base 2
// (exp2 of s log2 e); the backward from the saved LSE, with D = dO . O.
constexpr NaiveVariant kForwardVariants[] = {NaiveVariant::kSequential, NaiveVariant::kReverseDots,
                                             NaiveVariant::kTwoLaneDots, NaiveVariant::kExp2};
constexpr NaiveVariant kBackwardVariants[] = {NaiveVariant::kSequential, NaiveVariant::kRowDotFromO};

double tolerance_of_variants(const std::vector<std::vector<double>>& naive, const std::vector<double>& oracle, DType dt) {
  double bound = 0.0;
  for (const auto& n : naive) bound = std::max(bound, tolerance(n, oracle, dt));
  return bound;
}

// The case's values (inputs, and out / lse as the kernel left them) in an fp32 case.
AttentionCase fp32_twin(const AttentionCase& c, std::mt19937_64& rng) {
  CaseSpec s = c.spec;
  s.dtype = DType::f32;
  AttentionCase t(s, rng);
  for (auto [from, to] : {std::pair{&c.q, &t.q}, std::pair{&c.k, &t.k}, std::pair{&c.v, &t.v},
                          std::pair{&c.dout, &t.dout}, std::pair{&c.out, &t.out}, std::pair{&c.lse, &t.lse}})
    for (std::int64_t i = 0; i < from->numel(); ++i) to->set(i, from->get(i));
  return t;
}

// Logits of order 1e4: the online max keeps every exp in range; results stay finite and
// within the rule, forward and backward. At these scores a bf16 naive baseline is no baseline:
// rounding s to bf16 moves it by up to 32, so its O is off by ~|v|, and its P = exp(s - lse)
// from the kernel's fp32 LSE reaches e^32, giving gradient errors of ~1e35 or +inf (an infinite
// bound, a check that could not fail). The bf16 case is judged against the fp32 baselines of
// the same values (exact in fp32) plus bf16's floor instead: stricter than the rule, and what a
// kernel computing in fp32 from bf16 inputs, as every kernel here does, must meet.
TEST(Numerics, HugeLogitsStayFiniteAndRight) {
  auto rng = fresh_rng();
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    CaseSpec s = dense(dt, 33, 77, 2, 1, 64);
    s.input_std = 100.0f;  // scaled scores ~ N(0, 1e4)
    s.options.causal = true;
    AttentionCase c(s, rng);
    c.forward();
    EXPECT_EQ(c.out.count_nan(), 0);
    const auto lse = c.lse_packed();
    for (double l : lse) ASSERT_TRUE(std::isfinite(l));
    EXPECT_GT(max_abs(lse), 1e3);
    const auto oracle = cpu::reference::forward(c.forward_params());
    const AttentionCase base = fp32_twin(c, rng);
    std::vector<std::vector<double>> naive_o;
    for (NaiveVariant variant : kForwardVariants) naive_o.push_back(naive_same_precision_forward(base.forward_params(), nullptr, variant));
    EXPECT_LE(max_abs_error(c.out_packed(), oracle.o), tolerance_of_variants(naive_o, oracle.o, dt));
    c.backward();
    for (const HostTensor* t : {&c.dq, &c.dk, &c.dv}) EXPECT_EQ(t->count_nan(), 0);
    const auto g = cpu::reference::backward(c.backward_params());
    std::vector<std::vector<double>> ndq, ndk, ndv;
    for (NaiveVariant variant : kBackwardVariants) {
      NaiveGrads n = naive_same_precision_backward(base.backward_params(), variant);  // from the saved LSE
      ndq.push_back(std::move(n.dq));
      ndk.push_back(std::move(n.dk));
      ndv.push_back(std::move(n.dv));
    }
    EXPECT_LE(max_abs_error(c.dv_packed(), g.dv), tolerance_of_variants(ndv, g.dv, dt));
    EXPECT_LE(max_abs_error(c.dk_packed(), g.dk), tolerance_of_variants(ndk, g.dk, dt));
    EXPECT_LE(max_abs_error(c.dq_packed(), g.dq), tolerance_of_variants(ndq, g.dq, dt));
  }
}

// The naive baselines refuse variants that would not compute what the kernel computes (a
// backward paired with other dot orders would loosen its bound ~1e4x at huge logits).
TEST(Numerics, NaiveVariantsRefuseTheWrongPass) {
  auto rng = fresh_rng();
  AttentionCase c(dense(DType::f32, 9, 9, 1, 1, 64), rng);
  c.forward();
  EXPECT_THROW(naive_same_precision_forward(c.forward_params(), nullptr, NaiveVariant::kRowDotFromO), std::invalid_argument);
  EXPECT_THROW(naive_same_precision_backward(c.backward_params(), NaiveVariant::kReverseDots), std::invalid_argument);
  EXPECT_THROW(naive_same_precision_backward(c.backward_params(), NaiveVariant::kExp2), std::invalid_argument);
  EXPECT_NO_THROW(naive_same_precision_backward(c.backward_params(), NaiveVariant::kRowDotFromO));
}

// Hand-checked: scores exactly +1e4, -1e4 and 1e4 - 1 give P = (1, 0, e^-1) / (1 + e^-1).
TEST(Numerics, PlusMinus1e4ByHand) {
  auto rng = fresh_rng();
  CaseSpec s = dense(DType::f32, 1, 3, 1, 1, 32);
  s.options.scale = 1.0f;
  AttentionCase c(s, rng);
  for (int d = 0; d < 32; ++d) {
    c.q.set(d, d == 0 ? 100.0f : 0.0f);
    c.k.set(d, d == 0 ? 100.0f : 0.0f);
    c.k.set(32 + d, d == 0 ? -100.0f : 0.0f);
    c.k.set(64 + d, d == 0 ? 99.99f : 0.0f);
    c.v.set(d, 1.0f);
    c.v.set(32 + d, 1000.0f);
    c.v.set(64 + d, -1.0f);
  }
  c.forward();
  const double s2 = 100.0 * static_cast<double>(99.99f) - 1e4;  // third score minus the max
  const double e = std::exp(s2);
  const auto o = c.out_packed();
  for (int d = 0; d < 32; ++d) EXPECT_NEAR(o[d], (1.0 - e) / (1.0 + e), 2e-4);
  EXPECT_NEAR(c.lse_packed()[0], 1e4 + std::log1p(e), 1e-3);
  // With a soft cap the same scores saturate to +-c and the answer is finite too.
  c.spec.options.softcap = 30.0f;
  c.forward();
  EXPECT_EQ(c.out.count_nan(), 0);
  const auto oracle = cpu::reference::forward(c.forward_params());
  EXPECT_LE(max_abs_error(c.out_packed(), oracle.o), 1e-5);
}

}  // namespace
}  // namespace tessera::testing
