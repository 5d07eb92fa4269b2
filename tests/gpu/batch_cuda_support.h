// Shared by the CUDA BatchAttention GPU suites (test_batch_attention_cuda.cpp: the oracle grid,
// edges, merges, determinism; test_batch_graph_cuda.cpp: graph capture and replay across plans):
// a batch problem (q, dense K/V and the same K/V in a NaN-padded paged cache), its CUDA and CPU
// runs on one plan, the fp64 oracle under the tolerance rule, and the checks against it.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "cpu/reference.h"
#include "cuda/batch/batch_args.h"
#include "gpu/gpu_support.h"
#include "plan/batch_plan.h"
#include "support/test_support.h"
#include "tessera/batch.h"
#include "tessera/error.h"

namespace tessera::testing {

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

inline void PrintTo(const Spec& s, std::ostream* os) { *os << s.name(); }

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
    // Padded head rows in both caches: a K or V read past head_dim lands on NaN.
    ck = HostTensor(s.dtype, shape, 8);
    cv = HostTensor(s.dtype, shape, 8);
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
inline void pack(const Spec& s, const std::vector<std::int32_t>& cu_q, Outputs& o) {
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

inline void expect_written(const Outputs& o, const std::string& what) {
  EXPECT_EQ(o.out.count_nan(), 0) << what << ": out not fully written";
  EXPECT_EQ(o.lse.count_nan(), 0) << what << ": lse not fully written";
  EXPECT_TRUE(o.out.margins_intact()) << what << ": out written outside its view";
  EXPECT_TRUE(o.lse.margins_intact()) << what << ": lse written outside its view";
}

inline DeviceFacts cuda_facts() { return query_device(Device::cuda(0)); }

// Workspace bytes for a problem: the default size, or what plan() asks for when small fixed
// chunks need more partial rows (the same bytes for CUDA and CPU give the same plan).
inline std::size_t workspace_bytes(const Problem& pr, int max_requests = 0, int max_q_tokens = 0) {
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
inline Outputs run_cuda(const Problem& pr, const ExecutionContext& ctx, int max_requests = 0, int max_q_tokens = 0) {
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
inline Outputs run_cpu(const Problem& pr) {
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
inline MergeShape merge_shape(const Problem& pr, int max_requests = 0, int max_q_tokens = 0) {
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
inline Oracle oracle(const Problem& pr) {
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

inline void expect_close(const Outputs& got, const Oracle& o, const std::string& what) {
  EXPECT_LE(max_abs_error(got.out_packed, o.ref.o), o.tol_o) << what;
  EXPECT_LE(max_abs_error(got.lse_packed, o.ref.lse), o.tol_l) << what;  // -inf exactly where the oracle has it
}

// Runs a problem on CUDA and checks it against the oracle and the CPU executor. merge: 1 / 0
// to expect the fan-in / rows merge kernel (merge_shape), -1 for no expectation.
inline void check(const Spec& s, int merge = -1) {
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

inline constexpr SplitPolicy kAuto{};
inline constexpr SplitPolicy kOff{SplitPolicy::Mode::disabled, 0};
inline SplitPolicy fixed(int n) { return {SplitPolicy::Mode::fixed, n}; }

// Mixed batch: prefill chunks over several Q tiles, decode tokens, kv_len 0 and 1, q_len 0,
// q_len > kv_len (top rows fully masked under causal), a long decode request.
inline const std::vector<int> kMixedQ{7, 1, 1, 0, 33, 1, 5, 2, 70, 1};
inline const std::vector<int> kMixedKv{40, 0, 1, 12, 100, 300, 5, 1, 90, 32768};

inline Spec spec(DType dt, int hq, int hkv, int d, int ps, KVLayout layout, AttentionOptions o, SplitPolicy split = {},
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

}  // namespace tessera::testing
