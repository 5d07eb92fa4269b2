// Typed parameters of the paged KV cache operations and of batch attention.
#pragma once

#include <cstdint>

#include "params/attention_params.h"
#include "tessera/paged_kv.h"

namespace tessera {

// Element (page p, token t of the page, kv head h, dim d) is at
//   p * page + t * token + h * head + d
// for both layouts (the strides encode NHD or HND).
struct PagedCacheParams {
  void* k = nullptr;
  void* v = nullptr;
  DType dtype = DType::bf16;
  KVLayout layout = KVLayout::NHD;
  int num_pages = 0;
  int page_size = 0;
  int heads_kv = 0;
  int head_dim = 0;
  std::int64_t k_page = 0, k_token = 0, k_head = 0;
  std::int64_t v_page = 0, v_token = 0, v_head = 0;
};

struct PageTableParams {
  int batch = 0;
  const std::int32_t* indptr = nullptr;         // batch + 1
  const std::int32_t* indices = nullptr;        // indptr[batch]
  const std::int32_t* last_page_len = nullptr;  // batch
  bool host_visible = false;                    // validated element by element when true
};

struct AppendParams {
  Device device;
  PagedCacheParams cache;
  PageTableParams table;
  const std::int32_t* append_indptr = nullptr;  // batch + 1, same memory as the table
  std::int64_t total_new = 0;
  StridedPtr new_k, new_v;  // (total_new, heads_kv, head_dim): batch stride unused
  void* stream = nullptr;
  int num_threads = 0;
};

struct CopyPagesParams {
  Device device;
  PagedCacheParams cache;
  const std::int32_t* src = nullptr;
  const std::int32_t* dst = nullptr;
  std::int64_t count = 0;
  void* stream = nullptr;
  int num_threads = 0;
};

}  // namespace tessera
