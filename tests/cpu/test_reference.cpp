// Sanity of the oracle itself: tiny cases whose answers are derived by hand, ragged against
// dense, and its backward against finite differences of its own forward.
#include <gtest/gtest.h>

#include <cmath>

#include "cpu/reference.h"
#include "support/test_support.h"

namespace tessera::testing {
namespace {

constexpr int kD = 32;  // smallest supported head dim

CaseSpec spec(int sq, int sk, int hq = 1, int hkv = 1) {
  CaseSpec s;
  s.dtype = DType::f32;
  s.seq_q = sq;
  s.seq_k = sk;
  s.heads_q = hq;
  s.heads_kv = hkv;
  s.head_dim = kD;
  s.options.scale = 1.0f;
  return s;
}

// Linear index of element (row, head, d) of a batch-1 dense (1, rows, heads, D) tensor.
std::int64_t at(int row, int head, int heads, int d) { return (static_cast<std::int64_t>(row) * heads + head) * kD + d; }

void set_row(HostTensor& t, int row, int head, int heads, float first, float rest = 0.0f) {
  for (int d = 0; d < kD; ++d) t.set(at(row, head, heads, d), d == 0 ? first : rest);
}

TEST(Reference, TwoKeysByHand) {
  auto rng = fresh_rng();
  AttentionCase c(spec(1, 2), rng);
  set_row(c.q, 0, 0, 1, 1.0f);
  set_row(c.k, 0, 0, 1, 0.0f);
  set_row(c.k, 1, 0, 1, std::log(3.0f));  // s = (0, ln 3) -> P = (1/4, 3/4)
  set_row(c.v, 0, 0, 1, 1.0f, 1.0f);
  set_row(c.v, 1, 0, 1, 5.0f, 5.0f);
  const auto r = cpu::reference::forward(c.forward_params());
  for (int d = 0; d < kD; ++d) EXPECT_NEAR(r.o[d], 0.25 * 1 + 0.75 * 5, 1e-6);
  EXPECT_NEAR(r.lse[0], std::log(1.0 + 3.0), 1e-6);
}

// With q = 0 every visible key has the same score: O is the mean of the visible v's.
TEST(Reference, CausalIsBottomRightAligned) {
  auto rng = fresh_rng();
  CaseSpec s = spec(2, 3);
  s.options.causal = true;
  AttentionCase c(s, rng);
  c.q.fill(0.0f);
  for (int j = 0; j < 3; ++j) set_row(c.v, j, 0, 1, static_cast<float>(j), static_cast<float>(j));
  const auto r = cpu::reference::forward(c.forward_params());
  EXPECT_NEAR(r.o[at(0, 0, 1, 5)], 0.5, 1e-12);  // row 0 sees keys 0, 1
  EXPECT_NEAR(r.o[at(1, 0, 1, 5)], 1.0, 1e-12);  // row 1 sees keys 0, 1, 2
  EXPECT_NEAR(r.lse[0], std::log(2.0), 1e-12);
  EXPECT_NEAR(r.lse[1], std::log(3.0), 1e-12);
}

TEST(Reference, SlidingWindow) {
  auto rng = fresh_rng();
  for (const auto& [left, right, expect] :
       {std::tuple{1, 0, std::vector<double>{0, 0.5, 1.5, 2.5}}, std::tuple{0, 1, std::vector<double>{0.5, 1.5, 2.5, 3}},
        std::tuple{1, 1, std::vector<double>{0.5, 1, 2, 2.5}}}) {
    CaseSpec s = spec(4, 4);
    s.options.window_left = left;
    s.options.window_right = right;
    AttentionCase c(s, rng);
    c.q.fill(0.0f);
    for (int j = 0; j < 4; ++j) set_row(c.v, j, 0, 1, static_cast<float>(j), static_cast<float>(j));
    const auto r = cpu::reference::forward(c.forward_params());
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(r.o[at(i, 0, 1, 3)], expect[i], 1e-12) << left << "," << right << " row " << i;
  }
}

TEST(Reference, SoftcapBeforeMask) {
  auto rng = fresh_rng();
  CaseSpec s = spec(1, 2);
  s.options.softcap = 5.0f;
  AttentionCase c(s, rng);
  set_row(c.q, 0, 0, 1, 1.0f);
  set_row(c.k, 0, 0, 1, 0.0f);
  set_row(c.k, 1, 0, 1, 10.0f);  // raw s = 10 -> capped 5 tanh(2)
  set_row(c.v, 0, 0, 1, 0.0f);
  set_row(c.v, 1, 0, 1, 1.0f);
  const auto r = cpu::reference::forward(c.forward_params());
  const double s1 = 5.0 * std::tanh(2.0);
  EXPECT_NEAR(r.o[0], std::exp(s1) / (1.0 + std::exp(s1)), 1e-12);
  EXPECT_NEAR(r.lse[0], std::log(1.0 + std::exp(s1)), 1e-12);
}

TEST(Reference, GqaHeadMapping) {
  auto rng = fresh_rng();
  AttentionCase c(spec(1, 1, 4, 2), rng);
  for (int g = 0; g < 2; ++g) set_row(c.v, 0, g, 2, 10.0f + g, 10.0f + g);
  const auto r = cpu::reference::forward(c.forward_params());
  for (int h = 0; h < 4; ++h) EXPECT_EQ(r.o[at(0, h, 4, 7)], 10.0 + h / 2) << "head " << h;
}

TEST(Reference, EmptyKvAndMaskedRows) {
  auto rng = fresh_rng();
  CaseSpec s = spec(3, 1);
  s.options.causal = true;  // rows 0 and 1 see nothing (key 0 is on row 2's diagonal)
  AttentionCase c(s, rng);
  auto r = cpu::reference::forward(c.forward_params());
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(r.lse[i], -INFINITY);
    for (int d = 0; d < kD; ++d) EXPECT_EQ(r.o[at(i, 0, 1, d)], 0.0);
  }
  EXPECT_TRUE(std::isfinite(r.lse[2]));

  CaseSpec e = spec(2, 0);
  AttentionCase ce(e, rng);
  r = cpu::reference::forward(ce.forward_params());
  for (double x : r.o) EXPECT_EQ(x, 0.0);
  for (double x : r.lse) EXPECT_EQ(x, -INFINITY);
  const auto g = cpu::reference::backward(ce.backward_params());
  for (double x : g.dq) EXPECT_EQ(x, 0.0);
}

// FP8: the oracle reads the stored e4m3 values and multiplies them by their descales.
// q = 2 * e0, keys 0 and (ln 3 / 2) * e0, so s = (0, ln 3) and P = (1/4, 3/4); v = (1, 4) * 0.5.
TEST(Reference, Fp8DescalesByHand) {
  auto rng = fresh_rng();
  CaseSpec s = spec(1, 2);
  s.dtype = DType::e4m3;
  AttentionCase c(s, rng);
  set_row(c.q, 0, 0, 1, 1.0f);
  set_row(c.k, 0, 0, 1, 0.0f);
  set_row(c.k, 1, 0, 1, 1.0f);
  set_row(c.v, 0, 0, 1, 1.0f, 1.0f);
  set_row(c.v, 1, 0, 1, 4.0f, 4.0f);
  const float dk = std::log(3.0f) / 2.0f;
  c.descale_q.set(0, 2.0f);
  c.descale_k.set(0, dk);
  c.descale_v.set(0, 0.5f);
  const auto r = cpu::reference::forward(c.forward_params());
  const double s1 = 2.0 * static_cast<double>(dk);  // ln 3 up to dk's fp32 rounding
  const double p1 = std::exp(s1) / (1.0 + std::exp(s1));
  for (int d = 0; d < kD; ++d) EXPECT_NEAR(r.o[d], 0.5 * ((1 - p1) * 1 + p1 * 4), 1e-12);
  EXPECT_NEAR(r.o[0], 1.625, 1e-6);
  EXPECT_NEAR(r.lse[0], std::log(1.0 + std::exp(s1)), 1e-12);
}

// Factors are per (sequence, kv head); query head h uses kv head h / group's q factor too.
TEST(Reference, Fp8DescalePerSequenceAndKvHead) {
  auto rng = fresh_rng();
  CaseSpec s = spec(1, 2, 4, 2);
  s.dtype = DType::e4m3;
  s.batch = 2;
  AttentionCase c(s, rng);
  c.q.fill(0.0f);
  c.k.fill(0.0f);
  c.v.fill(1.0f);
  for (int b = 0; b < 2; ++b) {
    for (int h = 0; h < 4; ++h) c.q.set((b * 4 + h) * kD, 1.0f);  // q = e0 on every head
    for (int g = 0; g < 2; ++g) {
      c.k.set(((b * 2 + 1) * 2 + g) * kD, 1.0f);  // key 1 = e0, key 0 = 0
      c.descale_q.set(b * 2 + g, 0.5f + b + 0.25f * g);
      c.descale_k.set(b * 2 + g, 1.0f);
      c.descale_v.set(b * 2 + g, 3.0f + 2 * b + g);
    }
  }
  const auto r = cpu::reference::forward(c.forward_params());
  const std::int64_t total_q = 2;
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 4; ++h) {
      const int g = h / 2;
      const double s1 = 0.5 + b + 0.25 * g;  // s = (0, dq) with k descale 1
      EXPECT_NEAR(r.lse[static_cast<std::size_t>(h * total_q + b)], std::log(1.0 + std::exp(s1)), 1e-12) << b << "," << h;
      EXPECT_NEAR(r.o[static_cast<std::size_t>((b * 4 + h) * kD + 3)], 3.0 + 2 * b + g, 1e-12) << b << "," << h;  // v = dv
    }
}

// A ragged batch is the same as each sequence run on its own.
TEST(Reference, RaggedEqualsDensePerSequence) {
  auto rng = fresh_rng();
  CaseSpec s = spec(0, 0, 2, 1);
  s.q_lens = {3, 0, 5};
  s.k_lens = {4, 2, 6};
  s.options.causal = true;
  AttentionCase rc(s, rng);
  const auto rr = cpu::reference::forward(rc.forward_params());
  int q0 = 0, k0 = 0;
  for (std::size_t b = 0; b < s.q_lens.size(); ++b) {
    CaseSpec ds = spec(s.q_lens[b], s.k_lens[b], 2, 1);
    ds.options.causal = true;
    AttentionCase dc(ds, rng);
    for (std::int64_t i = 0; i < dc.q.numel(); ++i) dc.q.set(i, rc.q.get(q0 * 2 * kD + i));
    for (std::int64_t i = 0; i < dc.k.numel(); ++i) {
      dc.k.set(i, rc.k.get(k0 * kD + i));
      dc.v.set(i, rc.v.get(k0 * kD + i));
    }
    const auto dr = cpu::reference::forward(dc.forward_params());
    for (std::size_t i = 0; i < dr.o.size(); ++i) ASSERT_EQ(dr.o[i], rr.o[q0 * 2 * kD + i]);
    q0 += s.q_lens[b];
    k0 += s.k_lens[b];
  }
}

// Central finite differences of L = <dout, O(q, k, v)> computed by the oracle's forward.
TEST(Reference, BackwardMatchesFiniteDifferences) {
  auto rng = fresh_rng();
  CaseSpec s = spec(5, 7, 2, 1);
  s.options.scale = 0.3f;
  s.options.causal = true;
  s.options.window_left = 3;
  s.options.softcap = 2.0f;
  AttentionCase c(s, rng);
  const auto loss = [&] {
    const auto r = cpu::reference::forward(c.forward_params());
    const auto g = c.dout;
    double l = 0.0;
    for (std::size_t i = 0; i < r.o.size(); ++i) l += r.o[i] * g.get(static_cast<std::int64_t>(i));
    return l;
  };
  const auto grads = cpu::reference::backward(c.backward_params());
  const double h = std::ldexp(1.0, -12);
  struct Input { HostTensor* t; const std::vector<double>* g; const char* name; };
  for (const Input& in : {Input{&c.q, &grads.dq, "dq"}, Input{&c.k, &grads.dk, "dk"}, Input{&c.v, &grads.dv, "dv"}}) {
    double worst = 0.0, largest = 0.0;
    for (std::int64_t i = 0; i < in.t->numel(); ++i) {
      const float x = in.t->get(i);
      in.t->set(i, static_cast<float>(x + h));
      const double up = in.t->get(i);  // the value actually stored
      const double lp = loss();
      in.t->set(i, static_cast<float>(x - h));
      const double down = in.t->get(i);
      const double lm = loss();
      in.t->set(i, x);
      const double fd = (lp - lm) / (up - down);
      worst = std::max(worst, std::fabs(fd - (*in.g)[static_cast<std::size_t>(i)]));
      largest = std::max(largest, std::fabs(fd));
    }
    EXPECT_GT(largest, 1e-2) << in.name << ": the check must see real gradients";
    EXPECT_LT(worst, 1e-5 * std::max(1.0, largest)) << in.name;
  }
}

}  // namespace
}  // namespace tessera::testing
