// opt_in_shared_memory: a kernel's dynamic shared-memory opt-in (and, where asked, the largest
// carveout), set once per (kernel, device) instead of before every launch. Host-only.
#pragma once

namespace tessera::cuda {

// Sets cudaFuncAttributeMaxDynamicSharedMemorySize of `kernel` to `bytes` on the current device
// the first time this (kernel, device, bytes, carveout) is seen; later calls return at once
// (a mutex and a lookup). Throws tessera::Error (via TESSERA_CUDA_CHECK) when the runtime refuses.
void opt_in_shared_memory(const void* kernel, int bytes, bool max_carveout = false);

}  // namespace tessera::cuda
