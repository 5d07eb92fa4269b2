// The SM split's host model (src/cuda/batch/split_model.h): how many SMs the decode-only kernel
// gets beside the sm90 batch prefill on compute capability 9.0 (the default batch path).
#include <gtest/gtest.h>

#include <vector>

#include "cuda/batch/split_model.h"
#include "plan/batch_plan.h"
#include "tessera/batch.h"

namespace tessera {
namespace {

using cuda::batch::split_decode_sms;
using cuda::batch::split_time;

// None where a kind is missing or there is one SM; for the mixed bench's batch (8 x 512 prefill
// rows on 4k keys, 128 decodes on 4k, d128, GQA 32/8) a share that beats the sequential order and
// leaves most SMs to prefill; more decode work gets more SMs.
TEST(SplitModel, SharesSmsOnlyWhenBothKindsHaveWork) {
  EXPECT_EQ(split_decode_sms(0.0, 2e9, 132), 0);
  EXPECT_EQ(split_decode_sms(2.6e11, 0.0, 132), 0);
  EXPECT_EQ(split_decode_sms(2.6e11, 2e9, 1), 0);
  const double flops = 4.0 * 32 * 128 * 8 * 512 * 3840.0, bytes = 4.0 * 128 * 128 * 8 * 4096.0;
  const int k = split_decode_sms(flops, bytes, 132);
  EXPECT_GE(k, 20);
  EXPECT_LE(k, 66);
  EXPECT_LT(split_time(flops, bytes, 132, k, {}), 0.9 * split_time(flops, bytes, 132, 0, {}));
  EXPECT_GT(split_decode_sms(flops / 50, bytes, 132), k);
  EXPECT_LT(split_decode_sms(flops, bytes / 50, 132), k);
  // With a unit count the prefill runs in whole rounds. 200 units: the continuous answer (46,
  // 86 CTAs) leaves 3 rounds; 100 CTAs (k = 32) run them in 2, which the rounds model finds.
  const int kc = split_decode_sms(flops, bytes, 132);
  const int k200 = split_decode_sms(flops, bytes, 132, 200);
  EXPECT_EQ(kc, 46);
  EXPECT_EQ(k200, 32);
  EXPECT_EQ((200 + (132 - k200) - 1) / (132 - k200), 2);
  EXPECT_LT(split_time(flops, bytes, 132, k200, {}, 200), 0.9 * split_time(flops, bytes, 132, kc, {}, 200));
  // 1024 units: 86 CTAs hold them in 12 rounds (1024 / 86 = 11.9), the bench's measured best.
  EXPECT_EQ(split_decode_sms(flops, bytes, 132, 1024), 46);
  // The planner's figure for the bench (tiles of 32 rows see 3616..4096 keys: 3856 on average):
  // k = 45 and 46 tie on time (12 rounds each, the decode ends inside them); the tie goes to the
  // most decode SMs, 46.
  const double flops_plan = flops / 3840.0 * 3856.0;
  EXPECT_DOUBLE_EQ(split_time(flops_plan, bytes, 132, 45, {}, 1024), split_time(flops_plan, bytes, 132, 46, {}, 1024));
  EXPECT_EQ(split_decode_sms(flops_plan, bytes, 132, 1024), 46);
  // A tie never costs prefill rounds: k = 47 (85 CTAs, 13 rounds) is slower.
  EXPECT_GT(split_time(flops_plan, bytes, 132, 47, {}, 1024), split_time(flops_plan, bytes, 132, 46, {}, 1024));
  // Never the whole device: the prefill keeps at least one SM. A negligible prefill with a huge
  // decode: as many decode SMs as reach the chip's bandwidth (about BW / r = 72), not 0; with
  // one unit, every k leaves its one round: the tie rule gives the decode all but one SM.
  const int k_tiny = split_decode_sms(1.0, 1e12, 132);
  EXPECT_GE(k_tiny, 60);
  EXPECT_LE(k_tiny, 131);
  EXPECT_EQ(split_decode_sms(1.0, 1e12, 132, 1), 131);
}

// The mixed bench's batch (apps/tessera/bench_cuda_paged.cpp, cuda.mixed_vs_separate: 8 chunks of 512
// rows on 4096 keys and 128 decodes on 4096, GQA 32/8, d128, pages of 16, causal) planned as the
// CUDA backend plans it on 132 SMs, then the model fed as launch.cu feeds it: the work figures of
// the plan's summary and U = prefill items x row blocks (1 here: 32 rows x group 4 = 128
// vectors, one unit). The k measured best on the H200 (twelfth session, call 7: 0.814 ms at
// k = 46, 0.90 at 51 and 0.92 at 40; thirteenth session, sustained under the power cap: 0.917 ms
// at 46 against 0.940 at 40 and 0.943 at 56).
TEST(SplitModel, MixedBenchPlanPicksTheMeasuredBestShare) {
  BatchConfig c;
  c.heads_q = 32;
  c.heads_kv = 8;
  c.head_dim = 128;
  c.dtype = DType::bf16;
  c.page_size = 16;
  c.options.causal = true;
  c.max_requests = 136;
  c.max_q_tokens = 8 * 512 + 128;
  std::vector<std::int32_t> q(8, 512), kv(8, 4096);
  q.insert(q.end(), 128, 1);
  kv.insert(kv.end(), 128, 4096);
  const plan::PlanConfig cfg = plan::make_plan_config(c, DeviceFacts{Device::cpu(), 132});
  const plan::WorkspaceLayout layout =
      plan::workspace_layout(cfg, plan::layout_for_partial_rows(cfg, plan::default_partial_rows(cfg)).total_bytes);
  std::vector<plan::PlanHeader> ws(layout.total_bytes / sizeof(plan::PlanHeader) + 1);
  plan::PlanScratch scratch;
  const plan::PlanSummary s = plan::build_plan(cfg, layout, q, kv, 1, ws.data(), scratch, nullptr);
  ASSERT_EQ(s.num_prefill_items, 8 * 16 * 8);  // chunks x tiles of 32 rows x kv heads
  ASSERT_EQ(s.num_items, 8 * 16 * 8 + 128 * 8);
  const int group = 4, d = 128;
  const double flops = 4.0 * group * d * static_cast<double>(s.prefill_row_keys);
  const double bytes = 2.0 * d * 2 * static_cast<double>(s.decode_keys);
  EXPECT_EQ(bytes, 2.0 * 128 * 2 * 128 * 4096.0 * 8);
  EXPECT_EQ(split_decode_sms(flops, bytes, 132, s.num_prefill_items), 46);
}

}  // namespace
}  // namespace tessera
