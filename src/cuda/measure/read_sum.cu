#include "cuda/measure/read_sum.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/common/check.h"
#include "tessera/error.h"

namespace tessera::cuda::measure {
namespace {

constexpr int kThreads = 512;
constexpr int kBlocksPerSm = 4;  // 2048 threads an SM, each with four 16-byte loads in flight
constexpr int kUnroll = 4;

__device__ __forceinline__ unsigned int words_sum(uint4 v) { return v.x + v.y + v.z + v.w; }

// Grid-stride over 16-byte vectors with kUnroll independent streaming loads (evict-first: the
// data is read once) per step; each warp adds its sum into *sum once.
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) read_sum_kernel(const uint4* __restrict__ data, std::size_t n,
                                                            unsigned int* __restrict__ sum) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kThreads;
  std::size_t i = static_cast<std::size_t>(blockIdx.x) * kThreads + threadIdx.x;
  unsigned int acc = 0;
  for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = __ldcs(data + i + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc += words_sum(v[u]);
  }
  for (; i < n; i += stride) acc += words_sum(__ldcs(data + i));
#pragma unroll
  for (int lanes = 16; lanes > 0; lanes /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, lanes);
  if (threadIdx.x % 32 == 0) atomicAdd(sum, acc);
}

}  // namespace

void read_sum_u32(const void* data, std::size_t bytes, unsigned int* sum, cudaStream_t stream) {
  if (sum == nullptr) throw Error(ErrorCode::invalid_argument, "sum", "read_sum_u32: sum: expected device memory, got null");
  if (bytes % 16 != 0)
    throw Error(ErrorCode::invalid_argument, "bytes",
                "read_sum_u32: bytes: expected a multiple of 16, got " + std::to_string(bytes));
  if (bytes == 0) return;
  if (data == nullptr || reinterpret_cast<std::uintptr_t>(data) % 16 != 0)
    throw Error(ErrorCode::invalid_argument, "data",
                std::string("read_sum_u32: data: expected 16-byte aligned device memory, got ") +
                    (data == nullptr ? "null" : "a misaligned pointer"));
  int device = 0, sms = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const std::size_t n = bytes / 16;
  // No more blocks than vectors a thread's first load needs: small buffers launch small grids.
  const std::size_t per_block = static_cast<std::size_t>(kThreads);
  const std::size_t blocks = std::min<std::size_t>(static_cast<std::size_t>(sms) * kBlocksPerSm,
                                                   (n + per_block - 1) / per_block);
  read_sum_kernel<<<static_cast<unsigned int>(blocks), kThreads, 0, stream>>>(static_cast<const uint4*>(data), n, sum);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::cuda::measure
