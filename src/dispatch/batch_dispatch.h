// Dispatch of batch attention over a paged KV cache (BatchAttention::run), and the backend
// entry points it routes to. Kept apart from dispatch.h so the batch path can grow its own
// instantiation table (head dim, dtype, page layout) for the CUDA serving kernels.
#pragma once

#include "params/batch_params.h"

namespace tessera {
namespace dispatch {
// Executes the plan stored in p.workspace. Throws unsupported when no backend fits.
void batch_attention_run(const BatchRunParams& p);
}  // namespace dispatch

namespace cpu {
// The CPU executor of the plan (src/cpu/batch_attention.cpp).
void batch_attention_run(const BatchRunParams& p);
}  // namespace cpu
}  // namespace tessera
