// One case per validation rule of append_paged_kv, copy_pages and BatchAttention: each must
// throw tessera::Error with the right code, name the argument in a message of the form
// "<function>: <argument>: expected ..., got ...", and leave the cache and outputs untouched.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "plan/batch_plan.h"
#include "support/test_support.h"
#include "tessera/batch.h"
#include "tessera/error.h"
#include "tessera/paged_kv.h"

namespace tessera::testing {
namespace {

struct Buffer {
  explicit Buffer(std::size_t n) : bytes(n), storage((n + 15) / 16 + 1) {}
  void* data() { return storage.data(); }
  std::size_t bytes;
  std::vector<plan::PlanHeader> storage;
};

Tensor with_stride(Tensor t, int dim, std::int64_t stride) {
  t.stride[dim] = stride;
  return t;
}
Tensor on_cuda(Tensor t) {
  t.device = Device::cuda(0);
  return t;
}

// A valid append: two requests after the append with kv_len 6 (pages 5, 2) and 3 (page 7),
// page_size 4; request 0 appends 2 tokens (page 2), request 1 appends 1 (page 7).
struct Fixture {
  Fixture() {
    auto rng = fresh_rng();
    k.fill_normal(rng);
    v.fill_normal(rng);
    new_k.fill_normal(rng);
    new_v.fill_normal(rng);
  }
  HostTensor k{DType::bf16, {8, 4, 2, 16}}, v{DType::bf16, {8, 4, 2, 16}};
  HostTensor new_k{DType::bf16, {3, 2, 16}}, new_v{DType::bf16, {3, 2, 16}};
  HostTensor indptr = int_tensor({0, 2, 3}), indices = int_tensor({5, 2, 7}), last = int_tensor({2, 3});
  HostTensor append_indptr = int_tensor({0, 2, 1 + 2});
  PagedKVCache cache() const { return {k.view(), v.view(), KVLayout::NHD}; }
  PageTable table() const { return {indptr.view(), indices.view(), last.view()}; }
  std::vector<unsigned char> snapshot() const {
    auto a = k.bytes(), b = v.bytes();
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }
};

void expect_rejected(const std::function<void()>& call, const std::function<std::vector<unsigned char>()>& snapshot,
                     const char* function, ErrorCode code, const std::string& argument) {
  const auto before = snapshot();
  try {
    call();
    ADD_FAILURE() << "no error for " << argument;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_EQ(e.argument(), argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::string(function) + ": " + argument + ": expected "), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(", got "), std::string::npos) << e.what();
  }
  EXPECT_EQ(snapshot(), before) << "bytes written on failure (" << argument << ")";
}

// ---- append_paged_kv -----------------------------------------------------------------------

class AppendValidation : public ::testing::Test {
 protected:
  Fixture f;
  PagedKVCache cache = f.cache();
  PageTable table = f.table();
  Tensor ai = f.append_indptr.view(), nk = f.new_k.view(), nv = f.new_v.view();
  void expect(ErrorCode code, const std::string& argument) {
    expect_rejected([&] { append_paged_kv(cache, table, ai, nk, nv); }, [&] { return f.snapshot(); },
                    "append_paged_kv", code, argument);
  }
};

TEST_F(AppendValidation, ValidArgumentsAreAccepted) { EXPECT_NO_THROW(append_paged_kv(cache, table, ai, nk, nv)); }
TEST_F(AppendValidation, NegativeThreadCount) {
  ExecutionContext ctx;
  ctx.num_threads = -1;
  expect_rejected([&] { append_paged_kv(cache, table, ai, nk, nv, ctx); }, [&] { return f.snapshot(); },
                  "append_paged_kv", ErrorCode::invalid_argument, "ctx.num_threads");
}
TEST_F(AppendValidation, CachePast63BitsOfBytes) {
  // (2^30, 2^30, 1, 16) elements is 2^64: a plain product wrapped to 0 and let a null cache pass as empty.
  const std::int64_t big = std::int64_t{1} << 30;
  cache.k_pages = Tensor(nullptr, DType::bf16, {big, big, 1, 16});
  expect(ErrorCode::invalid_argument, "cache.k_pages");
}
TEST_F(AppendValidation, CacheKAbsent) { cache.k_pages = Tensor{}; expect(ErrorCode::invalid_argument, "cache.k_pages"); }
TEST_F(AppendValidation, CacheRank) {
  cache.k_pages.rank = 3;
  expect(ErrorCode::invalid_argument, "cache.k_pages");
}
TEST_F(AppendValidation, CacheDtypeNotFloating) {
  HostTensor ki(DType::i32, {8, 4, 2, 16}), vi(DType::i32, {8, 4, 2, 16});
  cache = {ki.view(), vi.view(), KVLayout::NHD};
  expect(ErrorCode::invalid_argument, "cache.k_pages");
}
TEST_F(AppendValidation, CacheVDtype) {
  HostTensor v16(DType::f16, {8, 4, 2, 16});
  cache.v_pages = v16.view();
  expect(ErrorCode::invalid_argument, "cache.v_pages");
}
TEST_F(AppendValidation, CacheVShape) {
  HostTensor vs(DType::bf16, {8, 4, 2, 8});
  cache.v_pages = vs.view();
  expect(ErrorCode::invalid_argument, "cache.v_pages");
}
TEST_F(AppendValidation, CacheVDevice) { cache.v_pages = on_cuda(cache.v_pages); expect(ErrorCode::invalid_argument, "cache.v_pages"); }
TEST_F(AppendValidation, CacheHeadDimStride) {
  cache.k_pages = with_stride(cache.k_pages, 3, 2);
  expect(ErrorCode::invalid_argument, "cache.k_pages");
}
TEST_F(AppendValidation, CacheNegativeStride) {
  cache.v_pages = with_stride(cache.v_pages, 0, -128);
  expect(ErrorCode::invalid_argument, "cache.v_pages");
}
// The cache is written: K and V in one buffer would be written over each other, and a page
// dimension of stride 0 (a broadcast) would write every page into one.
TEST_F(AppendValidation, CacheKAndVShareMemory) {
  cache.v_pages = cache.k_pages;
  expect(ErrorCode::invalid_argument, "cache.v_pages");
}
TEST_F(AppendValidation, CacheBroadcastPages) {
  cache.k_pages = with_stride(cache.k_pages, 0, 0);
  expect(ErrorCode::invalid_argument, "cache.k_pages");
}
TEST_F(AppendValidation, NewTokensInsideTheCache) {
  nk = Tensor(cache.k_pages.data, DType::bf16, {3, 2, 16});
  expect(ErrorCode::invalid_argument, "new_k");
  nk = f.new_k.view();
  nv = Tensor(cache.k_pages.data, DType::bf16, {3, 2, 16});
  expect(ErrorCode::invalid_argument, "new_v");
}
TEST_F(AppendValidation, CacheEmptyPages) {
  cache.k_pages.shape[1] = 0;
  cache.v_pages.shape[1] = 0;
  expect(ErrorCode::invalid_argument, "cache.k_pages");
}
TEST_F(AppendValidation, TableLastPageLenRank) {
  HostTensor l2(DType::i32, {1, 2});
  table.kv_last_page_len = l2.view();
  expect(ErrorCode::invalid_argument, "table.kv_last_page_len");
}
TEST_F(AppendValidation, TableOnAnotherDevice) {
  table.kv_last_page_len = on_cuda(table.kv_last_page_len);
  expect(ErrorCode::invalid_argument, "table.kv_last_page_len");
}
TEST_F(AppendValidation, TableIndptrDtype) {
  HostTensor fp(DType::f32, {3});
  table.kv_indptr = fp.view();
  expect(ErrorCode::invalid_argument, "table.kv_indptr");
}
TEST_F(AppendValidation, TableIndptrSize) {
  HostTensor p = int_tensor({0, 2, 3, 3});
  table.kv_indptr = p.view();
  expect(ErrorCode::invalid_argument, "table.kv_indptr");
}
TEST_F(AppendValidation, TableIndptrStartsAtZero) {
  HostTensor p = int_tensor({1, 2, 3});
  table.kv_indptr = p.view();
  expect(ErrorCode::invalid_argument, "table.kv_indptr[0]");
}
TEST_F(AppendValidation, TableIndptrNeverDecreases) {
  HostTensor p = int_tensor({0, 3, 2});
  table.kv_indptr = p.view();
  expect(ErrorCode::invalid_argument, "table.kv_indptr[2]");
}
TEST_F(AppendValidation, TableIndicesSize) {
  HostTensor i = int_tensor({5, 2, 7, 1});
  table.kv_indices = i.view();
  expect(ErrorCode::invalid_argument, "table.kv_indices");
}
TEST_F(AppendValidation, TableIndicesRank) {
  HostTensor i(DType::i32, {3, 1});
  table.kv_indices = i.view();
  expect(ErrorCode::invalid_argument, "table.kv_indices");
}
TEST_F(AppendValidation, TablePageOutOfRange) {
  for (int bad : {8, -1}) {
    HostTensor i = int_tensor({5, bad, 7});
    table.kv_indices = i.view();
    expect(ErrorCode::invalid_argument, "table.kv_indices[1]");
  }
}
TEST_F(AppendValidation, TableLastPageLenRange) {
  for (int bad : {0, 5, -1}) {
    HostTensor l = int_tensor({bad, 3});
    table.kv_last_page_len = l.view();
    expect(ErrorCode::invalid_argument, "table.kv_last_page_len[0]");
  }
}
TEST_F(AppendValidation, TableLastPageLenOfEmptyRequest) {
  HostTensor p = int_tensor({0, 2, 2}), i = int_tensor({5, 2}), l = int_tensor({2, 1});
  table = {p.view(), i.view(), l.view()};
  expect(ErrorCode::invalid_argument, "table.kv_last_page_len[1]");
}
TEST_F(AppendValidation, AppendIndptrDtypeSizeDevice) {
  HostTensor fp(DType::f32, {3});
  ai = fp.view();
  expect(ErrorCode::invalid_argument, "append_indptr");
  HostTensor longer = int_tensor({0, 2, 3, 3});
  ai = longer.view();
  expect(ErrorCode::invalid_argument, "append_indptr");
  ai = on_cuda(f.append_indptr.view());
  expect(ErrorCode::invalid_argument, "append_indptr");
}
TEST_F(AppendValidation, AppendIndptrStartsAtZero) {
  HostTensor a = int_tensor({1, 2, 3});
  ai = a.view();
  expect(ErrorCode::invalid_argument, "append_indptr[0]");
}
TEST_F(AppendValidation, AppendIndptrNeverDecreases) {
  HostTensor a = int_tensor({0, 3, 2});
  ai = a.view();
  expect(ErrorCode::invalid_argument, "append_indptr[2]");
}
TEST_F(AppendValidation, AppendIndptrEndsAtTotalNew) {
  HostTensor a = int_tensor({0, 1, 2});
  ai = a.view();
  expect(ErrorCode::invalid_argument, "append_indptr[2]");
}
TEST_F(AppendValidation, NewTokensAtMostKvLen) {
  // Request 1 has kv_len 3 but would get 4 new tokens.
  HostTensor a = int_tensor({0, 0, 4}), k4(DType::bf16, {4, 2, 16}), v4(DType::bf16, {4, 2, 16});
  ai = a.view();
  nk = k4.view();
  nv = v4.view();
  expect(ErrorCode::invalid_argument, "append_indptr[2]");
}
TEST_F(AppendValidation, NewKShapeDtypeStride) {
  HostTensor wrong_heads(DType::bf16, {3, 1, 16}), wrong_dim(DType::bf16, {3, 2, 8}), wrong_dtype(DType::f16, {3, 2, 16}),
      wrong_rank(DType::bf16, {3, 32});
  for (const HostTensor* t : {&wrong_heads, &wrong_dim, &wrong_dtype, &wrong_rank}) {
    nk = t->view();
    expect(ErrorCode::invalid_argument, "new_k");
  }
  nk = with_stride(f.new_k.view(), 2, 2);
  expect(ErrorCode::invalid_argument, "new_k");
  nk = on_cuda(f.new_k.view());
  expect(ErrorCode::invalid_argument, "new_k");
}
TEST_F(AppendValidation, NewVRowsMatchNewK) {
  HostTensor v2(DType::bf16, {2, 2, 16});
  nv = v2.view();
  expect(ErrorCode::invalid_argument, "new_v");
}
TEST_F(AppendValidation, PagesReceivingTokensBelongToOneRequest) {
  // Both requests end in page 2.
  HostTensor i = int_tensor({5, 2, 2});
  table.kv_indices = i.view();
  expect(ErrorCode::invalid_argument, "table.kv_indices[2]");
}

// ---- copy_pages ----------------------------------------------------------------------------

class CopyValidation : public ::testing::Test {
 protected:
  Fixture f;
  PagedKVCache cache = f.cache();
  HostTensor src_h = int_tensor({1, 2}), dst_h = int_tensor({3, 4});
  Tensor src = src_h.view(), dst = dst_h.view();
  void expect(ErrorCode code, const std::string& argument) {
    expect_rejected([&] { copy_pages(cache, src, dst); }, [&] { return f.snapshot(); }, "copy_pages", code, argument);
  }
};

TEST_F(CopyValidation, ValidArgumentsAreAccepted) { EXPECT_NO_THROW(copy_pages(cache, src, dst)); }
TEST_F(CopyValidation, NegativeThreadCount) {
  ExecutionContext ctx;
  ctx.num_threads = -2;
  expect_rejected([&] { copy_pages(cache, src, dst, ctx); }, [&] { return f.snapshot(); }, "copy_pages",
                  ErrorCode::invalid_argument, "ctx.num_threads");
}
TEST_F(CopyValidation, Cache) { cache.v_pages = Tensor{}; expect(ErrorCode::invalid_argument, "cache.v_pages"); }
TEST_F(CopyValidation, CacheKAndVShareMemory) {
  // One tensor as both K and V (a shared latent cache): copied twice, allowed.
  cache.k_pages = cache.v_pages;
  EXPECT_NO_THROW(copy_pages(cache, src, dst));
  // K one token past V's start: overlapping without being the same tensor, refused.
  cache = f.cache();
  cache.k_pages.data = static_cast<unsigned char*>(cache.v_pages.data) + 2 * 16 * 2;
  expect(ErrorCode::invalid_argument, "cache.v_pages");
}
TEST_F(CopyValidation, SrcDtypeRankDevice) {
  HostTensor fp(DType::f32, {2}), r2(DType::i32, {1, 2});
  src = fp.view();
  expect(ErrorCode::invalid_argument, "src_pages");
  src = r2.view();
  expect(ErrorCode::invalid_argument, "src_pages");
  src = on_cuda(src_h.view());
  expect(ErrorCode::invalid_argument, "src_pages");
}
TEST_F(CopyValidation, DstSameLength) {
  HostTensor d = int_tensor({3});
  dst = d.view();
  expect(ErrorCode::invalid_argument, "dst_pages");
}
TEST_F(CopyValidation, PagesInRange) {
  HostTensor s = int_tensor({1, 8}), d = int_tensor({3, -1});
  src = s.view();
  expect(ErrorCode::invalid_argument, "src_pages[1]");
  src = src_h.view();
  dst = d.view();
  expect(ErrorCode::invalid_argument, "dst_pages[1]");
}
TEST_F(CopyValidation, DstDistinct) {
  HostTensor d = int_tensor({3, 3});
  dst = d.view();
  expect(ErrorCode::invalid_argument, "dst_pages[1]");
}
TEST_F(CopyValidation, DstNotAlsoSource) {
  HostTensor d = int_tensor({3, 1});
  dst = d.view();
  expect(ErrorCode::invalid_argument, "dst_pages[1]");
}

// ---- BatchAttention ------------------------------------------------------------------------

BatchConfig good_config() {
  BatchConfig c;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.head_dim = 16;
  c.dtype = DType::bf16;
  c.layout = KVLayout::NHD;
  c.page_size = 4;
  c.options.return_lse = true;
  c.max_requests = 4;
  c.max_q_tokens = 16;
  return c;
}

TEST(BatchConfigValidation, EveryField) {
  auto none = [] { return std::vector<unsigned char>{}; };
  struct Bad { std::function<void(BatchConfig&)> edit; std::string argument; };
  const std::vector<Bad> bads{
      {[](BatchConfig& c) { c.heads_q = 0; }, "config.heads_q"},
      {[](BatchConfig& c) { c.heads_q = c.heads_kv = 1 << 17; }, "config.heads_q"},
      // 2^20 requests of up to 2^20 query tiles (head_dim 8, no grouping: 128-row tiles) times 2^16
      // KV heads: 2^36 work items, past the plan's int32 indices (the workspace size wrapped and plan()
      // wrote past its end).
      {[](BatchConfig& c) { c.heads_q = c.heads_kv = 1 << 16; c.head_dim = 8; c.max_requests = 1 << 20; },
       "config.max_q_tokens"},
      {[](BatchConfig& c) { c.heads_kv = 3; }, "config.heads_kv"},
      {[](BatchConfig& c) { c.heads_kv = 0; }, "config.heads_kv"},
      {[](BatchConfig& c) { c.head_dim = 20; }, "config.head_dim"},
      {[](BatchConfig& c) { c.head_dim = 512; }, "config.head_dim"},
      {[](BatchConfig& c) { c.dtype = DType::e4m3; }, "config.dtype"},
      {[](BatchConfig& c) { c.page_size = 0; }, "config.page_size"},
      {[](BatchConfig& c) { c.max_requests = 0; }, "config.max_requests"},
      {[](BatchConfig& c) { c.max_q_tokens = 0; }, "config.max_q_tokens"},
      {[](BatchConfig& c) { c.split = {SplitPolicy::Mode::fixed, 0}; }, "config.split.kv_chunk_tokens"},
      {[](BatchConfig& c) { c.options.scale = -1.0f; }, "config.options.scale"},
      {[](BatchConfig& c) { c.options.window_left = -2; }, "config.options.window_left"},
      {[](BatchConfig& c) { c.options.window_right = -5; }, "config.options.window_right"},
      {[](BatchConfig& c) { c.options.softcap = -1.0f; }, "config.options.softcap"},
      {[](BatchConfig& c) { c.options.softcap = 3e38f; }, "config.options.softcap"},  // c * log2(e) overflows
      {[](BatchConfig& c) { c.options.softcap = 1e-45f; }, "config.options.softcap"},  // scale / c overflows
  };
  for (const Bad& b : bads) {
    BatchConfig c = good_config();
    b.edit(c);
    expect_rejected([&] { BatchAttention ba(c); }, none, "BatchAttention", ErrorCode::invalid_argument, b.argument);
    expect_rejected([&] { (void)BatchAttention::workspace_size(c, DeviceFacts{}); }, none,
                    "BatchAttention::workspace_size", ErrorCode::invalid_argument, b.argument);
  }
  expect_rejected([&] { (void)BatchAttention::workspace_size(good_config(), DeviceFacts{Device::cpu(), 0}); }, none,
                  "BatchAttention::workspace_size", ErrorCode::invalid_argument, "facts.num_sms");
}

TEST(BatchConfigValidation, LargestCapacitiesWithinTheItemLimitAreAccepted) {
  // The work-item check refuses only what overflows: the largest capacities at a common shape pass.
  BatchConfig c = good_config();
  c.heads_q = 64;
  c.heads_kv = 8;
  c.head_dim = 128;
  c.max_requests = 1 << 20;
  c.max_q_tokens = 1 << 24;
  EXPECT_NO_THROW((void)BatchAttention::workspace_size(c, DeviceFacts{Device::cpu(), 132}));
}

TEST(BatchAttentionValidation, MovedFromObjectRefusesEveryCall) {
  BatchAttention a(good_config());
  BatchAttention b(std::move(a));
  auto none = [] { return std::vector<unsigned char>{}; };
  expect_rejected([&] { (void)a.config(); }, none, "BatchAttention::config", ErrorCode::invalid_argument, "this");
  expect_rejected([&] { (void)a.planned_batch(); }, none, "BatchAttention::planned_batch", ErrorCode::invalid_argument,
                  "this");
  std::vector<std::int32_t> lens{1};
  Buffer ws(BatchAttention::workspace_size(good_config(), DeviceFacts{Device::cpu(), 2}));
  expect_rejected([&] { a.plan(lens, lens, DeviceFacts{Device::cpu(), 2}, {ws.data(), ws.bytes, Device::cpu()}); },
                  none, "BatchAttention::plan", ErrorCode::invalid_argument, "this");
  EXPECT_EQ(b.config().heads_q, good_config().heads_q);  // the state moved with the object
}

// A planned batch of two requests (q 2 and 1, kv 6 and 3) over the fixture's cache.
class RunValidation : public ::testing::Test {
 protected:
  RunValidation() : ba(good_config()), ws(BatchAttention::workspace_size(good_config(), facts)) {
    auto rng = fresh_rng();
    q_h.fill_normal(rng);
    ba.plan(q_lens, kv_lens, facts, workspace());
  }
  Workspace workspace() { return {ws.data(), ws.bytes, Device::cpu()}; }
  std::vector<unsigned char> snapshot() const {
    auto a = f.snapshot(), b = out_h.bytes(), c = lse_h.bytes();
    a.insert(a.end(), b.begin(), b.end());
    a.insert(a.end(), c.begin(), c.end());
    return a;
  }
  void expect(ErrorCode code, const std::string& argument) {
    expect_rejected([&] { ba.run(q, cache, table, out, lse, w); }, [&] { return snapshot(); }, "BatchAttention::run",
                    code, argument);
  }
  DeviceFacts facts{Device::cpu(), 2};
  Fixture f;
  BatchAttention ba;
  Buffer ws;
  std::vector<std::int32_t> q_lens{2, 1}, kv_lens{6, 3};
  HostTensor q_h{DType::bf16, {3, 4, 16}}, out_h{DType::bf16, {3, 4, 16}}, lse_h{DType::f32, {4, 3}};
  Tensor q = q_h.view(), out = out_h.view(), lse = lse_h.view();
  PagedKVCache cache = f.cache();
  PageTable table = f.table();
  Workspace w = workspace();
};

TEST_F(RunValidation, ValidArgumentsAreAccepted) {
  EXPECT_NO_THROW(ba.run(q, cache, table, out, lse, w));
  EXPECT_EQ(out_h.count_nan(), 0);
}
TEST_F(RunValidation, NegativeThreadCount) {
  ExecutionContext ctx;
  ctx.num_threads = -1;
  expect_rejected([&] { ba.run(q, cache, table, out, lse, w, ctx); }, [&] { return snapshot(); }, "BatchAttention::run",
                  ErrorCode::invalid_argument, "ctx.num_threads");
}
TEST_F(RunValidation, LseInsideOut) {
  lse = Tensor(out_h.view().data, DType::f32, {4, 3});  // 48 bytes inside out's 192
  expect(ErrorCode::invalid_argument, "lse");
}
TEST_F(RunValidation, RunBeforePlan) {
  BatchAttention fresh(good_config());
  expect_rejected([&] { fresh.run(q, cache, table, out, lse, w); }, [&] { return snapshot(); }, "BatchAttention::run",
                  ErrorCode::plan_mismatch, "workspace");
}
TEST_F(RunValidation, AnotherWorkspace) {
  Buffer other(ws.bytes);
  w = Workspace{other.data(), other.bytes, Device::cpu()};
  expect(ErrorCode::plan_mismatch, "workspace");
}
TEST_F(RunValidation, WorkspaceOverwrittenByAnotherPlan) {
  BatchAttention intruder(good_config());
  intruder.plan(q_lens, kv_lens, facts, w);
  expect(ErrorCode::plan_mismatch, "workspace");
}
// The CPU executor trusts the plan's indices: a workspace whose plan arrays changed after plan()
// (past the header, which the generation check covers) is refused, not read out of bounds (the
// fuzzing pass of the thirtieth session segfaulted here). Bytes of the partial-state region,
// which run() itself writes, may change.
TEST_F(RunValidation, WorkspaceChangedAfterPlan) {
  auto* bytes = static_cast<unsigned char*>(ws.data());
  const std::size_t at = sizeof(plan::PlanHeader) + 4;  // qo_indptr[1]
  bytes[at] ^= 0x40;
  expect(ErrorCode::plan_mismatch, "workspace");
  bytes[at] ^= 0x40;
  EXPECT_NO_THROW(ba.run(q, cache, table, out, lse, w));
  bytes[ws.bytes - 1] ^= 0x40;  // the last partial_o byte: not plan data
  EXPECT_NO_THROW(ba.run(q, cache, table, out, lse, w));
}
TEST_F(RunValidation, QDtypeHeadsDimStrideDevice) {
  HostTensor q16(DType::f16, {3, 4, 16}), qh(DType::bf16, {3, 2, 16}), qd(DType::bf16, {3, 4, 32}), q2(DType::bf16, {3, 64});
  for (const HostTensor* t : {&q16, &qh, &qd, &q2}) {
    q = t->view();
    expect(ErrorCode::invalid_argument, "q");
  }
  q = with_stride(q_h.view(), 2, 2);
  expect(ErrorCode::invalid_argument, "q");
  q = on_cuda(q_h.view());
  expect(ErrorCode::invalid_argument, "q");
}
TEST_F(RunValidation, QTokensDifferFromPlan) {
  HostTensor q4(DType::bf16, {4, 4, 16});
  q = q4.view();
  expect(ErrorCode::plan_mismatch, "q");
}
TEST_F(RunValidation, OutShape) {
  HostTensor o4(DType::bf16, {4, 4, 16}), of(DType::f32, {3, 4, 16});
  out = o4.view();
  expect(ErrorCode::plan_mismatch, "out");
  out = of.view();
  expect(ErrorCode::invalid_argument, "out");
}
// out and lse are written while the cache is read: not inside it, and not broadcast views.
TEST_F(RunValidation, OutInsideTheCache) {
  out = Tensor(cache.k_pages.data, DType::bf16, {3, 4, 16});
  expect(ErrorCode::invalid_argument, "out");
  out = Tensor(cache.v_pages.data, DType::bf16, {3, 4, 16});
  expect(ErrorCode::invalid_argument, "out");
}
TEST_F(RunValidation, BroadcastOut) {
  out = with_stride(out_h.view(), 0, 0);
  expect(ErrorCode::invalid_argument, "out");
  out = out_h.view();
  lse = with_stride(lse_h.view(), 0, 0);
  expect(ErrorCode::invalid_argument, "lse");
}
TEST_F(RunValidation, Lse) {
  HostTensor l16(DType::f16, {4, 3}), lh(DType::f32, {2, 3}), lt(DType::f32, {4, 4});
  lse = Tensor{};
  expect(ErrorCode::invalid_argument, "lse");
  lse = l16.view();
  expect(ErrorCode::invalid_argument, "lse");
  lse = lh.view();
  expect(ErrorCode::invalid_argument, "lse");
  lse = lt.view();
  expect(ErrorCode::plan_mismatch, "lse");
  lse = with_stride(lse_h.view(), 1, 2);
  expect(ErrorCode::invalid_argument, "lse");
}
TEST_F(RunValidation, CacheAgainstConfig) {
  HostTensor kf(DType::f32, {8, 4, 2, 16}), vf(DType::f32, {8, 4, 2, 16});
  cache = {kf.view(), vf.view(), KVLayout::NHD};
  expect(ErrorCode::invalid_argument, "cache.k_pages");  // dtype
  HostTensor kp(DType::bf16, {8, 8, 2, 16}), vp(DType::bf16, {8, 8, 2, 16});
  cache = {kp.view(), vp.view(), KVLayout::NHD};
  expect(ErrorCode::invalid_argument, "cache.k_pages");  // page size
  HostTensor kh(DType::bf16, {8, 4, 1, 16}), vh(DType::bf16, {8, 4, 1, 16});
  cache = {kh.view(), vh.view(), KVLayout::NHD};
  expect(ErrorCode::invalid_argument, "cache.k_pages");  // heads_kv
  HostTensor kd(DType::bf16, {8, 4, 2, 32}), vd(DType::bf16, {8, 4, 2, 32});
  cache = {kd.view(), vd.view(), KVLayout::NHD};
  expect(ErrorCode::invalid_argument, "cache.k_pages");  // head_dim
  HostTensor kl(DType::bf16, {8, 2, 4, 16}), vl(DType::bf16, {8, 2, 4, 16});
  cache = {kl.view(), vl.view(), KVLayout::HND};
  expect(ErrorCode::invalid_argument, "cache.layout");
}
TEST_F(RunValidation, TableBatchDiffersFromPlan) {
  HostTensor p = int_tensor({0, 2}), i = int_tensor({5, 2}), l = int_tensor({2});
  table = {p.view(), i.view(), l.view()};
  expect(ErrorCode::plan_mismatch, "table.kv_last_page_len");
}
TEST_F(RunValidation, TableKvLenDiffersFromPlan) {
  HostTensor l = int_tensor({2, 2});  // request 1: kv_len 2, planned 3
  table.kv_last_page_len = l.view();
  expect(ErrorCode::plan_mismatch, "table");
}
TEST_F(RunValidation, TableValues) {
  HostTensor i = int_tensor({5, 9, 7});
  table.kv_indices = i.view();
  expect(ErrorCode::invalid_argument, "table.kv_indices[1]");
}

}  // namespace
}  // namespace tessera::testing
