#!/usr/bin/env python3
"""Why tessera's backward reads slower through peers.py than through `tessera bench`.

One dense bf16 backward (default: head_dim 128, 2048 / head_dim heads, 16k tokens as
tokens / seq sequences of --seq, at least one) is timed several ways in one process,
in alternating rounds so that a drift of the clock falls on every variant alike:
  direct    _C.attention_backward on preallocated outputs (no autograd, no allocation)
  ops       tessera._ops._backward (allocates dq, dk, dv)
  autograd  torch.autograd.grad through tessera's custom op, as bench/peers.py does
  function  the same through tessera's classic torch.autograd.Function (AttentionFunction)
  flash     torch SDPA's flash backend through autograd (its node is C++), for comparison
  tiled     direct, on inputs tiled from one 16 MB block as `tessera bench` fills them
with the host time until each call returns, a breakdown of the autograd call's host time around
tessera's backward formula, and torch's profiler's kernel time per call (direct, autograd,
function, flash, tiled), so that host gaps inside the timed span and slower kernels can be told
apart, and tessera's kernels compared with flash's like for like.
  PYTHONPATH=build/python python3 bench/micro/backward_harness_gap.py [--seq 16384] [--causal]
  (TESSERA_CUDA_BACKWARD=portable for the portable path; --cpu-table N prints host-side ops)
"""
import argparse
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seq", type=int, default=16384)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--reps", type=int, default=8, help="timed calls per variant and round")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--cpu-table", type=int, default=0, help="print this many host-side ops of the profile")
    args = ap.parse_args()
    for name in ("seq", "tokens", "reps", "rounds"):
        if getattr(args, name) < 1:
            ap.error(f"--{name}: expected a whole number >= 1, got {getattr(args, name)}")
    if args.head_dim not in (64, 128, 256):
        ap.error(f"--head-dim: expected 64, 128 or 256, got {args.head_dim}")
    if args.cpu_table < 0:
        ap.error(f"--cpu-table: expected a number of rows >= 0, got {args.cpu_table}")
    import torch
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 0
    import tessera
    from tessera import _C, _ops
    d, s = args.head_dim, args.seq
    b, h = max(1, args.tokens // s), 2048 // d
    dt = torch.bfloat16
    q, k, v, g = (torch.randn(b, s, h, d, device="cuda", dtype=dt) for _ in range(4))
    out, lse = tessera.attention(q, k, v, causal=args.causal, return_lse=True)
    dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))

    def tiled(t):  # the C++ bench's fill: one 16 MB block of normals, repeated
        flat = t.reshape(-1)
        block = min(flat.numel(), (16 << 20) // 2)
        reps = -(-flat.numel() // block)
        return flat[:block].repeat(reps)[: flat.numel()].view_as(t).contiguous()

    qt, kt, vt, gt = (tiled(t) for t in (q, k, v, g))
    out_t, lse_t = tessera.attention(qt, kt, vt, causal=args.causal, return_lse=True)
    stream = torch.cuda.current_stream().cuda_stream
    from tessera._arrays import adapter_for
    c = adapter_for(q).to_c

    def direct(q=q, k=k, v=v, o=out, g=g, l=lse):
        _C.attention_backward(c(q), c(k), c(v), c(o), c(g), c(l), c(dq), c(dk), c(dv), None, args.causal, -1, -1,
                              0.0, False, stream, 0)

    def ops():
        _ops._backward(q, k, v, out, g, lse, args.causal, (-1, -1), 0.0, None, False)

    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
    og = tessera.attention(qg, kg, vg, causal=args.causal)

    def autograd():
        torch.autograd.grad(og, (qg, kg, vg), g, retain_graph=True)

    # The same backward through a classic torch.autograd.Function (tessera's AttentionFunction),
    # and torch's flash backend through its own (C++) autograd node, for the overhead peers pay.
    qf, kf, vf = (t.detach().requires_grad_() for t in (q, k, v))
    of, _ = tessera.torch_ops().AttentionFunction.apply(qf, kf, vf, None, args.causal, -1, -1, 0.0)

    def function():
        torch.autograd.grad(of, (qf, kf, vf), g, retain_graph=True)

    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    qh, kh, vh = (t.detach().transpose(1, 2).requires_grad_() for t in (q, k, v))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        oh = F.scaled_dot_product_attention(qh, kh, vh, is_causal=args.causal)
    gh = g.transpose(1, 2)

    def flash():
        torch.autograd.grad(oh, (qh, kh, vh), gh, retain_graph=True)

    variants = {"direct": direct, "ops": ops, "autograd": autograd, "function": function, "flash": flash,
                "tiled": lambda: direct(qt, kt, vt, out_t, gt, lse_t)}
    samples = {n: [] for n in variants}
    host = {n: [] for n in variants}  # until the call returns: its host time, or longer if it waits
    for fn in variants.values():
        fn()
    torch.cuda.synchronize()
    for _ in range(args.rounds):
        for n, fn in variants.items():
            fn()
            torch.cuda.synchronize()
            for _ in range(args.reps):
                a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                t = time.perf_counter()
                fn()
                host[n].append((time.perf_counter() - t) * 1e3)
                e.record()
                e.synchronize()
                samples[n].append(a.elapsed_time(e))
    # Where the autograd call's host time goes: from the call to tessera's backward formula, in
    # it, and from its return to the call's.
    from tessera import _torch as tt
    inner, stamps = tt._eager_backward, {}

    def stamped(*a, **kw):
        stamps["enter"] = time.perf_counter()
        r = inner(*a, **kw)
        stamps["exit"] = time.perf_counter()
        return r
    tt._eager_backward = stamped
    parts = []
    for _ in range(args.reps):
        stamps.clear()
        t = time.perf_counter()
        autograd()
        end = time.perf_counter()
        torch.cuda.synchronize()
        if "enter" in stamps:
            parts.append(((stamps["enter"] - t) * 1e3, (stamps["exit"] - stamps["enter"]) * 1e3,
                          (end - stamps["exit"]) * 1e3))
    tt._eager_backward = inner
    if parts:
        print("  autograd host ms: before tessera's formula %.3f, in it %.3f, after it %.3f (medians)" %
              tuple(statistics.median(p[i] for p in parts) for i in range(3)))
    print(f"b{b} h{h} s{s} d{d} causal={int(args.causal)}: ms per call, median [min, max] of "
          f"{args.rounds} x {args.reps}")
    for n, xs in samples.items():
        print(f"  {n:9s} {statistics.median(xs):8.3f} [{min(xs):.3f}, {max(xs):.3f}]   host, until the call returns: "
              f"{statistics.median(host[n]):.3f} ms")

    from torch.profiler import ProfilerActivity, profile
    for n in ("direct", "autograd", "function", "flash", "tiled"):
        fn = variants[n]
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            for _ in range(args.reps):
                fn()
                torch.cuda.synchronize()
        kernels = {}
        for ev in prof.events():
            if ev.device_type.name == "CUDA":
                kernels.setdefault(ev.name, []).append(ev.device_time if hasattr(ev, "device_time") else ev.cuda_time)
        total = sum(sum(x) for x in kernels.values()) / args.reps / 1e3
        print(f"  profile {n}: GPU activity {total:.3f} ms per call")
        for name, xs in sorted(kernels.items(), key=lambda kv: -sum(kv[1])):
            print(f"    {len(xs) / args.reps:4.1f} x {statistics.median(xs) / 1e3:8.3f} ms  {name[:110]}")
        if args.cpu_table and n != "tiled":
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.cpu_table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
