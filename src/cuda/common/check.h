// Turns CUDA runtime errors into tessera::Error(backend_failure) naming the failing call, its
// source location and the runtime's own error string. Host code only.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "tessera/error.h"

namespace tessera::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  std::string msg = "CUDA error: ";
  msg += expr;
  msg += " failed at ";
  msg += file;
  msg += ":";
  msg += std::to_string(line);
  msg += ": ";
  msg += cudaGetErrorName(err);
  msg += " (";
  msg += cudaGetErrorString(err);
  msg += ")";
  // The runtime also keeps a non-sticky error as its "last error": clear it, or the next
  // TESSERA_CUDA_CHECK_LAUNCH (an unrelated call's launch check) would report it again. A sticky
  // error (a kernel fault) stays with the context whatever is read here.
  (void)cudaGetLastError();
  throw Error(ErrorCode::backend_failure, "", msg);
}

inline void check_cuda(cudaError_t err, const char* expr, const char* file, int line) {
  if (err != cudaSuccess) throw_cuda_error(err, expr, file, line);
}

}  // namespace tessera::cuda

// Wrap every CUDA runtime call: TESSERA_CUDA_CHECK(cudaMemcpyAsync(...)).
#define TESSERA_CUDA_CHECK(expr) ::tessera::cuda::check_cuda((expr), #expr, __FILE__, __LINE__)
// After a kernel launch: reports launch-configuration errors (not asynchronous faults).
#define TESSERA_CUDA_CHECK_LAUNCH() ::tessera::cuda::check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
