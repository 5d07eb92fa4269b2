// validate::no_internal_overlap and validate::disjoint (the checks that keep an output from
// being a broadcast view or from overlapping memory another argument reads or writes) against a
// brute-force enumeration of the bytes each view touches, over random small strided layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <set>
#include <string>

#include "api/validate.h"
#include "support/test_support.h"
#include "tessera/error.h"

namespace tessera::testing {
namespace {

// Calls fn(offset) with the element offset of every index of a view (all its sizes >= 1).
void for_each_offset(const Tensor& t, const std::function<void(std::int64_t)>& fn) {
  std::int64_t idx[kMaxRank] = {};
  for (;;) {
    std::int64_t off = 0;
    for (int d = 0; d < t.rank; ++d) off += idx[d] * t.stride[d];
    fn(off);
    int d = t.rank - 1;
    while (d >= 0 && ++idx[d] == t.shape[d]) idx[d--] = 0;
    if (d < 0) return;
  }
}

// Every byte a view touches, as offsets from a common base address.
std::set<std::int64_t> bytes_of(const Tensor& t, std::int64_t base) {
  std::set<std::int64_t> out;
  const std::int64_t size = static_cast<std::int64_t>(dtype_size(t.dtype));
  for_each_offset(t, [&](std::int64_t off) {
    for (std::int64_t b = 0; b < size; ++b) out.insert(base + off * size + b);
  });
  return out;
}

bool has_duplicate_elements(const Tensor& t) {
  std::set<std::int64_t> seen;
  std::int64_t count = 0;
  for_each_offset(t, [&](std::int64_t off) {
    seen.insert(off);
    ++count;
  });
  return static_cast<std::int64_t>(seen.size()) != count;
}

bool throws(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error&) {
    return true;
  }
  return false;
}

Tensor view(unsigned char* base, std::int64_t byte_offset, DType dt, int rank, const std::int64_t* shape,
            const std::int64_t* stride) {
  return Tensor::from_arrays(base + byte_offset, dt, rank, shape, stride);
}

TEST(OverlapChecks, InternalOverlapMatchesBruteForce) {
  auto rng = fresh_rng();
  static unsigned char buffer[1];
  int refused_with_duplicates = 0, refused_without = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const int rank = 1 + static_cast<int>(rng() % 4);
    std::int64_t shape[kMaxRank], stride[kMaxRank];
    for (int d = 0; d < rank; ++d) {
      shape[d] = 1 + static_cast<std::int64_t>(rng() % 4);
      stride[d] = static_cast<std::int64_t>(rng() % 13);
    }
    const Tensor t = view(buffer, 0, DType::f16, rank, shape, stride);
    const bool dup = has_duplicate_elements(t);
    const bool refused = throws([&] { validate::no_internal_overlap(t, "out"); });
    if (dup) {
      ASSERT_TRUE(refused) << "a view with two elements at one address passed: trial " << trial;
    }
    if (refused) ++(dup ? refused_with_duplicates : refused_without);
  }
  EXPECT_GT(refused_with_duplicates, 1000);  // the draws reach both kinds
  // Layouts that interleave dimensions without overlap are refused too (documented); they
  // must stay a minority of the refusals.
  EXPECT_LT(refused_without, refused_with_duplicates);
}

TEST(OverlapChecks, DisjointMatchesBruteForceForOneLayout) {
  auto rng = fresh_rng();
  static unsigned char buffer[1];
  int overlapping = 0, apart_in_range = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const int rank = 1 + static_cast<int>(rng() % 4);
    std::int64_t shape[kMaxRank], stride[kMaxRank];
    // A non-overlapping layout: a random order of the dims, each stride past the span so far,
    // sometimes with a gap (the room another view interleaves into).
    std::int64_t span = 1;
    int order[kMaxRank] = {0, 1, 2, 3, 4};
    std::shuffle(order, order + rank, rng);
    for (int i = 0; i < rank; ++i) {
      const int d = order[i];
      shape[d] = 1 + static_cast<std::int64_t>(rng() % 4);
      stride[d] = span * (1 + static_cast<std::int64_t>(rng() % 2)) + static_cast<std::int64_t>(rng() % 3);
      span = stride[d] * shape[d];
    }
    const DType dt = rng() % 2 ? DType::f16 : DType::f32;
    const std::int64_t shift = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(span * 4 + 8));
    const Tensor a = view(buffer, 0, dt, rank, shape, stride), b = view(buffer, shift, dt, rank, shape, stride);
    validate::no_internal_overlap(a, "a");
    std::set<std::int64_t> ba = bytes_of(a, 0), bb = bytes_of(b, shift);
    bool shared = false;
    for (std::int64_t x : bb)
      if (ba.count(x)) {
        shared = true;
        break;
      }
    const bool refused = throws([&] { validate::disjoint(b, "b", a, "a"); });
    ASSERT_EQ(refused, shared) << "trial " << trial << " shift " << shift;
    if (shared) ++overlapping;
    else if (shift <= *ba.rbegin()) ++apart_in_range;  // interleaved, yet apart
  }
  EXPECT_GT(overlapping, 1000);
  EXPECT_GT(apart_in_range, 1000);
}

TEST(OverlapChecks, DisjointMatchesBruteForceForSharedStridesOfOtherShapes) {
  // Two views with the same strides and different shapes (dq and dk of one packed QKV buffer
  // with GQA: heads_q and heads_kv heads at the same head stride): exact, as for one layout.
  auto rng = fresh_rng();
  static unsigned char buffer[1];
  int overlapping = 0, apart_in_range = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const int rank = 1 + static_cast<int>(rng() % 4);
    std::int64_t shape_a[kMaxRank], shape_b[kMaxRank], stride[kMaxRank];
    std::int64_t span = 1;
    int order[kMaxRank] = {0, 1, 2, 3, 4};
    std::shuffle(order, order + rank, rng);
    for (int i = 0; i < rank; ++i) {
      const int d = order[i];
      shape_a[d] = 1 + static_cast<std::int64_t>(rng() % 4);
      shape_b[d] = 1 + static_cast<std::int64_t>(rng() % 4);
      stride[d] = span * (1 + static_cast<std::int64_t>(rng() % 2)) + static_cast<std::int64_t>(rng() % 3);
      span = stride[d] * std::max(shape_a[d], shape_b[d]);
    }
    const DType dt = rng() % 2 ? DType::f16 : DType::f32;
    const std::int64_t shift = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(span * 4 + 8));
    const Tensor a = view(buffer, 0, dt, rank, shape_a, stride), b = view(buffer, shift, dt, rank, shape_b, stride);
    std::set<std::int64_t> ba = bytes_of(a, 0), bb = bytes_of(b, shift);
    bool shared = false;
    for (std::int64_t x : bb)
      if (ba.count(x)) {
        shared = true;
        break;
      }
    ASSERT_EQ(throws([&] { validate::disjoint(b, "b", a, "a"); }), shared) << "trial " << trial << " shift " << shift;
    ASSERT_EQ(throws([&] { validate::disjoint(a, "a", b, "b"); }), shared) << "trial " << trial << " (swapped)";
    if (shared) ++overlapping;
    else if (shift <= *ba.rbegin()) ++apart_in_range;
  }
  EXPECT_GT(overlapping, 1000);
  EXPECT_GT(apart_in_range, 1000);
}

TEST(OverlapChecks, DifferentLayoutsCompareAddressRanges) {
  static unsigned char buffer[4096];
  const std::int64_t s1[] = {8}, st1[] = {1}, s2[] = {2, 4}, st2[] = {4, 1};
  const Tensor a = view(buffer, 0, DType::f32, 1, s1, st1);
  EXPECT_TRUE(throws([&] { validate::disjoint(view(buffer, 28, DType::f32, 2, s2, st2), "b", a, "a"); }));
  EXPECT_FALSE(throws([&] { validate::disjoint(view(buffer, 32, DType::f32, 2, s2, st2), "b", a, "a"); }));
}

}  // namespace
}  // namespace tessera::testing
