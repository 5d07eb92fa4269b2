// GPU unit tests of the online softmax on mma fragments (src/cuda/common/softmax_fragment.cuh),
// shared by the sm80 and sm90 forwards: one warp runs scores_to_weights over many 128-key tiles
// of crafted scores, applies alpha to its own accumulator the way the kernels do, and the host
// checks the invariants against exact double-precision sums:
//  - the LSE (m + log2 l) and O / l are those of the whole row;
//  - the weights never pass 2^(w + lazy_log2) (w: log2_weight_scale), the bound the kernels rely
//    on to keep P inside e4m3 (448) or fp16;
//  - the lazy rescale skips tiles, and rows that do not vote do not move the others' rescales;
//  - the first-tile form (kFirstTile) gives the general form's rows bit for bit;
//  - a masked tile zeroes exactly the keys outside each row's range, on both mask paths;
//  - with a soft cap (softcap_score.cuh's folded form, and the portable forward's dividing one)
//    the weights are those of c tanh(s scale / c), for small and large caps.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cuda/common/softcap_score.cuh"
#include "cuda/common/softmax_fragment.cuh"
#include "cuda/sm80/forward/softmax.cuh"
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

// votes_from_row: rows >= it do not vote (a row past its sequence in the kernels). kFirst: tile 0
// goes through scores_to_weights' kFirstTile form, as the sm90 forward's first K/V tile does.
// begins (or nullptr): row r sees keys from begins[r] on (masked tiles up to the last row's
// first key), as a window's or a ragged sequence's rows do.
template <bool kLazy, bool kFirst = false>
__global__ void softmax_tiles_kernel(int tiles, float w, float lazy_log2, int votes_from_row, bool steep, float* lse2,
                                     float* o_out, float* max_weight, int* rescales, const int* begins = nullptr) {
  const int lane = threadIdx.x, g = lane >> 2, q = lane & 3;
  math::OnlineSoftmaxRow rows[2];
  const math::KeyRange keys[2] = {{begins ? begins[g] : 0, 1 << 30}, {begins ? begins[g + 8] : 0, 1 << 30}};
  int last_begin = 0;
  if (begins != nullptr)
    for (int r = 0; r < kRows; ++r) last_begin = max(last_begin, begins[r]);
  float o[2] = {0.0f, 0.0f}, wmax = 0.0f;
  int count = 0;
  for (int i = 0; i < tiles; ++i) {
    float s[kTile / 8][4];
    for (int n = 0; n < kTile / 8; ++n)
      for (int e = 0; e < 4; ++e) s[n][e] = crafted_score(g + 8 * (e >> 1), 8 * n + 2 * q + (e & 1), i, steep);
    float alpha[2];
    const bool masked = begins != nullptr && i * kTile < last_begin;
    const cuda::SoftcapScore no_cap{};
    const bool rescale =
        kFirst && i == 0
            ? cuda::scores_to_weights<kTile, kLazy, true>(s, rows, keys, masked, i * kTile, q, 1.0f, no_cap, alpha, w,
                                                          lazy_log2, g < votes_from_row, g + 8 < votes_from_row)
            : cuda::scores_to_weights<kTile, kLazy>(s, rows, keys, masked, i * kTile, q, 1.0f, no_cap, alpha, w,
                                                    lazy_log2, g < votes_from_row, g + 8 < votes_from_row);
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

template <bool kLazy, bool kFirst = false>
WarpResult run_tiles(int tiles, float w, float lazy_log2, int votes_from_row = kRows, bool steep = false,
                     const std::vector<int>& begins = {}) {
  DeviceBuffer<float> lse2(kRows), o(kRows), wmax(1);  // NaN-filled: every value must be written
  DeviceBuffer<int> count(1);
  DeviceBuffer<int> d_begins(begins.empty() ? std::vector<int>(kRows, 0) : begins);
  softmax_tiles_kernel<kLazy, kFirst><<<1, 32>>>(tiles, w, lazy_log2, votes_from_row, steep, lse2.get(), o.get(), wmax.get(),
                                         count.get(), begins.empty() ? nullptr : d_begins.get());
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

// The sm90 forward's FP8 setting (kernel.cuh: P = 2^7 x weight in e4m3, lazy 2^1.5): weights up
// to 2^8.5 = 362 < 448. No row rises more than 0.45 per tile, so the warp rescales about every
// fourth tile (11 of 40 in a host emulation of the crafted rows, whose closest vote is 0.15 from
// the threshold), and weights pass 2^8: the lazy headroom is used.
TEST(SoftmaxFragment, LazyRescaleE4m3KeepsWeightsUnderItsBound) {
  const WarpResult r = run_tiles<true>(kTiles, 7.0f, 1.5f);
  expect_exact_rows(r, kTiles);
  EXPECT_LE(r.max_weight, std::exp2(8.5f) * (1.0f + 1e-6f));
  EXPECT_GT(r.max_weight, 256.0f);  // past 2^(w + 1)
  EXPECT_GT(r.rescales, kTiles / 8);
  EXPECT_LT(r.rescales, kTiles / 2);
}

// An earlier FP8 setting (2^8 with a lazy 2^0.5, the same bound 2^8.5): the warp rescales about
// every second tile (20 of 40 in the emulation), so the vote is exercised near its threshold.
TEST(SoftmaxFragment, LazyRescaleTightVoteKeepsWeightsUnderItsBound) {
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

// Rows 12-15 made steep (2.0 per tile, past the lazy 1.5) would make an e4m3 warp rescale every
// tile if they voted.
// With them out of the vote (as rows past a sequence are) the warp rescales exactly when the
// other rows alone make it, every row keeps its exact LSE and O (the steep rows' weights grow to
// ~2^88, unbounded but finite), and the voting rows keep the bound.
TEST(SoftmaxFragment, RowsThatDoNotVoteDoNotMoveTheRescales) {
  const WarpResult all_vote = run_tiles<true>(kTiles, 7.0f, 1.5f, kRows, true);
  const WarpResult steep_out = run_tiles<true>(kTiles, 7.0f, 1.5f, 12, true);
  const WarpResult mild_out = run_tiles<true>(kTiles, 7.0f, 1.5f, 12, false);
  EXPECT_EQ(all_vote.rescales, kTiles);
  EXPECT_GE(steep_out.rescales, 0);  // no skipped rescale with alpha != 1 (flagged < 0)
  EXPECT_EQ(steep_out.rescales, mild_out.rescales);
  EXPECT_LT(steep_out.rescales, kTiles);
  expect_exact_rows(all_vote, kTiles, true);
  expect_exact_rows(steep_out, kTiles, true);
  expect_exact_rows(mild_out, kTiles, false);
  EXPECT_LE(steep_out.max_weight, std::exp2(8.5f) * (1.0f + 1e-6f));
}

// The first tile without the vote (kFirstTile) leaves every voting row's LSE and O bit for bit
// as the general form does, lazy or not, with rows out of the vote; the rescale count drops by
// the first tile's (the flag reports no rescale there: O is still zero).
TEST(SoftmaxFragment, FirstTileFormMatchesTheGeneralFormBitForBit) {
  struct Setting {
    float w, lazy;
    int votes_from_row;
    bool steep;
  };
  for (const Setting& c : {Setting{7.0f, 1.5f, kRows, false}, Setting{0.0f, 8.0f, kRows, false},
                           Setting{7.0f, 1.5f, 12, true}, Setting{0.0f, 8.0f, 4, true}, Setting{8.0f, 0.5f, 12, true}}) {
    const WarpResult general = run_tiles<true>(kTiles, c.w, c.lazy, c.votes_from_row, c.steep);
    const WarpResult first = run_tiles<true, true>(kTiles, c.w, c.lazy, c.votes_from_row, c.steep);
    for (int r = 0; r < c.votes_from_row; ++r) {
      EXPECT_EQ(first.lse2[r], general.lse2[r]) << "row " << r << ", votes from row " << c.votes_from_row;
      EXPECT_EQ(first.o[r], general.o[r]) << "row " << r << ", votes from row " << c.votes_from_row;
    }
    // Neither run flagged a skipped rescale with alpha != 1 (count < 0), which both could share.
    EXPECT_GE(general.rescales, 0);
    EXPECT_GE(first.rescales, 0);
    EXPECT_EQ(first.rescales, general.rescales - 1);
    EXPECT_EQ(first.max_weight, general.max_weight);
  }
  const WarpResult eager = run_tiles<false>(kTiles, 8.0f, 0.0f), eager_first = run_tiles<false, true>(kTiles, 8.0f, 0.0f);
  for (int r = 0; r < kRows; ++r) {
    EXPECT_EQ(eager_first.lse2[r], eager.lse2[r]) << "row " << r;
    EXPECT_EQ(eager_first.o[r], eager.o[r]) << "row " << r;
  }
}

// The same with masked first tiles: rows whose keys start in later tiles (a window's rows), so
// that some rows, or every voting row, see nothing in the first tile: then the general form
// votes no rescale there and leaves m at -inf, which the first-tile form must match.
TEST(SoftmaxFragment, FirstTileFormMatchesTheGeneralFormWithMaskedFirstTiles) {
  struct Setting {
    std::vector<int> begins;
    int votes_from_row;
    bool tile0_rescales;  // whether the general form's tile 0 rescales (some voting row sees a key)
  };
  std::vector<int> half(kRows), late(kRows), staggered(kRows);
  for (int r = 0; r < kRows; ++r) {
    half[r] = r < 8 ? 3 * r : 2 * kTile + 5 * r;     // rows 8-15 start in tile 2
    late[r] = kTile + 17 * r;                         // every row starts in tiles 1-3
    staggered[r] = r < 12 ? 3 * kTile + r : 5;        // voting rows 0-11 start in tile 3; 12-15 see tile 0
  }
  for (const Setting& c : {Setting{half, kRows, true}, Setting{late, kRows, false}, Setting{staggered, 12, false},
                           Setting{half, 4, true}}) {
    for (const float lazy : {0.5f, 1.5f, 8.0f}) {
      const float w = lazy < 1.0f ? 8.0f : lazy < 2.0f ? 7.0f : 0.0f;  // the FP8 settings, old and kernel's; 16-bit
      const WarpResult general = run_tiles<true>(kTiles, w, lazy, c.votes_from_row, true, c.begins);
      const WarpResult first = run_tiles<true, true>(kTiles, w, lazy, c.votes_from_row, true, c.begins);
      for (int r = 0; r < c.votes_from_row; ++r) {
        EXPECT_EQ(first.lse2[r], general.lse2[r]) << "row " << r << ", votes from row " << c.votes_from_row;
        EXPECT_EQ(first.o[r], general.o[r]) << "row " << r << ", votes from row " << c.votes_from_row;
      }
      EXPECT_GE(general.rescales, 0);  // no skipped rescale with alpha != 1 (flagged < 0) in either
      EXPECT_GE(first.rescales, 0);
      EXPECT_EQ(first.rescales, general.rescales - (c.tile0_rescales ? 1 : 0));
      EXPECT_EQ(first.max_weight, general.max_weight);
    }
  }
}

// One masked tile of keys n0 .. n0 + 127: each row's weights are 0 exactly outside its key range
// and positive inside, in both of scores_to_weights' mask forms (kInFrame: the thread-frame form
// and both of its paths: rows whose range starts inside the tile make the warp test both bounds;
// otherwise only the upper one), with empty rows and ranges that end before, inside or past the
// tile.
template <bool kInFrame>
__global__ void masked_tile_kernel(const int* ranges, int n0, float* weights) {
  const int lane = threadIdx.x, g = lane >> 2, q = lane & 3;
  math::OnlineSoftmaxRow rows[2];
  const math::KeyRange keys[2] = {{ranges[4 * g], ranges[4 * g + 1]}, {ranges[4 * g + 2], ranges[4 * g + 3]}};
  float s[kTile / 8][4];
  for (int n = 0; n < kTile / 8; ++n)
    for (int e = 0; e < 4; ++e) s[n][e] = 0.25f * static_cast<float>((8 * n + 2 * q + (e & 1) + g) % 5);
  float alpha[2];
  cuda::scores_to_weights<kTile, false, false, kInFrame>(s, rows, keys, true, n0, q, 1.0f, cuda::SoftcapScore{}, alpha);
  for (int n = 0; n < kTile / 8; ++n)
    for (int e = 0; e < 4; ++e) weights[(g + 8 * (e >> 1)) * kTile + 8 * n + 2 * q + (e & 1)] = s[n][e];
}

template <bool kInFrame>
void check_masked_tiles() {
  std::mt19937 rng(5);
  const int n0 = 4096;
  for (int trial = 0; trial < 200; ++trial) {
    // Trials alternate: rows all starting at or before n0 (the upper-bound path), or some rows
    // starting inside the tile (both bounds).
    // Odd trials: some rows start inside the tile, and the warp must vote for the lower bound:
    // every row may (trial % 8 == 1), only rows 8-15 (== 3, the second row of each lane, as in a
    // window whose left edge crosses the tile between rows 7 and 8), or one row alone (== 5, 7).
    const bool inside = trial % 2 == 1;
    std::uniform_int_distribution<int> end_at(n0 - 8, n0 + kTile + 8), begin_out(0, n0), begin_in(n0 + 1, n0 + kTile);
    std::uniform_int_distribution<int> any_row(0, kRows - 1);
    const int lone = any_row(rng);
    std::vector<int> ranges(4 * 8);  // rows g and g + 8 of lane group g: {begin, end} each
    for (int g = 0; g < 8; ++g)
      for (int h = 0; h < 2; ++h) {
        const int r = g + 8 * h;
        const bool starts_inside = inside && (trial % 8 == 1 ? r % 3 != 0 : trial % 8 == 3 ? h == 1 : r == lone);
        int b = starts_inside ? begin_in(rng) : begin_out(rng), e = end_at(rng);
        if (trial % 7 == 0 && g == 3) e = b;  // an empty row
        ranges[4 * g + 2 * h] = b;
        ranges[4 * g + 2 * h + 1] = e;
      }
    DeviceBuffer<int> d_ranges(ranges);
    DeviceBuffer<float> weights(kRows * kTile);  // NaN-filled: every weight must be written
    masked_tile_kernel<kInFrame><<<1, 32>>>(d_ranges.get(), n0, weights.get());
    TESSERA_TEST_CUDA(cudaGetLastError());
    const std::vector<float> got = weights.read();
    const char* form = kInFrame ? "frame form" : "per-score form";
    for (int r = 0; r < kRows; ++r) {
      const int b = ranges[4 * (r % 8) + 2 * (r / 8)], e = ranges[4 * (r % 8) + 2 * (r / 8) + 1];
      for (int c = 0; c < kTile; ++c) {
        const bool visible = n0 + c >= b && n0 + c < e;
        const float wv = got[r * kTile + c];
        if (visible) {
          ASSERT_GT(wv, 0.0f) << form << " trial " << trial << " row " << r << " key " << n0 + c << " range [" << b << ", " << e << ")";
        } else {
          ASSERT_EQ(wv, 0.0f) << form << " trial " << trial << " row " << r << " key " << n0 + c << " range [" << b << ", " << e << ")";
        }
      }
    }
  }
}

TEST(SoftmaxFragment, MaskedTileZeroesExactlyTheKeysOutsideEachRowsRange) {
  check_masked_tiles<false>();
  check_masked_tiles<true>();
}

// Raw score q.k of row r, key c of the soft-cap tile: spread over [-40, 40] in a scrambled order.
__host__ __device__ inline float capped_raw_score(int r, int c) {
  return -40.0f + 80.0f * static_cast<float>((37 * c + 11 * r) % kTile) / static_cast<float>(kTile - 1);
}

// One first tile through scores_to_weights with the soft cap `capped` on, each row seeing keys
// [0, visible) (masked when visible < kTile: the cap first, then the mask): each row's weights
// (exp2(t - m), m the row's max over its visible keys) and m.
template <class Cap>
__global__ void capped_tile_kernel(Cap capped, int visible, float* weights, float* maxes) {
  const int lane = threadIdx.x, g = lane >> 2, q = lane & 3;
  math::OnlineSoftmaxRow rows[2];
  const math::KeyRange keys[2] = {{0, visible}, {0, visible}};
  float s[kTile / 8][4];
  for (int n = 0; n < kTile / 8; ++n)
    for (int e = 0; e < 4; ++e) s[n][e] = capped_raw_score(g + 8 * (e >> 1), 8 * n + 2 * q + (e & 1));
  float alpha[2];
  // scale_log2 (the uncapped multiplier) must not matter with the cap on: a NaN would show.
  cuda::scores_to_weights<kTile, false, true>(s, rows, keys, visible < kTile, 0, q, __int_as_float(0x7fc00000), capped,
                                              alpha);
  for (int n = 0; n < kTile / 8; ++n)
    for (int e = 0; e < 4; ++e) weights[(g + 8 * (e >> 1)) * kTile + 8 * n + 2 * q + (e & 1)] = s[n][e];
  if (q == 0) {
    maxes[g] = rows[0].m;
    maxes[g + 8] = rows[1].m;
  }
}

template <class Cap>
void check_capped_tile(const Cap& capped, float scale, float cap, int visible, const char* form) {
  DeviceBuffer<float> weights(kRows * kTile), maxes(kRows);  // NaN-filled: every value must be written
  capped_tile_kernel<<<1, 32>>>(capped, visible, weights.get(), maxes.get());
  TESSERA_TEST_CUDA(cudaGetLastError());
  const std::vector<float> w = weights.read(), m = maxes.read();
  for (int r = 0; r < kRows; ++r) {
    std::vector<double> t(kTile);
    double tmax = -INFINITY;
    for (int c = 0; c < kTile; ++c) {
      t[c] = cap * std::tanh(static_cast<double>(capped_raw_score(r, c)) * scale / cap) * 1.4426950408889634;
      if (c < visible) tmax = std::fmax(tmax, t[c]);
    }
    // A few float roundings of t (the factors, the product; the folded form's SFU tanh is within
    // ~5e-6 of t, the dividing form's tanhf 2 ulp) and exp2's.
    EXPECT_NEAR(m[r], tmax, 8e-6 * std::fabs(tmax) + 1e-6) << form << ", cap " << cap << ", row " << r;
    for (int c = 0; c < kTile; ++c) {
      const double want = c < visible ? std::exp2(t[c] - tmax) : 0.0;  // masked keys: exactly 0
      ASSERT_NEAR(w[r * kTile + c], want, 1e-4 * want + 1e-12)
          << form << ", cap " << cap << ", keys [0, " << visible << "), row " << r << ", key " << c;
    }
  }
}

TEST(SoftmaxFragment, SoftcapWeightsMatchTheDefinition) {
  const float scale = 0.08838834764831845f;  // 1 / sqrt(128)
  // 0.05: tanh saturated for most scores (|s scale / c| up to 70); 1.5 and 30: its curve; 1e4:
  // nearly linear. 128 keys visible, then 77 (the mask after the cap: masked keys weigh 0).
  for (int visible : {kTile, 77})
    for (float cap : {0.05f, 1.5f, 30.0f, 1e4f}) {
      check_capped_tile(cuda::SoftcapScore::make(scale, cap), scale, cap, visible, "folded");
      check_capped_tile(cuda::sm80::DividingSoftcap{scale, cap}, scale, cap, visible, "dividing");
    }
}

}  // namespace
}  // namespace tessera::testing
