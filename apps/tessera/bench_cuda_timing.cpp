// Timing helpers of the CUDA benchmark suites (bench_cuda_timing.h).
#if defined(TESSERA_WITH_CUDA)

#include "bench_cuda_timing.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tessera::app::bench {

namespace {

// TESSERA_BENCH_SAMPLES: unset, empty or 0 (off) or 1 (print every sample of a median in the
// order taken); anything else is an error naming the variable, before anything is timed.
bool print_samples() {
  const char* v = std::getenv("TESSERA_BENCH_SAMPLES");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "0") == 0) return false;
  if (std::strcmp(v, "1") == 0) return true;
  throw std::invalid_argument(std::string("TESSERA_BENCH_SAMPLES: expected 1, 0 or unset, got '") + v + "'");
}

// Holds the stream for kLeadMs on the host (a host function enqueued before a queued sample's
// first event): while it runs, the first call is enqueued behind it, so its host time does not
// land in the sample as an idle gap; the later calls' hides under the kernels before them. Short,
// so that the GPU's duty cycle (and with it the clock under the power cap) barely moves (bench/
// peers.py's LEAD_MS, a sleep kernel there).
constexpr double kLeadMs = 0.2;
void CUDART_CB hold_stream(void*) { std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(kLeadMs)); }

}  // namespace

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

namespace {

// Events created up front and destroyed on every way out (a failed launch throws).
class EventSet {
 public:
  explicit EventSet(std::size_t n) : e_(n, nullptr) {
    for (cudaEvent_t& x : e_) {
      const cudaError_t r = cudaEventCreate(&x);
      if (r != cudaSuccess) {
        release();  // (a throwing constructor runs no destructor)
        check(r, "cudaEventCreate");
      }
    }
  }
  EventSet(const EventSet&) = delete;  // a copy would destroy the same events twice
  EventSet& operator=(const EventSet&) = delete;
  ~EventSet() { release(); }

  cudaEvent_t operator[](std::size_t i) const { return e_[i]; }
  // Milliseconds from event i to event j (both recorded and complete).
  float ms(std::size_t i, std::size_t j) const {
    float t = 0;
    check(cudaEventElapsedTime(&t, e_[i], e_[j]), "cudaEventElapsedTime");
    return t;
  }

 private:
  void release() {
    for (cudaEvent_t& x : e_) {
      if (x != nullptr) cudaEventDestroy(x);
      x = nullptr;
    }
  }
  std::vector<cudaEvent_t> e_;
};

// A stream of its own and the graph captured on it, instantiated; all destroyed on every way out.
struct CapturedGraph {
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CapturedGraph() = default;
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  ~CapturedGraph() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

// Runs sample() every 5 ms on a thread of its own until stop() or destruction: a thread still
// joinable when it is destroyed would terminate the program, so a throw between start and stop
// (a failed launch) ends in a clean error instead.
class PeriodicSampler {
 public:
  explicit PeriodicSampler(std::function<void()> sample)
      : thread_([this, sample = std::move(sample)] {
          while (!stop_.load(std::memory_order_relaxed)) {
            sample();
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
          }
        }) {}
  PeriodicSampler(const PeriodicSampler&) = delete;
  PeriodicSampler& operator=(const PeriodicSampler&) = delete;
  ~PeriodicSampler() { stop(); }
  void stop() {
    stop_.store(true, std::memory_order_relaxed);
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;  // last: started once stop_ exists
};

}  // namespace

// Median milliseconds per call of launch() on `stream`, each sample `calls` calls between two
// events (divided by calls), until min_time seconds (at least 5 samples, at most 200) have been
// timed. With calls > 1 each sample starts behind hold_stream. train: the samples follow each
// other on the stream (one event between two samples, one hold before the first, one
// synchronisation after the last), sized by a probe sample before them.
double median_event_ms(cudaStream_t stream, const std::function<void()>& launch, double min_time, int calls,
                       bool train) {
  if (calls < 1) throw std::invalid_argument("median_event_ms: calls >= 1 expected, got " + std::to_string(calls));
  const bool show_samples = print_samples();
  const auto sample = [&](cudaEvent_t a, cudaEvent_t b) {
    if (calls > 1) check(cudaLaunchHostFunc(stream, hold_stream, nullptr), "cudaLaunchHostFunc");
    check(cudaEventRecord(a, stream), "cudaEventRecord");
    for (int i = 0; i < calls; ++i) launch();
    check(cudaEventRecord(b, stream), "cudaEventRecord");
    check(cudaEventSynchronize(b), "timed run");
  };
  std::vector<double> ms;
  if (train) {
    EventSet probe(2);
    sample(probe[0], probe[1]);
    const double per_sample = std::max(1e-3, static_cast<double>(probe.ms(0, 1)));
    const int n = static_cast<int>(std::clamp(std::ceil(min_time * 1e3 / per_sample), 5.0, 200.0));
    EventSet marks(static_cast<std::size_t>(n) + 1);
    if (calls > 1) check(cudaLaunchHostFunc(stream, hold_stream, nullptr), "cudaLaunchHostFunc");
    check(cudaEventRecord(marks[0], stream), "cudaEventRecord");
    for (int s = 1; s <= n; ++s) {
      for (int i = 0; i < calls; ++i) launch();
      check(cudaEventRecord(marks[s], stream), "cudaEventRecord");
    }
    check(cudaEventSynchronize(marks[n]), "timed run");
    for (int s = 1; s <= n; ++s) ms.push_back(marks.ms(s - 1, s) / calls);
  } else {
    EventSet ab(2);
    double total = 0;
    while (ms.size() < 200 && (ms.size() < 5 || total < min_time * 1e3)) {
      sample(ab[0], ab[1]);
      const float t = ab.ms(0, 1);
      ms.push_back(t / calls);
      total += t;
    }
  }
  // Every sample in the order taken (drift within a case: clocks, power).
  if (show_samples) {
    std::fprintf(stderr, "samples (ms per call, %d call%s each, in order%s):", calls, calls == 1 ? "" : "s",
                 train ? ", one train" : "");
    for (const double t : ms) std::fprintf(stderr, " %.4f", t);
    std::fprintf(stderr, "\n");
  }
  std::sort(ms.begin(), ms.end());
  const std::size_t n = ms.size();
  return n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
}

// Median milliseconds per call of fn on the default stream, timed with events after 3 warm-up
// calls, `calls` calls per sample.
double cuda_median_ms(const std::function<void()>& fn, double min_time, int calls, bool train) {
  for (int i = 0; i < 3; ++i) fn();
  check(cudaDeviceSynchronize(), "warm-up");
  return median_event_ms(nullptr, fn, min_time, calls, train);
}

double dense_median_ms(const Context& ctx, const std::function<void()>& fn) {
  return cuda_median_ms(fn, ctx.min_time, ctx.queue > 0 ? ctx.queue : 1, ctx.queue > 0 && ctx.train);
}

// Median milliseconds of one replay of a CUDA graph holding what fn(stream) enqueues (captured
// once on a stream of its own): the GPU-side cost of a call as a serving engine that replays
// graphs sees it, without the host time of the call itself.
double cuda_graph_median_ms(const std::function<void(cudaStream_t)>& fn, double min_time) {
  CapturedGraph g;
  check(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaStreamBeginCapture(g.stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  try {
    fn(g.stream);
  } catch (...) {  // leave no stream in capture mode behind (later cases would fail on it)
    cudaStreamEndCapture(g.stream, &g.graph);
    cudaGetLastError();
    throw;
  }
  check(cudaStreamEndCapture(g.stream, &g.graph), "cudaStreamEndCapture");
  check(cudaGraphInstantiate(&g.exec, g.graph, 0), "cudaGraphInstantiate");
  const auto replay = [&] { check(cudaGraphLaunch(g.exec, g.stream), "cudaGraphLaunch"); };
  for (int i = 0; i < 3; ++i) replay();
  check(cudaStreamSynchronize(g.stream), "warm-up");
  return median_event_ms(g.stream, replay, min_time);
}

// Times fn into r (seconds, flops); a failure becomes a "not run" row instead.
void time_row(Row& r, double flops, const std::function<void()>& fn, const Context& ctx) {
  try {
    r.seconds = dense_median_ms(ctx, fn) * 1e-3;
    r.flops = flops;
  } catch (const std::exception& e) {
    r.note = std::string("not run: ") + e.what();
    r.flops = 0;
  }
}

// Fills a device buffer with random values of `dtype` (a 16 MiB random block, repeated).
void fill_random(DeviceBuffer& buf, DType dtype, std::uint64_t seed) {
  const std::size_t block = std::min<std::size_t>(buf.bytes(), 16u << 20);
  std::vector<unsigned char> host(block);
  std::mt19937_64 rng(seed);
  fill_normal(host.data(), static_cast<std::int64_t>(block / dtype_size(dtype)), dtype, rng);
  for (std::size_t off = 0; off < buf.bytes(); off += block) buf.upload(host.data(), std::min(block, buf.bytes() - off), off);
}

// A failed case (e.g. out of memory) becomes a "not run" row; the error is cleared so the
// next case starts clean (a sticky kernel fault would fail the next CUDA call and say so).
Row not_run(Row r, const std::exception& e) {
  r.seconds = 0;
  r.flops = r.bytes = 0;
  r.note = std::string("not run: ") + e.what();
  cudaGetLastError();
  return r;
}

// Sustained cost of fn (its launches only, on the default stream): calls back to back with no
// synchronisation between them for `seconds`, after `warm` seconds of the same, so that the GPU
// has settled at the clock its power cap allows (the first ~30 ms of a heavy load run at the
// boost clock). Milliseconds per call from events around the measured calls; joules per call and
// mean watts from the GPU's energy counter when the meter has one (else -1); the SM clock and
// the clock event reasons sampled every 5 ms by a host thread from just before the first measured
// call until the last one has finished (the launching thread enqueues, then waits for it).
Sustained sustained(const std::function<void()>& fn, const EnergyMeter& meter, double warm, double seconds) {
  const double once = cuda_median_ms(fn, 0.0);  // 3 warm-up calls + 5 timed
  const long warm_calls = std::max(1L, static_cast<long>(warm * 1e3 / once));
  const long calls = std::max(1L, static_cast<long>(seconds * 1e3 / once));
  for (long i = 0; i < warm_calls; ++i) fn();
  EventSet ab(2);
  check(cudaEventRecord(ab[0], nullptr), "cudaEventRecord");
  check(cudaEventSynchronize(ab[0]), "warm-up");  // the energy read below sees the warm-up's end
  const double mj0 = meter.millijoules();
  std::vector<int> clocks;
  std::vector<long long> reasons;
  PeriodicSampler sampler([&] {
    if (const int mhz = meter.sm_clock_mhz(); mhz > 0) clocks.push_back(mhz);
    if (const long long mask = meter.clock_reasons(); mask >= 0) reasons.push_back(mask);
  });
  check(cudaEventRecord(ab[0], nullptr), "cudaEventRecord");
  for (long i = 0; i < calls; ++i) fn();
  check(cudaEventRecord(ab[1], nullptr), "cudaEventRecord");
  const cudaError_t done = cudaEventSynchronize(ab[1]);
  sampler.stop();  // clocks and reasons are read below: the sampler has finished with them
  check(done, "sustained run");
  const double mj1 = meter.millijoules();
  const float total = ab.ms(0, 1);
  Sustained r;
  r.ms = total / static_cast<double>(calls);
  if (mj0 >= 0 && mj1 > mj0) {
    r.joules = (mj1 - mj0) * 1e-3 / static_cast<double>(calls);
    r.watts = (mj1 - mj0) / total;  // mJ / ms
  }
  if (!clocks.empty()) {
    std::nth_element(clocks.begin(), clocks.begin() + clocks.size() / 2, clocks.end());
    r.sm_mhz = clocks[clocks.size() / 2];
  }
  if (!reasons.empty()) {
    long capped = 0;
    r.reasons = 0;
    for (const long long mask : reasons) {
      r.reasons |= static_cast<unsigned long long>(mask);
      capped += (mask & static_cast<long long>(kClockReasonSwPowerCap)) != 0 ? 1 : 0;
    }
    r.power_capped = static_cast<double>(capped) / static_cast<double>(reasons.size());
  }
  return r;
}

}  // namespace tessera::app::bench

#endif  // TESSERA_WITH_CUDA
