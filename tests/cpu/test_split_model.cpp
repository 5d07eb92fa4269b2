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

}  // namespace
}  // namespace tessera
