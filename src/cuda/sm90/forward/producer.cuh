// The sm90 forward's producer warpgroup (kernel.cuh runs it on warpgroup 0, after giving its
// registers back with setmaxnreg): one thread takes the tiles, publishes each in the tile ring,
// and issues every TMA copy, running ahead of the consumers by up to kStages K/V tiles and into
// the next tile (its first K tile, then Q once the consumers have released that Q buffer: with
// two buffers, the one of the tile before this one, long done; with one, this one, each
// warpgroup's rows after its own epilogue has staged O in them). FP8 instances that transpose
// V in shared memory give warps 1-3 of the warpgroup that work (transpose_tiles).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/primitives/sm90/fence.cuh"
#include "cuda/primitives/sm90/mbarrier.cuh"
#include "cuda/primitives/sm90/shared_memory.cuh"
#include "cuda/primitives/sm90/tma.cuh"
#include "cuda/sm90/common/kv_tile_schedule.cuh"
#include "cuda/sm90/forward/forward_args.h"
#include "cuda/sm90/forward/fp8_operands.cuh"
#include "cuda/sm90/forward/kernel_traits.cuh"
#include "cuda/sm90/forward/smem_layout.cuh"
#include "cuda/sm90/forward/tile_coords.cuh"

namespace tessera::cuda::sm90 {

// FP8 V^T from the workspace (the pass of fp8_v_transpose.h, FwdArgs::vt_global): always in a
// V^T-only instance (the host launches it only then). Read where used (a value kept in a register
// across the kernel changed the other instances' SASS).
template <class Tr>
__device__ __forceinline__ bool vt_from_workspace(const FwdArgs& a) {
  return Tr::kVtOnly || (Tr::kFp8 && a.vt_global);
}

// One box of a tile: rank 4 (dense: column, row, head, sequence) or 3 (ragged: column, packed
// row, head).
__device__ __forceinline__ void load_box(std::uint32_t dst, const CUtensorMap* map, std::uint32_t bar, bool ragged,
                                         int col, int row, int head, int seq) {
  if (ragged) tma_load_3d(dst, map, bar, col, row, head);
  else tma_load_4d(dst, map, bar, col, row, head, seq);
}

// The TMA thread (thread 0 of the CTA). kMasked, kTailRows: the kernel's (kernel.cuh).
template <bool kMasked, bool kTailRows, class Tr>
__device__ __forceinline__ void produce_tiles(const FwdArgs& a, const FwdSmem<Tr>& sm) {
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, S = Tr::kStages;
  constexpr int QB = Tr::kQBuffers, QG = Tr::kQGroups, W = Tr::kConsumerWarpgroups, kSlots = Tr::kTileSlots;
  constexpr bool kSplit = Tr::kSplit;
  const int num_tiles = a.num_tiles;
  const bool ragged = a.cu_seqlens_q != nullptr;
  auto vt_global = [&] { return vt_from_workspace<Tr>(a); };
  prefetch_tensor_map(&a.map_q);
  prefetch_tensor_map(&a.map_k);
  if (vt_global()) prefetch_tensor_map(&a.map_vt);
  else prefetch_tensor_map(&a.map_v);
  int it = 0;       // K/V tiles loaded so far (ring position)
  int q_round = 0;  // Q tiles loaded so far
  // The tile after `tile`: a static stride, or the next index of the launch's counter
  // (dynamic: whichever CTA is free takes the next tile, in index order, as a grid of one
  // CTA per tile would be scheduled, without a CTA launch per tile).
  // 64-bit sums clamped to num_tiles: no int overflow near the end of a large tile space.
  // The tail-row launch of a pair (launch.cu) takes every tile from the counter, its first
  // included: its CTAs start at different times (on the SMs the whole blocks' last round
  // frees), and a fixed first tile would wait for its CTA to start.
  auto next_tile = [&](int tile) {
    const long long next = a.tile_counter == nullptr
                               ? static_cast<long long>(tile) + gridDim.x
                               : static_cast<long long>(kTailRows ? 0u : gridDim.x) + atomicAdd(a.tile_counter, 1u);
    return static_cast<int>(next < num_tiles ? next : num_tiles);
  };
  // q_round (one Q load per tile) is also the tile ring's position.
  for (int tile = kTailRows && a.tile_counter != nullptr ? next_tile(0) : static_cast<int>(blockIdx.x);;) {
    TileCoords tc;
    [[maybe_unused]] TileOrigin o;
    if constexpr (Tr::kOriginInSlot) {
      while (tile < num_tiles && !(tc = tile_coords_at<BM, BN, kMasked, kSplit>(a, o = tile_origin<BM, kSplit, kTailRows, false>(a, tile))).active)
        tile = next_tile(tile);
    } else {
      while (tile < num_tiles && !(tc = tile_coords<BM, BN, kMasked, kSplit, kTailRows, false>(a, tile)).active) tile = next_tile(tile);
    }
    mbarrier_wait_parity(sm.tile_empty(q_round % kSlots), ((q_round / kSlots) & 1) ^ 1);
    if constexpr (Tr::kOriginInSlot) {
      st_shared_v4_u32(sm.tile_slot(q_round % kSlots), tile < num_tiles ? tile : num_tiles, o.m0, o.head, o.seq);
      if constexpr (kSplit) st_shared_v4_u32(sm.tile_slot(q_round % kSlots) + 16u, o.split, o.part, 0, 0);
    } else {
      st_shared_u32(sm.tile_slot(q_round % kSlots), static_cast<std::uint32_t>(tile < num_tiles ? tile : num_tiles));
    }
    mbarrier_arrive(sm.tile_full(q_round % kSlots));  // release: the readers see the slot's value
    if (tile >= num_tiles) break;
    // Only what the loads need stays live (the producer runs on kProducerRegs registers).
    const int h_kv = tc.head / a.group, head = tc.head, seq = tc.seq, q_row = tc.q_row0 + tc.m0;
    const int k_row = tc.k_row0 + tc.n_begin * BN, n_tiles = tc.n_tiles;
    auto load_q = [&] {
      const int qb = q_round % QB;
      // kQBoxRows-row boxes; with one Q buffer warpgroup by warpgroup (pingpong usually
      // gives them back in that order; any order is correct). Tail rows: the tile's first
      // 64 rows (the only ones inside the sequence) into every warpgroup's part.
#pragma unroll
      for (int wg = 0; wg < W; ++wg) {
        if (QG > 1 || wg == 0) {
          mbarrier_wait_parity(sm.q_empty(qb, wg), ((q_round / QB) & 1) ^ 1);
          mbarrier_arrive_expect_tx(sm.q_full(qb, wg), Tr::kQBytes / QG);
        }
#pragma unroll
        for (int p = 0; p < Tr::kPanels; ++p)
          load_box(sm.q(qb) + p * Tr::kQPanelBytes + kQBoxRows * 128u * wg, &a.map_q, sm.q_full(qb, wg), ragged,
                   Tr::kPanelCols * p, q_row + (kTailRows ? 0 : kQBoxRows * wg), head, seq);
      }
      ++q_round;
    };
    auto load_k = [&](int i) {
      const int stage = ring_stage<S>(it);
      mbarrier_wait_parity(sm.k_empty(stage), ring_phase<S>(it) ^ 1);  // round 0 passes at once
      mbarrier_arrive_expect_tx(sm.k_full(stage), Tr::kKVTileBytes);
#pragma unroll
      for (int p = 0; p < Tr::kPanels; ++p)
        load_box(sm.k(stage) + p * Tr::kKVPanelBytes, &a.map_k, sm.k_full(stage), ragged, Tr::kPanelCols * p,
                 k_row + i * BN, h_kv, seq);
    };
    // The first K tile goes before Q: it needs no epilogue to have finished.
    if (n_tiles > 0) load_k(0);
    load_q();
    for (int i = 0; i < n_tiles; ++i, ++it) {
      const int stage = ring_stage<S>(it);
      const std::uint32_t parity = ring_phase<S>(it) ^ 1;  // round 0 passes at once
      const int row = k_row + i * BN;
      if (i > 0) load_k(i);
      if constexpr (Tr::kFp8) {
        if (vt_global()) {  // V^T ready in global memory: straight into the P V operand's stage
          mbarrier_wait_parity(sm.vt_empty(stage), parity);
          mbarrier_arrive_expect_tx(sm.vt_full(stage), Tr::kVtTileBytes);
          tma_load_4d(sm.vt(stage), &a.map_vt, sm.vt_full(stage), row, 0, h_kv, seq);
          continue;
        }
      }
      mbarrier_wait_parity(sm.v_empty(stage), parity);
      mbarrier_arrive_expect_tx(sm.v_full(stage), Tr::kKVTileBytes);
#pragma unroll
      for (int p = 0; p < Tr::kPanels; ++p)
        load_box(sm.v(stage) + p * Tr::kKVPanelBytes, &a.map_v, sm.v_full(stage), ragged, Tr::kPanelCols * p, row, h_kv, seq);
    }
    tile = next_tile(tile);
  }
}

// Warps 1-3 of FP8 instances that transpose V in shared memory (Tr::kTransposing): V -> V^T for
// every K/V tile, in the order the TMA thread loads them; with V^T from the workspace they only
// keep up with the tile ring.
template <bool kMasked, bool kTailRows, class Tr>
__device__ __forceinline__ void transpose_tiles(const FwdArgs& a, const FwdSmem<Tr>& sm) {
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, S = Tr::kStages;
  constexpr bool kSplit = Tr::kSplit;
  const int num_tiles = a.num_tiles;
  const int lane = threadIdx.x % 32;
  int it = 0;
  for (int r = 0;; ++r) {
    TileOrigin o;
    const int tile = sm.template read_tile<kSplit>(r, lane, o);
    if (tile >= num_tiles) break;
    if (a.vt_global) continue;  // the producer loads V^T: only the tile ring to keep up with
    const TileCoords tc = ring_tile_coords<BM, BN, kMasked, kSplit, kTailRows, Tr::kOriginInSlot>(a, tile, o);
    for (int i = 0; i < tc.n_tiles; ++i, ++it) {
      const int stage = ring_stage<S>(it);
      const std::uint32_t parity = ring_phase<S>(it);
      mbarrier_wait_parity(sm.v_full(stage), parity);
      mbarrier_wait_parity(sm.vt_empty(stage), parity ^ 1);
      transpose_v_tile<Tr>(sm.v(stage), sm.vt(stage),
                           threadIdx.x / 32 - 1, Tr::kTransposeWarps, lane);
      fence_proxy_async_shared_cta();  // wgmma reads V^T through the async proxy
      __syncwarp();
      if (lane == 0) {
        mbarrier_arrive(sm.vt_full(stage));
        mbarrier_arrive(sm.v_empty(stage));
      }
    }
  }
}

}  // namespace tessera::cuda::sm90
