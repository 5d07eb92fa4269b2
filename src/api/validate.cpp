#include "api/validate.h"

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <limits>
#include <sstream>
#include <utility>

#include "math/online_softmax.h"

namespace tessera::validate {
namespace {
thread_local const char* current_function = nullptr;
}

FunctionScope::FunctionScope(const char* function) : previous_(current_function) { current_function = function; }
FunctionScope::~FunctionScope() { current_function = previous_; }

std::string str(std::int64_t v) { return std::to_string(v); }

void softcap_foldable(float scale, float softcap, const char* name) {
  if (math::softcap_foldable(scale, softcap)) return;
  char got[96];
  std::snprintf(got, sizeof got, "%.9g (scale %.9g)", static_cast<double>(softcap), static_cast<double>(scale));
  fail(ErrorCode::invalid_argument, name,
       "0, or a cap c with scale / c, ln(2) / c and c * log2(e) finite floats (c from max(scale, ln 2) / FLT_MAX to "
       "FLT_MAX / log2(e), ~2.36e38)",
       got);
}

void fail(ErrorCode code, const std::string& argument, const std::string& expected, const std::string& got) {
  std::ostringstream msg;
  if (current_function) msg << current_function << ": ";
  msg << argument << ": expected " << expected << ", got " << got;
  throw Error(code, argument, msg.str());
}

void present(const Tensor& t, const char* name) {
  if (t.rank <= 0) fail(ErrorCode::invalid_argument, name, "a tensor", "an absent tensor (rank 0)");
  const std::int64_t n = t.numel();
  if (t.data == nullptr && n > 0)
    fail(ErrorCode::invalid_argument, name, "a data pointer", "nullptr with shape " + t.shape_string());
  // No memory holds more than 2^63 bytes: such a shape is a caller's arithmetic gone wrong, and
  // sizes computed from it would wrap.
  std::int64_t bytes = 0;
  if (n == std::numeric_limits<std::int64_t>::max() ||
      __builtin_mul_overflow(n, static_cast<std::int64_t>(dtype_size(t.dtype)), &bytes))
    fail(ErrorCode::invalid_argument, name, "a shape of fewer than 2^63 bytes", "shape " + t.shape_string());
}

void absent_or_present(const Tensor&, const char*) {}

void execution_context(const ExecutionContext& ctx) {
  if (ctx.num_threads < 0)
    fail(ErrorCode::invalid_argument, "ctx.num_threads", ">= 0 (0 = all cores)", str(ctx.num_threads));
}

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

namespace {
// Orders n (<= kMaxRank) dimension indices by stride. An insertion sort: std::sort on so short
// an array trips GCC 12's -Warray-bounds (its 16-element threshold) in every build log.
void sort_dims_by_stride(const Tensor& t, int* dims, int n, bool ascending) {
  const auto before = [&](int x, int y) { return ascending ? t.stride[x] < t.stride[y] : t.stride[x] > t.stride[y]; };
  for (int i = 1; i < n; ++i)
    for (int j = i; j > 0 && before(dims[j], dims[j - 1]); --j) std::swap(dims[j], dims[j - 1]);
}
}  // namespace

void no_internal_overlap(const Tensor& t, const char* name) {
  int dims[kMaxRank];
  int n = 0;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] == 0) return;  // no elements
    if (t.shape[d] > 1) dims[n++] = d;
  }
  sort_dims_by_stride(t, dims, n, /*ascending=*/true);
  std::int64_t span = 1;  // elements covered by the dimensions taken so far
  for (int i = 0; i < n; ++i) {
    const int d = dims[i];
    if (t.stride[d] < span)
      fail(ErrorCode::invalid_argument, name,
           "a view whose elements do not overlap (an output is written by many threads; a broadcast or stride-0 "
           "view is refused)",
           "stride " + std::to_string(t.stride[d]) + " at dim " + std::to_string(d) + " in shape " +
               t.shape_string());
    span += (t.shape[d] - 1) * t.stride[d];
  }
}

namespace {
// [first, last] bytes of a tensor with non-negative strides and at least one element.
std::pair<std::uintptr_t, std::uintptr_t> byte_range(const Tensor& t) {
  std::int64_t last = 0;
  for (int d = 0; d < t.rank; ++d) last += (t.shape[d] - 1) * t.stride[d];
  const std::size_t size = dtype_size(t.dtype);
  const auto first = reinterpret_cast<std::uintptr_t>(t.data);
  return {first, first + static_cast<std::uintptr_t>(last) * size + size - 1};
}
bool has_elements(const Tensor& t) {
  if (t.data == nullptr || t.rank == 0) return false;
  for (int d = 0; d < t.rank; ++d)
    if (t.shape[d] == 0) return false;
  return true;
}
}  // namespace

namespace {
std::int64_t floor_div(std::int64_t a, std::int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }  // b > 0
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return -floor_div(-a, b); }

// Whether delta (elements) is x - y for an element offset x of a and y of b, two views that
// share their stride on every dim where both have more than one element (stride[d]: that
// stride, or the stride of the one that has more): delta = sum_d j_d stride[d] with
// -(b.shape[d] - 1) <= j_d <= a.shape[d] - 1. dims: the dims where either has more than one
// element, largest stride first. Each level tries the j_d that leave the rest within the
// smaller dims' reach: one or two where each stride is past the span of the smaller dims (one
// layout without internal overlap), a few more where the shapes differ (GQA heads); `budget`
// bounds the search, and an exhausted budget or a zero stride answers "yes" (the caller refuses).
bool offset_difference(std::int64_t delta, const Tensor& a, const Tensor& b, const std::int64_t* stride,
                       const int* dims, int n, int& budget) {
  if (n == 0) return delta == 0;
  if (--budget < 0) return true;
  const int d = dims[0];
  const std::int64_t s = stride[d];
  if (s <= 0) return true;
  std::int64_t rest_lo = 0, rest_hi = 0;  // what the smaller dims' sum can reach
  for (int i = 1; i < n; ++i) {
    rest_lo -= (b.shape[dims[i]] - 1) * stride[dims[i]];
    rest_hi += (a.shape[dims[i]] - 1) * stride[dims[i]];
  }
  const std::int64_t j_lo = std::max<std::int64_t>(-(b.shape[d] - 1), ceil_div(delta - rest_hi, s));
  const std::int64_t j_hi = std::min<std::int64_t>(a.shape[d] - 1, floor_div(delta - rest_lo, s));
  for (std::int64_t jd = j_lo; jd <= j_hi; ++jd)
    if (offset_difference(delta - jd * s, a, b, stride, dims + 1, n - 1, budget)) return true;
  return false;
}

// a and b of one dtype and rank whose strides agree wherever both have more than one element
// (one layout; or the gradients of q and of k in one packed (.., heads_q + 2 heads_kv, d)
// buffer); the common strides go into `stride`.
bool shared_strides(const Tensor& a, const Tensor& b, std::int64_t* stride) {
  if (a.rank != b.rank || a.dtype != b.dtype) return false;
  for (int d = 0; d < a.rank; ++d) {
    if (a.shape[d] > 1 && b.shape[d] > 1 && a.stride[d] != b.stride[d]) return false;
    stride[d] = a.shape[d] > 1 ? a.stride[d] : b.stride[d];
  }
  return true;
}
}  // namespace

static bool same_layout(const Tensor& a, const Tensor& b) {
  if (a.rank != b.rank || a.dtype != b.dtype) return false;
  for (int d = 0; d < a.rank; ++d)
    if (a.shape[d] != b.shape[d] || (a.shape[d] > 1 && a.stride[d] != b.stride[d])) return false;
  return true;  // (a stride of a size-1 dim places nothing)
}

bool same_view(const Tensor& a, const Tensor& b) {
  return a.device == b.device && a.data == b.data && same_layout(a, b);
}

void disjoint(const Tensor& t, const char* name, const Tensor& other, const char* other_name) {
  if (!has_elements(t) || !has_elements(other) || !(t.device == other.device)) return;
  const auto a = byte_range(t), b = byte_range(other);
  if (a.second < b.first || b.second < a.first) return;  // address ranges apart
  // Views with shared strides at two addresses (K and V pages interleaved in one buffer,
  // FlashInfer's combined layout; q, k and v gradients packed in one buffer, GQA included):
  // exact, whether an element of one falls on one of the other's. Callers check both for
  // internal overlap first. Otherwise the ranges' intersection is refused.
  std::int64_t stride[kMaxRank];
  if (shared_strides(t, other, stride)) {
    const std::int64_t size = static_cast<std::int64_t>(dtype_size(t.dtype));
    const std::int64_t delta_bytes = static_cast<std::int64_t>(b.first) - static_cast<std::int64_t>(a.first);
    int dims[kMaxRank];
    int n = 0;
    for (int d = 0; d < t.rank; ++d)
      if (t.shape[d] > 1 || other.shape[d] > 1) dims[n++] = d;
    std::sort(dims, dims + n, [&](int x, int y) { return stride[x] > stride[y]; });
    // Element x of t and y of other share a byte iff |x size - (y size + delta_bytes)| < size:
    // x - y is delta_bytes / size rounded down or up (the one value where it divides).
    const std::int64_t lo = floor_div(delta_bytes, size);
    const std::int64_t hi = delta_bytes % size == 0 ? lo : lo + 1;
    int budget = 1 << 16;
    if (!offset_difference(lo, t, other, stride, dims, n, budget) &&
        !offset_difference(hi, t, other, stride, dims, n, budget))
      return;
  }
  fail(ErrorCode::invalid_argument, name, std::string("memory apart from ") + other_name,
       "a view whose elements overlap " + std::string(other_name) + "'s");
}

void head_dim_supported(std::int64_t head_dim, const char* name) {
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
