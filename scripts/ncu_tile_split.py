#!/usr/bin/env python3
"""Where a kernel spends its time once per query tile and once per K/V tile, from two ncu source pages.

Profile the same kernel on two problems with the same number of query tiles but different K/V
tiles per query tile (e.g. bf16 d128 at 4k and 16k tokens per sequence, both 16k tokens per call:
2048 query tiles each), with the source page as CSV:

  ncu --section SourceCounters --section WarpStateStats -k regex:forward_kernel --launch-skip 1 \\
      --launch-count 1 --csv --page source --print-source sass python3 bench/profile_case.py ARGS

(scripts/gpu-ab --ncu-source does this per --ncu case). Every SASS instruction's execution count
then says how often it runs: about as often in both profiles means once per query tile (set-up,
the first K/V tile's softmax, the epilogue); `ratio` times as often (the K/V tiles per query
tile, long / short) means once per K/V tile (the loop). The warp-stall samples of each class give
its share of the time in each profile, and the per-tile instructions with the most samples say
where the per-tile time goes.

  scripts/ncu_tile_split.py SHORT.csv[.gz] LONG.csv[.gz] [--top N] [--ops]

--ops adds the loop (per K/V tile) by opcode, in the short profile: instructions a warp executes
per K/V tile and warp-stall samples per 1000 warp-tiles with their main reasons, the unit being
the execution count of the loop's most executed tensor-core instruction (one per warp per tile).
Two kernels' tables side by side say where one loop spends what the other does not (the
thirty-second session's comparison of cuDNN's d64 loop with ours: MUFU 24 % of our loop's
samples against 7 %).
"""
import argparse
import csv
import gzip
import io
import re
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def read_source_page(path):
    """(header, rows) of an ncu source-page CSV; ncu's own log lines before the table are skipped."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"Address"')), None)
    if start is None:
        raise ValueError(f"{path}: no source-page table (a line starting with \"Address\") found")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, body = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
    for column in (SAMPLES, EXECUTED, "Source"):
        if column not in header:
            raise ValueError(f"{path}: column {column!r} missing (profile with --section SourceCounters)")
    return header, body


def count(value):
    """An ncu CSV count: "1,521,536" or "27405" (thousands separators are the report's choice)."""
    return int(float(value.replace(",", "") or 0))


def split(short_path, long_path):
    """Per class ('per query tile', 'per K/V tile', 'other'): instruction count and samples in each
    profile; plus the per-query-tile rows for the top list. The K/V-tile ratio is the execution
    ratio of the most executed tensor-core instruction (HGMMA / HMMA: the loop's GEMMs), or of the
    most executed instruction where there is none. (The most executed instruction overall can be
    a spin loop on a barrier, whose count follows the waiting, not the tiles: the sm90 forward's
    producer waiting for free stages read 3.40 where the loop's ratio was 4.43.)"""
    h, a = read_source_page(short_path)
    h2, b = read_source_page(long_path)
    # (Branch targets are absolute addresses, which move between processes.)
    text = lambda rows, hdr: [re.sub(r"0x[0-9a-f]{9,}", "ADDR", r[hdr.index("Source")]) for r in rows]
    if len(a) != len(b) or text(a, h) != text(b, h2):
        raise ValueError("the two profiles are not of the same kernel (their SASS differs)")
    s, e = h.index(SAMPLES), h.index(EXECUTED)
    s2, e2 = h2.index(SAMPLES), h2.index(EXECUTED)
    source = h.index("Source")
    gemms = [i for i in range(len(a)) if re.search(r"\bH[G]?MMA\.", a[i][source])]
    top = max(gemms or range(len(a)), key=lambda i: count(a[i][e]))
    ratio = count(b[top][e2]) / max(count(a[top][e]), 1)
    if ratio < 1.5:
        raise ValueError(f"the long profile runs the loop only {ratio:.2f}x as often: pick lengths further apart")
    classes = {name: [0, 0, 0] for name in ("per query tile", "per K/V tile", "other")}
    per_tile, loop = [], []
    for ra, rb in zip(a, b):
        ea, eb = count(ra[e]), count(rb[e2])
        if ea == 0 and eb == 0:
            name = "other"
        else:
            q = eb / max(ea, 1)
            # Geometric midpoints between 1 and the loop's ratio, with a margin for the first and
            # last K/V tiles, which the loop peels.
            name = "per query tile" if q < ratio ** 0.25 else "per K/V tile" if q > ratio ** 0.75 else "other"
        c = classes[name]
        c[0] += 1
        c[1] += count(ra[s])
        c[2] += count(rb[s2])
        if name == "per query tile":
            per_tile.append((count(ra[s]), ra, h))
        elif name == "per K/V tile":
            loop.append(ra)
    return ratio, classes, per_tile, (loop, h, count(a[top][e]))


def opcode(sass):
    """The opcode of a SASS line without its predicate and modifiers: '@!P0 BRA 0x..' -> 'BRA'."""
    words = [w for w in sass.split() if not w.startswith("@")]
    return words[0].split(".")[0] if words else "?"


def loop_by_opcode(loop, header, unit):
    """[(opcode, instructions per warp-tile, samples per 1000 warp-tiles, {reason: samples per 1000})],
    most samples first."""
    s, e, source = header.index(SAMPLES), header.index(EXECUTED), header.index("Source")
    stalls = [i for i in range(len(header)) if header[i].startswith("stall_") and "Not Issued" not in header[i]]
    ops = {}
    for row in loop:
        op = ops.setdefault(opcode(row[source]), [0, 0, {}])
        op[0] += count(row[e])
        op[1] += count(row[s])
        for i in stalls:
            reason = header[i][len("stall_"):]
            op[2][reason] = op[2].get(reason, 0) + count(row[i])
    unit = max(unit, 1)
    table = [(name, n / unit, smp * 1000 / unit, {k: v * 1000 / unit for k, v in why.items() if v > 0})
             for name, (n, smp, why) in ops.items()]
    return sorted(table, key=lambda t: -t[2])


def report(short_path, long_path, top=15, out=sys.stdout, ops=False):
    ratio, classes, per_tile, (loop, header, unit) = split(short_path, long_path)
    total_a = sum(c[1] for c in classes.values()) or 1
    total_b = sum(c[2] for c in classes.values()) or 1
    out.write(f"K/V tiles per query tile, long / short: {ratio:.2f}\n")
    out.write("| class | instructions | short: samples | share | long: samples | share |\n|---|---|---|---|---|---|\n")
    for name, (n, sa, sb) in classes.items():
        out.write(f"| {name} | {n} | {sa} | {sa / total_a:.1%} | {sb} | {sb / total_b:.1%} |\n")
    per_tile_total = classes["per query tile"][1] or 1
    out.write(f"\nper-query-tile instructions with the most samples (short profile; share of the per-tile samples):\n")
    for samples, row, header in sorted(per_tile, key=lambda t: -t[0])[:top]:
        reasons = sorted(((count(row[i]), header[i][len("stall_"):]) for i in range(len(header))
                          if header[i].startswith("stall_") and "Not Issued" not in header[i]), reverse=True)[:2]
        why = ", ".join(f"{k} {v}" for v, k in reasons if v > 0)
        out.write(f"  {samples:7d} {samples / per_tile_total:6.1%}  {row[header.index('Source')].strip()[:64]:64s} {why}\n")
    if ops:
        table = loop_by_opcode(loop, header, unit)
        total = sum(t[2] for t in table) or 1
        out.write(f"\nthe loop by opcode (short profile; {unit} warp-tiles: the most executed tensor-core instruction's count):\n")
        out.write("| opcode | per warp-tile | samples / 1000 warp-tiles | share | main reasons |\n|---|---|---|---|---|\n")
        for name, n, smp, why in table[:top]:
            reasons = ", ".join(f"{k} {v:.0f}" for k, v in sorted(why.items(), key=lambda kv: -kv[1])[:3])
            out.write(f"| {name} | {n:.1f} | {smp:.0f} | {smp / total:.1%} | {reasons} |\n")
        out.write(f"| all | {sum(t[1] for t in table):.1f} | {total:.0f} | | |\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("short")
    ap.add_argument("long")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--ops", action="store_true", help="the loop by opcode (instructions and samples per warp-tile)")
    args = ap.parse_args()
    try:
        report(args.short, args.long, args.top, ops=args.ops)
    except (OSError, ValueError) as err:
        sys.exit(f"ncu_tile_split: {err}")


if __name__ == "__main__":
    main()
