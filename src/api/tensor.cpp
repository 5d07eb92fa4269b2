#include "tessera/tensor.h"

#include <limits>
#include <string>

#include "tessera/error.h"

namespace tessera {

std::size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::e4m3: return 1;
    case DType::e5m2: return 1;
    case DType::i32: return 4;
  }
  return 0;
}

const char* dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32: return "fp32";
    case DType::f16: return "fp16";
    case DType::bf16: return "bf16";
    case DType::e4m3: return "fp8_e4m3";
    case DType::e5m2: return "fp8_e5m2";
    case DType::i32: return "int32";
  }
  return "unknown";
}

std::string device_name(const Device& device) {
  return device.kind == DeviceKind::cpu ? std::string("cpu") : "cuda:" + std::to_string(device.index);
}

namespace {
void check_rank(std::size_t rank) {
  if (rank > static_cast<std::size_t>(kMaxRank))
    throw Error(ErrorCode::invalid_argument, "shape",
                "Tensor: shape: expected at most " + std::to_string(kMaxRank) + " dims, got " + std::to_string(rank));
}
}  // namespace

Tensor::Tensor(void* data_, DType dtype_, std::initializer_list<std::int64_t> shape_, Device device_)
    : data(data_), dtype(dtype_), device(device_) {
  check_rank(shape_.size());
  rank = static_cast<int>(shape_.size());
  int d = 0;
  for (std::int64_t s : shape_) shape[d++] = s;
  std::int64_t st = 1;
  for (d = rank - 1; d >= 0; --d) {
    stride[d] = st;
    st *= shape[d];
  }
}

Tensor::Tensor(void* data_, DType dtype_, std::initializer_list<std::int64_t> shape_,
               std::initializer_list<std::int64_t> strides_, Device device_)
    : data(data_), dtype(dtype_), device(device_) {
  check_rank(shape_.size());
  if (strides_.size() != shape_.size())
    throw Error(ErrorCode::invalid_argument, "strides",
                "Tensor: strides: expected " + std::to_string(shape_.size()) + " entries (one per dim), got " +
                    std::to_string(strides_.size()));
  rank = static_cast<int>(shape_.size());
  int d = 0;
  for (std::int64_t s : shape_) shape[d++] = s;
  d = 0;
  for (std::int64_t s : strides_) stride[d++] = s;
}

Tensor Tensor::from_arrays(void* data, DType dtype, int rank, const std::int64_t* shape, const std::int64_t* strides,
                           Device device) {
  if (rank < 0) throw Error(ErrorCode::invalid_argument, "rank", "Tensor: rank: expected >= 0, got " + std::to_string(rank));
  check_rank(static_cast<std::size_t>(rank));
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.rank = rank;
  std::int64_t st = 1;
  for (int d = rank - 1; d >= 0; --d) {
    t.shape[d] = shape[d];
    t.stride[d] = strides ? strides[d] : st;
    st *= shape[d];
  }
  return t;
}

std::int64_t Tensor::numel() const noexcept {
  if (rank == 0) return 0;
  std::int64_t n = 1;
  bool negative = false, overflow = false;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] == 0) return 0;  // empty, whatever the other sizes
    negative = negative || shape[d] < 0;
    overflow = overflow || __builtin_mul_overflow(n, shape[d], &n);
  }
  if (negative) return -1;
  // Saturated, not wrapped: a wrapped count could read 0 and pass a null pointer as empty.
  return overflow ? std::numeric_limits<std::int64_t>::max() : n;
}

bool Tensor::is_contiguous() const noexcept {
  std::int64_t st = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (shape[d] != 1 && stride[d] != st) return false;
    st *= shape[d];
  }
  return true;
}

std::string Tensor::shape_string() const {
  std::string s = "(";
  for (int d = 0; d < rank; ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
  return s + ")";
}

}  // namespace tessera
