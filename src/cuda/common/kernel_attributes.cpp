#include "cuda/common/kernel_attributes.h"

#include <cuda_runtime.h>

#include <mutex>
#include <set>
#include <tuple>

#include "cuda/common/check.h"

namespace tessera::cuda {

void opt_in_shared_memory(const void* kernel, int bytes, bool max_carveout) {
  int device = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mutex;
  static std::set<std::tuple<const void*, int, int, bool>> done;  // (kernel, device, bytes, carveout)
  const auto key = std::make_tuple(kernel, device, bytes, max_carveout);
  std::lock_guard<std::mutex> lock(mutex);
  if (done.count(key) != 0) return;
  TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  if (max_carveout)
    TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                            static_cast<int>(cudaSharedmemCarveoutMaxShared)));
  done.insert(key);
}

}  // namespace tessera::cuda
