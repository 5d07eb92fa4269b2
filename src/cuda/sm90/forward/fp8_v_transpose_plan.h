// Whether a dense FP8 forward call makes V^T by the pass of fp8_v_transpose.h (host only; CPU-
// tested in tests/cpu/test_tail_plan.cpp). The kernel's own transpose costs one shared-memory
// transpose of each K/V tile per query tile that visits it; the pass costs one read and one write
// of V, ~13 us at 16k tokens x 2048 columns on the H200 (eighteenth session; ~50 us before its
// stores were staged as whole rows). Visits per K/V tile and query head
// (fp8_query_tiles_per_kv_tile): every query tile (m_blocks) unmasked, about half of them under
// a causal mask, and under a window bounded on both sides only the query tiles that reach into
// it. Times the GQA group, that is the reuse. Measured with the ~13 us pass (bench/RESULTS.md,
// eighteenth session; time with the pass / without, both forced in one tree): d128 4k (reuse
// 22) 0.995, d128 4k causal (11) 1.005, d256 4k causal (16) 0.973; with the ~50 us pass
// (seventeenth session) d128 16k (86, causal ~43) 0.971 / 0.996, d256 16k (128, ~64) 0.938 /
// 0.960, d256 4k (32) 0.960, and 1k (6-8) 1.24-1.32. The pass runs where the reuse is at least
// kFp8VtMinReuse, which takes every winner of those and no loser. At head_dim 256 the pass's
// launches run the V^T-only instance (overlapped schedule, ~5 % faster than the serial one the
// kernel's own transpose needs), so the pass pays at lower reuse there: d256 1k (8) 0.973-0.983,
// d256 1k causal (4) 1.05 (nineteenth session, both forced in one build): kFp8VtMinReuseD256.
#pragma once

namespace tessera::cuda::sm90 {

constexpr long long kFp8VtMinReuse = 16;
constexpr long long kFp8VtMinReuseD256 = 8;

// Query tiles of block_m rows that visit one K/V tile of block_n keys, on average. window_left /
// window_right: the keys a row sees to its left / right (-1: unbounded); causal bounds the right
// at 0 (bottom-right aligned; the alignment does not change the count).
inline long long fp8_query_tiles_per_kv_tile(long long m_blocks, long long block_m, long long block_n, bool causal,
                                            long long window_left, long long window_right) {
  const long long right = causal ? 0 : window_right;
  if (window_left >= 0 && right >= 0) {  // a band: the query tiles whose rows reach the tile
    const long long band = (window_left + right + block_n + block_m - 1) / block_m + 1;
    return band < m_blocks ? band : m_blocks;
  }
  if (causal || window_left >= 0 || window_right >= 0) return (m_blocks + 1) / 2;  // one side open: a triangle
  return m_blocks;
}

inline bool fp8_v_transpose_pays(long long query_tiles_per_kv_tile, long long group, int head_dim) {
  return query_tiles_per_kv_tile * group >= (head_dim >= 256 ? kFp8VtMinReuseD256 : kFp8VtMinReuse);
}

}  // namespace tessera::cuda::sm90
