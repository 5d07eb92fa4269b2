// Element-type traits for the 16-bit storage formats the tensor-core kernels consume.
// `Traits<T>` says how to pack two floats into one 32-bit register (the operand format of
// mma.sync and of a 4-byte shared/global store), and which mma variant T selects.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace tessera::cuda {

template <typename T>
struct Traits;

template <>
struct Traits<__half> {
  static constexpr const char* name = "f16";
  static constexpr bool is_bf16 = false;
  // Two floats -> f16x2, `lo` in the low half (lower column/k index), round to nearest even.
  __device__ __forceinline__ static std::uint32_t pack2(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<std::uint32_t*>(&h);
  }
  __device__ __forceinline__ static float2 unpack2(std::uint32_t u) {
    __half2 h = *reinterpret_cast<__half2*>(&u);
    return __half22float2(h);
  }
};

template <>
struct Traits<__nv_bfloat16> {
  static constexpr const char* name = "bf16";
  static constexpr bool is_bf16 = true;
  __device__ __forceinline__ static std::uint32_t pack2(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<std::uint32_t*>(&h);
  }
  __device__ __forceinline__ static float2 unpack2(std::uint32_t u) {
    __nv_bfloat162 h = *reinterpret_cast<__nv_bfloat162*>(&u);
    return __bfloat1622float2(h);
  }
};

}  // namespace tessera::cuda
