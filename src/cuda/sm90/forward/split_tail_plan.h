// Which of a dense, unmasked sm90 forward launch's tiles (any dtype) run split over their K/V tiles, and in
// how many parts (host only; CPU-tested in tests/cpu/test_tail_plan.cpp). A persistent launch of
// `tiles` equal tiles on `ctas` CTAs runs ceil(tiles / ctas) rounds; the last one holds
// left = tiles mod ctas tiles. Run as k parts each (K/V tiles [n h / k, n (h + 1) / k)), they
// take ceil(left k / ctas) rounds of at most ceil(n / k) / n, and a merge kernel combines the parts
// (split_merge.cuh). A part costs about kMergeRoundsPerPart (x head_dim / 128 above d128) of a
// round over 16k keys (its fp32 rows written and read back, plus the launch: a cost per row, so
// relative to a round it scales with 16k / the tile's keys, kv_tiles x block_n; FP8's 128-key
// tiles: 128 / kv_tiles). The head-dim factor is measured,
// not derived: without it the model sent FP8 d256 16k's 100 left tiles to 5 parts (predicted
// 7.91 rounds instead of 8) and the call took 1.031 of the unsplit time (eighteenth session),
// while FP8 d128 4k in thirds took 0.951 (predicted 0.99-1.00). Bytes per round alone do not tell the
// two apart; the likely rest is the power cap: a last round on 100 of 132 SMs runs at a higher
// clock, so splitting it saves less time than SM-rounds. The plan takes the k in
// 1 .. kSplitMaxParts with the shortest last round plus part cost, if that saves at least
// kSplitMinSaving of a round:
//   FP8 d128 16k: 1376 tiles on 132 CTAs, 56 left: halves, 10.5 rounds instead of 11 (measured
//   0.975 of the unsplit time, seventeenth session; 7 parts would take 3 / 7 but cost 3.5x more);
//   FP8 d128 4k: 1408 tiles of 32 K/V tiles, 88 left: thirds (measured 0.951, eighteenth session);
//   FP8 d256 16k: 1024 tiles, 100 left: not split (five parts, 4 x 26 / 128 of a round plus 0.2
//   of part cost, save too little);
//   bf16 d128 16k: 2048 tiles, 68 left, 94 K/V tiles of 176 keys: five parts, 0.61 + 0.10;
//   bf16 d256 16k: 1024 tiles, 100 left, 205 K/V tiles of 80 keys: not split (five parts 0.80 +
//   0.20, as FP8 d256's, which measured 1.031; bf16 d256 in five parts read 1.004-1.041 in the
//   eighteenth session, when the cost was scaled by K/V tiles and took 0.12);
//   bf16 d64 4k: 2816 tiles of 192 rows, 44 left, 32 K/V tiles of 128 keys: thirds, 0.34 + 0.24
//   (now 22 of 192 keys: thirds; with 128-key tiles forced, the tail-row pair's whole blocks are
//   2688 tiles, 48 left: halves).
// (The part cost was fitted on FP8; at half FP8's rate a bf16 round is twice as long, so the
// 16-bit figures overstate it, leaning towards not splitting.)
#pragma once

namespace tessera::cuda::sm90 {

struct SplitTail {
  long long tiles = 0;  // the last `tiles` tiles are split (0: none)
  int parts = 1;
};

constexpr int kSplitMaxParts = 8;
// K/V tiles a tile needs before it is split: at least 8, and 2 per part (one K/V tile would leave
// a part empty; with fewer, a part saves less than its extra epilogue).
constexpr long long kSplitMinKvTiles = 8;
constexpr double kMergeRoundsPerPart = 0.02;  // per part at d128, in rounds of 128 K/V tiles (see above)
constexpr double kSplitMinSaving = 0.05;      // of a round

// kv_tiles: K/V tiles per tile (ceil(seq_k / kBlockN)) of block_n keys; head_dim: the instance's. forced_tiles:
// TESSERA_CUDA_FORWARD_SPLIT_TAIL's tile count (dispatch::forward_split_tail_override): -1 the
// rule above, 0 never, n >= 1 the last n tiles (capped at tiles) in forced_parts parts, whatever
// the shape (tests, A/Bs). A launch of one round (tiles <= ctas) is never split by the rule: its
// tiles are all in that round, and splitting them over K is the serving kernels' split-KV.
// Splitting changes the rounding of a row (each part rounds P to e4m3 / bf16 / fp16 against its own running
// max), and whether a tile is split depends on the launch's tile count: set
// TESSERA_CUDA_FORWARD_SPLIT_TAIL=0 where a row's bits must not depend on the batch.
inline SplitTail forward_split_tail(long long tiles, long long ctas, long long kv_tiles, int block_n, int head_dim,
                                    int forced_tiles, int forced_parts = 2) {
  if (tiles <= 0 || ctas <= 0) return {};
  if (forced_tiles >= 0) {
    if (forced_tiles == 0) return {};
    const int parts = forced_parts < 2 ? 2 : forced_parts > kSplitMaxParts ? kSplitMaxParts : forced_parts;
    return {forced_tiles < tiles ? forced_tiles : tiles, parts};
  }
  const long long left = tiles % ctas;
  if (tiles <= ctas || left == 0 || kv_tiles < kSplitMinKvTiles) return {};
  double best = 1.0;  // the last round unsplit
  int best_parts = 1;
  for (int k = 2; k <= kSplitMaxParts && kv_tiles >= 2LL * k; ++k) {
    // Rounds of parts, each as long as the largest part (parts differ by one K/V tile).
    const double rounds = static_cast<double>((left * k + ctas - 1) / ctas) *
                          static_cast<double>((kv_tiles + k - 1) / k) / static_cast<double>(kv_tiles);
    const double keys = static_cast<double>(kv_tiles) * static_cast<double>(block_n);
    const double t = rounds + kMergeRoundsPerPart * k * (16384.0 / keys) *
                                   (head_dim > 128 ? static_cast<double>(head_dim) / 128.0 : 1.0);
    if (t < best) {
      best = t;
      best_parts = k;
    }
  }
  if (best_parts == 1 || best > 1.0 - kSplitMinSaving) return {};
  return {left, best_parts};
}

}  // namespace tessera::cuda::sm90
