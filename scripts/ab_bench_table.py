#!/usr/bin/env python3
"""The bench table of scripts/gpu-ab: reads OUT/bench_<label>_<round>_<k>.csv (tessera bench --csv)
of every tree and round and prints, per bench row, each tree's times "round 1 / round 2 / ..", each
tree's mean over A's, its median round over A's (one slow round moves the mean, not the median), A's spread ((max - min) / mean of its rounds) and each tree's mean rate
(TFLOP/s, or GB/s for byte-rate rows), the figure the issue targets are stated in. A row a tree
lacks (its run failed) reads "?" and its ratio "n/a".

  scripts/ab_bench_table.py OUT K SUITE ROUNDS LABEL [LABEL ...]"""
import csv
import os
import statistics
import sys


def rows(out, label, rnd, k):
    """{row key: (ms, rate)} of one tree's run; repeated keys get " #2", " #3", ..."""
    path = os.path.join(out, "bench_%s_%s_%s.csv" % (label, rnd, k))
    got, seen = {}, {}
    if os.path.exists(path):
        for r in csv.DictReader(open(path)):
            if r["suite"] == "ceiling":
                continue
            key = " ".join(r[c] for c in ("suite", "backend", "dtype", "head_dim", "seq", "batch", "heads", "causal"))
            seen[key] = seen.get(key, 0) + 1
            if seen[key] > 1:
                key += " #%d" % seen[key]
            tflops, gbps = float(r.get("tflops") or 0), float(r.get("gbps") or 0)
            got[key] = (float(r["ms"]), "%.0f TFLOP/s" % tflops if tflops > 0 else "%.0f GB/s" % gbps if gbps > 0 else "-",
                        tflops if tflops > 0 else gbps)
    return got


def table(out, k, suite, rounds, labels):
    t = {(l, n): rows(out, l, n, k) for l in labels for n in range(1, rounds + 1)}
    keys = list(t[(labels[0], 1)]) or list(t[(labels[-1], 1)])
    lines = ["", "| bench %s: suite backend dtype d seq batch heads causal | " % suite
             + " | ".join("%s ms" % l for l in labels) + " | " + " | ".join("%s / A" % l for l in labels[1:])
             + "".join(" | %s / A by medians" % l for l in labels[1:])
             + " | A spread | " + " | ".join("%s rate" % l for l in labels) + " |",
             "|---|" + "---|" * (4 * len(labels) - 1)]
    for key in keys:
        cells, means, medians, rates, spread = [], [], [], [], "n/a"
        for l in labels:
            v = [t[(l, n)].get(key) for n in range(1, rounds + 1)]
            cells.append(" / ".join("%.4g" % x[0] if x is not None else "?" for x in v))
            ok = [x for x in v if x is not None]
            means.append(sum(x[0] for x in ok) / len(ok) if len(ok) == rounds else None)
            medians.append(statistics.median(x[0] for x in ok) if len(ok) == rounds else None)
            if ok:
                unit = ok[0][1].split(" ", 1)[1] if ok[0][1] != "-" else ""
                rates.append("%.0f %s" % (sum(x[2] for x in ok) / len(ok), unit) if unit else "-")
            else:
                rates.append("?")
            if l == labels[0] and means[0]:
                spread = "%.3f" % ((max(x[0] for x in ok) - min(x[0] for x in ok)) / means[0])
        ratios = ["%.3f" % (m / means[0]) if m and means[0] else "n/a" for m in means[1:]]
        ratios += ["%.3f" % (m / medians[0]) if m and medians[0] else "n/a" for m in medians[1:]]
        lines.append("| " + key + " | " + " | ".join(cells + ratios + [spread] + rates) + " |")
    return "\n".join(lines)


def main():
    if len(sys.argv) < 6:
        print("usage: ab_bench_table.py OUT K SUITE ROUNDS LABEL [LABEL ...]", file=sys.stderr)
        return 2
    out, k, suite = sys.argv[1], sys.argv[2], sys.argv[3]
    try:
        rounds = int(sys.argv[4])
    except ValueError:
        print("ROUNDS: a whole number expected, got '%s'" % sys.argv[4], file=sys.stderr)
        return 2
    print(table(out, k, suite, rounds, sys.argv[5:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
