// The sm90 forward's launch shapes and the knobs that force them, against the fp64 oracle under
// the tolerance rule (forward_cuda_support.h): the split tail, head_dim 64's tail-row launch
// (alone, as a programmatic pair, in a graph), the head_dim 64 and 128 warpgroup counts and the
// key-tile width; each knob's refusal of a bad value. The tests skip themselves where the sm90 kernels do
// not run (another GPU, TESSERA_CUDA_FORWARD=portable, a build without them).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

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

// The split tail on the 16-bit sm90 instances (src/cuda/sm90/forward/split_tail_plan.h), forced by
// TESSERA_CUDA_FORWARD_SPLIT_TAIL ("n" in halves, "n:k" in k parts) on every head dim: parts with
// no K/V tile, no keys, all of a launch's tiles; a masked problem ignores the knob; the rule's own
// split (188 tiles of 16 K/V tiles: halves of 56 on 132 SMs) and 0 turning it off. Oracle rule
// as the grid; the scratch pool's high-water mark shows whether the parts' workspace was
// allocated, i.e. whether the split ran.
TEST(CudaForward, SplitTailMatchesOracleWithinRule) {
#if defined(TESSERA_HAS_SM90_KERNELS)
  if (!sm90_forward_runs()) GTEST_SKIP() << "the split tail belongs to the sm90 kernels";
  int device = 0, sms = 0;
  TESSERA_TEST_CUDA(cudaGetDevice(&device));
  TESSERA_TEST_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const cudaMemPool_t pool = tessera::cuda::scratch_pool(device);
  if (pool == nullptr) GTEST_SKIP() << "no stream-ordered memory pools: no workspace, no split";
  const DType f16 = DType::f16, bf16 = DType::bf16;
  const tessera::cuda::sm90::SplitTail rule = tessera::cuda::sm90::forward_split_tail(188, std::min(188, sms), 16, 128, 64, -1);
  const SplitCase cases[] = {
      {dense(bf16, 2, 129, 2100, 4, 2, 128, opts(false)), "5:3", 5, 3},  // d128 x 176 keys
      {dense(f16, 2, 129, 1000, 4, 2, 128, opts(false)), "5:3", 5, 3},   // d128 x 128 keys (short)
      {dense(bf16, 1, 130, 200, 2, 2, 128, opts(false, -1, -1, 3.0f)), "4:3", 4, 3},  // short, softcap: an empty part
      {dense(f16, 2, 300, 300, 4, 1, 64, opts(false)), "16:5", 16, 5},   // d64: 3 K/V tiles in 5 parts
      // d64 whose last query blocks (8 rows) go to the tail-row launch: the whole blocks' launch
      // splits its 8 tiles (the forced 16, capped), the tail launch none
      {dense(f16, 2, 200, 300, 4, 1, 64, opts(false)), "16:5", 8, 5, 16},
      {dense(f16, 1, 200, 2300, 2, 1, 128, opts(false), 16), "3:2", 3, 2},  // fp16 d128, padded strides
      {dense(f16, 1, 130, 500, 2, 2, 256, opts(false), 16), "4:3", 4, 3},   // fp16 d256, padded strides
      {dense(bf16, 1, 300, 700, 2, 1, 256, opts(false, -1, -1, 2.0f)), "6:8", 6, 8},  // d256, softcap, every tile
      {dense(f16, 2, 300, 0, 2, 1, 64, opts(false)), "4", 4, 2},         // no keys: every part empty (300 rows:
                                                                          // whole blocks, not the tail-row launch)
      {dense(bf16, 47, 129, 2048, 4, 2, 64, opts(false)), "", rule.tiles, rule.parts},  // the rule
      {dense(bf16, 47, 129, 2048, 4, 2, 64, opts(false)), "0", 0, 1},    // the rule's split, turned off
      {dense(bf16, 1, 17, 1023, 8, 1, 64, opts(true)), "5:3", 0, 1},     // causal: the knob does not apply
  };
  auto rng = fresh_rng();
  for (const SplitCase& c : cases) {
    const CaseSpec& spec = c.spec;
    SCOPED_TRACE(spec.name() + " split " + c.knob);
    ScopedEnv split("TESSERA_CUDA_FORWARD_SPLIT_TAIL", c.knob);
    GpuCase g(spec, rng);
    reset_pool_high_water(pool);
    g.run();
    const std::uint64_t high = pool_high_water(pool);
    const int bm = spec.head_dim == 64 ? 192 : 128;  // 16-bit unmasked tile rows (kernel_traits.cuh)
    const std::uint64_t row_bytes = static_cast<std::uint64_t>(bm) * (spec.head_dim + 1) * sizeof(float);
    if (c.tiles > 0) {
      EXPECT_GE(high, c.tiles * static_cast<std::uint64_t>(c.parts) * row_bytes) << "the split's workspace was not allocated";
      if (c.fewer_than_tiles > 0) {
        EXPECT_LT(high, c.fewer_than_tiles * static_cast<std::uint64_t>(c.parts) * row_bytes)
            << "more tiles split than the whole blocks: the tail blocks were split too";
      }
    } else {
      EXPECT_LT(high, 2 * row_bytes) << "a split ran";
    }
    expect_written_within_rule(g.host);
  }
#else
  GTEST_SKIP() << "this build has no sm90 kernels";
#endif
}

// The tail-row launch (sm90, 16-bit head_dim 64, dense unmasked; kernel_traits.cuh): where a
// sequence's last 192-row query block holds at most 64 rows, those blocks run on their own
// instance, every consumer warpgroup on the same rows over its share of the K/V tiles, merged
// in shared memory. Tails of 1..64 rows; shares of 0 to 6 K/V tiles (a warpgroup without one);
// a problem of tail blocks only; no keys; more tail tiles than SMs (the merge slots reused);
// soft cap, GQA, seq_q > seq_k, padded strides; and both sides of the rule (65 rows and a whole
// block: no tail launch). That the launch ran shows in the bits: with TESSERA_CUDA_FORWARD_TAIL_ROWS=0
// the same rows are summed in one pass instead of three merged shares.
TEST(CudaForward, TailRowLaunchMatchesOracle) {
#if defined(TESSERA_HAS_SM90_KERNELS)
  if (!sm90_forward_runs()) GTEST_SKIP() << "the tail-row launch belongs to the sm90 kernels";
  // The tail-row launch runs with 128-key tiles: those past 2048 keys too.
  ScopedEnv short_tiles("TESSERA_CUDA_FORWARD_KEY_TILE", "short");
  const DType f16 = DType::f16, bf16 = DType::bf16;
  const CaseSpec cases[] = {
      dense(bf16, 2, 1024, 1024, 4, 2, 64, opts(false)),               // 5 blocks + 64 rows; shares of 3, 3, 2
      dense(f16, 1, 1000, 1000, 2, 1, 64, opts(false, -1, -1, 2.0f)),  // 40 rows, soft cap
      dense(bf16, 3, 20, 129, 8, 2, 64, opts(false)),                  // tail blocks only; warpgroup 2 has no share
      dense(f16, 2, 64, 0, 2, 1, 64, opts(false)),                     // no keys: O = 0, LSE = -inf
      dense(bf16, 40, 200, 300, 8, 2, 64, opts(false)),                // 320 tail tiles on at most 132 CTAs
      dense(f16, 2, 193, 2100, 4, 4, 64, opts(false)),                 // one row; shares of 6, 6, 5
      dense(bf16, 1, 1000, 100, 4, 1, 64, opts(false)),                // seq_q > seq_k, GQA 4
      dense(f16, 2, 17, 1023, 8, 1, 64, opts(false), 8),               // padded strides, GQA 8
      dense(bf16, 1, 1025, 700, 2, 1, 64, opts(false)),                // 65 rows past 5 blocks: no tail launch
      dense(f16, 1, 384, 500, 2, 2, 64, opts(false)),                  // two whole blocks: no tail launch
  };
  auto rng = fresh_rng();
  expect_cases_written_within_rule(cases, rng);
  // The same call with and without the tail-row launch: both within the rule, and the tail rows'
  // bits differ (shares of 3 K/V tiles each merged, against one pass over all 8), the whole
  // blocks' rows do not (the same instance and tiles either way).
  const CaseSpec spec = dense(bf16, 1, 1024, 1024, 2, 1, 64, opts(false));
  GpuCase g(spec, rng);
  g.run();
  expect_written_within_rule(g.host);
  const HostTensor with_tail = g.host.out;
  {
    ScopedEnv off("TESSERA_CUDA_FORWARD_TAIL_ROWS", "0");
    g.run();
  }
  expect_written_within_rule(g.host);
  long long tail_differs = 0, whole_differs = 0;
  for (int r = 0; r < spec.seq_q; ++r)
    for (int h = 0; h < spec.heads_q; ++h)
      for (int d = 0; d < spec.head_dim; ++d) {
        const std::int64_t i = (static_cast<std::int64_t>(r) * spec.heads_q + h) * spec.head_dim + d;
        const bool differs = with_tail.get(i) != g.host.out.get(i);
        (r >= 960 ? tail_differs : whole_differs) += differs ? 1 : 0;
      }
  EXPECT_GT(tail_differs, 0) << "the last 64 rows came out bit-identical: the tail-row launch did not run";
  EXPECT_EQ(whole_differs, 0) << "rows of the whole blocks changed with the tail-row launch";
  expect_sm90_knob_refused("TESSERA_CUDA_FORWARD_TAIL_ROWS", "on", "expected 0, 1 or unset, got 'on'");
#else
  GTEST_SKIP() << "this build has no sm90 kernels";
#endif
}

// The tail-row launch is the whole blocks' programmatic dependent (its CTAs start while the whole
// blocks' last round runs): whatever follows on the stream must still see both grids' rows. A
// device-to-device copy of the output and the LSE queued right after the call, with no
// synchronisation in between, must hold exactly their bytes, call after call (were the tail grid
// not to wait for the whole one, a copy would catch poisoned rows of the whole blocks' last round:
// in the first case that round holds 24 whole tiles of 32 K/V tiles each, and the 64 tail tiles,
// on 108 idle SMs, end after about a third of it). Tail tiles fewer than the SMs, and more (the
// tail launch's tile counter).
TEST(CudaForward, TailRowPairCompletesBeforeTheNextStreamOperation) {
#if defined(TESSERA_HAS_SM90_KERNELS)
  if (!sm90_forward_runs()) GTEST_SKIP() << "the tail-row launch belongs to the sm90 kernels";
  int device = 0, sms = 0;
  TESSERA_TEST_CUDA(cudaGetDevice(&device));
  TESSERA_TEST_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  ScopedEnv short_tiles("TESSERA_CUDA_FORWARD_KEY_TILE", "short");  // the tail-row launch: 128-key tiles
  auto rng = fresh_rng();
  for (const CaseSpec& spec : {dense(DType::bf16, 1, 4096, 4096, 64, 8, 64, opts(false)),
                               dense(DType::f16, 1, 4096, 2000, 136, 8, 64, opts(false))}) {
    SCOPED_TRACE(spec.name());
    const int tail_rows = spec.seq_q % 192;
    ASSERT_TRUE(tail_rows >= 1 && tail_rows <= 64) << "not a tail-row shape";
    if (spec.heads_q == 136) {
      EXPECT_GT(spec.heads_q * spec.batch, sms) << "meant to take the tail launch's counter";
    }
    GpuCase g(spec, rng);
    const std::size_t o_bytes = static_cast<std::size_t>(g.host.out.numel()) * dtype_size(spec.dtype);  // contiguous
    const std::size_t l_bytes = static_cast<std::size_t>(g.host.lse.numel()) * sizeof(float);
    void* copy = nullptr;
    TESSERA_TEST_CUDA(cudaMalloc(&copy, o_bytes + l_bytes));
    cudaStream_t stream = nullptr;
    TESSERA_TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    ExecutionContext ctx;
    ctx.stream = stream;
    std::vector<unsigned char> copied(o_bytes + l_bytes), written(o_bytes + l_bytes);
    for (int call = 0; call < 12; ++call) {
      SCOPED_TRACE("call " + std::to_string(call));
      g.out.poison(g.host.out);
      g.lse.poison(g.host.lse);
      attention_forward(g.q.view(), g.k.view(), g.v.view(), g.out.view(), g.lse.view(), g.host.options(), ctx);
      auto* c = static_cast<unsigned char*>(copy);
      TESSERA_TEST_CUDA(cudaMemcpyAsync(c, g.out.base(), o_bytes, cudaMemcpyDeviceToDevice, stream));
      TESSERA_TEST_CUDA(cudaMemcpyAsync(c + o_bytes, g.lse.base(), l_bytes, cudaMemcpyDeviceToDevice, stream));
      TESSERA_TEST_CUDA(cudaStreamSynchronize(stream));
      TESSERA_TEST_CUDA(cudaMemcpy(copied.data(), copy, o_bytes + l_bytes, cudaMemcpyDeviceToHost));
      TESSERA_TEST_CUDA(cudaMemcpy(written.data(), g.out.base(), o_bytes, cudaMemcpyDeviceToHost));
      TESSERA_TEST_CUDA(cudaMemcpy(written.data() + o_bytes, g.lse.base(), l_bytes, cudaMemcpyDeviceToHost));
      EXPECT_TRUE(copied == written) << "a copy queued after the call saw the output before both grids had finished";
      if (copied != written) break;
    }
    g.out.download(g.host.out);
    g.lse.download(g.host.lse);
    EXPECT_EQ(g.host.out.count_nan(), 0);
    EXPECT_EQ(g.host.lse.count_nan(), 0);
    TESSERA_TEST_CUDA(cudaStreamDestroy(stream));
    TESSERA_TEST_CUDA(cudaFree(copy));
  }
#else
  GTEST_SKIP() << "this build has no sm90 kernels";
#endif
}

// A graph of an unmasked head_dim 64 call with a tail (two launches: the whole blocks, then the
// tail rows) replays to the eager call's bits.
TEST(CudaForward, GraphReplaysOfATailRowCallMatchTheEagerCall) {
  expect_graph_replays_match_the_eager_call(dense(DType::f16, 2, 1000, 1000, 4, 2, 64, opts(false)));
  // 144 tail tiles: the tail launch's counter (pool allocation, memset, programmatic edge, free)
  expect_graph_replays_match_the_eager_call(dense(DType::bf16, 2, 1000, 1000, 72, 8, 64, opts(false)));
}

// TESSERA_CUDA_D64_WARPGROUPS forces two consumer warpgroups (128-row tiles; unmasked calls on the
// masked instance) or three (192-row tiles; masked short calls on the three-warpgroup masked
// instance) at head_dim 64. Both directions must still match the oracle, with partial tiles of
// either height, ragged too. (On other devices or paths the knob has no effect; the cases still
// run.) A value outside 2 / 3 is refused before anything is written, at any head_dim.
TEST(CudaForward, D64WarpgroupsKnobMatchesOracle) {
  const DType f16 = DType::f16, bf16 = DType::bf16;
  const CaseSpec cases[] = {
      dense(bf16, 2, 1024, 1024, 4, 2, 64, opts(false)),               // 1k: 8 whole 128-row tiles, 5.3 192-row ones
      dense(f16, 1, 200, 333, 8, 1, 64, opts(false, -1, -1, 2.0f)),    // partial tiles, softcap, GQA 8
      dense(bf16, 1, 130, 1000, 2, 1, 64, opts(true)),                 // causal, short
      ragged(f16, {150, 7, 330}, {150, 200, 330}, 4, 2, 64, opts(false)),
      ragged(bf16, {65, 1, 193}, {500, 3, 193}, 4, 4, 64, opts(true)),
  };
  auto rng = fresh_rng();
  for (const char* knob : {"2", "3"}) {
    ScopedEnv warpgroups("TESSERA_CUDA_D64_WARPGROUPS", knob);
    expect_cases_written_within_rule(cases, rng, std::string(" warpgroups ") + knob);
  }
  expect_sm90_knob_refused("TESSERA_CUDA_D64_WARPGROUPS", "4", "expected 2, 3 or unset, got '4'");
}

// TESSERA_CUDA_D128_WARPGROUPS=3 sends every 16-bit head_dim 128 call to the masked
// three-warpgroup instance (192-row tiles of 128 keys, own diagonals, P V before the next Q K^T):
// unmasked calls (every K/V tile whole but the last; they walk statically on it), long ones, no
// keys, windows, ragged batches, a soft cap, GQA, odd lengths, rows that see nothing and more
// tiles than SMs; =2 keeps the dense causal
// calls the rule gives three on two. Both match the oracle; a bad value is refused.
TEST(CudaForward, D128WarpgroupsKnobMatchesOracle) {
  const DType f16 = DType::f16, bf16 = DType::bf16;
  const CaseSpec three[] = {
      dense(bf16, 2, 1024, 1024, 4, 2, 128, opts(false)),                // unmasked 1k: 5.3 192-row tiles
      dense(f16, 1, 300, 2300, 8, 1, 128, opts(false, -1, -1, 2.0f)),    // past 2048 keys, softcap, GQA 8
      dense(bf16, 1, 17, 113, 2, 1, 128, opts(false)),                   // one partial tile
      dense(f16, 1, 1000, 1000, 2, 2, 128, opts(true)),                  // causal below the rule's range
      dense(bf16, 1, 700, 5000, 2, 1, 128, opts(true)),                  // causal past it (176 keys by the rule)
      dense(f16, 1, 900, 300, 2, 1, 128, opts(true)),                    // 600 rows see no key
      dense(bf16, 1, 640, 900, 2, 2, 128, opts(false, 200, 50)),         // window left and right
      ragged(f16, {150, 7, 330, 0}, {150, 200, 330, 9}, 4, 2, 128, opts(false)),
      ragged(bf16, {1, 113, 1023, 17}, {1, 113, 1023, 300}, 4, 2, 128, opts(true)),
      dense(bf16, 4, 1100, 1100, 8, 2, 128, opts(false)),                // 192 tiles on the SMs
      dense(bf16, 1, 2100, 2100, 16, 2, 128, opts(false)),               // 176 tiles past 2048 keys: the static walk
      dense(f16, 1, 100, 0, 2, 1, 128, opts(false)),                     // no keys: O = 0, LSE = -inf
      dense(bf16, 1, 600, 800, 2, 1, 128, opts(false, 150, -1)),         // a left-only window
      ragged(bf16, {300, 1, 64, 0}, {400, 50, 64, 7}, 4, 2, 128, opts(false, 100, 10)),  // windowed ragged
  };
  const CaseSpec two[] = {
      dense(bf16, 2, 1500, 1500, 4, 2, 128, opts(true)),  // the rule's three-warpgroup range
      dense(f16, 1, 17, 1025, 2, 1, 128, opts(true)),
  };
  auto rng = fresh_rng();
  {
    ScopedEnv warpgroups("TESSERA_CUDA_D128_WARPGROUPS", "3");
    expect_cases_written_within_rule(three, rng, " d128 warpgroups 3");
    // The key-tile knob has no say on three warpgroups (their instance has 128-key tiles only).
    ScopedEnv key_tile("TESSERA_CUDA_FORWARD_KEY_TILE", "long");
    expect_cases_written_within_rule(three, rng, " d128 warpgroups 3, key tile long");
  }
  {
    ScopedEnv warpgroups("TESSERA_CUDA_D128_WARPGROUPS", "2");
    expect_cases_written_within_rule(two, rng, " d128 warpgroups 2");
  }
  expect_sm90_knob_refused("TESSERA_CUDA_D128_WARPGROUPS", "4", "expected 2, 3 or unset, got '4'");
}

// The masked three-warpgroup instance (head_dim 64, 192-row tiles) lets each warpgroup compute
// only the K/V tiles its own rows see and give the rest back unread (kernel.cuh, kOwnDiagonal):
// the knob puts short masked calls on it, so that tiles end inside a warpgroup's rows, a last
// tile has one or two warpgroups past the sequence, rows see nothing (more queries than keys,
// bottom-right), windows and ragged tiles mix, and lengths are odd (1, 17, 113, 1023).
TEST(CudaForward, D64OwnDiagonalsMatchOracle) {
  const DType f16 = DType::f16, bf16 = DType::bf16;
  const CaseSpec cases[] = {
      dense(bf16, 2, 1023, 1023, 4, 2, 64, opts(true)),         // 5 whole 192-row tiles + 63 rows
      dense(f16, 1, 1024, 1024, 4, 4, 64, opts(true)),          // the bench's shape: a 64-row last tile
      dense(bf16, 1, 700, 300, 2, 1, 64, opts(true)),           // 400 rows see no key
      dense(f16, 1, 17, 113, 2, 1, 64, opts(true)),             // one tile, warpgroups 1 and 2 past the end
      dense(bf16, 1, 500, 500, 2, 1, 64, opts(false, 100, 0)),  // a window's band
      dense(f16, 1, 640, 900, 2, 2, 64, opts(false, 200, 50)),  // window left and right
      ragged(bf16, {1, 113, 0, 1023, 17}, {1, 113, 5, 1023, 300}, 4, 2, 64, opts(true)),
      // More tiles than SMs (132 on the H200): CTAs walk several tiles, so warpgroups that end a
      // tile early start the next one (the tile ring, both Q buffers) while the others finish.
      dense(bf16, 4, 1100, 1100, 8, 2, 64, opts(false, 300, 0)),        // 192 tiles, a left window
      dense(f16, 4, 1000, 1000, 8, 2, 64, opts(true, -1, -1, 5.0f)),    // causal with a soft cap
      dense(bf16, 4, 1000, 1200, 8, 1, 64, opts(false, -1, 40)),        // a right-only window
      ragged(bf16, {700, 13, 450, 0, 640, 129, 300, 555, 1, 380, 700, 64, 220, 511, 90, 333},
             {700, 13, 600, 5, 640, 300, 300, 555, 1, 380, 900, 64, 220, 511, 90, 333}, 8, 2, 64, opts(true)),
  };
  auto rng = fresh_rng();
  ScopedEnv warpgroups("TESSERA_CUDA_D64_WARPGROUPS", "3");
  expect_cases_written_within_rule(cases, rng);
}

// Masked head_dim 256 (two warpgroups, 128-row tiles of 64-key K/V tiles) takes own diagonals
// with its turns kept: the first warpgroup skips the K/V tiles past its rows and takes their
// turns empty. Its shapes as above: tiles ending inside a warpgroup's rows, rows that see
// nothing, a last tile with one warpgroup past the sequence, windows, ragged, and more tiles
// than SMs (a CTA's warpgroups over several tiles).
TEST(CudaForward, D256OwnDiagonalsMatchOracle) {
  const DType f16 = DType::f16, bf16 = DType::bf16;
  const CaseSpec cases[] = {
      dense(bf16, 2, 1023, 1023, 4, 2, 256, opts(true)),
      dense(f16, 1, 700, 300, 2, 1, 256, opts(true)),            // 400 rows see no key
      dense(bf16, 1, 17, 113, 2, 1, 256, opts(true)),            // one tile, warpgroup 1 past the end
      dense(f16, 1, 500, 500, 2, 1, 256, opts(false, 100, 0)),   // a window's band
      dense(bf16, 1, 640, 900, 2, 2, 256, opts(false, 200, 50)), // window left and right
      ragged(f16, {1, 113, 0, 1023, 17}, {1, 113, 5, 1023, 300}, 4, 2, 256, opts(true)),
      dense(bf16, 4, 1000, 1000, 8, 2, 256, opts(true, -1, -1, 5.0f)),  // 256 tiles, a soft cap
  };
  auto rng = fresh_rng();
  expect_cases_written_within_rule(cases, rng);
}

// Dense causal 16-bit head_dim 128 calls of 1025 to 4096 keys run on three warpgroups (192-row
// tiles, kThreeWarpgroupCausalMinKeysD128), P V completed before the next Q K^T, each warpgroup
// computing only its own rows' K/V tiles: odd lengths, rows that see nothing, partial last tiles,
// and more tiles than SMs. (Ragged batches stay on two warpgroups.)
TEST(CudaForward, D128ThreeWarpgroupCausalMatchesOracle) {
  const DType f16 = DType::f16, bf16 = DType::bf16;
  const CaseSpec cases[] = {
      dense(bf16, 2, 1500, 1500, 4, 2, 128, opts(true)),
      dense(f16, 1, 2000, 1100, 2, 1, 128, opts(true)),   // 900 rows see no key
      dense(bf16, 1, 17, 1025, 2, 1, 128, opts(true)),    // one tile, warpgroups 1 and 2 past the end
      dense(f16, 1, 4096, 4096, 2, 1, 128, opts(true)),   // the switch's top
      dense(f16, 3, 1030, 2000, 2, 1, 128, opts(true)),   // more keys than queries, a part-full last tile
      dense(bf16, 4, 1100, 1100, 8, 2, 128, opts(true, -1, -1, 5.0f)),  // 192 tiles, a soft cap
  };
  auto rng = fresh_rng();
  expect_cases_written_within_rule(cases, rng);
}

// TESSERA_CUDA_FORWARD_KEY_TILE forces the short-key or the long-key tile on unmasked head_dim 64
// calls on three consumer warpgroups (128 keys, P from registers / 192 keys, P through shared
// memory, which the rule no longer takes: it lost where measured) and on head_dim 128
// calls (128 keys with two Q buffers / 176 keys with one), causal ones without a window included
// (128 / 176 keys). Both must match the oracle on short and odd shapes too: one key, one query,
// keys a tile and a few past, no keys, GQA, softcap, ragged with empty sequences, more tiles than
// SMs (the dynamic walk on 176-key causal tiles too), and with the split tail forced. Other masked
// calls ignore it. Which tile ran shows in the bits. A value other than short / long is refused
// before anything is written.
TEST(CudaForward, ForwardKeyTileKnobMatchesOracle) {
#if defined(TESSERA_HAS_SM90_KERNELS)
  // (Only the sm90 launcher reads the knob: elsewhere these cases would test nothing new.)
  if (!sm90_forward_runs()) GTEST_SKIP() << "the key-tile knob belongs to the sm90 kernels";
  const DType f16 = DType::f16, bf16 = DType::bf16;
  const CaseSpec cases[] = {
      dense(bf16, 2, 1024, 1024, 4, 2, 64, opts(false)),             // 1k: 5.3 192-key tiles
      dense(f16, 1, 200, 333, 8, 1, 64, opts(false, -1, -1, 2.0f)),  // partial tiles, softcap, GQA 8
      dense(bf16, 1, 17, 1, 2, 1, 64, opts(false)),                  // one key
      dense(f16, 1, 1, 17, 2, 2, 64, opts(false)),                   // one query row
      dense(bf16, 1, 113, 193, 4, 4, 64, opts(false)),               // one key past a 192-key tile
      dense(f16, 1, 1023, 383, 2, 1, 64, opts(false)),               // one key short of two tiles
      dense(bf16, 1, 40, 0, 2, 1, 64, opts(false)),                  // no keys: O = 0, LSE = -inf
      dense(f16, 1, 40, 0, 2, 1, 128, opts(false)),                  // d128, no keys
      dense(bf16, 12, 300, 700, 8, 2, 64, opts(false)),              // 192 tiles: more than the SMs
      dense(f16, 1, 130, 1000, 2, 1, 64, opts(true)),                // causal d64: the knob does not apply
      ragged(f16, {150, 7, 330}, {150, 200, 330}, 4, 2, 64, opts(false)),
      ragged(bf16, {17, 0, 113, 1, 5}, {113, 0, 17, 1, 0}, 4, 1, 64, opts(false), 8),  // empty seq, empty KV
      dense(bf16, 1, 129, 177, 4, 2, 128, opts(false, -1, -1, 3.0f)),  // d128: one key past a 176-key tile
      dense(f16, 2, 300, 2300, 2, 1, 128, opts(false)),                // d128 past the rule's switch
      dense(bf16, 2, 400, 1000, 4, 2, 128, opts(true)),                // d128 causal: 128 / 176 keys
      dense(f16, 1, 177, 4200, 2, 1, 128, opts(true, -1, -1, 2.0f)),   // d128 causal, softcap, 176-key tiles by the rule
      dense(bf16, 6, 700, 700, 8, 2, 128, opts(true)),                 // d128 causal, 288 tiles: the dynamic walk
      dense(f16, 1, 2000, 2000, 2, 1, 128, opts(true)),                // d128 causal in the three-warpgroup range:
                                                                       // long keys keep two, short ones three
      ragged(f16, {150, 0, 300}, {2500, 0, 129}, 4, 2, 128, opts(false)),  // d128 ragged
  };
  auto rng = fresh_rng();
  for (const char* knob : {"long", "short"}) {
    ScopedEnv key_tile("TESSERA_CUDA_FORWARD_KEY_TILE", knob);
    // (Short tiles without the tail-row launch, so that the main 128-key instance sees these
    // shapes: with it, the one-key, one-row and no-key cases would run the tail instance alone.
    // TailRowLaunchMatchesOracle covers that launch.)
    ScopedEnv no_tail("TESSERA_CUDA_FORWARD_TAIL_ROWS", "0");
    expect_cases_written_within_rule(cases, rng, std::string(" key tile ") + knob);
    // The split tail forced on either tile (4 tiles in 3 parts; its workspace shows that it ran):
    // 2500 keys are 13.02 192-key tiles, 19.5 128-key ones; 300 keys are 2 192-key tiles, so one
    // part of each split tile is empty.
    int device = 0;
    TESSERA_TEST_CUDA(cudaGetDevice(&device));
    const cudaMemPool_t pool = tessera::cuda::scratch_pool(device);
    ScopedEnv split("TESSERA_CUDA_FORWARD_SPLIT_TAIL", "4:3");
    for (const CaseSpec& spec : {dense(bf16, 2, 200, 2500, 4, 1, 64, opts(false)),
                                 dense(f16, 1, 300, 300, 2, 2, 64, opts(false, -1, -1, 5.0f))}) {
      SCOPED_TRACE(spec.name() + " key tile " + knob + ", split 4:3");
      GpuCase g(spec, rng);
      if (pool != nullptr) reset_pool_high_water(pool);
      g.run();
      if (pool != nullptr) {  // 192-row tiles of head_dim 64 (+ 1 for the LSE) in fp32, per part
        EXPECT_GE(pool_high_water(pool), 4u * 3u * 192u * 65u * sizeof(float)) << "the split's workspace was not allocated";
      }
      expect_written_within_rule(g.host);
    }
  }
  // Which tile the rule took shows in the bits (a row's P rounds against the running max of its
  // own tiles): the default must equal one forced choice bit for bit and differ from the other.
  // Causal d128 past 4096 keys: 176; unmasked d64 at any length (2500 keys here): 128; unmasked d128 up to 2048:
  // 128 (two Q buffers). A window: no choice, the knob ignored, all three the same (were
  // launch.cu's window test wrong, the rule and "long" would give 176, "short" 128).
  struct RuleCase {
    CaseSpec spec;
    const char* same_as;
  };
  for (const RuleCase& rc : {RuleCase{dense(bf16, 1, 300, 4500, 2, 1, 128, opts(true)), "long"},
                             RuleCase{dense(bf16, 1, 300, 4500, 2, 1, 128, opts(true, 1000, -1)), "both"},
                             RuleCase{dense(f16, 1, 300, 2500, 2, 1, 64, opts(false)), "short"},
                             RuleCase{dense(bf16, 1, 300, 1000, 2, 1, 128, opts(false)), "short"}}) {
    SCOPED_TRACE(rc.spec.name() + " (the rule: " + rc.same_as + ")");
    GpuCase g(rc.spec, rng);
    g.run();
    const std::vector<unsigned char> by_rule = g.host.out.bytes();
    std::vector<unsigned char> forced[2];
    for (int k = 0; k < 2; ++k) {
      ScopedEnv key_tile("TESSERA_CUDA_FORWARD_KEY_TILE", k == 0 ? "short" : "long");
      g.run();
      expect_written_within_rule(g.host);
      forced[k] = g.host.out.bytes();
    }
    if (std::string(rc.same_as) == "both") {
      EXPECT_TRUE(by_rule == forced[0] && by_rule == forced[1]) << "the knob changed a call it must ignore";
      continue;
    }
    const int same = std::string(rc.same_as) == "long" ? 1 : 0;
    EXPECT_TRUE(by_rule == forced[same]) << "the rule's output differs from the forced " << rc.same_as << " tile";
    EXPECT_FALSE(by_rule == forced[1 - same]) << "both tiles gave the same bits: the test cannot tell them apart";
  }
  expect_sm90_knob_refused("TESSERA_CUDA_FORWARD_KEY_TILE", "192", "expected 'short', 'long' or unset, got '192'");
#else
  GTEST_SKIP() << "this build has no sm90 kernels";
#endif
}

}  // namespace
}  // namespace tessera::testing
