// Where the sm90 forward keeps things in a CTA's shared memory (kernel_traits.cuh's offsets),
// as 32-bit shared addresses: the Q buffers, the K / V (/ V^T) ring, the P buffers, the
// mbarriers, and the tile ring the producer publishes its tiles in, with the readers' side of it.
// (32-bit shared addresses throughout: a generic pointer kept live through the loop cost spills.)
#pragma once

#include <cstdint>

#include "cuda/primitives/sm90/mbarrier.cuh"
#include "cuda/primitives/sm90/shared_memory.cuh"
#include "cuda/sm90/forward/tile_coords.cuh"

namespace tessera::cuda::sm90 {

template <class Tr>
struct FwdSmem {
  static constexpr int QB = Tr::kQBuffers;
  // Q tile r (the r-th this CTA loads) goes to buffer r % QB; its barriers' phase is r / QB.
  // With one Q buffer each consumer warpgroup's 64 rows have their own pair: a warpgroup's rows
  // of the next Q load as soon as it has staged and stored its own O there, under the other
  // warpgroups' last turns and epilogues, instead of after every warpgroup's epilogue. (With
  // two, the next Q loads under this tile anyway: one pair per buffer.)
  static constexpr int QG = Tr::kQGroups;  // Q barrier pairs per buffer: kConsumerWarpgroups or 1
  static constexpr int QBar = Tr::kQBarriers;
  static constexpr int S = Tr::kStages;
  // The tile ring: the producer thread publishes each tile it takes (the next by a static
  // stride, or from the launch's global counter) in slot r % 2: its index, and where
  // Tr::kOriginInSlot its origin (tile_coords.cuh: first row, head, sequence); every consumer
  // warp and transposing warp reads the slot and releases it. A tile index >= num_tiles ends
  // the walk. Readers given the origin derive the rest of the coordinates from it: recomputing
  // it from the index took a chain of divisions at the start of every tile (twenty-fifth
  // session's ncu of d64 causal 1k).
  static constexpr int kSlots = Tr::kTileSlots;
  static constexpr int kStageBars = (Tr::kFp8 ? 6 : 4) * S;  // the K/V (/ V^T) ring's
  static_assert(QBar + kStageBars + 2 * kSlots == Tr::kBarriers, "the barriers kernel_traits.cuh makes room for");

  std::uint32_t base;  // 1024-byte aligned (128-byte swizzle atoms and wgmma descriptors need it)
  std::uint32_t bars;  // the first mbarrier

  __device__ explicit FwdSmem(std::uint32_t base_) : base(base_), bars(base_ + Tr::kBarrierOffset) {}

  __device__ std::uint32_t q(int buf) const { return base + Tr::kQOffset + static_cast<std::uint32_t>(buf * Tr::kQBytes); }
  __device__ std::uint32_t k(int stage) const {
    return base + Tr::kKOffset + static_cast<std::uint32_t>(stage * Tr::kKVTileBytes);
  }
  __device__ std::uint32_t v(int stage) const {
    return base + Tr::kVOffset + static_cast<std::uint32_t>(stage * Tr::kKVTileBytes);
  }
  __device__ std::uint32_t vt(int stage) const {
    return base + Tr::kVtOffset + static_cast<std::uint32_t>(stage * Tr::kVtTileBytes);
  }
  // Consumer warpgroup wg's P buffer (kPInSmem).
  __device__ std::uint32_t p(int wg) const { return base + Tr::kPOffset + static_cast<std::uint32_t>(wg * Tr::kPBytes); }

  __device__ std::uint32_t q_full(int buf, int wg) const { return bars + 8u * (buf * QG + (QG == 1 ? 0 : wg)); }
  __device__ std::uint32_t q_empty(int buf, int wg) const {
    return bars + 8u * (QB * QG + buf * QG + (QG == 1 ? 0 : wg));
  }
  __device__ std::uint32_t k_full(int stage) const { return bars + 8u * (QBar + stage); }
  __device__ std::uint32_t k_empty(int stage) const { return bars + 8u * (QBar + S + stage); }
  __device__ std::uint32_t v_full(int stage) const { return bars + 8u * (QBar + 2 * S + stage); }
  __device__ std::uint32_t v_empty(int stage) const { return bars + 8u * (QBar + 3 * S + stage); }
  __device__ std::uint32_t vt_full(int stage) const { return bars + 8u * (QBar + 4 * S + stage); }
  __device__ std::uint32_t vt_empty(int stage) const { return bars + 8u * (QBar + 5 * S + stage); }
  __device__ std::uint32_t tile_full(int slot) const { return bars + 8u * (QBar + kStageBars + slot); }
  __device__ std::uint32_t tile_empty(int slot) const { return bars + 8u * (QBar + kStageBars + kSlots + slot); }
  __device__ std::uint32_t tile_slot(int slot) const {
    return base + Tr::kTileSlotOffset + static_cast<std::uint32_t>(Tr::kTileSlotBytes * slot);
  }

  // Readers' side: lane 0 of each warp waits for tile index r, reads it and gives the slot back
  // (one arrival per warp), then broadcasts it. The read and the release in one thread, in
  // program order: the arrive's release semantics alone order the read before the producer's
  // next write to the slot (with every lane reading, that order went through __syncwarp, which
  // compute-sanitizer racecheck does not model: it reported the slot as a race).
  // Returns the tile index; where the slot holds the tile's origin (Tr::kOriginInSlot), o gets it:
  // m0, head and sequence, and where the launch may split its tail (kSplit) the split tile's
  // index and part.
  template <bool kSplit>
  __device__ __forceinline__ int read_tile(int r, int lane, TileOrigin& o) const {
    if constexpr (Tr::kOriginInSlot) {
      uint4 w0 = {}, w1 = {};
      if (lane == 0) {
        mbarrier_wait_parity(tile_full(r % kSlots), (r / kSlots) & 1);
        w0 = ld_shared_v4_u32(tile_slot(r % kSlots));
        if constexpr (kSplit) w1 = ld_shared_v4_u32(tile_slot(r % kSlots) + 16u);
        mbarrier_arrive(tile_empty(r % kSlots));
      }
      // The warp reconverges here before the shuffles. Without it ptxas could not prove them
      // converged. It then guarded every later shuffle with a BRA.DIV check and gave up the
      // consumers' uniform registers: the masked d64 origin lost 2-4 % that way (twenty-sixth
      // session; forward_sm90.md, twenty-seventh session). scripts/sass_uniform.py checks it.
      __syncwarp();
      auto from_lane0 = [](unsigned v) { return static_cast<int>(__shfl_sync(0xffffffffu, v, 0)); };
      o.m0 = from_lane0(w0.y);
      o.head = from_lane0(w0.z);
      o.seq = from_lane0(w0.w);
      if constexpr (kSplit) {
        o.split = from_lane0(w1.x);
        o.part = from_lane0(w1.y);
      }
      return from_lane0(w0.x);
    } else {
      int tile = 0;
      if (lane == 0) {
        mbarrier_wait_parity(tile_full(r % kSlots), (r / kSlots) & 1);
        tile = static_cast<int>(ld_shared_u32(tile_slot(r % kSlots)));
        mbarrier_arrive(tile_empty(r % kSlots));
      }
      return __shfl_sync(0xffffffffu, tile, 0);
    }
  }
};

}  // namespace tessera::cuda::sm90
