// ldmatrix.sync.aligned.m8n8{.x1,.x2,.x4}{,.trans}.shared.b16 (sm_75+): a warp loads one, two
// or four 8x8 matrices of 16-bit elements from shared memory.
//
// Addresses: lanes 8i..8i+7 give the 8 row addresses (16 bytes each, 16-byte aligned) of
// matrix i (for .x1 only lanes 0..7 are used, for .x2 lanes 0..15; the others are ignored but
// must still be valid shared addresses, so pass any row of the tile).
// Result: register i of lane 4*g + q holds matrix i's row g, elements 2q and 2q+1 (low half
// = 2q). With .trans each matrix is transposed on the way: lane 4*g + q receives column g,
// rows 2q and 2q+1; this turns a row-major (k rows, n contiguous) tile into mma's "col" B.
#pragma once

#include <cstdint>

namespace tessera::cuda::sm80 {

// Shared-memory address (state-space .shared, 32 bits) of a generic pointer into smem.
__device__ __forceinline__ std::uint32_t smem_u32(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x1(std::uint32_t& r0, std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r0) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x2(std::uint32_t& r0, std::uint32_t& r1, std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t& r0, std::uint32_t& r1, std::uint32_t& r2, std::uint32_t& r3,
                                            std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x1_trans(std::uint32_t& r0, std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r0) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x2_trans(std::uint32_t& r0, std::uint32_t& r1, std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t& r0, std::uint32_t& r1, std::uint32_t& r2,
                                                  std::uint32_t& r3, std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

// Array forms for fragment code.
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t addr) {
  ldmatrix_x4(r[0], r[1], r[2], r[3], addr);
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], std::uint32_t addr) {
  ldmatrix_x4_trans(r[0], r[1], r[2], r[3], addr);
}

}  // namespace tessera::cuda::sm80
