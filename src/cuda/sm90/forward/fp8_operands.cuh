// The FP8 forward's operand pieces for the sm90 kernel (kernel.cuh): P packed into the A
// fragments of the k32 P V steps, and the V tile transposed in shared memory into V^T with the
// same key permutation.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/primitives/sm80/ldmatrix.cuh"
#include "cuda/primitives/sm90/fp8_convert.cuh"
#include "cuda/primitives/sm90/stmatrix.cuh"

namespace tessera::cuda::sm90 {

// P (fp32 weights, already scaled into e4m3 range) -> the A fragments of the k32 P V steps.
// A thread holds, per 8-key n-tile j, keys 8j + 2q and 8j + 2q + 1 of its two rows; the k32
// A fragment wants keys 4q .. 4q+3 and 16+4q .. 16+4q+3 of each 32. Instead of shuffling
// between lanes, k-step t uses the thread's own keys in the order of the permutation
//   logical 4q + {0,1,2,3} -> key {2q, 2q+1, 2q+8, 2q+9}, logical 16 + 4q + i -> 16 + that,
// and V is transposed with the same permutation (transpose_v_tile), so the sum over keys is
// unchanged.
__device__ __forceinline__ std::uint32_t pack4_e4m3(float k0, float k1, float k2, float k3) {
  const std::uint16_t lo = cvt_e4m3x2(k1, k0), hi = cvt_e4m3x2(k3, k2);
  return static_cast<std::uint32_t>(lo) | (static_cast<std::uint32_t>(hi) << 16);
}

template <int kBlockN>
__device__ __forceinline__ void pack_weights_e4m3(const float (&s)[kBlockN / 8][4], std::uint32_t (&p)[kBlockN / 32][4]) {
#pragma unroll
  for (int t = 0; t < kBlockN / 32; ++t) {
    const int j = 4 * t;
    p[t][0] = pack4_e4m3(s[j][0], s[j][1], s[j + 1][0], s[j + 1][1]);
    p[t][1] = pack4_e4m3(s[j][2], s[j][3], s[j + 1][2], s[j + 1][3]);
    p[t][2] = pack4_e4m3(s[j + 2][0], s[j + 2][1], s[j + 3][0], s[j + 3][1]);
    p[t][3] = pack4_e4m3(s[j + 2][2], s[j + 2][3], s[j + 3][2], s[j + 3][3]);
  }
}

// V tile (kBlockN keys x head_dim bytes, as TMA wrote it: 128-byte panels of head-dim columns,
// rows swizzled) -> V^T (head_dim rows of kBlockN logical keys, 128-byte swizzled rows, K-major
// for wgmma), keys in the order of pack_weights_e4m3's permutation. The byte transpose rides on
// ldmatrix.trans, which transposes 16-bit pairs: a group is 16 keys x 32 columns (512 bytes),
// one ldmatrix.x4.trans (matrices: keys kb..kb+7 and kb+8..kb+15, each x columns d0..d0+15 and
// d0+16..d0+31), then per lane and column pair two byte permutes, then one stmatrix.x4. After
// the load lane (c, q) holds, per matrix pair, the bytes (key kb+2q, kb+2q+1) x (column d0+2c,
// d0+2c+1) and the same for keys kb+2q+8, +9: the permute's even / odd bytes are exactly logical
// keys 4q .. 4q+3 of V^T rows d0+2c and d0+2c+1 under that permutation, which is why it was
// chosen. Both instructions are one wavefront per 8-row phase: the load rows are 8 keys with
// their own swizzle, and the store matrices' upper four rows take the odd V^T row first (the
// lanes' selectors swapped to match), so that a matrix's 8 rows cover all 8 swizzle residues.
// tests/python/test_fp8_transpose_model.py models every lane and checks layout and conflicts.
template <typename Tr>
__device__ __forceinline__ void transpose_v_tile(std::uint32_t v, std::uint32_t vt, int warp, int warps, int lane) {
  static_assert(Tr::kBlockN == 128 && Tr::kHeadDim % 32 == 0, "2 key halves of 64 x column blocks of 32");
  // A warp takes units of 32 columns x 64 keys (a key half), four groups each, unrolled: the
  // groups of a unit differ by 2048 bytes in V (16 rows, an immediate) and by a 16-byte chunk
  // in V^T, so a group costs its 6 data instructions plus ~2.
  constexpr int kUnits = 2 * (Tr::kHeadDim / 32);
  const int m = lane >> 3, j = lane & 7;  // the matrix and row this lane addresses
  // Load row: key kb + 8 (m & 1) + j, 16-byte chunk (d0 % 128) / 16 + (m >> 1) of its panel row,
  // swizzled by key % 8 = j; (d0 % 128) / 16 is even, so the chunk is that ^ ((m >> 1) ^ j).
  const std::uint32_t src_lane = v + static_cast<std::uint32_t>((8 * (m & 1) + j) * 128);
  const int src_x = ((m >> 1) ^ j) << 4;
  // Store row: V^T row d0 + 16 (m >> 1) + 2 j + odd, odd = (m & 1) ^ (j >= 4).
  const int row = 16 * (m >> 1) + 2 * j + ((m & 1) ^ (j >> 2));
  const std::uint32_t dst_lane = vt + static_cast<std::uint32_t>(row * 128);
  // Byte permutes: even V^T row = bytes 0, 2 of the first matrix and 0, 2 of the second (keys
  // 2q, 2q+1, 2q+8, 2q+9); odd row = bytes 1, 3 of each. Lanes 16-31 (c >= 4) store odd first.
  const std::uint32_t sel_a = lane < 16 ? 0x6420u : 0x7531u, sel_b = lane < 16 ? 0x7531u : 0x6420u;
  for (int u = warp; u < kUnits; u += warps) {
    const int d0 = 32 * (u >> 1), kh = u & 1;  // columns d0 .. d0 + 31, keys 64 kh .. 64 kh + 63
    const std::uint32_t src = src_lane + static_cast<std::uint32_t>((d0 / 128) * Tr::kKVPanelBytes + kh * 64 * 128 +
                                                                    ((((d0 % 128) / 16) << 4) ^ src_x));
    const std::uint32_t dst = dst_lane + static_cast<std::uint32_t>(d0 * 128);
    const int dx = (row % 8) ^ (4 * kh);  // V^T chunk of group i: (4 kh + i) ^ (row % 8) = i ^ dx
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      std::uint32_t r[4];
      sm80::ldmatrix_x4_trans(r, src + 2048u * i);
      stmatrix_x4(dst + static_cast<std::uint32_t>((i ^ dx) << 4), __byte_perm(r[0], r[1], sel_a),
                  __byte_perm(r[0], r[1], sel_b), __byte_perm(r[2], r[3], sel_a), __byte_perm(r[2], r[3], sel_b));
    }
  }
}

}  // namespace tessera::cuda::sm90
