// math/ragged_tiles.h: every (sequence, query block) of random ragged batches (empty sequences,
// lengths around and at multiples of the block, one long sequence) is reached by exactly one
// virtual block, gap blocks are inactive, and the count stays below total / B + batch.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <utility>
#include <vector>

#include "math/ragged_tiles.h"
#include "support/test_support.h"

namespace tessera::testing {
namespace {

void check_batch(const std::vector<std::int32_t>& lens, int block) {
  std::vector<std::int32_t> cu(1, 0);
  for (int l : lens) cu.push_back(cu.back() + l);
  const int batch = static_cast<int>(lens.size());
  const std::int64_t blocks = math::ragged_virtual_blocks(cu.back(), batch, block);
  std::map<std::pair<int, int>, int> seen;
  int inactive = 0;
  for (std::int64_t v = 0; v < blocks; ++v) {
    const math::RaggedBlock rb = math::ragged_block(cu.data(), batch, block, v);
    if (!rb.active) {
      ++inactive;
      continue;
    }
    ASSERT_GE(rb.seq, 0);
    ASSERT_LT(rb.seq, batch);
    ASSERT_GE(rb.block, 0);
    ASSERT_LT(static_cast<std::int64_t>(rb.block) * block, lens[rb.seq]) << "block past its sequence";
    ++seen[std::make_pair(rb.seq, rb.block)];
  }
  std::int64_t real = 0;
  for (int s = 0; s < batch; ++s)
    for (int b = 0; b * block < lens[s]; ++b) {
      ++real;
      EXPECT_EQ(seen[std::make_pair(s, b)], 1) << "sequence " << s << " block " << b << " (block " << block << ")";
    }
  EXPECT_EQ(static_cast<std::int64_t>(seen.size()), real);
  EXPECT_LE(inactive, batch) << "at most one gap block per sequence";
}

TEST(RaggedTiles, EveryBlockOnceOverRandomBatches) {
  auto rng = fresh_rng();
  for (int block : {64, 128, 192}) {
    for (int trial = 0; trial < 200; ++trial) {
      const int batch = std::uniform_int_distribution<int>(1, 40)(rng);
      std::vector<std::int32_t> lens;
      for (int s = 0; s < batch; ++s) {
        const int kind = std::uniform_int_distribution<int>(0, 5)(rng);
        int l = 0;
        if (kind == 1) l = 1;
        if (kind == 2) l = block * std::uniform_int_distribution<int>(1, 4)(rng);  // whole blocks
        if (kind == 3) l = block * std::uniform_int_distribution<int>(1, 4)(rng) + 1;
        if (kind >= 4) l = std::uniform_int_distribution<int>(0, 5 * block)(rng);
        lens.push_back(l);  // kind 0: empty
      }
      check_batch(lens, block);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(RaggedTiles, EdgeBatches) {
  check_batch({0}, 128);
  check_batch({1}, 128);
  check_batch({0, 0, 0}, 128);
  check_batch({128}, 128);
  check_batch({129, 0, 127, 1}, 128);
  check_batch({100000, 1, 1, 1}, 128);  // one long sequence beside short ones
  check_batch({256, 128, 384}, 128);
  // The count: 128 sequences of 128 rows take 255 virtual blocks (128 real, 127 gaps), not the
  // 128 x 128 of a grid sized by the total.
  EXPECT_EQ(math::ragged_virtual_blocks(16384, 128, 128), 255);
  // A violated contract (cu[0] > 0) maps the rows before cu[0] to no block.
  const std::int32_t shifted[] = {100, 300};
  for (std::int64_t v = 0; v < math::ragged_virtual_blocks(300, 1, 128); ++v) {
    const math::RaggedBlock rb = math::ragged_block(shifted, 1, 128, v);
    EXPECT_TRUE(!rb.active || (rb.block >= 0 && rb.block * 128 < 200)) << "block " << v;
  }
}

}  // namespace
}  // namespace tessera::testing
