// Host side of the batch-attention timeline (trace.h).
#include "cuda/batch/trace.h"

#include "cuda/batch/batch_args.h"

#if defined(TESSERA_BATCH_TRACE)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/common/check.h"
#include "tessera/error.h"
#endif

namespace tessera::cuda::batch {

#if defined(TESSERA_BATCH_TRACE)
namespace {
cudaEvent_t run_events[2] = {nullptr, nullptr};  // around the traced run's kernels
}  // namespace

bool trace_begin(BatchArgs& args, void* stream) {
  static int run_index = 0;  // run() calls of the process (one thread: a debugging build)
  static unsigned long long* buffer = nullptr;
  const char* want = std::getenv("TESSERA_CUDA_BATCH_TRACE");
  const int this_run = run_index++;
  if (want == nullptr || *want == '\0') return false;
  char* end = nullptr;
  const long n = std::strtol(want, &end, 10);
  if (end == want || *end != '\0' || n < 0)
    throw Error(ErrorCode::invalid_argument, "TESSERA_CUDA_BATCH_TRACE",
                std::string("TESSERA_CUDA_BATCH_TRACE: expected the index of a run() (a whole number >= 0) or unset, got '") +
                    want + "'");
  if (n != this_run) return false;
  // The allocation, the copy back and the synchronisation cannot be captured into a graph.
  const auto s = static_cast<cudaStream_t>(stream);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  TESSERA_CUDA_CHECK(cudaStreamIsCapturing(s, &capture));
  if (capture != cudaStreamCaptureStatusNone) {
    std::fprintf(stderr, "TESSERA_CUDA_BATCH_TRACE=%s: that run() is being captured into a CUDA graph: not traced\n",
                 want);
    return false;
  }
  if (buffer == nullptr) TESSERA_CUDA_CHECK(cudaMalloc(&buffer, kTraceWords * sizeof(unsigned long long)));
  TESSERA_CUDA_CHECK(cudaMemsetAsync(buffer, 0, kTraceWords * sizeof(unsigned long long), s));
  // Events around the run's kernels: the stamps' span against the stream's own clock.
  if (run_events[0] == nullptr)
    for (cudaEvent_t& e : run_events) TESSERA_CUDA_CHECK(cudaEventCreate(&e));
  TESSERA_CUDA_CHECK(cudaEventRecord(run_events[0], s));
  args.trace = buffer;
  return true;
}

void trace_end(const BatchArgs& args, void* stream) {
  std::vector<unsigned long long> h(kTraceWords);
  TESSERA_CUDA_CHECK(cudaEventRecord(run_events[1], static_cast<cudaStream_t>(stream)));
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  float ms = 0;
  TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, run_events[0], run_events[1]));
  std::fprintf(stderr, "TRACE E %.1f\n", 1000.0 * ms);  // us between events around the kernels
  TESSERA_CUDA_CHECK(cudaMemcpy(h.data(), args.trace, h.size() * sizeof(h[0]), cudaMemcpyDeviceToHost));
  for (int b = 0; b < kTracePrefillCtas; ++b) {
    const unsigned long long* t = h.data() + b * kTracePrefillStride;
    if (t[kTraceRounds] == 0) continue;
    std::fprintf(stderr, "TRACE P %d %llu %llu", b, t[kTraceRounds + 1], t[kTraceRounds]);
    for (int r = 0; r < kTraceRounds && t[r] != 0; ++r) std::fprintf(stderr, " %llu", t[r]);
    std::fprintf(stderr, "\n");
  }
  for (int d = 0; d < kTraceDecodeCtas; ++d) {
    const unsigned long long* t = h.data() + kTraceDecodeOffset + 4 * d;
    if (t[0] != 0) std::fprintf(stderr, "TRACE D %d %llu %llu %llu %llu\n", d, t[3], t[0], t[1], t[2]);
  }
}
#else
bool trace_begin(BatchArgs&, void*) { return false; }
void trace_end(const BatchArgs&, void*) {}
#endif

}  // namespace tessera::cuda::batch
