// Shared-memory loads and stores by 32-bit address, for values one thread publishes to others
// under an mbarrier protocol (the sm90 forward's tile ring). Volatile asm: the value another
// thread publishes is read after the mbarrier wait that orders it, not hoisted above it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::cuda::sm90 {

// ld.shared.u32 / st.shared.u32.
__device__ __forceinline__ std::uint32_t ld_shared_u32(std::uint32_t addr) {
  std::uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ void st_shared_u32(std::uint32_t addr, std::uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
// ld.shared.v4.u32 / st.shared.v4.u32 (16 bytes).
__device__ __forceinline__ uint4 ld_shared_v4_u32(std::uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ void st_shared_v4_u32(std::uint32_t addr, int x, int y, int z, int w) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(x), "r"(y), "r"(z), "r"(w) : "memory");
}

}  // namespace tessera::cuda::sm90
