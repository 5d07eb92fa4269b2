"""Run one attention case a few times on the GPU through the Python module, for a profiler
(ncu --kernel-name ... --launch-skip N) or a quick timing. The shapes follow the bench suites:
tokens per batch 16384, heads 2048 / head_dim.

  python3 bench/profile_case.py --op forward --dtype fp8 --d 128 --seq 16384 [--causal] [--iters 10]
  python3 bench/profile_case.py --ragged 128 --d 128 [--causal]   (16384 tokens packed as 128
      sequences of random lengths, cu_seqlens on the device, as the bench suite cuda.forward_ragged)
  python3 bench/profile_case.py --d 64 --seq 4096 --window 512   (a sliding window: each query
      sees itself and the 512 keys before it; TFLOP/s over the pairs the window lets through)
  python3 bench/profile_case.py --d 128 --softcap 30   (scores soft-capped: 30 tanh(s / 30))

  python3 bench/profile_case.py --peer cudnn --d 64 --seq 1024 --causal   (torch SDPA's cuDNN
      backend on the same inputs: its kernel for ncu, scripts/ncu-peer)

Under ncu, --launch-skip 1 skips the warm-up call.

--timing single (the default, what a profiler wants) times each call on its own, from an idle
GPU. --timing queued times samples of N calls issued back to back (N chosen so that a sample
lasts about --sample-ms): the steady state, which a 0.2 ms kernel timed alone does not reach
(clock ramp, launch latency), for scripts/gpu-ab's comparisons of short cases.
"""
import argparse
import math
import os
import shlex
import sys

import torch

import tessera


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--op", choices=["forward", "backward"], default="forward")
    ap.add_argument("--dtype", choices=["bf16", "fp16", "fp8"], default="bf16")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--seq", type=int, default=16384)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--iters", type=int, default=10, help="timed samples (default 10); the median is printed")
    ap.add_argument("--timing", choices=["single", "queued"], default="single",
                    help="single: a sample is one call (default); queued: N calls back to back, N making a sample "
                         "last about --sample-ms")
    ap.add_argument("--sample-ms", type=float, default=20.0, help="a queued sample's length in ms (default 20)")
    ap.add_argument("--window", type=int, default=None, metavar="LEFT",
                    help="a sliding window (LEFT, 0): query i sees keys i - LEFT .. i (bf16 / fp16, dense)")
    ap.add_argument("--ragged", type=int, default=None, metavar="SEQUENCES",
                    help="forward over 16384 packed tokens split into this many random lengths")
    ap.add_argument("--softcap", type=float, default=0.0, metavar="C",
                    help="a soft cap C > 0 on the scores, C tanh(s / C) (tessera's forward, backward, ragged, fp8)")
    ap.add_argument("--lse", action="store_true",
                    help="the forward also returns the LSE (a training forward; bf16 / fp16, dense)")
    ap.add_argument("--peer", choices=["cudnn", "flash"], default=None,
                    help="time torch SDPA's cuDNN or flash backend on the same dense bf16 / fp16 forward instead of "
                         "tessera (e.g. to profile the peer's kernel with ncu beside tessera's)")
    ap.add_argument("--serve", action="store_true",
                    help="read cases from stdin, one per line (optionally led by NAME=value environment "
                         "settings), and print one result line each: a warm process for scripts/gpu-ab")
    a = ap.parse_args(argv)
    if a.serve:
        return serve()
    if not 1 <= a.iters <= 10000:
        ap.error(f"--iters: 1 to 10000 samples expected, got {a.iters}")
    if not 0.0 < a.sample_ms <= 1000.0:
        ap.error(f"--sample-ms: a sample's length in ms, above 0 and at most 1000, expected, got {a.sample_ms}")
    if a.ragged is not None and not 1 <= a.ragged <= 16384:
        ap.error(f"--ragged: the number of sequences must be between 1 and 16384 (the packed tokens), got {a.ragged}")
    if a.ragged is not None and a.dtype == "fp8":
        ap.error("--ragged: times the bf16/fp16 ragged forward; --dtype fp8 is not supported with it")
    if a.ragged is not None and a.op == "backward":
        ap.error("--ragged: times the ragged forward; --op backward is not supported with it")
    if a.window is not None:
        if a.window < 0:
            ap.error(f"--window: expected the keys before each query (>= 0), got {a.window}")
        if a.ragged is not None or a.dtype == "fp8" or a.causal:
            ap.error("--window: a dense bf16 / fp16 case without --causal or --ragged (the window is causal itself)")
    if not (a.softcap >= 0.0 and math.isfinite(a.softcap)):
        ap.error(f"--softcap: a finite cap >= 0 expected (0: none), got {a.softcap}")
    if a.peer is not None and (a.ragged is not None or a.window is not None or a.dtype == "fp8" or a.lse
                               or a.op != "forward" or a.softcap > 0.0):
        given = [f for f, on in (("--ragged", a.ragged is not None), ("--window", a.window is not None),
                                 ("--dtype fp8", a.dtype == "fp8"), ("--lse", a.lse),
                                 (f"--op {a.op}", a.op != "forward"), (f"--softcap {a.softcap:g}", a.softcap > 0.0))
                 if on]
        ap.error(f"--peer {a.peer}: a dense bf16 / fp16 forward expected, got {' '.join(given)}")
    cap = {"softcap": a.softcap} if a.softcap > 0.0 else {}  # passed only when set (stub modules in tests lack it)
    batch, heads = max(1, 16384 // a.seq), 2048 // a.d
    shape = (batch, a.seq, heads, a.d)
    g = torch.Generator(device="cuda").manual_seed(0)
    base = torch.bfloat16 if a.dtype != "fp16" else torch.float16
    if a.ragged is not None:
        total = 16384
        cuts = torch.randperm(total - 1, generator=torch.Generator().manual_seed(0))[:a.ragged - 1] + 1
        cu = torch.cat([torch.tensor([0]), cuts.sort().values, torch.tensor([total])]).to(torch.int32)
        lengths = (cu[1:] - cu[:-1]).double()
        q, k, v = (torch.randn((total, heads, a.d), device="cuda", dtype=base, generator=g) for _ in range(3))
        cu_dev = cu.cuda()
        run = lambda: tessera.attention_ragged(q, k, v, cu_dev, cu_dev, causal=a.causal, **cap)
        a.op, a.seq = "forward_ragged", a.ragged
        # Summed over the sequences; causal counts the l(l+1)/2 unmasked pairs of each sequence.
        pairs = float((lengths * (lengths + 1) / 2).sum() if a.causal else (lengths * lengths).sum())
        flops = 4.0 * heads * pairs * a.d
    else:
        q, k, v = (torch.randn(shape, device="cuda", dtype=base, generator=g) for _ in range(3))
        flops = 4.0 * batch * heads * a.seq * a.seq * a.d / (2 if a.causal else 1) * (2.5 if a.op == "backward" else 1)
        if a.window is not None:  # query i sees min(i, LEFT) + 1 keys
            w, n = a.window, a.seq
            pairs = n * (w + 1) - (w * (w + 1) // 2 if w < n else n * (n - 1) // 2 + n * (w + 1 - n))
            flops = 4.0 * batch * heads * pairs * a.d * (2.5 if a.op == "backward" else 1)
    window = (-1, -1) if a.window is None else (a.window, 0)
    if a.ragged is not None:
        pass  # run and flops were set with the packed inputs above
    elif a.peer is not None:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backend = SDPBackend.CUDNN_ATTENTION if a.peer == "cudnn" else SDPBackend.FLASH_ATTENTION
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))  # (b, h, s, d) views of the same storage

        def run():
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=a.causal)
        a.op = f"forward[{a.peer}]"
    elif a.dtype == "fp8":
        q, k, v = (x.to(torch.float8_e4m3fn) for x in (q, k, v))
        run = lambda: tessera.attention_fp8(q, k, v, causal=a.causal, **cap)
    elif a.op == "forward":
        run = lambda: tessera.attention(q, k, v, causal=a.causal, window=window, **cap, return_lse=a.lse)
    else:
        out, lse = tessera.attention(q, k, v, causal=a.causal, window=window, **cap, return_lse=True)
        dout = torch.randn_like(out)
        run = lambda: tessera.attention_backward(q, k, v, out, dout, lse, causal=a.causal, window=window, **cap)
    run()  # warm-up (module load, first-touch)
    calls = 1
    if a.timing == "queued":  # one call alone sizes the samples
        calls = max(1, min(10000, math.ceil(a.sample_ms / max(time_calls(run, 1), 1e-3))))
    times = [time_calls(run, calls) for _ in range(a.iters)]
    ms = sorted(times)[len(times) // 2]
    shown = (f" window={a.window}" if a.window is not None else "") + (f" softcap={a.softcap:g}" if a.softcap else "")
    queued = f" samples of {calls} queued calls" if a.timing == "queued" else ""
    print(f"{a.op} {a.dtype} d{a.d} seq{a.seq} causal={int(a.causal)}{shown}: median {ms:.3f} ms of {a.iters}{queued} "
          f"({flops / ms / 1e9:.0f} TFLOP/s)", flush=True)


def time_calls(run, calls):
    """ms per call of `calls` calls issued back to back between two events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def serve():
    """One case per input line, as the command line would take it, led by any NAME=value
    settings (set for that case only: the library reads its TESSERA_* variables at every call).
    Every case prints exactly one line: its result, or "error: ..." (a bad case does not end the
    process)."""
    for line in sys.stdin:
        try:
            words = shlex.split(line)
            if not words:
                raise ValueError("empty case")
            if "--serve" in words:
                raise ValueError("--serve inside a served case")
        except ValueError as e:  # the line itself (empty, unbalanced quotes)
            print(f"error: bad case arguments ({' '.join(str(e).split())})", flush=True)
            continue
        envs = []
        while words and "=" in words[0] and words[0].split("=", 1)[0].isidentifier():
            envs.append(words.pop(0).split("=", 1))
        saved = {k: os.environ.get(k) for k, _ in envs}
        os.environ.update(dict(envs))
        try:
            main(words)
        except SystemExit as e:  # argparse's errors
            print(f"error: bad case arguments (exit {e.code})", flush=True)
        except Exception as e:  # a case that fails must not take the others with it
            msg = " ".join(str(e).split())  # one line: the reader takes one line per case
            print(f"error: {type(e).__name__}: {msg}", flush=True)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


if __name__ == "__main__":
    main()
