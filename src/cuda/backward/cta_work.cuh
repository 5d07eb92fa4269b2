// What one backward main-kernel CTA works on, shared by the sm80 and the sm90 main kernels:
// the CTA (blockIdx.x = KV tile j, blockIdx.y = kv head x group split, blockIdx.z = sequence; x
// and y swapped in the sm80 kernel's tile-major order, below)
// owns KV rows [kv0, kv1) of its sequence and walks the query tiles [it0, it1) whose visible
// keys meet them, for heads_per_split query heads. The deterministic mode's counters (the
// lock index and the expected arrival count, from tile_keys) rely on both kernels walking
// exactly these tiles, hence one definition.
#pragma once

#include <cstdint>

#include "cuda/backward/backward_args.h"
#include "math/mask.h"

namespace tessera::cuda::backward {

template <int Br>
struct CtaWork {
  int q_len, k_len;
  std::int64_t q_row0, k_row0;  // first row of the sequence in the tensors' row index
  std::int64_t q_gr0, k_gr0;    // first row of the sequence in the packed (ragged or b x seq) rows
  int kv0, kv1;                 // the CTA's KV rows
  math::MaskSpec mask;
  int it0, it1, n_tiles;        // query tiles [it0, it1)
  int n_items;                  // (query head, query tile) pairs: n_tiles x heads_per_split
  int h0;                       // first query head

  // Keys visible to some row of query tile `it`.
  __device__ __forceinline__ math::KeyRange tile_keys(int it) const {
    const int r0 = it * Br;
    return math::visible_keys_of_rows(mask, r0, min(r0 + Br, q_len));
  }
};

// The CTA order, a compile-time choice of the sm80 kernel (the sm90 kernel has only the first):
// kTileMajor = false: grid (kv tiles, heads_kv * n_splits, batch), a (sequence, kv head) pair's
// KV tiles dispatched together; true: grid (heads_kv * n_splits, kv tiles, batch), the same CTAs
// with the kv head fastest, so within a sequence every kv head's KV tile 0 is dispatched, then
// every KV tile 1, ...: under a causal mask the heaviest CTAs go first. Both are plain blockIdx
// reads (a runtime select between the components spilled 8 B at 255 registers: ptxas keeps the
// selected value live instead of re-reading the special register). The deterministic mode's wait
// for KV tile j - 1 of the same (sequence, kv head x split) is safe in both: that CTA precedes
// this one in the linear order.
template <bool kTileMajor>
__device__ __forceinline__ unsigned cta_kv_tile() { return kTileMajor ? blockIdx.y : blockIdx.x; }
template <bool kTileMajor>
__device__ __forceinline__ unsigned cta_head_split() { return kTileMajor ? blockIdx.x : blockIdx.y; }

// Fills `w` for this CTA; false when its KV tile lies past the sequence (ragged grids are sized
// by the longest one): CTA-uniform, the caller returns.
template <int Bc, int Br, bool kTileMajor = false>
__device__ __forceinline__ bool cta_work(const BwdArgs& p, CtaWork<Br>& w) {
  const int b = blockIdx.z;
  const int hkv = cta_head_split<kTileMajor>() / p.n_splits, split = cta_head_split<kTileMajor>() % p.n_splits;
  w.q_len = p.seq_q;
  w.k_len = p.seq_k;
  w.q_row0 = 0;
  w.k_row0 = 0;
  w.q_gr0 = static_cast<std::int64_t>(b) * p.seq_q;
  w.k_gr0 = static_cast<std::int64_t>(b) * p.seq_k;
  if (p.cu_seqlens_q != nullptr) {
    w.q_row0 = p.cu_seqlens_q[b];
    w.q_len = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
    w.k_row0 = p.cu_seqlens_k[b];
    w.k_len = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    w.q_gr0 = w.q_row0;
    w.k_gr0 = w.k_row0;
  }
  w.kv0 = static_cast<int>(cta_kv_tile<kTileMajor>()) * Bc;
  if (w.kv0 >= w.k_len) return false;
  w.kv1 = min(w.kv0 + Bc, w.k_len);
  w.mask = math::MaskSpec::make(w.q_len, w.k_len, p.causal, p.window_left, p.window_right);
  // Both bounds of a tile's visible-key union grow with the tile index, so the tiles meeting
  // [kv0, kv1) are one range, found by bisection.
  const int n_qt = (w.q_len + Br - 1) / Br;
  int lo = 0, hi = n_qt;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (w.tile_keys(mid).end > w.kv0) hi = mid; else lo = mid + 1;
  }
  w.it0 = lo;
  hi = n_qt;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (w.tile_keys(mid).begin >= w.kv1) hi = mid; else lo = mid + 1;
  }
  w.it1 = lo;
  w.n_tiles = w.it1 - w.it0;
  w.n_items = w.n_tiles > 0 ? w.n_tiles * p.heads_per_split : 0;
  w.h0 = hkv * p.group + split * p.heads_per_split;
  return true;
}

}  // namespace tessera::cuda::backward
