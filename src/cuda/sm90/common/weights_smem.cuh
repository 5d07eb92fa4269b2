// 16-bit attention weights P from a warpgroup's registers into shared memory, where a wgmma reads
// them as its A operand (the sm90 forward's wide head_dim 64 instance, FwdTraits::kPInSmem).
// tests/gpu/test_wgmma_sm90.cu runs it into a P V product; tests/python/
// test_p_smem_layout_model.py models every lane's addresses and the bank conflicts.
#pragma once

#include <cstdint>

#include "cuda/primitives/sm90/stmatrix.cuh"

namespace tessera::cuda::sm90 {

// 16-bit P (the A fragments of pack_weights) into a warpgroup's P buffer (FwdTraits::kPInSmem):
// 64 rows of kBlockN keys in 64-key panels of 128-byte rows, 128-byte swizzle (16-byte chunk c
// of row r at chunk c ^ (r % 8)), the K-major A operand of the P V wgmma, laid out as TMA lays
// out Q. The fragment of k16 step kt is four 8 x 8 matrices (rows 0-7 / 8-15 of the warp's 16 x
// keys 16 kt .. + 7 / + 8 .. + 15, in register order a[0..3]): one stmatrix.x4, lane l giving
// row l % 8 of matrix l / 8. A matrix's 8 rows land in 8 distinct chunks (one wavefront).
template <int kBlockN>
__device__ __forceinline__ void store_weights_smem(std::uint32_t p_base, const std::uint32_t (&p)[kBlockN / 16][4],
                                                   int warp, int lane) {
  static_assert(kBlockN % 64 == 0, "whole 64-key panels");
  const int m = lane >> 3, r = lane & 7;
  const std::uint32_t row_addr = p_base + static_cast<std::uint32_t>((16 * warp + 8 * (m & 1) + r) * 128);
#pragma unroll
  for (int kt = 0; kt < kBlockN / 16; ++kt) {
    const int chunk = 2 * kt + (m >> 1);  // 16-byte chunk of the row (8 keys)
    const std::uint32_t addr =
        row_addr + static_cast<std::uint32_t>((chunk / 8) * 64 * 128 + (((chunk % 8) ^ r) << 4));
    stmatrix_x4(addr, p[kt][0], p[kt][1], p[kt][2], p[kt][3]);
  }
}

}  // namespace tessera::cuda::sm90
