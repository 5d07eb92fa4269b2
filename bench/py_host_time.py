"""Host time per call of tessera's Python entry point beside torch SDPA (cuDNN and flash
backends), and what it does to an eager event-timed median.

For each backend and shape: host microseconds per call with 200 calls enqueued back to back (the
GPU never waits on the host only if this is below the kernel time), the eager median as peers.py
takes it (an event, one call, an event, a synchronisation per sample) and the median of 20 calls
back to back between two events, divided by 20 (host time hidden behind the queue). The eager
median minus the back-to-back one is what a per-call eager timing charges each backend for its
host work.
  PYTHONPATH=build-gpu/python python3 bench/py_host_time.py [--shapes d,seq,causal ...]
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import time_samples, time_samples_queued  # noqa: E402  the timings peers.py takes


def parse_shape(text):
    """"d,seq,causal" -> (d, seq, causal); argparse reports anything else against --shapes."""
    try:
        d, s, causal = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected d,seq,causal (e.g. 128,1024,0), got {text!r}") from None
    if d not in (64, 128, 256) or not 1 <= s <= 16384 or causal not in (0, 1):
        raise argparse.ArgumentTypeError(
            f"expected d in 64/128/256, 1 <= seq <= 16384 and causal 0 or 1, got {text!r}")
    return d, s, causal


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="*", type=parse_shape,
                    default=[(128, 1024, 0), (128, 1024, 1), (64, 1024, 0), (64, 1024, 1), (128, 16, 0)])
    ap.add_argument("--reps", type=int, default=60)
    args = ap.parse_args()
    if args.reps < 10:
        ap.error(f"--reps: expected at least 10, got {args.reps}")
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import tessera as ts

    tokens, width = 16384, 2048
    print("| d | seq | causal | backend | host us / call | eager median us | back-to-back us | eager - b2b us |")
    print("|---|---|---|---|---|---|---|---|")
    for d, s, causal in args.shapes:
        heads, batch = width // d, max(1, tokens // s)
        q, k, v = (torch.randn(batch, s, heads, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        runs = {
            "tessera_py": (None, lambda: ts.attention(q, k, v, causal=bool(causal))),
            "torch_cudnn": (SDPBackend.CUDNN_ATTENTION,
                            lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=bool(causal))),
            "torch_flash": (SDPBackend.FLASH_ATTENTION,
                            lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=bool(causal))),
        }
        for name, (backend, fn) in runs.items():
            ctx = sdpa_kernel(backend) if backend is not None else None
            if ctx is not None:
                ctx.__enter__()
            try:
                for _ in range(5):
                    fn()
                torch.cuda.synchronize()
                n = 200
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                t1 = time.perf_counter()
                torch.cuda.synchronize()
                host_us = (t1 - t0) / n * 1e6
                e = statistics.median(time_samples(fn, args.reps)) * 1e3
                bb = statistics.median(time_samples_queued(fn, args.reps // 10, depth=20)) * 1e3
                print(f"| {d} | {s} | {causal} | {name} | {host_us:.1f} | {e:.1f} | {bb:.1f} | {e - bb:.1f} |", flush=True)
            except Exception as ex:  # a backend may not take a shape
                print(f"| {d} | {s} | {causal} | {name} | - | - | - | {type(ex).__name__}: {ex} |", flush=True)
            finally:
                if ctx is not None:
                    ctx.__exit__(None, None, None)


if __name__ == "__main__":
    main()
