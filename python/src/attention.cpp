// tessera Python bindings: array conversion, dense/ragged attention and merge_states.
#include <string>

#include "common.h"

namespace tessera::py {
namespace {

Tensor raw_tensor(nb::tuple t, const char* name);

std::string describe_dtype(const nb::dlpack::dtype& dt) {
  const char* kind = "?";
  switch (static_cast<nb::dlpack::dtype_code>(dt.code)) {
    case nb::dlpack::dtype_code::Int: kind = "int"; break;
    case nb::dlpack::dtype_code::UInt: kind = "uint"; break;
    case nb::dlpack::dtype_code::Float: kind = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: kind = "bfloat"; break;
    case nb::dlpack::dtype_code::Complex: kind = "complex"; break;
    case nb::dlpack::dtype_code::Bool: kind = "bool"; break;
    default: kind = "float8/other"; break;
  }
  std::string s = std::string(kind) + std::to_string(dt.bits);
  if (dt.lanes != 1) s += "x" + std::to_string(dt.lanes);
  return s;
}

// The array's own dtype, if tessera has it.
bool native_dtype(const nb::dlpack::dtype& dt, DType* out) {
  if (dt.lanes != 1) return false;
  using C = nb::dlpack::dtype_code;
  switch (static_cast<C>(dt.code)) {
    case C::Float:
      if (dt.bits == 32) { *out = DType::f32; return true; }
      if (dt.bits == 16) { *out = DType::f16; return true; }
      return false;
    case C::Bfloat:
      if (dt.bits == 16) { *out = DType::bf16; return true; }
      return false;
    case C::Int:
      if (dt.bits == 32) { *out = DType::i32; return true; }
      return false;
    case C::Float8_E4M3FN: *out = DType::e4m3; return true;
    case C::Float8_E5M2: *out = DType::e5m2; return true;
    default: return false;
  }
}

[[noreturn]] void type_error(const std::string& msg) { throw nb::type_error(msg.c_str()); }

// (data_ptr, dtype name, shape, strides, DLPack device type, device id): a descriptor the
// Python side builds for frameworks whose DLPack export is slow (torch: ~14 us per tensor).
// The caller keeps the array alive for the duration of the call.
Tensor raw_tensor(nb::tuple t, const char* name) {
  try {
    const auto ptr = nb::cast<std::uintptr_t>(t[0]);
    const DType dtype = parse_dtype(nb::cast<std::string>(t[1]), name);
    nb::sequence shape = nb::borrow<nb::sequence>(t[2]), strides = nb::borrow<nb::sequence>(t[3]);
    const int rank = static_cast<int>(nb::len(shape));
    if (rank > kMaxRank || static_cast<int>(nb::len(strides)) != rank)
      throw nb::value_error((std::string(name) + ": expected at most " + std::to_string(kMaxRank) +
                             " dims with one stride each, got " + std::to_string(rank))
                                .c_str());
    std::int64_t sh[kMaxRank] = {}, st[kMaxRank] = {};
    bool empty = false;
    for (int d = 0; d < rank; ++d) {
      sh[d] = nb::cast<std::int64_t>(shape[d]);
      st[d] = nb::cast<std::int64_t>(strides[d]);
      empty = empty || sh[d] == 0;
    }
    const int dev_type = nb::cast<int>(t[4]), dev_id = nb::cast<int>(t[5]);
    Device device = dev_type == nb::device::cuda::value ? Device::cuda(dev_id) : Device::cpu();
    return Tensor::from_arrays(reinterpret_cast<void*>(ptr), dtype, rank, sh, empty ? nullptr : st, device);
  } catch (const nb::cast_error&) {
    type_error(std::string(name) + ": expected (data_ptr, dtype, shape, strides, device_type, device_id)");
  }
}

// What to_tensor needs of an imported array, whichever nanobind type imported it.
struct ArrayView {
  void* data;
  nb::dlpack::dtype dtype;
  int device_type, device_id, ndim;
  std::int64_t shape[kMaxRank] = {}, stride[kMaxRank] = {};
  bool has_strides;
};

template <class A>
ArrayView view_of(const A& a, const char* name) {
  ArrayView v{};
  v.data = const_cast<void*>(static_cast<const void*>(a.data()));
  v.dtype = a.dtype();
  v.device_type = a.device_type();
  v.device_id = a.device_id();
  v.ndim = static_cast<int>(a.ndim());
  if (v.ndim > kMaxRank)
    throw nb::value_error((std::string(name) + ": expected at most " + std::to_string(kMaxRank) + " dims, got " +
                           std::to_string(v.ndim))
                              .c_str());
  v.has_strides = a.stride_ptr() != nullptr;
  for (int d = 0; d < v.ndim; ++d) {
    v.shape[d] = static_cast<std::int64_t>(a.shape(d));
    v.stride[d] = v.has_strides ? a.stride(d) : 0;
  }
  return v;
}

// What an object that is not an importable array is: its type, and where it has them its dtype
// (a big-endian, object or structured numpy array) and a layout other than strided (sparse).
std::string describe_unimportable(nb::handle arr) {
  std::string s = py_type_name(arr);
  // str() of an attribute, or "" when it is missing or raises (the type alone then says enough).
  auto attr_text = [&](const char* attr) -> std::string {
    if (!nb::hasattr(arr, attr)) return "";
    PyObject* text = nullptr;
    if (PyObject* value = PyObject_GetAttrString(arr.ptr(), attr)) {
      text = PyObject_Str(value);
      Py_DECREF(value);
    }
    if (text == nullptr) {
      PyErr_Clear();
      return "";
    }
    return nb::cast<std::string>(nb::steal<nb::str>(text));
  };
  if (const std::string dtype = attr_text("dtype"); !dtype.empty()) s += " of dtype " + dtype;
  if (const std::string layout = attr_text("layout"); !layout.empty() && layout != "torch.strided")
    s += " with layout " + layout;
  return s;
}

// Imports `arr` (an array, not a descriptor) for `role`, keeping it alive in `arrays`.
// Outputs are imported as writable: nanobind then refuses an array that its exporter marks
// read-only (numpy >= 2.1 flags it in a versioned DLPack capsule; older numpy refuses the
// DLPack export and nanobind falls back to a writable buffer-protocol request, which a
// read-only array also refuses). A second, read-only import tells "read-only" from "not an array".
ArrayView import_array(nb::handle arr, const char* name, ArgArrays& arrays, Role role) {
  if (role == Role::output) {
    nb::ndarray<> w;
    if (nb::try_cast<nb::ndarray<>>(arr, w, /*convert=*/false)) {
      const ArrayView v = view_of(w, name);
      arrays.held_writable.push_back(std::move(w));
      return v;
    }
  }
  Array a;
  if (!nb::try_cast<Array>(arr, a, /*convert=*/false))
    type_error(std::string(name) + ": expected an array (strided; fp32, fp16, bf16, fp8 e4m3 or int32 in native byte order) "
               "with DLPack or buffer protocol support (numpy, torch, cupy, jax), got " + describe_unimportable(arr));
  if (role == Role::output) read_only_error(name);
  const ArrayView v = view_of(a, name);
  arrays.held.push_back(std::move(a));
  return v;
}

}  // namespace

std::string py_type_name(nb::handle obj) {
  return nb::cast<std::string>(nb::str(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr())))
                                           .attr("__qualname__")));
}

void read_only_error(const char* name) {
  throw Error(ErrorCode::invalid_argument, name,
              std::string(name) + ": expected a writable array, got a read-only one");
}

DType parse_dtype(const std::string& s, const char* name) {
  if (s == "fp32" || s == "float32" || s == "f32") return DType::f32;
  if (s == "fp16" || s == "float16" || s == "f16" || s == "half") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "fp8_e4m3" || s == "e4m3" || s == "float8_e4m3fn") return DType::e4m3;
  if (s == "fp8_e5m2" || s == "e5m2" || s == "float8_e5m2") return DType::e5m2;
  if (s == "int32" || s == "i32") return DType::i32;
  type_error(std::string(name) + ": expected dtype one of fp32, fp16, bf16, fp8_e4m3, fp8_e5m2, int32, got '" + s + "'");
}

KVLayout parse_layout(const std::string& s, const char* name) {
  if (s == "NHD" || s == "nhd") return KVLayout::NHD;
  if (s == "HND" || s == "hnd") return KVLayout::HND;
  throw nb::value_error((std::string(name) + ": expected 'NHD' or 'HND', got '" + s + "'").c_str());
}

namespace {

// "expected dtype" makes it a DTypeError (module.cpp).
[[noreturn]] void index_dtype_error(const char* name, const std::string& got) {
  throw Error(ErrorCode::invalid_argument, name, std::string(name) + ": expected dtype int32, got dtype " + got);
}

// An index argument must have dims (a 0-d array would read as absent). The library names a
// float dtype itself ("append_paged_kv: table.kv_indptr: expected dtype int32, got dtype fp32").
Tensor checked_index(const Tensor& t, const char* name) {
  if (t.rank == 0)
    throw Error(ErrorCode::invalid_argument, name,
                std::string(name) + ": expected an int32 array with dims, got 0 dims (a scalar)");
  return t;
}

}  // namespace

Tensor to_tensor(nb::handle obj, const char* name, ArgArrays& arrays, bool optional, Role role) {
  if (obj.is_none()) {
    if (optional) return Tensor{};
    type_error(std::string(name) + ": expected an array, got None");
  }
  nb::handle arr = obj;
  bool has_override = false;
  DType override_dtype = DType::f32;
  if (nb::isinstance<nb::tuple>(obj) && nb::len(obj) == 6) {
    const Tensor t = raw_tensor(nb::borrow<nb::tuple>(obj), name);
    return role == Role::index ? checked_index(t, name) : t;
  }
  if (nb::isinstance<nb::tuple>(obj)) {
    nb::tuple t = nb::borrow<nb::tuple>(obj);
    if (t.size() != 2 || !nb::isinstance<nb::str>(t[1]))
      type_error(std::string(name) + ": expected an array or (array, dtype name), got a tuple");
    arr = t[0];
    override_dtype = parse_dtype(nb::cast<std::string>(t[1]), name);
    has_override = true;
  }
  const ArrayView a = import_array(arr, name, arrays, role);
  const nb::dlpack::dtype dt = a.dtype;
  DType dtype;
  if (has_override) {
    if (dt.lanes != 1 || dt.bits != 8 * dtype_size(override_dtype))
      type_error(std::string(name) + ": expected " + std::to_string(8 * dtype_size(override_dtype)) +
                 "-bit elements to reinterpret as " + dtype_name(override_dtype) + ", got dtype " + describe_dtype(dt));
    dtype = override_dtype;
  } else if (!native_dtype(dt, &dtype)) {
    if (role == Role::index) index_dtype_error(name, describe_dtype(dt));  // int64, uint32, ...
    type_error(std::string(name) + ": expected dtype one of fp32, fp16, bf16, fp8_e4m3, fp8_e5m2, int32, got " +
               describe_dtype(dt));
  }
  Device device;
  switch (a.device_type) {
    case nb::device::cpu::value:
    case nb::device::cuda_host::value: device = Device::cpu(); break;
    case nb::device::cuda::value:
    case nb::device::cuda_managed::value: device = Device::cuda(a.device_id); break;
    default:
      throw nb::value_error((std::string(name) + ": expected an array on the cpu or a cuda device, got DLPack device type " +
                             std::to_string(a.device_type))
                                .c_str());
  }
  bool empty = false;
  for (int d = 0; d < a.ndim; ++d) empty = empty || a.shape[d] == 0;
  // Strides of an empty array mean nothing (exporters report 0 or anything): use contiguous.
  const bool use_strides = a.has_strides && !empty;
  const Tensor t = Tensor::from_arrays(a.data, dtype, a.ndim, a.shape, use_strides ? a.stride : nullptr, device);
  return role == Role::index ? checked_index(t, name) : t;
}

void bind_attention(nb::module_& m) {
  m.def(
      "attention_forward",
      [](nb::handle q, nb::handle k, nb::handle v, nb::handle out, nb::handle lse, nb::handle scale, bool causal,
         int window_left, int window_right, double softcap, bool return_lse, std::uintptr_t stream, int num_threads) {
        ArgArrays arrays;
        const Tensor tq = to_tensor(q, "q", arrays), tk = to_tensor(k, "k", arrays), tv = to_tensor(v, "v", arrays);
        const Tensor to = to_output(out, "out", arrays), tl = to_output(lse, "lse", arrays, true);
        const AttentionOptions o = make_options(scale, causal, window_left, window_right, softcap, return_lse, false);
        const ExecutionContext ctx = make_ctx(stream, num_threads);
        nb::gil_scoped_release release;
        attention_forward(tq, tk, tv, to, tl, o, ctx);
      },
      nb::arg("q").none(), nb::arg("k").none(), nb::arg("v").none(), nb::arg("out").none(), nb::arg("lse").none(),
      nb::arg("scale").none(), nb::arg("causal"), nb::arg("window_left"), nb::arg("window_right"),
      nb::arg("softcap"), nb::arg("return_lse"), nb::arg("stream") = 0, nb::arg("num_threads") = 0);

  m.def(
      "attention_forward_fp8",
      [](nb::handle q, nb::handle k, nb::handle v, nb::handle descale_q, nb::handle descale_k, nb::handle descale_v,
         nb::handle out, nb::handle lse, nb::handle scale, bool causal, int window_left, int window_right,
         double softcap, bool return_lse, std::uintptr_t stream, int num_threads) {
        ArgArrays arrays;
        const Tensor tq = to_tensor(q, "q", arrays), tk = to_tensor(k, "k", arrays), tv = to_tensor(v, "v", arrays);
        Fp8Descale d;
        d.q = to_tensor(descale_q, "descale_q", arrays, true);
        d.k = to_tensor(descale_k, "descale_k", arrays, true);
        d.v = to_tensor(descale_v, "descale_v", arrays, true);
        const Tensor to = to_output(out, "out", arrays), tl = to_output(lse, "lse", arrays, true);
        const AttentionOptions o = make_options(scale, causal, window_left, window_right, softcap, return_lse, false);
        const ExecutionContext ctx = make_ctx(stream, num_threads);
        nb::gil_scoped_release release;
        attention_forward_fp8(tq, tk, tv, d, to, tl, o, ctx);
      },
      nb::arg("q").none(), nb::arg("k").none(), nb::arg("v").none(), nb::arg("descale_q").none(),
      nb::arg("descale_k").none(), nb::arg("descale_v").none(), nb::arg("out").none(), nb::arg("lse").none(),
      nb::arg("scale").none(), nb::arg("causal"), nb::arg("window_left"), nb::arg("window_right"),
      nb::arg("softcap"), nb::arg("return_lse"), nb::arg("stream") = 0, nb::arg("num_threads") = 0);

  m.def(
      "attention_forward_fp8_ragged",
      [](nb::handle q, nb::handle k, nb::handle v, nb::handle cu_q, nb::handle cu_k, nb::handle descale_q,
         nb::handle descale_k, nb::handle descale_v, nb::handle out, nb::handle lse, nb::handle scale, bool causal,
         int window_left, int window_right, double softcap, bool return_lse, std::uintptr_t stream, int num_threads) {
        ArgArrays arrays;
        const Tensor tq = to_tensor(q, "q", arrays), tk = to_tensor(k, "k", arrays), tv = to_tensor(v, "v", arrays);
        const Tensor tcq = to_index(cu_q, "cu_seqlens_q", arrays), tck = to_index(cu_k, "cu_seqlens_k", arrays);
        Fp8Descale d;
        d.q = to_tensor(descale_q, "descale_q", arrays, true);
        d.k = to_tensor(descale_k, "descale_k", arrays, true);
        d.v = to_tensor(descale_v, "descale_v", arrays, true);
        const Tensor to = to_output(out, "out", arrays), tl = to_output(lse, "lse", arrays, true);
        const AttentionOptions o = make_options(scale, causal, window_left, window_right, softcap, return_lse, false);
        const ExecutionContext ctx = make_ctx(stream, num_threads);
        nb::gil_scoped_release release;
        attention_forward_fp8_ragged(tq, tk, tv, tcq, tck, d, to, tl, o, ctx);
      },
      nb::arg("q").none(), nb::arg("k").none(), nb::arg("v").none(), nb::arg("cu_seqlens_q").none(),
      nb::arg("cu_seqlens_k").none(), nb::arg("descale_q").none(), nb::arg("descale_k").none(),
      nb::arg("descale_v").none(), nb::arg("out").none(), nb::arg("lse").none(), nb::arg("scale").none(),
      nb::arg("causal"), nb::arg("window_left"), nb::arg("window_right"), nb::arg("softcap"), nb::arg("return_lse"),
      nb::arg("stream") = 0, nb::arg("num_threads") = 0);

  m.def(
      "attention_forward_ragged",
      [](nb::handle q, nb::handle k, nb::handle v, nb::handle cu_q, nb::handle cu_k, nb::handle out, nb::handle lse,
         nb::handle scale, bool causal, int window_left, int window_right, double softcap, bool return_lse,
         std::uintptr_t stream, int num_threads) {
        ArgArrays arrays;
        const Tensor tq = to_tensor(q, "q", arrays), tk = to_tensor(k, "k", arrays), tv = to_tensor(v, "v", arrays);
        const Tensor tcq = to_index(cu_q, "cu_seqlens_q", arrays), tck = to_index(cu_k, "cu_seqlens_k", arrays);
        const Tensor to = to_output(out, "out", arrays), tl = to_output(lse, "lse", arrays, true);
        const AttentionOptions o = make_options(scale, causal, window_left, window_right, softcap, return_lse, false);
        const ExecutionContext ctx = make_ctx(stream, num_threads);
        nb::gil_scoped_release release;
        attention_forward_ragged(tq, tk, tv, tcq, tck, to, tl, o, ctx);
      },
      nb::arg("q").none(), nb::arg("k").none(), nb::arg("v").none(), nb::arg("cu_seqlens_q").none(),
      nb::arg("cu_seqlens_k").none(), nb::arg("out").none(), nb::arg("lse").none(), nb::arg("scale").none(),
      nb::arg("causal"), nb::arg("window_left"), nb::arg("window_right"), nb::arg("softcap"), nb::arg("return_lse"),
      nb::arg("stream") = 0, nb::arg("num_threads") = 0);

  m.def(
      "attention_backward",
      [](nb::handle q, nb::handle k, nb::handle v, nb::handle out, nb::handle dout, nb::handle lse, nb::handle dq,
         nb::handle dk, nb::handle dv, nb::handle scale, bool causal, int window_left, int window_right, double softcap,
         bool deterministic, std::uintptr_t stream, int num_threads) {
        ArgArrays arrays;
        const Tensor tq = to_tensor(q, "q", arrays), tk = to_tensor(k, "k", arrays), tv = to_tensor(v, "v", arrays);
        const Tensor to = to_tensor(out, "out", arrays), tdo = to_tensor(dout, "dout", arrays);
        const Tensor tl = to_tensor(lse, "lse", arrays);
        const Tensor tdq = to_output(dq, "dq", arrays), tdk = to_output(dk, "dk", arrays),
                     tdv = to_output(dv, "dv", arrays);
        const AttentionOptions o = make_options(scale, causal, window_left, window_right, softcap, false, deterministic);
        const ExecutionContext ctx = make_ctx(stream, num_threads);
        nb::gil_scoped_release release;
        attention_backward(tq, tk, tv, to, tdo, tl, tdq, tdk, tdv, o, ctx);
      },
      nb::arg("q").none(), nb::arg("k").none(), nb::arg("v").none(), nb::arg("out").none(), nb::arg("dout").none(),
      nb::arg("lse").none(), nb::arg("dq").none(), nb::arg("dk").none(), nb::arg("dv").none(),
      nb::arg("scale").none(), nb::arg("causal"), nb::arg("window_left"), nb::arg("window_right"),
      nb::arg("softcap"), nb::arg("deterministic"), nb::arg("stream") = 0, nb::arg("num_threads") = 0);

  m.def(
      "attention_backward_ragged",
      [](nb::handle q, nb::handle k, nb::handle v, nb::handle cu_q, nb::handle cu_k, nb::handle out, nb::handle dout,
         nb::handle lse, nb::handle dq, nb::handle dk, nb::handle dv, nb::handle scale, bool causal, int window_left,
         int window_right, double softcap, bool deterministic, std::uintptr_t stream, int num_threads) {
        ArgArrays arrays;
        const Tensor tq = to_tensor(q, "q", arrays), tk = to_tensor(k, "k", arrays), tv = to_tensor(v, "v", arrays);
        const Tensor tcq = to_index(cu_q, "cu_seqlens_q", arrays), tck = to_index(cu_k, "cu_seqlens_k", arrays);
        const Tensor to = to_tensor(out, "out", arrays), tdo = to_tensor(dout, "dout", arrays);
        const Tensor tl = to_tensor(lse, "lse", arrays);
        const Tensor tdq = to_output(dq, "dq", arrays), tdk = to_output(dk, "dk", arrays),
                     tdv = to_output(dv, "dv", arrays);
        const AttentionOptions o = make_options(scale, causal, window_left, window_right, softcap, false, deterministic);
        const ExecutionContext ctx = make_ctx(stream, num_threads);
        nb::gil_scoped_release release;
        attention_backward_ragged(tq, tk, tv, tcq, tck, to, tdo, tl, tdq, tdk, tdv, o, ctx);
      },
      nb::arg("q").none(), nb::arg("k").none(), nb::arg("v").none(), nb::arg("cu_seqlens_q").none(),
      nb::arg("cu_seqlens_k").none(), nb::arg("out").none(), nb::arg("dout").none(), nb::arg("lse").none(),
      nb::arg("dq").none(), nb::arg("dk").none(), nb::arg("dv").none(), nb::arg("scale").none(), nb::arg("causal"),
      nb::arg("window_left"), nb::arg("window_right"), nb::arg("softcap"), nb::arg("deterministic"),
      nb::arg("stream") = 0, nb::arg("num_threads") = 0);

  m.def(
      "merge_states",
      [](nb::handle o_states, nb::handle lse_states, nb::handle out, nb::handle out_lse, std::uintptr_t stream,
         int num_threads) {
        ArgArrays arrays;
        const Tensor to = to_tensor(o_states, "o_states", arrays), tl = to_tensor(lse_states, "lse_states", arrays);
        const Tensor tout = to_output(out, "out", arrays), tol = to_output(out_lse, "out_lse", arrays, true);
        const ExecutionContext ctx = make_ctx(stream, num_threads);
        nb::gil_scoped_release release;
        merge_states(to, tl, tout, tol, ctx);
      },
      nb::arg("o_states").none(), nb::arg("lse_states").none(), nb::arg("out").none(), nb::arg("out_lse").none(),
      nb::arg("stream") = 0, nb::arg("num_threads") = 0);
}

}  // namespace tessera::py
