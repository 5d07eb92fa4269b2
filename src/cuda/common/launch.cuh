// Host side: one kernel launch on a stream, plain or as a programmatic dependent of the launch
// before it on that stream (cudaLaunchAttributeProgrammaticStreamSerialization, compute
// capability 9.0: its CTAs may start while that one's finish; its griddepcontrol.wait holds
// until that grid has completed and its writes are visible). Used by the batch attention and
// merge launches and the portable backward's tail pieces; the caller decides whether the
// kernel's code has griddepcontrol at all (sm_90 PTX, not compute_80 PTX JIT-compiled).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/common/check.h"

namespace tessera::cuda {

template <typename Kernel, typename... Args>
void launch_on_stream(Kernel kernel, dim3 grid, dim3 block, std::size_t smem_bytes, void* stream, bool programmatic,
                      const Args&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem_bytes;
  cfg.stream = static_cast<cudaStream_t>(stream);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  if (programmatic) {
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  TESSERA_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

}  // namespace tessera::cuda
