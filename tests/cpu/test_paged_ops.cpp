// append_paged_kv and copy_pages against a host model of the cache: NHD and HND, page sizes
// 1, 5, 16, 256, separate and combined K/V, padded (non-contiguous) pages; every element of
// the cache is compared and the poisoned padding around it must stay intact.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "math/dtype_convert.h"
#include "support/test_support.h"
#include "tessera/paged_kv.h"

namespace tessera::testing {
namespace {

constexpr int kHeads = 3, kDim = 16;

// A cache (K and V separate, or one combined tensor) and a model of its contents.
struct CacheUnderTest {
  CacheUnderTest(DType dtype, KVLayout layout, int num_pages, int page_size, bool combined, std::mt19937_64& rng)
      : layout(layout), num_pages(num_pages), page_size(page_size) {
    const std::int64_t a = layout == KVLayout::NHD ? page_size : kHeads, b = layout == KVLayout::NHD ? kHeads : page_size;
    if (combined) {
      kv = HostTensor(dtype, {num_pages, 2, a, b, kDim}, 3);
      kv.fill_normal(rng);
      cache = PagedKVCache::from_combined(kv.view(), layout);
    } else {
      k = HostTensor(dtype, {num_pages, a, b, kDim}, 3);
      v = HostTensor(dtype, {num_pages, a, b, kDim}, 5);
      k.fill_normal(rng);
      v.fill_normal(rng);
      cache = PagedKVCache{k.view(), v.view(), layout};
    }
    model_k.resize(static_cast<std::size_t>(num_pages) * page_size * kHeads * kDim);
    model_v.resize(model_k.size());
    for (int p = 0; p < num_pages; ++p)
      for (int t = 0; t < page_size; ++t)
        for (int h = 0; h < kHeads; ++h)
          for (int d = 0; d < kDim; ++d) {
            model_k[model_at(p, t, h, d)] = read(cache.k_pages, p, t, h, d);
            model_v[model_at(p, t, h, d)] = read(cache.v_pages, p, t, h, d);
          }
  }

  std::size_t model_at(std::int64_t p, std::int64_t t, int h, int d) const {
    return static_cast<std::size_t>(((p * page_size + t) * kHeads + h) * kDim + d);
  }
  float read(const Tensor& x, std::int64_t p, std::int64_t t, int h, int d) const {
    const std::int64_t off = layout == KVLayout::NHD ? p * x.stride[0] + t * x.stride[1] + h * x.stride[2] + d
                                                     : p * x.stride[0] + h * x.stride[1] + t * x.stride[2] + d;
    return math::load_as_float(x.data, off, x.dtype);
  }

  void expect_matches_model() const {
    std::int64_t bad = 0;
    for (int p = 0; p < num_pages; ++p)
      for (int t = 0; t < page_size; ++t)
        for (int h = 0; h < kHeads; ++h)
          for (int d = 0; d < kDim; ++d) {
            bad += read(cache.k_pages, p, t, h, d) != model_k[model_at(p, t, h, d)];
            bad += read(cache.v_pages, p, t, h, d) != model_v[model_at(p, t, h, d)];
          }
    EXPECT_EQ(bad, 0) << "cache elements that differ from the model";
    if (kv.numel() > 0) {
      EXPECT_TRUE(kv.margins_intact());
    } else {
      EXPECT_TRUE(k.margins_intact());
      EXPECT_TRUE(v.margins_intact());
    }
  }

  KVLayout layout;
  int num_pages, page_size;
  HostTensor k, v, kv;
  PagedKVCache cache;
  std::vector<float> model_k, model_v;
};

// One append step: request i of `seqs` gets n[i] new tokens.
void append_step(CacheUnderTest& c, PagePool& pool, const std::vector<int>& seqs, const std::vector<int>& n,
                 std::mt19937_64& rng, int num_threads) {
  std::vector<std::int32_t> indptr{0};
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    pool.append_tokens(seqs[i], n[i]);
    indptr.push_back(indptr.back() + n[i]);
  }
  HostPageTable table = pool.page_table(seqs);
  const std::int64_t total = indptr.back();
  HostTensor nk(c.cache.k_pages.dtype, {total, kHeads, kDim}, 2), nv(c.cache.k_pages.dtype, {total, kHeads, kDim});
  nk.fill_normal(rng);
  nv.fill_normal(rng);
  const HostTensor ai = int_tensor(indptr);
  append_paged_kv(c.cache, table.view(), ai.view(), nk.view(), nv.view(), ExecutionContext{nullptr, num_threads});
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const std::int64_t len = pool.length(seqs[i]);
    const auto& pages = pool.pages(seqs[i]);
    for (int j = 0; j < n[i]; ++j) {
      const std::int64_t pos = len - n[i] + j, row = indptr[i] + j;
      const std::int64_t page = pages[static_cast<std::size_t>(pos / c.page_size)], slot = pos % c.page_size;
      for (int h = 0; h < kHeads; ++h)
        for (int d = 0; d < kDim; ++d) {
          const std::int64_t lin = (row * kHeads + h) * kDim + d;
          c.model_k[c.model_at(page, slot, h, d)] = nk.get(lin);
          c.model_v[c.model_at(page, slot, h, d)] = nv.get(lin);
        }
    }
  }
  EXPECT_TRUE(nk.margins_intact());
}

struct OpsCase { DType dtype; KVLayout layout; int page_size; bool combined; };

class PagedOps : public ::testing::TestWithParam<OpsCase> {};

TEST_P(PagedOps, AppendPrefillThenDecodeThenCopy) {
  const OpsCase oc = GetParam();
  auto rng = fresh_rng();
  const std::vector<int> prefill{0, 1, 37, 300, 16};
  int pages_needed = 3;
  for (int n : prefill) pages_needed += (n + 8 + oc.page_size - 1) / oc.page_size;
  const int num_pages = pages_needed + 6;
  for (int threads : {1, 2}) {
    CacheUnderTest c(oc.dtype, oc.layout, num_pages, oc.page_size, oc.combined, rng);
    PagePool pool(num_pages, oc.page_size);
    // A sequence freed after the prefill leaves holes, so decode pages interleave.
    const int hole = pool.create_sequence();
    pool.append_tokens(hole, 3 * oc.page_size);
    std::vector<int> seqs;
    for (std::size_t i = 0; i < prefill.size(); ++i) seqs.push_back(pool.create_sequence());
    append_step(c, pool, seqs, prefill, rng, threads);
    c.expect_matches_model();
    pool.free_sequence(hole);
    append_step(c, pool, seqs, {1, 1, 0, 1, 1}, rng, threads);  // decode, one request idle
    append_step(c, pool, seqs, {2, 0, 1, 0, 5}, rng, threads);
    c.expect_matches_model();
    if (HasFailure()) return;

    // copy_pages: copy-on-write of two written pages into free ones.
    // A copy: create_sequence() below may reallocate the pool's sequences and with them the
    // vector pages() refers to.
    const std::vector<std::int32_t> src_seq = pool.pages(seqs[3]);
    const int fresh = pool.create_sequence();
    pool.append_tokens(fresh, 2 * oc.page_size);
    const std::vector<std::int32_t> src{src_seq.front(), src_seq.back()};
    const std::vector<std::int32_t> dst{pool.pages(fresh)[1], pool.pages(fresh)[0]};
    const HostTensor s = int_tensor(src), d = int_tensor(dst);
    copy_pages(c.cache, s.view(), d.view(), ExecutionContext{nullptr, threads});
    for (std::size_t i = 0; i < src.size(); ++i)
      for (int t = 0; t < oc.page_size; ++t)
        for (int h = 0; h < kHeads; ++h)
          for (int e = 0; e < kDim; ++e) {
            c.model_k[c.model_at(dst[i], t, h, e)] = c.model_k[c.model_at(src[i], t, h, e)];
            c.model_v[c.model_at(dst[i], t, h, e)] = c.model_v[c.model_at(src[i], t, h, e)];
          }
    c.expect_matches_model();
    // Empty calls write nothing.
    const HostTensor none = int_tensor({});
    copy_pages(c.cache, none.view(), none.view());
    c.expect_matches_model();
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, PagedOps,
    ::testing::Values(OpsCase{DType::bf16, KVLayout::NHD, 1, false}, OpsCase{DType::bf16, KVLayout::HND, 1, false},
                      OpsCase{DType::f32, KVLayout::NHD, 5, false}, OpsCase{DType::f16, KVLayout::HND, 5, true},
                      OpsCase{DType::bf16, KVLayout::NHD, 16, true}, OpsCase{DType::f32, KVLayout::HND, 16, false},
                      OpsCase{DType::f16, KVLayout::NHD, 256, false}, OpsCase{DType::bf16, KVLayout::HND, 256, true},
                      OpsCase{DType::e4m3, KVLayout::NHD, 5, false}),
    [](const ::testing::TestParamInfo<OpsCase>& info) {
      const OpsCase& c = info.param;
      return std::string(dtype_name(c.dtype)) + "_" + kv_layout_name(c.layout) + "_p" + std::to_string(c.page_size) +
             (c.combined ? "_combined" : "");
    });

}  // namespace
}  // namespace tessera::testing
