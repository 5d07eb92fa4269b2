#include "cuda/common/device_limits.h"

#include <cuda_runtime.h>

namespace tessera::cuda {

bool read_device_limits(int device, DeviceLimits* out, std::string* why) {
  if (cudaDeviceGetAttribute(&out->major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&out->minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&out->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    (void)cudaGetLastError();
    if (why != nullptr)
      *why = "device: expected a usable CUDA device, got cuda:" + std::to_string(device) + " whose attributes cannot be read";
    return false;
  }
  return true;
}

}  // namespace tessera::cuda
