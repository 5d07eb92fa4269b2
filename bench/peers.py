#!/usr/bin/env python3
"""Peers measured in the same run as tessera: torch SDPA (flash and cuDNN backends) on the
shapes of tessera's CUDA suites, plus the ceilings (bf16 GEMM, FP8 GEMM, device copy, read-only sum);
with tessera's Python module importable, tessera (bf16, and FP8 at head_dim 128 and 256) in the same
process.

Writes CSV rows (suite,backend,dtype,head_dim,seq,batch,heads,causal,ms,tflops,gbps) to
--out and prints them. Inputs are random (never zeros); forward and backward are timed with
CUDA events after warm-up; the median of --reps runs is reported. --timing eager (the default)
times each call alone, so each backend's host time up to its launch is in its figure (34-41 us
for tessera's Python call, 18-30 for cuDNN's through SDPA, H200 machine); --timing queued times
--queue calls back to back between two events, so the kernels' own times are compared; --timing
stream takes those samples one after the other with no synchronisation (and no idle GPU) between
them, as a training or serving loop keeps the GPU busy. On a
power-capped GPU a backend's first samples run at the clock the one before it left (flash, a cooler
load, leaves it high): --settle S runs each backend's own calls first. scripts/gpu-check uses
--timing stream --settle 0.3 (queued until the thirty-ninth session).
"""
import argparse
import csv
import statistics
import sys


def time_samples(fn, reps, warmup=3):
    """Milliseconds of `reps` calls of fn, each between two CUDA events and synchronised, after
    `warmup` calls."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return times


# GPU time put on the stream before each queued sample's first event (a sleep kernel), longer
# than any backend's host time for one call (tessera's Python call ~40 us; the later calls' host
# time hides under the kernels queued before them); short, so that the GPU's duty cycle (and its
# clock under the power cap) barely moves.
LEAD_MS = 0.2


def time_samples_queued(fn, reps, warmup=3, depth=10, events=None, train=False):
    """Milliseconds per call of `reps` samples, each `depth` calls enqueued back to back between
    two CUDA events, divided by depth: a backend's host time per call is hidden behind the queue
    wherever it is below its kernel's time. Each sample starts behind a sleep kernel of LEAD_MS
    enqueued before its first event, so that the first call's host time (which differs by
    backend: ~40 us for tessera's Python call, 18-30 for SDPA's) is hidden too instead of
    landing in the sample as an idle gap. train (--timing stream): the samples follow each other
    on the stream with no synchronisation between them (one event between two samples, one lead
    before the first, one synchronisation after the last), so that the GPU does not idle between
    samples: under the power cap a share of the time without attention work raises the clock the
    samples see (an estimated ~0.3 ms a sample of ~2.4 ms at 1k). events: (record, elapsed,
    synchronize, lead) for tests."""
    if events is None:
        import torch

        def record():
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e

        def lead():
            # torch.cuda._sleep spins for a number of cycles: LEAD_MS at the boost clock, more below.
            torch.cuda._sleep(int(LEAD_MS * 1e-3 * 1.98e9))
        events = (record, lambda a, b: a.elapsed_time(b), torch.cuda.synchronize, lead)
    record, elapsed, synchronize, lead = events
    for _ in range(warmup):
        fn()
    synchronize()
    if train:
        if depth > 1:
            lead()
        marks = [record()]
        for _ in range(reps):
            for _ in range(depth):
                fn()
            marks.append(record())
        synchronize()
        return [elapsed(a, b) / depth for a, b in zip(marks, marks[1:])]
    times = []
    for _ in range(reps):
        if depth > 1:  # as the C++ bench: a sample of one call keeps its host time
            lead()
        a = record()
        for _ in range(depth):
            fn()
        b = record()
        synchronize()
        times.append(elapsed(a, b) / depth)
    return times


def timer_for(timing, queue):
    """The dense shapes' timer of --timing (eager, queued or stream) with --queue calls a sample."""
    if timing == "eager":
        return time_samples
    train = timing == "stream"
    return lambda fn, reps: time_samples_queued(fn, reps, depth=queue, train=train)


def time_ms(fn, reps, warmup=3):
    return statistics.median(time_samples(fn, reps, warmup))


def settle_for(seconds):
    """A settle step for interleaved_ms: fn called back to back for `seconds` of wall time, then a
    synchronisation. The H200 runs heavy loads at its power cap and a backend inherits the clock
    the one before it left (flash's long calls throttle whatever follows them); after this each
    entry's samples start from the clock of its own steady load."""
    import time
    import torch

    def settle(fn):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            fn()
        torch.cuda.synchronize()
    return settle


def interleaved_ms(entries, reps, rounds, timer=time_samples, done=None, failed=None, settle=None):
    """Median milliseconds of each entry over `rounds` rounds of max(1, reps // rounds) timed calls
    (after a warm-up each round), the entries taking turns in every round (A, B, C, A, B, C, ...)
    so that a drift of the GPU's clock over the run (the H200 lowers it under its power cap and
    raises it again later) falls on every entry alike. entries: (context factory, fn) pairs; the
    context (e.g. a torch SDPA backend) is entered around each entry's calls of a round, outside
    the timed spans. rounds = 1 is one entry after the other, as time_ms. done(i, ms), if given,
    is called as soon as entry i's last round is timed. failed(i, exception), if given, takes an
    entry's error instead of raising it; that entry is then dropped from the later rounds and its
    median is None. settle(fn), if given, runs before each entry's timed calls of a round, inside
    its context (settle_for)."""
    rounds = max(1, rounds)
    per = max(1, reps // rounds)
    samples = [[] for _ in entries]
    dropped = set()
    for r in range(rounds):
        for i, (context, fn) in enumerate(entries):
            if i in dropped:
                continue
            try:
                with context():
                    if settle is not None:
                        settle(fn)
                    samples[i] += timer(fn, per)
            except Exception as e:  # e.g. out of memory, or a backend failing after its probe
                if failed is None:
                    raise
                failed(i, e)
                dropped.add(i)
                continue
            if done is not None and r == rounds - 1:
                done(i, statistics.median(samples[i]))
    return [None if i in dropped else statistics.median(x) for i, x in enumerate(samples)]


def attention_flops(batch, heads, seq_q, seq_k, head_dim, causal):
    f = 4.0 * batch * heads * seq_q * seq_k * head_dim
    return f / 2 if causal and seq_q == seq_k else f


def ceilings(reps, rows):
    import torch
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = time_ms(lambda: a @ b, reps)
    rows.append(dict(suite="ceiling", backend="torch_matmul", dtype="bf16", head_dim=0, seq=n, batch=1, heads=1,
                     causal=0, ms=ms, tflops=2 * n**3 / ms / 1e9, gbps=0))
    del a, b
    fp8_gemm_ceiling(reps, rows)
    x = torch.randn(1 << 30, device="cuda", dtype=torch.float32)  # 4 GiB
    ms = time_ms(lambda: x.sum(), reps)
    rows.append(dict(suite="ceiling", backend="read_sum", dtype="fp32", head_dim=0, seq=0, batch=1, heads=1,
                     causal=0, ms=ms, tflops=0, gbps=x.numel() * 4 / ms / 1e6))
    y = torch.empty_like(x)
    ms = time_ms(lambda: y.copy_(x), reps)
    rows.append(dict(suite="ceiling", backend="copy", dtype="fp32", head_dim=0, seq=0, batch=1, heads=1,
                     causal=0, ms=ms, tflops=0, gbps=2 * x.numel() * 4 / ms / 1e6))
    del x, y
    torch.cuda.empty_cache()


def fp8_gemm_ceiling(reps, rows, n=8192):
    """e4m3 x e4m3 -> bf16 GEMM (torch._scaled_mm, unit scales), n^3: what the FP8 forward's
    TFLOP/s are measured against. Skipped, with a note, where torch or the GPU has no FP8 GEMM."""
    import torch
    try:
        a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
        one = torch.ones((), device="cuda")
        gemm = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        gemm()
    except Exception as e:  # no float8 in this torch, or no FP8 tensor cores on this GPU
        print(f"# fp8 GEMM ceiling not measured: {type(e).__name__}: {e}", file=sys.stderr)
        return
    ms = time_ms(gemm, reps)
    rows.append(dict(suite="ceiling", backend="torch_scaled_mm", dtype="fp8_e4m3", head_dim=0, seq=n, batch=1,
                     heads=1, causal=0, ms=ms, tflops=2 * n**3 / ms / 1e9, gbps=0))
    del a, b
    torch.cuda.empty_cache()


def tessera_module():
    """tessera's Python module when importable (PYTHONPATH=build/python): timed in this same
    process on the same tensors, so its rows sit beside the peers'."""
    try:
        import tessera
        return tessera if tessera.cuda_available() else None
    except ImportError:
        return None


class StampedRows(list):
    """Rows whose append prints the wall-clock time (the end of the row's timing) to stderr."""

    def append(self, r):
        import datetime
        print(f"# {datetime.datetime.now().strftime('%H:%M:%S.%f')[:-3]} done {r['suite']} {r['backend']} "
              f"d={r['head_dim']} seq={r['seq']} causal={r['causal']}", file=sys.stderr)
        super().append(r)


def dense(reps, rows, head_dims, seqs, tokens, dtype_name, backward, rounds=1, fp8=False, timer=time_samples,
          settle=None):
    """Forward (and backward) of torch SDPA's flash and cuDNN backends and, when importable,
    tessera's module, on the same tensors; per shape and mask all of them are timed by
    interleaved_ms (rounds = 1: one after the other) with `timer`. fp8: tessera's FP8 forward too
    (head_dim 128 and 256, the same values rounded to e4m3, unit descales; dtype fp8_e4m3 in the
    rows). settle: interleaved_ms's settle step (None: none)."""
    import contextlib
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    backends = [("torch_flash", SDPBackend.FLASH_ATTENTION), ("torch_cudnn", SDPBackend.CUDNN_ATTENTION)]
    ts = tessera_module()
    for d in head_dims:
        heads = 2048 // d
        for s in seqs:
            batch = max(1, tokens // s)
            # (batch, seq, heads, d) storage viewed as (batch, heads, seq, d), as tessera's layout
            q = torch.randn(batch, s, heads, d, device="cuda", dtype=dtype).transpose(1, 2)
            k = torch.randn(batch, s, heads, d, device="cuda", dtype=dtype).transpose(1, 2)
            v = torch.randn(batch, s, heads, d, device="cuda", dtype=dtype).transpose(1, 2)
            for causal in (False, True):
                flops = attention_flops(batch, heads, s, s, d, causal)
                entries = []  # (suite, backend, context factory, fn), in timing order
                for name, be in backends:
                    context = lambda be=be: sdpa_kernel(be)
                    try:
                        with context():
                            fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                            fwd()  # a backend may not support a shape: find out before timing
                            entries.append(("forward", name, context, fwd))
                            if backward:
                                qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
                                o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
                                g = torch.randn_like(o)
                                bwd = (lambda o=o, g=g, qg=qg, kg=kg, vg=vg:
                                       torch.autograd.grad(o, (qg, kg, vg), g, retain_graph=True))
                                bwd()
                                entries.append(("backward", name, context, bwd))
                    except Exception as e:  # a backend may not support a shape
                        print(f"# {name} d={d} s={s} causal={causal}: {type(e).__name__}: {e}", file=sys.stderr)
                if ts is not None:
                    # tessera takes the (batch, seq, heads, d) storage itself.
                    qs, ks, vs = (t.transpose(1, 2) for t in (q, k, v))
                    entries.append(("forward", "tessera_py", contextlib.nullcontext,
                                    lambda: ts.attention(qs, ks, vs, causal=causal)))
                    if fp8 and d in (128, 256) and dtype_name == "bf16":
                        # The same values rounded to e4m3 (unit descales): no peer runs fp8
                        # attention through torch SDPA, so these rows stand beside the bf16
                        # peers and the fp8 GEMM ceiling.
                        q8, k8, v8 = (t.to(torch.float8_e4m3fn) for t in (qs, ks, vs))
                        entries.append(("forward", "tessera_py_fp8", contextlib.nullcontext,
                                        lambda: ts.attention_fp8(q8, k8, v8, causal=causal)))
                    if backward:
                        qg, kg, vg = (t.detach().requires_grad_() for t in (qs, ks, vs))
                        o = ts.attention(qg, kg, vg, causal=causal)
                        g = torch.randn_like(o)
                        entries.append(("backward", "tessera_py", contextlib.nullcontext,
                                        lambda o=o, g=g, qg=qg, kg=kg, vg=vg:
                                        torch.autograd.grad(o, (qg, kg, vg), g, retain_graph=True)))
                def add_row(i, ms, entries=entries, flops=flops, causal=causal, s=s, batch=batch, heads=heads, d=d):
                    suite, name = entries[i][0], entries[i][1]
                    dt = "fp8_e4m3" if name.endswith("_fp8") else dtype_name
                    rows.append(dict(suite=suite, backend=name, dtype=dt, head_dim=d, seq=s, batch=batch,
                                     heads=heads, causal=int(causal), ms=ms,
                                     tflops=(2.5 if suite == "backward" else 1.0) * flops / ms / 1e9, gbps=0))

                def log_error(i, e, entries=entries, causal=causal, s=s, d=d):
                    print(f"# {entries[i][1]} {entries[i][0]} d={d} s={s} causal={causal}: {type(e).__name__}: {e}",
                          file=sys.stderr)

                interleaved_ms([(c, f) for _, _, c, f in entries], reps, rounds, timer=timer, done=add_row,
                               failed=log_error, settle=settle)
            del q, k, v
            torch.cuda.empty_cache()


def graph_of(fn):
    """fn captured in a CUDA graph (after warm-up on a side stream, as torch requires); returns
    the replay."""
    import torch
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def decode(reps, rows, configs, dtype_name, graph=False):
    """Dense-KV decode (one query token) through cuDNN/flash: bytes of K+V read per second.
    graph: time replays of a CUDA graph of the call (suite "decode_graph"), as tessera's
    cuda.decode_graph does."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    hq, hkv, d = 32, 8, 128
    for batch, ctx in configs:
        q = torch.randn(batch, hq, 1, d, device="cuda", dtype=dtype)
        k = torch.randn(batch, hkv, ctx, d, device="cuda", dtype=dtype)
        v = torch.randn(batch, hkv, ctx, d, device="cuda", dtype=dtype)
        kv_bytes = 2 * batch * hkv * ctx * d * q.element_size()
        for name, be in [("torch_cudnn", SDPBackend.CUDNN_ATTENTION), ("torch_flash", SDPBackend.FLASH_ATTENTION)]:
            try:
                with sdpa_kernel(be):
                    fn = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                    ms = time_ms(graph_of(fn) if graph else fn, reps)
                rows.append(dict(suite="decode_graph" if graph else "decode", backend=name, dtype=dtype_name,
                                 head_dim=d, seq=ctx, batch=batch, heads=hq, causal=0, ms=ms, tflops=0,
                                 gbps=kv_bytes / ms / 1e6))
            except Exception as e:
                print(f"# decode{' graph' if graph else ''} {name} b={batch} ctx={ctx}: {type(e).__name__}: {e}",
                      file=sys.stderr)
        del q, k, v
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="peers.csv")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--head-dims", default="64,128,256")
    ap.add_argument("--seqs", default="1024,4096,16384")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--no-backward", action="store_true")
    ap.add_argument("--no-decode", action="store_true")
    ap.add_argument("--no-fp8", action="store_true", help="leave out tessera's FP8 forward rows")
    ap.add_argument("--quick", action="store_true", help="head dim 128 only")
    ap.add_argument("--rounds", type=int, default=1,
                    help="time the backends of a dense shape in this many alternating rounds (A, B, C, A, B, C, ...) "
                         "of reps / rounds calls each, so that clock drift falls on all alike (1: one after the other)")
    ap.add_argument("--timing", choices=("eager", "queued", "stream"), default="eager",
                    help="dense shapes: eager times each call alone (an event, the call, an event, a "
                         "synchronisation: host time up to the launch included); queued times --queue calls "
                         "back to back between two events (the kernels' own time); stream takes those samples "
                         "one after the other on the stream, synchronised only after the last (no idle GPU "
                         "between samples)")
    ap.add_argument("--queue", type=int, default=10, help="calls per sample under --timing queued or stream")
    ap.add_argument("--settle", type=float, default=0.0,
                    help="dense shapes: seconds of each backend's own calls, untimed, before its samples of a "
                         "round, so that none inherits the clock another's load left (0: none)")
    ap.add_argument("--stamps", action="store_true",
                    help="print each row's end time to stderr (to line rows up with a power / clock log)")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error(f"--rounds: expected a whole number >= 1, got {args.rounds}")
    if args.queue < 1:
        ap.error(f"--queue: expected a whole number >= 1, got {args.queue}")
    if not 0.0 <= args.settle <= 10.0:
        ap.error(f"--settle: expected seconds in [0, 10], got {args.settle}")
    try:
        import torch
    except ImportError:
        print("torch is not installed: no peers measured", file=sys.stderr)
        return 0
    if not torch.cuda.is_available():
        print("no CUDA device: no peers measured", file=sys.stderr)
        return 0
    rows = StampedRows() if args.stamps else []
    ceilings(args.reps, rows)
    hds = [128] if args.quick else [int(x) for x in args.head_dims.split(",")]
    timer = timer_for(args.timing, args.queue)
    dense(args.reps, rows, hds, [int(x) for x in args.seqs.split(",")], args.tokens, "bf16", not args.no_backward,
          args.rounds, fp8=not args.no_fp8, timer=timer, settle=settle_for(args.settle) if args.settle > 0 else None)
    if not args.no_decode:
        configs = [(1, 131072), (8, 32768), (64, 4096), (128, 8192), (256, 2048)]
        decode(args.reps, rows, configs, "bf16")
        decode(args.reps, rows, configs, "bf16", graph=True)
    fields = ["suite", "backend", "dtype", "head_dim", "seq", "batch", "heads", "causal", "ms", "tflops", "gbps"]
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow(r)
    for r in rows:
        print(",".join(f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k]) for k in fields))
    return 0


if __name__ == "__main__":
    sys.exit(main())
