// The portable backward's tail-piece plan (src/cuda/backward/tail_plan.h): which KV tiles of a
// dense non-causal problem leave the main grid, at the bench's shape and at the edges.
#include <gtest/gtest.h>

#include "cuda/backward/tail_plan.h"
#include "cuda/sm90/forward/fp8_v_transpose_plan.h"
#include "cuda/sm90/forward/split_tail_plan.h"

namespace tessera {
namespace {

using cuda::backward::plan_tail_pieces;
using cuda::backward::TailInputs;

// 16k tokens, 16 heads, head_dim 128 on an H200: 128 KV tiles x 16 heads = 2048 CTAs, 15 full
// waves of 132 and 68 in the last.
TailInputs bench_16k() {
  TailInputs in;
  in.eligible = in.device_ok = true;
  in.seq_q = in.seq_k = 16384;
  in.heads_kv = 16;
  in.batch = 1;
  in.sms = 132;
  return in;
}

TEST(TailPlan, Bench16kTakesFiveTailTilesInFourPieces) {
  const auto tp = plan_tail_pieces(bench_16k());
  EXPECT_EQ(tp.pieces, 4);
  EXPECT_EQ(tp.main_tiles, 123);  // ceil(68 / 16) = 5 tail tiles
  EXPECT_EQ(tp.tail0, 123 * 128);
  EXPECT_EQ(tp.tail_rows, 16384 - 123 * 128);
  EXPECT_EQ(tp.share, 4096);
}

TEST(TailPlan, NoneWhereNotWorthOrNotAllowed) {
  TailInputs in = bench_16k();
  in.forced = 0;  // TESSERA_CUDA_BACKWARD_TAIL_PIECES=0
  EXPECT_EQ(plan_tail_pieces(in).pieces, 0);
  in = bench_16k();
  in.eligible = false;
  EXPECT_EQ(plan_tail_pieces(in).pieces, 0);
  in = bench_16k();
  in.device_ok = false;
  EXPECT_EQ(plan_tail_pieces(in).pieces, 0);
  in = bench_16k();
  in.seq_q = in.seq_k = 4096;  // 64 query tiles per CTA: the pieces' fixed costs would not pay
  in.batch = 4;
  EXPECT_EQ(plan_tail_pieces(in).pieces, 0);
  in = bench_16k();
  in.sms = 128;  // 2048 CTAs fill 16 waves exactly: no part-empty last wave
  EXPECT_EQ(plan_tail_pieces(in).pieces, 0);
  in = bench_16k();
  in.seq_q = 16382;  // 4 pieces do not divide the query rows
  EXPECT_EQ(plan_tail_pieces(in).pieces, 0);
  in = bench_16k();
  in.seq_k = 128;  // one KV tile: nothing would stay in the main grid
  EXPECT_EQ(plan_tail_pieces(in).pieces, 0);
}

TEST(TailPlan, ForcedPiecesTakeTheLastQuarterAndKeepOneMainTile) {
  TailInputs in = bench_16k();
  in.forced = 8;
  in.seq_q = in.seq_k = 1000;  // forced: no worth test, 8 divides 1000
  const auto tp = plan_tail_pieces(in);
  EXPECT_EQ(tp.pieces, 8);
  EXPECT_EQ(tp.main_tiles, 8 - 2);  // 8 KV tiles (the last partial), a quarter of them = 2
  EXPECT_EQ(tp.tail_rows, 1000 - 6 * 128);
  EXPECT_EQ(tp.share, 125);
  in.seq_k = 200;  // two KV tiles: max(1, 2 / 4) = 1 in the tail, one kept
  EXPECT_EQ(plan_tail_pieces(in).main_tiles, 1);
  in.seq_q = 1001;  // 8 does not divide: plain path
  EXPECT_EQ(plan_tail_pieces(in).pieces, 0);
}

// The sm90 forward's split tail (src/cuda/sm90/forward/split_tail_plan.h).
// block_n: the K/V tile's keys (FP8 128; bf16 / fp16 d128 176, d256 80, d64 128 unmasked).
std::pair<long long, int> split(long long tiles, long long ctas, long long kv_tiles, int head_dim = 128, int forced = -1,
                                int parts = 2, int block_n = 128) {
  const cuda::sm90::SplitTail t = cuda::sm90::forward_split_tail(tiles, ctas, kv_tiles, block_n, head_dim, forced, parts);
  return {t.tiles, t.parts};
}
using P = std::pair<long long, int>;

TEST(ForwardSplitTail, BenchShapesAtSixteenK) {
  // FP8 d128, 16 heads, 192-row tiles: 86 tiles per head, 1376 on 132 CTAs, 128 K/V tiles: 56
  // left, halves -> 10.5 rounds.
  EXPECT_EQ(split(1376, 132, 128), P(56, 2));
  // FP8 d256, 8 heads, 128-row tiles: 1024 tiles, 100 left: 2-4 parts fill a whole round, 5 parts
  // (of 25 or 26 K/V tiles) 4 x 26 / 128 of one plus 0.2 of part cost at d256 (measured 1.031 of
  // the unsplit time, eighteenth session): not split. At d128 the same counts would take 5 parts.
  EXPECT_EQ(split(1024, 132, 128, 256), P(0, 1));
  EXPECT_EQ(split(1024, 132, 128, 128), P(100, 5));
  // FP8 d128 4k: 22 tiles per head (192 rows), 1408 on 132 CTAs, 32 K/V tiles: 88 left in thirds,
  // 2 x 11 / 32 of a round plus 0.24 (measured 0.951, eighteenth session).
  EXPECT_EQ(split(1408, 132, 32), P(88, 3));
  // bf16 d128, 16 heads, 128-row tiles of 176-key K/V tiles: 2048 tiles, 68 left, 94 K/V tiles:
  // five parts, 3 x 19 / 94 + 0.10.
  EXPECT_EQ(split(2048, 132, 94, 128, -1, 2, 176), P(68, 5));
  // bf16 d256, 8 heads, 80-key K/V tiles: 1024 tiles, 100 left, 205 K/V tiles: five parts would
  // take 0.80 + 0.20, as at FP8 d256 (measured 1.031): not split.
  EXPECT_EQ(split(1024, 132, 205, 256, -1, 2, 80), P(0, 1));
  // Scaled by K/V tiles alone (the rule before), 80-key tiles looked three times cheaper to split.
  EXPECT_EQ(split(1024, 132, 205, 256), P(100, 5));
  // bf16 d64, 32 heads, 192-row tiles: 2752 tiles, 112 left, 128 K/V tiles: no k pays.
  EXPECT_EQ(split(2752, 132, 128, 64), P(0, 1));
  // 4k: d128 (24 K/V tiles of 176): thirds, 2 x 8 / 24 + 0.23; d256 (52 of 80): none.
  EXPECT_EQ(split(2048, 132, 24, 128, -1, 2, 176), P(68, 3));
  EXPECT_EQ(split(1024, 132, 52, 256, -1, 2, 80), P(0, 1));
  // bf16 d64 4k: 2816 tiles of 192 rows, 44 left, 32 K/V tiles: thirds (0.34 + 0.24).
  EXPECT_EQ(split(2816, 132, 32, 64), P(44, 3));
  // 1k: 8 K/V tiles (d64: 3072 tiles, d256: 1024 with 13 of 80 keys): none.
  EXPECT_EQ(split(3072, 132, 8, 64), P(0, 1));
  EXPECT_EQ(split(1024, 132, 13, 256, -1, 2, 80), P(0, 1));
}

TEST(ForwardSplitTail, PartsAndTheirLimits) {
  EXPECT_EQ(split(1320, 132, 128), P(0, 1));    // whole rounds
  EXPECT_EQ(split(1386, 132, 128), P(66, 2));   // exactly half a round left: halves
  EXPECT_EQ(split(1387, 132, 128), P(67, 5));   // 67: halves take a round, 5 parts 3 x 26 / 128 (+ 0.1 merge)
  EXPECT_EQ(split(1387, 132, 128, 256), P(67, 3));  // at d256 5 parts cost 0.2: thirds, 2 x 43 / 128 + 0.12
  EXPECT_EQ(split(1024, 132, 32, 256), P(0, 1));    // FP8 d256 4k: any part count costs more than it saves
  EXPECT_EQ(split(1024, 132, 80, 256), P(0, 1));    // ... and still at 80 K/V tiles
  EXPECT_EQ(split(320, 132, 16, 256), P(0, 1));     // halves at 16 K/V tiles: 0.5 + 0.64 at d256
  EXPECT_EQ(split(1448, 132, 128), P(0, 1));    // 128 left: no k shortens the round enough
  EXPECT_EQ(split(1426, 132, 128), P(0, 1));    // 106 left: 6 parts take 0.86 + 0.12, a saving under kSplitMinSaving
  EXPECT_EQ(split(188, 132, 16), P(56, 2));     // the GPU split test's rule case on 132 SMs: halves, 0.5 + 0.32
  EXPECT_EQ(split(100, 100, 128), P(0, 1));     // one round (fewer tiles than SMs: ctas = tiles)
  EXPECT_EQ(split(0, 132, 128), P(0, 1));
  EXPECT_EQ(split(320, 132, 7), P(0, 1));       // fewer than 8 K/V tiles: never
  EXPECT_EQ(split(320, 132, 8), P(0, 1));       // 8: halves' merge (0.64 of such a short round) outweighs 0.5
  EXPECT_EQ(split(320, 132, 16), P(56, 2));
}

TEST(ForwardSplitTail, ForcedAndOff) {
  EXPECT_EQ(split(1376, 132, 128, 128, 0), P(0, 1));
  EXPECT_EQ(split(1376, 132, 128, 128, 3), P(3, 2));
  EXPECT_EQ(split(1376, 132, 128, 128, 3, 5), P(3, 5));
  EXPECT_EQ(split(5, 5, 1, 128, 8, 8), P(5, 8));  // capped at the tiles, whatever the K/V tiles
  EXPECT_EQ(split(5, 5, 1, 128, 8, 0), P(5, 2));  // forced parts clamped to [2, 8]
  EXPECT_EQ(split(5, 5, 1, 128, 8, 1), P(5, 2));
  EXPECT_EQ(split(5, 5, 1, 128, 8, 9), P(5, 8));
  EXPECT_EQ(split(0, 132, 128, 128, 8), P(0, 1));
}

// Where the FP8 forward's V^T pass pays (src/cuda/sm90/forward/fp8_v_transpose_plan.h): the
// bench shapes on the H200, each on the side its measurement fell, and the visit counts.
TEST(Fp8VTransposePlan, BenchShapes) {
  using cuda::sm90::fp8_query_tiles_per_kv_tile;
  using cuda::sm90::fp8_v_transpose_pays;
  // FP8 tiles: 192 query rows at d128, 128 at d256.
  auto pays = [](long long m_blocks, int head_dim, bool causal, long long group = 1) {
    const long long block_m = head_dim == 128 ? 192 : 128;
    return fp8_v_transpose_pays(fp8_query_tiles_per_kv_tile(m_blocks, block_m, 128, causal, -1, -1), group, head_dim);
  };
  EXPECT_TRUE(pays(86, 128, false));   // d128 16k: 0.971
  EXPECT_TRUE(pays(86, 128, true));    // d128 16k causal (43 visits): 0.996
  EXPECT_TRUE(pays(128, 256, false));  // d256 16k: 0.938
  EXPECT_TRUE(pays(128, 256, true));   // d256 16k causal (64): 0.960
  EXPECT_TRUE(pays(32, 256, false));   // d256 4k: 0.960
  EXPECT_TRUE(pays(32, 256, true));    // d256 4k causal (16): 0.973 (1.088 with the ~50 us pass)
  EXPECT_TRUE(pays(22, 128, false));   // d128 4k: 0.995 (1.039)
  EXPECT_FALSE(pays(22, 128, true));   // d128 4k causal (11): 1.005
  EXPECT_FALSE(pays(6, 128, false));   // d128 1k: 1.24-1.32 with the ~50 us pass
  EXPECT_TRUE(pays(8, 256, false));    // d256 1k (8): 0.973-0.983 (the V^T-only instance behind the pass)
  EXPECT_FALSE(pays(8, 256, true));    // d256 1k causal (4): 1.05
  EXPECT_TRUE(pays(4, 128, false, 8));  // GQA 8: each V tile serves 8 query heads
  EXPECT_TRUE(pays(2, 128, false, 8));  // reuse 16: the threshold at d128
  EXPECT_FALSE(pays(3, 128, false, 5)); // 15
  EXPECT_TRUE(pays(4, 256, false, 2));  // reuse 8: the threshold at d256
  EXPECT_FALSE(pays(7, 256, false));    // 7
  EXPECT_FALSE(pays(0, 128, false, 8));
  EXPECT_FALSE(pays(0, 256, false, 8));
}

TEST(Fp8VTransposePlan, VisitsUnderMasks) {
  using cuda::sm90::fp8_query_tiles_per_kv_tile;
  EXPECT_EQ(fp8_query_tiles_per_kv_tile(86, 192, 128, false, -1, -1), 86);  // every query tile
  EXPECT_EQ(fp8_query_tiles_per_kv_tile(86, 192, 128, true, -1, -1), 43);   // causal: half on average
  EXPECT_EQ(fp8_query_tiles_per_kv_tile(87, 192, 128, false, 100, -1), 44); // one side open: the same
  EXPECT_EQ(fp8_query_tiles_per_kv_tile(86, 192, 128, false, -1, 0), 43);
  // A band: the query tiles whose rows reach a 128-key tile. Causal with 128 keys to the left:
  // (128 + 0 + 128 + 191) / 192 + 1 = 3 of 86, so 16k with a short window does not pay.
  EXPECT_EQ(fp8_query_tiles_per_kv_tile(86, 192, 128, true, 128, -1), 3);
  EXPECT_FALSE(cuda::sm90::fp8_v_transpose_pays(fp8_query_tiles_per_kv_tile(86, 192, 128, true, 128, -1), 1, 128));
  EXPECT_EQ(fp8_query_tiles_per_kv_tile(86, 192, 128, false, 1000, 1000), 13);  // (2128 + 191) / 192 + 1
  EXPECT_EQ(fp8_query_tiles_per_kv_tile(4, 192, 128, false, 1000, 1000), 4);    // at most every query tile
}

}  // namespace

}  // namespace tessera
