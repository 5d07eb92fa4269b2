#!/usr/bin/env python3
"""Whether a change kept ptxas' uniform registers, per kernel, between two builds' SASS.

A warp's scalar values (ring stages, barrier addresses, wgmma descriptors) live in uniform
registers (URn) while ptxas can prove the warp converged. A change that leaves one warp-level
branch or shuffle where ptxas cannot prove it (a tile index read by one lane and shuffled,
before the consumers' loop) can make it give them up in the whole kernel: every descriptor then
comes from a vector register through R2UR (with its stall) before each HGMMA, every shuffle sits
behind a BRA.DIV check with a fallback block, and the K/V loop grows by ~50 instructions. That
cost wip/tile-start-ahead 3-10 % and the masked d64 tile origin 2-4 % (twenty-sixth and
twenty-seventh sessions, forward_sm90.md) where both had 0 spills and no C75xx note.

  scripts/sass_uniform.py --cuobjdump PATH BASE.o NEW.o [--kernel REGEX]
  scripts/sass_uniform.py BASE.sass NEW.sass [--kernel REGEX]      (cuobjdump -sass text)

Prints per kernel present in both: instructions, the highest UR index used, R2UR, BRA.DIV and
WARPSYNC counts, and FLAG where the new build uses fewer uniform registers (highest index down by
more than 4), more R2UR (by more than 10 %) or any new BRA.DIV. Exit status 1 if a kernel is
flagged, 0 otherwise, 2 on bad arguments."""
import argparse
import re
import sys

from sass_text import check_kernel_regex, functions, opcode, read_sass

UNIFORM = re.compile(r"\bUR(\d+)\b")


def kernel_metrics(sass_text):
    """{function: {"n", "max_ur", "r2ur", "bra_div", "warpsync"}} of a cuobjdump -sass listing."""
    out = {}
    for func, instructions in functions(sass_text).items():
        k = out[func] = {"n": 0, "max_ur": -1, "r2ur": 0, "bra_div": 0, "warpsync": 0}
        for _, text in instructions:
            k["n"] += 1
            for u in UNIFORM.findall(text):
                k["max_ur"] = max(k["max_ur"], int(u))
            op = opcode(text)
            if op == "R2UR" or op.startswith("R2UR."):
                k["r2ur"] += 1
            if op.startswith("BRA") and ".DIV" in op:
                k["bra_div"] += 1
            if op.startswith("WARPSYNC"):
                k["warpsync"] += 1
    return out


def flags(base, new):
    """Why `new` (one kernel's metrics) looks like it lost the uniform registers `base` had."""
    why = []
    if new["max_ur"] < base["max_ur"] - 4:
        why.append(f"highest UR {base['max_ur']} -> {new['max_ur']}")
    if new["r2ur"] > base["r2ur"] * 1.1 + 1:
        why.append(f"R2UR {base['r2ur']} -> {new['r2ur']}")
    if new["bra_div"] > base["bra_div"]:
        why.append(f"BRA.DIV {base['bra_div']} -> {new['bra_div']}")
    return why


def compare(base_text, new_text, kernel_regex=None):
    """Lines of the report and whether any kernel is flagged."""
    base, new = kernel_metrics(base_text), kernel_metrics(new_text)
    pattern = re.compile(kernel_regex) if kernel_regex else None
    lines, flagged = [], False
    for name in sorted(set(base) & set(new)):
        if pattern and not pattern.search(name):
            continue
        b, n = base[name], new[name]
        why = flags(b, n)
        flagged |= bool(why)
        fmt = "n={n} maxUR={max_ur} R2UR={r2ur} BRA.DIV={bra_div} WARPSYNC={warpsync}"
        lines.append(f"{name}\n  base {fmt.format(**b)}\n  new  {fmt.format(**n)}" +
                     (f"\n  FLAG: {'; '.join(why)}" if why else ""))
    only = sorted(set(base) ^ set(new))
    if only:
        lines.append(f"in one build only ({len(only)}): " + ", ".join(only[:5]) + (" ..." if len(only) > 5 else ""))
    return lines, flagged


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", help="the baseline build's object (with --cuobjdump) or SASS text")
    ap.add_argument("new", help="the changed build's object or SASS text")
    ap.add_argument("--cuobjdump", help="path of cuobjdump: the two files are objects to disassemble")
    ap.add_argument("--kernel", help="only functions whose mangled name matches this regex")
    args = ap.parse_args(argv)
    check_kernel_regex(ap, args.kernel)
    lines, flagged = compare(read_sass(args.base, args.cuobjdump), read_sass(args.new, args.cuobjdump), args.kernel)
    print("\n".join(lines) if lines else "no kernel in both builds")
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())
