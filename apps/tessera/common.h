// Shared pieces of the `tessera` command: option parsing, device buffers, dtype names,
// random fills and timing. Nothing here is part of the library's API.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/tessera.h"

namespace tessera::app {

// A wrong command line: printed with a hint to --help, exit status 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A small long-option parser: --name VALUE, --name=VALUE, and flags. Each subcommand declares
// its options, so --help is generated from the same table that parses.
class ArgParser {
 public:
  ArgParser(std::string usage, std::string summary);

  void add_int(const std::string& name, int* target, const std::string& help);
  void add_uint64(const std::string& name, std::uint64_t* target, const std::string& help);
  void add_double(const std::string& name, double* target, const std::string& help);
  void add_string(const std::string& name, std::string* target, const std::string& help);
  void add_list(const std::string& name, std::vector<std::string>* target, const std::string& help);
  void add_flag(const std::string& name, bool* target, const std::string& help);
  void add_epilog(const std::string& text) { epilog_ += text; }

  // Parses argv[first..argc). Returns false when --help was given (help already printed).
  // Throws UsageError on unknown options or bad values.
  bool parse(int argc, char** argv, int first);
  void print_help(std::ostream& os) const;

 private:
  enum class Kind { integer, uint64, real, text, list, flag };
  struct Option {
    std::string name;
    Kind kind;
    void* target;
    std::string help;
  };
  void add(const std::string& name, Kind kind, void* target, const std::string& help);
  std::string usage_, summary_, epilog_;
  std::vector<Option> options_;
};

// Storage dtype from a name: bf16, fp16 (f16, half), fp32 (f32, float).
DType parse_dtype(const std::string& name);

// A buffer on a device: host memory for the CPU, cudaMalloc'd memory for CUDA.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Device device, std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  const Device& device() const { return device_; }

  void upload(const void* host, std::size_t bytes, std::size_t offset = 0);
  void download(void* host, std::size_t bytes, std::size_t offset = 0) const;
  void fill_bytes(unsigned char value);  // e.g. 0xff: every fp16/bf16/fp32 element a NaN

 private:
  void release() noexcept;
  Device device_ = Device::cpu();
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// Waits for all work queued on the device (no-op on the CPU).
void synchronize(const Device& device);

// Facts about the CUDA devices visible to this process (empty without CUDA).
struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int major = 0, minor = 0;
  int sms = 0;
  double memory_gib = 0;
};
std::vector<CudaDeviceInfo> cuda_devices();
bool built_with_cuda();

// Fills `count` elements of dtype at `dst` with N(0, stddev) values rounded to the dtype.
void fill_normal(void* dst, std::int64_t count, DType dtype, std::mt19937_64& rng, float stddev = 1.0f);

// The plan() benchmark's batch (cpu.plan and cuda.plan time the same one): 256 requests,
// `prefill` chunks of 512 query tokens (request i with 512 (i + 1) keys) first, then decode
// tokens over 1k-32k keys drawn from a fixed seed.
struct PlanBenchBatch {
  std::vector<std::int32_t> q_lens, kv_lens;
  std::int64_t total_q = 0;
  int kv_max = 0;
};
PlanBenchBatch plan_bench_batch(int prefill);
// Its two cases (the rows of cpu.plan and cuda.plan): 256 decode tokens; 8 prefill chunks then
// 248 decode tokens.
struct PlanBenchCase {
  const char* name;
  int prefill;
};
inline constexpr PlanBenchCase kPlanBenchCases[] = {{"plan 256 dec", 0}, {"plan 8 chunks+248 dec", 8}};

inline double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// Median of the timings of `fn` after one warm-up call: repeats until `min_time` seconds
// have passed and at least `min_reps` runs were taken (at most `max_reps`).
double median_seconds(const std::function<void()>& fn, double min_time, int min_reps = 3, int max_reps = 100);
// Same runs, the fastest one: for ceilings, which are "the best this device did".
double best_seconds(const std::function<void()>& fn, double min_time, int min_reps = 3, int max_reps = 100);

std::string format_seconds(double s);  // "12.3 ms", "4.56 us", "1.20 s"
std::string format_count(double v);    // "1.23e+06" style compact numbers for tables

}  // namespace tessera::app
