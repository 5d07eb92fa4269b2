// CPU paged-cache operations: append new tokens through the page table, copy whole pages.
// Both layouts go through the strides of PagedCacheParams; head_dim rows are contiguous, so
// every (token, head) row is one memcpy.
#include <algorithm>
#include <cstring>

#include "cpu/cpu_backend.h"
#include "cpu/parallel.h"
#include "params/batch_params.h"

namespace tessera::cpu {

void append_paged_kv(const AppendParams& p) {
  const auto& c = p.cache;
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(c.dtype));
  const std::size_t row_bytes = static_cast<std::size_t>(c.head_dim * elem);
  auto* k_base = static_cast<unsigned char*>(c.k);
  auto* v_base = static_cast<unsigned char*>(c.v);
  const auto* nk = static_cast<const unsigned char*>(p.new_k.ptr);
  const auto* nv = static_cast<const unsigned char*>(p.new_v.ptr);
  const std::int32_t* ai = p.append_indptr;
  const int batch = p.table.batch;

  // Each new row goes to a distinct (page, slot) (validated), so rows are independent.
  parallel_for(p.total_new, p.num_threads, [&](std::int64_t begin, std::int64_t end) {
    // Request of the first row, then walk forward.
    int b = static_cast<int>(std::upper_bound(ai, ai + batch + 1, static_cast<std::int32_t>(begin)) - ai) - 1;
    for (std::int64_t i = begin; i < end; ++i) {
      while (ai[b + 1] <= i) ++b;
      const std::int64_t kv_len = api::table_kv_len(p.table, c.page_size, b);
      const std::int64_t pos = kv_len - (ai[b + 1] - ai[b]) + (i - ai[b]);
      const std::int64_t page = p.table.indices[p.table.indptr[b] + pos / c.page_size];
      const std::int64_t slot = pos % c.page_size;
      for (int h = 0; h < c.heads_kv; ++h) {
        std::memcpy(k_base + (page * c.k_page + slot * c.k_token + h * c.k_head) * elem,
                    nk + (i * p.new_k.row + h * p.new_k.head) * elem, row_bytes);
        std::memcpy(v_base + (page * c.v_page + slot * c.v_token + h * c.v_head) * elem,
                    nv + (i * p.new_v.row + h * p.new_v.head) * elem, row_bytes);
      }
    }
  });
}

void copy_pages(const CopyPagesParams& p) {
  const auto& c = p.cache;
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(c.dtype));
  const std::size_t row_bytes = static_cast<std::size_t>(c.head_dim * elem);
  auto* k_base = static_cast<unsigned char*>(c.k);
  auto* v_base = static_cast<unsigned char*>(c.v);
  // dst pages are distinct and never sources (validated): copies are independent.
  parallel_for(p.count, p.num_threads, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const std::int64_t s = p.src[i], d = p.dst[i];
      for (int t = 0; t < c.page_size; ++t)
        for (int h = 0; h < c.heads_kv; ++h) {
          std::memcpy(k_base + (d * c.k_page + t * c.k_token + h * c.k_head) * elem,
                      k_base + (s * c.k_page + t * c.k_token + h * c.k_head) * elem, row_bytes);
          std::memcpy(v_base + (d * c.v_page + t * c.v_token + h * c.v_head) * elem,
                      v_base + (s * c.v_page + t * c.v_token + h * c.v_head) * elem, row_bytes);
        }
    }
  });
}

}  // namespace tessera::cpu
