// The FP8 (e4m3) forward on CUDA (sm90 kernels; compute capability 9.0, head_dim 128 or 256)
// against the fp64 oracle on the stored fp8 values times their descales, under the rule
//   max |kernel - oracle| <= 2 * max |naive_fp8 - oracle| + rounding_floor(bf16, max |oracle|)
// with naive_fp8 (tests/support) the baseline of an fp8 kernel: S in fp32, P scaled by 256 and
// rounded to e4m3, P.V in fp32 on the fp8 V, bf16 out. Max error and RMSE are printed. Inputs
// sit in NaN margins, outputs are poisoned and must be fully written. Elsewhere (other devices,
// head_dim 64) the call must fail with a clear error and write nothing.
//
// The LSE has one more floor than the rule's fp32 one. Hopper's fp8 tensor cores do not
// accumulate q.k in full fp32: partial sums keep about 14 mantissa bits (measured here: a
// single-key row, whose LSE is its one score, is off by ~2^-14 relative; DeepSeek-V3's report
// gives the same figure for H800 fp8 GEMMs). An fp32 baseline cannot show that, so the LSE
// bound adds 2^-12 x (an upper bound of |S|: scale x max |q * dq| x max |k * dk| by
// Cauchy-Schwarz). O is unaffected in practice (P is rounded to e4m3, 2^-4 relative) and keeps
// the plain rule.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cpu/reference.h"
#include "cuda/common/scratch_pool.h"
#include "cuda/sm90/forward/split_tail_plan.h"
#if defined(TESSERA_HAS_SM90_KERNELS)
#include "cuda/sm90/forward/fp8_v_transpose.h"
#endif
#include "math/dtype_convert.h"
#include "math/online_softmax.h"
#include "gpu/gpu_support.h"
#include "support/test_support.h"
#include "tessera/attention.h"
#include "tessera/error.h"

namespace tessera::testing {
namespace {

struct GpuFp8Case {
  AttentionCase host;
  DeviceTensor q, k, v, out, lse, cu_q, cu_k, dq, dk, dv;

  GpuFp8Case(const CaseSpec& spec, std::mt19937_64& rng)
      : host(spec, rng), q(host.q), k(host.k), v(host.v), out(host.out), lse(host.lse) {
    if (spec.ragged()) {
      cu_q = DeviceTensor(host.cu_q);
      cu_k = DeviceTensor(host.cu_k);
    }
    if (host.descale_q.numel() > 0) dq = DeviceTensor(host.descale_q);
    if (host.descale_k.numel() > 0) dk = DeviceTensor(host.descale_k);
    if (host.descale_v.numel() > 0) dv = DeviceTensor(host.descale_v);
  }

  // The call alone, on ctx's stream (no poison, no synchronization: capturable).
  void launch(const ExecutionContext& ctx = {}) {
    Fp8Descale d;
    if (host.descale_q.numel() > 0) d.q = dq.view();
    if (host.descale_k.numel() > 0) d.k = dk.view();
    if (host.descale_v.numel() > 0) d.v = dv.view();
    if (host.spec.ragged())
      attention_forward_fp8_ragged(q.view(), k.view(), v.view(), cu_q.view(), cu_k.view(), d, out.view(), lse.view(),
                                   host.options(), ctx);
    else
      attention_forward_fp8(q.view(), k.view(), v.view(), d, out.view(), lse.view(), host.options(), ctx);
  }
  void run() {
    out.poison(host.out);
    lse.poison(host.lse);
    launch();
    TESSERA_TEST_CUDA(cudaDeviceSynchronize());
    out.download(host.out);
    lse.download(host.lse);
  }
};

// max over rows of |x * descale| (Euclidean norm of a head_dim vector) for q or k of p.
double max_row_norm(const AttentionParams& p, bool is_q) {
  const StridedPtr& t = is_q ? p.q : p.k;
  const DescalePtr& ds = is_q ? p.q_descale : p.k_descale;
  const int heads = is_q ? p.heads_q : p.heads_kv;
  double best = 0.0;
  for (int b = 0; b < p.batch; ++b) {
    const int len = is_q ? p.q_len(b) : p.k_len(b);
    const std::int64_t start = is_q ? p.q_start(b) : p.k_start(b);
    for (int r = 0; r < len; ++r)
      for (int h = 0; h < heads; ++h) {
        const float f = ds.at(b, is_q ? h / p.group() : h);
        double n2 = 0.0;
        for (int d = 0; d < p.head_dim; ++d) {
          const double x = math::load_as_float(t.ptr, t.offset(b, start + r, h) + d, DType::e4m3) * f;
          n2 += x * x;
        }
        best = std::max(best, std::sqrt(n2));
      }
  }
  return best;
}

// The LSE floor for Hopper's fp8 accumulation (see the top of the file).
double fp8_accumulation_floor(const AttentionParams& p) {
  return std::ldexp(p.mask.scale * max_row_norm(p, true) * max_row_norm(p, false), -12);
}

bool fp8_kernels_here() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
#if defined(TESSERA_HAS_SM90_KERNELS)
  return major == 9 && minor == 0;
#else
  return false;
#endif
}

std::vector<CaseSpec> grid() {
  return {
      dense_fp8(2, 113, 300, 4, 2, 128, opts(false)),
      dense_fp8(1, 17, 1023, 8, 1, 128, opts(true)),               // seq_q < seq_k, GQA 8, causal
      dense_fp8(2, 113, 17, 2, 2, 256, opts(true), 16),            // seq_q > seq_k: top rows masked; padded
      dense_fp8(1, 1023, 1023, 2, 2, 128, opts(false, 128, 16)),   // sliding window
      dense_fp8(3, 1, 1, 4, 1, 128, opts(false, -1, -1, 3.0f)),    // seq 1, softcap
      dense_fp8(1, 1, 113, 8, 8, 256, opts(true, -1, -1, 2.0f), 16),  // decode row, softcap + causal
      dense_fp8(1, 1023, 1023, 4, 1, 128, opts(true)),             // many causal tiles
      dense_fp8(1, 300, 700, 2, 1, 256, opts(false)),
      dense_fp8(2, 40, 0, 2, 1, 128, opts(false)),                 // no keys: O = 0, LSE = -inf
      ragged_fp8({17, 0, 113, 1, 5}, {113, 0, 17, 1, 0}, 4, 1, 128, opts(true), 16),  // empty seq, empty KV
      ragged_fp8({113, 1, 17}, {1023, 17, 17}, 8, 1, 128, opts(false, 64, 0, 5.0f)),
      ragged_fp8({33, 0, 200}, {65, 0, 129}, 4, 4, 256, opts(true)),
      without_descales(dense_fp8(2, 17, 113, 4, 2, 128, opts(false)), true, true, true),  // no descales: all 1
      without_descales(ragged_fp8({1, 17, 113}, {113, 17, 1}, 2, 1, 256, opts(false)), true, false, true),  // only k
      dense_fp8(40, 129, 300, 8, 2, 128, opts(false)),  // more tiles than SMs: persistent CTAs walk several
      dense_fp8(16, 200, 150, 8, 8, 256, opts(false)),
      dense_fp8(4, 700, 700, 8, 2, 128, opts(true)),    // causal, more tiles than SMs: the dynamic walk
      dense_fp8(4, 700, 700, 8, 2, 256, opts(true)),    // the same with one Q buffer (d256)
      ragged_fp8({700, 13, 450, 0, 640, 129, 300, 555, 1, 380, 700, 64}, {700, 13, 600, 5, 640, 300, 300, 555, 1, 380, 900, 64},
                 8, 2, 128, opts(true)),
  };
}

// What every FP8 run must show: every element written and finite, the margins untouched, and O
// and the LSE within the rule against the oracle (the naive fp8 baseline's error printed beside).
void expect_matches_oracle(const GpuFp8Case& g, const std::string& label) {
  EXPECT_EQ(g.host.out.count_nan(), 0);
  EXPECT_EQ(g.host.lse.count_nan(), 0);
  EXPECT_TRUE(g.host.out.margins_intact());
  EXPECT_TRUE(g.host.lse.margins_intact());
  const AttentionParams p = g.host.forward_params();
  const auto oracle = cpu::reference::forward(p);
  std::vector<double> naive_lse;
  const auto naive = naive_fp8_forward(p, &naive_lse);
  const ErrorStats got = error_stats(g.host.out_packed(), oracle.o);
  const ErrorStats base = error_stats(naive, oracle.o);
  const double tol_o = tolerance(naive, oracle.o, p.out_dtype());
  std::printf("[ fp8 cuda ] %s: out max %.3g rmse %.3g | naive fp8 max %.3g rmse %.3g | bound %.3g (max|o| %.3g)\n",
              label.c_str(), got.max_abs, got.rmse, base.max_abs, base.rmse, tol_o, max_abs(oracle.o));
  EXPECT_LE(got.max_abs, tol_o) << "naive error " << base.max_abs;
  const double tol_l = tolerance(naive_lse, oracle.lse, DType::f32) + fp8_accumulation_floor(p);
  const ErrorStats lse = error_stats(g.host.lse_packed(), oracle.lse);
  std::printf("[ fp8 cuda ]   lse max %.3g rmse %.3g | bound %.3g (fp8 accumulation floor %.3g)\n", lse.max_abs,
              lse.rmse, tol_l, fp8_accumulation_floor(p));
  EXPECT_LE(lse.max_abs, tol_l) << "naive error " << max_abs_error(naive_lse, oracle.lse);
}

class CudaFp8Grid : public ::testing::TestWithParam<CaseSpec> {};

TEST_P(CudaFp8Grid, MatchesOracleWithinRule) {
  if (!fp8_kernels_here()) GTEST_SKIP() << "fp8 needs the sm90 kernels (compute capability 9.0)";
  const CaseSpec spec = GetParam();
  SCOPED_TRACE(spec.name());
  auto rng = fresh_rng();
  GpuFp8Case g(spec, rng);
  g.run();
  expect_matches_oracle(g, spec.name());
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaFp8Grid, ::testing::ValuesIn(grid()),
                         [](const ::testing::TestParamInfo<CaseSpec>& info) { return "case" + std::to_string(info.index); });

#if defined(TESSERA_HAS_SM90_KERNELS)
// The V^T pass itself (fp8_v_transpose.h) against a host transpose of the same bytes: every byte
// of a poisoned workspace, the keys past seq_k (zero) included, in the P fragments' key order.
// V has padded row, head and batch strides, and its gaps and a margin on either side hold 0x7F
// (an e4m3 NaN), so that a byte read from outside V shows.
TEST(CudaFp8, VTransposePassWritesWhatThePVProductReads) {
  if (!fp8_kernels_here()) GTEST_SKIP() << "fp8 needs the sm90 kernels (compute capability 9.0)";
  auto rng = fresh_rng();
  // Logical key l of a 128-key tile holds key phys(l) (fp8_operands.cuh, pack_weights_e4m3).
  auto phys = [](int l) {
    const int within = l % 32, qq = (within % 16) / 4, i = within % 4;
    return 32 * (l / 32) + 16 * (within / 16) + 2 * qq + (i & 1) + 8 * (i >> 1);
  };
  struct Shape {
    int d, seq_k, heads, batch;
  };
  for (const Shape& sh : {Shape{128, 1, 1, 1}, Shape{128, 300, 3, 2}, Shape{256, 129, 2, 2}, Shape{256, 17, 1, 3},
                          Shape{128, 1023, 2, 1}}) {
    SCOPED_TRACE("d " + std::to_string(sh.d) + " seq_k " + std::to_string(sh.seq_k) + " heads " +
                 std::to_string(sh.heads) + " batch " + std::to_string(sh.batch));
    const std::int64_t head = sh.d + 16, row = sh.heads * head + 32, batch = sh.seq_k * row + 64, margin = 256;
    std::vector<std::uint8_t> v(static_cast<std::size_t>(2 * margin + sh.batch * batch), 0x7F);
    std::uniform_int_distribution<int> byte(0, 255);
    auto at = [&](int b, int k, int h, int n) -> std::uint8_t& { return v[margin + b * batch + k * row + h * head + n]; };
    for (int b = 0; b < sh.batch; ++b)
      for (int k = 0; k < sh.seq_k; ++k)
        for (int h = 0; h < sh.heads; ++h)
          for (int n = 0; n < sh.d; ++n) at(b, k, h, n) = static_cast<std::uint8_t>(byte(rng));
    const std::int64_t pitch = tessera::cuda::sm90::fp8_vt_pitch(sh.seq_k);
    const std::size_t out_bytes = static_cast<std::size_t>(sh.batch * sh.heads * sh.d * pitch);
    DeviceBuffer<std::uint8_t> dv(v), out(out_bytes, 0xAB);
    ASSERT_TRUE(tessera::cuda::sm90::fp8_v_transpose_supported(dv.get() + margin, row, head, batch, sh.seq_k, sh.heads,
                                                               sh.batch, sh.d));
    TESSERA_TEST_CUDA(tessera::cuda::sm90::launch_fp8_v_transpose(dv.get() + margin, row, head, batch, sh.seq_k,
                                                                  sh.heads, sh.batch, sh.d, out.get(), nullptr));
    const std::vector<std::uint8_t> got = out.read();
    std::size_t wrong = 0;
    for (int b = 0; b < sh.batch; ++b)
      for (int h = 0; h < sh.heads; ++h)
        for (int n = 0; n < sh.d; ++n)
          for (std::int64_t key = 0; key < pitch; ++key) {
            const int k = static_cast<int>(key / 128 * 128) + phys(static_cast<int>(key % 128));
            const std::uint8_t want = k < sh.seq_k ? at(b, k, h, n) : 0;
            wrong += got[static_cast<std::size_t>(((b * sh.heads + h) * sh.d + n) * pitch + key)] != want;
          }
    EXPECT_EQ(wrong, 0u) << "bytes of V^T that differ from the host transpose";
  }
}
#endif

// V^T made once per call by a pass into a workspace (TESSERA_CUDA_FP8_V_TRANSPOSE=global; by
// default where the host rule says it pays) or by the kernel's warps per tile (=kernel; ragged
// launches always): the same
// bytes reach the same wgmma, so outputs and LSEs must be bit-identical, over the whole grid
// (odd key counts: the pass zeroes the keys past seq_k in the last 128-key tile; padded
// strides; GQA; masks). The pool's high-water mark shows whether the pass's workspace was
// allocated, i.e. whether the pass ran. At head_dim 256 the pass's launches run the V^T-only
// instance (overlapped schedule, kernel_traits.cuh), whose arithmetic is the serial one's in
// another order of issue: bit-identical too. Beyond the grid: launches with a forced split tail
// (50 tiles in 5 parts, d128 and d256: pass and split together, V^T loaded at the parts' K/V
// offsets), and five under the host rule (without the knob): three whose reuse makes it choose the
// pass (GQA 8 at d128, GQA 4 and 2 at d256) and two below the head dim's threshold that must not.
TEST(CudaFp8, VTransposePassMatchesKernelTransposeBitwise) {
  if (!fp8_kernels_here()) GTEST_SKIP() << "fp8 needs the sm90 kernels (compute capability 9.0)";
  int device = 0;
  TESSERA_TEST_CUDA(cudaGetDevice(&device));
  const cudaMemPool_t pool = tessera::cuda::scratch_pool(device);
  if (pool == nullptr) GTEST_SKIP() << "no stream-ordered memory pools: no workspace, no pass";
  auto rng = fresh_rng();
  std::vector<CaseSpec> specs = grid();
  const std::size_t split_specs = specs.size();
  specs.push_back(dense_fp8(40, 129, 1023, 8, 2, 128, opts(false)));  // split tail forced: 50 tiles in 5 parts
  specs.push_back(dense_fp8(40, 129, 1023, 8, 2, 256, opts(false)));  // the same at d256 (V^T-only instance)
  // The host rule (knob unset; fp8_v_transpose_plan.h: reuse = query tiles visiting a K/V tile x
  // group, the pass from 16 on at d128 and from 8 on at d256), each with whether it must choose the pass.
  const std::size_t rule_specs = specs.size();
  specs.push_back(dense_fp8(1, 700, 700, 8, 1, 128, opts(false)));  // 4 query tiles x group 8 = reuse 32: pass
  specs.push_back(dense_fp8(1, 700, 700, 2, 1, 128, opts(false)));  // 4 x 2 = 8: the kernel's transpose at d128
  specs.push_back(dense_fp8(1, 700, 700, 8, 2, 256, opts(false)));  // 6 x 4 = 24: pass (the V^T-only instance)
  specs.push_back(dense_fp8(1, 700, 700, 2, 1, 256, opts(false)));  // 6 x 2 = 12: pass at d256
  specs.push_back(dense_fp8(1, 700, 700, 1, 1, 256, opts(false)));  // 6 x 1 = 6: the kernel's transpose
  const bool rule_passes[] = {true, false, true, true, false};
  for (const CaseSpec& spec : specs) {
    SCOPED_TRACE(spec.name());
    GpuFp8Case g(spec, rng);
    // Pass and split tail together: V^T loaded by TMA at the parts' K/V offsets.
    const bool split = &spec == &specs[split_specs] || &spec == &specs[split_specs + 1];
    ScopedEnv split_tail("TESSERA_CUDA_FORWARD_SPLIT_TAIL", split ? "50:5" : "0");
    std::vector<double> out_kernel, lse_kernel;
    {
      ScopedEnv where("TESSERA_CUDA_FP8_V_TRANSPOSE", "kernel");
      g.run();
      out_kernel = g.host.out_packed();
      lse_kernel = g.host.lse_packed();
    }
    const std::size_t index = static_cast<std::size_t>(&spec - specs.data());
    const bool by_rule = index >= rule_specs;
    reset_pool_high_water(pool);
    {
      ScopedEnv where("TESSERA_CUDA_FP8_V_TRANSPOSE", by_rule ? "" : "global");  // the rule / forced
      g.run();
    }
    const std::uint64_t high = pool_high_water(pool);
    const AttentionParams p = g.host.forward_params();
    const std::uint64_t vt_bytes = static_cast<std::uint64_t>(p.batch) * p.heads_kv * p.head_dim *
                                   ((static_cast<std::uint64_t>(p.seq_k) + 127) / 128 * 128);
    const std::uint64_t bm = p.head_dim == 128 ? 192 : 128;  // FP8 tile rows (kernel_traits.cuh)
    const std::uint64_t split_bytes = split ? 50ull * 5 * bm * (p.head_dim + 1) * sizeof(float) : 0;
    if (by_rule && !rule_passes[index - rule_specs]) {
      EXPECT_LT(high, vt_bytes) << "the rule ran the pass below its reuse threshold";
    } else if (!spec.ragged() && p.seq_k > 0) {
      EXPECT_GE(high, vt_bytes + split_bytes) << "the pass's (and the split's) workspace was not allocated";
    }
    EXPECT_TRUE(g.host.out.margins_intact());
    EXPECT_TRUE(g.host.lse.margins_intact());
    const std::vector<double> out_global = g.host.out_packed(), lse_global = g.host.lse_packed();
    ASSERT_EQ(out_global.size(), out_kernel.size());
    ASSERT_EQ(lse_global.size(), lse_kernel.size());
    std::size_t out_diff = 0, lse_diff = 0;
    for (std::size_t i = 0; i < out_global.size(); ++i)
      out_diff += out_global[i] != out_kernel[i];
    for (std::size_t i = 0; i < lse_global.size(); ++i)
      lse_diff += lse_global[i] != lse_kernel[i];  // -inf == -inf for empty rows
    EXPECT_EQ(out_diff, 0u) << "outputs that differ between the pass and the kernel's transpose";
    EXPECT_EQ(lse_diff, 0u) << "LSEs that differ between the pass and the kernel's transpose";
    EXPECT_EQ(g.host.out.count_nan(), 0);
    EXPECT_EQ(g.host.lse.count_nan(), 0);
  }
}

// The split tail (src/cuda/sm90/forward/split_tail_plan.h), forced by
// TESSERA_CUDA_FORWARD_SPLIT_TAIL ("n" in halves, "n:k" in k parts) on shapes whose last round
// the rule would not split: parts of one K/V tile or none (empty parts), of no keys, of an odd
// count, more tiles than SMs, both head dims, soft cap, up to 8 parts; a masked problem ignores
// the knob; the rule's own split on 188 tiles of 16 K/V tiles (halves of 56 on 132 SMs), and 0
// turning it off. Same rule as the grid, LSE included. The scratch pool's high-water mark shows
// whether the parts' workspace was allocated, i.e. whether the split ran.
TEST(CudaFp8, SplitTailMatchesOracleWithinRule) {
  if (!fp8_kernels_here()) GTEST_SKIP() << "fp8 needs the sm90 kernels (compute capability 9.0)";
  int device = 0;
  TESSERA_TEST_CUDA(cudaGetDevice(&device));
  const cudaMemPool_t pool = tessera::cuda::scratch_pool(device);
  if (pool == nullptr) GTEST_SKIP() << "no stream-ordered memory pools: no workspace, no split";
  int sms = 0;
  TESSERA_TEST_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  // 188 tiles (47 x 4 heads x 1 query block) of 16 K/V tiles: what the rule splits on this device.
  const tessera::cuda::sm90::SplitTail rule = tessera::cuda::sm90::forward_split_tail(188, std::min(188, sms), 16, 128, 128, -1);
  if (sms == 132) {  // the H200 / H100 SXM: the rule must split here, or the case below tests nothing
    EXPECT_EQ(rule.tiles, 56);
    EXPECT_EQ(rule.parts, 2);
  }
  auto rng = fresh_rng();
  const SplitCase cases[] = {
      {dense_fp8(2, 113, 300, 4, 2, 128, opts(false)), "3", 3, 2},              // 3 K/V tiles: halves of 1 and 2
      {dense_fp8(2, 113, 300, 4, 2, 128, opts(false)), "3:5", 3, 5},            // 5 parts of 3 K/V tiles: two empty
      {dense_fp8(3, 1, 1, 4, 1, 128, opts(false, -1, -1, 3.0f)), "100", 12, 2},  // every tile; half 0 has no K/V tile
      {dense_fp8(2, 40, 0, 2, 1, 128, opts(false)), "4:3", 4, 3},               // no keys: every part empty
      {dense_fp8(1, 300, 700, 2, 1, 256, opts(false)), "2", 2, 2},              // d256: 6 K/V tiles
      {dense_fp8(1, 300, 700, 2, 1, 256, opts(false)), "2:3", 2, 3},            // d256: thirds of 2 K/V tiles
      {dense_fp8(40, 129, 1023, 8, 2, 128, opts(false)), "50", 50, 2},          // more tiles than SMs, 8 K/V tiles
      {dense_fp8(40, 129, 1023, 8, 2, 128, opts(false)), "50:8", 50, 8},        // the same in 8 parts of 1
      {dense_fp8(47, 129, 2048, 4, 2, 128, opts(false)), "", rule.tiles, rule.parts},  // the rule (knob empty = unset)
      {dense_fp8(47, 129, 2048, 4, 2, 128, opts(false)), "0", 0, 1},            // the rule's split, turned off
      {dense_fp8(1, 17, 1023, 8, 1, 128, opts(true)), "5:3", 0, 1},             // causal: the knob does not apply
  };
  for (const SplitCase& c : cases) {
    const CaseSpec& spec = c.spec;
    SCOPED_TRACE(spec.name() + " split " + c.knob);
    ScopedEnv split("TESSERA_CUDA_FORWARD_SPLIT_TAIL", c.knob);
    ScopedEnv vt("TESSERA_CUDA_FP8_V_TRANSPOSE", "kernel");  // no V^T workspace in the high-water mark
    GpuFp8Case g(spec, rng);
    reset_pool_high_water(pool);
    g.run();
    const std::uint64_t high = pool_high_water(pool);
    const int bm = spec.head_dim == 128 ? 192 : 128;  // FP8 tile rows (kernel_traits.cuh)
    const std::uint64_t workspace = c.tiles * static_cast<std::uint64_t>(c.parts) * bm * (spec.head_dim + 1) * sizeof(float);
    if (c.tiles > 0) EXPECT_GE(high, workspace) << "the split's workspace was not allocated";
    else EXPECT_LT(high, 2ull * bm * (spec.head_dim + 1) * sizeof(float)) << "a split ran";
    expect_matches_oracle(g, std::string("split ") + c.knob + " " + spec.name());
  }
}

// The V^T pass and a split tail (both forced) captured in a CUDA graph: the pass is a node and
// both workspaces are graph memory nodes, so a replay after V changed must give the bytes of an
// eager call on the new V, replay after replay.
TEST(CudaFp8, GraphReplaysWithPassAndSplitMatchEagerCalls) {
  if (!fp8_kernels_here()) GTEST_SKIP() << "fp8 needs the sm90 kernels (compute capability 9.0)";
  ScopedEnv vt("TESSERA_CUDA_FP8_V_TRANSPOSE", "global");
  ScopedEnv split("TESSERA_CUDA_FORWARD_SPLIT_TAIL", "50");
  auto rng = fresh_rng();
  // d256: the V^T-only instance (kernel_traits.cuh) in the graph.
  for (const CaseSpec& spec :
       {dense_fp8(40, 129, 1023, 8, 2, 128, opts(false)), dense_fp8(40, 129, 1023, 8, 2, 256, opts(false))}) {
    GpuFp8Case g(spec, rng);
    const AttentionCase other(spec, rng);  // another V, swapped in between replays
    CapturedGraph graph([&](void* stream) {
      ExecutionContext ctx;
      ctx.stream = stream;
      g.launch(ctx);
    });
    for (int replay = 0; replay < 4; ++replay) {
      SCOPED_TRACE(spec.name() + " replay " + std::to_string(replay));
      g.v.upload(replay % 2 == 0 ? g.host.v : other.v);
      g.run();  // eager, on the default stream
      // Fully written, so that a replay that leaves an element unwritten differs from it.
      EXPECT_EQ(g.host.out.count_nan(), 0);
      EXPECT_EQ(g.host.lse.count_nan(), 0);
      EXPECT_TRUE(g.host.out.margins_intact());
      EXPECT_TRUE(g.host.lse.margins_intact());
      const auto o_eager = g.host.out.bytes(), l_eager = g.host.lse.bytes();
      expect_replay_writes(graph, g, o_eager, l_eager);
    }
  }
}

// Long rows: 8k keys, both head dims (the oracle on a few row blocks is too slow here, so the
// whole output is checked against the naive fp8 baseline's bound on a small head count); d256
// also with V^T from the pass (the V^T-only instance: 64 K/V tiles through its overlapped
// schedule, masked and not).
TEST(CudaFp8, LongSequenceWithinRule) {
  if (!fp8_kernels_here()) GTEST_SKIP() << "fp8 needs the sm90 kernels (compute capability 9.0)";
  auto rng = fresh_rng();
  struct LongCase {
    CaseSpec spec;
    const char* vt;  // TESSERA_CUDA_FP8_V_TRANSPOSE ("": the rule)
  };
  for (const LongCase& c : {LongCase{dense_fp8(1, 256, 8192, 1, 1, 128, opts(false)), ""},
                            LongCase{dense_fp8(1, 256, 4096, 1, 1, 256, opts(true)), ""},
                            LongCase{dense_fp8(1, 256, 8192, 1, 1, 256, opts(false)), "global"},
                            LongCase{dense_fp8(1, 256, 8192, 1, 1, 256, opts(true)), "global"}}) {
    const CaseSpec& spec = c.spec;
    SCOPED_TRACE(spec.name() + " V^T " + c.vt);
    ScopedEnv vt("TESSERA_CUDA_FP8_V_TRANSPOSE", c.vt);
    GpuFp8Case g(spec, rng);
    // Forced pass: the pool's high-water mark shows its workspace, i.e. that the V^T-only
    // instance ran and not a fallback to the transposing one.
    int device = 0;
    TESSERA_TEST_CUDA(cudaGetDevice(&device));
    const cudaMemPool_t pool = *c.vt != '\0' ? tessera::cuda::scratch_pool(device) : nullptr;
    if (pool != nullptr) reset_pool_high_water(pool);
    g.run();
    if (pool != nullptr) {
      EXPECT_GE(pool_high_water(pool), static_cast<std::uint64_t>(spec.head_dim) * ((spec.seq_k + 127) / 128 * 128) * spec.heads_kv * spec.batch)
          << "the V^T pass did not run";
    }
    // Every element of O and the LSE written, margins intact, both within the rule (the LSE with
    // the fp8 accumulation floor), as in the grid.
    expect_matches_oracle(g, spec.name() + " V^T " + c.vt);
  }
}

// Scores that ramp along the keys (AttentionCase::set_score_ramps): the lazy rescale keeps an
// e4m3 row's max while it rises by less than 2^0.5, so P grows past 2^8 towards 2^8.5 = 362
// before the max moves. Rising in kv head 0 by ~0.13 log2 units per 128 keys at d128, falling in
// kv head 1; both head dims, with and without the V^T pass. A smoke test of the whole kernel: a
// P saturating at 448 by a few percent would still pass the rule here (a model of this case
// passes up to a threshold of 1); the bound itself is checked exactly in
// tests/gpu/test_softmax_fragment.cu.
TEST(CudaFp8, RampedScoresWithinRule) {
  if (!fp8_kernels_here()) GTEST_SKIP() << "fp8 needs the sm90 kernels (compute capability 9.0)";
  auto rng = fresh_rng();
  for (const int d : {128, 256})
    for (const char* vt : {"kernel", "global"}) {
      const CaseSpec spec = dense_fp8(1, 200, 1500, 2, 2, d, opts(false));
      SCOPED_TRACE(spec.name() + " V^T " + vt);
      ScopedEnv where("TESSERA_CUDA_FP8_V_TRANSPOSE", vt);
      GpuFp8Case g(spec, rng);
      // True values within 4 standard deviations (the descales hold 4-8 of them in 448).
      g.host.set_score_ramps(3.5f, 3.5f);
      g.q.upload(g.host.q);
      g.k.upload(g.host.k);
      g.run();
      expect_matches_oracle(g, spec.name());
    }
}

// A zero q or k factor (an all-zero head) makes every score 0: uniform weights over the visible
// keys. The kernel folds the factors into the exponent's multiplier, where -inf * 0 would be NaN
// in every tile with masked scores (causal diagonal, the tail past k_len).
TEST(CudaFp8, ZeroDescaleGivesUniformWeights) {
  if (!fp8_kernels_here()) GTEST_SKIP() << "fp8 needs the sm90 kernels (compute capability 9.0)";
  auto rng = fresh_rng();
  for (const CaseSpec& spec : {dense_fp8(2, 100, 100, 4, 2, 128, opts(true)), dense_fp8(1, 77, 300, 2, 2, 256, opts(false))}) {
    SCOPED_TRACE(spec.name());
    GpuFp8Case g(spec, rng);
    g.host.descale_k.set(0, 0.0f);  // (sequence 0, kv head 0)
    g.host.descale_q.set(1, 0.0f);  // (sequence 0, kv head 1)
    g.dk.upload(g.host.descale_k);
    g.dq.upload(g.host.descale_q);
    g.run();
    // O and the LSE (log of the visible key count in the zeroed heads), margins included.
    expect_matches_oracle(g, spec.name() + " zero descales");
  }
}

// A small soft cap with large descales: scale / c is a finite float (the API's check) but times
// dq dk it is not (here 8.8e8 x 1e30). The kernel holds that factor at FLT_MAX, so keys whose
// q.k is exactly 0 (zeroed K rows) get a capped score of 0, not 0 * inf = NaN, and every other
// score saturates at +-c, as in exact arithmetic. The naive baseline stays finite here
// (|q dq . k dk| ~ 1e37 < FLT_MAX).
TEST(CudaFp8, SmallCapWithLargeDescalesStaysFinite) {
  if (!fp8_kernels_here()) GTEST_SKIP() << "fp8 needs the sm90 kernels (compute capability 9.0)";
  auto rng = fresh_rng();
  for (const CaseSpec& spec : {dense_fp8(2, 100, 100, 4, 2, 128, opts(true, -1, -1, 1e-10f)),
                               dense_fp8(1, 77, 300, 2, 2, 256, opts(false, -1, -1, 1e-10f))}) {
    SCOPED_TRACE(spec.name());
    GpuFp8Case g(spec, rng);
    ASSERT_TRUE(math::softcap_foldable(1.0f / std::sqrt(static_cast<float>(spec.head_dim)), 1e-10f));
    g.host.descale_q.set(0, 1e15f);  // (sequence 0, kv head 0)
    g.host.descale_k.set(0, 1e15f);
    // Every third key of (sequence 0, kv head 0) all zeros: q.k = 0 exactly there.
    const int hkv = spec.heads_kv, d = spec.head_dim;
    for (int j = 0; j < spec.seq_k; j += 3)
      for (int x = 0; x < d; ++x) g.host.k.set((static_cast<std::int64_t>(j) * hkv + 0) * d + x, 0.0f);
    g.dq.upload(g.host.descale_q);
    g.dk.upload(g.host.descale_k);
    g.k.upload(g.host.k);
    g.run();
    expect_matches_oracle(g, spec.name() + " small cap, large descales");
    // The LSE without expect_matches_oracle's fp8 accumulation floor (which these descales make
    // ~1e30): every score is bounded by c (in sequence 0's kv head 0, 0 or saturated at +-c), so
    // the accumulation's error in q.k does not reach the LSE and the plain rule holds.
    const AttentionParams p = g.host.forward_params();
    const auto oracle = cpu::reference::forward(p);
    std::vector<double> naive_lse;
    naive_fp8_forward(p, &naive_lse);
    EXPECT_LE(error_stats(g.host.lse_packed(), oracle.lse).max_abs, tolerance(naive_lse, oracle.lse, DType::f32));
  }
}

// Where the fp8 kernels do not apply: a clear tessera::Error, nothing written.
TEST(CudaFp8, UnsupportedHeadDimSaysWhatIsSupported) {
  auto rng = fresh_rng();
  GpuFp8Case g(dense_fp8(1, 17, 17, 2, 1, 64, opts(false)), rng);
  try {
    g.run();
    ADD_FAILURE() << "expected tessera::Error(unsupported)";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("fp8"), std::string::npos) << e.what();
  }
  HostTensor out = g.host.out, lse = g.host.lse;
  g.out.download(out);
  g.lse.download(lse);
  EXPECT_EQ(out.count_nan(), out.numel());
  EXPECT_TRUE(out.margins_intact());
  EXPECT_EQ(lse.count_nan(), lse.numel());
  EXPECT_TRUE(lse.margins_intact());
}

}  // namespace
}  // namespace tessera::testing
