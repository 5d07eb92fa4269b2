// Whether work enqueued on a stream now may be recorded into a CUDA graph instead of running.
// Host-only.
#pragma once

#include <cuda_runtime.h>

namespace tessera::cuda {

// True while `stream` is capturing (or its capture was invalidated), and also when the query
// itself fails (querying the legacy stream while another thread captures in global mode answers
// cudaErrorStreamCaptureImplicit): callers that shape their launches by the current plan keep
// every launch whenever a graph may be recording them, since a replay may follow another plan().
// A failed query's error is consumed so it does not surface at the caller's next check.
inline bool stream_may_be_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace tessera::cuda
