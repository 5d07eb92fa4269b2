// scratch_pool: a per-device stream-ordered memory pool for per-call workspace: the sm90
// forward's 4-byte tile counter, the backward's fp32 dQ accumulator, row statistics and dK/dV
// partials (backward_entry.cu). Host-only.
//
// Why not the device's default pool: its release threshold is 0, so it hands its memory back at
// every synchronization and the next cudaMallocAsync maps fresh memory before the call's first
// launch (measured: +50-170 us on a 0.2 ms forward, +0.15-0.3 ms on a backward of 16k tokens,
// which is 10-24 % at 1k; bench/RESULTS.md, thirteenth session). This pool keeps up to
// kScratchPoolKeepBytes across synchronizations (its release threshold): enough for the
// backward's workspace at 16k tokens x 32 heads x d128 (272 MB), while a larger one is given
// back at the next synchronization instead of being held from the rest of the process (e.g.
// PyTorch's caching allocator, which cannot trim this pool). The backward also trims it to zero
// and retries once when an allocation fails.
#pragma once

#include <cuda_runtime.h>

namespace tessera::cuda {

inline constexpr unsigned long long kScratchPoolKeepBytes = 1ull << 30;  // 1 GiB

// The pool of `device`, created on first use (thread-safe). nullptr when the device or driver
// has no stream-ordered allocator or the pool cannot be made: callers then allocate elsewhere
// (the backward: cudaMallocAsync on the device's default pool). Allocate with cudaMallocFromPoolAsync and free with cudaFreeAsync on the
// launch's stream; both are captured into CUDA graphs as memory nodes.
cudaMemPool_t scratch_pool(int device);

}  // namespace tessera::cuda
