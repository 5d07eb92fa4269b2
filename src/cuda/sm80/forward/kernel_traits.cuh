// Tile shapes of the sm80 forward per head dim, and the swizzled shared-memory layout.
//
// A CTA owns BLOCK_M = 16 * kWarps query rows; warp w owns rows [16w, 16w + 16) and never
// exchanges partial results with another warp (FA2 split: warps split Q, not K).
// K and V tiles of BLOCK_N keys stream through one buffer each (see mainloop.cuh).
//   head_dim 64 : 128 x  64 tiles, 8 warps, smem (128 + 2*64) * 64 * 2   = 32 KB
//   head_dim 128: 128 x  64 tiles, 8 warps, smem (128 + 2*64) * 128 * 2 = 64 KB
//   head_dim 256: 128 x  64 tiles, 8 warps, smem (128 + 2*64) * 256 * 2 = 128 KB
// Registers per thread hold the warp's S tile (BLOCK_N / 2 floats) and O (head_dim / 2 floats).
#pragma once

#include <cstdint>

namespace tessera::cuda::sm80 {

template <int kHeadDim_>
struct FwdTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static_assert(kHeadDim % 64 == 0, "the XOR swizzle needs rows of at least 8 16-byte chunks");
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  // head_dim 64 fits 128 registers, so two CTAs (16 warps) share an SM; larger head dims keep
  // O in up to 128 registers and run one CTA of 8 warps per SM.
  static constexpr int kMinBlocks = kHeadDim <= 64 ? 2 : 1;
  static constexpr int kBlockM = 16 * kWarps;
  static constexpr int kBlockN = 64;
  static constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row of 16-bit elements
  static constexpr int kSmemElems = (kBlockM + 2 * kBlockN) * kHeadDim;
  static constexpr int kSmemBytes = kSmemElems * 2;
  static_assert((kBlockM * kChunks) % kThreads == 0 && (kBlockN * kChunks) % kThreads == 0,
                "tile loads split evenly over the CTA");
  static_assert(kBlockN % 16 == 0 && kHeadDim % 16 == 0, "mma k-steps of 16");
};

// Element offset of (row, 16-byte chunk) in a tile of kChunks chunks per row. The chunk index
// is XORed with row % 8 so that the 8 rows one ldmatrix phase reads (same logical chunk)
// land on 8 different 16-byte bank groups, as do cp.async writes; rows stay contiguous.
template <int kChunks>
__device__ __forceinline__ int swizzle(int row, int chunk) {
  return row * (kChunks * 8) + ((chunk ^ (row & 7)) * 8);
}

}  // namespace tessera::cuda::sm80
