#!/usr/bin/env python3
"""Joins tessera's benchmark CSV with the peers' CSV (same run) into a Markdown table of
throughput and ratios. Both files have the columns
suite,backend,dtype,head_dim,seq,batch,heads,causal,ms,tflops,gbps."""
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
        print(f"| {r['suite']} | {r['dtype']} | {r['head_dim']} | {r['seq']} | {r['batch']} | {r['causal']} | "
              f"{r['backend']} | {float(r['ms']):.3f} | {val:.1f} | {ratios[0]} | {ratios[1]} |")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: compare.py TESSERA_CSV PEERS_CSV")
    main(sys.argv[1], sys.argv[2])
