// device_limits: what every applicability check asks of a device (compute capability and the
// opt-in shared memory per block), read through the runtime in one place with one error
// message. Host-only.
#pragma once

#include <string>

namespace tessera::cuda {

struct DeviceLimits {
  int major = 0, minor = 0;  // compute capability
  int smem_optin = 0;        // bytes of dynamic shared memory a block may opt into
};

// Reads the limits of CUDA device `device`. On failure clears the CUDA error, sets `*why` (if
// given) to "device: expected a usable CUDA device, got cuda:N whose attributes cannot be
// read" and returns false.
bool read_device_limits(int device, DeviceLimits* out, std::string* why = nullptr);

}  // namespace tessera::cuda
