// scratch_pool: a per-device stream-ordered memory pool for small per-launch scratch (the sm90
// forward's 4-byte tile counter). Host-only.
//
// Why not the device's default pool: its release threshold is 0, so it hands its memory back at
// every synchronization and the next cudaMallocAsync maps fresh memory, tens of microseconds per
// call (measured: +50-170 us on a 0.2 ms call that synchronizes after each launch). This pool
// keeps what it has (release threshold: unlimited); it holds one allocation granule (2 MiB on
// current GPUs) for the process's lifetime, whatever the number of blocks taken from it.
#pragma once

#include <cuda_runtime.h>

namespace tessera::cuda {

// The pool of `device`, created on first use (thread-safe). nullptr when the device or driver
// has no stream-ordered allocator or the pool cannot be made: callers then take a path without
// scratch memory. Allocate with cudaMallocFromPoolAsync and free with cudaFreeAsync on the
// launch's stream; both are captured into CUDA graphs as memory nodes.
cudaMemPool_t scratch_pool(int device);

}  // namespace tessera::cuda
