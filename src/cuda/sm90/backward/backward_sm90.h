// The sm90 (Hopper, wgmma) backward main kernel (docs/perf/backward_sm90_plan.md, stages 2 and 6):
// what the host side needs, free of CUDA headers. Built only for sm_90a (src/cuda/sm90/ is
// its own CMake object library); callers test TESSERA_HAS_SM90_KERNELS.
//
// Only the main kernel is new: the backward's host code (backward/backward_entry.cu)
// keeps its checks, grid and GQA split, workspace and pre/post kernels, and calls
// launch_backward_main here instead of the sm80 main kernel when backward_applicable says so.
#pragma once

#include <string>

#include "cuda/sm80/backward/backward.h"
#include "params/attention_params.h"

namespace tessera::cuda::sm90 {

// True when the sm90 main kernel runs `p`: compute capability 9.0, f16 or bf16,
// head_dim 64, 128 or 256, and enough opt-in shared memory. Everything the sm80 backward
// supports at those head dims is then taken (causal, windows, softcap, GQA with split groups, ragged,
// deterministic). The environment variable TESSERA_CUDA_BACKWARD=portable (or portable-compact,
// portable-compact2: the sm80 kernel's compact layouts) keeps the sm80 kernel (CTest runs the
// backward suite all three ways). `why` (optional) says what excluded it.
bool backward_applicable(const BackwardParams& p, std::string* why = nullptr);

// The sm90 kernel's tiles for `head_dim` (64, 128, 256; zeros otherwise): the host sizes the
// grid (block_kv), the GQA split and the deterministic counters (block_q) from these when the
// sm90 kernel runs. d128 and d256 equal the sm80 kernel's; d64 walks query tiles of 128 rows
// (the sm80 kernel: 64).
sm80::BwdShape backward_shape(int head_dim);

// Launches the sm90 main kernel on `stream` for the dtype and head dim of `p` (which
// backward_applicable accepted), with the arguments and workspace the sm80 host code built.
// Throws Error(backend_failure) on a CUDA error.
void launch_backward_main(const BackwardParams& p, const backward::BwdArgs& args, void* stream);

}  // namespace tessera::cuda::sm90
