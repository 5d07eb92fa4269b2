// launch_attention<T, D, kKind>: the host side of one attention instance (included by the
// instance_hdim*.cu files). Persistent grid: as many CTAs as fit on the device at once
// (occupancy, cached per device), capped by the unit capacity of the workspace layout.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>

#include "cuda/batch/attention_kernel.cuh"
#include "cuda/batch/batch_args.h"
#include "cuda/common/check.h"
#include "cuda/common/launch.cuh"

namespace tessera::cuda::batch {

template <typename T, int kHeadDim, int kKind>
void launch_attention(const BatchArgs& args, long long max_units, int num_sms, void* stream, LaunchOptions options) {
  constexpr int kThreads = Traits<kHeadDim, 4>::kThreads;
  constexpr int kSmem = instance_smem_bytes<kHeadDim, kKind>();
  if (max_units <= 0) return;
  auto* kernel = &batch_attention_kernel<T, kHeadDim, kKind>;
  int device = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  // Resident CTAs per SM, per device: set the smem opt-in and ask the occupancy calculator
  // once (host-side queries only; nothing here synchronises or allocates). The binary's
  // architecture too: the programmatic form needs the sm_90 code (griddepcontrol).
  constexpr int kMaxDevices = 64;
  static std::atomic<int> resident[kMaxDevices] = {};
  static std::atomic<int> binary_version[kMaxDevices] = {};
  int per_sm = device < kMaxDevices ? resident[device].load(std::memory_order_relaxed) : 0;
  int version = device < kMaxDevices ? binary_version[device].load(std::memory_order_relaxed) : 0;
  if (per_sm == 0 || version == 0) {
    if (kSmem > 48 * 1024)
      TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    TESSERA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, kSmem));
    per_sm = std::max(per_sm, 1);
    cudaFuncAttributes fa = {};
    TESSERA_CUDA_CHECK(cudaFuncGetAttributes(&fa, kernel));
    // The code's PTX version, not only the binary's: sm_90 SASS JIT-compiled from compute_80
    // PTX has no griddepcontrol instructions.
    version = std::max(std::min(fa.binaryVersion, fa.ptxVersion), 1);
    if (device < kMaxDevices) {
      binary_version[device].store(version, std::memory_order_relaxed);
      resident[device].store(per_sm, std::memory_order_relaxed);
    }
  }
  if (options.ctas_per_sm > 0) per_sm = std::min(per_sm, options.ctas_per_sm);
  const long long grid = std::min<long long>(max_units, static_cast<long long>(num_sms) * per_sm);
  launch_on_stream(kernel, dim3(static_cast<unsigned>(grid)), dim3(kThreads), kSmem, stream,
                   options.programmatic && version >= 90, args);
}

}  // namespace tessera::cuda::batch
