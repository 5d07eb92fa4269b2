// Tile shapes and the shared-memory layout of the batch-attention kernel.
//
// A CTA has 4 warps and executes "units": (work item, block of packed query vectors). Packed
// vector n of an item is query row q_begin + n / group of its request, query head
// kv_head * group + n % group (the GQA group shares every K/V load).
//   KG = 1 (prefill shape): kRows = plan::packed_q_rows(D) packed vectors (128 at head_dim
//          <= 128, 64 at 256) in kMB m16 row blocks per warp: warp w owns vectors
//          [16w + 64 mb, 16w + 64 mb + 16) for mb < kMB, and all keys of each KV tile (FA2
//          split: no cross-warp reduction in the main loop). Both row blocks are computed
//          against every K/V tile the CTA loads once (docs/perf/mixed_batch.md, "Two Q tiles
//          per K/V pass"); a warp skips, per row block, a tile none of its rows can see.
//   KG = 4 (decode shape):  16 packed vectors (q_len x group <= 16), every warp computes all
//          of them against its own quarter of each KV tile (16 keys); the four partial
//          softmax states are merged through shared memory at the end.
// Both use mma.sync m16n8k16 (fp32 accumulation) for S = Q K^T and O += P V.
//
// Shared memory (bytes):   Q [kRows][D] 16-bit, swizzled
//                          stages x { K [kBlockN][D], V [kBlockN][D] } 16-bit, swizzled
//                          stages x { K row address | 1, V row address } [kBlockN]  (page-table
//                                   lookups, 16 bytes per token: load_kv_tile)
//                          stats: m, l [KG][kRows]; fin: inv_l, lse [kRows]; unit list [128]
// The fp32 reduction buffer of the epilogue, [KG][kRows][D + 8], aliases Q and the K/V stages
// (both dead by then; at 128 vectors x d128 it is larger than the two stages alone).
#pragma once

#include <cstdint>

#include "plan/batch_plan.h"

namespace tessera::cuda::batch {

template <int kHeadDim_, int kKG_>
struct Traits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kKG = kKG_;
  static_assert(kKG == 1 || kKG == 4, "KV split across warps: 1 or 4");
  static_assert(kHeadDim % 64 == 0, "the XOR swizzle needs rows of at least 8 16-byte chunks");
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRowGroups = kWarps / kKG;  // warps along packed query vectors
  // m16 row blocks per warp: the prefill shape covers plan::packed_q_rows(D) vectors.
  static constexpr int kMB = kKG == 1 ? plan::packed_q_rows(kHeadDim) / (16 * kRowGroups) : 1;
  static constexpr int kRows = 16 * kRowGroups * kMB;  // packed query vectors per unit
  static constexpr int kBlockN = 64;               // keys per KV tile
  static constexpr int kWarpN = kBlockN / kKG;     // keys of a tile one warp computes
  static constexpr int kChunks = kHeadDim / 8;     // 16-byte chunks per row
  // Pipeline depth: tiles in flight while one is computed (stages - 1).
  static constexpr int kStages = kKG == 1 ? (kHeadDim <= 64 ? 3 : 2) : (kHeadDim <= 64 ? 4 : (kHeadDim <= 128 ? 3 : 2));

  static constexpr int kQBytes = kRows * kHeadDim * 2;
  static constexpr int kTileBytes = kBlockN * kHeadDim * 2;  // one K or one V tile
  static constexpr int kStageBytes = 2 * kTileBytes;
  static constexpr int kRedStride = kHeadDim + 8;  // floats per row of the reduction buffer
  static constexpr int kRedBytes = kKG * kRows * kRedStride * 4;

  static constexpr int kOffQ = 0;
  static constexpr int kOffStages = kQBytes;
  static constexpr int kOffRowAddrs = kOffStages + kStages * kStageBytes;
  static constexpr int kOffStats = kOffRowAddrs + kStages * kBlockN * 16;
  static constexpr int kOffFin = kOffStats + 2 * kKG * kRows * 4;
  static constexpr int kOffUnits = kOffFin + 2 * kRows * 4;
  static constexpr int kSmemBytes = kOffUnits + kThreads * 4;

  static constexpr int kOffRed = 0;  // the epilogue buffer: over Q and the stages
  static_assert(kRedBytes <= kOffRowAddrs, "the epilogue buffer fits in Q and the K/V stages");
  static_assert(kMB >= 1 && kMB <= 2 && (kKG == 1 || kMB == 1), "one or two row blocks, prefill shape only");
  static_assert(kWarpN % 16 == 0, "P V k-steps of 16 keys");
  static_assert((kBlockN * kChunks) % kThreads == 0 && kThreads % kChunks == 0, "tile loads split evenly");
  static_assert(kStages >= 2 && kStages <= 8, "cp.async wait_group immediates");
};

// Kernel instances: which unit shapes one launch runs.
//   kDecodeOnly   decode-shaped units (layouts where no item can be larger);
//   kPrefillOnly  the others (head_dim 256, where a fused kernel would spill);
//   kFused        both, each unit on the path of its shape.
enum InstanceKind : int { kDecodeOnly = 0, kPrefillOnly = 1, kFused = 2 };

// Shared memory of an instance: the layout of its shape, or (fused) room for either, with the
// unit list past the data of both.
template <int kHeadDim, int kKind>
__host__ __device__ constexpr int units_offset() {
  constexpr int dec = Traits<kHeadDim, 4>::kOffUnits, pre = Traits<kHeadDim, 1>::kOffUnits;
  return kKind == kDecodeOnly ? dec : kKind == kPrefillOnly ? pre : (dec > pre ? dec : pre);
}
template <int kHeadDim, int kKind>
__host__ __device__ constexpr int instance_smem_bytes() {
  return units_offset<kHeadDim, kKind>() + Traits<kHeadDim, 4>::kThreads * 4;
}
// Resident CTAs per SM the instance is compiled for (__launch_bounds__): what shared memory
// allows at that head dim on sm_90 (decode.md), so ptxas may use up to 65536 / (128 x this)
// registers. Without it ptxas capped the fused head_dim 128 kernel at 168 and spilled.
template <int kHeadDim>
__host__ __device__ constexpr int min_ctas_per_sm() {
  return kHeadDim <= 64 ? 3 : (kHeadDim <= 128 ? 2 : 1);
}

// Element offset of (row, 16-byte chunk) in a tile of kChunks chunks per row. The chunk index
// is XORed with row % 8 so that the 8 rows an ldmatrix phase reads (same logical chunk) hit 8
// different 16-byte bank groups, as do the cp.async writes; rows stay contiguous.
template <int kChunks>
__device__ __forceinline__ int swizzle(int row, int chunk) {
  return row * (kChunks * 8) + ((chunk ^ (row & 7)) * 8);
}

}  // namespace tessera::cuda::batch
