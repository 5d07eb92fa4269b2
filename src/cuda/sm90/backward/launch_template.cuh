// launch_backward<T, kHeadDim>: the host side of one sm90 backward instance (included by
// instance_hdim*.cu).
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/check.h"
#include "cuda/backward/backward_args.h"
#include "cuda/sm90/backward/kernel.cuh"
#include "cuda/sm90/backward/kernel_traits.cuh"

namespace tessera::cuda::sm90 {

// Launches the main kernel with the sm80 kernel's grid (KV tiles, heads_kv * n_splits, batch):
// the sm80 host code sized the splits and the workspace for it.
template <typename T, int kHeadDim>
void launch_backward(const backward::BwdArgs& args, void* stream) {
  using Tr = BwdTraits<kHeadDim>;
  const int kv_tiles = (args.seq_k + Tr::Bc - 1) / Tr::Bc;
  if (kv_tiles == 0 || args.batch == 0 || args.heads_kv == 0) return;
  auto* kernel = &backward_kernel<T, kHeadDim>;
  TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes));
  const dim3 grid(kv_tiles, args.heads_kv * args.n_splits, args.batch);
  kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, static_cast<cudaStream_t>(stream)>>>(args);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::cuda::sm90
