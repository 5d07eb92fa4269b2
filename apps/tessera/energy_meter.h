// The GPU's energy counter (NVML's total energy since driver load, in mJ), read through
// libnvidia-ml loaded at run time: no link or build dependency, and a bench without the driver
// library (or with a GPU that lacks the counter) just reports no energy. Under a power cap a
// sustained workload is limited by joules per call, not by its unthrottled time (bench/RESULTS.md,
// thirteenth session: the H200's 700 W cap lowers the SM clock ~15 % after ~30 ms of a mixed batch).
#pragma once

namespace tessera::app::bench {

class EnergyMeter {
 public:
  // The CUDA device `cuda_device`, matched to its NVML handle by PCI bus id.
  explicit EnergyMeter(int cuda_device);
  bool available() const { return read_ != nullptr; }
  // Millijoules since driver load; -1 when not available.
  double millijoules() const;

 private:
  using ReadFn = int (*)(void*, unsigned long long*);
  ReadFn read_ = nullptr;
  void* device_ = nullptr;
};

}  // namespace tessera::app::bench
