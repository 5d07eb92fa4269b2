// The CPU backward against the fp64 oracle's exact gradients under the tolerance rule
// (dq, dk, dv each), over GQA, causal, window, softcap, seq_q != seq_k and ragged batches;
// and the deterministic mode's bitwise repeatability.
#include <gtest/gtest.h>

#include <cmath>

#include "cpu/reference.h"
#include "support/test_support.h"
#include "tessera/attention.h"

namespace tessera::testing {
namespace {

std::vector<CaseSpec> grid() {
  const DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;
  return {
      dense(f32, 2, 113, 113, 4, 1, 64, opts(true)),                       // GQA 4, causal
      dense(f16, 1, 17, 113, 2, 2, 128, opts(false, 32, 8)),                // seq_q < seq_k, window
      dense(bf16, 1, 113, 17, 8, 1, 64, opts(true, -1, -1, 2.0f), 4),      // seq_q > seq_k, GQA 8, softcap
      dense(f32, 1, 1023, 1023, 2, 1, 64, opts(true, 256, -1)),              // long, causal + window
      dense(bf16, 1, 65, 129, 2, 1, 256, opts(false, 40, 40, 3.0f)),        // head dim 256, band + softcap
      dense(f16, 2, 1, 113, 4, 4, 64, opts(false), 2),                       // decode row
      ragged(f16, {17, 0, 113, 3}, {113, 0, 17, 0}, 4, 2, 64, opts(true), 8),  // empty seq, empty KV
      ragged(bf16, {1, 113, 17}, {200, 113, 17}, 8, 2, 128, opts(false, -1, -1, 15.0f)),
      ragged(f32, {64, 65}, {63, 130}, 2, 2, 128, opts(false, 16, 0)),
  };
}

class BackwardGrid : public ::testing::TestWithParam<CaseSpec> {};

TEST_P(BackwardGrid, MatchesOracleWithinRule) {
  const CaseSpec spec = GetParam();
  SCOPED_TRACE(spec.name());
  auto rng = fresh_rng();
  AttentionCase c(spec, rng);
  ExecutionContext ctx;
  ctx.num_threads = 2;
  c.forward(ctx);
  c.backward(ctx);

  for (const HostTensor* t : {&c.dq, &c.dk, &c.dv}) {
    EXPECT_EQ(t->count_nan(), 0);
    EXPECT_TRUE(t->margins_intact());
  }
  EXPECT_TRUE(c.out.margins_intact());

  const BackwardParams p = c.backward_params();
  const auto oracle = cpu::reference::backward(p);
  const auto naive = naive_same_precision_backward(p);
  EXPECT_LE(max_abs_error(c.dq_packed(), oracle.dq), tolerance(naive.dq, oracle.dq, spec.dtype))
      << "naive dq error " << max_abs_error(naive.dq, oracle.dq);
  EXPECT_LE(max_abs_error(c.dk_packed(), oracle.dk), tolerance(naive.dk, oracle.dk, spec.dtype))
      << "naive dk error " << max_abs_error(naive.dk, oracle.dk);
  EXPECT_LE(max_abs_error(c.dv_packed(), oracle.dv), tolerance(naive.dv, oracle.dv, spec.dtype))
      << "naive dv error " << max_abs_error(naive.dv, oracle.dv);
}

INSTANTIATE_TEST_SUITE_P(Cpu, BackwardGrid, ::testing::ValuesIn(grid()),
                         [](const ::testing::TestParamInfo<CaseSpec>& info) { return "case" + std::to_string(info.index); });

// Deterministic mode: identical bits run to run and whatever the thread count.
TEST(Backward, DeterministicBitwise) {
  auto rng = fresh_rng();
  CaseSpec spec = dense(DType::bf16, 2, 113, 150, 8, 2, 64, opts(true, -1, -1, 4.0f), 1);
  spec.options.deterministic = true;
  AttentionCase c(spec, rng);
  c.forward();
  std::vector<std::vector<unsigned char>> first;
  for (int threads : {2, 2, 1, 5}) {
    ExecutionContext ctx;
    ctx.num_threads = threads;
    c.backward(ctx);
    const std::vector<std::vector<unsigned char>> now = {c.dq.bytes(), c.dk.bytes(), c.dv.bytes()};
    if (first.empty()) {
      first = now;
      EXPECT_EQ(c.dq.count_nan(), 0);
    } else {
      EXPECT_TRUE(now == first) << "gradients differ with " << threads << " threads";
    }
  }
}

// Fully masked query rows get dq = 0; keys no query sees get dk = dv = 0 (exactly, no NaN).
TEST(Backward, MaskedRowsAndKeysGetZeroGradient) {
  auto rng = fresh_rng();
  {
    // seq_q 40 > seq_k 8, causal bottom-right: query rows 0..31 see no key.
    AttentionCase c(dense(DType::f32, 1, 40, 8, 2, 1, 64, opts(true)), rng);
    c.forward();
    c.backward();
    const auto dq = c.dq_packed();
    for (int row = 0; row < 40; ++row)
      for (int h = 0; h < 2; ++h)
        for (int d = 0; d < 64; ++d) {
          const double g = dq[static_cast<std::size_t>((row * 2 + h) * 64 + d)];
          if (row < 32) ASSERT_EQ(g, 0.0) << "row " << row;
          else ASSERT_TRUE(std::isfinite(g));
        }
    EXPECT_EQ(c.lse_packed()[0], -INFINITY);
    EXPECT_EQ(c.dk.count_nan(), 0);
    EXPECT_EQ(c.dv.count_nan(), 0);
  }
  {
    // seq_q 2, seq_k 16, window (1, 0): rows see keys 13..14 and 14..15; keys 0..12 unseen.
    AttentionCase c(dense(DType::bf16, 1, 2, 16, 1, 1, 64, opts(false, 1, 0)), rng);
    c.forward();
    c.backward();
    for (const HostTensor* t : {&c.dq, &c.dk, &c.dv}) EXPECT_EQ(t->count_nan(), 0);
    const auto dk = c.dk_packed(), dv = c.dv_packed();
    for (int j = 0; j < 16; ++j) {
      double nk = 0, nv = 0;
      for (int d = 0; d < 64; ++d) {
        nk += std::fabs(dk[static_cast<std::size_t>(j * 64 + d)]);
        nv += std::fabs(dv[static_cast<std::size_t>(j * 64 + d)]);
      }
      if (j < 13) {
        EXPECT_EQ(nk, 0.0) << "key " << j;
        EXPECT_EQ(nv, 0.0) << "key " << j;
      } else {
        EXPECT_GT(nv, 0.0) << "key " << j;
      }
    }
  }
}

}  // namespace
}  // namespace tessera::testing
