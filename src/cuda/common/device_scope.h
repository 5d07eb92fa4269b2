// DeviceScope: makes a device current for a scope (kernel launches go to the current device)
// and restores the caller's device afterwards. Host-only; switches only when needed.
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/check.h"

namespace tessera::cuda {

class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    TESSERA_CUDA_CHECK(cudaGetDevice(&previous_));
    switched_ = previous_ != device;
    if (switched_) TESSERA_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceScope() {
    if (switched_) (void)cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};

}  // namespace tessera::cuda
