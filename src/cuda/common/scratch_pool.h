// scratch_pool: a per-device stream-ordered memory pool for per-call workspace (the backward's
// fp32 dQ accumulator, row statistics and dK/dV partials, backward_entry.cu). Host-only.
//
// Why not the device's default pool: its release threshold is 0, so it hands its memory back at
// every synchronization and the next cudaMallocAsync maps fresh memory, tens of microseconds per
// call (measured: +50-170 us on a 0.2 ms call that synchronizes after each launch). This pool
// keeps what it has (release threshold: unlimited): after the first call it holds the largest
// workspace taken so far, until cudaMemPoolTrimTo gives back what is unused (the backward does
// that when an allocation fails, then retries).
#pragma once

#include <cuda_runtime.h>

namespace tessera::cuda {

// The pool of `device`, created on first use (thread-safe). nullptr when the device or driver
// has no stream-ordered allocator or the pool cannot be made: callers then allocate elsewhere
// (the backward: cudaMallocAsync on the device's default pool). Allocate with cudaMallocFromPoolAsync and free with cudaFreeAsync on the
// launch's stream; both are captured into CUDA graphs as memory nodes.
cudaMemPool_t scratch_pool(int device);

}  // namespace tessera::cuda
