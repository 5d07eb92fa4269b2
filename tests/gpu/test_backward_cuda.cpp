// The CUDA backward (the sm80 FA2-class main kernel; on compute capability 9.0 the sm90 wgmma one
// at head_dim 64, 128 and 256 unless TESSERA_CUDA_BACKWARD=portable or portable-compact; CTest
// runs this suite all three ways, the last with the sm80 kernel's compact layout at head_dim 128)
// against
// the fp64 oracle gradients under the tolerance rule
//   max |kernel - oracle| <= 2 * max |naive same-precision - oracle| + rounding floor,
// for dq, dk and dv separately, on a covering grid (seq 1/17/113/1023, seq_q != seq_k both
// ways, head dims 64/128/256, GQA 1/4/8, causal / window / softcap, f16 and bf16, ragged with
// empty sequences, padded strides) plus 4k-token cases, and determinism (50 runs bitwise).
// O and LSE come from the CUDA forward. Inputs sit inside NaN margins on the device; gradients
// are poisoned before each run and must be fully written with margins intact.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "api/build_params.h"
#include "cpu/reference.h"
#include "cuda/common/scratch_pool.h"
#include "cuda/sm80/backward/backward.h"
#include "gpu/gpu_support.h"
#include "support/test_support.h"
#include "tessera/attention.h"
#include "tessera/error.h"
#if defined(TESSERA_HAS_SM90_KERNELS)
#include "cuda/sm90/backward/backward_sm90.h"
#endif

namespace tessera::testing {
namespace {

// A host AttentionCase mirrored on the GPU.
struct GpuBwdCase {
  AttentionCase host;
  DeviceTensor q, k, v, out, lse, dout, dq, dk, dv, cu_q, cu_k;

  GpuBwdCase(const CaseSpec& spec, std::mt19937_64& rng)
      : host(spec, rng), q(host.q), k(host.k), v(host.v), out(host.out), lse(host.lse), dout(host.dout),
        dq(host.dq), dk(host.dk), dv(host.dv) {
    if (spec.ragged()) {
      cu_q = DeviceTensor(host.cu_q);
      cu_k = DeviceTensor(host.cu_k);
    }
  }

  // O and LSE from the CUDA forward (downloaded too, so host and device agree), fully written:
  // the backward reads them as inputs.
  void forward() {
    out.poison(host.out);
    lse.poison(host.lse);
    if (host.spec.ragged())
      attention_forward_ragged(q.view(), k.view(), v.view(), cu_q.view(), cu_k.view(), out.view(), lse.view(),
                               host.options());
    else
      attention_forward(q.view(), k.view(), v.view(), out.view(), lse.view(), host.options());
    TESSERA_TEST_CUDA(cudaDeviceSynchronize());
    out.download(host.out);
    lse.download(host.lse);
    EXPECT_EQ(host.out.count_nan(), 0) << "the forward left O unwritten";
    EXPECT_EQ(host.lse.count_nan(), 0) << "the forward left the LSE unwritten";
  }

  void backward(bool deterministic, void* stream = nullptr) {
    dq.poison(host.dq);
    dk.poison(host.dk);
    dv.poison(host.dv);
    AttentionOptions o = host.options();
    o.deterministic = deterministic;
    ExecutionContext ctx;
    ctx.stream = stream;
    if (host.spec.ragged())
      attention_backward_ragged(q.view(), k.view(), v.view(), cu_q.view(), cu_k.view(), out.view(), dout.view(),
                                lse.view(), dq.view(), dk.view(), dv.view(), o, ctx);
    else
      attention_backward(q.view(), k.view(), v.view(), out.view(), dout.view(), lse.view(), dq.view(), dk.view(),
                         dv.view(), o, ctx);
    TESSERA_TEST_CUDA(cudaDeviceSynchronize());
    dq.download(host.dq);
    dk.download(host.dk);
    dv.download(host.dv);
  }

  void expect_fully_written() const {
    EXPECT_EQ(host.dq.count_nan(), 0);
    EXPECT_EQ(host.dk.count_nan(), 0);
    EXPECT_EQ(host.dv.count_nan(), 0);
    EXPECT_TRUE(host.dq.margins_intact());
    EXPECT_TRUE(host.dk.margins_intact());
    EXPECT_TRUE(host.dv.margins_intact());
  }

  void expect_inputs_untouched() const {
    for (auto [d, h] : {std::pair{&q, &host.q}, {&k, &host.k}, {&v, &host.v}, {&out, &host.out}, {&dout, &host.dout},
                        {&lse, &host.lse}}) {
      HostTensor copy = *h;
      d->download(copy);
      EXPECT_TRUE(copy.bytes() == h->bytes()) << "an input changed on the device";
    }
  }

  void expect_matches_oracle() const {
    const BackwardParams p = host.backward_params();
    const auto oracle = cpu::reference::backward(p);
    const auto naive = naive_same_precision_backward(p);
    const struct {
      const char* name;
      std::vector<double> got;
      const std::vector<double>& ref;
      const std::vector<double>& nv;
    } grads[] = {{"dq", host.dq_packed(), oracle.dq, naive.dq},
                 {"dk", host.dk_packed(), oracle.dk, naive.dk},
                 {"dv", host.dv_packed(), oracle.dv, naive.dv}};
    for (const auto& g : grads)
      EXPECT_LE(max_abs_error(g.got, g.ref), tolerance(g.nv, g.ref, p.dtype))
          << g.name << ": naive error " << max_abs_error(g.nv, g.ref);
  }
};

// Row padding 8 keeps rows 16-byte aligned (the CUDA kernels' requirement) yet non-contiguous.
std::vector<CaseSpec> grid() {
  const DType f16 = DType::f16, bf16 = DType::bf16;
  return {
      dense(bf16, 2, 113, 113, 4, 1, 64, opts(false)),                // GQA 4
      dense(f16, 1, 17, 1023, 8, 1, 128, opts(true)),                 // seq_q < seq_k, GQA 8, causal
      dense(bf16, 2, 113, 17, 2, 2, 256, opts(true), 8),              // seq_q > seq_k: top rows see no key
      dense(f16, 1, 1023, 1023, 2, 2, 64, opts(false, 128, 16)),      // sliding window
      dense(bf16, 3, 1, 1, 4, 1, 128, opts(false, -1, -1, 3.0f)),    // seq 1, softcap
      dense(f16, 1, 1, 113, 8, 8, 256, opts(true, -1, -1, 2.0f), 8),  // one query row, softcap + causal
      dense(bf16, 1, 1023, 113, 4, 4, 128, opts(false, -1, 32), 8),   // right-only window, seq_q > seq_k
      dense(bf16, 1, 113, 1023, 8, 2, 64, opts(true, 200, -1)),       // causal + window, GQA 4
      dense(f16, 2, 17, 17, 1, 1, 256, opts(false, 3, 3, 1.5f), 8),  // narrow band + softcap
      dense(bf16, 1, 1023, 1023, 2, 2, 128, opts(true)),              // many causal tiles
      dense(f16, 1, 300, 200, 4, 4, 128, opts(false), 8),             // tails on both axes
      dense(f16, 1, 200, 333, 8, 1, 64, opts(true, -1, -1, 10.0f)),   // GQA 8 (group split over CTAs), softcap
      dense(bf16, 1, 500, 300, 2, 1, 256, opts(false, 50, -1)),       // left-only window, seq_q > seq_k
      dense(f16, 1, 129, 129, 1, 1, 256, opts(true)),                 // one row past a tile
      dense(bf16, 1, 17, 17, 8, 1, 128, opts(false)),                 // MQA, tiny
      dense(f16, 1, 1023, 17, 2, 1, 64, opts(true)),                  // most rows see every key, causal
      ragged(f16, {17, 0, 113, 1, 5}, {113, 0, 17, 1, 0}, 4, 1, 64, opts(true), 8),  // empty seq, empty KV
      ragged(bf16, {113, 1, 17}, {1023, 17, 17}, 8, 1, 128, opts(false, 64, 0, 5.0f)),
      ragged(f16, {0, 1023, 17}, {0, 113, 113}, 2, 1, 64, opts(false)),
      ragged(bf16, {33, 0}, {65, 0}, 4, 4, 256, opts(true), 8),
      ragged(bf16, {200, 129, 64}, {64, 300, 129}, 4, 2, 128, opts(true), 8),
      // sm80 d128 prefetch edges (step i+2's tiles are issued after step i's dQ GEMM): 2 query
      // tiles per CTA (no prefetch in the loop), 3 (exactly one, with softcap: the general copy).
      dense(bf16, 1, 100, 100, 2, 2, 128, opts(false)),
      dense(f16, 1, 150, 150, 1, 1, 128, opts(false, -1, -1, 4.0f)),
      // The sm90 kernel's own tile edges. d64 walks query tiles of 128 rows (sm80: 64): lengths
      // around 128 and 256, causal with GQA; window + softcap with seq_q > seq_k.
      dense(bf16, 2, 129, 255, 4, 2, 64, opts(true)),
      dense(f16, 1, 257, 128, 2, 1, 64, opts(false, 100, 20, 4.0f), 8),
      // d256 splits each 64-row query tile's S^T into two warpgroups' halves of 32: fewer than 32
      // query rows (the second half wholly past the end), a tail inside the second half; one
      // key past a KV tile of 64.
      dense(bf16, 1, 31, 65, 2, 1, 256, opts(false)),
      dense(f16, 2, 63, 127, 4, 2, 256, opts(true, -1, -1, 2.5f), 8),
      // d128 in the sm80 kernel's compact2 layout (99 KB parts) walks KV tiles of 64: one key
      // past a tile, GQA with softcap.
      dense(f16, 1, 70, 65, 4, 2, 128, opts(false, -1, -1, 3.0f), 8),
  };
}

struct GridCase {
  CaseSpec spec;
  bool deterministic;
};
void PrintTo(const GridCase& c, std::ostream* os) { *os << c.spec.name() << (c.deterministic ? " deterministic" : ""); }

std::vector<GridCase> grid_cases() {
  std::vector<GridCase> out;
  for (const CaseSpec& s : grid()) {
    out.push_back({s, false});
    out.push_back({s, true});
  }
  return out;
}

class CudaBackwardGrid : public ::testing::TestWithParam<GridCase> {};

TEST_P(CudaBackwardGrid, MatchesOracleWithinRule) {
  const GridCase gc = GetParam();
  SCOPED_TRACE(gc.spec.name() + (gc.deterministic ? " deterministic" : ""));
  auto rng = fresh_rng();
  GpuBwdCase g(gc.spec, rng);
  g.forward();
  g.backward(gc.deterministic);
  g.expect_fully_written();
  g.expect_inputs_untouched();
  g.expect_matches_oracle();
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaBackwardGrid, ::testing::ValuesIn(grid_cases()),
                         [](const ::testing::TestParamInfo<GridCase>& info) {
                           return "case" + std::to_string(info.index / 2) + (info.param.deterministic ? "_det" : "");
                         });

// 4k tokens: many KV tiles per head, long dQ accumulation chains; checked in full.
TEST(CudaBackward, Long4kCausalHd128) {
  auto rng = fresh_rng();
  GpuBwdCase g(dense(DType::bf16, 1, 4096, 4096, 1, 1, 128, opts(true)), rng);
  g.forward();
  g.backward(false);
  g.expect_fully_written();
  g.expect_matches_oracle();
}

TEST(CudaBackward, Long4kGqaHd64Deterministic) {
  auto rng = fresh_rng();
  GpuBwdCase g(dense(DType::f16, 1, 4096, 3000, 2, 1, 64, opts(false)), rng);
  g.forward();
  g.backward(true);
  g.expect_fully_written();
  g.expect_matches_oracle();
}

// The fp32 workspace (dQ accumulator first) comes from the per-device pool that keeps its memory
// across synchronisations (scratch_pool.h), not from the default pool, which unmaps it at every
// synchronisation so that the next call maps it afresh before its first launch.
TEST(CudaBackward, WorkspaceComesFromThePoolThatKeepsItsMemory) {
  int device = 0;
  TESSERA_TEST_CUDA(cudaGetDevice(&device));
  const cudaMemPool_t pool = tessera::cuda::scratch_pool(device);
  if (pool == nullptr) GTEST_SKIP() << "no stream-ordered memory pools on this device or driver";
  auto rng = fresh_rng();
  GpuBwdCase g(dense(DType::bf16, 1, 1024, 1024, 4, 4, 128, opts(false)), rng);
  g.forward();
  std::uint64_t reserved = 0;
  reset_pool_high_water(pool);
  g.backward(false);  // synchronises
  g.expect_fully_written();
  g.expect_matches_oracle();
  const std::uint64_t high = pool_high_water(pool);
  TESSERA_TEST_CUDA(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  const std::uint64_t accumulator = 4ull * 1024 * 128 * sizeof(float);
  EXPECT_GE(high, accumulator) << "the backward's workspace did not come from the pool";
  EXPECT_GE(reserved, high) << "the pool gave the workspace back at the synchronisation";
}

// The portable backward's tail pieces (backward_entry.cu, TailPlan; docs/perf/backward_sm80.md,
// "Tail pieces"), forced at small shapes: the last quarter of the KV tiles of every (sequence,
// kv head) as 4 CTAs over query shares, launched as a programmatic dependent of the main grid,
// dK/dV summed from fp32 partials. Against the oracle with margins and full writes: MHA with a
// partial last KV tile, shares that end inside a query tile, two sequences with a soft cap, and
// GQA 2 on a grid large enough that the group is not split. Only compute capability 9.x runs
// pieces (skipped elsewhere); the workspace's high-water mark shows they were planned (their
// partials make it larger than without).
TEST(CudaBackward, TailPiecesMatchOracle) {
  int device = 0, major = 0;
  TESSERA_TEST_CUDA(cudaGetDevice(&device));
  TESSERA_TEST_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major != 9) GTEST_SKIP() << "tail pieces run on compute capability 9.x only";
  const cudaMemPool_t pool = tessera::cuda::scratch_pool(device);
  if (pool == nullptr) GTEST_SKIP() << "no stream-ordered memory pools: the test cannot see that pieces ran";
  ScopedEnv path("TESSERA_CUDA_BACKWARD", "portable");
  auto rng = fresh_rng();
  // The second case's shares (250 rows) end inside a query tile: a piece's last tile is partial.
  for (const CaseSpec& s : {dense(DType::bf16, 1, 1024, 1000, 4, 4, 128, opts(false)),
                            dense(DType::bf16, 1, 1000, 700, 2, 2, 128, opts(false)),
                            dense(DType::f16, 2, 512, 640, 2, 2, 128, opts(false, -1, -1, 3.0f)),
                            dense(DType::bf16, 1, 256, 2304, 16, 8, 128, opts(false))}) {
    SCOPED_TRACE(s.name());
    GpuBwdCase g(s, rng);
    g.forward();
    std::uint64_t plain = 0;
    {
      ScopedEnv off("TESSERA_CUDA_BACKWARD_TAIL_PIECES", "0");
      reset_pool_high_water(pool);
      g.backward(false);
      g.expect_matches_oracle();
      plain = pool_high_water(pool);
    }
    ScopedEnv on("TESSERA_CUDA_BACKWARD_TAIL_PIECES", "4");
    reset_pool_high_water(pool);
    g.backward(false);
    g.expect_fully_written();
    g.expect_inputs_untouched();
    g.expect_matches_oracle();
    const std::uint64_t split = pool_high_water(pool);
    EXPECT_GT(split, plain) << "the tail pieces were not planned";
  }
}

// Several query heads per CTA: at d64 / d128, 17 KV tiles x 4 KV heads = 68 CTAs, so on a
// 132-SM device (the H200) the host splits the GQA group of 4 in two and each CTA walks two query
// heads of 4 (d64: 2) query tiles each; at d256 (KV tiles of 64) 136 CTAs, no split, each walks
// all 4 query heads. The step from one head to the next, which no other case reaches there (a
// review of the sm90 kernel found the gap). Both modes; causal bottom-right with seq_q < seq_k.
TEST(CudaBackward, SeveralQueryHeadsPerCta) {
  auto rng = fresh_rng();
  for (int d : {128, 64, 256}) {
    for (bool deterministic : {false, true}) {
      SCOPED_TRACE("head_dim " + std::to_string(d) + (deterministic ? " deterministic" : " atomic"));
      GpuBwdCase g(dense(DType::bf16, 1, 256, 2176, 16, 4, d, opts(true)), rng);
      g.forward();
      g.backward(deterministic);
      g.expect_fully_written();
      g.expect_matches_oracle();
    }
  }
}

// Deterministic mode: 50 runs, gradients bitwise equal (GQA with a split group, several KV
// tiles per Q tile, causal, on a side stream).
TEST(CudaBackward, DeterministicIsBitwiseRepeatable) {
  auto rng = fresh_rng();
  for (const CaseSpec& s : {dense(DType::bf16, 2, 1023, 777, 8, 2, 128, opts(true)),
                            ragged(DType::f16, {300, 0, 517}, {700, 5, 517}, 4, 1, 256, opts(false, -1, -1, 4.0f), 8)}) {
    SCOPED_TRACE(s.name());
    GpuBwdCase g(s, rng);
    g.forward();
    cudaStream_t stream = nullptr;
    TESSERA_TEST_CUDA(cudaStreamCreate(&stream));
    g.backward(true, stream);
    const auto dq0 = g.host.dq.bytes(), dk0 = g.host.dk.bytes(), dv0 = g.host.dv.bytes();
    g.expect_fully_written();
    g.expect_matches_oracle();
    int mismatches = 0;
    for (int run = 1; run < 50; ++run) {
      g.backward(true, stream);
      mismatches += g.host.dq.bytes() != dq0 || g.host.dk.bytes() != dk0 || g.host.dv.bytes() != dv0;
    }
    TESSERA_TEST_CUDA(cudaStreamDestroy(stream));
    EXPECT_EQ(mismatches, 0) << "of 49 repeated deterministic runs";
  }
}

// Rows that see no key get zero dq; keys no query sees get zero dk/dv (never NaN).
TEST(CudaBackward, EmptyRowsAndKeysGiveZeroGradients) {
  auto rng = fresh_rng();
  for (const CaseSpec& s : {dense(DType::bf16, 1, 40, 0, 2, 1, 64, opts(false)),
                            dense(DType::f16, 1, 200, 100, 1, 1, 128, opts(true)),
                            dense(DType::bf16, 1, 0, 70, 2, 2, 128, opts(false))}) {
    SCOPED_TRACE(s.name());
    GpuBwdCase g(s, rng);
    g.forward();
    g.backward(false);
    g.expect_fully_written();
    g.expect_matches_oracle();
  }
}

// Which main kernel runs: on compute capability 9.0 the sm90 backward takes every case the CUDA
// backward supports (f16, bf16; head_dim 64, 128, 256; any mask, softcap, GQA, ragged) unless
// TESSERA_CUDA_BACKWARD=portable is set (CTest runs this suite both ways, so each run must really
// exercise its kernel); other devices keep the sm80 kernel.
TEST(CudaBackward, DispatchTakesSm90KernelUnlessPortable) {
  int dev = 0, major = 0, minor = 0;
  TESSERA_TEST_CUDA(cudaGetDevice(&dev));
  TESSERA_TEST_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  TESSERA_TEST_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
#if defined(TESSERA_HAS_SM90_KERNELS)
  const char* forced = std::getenv("TESSERA_CUDA_BACKWARD");
  // "portable", "portable-compact", "portable-compact2": all keep the sm80 kernel.
  const bool portable = forced != nullptr && std::string(forced).rfind("portable", 0) == 0;
  auto rng = fresh_rng();
  for (const CaseSpec& s : {dense(DType::bf16, 2, 113, 300, 4, 1, 128, opts(true)),
                            ragged(DType::f16, {17, 0, 113}, {113, 0, 17}, 4, 2, 128, opts(false, 8, 8, 2.0f)),
                            dense(DType::bf16, 1, 40, 90, 2, 2, 64, opts(false)),
                            ragged(DType::bf16, {129, 0, 5}, {64, 0, 300}, 4, 1, 64, opts(true), 8),
                            dense(DType::f16, 1, 40, 90, 2, 2, 256, opts(true)),
                            dense(DType::bf16, 2, 31, 17, 8, 2, 256, opts(false, 4, 4, 3.0f))}) {
    SCOPED_TRACE(s.name());
    AttentionCase c(s, rng);
    BackwardParams p = c.backward_params();
    p.device = Device{DeviceKind::cuda, dev};
    std::string why;
    const bool want = !portable && major == 9 && minor == 0;
    EXPECT_EQ(cuda::sm90::backward_applicable(p, &why), want) << why;
  }
#else
  if (major == 9) GTEST_SKIP() << "this build has no sm90 kernels (architecture list without 90)";
#endif
}

// The sm80 kernel's layout (tiles.h Cfg<D, V>): the default where the device's opt-in shared memory
// per block allows it, else the first compact one that fits (only head_dim 128 has any);
// TESSERA_CUDA_BACKWARD=portable-compact (CTest's third run) / portable-compact2 force head_dim
// 128's compact layouts 1 / 2 at least. The needs are docs/perf/backward_sm80.md's table.
TEST(CudaBackward, Sm80LayoutFollowsSharedMemory) {
  namespace sm80 = cuda::sm80;
  EXPECT_EQ(sm80::backward_shape(64, 0).smem_bytes, 99328);
  EXPECT_EQ(sm80::backward_shape(128, 0).smem_bytes, 181248);
  EXPECT_EQ(sm80::backward_shape(128, 1).smem_bytes, 131584);
  EXPECT_EQ(sm80::backward_shape(128, 2).smem_bytes, 82432);
  EXPECT_EQ(sm80::backward_shape(256, 0).smem_bytes, 147968);
  EXPECT_EQ(sm80::backward_shape(128, 2).block_kv, 64);
  EXPECT_EQ(sm80::backward_shape(64, 1).block_kv, 0);  // no such layout
  const char* env = std::getenv("TESSERA_CUDA_BACKWARD");
  const std::string e = env != nullptr ? env : "";
  const int forced = e == "portable-compact" ? 1 : e == "portable-compact2" ? 2 : 0;
  // Opt-in limits: H100/H200 227 KB, A100/A30 163 KB, sm_86/sm_89 99 KB.
  constexpr int kHopper = 232448, kA100 = 166912, kAda = 101376;
  EXPECT_EQ(sm80::backward_variant(64, kAda), 0);
  EXPECT_EQ(sm80::backward_variant(256, kA100), 0);
  EXPECT_EQ(sm80::backward_variant(256, kAda), -1);
  EXPECT_EQ(sm80::backward_variant(128, kHopper), forced);
  EXPECT_EQ(sm80::backward_variant(128, kA100), std::max(forced, 1));
  EXPECT_EQ(sm80::backward_variant(128, kAda), 2);
  EXPECT_EQ(sm80::backward_variant(128, 80 * 1024), -1);
  int dev = 0, optin = 0;
  TESSERA_TEST_CUDA(cudaGetDevice(&dev));
  TESSERA_TEST_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  for (int d : {64, 128, 256}) {
    SCOPED_TRACE("head_dim " + std::to_string(d) + ", opt-in " + std::to_string(optin));
    const int v = sm80::backward_variant(d, optin);
    if (v >= 0) {
      EXPECT_LE(sm80::backward_shape(d, v).smem_bytes, optin);
    }
    if (v > std::min(forced, d == 128 ? 2 : 0)) {
      EXPECT_GT(sm80::backward_shape(d, v - 1).smem_bytes, optin);
    }
  }
}

// What the CUDA backward does not take is refused before anything is written.
TEST(CudaBackward, UnsupportedLayoutsAreRefused) {
  auto rng = fresh_rng();
  // 3-element row padding: rows not 16-byte aligned (the forward refuses it too, so O/LSE stay
  // poisoned; the refusal comes before they are read).
  GpuBwdCase g(dense(DType::bf16, 1, 17, 17, 2, 1, 64, opts(false), 3), rng);
  g.dq.poison(g.host.dq);
  g.dk.poison(g.host.dk);
  g.dv.poison(g.host.dv);
  try {
    attention_backward(g.q.view(), g.k.view(), g.v.view(), g.out.view(), g.dout.view(), g.lse.view(), g.dq.view(),
                       g.dk.view(), g.dv.view(), g.host.options());
    ADD_FAILURE() << "expected tessera::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported) << e.what();
  }
  for (auto [d, h] : {std::pair{&g.dq, &g.host.dq}, {&g.dk, &g.host.dk}, {&g.dv, &g.host.dv}}) {
    HostTensor copy = *h;
    d->download(copy);
    EXPECT_EQ(copy.count_nan(), copy.numel());  // nothing written: the poison stays
    EXPECT_TRUE(copy.margins_intact());
  }
}

}  // namespace
}  // namespace tessera::testing
