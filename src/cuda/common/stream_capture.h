// Whether work enqueued on a stream now may be recorded into a CUDA graph instead of running.
// Host-only.
#pragma once

#include <cuda_runtime.h>

namespace tessera::cuda {

// True while `stream` is capturing (or its capture was invalidated), and also when the query
// itself fails (the legacy stream answers cudaErrorStreamCaptureImplicit while any blocking
// stream of the device captures; an earlier asynchronous error can come back here too):
// callers that shape their launches by the current plan keep every launch whenever a graph may
// be recording them, since a replay may follow another plan(). A failed query's error is
// consumed (cudaGetLastError), so a pending non-sticky error of the caller's goes with it; a
// sticky one is reported again by the next launch.
inline bool stream_may_be_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace tessera::cuda
