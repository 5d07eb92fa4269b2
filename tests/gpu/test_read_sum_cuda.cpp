// The benchmark's read-only memory pass (src/cuda/measure/read_sum): its sum of 32-bit words
// against the host's over sizes that leave every kind of remainder (one vector, less than one
// thread's step, grids with and without the unrolled steps), so that a word it skipped or read
// twice shows; its argument checks, which launch nothing.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/measure/read_sum.h"
#include "gpu/gpu_support.h"
#include "support/test_support.h"
#include "tessera/error.h"

namespace tessera::testing {
namespace {

unsigned int host_sum(const std::vector<std::uint32_t>& words) {
  unsigned int s = 0;
  for (std::uint32_t w : words) s += w;
  return s;
}

TEST(ReadSumCuda, SumsEveryWordOnce) {
  auto rng = fresh_rng();
  // Vectors of 16 bytes: 1, 17, a block's worth + 1, and sizes past the grid's first step
  // (132 SMs x 4 blocks x 512 threads = 270336 vectors) with and without a full unrolled step.
  for (std::size_t vectors : {std::size_t{1}, std::size_t{17}, std::size_t{513}, std::size_t{270337},
                              std::size_t{4 * 270336 + 1001}, std::size_t{9 * 270336 + 7}}) {
    std::vector<std::uint32_t> words(vectors * 4);
    for (auto& w : words) w = static_cast<std::uint32_t>(rng());
    DeviceBuffer<std::uint32_t> data(words);
    DeviceBuffer<unsigned int> sum(1, 0);
    cuda::measure::read_sum_u32(data.get(), vectors * 16, sum.get(), nullptr);
    EXPECT_EQ(sum.read()[0], host_sum(words)) << vectors << " vectors";
    // Twice into the same sum: it adds.
    cuda::measure::read_sum_u32(data.get(), vectors * 16, sum.get(), nullptr);
    EXPECT_EQ(sum.read()[0], 2u * host_sum(words)) << vectors << " vectors, twice";
  }
}

TEST(ReadSumCuda, RejectsBadArgumentsWithoutWriting) {
  DeviceBuffer<std::uint32_t> data(std::vector<std::uint32_t>(64, 1u));
  DeviceBuffer<unsigned int> sum(1, 0);
  const auto expect_error = [](auto&& call, const char* arg) {
    try {
      call();
      ADD_FAILURE() << "no error for " << arg;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_EQ(e.argument(), arg);
    }
  };
  expect_error([&] { cuda::measure::read_sum_u32(data.get(), 24, sum.get(), nullptr); }, "bytes");
  expect_error([&] { cuda::measure::read_sum_u32(reinterpret_cast<const char*>(data.get()) + 4, 16, sum.get(), nullptr); },
               "data");
  expect_error([&] { cuda::measure::read_sum_u32(nullptr, 16, sum.get(), nullptr); }, "data");
  expect_error([&] { cuda::measure::read_sum_u32(data.get(), 16, nullptr, nullptr); }, "sum");
  EXPECT_EQ(sum.read()[0], 0u);
  cuda::measure::read_sum_u32(nullptr, 0, sum.get(), nullptr);  // nothing to read: nothing launched
  EXPECT_EQ(sum.read()[0], 0u);
}

}  // namespace
}  // namespace tessera::testing
