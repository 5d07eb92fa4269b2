// GPU unit tests of the online softmax on mma fragments (src/cuda/common/softmax_fragment.cuh),
// shared by the sm80 and sm90 forwards: one warp runs scores_to_weights over many 128-key tiles
// of crafted scores, applies alpha to its own accumulator the way the kernels do, and the host
// checks the invariants against exact double-precision sums:
//  - the LSE (m + log2 l) and O / l are those of the whole row;
//  - the weights never pass 2^(w + lazy_log2) (w: log2_weight_scale), the bound the kernels rely
//    on to keep P inside e4m3 (448) or fp16;
//  - the lazy rescale skips tiles, and rows that do not vote do not move the others' rescales.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda/common/softmax_fragment.cuh"
#include "cuda/primitives/sm80/warp.cuh"
#include "gpu/gpu_support.h"
#include "math/mask.h"
#include "math/online_softmax.h"

namespace tessera::testing {
namespace {

constexpr int kRows = 16, kTile = 128;

// Score (base-2 units) of row r, key column c of tile i: each row group rises, falls, stays or
// jumps at its own pace, plus a fixed ripple (its maximum over a tile's 128 columns is ~0.5 in
// every tile). Rows 0-3 rise 0.3 per tile, 4-7 fall 0.2, 8-11 rise 0.45 (past 2^8 twice over the
// row), 12-15 rise 0.05 (steep: 2.0), and row 5 jumps by 20 at tile 10.
__host__ __device__ inline float crafted_score(int r, int c, int i, bool steep) {
  const float rise[4] = {0.3f, -0.2f, 0.45f, steep ? 2.0f : 0.05f};
  float t = rise[r / 4] * static_cast<float>(i) + 0.5f * sinf(0.37f * static_cast<float>(c) + static_cast<float>(r));
  if (r == 5 && i >= 10) t += 20.0f;
  return t;
}
// The value each key contributes to O (one column of V).
__host__ __device__ inline float crafted_value(int c, int i) { return static_cast<float>((i * kTile + c) % 7 - 3); }

struct WarpResult {
  std::vector<float> lse2, o;  // per row: m + log2 l - w, O / l
  float max_weight = 0.0f;
  int rescales = 0;  // tiles whose O the warp rescaled
};

// votes_from_row: rows >= it do not vote (a row past its sequence in the kernels).
template <bool kLazy>
__global__ void softmax_tiles_kernel(int tiles, float w, float lazy_log2, int votes_from_row, bool steep, float* lse2,
                                     float* o_out, float* max_weight, int* rescales) {
  const int lane = threadIdx.x, g = lane >> 2, q = lane & 3;
  math::OnlineSoftmaxRow rows[2];
  const math::KeyRange keys[2] = {{0, 1 << 30}, {0, 1 << 30}};
  float o[2] = {0.0f, 0.0f}, wmax = 0.0f;
  int count = 0;
  for (int i = 0; i < tiles; ++i) {
    float s[kTile / 8][4];
    for (int n = 0; n < kTile / 8; ++n)
      for (int e = 0; e < 4; ++e) s[n][e] = crafted_score(g + 8 * (e >> 1), 8 * n + 2 * q + (e & 1), i, steep);
    float alpha[2];
    const bool rescale = cuda::scores_to_weights<kTile, kLazy>(s, rows, keys, false, i * kTile, q, 1.0f, 1.0f, 0.0f,
                                                               alpha, w, lazy_log2, g < votes_from_row,
                                                               g + 8 < votes_from_row);
    if (rescale) {
      o[0] *= alpha[0];
      o[1] *= alpha[1];
      ++count;
    } else if (alpha[0] != 1.0f || alpha[1] != 1.0f) {
      count = -1 << 20;  // a skipped rescale with an alpha that is not 1: flagged to the host
    }
    for (int n = 0; n < kTile / 8; ++n)
      for (int e = 0; e < 4; ++e) {
        const int r = g + 8 * (e >> 1);
        if (r < votes_from_row) wmax = fmaxf(wmax, s[n][e]);  // rows that vote: the bound holds
        o[e >> 1] += s[n][e] * crafted_value(8 * n + 2 * q + (e & 1), i);
      }
  }
  for (int h = 0; h < 2; ++h) {
    const float l = cuda::sm80::quad_sum(rows[h].l), oo = cuda::sm80::quad_sum(o[h]);
    if (q == 0) {
      lse2[g + 8 * h] = rows[h].m + log2f(l) - w;
      o_out[g + 8 * h] = oo / l;
    }
  }
  for (int off = 16; off > 0; off >>= 1) wmax = fmaxf(wmax, __shfl_xor_sync(0xffffffffu, wmax, off));
  if (lane == 0) {
    *max_weight = wmax;
    *rescales = count;
  }
}

template <bool kLazy>
WarpResult run_tiles(int tiles, float w, float lazy_log2, int votes_from_row = kRows, bool steep = false) {
  DeviceBuffer<float> lse2(kRows), o(kRows), wmax(1);  // NaN-filled: every value must be written
  DeviceBuffer<int> count(1);
  softmax_tiles_kernel<kLazy><<<1, 32>>>(tiles, w, lazy_log2, votes_from_row, steep, lse2.get(), o.get(), wmax.get(),
                                         count.get());
  TESSERA_TEST_CUDA(cudaGetLastError());
  WarpResult r;
  r.lse2 = lse2.read();
  r.o = o.read();
  r.max_weight = wmax.read()[0];
  r.rescales = count.read()[0];
  return r;
}

// The row's exact LSE (base 2) and softmax-weighted value.
void exact_row(int r, int tiles, bool steep, double* lse2, double* o) {
  double m = -INFINITY;
  for (int i = 0; i < tiles; ++i)
    for (int c = 0; c < kTile; ++c) m = std::fmax(m, crafted_score(r, c, i, steep));
  double l = 0.0, acc = 0.0;
  for (int i = 0; i < tiles; ++i)
    for (int c = 0; c < kTile; ++c) {
      const double p = std::exp2(static_cast<double>(crafted_score(r, c, i, steep)) - m);
      l += p;
      acc += p * crafted_value(c, i);
    }
  *lse2 = m + std::log2(l);
  *o = acc / l;
}

void expect_exact_rows(const WarpResult& got, int tiles, bool steep = false) {
  for (int r = 0; r < kRows; ++r) {
    double lse2 = 0.0, o = 0.0;
    exact_row(r, tiles, steep, &lse2, &o);
    EXPECT_NEAR(got.lse2[r], lse2, 2e-5 * std::fmax(1.0, std::fabs(lse2))) << "row " << r;
    EXPECT_NEAR(got.o[r], o, 2e-4) << "row " << r;
  }
}

constexpr int kTiles = 40;

TEST(SoftmaxFragment, EveryTileRescalesWithoutTheLazyFlag) {
  const WarpResult r = run_tiles<false>(kTiles, 8.0f, 0.0f);
  expect_exact_rows(r, kTiles);
  EXPECT_EQ(r.rescales, kTiles);
  EXPECT_LE(r.max_weight, 256.0f * (1.0f + 1e-6f));  // 2^w: each weight is 2^(w + t - m), t <= m
}

// The FP8 setting (P = 2^8 x weight in e4m3, lazy 2^0.5): weights up to 2^8.5 = 362 < 448. No
// row rises more than 0.45 per tile, so the warp rescales about every second tile.
TEST(SoftmaxFragment, LazyRescaleE4m3KeepsWeightsUnderItsBound) {
  const WarpResult r = run_tiles<true>(kTiles, 8.0f, 0.5f);
  expect_exact_rows(r, kTiles);
  EXPECT_LE(r.max_weight, std::exp2(8.5f) * (1.0f + 1e-6f));
  EXPECT_GT(r.max_weight, 256.0f);  // the bound is used: some weight passed 2^w
  EXPECT_GT(r.rescales, kTiles / 4);
  EXPECT_LT(r.rescales, 3 * kTiles / 4);
}

// The 16-bit setting (w 0, lazy 2^8): weights up to 256; the warp rescales in the first tile, at
// row 5's jump (tile 10) and when rows 8-11 have risen 8 past that (~tile 28), and little else.
TEST(SoftmaxFragment, LazyRescale16BitKeepsWeightsUnderItsBound) {
  const WarpResult r = run_tiles<true>(kTiles, 0.0f, 8.0f);
  expect_exact_rows(r, kTiles);
  EXPECT_LE(r.max_weight, 256.0f * (1.0f + 1e-6f));
  EXPECT_GT(r.max_weight, 64.0f);
  EXPECT_GE(r.rescales, 3);
  EXPECT_LE(r.rescales, 6);
}

// Rows 12-15 made steep (2.0 per tile) would make an e4m3 warp rescale every tile if they voted.
// With them out of the vote (as rows past a sequence are) the warp rescales exactly when the
// other rows alone make it, every row keeps its exact LSE and O (the steep rows' weights grow to
// ~2^88, unbounded but finite), and the voting rows keep the bound.
TEST(SoftmaxFragment, RowsThatDoNotVoteDoNotMoveTheRescales) {
  const WarpResult all_vote = run_tiles<true>(kTiles, 8.0f, 0.5f, kRows, true);
  const WarpResult steep_out = run_tiles<true>(kTiles, 8.0f, 0.5f, 12, true);
  const WarpResult mild_out = run_tiles<true>(kTiles, 8.0f, 0.5f, 12, false);
  EXPECT_EQ(all_vote.rescales, kTiles);
  EXPECT_EQ(steep_out.rescales, mild_out.rescales);
  EXPECT_LT(steep_out.rescales, kTiles);
  expect_exact_rows(all_vote, kTiles, true);
  expect_exact_rows(steep_out, kTiles, true);
  expect_exact_rows(mild_out, kTiles, false);
  EXPECT_LE(steep_out.max_weight, std::exp2(8.5f) * (1.0f + 1e-6f));
}

}  // namespace
}  // namespace tessera::testing
