#include "cuda/common/scratch_pool.h"

#include <cstdint>
#include <mutex>
#include <vector>

namespace tessera::cuda {

namespace {

cudaMemPool_t create_pool(int device) {
  int supported = 0;
  if (cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device) != cudaSuccess || supported == 0) {
    return nullptr;
  }
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  if (cudaMemPoolCreate(&pool, &props) != cudaSuccess) return nullptr;
  std::uint64_t keep = kScratchPoolKeepBytes;
  if (cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) != cudaSuccess) {
    (void)cudaMemPoolDestroy(pool);
    return nullptr;
  }
  return pool;
}

}  // namespace

cudaMemPool_t scratch_pool(int device) {
  if (device < 0) return nullptr;
  static std::mutex mutex;
  static std::vector<cudaMemPool_t> pools;  // by device; nullptr where none could be made
  static std::vector<bool> tried;
  std::lock_guard<std::mutex> lock(mutex);
  if (static_cast<std::size_t>(device) >= pools.size()) {
    pools.resize(device + 1, nullptr);
    tried.resize(device + 1, false);
  }
  if (!tried[device]) {
    tried[device] = true;
    pools[device] = create_pool(device);
    (void)cudaGetLastError();  // a failed attempt must not surface as a later launch's error
  }
  return pools[device];
}

}  // namespace tessera::cuda
