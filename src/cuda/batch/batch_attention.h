// The CUDA executor of a batch-attention plan (format in plan/batch_plan.h): the serving
// kernels behind BatchAttention::run() on a CUDA workspace. Host-only header, no CUDA types.
//
// run() launches, on p.stream, with no host synchronisation and no allocation:
//   1. the attention kernel over the plan's work items: "decode-shaped" items (at most 16
//      packed query vectors: q_len x GQA group <= 16) run with four warps splitting every KV
//      tile's keys, the others (up to 128 packed vectors per CTA at head_dim <= 128, as two
//      64-vector row blocks over one K/V pass; 64 at 256) FA2-style with warps splitting the
//      query vectors. Layouts that allow both shapes get ONE fused launch whose CTAs take
//      both (docs/perf/mixed_batch.md), decode-only layouts the decode-only instance; head_dim
//      256 launches the two shapes one after the other;
//   2. the merge kernel that combines the fp32 partial states of split query rows.
// Grids are sized from the workspace layout's capacities and the device, never from the plan's
// counts: the kernels read num_items / num_merge_rows from the PlanHeader in device memory, so a
// CUDA graph captured around run() stays valid after a new plan() into the same workspace.
#pragma once

#include <string>

#include "params/batch_params.h"

namespace tessera::cuda {

// Executes the plan in p.workspace (a CUDA workspace holding a plan written by plan()).
// Requires batch_attention_supported(p). Throws tessera::Error(backend_failure) on a CUDA error.
void batch_attention_run(const BatchRunParams& p);

// True, or false with a sentence in *why (argument, what is supported, what was given):
// f16/bf16, head_dim 64/128/256, 16-byte aligned q/out/cache pointers, q/out/cache strides
// that are multiples of 8 elements, compute capability >= 8.0, enough shared memory.
bool batch_attention_supported(const BatchRunParams& p, std::string* why);

// Multiprocessors of CUDA device `device` (cached after the first query); for DeviceFacts.
int multiprocessor_count(int device);

}  // namespace tessera::cuda
