// Which of a dense, unmasked FP8 forward launch's tiles run split over their K/V tiles (host
// only; CPU-tested in tests/cpu/test_tail_plan.cpp). A persistent launch of `tiles` equal tiles on
// `ctas` CTAs runs ceil(tiles / ctas) rounds; where its last round holds at most ctas / 2 tiles,
// those tiles run as two halves each (K/V tiles [0, n / 2) and [n / 2, n)), so the last round
// takes half as long, and a merge kernel combines the halves (split_merge.cuh). At 16k tokens
// FP8 d128 runs 1376 tiles on 132 CTAs: 10 rounds and 56 tiles, i.e. 10.5 rounds instead of 11.
#pragma once

namespace tessera::cuda::sm90 {

// Tiles of at least kSplitMinKvTiles K/V tiles each: with fewer, halving a tile saves less than
// the halves' extra epilogue, the workspace round trip and the merge launch cost (one K/V tile:
// half 0 would be empty). A launch of one round (tiles <= ctas) is left alone: its tiles are
// all in that round, and splitting them over K is the serving kernels' split-KV, not this.
// Splitting changes the rounding of a row (each half rounds P to e4m3 against its own running
// max), and whether a tile is in the split tail depends on the launch's tile count: set
// TESSERA_CUDA_FORWARD_SPLIT_TAIL=0 where a row's bits must not depend on the batch.
constexpr long long kSplitMinKvTiles = 8;

// kv_tiles: K/V tiles per tile (ceil(seq_k / kBlockN)). forced: TESSERA_CUDA_FORWARD_SPLIT_TAIL
// (dispatch::forward_split_tail_override): -1 the rule above, 0 never, n >= 1 the last n tiles of
// any dense unmasked FP8 launch (capped at tiles; tests, A/Bs).
inline long long forward_split_tail(long long tiles, long long ctas, long long kv_tiles, int forced) {
  if (tiles <= 0 || ctas <= 0) return 0;
  if (forced >= 0) return forced < tiles ? forced : tiles;
  const long long left = tiles % ctas;
  return tiles > ctas && left > 0 && 2 * left <= ctas && kv_tiles >= kSplitMinKvTiles ? left : 0;
}

}  // namespace tessera::cuda::sm90
