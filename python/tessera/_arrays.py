"""Framework adapters: how tessera reads the caller's arrays and allocates its outputs.

tessera takes any array that exports DLPack (or, for numpy, the buffer protocol) and
writes into outputs allocated *in the caller's framework, on the caller's device*:

==========  ==================================  ==============================================
framework   outputs                             stream the kernels run on
==========  ==================================  ==============================================
numpy       numpy.empty                         (cpu)
torch       torch.empty(..., device=x.device)   torch.cuda.current_stream(x.device)
cupy        cupy.empty under x.device           cupy.cuda.get_current_stream()
jax         computed in numpy (cpu) or cupy /   the default stream; inputs are made ready
            torch (gpu), returned as jax arrays first, outputs synchronised after
other       numpy (cpu arrays only)             (cpu)
==========  ==================================  ==============================================

Dtypes: float32, float16, bfloat16 (torch.bfloat16, or numpy with ml_dtypes.bfloat16),
fp8 e4m3/e5m2 where the framework has them; int32 for index arrays. Arrays whose DLPack
export lacks a dtype (numpy's ml_dtypes types, torch fp8) are passed as a bit-identical
integer view plus the dtype's name.
"""

import sys

import numpy as np

# tessera dtype names and their numpy counterparts (ml_dtypes ones resolved lazily).
_NUMPY_NATIVE = {"fp32": np.float32, "fp16": np.float16, "int32": np.int32, "uint8": np.uint8}
_ML_DTYPES = {"bf16": "bfloat16", "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}
_ML_DTYPES_BY_NUMPY_NAME = {v: k for k, v in _ML_DTYPES.items()}
_UINT_VIEW = {1: np.uint8, 2: np.uint16}


def _numpy_dtype(name):
    if name in _NUMPY_NATIVE:
        return np.dtype(_NUMPY_NATIVE[name])
    if name in _ML_DTYPES:
        try:
            import ml_dtypes
        except ImportError as e:
            raise TypeError(f"dtype {name}: numpy arrays of this dtype need the ml_dtypes package "
                            f"(pip install ml_dtypes)") from e
        return np.dtype(getattr(ml_dtypes, _ML_DTYPES[name]))
    raise TypeError(f"dtype: expected one of fp32, fp16, bf16, fp8_e4m3, fp8_e5m2, int32, got {name!r}")


def dtype_name(dtype):
    """tessera's name ("bf16", ...) for a dtype given as a string or any framework's dtype."""
    if isinstance(dtype, str):
        aliases = {"float32": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16",
                   "float8_e4m3fn": "fp8_e4m3", "e4m3": "fp8_e4m3", "float8_e5m2": "fp8_e5m2",
                   "e5m2": "fp8_e5m2", "i32": "int32", "f32": "fp32", "f16": "fp16"}
        return aliases.get(dtype, dtype)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(dtype, torch.dtype):
        return adapter_for_module("torch").NAMES.get(dtype, str(dtype))
    d = np.dtype(dtype)
    if d.name in _ML_DTYPES_BY_NUMPY_NAME:
        return _ML_DTYPES_BY_NUMPY_NAME[d.name]
    return {"float32": "fp32", "float16": "fp16", "int32": "int32", "uint8": "uint8"}.get(d.name, d.name)


class _NumpyAdapter:
    name = "numpy"

    def to_c(self, x):
        if not isinstance(x, np.ndarray):
            return x  # another framework's array, or garbage: the extension names it
        name = _ML_DTYPES_BY_NUMPY_NAME.get(x.dtype.name)
        if name is not None:
            return (x.view(_UINT_VIEW[x.dtype.itemsize]), name)
        return x

    def empty(self, like, shape, dtype):
        return np.empty(shape, dtype=_numpy_dtype(dtype))

    def empty_like(self, x):
        return np.empty(x.shape, dtype=x.dtype)

    def index_array(self, values, like):
        return np.ascontiguousarray(np.asarray(values, dtype=np.int32))

    def to_numpy(self, x):
        return np.asarray(x)

    def stream(self, like):
        return 0

    def device(self, like):
        return ("cpu", 0)

    def wrap(self, x):
        return x


class _TorchAdapter:
    name = "torch"

    def __init__(self, torch):
        self.torch = torch
        t = torch
        names = {t.float32: "fp32", t.float16: "fp16", t.bfloat16: "bf16", t.int32: "int32", t.uint8: "uint8"}
        for attr, name in (("float8_e4m3fn", "fp8_e4m3"), ("float8_e5m2", "fp8_e5m2")):
            if hasattr(t, attr):
                names[getattr(t, attr)] = name
        self.NAMES = names
        self.dtypes = {v: k for k, v in names.items()}
        self._raw_stream = getattr(t._C, "_cuda_getCurrentRawStream", None)  # fast; what inductor uses
        self._has_is_cpu = hasattr(t.Tensor, "is_cpu")

    def to_c(self, x):
        # A raw descriptor instead of DLPack: torch's __dlpack__ costs ~14 us per tensor.
        # is_cuda / is_cpu / get_device() rather than x.device.type: ~0.3 us less per tensor.
        # The shape goes as the torch.Size itself (the extension takes any sequence).
        try:
            name = self.NAMES.get(x.dtype)
        except AttributeError:  # None, a list: the extension names the problem
            return x
        if name is not None:
            try:
                if x.is_cuda:
                    return (x.data_ptr(), name, x.shape, x.stride(), 2, x.get_device())
                if x.is_cpu if self._has_is_cpu else x.device.type == "cpu":
                    return (x.data_ptr(), name, x.shape, x.stride(), 1, 0)
            except RuntimeError:  # no storage (sparse, nested): the extension names the argument
                pass
        # DLPack (or another framework's array): the extension names the problem
        return x.detach() if getattr(x, "requires_grad", False) else x

    def empty(self, like, shape, dtype):
        if dtype not in self.dtypes:
            raise TypeError(f"dtype: torch has no dtype for {dtype!r}")
        return self.torch.empty(shape, dtype=self.dtypes[dtype], device=like.device)

    def empty_like(self, x):
        # Sizes as separate ints: torch parses them ~1 us faster than a torch.Size. A 0-dim x
        # needs the sequence form (torch.empty() with no size is an error).
        shape = x.shape
        if shape:
            return self.torch.empty(*shape, dtype=x.dtype, device=x.device)
        return self.torch.empty(shape, dtype=x.dtype, device=x.device)

    def index_array(self, values, like):
        if isinstance(values, self.torch.Tensor):
            return values.to(device=like.device, dtype=self.torch.int32).contiguous()
        return self.torch.as_tensor(np.asarray(values, dtype=np.int32), device=like.device)

    def to_numpy(self, x):
        return x.detach().cpu().numpy()

    def stream(self, like):
        if like.is_cuda:  # a cuda tensor always has a device index
            if self._raw_stream is not None:
                return self._raw_stream(like.get_device())
            return self.torch.cuda.current_stream(like.device).cuda_stream
        return 0

    def device(self, like):
        if like.device.type == "cuda":
            return ("cuda", like.device.index or 0)
        return ("cpu", 0)

    def wrap(self, x):
        return x


class _CupyAdapter:
    name = "cupy"

    def __init__(self, cupy):
        self.cupy = cupy

    def to_c(self, x):
        return x

    def empty(self, like, shape, dtype):
        with like.device:
            return self.cupy.empty(shape, dtype=_numpy_dtype(dtype))

    def empty_like(self, x):
        with x.device:
            return self.cupy.empty(x.shape, dtype=x.dtype)

    def index_array(self, values, like):
        with like.device:
            return self.cupy.ascontiguousarray(self.cupy.asarray(values, dtype=np.int32))

    def to_numpy(self, x):
        return self.cupy.asnumpy(x)

    def stream(self, like):
        return self.cupy.cuda.get_current_stream().ptr

    def device(self, like):
        return ("cuda", like.device.id)

    def wrap(self, x):
        return x


class _JaxAdapter:
    """jax arrays are immutable: outputs are computed into a staging array (numpy on the cpu,
    cupy or torch on a gpu) and handed back as jax arrays (zero-copy through DLPack on gpus)."""

    name = "jax"

    def __init__(self, jax):
        self.jax = jax

    def _on_gpu(self, like):
        return any(d.platform == "gpu" for d in like.devices())

    def _staging(self, like):
        if not self._on_gpu(like):
            return _NUMPY
        for mod in ("cupy", "torch"):
            try:
                __import__(mod)
            except ImportError:
                continue
            return adapter_for_module(mod)
        raise TypeError("jax gpu arrays: tessera allocates their outputs with cupy or torch; neither is installed")

    def _dlpack_like(self, like):
        # A staging-framework array aliasing nothing; only its device matters.
        st = self._staging(like)
        if st is _NUMPY:
            return None
        dev = next(iter(like.devices())).id
        if st.name == "torch":
            return st.torch.empty(0, device=f"cuda:{dev}")
        with st.cupy.cuda.Device(dev):
            return st.cupy.empty(0)

    def to_c(self, x):
        if hasattr(x, "block_until_ready"):
            x.block_until_ready()  # jax dispatches asynchronously
            return x
        return adapter_for(x).to_c(x)  # a staging output (numpy, cupy or torch)

    def empty(self, like, shape, dtype):
        st = self._staging(like)
        return st.empty(self._dlpack_like(like), shape, dtype)

    def empty_like(self, x):
        return self.empty(x, x.shape, dtype_name(x.dtype))

    def index_array(self, values, like):
        st = self._staging(like)
        if st is _NUMPY:
            return _NUMPY.index_array(values, None)
        return st.index_array(np.asarray(values), self._dlpack_like(like))

    def to_numpy(self, x):
        return np.asarray(x)

    def stream(self, like):
        return 0

    def device(self, like):
        if self._on_gpu(like):
            return ("cuda", next(iter(like.devices())).id)
        return ("cpu", 0)

    def wrap(self, x):
        import jax.numpy as jnp
        if isinstance(x, np.ndarray):
            return jnp.asarray(x)
        # tessera ran on the legacy default stream; jax reads on streams of its own, so finish
        # the work before handing the buffer over.
        st = adapter_for(x)
        if st.name == "torch":
            st.torch.cuda.synchronize(x.device)
        else:
            x.device.synchronize()
        return self.jax.dlpack.from_dlpack(x)


class _GenericCpuAdapter(_NumpyAdapter):
    """Any other DLPack array on the cpu: read through DLPack, outputs are numpy arrays."""

    name = "dlpack-cpu"

    def to_c(self, x):
        return x

    def empty_like(self, x):
        return np.empty(tuple(x.shape), dtype=np.from_dlpack(x).dtype)


_NUMPY = _NumpyAdapter()
_GENERIC = _GenericCpuAdapter()
_cache = {}


def adapter_for_module(mod):
    a = _cache.get(mod)
    if a is None:
        if mod == "torch":
            import torch
            a = _TorchAdapter(torch)
        elif mod == "cupy":
            import cupy
            a = _CupyAdapter(cupy)
        elif mod == "jax":
            import jax
            import jax.dlpack  # noqa: F401
            a = _JaxAdapter(jax)
        else:
            raise TypeError(f"no adapter for {mod}")
        _cache[mod] = a
    return a


def adapter_for(x, name="q"):
    """The adapter of the framework `x` belongs to; TypeError naming `name` otherwise."""
    if isinstance(x, np.ndarray):
        return _NUMPY
    mod = type(x).__module__.partition(".")[0]
    if mod in ("torch", "cupy"):
        return adapter_for_module(mod)
    if mod in ("jax", "jaxlib"):
        return adapter_for_module("jax")
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        if x.__dlpack_device__()[0] in (1, 3):  # kDLCPU, kDLCUDAHost
            return _GENERIC
        raise TypeError(f"{name}: device arrays of {type(x).__module__}.{type(x).__qualname__} are not supported "
                        f"(use numpy, torch, cupy or jax)")
    raise TypeError(f"{name}: expected an array (numpy, torch, cupy, jax or any DLPack array), "
                    f"got {'None' if x is None else type(x).__qualname__}")
