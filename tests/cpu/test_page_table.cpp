// Page tables: block-table conversion, HostPageTable lengths and views, combined K/V caches.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "support/test_support.h"
#include "tessera/error.h"
#include "tessera/paged_kv.h"

namespace tessera::testing {
namespace {

Error catch_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no tessera::Error thrown";
  return Error(ErrorCode::backend_failure, "", "");
}

void expect_error(const std::function<void()>& f, ErrorCode code, const std::string& argument) {
  const Error e = catch_error(f);
  EXPECT_EQ(e.code(), code) << e.what();
  EXPECT_EQ(e.argument(), argument) << e.what();
  EXPECT_NE(std::string(e.what()).find(argument + ": expected"), std::string::npos) << e.what();
}

// (batch, max_pages) int32 block table; `pad` unused elements after each row.
HostTensor block_table(const std::vector<std::vector<std::int32_t>>& rows, std::int64_t max_pages,
                       std::int64_t pad = 0) {
  HostTensor t(DType::i32, {static_cast<std::int64_t>(rows.size()), max_pages}, pad);
  for (std::size_t b = 0; b < rows.size(); ++b)
    for (std::int64_t j = 0; j < max_pages; ++j)
      t.set_int(static_cast<std::int64_t>(b) * max_pages + j,
                j < static_cast<std::int64_t>(rows[b].size()) ? rows[b][static_cast<std::size_t>(j)] : -1);
  return t;
}

TEST(PageTable, BlockTableToCsr) {
  for (std::int64_t pad : {0, 3}) {
    // Entries past a request's used pages (here -1) are ignored.
    const HostTensor bt = block_table({{}, {7, 2}, {4, 0, 9, 1}, {3, 5, 6}}, 4, pad);
    const std::vector<std::int32_t> lens{0, 7, 20, 11};
    const HostPageTable t = block_table_to_page_table(bt.view(), lens, 5);
    EXPECT_EQ(t.page_size, 5);
    EXPECT_EQ(t.batch(), 4);
    EXPECT_EQ(t.kv_indptr, (std::vector<std::int32_t>{0, 0, 2, 6, 9}));
    EXPECT_EQ(t.kv_indices, (std::vector<std::int32_t>{7, 2, 4, 0, 9, 1, 3, 5, 6}));
    EXPECT_EQ(t.kv_last_page_len, (std::vector<std::int32_t>{0, 2, 5, 1}));
    EXPECT_EQ(t.kv_lens(), lens);
    for (int b = 0; b < 4; ++b) EXPECT_EQ(t.kv_len(b), lens[static_cast<std::size_t>(b)]);
  }
}

TEST(PageTable, BlockTableWithPageSizeOne) {
  const HostTensor bt = block_table({{1, 2, 3}, {0}}, 3);
  const std::vector<std::int32_t> lens{3, 1};
  const HostPageTable t = block_table_to_page_table(bt.view(), lens, 1);
  EXPECT_EQ(t.kv_indptr, (std::vector<std::int32_t>{0, 3, 4}));
  EXPECT_EQ(t.kv_last_page_len, (std::vector<std::int32_t>{1, 1}));
  EXPECT_EQ(t.kv_lens(), lens);
}

TEST(PageTable, BlockTableErrors) {
  const HostTensor bt = block_table({{1, 2}, {3, -4}}, 2);
  const std::vector<std::int32_t> ok{8, 5};
  expect_error([&] { (void)block_table_to_page_table(bt.view(), ok, 0); }, ErrorCode::invalid_argument, "page_size");
  const std::vector<std::int32_t> short_lens{8};
  expect_error([&] { (void)block_table_to_page_table(bt.view(), short_lens, 4); }, ErrorCode::invalid_argument,
               "kv_lens");
  const std::vector<std::int32_t> too_long{9, 1};
  expect_error([&] { (void)block_table_to_page_table(bt.view(), too_long, 4); }, ErrorCode::invalid_argument,
               "kv_lens[0]");
  const std::vector<std::int32_t> negative{4, -1};
  expect_error([&] { (void)block_table_to_page_table(bt.view(), negative, 4); }, ErrorCode::invalid_argument,
               "kv_lens[1]");
  // Request 1 uses its second page only when kv_len > page_size.
  const std::vector<std::int32_t> uses_bad{8, 5};
  expect_error([&] { (void)block_table_to_page_table(bt.view(), uses_bad, 4); }, ErrorCode::invalid_argument,
               "block_table[1][1]");
  const std::vector<std::int32_t> skips_bad{8, 4};
  EXPECT_NO_THROW((void)block_table_to_page_table(bt.view(), skips_bad, 4));

  HostTensor f(DType::f32, {2, 2});
  expect_error([&] { (void)block_table_to_page_table(f.view(), ok, 4); }, ErrorCode::invalid_argument, "block_table");
  HostTensor r1(DType::i32, {4});
  expect_error([&] { (void)block_table_to_page_table(r1.view(), ok, 4); }, ErrorCode::invalid_argument, "block_table");
  Tensor on_gpu = bt.view();
  on_gpu.device = Device::cuda(0);
  expect_error([&] { (void)block_table_to_page_table(on_gpu, ok, 4); }, ErrorCode::invalid_argument, "block_table");
  // Rows walked backwards from the last (a negative stride, as numpy's [::-1]): refused, as
  // everywhere, not read from before the view's data pointer.
  Tensor reversed = bt.view();
  reversed.data = static_cast<std::int32_t*>(reversed.data) + 2;
  reversed.stride[0] = -2;
  expect_error([&] { (void)block_table_to_page_table(reversed, ok, 4); }, ErrorCode::invalid_argument, "block_table");
}

TEST(PageTable, HostPageTableViewPointsAtItsVectors) {
  HostPageTable t;
  t.page_size = 4;
  t.kv_indptr = {0, 2, 2, 3};
  t.kv_indices = {5, 1, 0};
  t.kv_last_page_len = {3, 0, 4};
  EXPECT_EQ(t.kv_len(0), 7);
  EXPECT_EQ(t.kv_len(1), 0);
  EXPECT_EQ(t.kv_len(2), 4);
  const PageTable v = t.view();
  EXPECT_EQ(v.kv_indptr.data, t.kv_indptr.data());
  EXPECT_EQ(v.kv_indices.data, t.kv_indices.data());
  EXPECT_EQ(v.kv_last_page_len.data, t.kv_last_page_len.data());
  EXPECT_EQ(v.kv_indptr.dtype, DType::i32);
  EXPECT_EQ(v.kv_indptr.rank, 1);
  EXPECT_EQ(v.kv_indptr.shape[0], 4);
  EXPECT_EQ(v.kv_indices.shape[0], 3);
  EXPECT_EQ(v.kv_last_page_len.shape[0], 3);
  // A table with no pages at all still gives present (empty) tensors.
  HostPageTable empty;
  empty.page_size = 4;
  EXPECT_TRUE(empty.view().kv_indices.present());
  EXPECT_EQ(empty.batch(), 0);
}

TEST(PageTable, FromCombined) {
  for (KVLayout layout : {KVLayout::NHD, KVLayout::HND}) {
    // (num_pages, 2, a, b, head_dim) with a padded inner row, so strides are not trivial.
    const std::int64_t a = layout == KVLayout::NHD ? 16 : 4, b = layout == KVLayout::NHD ? 4 : 16;
    HostTensor kv(DType::bf16, {6, 2, a, b, 32}, 8);
    const Tensor t = kv.view();
    const PagedKVCache c = PagedKVCache::from_combined(t, layout);
    EXPECT_EQ(c.layout, layout);
    EXPECT_EQ(c.k_pages.data, t.data);
    EXPECT_EQ(c.v_pages.data, static_cast<unsigned char*>(t.data) + t.stride[1] * 2);
    for (const Tensor* x : {&c.k_pages, &c.v_pages}) {
      EXPECT_EQ(x->rank, 4);
      EXPECT_EQ(x->dtype, DType::bf16);
      const int dims[4] = {0, 2, 3, 4};
      for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(x->shape[i], t.shape[dims[i]]);
        EXPECT_EQ(x->stride[i], t.stride[dims[i]]);
      }
    }
    EXPECT_EQ(c.num_pages(), 6);
    EXPECT_EQ(c.page_size(), 16);
    EXPECT_EQ(c.heads_kv(), 4);
    EXPECT_EQ(c.head_dim(), 32);
  }
  HostTensor r4(DType::bf16, {6, 2, 16, 32});
  expect_error([&] { (void)PagedKVCache::from_combined(r4.view(), KVLayout::NHD); }, ErrorCode::invalid_argument,
               "kv_pages");
  HostTensor three(DType::bf16, {6, 3, 16, 4, 32});
  expect_error([&] { (void)PagedKVCache::from_combined(three.view(), KVLayout::NHD); }, ErrorCode::invalid_argument,
               "kv_pages");
}

TEST(PageTable, LayoutNames) {
  EXPECT_STREQ(kv_layout_name(KVLayout::NHD), "NHD");
  EXPECT_STREQ(kv_layout_name(KVLayout::HND), "HND");
}

}  // namespace
}  // namespace tessera::testing
