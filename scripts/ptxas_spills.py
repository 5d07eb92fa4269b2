#!/usr/bin/env python3
"""The kernels ptxas reports as spilling in a build log (-Xptxas=-warn-spills, which every
tessera CUDA target sets), each once with its largest spill, demangled where c++filt is present.
With --hot REGEX it exits 1 when a kernel whose mangled name matches spills: issue #5 asks for no
spills in the hot kernels, and scripts/gpu-check fails its run on one in the sm90 kernels.

  scripts/ptxas_spills.py BUILD_LOG [--hot '^_ZN7tessera4cuda4sm90']
"""
import argparse
import re
import shutil
import subprocess
import sys

WARNING = re.compile(r"Registers are spilled to local memory in function '([^']+)', (\d+) bytes spill stores, "
                     r"(\d+) bytes spill loads")


def spilling_kernels(text):
    """{mangled name: (spill store bytes, spill load bytes)}, the largest seen (a kernel built for
    two architectures is reported once per architecture)."""
    found = {}
    for name, stores, loads in WARNING.findall(text):
        prev = found.get(name, (0, 0))
        found[name] = (max(prev[0], int(stores)), max(prev[1], int(loads)))
    return found


def demangle(names):
    if not names or shutil.which("c++filt") is None:
        return list(names)
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=False).stdout
    lines = out.splitlines()
    return lines if len(lines) == len(names) else list(names)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log")
    ap.add_argument("--hot", help="regex over mangled names: exit 1 if a matching kernel spills")
    a = ap.parse_args(argv)
    with open(a.log, errors="replace") as f:
        found = spilling_kernels(f.read())
    names = sorted(found)
    hot = re.compile(a.hot) if a.hot else None
    failed = False
    for name, shown in zip(names, demangle(names)):
        stores, loads = found[name]
        mark = ""
        if hot is not None and hot.search(name):
            mark, failed = "HOT ", True
        print(f"{mark}{shown}: {stores} bytes spill stores, {loads} bytes spill loads")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
