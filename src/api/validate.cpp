#include "api/validate.h"

#include <sstream>

namespace tessera::validate {
namespace {
thread_local const char* current_function = nullptr;
}

FunctionScope::FunctionScope(const char* function) : previous_(current_function) { current_function = function; }
FunctionScope::~FunctionScope() { current_function = previous_; }

std::string str(std::int64_t v) { return std::to_string(v); }

void fail(ErrorCode code, const std::string& argument, const std::string& expected, const std::string& got) {
  std::ostringstream msg;
  if (current_function) msg << current_function << ": ";
  msg << argument << ": expected " << expected << ", got " << got;
  throw Error(code, argument, msg.str());
}

void present(const Tensor& t, const char* name) {
  if (t.rank <= 0) fail(ErrorCode::invalid_argument, name, "a tensor", "an absent tensor (rank 0)");
  if (t.data == nullptr && t.numel() > 0)
    fail(ErrorCode::invalid_argument, name, "a data pointer", "nullptr with shape " + t.shape_string());
}

void absent_or_present(const Tensor&, const char*) {}

void rank(const Tensor& t, const char* name, int expected, const char* dims) {
  // A 0-dim array has data but no dims: say so, not "absent" (rank 0 is how absence is spelled).
  if (t.rank == 0 && t.data != nullptr)
    fail(ErrorCode::invalid_argument, name, std::to_string(expected) + " dims " + dims, "0 dims (a scalar)");
  present(t, name);
  if (t.rank != expected)
    fail(ErrorCode::invalid_argument, name, std::to_string(expected) + " dims " + dims,
         std::to_string(t.rank) + " dims " + t.shape_string());
  for (int d = 0; d < t.rank; ++d)
    if (t.shape[d] < 0)
      fail(ErrorCode::invalid_argument, name, "non-negative sizes", "shape " + t.shape_string());
}

void dtype_is(const Tensor& t, const char* name, DType expected) {
  if (t.dtype != expected)
    fail(ErrorCode::invalid_argument, name, std::string("dtype ") + dtype_name(expected),
         std::string("dtype ") + dtype_name(t.dtype));
}

void dtype_in(const Tensor& t, const char* name, std::initializer_list<DType> allowed) {
  std::string list;
  for (DType d : allowed) {
    if (t.dtype == d) return;
    list += (list.empty() ? "" : ", ");
    list += dtype_name(d);
  }
  fail(ErrorCode::invalid_argument, name, "dtype one of {" + list + "}", std::string("dtype ") + dtype_name(t.dtype));
}

void same_dtype(const Tensor& t, const char* name, const Tensor& ref, const char* ref_name) {
  if (t.dtype != ref.dtype)
    fail(ErrorCode::invalid_argument, name, std::string("dtype ") + dtype_name(ref.dtype) + " (as " + ref_name + ")",
         std::string("dtype ") + dtype_name(t.dtype));
}

void same_device(const Tensor& t, const char* name, const Tensor& ref, const char* ref_name) {
  if (!(t.device == ref.device))
    fail(ErrorCode::invalid_argument, name, "device " + device_name(ref.device) + " (as " + ref_name + ")",
         "device " + device_name(t.device));
}

void dim_equals(const Tensor& t, const char* name, int dim, std::int64_t expected, const char* what) {
  if (t.shape[dim] != expected)
    fail(ErrorCode::invalid_argument, name,
         std::string("size ") + std::to_string(expected) + " at dim " + std::to_string(dim) + " (" + what + ")",
         "shape " + t.shape_string());
}

void unit_stride(const Tensor& t, const char* name, int dim, const char* dim_name) {
  if (t.shape[dim] > 1 && t.stride[dim] != 1)
    fail(ErrorCode::invalid_argument, name, std::string("unit stride on ") + dim_name,
         "stride " + std::to_string(t.stride[dim]));
}

void contiguous(const Tensor& t, const char* name) {
  if (!t.is_contiguous()) {
    std::string s = "(";
    for (int d = 0; d < t.rank; ++d) s += (d ? ", " : "") + std::to_string(t.stride[d]);
    fail(ErrorCode::invalid_argument, name, "a contiguous tensor", "strides " + s + ")");
  }
}

void non_negative_strides(const Tensor& t, const char* name) {
  for (int d = 0; d < t.rank; ++d)
    if (t.stride[d] < 0)
      fail(ErrorCode::invalid_argument, name, "non-negative strides",
           "stride " + std::to_string(t.stride[d]) + " at dim " + std::to_string(d));
}

void head_dim_supported(int head_dim, const char* name) {
  if (head_dim < 8 || head_dim > 256 || head_dim % 8 != 0)
    fail(ErrorCode::invalid_argument, name, "head_dim a multiple of 8 in [8, 256]", std::to_string(head_dim));
}

void heads_divisible(std::int64_t heads_q, std::int64_t heads_kv) {
  if (heads_kv <= 0 || heads_q % heads_kv != 0)
    fail(ErrorCode::invalid_argument, "heads_kv",
         "a divisor of heads_q = " + std::to_string(heads_q) + " (GQA/MQA)", std::to_string(heads_kv));
}

void value_in_range(std::int64_t value, const char* name, std::int64_t lo, std::int64_t hi) {
  if (value < lo || value > hi)
    fail(ErrorCode::invalid_argument, name, "a value in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]",
         std::to_string(value));
}

}  // namespace tessera::validate
