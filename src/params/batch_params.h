// Typed parameters of BatchAttention::run(), handed from the API layer to dispatch and the
// backends. The plan itself is read from the workspace (layout decoded here once).
#pragma once

#include <cstddef>
#include <cstdint>

#include "params/attention_params.h"
#include "params/paged_params.h"
#include "plan/batch_plan.h"
#include "tessera/paged_kv.h"

namespace tessera {

struct BatchRunParams {
  Device device;
  DType dtype = DType::bf16;  // of q, the cache and out
  int heads_q = 0;
  int heads_kv = 0;
  int head_dim = 0;
  std::int64_t total_q = 0;
  // Of the current plan (host summary): split query rows and their mean partials per row
  // (rounded up); a hint for the merge launch's shape, and an eager run leaves the merge out
  // when merge_rows is 0, so it must be the plan's in the workspace (it is: run() takes it from
  // the summary of the last plan(), and a failed plan() leaves none). -1: unknown (the merge runs).
  int merge_rows = -1;
  int merge_fan_in = 0;
  // Of the current plan (host summary): prefill-shaped and decode-shaped work items. A hint for
  // the launch shape only (TESSERA_CUDA_BATCH=sm90-coresident runs a batch without prefill
  // items on the plain decode grid; an eager run, not being captured, leaves out a kernel whose
  // kind of item the plan has none of, so a 0 must be the workspace plan's, as merge_rows),
  // never for what is computed: every launch sequence the backend picks from these while
  // capturing runs any plan of the layout correctly, so a graph captured with one plan stays
  // correct after a new plan() into the same workspace. -1: unknown.
  int prefill_items = -1;
  int decode_items = -1;
  // The same plan's work (plan::PlanSummary): prefill items' query rows x keys and decode
  // items' keys, summed over KV heads; a hint for TESSERA_CUDA_BATCH=sm90-split's SM share.
  std::int64_t prefill_row_keys = -1;
  std::int64_t decode_keys = -1;

  // q and out are (total_q, heads_q, head_dim): row = token, batch stride unused.
  StridedPtr q, o;
  // (heads_q, total_q) fp32: offset(0, row, head); ptr nullptr when LSE is not requested.
  LsePtr lse;

  PagedCacheParams cache;
  PageTableParams table;

  void* workspace = nullptr;  // holds the plan (see plan/batch_plan.h) and the partial buffers
  std::size_t workspace_bytes = 0;
  plan::WorkspaceLayout layout;

  MaskOptions mask;  // scale resolved
  void* stream = nullptr;
  int num_threads = 0;
};

// Validation shared by the paged-cache entry points (append_paged_kv, copy_pages,
// BatchAttention::run); defined in src/api/paged_kv.cpp. They throw tessera::Error naming
// the argument ("cache.k_pages", "table.kv_indices[5]", ...) and write nothing.
namespace api {

// k/v present, rank 4, same shape, dtype and device, unit stride on head_dim, non-negative
// strides, a floating dtype (fp32, fp16, bf16, fp8), non-empty pages.
PagedCacheParams build_paged_cache_params(const PagedKVCache& cache);

// int32 rank-1 arrays on the cache's device with sizes (batch + 1, indptr[batch], batch) where
// batch = kv_last_page_len size. For host-visible (cpu) tables also the values: indptr starts
// at 0 and never decreases, indptr[batch] == kv_indices size, kv_last_page_len in
// 1..page_size (0 only for a request without pages), page indices in [0, num_pages).
PageTableParams build_page_table_params(const PageTable& table, const PagedCacheParams& cache, const Device& device);

// kv_len of request b of a host-visible table.
inline std::int64_t table_kv_len(const PageTableParams& t, int page_size, int b) {
  const std::int64_t pages = t.indptr[b + 1] - t.indptr[b];
  return pages == 0 ? 0 : (pages - 1) * page_size + t.last_page_len[b];
}

}  // namespace api
}  // namespace tessera
