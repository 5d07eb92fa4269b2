// The GPU's energy counter (NVML's total energy since driver load, in mJ), read through
// libnvidia-ml loaded at run time: no link or build dependency, and a bench without the driver
// library (or with a GPU that lacks the counter) just reports no energy. Under a power cap a
// sustained workload is limited by joules per call, not by its unthrottled time (bench/RESULTS.md,
// thirteenth session: the H200's 700 W cap lowers the SM clock ~15 % after ~30 ms of a mixed batch).
// The same library gives the SM clock and why NVML says it is held down (the clock event
// reasons), which a sustained run samples to tell a power-capped loop from one held by something
// else (mixed_batch.md, thirty-sixth session).
#pragma once

#include <string>

namespace tessera::app::bench {

// NVML's clock event (throttle) reason bits that a sustained run reports (nvml.h's
// nvmlClocksEventReason*, the same values as the older nvmlClocksThrottleReason*).
constexpr unsigned long long kClockReasonSwPowerCap = 0x4;
constexpr unsigned long long kClockReasonHwSlowdown = 0x8;
constexpr unsigned long long kClockReasonSwThermal = 0x20;
constexpr unsigned long long kClockReasonHwThermal = 0x40;
constexpr unsigned long long kClockReasonHwPowerBrake = 0x80;

// The reasons of `mask` among those above, by name ("sw power cap, hw slowdown"); "none" for none.
std::string clock_reason_names(unsigned long long mask);

class EnergyMeter {
 public:
  // The CUDA device `cuda_device`, matched to its NVML handle by PCI bus id.
  explicit EnergyMeter(int cuda_device);
  bool available() const { return read_ != nullptr; }
  // Millijoules since driver load; -1 when not available.
  double millijoules() const;
  // The SM clock now, in MHz; -1 when not available.
  int sm_clock_mhz() const;
  // The clock event reasons now (a bit mask, kClockReason* above among them); -1 when not available.
  long long clock_reasons() const;

 private:
  using ReadFn = int (*)(void*, unsigned long long*);
  using ClockFn = int (*)(void*, int, unsigned int*);
  ReadFn read_ = nullptr;
  ClockFn clock_ = nullptr;
  ReadFn reasons_ = nullptr;
  void* device_ = nullptr;
};

}  // namespace tessera::app::bench
