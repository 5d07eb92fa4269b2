// GPU test support (header-only; the test_* files of this folder are the executables).
//
// DeviceTensor mirrors a testing::HostTensor byte for byte into device memory: the whole
// storage, NaN margins and row padding included, at the same offsets. So a GPU test fills
// and poisons on the host exactly as a CPU test does, uploads, runs, downloads into the very
// same HostTensor, and then uses count_nan() (every output written) and margins_intact()
// (nothing written outside the view) unchanged. Reads past a row or a tensor's end land on
// NaN on the device too.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdlib>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "support/test_support.h"
#include "tessera/tensor.h"

namespace tessera::testing {

// Throws on a CUDA error (tests catch nothing: gtest reports the exception and the call).
#define TESSERA_TEST_CUDA(expr)                                                                     \
  do {                                                                                              \
    const cudaError_t err_ = (expr);                                                                \
    if (err_ != cudaSuccess)                                                                        \
      throw std::runtime_error(std::string(#expr) + " failed at " + __FILE__ + ":" +              \
                               std::to_string(__LINE__) + ": " + cudaGetErrorString(err_));       \
  } while (0)

// Where a HostTensor's view lies inside its storage. HostTensor stores
// [margin][span of the view][margin] elements and base() points past the first margin; the
// margin is not exposed, so it is derived from the storage size and the view's span.
struct HostStorage {
  unsigned char* data = nullptr;  // first byte of the storage (margin included)
  std::size_t bytes = 0;
  std::size_t base_offset = 0;  // bytes from data to base()

  static HostStorage of(const HostTensor& t) {
    const std::size_t elem = dtype_size(t.dtype());
    std::int64_t span = 0;
    if (t.numel() > 0) {
      span = 1;
      for (std::size_t d = 0; d < t.shape().size(); ++d) span += (t.shape()[d] - 1) * t.strides()[d];
    }
    HostStorage s;
    s.bytes = t.bytes().size();
    const std::size_t view_bytes = static_cast<std::size_t>(span) * elem;
    if (s.bytes < view_bytes || (s.bytes - view_bytes) % (2 * elem) != 0)
      throw std::logic_error("HostStorage: storage is not [margin][view][margin]");
    s.base_offset = (s.bytes - view_bytes) / 2;
    s.data = static_cast<unsigned char*>(t.base()) - s.base_offset;
    return s;
  }
};

class DeviceTensor {
 public:
  DeviceTensor() = default;
  // Allocates the host tensor's whole storage on `device` and uploads it.
  explicit DeviceTensor(const HostTensor& host, int device = 0) : device_(device) {
    const HostStorage s = HostStorage::of(host);
    bytes_ = s.bytes;
    base_offset_ = s.base_offset;
    dtype_ = host.dtype();
    shape_ = host.shape();
    strides_ = host.strides();
    TESSERA_TEST_CUDA(cudaSetDevice(device_));
    if (bytes_ > 0) TESSERA_TEST_CUDA(cudaMalloc(&data_, bytes_));
    upload(host);
  }
  ~DeviceTensor() {
    if (data_ != nullptr) (void)cudaFree(data_);
  }
  DeviceTensor(DeviceTensor&& o) noexcept { *this = std::move(o); }
  DeviceTensor& operator=(DeviceTensor&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    std::swap(base_offset_, o.base_offset_);
    std::swap(device_, o.device_);
    std::swap(dtype_, o.dtype_);
    std::swap(shape_, o.shape_);
    std::swap(strides_, o.strides_);
    return *this;
  }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  // The same view as host.view(), in device memory.
  Tensor view() const {
    return Tensor::from_arrays(base(), dtype_, static_cast<int>(shape_.size()), shape_.data(), strides_.data(),
                               Device::cuda(device_));
  }
  void* base() const { return data_ == nullptr ? nullptr : static_cast<unsigned char*>(data_) + base_offset_; }

  // Host -> device (whole storage: values, padding and margins).
  void upload(const HostTensor& host) {
    const HostStorage s = check_same_layout(host);
    if (bytes_ > 0) TESSERA_TEST_CUDA(cudaMemcpy(data_, s.data, bytes_, cudaMemcpyHostToDevice));
  }
  // Device -> host (whole storage), after synchronising the device.
  void download(HostTensor& host) const {
    const HostStorage s = check_same_layout(host);
    TESSERA_TEST_CUDA(cudaDeviceSynchronize());
    if (bytes_ > 0) TESSERA_TEST_CUDA(cudaMemcpy(s.data, data_, bytes_, cudaMemcpyDeviceToHost));
  }
  // Poisons the host tensor and the device copy alike (outputs before a run).
  void poison(HostTensor& host) {
    host.poison();
    upload(host);
  }

 private:
  HostStorage check_same_layout(const HostTensor& host) const {
    const HostStorage s = HostStorage::of(host);
    if (s.bytes != bytes_ || s.base_offset != base_offset_ || host.shape() != shape_ || host.strides() != strides_)
      throw std::logic_error("DeviceTensor: host tensor has a different layout");
    return s;
  }

  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t base_offset_ = 0;
  int device_ = 0;
  DType dtype_ = DType::f32;
  std::vector<std::int64_t> shape_, strides_;
};

// A device buffer of plain values (for primitive tests).
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<T>& values) : n_(values.size()) {
    TESSERA_TEST_CUDA(cudaMalloc(&data_, bytes()));
    TESSERA_TEST_CUDA(cudaMemcpy(data_, values.data(), bytes(), cudaMemcpyHostToDevice));
  }
  explicit DeviceBuffer(std::size_t n, unsigned char fill_byte = 0xff) : n_(n) {
    TESSERA_TEST_CUDA(cudaMalloc(&data_, bytes()));
    TESSERA_TEST_CUDA(cudaMemset(data_, fill_byte, bytes()));
  }
  ~DeviceBuffer() { (void)cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return data_; }
  std::size_t bytes() const { return n_ * sizeof(T) > 0 ? n_ * sizeof(T) : 1; }
  std::vector<T> read() const {
    std::vector<T> out(n_);
    TESSERA_TEST_CUDA(cudaDeviceSynchronize());
    TESSERA_TEST_CUDA(cudaMemcpy(out.data(), data_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }

 private:
  T* data_ = nullptr;
  std::size_t n_ = 0;
};

// A forward launch with its split tail forced by TESSERA_CUDA_FORWARD_SPLIT_TAIL (knob: "" for the
// host rule) and the split the test expects (tiles 0: none).
struct SplitCase {
  CaseSpec spec;
  const char* knob;
  long long tiles;
  int parts;
  long long fewer_than_tiles = 0;  // > 0: the workspace must stay below this many tiles' worth
};

// Sets an environment variable for a scope and restores what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_, old_.c_str(), 1);
    else unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

// A CUDA graph of what `record(stream)` enqueues on a stream of its own (captured once, at
// construction); replay() launches it and waits for it. Destroys graph and stream on scope exit.
class CapturedGraph {
 public:
  template <typename Record>
  explicit CapturedGraph(Record&& record) {
    TESSERA_TEST_CUDA(cudaStreamCreate(&stream_));
    TESSERA_TEST_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    record(static_cast<void*>(stream_));
    TESSERA_TEST_CUDA(cudaStreamEndCapture(stream_, &graph_));
    TESSERA_TEST_CUDA(cudaGraphInstantiate(&exec_, graph_, 0));
  }
  ~CapturedGraph() {
    if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) (void)cudaGraphDestroy(graph_);
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  void replay() {
    TESSERA_TEST_CUDA(cudaGraphLaunch(exec_, stream_));
    TESSERA_TEST_CUDA(cudaStreamSynchronize(stream_));
  }

 private:
  cudaStream_t stream_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// Replays `graph` after poisoning g's device outputs (out, lse) and expects the bytes an eager
// call left in g.host (o_eager, l_eager): a replay must write every element, and write it as the
// eager call did. Case: a GPU test case with DeviceTensor out / lse mirroring g.host.out / lse.
template <typename Case, typename Bytes>
void expect_replay_writes(CapturedGraph& graph, Case& g, const Bytes& o_eager, const Bytes& l_eager) {
  g.out.poison(g.host.out);
  g.lse.poison(g.host.lse);
  graph.replay();
  g.out.download(g.host.out);
  g.lse.download(g.host.lse);
  EXPECT_TRUE(o_eager == g.host.out.bytes()) << "the replay's output differs from the eager call's";
  EXPECT_TRUE(l_eager == g.host.lse.bytes()) << "the replay's LSE differs from the eager call's";
}

// A stream-ordered pool's high-water mark of used memory: reset before a call, read after it, to
// see whether the call allocated a workspace from the pool (and how large).
inline void reset_pool_high_water(cudaMemPool_t pool) {
  std::uint64_t zero = 0;
  TESSERA_TEST_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
}
inline std::uint64_t pool_high_water(cudaMemPool_t pool) {
  std::uint64_t high = 0;
  TESSERA_TEST_CUDA(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high));
  return high;
}

}  // namespace tessera::testing
