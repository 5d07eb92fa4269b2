// launch_forward<T, kHeadDim, kBlockN, kMasked>: the host side of one sm90 instance (included by instance_hdim*.cu).
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/check.h"
#include "cuda/sm90/forward/forward_args.h"
#include "cuda/sm90/forward/kernel.cuh"

namespace tessera::cuda::sm90 {

template <typename T, int kHeadDim, int kBlockN, bool kMasked>
void launch_forward(const FwdArgs& args, int num_sms, void* stream) {
  using Tr = FwdTraits<kHeadDim, kBlockN>;
  const long long tiles = static_cast<long long>(args.m_blocks) * args.heads * args.batch;
  if (tiles == 0) return;
  auto* kernel = &forward_kernel<T, kHeadDim, kBlockN, kMasked>;
  TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes));
  // Persistent: one CTA per SM (shared memory allows no more), each walking its tiles.
  const unsigned grid = static_cast<unsigned>(tiles < num_sms ? tiles : num_sms);
  kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, static_cast<cudaStream_t>(stream)>>>(args);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::cuda::sm90
