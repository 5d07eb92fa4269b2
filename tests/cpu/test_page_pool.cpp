// PagePool: ownership invariants under random traffic, deterministic reuse, the out-of-pages
// error leaving the pool unchanged, and bad sequence ids.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <set>
#include <vector>

#include "support/test_support.h"
#include "tessera/error.h"
#include "tessera/paged_kv.h"

namespace tessera::testing {
namespace {

// Every page is owned by one live sequence or free, never both, never twice; each sequence
// holds exactly the pages its length needs.
void expect_invariants(const PagePool& pool, const std::vector<int>& live) {
  std::vector<int> owner(static_cast<std::size_t>(pool.num_pages()), -1);
  int owned = 0;
  for (int s : live) {
    const auto& pages = pool.pages(s);
    EXPECT_EQ(static_cast<std::int64_t>(pages.size()), (pool.length(s) + pool.page_size() - 1) / pool.page_size())
        << "sequence " << s;
    for (int p : pages) {
      ASSERT_GE(p, 0);
      ASSERT_LT(p, pool.num_pages());
      EXPECT_EQ(owner[static_cast<std::size_t>(p)], -1) << "page " << p << " owned twice";
      owner[static_cast<std::size_t>(p)] = s;
      ++owned;
    }
  }
  EXPECT_EQ(owned + pool.free_pages(), pool.num_pages()) << "free count not conserved";
}

Error catch_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no tessera::Error thrown";
  return Error(ErrorCode::backend_failure, "", "");
}

TEST(PagePool, FreshPoolHasEveryPageFree) {
  PagePool pool(10, 16);
  EXPECT_EQ(pool.num_pages(), 10);
  EXPECT_EQ(pool.page_size(), 16);
  EXPECT_EQ(pool.free_pages(), 10);
}

TEST(PagePool, AppendTakesPagesOnlyWhenTheLastIsFull) {
  PagePool pool(8, 4);
  const int s = pool.create_sequence();
  EXPECT_EQ(pool.length(s), 0);
  EXPECT_TRUE(pool.pages(s).empty());
  EXPECT_EQ(pool.pages_needed(s, 5), 2);
  pool.append_tokens(s, 3);
  EXPECT_EQ(pool.pages(s).size(), 1u);
  EXPECT_EQ(pool.pages_needed(s, 1), 0);
  pool.append_tokens(s, 1);  // fills page 0 exactly
  EXPECT_EQ(pool.pages(s).size(), 1u);
  EXPECT_EQ(pool.pages_needed(s, 1), 1);
  pool.append_tokens(s, 1);
  EXPECT_EQ(pool.pages(s).size(), 2u);
  pool.append_tokens(s, 0);
  EXPECT_EQ(pool.length(s), 5);
  EXPECT_EQ(pool.free_pages(), 6);
}

TEST(PagePool, ReusesLowestFreePagesFirst) {
  PagePool pool(8, 4);
  const int a = pool.create_sequence(), b = pool.create_sequence();
  pool.append_tokens(a, 8);  // pages 0, 1
  pool.append_tokens(b, 4);  // page 2
  EXPECT_EQ(pool.pages(a), (std::vector<std::int32_t>{0, 1}));
  EXPECT_EQ(pool.pages(b), (std::vector<std::int32_t>{2}));
  pool.free_sequence(a);
  EXPECT_FALSE(pool.has_sequence(a));
  const int c = pool.create_sequence();
  pool.append_tokens(c, 9);  // 3 pages: the freed 0, 1 and then 3
  EXPECT_EQ(pool.pages(c), (std::vector<std::int32_t>{0, 1, 3}));
  pool.free_sequence(b);
  pool.append_tokens(c, 4);  // page 2 is the lowest free again
  EXPECT_EQ(pool.pages(c), (std::vector<std::int32_t>{0, 1, 3, 2}));
}

TEST(PagePool, RandomTrafficKeepsInvariantsAndIsDeterministic) {
  auto rng = fresh_rng();
  const std::uint64_t seed = rng();
  auto simulate = [&](std::vector<std::vector<std::int32_t>>* final_pages) {
    std::mt19937_64 r(seed);
    PagePool pool(64, 5);
    std::vector<int> live;
    for (int step = 0; step < 2000; ++step) {
      const int op = static_cast<int>(r() % 10);
      if (op < 2 || live.empty()) {
        live.push_back(pool.create_sequence());
      } else if (op < 8) {
        const int s = live[r() % live.size()];
        const int n = static_cast<int>(r() % 23);
        const int before_free = pool.free_pages();
        const auto before_len = pool.length(s);
        if (pool.pages_needed(s, n) > pool.free_pages()) {
          EXPECT_THROW(pool.append_tokens(s, n), Error);
          EXPECT_EQ(pool.free_pages(), before_free);
          EXPECT_EQ(pool.length(s), before_len);
        } else {
          pool.append_tokens(s, n);
          EXPECT_EQ(pool.length(s), before_len + n);
        }
      } else {
        const std::size_t i = r() % live.size();
        pool.free_sequence(live[i]);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      }
      if (step % 50 == 0) expect_invariants(pool, live);
    }
    expect_invariants(pool, live);
    for (int s : live) final_pages->push_back(pool.pages(s));
  };
  std::vector<std::vector<std::int32_t>> first, second;
  simulate(&first);
  simulate(&second);
  EXPECT_EQ(first, second);  // same operations, same pages
}

TEST(PagePool, OutOfPagesThrowsAndChangesNothing) {
  PagePool pool(4, 16);
  const int a = pool.create_sequence(), b = pool.create_sequence();
  pool.append_tokens(a, 50);  // 4 pages, 14 slots left in the last
  const auto pages_a = pool.pages(a);
  pool.append_tokens(a, 14);  // fits in the last page
  const Error e = catch_error([&] { pool.append_tokens(b, 1); });
  EXPECT_EQ(e.code(), ErrorCode::out_of_memory);
  EXPECT_EQ(e.argument(), "pool");
  EXPECT_NE(std::string(e.what()).find("PagePool::append_tokens: pool: expected 1 free pages"), std::string::npos)
      << e.what();
  EXPECT_EQ(pool.length(b), 0);
  EXPECT_TRUE(pool.pages(b).empty());
  EXPECT_EQ(pool.free_pages(), 0);
  EXPECT_EQ(pool.pages(a), pages_a);
  EXPECT_EQ(pool.length(a), 64);
  // A partly fitting request is refused as a whole.
  pool.free_sequence(a);
  pool.append_tokens(b, 40);  // 3 pages
  EXPECT_THROW(pool.append_tokens(b, 30), Error);
  EXPECT_EQ(pool.length(b), 40);
  EXPECT_EQ(pool.free_pages(), 1);
}

TEST(PagePool, InvalidSequenceIdsAndCounts) {
  PagePool pool(4, 8);
  const int a = pool.create_sequence();
  pool.free_sequence(a);
  for (int bad : {-1, a, 7}) {
    Error e = catch_error([&] { pool.append_tokens(bad, 1); });
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_EQ(e.argument(), "seq");
    EXPECT_NE(std::string(e.what()).find("got " + std::to_string(bad)), std::string::npos) << e.what();
    EXPECT_EQ(catch_error([&] { pool.free_sequence(bad); }).argument(), "seq");
    EXPECT_EQ(catch_error([&] { (void)pool.length(bad); }).argument(), "seq");
    EXPECT_EQ(catch_error([&] { (void)pool.pages(bad); }).argument(), "seq");
    EXPECT_EQ(catch_error([&] { (void)pool.pages_needed(bad, 1); }).argument(), "seq");
    EXPECT_FALSE(pool.has_sequence(bad));
  }
  const int b = pool.create_sequence();
  const Error e = catch_error([&] { pool.append_tokens(b, -3); });
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  EXPECT_EQ(e.argument(), "num_tokens");
  EXPECT_EQ(pool.free_pages(), 4);
  const std::vector<int> seqs{b, a};
  EXPECT_EQ(catch_error([&] { (void)pool.page_table(seqs); }).argument(), "seqs[1]");
  // A count whose total passes 2^31 - 1 tokens is refused (at page size 1 the page count could
  // pass 2^31 and wrap negative).
  pool.append_tokens(b, 1);
  EXPECT_EQ(pool.pages_needed(b, 2147483646), (2147483647LL + 7) / 8 - 1);
  EXPECT_EQ(catch_error([&] { (void)pool.pages_needed(b, 2147483647); }).argument(), "num_tokens");
  pool.free_sequence(b);
  EXPECT_EQ(catch_error([] { PagePool p(4, 0); }).argument(), "page_size");
  EXPECT_EQ(catch_error([] { PagePool p(-1, 4); }).argument(), "num_pages");
}

TEST(PagePool, PageTableOfSequences) {
  PagePool pool(16, 4);
  const int a = pool.create_sequence(), b = pool.create_sequence(), c = pool.create_sequence();
  pool.append_tokens(a, 9);
  pool.append_tokens(c, 4);
  pool.append_tokens(a, 2);
  const std::vector<int> order{c, b, a};
  const HostPageTable t = pool.page_table(order);
  EXPECT_EQ(t.page_size, 4);
  EXPECT_EQ(t.batch(), 3);
  EXPECT_EQ(t.kv_indptr, (std::vector<std::int32_t>{0, 1, 1, 4}));
  EXPECT_EQ(t.kv_indices, (std::vector<std::int32_t>{3, 0, 1, 2}));
  EXPECT_EQ(t.kv_last_page_len, (std::vector<std::int32_t>{4, 0, 3}));
  EXPECT_EQ(t.kv_lens(), (std::vector<std::int32_t>{4, 0, 11}));
}

}  // namespace
}  // namespace tessera::testing
