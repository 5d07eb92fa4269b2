// The sm90 batch-prefill kernel's host side (prefill_kernel.cuh), free of CUDA headers. Built
// only for sm_90a (src/cuda/sm90/ is its own object library); callers test
// TESSERA_HAS_SM90_KERNELS. The default for prefill-shaped units on compute capability 9.0 at
// head_dim 64 and 128; TESSERA_CUDA_BATCH=portable keeps the mma.sync kernels.
#pragma once

#include "cuda/batch/batch_args.h"

namespace tessera::cuda::sm90 {

// True for the shapes the kernel has an instance for (head_dim 64 and 128, bf16 / fp16).
bool batch_prefill_applicable(int head_dim);

// True where the slim (co-resident) policy has an instance: head_dim 128 (bf16 / fp16).
bool batch_prefill_slim_applicable(int head_dim);

// Launches the prefill-shaped units of the plan in `args` (header.num_prefill_items, read on
// the device) on a persistent grid of min(max_units, num_sms) CTAs. bf16: else fp16. slim (only
// where batch_prefill_slim_applicable; else ignored): the instance that leaves room for one
// decode-only CTA per SM and lets a programmatic dependent launch at once
// (TESSERA_CUDA_BATCH=sm90-coresident, a prototype not yet run on a GPU).
void launch_batch_prefill(const batch::BatchArgs& args, bool bf16, int head_dim, long long max_units, int num_sms,
                          void* stream, bool slim = false);

}  // namespace tessera::cuda::sm90
