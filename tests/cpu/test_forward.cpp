// The tiled CPU forward against the fp64 oracle under the tolerance rule
//   max |kernel - oracle| <= 2 * max |naive same-precision - oracle| + rounding floor,
// over a covering grid (odd sizes, seq_q != seq_k both ways, head dims 64/128/256, GQA 1/4/8,
// causal / window / softcap, fp32/fp16/bf16, dense and ragged, padded strides).
#include <gtest/gtest.h>

#include <cmath>

#include "cpu/reference.h"
#include "tessera/attention.h"
#include "support/test_support.h"

namespace tessera::testing {
namespace {

// Every item of the grid appears at least once; the expensive sizes (1023, d256) only in a
// few combinations so the whole suite stays fast.
std::vector<CaseSpec> grid() {
  const DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;
  return {
      dense(f32, 2, 113, 113, 4, 1, 64, opts(false)),
      dense(f16, 1, 17, 1023, 8, 1, 128, opts(true)),                // seq_q < seq_k, GQA 8, causal
      dense(bf16, 2, 113, 17, 2, 2, 256, opts(true), 8),             // seq_q > seq_k: top rows fully masked
      dense(f16, 1, 1023, 1023, 2, 2, 64, opts(false, 128, 16)),     // sliding window
      dense(bf16, 3, 1, 1, 4, 1, 128, opts(false, -1, -1, 3.0f)),   // seq 1, softcap
      dense(f32, 1, 1, 113, 8, 8, 256, opts(true, -1, -1, 2.0f), 3),  // decode row, softcap + causal
      dense(f32, 1, 1023, 113, 4, 4, 128, opts(false, -1, 32), 5),   // right-only window, seq_q > seq_k
      dense(bf16, 1, 113, 1023, 8, 2, 64, opts(true, 200, -1)),      // causal + window, GQA 4
      dense(f16, 2, 17, 17, 1, 1, 256, opts(false, 3, 3, 1.5f), 2),  // narrow band + softcap
      ragged(f16, {17, 0, 113, 1, 5}, {113, 0, 17, 1, 0}, 4, 1, 64, opts(true), 8),  // empty seq, empty KV
      ragged(bf16, {113, 1, 17}, {1023, 17, 17}, 8, 1, 128, opts(false, 64, 0, 5.0f)),
      ragged(f32, {0, 1023, 17}, {0, 113, 113}, 2, 1, 64, opts(false)),
      ragged(bf16, {33, 0}, {65, 0}, 4, 4, 256, opts(true), 3),
  };
}

class ForwardGrid : public ::testing::TestWithParam<CaseSpec> {};

TEST_P(ForwardGrid, MatchesOracleWithinRule) {
  const CaseSpec spec = GetParam();
  SCOPED_TRACE(spec.name());
  auto rng = fresh_rng();
  AttentionCase c(spec, rng);
  ExecutionContext ctx;
  ctx.num_threads = 2;
  c.forward(ctx);

  // Every output element written, nothing outside the views touched.
  EXPECT_EQ(c.out.count_nan(), 0);
  EXPECT_EQ(c.lse.count_nan(), 0);
  EXPECT_TRUE(c.out.margins_intact());
  EXPECT_TRUE(c.lse.margins_intact());

  const AttentionParams p = c.forward_params();
  const auto oracle = cpu::reference::forward(p);
  std::vector<double> naive_lse;
  const auto naive = naive_same_precision_forward(p, &naive_lse);

  const double tol_o = tolerance(naive, oracle.o, spec.dtype);
  const double err_o = max_abs_error(c.out_packed(), oracle.o);
  EXPECT_LE(err_o, tol_o) << "naive error " << max_abs_error(naive, oracle.o);

  // LSE is fp32 whatever the inputs: its floor is fp32's, the rest of the rule is the same.
  const double tol_l = tolerance(naive_lse, oracle.lse, DType::f32);
  const double err_l = max_abs_error(c.lse_packed(), oracle.lse);  // also requires -inf exactly where expected
  EXPECT_LE(err_l, tol_l) << "naive error " << max_abs_error(naive_lse, oracle.lse);
}

INSTANTIATE_TEST_SUITE_P(Cpu, ForwardGrid, ::testing::ValuesIn(grid()),
                         [](const ::testing::TestParamInfo<CaseSpec>& info) { return "case" + std::to_string(info.index); });

// Thread count does not change the result: each output row is computed by one work item.
TEST(Forward, IndependentOfThreadCount) {
  auto rng = fresh_rng();
  AttentionCase c(dense(DType::bf16, 2, 113, 200, 4, 2, 64, opts(true)), rng);
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

// Without return_lse the lse argument is not needed and not written.
TEST(Forward, WithoutLse) {
  auto rng = fresh_rng();
  AttentionCase c(dense(DType::f32, 1, 17, 17, 2, 1, 64, opts(true)), rng);
  c.out.poison();
  attention_forward(c.q.view(), c.k.view(), c.v.view(), c.out.view(), Tensor{}, opts(true));
  EXPECT_EQ(c.out.count_nan(), 0);
  const auto oracle = cpu::reference::forward(c.forward_params());
  const auto naive = naive_same_precision_forward(c.forward_params());
  EXPECT_LE(max_abs_error(c.out_packed(), oracle.o), tolerance(naive, oracle.o, DType::f32));
}

}  // namespace
}  // namespace tessera::testing
