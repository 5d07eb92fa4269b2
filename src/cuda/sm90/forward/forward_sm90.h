// The sm90 (Hopper, FA3-class) forward: what the host side needs, free of CUDA headers so that
// cuda_backend.cpp can include it. Built only for sm_90a (src/cuda/sm90/ is its own CMake
// object library); callers test TESSERA_HAS_SM90_KERNELS.
#pragma once

#include <string>

#include "params/attention_params.h"

namespace tessera::cuda::sm90 {

// True when this path runs `p` on its device: compute capability 9.0, f16/bf16 with head_dim
// 64, 128 or 256 or fp8_e4m3 with head_dim 128 or 256, enough opt-in shared memory, and the environment variable TESSERA_CUDA_FORWARD
// is not "portable" (which forces the sm80 path, for comparisons and tests). `why` (optional)
// says what excluded it.
bool forward_applicable(const AttentionParams& p, std::string* why = nullptr);

// Runs the forward for validated params that forward_applicable accepted, on p.stream.
// Returns false (nothing launched, nothing written) when the driver refuses a tensor map for
// these strides or the tile space exceeds 2^31 - 1 tiles: the caller then takes the portable
// path (fp8 has none: it must fail). Throws Error(backend_failure) on a CUDA error.
bool run_forward(const AttentionParams& p);

}  // namespace tessera::cuda::sm90
