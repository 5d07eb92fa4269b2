// CUDA benchmark suites of dense attention (compiled only with TESSERA_WITH_CUDA) and the GPU's
// ceilings. The paged-batch suites are in bench_cuda_paged.cpp, the timing helpers in
// bench_cuda_timing.h.
//
// Shapes follow bench/peers.py so bench/compare.py can join the rows with torch SDPA's flash
// and cuDNN backends measured in the same run: dense forward/backward at head dims 64/128/256,
// seq 1k/4k/16k, 16k tokens per batch, heads = 2048 / head_dim, causal and not; decode with
// GQA 32/8, head dim 128 over a paged cache. Timing: CUDA events after warm-up, median.
#if defined(TESSERA_WITH_CUDA)

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "api/build_params.h"
#include "bench_cuda_timing.h"
#include "bench_registry.h"
#include "common.h"
#include "cuda/measure/read_sum.h"
#include "cuda/naive/naive_attention.h"

namespace tessera::app::bench {
namespace {

Ceilings measure_cuda_ceilings(const Context& ctx) {
  Ceilings c;
  const Device dev = ctx.device;
  {  // memory: a read-only pass over 4 GiB (what decode, which only reads K and V, is set against)
    const std::size_t n = 4ull << 30;
    DeviceBuffer x(dev, n), sum(dev, 16);
    x.fill_bytes(0x3c);
    const double ms = cuda_median_ms(
        [&] { cuda::measure::read_sum_u32(x.data(), n, static_cast<unsigned int*>(sum.data()), nullptr); }, 0.2);
    c.read_bytes = n / (ms * 1e-3);
    c.read_what = "read-only pass over 4 GiB, 16-byte streaming loads";
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

// A row of the dense suites: "<kind> <dtype>[ causal]", shape "b.. h.. s.. d..".
Row dense_row(const char* kind, DType dt, int b, int h, int s, int d, bool causal) {
  Row r;
  r.name = std::string(kind) + " " + dtype_name(dt) + (causal ? " causal" : "");
  r.shape = "b" + std::to_string(b) + " h" + std::to_string(h) + " s" + std::to_string(s) + " d" + std::to_string(d);
  r.kind = kind;
  r.dtype = dt;
  r.head_dim = d;
  r.seq = s;
  r.batch = b;
  r.heads = h;
  r.causal = causal;
  return r;
}

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
        Row r = dense_row(backward ? "backward" : "forward", dt, b, h, s, d, causal);
        try {
          double ms;
          if (!backward) {
            ms = dense_median_ms(ctx, [&] { attention_forward(q, k, v, o, Tensor(), opt); });
            r.flops = forward_flops(b, h, s, s, d, causal);
          } else {
            attention_forward(q, k, v, o, lse, opt);
            const Tensor dout(buf.dout.data(), dt, {b, s, h, d}, dev), dq(buf.dq.data(), dt, {b, s, h, d}, dev),
                dk(buf.dk.data(), dt, {b, s, h, d}, dev), dv(buf.dv.data(), dt, {b, s, h, d}, dev);
            ms = dense_median_ms(ctx, [&] { attention_backward(q, k, v, o, dout, lse, dq, dk, dv, opt); });
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

// FP8 (e4m3) forward, bf16 out, same token count and width as run_dense; descales present
// (one per (sequence, kv head), all 1.0: the kernel reads and applies them either way).
void run_dense_fp8(const Context& ctx, const Emit& emit) {
  const std::vector<int> dims = ctx.quick ? std::vector<int>{128} : std::vector<int>{128, 256};
  const std::vector<int> seqs = {1024, 4096, 16384};
  const std::size_t elems = DenseBuffers::kTokens * DenseBuffers::kWidth;
  DeviceBuffer q(ctx.device, elems), k(ctx.device, elems), v(ctx.device, elems), o(ctx.device, elems * 2);
  fill_random(q, DType::e4m3, 11);
  fill_random(k, DType::e4m3, 12);
  fill_random(v, DType::e4m3, 13);
  const std::vector<float> ones(DenseBuffers::kTokens * 8, 1.0f);  // up to (batch 16) x (heads 64)
  DeviceBuffer scales(ctx.device, ones.size() * sizeof(float));
  scales.upload(ones.data(), ones.size() * sizeof(float));
  const DType dt = DType::e4m3;
  for (int d : dims) {
    for (int s : seqs) {
      const int h = static_cast<int>(DenseBuffers::kWidth / d);
      const int b = static_cast<int>(DenseBuffers::kTokens / s);
      const Device dev = ctx.device;
      const Tensor tq(q.data(), dt, {b, s, h, d}, dev), tk(k.data(), dt, {b, s, h, d}, dev),
          tv(v.data(), dt, {b, s, h, d}, dev), to(o.data(), DType::bf16, {b, s, h, d}, dev);
      const Tensor ds(scales.data(), DType::f32, {b, h}, dev);
      const Fp8Descale descale{ds, ds, ds};
      for (bool causal : {false, true}) {
        AttentionOptions opt;
        opt.causal = causal;
        Row r = dense_row("forward", dt, b, h, s, d, causal);
        time_row(r, forward_flops(b, h, s, s, d, causal),
                 [&] { attention_forward_fp8(tq, tk, tv, descale, to, Tensor(), opt); }, ctx);
        emit(r);
      }
    }
  }
}

// Ragged (packed variable-length) forward, bf16, head_dim 128, 16 heads: the 16k tokens of the
// dense suites split into n sequences of random lengths (mean 16384 / n), cu_seqlens on the
// device. Shows what a packed batch costs beside the dense rows of the same token count (the
// CUDA paths size their tile space by a bound on the longest sequence: total tokens).
void run_ragged(const Context& ctx, const Emit& emit) {
  const std::vector<int> counts = ctx.quick ? std::vector<int>{16} : std::vector<int>{16, 128};
  constexpr int d = 128, h = static_cast<int>(DenseBuffers::kWidth / d);
  constexpr int total = static_cast<int>(DenseBuffers::kTokens);
  DenseBuffers buf(ctx.device, false);
  const DType dt = DType::bf16;
  const Device dev = ctx.device;
  for (int n : counts) {
    // Lengths uniform in [mean / 2, 3 mean / 2], the last one taking the remainder.
    std::mt19937_64 rng(static_cast<std::uint64_t>(n));
    const int mean = total / n;
    std::uniform_int_distribution<int> len(mean / 2, mean + mean / 2);
    std::vector<std::int32_t> cu(1, 0);
    for (int i = 0; i + 1 < n; ++i) cu.push_back(cu.back() + len(rng));
    cu.push_back(total);
    double pairs_full = 0, pairs_causal = 0;
    for (int i = 0; i < n; ++i) {
      const double l = cu[i + 1] - cu[i];
      pairs_full += l * l;
      pairs_causal += l * l / 2;  // the dense suites' convention: causal halves the FLOPs
    }
    DeviceBuffer dcu(dev, cu.size() * sizeof(std::int32_t));
    dcu.upload(cu.data(), cu.size() * sizeof(std::int32_t));
    const Tensor tcu(dcu.data(), DType::i32, {static_cast<std::int64_t>(cu.size())}, dev);
    const Tensor q(buf.q.data(), dt, {total, h, d}, dev), k(buf.k.data(), dt, {total, h, d}, dev),
        v(buf.v.data(), dt, {total, h, d}, dev), o(buf.o.data(), dt, {total, h, d}, dev);
    for (bool causal : {false, true}) {
      AttentionOptions opt;
      opt.causal = causal;
      Row r = dense_row("forward_ragged", dt, n, h, mean, d, causal);
      r.shape = "n" + std::to_string(n) + " t" + std::to_string(total) + " h" + std::to_string(h) + " d128";
      r.note = "lengths " + std::to_string(mean / 2) + ".." + std::to_string(mean + mean / 2) + ", cu_seqlens on the device";
      time_row(r, 4.0 * h * d * (causal ? pairs_causal : pairs_full),
               [&] { attention_forward_ragged(q, k, v, tcu, tcu, o, Tensor(), opt); }, ctx);
      emit(r);
    }
  }
}

// What a dense forward call costs beyond its kernels, at d128 (1k, 4k, 16k; causal and not): the
// eager median (an event, the call, an event, a synchronisation per sample: what cuda.forward
// reports under --timing eager; always eager here), the same call replayed as a CUDA graph (no host work inside the span), and the host's
// time per call with 50 calls enqueued back to back (tensor-map encoding, attribute setting,
// launches). Where host time per call approaches the kernel's own, the eager median carries it.
void forward_overhead(const Context& ctx, const Emit& emit) {
  DenseBuffers buf(ctx.device, false);
  const DType dt = DType::bf16;
  const int d = 128;
  for (int s : {1024, 4096, 16384}) {
    const int h = static_cast<int>(DenseBuffers::kWidth / d);
    const int b = static_cast<int>(DenseBuffers::kTokens / s);
    const Device dev = ctx.device;
    const Tensor q(buf.q.data(), dt, {b, s, h, d}, dev), k(buf.k.data(), dt, {b, s, h, d}, dev),
        v(buf.v.data(), dt, {b, s, h, d}, dev), o(buf.o.data(), dt, {b, s, h, d}, dev);
    for (bool causal : {false, true}) {
      AttentionOptions opt;
      opt.causal = causal;
      Row r = dense_row("forward_overhead", dt, b, h, s, d, causal);
      try {
        const double eager = cuda_median_ms([&] { attention_forward(q, k, v, o, Tensor(), opt); }, ctx.min_time);
        const double graph = cuda_graph_median_ms(
            [&](cudaStream_t st) { attention_forward(q, k, v, o, Tensor(), opt, ExecutionContext{st, 0}); }, ctx.min_time);
        check(cudaDeviceSynchronize(), "forward_overhead");
        constexpr int kCalls = 50;
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < kCalls; ++i) attention_forward(q, k, v, o, Tensor(), opt);
        const auto t1 = std::chrono::steady_clock::now();
        check(cudaDeviceSynchronize(), "forward_overhead");
        const double host_us = std::chrono::duration<double, std::micro>(t1 - t0).count() / kCalls;
        r.seconds = eager * 1e-3;
        r.flops = forward_flops(b, h, s, s, d, causal);
        char note[160];
        std::snprintf(note, sizeof note, "eager (the time); graph replay %.1f us (eager - graph %.1f us); host %.1f us per call",
                      1e3 * graph, 1e3 * (eager - graph), host_us);
        r.note = note;
      } catch (const std::exception& e) {
        r = not_run(r, e);
      }
      emit(r);
    }
  }
}


// The naive baseline (src/cuda/naive: cuBLAS S = scale Q K^T, a softmax kernel, cuBLAS O = P V,
// with S and P in device memory) beside the fused forward on the same tensors: its time, the
// fused forward's in the same suite (in the note), and the device memory S and P take. The
// cuda.forward shapes (16k tokens), and at d128 single sequences of 32k-128k tokens: S and P take
// 69 GB at 32k (it runs on an H200) and 275 / 1100 GB at 64k / 128k, where the rows say how much
// memory the baseline would need instead of running. Rows are "forward" rows of backend
// tessera_naive, so bench/compare.py puts them beside the peers' forward rows of the same shape.
void run_naive(const Context& ctx, const Emit& emit) {
  struct Case {
    int d, s, b;
    bool causal;
  };
  std::vector<Case> cases;
  for (int d : ctx.quick ? std::vector<int>{128} : std::vector<int>{64, 128, 256})
    for (int s : {1024, 4096, 16384})
      for (bool causal : {false, true}) cases.push_back({d, s, static_cast<int>(DenseBuffers::kTokens / s), causal});
  for (int s : {32768, 65536, 131072}) cases.push_back({128, s, 1, false});
  constexpr std::int64_t kMaxTokens = 131072;
  const std::size_t bytes = kMaxTokens * DenseBuffers::kWidth * 2;
  DeviceBuffer q(ctx.device, bytes), k(ctx.device, bytes), v(ctx.device, bytes), o(ctx.device, bytes);
  fill_random(q, DType::bf16, 21);
  fill_random(k, DType::bf16, 22);
  fill_random(v, DType::bf16, 23);
  const DType dt = DType::bf16;
  const Device dev = ctx.device;
  constexpr double kGB = 1e9;
  for (const Case& c : cases) {
    const int h = static_cast<int>(DenseBuffers::kWidth / c.d);
    const Tensor tq(q.data(), dt, {c.b, c.s, h, c.d}, dev), tk(k.data(), dt, {c.b, c.s, h, c.d}, dev),
        tv(v.data(), dt, {c.b, c.s, h, c.d}, dev), to(o.data(), dt, {c.b, c.s, h, c.d}, dev);
    AttentionOptions opt;
    opt.causal = c.causal;
    Row r = dense_row("forward", dt, c.b, h, c.s, c.d, c.causal);
    r.name = std::string("naive ") + r.name;
    r.backend = "tessera_naive";
    // The long rows' calls (tens to hundreds of ms) are timed one at a time: queued samples of
    // ten would take seconds each, and a call's host time is nothing beside them.
    const auto median_ms = [&](const std::function<void()>& fn) {
      return c.s > DenseBuffers::kTokens ? cuda_median_ms(fn, ctx.min_time) : dense_median_ms(ctx, fn);
    };
    std::size_t ws_bytes = 0;
    char note[240];
    try {
      const AttentionParams p = api::build_forward_params(tq, tk, tv, Tensor(), Tensor(), to, Tensor(), opt, {});
      ws_bytes = cuda::naive::naive_workspace_bytes(p);
      // The fused forward's time for the note; its failure leaves the baseline's row standing.
      char fused[160];
      double fused_ms = 0;
      try {
        fused_ms = median_ms([&] { attention_forward(tq, tk, tv, to, Tensor(), opt); });
        std::snprintf(fused, sizeof fused, "fused forward %.3f ms, no workspace", fused_ms);
      } catch (const std::exception& e) {
        std::snprintf(fused, sizeof fused, "fused forward not run: %s", e.what());
        cudaGetLastError();
      }
      std::size_t free_bytes = 0, total_bytes = 0;
      check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
      // Room for cuBLAS's own workspace beside S and P.
      if (static_cast<double>(ws_bytes) > 0.9 * static_cast<double>(free_bytes)) {
        std::snprintf(note, sizeof note, "not run: S and P would need %.1f GB of device memory, %.1f GB free; %s",
                      ws_bytes / kGB, free_bytes / kGB, fused);
        r.note = note;
        emit(r);
        continue;
      }
      DeviceBuffer workspace(dev, ws_bytes);
      const double ms = median_ms([&] { cuda::naive::naive_attention_forward(p, workspace.data(), ws_bytes); });
      r.seconds = ms * 1e-3;
      r.flops = forward_flops(c.b, h, c.s, c.s, c.d, c.causal);
      if (fused_ms > 0)
        std::snprintf(note, sizeof note, "S and P %.2f GB; fused forward %.3f ms here (%.1fx faster), no workspace",
                      ws_bytes / kGB, fused_ms, ms / fused_ms);
      else
        std::snprintf(note, sizeof note, "S and P %.2f GB; %s", ws_bytes / kGB, fused);
      r.note = note;
    } catch (const std::exception& e) {
      r = not_run(r, e);
      if (ws_bytes > 0) {  // e.g. the workspace's allocation: say what it asked for
        std::snprintf(note, sizeof note, "not run: %s (S and P: %.1f GB)", e.what(), ws_bytes / kGB);
        r.note = note;
      }
    }
    emit(r);
  }
}

}  // namespace

TESSERA_BENCH_CEILINGS(cuda, {DeviceKind::cuda, measure_cuda_ceilings});
TESSERA_BENCH_SUITE(cuda_forward, {"cuda.forward", DeviceKind::cuda, "dense forward bf16, d 64/128/256, seq 1k/4k/16k, 16k tokens, causal and not",
                                   [](const Context& c, const Emit& e) { run_dense(c, e, false); }});
TESSERA_BENCH_SUITE(cuda_forward_fp8, {"cuda.forward_fp8", DeviceKind::cuda,
                                       "dense forward fp8_e4m3 (bf16 out), d 128/256, seq 1k/4k/16k, 16k tokens, causal and not",
                                       run_dense_fp8});
TESSERA_BENCH_SUITE(cuda_backward, {"cuda.backward", DeviceKind::cuda, "dense backward bf16, same shapes as cuda.forward",
                                    [](const Context& c, const Emit& e) { run_dense(c, e, true); }});
TESSERA_BENCH_SUITE(cuda_forward_ragged, {"cuda.forward_ragged", DeviceKind::cuda, "ragged forward bf16 d128: the 16k tokens as 16 or 128 sequences of random lengths, causal and not", run_ragged});
TESSERA_BENCH_SUITE(cuda_forward_overhead, {"cuda.forward_overhead", DeviceKind::cuda,
                                            "dense forward d128: eager vs graph replay vs host time per call",
                                            forward_overhead});
TESSERA_BENCH_SUITE(cuda_naive, {"cuda.naive", DeviceKind::cuda,
                                 "the naive baseline (cuBLAS, softmax kernel, S and P in memory) beside the fused "
                                 "forward: bf16, cuda.forward's shapes, d128 at 32k-128k (GB it would need where it "
                                 "cannot run)",
                                 run_naive});

}  // namespace tessera::app::bench

#endif  // TESSERA_WITH_CUDA
