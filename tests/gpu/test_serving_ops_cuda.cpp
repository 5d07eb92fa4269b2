// CUDA merge_states, append_paged_kv and copy_pages against an exact host model (page ops
// move bytes, so results must be bit-identical) and a double-precision merge.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gpu/gpu_support.h"
#include "support/test_support.h"
#include "tessera/tessera.h"

namespace tessera::testing {
namespace {

// Exact merge in double: lse = log sum exp(lse_i), o = sum exp(lse_i - lse) o_i.
void merge_reference(const HostTensor& o, const HostTensor& lse, int n, int tokens, int heads, int d,
                     std::vector<double>* out, std::vector<double>* out_lse) {
  out->assign(static_cast<std::size_t>(tokens) * heads * d, 0.0);
  out_lse->assign(static_cast<std::size_t>(tokens) * heads, -INFINITY);
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h) {
      double m = -INFINITY;
      for (int s = 0; s < n; ++s) m = std::max(m, static_cast<double>(lse.get((s * tokens + t) * heads + h)));
      if (m == -INFINITY) continue;
      double sum = 0;
      for (int s = 0; s < n; ++s) sum += std::exp(lse.get((s * tokens + t) * heads + h) - m);
      (*out_lse)[t * heads + h] = m + std::log(sum);
      for (int s = 0; s < n; ++s) {
        const double l = lse.get((s * tokens + t) * heads + h);
        if (l == -INFINITY) continue;
        const double w = std::exp(l - m) / sum;
        for (int j = 0; j < d; ++j)
          (*out)[(t * heads + h) * d + j] += w * o.get(((static_cast<std::int64_t>(s) * tokens + t) * heads + h) * d + j);
      }
    }
}

TEST(ServingOpsCuda, MergeStatesMatchesExactMerge) {
  auto rng = fresh_rng();
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    const int n = 4, tokens = 37, heads = 5, d = 128;
    HostTensor o(dt, {n, tokens, heads, d});
    HostTensor lse(DType::f32, {n, tokens, heads});
    o.fill_normal(rng);
    lse.fill_uniform(rng, -20.0f, 20.0f);
    // Empty states: row 0 entirely empty, and scattered empty states elsewhere.
    for (int s = 0; s < n; ++s)
      for (int h = 0; h < heads; ++h) lse.set((s * tokens + 0) * heads + h, -INFINITY);
    for (int t = 1; t < tokens; t += 3) lse.set((1 * tokens + t) * heads + (t % heads), -INFINITY);
    HostTensor out(dt, {tokens, heads, d}, 8), out_lse(DType::f32, {tokens, heads});
    DeviceTensor d_o(o), d_lse(lse), d_out(out), d_out_lse(out_lse);
    d_out.poison(out);
    d_out_lse.poison(out_lse);
    merge_states(d_o.view(), d_lse.view(), d_out.view(), d_out_lse.view());
    d_out.download(out);
    d_out_lse.download(out_lse);
    std::vector<double> ref, ref_lse;
    merge_reference(o, lse, n, tokens, heads, d, &ref, &ref_lse);
    EXPECT_EQ(out.count_nan(), 0);
    EXPECT_TRUE(out.margins_intact());
    // The LSE too: a NaN would drop out of the std::max below, so an unwritten LSE must fail here.
    EXPECT_EQ(out_lse.count_nan(), 0);
    EXPECT_TRUE(out_lse.margins_intact());
    double err = 0, lse_err = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) err = std::max(err, std::fabs(out.get(i) - ref[i]));
    for (std::size_t i = 0; i < ref_lse.size(); ++i) {
      if (ref_lse[i] == -INFINITY) {
        EXPECT_EQ(out_lse.get(i), -INFINITY) << i;
        continue;
      }
      lse_err = std::max(lse_err, std::fabs(out_lse.get(i) - ref_lse[i]));
    }
    // One rounding of the output to its dtype plus fp32 accumulation over a few states.
    EXPECT_LE(err, rounding_floor(dt, max_abs(ref)) + 1e-5) << dtype_name(dt);
    EXPECT_LE(lse_err, 1e-5);
    for (int h = 0; h < heads; ++h)
      for (int j = 0; j < d; ++j) EXPECT_EQ(out.get(h * d + j), 0.0f);  // all-empty row -> 0
  }
}

struct PagedFixture {
  int page_size, heads = 4, d = 64, num_pages;
  KVLayout layout;
  // Three sequences with existing tokens, one new; each then appends a few tokens.
  std::vector<int> before{0, 7, 300, 1}, added{5, 1, 33, 0};
  HostTensor k, v;  // the cache
  HostPageTable table;
  std::vector<std::int32_t> append_indptr{0};
  HostTensor new_k, new_v;

  PagedFixture(int page_size_, KVLayout layout_, DType dt, std::mt19937_64& rng)
      : page_size(page_size_), layout(layout_) {
    num_pages = 0;
    for (std::size_t i = 0; i < before.size(); ++i) num_pages += (before[i] + added[i] + page_size - 1) / page_size;
    num_pages += 3;  // spare pages stay poisoned
    PagePool pool(num_pages, page_size);
    std::vector<int> seqs;
    for (std::size_t i = 0; i < before.size(); ++i) {
      seqs.push_back(pool.create_sequence());
      pool.append_tokens(seqs.back(), before[i]);
    }
    for (std::size_t i = 0; i < before.size(); ++i) {
      pool.append_tokens(seqs[i], added[i]);
      append_indptr.push_back(append_indptr.back() + added[i]);
    }
    table = pool.page_table(seqs);
    const std::vector<std::int64_t> shape = layout == KVLayout::NHD
                                                ? std::vector<std::int64_t>{num_pages, page_size, heads, d}
                                                : std::vector<std::int64_t>{num_pages, heads, page_size, d};
    k = HostTensor(dt, shape);
    v = HostTensor(dt, shape);
    k.poison();
    v.poison();
    new_k = HostTensor(dt, {append_indptr.back(), heads, d});
    new_v = HostTensor(dt, {append_indptr.back(), heads, d});
    new_k.fill_normal(rng);
    new_v.fill_normal(rng);
  }
};

// The bytes of row (page, slot, head) of a cache tensor of either layout.
unsigned char* cache_row(const HostTensor& t, KVLayout layout, std::int64_t page, std::int64_t slot, std::int64_t h) {
  const std::vector<std::int64_t>& st = t.strides();
  const std::int64_t off = page * st[0] + (layout == KVLayout::NHD ? slot * st[1] + h * st[2] : h * st[1] + slot * st[2]);
  return static_cast<unsigned char*>(t.base()) + off * static_cast<std::int64_t>(dtype_size(t.dtype()));
}

// The exact host model of append_paged_kv, independent of the library's CPU backend: appended
// row j of sequence b (packed row append_indptr[b] + j of `rows`) lands at position
// before[b] + j, in page kv_indices[kv_indptr[b] + pos / page_size], slot pos % page_size.
void model_append(const PagedFixture& f, const HostTensor& rows, HostTensor& cache) {
  const std::size_t row_bytes = static_cast<std::size_t>(f.d) * dtype_size(rows.dtype());
  for (std::size_t b = 0; b < f.before.size(); ++b)
    for (int j = 0; j < f.added[b]; ++j) {
      const std::int64_t pos = f.before[b] + j, i = f.append_indptr[b] + j;
      const std::int64_t page = f.table.kv_indices[static_cast<std::size_t>(f.table.kv_indptr[b] + pos / f.page_size)];
      for (int h = 0; h < f.heads; ++h) {
        const auto* src = static_cast<const unsigned char*>(rows.base()) +
                          (i * rows.strides()[0] + h * rows.strides()[1]) * static_cast<std::int64_t>(dtype_size(rows.dtype()));
        std::memcpy(cache_row(cache, f.layout, page, pos % f.page_size, h), src, row_bytes);
      }
    }
}

// The exact host model of copy_pages: every row of page src[i] onto page dst[i].
void model_copy(const PagedFixture& f, const std::vector<std::int32_t>& src, const std::vector<std::int32_t>& dst,
                HostTensor& cache) {
  const std::size_t row_bytes = static_cast<std::size_t>(f.d) * dtype_size(cache.dtype());
  for (std::size_t i = 0; i < src.size(); ++i)
    for (int t = 0; t < f.page_size; ++t)
      for (int h = 0; h < f.heads; ++h)
        std::memcpy(cache_row(cache, f.layout, dst[i], t, h), cache_row(cache, f.layout, src[i], t, h), row_bytes);
}

TEST(ServingOpsCuda, AppendAndCopyPagesBitIdenticalToCpu) {
  auto rng = fresh_rng();
  // Every element width the kernels have (1, 2 and 4 bytes), page sizes 1 to 256.
  for (int page_size : {1, 5, 16, 128, 256})
    for (KVLayout layout : {KVLayout::NHD, KVLayout::HND})
      for (DType dt : {DType::bf16, DType::f16, DType::f32, DType::e4m3}) {
        SCOPED_TRACE(std::to_string(page_size) + " " + kv_layout_name(layout) + " " + dtype_name(dt));
        PagedFixture f(page_size, layout, dt, rng);
        HostTensor cpu_k = f.k, cpu_v = f.v;  // identical poisoned caches
        // The host model's caches: poisoned, then the appended rows (39 tokens x 4 heads).
        HostTensor want_k = f.k, want_v = f.v;
        model_append(f, f.new_k, want_k);
        model_append(f, f.new_v, want_v);
        ASSERT_FALSE(want_k.bytes() == f.k.bytes()) << "the model appended nothing";
        HostTensor indptr = int_tensor(f.table.kv_indptr), indices = int_tensor(f.table.kv_indices),
                   last = int_tensor(f.table.kv_last_page_len), app = int_tensor(f.append_indptr);

        // CPU model.
        PagedKVCache cpu_cache{cpu_k.view(), cpu_v.view(), layout};
        PageTable cpu_table{indptr.view(), indices.view(), last.view()};
        append_paged_kv(cpu_cache, cpu_table, app.view(), f.new_k.view(), f.new_v.view());

        // GPU.
        DeviceTensor dk(f.k), dv(f.v), dind(indptr), didx(indices), dlast(last), dapp(app), dnk(f.new_k), dnv(f.new_v);
        PagedKVCache gpu_cache{dk.view(), dv.view(), layout};
        PageTable gpu_table{dind.view(), didx.view(), dlast.view()};
        append_paged_kv(gpu_cache, gpu_table, dapp.view(), dnk.view(), dnv.view());
        dk.download(f.k);
        dv.download(f.v);
        // Against the host model (the two backends agreeing is not enough: neither writing
        // anything would leave two equal poisoned caches).
        EXPECT_TRUE(f.k.bytes() == want_k.bytes()) << "append: K differs from the host model";
        EXPECT_TRUE(f.v.bytes() == want_v.bytes()) << "append: V differs from the host model";
        EXPECT_EQ(f.k.bytes(), cpu_k.bytes());
        EXPECT_EQ(f.v.bytes(), cpu_v.bytes());

        // Copy the first two used pages onto the two spare (highest) pages.
        const std::vector<std::int32_t> src{f.table.kv_indices[0], f.table.kv_indices[1]};
        const std::vector<std::int32_t> dst{f.num_pages - 1, f.num_pages - 2};
        HostTensor hs = int_tensor(src), hd = int_tensor(dst);
        copy_pages(cpu_cache, hs.view(), hd.view());
        DeviceTensor ds(hs), dd(hd);
        copy_pages(gpu_cache, ds.view(), dd.view());
        dk.download(f.k);
        dv.download(f.v);
        model_copy(f, src, dst, want_k);
        model_copy(f, src, dst, want_v);
        EXPECT_TRUE(f.k.bytes() == want_k.bytes()) << "copy_pages: K differs from the host model";
        EXPECT_TRUE(f.v.bytes() == want_v.bytes()) << "copy_pages: V differs from the host model";
        EXPECT_EQ(f.k.bytes(), cpu_k.bytes());
        EXPECT_EQ(f.v.bytes(), cpu_v.bytes());
      }
}

}  // namespace
}  // namespace tessera::testing
