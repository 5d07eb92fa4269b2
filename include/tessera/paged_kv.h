// tessera: the paged KV cache, its CSR page table, and a host-side page pool.
//
// A cache holds num_pages pages of page_size tokens. Layout NHD stores a page as
// (page_size, heads_kv, head_dim), HND as (heads_kv, page_size, head_dim). K and V are two
// tensors, or one tensor with a K/V axis (num_pages, 2, ...) split by from_combined().
//
// Page table (CSR, int32): request b owns pages kv_indices[kv_indptr[b] .. kv_indptr[b+1]),
// in token order; its last page holds kv_last_page_len[b] tokens (1..page_size), so
//   kv_len(b) = (n_pages(b) - 1) * page_size + kv_last_page_len[b]   (0 when n_pages(b) = 0,
// in which case kv_last_page_len[b] must be 0).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessera/options.h"
#include "tessera/tensor.h"

namespace tessera {

enum class KVLayout : std::uint8_t { NHD, HND };
const char* kv_layout_name(KVLayout layout) noexcept;

struct PagedKVCache {
  Tensor k_pages;  // NHD: (num_pages, page_size, heads_kv, head_dim); HND: (num_pages, heads_kv, page_size, head_dim)
  Tensor v_pages;  // same shape and dtype as k_pages
  KVLayout layout = KVLayout::NHD;

  // Views of one tensor with a K/V axis: (num_pages, 2, <page layout>).
  static PagedKVCache from_combined(const Tensor& kv_pages, KVLayout layout);

  std::int64_t num_pages() const { return k_pages.shape[0]; }
  std::int64_t page_size() const { return k_pages.shape[layout == KVLayout::NHD ? 1 : 2]; }
  std::int64_t heads_kv() const { return k_pages.shape[layout == KVLayout::NHD ? 2 : 1]; }
  std::int64_t head_dim() const { return k_pages.shape[3]; }
};

// Views of the three int32 arrays (host or device memory).
struct PageTable {
  Tensor kv_indptr;         // (batch + 1)
  Tensor kv_indices;        // (kv_indptr[batch])
  Tensor kv_last_page_len;  // (batch)
};

// The same table owned on the host, e.g. produced by a PagePool or a block-table conversion.
struct HostPageTable {
  std::vector<std::int32_t> kv_indptr{0};
  std::vector<std::int32_t> kv_indices;
  std::vector<std::int32_t> kv_last_page_len;
  int page_size = 0;

  int batch() const { return static_cast<int>(kv_last_page_len.size()); }
  std::int64_t kv_len(int b) const;
  std::vector<std::int32_t> kv_lens() const;
  PageTable view();  // host views into the vectors above (valid while *this lives unchanged)
};

// Converts a (batch, max_pages) int32 block table (row b lists request b's pages; entries
// past the used ones are ignored) and per-request token counts into the CSR form.
HostPageTable block_table_to_page_table(const Tensor& block_table, std::span<const std::int32_t> kv_lens,
                                        int page_size);

// Host-side allocator of page indices. Sequences are created, grow by appended tokens
// (taking fresh pages when their last page is full) and are freed, returning their pages.
// Deterministic: free pages are reused lowest index first.
class PagePool {
 public:
  PagePool(int num_pages, int page_size);

  int num_pages() const { return num_pages_; }
  int page_size() const { return page_size_; }
  int free_pages() const { return static_cast<int>(free_.size()); }

  int create_sequence();                       // returns a new sequence id
  // Grows sequence `seq` by `num_tokens`; throws (changing nothing) if pages run out.
  void append_tokens(int seq, int num_tokens);
  void free_sequence(int seq);                 // returns its pages to the pool
  bool has_sequence(int seq) const;
  std::int64_t length(int seq) const;          // tokens held
  const std::vector<std::int32_t>& pages(int seq) const;
  // Pages a sequence of `num_tokens` more tokens would need beyond what it holds.
  int pages_needed(int seq, int num_tokens) const;

  // CSR table of the given sequences, in that order.
  HostPageTable page_table(std::span<const int> seqs) const;

 private:
  struct Sequence { std::vector<std::int32_t> pages; std::int64_t length = 0; bool live = false; };
  const Sequence& live_sequence(int seq, const char* argument) const;
  int num_pages_;
  int page_size_;
  std::vector<std::int32_t> free_;  // kept sorted descending so back() is the lowest index
  std::vector<Sequence> seqs_;
};

// Writes the new tokens' K/V into their pages. `table` describes every request *after* the
// append; request b's new tokens are rows append_indptr[b] .. append_indptr[b+1] of
// new_k/new_v (total_new, heads_kv, head_dim) and become its last positions.
void append_paged_kv(const PagedKVCache& cache, const PageTable& table, const Tensor& append_indptr,
                     const Tensor& new_k, const Tensor& new_v, const ExecutionContext& ctx = {});

// Copies whole pages: page dst[i] := page src[i] (K and V), for prefix sharing / copy-on-write.
void copy_pages(const PagedKVCache& cache, const Tensor& src_pages, const Tensor& dst_pages,
                const ExecutionContext& ctx = {});

}  // namespace tessera
