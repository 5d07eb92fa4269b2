// BatchAttention on CUDA (plan into a cudaMalloc'd workspace, run the serving kernels of
// src/cuda/batch/) against the fp64 oracle under the tolerance rule of test_support.h, and
// against the CPU executor of the very same plan (same num_sms, so the same work items and
// KV splits). Mixed batches run in one fused launch (both shapes); decode-only layouts in the
// decode-only instance. Mixed batches of prefill chunks and decode tokens with kv_len 0, 1 and a long
// request (32k; one 128k case checked on one kv head's query group), GQA 1/4/8 (and 32, 128:
// the prefill-shaped kernel for decode rows, several vector blocks per item), head_dim
// 64/128/256, bf16/fp16, NHD/HND, page sizes 1/5/16/128/256, causal, window, soft cap,
// automatic/fixed/disabled splits. Unowned pages are NaN, outputs are poisoned before every
// run and their margins checked. The problem, runs, oracle and checks: batch_cuda_support.h;
// CUDA graph capture and replay across plans: test_batch_graph_cuda.cpp.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gpu/batch_cuda_support.h"
#include "gpu/gpu_support.h"
#include "support/test_support.h"
#include "tessera/batch.h"

namespace tessera::testing {
namespace {

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
        expect_written(alone, s.name() + " request " + std::to_string(r) + " alone");
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

// A decode-only run's first kernel is the programmatic dependent of the stream's kernel before
// it (TESSERA_CUDA_BATCH_PDL, on by default; the last run's merge or decode kernel) and waits for
// it before touching memory. Three runs of one plan chained on one stream, each taking the one
// before's output as its queries, the last writing the first's output again, all sharing the
// workspace's partial rows, enqueued back to back: the bits of the same runs with a
// synchronisation after each, every output written. Without split rows (eager runs leave the
// merge out: decode kernel after decode kernel, whose CTAs trigger at their start, so the next
// grid can start early: the half that catches a missing wait) and with them (a merge after each
// decode kernel; it never triggers early); knob at 1 and 0.
TEST(BatchCuda, ChainedRunsSeeEachOthersOutputs) {
  auto rng = fresh_rng();
  Spec split = spec(DType::bf16, 32, 8, 128, 16, KVLayout::NHD, opts(true), kAuto);
  split.q_lens = {1, 1, 1, 1};
  split.kv_lens = {30000, 17, 700, 4097};
  Spec direct = spec(DType::f16, 8, 2, 128, 16, KVLayout::HND, opts(true), kOff);
  direct.q_lens = {1, 1, 1};
  direct.kv_lens = {40, 1000, 64};
  Stream stream;
  const ExecutionContext ctx{stream.s, 0};
  for (const char* knob : {"1", "0"}) {
    ScopedEnv pdl("TESSERA_CUDA_BATCH_PDL", knob);
    for (const Spec* sp : {&split, &direct}) {
      SCOPED_TRACE(sp->name() + " TESSERA_CUDA_BATCH_PDL=" + knob);
      const Problem p(*sp, rng);
      // The two halves as named: split rows (a merge after each decode kernel) or none.
      ASSERT_EQ(merge_shape(p).rows > 0, sp == &split);
      const BatchConfig c = p.config();
      const DeviceFacts facts = cuda_facts();
      DeviceBytes ws(workspace_bytes(p));
      const Workspace w{ws.data, ws.bytes, Device::cuda(0)};
      BatchAttention ba(c);
      const std::vector<std::int32_t> ql(sp->q_lens.begin(), sp->q_lens.end()), kl(sp->kv_lens.begin(), sp->kv_lens.end());
      ba.plan(ql, kl, facts, w, ctx);
      Outputs a, b;
      for (Outputs* o : {&a, &b}) {
        o->out = HostTensor(sp->dtype, {p.cu_q.back(), sp->heads_q, sp->head_dim}, sp->row_pad);
        o->lse = HostTensor(DType::f32, {sp->heads_q, p.cu_q.back()});
      }
      DeviceTensor dq(p.q), dck(p.ck), dcv(p.cv), da(a.out), db(b.out), dlse(a.lse);
      HostTensor indptr = int_tensor(p.table.kv_indptr), indices = int_tensor(p.table.kv_indices),
                 last = int_tensor(p.table.kv_last_page_len);
      DeviceTensor dindptr(indptr), dindices(indices), dlast(last);
      const PagedKVCache cache{dck.view(), dcv.view(), sp->layout};
      const PageTable table{dindptr.view(), dindices.view(), dlast.view()};
      // q -> a -> b -> a, the first time with a synchronisation after each run.
      auto chain = [&](bool synchronise) {
        da.poison(a.out);
        db.poison(b.out);
        dlse.poison(a.lse);
        TESSERA_TEST_CUDA(cudaDeviceSynchronize());  // the poisons are pageable copies on the legacy stream
        ba.run(dq.view(), cache, table, da.view(), dlse.view(), w, ctx);
        if (synchronise) TESSERA_TEST_CUDA(cudaStreamSynchronize(stream.s));
        ba.run(da.view(), cache, table, db.view(), dlse.view(), w, ctx);
        if (synchronise) TESSERA_TEST_CUDA(cudaStreamSynchronize(stream.s));
        ba.run(db.view(), cache, table, da.view(), dlse.view(), w, ctx);
        TESSERA_TEST_CUDA(cudaStreamSynchronize(stream.s));
        da.download(a.out);
        db.download(b.out);
        dlse.download(a.lse);
        expect_written(a, "a");
        EXPECT_EQ(b.out.count_nan(), 0) << "b: out not fully written";
        EXPECT_TRUE(b.out.margins_intact()) << "b: out written outside its view";
        return std::tuple{a.out.bytes(), b.out.bytes(), a.lse.bytes()};
      };
      const auto serial = chain(true);
      for (int round = 0; round < 3; ++round) {
        SCOPED_TRACE("back to back, round " + std::to_string(round));
        EXPECT_TRUE(chain(false) == serial);
      }
    }
  }
  const Problem p(direct, rng);
  ScopedEnv bad("TESSERA_CUDA_BATCH_PDL", "2");
  try {
    run_cuda(p, ctx);
    ADD_FAILURE() << "TESSERA_CUDA_BATCH_PDL=2 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find("TESSERA_CUDA_BATCH_PDL: expected 0, 1 or unset, got '2'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tessera::testing
