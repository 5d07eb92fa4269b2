#include "energy_meter.h"

#if defined(TESSERA_WITH_CUDA)
#include <cuda_runtime.h>
#include <dlfcn.h>
#endif

namespace tessera::app::bench {

#if defined(TESSERA_WITH_CUDA)
EnergyMeter::EnergyMeter(int cuda_device) {
  // The library stays loaded for the process (the bench is short-lived).
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return;
  using InitFn = int (*)();
  using HandleFn = int (*)(const char*, void**);
  const auto init = reinterpret_cast<InitFn>(dlsym(lib, "nvmlInit_v2"));
  const auto by_bus = reinterpret_cast<HandleFn>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
  const auto read = reinterpret_cast<ReadFn>(dlsym(lib, "nvmlDeviceGetTotalEnergyConsumption"));
  char bus[32] = {};
  if (init == nullptr || by_bus == nullptr || read == nullptr || init() != 0 ||
      cudaDeviceGetPCIBusId(bus, sizeof bus, cuda_device) != cudaSuccess || by_bus(bus, &device_) != 0)
    return;
  unsigned long long mj = 0;
  if (read(device_, &mj) == 0) read_ = read;  // the counter exists on this GPU (Volta and later)
}

double EnergyMeter::millijoules() const {
  unsigned long long mj = 0;
  if (read_ == nullptr || read_(device_, &mj) != 0) return -1;
  return static_cast<double>(mj);
}
#else
EnergyMeter::EnergyMeter(int) {}
double EnergyMeter::millijoules() const { return -1; }
#endif

}  // namespace tessera::app::bench
