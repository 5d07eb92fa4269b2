// The CUDA forward (sm90 kernels on Hopper, sm80 FA2-class kernels elsewhere and under
// TESSERA_CUDA_FORWARD=portable; CTest runs this suite both ways) against the fp64 oracle under
// the tolerance rule
//   max |kernel - oracle| <= 2 * max |naive same-precision - oracle| + rounding floor,
// on the CPU suite's grid (odd sizes, seq_q != seq_k both ways, head dims 64/128/256, GQA
// 1/4/8, causal / window / softcap, f16 and bf16, ragged with empty sequences, padded
// strides) plus long sequences checked on row blocks. Inputs sit inside NaN margins on the
// device exactly as on the host; outputs are poisoned before each run and must be fully
// written, with margins intact.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "api/build_params.h"
#include "cpu/reference.h"
#include "gpu/forward_cuda_support.h"
#include "gpu/gpu_support.h"
#include "math/online_softmax.h"
#include "support/test_support.h"
#include "tessera/attention.h"
#include "tessera/error.h"
#if defined(TESSERA_HAS_SM90_KERNELS)
#include "cuda/common/scratch_pool.h"
#include "cuda/sm90/forward/forward_sm90.h"
#include "cuda/sm90/forward/split_tail_plan.h"
#endif

namespace tessera::testing {
namespace {

// ---------------------------------------------------------------------------------------------
// The covering grid (CPU suite's, on f16/bf16 with 16-byte row padding) and a few more tiles.

std::vector<CaseSpec> grid() {
  const DType f16 = DType::f16, bf16 = DType::bf16;
  return {
      dense(bf16, 2, 113, 113, 4, 1, 64, opts(false)),
      dense(f16, 1, 17, 1023, 8, 1, 128, opts(true)),                // seq_q < seq_k, GQA 8, causal
      dense(bf16, 2, 113, 17, 2, 2, 256, opts(true), 8),             // seq_q > seq_k: top rows fully masked
      dense(f16, 1, 1023, 1023, 2, 2, 64, opts(false, 128, 16)),     // sliding window
      dense(bf16, 3, 1, 1, 4, 1, 128, opts(false, -1, -1, 3.0f)),   // seq 1, softcap
      dense(f16, 1, 1, 113, 8, 8, 256, opts(true, -1, -1, 2.0f), 8),  // decode row, softcap + causal
      dense(bf16, 1, 1023, 113, 4, 4, 128, opts(false, -1, 32), 16),  // right-only window, seq_q > seq_k
      dense(bf16, 1, 113, 1023, 8, 2, 64, opts(true, 200, -1)),      // causal + window, GQA 4
      dense(f16, 2, 17, 17, 1, 1, 256, opts(false, 3, 3, 1.5f), 8),  // narrow band + softcap
      dense(bf16, 2, 1023, 1023, 2, 2, 128, opts(true)),             // many causal tiles
      dense(f16, 1, 300, 200, 4, 4, 128, opts(false), 8),            // ragged tails on both axes
      dense(f16, 1, 200, 333, 8, 1, 64, opts(true)),                 // GQA 8, hd 64 f16
      dense(bf16, 1, 1, 17, 2, 1, 64, opts(false)),                  // one query row
      dense(bf16, 1, 500, 300, 2, 1, 256, opts(false, 50, -1)),      // left-only window, seq_q > seq_k
      dense(f16, 1, 129, 129, 1, 1, 256, opts(true)),                // one row past a tile
      dense(bf16, 2, 193, 193, 4, 2, 64, opts(true)),                // 193 rows: one past a 192-row tile, 65 past a 128-row one
      // Masked head_dim 64: two consumer warpgroups (128-row tiles) up to 256 keys on average,
      // three (192-row tiles, each stopping at its own rows' last K/V tile) above, where the
      // diagonal ends inside a tile; windows switch at 1024: both sides, with partial tiles.
      dense(bf16, 1, 100, 256, 2, 1, 64, opts(true)),
      dense(f16, 1, 300, 257, 2, 1, 64, opts(true)),
      dense(bf16, 1, 130, 1024, 2, 1, 64, opts(true)),
      dense(f16, 1, 200, 1025, 2, 1, 64, opts(false, 300, 0)),
      // Causal head_dim 128 (no window): 128-key tiles up to 4096 keys on average, 176-key tiles
      // above (seq_q < seq_k, seq_q > seq_k with its top rows fully masked, ragged too); windows
      // keep 128 at any length.
      dense(bf16, 1, 130, 4096, 2, 1, 128, opts(true)),
      dense(f16, 1, 200, 4097, 2, 1, 128, opts(true)),
      dense(bf16, 1, 300, 4500, 4, 2, 128, opts(true, -1, -1, 4.0f)),
      dense(f16, 1, 4300, 4200, 1, 1, 128, opts(true)),
      ragged(bf16, {100, 0, 700}, {4700, 40, 8000}, 4, 2, 128, opts(true)),
      dense(f16, 1, 500, 4500, 2, 1, 128, opts(true, 200, -1)),
      // Unmasked head_dim 128: 128-key tiles (two Q buffers) up to 2048 keys on average, 176-key
      // tiles (one Q buffer) above: both sides of the switch, with partial tiles.
      dense(bf16, 1, 130, 2048, 2, 1, 128, opts(false)),
      dense(f16, 1, 200, 2049, 2, 1, 128, opts(false)),
      // Unmasked head_dim 64: 128-key tiles at every length (the 192-key tiles of
      // TESSERA_CUDA_FORWARD_KEY_TILE=long are tested in ForwardKeyTileKnobMatchesOracle).
      dense(bf16, 1, 130, 2048, 2, 1, 64, opts(false)),
      dense(f16, 1, 200, 2049, 2, 1, 64, opts(false)),
      dense(f16, 2, 150, 150, 4, 2, 64, opts(false)),                // a third warpgroup partly filled
      ragged(bf16, {150, 7, 330}, {150, 200, 330}, 4, 2, 64, opts(true)),  // the same, ragged row stores
      ragged(f16, {17, 0, 113, 1, 5}, {113, 0, 17, 1, 0}, 4, 1, 64, opts(true), 8),  // empty seq, empty KV
      ragged(bf16, {113, 1, 17}, {1023, 17, 17}, 8, 1, 128, opts(false, 64, 0, 5.0f)),
      ragged(f16, {0, 1023, 17}, {0, 113, 113}, 2, 1, 64, opts(false)),
      ragged(bf16, {33, 0}, {65, 0}, 4, 4, 256, opts(true), 8),
      ragged(bf16, {200, 129, 64}, {64, 300, 129}, 4, 2, 128, opts(true), 8),
      // More tiles than SMs in unmasked problems: the sm90 persistent CTAs walk several tiles
      // each (ring stages, Q buffer and pingpong turns carried from one tile to the next).
      dense(bf16, 40, 129, 300, 8, 2, 128, opts(false)),
      dense(bf16, 10, 129, 2100, 8, 2, 128, opts(false)),            // (the 176-key instance: > 2048 keys)
      // One Q buffer, each warpgroup's 64 rows loaded on their own: ragged on the 176-key
      // instance, where a tile's second warpgroup reads the next sequence's rows (sequence 0) or
      // only rows past the end of the packed tensor (sequence 1: 30 rows).
      ragged(bf16, {100, 30}, {2500, 2100}, 4, 2, 128, opts(false)),
      dense(f16, 24, 200, 77, 8, 8, 64, opts(false, -1, -1, 2.0f)),
      dense(bf16, 20, 130, 130, 8, 1, 256, opts(false), 8),
      ragged(f16, {300, 0, 17, 129, 1, 256, 77, 200, 3, 128, 90, 260, 5, 64, 150, 199, 33, 280, 0, 140},
             {100, 50, 17, 300, 1, 0, 77, 200, 40, 128, 90, 260, 5, 64, 150, 199, 33, 280, 7, 140}, 8, 4, 128,
             opts(false)),
      // Masked and ragged problems with more tiles than SMs: persistent CTAs take their tiles
      // from the launch's counter (the dynamic walk); the producer skips tiles past a sequence.
      dense(bf16, 6, 700, 700, 8, 2, 128, opts(true)),                  // causal: 6 x 48 = 288 tiles
      dense(f16, 4, 1000, 900, 8, 8, 64, opts(true)),                   // causal, 192-row tiles: 192
      dense(bf16, 3, 600, 900, 16, 4, 256, opts(false, 100, 50, 2.0f)),  // window + softcap: 240
      ragged(bf16, {700, 13, 450, 0, 640, 129, 300, 555, 1, 380, 700, 64, 220, 511, 90, 333},
             {700, 13, 600, 5, 640, 300, 300, 555, 1, 380, 900, 64, 220, 511, 90, 333}, 8, 2, 128, opts(true)),
      ragged(f16, {700, 13, 450, 0, 640, 129, 300, 555, 1, 380, 700, 64, 220, 511, 90, 333},
             {650, 13, 450, 9, 640, 129, 300, 555, 1, 380, 700, 64, 220, 511, 90, 333}, 8, 8, 64, opts(false)),
  };
}

class CudaForwardGrid : public ::testing::TestWithParam<CaseSpec> {};

TEST_P(CudaForwardGrid, MatchesOracleWithinRule) {
  const CaseSpec spec = GetParam();
  SCOPED_TRACE(spec.name());
  auto rng = fresh_rng();
  GpuCase g(spec, rng);
  g.run();
  g.expect_inputs_untouched();
  expect_written_within_rule(g.host);
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaForwardGrid, ::testing::ValuesIn(grid()),
                         [](const ::testing::TestParamInfo<CaseSpec>& info) { return "case" + std::to_string(info.index); });

// ---------------------------------------------------------------------------------------------
// Long sequences: the kernel runs on everything, the oracle checks blocks of rows. For a row
// block [r0, r1) of a seq_q == seq_k problem, queries r0..r1 against keys [0, r1) (causal)
// or all keys (no mask) is the same attention: bottom-right alignment puts the diagonal at
// offset r0 in both, so masks and windows are unchanged.

struct LongCase {
  CaseSpec spec;
  std::vector<int> block_starts;  // row blocks of 64 to check
};

Tensor rows_view(const HostTensor& t, std::int64_t r0, std::int64_t rows, int row_dim) {
  std::int64_t shape[kMaxRank], strides[kMaxRank];
  const int rank = static_cast<int>(t.shape().size());
  for (int d = 0; d < rank; ++d) {
    shape[d] = t.shape()[d];
    strides[d] = t.strides()[d];
  }
  shape[row_dim] = rows;
  auto* base = static_cast<unsigned char*>(t.base()) + r0 * strides[row_dim] * static_cast<std::int64_t>(dtype_size(t.dtype()));
  return Tensor::from_arrays(base, t.dtype(), rank, shape, strides);
}

class CudaForwardLong : public ::testing::TestWithParam<LongCase> {};

TEST_P(CudaForwardLong, RowBlocksMatchOracle) {
  const LongCase lc = GetParam();
  const CaseSpec& spec = lc.spec;
  SCOPED_TRACE(spec.name());
  auto rng = fresh_rng();
  GpuCase g(spec, rng);
  g.run();
  EXPECT_EQ(g.host.out.count_nan(), 0);
  EXPECT_EQ(g.host.lse.count_nan(), 0);
  EXPECT_TRUE(g.host.out.margins_intact());
  EXPECT_TRUE(g.host.lse.margins_intact());
  const bool masked = spec.options.causal || spec.options.window_left >= 0 || spec.options.window_right >= 0;
  ASSERT_TRUE(!masked || spec.seq_q == spec.seq_k) << "row blocks of masked problems need seq_q == seq_k";
  for (int r0 : lc.block_starts) {
    const int r1 = std::min(r0 + 64, spec.seq_q);
    SCOPED_TRACE("rows [" + std::to_string(r0) + ", " + std::to_string(r1) + ")");
    const int keys = masked ? r1 : spec.seq_k;
    AttentionOptions o = g.host.options();
    const AttentionParams p = api::build_forward_params(
        rows_view(g.host.q, r0, r1 - r0, 1), rows_view(g.host.k, 0, keys, 1), rows_view(g.host.v, 0, keys, 1), Tensor{},
        Tensor{}, rows_view(g.host.out, r0, r1 - r0, 1), rows_view(g.host.lse, r0, r1 - r0, 2), o, {});
    expect_matches_oracle(g.host, p);
  }
}

std::vector<LongCase> long_cases() {
  const DType f16 = DType::f16, bf16 = DType::bf16;
  return {
      {dense(bf16, 1, 4096, 4096, 2, 1, 128, opts(false)), {0, 2000, 4032}},
      {dense(bf16, 1, 16384, 16384, 1, 1, 128, opts(true)), {0, 8191, 16320}},
      {dense(f16, 1, 8192, 8192, 2, 2, 64, opts(true, 1024, -1)), {0, 1000, 8128}},
      {dense(bf16, 1, 4096, 4096, 1, 1, 256, opts(false, -1, -1, 30.0f)), {64, 4032}},
      {dense(bf16, 1, 4000, 12345, 2, 1, 128, opts(false)), {0, 3936}},
      {dense(bf16, 1, 8192, 8192, 2, 1, 64, opts(false, -1, -1, 20.0f)), {0, 5000, 8128}},  // d64, softcap
      // d64, GQA 4: 2944 = 15 x 192 + 64 rows, so the last 64 rows run the tail-row launch over 16k keys
      {dense(f16, 1, 2944, 16384, 8, 2, 64, opts(false)), {0, 2880}},
      {dense(bf16, 1, 4608, 4608, 2, 1, 128, opts(true)), {0, 2300, 4544}},  // square causal d128 x 176 keys
  };
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaForwardLong, ::testing::ValuesIn(long_cases()),
                         [](const ::testing::TestParamInfo<LongCase>& info) { return "long" + std::to_string(info.index); });

// ---------------------------------------------------------------------------------------------
// Behaviour around the numbers.

TEST(CudaForward, WithoutLseWritesNoLse) {
  auto rng = fresh_rng();
  GpuCase g(dense(DType::bf16, 1, 130, 70, 2, 1, 128, opts(true)), rng);
  g.run(opts(true), /*with_lse=*/false);
  EXPECT_EQ(g.host.out.count_nan(), 0);
  EXPECT_TRUE(g.host.out.margins_intact());
  EXPECT_EQ(g.host.lse.count_nan(), g.host.lse.numel());  // untouched poison
  EXPECT_TRUE(g.host.lse.margins_intact());
  const auto p = g.host.forward_params();
  const auto oracle = cpu::reference::forward(p);
  const auto naive = naive_same_precision_forward(p);
  EXPECT_LE(max_abs_error(g.host.out_packed(), oracle.o), tolerance(naive, oracle.o, DType::bf16));
}

// A causal problem with more tiles than SMs: on sm90 its persistent CTAs take tiles from a
// counter the call allocates and zeroes on its stream. Captured in a CUDA graph, every replay
// must find the counter zeroed again and give the eager call's bytes.
TEST(CudaForward, GraphReplaysOfAMaskedLaunchMatchTheEagerCall) {
  expect_graph_replays_match_the_eager_call(dense(DType::bf16, 6, 700, 700, 8, 2, 128, opts(true)));
}

// The tile counter comes from tessera's scratch pool: one pool per device, and it must keep its
// memory when a stream synchronizes (the default pool's threshold 0 gives it back, and the next
// call pays a fresh mapping: +50-170 us per call measured).
TEST(CudaForward, ScratchPoolKeepsItsMemoryAcrossSynchronization) {
  int device = 0;
  TESSERA_TEST_CUDA(cudaGetDevice(&device));
  const cudaMemPool_t pool = tessera::cuda::scratch_pool(device);
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(pool, tessera::cuda::scratch_pool(device));
  EXPECT_EQ(tessera::cuda::scratch_pool(-1), nullptr);
  cudaStream_t stream = nullptr;
  TESSERA_TEST_CUDA(cudaStreamCreate(&stream));
  unsigned int* counter = nullptr;
  TESSERA_TEST_CUDA(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&counter), sizeof(unsigned int), pool, stream));
  TESSERA_TEST_CUDA(cudaMemsetAsync(counter, 0, sizeof(unsigned int), stream));
  TESSERA_TEST_CUDA(cudaFreeAsync(counter, stream));
  TESSERA_TEST_CUDA(cudaStreamSynchronize(stream));
  std::uint64_t reserved = 0;
  TESSERA_TEST_CUDA(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  EXPECT_GT(reserved, 0u) << "the pool gave its memory back at a synchronization";
  TESSERA_TEST_CUDA(cudaStreamDestroy(stream));
}

TEST(CudaForward, RepeatableAndStreamOrdered) {
  auto rng = fresh_rng();
  GpuCase g(dense(DType::f16, 2, 257, 300, 4, 2, 64, opts(true, 100, -1)), rng);
  g.run();
  // The first call's outputs are fully written and right, so that equal bytes below mean the
  // second call wrote them too (two unwritten, poisoned buffers would compare equal).
  expect_written_within_rule(g.host);
  const auto o1 = g.host.out.bytes(), l1 = g.host.lse.bytes();
  cudaStream_t stream = nullptr;
  TESSERA_TEST_CUDA(cudaStreamCreate(&stream));
  g.run(g.host.options(), true, stream);
  TESSERA_TEST_CUDA(cudaStreamDestroy(stream));
  EXPECT_TRUE(o1 == g.host.out.bytes());
  EXPECT_TRUE(l1 == g.host.lse.bytes());
}

// Rows that see no key: O = 0 and LSE = -inf, never NaN (seq_k = 0 and a window that
// excludes everything for the first rows).
TEST(CudaForward, EmptyRowsAreZeroWithMinusInfLse) {
  auto rng = fresh_rng();
  for (const CaseSpec& s : {dense(DType::bf16, 1, 40, 0, 2, 1, 64, opts(false)),
                            dense(DType::f16, 1, 200, 100, 1, 1, 128, opts(true))}) {
    SCOPED_TRACE(s.name());
    GpuCase g(s, rng);
    g.run();
    EXPECT_EQ(g.host.out.count_nan(), 0);
    EXPECT_EQ(g.host.lse.count_nan(), 0);
    EXPECT_TRUE(g.host.out.margins_intact());
    EXPECT_TRUE(g.host.lse.margins_intact());
    // seq_q > seq_k causal: rows i < seq_q - seq_k see nothing.
    const int empty_rows = s.seq_q - s.seq_k;
    for (int h = 0; h < s.heads_q; ++h)
      for (int i = 0; i < empty_rows; ++i) {
        EXPECT_EQ(g.host.lse.get(h * s.seq_q + i), -INFINITY);
        for (int d = 0; d < s.head_dim; ++d)
          EXPECT_EQ(g.host.out.get((static_cast<std::int64_t>(i) * s.heads_q + h) * s.head_dim + d), 0.0f);
      }
    expect_matches_oracle(g.host, g.host.forward_params());
  }
}

// Scores that ramp along the keys (AttentionCase::set_score_ramps), rising in kv head 0 by ~2.5
// log2 units per 128 keys and falling in kv head 1. The sm90 kernels' lazy rescale
// (softmax_fragment.cuh) keeps a row's max while it rises by less than 2^8, so P grows towards
// 256 over several tiles before the max moves; falling scores never move it after the first
// tile. Every head dim (tile widths 64-176 keys), both 16-bit types, against the oracle.
TEST(CudaForward, RampedScoresMatchOracle) {
  auto rng = fresh_rng();
  for (const DType dt : {DType::bf16, DType::f16})
    for (const int d : {64, 128, 256}) {
      const CaseSpec spec = dense(dt, 1, 200, 3000, 2, 2, d, opts(false));
      SCOPED_TRACE(spec.name());
      GpuCase g(spec, rng);
      // Score rise over the row, log2 units: q0 * k0_max / sqrt(d) * log2(e).
      const float rise = 2.5f * static_cast<float>(spec.seq_k) / 128.0f, q0 = 8.0f;
      g.host.set_score_ramps(q0, rise * std::sqrt(static_cast<float>(d)) / (q0 * math::kLog2e));
      g.q.upload(g.host.q);
      g.k.upload(g.host.k);
      g.run();
      EXPECT_EQ(g.host.out.count_nan(), 0);
      EXPECT_EQ(g.host.lse.count_nan(), 0);
      EXPECT_TRUE(g.host.out.margins_intact());
      EXPECT_TRUE(g.host.lse.margins_intact());
      expect_matches_oracle(g.host, g.host.forward_params());
    }
}

// A ragged tile's rows past its sequence hold the next sequence's queries. Whatever those are,
// the sequence's own output must keep its bits: the lazy rescale's vote leaves such rows out
// (softmax_fragment.cuh). Sequence 1's queries scaled by 16 give its rows against sequence 0's
// keys score rises far past 2^8, which would move sequence 0's rescales if they voted.
TEST(CudaForward, RaggedSequenceIgnoresItsNeighboursQueries) {
  auto rng = fresh_rng();
  for (const int d : {64, 128, 256}) {
    const CaseSpec spec = ragged(DType::bf16, {100, 37, 150}, {3000, 3000, 3000}, 4, 2, d, opts(false));
    SCOPED_TRACE(spec.name());
    GpuCase g(spec, rng);
    g.run();
    const std::vector<double> out0 = g.host.out_packed(), lse0 = g.host.lse_packed();
    const std::int64_t per_row = static_cast<std::int64_t>(spec.heads_q) * d;
    for (std::int64_t i = 100 * per_row; i < 137 * per_row; ++i) g.host.q.set(i, 16.0f * g.host.q.get(i));
    g.q.upload(g.host.q);
    g.run();
    const std::vector<double> out1 = g.host.out_packed(), lse1 = g.host.lse_packed();
    // Packed order: sequence-major rows, so sequence 0 comes first in out (its 100 rows x heads x d)
    // and, per head, first in the LSE (cpu/reference.h's packing).
    ASSERT_EQ(out0.size(), out1.size());
    int diff_o = 0, diff_l = 0;
    for (std::int64_t i = 0; i < 100 * per_row; ++i) diff_o += out0[static_cast<std::size_t>(i)] != out1[static_cast<std::size_t>(i)];
    const std::int64_t total = 287;
    for (int h = 0; h < spec.heads_q; ++h)
      for (std::int64_t t = 0; t < 100; ++t)
        diff_l += lse0[static_cast<std::size_t>(h * total + t)] != lse1[static_cast<std::size_t>(h * total + t)];
    EXPECT_EQ(diff_o, 0) << "sequence 0's output moved with sequence 1's queries";
    EXPECT_EQ(diff_l, 0) << "sequence 0's LSE moved with sequence 1's queries";
    expect_written_within_rule(g.host);
  }
}

// ---------------------------------------------------------------------------------------------
// Which kernels ran: on compute capability 9.0 the sm90 path must accept the common cases (else
// this suite would test the portable kernels twice), unless TESSERA_CUDA_FORWARD=portable.

TEST(CudaForward, DispatchTakesSm90PathOnHopper) {
  int dev = 0, major = 0, minor = 0;
  TESSERA_TEST_CUDA(cudaGetDevice(&dev));
  TESSERA_TEST_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  TESSERA_TEST_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
#if defined(TESSERA_HAS_SM90_KERNELS)
  auto rng = fresh_rng();
  const char* forced = std::getenv("TESSERA_CUDA_FORWARD");
  const bool portable = forced != nullptr && std::string(forced) == "portable";
  for (const CaseSpec& s : {dense(DType::bf16, 2, 113, 300, 4, 1, 64, opts(true)),
                            ragged(DType::f16, {17, 0, 113}, {113, 0, 17}, 4, 2, 128, opts(false)),
                            dense(DType::bf16, 1, 40, 90, 2, 2, 256, opts(false, 8, 8, 2.0f))}) {
    SCOPED_TRACE(s.name());
    AttentionCase c(s, rng);
    AttentionParams p = c.forward_params();
    p.device = Device{DeviceKind::cuda, dev};
    std::string why;
    EXPECT_EQ(cuda::sm90::forward_applicable(p, &why), major == 9 && minor == 0 && !portable) << why;
  }
#else
  if (major == 9) GTEST_SKIP() << "this build has no sm90 kernels (architecture list without 90)";
#endif
}

// ---------------------------------------------------------------------------------------------
// Unsupported cases: a clear tessera::Error, nothing written.

void expect_unsupported(const CaseSpec& spec, const std::string& needle) {
  SCOPED_TRACE(spec.name());
  auto rng = fresh_rng();
  GpuCase g(spec, rng);
  try {
    g.run();
    ADD_FAILURE() << "expected tessera::Error(unsupported)";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("supported on CUDA"), std::string::npos) << e.what();
  }
  HostTensor out = g.host.out, lse = g.host.lse;
  g.out.download(out);
  g.lse.download(lse);
  EXPECT_EQ(out.count_nan(), out.numel());
  EXPECT_TRUE(out.margins_intact());
  EXPECT_EQ(lse.count_nan(), lse.numel());
  EXPECT_TRUE(lse.margins_intact());
}

TEST(CudaForward, UnsupportedFp32) { expect_unsupported(dense(DType::f32, 1, 17, 17, 1, 1, 64, opts(false)), "fp32"); }
TEST(CudaForward, UnsupportedHeadDim) { expect_unsupported(dense(DType::bf16, 1, 17, 17, 1, 1, 96, opts(false)), "head_dim"); }
TEST(CudaForward, UnsupportedMisalignedRows) {
  expect_unsupported(dense(DType::f16, 1, 17, 17, 2, 1, 64, opts(false), 3), "16 bytes");
}

}  // namespace
}  // namespace tessera::testing
