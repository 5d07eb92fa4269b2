// The sm80 backward kernel's warp-level pieces (sm80/backward/kernel.cuh): the shared tiles'
// swizzle, their cp.async copies, and the ldmatrix + mma.sync GEMMs over them.
//
// Shared tiles are row-major, 16-byte chunks XOR-swizzled by (row & 7): every ldmatrix phase and
// every 4-byte fragment store touches 8 distinct chunks, hence no bank conflicts.
#pragma once

#include <cstdint>

#include "cuda/backward/tile_copy.cuh"
#include "cuda/primitives/sm80/ldmatrix.cuh"
#include "cuda/primitives/sm80/mma.cuh"

namespace tessera::cuda::sm80::bwd {

// Byte offset of 16-byte chunk `ch` of row `r` in a swizzled tile of W 16-bit elements per row.
template <int W>
__device__ __forceinline__ std::uint32_t swz(int r, int ch) {
  return static_cast<std::uint32_t>(r * (W * 2) + ((ch ^ (r & 7)) << 4));
}

// Copies `R` rows of W elements (rows past `valid` zero-filled) into a swizzled tile
// (backward::copy_rows_async). kStepRows: stepped row pointers, which only the head_dim 128
// two-stage layouts of sm_90 builds take (kCarryCoords: their per-step prefetch, loop 4085 ->
// 3910 instructions, bf16); in sm_90 builds head_dim 64 spilled 68 B with it (26 B without) and
// 256 8-16 B; the compact layout 1 spilled 20 B in a build for sm_80 and sm_90 (one of its
// functions); the sm_80 builds were not timed with it.
template <int R, int W, int kThreads, bool kStepRows = false, typename T>
__device__ __forceinline__ void load_tile(std::uint32_t s_tile, const T* base, std::int64_t tile_off,
                                          std::int64_t row_stride, int valid, int tid) {
  backward::copy_rows_async<R, W, kThreads, kStepRows>(
      s_tile, [](int r, int ch) { return swz<W>(r, ch); }, base, tile_off, row_stride, valid, tid);
}

// Shared address of chunk c = cconst + x of a swizzled row (cconst even, known at compile
// time after unrolling; x = the lane's bit). `lane_addr` is the row's address with chunk
// field (bits 4..6) already x ^ (row & 7), so the swizzle of cconst is one XOR with an
// immediate. (Spelt as (c ^ (row & 7)), ptxas kept a register per address and spilled.)
// Needs 128-byte aligned rows (checked once at kernel entry for the smem base).
__device__ __forceinline__ std::uint32_t chunk_at(std::uint32_t lane_addr, int cconst) {
  return (lane_addr ^ static_cast<std::uint32_t>((cconst & 7) << 4)) + static_cast<std::uint32_t>((cconst & ~7) << 4);
}

// acc[m * NCOLS / 8 + n][*] (16 MR x NCOLS, M = rows x_row0.., N = rows y_row0.. of Y) = X · Y^T
// over D. X, Y: swizzled [rows][D] tiles; x_row0, y_row0 multiples of 8. With MR = 2 each B
// fragment feeds two HMMAs (head_dim 128): 4 ldmatrix per 8 HMMA instead of 5.
template <bool kBf16, int D, int NCOLS, int MR = 1>
__device__ __forceinline__ void gemm_xyT(float (&acc)[MR * NCOLS / 8][4], std::uint32_t sX, int x_row0, std::uint32_t sY,
                                         int y_row0, int lane) {
#pragma unroll
  for (int n = 0; n < MR * NCOLS / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  const std::uint32_t a_addr =
      sX + (x_row0 + (lane & 7) + ((lane >> 3) & 1) * 8) * (D * 2) + (((lane >> 4) ^ (lane & 7)) << 4);
  const std::uint32_t b_addr =
      sY + (y_row0 + (lane & 7) + (lane >> 4) * 8) * (D * 2) + ((((lane >> 3) & 1) ^ (lane & 7)) << 4);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // sm_90 builds: ptxas already runs the ldmatrix ~10 HMMAs ahead of their use in the plain
  // loop; the explicit double buffer below cost 20 B of spill there (3 LDL per step).
  constexpr bool kDoubleBuffer = false;
#else
  // sm_80 builds: the plain loop left 23 of 144 ldmatrix per step with no HMMA between load and
  // use (mean 7.4); double-buffered: 10, mean 11.7, and 247-250 registers without spill.
  constexpr bool kDoubleBuffer = MR > 1;
#endif
  if constexpr (!kDoubleBuffer) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      std::uint32_t a[MR][4];
#pragma unroll
      for (int m = 0; m < MR; ++m) ldmatrix_x4(a[m], chunk_at(a_addr + m * 16 * (D * 2), kk * 2));
#pragma unroll
      for (int np = 0; np < NCOLS / 16; ++np) {
        std::uint32_t b[4];
        ldmatrix_x4(b, chunk_at(b_addr + np * 16 * (D * 2), kk * 2));
#pragma unroll
        for (int m = 0; m < MR; ++m) {
          mma_m16n8k16<kBf16>(acc[m * (NCOLS / 8) + 2 * np], a[m], b[0], b[1]);
          mma_m16n8k16<kBf16>(acc[m * (NCOLS / 8) + 2 * np + 1], a[m], b[2], b[3]);
        }
      }
    }
  } else {
    // Fragment double-buffering: slice kk + 1's A and B fragments are loaded before slice kk's
    // HMMAs, so each ldmatrix has a whole slice of HMMAs (8 MR) to land in.
    std::uint32_t a[2][MR][4], b[2][NCOLS / 16][4];
    auto load = [&](int kk, int buf) {
#pragma unroll
      for (int m = 0; m < MR; ++m) ldmatrix_x4(a[buf][m], chunk_at(a_addr + m * 16 * (D * 2), kk * 2));
#pragma unroll
      for (int np = 0; np < NCOLS / 16; ++np) ldmatrix_x4(b[buf][np], chunk_at(b_addr + np * 16 * (D * 2), kk * 2));
    };
    load(0, 0);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      if (kk + 1 < D / 16) load(kk + 1, (kk + 1) & 1);
#pragma unroll
      for (int np = 0; np < NCOLS / 16; ++np)
#pragma unroll
        for (int m = 0; m < MR; ++m) {
          mma_m16n8k16<kBf16>(acc[m * (NCOLS / 8) + 2 * np], a[kk & 1][m], b[kk & 1][np][0], b[kk & 1][np][1]);
          mma_m16n8k16<kBf16>(acc[m * (NCOLS / 8) + 2 * np + 1], a[kk & 1][m], b[kk & 1][np][2], b[kk & 1][np][3]);
        }
    }
  }
}

// acc (16 x NCOLS at columns col0.. of Y) += A · Y[0..KROWS)[col0..], A given as fragments
// (one per 16 rows of Y); Y: swizzled [KROWS][D] tile read transposed; col0 % 128 == 0.
template <bool kBf16, int D, int KROWS, int NCOLS>
__device__ __forceinline__ void gemm_ay(float (&acc)[NCOLS / 8][4], const std::uint32_t (&a)[KROWS / 16][4],
                                        std::uint32_t sY, int col0, int lane) {
  const std::uint32_t b_addr =
      sY + ((lane & 7) + ((lane >> 3) & 1) * 8) * (D * 2) + (col0 / 8) * 16 + (((lane >> 4) ^ (lane & 7)) << 4);
#pragma unroll
  for (int t = 0; t < KROWS / 16; ++t) {
#pragma unroll
    for (int np = 0; np < NCOLS / 16; ++np) {
      std::uint32_t b[4];
      ldmatrix_x4_trans(b, chunk_at(b_addr + t * 16 * (D * 2), np * 2));
      mma_m16n8k16<kBf16>(acc[2 * np], a[t], b[0], b[1]);
      mma_m16n8k16<kBf16>(acc[2 * np + 1], a[t], b[2], b[3]);
    }
  }
}

// acc[m * NCOLS / 8 + n] (16 MR x NCOLS at columns col0.. of Y) += A · Y[0..KROWS)[col0..], with
// A (16 MR x KROWS) read from a swizzled [..][KROWS] tile at rows a_row0.. (P^T or dS^T written
// by the warp pair), one k16 slice at a time: MR A fragments live, not KROWS / 16 x MR.
// Y: swizzled [KROWS][D] tile read transposed; col0 % 64 == 0.
template <bool kBf16, int D, int KROWS, int NCOLS, int MR>
__device__ __forceinline__ void gemm_sy(float (&acc)[MR * NCOLS / 8][4], std::uint32_t sA, int a_row0,
                                        std::uint32_t sY, int col0, int lane) {
  static_assert(KROWS / 8 <= 8, "the A chunk index 2 t + lane bit stays in one swizzle row");
  const std::uint32_t a_addr = sA + swz<KROWS>(a_row0 + (lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4);
  const std::uint32_t b_addr =
      sY + ((lane & 7) + ((lane >> 3) & 1) * 8) * (D * 2) + (col0 / 8) * 16 + (((lane >> 4) ^ (lane & 7)) << 4);
#pragma unroll
  for (int t = 0; t < KROWS / 16; ++t) {
    std::uint32_t a[MR][4];
#pragma unroll
    for (int m = 0; m < MR; ++m) ldmatrix_x4(a[m], chunk_at(a_addr + m * 16 * (KROWS * 2), 2 * t));
#pragma unroll
    for (int np = 0; np < NCOLS / 16; ++np) {
      std::uint32_t b[4];
      ldmatrix_x4_trans(b, chunk_at(b_addr + t * 16 * (D * 2), np * 2));
#pragma unroll
      for (int m = 0; m < MR; ++m) {
        mma_m16n8k16<kBf16>(acc[m * (NCOLS / 8) + 2 * np], a[m], b[0], b[1]);
        mma_m16n8k16<kBf16>(acc[m * (NCOLS / 8) + 2 * np + 1], a[m], b[2], b[3]);
      }
    }
  }
}

}  // namespace tessera::cuda::sm80::bwd
