// Scalar loads and stores by run-time dtype for the small, memory-light serving kernels
// (merge, page copies) where one kernel serves every storage type.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "tessera/tensor.h"

namespace tessera::cuda {

__device__ __forceinline__ float load_element(const void* base, std::int64_t i, DType dtype) {
  switch (dtype) {
    case DType::f16: return __half2float(static_cast<const __half*>(base)[i]);
    case DType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

__device__ __forceinline__ void store_element(void* base, std::int64_t i, DType dtype, float v) {
  switch (dtype) {
    case DType::f16: static_cast<__half*>(base)[i] = __float2half_rn(v); return;
    case DType::bf16: static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v); return;
    default: static_cast<float*>(base)[i] = v; return;
  }
}

}  // namespace tessera::cuda
