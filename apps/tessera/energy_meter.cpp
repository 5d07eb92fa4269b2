#include "energy_meter.h"

#if defined(TESSERA_WITH_CUDA)
#include <cuda_runtime.h>
#include <dlfcn.h>
#endif

namespace tessera::app::bench {

#if defined(TESSERA_WITH_CUDA)
namespace {
constexpr int kNvmlClockSm = 1;  // nvml.h's NVML_CLOCK_SM
}  // namespace

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
  const auto clock = reinterpret_cast<ClockFn>(dlsym(lib, "nvmlDeviceGetClockInfo"));
  unsigned int mhz = 0;
  if (clock != nullptr && clock(device_, kNvmlClockSm, &mhz) == 0) clock_ = clock;
  // The reasons' newer name (NVML 12.x), else the older one that drivers still export.
  auto reasons = reinterpret_cast<ReadFn>(dlsym(lib, "nvmlDeviceGetCurrentClocksEventReasons"));
  if (reasons == nullptr) reasons = reinterpret_cast<ReadFn>(dlsym(lib, "nvmlDeviceGetCurrentClocksThrottleReasons"));
  unsigned long long mask = 0;
  if (reasons != nullptr && reasons(device_, &mask) == 0) reasons_ = reasons;
}

double EnergyMeter::millijoules() const {
  unsigned long long mj = 0;
  if (read_ == nullptr || read_(device_, &mj) != 0) return -1;
  return static_cast<double>(mj);
}

int EnergyMeter::sm_clock_mhz() const {
  unsigned int mhz = 0;
  if (clock_ == nullptr || clock_(device_, kNvmlClockSm, &mhz) != 0) return -1;
  return static_cast<int>(mhz);
}

long long EnergyMeter::clock_reasons() const {
  unsigned long long mask = 0;
  if (reasons_ == nullptr || reasons_(device_, &mask) != 0) return -1;
  return static_cast<long long>(mask & 0x7fffffffffffffffULL);
}
#else
EnergyMeter::EnergyMeter(int) {}
double EnergyMeter::millijoules() const { return -1; }
int EnergyMeter::sm_clock_mhz() const { return -1; }
long long EnergyMeter::clock_reasons() const { return -1; }
#endif

std::string clock_reason_names(unsigned long long mask) {
  static const struct {
    unsigned long long bit;
    const char* name;
  } kNames[] = {{kClockReasonSwPowerCap, "sw power cap"},
                {kClockReasonHwSlowdown, "hw slowdown"},
                {kClockReasonSwThermal, "sw thermal"},
                {kClockReasonHwThermal, "hw thermal"},
                {kClockReasonHwPowerBrake, "hw power brake"}};
  std::string names;
  for (const auto& n : kNames)
    if (mask & n.bit) names += (names.empty() ? "" : ", ") + std::string(n.name);
  return names.empty() ? "none" : names;
}

}  // namespace tessera::app::bench
