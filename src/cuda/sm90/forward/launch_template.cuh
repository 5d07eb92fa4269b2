// launch_forward<T, kHeadDim, kBlockN>: the host side of one sm90 instance (included by instance_hdim*.cu).
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/check.h"
#include "cuda/sm90/forward/forward_args.h"
#include "cuda/sm90/forward/kernel.cuh"

namespace tessera::cuda::sm90 {

template <typename T, int kHeadDim, int kBlockN>
void launch_forward(const FwdArgs& args, int batch, int heads_q, void* stream) {
  using Tr = FwdTraits<kHeadDim, kBlockN>;
  const int q_tiles = (args.seq_q + Tr::kBlockM - 1) / Tr::kBlockM;
  if (q_tiles == 0 || batch == 0 || heads_q == 0) return;
  auto* kernel = &forward_kernel<T, kHeadDim, kBlockN>;
  TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes));
  const dim3 grid(static_cast<unsigned>(q_tiles), static_cast<unsigned>(heads_q), static_cast<unsigned>(batch));
  kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, static_cast<cudaStream_t>(stream)>>>(args);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::cuda::sm90
