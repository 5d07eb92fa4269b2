#!/usr/bin/env python3
"""Joins tessera's benchmark CSV with the peers' CSV (same run) into a Markdown table of
throughput and ratios. Both files have the columns
suite,backend,dtype,head_dim,seq,batch,heads,causal,ms,tflops,gbps.

The ceilings line lists both files' ceiling rows (tessera's own: its GEMM and its read-only pass
over device memory; the peers': torch's GEMMs, sum and copy). A GB/s row (decode) also shows its
fraction of tessera's read-only ceiling, "(97 % of read)", or of the peers' read_sum where
tessera's CSV has none."""
import csv
import sys


def load(path):
    try:
        with open(path) as f:
            return list(csv.DictReader(f))
    except FileNotFoundError:
        print(f"# {path}: missing", file=sys.stderr)
        return []


def key(r):
    return (r["suite"], r["dtype"], int(r["head_dim"]), int(r["seq"]), int(r["batch"]), int(r["causal"]))


def main(tessera_csv, peers_csv):
    ours, peers = load(tessera_csv), load(peers_csv)
    # tessera timed from Python in the peers' process (bench/peers.py) joins the table too.
    ours += [r for r in peers if r["backend"].startswith("tessera")]
    by_key = {}
    for r in peers:
        by_key.setdefault(key(r), {})[r["backend"]] = r
    ceil = {r["backend"]: r for r in peers if r["suite"] == "ceiling"}
    ceil.update({r["backend"]: r for r in ours if r["suite"] == "ceiling"})
    # The read-only ceiling a GB/s row is set against: tessera's own pass, else torch's sum.
    read = next((float(r["gbps"]) for b, r in ceil.items() if b.endswith("_read_sum") and float(r["gbps"] or 0) > 0),
                float(ceil["read_sum"]["gbps"] or 0) if "read_sum" in ceil else 0.0)
    if ceil:
        print("ceilings: " + ", ".join(
            f"{b} {float(r['tflops']):.0f} TFLOP/s" if float(r["tflops"]) else f"{b} {float(r['gbps']):.0f} GB/s"
            for b, r in ceil.items()))
        print()
    print("| suite | dtype | d | seq | batch | causal | backend | ms | TFLOP/s or GB/s | vs flash | vs cudnn |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in ours:
        if r["suite"] == "ceiling":
            continue
        unit = "gbps" if float(r["gbps"] or 0) > 0 else "tflops"
        val = float(r[unit])
        p = by_key.get(key(r), {})
        ratios = []
        for peer in ("torch_flash", "torch_cudnn"):
            pv = float(p[peer][unit]) if peer in p and float(p[peer][unit] or 0) > 0 else 0
            ratios.append(f"{val / pv:.2f}x ({pv:.0f})" if pv else "-")
        shown = f"{val:.1f}"
        if unit == "gbps" and read > 0:
            shown += f" ({100 * val / read:.0f} % of read)"
        print(f"| {r['suite']} | {r['dtype']} | {r['head_dim']} | {r['seq']} | {r['batch']} | {r['causal']} | "
              f"{r['backend']} | {float(r['ms']):.3f} | {shown} | {ratios[0]} | {ratios[1]} |")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: compare.py TESSERA_CSV PEERS_CSV")
    main(sys.argv[1], sys.argv[2])
