#!/usr/bin/env python3
"""Sustained throughput of each backend with the SM clock and board power it runs at.

The H200 holds heavy loads at its power cap by lowering the SM clock, and how far it lowers it
depends on the kernel: a ratio of two backends timed under sustained load is their ratio of work
per clock times their ratio of clocks. This splits the two. For each shape, the backends
(torch SDPA's cuDNN backend, tessera, and with --flash torch's flash backend) take turns A B ...
then ... B A (so neither always follows the other); each turn is --cool seconds idle, then samples
of --queue calls back to back between two CUDA events for --seconds of wall time, while
`nvidia-smi -lms` logs the SM clock and power. The second half of each turn is its steady state:
the medians of its samples' ms per call, of the clock and of the power there are reported, and
TFLOP/s per GHz of SM clock (work per clock, which the power cap does not move). --backward
times the backward through autograd instead (tessera's path as TESSERA_CUDA_BACKWARD selects).
  PYTHONPATH=build-gpu/python python3 bench/clock_under_load.py [--shapes d,seq,causal ...]
"""
import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import attention_flops  # noqa: E402
from py_host_time import parse_shape  # noqa: E402


def steady(samples, start, end, fraction=0.5):
    """The values of (wall time, value) samples in the last `fraction` of [start, end]; a turn's
    first part is the clock settling from the idle before it."""
    begin = end - fraction * (end - start)
    return [v for t, v in samples if begin <= t <= end]


def median_or_none(values):
    return statistics.median(values) if values else None


class SmiLog:
    """`nvidia-smi --query-gpu=clocks.sm,power.draw -lms PERIOD` in the background; each line is
    stamped with this process's wall clock as it is read (the pipe adds well under a period)."""

    def __init__(self, period_ms):
        self.clock, self.power = [], []
        self.proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
             f"-lms={period_ms}"], stdout=subprocess.PIPE, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            parts = [p.strip() for p in line.split(",")]
            try:
                mhz, watts = float(parts[0]), float(parts[1])
            except (ValueError, IndexError):
                continue
            now = time.perf_counter()
            self.clock.append((now, mhz))
            self.power.append((now, watts))

    def close(self):
        self.proc.terminate()
        self.proc.wait()


def turn(fn, seconds, queue, cool):
    """Idle `cool` s, then samples of `queue` calls between two events for `seconds`; returns
    (start, end, [(end time of sample, ms per call)])."""
    import torch
    time.sleep(cool)
    out = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(queue):
            fn()
        b.record()
        b.synchronize()
        out.append((time.perf_counter(), a.elapsed_time(b) / queue))
    return start, time.perf_counter(), out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="*", type=parse_shape,
                    default=[(128, 16384, 0), (128, 16384, 1), (64, 16384, 0), (256, 16384, 0), (128, 1024, 0)])
    ap.add_argument("--seconds", type=float, default=2.0, help="wall time of each turn's samples")
    ap.add_argument("--cool", type=float, default=1.0, help="idle seconds before each turn")
    ap.add_argument("--queue", type=int, default=10, help="calls per sample")
    ap.add_argument("--period", type=int, default=50, help="nvidia-smi sampling period, ms")
    ap.add_argument("--flash", action="store_true", help="torch's flash backend as well")
    ap.add_argument("--backward", action="store_true",
                    help="time the backward through autograd (2.5x the forward's FLOPs) instead of the forward")
    args = ap.parse_args()
    if not 0.5 <= args.seconds <= 30:
        ap.error(f"--seconds: expected 0.5 to 30, got {args.seconds}")
    if not 0 <= args.cool <= 30:
        ap.error(f"--cool: expected 0 to 30, got {args.cool}")
    if args.queue < 1:
        ap.error(f"--queue: expected a whole number >= 1, got {args.queue}")
    if not 20 <= args.period <= 1000:
        ap.error(f"--period: expected 20 to 1000 ms, got {args.period}")
    import shutil
    if shutil.which("nvidia-smi") is None:
        ap.error("nvidia-smi: expected on PATH (the clock and power log), found none")
    import torch
    if not torch.cuda.is_available():
        ap.error("a CUDA device: expected one for torch, found none")
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import tessera as ts

    smi = SmiLog(args.period)
    print("| d | seq | causal | backend | ms / call | TFLOP/s | SM MHz | W | TFLOP/s per GHz | samples |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    try:
        for d, s, causal in args.shapes:
            heads, batch = 2048 // d, max(1, 16384 // s)
            q, k, v = (torch.randn(batch, s, heads, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
            sdpa = lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=bool(causal))
            mine = lambda a, b, c: ts.attention(a, b, c, causal=bool(causal))

            def call(forward, inputs, backend):
                """The forward on inputs, or with --backward the gradients of a fixed dO through
                autograd (the forward run once here, under the backend that its backward takes)."""
                if not args.backward:
                    return lambda: forward(*inputs)
                grads = [t.detach().requires_grad_() for t in inputs]
                with (sdpa_kernel(backend) if backend is not None else contextlib.nullcontext()):
                    o = forward(*grads)
                g = torch.randn_like(o)
                return lambda: torch.autograd.grad(o, grads, g, retain_graph=True)

            backends = [("torch_cudnn", SDPBackend.CUDNN_ATTENTION), ("tessera_py", None)]
            if args.flash:
                backends.append(("torch_flash", SDPBackend.FLASH_ATTENTION))
            backends = [(name, be, call(sdpa, (qt, kt, vt), be) if be is not None else call(mine, (q, k, v), be))
                        for name, be in backends]
            flops = (2.5 if args.backward else 1.0) * attention_flops(batch, heads, s, s, d, bool(causal))
            results = {name: ([], [], []) for name, _, _ in backends}
            for order in (backends, backends[::-1]):
                for name, backend, fn in order:
                    with (sdpa_kernel(backend) if backend is not None else contextlib.nullcontext()):
                        fn()
                        torch.cuda.synchronize()
                        start, end, samples = turn(fn, args.seconds, args.queue, args.cool)
                    ms, mhz, watts = results[name]
                    ms += steady(samples, start, end)
                    mhz += steady(smi.clock, start, end)
                    watts += steady(smi.power, start, end)
            for name, _, _ in backends:
                ms, mhz, watts = (median_or_none(x) for x in results[name])
                tflops = flops / ms / 1e9 if ms else None
                per_ghz = tflops / (mhz / 1000) if tflops and mhz else None
                cells = [d, s, causal, name, _fmt(ms, 4), _fmt(tflops, 1), _fmt(mhz, 0), _fmt(watts, 0),
                         _fmt(per_ghz, 1), len(results[name][0])]
                print("| " + " | ".join(str(c) for c in cells) + " |", flush=True)
            del q, k, v, qt, kt, vt
            torch.cuda.empty_cache()
    finally:
        smi.close()


def _fmt(x, digits):
    return "-" if x is None else f"{x:.{digits}f}"


if __name__ == "__main__":
    main()
