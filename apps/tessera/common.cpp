#include "common.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "math/dtype_convert.h"

#if defined(TESSERA_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace tessera::app {

// ---------------------------------------------------------------------------------------------
// ArgParser

ArgParser::ArgParser(std::string usage, std::string summary)
    : usage_(std::move(usage)), summary_(std::move(summary)) {}

void ArgParser::add(const std::string& name, Kind kind, void* target, const std::string& help) {
  options_.push_back({name, kind, target, help});
}
void ArgParser::add_int(const std::string& n, int* t, const std::string& h) { add(n, Kind::integer, t, h); }
void ArgParser::add_uint64(const std::string& n, std::uint64_t* t, const std::string& h) { add(n, Kind::uint64, t, h); }
void ArgParser::add_double(const std::string& n, double* t, const std::string& h) { add(n, Kind::real, t, h); }
void ArgParser::add_string(const std::string& n, std::string* t, const std::string& h) { add(n, Kind::text, t, h); }
void ArgParser::add_list(const std::string& n, std::vector<std::string>* t, const std::string& h) { add(n, Kind::list, t, h); }
void ArgParser::add_flag(const std::string& n, bool* t, const std::string& h) { add(n, Kind::flag, t, h); }

bool ArgParser::parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      print_help(std::cout);
      return false;
    }
    if (arg.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + arg + "'");
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto it = std::find_if(options_.begin(), options_.end(), [&](const Option& o) { return o.name == name; });
    if (it == options_.end()) throw UsageError("unknown option '--" + name + "'");
    if (it->kind == Kind::flag) {
      if (has_value) throw UsageError("option '--" + name + "' takes no value");
      *static_cast<bool*>(it->target) = true;
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc) throw UsageError("option '--" + name + "' needs a value");
      value = argv[++i];
    }
    try {
      std::size_t used = 0;
      switch (it->kind) {
        case Kind::integer: {
          const long long v = std::stoll(value, &used);
          if (used != value.size() || v < -2147483647LL || v > 2147483647LL) throw std::invalid_argument("int");
          *static_cast<int*>(it->target) = static_cast<int>(v);
          break;
        }
        case Kind::uint64: {
          if (!value.empty() && value[0] == '-') throw std::invalid_argument("negative");
          *static_cast<std::uint64_t*>(it->target) = std::stoull(value, &used, 0);
          if (used != value.size()) throw std::invalid_argument("uint64");
          break;
        }
        case Kind::real: {
          *static_cast<double*>(it->target) = std::stod(value, &used);
          if (used != value.size()) throw std::invalid_argument("real");
          break;
        }
        case Kind::text: *static_cast<std::string*>(it->target) = value; break;
        case Kind::list: {
          // Accept both repeated options and comma-separated lists.
          std::stringstream ss(value);
          std::string item;
          while (std::getline(ss, item, ','))
            if (!item.empty()) static_cast<std::vector<std::string>*>(it->target)->push_back(item);
          break;
        }
        case Kind::flag: break;
      }
    } catch (const std::logic_error&) {
      throw UsageError("option '--" + name + "': cannot read '" + value + "' as a " +
                       (it->kind == Kind::real ? "number" : "whole number"));
    }
  }
  return true;
}

void ArgParser::print_help(std::ostream& os) const {
  os << "usage: " << usage_ << "\n\n" << summary_ << "\n\noptions:\n";
  for (const Option& o : options_) {
    std::string left = "  --" + o.name;
    switch (o.kind) {
      case Kind::integer: case Kind::uint64: left += " N"; break;
      case Kind::real: left += " X"; break;
      case Kind::text: left += " NAME"; break;
      case Kind::list: left += " NAME"; break;
      case Kind::flag: break;
    }
    std::string dflt;
    switch (o.kind) {
      case Kind::integer: dflt = std::to_string(*static_cast<int*>(o.target)); break;
      case Kind::uint64: dflt = std::to_string(*static_cast<std::uint64_t*>(o.target)); break;
      case Kind::real: {
        std::ostringstream s;
        s << *static_cast<double*>(o.target);
        dflt = s.str();
        break;
      }
      case Kind::text: dflt = *static_cast<std::string*>(o.target); break;
      default: break;
    }
    os << std::left << std::setw(26) << left << o.help;
    if (!dflt.empty()) os << " (default: " << dflt << ")";
    os << "\n";
  }
  os << std::left << std::setw(26) << "  -h, --help" << "show this help\n";
  if (!epilog_.empty()) os << "\n" << epilog_;
}

// ---------------------------------------------------------------------------------------------
// dtypes

DType parse_dtype(const std::string& name) {
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "fp16" || name == "f16" || name == "half" || name == "float16") return DType::f16;
  if (name == "fp32" || name == "f32" || name == "float" || name == "float32") return DType::f32;
  throw UsageError("dtype: expected bf16, fp16 or fp32, got '" + name + "'");
}

void fill_normal(void* dst, std::int64_t count, DType dtype, std::mt19937_64& rng, float stddev) {
  std::normal_distribution<float> dist(0.0f, stddev);
  for (std::int64_t i = 0; i < count; ++i) math::store_from_float(dst, i, dtype, dist(rng));
}

PlanBenchBatch plan_bench_batch(int prefill) {
  PlanBenchBatch b;
  std::mt19937_64 rng(99);
  std::uniform_int_distribution<int> len(1024, 32768);
  for (int i = 0; i < 256; ++i) {
    const bool pre = i < prefill;
    b.q_lens.push_back(pre ? 512 : 1);
    b.kv_lens.push_back(pre ? 512 * (i + 1) : len(rng));
    b.total_q += b.q_lens.back();
    b.kv_max = std::max(b.kv_max, b.kv_lens.back());
  }
  return b;
}

// ---------------------------------------------------------------------------------------------
// Device buffers

#if defined(TESSERA_WITH_CUDA)
namespace {
void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}
}  // namespace
#endif

bool built_with_cuda() {
#if defined(TESSERA_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

DeviceBuffer::DeviceBuffer(Device device, std::size_t bytes) : device_(device), bytes_(bytes) {
  const std::size_t alloc = std::max<std::size_t>(bytes, 64);
  if (device.kind == DeviceKind::cpu) {
    data_ = std::aligned_alloc(64, (alloc + 63) / 64 * 64);
    if (!data_) throw std::bad_alloc();
    return;
  }
#if defined(TESSERA_WITH_CUDA)
  cuda_check(cudaSetDevice(device.index), "cudaSetDevice");
  cuda_check(cudaMalloc(&data_, alloc), "cudaMalloc");
#else
  throw std::runtime_error("DeviceBuffer: this build has no CUDA backend");
#endif
}

DeviceBuffer::~DeviceBuffer() { release(); }

void DeviceBuffer::release() noexcept {
  if (!data_) return;
  if (device_.kind == DeviceKind::cpu) {
    std::free(data_);
  } else {
#if defined(TESSERA_WITH_CUDA)
    cudaFree(data_);
#endif
  }
  data_ = nullptr;
  bytes_ = 0;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : device_(other.device_), data_(other.data_), bytes_(other.bytes_) {
  other.data_ = nullptr;
  other.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    device_ = other.device_;
    data_ = other.data_;
    bytes_ = other.bytes_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, std::size_t bytes, std::size_t offset) {
  if (offset + bytes > bytes_) throw std::runtime_error("DeviceBuffer::upload: out of range");
  if (bytes == 0) return;
  if (device_.kind == DeviceKind::cpu) {
    std::memcpy(static_cast<char*>(data_) + offset, host, bytes);
    return;
  }
#if defined(TESSERA_WITH_CUDA)
  cuda_check(cudaMemcpy(static_cast<char*>(data_) + offset, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
#endif
}

void DeviceBuffer::download(void* host, std::size_t bytes, std::size_t offset) const {
  if (offset + bytes > bytes_) throw std::runtime_error("DeviceBuffer::download: out of range");
  if (bytes == 0) return;
  if (device_.kind == DeviceKind::cpu) {
    std::memcpy(host, static_cast<const char*>(data_) + offset, bytes);
    return;
  }
#if defined(TESSERA_WITH_CUDA)
  cuda_check(cudaMemcpy(host, static_cast<const char*>(data_) + offset, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
#endif
}

void DeviceBuffer::fill_bytes(unsigned char value) {
  if (bytes_ == 0) return;
  if (device_.kind == DeviceKind::cpu) {
    std::memset(data_, value, bytes_);
    return;
  }
#if defined(TESSERA_WITH_CUDA)
  cuda_check(cudaMemset(data_, value, bytes_), "cudaMemset");
#endif
}

void synchronize(const Device& device) {
  if (device.kind == DeviceKind::cpu) return;
#if defined(TESSERA_WITH_CUDA)
  cuda_check(cudaSetDevice(device.index), "cudaSetDevice");
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#endif
}

std::vector<CudaDeviceInfo> cuda_devices() {
  std::vector<CudaDeviceInfo> out;
#if defined(TESSERA_WITH_CUDA)
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return out;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    CudaDeviceInfo info;
    info.index = i;
    info.name = prop.name;
    info.major = prop.major;
    info.minor = prop.minor;
    info.sms = prop.multiProcessorCount;
    info.memory_gib = static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0);
    out.push_back(info);
  }
#endif
  return out;
}

// ---------------------------------------------------------------------------------------------
// Timing and formatting

namespace {
std::vector<double> timed_runs(const std::function<void()>& fn, double min_time, int min_reps, int max_reps) {
  fn();  // warm-up
  std::vector<double> times;
  const double start = now_seconds();
  while (static_cast<int>(times.size()) < max_reps &&
         (static_cast<int>(times.size()) < min_reps || now_seconds() - start < min_time)) {
    const double t0 = now_seconds();
    fn();
    times.push_back(now_seconds() - t0);
  }
  std::sort(times.begin(), times.end());
  return times;
}
}  // namespace

double median_seconds(const std::function<void()>& fn, double min_time, int min_reps, int max_reps) {
  const std::vector<double> times = timed_runs(fn, min_time, min_reps, max_reps);
  const std::size_t n = times.size();
  return n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
}

double best_seconds(const std::function<void()>& fn, double min_time, int min_reps, int max_reps) {
  return timed_runs(fn, min_time, min_reps, max_reps).front();
}

std::string format_seconds(double s) {
  char buf[64];
  if (s >= 1.0) std::snprintf(buf, sizeof buf, "%.2f s", s);
  else if (s >= 1e-3) std::snprintf(buf, sizeof buf, "%.3g ms", s * 1e3);
  else std::snprintf(buf, sizeof buf, "%.3g us", s * 1e6);
  return buf;
}

std::string format_count(double v) {
  char buf[64];
  if (v >= 100) std::snprintf(buf, sizeof buf, "%.0f", v);
  else if (v >= 10) std::snprintf(buf, sizeof buf, "%.1f", v);
  else std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

}  // namespace tessera::app
