// Tile shapes of the sm80 forward per head dim, and the swizzled shared-memory layout.
//
// A CTA owns BLOCK_M = kWarps * kRowsPerWarp query rows; warp w owns rows
// [kRowsPerWarp * w, kRowsPerWarp * (w + 1)) as kRowAtoms m16 atoms and never exchanges
// partial results with another warp (FA2 split: warps split Q, not K). With two atoms per
// warp every K/V fragment loaded from smem feeds two mmas, halving K/V smem traffic per FLOP.
// K and V tiles of BLOCK_N keys stream through one buffer each (see mainloop.cuh).
//   head_dim 64 : 128 x 128 tiles, 4 warps x 32 rows, smem (128 + 2*128) * 64 * 2 = 48 KB, 2 CTAs/SM
//   head_dim 128: 128 x  64 tiles, 4 warps x 32 rows, smem (128 + 2*64) * 128 * 2 = 64 KB, 2 CTAs/SM
//   head_dim 256: 128 x  64 tiles, 8 warps x 16 rows, smem (128 + 2*64) * 256 * 2 = 128 KB, 1 CTA/SM
// Registers per thread hold the warp's S tile (kRowAtoms * BLOCK_N / 2 floats) and O
// (kRowAtoms * head_dim / 2 floats).
#pragma once

#include <cstdint>

namespace tessera::cuda::sm80 {

template <int kHeadDim_>
struct FwdTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static_assert(kHeadDim % 64 == 0, "the XOR swizzle needs rows of at least 8 16-byte chunks");
  // head_dim <= 128: 4 warps x 2 atoms (32 rows), O + S fit 255 registers, two CTAs (8 warps)
  // per SM. head_dim 256: O alone is 128 registers per atom, so 8 warps x 1 atom, one CTA.
  static constexpr int kRowAtoms = kHeadDim <= 128 ? 2 : 1;
  static constexpr int kRowsPerWarp = 16 * kRowAtoms;
  static constexpr int kWarps = kHeadDim <= 128 ? 4 : 8;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMinBlocks = kHeadDim <= 128 ? 2 : 1;
  static constexpr int kBlockM = kRowsPerWarp * kWarps;
  static constexpr int kBlockN = kHeadDim == 64 ? 128 : 64;
  static constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row of 16-bit elements
  static constexpr int kSmemElems = (kBlockM + 2 * kBlockN) * kHeadDim;
  // Q, K, V tiles, then each thread's 2 * kRowAtoms visible key ranges and its warp's fully
  // visible range (8 bytes each; see kernel.cuh).
  static constexpr int kKeysOffset = kSmemElems * 2;
  // Then each thread's K and V base pointers (8 bytes each).
  static constexpr int kPtrsOffset = kKeysOffset + kThreads * (kRowAtoms * 2 + 1) * 8;
  static constexpr int kSmemBytes = kPtrsOffset + kThreads * 2 * 8;
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
