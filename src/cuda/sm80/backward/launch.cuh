// Launch of the sm80 backward main kernel (kernel.cuh): its grid, shared memory and attributes.
// The instance files include this header and instantiate launch_main.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/common/check.h"
#include "cuda/common/launch.cuh"
#include "cuda/sm80/backward/kernel.cuh"

namespace tessera::cuda::sm80::bwd {

// Whether `kernel` runs sm_90 code on this device (binary and PTX version >= 9.0): a build without
// 90 runs JIT-compiled 8.x PTX there, which has no griddepcontrol.
template <typename Kernel>
bool has_sm90_code(Kernel kernel) {
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return std::min(attr.binaryVersion, attr.ptxVersion) >= 90;
}

// kTileMajor: grid (heads_kv * n_splits, kv tiles, batch) instead of (kv tiles, heads_kv *
// n_splits, batch), the same CTAs in the tile-major order (cta_work.cuh); the caller keeps kv
// tiles <= 65535 (a grid's y bound).
// kv_tiles_limit >= 0: only the first that many KV tiles of each (sequence, kv head) (the tail
// pieces take the rest); programmatic: launched as a programmatic dependent of the launch before
// it on the stream (compute capability 9.0; the tail pieces).
template <typename T, int D, int V = 0, bool kTileMajor = false>
void launch_main(const BwdArgs& args, void* stream, int kv_tiles_limit = -1, bool programmatic = false) {
  using L = Layout<D, V>;
  int kv_tiles = (args.seq_k + L::Bc - 1) / L::Bc;
  if (kv_tiles_limit >= 0) kv_tiles = std::min(kv_tiles, kv_tiles_limit);
  if (kv_tiles == 0 || args.batch == 0 || args.heads_kv == 0) return;
  auto kernel = backward_main_kernel<T, D, V, kTileMajor>;
  TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kSmem));
  if constexpr (L::kMinBlocksSm90 > 1) {
    // Two CTAs need the largest shared carveout (228 KB on sm_90); a hint, harmless elsewhere.
    TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                            static_cast<int>(cudaSharedmemCarveoutMaxShared)));
  }
  const dim3 grid = kTileMajor ? dim3(args.heads_kv * args.n_splits, kv_tiles, args.batch)
                               : dim3(kv_tiles, args.heads_kv * args.n_splits, args.batch);
  launch_on_stream(kernel, grid, dim3(L::kThreads), L::kSmem, stream, programmatic, args);
}

}  // namespace tessera::cuda::sm80::bwd
