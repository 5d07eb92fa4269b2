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
  // Never the whole device: the prefill keeps at least one SM.
  EXPECT_LE(split_decode_sms(1.0, 1e12, 132), 131);
}

}  // namespace
}  // namespace tessera
