// tessera: a non-owning view of a strided tensor in host or device memory.
// Plain C++: no CUDA or framework types appear here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace tessera {

enum class DType : std::uint8_t { f32, f16, bf16, e4m3, e5m2, i32 };

// Bytes per element, and a short name used in error messages ("bf16").
std::size_t dtype_size(DType dtype) noexcept;
const char* dtype_name(DType dtype) noexcept;

enum class DeviceKind : std::uint8_t { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;  // CUDA ordinal; 0 for the CPU

  static constexpr Device cpu() { return {DeviceKind::cpu, 0}; }
  static constexpr Device cuda(int index = 0) { return {DeviceKind::cuda, index}; }
  friend bool operator==(const Device&, const Device&) = default;
};

std::string device_name(const Device& device);  // "cpu", "cuda:0"

inline constexpr int kMaxRank = 5;

// Shape and strides are counted in elements. A default-constructed Tensor is "absent"
// (data == nullptr, rank 0); optional arguments take an absent tensor.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu();
  int rank = 0;
  std::int64_t shape[kMaxRank] = {};
  std::int64_t stride[kMaxRank] = {};

  Tensor() = default;
  // Contiguous (row-major) view.
  Tensor(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
         Device device = Device::cpu());
  // Strided view; `strides` must have as many entries as `shape`.
  Tensor(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
         std::initializer_list<std::int64_t> strides, Device device = Device::cpu());
  // Same, from arrays (for bindings that do not have initializer lists).
  static Tensor from_arrays(void* data, DType dtype, int rank, const std::int64_t* shape,
                            const std::int64_t* strides, Device device = Device::cpu());

  // True for a real tensor: it has dims and data (an empty tensor may have no data).
  bool present() const noexcept { return rank > 0 && (data != nullptr || numel() == 0); }
  // Elements: 0 if a size is 0, -1 if a size is negative, INT64_MAX if the product overflows.
  std::int64_t numel() const noexcept;
  std::int64_t size(int dim) const { return shape[dim < 0 ? dim + rank : dim]; }
  bool is_contiguous() const noexcept;
  std::string shape_string() const;  // "(2, 128, 8, 64)"

  template <typename T>
  T* ptr() const noexcept { return static_cast<T*>(data); }
};

}  // namespace tessera
