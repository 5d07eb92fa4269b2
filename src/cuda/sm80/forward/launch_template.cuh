// launch_forward<T, kHeadDim>: the host side of one instance (included by instance_hdim*.cu).
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/check.h"
#include "cuda/sm80/forward/forward.h"
#include "cuda/sm80/forward/kernel.cuh"
#include "math/ragged_tiles.h"

namespace tessera::cuda::sm80 {

template <typename T, int kHeadDim>
void launch_forward(const FwdArgs& args_in, int batch, int heads_q, void* stream) {
  using Tr = FwdTraits<kHeadDim>;
  FwdArgs args = args_in;
  long long q_tiles = (static_cast<long long>(args.seq_q) + Tr::kBlockM - 1) / Tr::kBlockM;
  if (q_tiles == 0 || batch == 0 || heads_q == 0) return;
  // Ragged with only a bound on the longest sequence: virtual blocks over all sequences when
  // they are fewer than (blocks of the bound) x sequences.
  unsigned grid_z = static_cast<unsigned>(batch);
  if (args.cu_seqlens_q != nullptr) {
    const long long virtual_blocks = math::ragged_virtual_blocks(args.total_q, batch, Tr::kBlockM);
    if (virtual_blocks < q_tiles * batch) {
      q_tiles = virtual_blocks;
      grid_z = 1;
      args.virtual_batch = batch;
    }
  }
  auto* kernel = &forward_kernel<T, kHeadDim>;
  // Above 48 KB a kernel must opt in to dynamic shared memory (per device; cheap to repeat).
  if (Tr::kSmemBytes > 48 * 1024)
    TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes));
  const dim3 grid(static_cast<unsigned>(q_tiles), static_cast<unsigned>(heads_q), grid_z);
  kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, static_cast<cudaStream_t>(stream)>>>(args);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::cuda::sm80
