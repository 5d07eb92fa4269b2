"""Arrays of other frameworks: jax (cpu and gpu), cupy (gpu), and any DLPack object on the
cpu. Each test is skipped when its framework is not importable."""

import numpy as np
import pytest

import naive
import tessera

RNG = np.random.default_rng(7)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


class DLPackOnly:
    """An array that only speaks DLPack (no buffer protocol, not numpy)."""

    def __init__(self, a):
        self._a = a
        self.shape = a.shape

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_generic_dlpack_cpu_arrays_give_numpy_outputs():
    q, k, v = rand(1, 8, 2, 32), rand(1, 12, 2, 32), rand(1, 12, 2, 32)
    out = tessera.attention(DLPackOnly(q), DLPackOnly(k), DLPackOnly(v), causal=True)
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, naive.attention(q, k, v, True)[0], atol=2e-5, rtol=2e-5)


def test_jax_cpu():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    cpu = jax.devices("cpu")[0]  # a jax with CUDA puts arrays on the GPU by default
    q, k, v = rand(2, 9, 4, 32), rand(2, 14, 2, 32), rand(2, 14, 2, 32)
    on_cpu = lambda x: jax.device_put(jnp.asarray(x), cpu)
    out, lse = tessera.attention(on_cpu(q), on_cpu(k), on_cpu(v), causal=True, return_lse=True)
    assert isinstance(out, jax.Array) and isinstance(lse, jax.Array)
    ref, ref_lse = naive.attention(q, k, v, True)
    np.testing.assert_allclose(np.asarray(out), ref, atol=2e-5, rtol=2e-5)
    np.testing.assert_allclose(np.asarray(lse), ref_lse, atol=1e-4, rtol=1e-4)
    qb = on_cpu(q).astype(jnp.bfloat16)
    kb = on_cpu(k).astype(jnp.bfloat16)
    out = tessera.attention(qb, kb, kb)
    assert out.dtype == jnp.bfloat16
    cu = [0, 4, 9]
    out = tessera.attention_ragged(on_cpu(q[0]), on_cpu(k[0]), on_cpu(v[0]), cu, [0, 7, 14])
    assert isinstance(out, jax.Array) and out.shape == q[0].shape


def _cupy_or_skip():
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device")
    except Exception:
        pytest.skip("no CUDA device")
    if not tessera.cuda_available():
        pytest.skip("tessera built without CUDA")
    return cupy


def test_cupy_fp16_on_current_stream():
    cupy = _cupy_or_skip()
    q, k, v = rand(1, 64, 4, 64), rand(1, 64, 2, 64), rand(1, 64, 2, 64)
    with cupy.cuda.Stream(non_blocking=True) as s:
        out = tessera.attention(cupy.asarray(q, cupy.float16), cupy.asarray(k, cupy.float16),
                                cupy.asarray(v, cupy.float16), causal=True)
        host = cupy.asnumpy(out, stream=s)
        s.synchronize()
    assert isinstance(out, cupy.ndarray) and out.dtype == cupy.float16
    ref = naive.attention(q.astype(np.float16), k.astype(np.float16), v.astype(np.float16), True)[0]
    np.testing.assert_allclose(host.astype(np.float64), ref, atol=3e-3, rtol=3e-3)


def test_jax_gpu():
    jax = pytest.importorskip("jax")
    if not any(d.platform == "gpu" for d in jax.devices()) or not tessera.cuda_available():
        pytest.skip("needs jax on a GPU and a CUDA build of tessera")
    try:
        import cupy  # noqa: F401
    except ImportError:
        pytest.importorskip("torch")
    jnp = jax.numpy
    q, k, v = rand(1, 32, 4, 64), rand(1, 32, 2, 64), rand(1, 32, 2, 64)
    out = tessera.attention(jnp.asarray(q, jnp.bfloat16), jnp.asarray(k, jnp.bfloat16),
                            jnp.asarray(v, jnp.bfloat16), causal=True)
    assert isinstance(out, jax.Array)
    ref = naive.attention(q, k, v, True)[0]
    np.testing.assert_allclose(np.asarray(out.astype(jnp.float32)), ref, atol=3e-2, rtol=3e-2)
