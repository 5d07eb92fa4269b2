// BatchAttention (plan + run over a paged KV cache) against the fp64 oracle run on the same
// K/V gathered into dense ragged tensors, under the tolerance rule of test_support.h:
// mixed prefill chunks and decode tokens (kv_len 0 and 1 included), GQA 1/4/8, causal,
// window, softcap, fp32/bf16/fp16, NHD/HND. Paged reads at page sizes 1/5/16/256 give the
// very same bits; every split of the KV range gives the same result within rounding.
// Unowned pages and slots past each sequence are NaN, so a read outside the table shows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "cpu/reference.h"
#include "math/dtype_convert.h"
#include "plan/batch_plan.h"
#include "support/test_support.h"
#include "tessera/batch.h"
#include "tessera/error.h"

namespace tessera::testing {
namespace {

struct BatchSpec {
  DType dtype = DType::f32;
  int heads_q = 8, heads_kv = 2, head_dim = 64;
  int page_size = 16;
  KVLayout layout = KVLayout::NHD;
  std::vector<int> q_lens, kv_lens;
  AttentionOptions options;
  SplitPolicy split;
  int num_sms = 2;
  int num_threads = 0;
  std::int64_t row_pad = 0;
  std::string name() const {
    std::string s = std::string(dtype_name(dtype)) + " hq" + std::to_string(heads_q) + " hkv" + std::to_string(heads_kv) +
                    " d" + std::to_string(head_dim) + " page" + std::to_string(page_size) + " " + kv_layout_name(layout) +
                    (options.causal ? " causal" : "") + " window(" + std::to_string(options.window_left) + "," +
                    std::to_string(options.window_right) + ") softcap " + std::to_string(options.softcap) + " split " +
                    std::to_string(static_cast<int>(split.mode)) + "/" + std::to_string(split.kv_chunk_tokens) +
                    " sms " + std::to_string(num_sms);
    return s;
  }
};

void PrintTo(const BatchSpec& s, std::ostream* os) { *os << s.name(); }

// 16-byte aligned workspace.
struct Buffer {
  explicit Buffer(std::size_t n = 0) : bytes(n), storage((n + 15) / 16 + 1) {}
  void* data() { return storage.data(); }
  std::size_t bytes;
  std::vector<plan::PlanHeader> storage;
};

// Inputs shared by runs with different page sizes, layouts and splits: q and dense K/V.
struct Inputs {
  Inputs(const BatchSpec& s, std::mt19937_64& rng) {
    cu_q.push_back(0);
    cu_k.push_back(0);
    for (std::size_t b = 0; b < s.q_lens.size(); ++b) {
      cu_q.push_back(cu_q.back() + s.q_lens[b]);
      cu_k.push_back(cu_k.back() + s.kv_lens[b]);
    }
    q = HostTensor(s.dtype, {cu_q.back(), s.heads_q, s.head_dim}, s.row_pad);
    k = HostTensor(s.dtype, {cu_k.back(), s.heads_kv, s.head_dim});
    v = HostTensor(s.dtype, {cu_k.back(), s.heads_kv, s.head_dim});
    q.fill_normal(rng);
    k.fill_normal(rng);
    v.fill_normal(rng);
  }
  std::vector<std::int32_t> cu_q, cu_k;
  HostTensor q, k, v;
};

struct Outputs {
  HostTensor out, lse;
  std::vector<double> out_packed, lse_packed;
};

// Builds a paged cache holding `in`'s K/V through a shuffled page table, plans and runs.
Outputs run_batch(const BatchSpec& s, const Inputs& in, std::mt19937_64& rng) {
  const int batch = static_cast<int>(s.q_lens.size());
  const int ps = s.page_size;
  std::vector<int> n_pages(static_cast<std::size_t>(batch));
  int total_pages = 3;  // a few pages nobody owns
  for (int b = 0; b < batch; ++b) total_pages += n_pages[static_cast<std::size_t>(b)] = (s.kv_lens[static_cast<std::size_t>(b)] + ps - 1) / ps;
  std::vector<std::int32_t> perm(static_cast<std::size_t>(total_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  HostPageTable table;
  table.page_size = ps;
  for (int b = 0; b < batch; ++b) {
    for (int j = 0; j < n_pages[static_cast<std::size_t>(b)]; ++j) table.kv_indices.push_back(perm[table.kv_indices.size()]);
    table.kv_indptr.push_back(static_cast<std::int32_t>(table.kv_indices.size()));
    const int len = s.kv_lens[static_cast<std::size_t>(b)];
    table.kv_last_page_len.push_back(len == 0 ? 0 : len - (n_pages[static_cast<std::size_t>(b)] - 1) * ps);
  }
  const bool nhd = s.layout == KVLayout::NHD;
  const std::vector<std::int64_t> shape = nhd ? std::vector<std::int64_t>{total_pages, ps, s.heads_kv, s.head_dim}
                                              : std::vector<std::int64_t>{total_pages, s.heads_kv, ps, s.head_dim};
  HostTensor ck(s.dtype, shape, 8), cv(s.dtype, shape);  // NaN everywhere until written
  for (int b = 0; b < batch; ++b)
    for (int j = 0; j < s.kv_lens[static_cast<std::size_t>(b)]; ++j) {
      const std::int64_t page = table.kv_indices[static_cast<std::size_t>(table.kv_indptr[static_cast<std::size_t>(b)] + j / ps)];
      const std::int64_t slot = j % ps;
      for (int h = 0; h < s.heads_kv; ++h)
        for (int d = 0; d < s.head_dim; ++d) {
          const std::int64_t src = ((in.cu_k[static_cast<std::size_t>(b)] + j) * s.heads_kv + h) * s.head_dim + d;
          const std::int64_t dst = nhd ? ((page * ps + slot) * s.heads_kv + h) * s.head_dim + d
                                       : ((page * s.heads_kv + h) * ps + slot) * s.head_dim + d;
          ck.set(dst, in.k.get(src));
          cv.set(dst, in.v.get(src));
        }
    }
  const auto ck_bytes = ck.bytes(), cv_bytes = cv.bytes();

  BatchConfig c;
  c.heads_q = s.heads_q;
  c.heads_kv = s.heads_kv;
  c.head_dim = s.head_dim;
  c.dtype = s.dtype;
  c.layout = s.layout;
  c.page_size = ps;
  c.options = s.options;
  c.options.return_lse = true;
  c.split = s.split;
  c.max_requests = std::max(batch, 1);
  c.max_q_tokens = std::max<int>(in.cu_q.back(), 1);
  const DeviceFacts facts{Device::cpu(), s.num_sms};
  BatchAttention ba(c);
  Buffer ws(BatchAttention::workspace_size(c, facts));
  const std::vector<std::int32_t> ql(s.q_lens.begin(), s.q_lens.end()), kl(s.kv_lens.begin(), s.kv_lens.end());
  try {
    ba.plan(ql, kl, facts, Workspace{ws.data(), ws.bytes, Device::cpu()});
  } catch (const Error& e) {  // small fixed chunks: a workspace as large as plan() asks for
    if (e.code() != ErrorCode::workspace_too_small) throw;
    const std::string msg = e.what();
    ws = Buffer(std::stoull(msg.substr(msg.find("at least ") + 9)));
    ba.plan(ql, kl, facts, Workspace{ws.data(), ws.bytes, Device::cpu()});
  }

  Outputs o;
  o.out = HostTensor(s.dtype, {in.cu_q.back(), s.heads_q, s.head_dim}, s.row_pad);
  o.lse = HostTensor(DType::f32, {s.heads_q, in.cu_q.back()}, 0);
  const PagedKVCache cache{ck.view(), cv.view(), s.layout};
  ba.run(in.q.view(), cache, table.view(), o.out.view(), o.lse.view(), Workspace{ws.data(), ws.bytes, Device::cpu()},
         ExecutionContext{nullptr, s.num_threads});

  EXPECT_EQ(o.out.count_nan(), 0) << "out not fully written";
  EXPECT_EQ(o.lse.count_nan(), 0) << "lse not fully written";
  EXPECT_TRUE(o.out.margins_intact());
  EXPECT_TRUE(o.lse.margins_intact());
  EXPECT_EQ(ck.bytes(), ck_bytes);
  EXPECT_EQ(cv.bytes(), cv_bytes);
  std::vector<std::int64_t> starts(in.cu_q.begin(), in.cu_q.end() - 1);
  const Tensor ov = o.out.view(), lv = o.lse.view();
  o.out_packed = gather_rows(o.out, StridedPtr{ov.data, 0, ov.stride[0], ov.stride[1]}, s.dtype, batch, starts,
                             s.q_lens, s.heads_q, s.head_dim, true);
  o.lse_packed = gather_lse(o.lse, LsePtr{lv.ptr<float>(), 0, lv.stride[0]}, batch, starts, s.q_lens, s.heads_q, true);
  return o;
}

// The oracle's view of the same problem: a ragged batch over the dense K/V.
AttentionParams oracle_params(const BatchSpec& s, const Inputs& in) {
  AttentionParams p;
  p.dtype = s.dtype;
  p.device = Device::cpu();
  p.batch = static_cast<int>(s.q_lens.size());
  p.heads_q = s.heads_q;
  p.heads_kv = s.heads_kv;
  p.head_dim = s.head_dim;
  p.seq_q = s.q_lens.empty() ? 0 : *std::max_element(s.q_lens.begin(), s.q_lens.end());
  p.seq_k = s.kv_lens.empty() ? 0 : *std::max_element(s.kv_lens.begin(), s.kv_lens.end());
  p.cu_seqlens_q = in.cu_q.data();
  p.cu_seqlens_k = in.cu_k.data();
  p.total_q = in.cu_q.back();
  p.total_k = in.cu_k.back();
  const Tensor q = in.q.view(), k = in.k.view(), v = in.v.view();
  p.q = {q.data, 0, q.stride[0], q.stride[1]};
  p.k = {k.data, 0, k.stride[0], k.stride[1]};
  p.v = {v.data, 0, v.stride[0], v.stride[1]};
  p.mask.scale = s.options.scale ? *s.options.scale : 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  p.mask.softcap = s.options.softcap;
  p.mask.causal = s.options.causal;
  p.mask.window_left = s.options.window_left;
  p.mask.window_right = s.options.window_right;
  return p;
}

struct Oracle {
  cpu::reference::ForwardResult ref;
  double tol_o = 0, tol_l = 0;
};

Oracle oracle(const BatchSpec& s, const Inputs& in) {
  const AttentionParams p = oracle_params(s, in);
  Oracle o;
  o.ref = cpu::reference::forward(p);
  std::vector<double> naive_lse;
  const auto naive = naive_same_precision_forward(p, &naive_lse);
  o.tol_o = tolerance(naive, o.ref.o, s.dtype);
  o.tol_l = tolerance(naive_lse, o.ref.lse, DType::f32);
  return o;
}

void expect_close(const Outputs& got, const Oracle& o, const std::string& what) {
  const double err_o = max_abs_error(got.out_packed, o.ref.o);
  const double err_l = max_abs_error(got.lse_packed, o.ref.lse);  // -inf exactly where the oracle has it
  EXPECT_LE(err_o, o.tol_o) << what;
  EXPECT_LE(err_l, o.tol_l) << what;
}

// Mixed batches: prefill chunks of several tiles, decode tokens, kv_len 0 and 1, q_len 0,
// q_len > kv_len (top rows fully masked under causal).
const std::vector<int> kMixedQ{7, 1, 1, 0, 33, 1, 5, 2, 70};
const std::vector<int> kMixedKv{40, 0, 1, 12, 100, 300, 5, 1, 90};

BatchSpec spec(DType dt, int hq, int hkv, int d, int ps, KVLayout layout, AttentionOptions o, SplitPolicy split = {},
               int sms = 2, std::int64_t pad = 0) {
  BatchSpec s;
  s.dtype = dt;
  s.heads_q = hq;
  s.heads_kv = hkv;
  s.head_dim = d;
  s.page_size = ps;
  s.layout = layout;
  s.q_lens = kMixedQ;
  s.kv_lens = kMixedKv;
  s.options = o;
  s.split = split;
  s.num_sms = sms;
  s.row_pad = pad;
  return s;
}

class BatchVsOracle : public ::testing::TestWithParam<BatchSpec> {};

TEST_P(BatchVsOracle, MixedBatch) {
  const BatchSpec s = GetParam();
  auto rng = fresh_rng();
  const Inputs in(s, rng);
  const Outputs got = run_batch(s, in, rng);
  expect_close(got, oracle(s, in), s.name());
}

const SplitPolicy kAuto{};
const SplitPolicy kOff{SplitPolicy::Mode::disabled, 0};
SplitPolicy fixed(int n) { return {SplitPolicy::Mode::fixed, n}; }

INSTANTIATE_TEST_SUITE_P(
    Grid, BatchVsOracle,
    ::testing::Values(
        spec(DType::f32, 8, 8, 64, 16, KVLayout::NHD, opts(false)),                             // GQA 1
        spec(DType::bf16, 8, 2, 128, 5, KVLayout::HND, opts(true), kAuto, 132),                 // GQA 4, split
        spec(DType::f16, 8, 1, 64, 1, KVLayout::NHD, opts(false, 20, 3), kAuto, 132, 8),        // GQA 8, window
        spec(DType::bf16, 8, 2, 64, 16, KVLayout::NHD, opts(true, -1, -1, 30.0f), fixed(16)),   // softcap + causal
        spec(DType::f32, 4, 4, 32, 256, KVLayout::HND, opts(false, -1, 0, 5.0f), fixed(7)),     // right window + cap
        spec(DType::f16, 16, 2, 64, 16, KVLayout::HND, opts(true, 30, -1), kAuto, 132),         // GQA 8, causal+window
        spec(DType::bf16, 8, 1, 256, 16, KVLayout::NHD, opts(true), kOff, 2, 4),                // d256, MQA
        spec(DType::f32, 8, 2, 64, 5, KVLayout::NHD, opts(true, 0, 0), fixed(3))),              // diagonal only
    [](const ::testing::TestParamInfo<BatchSpec>& info) { return "case" + std::to_string(info.index); });

TEST(BatchAttention, PagedReadsAreIndependentOfPageSizeAndLayout) {
  auto rng = fresh_rng();
  for (DType dt : {DType::bf16, DType::f32}) {
    BatchSpec base = spec(dt, 8, 2, 64, 1, KVLayout::NHD, opts(true), kOff);
    const Inputs in(base, rng);
    const Outputs ref = run_batch(base, in, rng);
    expect_close(ref, oracle(base, in), base.name());
    for (int ps : {1, 5, 16, 256})
      for (KVLayout layout : {KVLayout::NHD, KVLayout::HND}) {
        BatchSpec s = base;
        s.page_size = ps;
        s.layout = layout;
        const Outputs got = run_batch(s, in, rng);
        EXPECT_EQ(got.out.bytes(), ref.out.bytes()) << s.name();  // same bits, not merely close
        EXPECT_EQ(got.lse.bytes(), ref.lse.bytes()) << s.name();
      }
  }
}

TEST(BatchAttention, EverySplitGivesTheSameResultWithinRounding) {
  auto rng = fresh_rng();
  for (DType dt : {DType::f32, DType::bf16}) {
    BatchSpec base = spec(dt, 8, 2, 64, 16, KVLayout::NHD, opts(true), kOff);
    base.q_lens = {1, 1, 20, 1, 3};
    base.kv_lens = {300, 1, 150, 0, 64};
    const Inputs in(base, rng);
    const Oracle o = oracle(base, in);
    const Outputs whole = run_batch(base, in, rng);
    expect_close(whole, o, base.name());
    const double floor = rounding_floor(dt, max_abs(o.ref.o));
    std::vector<SplitPolicy> splits{kAuto};
    for (int chunk : {1, 2, 3, 7, 16, 63, 64, 100, 149, 150, 299, 300, 1000}) splits.push_back(fixed(chunk));
    for (const SplitPolicy& sp : splits)
      for (int sms : {1, 132}) {
        BatchSpec s = base;
        s.split = sp;
        s.num_sms = sms;
        const Outputs got = run_batch(s, in, rng);
        expect_close(got, o, s.name());
        EXPECT_LE(max_abs_error(got.out_packed, whole.out_packed), 2 * floor) << s.name();
        EXPECT_LE(max_abs_error(got.lse_packed, whole.lse_packed), 1e-5 * (1 + max_abs(whole.lse_packed))) << s.name();
      }
  }
}

TEST(BatchAttention, DeterministicAcrossThreadCounts) {
  auto rng = fresh_rng();
  BatchSpec s = spec(DType::bf16, 8, 2, 64, 16, KVLayout::HND, opts(true), kAuto, 132);
  const Inputs in(s, rng);
  s.num_threads = 1;
  const Outputs one = run_batch(s, in, rng);
  s.num_threads = 2;
  const Outputs two = run_batch(s, in, rng);
  s.num_threads = 5;
  const Outputs five = run_batch(s, in, rng);
  EXPECT_EQ(one.out.bytes(), two.out.bytes());
  EXPECT_EQ(one.out.bytes(), five.out.bytes());
  EXPECT_EQ(one.lse.bytes(), five.lse.bytes());
}

TEST(BatchAttention, EmptyKvGivesZeroAndMinusInfinity) {
  auto rng = fresh_rng();
  BatchSpec s = spec(DType::f16, 4, 1, 32, 16, KVLayout::NHD, opts(false), fixed(8));
  s.q_lens = {3, 1};
  s.kv_lens = {0, 0};
  const Inputs in(s, rng);
  const Outputs got = run_batch(s, in, rng);
  for (double x : got.out_packed) EXPECT_EQ(x, 0.0);
  for (double x : got.lse_packed) EXPECT_EQ(x, -INFINITY);
}

// A new plan() into the same workspace replaces the old one completely: run() then matches
// the new batch (no stale items, merges or partials).
TEST(BatchAttention, ReplanIntoTheSameWorkspace) {
  auto rng = fresh_rng();
  BatchConfig c;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.head_dim = 32;
  c.dtype = DType::f32;
  c.page_size = 4;
  c.options.return_lse = true;
  c.split = fixed(5);
  c.max_requests = 4;
  c.max_q_tokens = 64;
  const DeviceFacts facts{Device::cpu(), 2};
  BatchAttention ba(c);
  Buffer ws(1 << 22);
  const Workspace w{ws.data(), ws.bytes, Device::cpu()};
  // K/V of one request of 30 tokens in pages 0..7; the second plan reads only its prefix.
  HostTensor ck(DType::f32, {8, 4, 2, 32}), cv(DType::f32, {8, 4, 2, 32});
  ck.fill_normal(rng);
  cv.fill_normal(rng);
  HostTensor q(DType::f32, {7, 4, 32});
  q.fill_normal(rng);
  const PagedKVCache cache{ck.view(), cv.view(), KVLayout::NHD};
  auto table_of = [](std::vector<int> lens) {
    HostPageTable t;
    t.page_size = 4;
    std::int32_t next = 0;
    for (int len : lens) {
      const int n = (len + 3) / 4;
      for (int j = 0; j < n; ++j) t.kv_indices.push_back(next++);
      t.kv_indptr.push_back(static_cast<std::int32_t>(t.kv_indices.size()));
      t.kv_last_page_len.push_back(len == 0 ? 0 : len - (n - 1) * 4);
    }
    return t;
  };
  HostTensor out_a(DType::f32, {7, 4, 32}), lse_a(DType::f32, {4, 7});
  HostTensor out_b(DType::f32, {7, 4, 32}), lse_b(DType::f32, {4, 7});
  HostPageTable t_a = table_of({30}), t_b = table_of({30});
  ba.plan(std::vector<std::int32_t>{7}, std::vector<std::int32_t>{30}, facts, w);
  ba.run(q.view(), cache, t_a.view(), out_a.view(), lse_a.view(), w);
  EXPECT_EQ(out_a.count_nan(), 0);  // the bytes compared below must have been written
  EXPECT_EQ(lse_a.count_nan(), 0);
  // A different plan (decode rows, other split), then the first again: same bits as before.
  HostPageTable t_mid = table_of({9, 2});
  HostTensor q_mid(DType::f32, {2, 4, 32}), out_mid(DType::f32, {2, 4, 32}), lse_mid(DType::f32, {4, 2});
  q_mid.fill_normal(rng);
  ba.plan(std::vector<std::int32_t>{1, 1}, std::vector<std::int32_t>{9, 2}, facts, w);
  ba.run(q_mid.view(), cache, t_mid.view(), out_mid.view(), lse_mid.view(), w);
  EXPECT_EQ(out_mid.count_nan(), 0);
  EXPECT_EQ(lse_mid.count_nan(), 0);
  ba.plan(std::vector<std::int32_t>{7}, std::vector<std::int32_t>{30}, facts, w);
  ba.run(q.view(), cache, t_b.view(), out_b.view(), lse_b.view(), w);
  EXPECT_EQ(out_a.bytes(), out_b.bytes());
  EXPECT_EQ(lse_a.bytes(), lse_b.bytes());
}

TEST(BatchAttention, WithoutLseTheLseArgumentMayBeAbsent) {
  auto rng = fresh_rng();
  BatchConfig c;
  c.heads_q = 2;
  c.heads_kv = 1;
  c.head_dim = 16;
  c.dtype = DType::bf16;
  c.page_size = 8;
  c.max_requests = 1;
  c.max_q_tokens = 1;
  const DeviceFacts facts{Device::cpu(), 1};
  BatchAttention ba(c);
  Buffer ws(BatchAttention::workspace_size(c, facts));
  const Workspace w{ws.data(), ws.bytes, Device::cpu()};
  HostTensor ck(DType::bf16, {2, 8, 1, 16}), cv(DType::bf16, {2, 8, 1, 16}), q(DType::bf16, {1, 2, 16}),
      out(DType::bf16, {1, 2, 16});
  ck.fill_normal(rng);
  cv.fill_normal(rng);
  q.fill_normal(rng);
  HostPageTable t;
  t.page_size = 8;
  t.kv_indices = {1, 0};
  t.kv_indptr = {0, 2};
  t.kv_last_page_len = {3};
  ba.plan(std::vector<std::int32_t>{1}, std::vector<std::int32_t>{11}, facts, w);
  ba.run(q.view(), PagedKVCache{ck.view(), cv.view(), KVLayout::NHD}, t.view(), out.view(), Tensor{}, w);
  EXPECT_EQ(out.count_nan(), 0);
}

}  // namespace
}  // namespace tessera::testing
