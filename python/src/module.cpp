// tessera Python bindings: the low-level module tessera._C.
//
// Every function here takes arrays that the caller allocated (outputs included) and writes
// into them; allocation in the caller's framework, stream lookup and autograd live in the
// Python package (python/tessera). The GIL is released while a kernel runs.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "common.h"

namespace tessera::py {
namespace {

// Python exception classes by tessera::ErrorCode, installed by the package (_set_error_types);
// the built-in classes are used until then. Deliberately leaked (never decref'd at exit).
PyObject* g_error_types[8] = {};
PyObject* g_dtype_error = nullptr;

PyObject* builtin_for(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument: return PyExc_ValueError;
    case ErrorCode::unsupported: return PyExc_NotImplementedError;
    case ErrorCode::workspace_too_small: return PyExc_ValueError;
    case ErrorCode::plan_mismatch: return PyExc_ValueError;
    case ErrorCode::backend_failure: return PyExc_RuntimeError;
    case ErrorCode::out_of_memory: return PyExc_MemoryError;
  }
  return PyExc_RuntimeError;
}

// A dtype problem is reported as invalid_argument with "expected dtype ..." in the message.
bool is_dtype_problem(const Error& e) {
  return e.code() == ErrorCode::invalid_argument && std::strstr(e.what(), ": expected dtype") != nullptr;
}

void raise_tessera_error(const Error& e) {
  const int idx = static_cast<int>(e.code());
  PyObject* type = nullptr;
  if (is_dtype_problem(e)) type = g_dtype_error ? g_dtype_error : PyExc_TypeError;
  if (!type) type = g_error_types[idx] ? g_error_types[idx] : builtin_for(e.code());
  if (type == builtin_for(e.code()) || type == PyExc_TypeError) {
    PyErr_SetString(type, e.what());
    return;
  }
  // Package classes take (message, code name, argument).
  PyObject* args = Py_BuildValue("(sss)", e.what(), error_code_name(e.code()), e.argument().c_str());
  if (!args) return;
  PyObject* inst = PyObject_Call(type, args, nullptr);
  Py_DECREF(args);
  if (!inst) return;  // the constructor's own exception stays set
  PyErr_SetObject(type, inst);
  Py_DECREF(inst);
}

void set_error_types(nb::dict types) {
  static const char* names[] = {"invalid_argument", "unsupported", "workspace_too_small",
                                "plan_mismatch",    "backend_failure", "out_of_memory"};
  for (int i = 0; i < 6; ++i) {
    if (types.contains(names[i])) {
      PyObject* t = types[names[i]].ptr();
      Py_INCREF(t);
      g_error_types[i] = t;
    }
  }
  if (types.contains("dtype")) {
    PyObject* t = types["dtype"].ptr();
    Py_INCREF(t);
    g_dtype_error = t;
  }
}

}  // namespace

AttentionOptions make_options(nb::handle scale, bool causal, int window_left, int window_right, double softcap,
                              bool return_lse, bool deterministic) {
  AttentionOptions o;
  if (!scale.is_none()) {
    float s = 0.0f;
    // nb::cast would throw std::bad_cast (a RuntimeError without a word) for "x", 1j or an array.
    if (PyBool_Check(scale.ptr()) || !nb::try_cast<float>(scale, s))
      throw nb::type_error(("scale: expected a real number or None, got " + py_type_name(scale)).c_str());
    o.scale = s;
  }
  o.causal = causal;
  o.window_left = window_left;
  o.window_right = window_right;
  // Taken as a double: a cap > 0 that float rounds to 0 would reach the library as no cap at all
  // (the library rejects caps that small, below max(scale, ln 2) / FLT_MAX, with this name).
  if (softcap > 0.0 && static_cast<float>(softcap) == 0.0f) {
    char msg[200];
    std::snprintf(msg, sizeof msg,
                  "options.softcap: expected 0, or a cap c with scale / c, ln(2) / c and c * log2(e) finite floats, "
                  "got %.9g (0 as a float)",
                  softcap);
    throw nb::value_error(msg);
  }
  o.softcap = static_cast<float>(softcap);
  o.return_lse = return_lse;
  o.deterministic = deterministic;
  return o;
}

}  // namespace tessera::py

NB_MODULE(_C, m) {
  namespace nb = nanobind;
  using namespace tessera::py;
  m.doc() = "tessera low-level bindings (use the tessera package, not this module directly)";

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const tessera::Error& e) {
      raise_tessera_error(e);
    }
  });

  m.def("_set_error_types", &set_error_types, nb::arg("types"));
  m.def("version", [] { return std::string(tessera::version()); });
  m.def("cuda_available", [] { return tessera::cuda_available(); });
#if defined(TESSERA_PY_WITH_CUDA)
  m.attr("built_with_cuda") = true;
#else
  m.attr("built_with_cuda") = false;
#endif

  bind_attention(m);
  bind_paged(m);
}
