// CUDA benchmark suites (compiled only with TESSERA_WITH_CUDA) and the GPU's ceilings.
//
// Shapes follow bench/peers.py so bench/compare.py can join the rows with torch SDPA's flash
// and cuDNN backends measured in the same run: dense forward/backward at head dims 64/128/256,
// seq 1k/4k/16k, 16k tokens per batch, heads = 2048 / head_dim, causal and not; decode with
// GQA 32/8, head dim 128 over a paged cache. Timing: CUDA events after warm-up, median.
#if defined(TESSERA_WITH_CUDA)

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_registry.h"
#include "common.h"

namespace tessera::app::bench {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Median milliseconds of fn on the default stream, timed with events after 3 warm-up calls.
double cuda_median_ms(const std::function<void()>& fn, double min_time) {
  for (int i = 0; i < 3; ++i) fn();
  check(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  std::vector<double> ms;
  double total = 0;
  while (ms.size() < 200 && (ms.size() < 5 || total < min_time * 1e3)) {
    cudaEventRecord(a);
    fn();
    cudaEventRecord(b);
    check(cudaEventSynchronize(b), "timed run");
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
    total += t;
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  const std::size_t n = ms.size();
  return n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
}

// Fills a device buffer with random values of `dtype` (a 16 MiB random block, repeated).
void fill_random(DeviceBuffer& buf, DType dtype, std::uint64_t seed) {
  const std::size_t block = std::min<std::size_t>(buf.bytes(), 16u << 20);
  std::vector<unsigned char> host(block);
  std::mt19937_64 rng(seed);
  fill_normal(host.data(), static_cast<std::int64_t>(block / dtype_size(dtype)), dtype, rng);
  for (std::size_t off = 0; off < buf.bytes(); off += block) buf.upload(host.data(), std::min(block, buf.bytes() - off), off);
}

Ceilings measure_cuda_ceilings(const Context& ctx) {
  Ceilings c;
  const Device dev = ctx.device;
  {  // memory: device-to-device copy of 2 GiB (bytes read + written)
    const std::size_t n = 2ull << 30;
    DeviceBuffer x(dev, n), y(dev, n);
    x.fill_bytes(0x3c);
    const double ms = cuda_median_ms([&] { cudaMemcpyAsync(y.data(), x.data(), n, cudaMemcpyDeviceToDevice); }, 0.2);
    c.read_bytes = 2.0 * n / (ms * 1e-3);
    c.read_what = "device-to-device copy of 2 GiB, bytes read + written";
  }
  {  // compute: cuBLAS bf16 GEMM 8192^3, fp32 accumulation
    const int n = 8192;
    const std::size_t bytes = static_cast<std::size_t>(n) * n * 2;
    DeviceBuffer a(dev, bytes), b(dev, bytes), d(dev, bytes);
    fill_random(a, DType::bf16, 11);
    fill_random(b, DType::bf16, 12);
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return c;
    const float one = 1.0f, zero = 0.0f;
    const double ms = cuda_median_ms(
        [&] {
          cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.data(), CUDA_R_16BF, n, b.data(), CUDA_R_16BF, n,
                       &zero, d.data(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        },
        0.3);
    cublasDestroy(h);
    c.flops = 2.0 * n * n * n / (ms * 1e-3);
    c.flops_what = "cuBLAS bf16 GEMM 8192^3";
  }
  return c;
}

// ---------------------------------------------------------------------------------------------
// Dense forward / backward: 16k tokens, heads * head_dim = 2048, so every shape has the same
// 32M elements per tensor; buffers are allocated and filled once.

struct DenseBuffers {
  static constexpr std::int64_t kTokens = 16384, kWidth = 2048;
  DeviceBuffer q, k, v, o, dout, lse, dq, dk, dv;
  explicit DenseBuffers(const Device& dev, bool backward) {
    const std::size_t bytes = kTokens * kWidth * 2;
    q = DeviceBuffer(dev, bytes);
    k = DeviceBuffer(dev, bytes);
    v = DeviceBuffer(dev, bytes);
    o = DeviceBuffer(dev, bytes);
    lse = DeviceBuffer(dev, kTokens * 64 * sizeof(float));  // up to 64 heads (head dim 32)
    fill_random(q, DType::bf16, 1);
    fill_random(k, DType::bf16, 2);
    fill_random(v, DType::bf16, 3);
    if (backward) {
      dout = DeviceBuffer(dev, bytes);
      dq = DeviceBuffer(dev, bytes);
      dk = DeviceBuffer(dev, bytes);
      dv = DeviceBuffer(dev, bytes);
      fill_random(dout, DType::bf16, 4);
    }
  }
};

void run_dense(const Context& ctx, const Emit& emit, bool backward) {
  const std::vector<int> dims = ctx.quick ? std::vector<int>{128} : std::vector<int>{64, 128, 256};
  const std::vector<int> seqs = {1024, 4096, 16384};
  DenseBuffers buf(ctx.device, backward);
  const DType dt = DType::bf16;
  for (int d : dims) {
    for (int s : seqs) {
      const int h = static_cast<int>(DenseBuffers::kWidth / d);
      const int b = static_cast<int>(DenseBuffers::kTokens / s);
      const Device dev = ctx.device;
      const Tensor q(buf.q.data(), dt, {b, s, h, d}, dev), k(buf.k.data(), dt, {b, s, h, d}, dev),
          v(buf.v.data(), dt, {b, s, h, d}, dev), o(buf.o.data(), dt, {b, s, h, d}, dev),
          lse(buf.lse.data(), DType::f32, {b, h, s}, dev);
      for (bool causal : {false, true}) {
        AttentionOptions opt;
        opt.causal = causal;
        opt.return_lse = backward;
        Row r;
        r.name = std::string(backward ? "backward" : "forward") + " bf16" + (causal ? " causal" : "");
        r.shape = "b" + std::to_string(b) + " h" + std::to_string(h) + " s" + std::to_string(s) + " d" + std::to_string(d);
        r.kind = backward ? "backward" : "forward";
        r.dtype = dt;
        r.head_dim = d;
        r.seq = s;
        r.batch = b;
        r.heads = h;
        r.causal = causal;
        try {
          double ms;
          if (!backward) {
            ms = cuda_median_ms([&] { attention_forward(q, k, v, o, Tensor(), opt); }, ctx.min_time);
            r.flops = forward_flops(b, h, s, s, d, causal);
          } else {
            attention_forward(q, k, v, o, lse, opt);
            const Tensor dout(buf.dout.data(), dt, {b, s, h, d}, dev), dq(buf.dq.data(), dt, {b, s, h, d}, dev),
                dk(buf.dk.data(), dt, {b, s, h, d}, dev), dv(buf.dv.data(), dt, {b, s, h, d}, dev);
            ms = cuda_median_ms([&] { attention_backward(q, k, v, o, dout, lse, dq, dk, dv, opt); }, ctx.min_time);
            r.flops = backward_flops(b, h, s, s, d, causal);
          }
          r.seconds = ms * 1e-3;
        } catch (const std::exception& e) {
          r.note = std::string("not run: ") + e.what();
          r.flops = 0;
        }
        emit(r);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Paged batches through BatchAttention (run() timed; plan() once before).

Row paged_case(const Context& ctx, const std::string& name, const std::vector<std::int32_t>& q_lens,
               const std::vector<std::int32_t>& kv_lens) {
  const Device dev = ctx.device;
  const int hq = 32, hkv = 8, d = 128, ps = 16;
  const DType dt = DType::bf16;
  int pages = 0;
  std::int64_t total_q = 0, kv_total = 0, kv_max = 0, q_max = 0;
  for (std::size_t i = 0; i < q_lens.size(); ++i) {
    pages += (kv_lens[i] + ps - 1) / ps;
    total_q += q_lens[i];
    kv_total += kv_lens[i];
    kv_max = std::max<std::int64_t>(kv_max, kv_lens[i]);
    q_max = std::max<std::int64_t>(q_max, q_lens[i]);
  }
  PagePool pool(pages, ps);
  std::vector<int> seqs;
  for (std::int32_t len : kv_lens) {
    seqs.push_back(pool.create_sequence());
    pool.append_tokens(seqs.back(), len);
  }
  HostPageTable t = pool.page_table(seqs);
  // Shuffle nothing: the pool hands out pages in order, which is what a fresh server does.
  const std::size_t page_bytes = static_cast<std::size_t>(ps) * hkv * d * 2;
  DeviceBuffer kc(dev, page_bytes * pages), vc(dev, page_bytes * pages), q(dev, total_q * hq * d * 2),
      o(dev, total_q * hq * d * 2), indptr(dev, t.kv_indptr.size() * 4), indices(dev, t.kv_indices.size() * 4),
      last(dev, t.kv_last_page_len.size() * 4);
  fill_random(kc, dt, 21);
  fill_random(vc, dt, 22);
  fill_random(q, dt, 23);
  indptr.upload(t.kv_indptr.data(), indptr.bytes());
  indices.upload(t.kv_indices.data(), indices.bytes());
  last.upload(t.kv_last_page_len.data(), last.bytes());
  PagedKVCache cache;
  cache.k_pages = Tensor(kc.data(), dt, {pages, ps, hkv, d}, dev);
  cache.v_pages = Tensor(vc.data(), dt, {pages, ps, hkv, d}, dev);
  PageTable table;
  const std::int64_t batch = static_cast<std::int64_t>(q_lens.size());
  table.kv_indptr = Tensor(indptr.data(), DType::i32, {batch + 1}, dev);
  table.kv_indices = Tensor(indices.data(), DType::i32, {static_cast<std::int64_t>(t.kv_indices.size())}, dev);
  table.kv_last_page_len = Tensor(last.data(), DType::i32, {batch}, dev);

  BatchConfig cfg;
  cfg.heads_q = hq;
  cfg.heads_kv = hkv;
  cfg.head_dim = d;
  cfg.dtype = dt;
  cfg.page_size = ps;
  cfg.options.causal = true;
  cfg.max_requests = static_cast<int>(batch);
  cfg.max_q_tokens = static_cast<int>(total_q);
  const DeviceFacts facts = query_device(dev);
  DeviceBuffer ws(dev, BatchAttention::workspace_size(cfg, facts));
  const Workspace w{ws.data(), ws.bytes(), dev};
  BatchAttention attn(cfg);
  const Tensor tq(q.data(), dt, {total_q, hq, d}, dev), to(o.data(), dt, {total_q, hq, d}, dev);

  Row r;
  r.name = name;
  r.shape = "n" + std::to_string(batch) + " q" + std::to_string(total_q) + " kv" + std::to_string(kv_total) +
            " h32/8 d128 p16";
  r.kind = q_max == 1 ? "decode" : "mixed";
  r.dtype = dt;
  r.head_dim = d;
  r.seq = static_cast<int>(kv_max);
  r.batch = static_cast<int>(batch);
  r.heads = hq;
  r.causal = q_max > 1;
  try {
    attn.plan(q_lens, kv_lens, facts, w);
    const double ms = cuda_median_ms([&] { attn.run(tq, cache, table, to, Tensor(), w); }, ctx.min_time);
    r.seconds = ms * 1e-3;
    if (q_max == 1) {
      r.bytes = 2.0 * kv_total * hkv * d * 2;
      r.note = "run() only, bytes of K+V; ";
    } else {
      double pairs = 0;  // bottom-right causal
      for (std::size_t i = 0; i < q_lens.size(); ++i)
        for (int row = 0; row < q_lens[i]; ++row) pairs += std::min<double>(kv_lens[i], row + kv_lens[i] - q_lens[i] + 1);
      r.flops = 4.0 * hq * d * pairs;
      r.note = "run() only, exact causal pairs; ";
    }
    r.note += std::to_string(attn.planned_work_items()) + " work items";
  } catch (const std::exception& e) {
    r.note = std::string("not run: ") + e.what();
  }
  return r;
}

void run_decode(const Context& ctx, const Emit& emit) {
  struct C { int batch, kv; };
  const std::vector<C> cases = ctx.quick ? std::vector<C>{{8, 32768}, {128, 8192}}
                                         : std::vector<C>{{1, 131072}, {8, 32768}, {64, 4096}, {128, 8192}, {256, 2048}};
  for (const C& c : cases)
    emit(paged_case(ctx, "decode bf16 GQA 4", std::vector<std::int32_t>(c.batch, 1),
                    std::vector<std::int32_t>(c.batch, c.kv)));
}

void run_mixed(const Context& ctx, const Emit& emit) {
  std::vector<std::int32_t> q_lens, kv_lens;
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> len(1024, 16384);
  for (int i = 0; i < 8; ++i) {  // prefill chunks of 512 tokens
    q_lens.push_back(512);
    kv_lens.push_back(512 * (i + 1));
  }
  for (int i = 0; i < 128; ++i) {
    q_lens.push_back(1);
    kv_lens.push_back(len(rng));
  }
  emit(paged_case(ctx, "mixed bf16 8 chunks+128 dec", q_lens, kv_lens));
}

}  // namespace

TESSERA_BENCH_CEILINGS(cuda, {DeviceKind::cuda, measure_cuda_ceilings});
TESSERA_BENCH_SUITE(cuda_forward, {"cuda.forward", DeviceKind::cuda, "dense forward bf16, d 64/128/256, seq 1k/4k/16k, 16k tokens, causal and not",
                                   [](const Context& c, const Emit& e) { run_dense(c, e, false); }});
TESSERA_BENCH_SUITE(cuda_backward, {"cuda.backward", DeviceKind::cuda, "dense backward bf16, same shapes as cuda.forward",
                                    [](const Context& c, const Emit& e) { run_dense(c, e, true); }});
TESSERA_BENCH_SUITE(cuda_decode, {"cuda.decode", DeviceKind::cuda, "paged decode, GQA 32/8, d128: 1x128k .. 256x2k (bytes of K+V per second)", run_decode});
TESSERA_BENCH_SUITE(cuda_mixed, {"cuda.mixed", DeviceKind::cuda, "one paged batch of 8 prefill chunks and 128 decode tokens", run_mixed});

}  // namespace tessera::app::bench

#endif  // TESSERA_WITH_CUDA
