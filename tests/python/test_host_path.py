"""tessera.attention's eager torch path: which calls skip the custom op and go straight to the
kernels (_ops._forward_torch), which must not, and that both give the same bits.

The direct path may run only when no autograd graph is wanted and nothing interposes on the
tensors: grad mode on with an input that requires grad, torch.compile, a dispatch mode (fake
tensors, make_fx, flop counters), functorch transforms, functional tensors and tensor
subclasses all go through the tessera::attention_fwd custom op.
"""

import pytest

torch = pytest.importorskip("torch")

import tessera  # noqa: E402
from tessera import _ops  # noqa: E402

_torch = tessera.torch_ops()


def _cuda_param():
    ok = torch.cuda.is_available() and tessera.cuda_available()
    return pytest.param("cuda", marks=pytest.mark.skipif(not ok, reason="needs torch with CUDA and a CUDA build"))


DEVICES = ["cpu", _cuda_param()]


def dtype_for(device):
    return torch.float32 if device == "cpu" else torch.bfloat16


def make(shape, device="cpu", dtype=torch.float32, seed=0, requires_grad=False):
    g = torch.Generator(device="cpu").manual_seed(seed)
    t = torch.randn(shape, generator=g, dtype=torch.float32).to(device=device, dtype=dtype)
    return t.requires_grad_(requires_grad)


def qkv(device="cpu", dtype=torch.float32, requires_grad=False, hq=4, hkv=2):
    return (make((2, 9, hq, 64), device, dtype, 1, requires_grad),
            make((2, 13, hkv, 64), device, dtype, 2, requires_grad),
            make((2, 13, hkv, 64), device, dtype, 3, requires_grad))


@pytest.fixture
def direct_calls(monkeypatch):
    """A list that gets one entry per call of the direct (no custom op) forward."""
    calls = []
    real = _ops._forward_torch

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(_ops, "_forward_torch", spy)
    return calls


def _custom_op(q, k, v, causal=False, window=(-1, -1), softcap=0.0, scale=None):
    return _torch.attention_fwd(q, k, v, scale, causal, window[0], window[1], softcap)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("which", [0, 1, 2])
def test_grad_mode_with_an_input_requiring_grad_uses_the_custom_op(device, which, direct_calls):
    ts = list(qkv(device, dtype_for(device)))
    ts[which].requires_grad_()
    out = tessera.attention(*ts, causal=True)
    assert not direct_calls
    assert out.requires_grad and out.grad_fn is not None
    (grad,) = torch.autograd.grad(out.float().sum(), ts[which])
    assert grad.shape == ts[which].shape and torch.isfinite(grad).all() and grad.abs().sum() > 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "no_input_requires_grad"])
@pytest.mark.parametrize("opts", [dict(causal=True), dict(window=(3, 1), softcap=5.0, scale=0.2),
                                  dict(causal=True, return_lse=True)], ids=["causal", "window_softcap", "lse"])
def test_direct_path_gives_the_custom_ops_bits(device, mode, opts, direct_calls):
    dtype = dtype_for(device)
    q, k, v = qkv(device, dtype, requires_grad=(mode != "no_input_requires_grad"))
    k = k.transpose(1, 2).contiguous().transpose(1, 2)  # non-contiguous: strides go through as they are
    with torch.no_grad():
        ref_out, ref_lse = _custom_op(q, k, v, opts.get("causal", False), opts.get("window", (-1, -1)),
                                      opts.get("softcap", 0.0), opts.get("scale"))
    ctx = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode}.get(mode)
    if ctx is None:
        res = tessera.attention(q, k, v, **opts)
    else:
        with ctx():
            res = tessera.attention(q, k, v, **opts)
    assert len(direct_calls) == 1
    out, lse = res if opts.get("return_lse") else (res, None)
    assert not out.requires_grad
    assert out.dtype == q.dtype and out.device == q.device and out.shape == q.shape and out.is_contiguous()
    assert torch.equal(out, ref_out)
    if lse is not None:
        assert lse.dtype == torch.float32 and lse.shape == (2, 4, 9)
        assert torch.equal(lse, ref_lse)
    # The custom op builds its descriptors with the same to_c: compare with a path that does not.
    if device == "cpu":  # numpy's, which reads the arrays through the buffer protocol
        res_np = tessera.attention(*(t.detach().numpy() for t in (q, k, v)), **opts)
        out_np, lse_np = res_np if opts.get("return_lse") else (res_np, None)
        assert torch.equal(out, torch.from_numpy(out_np))
        if lse is not None:
            assert torch.equal(lse, torch.from_numpy(lse_np))
    else:  # the CPU backend on the same values (another kernel: a tolerance, not bits)
        res_cpu = tessera.attention(*(t.detach().float().cpu() for t in (q, k, v)), **opts)
        out_cpu, lse_cpu = res_cpu if opts.get("return_lse") else (res_cpu, None)
        torch.testing.assert_close(out.float().cpu(), out_cpu, atol=2e-2, rtol=2e-2)
        if lse is not None:
            torch.testing.assert_close(lse.cpu(), lse_cpu, atol=1e-3, rtol=1e-3)


def test_parameters_take_the_direct_path_under_no_grad(direct_calls):
    q, k, v = (torch.nn.Parameter(t) for t in qkv())
    with torch.no_grad():
        out = tessera.attention(q, k, v)
    assert len(direct_calls) == 1 and type(out) is torch.Tensor
    out = tessera.attention(q, k, v)  # grad mode: the custom op, with a graph
    assert len(direct_calls) == 1 and out.grad_fn is not None


def test_dispatch_mode_sees_the_custom_op(direct_calls):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    q, k, v = qkv()
    with torch.no_grad():
        ref = tessera.attention(q, k, v, causal=True)
    direct_calls.clear()
    with torch.no_grad(), Record() as rec:
        out = tessera.attention(q, k, v, causal=True)
    assert not direct_calls
    assert any("tessera.attention_fwd" in op for op in rec.ops), rec.ops
    assert torch.equal(out, ref)


def test_fake_tensors_go_through_the_custom_op(direct_calls):
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    with FakeTensorMode() as mode:
        q, k, v = (mode.from_tensor(t) for t in qkv())
        with torch.no_grad():
            out, lse = tessera.attention(q, k, v, return_lse=True)
    assert not direct_calls
    assert isinstance(out, FakeTensor) and out.shape == q.shape and lse.shape == (2, 4, 9)


def test_flop_counter_mode_goes_through_the_custom_op(direct_calls):
    from torch.utils.flop_counter import FlopCounterMode

    q, k, v = qkv()
    with torch.no_grad(), FlopCounterMode(display=False):
        tessera.attention(q, k, v)
    assert not direct_calls


def test_functorch_and_functional_tensors_are_not_plain():
    x = make((2, 3, 4))
    seen = []

    def probe(t):
        seen.append(_torch.eager_no_grad(t, t, t))
        return t.sum()

    with torch.no_grad():
        assert _torch.eager_no_grad(x, x, x)
        torch.func.vmap(probe)(x)
        torch.func.functionalize(probe)(x)
        assert not _torch.eager_no_grad(x, torch._to_functional_tensor(x), x)  # functional outside functorch
    torch.func.grad(probe)(x)

    def probe_no_grad(t):  # inside grad, with grad mode off: only the wrapped-tensor check refuses
        with torch.no_grad():
            seen.append(_torch.eager_no_grad(t, t, t))
        return t.sum()

    torch.func.grad(probe_no_grad)(x)
    assert seen == [False, False, False, False]


def test_vmap_over_attention_uses_the_custom_op(direct_calls):
    q, k, v = (torch.stack([t, t.flip(0)]) for t in qkv())
    with torch.no_grad():
        out = torch.func.vmap(lambda a, b, c: tessera.attention(a, b, c, causal=True))(q, k, v)
        assert not direct_calls
        for i in range(2):
            assert torch.equal(out[i], tessera.attention(q[i], k[i], v[i], causal=True))


def test_tensor_subclasses_are_not_plain():
    class Sub(torch.Tensor):
        pass

    x = make((2, 3, 4))
    with torch.no_grad():
        assert not _torch.eager_no_grad(x.as_subclass(Sub), x, x)
        assert not _torch.eager_no_grad(x, x, x.as_subclass(Sub))
        assert _torch.eager_no_grad(x, torch.nn.Parameter(x), x)


def test_torch_compile_traces_the_custom_op_without_grad(direct_calls):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    q, k, v = qkv()
    torch._dynamo.reset()
    f = torch.compile(lambda a, b, c: tessera.attention(a, b, c, causal=True) * 2, backend=backend, fullgraph=True)
    with torch.no_grad():
        out = f(q, k, v)
    assert graphs and any("tessera.attention_fwd" in str(n.target) for n in graphs[0].graph.nodes)
    direct_calls.clear()
    with torch.no_grad():
        assert torch.equal(out, tessera.attention(q, k, v, causal=True) * 2)
    assert len(direct_calls) == 1
    torch._dynamo.reset()


def test_non_tensor_arguments_are_named():
    q, k, v = qkv()
    with torch.no_grad(), pytest.raises(TypeError, match=r"k: expected a torch\.Tensor \(q is one, on cpu\), got builtins\.object"):
        tessera.attention(q, object(), v)
    with pytest.raises(TypeError, match="k: expected dtype fp32"):
        tessera.attention(q, k.half(), v)
    with pytest.raises(tessera.InvalidArgumentError, match=r"q: expected 4 dims .*, got 0 dims \(a scalar\)") as e:
        tessera.attention(torch.tensor(1.0), k, v)  # a 0-dim q reaches the extension, which names it
    assert e.value.argument == "q"


@pytest.mark.parametrize("device", DEVICES)
def test_torch_descriptors(device):
    fw = _torch.adapter
    x = make((2, 5, 3, 8), device).transpose(1, 2)
    ptr, name, shape, strides, dev_type, dev_id = fw.to_c(x)
    assert (ptr, name, tuple(shape), tuple(strides)) == (x.data_ptr(), "fp32", (2, 3, 5, 8), x.stride())
    assert (dev_type, dev_id) == ((2, x.device.index) if device == "cuda" else (1, 0))
    assert isinstance(fw.to_c(x.double()), torch.Tensor)  # DLPack: the extension names the problem
    meta = torch.empty(2, 3, device="meta", requires_grad=True)
    assert not isinstance(fw.to_c(meta), tuple) and not fw.to_c(meta).requires_grad
    e = fw.empty_like(x)
    assert e.shape == x.shape and e.dtype == x.dtype and e.device == x.device and e.is_contiguous()
    z = fw.empty_like(torch.tensor(1.0, device=device))
    assert z.dim() == 0
    if device == "cuda":
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            assert fw.stream(x) == s.cuda_stream
    else:
        assert fw.stream(x) == 0
