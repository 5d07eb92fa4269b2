#!/usr/bin/env python3
"""Instructions a warp issues per K/V tile in a kernel's steady state, from its SASS.

The d64 forward's softmax is bound by issue and latency (twenty-eighth session: every
instruction moved onto its path cost time, MUFU's throughput did not), so a change to the
forward's K/V loop should show its count before it takes device time. The K/V loop is the
shortest loop (a backward branch and the code it jumps back over) that holds at least one
warpgroup MMA (HGMMA; QGMMA for fp8) and --min-mufu MUFU.EX2. Its steady path is walked from the loop's head to that branch: every
conditional forward branch that stays inside the loop is taken (they skip the optional blocks:
the soft cap, the mask, the O rescale when the lazy vote says no, the retry of a barrier wait
that succeeded), a conditional branch out of the loop or backwards is not (a wait's retry, an
error path), an unconditional one always is. So it is the path of a long unmasked row with a
settled max; read it as a count to compare between builds, not as an exact trace.

  scripts/sass_loop_path.py --cuobjdump PATH A.o [B.o ...] [--kernel REGEX] [--min-mufu N]
  scripts/sass_loop_path.py A.sass [B.sass ...] [--kernel REGEX]     (cuobjdump -sass text)

Prints per kernel (in the first build) the path's length in each build, with its MUFU.EX2,
HGMMA, uniform-datapath (U*) and branch counts. Exit status 2 on bad arguments, 0 otherwise."""
import argparse
import collections
import re
import sys

from sass_text import check_kernel_regex, functions, opcode, read_sass

BRANCH = re.compile(r"^(@!?U?P[T\d]+\s+)?BRA(\.U|\.DIV)?\b[^;]*?(0x[0-9a-f]+)\s*$")


def is_wgmma(op):
    """HGMMA (16-bit), QGMMA (fp8), IGMMA (int8): the warpgroup MMAs."""
    return op.split(".")[0] in ("HGMMA", "QGMMA", "IGMMA")


def branch_target(text):
    """(target, conditional) of a BRA (not BRA.DIV), else None."""
    m = BRANCH.match(text)
    if not m or m.group(2) == ".DIV":
        return None
    return int(m.group(3), 16), m.group(1) is not None


def kv_loop(ins, min_mufu):
    """(first index, index of the back branch) of the shortest loop with a warpgroup MMA and min_mufu
    MUFU.EX2, or None."""
    index = {a: i for i, (a, _) in enumerate(ins)}
    best = None
    for i, (a, text) in enumerate(ins):
        b = branch_target(text)
        if b is None or b[0] >= a or b[0] not in index:
            continue
        j = index[b[0]]
        body = [opcode(t) for _, t in ins[j:i + 1]]
        if any(is_wgmma(o) for o in body) and body.count("MUFU.EX2") >= min_mufu:
            if best is None or i - j < best[1] - best[0]:
                best = (j, i)
    return best


def steady_path(ins, loop):
    """The opcodes of the walk described in the module's docstring, or None if it does not
    reach the back branch."""
    j, end = loop
    lo, hi = ins[j][0], ins[end][0]
    index = {a: i for i, (a, _) in enumerate(ins)}
    i, path = j, []
    while len(path) <= end - j + 1:
        a, text = ins[i]
        path.append(opcode(text))
        if i == end:
            return path
        b = branch_target(text)
        if b is not None:
            target, conditional = b
            if not conditional or (a < target <= hi and target in index):
                if target < lo or target > hi or target not in index:
                    return None  # an unconditional jump out of the loop
                i = index[target]
                continue
        i += 1
    return None  # a cycle inside the loop's body


def summary(path):
    c = collections.Counter(path)
    return {"n": len(path), "mufu": c["MUFU.EX2"], "gmma": sum(v for k, v in c.items() if is_wgmma(k)),
            "uniform": sum(v for k, v in c.items() if k.startswith("U")),
            "branches": sum(v for k, v in c.items() if k.startswith("BRA"))}


def report(texts, names, kernel_regex=None, min_mufu=32):
    pattern = re.compile(kernel_regex) if kernel_regex else None
    builds = [functions(t) for t in texts]
    lines = []
    for func in sorted(builds[0]):
        if pattern and not pattern.search(func):
            continue
        row, found = [], False
        for name, build in zip(names, builds):
            ins = build.get(func)
            loop = kv_loop(ins, min_mufu) if ins else None
            found |= loop is not None
            path = steady_path(ins, loop) if loop else None
            if ins is None:
                row.append(f"  {name}: not in this build")
            elif loop is None:
                row.append(f"  {name}: no loop with a warpgroup MMA and {min_mufu} MUFU.EX2")
            elif path is None:
                row.append(f"  {name}: the walk did not reach the back branch")
            else:
                s = summary(path)
                row.append(f"  {name}: path {s['n']} (MUFU.EX2 {s['mufu']}, GMMA {s['gmma']}, U* {s['uniform']}, "
                           f"BRA {s['branches']}); loop body {loop[1] - loop[0] + 1}")
        if found:  # kernels without a K/V loop in any build (a merge kernel) are left out
            lines.append(func)
            lines.extend(row)
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("builds", nargs="+", help="objects (with --cuobjdump) or SASS text files, first the baseline")
    ap.add_argument("--cuobjdump", help="path of cuobjdump: the files are objects to disassemble")
    ap.add_argument("--kernel", help="only functions whose mangled name matches this regex")
    ap.add_argument("--min-mufu", type=int, default=32,
                    help="MUFU.EX2 a loop must hold to be the K/V loop (default 32: one softmax of a "
                         "64-key tile's share)")
    args = ap.parse_args(argv)
    check_kernel_regex(ap, args.kernel)
    if args.min_mufu < 0:
        ap.error(f"--min-mufu: a count >= 0 expected, got {args.min_mufu}")
    texts = [read_sass(p, args.cuobjdump) for p in args.builds]
    names = [chr(ord("A") + i) if len(args.builds) <= 26 else str(i) for i in range(len(args.builds))]
    lines = report(texts, names, args.kernel, args.min_mufu)
    print("\n".join(lines) if lines else "no kernel with a K/V loop")
    return 0


if __name__ == "__main__":
    sys.exit(main())
