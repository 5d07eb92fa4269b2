// stmatrix.sync.aligned.m8n8.x4{,.trans}.shared.b16 (sm_90+): the store counterpart of
// ldmatrix. A warp stores four 8x8 matrices of 16-bit elements from registers: register i of
// every lane holds matrix i, lane l the two elements (row l / 4, columns 2 (l % 4), +1), the
// mma / wgmma accumulator fragment layout once packed to 16 bits. Lanes 8i .. 8i + 7 give the
// shared addresses of rows 0..7 of matrix i (16 bytes each, 16-byte aligned). .trans stores
// each matrix transposed: the lane's pair lands in column l / 4, rows 2 (l % 4), +1.
#pragma once

#include <cstdint>

namespace tessera::cuda::sm90 {

__device__ __forceinline__ void stmatrix_x4(std::uint32_t addr, std::uint32_t r0, std::uint32_t r1, std::uint32_t r2,
                                            std::uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

__device__ __forceinline__ void stmatrix_x4_trans(std::uint32_t addr, std::uint32_t r0, std::uint32_t r1,
                                                  std::uint32_t r2, std::uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

}  // namespace tessera::cuda::sm90
