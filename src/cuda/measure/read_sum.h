// A read-only pass over device memory, for the benchmark's memory ceiling: what a kernel that
// only reads (as decode reads K and V) can reach on this device, measured in the same run as the
// kernels it is set against. A device-to-device copy, the earlier ceiling, writes as many bytes
// as it reads and reached less than the decode kernels themselves.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace tessera::cuda::measure {

// Adds the 32-bit words of [data, data + bytes) into *sum, modulo 2^32 (the sum keeps every
// load live, and a test checks it). data: device memory, 16-byte aligned; bytes: a multiple of
// 16 (0 reads nothing); sum: device memory. One kernel launch on `stream`, asynchronous.
// Throws tessera::Error (invalid_argument naming `data`, `bytes` or `sum`; backend_failure for a
// failed launch).
void read_sum_u32(const void* data, std::size_t bytes, unsigned int* sum, cudaStream_t stream);

}  // namespace tessera::cuda::measure
