#!/usr/bin/env python3
"""Summarise a batch-attention timeline (src/cuda/batch/trace.h): the stderr of a run built with
-DTESSERA_BATCH_TRACE=ON under TESSERA_CUDA_BATCH_TRACE=N, e.g.
    TESSERA_CUDA_BATCH_TRACE=25 build/bin/tessera bench --device cuda --suite cuda.mixed_vs_separate 2> t.log
    scripts/trace_split.py t.log
Prints the prefill CTAs' end times and per-round unit times, and the decode CTAs' pace (items per
ms per CTA) on the SMs the prefill left free and on those it vacated. Times in us from the first
stamp."""
import statistics
import sys


def main(path):
    prefill, decode, events = [], [], []
    for line in open(path, errors="replace"):
        f = line.split()
        if len(f) < 2 or f[0] != "TRACE":
            continue
        if f[1] == "P":  # cta smid end round0 round1 ...
            prefill.append((int(f[2]), int(f[3]), int(f[4]), [int(x) for x in f[5:]]))
        elif f[1] == "D":  # cta smid start end items
            decode.append(tuple(int(x) for x in f[2:7]))
        elif f[1] == "E":  # us between events around the run's kernels
            events.append(float(f[2]))
    if not prefill and not decode:
        sys.exit("no TRACE lines (a build with -DTESSERA_BATCH_TRACE=ON and TESSERA_CUDA_BATCH_TRACE=N?)")
    t0 = min([p[3][0] for p in prefill if p[3]] + [d[2] for d in decode])
    us = lambda t: (t - t0) / 1000.0
    if prefill:
        ends = sorted(us(p[2]) for p in prefill)
        deciles = [round(ends[int(i * (len(ends) - 1) / 10)]) for i in range(11)]
        print(f"prefill CTAs {len(prefill)}: end min {ends[0]:.0f} median {ends[len(ends) // 2]:.0f} "
              f"max {ends[-1]:.0f} us; deciles {deciles}")
        for r in range(max(len(p[3]) for p in prefill)):
            rows = [p for p in prefill if r < len(p[3])]
            times = [(us(p[3][r + 1]) if r + 1 < len(p[3]) else us(p[2])) - us(p[3][r]) for p in rows]
            starts = [us(p[3][r]) for p in rows]
            print(f"  round {r}: {len(rows)} CTAs, unit {statistics.median(times):.1f} us "
                  f"(min {min(times):.1f}, max {max(times):.1f}); starts {min(starts):.0f}-{max(starts):.0f}")
    last = max([us(p[2]) for p in prefill] + [us(d[3]) for d in decode])
    print(f"stamps span {last:.0f} us (first stamp to last CTA end)"
          + (f"; events around the run's launches (merge and launch latency included) {events[-1]:.0f} us" if events else ""))
    if decode:
        prefill_sms = {p[1] for p in prefill}
        for name, rows in (("decode on free SMs", [d for d in decode if d[1] not in prefill_sms]),
                           ("decode on vacated SMs", [d for d in decode if d[1] in prefill_sms])):
            if not rows:
                continue
            items = sum(d[4] for d in rows)
            busy = sum(us(d[3]) - us(d[2]) for d in rows)
            print(f"  {name}: {len(rows)} CTAs, start {min(us(d[2]) for d in rows):.0f}-"
                  f"{max(us(d[2]) for d in rows):.0f}, last claim {min(us(d[3]) for d in rows):.0f}-"
                  f"{max(us(d[3]) for d in rows):.0f} us, {items} items, "
                  f"{items / busy * 1000 if busy > 0 else 0:.2f} items per ms per CTA")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/trace_split.py TRACE_LOG")
    main(sys.argv[1])
