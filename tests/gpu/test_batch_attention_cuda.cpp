// BatchAttention on CUDA (plan into a cudaMalloc'd workspace, run the serving kernels of
// src/cuda/batch/) against the fp64 oracle under the tolerance rule of test_support.h, and
// against the CPU executor of the very same plan (same num_sms, so the same work items and
// KV splits). Mixed batches run in one fused launch (both shapes); decode-only layouts in the
// decode-only instance. Mixed batches of prefill chunks and decode tokens with kv_len 0, 1 and a long
// request (32k; one 128k case checked on one kv head's query group), GQA 1/4/8 (and 32, 128:
// the prefill-shaped kernel for decode rows, several vector blocks per item), head_dim
// 64/128/256, bf16/fp16, NHD/HND, page sizes 1/5/16/128/256, causal, window, soft cap,
// automatic/fixed/disabled splits. Unowned pages are NaN, outputs are poisoned before every
// run and their margins checked. A CUDA graph captured around run() is replayed after a new
// plan() into the same workspace with other lengths.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cpu/reference.h"
#include "gpu/gpu_support.h"
#include "cuda/batch/batch_args.h"
#include "plan/batch_plan.h"
#include "support/test_support.h"
#include "tessera/batch.h"
#include "tessera/error.h"

namespace tessera::testing {
namespace {

struct Spec {
  DType dtype = DType::bf16;
  int heads_q = 8, heads_kv = 2, head_dim = 128;
  int page_size = 16;
  KVLayout layout = KVLayout::NHD;
  std::vector<int> q_lens, kv_lens;
  AttentionOptions options;
  SplitPolicy split;
  std::int64_t row_pad = 0;  // q/out rows padded (non-contiguous)
  int check_kv_head = -1;    // >= 0: compare only this kv head's query group with the oracle
  bool with_cpu = true;      // also run the CPU executor on the same plan
  std::string name() const {
    std::string s = std::string(dtype_name(dtype)) + " hq" + std::to_string(heads_q) + " hkv" +
                    std::to_string(heads_kv) + " d" + std::to_string(head_dim) + " page" + std::to_string(page_size) +
                    " " + kv_layout_name(layout) + (options.causal ? " causal" : "") + " window(" +
                    std::to_string(options.window_left) + "," + std::to_string(options.window_right) + ") softcap " +
                    std::to_string(options.softcap) + " split " + std::to_string(static_cast<int>(split.mode)) + "/" +
                    std::to_string(split.kv_chunk_tokens) + " batch " + std::to_string(q_lens.size());
    return s;
  }
};

void PrintTo(const Spec& s, std::ostream* os) { *os << s.name(); }

// cudaMalloc'd bytes, freed on scope exit.
struct DeviceBytes {
  explicit DeviceBytes(std::size_t n) : bytes(n) { TESSERA_TEST_CUDA(cudaMalloc(&data, n)); }
  ~DeviceBytes() { (void)cudaFree(data); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  void* data = nullptr;
  std::size_t bytes = 0;
};

// 16-byte aligned host workspace for the CPU executor.
struct HostBytes {
  explicit HostBytes(std::size_t n) : bytes(n), storage(n / 16 + 2) {}
  void* data() { return storage.data(); }
  std::size_t bytes;
  std::vector<plan::PlanHeader> storage;
};

struct Stream {
  Stream() { TESSERA_TEST_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { (void)cudaStreamDestroy(s); }
  cudaStream_t s = nullptr;
};

// q and dense (ragged) K/V of a batch, and the same K/V in a paged cache behind a shuffled
// page table with a few unowned pages; every unowned slot stays NaN.
struct Problem {
  Problem(const Spec& s, std::mt19937_64& rng) : spec(s) {
    const int batch = static_cast<int>(s.q_lens.size());
    cu_q.push_back(0);
    cu_k.push_back(0);
    for (int b = 0; b < batch; ++b) {
      cu_q.push_back(cu_q.back() + s.q_lens[static_cast<std::size_t>(b)]);
      cu_k.push_back(cu_k.back() + s.kv_lens[static_cast<std::size_t>(b)]);
    }
    q = HostTensor(s.dtype, {cu_q.back(), s.heads_q, s.head_dim}, s.row_pad);
    k = HostTensor(s.dtype, {cu_k.back(), s.heads_kv, s.head_dim});
    v = HostTensor(s.dtype, {cu_k.back(), s.heads_kv, s.head_dim});
    q.fill_normal(rng);
    k.fill_normal(rng);
    v.fill_normal(rng);
    build_cache(rng);
  }
  // The inputs of `other` in a cache of this spec's page size and layout.
  Problem(const Spec& s, const Problem& other, std::mt19937_64& rng)
      : spec(s), cu_q(other.cu_q), cu_k(other.cu_k), q(other.q), k(other.k), v(other.v) {
    build_cache(rng);
  }
  // Request `request` of `whole` alone (its q, k and v values; a cache of its own).
  Problem(const Problem& whole, int request, std::mt19937_64& rng) : spec(whole.spec) {
    const auto r = static_cast<std::size_t>(request);
    spec.q_lens = {whole.spec.q_lens[r]};
    spec.kv_lens = {whole.spec.kv_lens[r]};
    cu_q = {0, spec.q_lens[0]};
    cu_k = {0, spec.kv_lens[0]};
    q = HostTensor(spec.dtype, {cu_q.back(), spec.heads_q, spec.head_dim}, spec.row_pad);
    k = HostTensor(spec.dtype, {cu_k.back(), spec.heads_kv, spec.head_dim});
    v = HostTensor(spec.dtype, {cu_k.back(), spec.heads_kv, spec.head_dim});
    // Rows [first, first + to's rows) of `from` (same heads and head_dim; values exact).
    auto copy_rows = [](const HostTensor& from, std::int64_t first, HostTensor& to) {
      const std::int64_t per_row = to.shape()[1] * to.shape()[2];
      for (std::int64_t i = 0; i < to.numel(); ++i) to.set(i, from.get(first * per_row + i));
    };
    copy_rows(whole.q, whole.cu_q[r], q);
    copy_rows(whole.k, whole.cu_k[r], k);
    copy_rows(whole.v, whole.cu_k[r], v);
    build_cache(rng);
  }

  void build_cache(std::mt19937_64& rng) {
    const Spec& s = spec;
    const int batch = static_cast<int>(s.q_lens.size());
    const int ps = s.page_size;
    std::vector<int> n_pages(static_cast<std::size_t>(batch));
    int total_pages = 3;  // a few pages nobody owns
    for (int b = 0; b < batch; ++b)
      total_pages += n_pages[static_cast<std::size_t>(b)] = (s.kv_lens[static_cast<std::size_t>(b)] + ps - 1) / ps;
    std::vector<std::int32_t> perm(static_cast<std::size_t>(total_pages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    table = HostPageTable{};
    table.page_size = ps;
    for (int b = 0; b < batch; ++b) {
      for (int j = 0; j < n_pages[static_cast<std::size_t>(b)]; ++j)
        table.kv_indices.push_back(perm[table.kv_indices.size()]);
      table.kv_indptr.push_back(static_cast<std::int32_t>(table.kv_indices.size()));
      const int len = s.kv_lens[static_cast<std::size_t>(b)];
      table.kv_last_page_len.push_back(len == 0 ? 0 : len - (n_pages[static_cast<std::size_t>(b)] - 1) * ps);
    }
    const bool nhd = s.layout == KVLayout::NHD;
    const std::vector<std::int64_t> shape = nhd ? std::vector<std::int64_t>{total_pages, ps, s.heads_kv, s.head_dim}
                                                : std::vector<std::int64_t>{total_pages, s.heads_kv, ps, s.head_dim};
    ck = HostTensor(s.dtype, shape, 8);  // padded head rows: reads past head_dim land on NaN
    cv = HostTensor(s.dtype, shape);
    const Tensor ckv = ck.view(), cvv = cv.view(), kv = k.view(), vv = v.view();
    const auto elem = static_cast<std::int64_t>(dtype_size(s.dtype));
    const auto row_bytes = static_cast<std::size_t>(elem * s.head_dim);
    auto dst = [&](const Tensor& t, std::int64_t page, std::int64_t slot, std::int64_t h) {
      return (page * t.stride[0] + (nhd ? slot * t.stride[1] + h * t.stride[2] : h * t.stride[1] + slot * t.stride[2])) *
             elem;
    };
    for (int b = 0; b < batch; ++b)
      for (int j = 0; j < s.kv_lens[static_cast<std::size_t>(b)]; ++j) {
        const std::int64_t page =
            table.kv_indices[static_cast<std::size_t>(table.kv_indptr[static_cast<std::size_t>(b)] + j / ps)];
        const std::int64_t slot = j % ps;
        for (int h = 0; h < s.heads_kv; ++h) {
          const std::int64_t row = cu_k[static_cast<std::size_t>(b)] + j;
          std::memcpy(static_cast<unsigned char*>(ckv.data) + dst(ckv, page, slot, h),
                      static_cast<const unsigned char*>(kv.data) + (row * kv.stride[0] + h * kv.stride[1]) * elem,
                      row_bytes);
          std::memcpy(static_cast<unsigned char*>(cvv.data) + dst(cvv, page, slot, h),
                      static_cast<const unsigned char*>(vv.data) + (row * vv.stride[0] + h * vv.stride[1]) * elem,
                      row_bytes);
        }
      }
  }

  BatchConfig config(int max_requests = 0, int max_q_tokens = 0) const {
    BatchConfig c;
    c.heads_q = spec.heads_q;
    c.heads_kv = spec.heads_kv;
    c.head_dim = spec.head_dim;
    c.dtype = spec.dtype;
    c.layout = spec.layout;
    c.page_size = spec.page_size;
    c.options = spec.options;
    c.options.return_lse = true;
    c.split = spec.split;
    c.max_requests = std::max<int>(max_requests, std::max<int>(static_cast<int>(spec.q_lens.size()), 1));
    c.max_q_tokens = std::max<int>(max_q_tokens, std::max<int>(cu_q.back(), 1));
    return c;
  }

  Spec spec;
  std::vector<std::int32_t> cu_q, cu_k;
  HostTensor q, k, v, ck, cv;
  HostPageTable table;
};

struct Outputs {
  HostTensor out, lse;
  std::vector<double> out_packed, lse_packed;  // all heads, or the checked group only
};

// Packs out/lse like the oracle: all heads, or the query group of kv head `kvh`.
void pack(const Spec& s, const std::vector<std::int32_t>& cu_q, Outputs& o) {
  const int batch = static_cast<int>(s.q_lens.size());
  const std::vector<std::int64_t> starts(cu_q.begin(), cu_q.end() - 1);
  const Tensor ov = o.out.view(), lv = o.lse.view();
  const int group = s.heads_q / s.heads_kv;
  const int h0 = s.check_kv_head >= 0 ? s.check_kv_head * group : 0;
  const int heads = s.check_kv_head >= 0 ? group : s.heads_q;
  auto* out0 = static_cast<unsigned char*>(ov.data) + h0 * ov.stride[1] * static_cast<std::int64_t>(dtype_size(s.dtype));
  o.out_packed = gather_rows(o.out, StridedPtr{out0, 0, ov.stride[0], ov.stride[1]}, s.dtype, batch, starts, s.q_lens,
                             heads, s.head_dim, true);
  o.lse_packed = gather_lse(o.lse, LsePtr{lv.ptr<float>() + h0 * lv.stride[0], 0, lv.stride[0]}, batch, starts,
                            s.q_lens, heads, true);
}

void expect_written(const Outputs& o, const std::string& what) {
  EXPECT_EQ(o.out.count_nan(), 0) << what << ": out not fully written";
  EXPECT_EQ(o.lse.count_nan(), 0) << what << ": lse not fully written";
  EXPECT_TRUE(o.out.margins_intact()) << what << ": out written outside its view";
  EXPECT_TRUE(o.lse.margins_intact()) << what << ": lse written outside its view";
}

DeviceFacts cuda_facts() { return query_device(Device::cuda(0)); }

// Workspace bytes for a problem: the default size, or what plan() asks for when small fixed
// chunks need more partial rows (the same bytes for CUDA and CPU give the same plan).
std::size_t workspace_bytes(const Problem& pr, int max_requests = 0, int max_q_tokens = 0) {
  const BatchConfig c = pr.config(max_requests, max_q_tokens);
  const DeviceFacts facts{Device::cpu(), cuda_facts().num_sms};
  const std::size_t bytes = BatchAttention::workspace_size(c, facts);
  HostBytes ws(bytes);
  BatchAttention ba(c);
  const std::vector<std::int32_t> ql(pr.spec.q_lens.begin(), pr.spec.q_lens.end()),
      kl(pr.spec.kv_lens.begin(), pr.spec.kv_lens.end());
  try {
    ba.plan(ql, kl, facts, Workspace{ws.data(), ws.bytes, Device::cpu()});
  } catch (const Error& e) {
    if (e.code() != ErrorCode::workspace_too_small) throw;
    const std::string msg = e.what();
    return std::stoull(msg.substr(msg.find("at least ") + 9));
  }
  return bytes;
}

// Plan and run on CUDA (workspace, q, cache, table, out, lse all in device memory); capacities
// at least (max_requests, max_q_tokens) when given.
Outputs run_cuda(const Problem& pr, const ExecutionContext& ctx, int max_requests = 0, int max_q_tokens = 0) {
  const Spec& s = pr.spec;
  const BatchConfig c = pr.config(max_requests, max_q_tokens);
  const DeviceFacts facts = cuda_facts();
  DeviceBytes ws(workspace_bytes(pr, max_requests, max_q_tokens));
  const Workspace w{ws.data, ws.bytes, Device::cuda(0)};
  BatchAttention ba(c);
  const std::vector<std::int32_t> ql(s.q_lens.begin(), s.q_lens.end()), kl(s.kv_lens.begin(), s.kv_lens.end());
  ba.plan(ql, kl, facts, w, ctx);

  Outputs o;
  o.out = HostTensor(s.dtype, {pr.cu_q.back(), s.heads_q, s.head_dim}, s.row_pad);
  o.lse = HostTensor(DType::f32, {s.heads_q, pr.cu_q.back()});
  DeviceTensor dq(pr.q), dck(pr.ck), dcv(pr.cv), dout(o.out), dlse(o.lse);
  HostTensor indptr = int_tensor(pr.table.kv_indptr), indices = int_tensor(pr.table.kv_indices),
             last = int_tensor(pr.table.kv_last_page_len);
  DeviceTensor dindptr(indptr), dindices(indices), dlast(last);
  dout.poison(o.out);
  dlse.poison(o.lse);
  const PagedKVCache cache{dck.view(), dcv.view(), s.layout};
  const PageTable table{dindptr.view(), dindices.view(), dlast.view()};
  ba.run(dq.view(), cache, table, dout.view(), dlse.view(), w, ctx);
  TESSERA_TEST_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(ctx.stream)));
  TESSERA_TEST_CUDA(cudaGetLastError());
  dout.download(o.out);
  dlse.download(o.lse);
  pack(s, pr.cu_q, o);
  return o;
}

// The CPU executor on the plan the CUDA device gets (facts with the device's SM count).
Outputs run_cpu(const Problem& pr) {
  const Spec& s = pr.spec;
  const BatchConfig c = pr.config();
  const DeviceFacts facts{Device::cpu(), cuda_facts().num_sms};
  HostBytes ws(workspace_bytes(pr));
  const Workspace w{ws.data(), ws.bytes, Device::cpu()};
  BatchAttention ba(c);
  const std::vector<std::int32_t> ql(s.q_lens.begin(), s.q_lens.end()), kl(s.kv_lens.begin(), s.kv_lens.end());
  ba.plan(ql, kl, facts, w);
  Outputs o;
  o.out = HostTensor(s.dtype, {pr.cu_q.back(), s.heads_q, s.head_dim}, s.row_pad);
  o.lse = HostTensor(DType::f32, {s.heads_q, pr.cu_q.back()});
  HostPageTable table = pr.table;
  ba.run(pr.q.view(), PagedKVCache{pr.ck.view(), pr.cv.view(), s.layout}, table.view(), o.out.view(), o.lse.view(), w);
  pack(s, pr.cu_q, o);
  return o;
}

// The merge kernel a problem's run() takes (src/cuda/batch/merge_kernel.cu, launch_merge):
// the fan-in kernel (one thread per value, 32 partials' weights per warp step) when the plan's
// split rows carry more than 16 partials on average and main's kernel would have at most one
// 256-thread block per SM; the rows kernel (8 values per thread) otherwise. Read from the
// header of the same plan made on the host (same num_sms, so the same split).
struct MergeShape {
  int rows = 0, fan_in = 0;
  bool fan_in_kernel = false;
  int items = 0;  // work items of the plan
};
MergeShape merge_shape(const Problem& pr, int max_requests = 0, int max_q_tokens = 0) {
  const Spec& s = pr.spec;
  const BatchConfig c = pr.config(max_requests, max_q_tokens);
  const DeviceFacts facts{Device::cpu(), cuda_facts().num_sms};
  HostBytes ws(workspace_bytes(pr, max_requests, max_q_tokens));
  BatchAttention ba(c);
  const std::vector<std::int32_t> ql(s.q_lens.begin(), s.q_lens.end()), kl(s.kv_lens.begin(), s.kv_lens.end());
  ba.plan(ql, kl, facts, Workspace{ws.data(), ws.bytes, Device::cpu()});
  const plan::WorkspaceLayout layout = plan::workspace_layout(plan::make_plan_config(c, facts), ws.bytes);
  plan::PlanHeader h;
  std::memcpy(&h, static_cast<const unsigned char*>(ws.data()) + layout.header, sizeof h);
  plan::PlanSummary summary;
  summary.num_merge_rows = h.num_merge_rows;
  summary.num_partial_rows = h.num_partial_rows;
  MergeShape m;
  m.rows = h.num_merge_rows;
  m.fan_in = plan::mean_merge_fan_in(summary);
  m.items = h.num_items;
  // The launcher's own rule (one definition), so the expectation cannot drift from it.
  m.fan_in_kernel = cuda::batch::merge_uses_fan_in_kernel(m.rows, m.fan_in, s.heads_q, s.head_dim, facts.num_sms);
  return m;
}

struct Oracle {
  cpu::reference::ForwardResult ref;
  double tol_o = 0, tol_l = 0;
};

// The fp64 oracle (and the same-precision naive baseline for the tolerance) on the dense
// ragged K/V: all heads, or only kv head check_kv_head with its query group.
Oracle oracle(const Problem& pr) {
  const Spec& s = pr.spec;
  AttentionParams p;
  p.dtype = s.dtype;
  p.device = Device::cpu();
  p.batch = static_cast<int>(s.q_lens.size());
  const int group = s.heads_q / s.heads_kv;
  const bool subset = s.check_kv_head >= 0;
  p.heads_q = subset ? group : s.heads_q;
  p.heads_kv = subset ? 1 : s.heads_kv;
  p.head_dim = s.head_dim;
  p.seq_q = *std::max_element(s.q_lens.begin(), s.q_lens.end());
  p.seq_k = *std::max_element(s.kv_lens.begin(), s.kv_lens.end());
  p.cu_seqlens_q = pr.cu_q.data();
  p.cu_seqlens_k = pr.cu_k.data();
  p.total_q = pr.cu_q.back();
  p.total_k = pr.cu_k.back();
  const Tensor q = pr.q.view(), k = pr.k.view(), v = pr.v.view();
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(s.dtype));
  const int qh0 = subset ? s.check_kv_head * group : 0, kh0 = subset ? s.check_kv_head : 0;
  p.q = {static_cast<unsigned char*>(q.data) + qh0 * q.stride[1] * elem, 0, q.stride[0], q.stride[1]};
  p.k = {static_cast<unsigned char*>(k.data) + kh0 * k.stride[1] * elem, 0, k.stride[0], k.stride[1]};
  p.v = {static_cast<unsigned char*>(v.data) + kh0 * v.stride[1] * elem, 0, v.stride[0], v.stride[1]};
  p.mask.scale = s.options.scale ? *s.options.scale : 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  p.mask.softcap = s.options.softcap;
  p.mask.causal = s.options.causal;
  p.mask.window_left = s.options.window_left;
  p.mask.window_right = s.options.window_right;
  Oracle o;
  o.ref = cpu::reference::forward(p);
  std::vector<double> naive_lse;
  const auto naive = naive_same_precision_forward(p, &naive_lse);
  o.tol_o = tolerance(naive, o.ref.o, s.dtype);
  o.tol_l = tolerance(naive_lse, o.ref.lse, DType::f32);
  return o;
}

void expect_close(const Outputs& got, const Oracle& o, const std::string& what) {
  EXPECT_LE(max_abs_error(got.out_packed, o.ref.o), o.tol_o) << what;
  EXPECT_LE(max_abs_error(got.lse_packed, o.ref.lse), o.tol_l) << what;  // -inf exactly where the oracle has it
}

// Runs a problem on CUDA and checks it against the oracle and the CPU executor. merge: 1 / 0
// to expect the fan-in / rows merge kernel (merge_shape), -1 for no expectation.
void check(const Spec& s, int merge = -1) {
  auto rng = fresh_rng();
  const Problem pr(s, rng);
  if (merge >= 0) {
    const MergeShape m = merge_shape(pr);
    EXPECT_EQ(m.fan_in_kernel, merge == 1) << s.name() << ": " << m.rows << " merge rows, fan-in " << m.fan_in;
  }
  Stream stream;
  const Outputs gpu = run_cuda(pr, ExecutionContext{stream.s, 0});
  expect_written(gpu, s.name());
  const Oracle o = oracle(pr);
  expect_close(gpu, o, "cuda vs oracle: " + s.name());
  if (s.with_cpu) {
    const Outputs cpu = run_cpu(pr);
    expect_close(cpu, o, "cpu vs oracle: " + s.name());
    // Same plan, same arithmetic up to the rounding of P to 16 bits for the tensor cores.
    EXPECT_LE(max_abs_error(gpu.out_packed, cpu.out_packed), o.tol_o) << "cuda vs cpu: " << s.name();
    EXPECT_LE(max_abs_error(gpu.lse_packed, cpu.lse_packed), o.tol_l) << "cuda vs cpu: " << s.name();
  }
}

const SplitPolicy kAuto{};
const SplitPolicy kOff{SplitPolicy::Mode::disabled, 0};
SplitPolicy fixed(int n) { return {SplitPolicy::Mode::fixed, n}; }

// Mixed batch: prefill chunks over several Q tiles, decode tokens, kv_len 0 and 1, q_len 0,
// q_len > kv_len (top rows fully masked under causal), a long decode request.
const std::vector<int> kMixedQ{7, 1, 1, 0, 33, 1, 5, 2, 70, 1};
const std::vector<int> kMixedKv{40, 0, 1, 12, 100, 300, 5, 1, 90, 32768};

Spec spec(DType dt, int hq, int hkv, int d, int ps, KVLayout layout, AttentionOptions o, SplitPolicy split = {},
          std::int64_t pad = 0) {
  Spec s;
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
  s.row_pad = pad;
  return s;
}

class BatchCuda : public ::testing::TestWithParam<Spec> {};

TEST_P(BatchCuda, MixedBatchMatchesOracleAndCpu) { check(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Grid, BatchCuda,
    ::testing::Values(
        spec(DType::bf16, 8, 8, 128, 16, KVLayout::NHD, opts(true)),                             // GQA 1
        spec(DType::bf16, 8, 2, 128, 5, KVLayout::HND, opts(true)),                              // GQA 4
        spec(DType::f16, 16, 2, 128, 1, KVLayout::NHD, opts(false, 20, 3)),                      // GQA 8, window
        spec(DType::bf16, 8, 1, 64, 128, KVLayout::NHD, opts(true, -1, -1, 30.0f), fixed(64)),   // softcap, fixed
        spec(DType::f16, 8, 2, 64, 256, KVLayout::HND, opts(false, -1, 0, 5.0f), fixed(7)),      // tiny chunks
        spec(DType::f16, 16, 2, 256, 16, KVLayout::HND, opts(true, 30, -1), kAuto, 8),           // d256, padded q/out
        spec(DType::bf16, 8, 1, 256, 5, KVLayout::NHD, opts(true), kOff),                        // d256 MQA, no split
        spec(DType::bf16, 4, 4, 64, 16, KVLayout::NHD, opts(true, 0, 0)),                        // diagonal only
        spec(DType::bf16, 32, 1, 128, 16, KVLayout::HND, opts(true)),                            // group 32
        spec(DType::f16, 128, 1, 64, 16, KVLayout::NHD, opts(true), fixed(100)),                 // group 128: 1 row a unit
        spec(DType::bf16, 8, 2, 128, 256, KVLayout::NHD, opts(false), fixed(1000))),             // long chunks
    [](const ::testing::TestParamInfo<Spec>& info) { return "case" + std::to_string(info.index); });

// Decode-only and prefill-only batches, and a prefill chunk against a long cache. Group 16 fills
// a decode unit's 16 vectors with one kv head's query heads (kDecodeMaxVectors).
TEST(BatchCuda, DecodeOnlyAndPrefillOnly) {
  for (int group : {1, 4, 8, 16}) {
    const int heads_q = std::max(8, group);
    Spec s = spec(DType::bf16, heads_q, heads_q / group, 128, 16, KVLayout::NHD, opts(true));
    s.q_lens = {1, 1, 1, 1, 1, 1};
    s.kv_lens = {1, 17, 64, 65, 1000, 4097};
    check(s);
    s.q_lens = {128, 3, 64, 200};
    s.kv_lens = {128, 2000, 64, 5000};
    check(s);
  }
  Spec s = spec(DType::f16, 8, 2, 128, 16, KVLayout::HND, opts(true));
  s.q_lens = {3, 1};
  s.kv_lens = {32768, 0};
  check(s);
}

// Prefill items of 128 packed vectors (head_dim <= 128; 64 at 256), run on CUDA as two m16
// row blocks per warp over one pass of K/V (docs/perf/mixed_batch.md): every edge of how
// items are formed and of the second block. Per layout, requests of 1..129 rows: a single
// decode-shaped tile (<= 16 vectors), one block only (<= 64 vectors: the second block of every
// warp skipped), a partly filled second block, exactly two, odd counts, a remainder tile
// after whole ones, and q_len > kv_len under causal masking (a whole first block of empty
// rows: O = 0, LSE = -inf). Causal tails (the second block sees 64 / group more keys), a
// window (blocks that skip leading tiles), no mask; page sizes 1, 16 and 256; group 3 (a
// query token's heads straddle the two blocks) and group 1 (128 rows an item); the three
// split policies.
TEST(BatchCuda, TwoBlockItemsEdges) {
  struct Layout { DType dt; int hq, hkv, d; };
  // Groups 4, 1, 3, 8, 4 (d256); then groups that do not divide 64 (5, 24; 3 at d64, which runs
  // the window and the fixed-64 masks) and one over 64 at d64 (96: a row's heads fill block 0
  // and part of block 1).
  const std::vector<Layout> layouts{{DType::bf16, 8, 2, 128},  {DType::f16, 8, 8, 64},  {DType::bf16, 24, 8, 128},
                                    {DType::bf16, 16, 2, 128}, {DType::f16, 8, 2, 256}, {DType::bf16, 40, 8, 128},
                                    {DType::bf16, 24, 1, 128}, {DType::f16, 24, 8, 64}, {DType::f16, 96, 1, 64}};
  struct Mask { AttentionOptions o; SplitPolicy split; int page; KVLayout kv; };
  const std::vector<Mask> masks{{opts(true), kOff, 16, KVLayout::NHD},
                                {opts(true, 40, -1), kAuto, 1, KVLayout::HND},
                                {opts(false), fixed(96), 256, KVLayout::NHD},
                                {opts(true), fixed(64), 16, KVLayout::HND}};
  for (std::size_t l = 0; l < layouts.size(); ++l)
    for (std::size_t m = 0; m < masks.size(); ++m) {
      if ((l + m) % 2 == 1 && l != 0) continue;  // half of the pairs beyond the bench layout (time)
      const Layout& ly = layouts[l];
      const Mask& mk = masks[m];
      Spec s = spec(ly.dt, ly.hq, ly.hkv, ly.d, mk.page, mk.kv, mk.o, mk.split);
      s.q_lens = {1, 4, 5, 16, 17, 31, 32, 33, 40, 63, 64, 65, 97, 129, 1};
      s.kv_lens = {300, 4, 700, 16, 500, 31, 90, 33, 20, 700, 64, 65, 97, 700, 4096};
      check(s);
      if (HasFailure()) return;
    }
}

// Prefill edges for the sm90 batch-prefill kernel (docs/perf/batch_prefill_sm90.md, step 1; it
// takes these cases by default on compute capability 9.0; the CTest entry
// gpu.test_batch_attention_cuda_portable, TESSERA_CUDA_BATCH=portable, gives them to the mma.sync
// kernels, which are the default elsewhere): odd
// lengths, seq_q != seq_k both ways (q > kv under causal: fully masked rows), empty KV, items
// whose keys start or end inside a 128-key tile (splits of 96 and 64 keys), soft cap, groups 1,
// 3, 4, 5 and 256 (two units per row) at head_dim 128.
TEST(BatchCuda, Sm90PrefillEdges) {
  struct Layout { DType dt; int hq, hkv; };
  const std::vector<Layout> layouts{{DType::bf16, 32, 8}, {DType::f16, 8, 8}, {DType::bf16, 24, 8},
                                    {DType::bf16, 40, 8}, {DType::bf16, 256, 1}};
  struct Mask { AttentionOptions o; SplitPolicy split; int page; KVLayout kv; };
  const std::vector<Mask> masks{{opts(true), kOff, 16, KVLayout::NHD},
                                {opts(true, 40, 0), fixed(96), 1, KVLayout::HND},
                                {opts(false, -1, -1, 30.0f), kAuto, 256, KVLayout::NHD},
                                {opts(true, -1, -1, 30.0f), fixed(64), 16, KVLayout::HND}};
  for (std::size_t l = 0; l < layouts.size(); ++l)
    for (std::size_t m = 0; m < masks.size(); ++m) {
      if (layouts[l].hq == 256 && m % 2 == 1) continue;  // the 256-head layout twice (time)
      Spec s = spec(layouts[l].dt, layouts[l].hq, layouts[l].hkv, 128, masks[m].page, masks[m].kv, masks[m].o,
                    masks[m].split);
      s.q_lens = {1023, 113, 17, 1, 113, 0, 17};
      s.kv_lens = {1023, 1113, 16, 2000, 0, 50, 17};
      if (layouts[l].hq == 256) s.q_lens = {113, 17, 1, 0}, s.kv_lens = {1113, 16, 2000, 50};
      check(s);
      if (HasFailure()) return;
    }
}

// Decode items by claims beside the prefill (the SM split, the default on compute capability
// 9.0 at head dims 64 and 128): the edges of the pipeline are the tile counts around the stage
// count: 0 to 7 tiles of 64 keys, keys ending inside or at a tile's end, items of a split row
// starting mid-request (fixed(100)); decode kv lengths 0..385 beside a 200-row prefill chunk.
// Page sizes 1, 16 (NHD) and 5 (HND); f16 and bf16; groups 1, 4, 8.
TEST(BatchCuda, SplitDecodeTileEdges) {
  struct Case { DType dt; int hq, hkv, d, page; KVLayout kv; SplitPolicy split; };
  const std::vector<Case> cases{{DType::bf16, 32, 8, 128, 16, KVLayout::NHD, kAuto},
                                {DType::f16, 8, 8, 128, 1, KVLayout::NHD, fixed(100)},
                                {DType::bf16, 16, 2, 64, 5, KVLayout::HND, kOff},
                                {DType::f16, 32, 4, 64, 16, KVLayout::NHD, fixed(100)}};
  for (const Case& c : cases) {
    Spec s = spec(c.dt, c.hq, c.hkv, c.d, c.page, c.kv, opts(true), c.split);
    s.q_lens = {200};
    s.kv_lens = {700};
    for (int kv : {0, 1, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257, 385}) {
      s.q_lens.push_back(1);
      s.kv_lens.push_back(kv);
    }
    check(s);
    if (HasFailure()) return;
  }
}

// Groups larger than one unit: 256 query heads of one kv head at head_dim 128 and 128 at 256
// give two units per query row (row_blocks 2), each a full set of rows.
TEST(BatchCuda, GroupsOfSeveralUnits) {
  for (auto [hq, d] : {std::pair{256, 128}, std::pair{128, 256}}) {
    Spec s = spec(DType::bf16, hq, 1, d, 16, KVLayout::NHD, opts(true));
    s.q_lens = {3, 1, 20, 1};
    s.kv_lens = {50, 300, 40, 0};
    check(s);
  }
}

// batch.h: with SplitPolicy::disabled (and fixed) a request's output does not depend on the
// batch it runs in. Each request of a mixed batch, run alone under the same capacities (same
// instances and grids), must give the same bits as inside the batch. With fixed(96) the merge
// kernel changes too (merge_shape, on 132 SMs): the batch takes the fan-in kernel at d64 / d128
// (163 rows, mean fan-in 18) and the rows kernel at d256 (too many rows x heads x values);
// requests 0 and 1 alone the rows kernel (fan-in 10, 4), request 4 alone the fan-in kernel (21).
TEST(BatchCuda, RequestResultsDoNotDependOnTheBatch) {
  auto rng = fresh_rng();
  for (const SplitPolicy split : {kOff, fixed(96)})
    for (auto [hq, hkv, d] : {std::tuple{8, 2, 128}, std::tuple{8, 8, 64}, std::tuple{8, 2, 256}}) {
      Spec s = spec(DType::bf16, hq, hkv, d, 16, KVLayout::NHD, opts(true), split);
      s.q_lens = {1, 33, 17, 5, 129, 64, 1};
      s.kv_lens = {900, 300, 17, 40, 2000, 70, 0};
      const Problem whole(s, rng);
      Stream stream;
      const ExecutionContext ctx{stream.s, 0};
      const int max_requests = static_cast<int>(s.q_lens.size()), max_q = whole.cu_q.back();
      const Outputs all = run_cuda(whole, ctx);
      expect_written(all, s.name());
      for (int r = 0; r < max_requests; ++r) {
        if (s.q_lens[static_cast<std::size_t>(r)] == 0) continue;
        const Problem one(whole, r, rng);
        const Outputs alone = run_cuda(one, ctx, max_requests, max_q);
        const std::int64_t rows = s.q_lens[static_cast<std::size_t>(r)], first = whole.cu_q[static_cast<std::size_t>(r)];
        const std::int64_t per_row = static_cast<std::int64_t>(hq) * d;
        int diff_o = 0, diff_l = 0;
        for (std::int64_t i = 0; i < rows * per_row; ++i) {
          const float a = alone.out.get(i), b = all.out.get(first * per_row + i);
          if (std::memcmp(&a, &b, sizeof a) != 0) ++diff_o;
        }
        for (int h = 0; h < hq; ++h)
          for (std::int64_t t = 0; t < rows; ++t) {
            const float a = alone.lse.get(h * rows + t), b = all.lse.get(h * whole.cu_q.back() + first + t);
            if (std::memcmp(&a, &b, sizeof a) != 0) ++diff_l;
          }
        EXPECT_EQ(diff_o, 0) << "request " << r << " out, " << s.name();
        EXPECT_EQ(diff_l, 0) << "request " << r << " lse, " << s.name();
      }
    }
}

// The merge kernel is picked by the plan's fan-in (merge_shape above): a long request split 43
// ways alone takes the fan-in kernel (1 row, 43 partials), inside a batch of 15 short split
// requests the rows kernel (16 rows, mean fan-in 6). With a fixed split its partials are the
// same in both, so its output must be the same bits: both kernels do the same rounded
// operations per element in the same order (merge_kernel.cu). Same capacities both times.
TEST(BatchCuda, MergeShapeDoesNotChangeTheResult) {
  auto rng = fresh_rng();
  for (auto [dt, d] : {std::pair{DType::bf16, 128}, std::pair{DType::f16, 64}, std::pair{DType::bf16, 256}}) {
    Spec s = spec(dt, 32, 8, d, 16, KVLayout::NHD, opts(true), fixed(96));
    constexpr int kBatch = 16;
    s.q_lens.assign(kBatch, 1);
    s.kv_lens.assign(kBatch, 200);  // 3 chunks of 96
    s.kv_lens[0] = 4096;            // 43 chunks of 96
    const Problem whole(s, rng);
    const Problem one(whole, 0, rng);
    const int max_q = static_cast<int>(whole.cu_q.back());
    const MergeShape batched = merge_shape(whole), alone_shape = merge_shape(one, kBatch, max_q);
    EXPECT_FALSE(batched.fan_in_kernel) << batched.rows << " merge rows, fan-in " << batched.fan_in;
    EXPECT_TRUE(alone_shape.fan_in_kernel) << alone_shape.rows << " merge rows, fan-in " << alone_shape.fan_in;
    Stream stream;
    const ExecutionContext ctx{stream.s, 0};
    const Outputs all = run_cuda(whole, ctx);
    expect_written(all, s.name());
    const Outputs alone = run_cuda(one, ctx, kBatch, max_q);
    expect_written(alone, s.name() + " alone");
    const std::int64_t per_row = 32LL * d;
    int diff_o = 0, diff_l = 0;
    for (std::int64_t i = 0; i < per_row; ++i) {
      const float a = alone.out.get(i), b = all.out.get(i);
      if (std::memcmp(&a, &b, sizeof a) != 0) ++diff_o;
    }
    for (int h = 0; h < 32; ++h) {
      const float a = alone.lse.get(h), b = all.lse.get(h * whole.cu_q.back());
      if (std::memcmp(&a, &b, sizeof a) != 0) ++diff_l;
    }
    EXPECT_EQ(diff_o, 0) << s.name();
    EXPECT_EQ(diff_l, 0) << s.name();
  }
}

// A mixed batch with more units than one classification round of every persistent CTA
// (> 128 x grid): thousands of short decode requests interleaved with prefill chunks, so that
// the fused launch's forward and backward walkers cross several rounds and both shapes. Since
// plan version 2 the prefill-shaped items come first, so a CTA owning both kinds switches shape
// once: forward walkers from prefill to decode, backward walkers from decode to prefill (before
// version 2 the kinds alternated in request order).
TEST(BatchCuda, ManyUnitsPerCtaBothShapes) {
  std::mt19937_64 lens(11);
  Spec s = spec(DType::bf16, 16, 16, 64, 16, KVLayout::NHD, opts(true));  // 16 units per request
  s.q_lens.clear();
  s.kv_lens.clear();
  for (int b = 0; b < 5200; ++b) {
    const bool chunk = b % 1000 == 500;
    s.q_lens.push_back(chunk ? 200 : 1);
    s.kv_lens.push_back(chunk ? 900 : static_cast<int>(1 + lens() % 40));
  }
  s.q_lens[7] = 0;  // a request with no query rows among them
  check(s);
}

// 128k tokens of cache for one decode request (split across the device), checked on the
// query group of one kv head (the oracle over every head would take minutes). Its few split
// rows carry many partials: the merge runs the fan-in kernel.
TEST(BatchCuda, LongDecode128k) {
  Spec s = spec(DType::bf16, 16, 2, 128, 16, KVLayout::NHD, opts(true));
  s.q_lens = {1, 1, 4, 1};
  s.kv_lens = {131072, 1, 131072, 0};  // kv_len 128k, 1 and 0 in one batch
  s.check_kv_head = 1;
  check(s, 1);
}

// The bench's 8 x 32k decode shape at a quarter of the keys (8 x 8192, GQA 32/8, d128, page
// 16): the automatic split takes one partial wave, fewer items than the 2 x SMs resident decode
// CTAs (on 132 SMs: 256 items of 2048 keys, 4 partials per row), so some CTAs run no unit at
// all and the rows merge kernel's blocks can become resident beside the attention grid, reading
// the plan before their griddepcontrol.wait. Checked on one kv head's query group.
TEST(BatchCuda, AutomaticSplitOfOnePartialWave) {
  Spec s = spec(DType::bf16, 32, 8, 128, 16, KVLayout::NHD, opts(true));
  s.q_lens.assign(8, 1);
  s.kv_lens.assign(8, 8192);
  s.check_kv_head = 5;
  auto rng = fresh_rng();
  const Problem pr(s, rng);
  const MergeShape m = merge_shape(pr);
  EXPECT_EQ(m.rows, 8);
  EXPECT_GT(m.fan_in, 1);
  EXPECT_FALSE(m.fan_in_kernel);
  if (cuda_facts().num_sms == 132) {  // H100 / H200 SXM: 264 slots
    EXPECT_EQ(m.items, 256) << "a partial wave of split items";
    EXPECT_EQ(m.fan_in, 4);
  }
  check(s, 0);
}

// The rows merge kernel's grid-stride loop: more split rows x heads x 16 values than its grid
// of at most 8 x SMs blocks of 256 threads (a 700-row prefill chunk, fixed split), so threads
// merge a second slot after their first, whose plan reads were made before the wait.
TEST(BatchCuda, MergeRowsKernelSecondSlot) {
  Spec s = spec(DType::bf16, 32, 8, 128, 16, KVLayout::HND, opts(true), fixed(256));
  s.q_lens = {700, 1};
  s.kv_lens = {900, 700};
  s.check_kv_head = 2;
  s.with_cpu = false;
  auto rng = fresh_rng();
  const Problem pr(s, rng);
  const MergeShape m = merge_shape(pr);
  EXPECT_GT(static_cast<long long>(m.rows) * 32 * 16, 8LL * cuda_facts().num_sms * 256) << "a second grid-stride slot";
  check(s, 0);
}

// The fan-in merge kernel against the oracle and the CPU executor: rounds of 32 partials (one
// per lane) with 32, 33 and 66 partials per row and a short split row, at head dims 64, 128 and
// 256 (64, 128 and 256 threads per (row, head)); f16 and bf16.
TEST(BatchCuda, MergeRoundsOf32Partials) {
  for (int d : {64, 128, 256}) {
    Spec s = spec(d == 128 ? DType::bf16 : DType::f16, 8, 2, d, 16, KVLayout::HND, opts(true), fixed(64));
    s.q_lens = {1, 1, 1, 2};
    s.kv_lens = {32 * 64, 32 * 64 + 1, 65 * 64 + 5, 300};
    check(s, 1);
  }
}

TEST(BatchCuda, EmptyKvGivesZeroAndMinusInfinity) {
  auto rng = fresh_rng();
  Spec s = spec(DType::f16, 8, 2, 64, 16, KVLayout::NHD, opts(false), fixed(8));
  s.q_lens = {3, 1, 70};
  s.kv_lens = {0, 0, 0};
  const Problem pr(s, rng);
  Stream stream;
  const Outputs got = run_cuda(pr, ExecutionContext{stream.s, 0});
  expect_written(got, s.name());
  for (double x : got.out_packed) EXPECT_EQ(x, 0.0);
  for (double x : got.lse_packed) EXPECT_EQ(x, -INFINITY);
}

// Without a split the plan does not depend on the page size, and the kernels' arithmetic
// does not depend on where a token lives: every page size and layout gives the same bits,
// and so does a second run.
TEST(BatchCuda, PagedReadsAreIndependentOfPageSizeAndLayout) {
  auto rng = fresh_rng();
  for (int group : {1, 4}) {
    Spec base = spec(DType::bf16, 8, 8 / group, 128, 1, KVLayout::NHD, opts(true), kOff);
    base.kv_lens.back() = 3000;
    const Problem first(base, rng);
    Stream stream;
    const Outputs ref = run_cuda(first, ExecutionContext{stream.s, 0});
    expect_written(ref, base.name());
    expect_close(ref, oracle(first), base.name());
    const Outputs again = run_cuda(first, ExecutionContext{stream.s, 0});
    EXPECT_EQ(again.out.bytes(), ref.out.bytes()) << "run to run: " << base.name();
    EXPECT_EQ(again.lse.bytes(), ref.lse.bytes()) << "run to run: " << base.name();
    for (int ps : {1, 5, 16, 128, 256})
      for (KVLayout layout : {KVLayout::NHD, KVLayout::HND}) {
        Spec s = base;
        s.page_size = ps;
        s.layout = layout;
        const Problem pr(s, first, rng);
        const Outputs got = run_cuda(pr, ExecutionContext{stream.s, 0});
        EXPECT_EQ(got.out.bytes(), ref.out.bytes()) << s.name();  // same bits, not merely close
        EXPECT_EQ(got.lse.bytes(), ref.lse.bytes()) << s.name();
      }
  }
}

// plan() copies each plan from one of a few pinned host buffers used in turn, and may reuse a
// buffer only once its copy has run. Here the host runs far ahead of the stream (a long memset
// first, no synchronisation until the end): eight plan() + run() pairs over four batches of
// other lengths into one workspace, each run() writing its own outputs; every output must be
// its own batch's.
TEST(BatchCuda, PlansRunAheadOfTheStream) {
  auto rng = fresh_rng();
  std::vector<Spec> specs(4, spec(DType::bf16, 8, 2, 128, 16, KVLayout::NHD, opts(true), kAuto));
  specs[0].q_lens = {1, 20, 1};
  specs[0].kv_lens = {50, 20, 0};
  specs[1].q_lens = {1, 1, 70, 1, 5};
  specs[1].kv_lens = {9000, 1, 300, 0, 4000};
  specs[2].q_lens = {1};
  specs[2].kv_lens = {30000};  // split over chunks: merge arrays in the plan
  specs[3].q_lens = {33, 1, 1, 1};
  specs[3].kv_lens = {33, 129, 20000, 7};
  std::vector<Problem> problems;
  for (const Spec& sp : specs) problems.emplace_back(sp, rng);
  int max_requests = 0, max_q = 0;
  for (const Problem& p : problems) {
    max_requests = std::max(max_requests, static_cast<int>(p.spec.q_lens.size()));
    max_q = std::max(max_q, p.cu_q.back());
  }
  const BatchConfig c = problems[0].config(max_requests, max_q);
  const DeviceFacts facts = cuda_facts();
  DeviceBytes ws(BatchAttention::workspace_size(c, facts));
  const Workspace w{ws.data, ws.bytes, Device::cuda(0)};
  BatchAttention ba(c);
  Stream stream;
  const ExecutionContext ctx{stream.s, 0};

  // Inputs per batch, outputs per round (all allocated before the stream is held up).
  struct Inputs {
    DeviceTensor q, ck, cv, indptr, indices, last;
  };
  std::vector<std::unique_ptr<Inputs>> in;
  for (const Problem& p : problems) {
    HostTensor indptr = int_tensor(p.table.kv_indptr), indices = int_tensor(p.table.kv_indices),
               last = int_tensor(p.table.kv_last_page_len);
    in.push_back(std::unique_ptr<Inputs>(new Inputs{DeviceTensor(p.q), DeviceTensor(p.ck), DeviceTensor(p.cv),
                                                    DeviceTensor(indptr), DeviceTensor(indices), DeviceTensor(last)}));
  }
  constexpr int kRounds = 8;
  std::vector<Outputs> outs(kRounds);
  std::vector<std::unique_ptr<DeviceTensor>> dout, dlse;
  for (int r = 0; r < kRounds; ++r) {
    const Problem& p = problems[static_cast<std::size_t>(r % 4)];
    outs[r].out = HostTensor(p.spec.dtype, {p.cu_q.back(), p.spec.heads_q, p.spec.head_dim});
    outs[r].lse = HostTensor(DType::f32, {p.spec.heads_q, p.cu_q.back()});
    dout.push_back(std::make_unique<DeviceTensor>(outs[r].out));
    dlse.push_back(std::make_unique<DeviceTensor>(outs[r].lse));
    dout[r]->poison(outs[r].out);
    dlse[r]->poison(outs[r].lse);
  }
  TESSERA_TEST_CUDA(cudaDeviceSynchronize());
  DeviceBytes hold(std::size_t{1} << 31);  // ~0.5 ms of memset ahead of the first copy
  TESSERA_TEST_CUDA(cudaMemsetAsync(hold.data, 0, hold.bytes, stream.s));
  for (int r = 0; r < kRounds; ++r) {
    const Problem& p = problems[static_cast<std::size_t>(r % 4)];
    const Inputs& x = *in[static_cast<std::size_t>(r % 4)];
    const std::vector<std::int32_t> ql(p.spec.q_lens.begin(), p.spec.q_lens.end()),
        kl(p.spec.kv_lens.begin(), p.spec.kv_lens.end());
    ba.plan(ql, kl, facts, w, ctx);
    const PagedKVCache cache{x.ck.view(), x.cv.view(), p.spec.layout};
    const PageTable table{x.indptr.view(), x.indices.view(), x.last.view()};
    ba.run(x.q.view(), cache, table, dout[r]->view(), dlse[r]->view(), w, ctx);
  }
  TESSERA_TEST_CUDA(cudaStreamSynchronize(stream.s));
  TESSERA_TEST_CUDA(cudaGetLastError());
  std::vector<Oracle> oracles;
  for (const Problem& p : problems) oracles.push_back(oracle(p));
  for (int r = 0; r < kRounds; ++r) {
    const Problem& p = problems[static_cast<std::size_t>(r % 4)];
    dout[r]->download(outs[r].out);
    dlse[r]->download(outs[r].lse);
    pack(p.spec, p.cu_q, outs[r]);
    expect_written(outs[r], "round " + std::to_string(r));
    expect_close(outs[r], oracles[static_cast<std::size_t>(r % 4)], "round " + std::to_string(r));
  }
}

// A CUDA graph captured around run() stays valid after a new plan() into the same workspace:
// the grids depend only on the workspace's capacities, the kernels read the plan's counts
// from device memory. Tensors are capacity-sized buffers seen through views of each batch's
// size; the second batch has other lengths, more requests, more work items and splits.
TEST(BatchCuda, GraphReplayAfterReplan) {
  auto rng = fresh_rng();
  constexpr int kMaxRequests = 12, kMaxQ = 160;
  Spec a = spec(DType::bf16, 8, 2, 128, 16, KVLayout::NHD, opts(true), kAuto);
  a.q_lens = {1, 20, 1};
  a.kv_lens = {50, 20, 0};
  Spec b = a;
  b.q_lens = {1, 1, 70, 1, 5, 1, 0, 33, 1, 1};
  b.kv_lens = {9000, 1, 300, 0, 4000, 65, 7, 33, 20000, 129};
  // Decode-shaped items only, and prefill-shaped items only, in the same layout: under
  // the default path (sm90-split) and sm90-coresident the launch sequence depends on which kinds the plan holds
  // (launch.cu), so a graph captured with one kind must still run a plan of the other.
  Spec dec = a;
  dec.q_lens = {1, 1, 1, 1};
  dec.kv_lens = {3000, 17, 0, 700};
  Spec pre = a;
  pre.q_lens = {20, 64, 9};
  pre.kv_lens = {20, 900, 4000};
  const Problem pa(a, rng), pb(b, rng), pc(dec, rng), pe(pre, rng);

  // Capacity buffers: q/out (kMaxQ, hq, d), lse (hq, kMaxQ), page table arrays, one cache.
  const int hq = a.heads_q, d = a.head_dim;
  HostTensor q_cap(a.dtype, {kMaxQ, hq, d}), out_cap(a.dtype, {kMaxQ, hq, d}), lse_cap(DType::f32, {hq, kMaxQ});
  // One cache holding all problems' pages: b's pages follow a's, then c's, then e's.
  const std::int64_t pages_a = pa.ck.shape()[0], pages_b = pb.ck.shape()[0], pages_c = pc.ck.shape()[0],
                     pages_e = pe.ck.shape()[0];
  const std::int64_t pages = pages_a + pages_b + pages_c + pages_e;
  const std::int64_t ps = a.page_size;
  HostTensor ck(a.dtype, {pages, ps, a.heads_kv, d}), cv(a.dtype, {pages, ps, a.heads_kv, d});
  auto copy_pages = [&](const HostTensor& from, HostTensor& to, std::int64_t first_page) {
    const std::int64_t n = from.numel();
    const std::int64_t per_page = ps * a.heads_kv * d;
    for (std::int64_t i = 0; i < n; ++i) to.set(first_page * per_page + i, from.get(i));
  };
  copy_pages(pa.ck, ck, 0);
  copy_pages(pa.cv, cv, 0);
  copy_pages(pb.ck, ck, pages_a);
  copy_pages(pb.cv, cv, pages_a);
  copy_pages(pc.ck, ck, pages_a + pages_b);
  copy_pages(pc.cv, cv, pages_a + pages_b);
  copy_pages(pe.ck, ck, pages_a + pages_b + pages_c);
  copy_pages(pe.cv, cv, pages_a + pages_b + pages_c);
  std::vector<std::int32_t> cap_i32(static_cast<std::size_t>(pages + kMaxRequests + 1), 0);
  HostTensor indptr_cap = int_tensor(std::vector<std::int32_t>(kMaxRequests + 1, 0));
  HostTensor indices_cap = int_tensor(cap_i32);
  HostTensor last_cap = int_tensor(std::vector<std::int32_t>(kMaxRequests, 0));
  DeviceTensor dq(q_cap), dout(out_cap), dlse(lse_cap), dck(ck), dcv(cv), dindptr(indptr_cap), dindices(indices_cap),
      dlast(last_cap);

  // Loads problem p (its pages shifted by page_offset) into the capacity buffers.
  auto load = [&](const Problem& p, std::int64_t page_offset) {
    for (std::int64_t i = 0; i < p.q.numel(); ++i) q_cap.set(i, p.q.get(i));  // same packing (no row padding)
    for (std::size_t i = 0; i < p.table.kv_indptr.size(); ++i) indptr_cap.set_int(static_cast<std::int64_t>(i), p.table.kv_indptr[i]);
    for (std::size_t i = 0; i < p.table.kv_indices.size(); ++i)
      indices_cap.set_int(static_cast<std::int64_t>(i), static_cast<std::int32_t>(p.table.kv_indices[i] + page_offset));
    for (std::size_t i = 0; i < p.table.kv_last_page_len.size(); ++i)
      last_cap.set_int(static_cast<std::int64_t>(i), p.table.kv_last_page_len[i]);
    dq.upload(q_cap);
    dindptr.upload(indptr_cap);
    dindices.upload(indices_cap);
    dlast.upload(last_cap);
    dout.poison(out_cap);
    dlse.poison(lse_cap);
  };
  // Views of a batch's size over the capacity buffers.
  auto views = [&](const Problem& p) {
    const std::int64_t total_q = p.cu_q.back();
    const int batch = static_cast<int>(p.spec.q_lens.size());
    Tensor q = dq.view(), out = dout.view(), lse = dlse.view();
    q.shape[0] = total_q;
    out.shape[0] = total_q;
    lse.shape[1] = total_q;  // head stride stays kMaxQ
    Tensor indptr = dindptr.view(), indices = dindices.view(), last = dlast.view();
    indptr.shape[0] = batch + 1;
    indices.shape[0] = static_cast<std::int64_t>(p.table.kv_indices.size());
    last.shape[0] = batch;
    return std::make_tuple(q, out, lse, PageTable{indptr, indices, last});
  };
  // Reads the capacity outputs back and packs the batch's rows like the oracle.
  auto result = [&](const Problem& p) {
    dout.download(out_cap);
    dlse.download(lse_cap);
    Outputs o;
    o.out = HostTensor(a.dtype, {p.cu_q.back(), hq, d});
    o.lse = HostTensor(DType::f32, {hq, p.cu_q.back()});
    for (std::int64_t i = 0; i < o.out.numel(); ++i) o.out.set(i, out_cap.get(i));
    for (int h = 0; h < hq; ++h)
      for (std::int64_t t = 0; t < p.cu_q.back(); ++t) o.lse.set(h * p.cu_q.back() + t, lse_cap.get(h * kMaxQ + t));
    pack(p.spec, p.cu_q, o);
    EXPECT_EQ(o.out.count_nan(), 0) << "out not fully written";
    EXPECT_EQ(o.lse.count_nan(), 0) << "lse not fully written";
    return o;
  };

  BatchConfig c = pa.config(kMaxRequests, kMaxQ);
  const DeviceFacts facts = cuda_facts();
  DeviceBytes ws(BatchAttention::workspace_size(c, facts));
  const Workspace w{ws.data, ws.bytes, Device::cuda(0)};
  BatchAttention ba(c);
  Stream stream;
  const ExecutionContext ctx{stream.s, 0};
  const PagedKVCache cache{dck.view(), dcv.view(), KVLayout::NHD};
  auto plan = [&](const Problem& p) {
    const std::vector<std::int32_t> ql(p.spec.q_lens.begin(), p.spec.q_lens.end()),
        kl(p.spec.kv_lens.begin(), p.spec.kv_lens.end());
    ba.plan(ql, kl, facts, w, ctx);
  };

  // Batch a: plain run, then capture the same run into a graph.
  plan(pa);
  load(pa, 0);
  auto [qa, outa, lsea, ta] = views(pa);
  ba.run(qa, cache, ta, outa, lsea, w, ctx);
  TESSERA_TEST_CUDA(cudaStreamSynchronize(stream.s));
  const Oracle oa = oracle(pa);
  expect_close(result(pa), oa, "eager a");

  load(pa, 0);  // poisons the outputs again
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  // Captures run() over p's views into graph / exec, then launches the graph once.
  auto capture_and_launch = [&](const Problem& p) {
    auto [q, out, lse, t] = views(p);
    TESSERA_TEST_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeThreadLocal));
    ba.run(q, cache, t, out, lse, w, ctx);
    TESSERA_TEST_CUDA(cudaStreamEndCapture(stream.s, &graph));
    TESSERA_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    TESSERA_TEST_CUDA(cudaGraphLaunch(exec, stream.s));
    TESSERA_TEST_CUDA(cudaStreamSynchronize(stream.s));
  };
  capture_and_launch(pa);
  expect_close(result(pa), oa, "graph a");
  {
    // A small fixed number of kernels a run() (issue #4): at most two attention kernels (on
    // compute capability 9.0 by default the sm90 prefill beside the decode-only kernel; the
    // fused kernel on the portable path) and the merge; no other graph node.
    std::size_t nodes = 0;
    TESSERA_TEST_CUDA(cudaGraphGetNodes(graph, nullptr, &nodes));
    std::vector<cudaGraphNode_t> all(nodes);
    TESSERA_TEST_CUDA(cudaGraphGetNodes(graph, all.data(), &nodes));
    int kernels = 0;
    for (cudaGraphNode_t n : all) {
      cudaGraphNodeType type;
      TESSERA_TEST_CUDA(cudaGraphNodeGetType(n, &type));
      if (type == cudaGraphNodeTypeKernel) ++kernels;
    }
    EXPECT_GE(kernels, 2) << "an attention kernel and the merge";
    EXPECT_LE(kernels, 3) << nodes << " graph nodes";
    EXPECT_EQ(static_cast<int>(nodes), kernels) << "run() enqueues kernels only";
  }

  // Batch b planned into the same workspace; the graph (captured with a's views) replays b.
  plan(pb);
  load(pb, pages_a);
  TESSERA_TEST_CUDA(cudaGraphLaunch(exec, stream.s));
  TESSERA_TEST_CUDA(cudaStreamSynchronize(stream.s));
  expect_close(result(pb), oracle(pb), "graph b after replan");
  EXPECT_GT(ba.planned_work_items(), 0);

  // And back to a: a replay gives a's result again.
  plan(pa);
  load(pa, 0);
  TESSERA_TEST_CUDA(cudaGraphLaunch(exec, stream.s));
  TESSERA_TEST_CUDA(cudaStreamSynchronize(stream.s));
  expect_close(result(pa), oa, "graph a after b");

  // The decode-item claim counter in the plan header (default sm90-split and sm90-coresident paths)
  // is back to 0 after every run, so replays need no host write (attention_kernel.cuh,
  // claim_decode_units).
  const plan::WorkspaceLayout layout = plan::workspace_layout(plan::make_plan_config(c, facts), ws.bytes);
  auto claim_counter = [&] {
    plan::PlanHeader h;
    TESSERA_TEST_CUDA(cudaMemcpy(&h, static_cast<const unsigned char*>(ws.data) + layout.header, sizeof h,
                                 cudaMemcpyDeviceToHost));
    return h.decode_claim;
  };
  EXPECT_EQ(claim_counter(), 0u) << "after graph a after b";

  // Three more replays of the graph captured with a (mixed), re-planned in between with a
  // decode-only, a prefill-only and the mixed batch b; results and the counter every time.
  const Oracle oc = oracle(pc), oe = oracle(pe), ob = oracle(pb);
  // Each entry: re-plan and load a problem (its pages at an offset in the shared cache), replay
  // the instantiated graph, check the result and the counter.
  using Replay = std::tuple<const Problem*, std::int64_t, const Oracle*, const char*>;
  auto replay_each = [&](std::initializer_list<Replay> replays) {
    for (const auto& [prob, offset, orc, what] : replays) {
      plan(*prob);
      load(*prob, offset);
      TESSERA_TEST_CUDA(cudaGraphLaunch(exec, stream.s));
      TESSERA_TEST_CUDA(cudaStreamSynchronize(stream.s));
      expect_close(result(*prob), *orc, what);
      EXPECT_EQ(claim_counter(), 0u) << what;
    }
  };
  replay_each({{&pc, pages_a + pages_b, &oc, "graph a replaying c (decode only)"},
               {&pe, pages_a + pages_b + pages_c, &oe, "graph a replaying e (prefill only)"},
               {&pb, pages_a, &ob, "graph a replaying b again"}});
  TESSERA_TEST_CUDA(cudaGraphExecDestroy(exec));
  TESSERA_TEST_CUDA(cudaGraphDestroy(graph));

  // A graph captured with a decode-only plan (default sm90-split and sm90-coresident: the plain
  // decode grid, then the prefill kernel with nothing to do) replays a mixed and a prefill-only
  // plan correctly.
  plan(pc);
  load(pc, pages_a + pages_b);
  capture_and_launch(pc);
  expect_close(result(pc), oc, "graph c");
  replay_each({{&pb, pages_a, &ob, "graph c replaying b (mixed)"},
               {&pe, pages_a + pages_b + pages_c, &oe, "graph c replaying e (prefill only)"}});
  TESSERA_TEST_CUDA(cudaGraphExecDestroy(exec));
  TESSERA_TEST_CUDA(cudaGraphDestroy(graph));
}

}  // namespace
}  // namespace tessera::testing
