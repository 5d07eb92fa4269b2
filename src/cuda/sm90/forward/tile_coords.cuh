// Which tile of work a tile index names in the sm90 forward (kernel.cuh), and the K/V tiles its
// rows see.
#pragma once

#include "cuda/sm90/forward/forward_args.h"
#include "math/mask.h"
#include "math/ragged_tiles.h"

namespace tessera::cuda::sm90 {

// One tile of work: kBlockM query rows of one head of one sequence, and the K/V tiles its rows
// see. Query blocks are numbered fastest, so that the CTAs of a wave work on the same few heads
// and share their K/V in L2 (numbering heads fastest measured 5-13% slower on the H200: a wave
// then streams the K/V of many heads, more than L2 holds); within a head the last query block,
// which sees the most keys under a causal mask, comes first.
struct TileCoords {
  int m0 = 0;        // first query row (sequence-relative)
  int head = 0;
  int seq = 0;
  int q_row0 = 0;    // packed row of the sequence's first query (0 for dense)
  int q_len = 0;
  int k_row0 = 0;
  int k_len = 0;
  int n_begin = 0;   // first K tile
  int n_tiles = 0;   // K tiles visited (0: every row of the tile sees nothing)
  bool active = false;  // false: the tile lies past its sequence (ragged), skip it
  int split = -1;    // kSplit: the split tile's index j (its parts' workspace slots), else -1
  int part = 0;      // which of the split tile's split_parts parts of its K/V tiles
};

// n / d and n % d by a divisor of the launch: by its multiply-high (kFast) or by nvcc's
// division. The producer divides the slow way: it runs ahead of the consumers, and on its 24
// registers (head_dim 64) the fast divisor's two extra values spilled.
template <bool kFast>
__device__ __forceinline__ int2 divide(const math::FastDivisor& f, int n) {
  const int q = kFast ? f.div(n) : n / f.divisor;
  return make_int2(q, f.rem(n, q));
}

// kSplit: the launch may split its last round's tiles (FwdArgs::split_begin); dense only.
// kTailRows: tile t is the last query block of (head, sequence) t (the tail-row instance).
// kFast: divide by the launch's fast divisors (see divide).
template <int BM, int BN, bool kMasked, bool kSplit = false, bool kTailRows = false, bool kFast = true>
__device__ __forceinline__ TileCoords tile_coords(const FwdArgs& a, int tile) {
  TileCoords c;
  if constexpr (kSplit) {
    if (tile >= a.split_begin) {
      const int v = tile - a.split_begin;
      c.split = v / a.split_parts;
      c.part = v % a.split_parts;
      tile = a.split_begin + c.split;
    }
  }
  const int2 by_block = divide<kFast>(a.m_blocks_div, tile);  // (head, sequence), query block from the end
  const int head_seq = kTailRows ? tile : by_block.x;
  const int m_block = kTailRows ? a.m_blocks - 1 : a.m_blocks - 1 - by_block.y;
  if (!a.ragged_virtual) c.m0 = m_block * BM;  // (a virtual block index times BM may not fit an int)
  const int2 by_head = divide<kFast>(a.heads_div, head_seq);
  c.seq = by_head.x;
  c.head = by_head.y;
  c.q_len = a.seq_q;
  c.k_len = a.seq_k;
  if (a.cu_seqlens_q != nullptr) {
    if (a.ragged_virtual) {  // m_block is a virtual block over every sequence (math/ragged_tiles.h)
      const math::RaggedBlock rb = math::ragged_block(a.cu_seqlens_q, a.batch, BM, m_block);
      c.head = head_seq;
      c.seq = rb.seq;
      c.m0 = rb.block * BM;
      if (!rb.active) return c;  // a gap block between two sequences (active stays false)
    }
    c.q_row0 = a.cu_seqlens_q[c.seq];
    c.q_len = a.cu_seqlens_q[c.seq + 1] - c.q_row0;
    c.k_row0 = a.cu_seqlens_k[c.seq];
    c.k_len = a.cu_seqlens_k[c.seq + 1] - c.k_row0;
  }
  c.active = c.m0 < c.q_len;
  math::KeyRange keys{0, c.k_len};
  if constexpr (kMasked) {
    const math::MaskSpec spec = math::MaskSpec::make(c.q_len, c.k_len, a.causal, a.window_left, a.window_right);
    keys = math::visible_keys_of_rows<true>(spec, c.m0, min(c.m0 + BM, c.q_len));  // 32-bit: a shorter chain
  }
  c.n_begin = keys.begin / BN;
  c.n_tiles = keys.empty() ? 0 : (keys.end + BN - 1) / BN - c.n_begin;
  if constexpr (kSplit) {
    if (c.split >= 0) {
      // Part h: K/V tiles [n h / k, n (h + 1) / k); a part may have none (fewer K/V tiles than
      // parts): O = 0, LSE = -inf, which the merge ignores.
      const int first = c.n_tiles * c.part / a.split_parts, end = c.n_tiles * (c.part + 1) / a.split_parts;
      c.n_begin += first;
      c.n_tiles = end - first;
    }
  }
  return c;
}

// tile_coords in two halves: tile_coords_at(a, tile_origin(a, t)) gives tile_coords(a, t).
// The origin (first query row, head, sequence, a split tile's part) is the costly half: integer
// divisions and, for ragged launches, the search over cu_seqlens. Where the kernel publishes it
// in the tile ring (producer.cuh, smem_layout.cuh: Tr::kOriginInSlot), the producer computes it
// once for every warp.
// (tile_coords itself stays one function: written as these two halves, ptxas allocated the
// other instances differently and one of them spilled; with the common second half as one shared
// helper called by both, the unmasked d64 instances spilled 16 B (nvcc 13.0, twenty-sixth
// session), so the second half is written twice. The forward's GPU tests cover both forms:
// every masked two-warpgroup instance goes through the halves.)
struct TileOrigin {
  int m0 = 0;
  int head = 0;
  int seq = 0;
  int split = -1;
  int part = 0;
  bool active = true;  // false: a ragged launch's gap block between two sequences
};
template <int BM, bool kSplit = false, bool kTailRows = false, bool kFast = true>
__device__ __forceinline__ TileOrigin tile_origin(const FwdArgs& a, int tile) {
  TileOrigin o;
  if constexpr (kSplit) {
    if (tile >= a.split_begin) {
      const int v = tile - a.split_begin;
      o.split = v / a.split_parts;
      o.part = v % a.split_parts;
      tile = a.split_begin + o.split;
    }
  }
  const int2 by_block = divide<kFast>(a.m_blocks_div, tile);  // (head, sequence), query block from the end
  const int head_seq = kTailRows ? tile : by_block.x;
  const int m_block = kTailRows ? a.m_blocks - 1 : a.m_blocks - 1 - by_block.y;
  if (!a.ragged_virtual) o.m0 = m_block * BM;  // (a virtual block index times BM may not fit an int)
  const int2 by_head = divide<kFast>(a.heads_div, head_seq);
  o.seq = by_head.x;
  o.head = by_head.y;
  if (a.cu_seqlens_q != nullptr && a.ragged_virtual) {
    // m_block is a virtual block over every sequence (math/ragged_tiles.h).
    const math::RaggedBlock rb = math::ragged_block(a.cu_seqlens_q, a.batch, BM, m_block);
    o.head = head_seq;
    o.seq = rb.seq;
    o.m0 = rb.block * BM;
    o.active = rb.active;
  }
  return o;
}

// The rest, from the origin: the sequence's rows and lengths, and the K/V tiles the tile's rows
// see (for a split tile, its part's share of them).
template <int BM, int BN, bool kMasked, bool kSplit = false>
__device__ __forceinline__ TileCoords tile_coords_at(const FwdArgs& a, const TileOrigin& o) {
  TileCoords c;
  c.m0 = o.m0;
  c.head = o.head;
  c.seq = o.seq;
  c.split = o.split;
  c.part = o.part;
  c.q_len = a.seq_q;
  c.k_len = a.seq_k;
  if (!o.active) return c;  // (active stays false)
  if (a.cu_seqlens_q != nullptr) {
    c.q_row0 = a.cu_seqlens_q[c.seq];
    c.q_len = a.cu_seqlens_q[c.seq + 1] - c.q_row0;
    c.k_row0 = a.cu_seqlens_k[c.seq];
    c.k_len = a.cu_seqlens_k[c.seq + 1] - c.k_row0;
  }
  c.active = c.m0 < c.q_len;
  math::KeyRange keys{0, c.k_len};
  if constexpr (kMasked) {
    const math::MaskSpec spec = math::MaskSpec::make(c.q_len, c.k_len, a.causal, a.window_left, a.window_right);
    keys = math::visible_keys_of_rows<true>(spec, c.m0, min(c.m0 + BM, c.q_len));  // 32-bit: a shorter chain
  }
  c.n_begin = keys.begin / BN;
  c.n_tiles = keys.empty() ? 0 : (keys.end + BN - 1) / BN - c.n_begin;
  if constexpr (kSplit) {
    if (c.split >= 0) {
      // Part h: K/V tiles [n h / k, n (h + 1) / k); a part may have none (fewer K/V tiles than
      // parts): O = 0, LSE = -inf, which the merge ignores.
      const int first = c.n_tiles * c.part / a.split_parts, end = c.n_tiles * (c.part + 1) / a.split_parts;
      c.n_begin += first;
      c.n_tiles = end - first;
    }
  }
  return c;
}

// The coordinates of a tile read from the tile ring (an active one: the producer skips others):
// from the origin the slot carried where it carries one (kOriginFromSlot), else from the index.
template <int BM, int BN, bool kMasked, bool kSplit, bool kTailRows, bool kOriginFromSlot>
__device__ __forceinline__ TileCoords ring_tile_coords(const FwdArgs& a, int tile, const TileOrigin& o) {
  if constexpr (kOriginFromSlot) return tile_coords_at<BM, BN, kMasked, kSplit>(a, o);
  else return tile_coords<BM, BN, kMasked, kSplit, kTailRows>(a, tile);
}

}  // namespace tessera::cuda::sm90
