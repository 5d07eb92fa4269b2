// The benchmark suite registry of `tessera bench`.
//
// A suite is a named function that measures cases on one kind of device and returns rows for
// the table. Suites register themselves from any apps/tessera/*.cpp file with
//
//   TESSERA_BENCH_SUITE(cpu_forward, {"cpu.forward", DeviceKind::cpu, "dense forward ...", run_fn});
//
// so a new family (e.g. apps/tessera/bench_cuda.cpp, compiled only with TESSERA_WITH_CUDA) adds
// suites without touching the driver. A device kind may also register how to measure its
// ceilings (peak compute rate, memory read bandwidth) with TESSERA_BENCH_CEILINGS; the driver
// measures them once per run and prints each row's fraction of the relevant ceiling.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::app::bench {

// Measured ceilings of the device under test; 0 = unknown.
struct Ceilings {
  double flops = 0;          // FLOP/s the device reaches on a simple kernel
  std::string flops_what;    // what was measured ("fp32 mul+add, 2 threads")
  double read_bytes = 0;     // bytes/s of a large read-only sum
  std::string read_what;
};

struct Context {
  Device device = Device::cpu();
  int threads = 0;          // CPU threads (0 = all cores)
  double min_time = 0.3;    // seconds of timed runs per case (after one warm-up)
  bool quick = false;       // fewer / smaller cases
  // Dense CUDA attention rows (cuda.forward, cuda.backward, cuda.forward_fp8, cuda.forward_ragged):
  // 0 times each call alone (an event, the call, an event, a synchronisation: the call's host
  // time up to its launch lands in its figure); n > 0 times n calls back to back between two
  // events per sample, so that host time hides under the kernels before it, as bench/peers.py
  // --timing queued times the peers the table compares with.
  int queue = 0;
  // --timing stream: those samples one after the other on the stream, synchronised after the last
  // only, so that the GPU does not idle between them (under the power cap an idle share raises
  // the clock the samples run at).
  bool train = false;
};

// One row of the table. The rate column is flops/time when `flops` > 0, else bytes/time when
// `bytes` > 0, else `note` alone.
struct Row {
  std::string name;   // case name, e.g. "forward bf16 causal"
  std::string shape;  // e.g. "b1 h8/8 s1024/1024 d64"
  double seconds = 0; // median time per call
  double flops = 0;   // useful FLOPs per call (convention in docs/TESTING.md / bench/RESULTS.md)
  double bytes = 0;   // bytes that must move per call (memory-bound cases)
  std::string note;
  // Key columns of --csv, the same as bench/peers.py writes, so bench/compare.py can join rows
  // on (kind, dtype, head_dim, seq, batch, causal). For decode, seq is the KV length.
  std::string kind;  // "forward", "backward", "decode", "mixed", "plan"
  DType dtype = DType::bf16;
  int head_dim = 0, seq = 0, batch = 0, heads = 0;
  bool causal = false;
  std::string backend;  // CSV backend column; empty = the driver's ("tessera_cuda", "tessera_cpu")
};

// Called by a suite once per measured case, as soon as the case is done.
using Emit = std::function<void(const Row&)>;

struct Suite {
  std::string name;         // "cpu.forward"
  DeviceKind device = DeviceKind::cpu;
  std::string description;
  std::function<void(const Context&, const Emit&)> run;
};

struct CeilingProvider {
  DeviceKind device = DeviceKind::cpu;
  std::function<Ceilings(const Context&)> measure;
};

std::vector<Suite>& suites();
std::vector<CeilingProvider>& ceiling_providers();

inline bool register_suite(Suite s) {
  suites().push_back(std::move(s));
  return true;
}
inline bool register_ceilings(CeilingProvider p) {
  ceiling_providers().push_back(std::move(p));
  return true;
}

// FLOP convention: forward 4 * b * h * sq * sk * d, halved for causal with sq == sk;
// backward 2.5x forward.
inline double forward_flops(double b, double h, double sq, double sk, double d, bool causal) {
  const double f = 4.0 * b * h * sq * sk * d;
  return causal && sq == sk ? f / 2 : f;
}
inline double backward_flops(double b, double h, double sq, double sk, double d, bool causal) {
  return 2.5 * forward_flops(b, h, sq, sk, d, causal);
}

}  // namespace tessera::app::bench

#define TESSERA_BENCH_SUITE(id, ...) \
  static const bool tessera_bench_suite_##id = ::tessera::app::bench::register_suite(::tessera::app::bench::Suite __VA_ARGS__)
#define TESSERA_BENCH_CEILINGS(id, ...) \
  static const bool tessera_bench_ceilings_##id = \
      ::tessera::app::bench::register_ceilings(::tessera::app::bench::CeilingProvider __VA_ARGS__)
