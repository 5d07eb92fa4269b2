// merge_states on the CPU: the exact formula, empty states, and the property that matters in
// split-KV: merging states of disjoint key halves gives attention over all keys.
#include <gtest/gtest.h>

#include <cmath>

#include "cpu/reference.h"
#include "support/test_support.h"
#include "tessera/attention.h"

namespace tessera::testing {
namespace {

struct MergeCase {
  HostTensor o, lse, out, out_lse;
  MergeCase(DType in, DType out_dtype, int n, int tokens, int heads, int d, std::int64_t pad = 0)
      : o(in, {n, tokens, heads, d}, pad),
        lse(DType::f32, {n, tokens, heads}, pad),
        out(out_dtype, {tokens, heads, d}, pad),
        out_lse(DType::f32, {tokens, heads}, pad) {}
  void run(int threads = 2) {
    out.poison();
    out_lse.poison();
    ExecutionContext ctx;
    ctx.num_threads = threads;
    merge_states(o.view(), lse.view(), out.view(), out_lse.view(), ctx);
  }
};

// Expected result in double from the stored inputs.
void expected(const MergeCase& m, int n, int tokens, int heads, int d, std::vector<double>* o, std::vector<double>* lse) {
  o->assign(static_cast<std::size_t>(tokens * heads * d), 0.0);
  lse->assign(static_cast<std::size_t>(tokens * heads), -INFINITY);
  for (int r = 0; r < tokens * heads; ++r) {
    double mx = -INFINITY;
    for (int s = 0; s < n; ++s) mx = std::max(mx, static_cast<double>(m.lse.get(s * tokens * heads + r)));
    if (mx == -INFINITY) continue;
    double sum = 0.0;
    for (int s = 0; s < n; ++s) sum += std::exp(m.lse.get(s * tokens * heads + r) - mx);
    (*lse)[r] = mx + std::log(sum);
    for (int s = 0; s < n; ++s) {
      const double w = std::exp(m.lse.get(s * tokens * heads + r) - (*lse)[r]);
      if (w == 0.0) continue;
      for (int k = 0; k < d; ++k) (*o)[static_cast<std::size_t>(r * d + k)] += w * m.o.get((static_cast<std::int64_t>(s) * tokens * heads + r) * d + k);
    }
  }
}

std::vector<double> read(const HostTensor& t) {
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  for (std::int64_t i = 0; i < t.numel(); ++i) v[static_cast<std::size_t>(i)] = t.get(i);
  return v;
}

TEST(Merge, MatchesFormula) {
  auto rng = fresh_rng();
  std::uniform_real_distribution<float> lse_dist(-20.0f, 20.0f);
  std::bernoulli_distribution empty(0.25);
  for (DType in : {DType::f32, DType::f16, DType::bf16}) {
    for (int n : {1, 2, 5}) {
      const DType out_dtype = in == DType::f32 ? DType::f32 : DType::bf16;
      const int tokens = 37, heads = 3, d = 64;
      MergeCase m(in, out_dtype, n, tokens, heads, d, n == 2 ? 3 : 0);
      m.o.fill_normal(rng);
      for (std::int64_t i = 0; i < m.lse.numel(); ++i) m.lse.set(i, empty(rng) ? -INFINITY : lse_dist(rng));
      m.run();
      SCOPED_TRACE(std::string(dtype_name(in)) + " states " + std::to_string(n));
      EXPECT_EQ(m.out.count_nan(), 0);
      EXPECT_EQ(m.out_lse.count_nan(), 0);
      EXPECT_TRUE(m.out.margins_intact());
      EXPECT_TRUE(m.out_lse.margins_intact());
      std::vector<double> eo, el;
      expected(m, n, tokens, heads, d, &eo, &el);
      // fp32 arithmetic over a few states, then one rounding to the output dtype.
      EXPECT_LE(max_abs_error(read(m.out), eo), 4 * rounding_floor(out_dtype, max_abs(eo)));
      EXPECT_LE(max_abs_error(read(m.out_lse), el), 4 * rounding_floor(DType::f32, max_abs(el)));
    }
  }
}

TEST(Merge, EmptyStatesGiveEmpty) {
  MergeCase m(DType::f32, DType::f32, 3, 4, 2, 32);
  m.o.fill(7.0f);  // whatever an empty state's O holds must not leak
  m.lse.fill(-INFINITY);
  m.run();
  for (std::int64_t i = 0; i < m.out.numel(); ++i) ASSERT_EQ(m.out.get(i), 0.0f);
  for (std::int64_t i = 0; i < m.out_lse.numel(); ++i) ASSERT_EQ(m.out_lse.get(i), -INFINITY);
}

TEST(Merge, EmptyStateIsNeutral) {
  auto rng = fresh_rng();
  MergeCase m(DType::f32, DType::f32, 2, 5, 2, 32);
  m.o.fill_normal(rng);
  for (std::int64_t r = 0; r < 10; ++r) {
    m.lse.set(r, -INFINITY);    // state 0 empty
    m.lse.set(10 + r, 3.5f);    // state 1 real
  }
  m.run();
  for (std::int64_t i = 0; i < m.out.numel(); ++i) ASSERT_EQ(m.out.get(i), m.o.get(10 * 32 + i));
  for (std::int64_t r = 0; r < 10; ++r) ASSERT_EQ(m.out_lse.get(r), 3.5f);
}

// Split the keys in two halves, run attention on each with LSE, merge, and compare with the
// oracle over all keys under the tolerance rule: the cascade / shared-prefix pattern (a prefix's
// state computed once, merged with each request's own suffix state).
TEST(Merge, DisjointKeyHalvesEqualFull) {
  auto rng = fresh_rng();
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const int sq = 17, sk = 150, half = 61, hq = 4, hkv = 2, d = 64;
    CaseSpec full;
    full.dtype = dt;
    full.seq_q = sq;
    full.seq_k = sk;
    full.heads_q = hq;
    full.heads_kv = hkv;
    full.head_dim = d;
    full.options.softcap = 4.0f;
    AttentionCase fc(full, rng);
    const auto oracle = cpu::reference::forward(fc.forward_params());
    std::vector<double> naive_lse;
    const auto naive = naive_same_precision_forward(fc.forward_params(), &naive_lse);

    MergeCase m(dt, dt, 2, sq, hq, d);
    for (int part = 0; part < 2; ++part) {
      const int k0 = part == 0 ? 0 : half, nk = part == 0 ? half : sk - half;
      CaseSpec ps = full;
      ps.seq_k = nk;
      AttentionCase pc(ps, rng);
      for (std::int64_t i = 0; i < pc.q.numel(); ++i) pc.q.set(i, fc.q.get(i));
      for (std::int64_t i = 0; i < pc.k.numel(); ++i) {
        pc.k.set(i, fc.k.get(k0 * hkv * d + i));
        pc.v.set(i, fc.v.get(k0 * hkv * d + i));
      }
      pc.forward();
      const auto o = pc.out_packed(), l = pc.lse_packed();  // o: [(row*hq+h)*d], l: [h*sq+row]
      for (int row = 0; row < sq; ++row)
        for (int h = 0; h < hq; ++h) {
          m.lse.set((part * sq + row) * hq + h, static_cast<float>(l[static_cast<std::size_t>(h * sq + row)]));
          for (int k = 0; k < d; ++k)
            m.o.set(((static_cast<std::int64_t>(part) * sq + row) * hq + h) * d + k, static_cast<float>(o[static_cast<std::size_t>((row * hq + h) * d + k)]));
        }
    }
    m.run();
    // The merged output is in the oracle's packed order already: (row, head, d).
    EXPECT_LE(max_abs_error(read(m.out), oracle.o), tolerance(naive, oracle.o, dt));
    std::vector<double> merged_lse(static_cast<std::size_t>(hq * sq));
    for (int row = 0; row < sq; ++row)
      for (int h = 0; h < hq; ++h) merged_lse[static_cast<std::size_t>(h * sq + row)] = m.out_lse.get(row * hq + h);
    EXPECT_LE(max_abs_error(merged_lse, oracle.lse), tolerance(naive_lse, oracle.lse, DType::f32));
  }
}

}  // namespace
}  // namespace tessera::testing
