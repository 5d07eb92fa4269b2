// tessera Python bindings: shared helpers. Arrays arrive as any DLPack-capable object (or
// through the buffer protocol) and become non-owning tessera::Tensor views; the imported
// arrays are kept alive by an ArgArrays holder for the duration of the call.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/tessera.h"

namespace tessera::py {

namespace nb = nanobind;
using Array = nb::ndarray<nb::ro>;

// Keeps every array imported for one call alive until the call returns.
struct ArgArrays {
  std::vector<Array> held;
  std::vector<nb::ndarray<>> held_writable;  // outputs: imported as writable arrays
};

// What an array argument is for; it decides what to_tensor accepts.
enum class Role {
  input,   // read: any dtype tessera has, read-only arrays fine
  output,  // written (out, lse, gradients, pages being filled): must be writable
  index,   // int32 offsets or indices (cu_seqlens, page tables, page lists): int32 with dims
};

// Converts `obj` into a Tensor view.
//   None                      -> absent tensor (only when `optional`)
//   array                     -> its own dtype (fp32, fp16, bf16, fp8, int32)
//   (array, "bf16" | "fp16" | "fp8_e4m3" | ...) -> the array's bits reinterpreted as that
//                                dtype (for frameworks whose DLPack export lacks the dtype)
// Throws TypeError naming `name` for objects that are not arrays or have unsupported dtypes,
// and an invalid_argument tessera::Error for a read-only array in an output role, or an index
// array of a dtype tessera lacks (int64: "expected dtype int32", so a DTypeError) or of 0 dims.
Tensor to_tensor(nb::handle obj, const char* name, ArgArrays& arrays, bool optional = false,
                 Role role = Role::input);
inline Tensor to_output(nb::handle obj, const char* name, ArgArrays& arrays, bool optional = false) {
  return to_tensor(obj, name, arrays, optional, Role::output);
}
inline Tensor to_index(nb::handle obj, const char* name, ArgArrays& arrays) {
  return to_tensor(obj, name, arrays, false, Role::index);
}

// The name of obj's type ("ndarray", "NoneType"), for messages.
std::string py_type_name(nb::handle obj);

// Raises an invalid_argument tessera::Error: "<name>: expected a writable array, got a read-only one".
[[noreturn]] void read_only_error(const char* name);

// Parses "fp32", "float32", "bf16", ... into a DType; throws TypeError naming `name`.
DType parse_dtype(const std::string& s, const char* name);
KVLayout parse_layout(const std::string& s, const char* name);

inline ExecutionContext make_ctx(std::uintptr_t stream, int num_threads) {
  ExecutionContext ctx;
  ctx.stream = reinterpret_cast<void*>(stream);
  ctx.num_threads = num_threads;
  return ctx;
}

AttentionOptions make_options(nb::handle scale, bool causal, int window_left, int window_right, double softcap,
                              bool return_lse, bool deterministic);

void bind_attention(nb::module_& m);
void bind_paged(nb::module_& m);

}  // namespace tessera::py
