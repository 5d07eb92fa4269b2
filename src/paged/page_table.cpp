// Host-side page tables: names, combined-cache views, CSR tables, block-table conversion and
// the page pool.
#include <algorithm>
#include <climits>
#include <functional>
#include <string>

#include "api/validate.h"
#include "tessera/error.h"
#include "tessera/paged_kv.h"

namespace tessera {

const char* kv_layout_name(KVLayout layout) noexcept {
  switch (layout) {
    case KVLayout::NHD: return "NHD";
    case KVLayout::HND: return "HND";
  }
  return "unknown";
}

PagedKVCache PagedKVCache::from_combined(const Tensor& kv_pages, KVLayout layout) {
  validate::FunctionScope scope("PagedKVCache::from_combined");
  validate::rank(kv_pages, "kv_pages", 5, "(num_pages, 2, <page layout>)");
  validate::dim_equals(kv_pages, "kv_pages", 1, 2, "the K/V axis");
  if (layout != KVLayout::NHD && layout != KVLayout::HND)
    validate::fail(ErrorCode::invalid_argument, "layout", "NHD or HND", std::to_string(static_cast<int>(layout)));
  // K is index 0 of the K/V axis, V index 1; both keep the other four dims and strides.
  auto select = [&](int which) {
    Tensor t;
    t.dtype = kv_pages.dtype;
    t.device = kv_pages.device;
    t.rank = 4;
    const int dims[4] = {0, 2, 3, 4};
    for (int i = 0; i < 4; ++i) {
      t.shape[i] = kv_pages.shape[dims[i]];
      t.stride[i] = kv_pages.stride[dims[i]];
    }
    t.data = kv_pages.data == nullptr
                 ? nullptr
                 : static_cast<unsigned char*>(kv_pages.data) +
                       which * kv_pages.stride[1] * static_cast<std::int64_t>(dtype_size(kv_pages.dtype));
    return t;
  };
  PagedKVCache cache;
  cache.k_pages = select(0);
  cache.v_pages = select(1);
  cache.layout = layout;
  return cache;
}

// ---- HostPageTable -------------------------------------------------------------------------

std::int64_t HostPageTable::kv_len(int b) const {
  const std::int64_t pages = kv_indptr[static_cast<std::size_t>(b) + 1] - kv_indptr[static_cast<std::size_t>(b)];
  return pages == 0 ? 0 : (pages - 1) * page_size + kv_last_page_len[static_cast<std::size_t>(b)];
}

std::vector<std::int32_t> HostPageTable::kv_lens() const {
  std::vector<std::int32_t> lens(static_cast<std::size_t>(batch()));
  for (int b = 0; b < batch(); ++b) lens[static_cast<std::size_t>(b)] = static_cast<std::int32_t>(kv_len(b));
  return lens;
}

PageTable HostPageTable::view() {
  PageTable t;
  t.kv_indptr = Tensor(kv_indptr.data(), DType::i32, {static_cast<std::int64_t>(kv_indptr.size())});
  t.kv_indices = Tensor(kv_indices.data(), DType::i32, {static_cast<std::int64_t>(kv_indices.size())});
  t.kv_last_page_len =
      Tensor(kv_last_page_len.data(), DType::i32, {static_cast<std::int64_t>(kv_last_page_len.size())});
  return t;
}

HostPageTable block_table_to_page_table(const Tensor& block_table, std::span<const std::int32_t> kv_lens,
                                        int page_size) {
  using validate::fail;
  using validate::str;
  validate::FunctionScope scope("block_table_to_page_table");
  if (page_size < 1) fail(ErrorCode::invalid_argument, "page_size", ">= 1", str(page_size));
  validate::rank(block_table, "block_table", 2, "(batch, max_pages)");
  validate::dtype_is(block_table, "block_table", DType::i32);
  validate::non_negative_strides(block_table, "block_table");
  if (block_table.device.kind != DeviceKind::cpu)
    fail(ErrorCode::invalid_argument, "block_table", "host (cpu) memory", device_name(block_table.device));
  const std::int64_t batch = block_table.shape[0], max_pages = block_table.shape[1];
  if (static_cast<std::int64_t>(kv_lens.size()) != batch)
    fail(ErrorCode::invalid_argument, "kv_lens", "size " + str(batch) + " (block_table rows)",
         "size " + str(static_cast<std::int64_t>(kv_lens.size())));
  // Validate everything before building anything.
  std::int64_t total_pages = 0;
  const auto* bt = block_table.ptr<const std::int32_t>();
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t len = kv_lens[static_cast<std::size_t>(b)];
    if (len < 0 || len > max_pages * page_size)
      fail(ErrorCode::invalid_argument, "kv_lens[" + str(b) + "]",
           "a length in [0, max_pages * page_size = " + str(max_pages * page_size) + "]", str(len));
    const std::int64_t used = (len + page_size - 1) / page_size;
    for (std::int64_t j = 0; j < used; ++j) {
      const std::int32_t page = bt[b * block_table.stride[0] + j * block_table.stride[1]];
      if (page < 0)
        fail(ErrorCode::invalid_argument, "block_table[" + str(b) + "][" + str(j) + "]", "a page index >= 0",
             str(page));
    }
    total_pages += used;
  }
  if (total_pages > INT32_MAX)
    fail(ErrorCode::invalid_argument, "kv_lens", "at most 2^31 - 1 pages in total", str(total_pages));

  HostPageTable t;
  t.page_size = page_size;
  t.kv_indices.reserve(static_cast<std::size_t>(total_pages));
  t.kv_last_page_len.reserve(static_cast<std::size_t>(batch));
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t len = kv_lens[static_cast<std::size_t>(b)];
    const std::int64_t used = (len + page_size - 1) / page_size;
    for (std::int64_t j = 0; j < used; ++j)
      t.kv_indices.push_back(bt[b * block_table.stride[0] + j * block_table.stride[1]]);
    t.kv_indptr.push_back(static_cast<std::int32_t>(t.kv_indices.size()));
    t.kv_last_page_len.push_back(static_cast<std::int32_t>(len == 0 ? 0 : len - (used - 1) * page_size));
  }
  return t;
}

// ---- PagePool ------------------------------------------------------------------------------

PagePool::PagePool(int num_pages, int page_size) : num_pages_(num_pages), page_size_(page_size) {
  validate::FunctionScope scope("PagePool");
  if (num_pages < 0) validate::fail(ErrorCode::invalid_argument, "num_pages", ">= 0", validate::str(num_pages));
  if (page_size < 1) validate::fail(ErrorCode::invalid_argument, "page_size", ">= 1", validate::str(page_size));
  free_.resize(static_cast<std::size_t>(num_pages));
  for (int i = 0; i < num_pages; ++i) free_[static_cast<std::size_t>(i)] = num_pages - 1 - i;
}

const PagePool::Sequence& PagePool::live_sequence(int seq, const char* argument) const {
  if (seq < 0 || seq >= static_cast<int>(seqs_.size()) || !seqs_[static_cast<std::size_t>(seq)].live)
    validate::fail(ErrorCode::invalid_argument, argument, "a live sequence id of this pool", validate::str(seq));
  return seqs_[static_cast<std::size_t>(seq)];
}

int PagePool::create_sequence() {
  // Ids are never reused, so a stale id of a freed sequence is always caught.
  Sequence s;
  s.live = true;
  seqs_.push_back(std::move(s));
  return static_cast<int>(seqs_.size()) - 1;
}

bool PagePool::has_sequence(int seq) const {
  return seq >= 0 && seq < static_cast<int>(seqs_.size()) && seqs_[static_cast<std::size_t>(seq)].live;
}

std::int64_t PagePool::length(int seq) const {
  validate::FunctionScope scope("PagePool::length");
  return live_sequence(seq, "seq").length;
}

const std::vector<std::int32_t>& PagePool::pages(int seq) const {
  validate::FunctionScope scope("PagePool::pages");
  return live_sequence(seq, "seq").pages;
}

int PagePool::pages_needed(int seq, int num_tokens) const {
  validate::FunctionScope scope("PagePool::pages_needed");
  const Sequence& s = live_sequence(seq, "seq");
  if (num_tokens < 0) validate::fail(ErrorCode::invalid_argument, "num_tokens", ">= 0", validate::str(num_tokens));
  // As append_tokens: a sequence holds at most 2^31 - 1 tokens, so the count fits an int.
  if (s.length + num_tokens > INT32_MAX)
    validate::fail(ErrorCode::invalid_argument, "num_tokens",
                   "a total length of at most 2^31 - 1 tokens (sequence holds " + validate::str(s.length) + ")",
                   validate::str(num_tokens));
  const std::int64_t total = (s.length + num_tokens + page_size_ - 1) / page_size_;
  return static_cast<int>(total - static_cast<std::int64_t>(s.pages.size()));
}

void PagePool::append_tokens(int seq, int num_tokens) {
  validate::FunctionScope scope("PagePool::append_tokens");
  live_sequence(seq, "seq");
  if (num_tokens < 0) validate::fail(ErrorCode::invalid_argument, "num_tokens", ">= 0", validate::str(num_tokens));
  Sequence& s = seqs_[static_cast<std::size_t>(seq)];
  if (s.length + num_tokens > INT32_MAX)
    validate::fail(ErrorCode::invalid_argument, "num_tokens",
                   "a total length of at most 2^31 - 1 tokens (sequence holds " + validate::str(s.length) + ")",
                   validate::str(num_tokens));
  const int need = pages_needed(seq, num_tokens);
  if (need > free_pages())
    validate::fail(ErrorCode::out_of_memory, "pool",
                   validate::str(need) + " free pages for " + validate::str(num_tokens) + " tokens of sequence " +
                       validate::str(seq) + " (page_size " + validate::str(page_size_) + ")",
                   validate::str(free_pages()) + " free of " + validate::str(num_pages_));
  for (int i = 0; i < need; ++i) {
    s.pages.push_back(free_.back());
    free_.pop_back();
  }
  s.length += num_tokens;
}

void PagePool::free_sequence(int seq) {
  validate::FunctionScope scope("PagePool::free_sequence");
  live_sequence(seq, "seq");
  Sequence& s = seqs_[static_cast<std::size_t>(seq)];
  free_.insert(free_.end(), s.pages.begin(), s.pages.end());
  std::sort(free_.begin(), free_.end(), std::greater<>());  // back() stays the lowest index
  s = Sequence{};
}

HostPageTable PagePool::page_table(std::span<const int> seqs) const {
  validate::FunctionScope scope("PagePool::page_table");
  for (std::size_t i = 0; i < seqs.size(); ++i)
    live_sequence(seqs[i], ("seqs[" + std::to_string(i) + "]").c_str());
  HostPageTable t;
  t.page_size = page_size_;
  for (int id : seqs) {
    const Sequence& s = seqs_[static_cast<std::size_t>(id)];
    t.kv_indices.insert(t.kv_indices.end(), s.pages.begin(), s.pages.end());
    t.kv_indptr.push_back(static_cast<std::int32_t>(t.kv_indices.size()));
    t.kv_last_page_len.push_back(
        static_cast<std::int32_t>(s.length == 0 ? 0 : s.length - (static_cast<std::int64_t>(s.pages.size()) - 1) * page_size_));
  }
  return t;
}

}  // namespace tessera
