// `tessera info`: version, backends built, devices found.
#include <iostream>
#include <thread>

#include "commands.h"
#include "common.h"

namespace tessera::app {

int run_info(int argc, char** argv) {
  ArgParser args("tessera info", "Print tessera's version, the backends this build has and the devices it finds.");
  if (!args.parse(argc, argv, 2)) return 0;

  std::cout << "tessera " << version() << "\n";
  std::cout << "backends built: cpu" << (built_with_cuda() ? ", cuda (sm80 portable path, sm90 Hopper path)" : "")
            << "\n";
  const DeviceFacts cpu = query_device(Device::cpu());
  std::cout << "devices:\n  cpu: " << cpu.num_sms << " worker threads (hardware threads: "
            << std::thread::hardware_concurrency() << ")\n";
  if (!built_with_cuda()) {
    std::cout << "  cuda: not built (configure with -DTESSERA_CUDA=ON or AUTO with nvcc on PATH)\n";
  } else {
    const auto devices = cuda_devices();
    if (devices.empty()) std::cout << "  cuda: built, but no CUDA device (or driver) found\n";
    for (const CudaDeviceInfo& d : devices) {
      std::cout << "  cuda:" << d.index << ": " << d.name << ", sm_" << d.major << d.minor << ", " << d.sms
                << " SMs, " << static_cast<int>(d.memory_gib + 0.5) << " GiB\n";
    }
  }
  std::cout << "cuda_available(): " << (cuda_available() ? "yes" : "no") << "\n";
  return 0;
}

}  // namespace tessera::app
