// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32 (sm_80+): one warp computes
// D(16x8, f32) = A(16x16) * B(16x8) + C(16x8, f32).
//
// Fragment ownership, with lane = 4*g + q (g = lane / 4 in 0..7, q = lane % 4 in 0..3); each
// 32-bit A/B register holds two consecutive k elements, the lower k in the low half:
//   A (row-major 16x16): a[0] = (row g,   k 2q..2q+1)   a[1] = (row g+8, k 2q..2q+1)
//                        a[2] = (row g,   k 2q+8..+9)   a[3] = (row g+8, k 2q+8..+9)
//   B ("col", k x n):    b[0] = (k 2q..2q+1,   col g)   b[1] = (k 2q+8..+9, col g)
//   C/D (16x8 f32):      c[0], c[1] = (row g,   cols 2q, 2q+1)
//                        c[2], c[3] = (row g+8, cols 2q, 2q+1)
// The C layout of two adjacent n-tiles (cols 0..15) equals the A layout of one k-step once
// packed to 16 bits, which lets P = softmax(S) feed P*V straight from registers.
#pragma once

#include <cstdint>

namespace tessera::cuda::sm80 {

// kBf16 selects the operand type: true = bf16, false = f16.
template <bool kBf16>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
  if constexpr (kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

// Same, with B given as two scalars (the halves of an ldmatrix.x4 result).
template <bool kBf16>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  const std::uint32_t b[2] = {b0, b1};
  mma_m16n8k16<kBf16>(d, a, b);
}

}  // namespace tessera::cuda::sm80
