// Public paged-cache operations: validate every argument, build params, dispatch.
//
// Rules beyond the shapes (documented here because the header states only the contract):
//  - append_paged_kv: the pages that receive new tokens belong to one request each (two
//    requests writing one page would race), checked for host-visible tables.
//  - copy_pages: dst pages are distinct and none is also a src page, so every copy reads
//    pages nobody writes and the copies may run in any order (in parallel) with one result.
#include <algorithm>
#include <climits>
#include <string>
#include <utility>
#include <vector>

#include "api/validate.h"
#include "dispatch/dispatch.h"
#include "params/batch_params.h"
#include "params/paged_params.h"
#include "tessera/paged_kv.h"

namespace tessera {
namespace api {
namespace {

using validate::fail;
using validate::str;

void on_device(const Tensor& t, const char* name, const Device& device, const char* ref) {
  if (!(t.device == device))
    fail(ErrorCode::invalid_argument, name, "device " + device_name(device) + " (as " + ref + ")",
         "device " + device_name(t.device));
}

// An int32 vector on `device`, contiguous.
void int_array(const Tensor& t, const char* name, const Device& device, const char* dims) {
  validate::rank(t, name, 1, dims);
  validate::dtype_is(t, name, DType::i32);
  on_device(t, name, device, "the cache");
  validate::unit_stride(t, name, 0, "its only dim");
}

}  // namespace

PagedCacheParams build_paged_cache_params(const PagedKVCache& cache) {
  const bool nhd = cache.layout == KVLayout::NHD;
  if (cache.layout != KVLayout::NHD && cache.layout != KVLayout::HND)
    fail(ErrorCode::invalid_argument, "cache.layout", "NHD or HND", str(static_cast<int>(cache.layout)));
  const char* dims = nhd ? "(num_pages, page_size, heads_kv, head_dim)" : "(num_pages, heads_kv, page_size, head_dim)";
  const Tensor& k = cache.k_pages;
  const Tensor& v = cache.v_pages;
  validate::rank(k, "cache.k_pages", 4, dims);
  validate::rank(v, "cache.v_pages", 4, dims);
  validate::dtype_in(k, "cache.k_pages", {DType::f32, DType::f16, DType::bf16, DType::e4m3, DType::e5m2});
  validate::same_dtype(v, "cache.v_pages", k, "cache.k_pages");
  validate::same_device(v, "cache.v_pages", k, "cache.k_pages");
  for (int d = 0; d < 4; ++d)
    if (v.shape[d] != k.shape[d])
      fail(ErrorCode::invalid_argument, "cache.v_pages", "shape " + k.shape_string() + " (as cache.k_pages)",
           "shape " + v.shape_string());
  validate::unit_stride(k, "cache.k_pages", 3, "head_dim");
  validate::unit_stride(v, "cache.v_pages", 3, "head_dim");
  validate::non_negative_strides(k, "cache.k_pages");
  validate::non_negative_strides(v, "cache.v_pages");
  const int page_dim = nhd ? 1 : 2, head_dim_ = nhd ? 2 : 1;
  if (k.shape[page_dim] < 1 || k.shape[head_dim_] < 1 || k.shape[3] < 1)
    fail(ErrorCode::invalid_argument, "cache.k_pages", std::string("page_size, heads_kv and head_dim >= 1 in ") + dims,
         "shape " + k.shape_string());
  if (k.shape[0] > INT32_MAX || k.shape[page_dim] > INT32_MAX || k.shape[head_dim_] > INT32_MAX ||
      k.shape[3] > INT32_MAX)
    fail(ErrorCode::invalid_argument, "cache.k_pages", "sizes below 2^31 (int32 page indices)",
         "shape " + k.shape_string());

  PagedCacheParams p;
  p.k = k.data;
  p.v = v.data;
  p.dtype = k.dtype;
  p.layout = cache.layout;
  p.num_pages = static_cast<int>(k.shape[0]);
  p.page_size = static_cast<int>(k.shape[page_dim]);
  p.heads_kv = static_cast<int>(k.shape[head_dim_]);
  p.head_dim = static_cast<int>(k.shape[3]);
  p.k_page = k.stride[0];
  p.k_token = k.stride[page_dim];
  p.k_head = k.stride[head_dim_];
  p.v_page = v.stride[0];
  p.v_token = v.stride[page_dim];
  p.v_head = v.stride[head_dim_];
  return p;
}

PageTableParams build_page_table_params(const PageTable& table, const PagedCacheParams& cache, const Device& device) {
  int_array(table.kv_last_page_len, "table.kv_last_page_len", device, "(batch)");
  const std::int64_t batch = table.kv_last_page_len.shape[0];
  if (batch >= INT32_MAX)
    fail(ErrorCode::invalid_argument, "table.kv_last_page_len", "fewer than 2^31 - 1 requests", str(batch));
  int_array(table.kv_indptr, "table.kv_indptr", device, "(batch + 1)");
  validate::dim_equals(table.kv_indptr, "table.kv_indptr", 0, batch + 1, "batch + 1, batch from kv_last_page_len");
  int_array(table.kv_indices, "table.kv_indices", device, "(kv_indptr[batch])");

  PageTableParams p;
  p.batch = static_cast<int>(batch);
  p.indptr = table.kv_indptr.ptr<const std::int32_t>();
  p.indices = table.kv_indices.ptr<const std::int32_t>();
  p.last_page_len = table.kv_last_page_len.ptr<const std::int32_t>();
  p.host_visible = device.kind == DeviceKind::cpu;
  if (!p.host_visible) return p;

  if (p.indptr[0] != 0) fail(ErrorCode::invalid_argument, "table.kv_indptr[0]", "0", str(p.indptr[0]));
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int32_t pages = p.indptr[b + 1] - p.indptr[b];
    if (p.indptr[b + 1] < p.indptr[b])
      fail(ErrorCode::invalid_argument, "table.kv_indptr[" + str(b + 1) + "]",
           "a value >= kv_indptr[" + str(b) + "] = " + str(p.indptr[b]), str(p.indptr[b + 1]));
    const std::int32_t last = p.last_page_len[b];
    if (pages == 0 ? last != 0 : (last < 1 || last > cache.page_size))
      fail(ErrorCode::invalid_argument, "table.kv_last_page_len[" + str(b) + "]",
           pages == 0 ? std::string("0 (request ") + str(b) + " has no pages)"
                      : "a value in [1, page_size = " + str(cache.page_size) + "]",
           str(last));
  }
  if (p.indptr[batch] != table.kv_indices.shape[0])
    fail(ErrorCode::invalid_argument, "table.kv_indices",
         "size kv_indptr[batch] = " + str(p.indptr[batch]), "size " + str(table.kv_indices.shape[0]));
  for (std::int64_t i = 0; i < table.kv_indices.shape[0]; ++i)
    if (p.indices[i] < 0 || p.indices[i] >= cache.num_pages)
      fail(ErrorCode::invalid_argument, "table.kv_indices[" + str(i) + "]",
           "a page index in [0, num_pages = " + str(cache.num_pages) + ")", str(p.indices[i]));
  return p;
}

}  // namespace api

namespace {

// append_paged_kv and copy_pages write the cache: each page tensor must be free of overlapping
// elements and apart from the other (K and V in one buffer would be written over each other).
// copy_pages may take one tensor as both (a shared latent cache, as MLA keeps): it copies the
// same bytes twice.
void check_cache_writable(const PagedKVCache& cache, bool allow_same_tensor) {
  validate::no_internal_overlap(cache.k_pages, "cache.k_pages");
  validate::no_internal_overlap(cache.v_pages, "cache.v_pages");
  if (!(allow_same_tensor && validate::same_view(cache.k_pages, cache.v_pages)))
    validate::disjoint(cache.v_pages, "cache.v_pages", cache.k_pages, "cache.k_pages");
}

using validate::fail;
using validate::str;

// (rows, heads_kv, head_dim) tokens in the cache's dtype and device.
void new_tokens(const Tensor& t, const char* name, const PagedCacheParams& c, const Tensor& ref) {
  validate::rank(t, name, 3, "(total_new, heads_kv, head_dim)");
  validate::dtype_is(t, name, c.dtype);
  validate::same_device(t, name, ref, "cache.k_pages");
  validate::dim_equals(t, name, 1, c.heads_kv, "heads_kv of the cache");
  validate::dim_equals(t, name, 2, c.head_dim, "head_dim of the cache");
  validate::unit_stride(t, name, 2, "head_dim");
  validate::non_negative_strides(t, name);
}
}  // namespace

void append_paged_kv(const PagedKVCache& cache, const PageTable& table, const Tensor& append_indptr,
                     const Tensor& new_k, const Tensor& new_v, const ExecutionContext& ctx) {
  validate::FunctionScope scope("append_paged_kv");
  validate::execution_context(ctx);
  const PagedCacheParams c = api::build_paged_cache_params(cache);
  check_cache_writable(cache, false);
  const Device device = cache.k_pages.device;
  const PageTableParams t = api::build_page_table_params(table, c, device);
  validate::rank(append_indptr, "append_indptr", 1, "(batch + 1)");
  validate::dtype_is(append_indptr, "append_indptr", DType::i32);
  validate::same_device(append_indptr, "append_indptr", cache.k_pages, "cache.k_pages");
  validate::dim_equals(append_indptr, "append_indptr", 0, static_cast<std::int64_t>(t.batch) + 1,
                       "batch + 1, batch of the page table");
  validate::unit_stride(append_indptr, "append_indptr", 0, "its only dim");
  new_tokens(new_k, "new_k", c, cache.k_pages);
  new_tokens(new_v, "new_v", c, cache.k_pages);
  // The new tokens are read while the pages are written: not inside them.
  for (const auto& [t, name] : {std::pair{&new_k, "new_k"}, std::pair{&new_v, "new_v"}}) {
    validate::disjoint(*t, name, cache.k_pages, "cache.k_pages");
    validate::disjoint(*t, name, cache.v_pages, "cache.v_pages");
  }
  const std::int64_t total_new = new_k.shape[0];
  validate::dim_equals(new_v, "new_v", 0, total_new, "total_new, as new_k");
  if (total_new > INT32_MAX) fail(ErrorCode::invalid_argument, "new_k", "fewer than 2^31 rows", str(total_new));

  const auto* ai = append_indptr.ptr<const std::int32_t>();
  if (t.host_visible) {
    if (ai[0] != 0) fail(ErrorCode::invalid_argument, "append_indptr[0]", "0", str(ai[0]));
    // Pages receiving tokens, to check that no two requests write one page.
    std::vector<std::pair<std::int32_t, std::int64_t>> written;  // (page, position in kv_indices)
    for (int b = 0; b < t.batch; ++b) {
      if (ai[b + 1] < ai[b])
        fail(ErrorCode::invalid_argument, "append_indptr[" + str(b + 1) + "]",
             "a value >= append_indptr[" + str(b) + "] = " + str(ai[b]), str(ai[b + 1]));
      const std::int64_t n = ai[b + 1] - ai[b];
      const std::int64_t kv_len = api::table_kv_len(t, c.page_size, b);
      if (n > kv_len)
        fail(ErrorCode::invalid_argument, "append_indptr[" + str(b + 1) + "]",
             "at most kv_len = " + str(kv_len) + " new tokens for request " + str(b) +
                 " (the table describes the cache after the append)",
             str(n) + " new tokens");
      if (n == 0) continue;
      for (std::int64_t j = (kv_len - n) / c.page_size; j <= (kv_len - 1) / c.page_size; ++j)
        written.emplace_back(t.indices[t.indptr[b] + j], t.indptr[b] + j);
    }
    if (ai[t.batch] != total_new)
      fail(ErrorCode::invalid_argument, "append_indptr[" + str(t.batch) + "]",
           "total_new = " + str(total_new) + " (rows of new_k)", str(ai[t.batch]));
    std::sort(written.begin(), written.end());
    for (std::size_t i = 1; i < written.size(); ++i)
      if (written[i].first == written[i - 1].first)
        fail(ErrorCode::invalid_argument, "table.kv_indices[" + str(written[i].second) + "]",
             "pages receiving new tokens to appear once (as table.kv_indices[" + str(written[i - 1].second) + "])",
             "page " + str(written[i].first) + " again");
  }

  AppendParams p;
  p.device = device;
  p.cache = c;
  p.table = t;
  p.append_indptr = ai;
  p.total_new = total_new;
  p.new_k = {new_k.data, 0, new_k.stride[0], new_k.stride[1]};
  p.new_v = {new_v.data, 0, new_v.stride[0], new_v.stride[1]};
  p.stream = ctx.stream;
  p.num_threads = ctx.num_threads;
  if (total_new == 0) return;
  dispatch::append_paged_kv(p);
}

void copy_pages(const PagedKVCache& cache, const Tensor& src_pages, const Tensor& dst_pages,
                const ExecutionContext& ctx) {
  validate::FunctionScope scope("copy_pages");
  validate::execution_context(ctx);
  const PagedCacheParams c = api::build_paged_cache_params(cache);
  check_cache_writable(cache, true);
  for (const auto& [t, name] : {std::pair{&src_pages, "src_pages"}, std::pair{&dst_pages, "dst_pages"}}) {
    validate::rank(*t, name, 1, "(count)");
    validate::dtype_is(*t, name, DType::i32);
    validate::same_device(*t, name, cache.k_pages, "cache.k_pages");
    validate::unit_stride(*t, name, 0, "its only dim");
  }
  const std::int64_t count = src_pages.shape[0];
  validate::dim_equals(dst_pages, "dst_pages", 0, count, "count, as src_pages");
  const auto* src = src_pages.ptr<const std::int32_t>();
  const auto* dst = dst_pages.ptr<const std::int32_t>();
  if (cache.k_pages.device.kind == DeviceKind::cpu && count > 0) {
    for (std::int64_t i = 0; i < count; ++i) {
      if (src[i] < 0 || src[i] >= c.num_pages)
        fail(ErrorCode::invalid_argument, "src_pages[" + str(i) + "]",
             "a page index in [0, num_pages = " + str(c.num_pages) + ")", str(src[i]));
      if (dst[i] < 0 || dst[i] >= c.num_pages)
        fail(ErrorCode::invalid_argument, "dst_pages[" + str(i) + "]",
             "a page index in [0, num_pages = " + str(c.num_pages) + ")", str(dst[i]));
    }
    // Which position first names each page, as src or dst (-1: none).
    std::vector<std::int64_t> as_dst(static_cast<std::size_t>(c.num_pages), -1);
    for (std::int64_t i = 0; i < count; ++i) {
      auto& first = as_dst[static_cast<std::size_t>(dst[i])];
      if (first >= 0)
        fail(ErrorCode::invalid_argument, "dst_pages[" + str(i) + "]",
             "distinct destination pages (page " + str(dst[i]) + " is also dst_pages[" + str(first) + "])",
             str(dst[i]));
      first = i;
    }
    for (std::int64_t i = 0; i < count; ++i) {
      const std::int64_t j = as_dst[static_cast<std::size_t>(src[i])];
      if (j >= 0)
        fail(ErrorCode::invalid_argument, "dst_pages[" + str(j) + "]",
             "a page that is not also a source (page " + str(src[i]) + " is src_pages[" + str(i) +
                 "]; copies run in parallel)",
             str(dst[j]));
    }
  }
  CopyPagesParams p;
  p.device = cache.k_pages.device;
  p.cache = c;
  p.src = src;
  p.dst = dst;
  p.count = count;
  p.stream = ctx.stream;
  p.num_threads = ctx.num_threads;
  if (count == 0) return;
  dispatch::copy_pages(p);
}

}  // namespace tessera
