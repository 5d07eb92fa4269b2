// Argument checks shared by every public function. Each failure throws tessera::Error with
// the message "<function>: <argument>: expected <expectation>, got <value>" before anything
// is written.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "tessera/error.h"
#include "tessera/options.h"
#include "tessera/tensor.h"

namespace tessera::validate {

// Builds and throws the error.
[[noreturn]] void fail(ErrorCode code, const std::string& argument, const std::string& expected,
                       const std::string& got);

// Scope naming the public function in every message raised inside it.
class FunctionScope {
 public:
  explicit FunctionScope(const char* function);
  ~FunctionScope();
  FunctionScope(const FunctionScope&) = delete;
  FunctionScope& operator=(const FunctionScope&) = delete;
 private:
  const char* previous_;
};

void present(const Tensor& t, const char* name);                 // has data (or is empty with a rank)
void absent_or_present(const Tensor& t, const char* name);       // no-op, documents intent
void rank(const Tensor& t, const char* name, int expected, const char* dims);  // dims: "(batch, seq, heads, head_dim)"
void dtype_is(const Tensor& t, const char* name, DType expected);
void dtype_in(const Tensor& t, const char* name, std::initializer_list<DType> allowed);
void same_dtype(const Tensor& t, const char* name, const Tensor& ref, const char* ref_name);
void same_device(const Tensor& t, const char* name, const Tensor& ref, const char* ref_name);
void dim_equals(const Tensor& t, const char* name, int dim, std::int64_t expected, const char* what);
void unit_stride(const Tensor& t, const char* name, int dim, const char* dim_name);
void contiguous(const Tensor& t, const char* name);
void non_negative_strides(const Tensor& t, const char* name);
// An output with no two elements at one address (not a broadcast or other overlapping view,
// which a kernel would write from several threads at once). The test: taken in increasing
// stride order, each dimension of size > 1 strides at least past the span of those before it
// (it also refuses the rare non-overlapping layouts that interleave dimensions).
void no_internal_overlap(const Tensor& t, const char* name);
// t shares no byte with other (their address ranges do not intersect): a tensor written while
// `other` is read, or written too. Both non-empty; strides non-negative (checked before).
void disjoint(const Tensor& t, const char* name, const Tensor& other, const char* other_name);
// a and b are one view: the same device, address, dtype, shape and strides (a stride of a size-1
// dimension places nothing and is not compared).
bool same_view(const Tensor& a, const Tensor& b);
// ctx.num_threads >= 0 (0 = all cores).
void execution_context(const ExecutionContext& ctx);
void head_dim_supported(std::int64_t head_dim, const char* name);         // 8..256, multiple of 8
void heads_divisible(std::int64_t heads_q, std::int64_t heads_kv);
void value_in_range(std::int64_t value, const char* name, std::int64_t lo, std::int64_t hi);  // lo <= v <= hi
// A soft cap (finite and >= 0 checked before) the CUDA kernels can fold with this scale
// (math::softcap_foldable); the error gives both values to 9 significant digits.
void softcap_foldable(float scale, float softcap, const char* name);

std::string str(std::int64_t v);

}  // namespace tessera::validate
