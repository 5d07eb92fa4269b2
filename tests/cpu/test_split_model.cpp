// The SM split's host model (src/cuda/batch/split_model.h): how many SMs the decode-only kernel
// gets beside the sm90 batch prefill on compute capability 9.0 (the default batch path).
#include <gtest/gtest.h>

#include "cuda/batch/split_model.h"

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
  // With its unit count (1024 units of 128 packed rows) the prefill runs in whole rounds: the
  // answer gives it a round count no larger than the continuous answer's, and a k where the
  // units fill the rounds (86 CTAs: 12 rounds, 1024 / 86 = 11.9) rather than one past them.
  const int ku = split_decode_sms(flops, bytes, 132, 1024);
  EXPECT_GE(ku, 20);
  EXPECT_LE(ku, 66);
  EXPECT_LE((1024 + (132 - ku) - 1) / (132 - ku), (1024 + (132 - k) - 1) / (132 - k));
  EXPECT_EQ(split_decode_sms(flops, bytes, 132, 1024), 46);
  // The planner's figure for the bench (tiles of 32 rows see 3616..4096 keys: 3856 on average):
  // k = 44-46 tie on time (12 rounds each); the tie goes to the most decode SMs, 46.
  const double flops_plan = flops / 3840.0 * 3856.0;
  EXPECT_DOUBLE_EQ(split_time(flops_plan, bytes, 132, 45, {}, 1024), split_time(flops_plan, bytes, 132, 46, {}, 1024));
  EXPECT_EQ(split_decode_sms(flops_plan, bytes, 132, 1024), 46);
  // A tie never costs prefill rounds: k = 47 (85 CTAs, 13 rounds) is slower.
  EXPECT_GT(split_time(flops_plan, bytes, 132, 47, {}, 1024), split_time(flops_plan, bytes, 132, 46, {}, 1024));
  EXPECT_LE(split_time(flops, bytes, 132, ku, {}, 1024), split_time(flops, bytes, 132, k, {}, 1024));
  // Never the whole device: the prefill keeps at least one SM.
  EXPECT_LE(split_decode_sms(1.0, 1e12, 132), 131);
}

}  // namespace
}  // namespace tessera
