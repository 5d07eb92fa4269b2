// Mainloop building blocks of the sm80 forward: tile loads (cp.async into swizzled smem) and
// the two warp-level GEMMs, S = Q K^T and O += P V, on mma.sync m16n8k16.
//
// Pipeline (one buffer each for K and V; the two alternate so that every load has a GEMM to
// hide behind):   wait K_j | issue V_j | S = Q K_j^T | wait V_j | issue K_j+1 | softmax | O += P V_j
#pragma once

#include <cstdint>

#include "cuda/primitives/sm80/cp_async.cuh"
#include "cuda/primitives/sm80/ldmatrix.cuh"
#include "cuda/primitives/sm80/mma.cuh"
#include "cuda/sm80/forward/kernel_traits.cuh"

namespace tessera::cuda::sm80 {

// Copies rows [0, kRows) of a (rows, head_dim) tile whose row r starts at g + r * row_stride
// into swizzled smem at `s`; rows >= rows_valid are zero-filled and never read, so a tile
// hanging over a sequence's end reads nothing past it (and zero K/V rows add no NaN).
template <typename Tr, int kRows, typename T>
__device__ __forceinline__ void load_tile_async(std::uint32_t s, const T* g, std::int64_t row_stride, int rows_valid,
                                                int tid) {
  constexpr int kPerThread = kRows * Tr::kChunks / Tr::kThreads;
#pragma unroll
  for (int it = 0; it < kPerThread; ++it) {
    const int idx = tid + it * Tr::kThreads;
    const int r = idx / Tr::kChunks;
    const int c = idx % Tr::kChunks;
    const bool valid = r < rows_valid;
    const T* src = valid ? g + r * row_stride + c * 8 : g;
    cp_async_16_zfill(s + 2u * static_cast<std::uint32_t>(swizzle<Tr::kChunks>(r, c)), src, valid);
  }
}

// acc[n][*] (n-tile n = keys 8n..8n+7 of the tile) = Q_w K^T for the warp's 16 query rows.
// sQ_warp: smem address of the warp's first Q row; sK: the K tile. Q fragments are re-read
// from smem each k-step (one ldmatrix.x4 per 2*kBlockN/8 mmas) to keep registers for S and O.
template <typename Tr, bool kBf16>
__device__ __forceinline__ void gemm_qk(float (&acc)[Tr::kBlockN / 8][4], std::uint32_t sQ_warp, std::uint32_t sK,
                                        int lane) {
#pragma unroll
  for (int n = 0; n < Tr::kBlockN / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  // A (Q, 16x16): matrices (rows 0-7, k lo), (rows 8-15, k lo), (rows 0-7, k hi), (rows 8-15, k hi).
  const int a_row = (lane & 7) + 8 * ((lane >> 3) & 1);
  const int a_chunk_hi = lane >> 4;
  // B (K rows = keys, d contiguous = mma "col"): (keys 0-7, k lo), (keys 0-7, k hi),
  // (keys 8-15, k lo), (keys 8-15, k hi) -> b0/b1 of n-tile 2p, then of n-tile 2p+1.
  const int b_row = (lane & 7) + 8 * (lane >> 4);
  const int b_chunk_hi = (lane >> 3) & 1;
#pragma unroll
  for (int kk = 0; kk < Tr::kHeadDim / 16; ++kk) {
    std::uint32_t a[4];
    ldmatrix_x4(a, sQ_warp + 2u * swizzle<Tr::kChunks>(a_row, 2 * kk + a_chunk_hi));
#pragma unroll
    for (int p = 0; p < Tr::kBlockN / 16; ++p) {
      std::uint32_t b[4];
      ldmatrix_x4(b, sK + 2u * swizzle<Tr::kChunks>(16 * p + b_row, 2 * kk + b_chunk_hi));
      mma_m16n8k16<kBf16>(acc[2 * p], a, b[0], b[1]);
      mma_m16n8k16<kBf16>(acc[2 * p + 1], a, b[2], b[3]);
    }
  }
}

// o[d][*] (d-tile d = dims 8d..8d+7) += P V, P given as packed 16-bit A fragments per k-step
// (p[t] covers keys 16t..16t+15). V rows are keys with d contiguous, so ldmatrix.trans yields
// the "col" B fragments: (keys lo, d-tile 2e), (keys hi, 2e), (keys lo, 2e+1), (keys hi, 2e+1).
template <typename Tr, bool kBf16>
__device__ __forceinline__ void gemm_pv(float (&o)[Tr::kHeadDim / 8][4], const std::uint32_t (&p)[Tr::kBlockN / 16][4],
                                        std::uint32_t sV, int lane) {
  const int v_row = (lane & 7) + 8 * ((lane >> 3) & 1);
  const int v_chunk_hi = lane >> 4;
#pragma unroll
  for (int t = 0; t < Tr::kBlockN / 16; ++t) {
#pragma unroll
    for (int e = 0; e < Tr::kHeadDim / 16; ++e) {
      std::uint32_t b[4];
      ldmatrix_x4_trans(b, sV + 2u * swizzle<Tr::kChunks>(16 * t + v_row, 2 * e + v_chunk_hi));
      mma_m16n8k16<kBf16>(o[2 * e], p[t], b[0], b[1]);
      mma_m16n8k16<kBf16>(o[2 * e + 1], p[t], b[2], b[3]);
    }
  }
}

}  // namespace tessera::cuda::sm80
