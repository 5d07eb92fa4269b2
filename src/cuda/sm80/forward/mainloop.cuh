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
// Thread tid always copies chunk tid % kChunks of rows tid / kChunks + i * (kThreads / kChunks);
// those rows share row % 8, so the swizzled smem offsets differ by constants.
template <typename Tr, int kRows, typename T>
__device__ __forceinline__ void load_tile_async(std::uint32_t s, const T* g, std::int64_t row_stride, int rows_valid,
                                                int tid) {
  constexpr int kRowsPerPass = Tr::kThreads / Tr::kChunks;
  static_assert(Tr::kThreads % Tr::kChunks == 0 && kRowsPerPass % 8 == 0, "passes keep row % 8");
  const int r0 = tid / Tr::kChunks;
  const int c = tid % Tr::kChunks;
  const std::uint32_t s0 = s + 2u * static_cast<std::uint32_t>(swizzle<Tr::kChunks>(r0, c));
  const T* g0 = g + r0 * row_stride + c * 8;
#pragma unroll
  for (int it = 0; it < kRows / kRowsPerPass; ++it) {
    const int r = r0 + it * kRowsPerPass;
    const bool valid = r < rows_valid;
    const T* src = valid ? g0 + static_cast<std::int64_t>(it * kRowsPerPass) * row_stride : g;
    cp_async_16_zfill(s0 + 2u * (it * kRowsPerPass * Tr::kHeadDim), src, valid);
  }
}

// Per-lane ldmatrix addresses of a swizzled tile. Lane l reads row `row` (its row inside a
// 16-row block) and logical chunk 2k + hi of k-step k. Because row % 8 = l % 8 for every
// 16-row block and the XOR touches only the chunk's low 3 bits, the physical chunk of k-step
// k is 8 * (k / 4) + ((2 * (k % 4) + hi) ^ (l % 8)): four base addresses per tile, and every
// other address is one of them plus a compile-time offset (no per-step address registers).
struct FragAddrs {
  std::uint32_t base[4];
  template <int kHeadDim>
  __device__ __forceinline__ void init(std::uint32_t tile, int row, int hi, int lane) {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      base[j] = tile + 2u * row * kHeadDim + 16u * static_cast<std::uint32_t>((2 * j + hi) ^ (lane & 7));
  }
  // Address of (16-row block `block`, k-step `k`), for rows of kHeadDim 16-bit elements.
  template <int kHeadDim>
  __device__ __forceinline__ std::uint32_t at(int block, int k) const {
    return base[k % 4] + 2u * (16 * block * kHeadDim) + 128u * (k / 4);
  }
};

// A (Q, 16x16 per k-step): matrices (rows 0-7, k lo), (rows 8-15, k lo), (rows 0-7, k hi),
// (rows 8-15, k hi). The same lane pattern reads V with .trans: (keys 0-7, d-tile 2e),
// (keys 8-15, 2e), (keys 0-7, 2e+1), (keys 8-15, 2e+1) = b0/b1 of d-tiles 2e and 2e+1.
template <int kHeadDim>
__device__ __forceinline__ void init_a_addrs(FragAddrs& f, std::uint32_t tile, int lane) {
  f.init<kHeadDim>(tile, (lane & 7) + 8 * ((lane >> 3) & 1), lane >> 4, lane);
}
// B of S = Q K^T (K rows = keys with d contiguous, i.e. mma's "col" B): matrices
// (keys 0-7, k lo), (keys 0-7, k hi), (keys 8-15, k lo), (keys 8-15, k hi)
// = b0/b1 of n-tile 2p, then of n-tile 2p+1.
template <int kHeadDim>
__device__ __forceinline__ void init_k_addrs(FragAddrs& f, std::uint32_t tile, int lane) {
  f.init<kHeadDim>(tile, (lane & 7) + 8 * (lane >> 4), (lane >> 3) & 1, lane);
}

// acc[a][n][*] (atom a = warp rows 16a..16a+15, n-tile n = keys 8n..8n+7 of the tile)
// = Q_w K^T for the warp's kRowAtoms * 16 query rows. Each K fragment feeds kRowAtoms mmas.
// Q fragments are re-read from smem each k-step (one ldmatrix.x4 per atom and kBlockN/8
// mmas) so that registers stay free for S and O.
template <typename Tr, bool kBf16>
__device__ __forceinline__ void gemm_qk(float (&acc)[Tr::kRowAtoms][Tr::kBlockN / 8][4], const FragAddrs& qa,
                                        const FragAddrs& ka) {
#pragma unroll
  for (int a = 0; a < Tr::kRowAtoms; ++a)
#pragma unroll
    for (int n = 0; n < Tr::kBlockN / 8; ++n) acc[a][n][0] = acc[a][n][1] = acc[a][n][2] = acc[a][n][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < Tr::kHeadDim / 16; ++kk) {
    std::uint32_t qf[Tr::kRowAtoms][4];
#pragma unroll
    for (int a = 0; a < Tr::kRowAtoms; ++a) ldmatrix_x4(qf[a], qa.at<Tr::kHeadDim>(a, kk));
#pragma unroll
    for (int p = 0; p < Tr::kBlockN / 16; ++p) {
      std::uint32_t b[4];
      ldmatrix_x4(b, ka.at<Tr::kHeadDim>(p, kk));
#pragma unroll
      for (int a = 0; a < Tr::kRowAtoms; ++a) {
        mma_m16n8k16<kBf16>(acc[a][2 * p], qf[a], b[0], b[1]);
        mma_m16n8k16<kBf16>(acc[a][2 * p + 1], qf[a], b[2], b[3]);
      }
    }
  }
}

// o[a][d][*] (atom a, d-tile d = dims 8d..8d+7) += P V, P given as packed 16-bit A fragments
// per atom and k-step (p[a][t] covers keys 16t..16t+15); V fragments come through
// ldmatrix.trans (see init_a_addrs), each feeding kRowAtoms mmas.
template <typename Tr, bool kBf16>
__device__ __forceinline__ void gemm_pv(float (&o)[Tr::kRowAtoms][Tr::kHeadDim / 8][4],
                                        const std::uint32_t (&p)[Tr::kRowAtoms][Tr::kBlockN / 16][4],
                                        const FragAddrs& va) {
#pragma unroll
  for (int t = 0; t < Tr::kBlockN / 16; ++t) {
#pragma unroll
    for (int e = 0; e < Tr::kHeadDim / 16; ++e) {
      std::uint32_t b[4];
      ldmatrix_x4_trans(b, va.at<Tr::kHeadDim>(t, e));
#pragma unroll
      for (int a = 0; a < Tr::kRowAtoms; ++a) {
        mma_m16n8k16<kBf16>(o[a][2 * e], p[a][t], b[0], b[1]);
        mma_m16n8k16<kBf16>(o[a][2 * e + 1], p[a][t], b[2], b[3]);
      }
    }
  }
}

}  // namespace tessera::cuda::sm80
