#!/usr/bin/env python3
"""Does peers.py's queued timing (samples of --queue calls between two events) favour one backend
at short shapes? Times tessera's Python call and cuDNN through SDPA at 1k tokens per sequence
(16k tokens, bf16) in samples of 10 and of 100 queued calls, each after peers.py's 0.3 s settle,
and prints the host time of one call of each. Written for the thirtieth session's question why
peers.py's 1k causal tessera rows read ~8 % above the C++ rows (bench/RESULTS.md).

  PYTHONPATH=build/python python3 bench/queue_depth_probe.py
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import peers  # noqa: E402
import tessera  # noqa: E402


def main():
    for d, causal in ((64, True), (128, True), (128, False)):
        h, s, b = 2048 // d, 1024, 16
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))
        qs, ks, vs = (t.transpose(1, 2) for t in (q, k, v))
        fns = {
            "tessera": (torch.no_grad, lambda: tessera.attention(qs, ks, vs, causal=causal)),
            "cudnn": (lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION),
                      lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)),
        }
        settle = peers.settle_for(0.3)
        for depth in (10, 100):
            for name, (context, fn) in fns.items():
                with context():
                    settle(fn)
                    t = peers.time_samples_queued(fn, 20, depth=depth)
                print(f"d{d} causal={int(causal)} depth {depth:3d} {name:8s} median {statistics.median(t) * 1e3:7.1f} us"
                      f"  min {min(t) * 1e3:7.1f}", flush=True)
        for name, (context, fn) in fns.items():
            with context():
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(50):
                    fn()
                t1 = time.perf_counter()
                torch.cuda.synchronize()
                t2 = time.perf_counter()
            print(f"d{d} causal={int(causal)} {name:8s} host {(t1 - t0) / 50 * 1e6:6.1f} us a call, "
                  f"all {(t2 - t0) / 50 * 1e6:6.1f} us", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
