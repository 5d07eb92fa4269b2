// cpu::parallel_for: every index once, exceptions rethrown, and the work completed where the
// system refuses to start threads (the fuzzing pass of the thirtieth session saw an abort there:
// the threads already running were destroyed unjoined).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/parallel.h"

namespace tessera::cpu {
namespace {

TEST(ParallelFor, EveryIndexOnce) {
  for (int threads : {1, 2, 7, 64})
    for (std::int64_t n : {std::int64_t{1}, std::int64_t{5}, std::int64_t{1000}}) {
      std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
      parallel_for(n, threads, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)]++;
      });
      for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<std::size_t>(i)].load(), 1) << threads << " " << n;
    }
}

TEST(ParallelFor, RethrowsTheBodysException) {
  EXPECT_THROW(parallel_for(100, 4,
                            [](std::int64_t b, std::int64_t) {
                              if (b == 0) throw std::runtime_error("body");
                            }),
               std::runtime_error);
}

// The virtual memory in use now (VmSize, bytes), or 0 if /proc is not there.
std::uint64_t virtual_bytes() {
  std::ifstream f("/proc/self/status");
  std::string key;
  std::uint64_t kb = 0;
  while (f >> key) {
    if (key == "VmSize:") {
      f >> kb;
      return kb * 1024;
    }
    f.ignore(1 << 16, '\n');
  }
  return 0;
}

// Under an address-space limit a little above what the process uses, 1000 threads (8 MB
// stacks) cannot all start: the call must still cover every index. Runs in a child process (a
// death test) so the limit stays there; exits 0 when every index was run once.
[[noreturn]] void run_under_memory_limit(std::uint64_t limit) {
  rlimit lim{};
  lim.rlim_cur = lim.rlim_max = limit;
  if (setrlimit(RLIMIT_AS, &lim) != 0) std::exit(3);
  const std::int64_t n = 100000;
  std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
  parallel_for(n, 1000, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)]++;
  });
  for (std::int64_t i = 0; i < n; ++i)
    if (hits[static_cast<std::size_t>(i)].load() != 1) std::exit(2);
  std::exit(0);
}

TEST(ParallelFor, CompletesWhenThreadsCannotStart) {
  const std::uint64_t used = virtual_bytes();
  if (used == 0) GTEST_SKIP() << "no /proc/self/status";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(run_under_memory_limit(used + (256ull << 20)), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace tessera::cpu
