// Timing helpers of the CUDA benchmark suites (bench_cuda.cpp: dense attention and the
// ceilings; bench_cuda_paged.cpp: paged batches): medians of CUDA-event spans and of graph
// replays, sustained runs with their energy, random device buffers, rows for failed cases.
// Compiled only with TESSERA_WITH_CUDA.
#pragma once
#if defined(TESSERA_WITH_CUDA)

#include <cuda_runtime.h>

#include <cstdint>
#include <exception>
#include <functional>

#include "bench_registry.h"
#include "common.h"
#include "energy_meter.h"

namespace tessera::app::bench {

// Throws std::runtime_error naming `what` when e is an error.
void check(cudaError_t e, const char* what);

// Median milliseconds per call of launch() on `stream`, each sample `calls` calls between two
// events (divided by calls), until min_time seconds (at least 5 samples, at most 200) have been
// timed. With calls > 1 a 0.2 ms host function holds the stream before each sample's first event,
// so that the calls are queued before it. train: the samples follow each other on the stream with
// no synchronisation between them (--timing stream), sized by one probe sample before them.
// TESSERA_BENCH_SAMPLES=1 prints every sample in order.
double median_event_ms(cudaStream_t stream, const std::function<void()>& launch, double min_time, int calls = 1,
                       bool train = false);

// Median milliseconds per call of fn on the default stream after 3 warm-up calls, each sample
// `calls` calls back to back between two events (divided by calls). With calls > 1 a call's host
// time hides under the GPU time of the calls queued before it wherever it is the shorter, and the
// first call's under a 0.2 ms hold of the stream enqueued before the first event (bench/peers.py's
// time_samples_queued); with 1 it lands in the figure (in a train, where the host runs ahead of
// the GPU after the first sample, it hides there too). train: as median_event_ms's.
double cuda_median_ms(const std::function<void()>& fn, double min_time, int calls = 1, bool train = false);

// A dense attention row's time: cuda_median_ms with ctx.queue calls per sample when ctx.queue > 0
// (--timing queued; --timing stream: in one train), else one.
double dense_median_ms(const Context& ctx, const std::function<void()>& fn);

// Median milliseconds of one replay of a CUDA graph holding what fn(stream) enqueues.
double cuda_graph_median_ms(const std::function<void(cudaStream_t)>& fn, double min_time);

// Times fn into r (seconds, flops) with dense_median_ms; a failure becomes a "not run" row instead.
void time_row(Row& r, double flops, const std::function<void()>& fn, const Context& ctx);

// Fills a device buffer with random values of `dtype` (a 16 MiB random block, repeated).
void fill_random(DeviceBuffer& buf, DType dtype, std::uint64_t seed);

// A failed case (e.g. out of memory) as a "not run" row, the CUDA error cleared.
Row not_run(Row r, const std::exception& e);

// Sustained cost of fn (bench_cuda_timing.cpp says how it is measured); joules and watts -1
// where the meter has no counter. sm_mhz: the median SM clock sampled during the run, -1 without
// samples; reasons: the clock event reasons seen in any sample (EnergyMeter's kClockReason*);
// power_capped: the share of samples with the software power cap among them (-1 without samples).
struct Sustained {
  double ms = 0, joules = -1, watts = -1;
  double sm_mhz = -1, power_capped = -1;
  unsigned long long reasons = 0;
};
Sustained sustained(const std::function<void()>& fn, const EnergyMeter& meter, double warm, double seconds);

}  // namespace tessera::app::bench

#endif  // TESSERA_WITH_CUDA
