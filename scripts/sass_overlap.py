#!/usr/bin/env python3
"""What an overlapped wgmma schedule leaves between its two waits, per kernel, from SASS.

In the sm90 kernels' overlapped schedule (src/cuda/sm90/common/kv_tile_schedule.cuh) a
warpgroup waits twice per K/V tile: `WARPGROUP.DEPBAR.LE gsb0, 0x1` (S has landed, P V may still
run), then `WARPGROUP.DEPBAR.LE gsb0, 0x0` (P V done). The softmax is meant to sit between them.
ptxas may hoist the second wait above the softmax (the sixteenth session's FP8 branches: the
first wait was there, yet only the soft-cap path's exp2 lay between the two), so the presence of
the 0x1 wait proves nothing; this counts what lies between each 0x1 wait and the next 0x0 wait.

  cuobjdump -sass OBJ | scripts/sass_overlap.py [--kernel REGEX]
  scripts/sass_overlap.py --cuobjdump PATH OBJ [--kernel REGEX]

Prints per function and per 0x1 wait: instructions, MUFU.EX2 and FMNMX up to the next 0x0 wait.
A schedule whose softmax overlaps shows ~64-130 MUFU.EX2 per wait (a 128-key tile: 64 per thread
on the plain path, 64 more on the soft-cap path, plus the rescale factors) and the plain path's
row max, ~64 FMNMX. Count the FMNMX: ptxas can leave the soft-cap path's 64 exp2 between the
waits and put the wait above the plain path's row max (the eighteenth session's V^T-only FP8
d256 before its pin: 64 MUFU.EX2 but 1 FMNMX between the waits, the softmax that runs not
overlapped)."""
import argparse
import re
import subprocess
import sys


def overlap_report(sass_text, kernel_regex=None):
    """[(function, instructions, mufu_ex2, fmnmx)] for each DEPBAR 0x1 .. next DEPBAR 0x0 span."""
    out, func, open_span = [], None, None
    pattern = re.compile(kernel_regex) if kernel_regex else None
    for line in sass_text.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            func, open_span = m.group(1), None
            continue
        if func is None or (pattern and not pattern.search(func)):
            continue
        # SASS lines: /*addr*/  OPCODE ... ;
        ins = re.search(r"/\*[0-9a-f]{4,}\*/\s+(.+?);", line)
        if not ins:
            continue
        text = ins.group(1)
        if "WARPGROUP.DEPBAR.LE" in text and re.search(r"gsb0,\s*0x1\b", text):
            open_span = [func, 0, 0, 0]
            continue
        if "WARPGROUP.DEPBAR.LE" in text and re.search(r"gsb0,\s*0x0\b", text):
            if open_span is not None:
                out.append(tuple(open_span))
                open_span = None
            continue
        if open_span is not None:
            open_span[1] += 1
            if "MUFU.EX2" in text:
                open_span[2] += 1
            if text.split()[0].startswith("FMNMX") or (text.startswith("@") and text.split()[1].startswith("FMNMX")):
                open_span[3] += 1
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("obj", nargs="?", help="object file (with --cuobjdump); else SASS on stdin")
    ap.add_argument("--cuobjdump", help="the cuobjdump to run on OBJ")
    ap.add_argument("--kernel", help="only functions whose mangled name matches this regex")
    a = ap.parse_args()
    if a.obj:
        if not a.cuobjdump:
            ap.error("OBJ needs --cuobjdump PATH (or pipe `cuobjdump -sass OBJ` in)")
        try:
            run = subprocess.run([a.cuobjdump, "-sass", a.obj], capture_output=True, text=True)
        except OSError as e:
            ap.error(f"--cuobjdump: a runnable cuobjdump expected, got {a.cuobjdump!r} ({e.strerror})")
        if run.returncode != 0:
            ap.error(f"OBJ: an object file cuobjdump can read expected, got {a.obj!r} "
                     f"(cuobjdump: {run.stderr.strip().splitlines()[-1] if run.stderr.strip() else 'exit %d' % run.returncode})")
        text = run.stdout
    else:
        text = sys.stdin.read()
    rows = overlap_report(text, a.kernel)
    if not rows:
        print("no WARPGROUP.DEPBAR.LE gsb0, 0x1 wait found (serial schedule, or no wgmma)")
    for func, n, mufu, fmnmx in rows:
        print(f"{func}: {n} instructions, {mufu} MUFU.EX2, {fmnmx} FMNMX between the 0x1 and the 0x0 wait")


if __name__ == "__main__":
    main()
