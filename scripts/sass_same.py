#!/usr/bin/env python3
"""Which kernels two builds compiled differently, from their SASS.

A change meant to leave kernels as they were (a refactor, a change confined to one path, a
host-side fix) shows it here before it takes device time, and a change meant to touch some
kernels shows which ones it touched. For every CUDA object (*.cu.o) both build folders hold,
matched by its path inside the folder, each kernel of each architecture is compared instruction
by instruction: the same when identical; otherwise how many instructions differ, and how many
still differ with register numbers, barrier slots and immediates ignored (a renaming or a
shifted branch target alone leaves that second count at 0).

  scripts/sass_same.py --cuobjdump PATH BUILD_A BUILD_B [--objects REGEX] [--all]

Prints one line per object that differs (every object with --all), and under it one line per
kernel that differs; then the objects only one build holds. Exit status 0 when every object is
in both builds and the same, 1 when some differ or are in one build only, 2 on bad arguments
(no object in common included) or when cuobjdump fails. Register numbers, barrier slots and hex
immediates (branch targets, constant-bank offsets: a change of a kernel's parameter layout
alone reads 0 there too) are what the second count ignores; decimal immediates are not."""
import argparse
import difflib
import os
import re
import shutil
import sys

from sass_text import FUNCTION, INSTRUCTION, read_sass

ARCH = re.compile(r"arch = (sm_\w+)")
# An anonymous namespace's mangled name (<length>_GLOBAL__N__...) carries hashes of its file's path
# and of the compiling process: the same kernel built twice gets two names. The whole name is
# replaced by a fixed one (anonymous_namespaces).
ANONYMOUS = re.compile(r"(\d+)(?=_GLOBAL__N__)")
FIXED = "12_GLOBAL__N__"
# Register numbers (R12, UR4, P3, UP1, B2, SR_*) and immediates / addresses (0x1f30).
NAMES = re.compile(r"\b(U?R|U?P|B)\d+\b|\b0x[0-9a-f]+\b")


def anonymous_namespaces(name):
    """A mangled name with each anonymous namespace's name replaced by one fixed name. Its length
    prefix may follow the digits of the identifier before it (4sm9051_GLOBAL__N__...): the
    shortest run of trailing digits that reads 20 or more (nvcc's names run ~50 characters) is
    taken as the length."""
    out, pos = [], 0
    for m in ANONYMOUS.finditer(name):
        if m.start() < pos:
            continue
        digits = m.group(1)
        for k in range(1, len(digits) + 1):
            length = int(digits[-k:])
            if length >= 20:
                break
        else:
            continue
        start = m.end() - k  # the length prefix's first digit
        end = m.end() + length
        if end > len(name):
            continue
        out.append(name[pos:start] + FIXED)
        pos = end
    return "".join(out) + name[pos:]


def kernels(sass_text):
    """{(arch, mangled name): [instruction text]} of a cuobjdump -sass listing (an object built
    for several architectures holds each kernel once per architecture)."""
    out, key, arch = {}, None, "?"
    for line in sass_text.splitlines():
        m = ARCH.search(line)
        if m:
            arch = m.group(1)
            continue
        m = FUNCTION.search(line)
        if m:
            key = (arch, anonymous_namespaces(m.group(1)))
            out[key] = []
            continue
        m = INSTRUCTION.match(line)
        if m and key is not None:
            out[key].append(" ".join(m.group(2).split()))
    return out


def differing(a, b):
    """Instructions that differ between two instruction lists (insertions, deletions and
    replacements, the larger side of each)."""
    if a == b:
        return 0
    ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    return sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in ops if tag != "equal")


def compare(sass_a, sass_b):
    """Lines describing the kernels that differ between two listings ([] when none does)."""
    ka, kb = kernels(sass_a), kernels(sass_b)
    lines = []
    for key in sorted(set(ka) | set(kb)):
        arch, name = key
        if key not in kb:
            lines.append(f"  {arch} {name}: only in A ({len(ka[key])} instructions)")
        elif key not in ka:
            lines.append(f"  {arch} {name}: only in B ({len(kb[key])} instructions)")
        elif ka[key] != kb[key]:
            raw = differing(ka[key], kb[key])
            plain = differing([NAMES.sub("#", t) for t in ka[key]], [NAMES.sub("#", t) for t in kb[key]])
            lines.append(f"  {arch} {name}: A {len(ka[key])}, B {len(kb[key])} instructions; {raw} differ, "
                         f"{plain} with registers and immediates ignored")
    return lines


def objects(build, pattern):
    """Paths of the *.cu.o files under a build folder, relative to it, matching pattern."""
    found = []
    for root, _, files in os.walk(build):
        for f in files:
            if f.endswith(".cu.o"):
                rel = os.path.relpath(os.path.join(root, f), build)
                if pattern.search(rel):
                    found.append(rel)
    return sorted(found)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cuobjdump", required=True, help="the cuobjdump to disassemble with")
    ap.add_argument("--objects", default="", help="a regular expression the objects' paths must match")
    ap.add_argument("--all", action="store_true", help="also list the objects that are the same")
    ap.add_argument("build_a")
    ap.add_argument("build_b")
    a = ap.parse_args(argv)
    try:
        pattern = re.compile(a.objects)
    except re.error as e:
        ap.error(f"--objects: a regular expression expected, got '{a.objects}' ({e})")
    if shutil.which(a.cuobjdump) is None:
        ap.error(f"--cuobjdump: an executable cuobjdump expected, got '{a.cuobjdump}'")
    for b in (a.build_a, a.build_b):
        if not os.path.isdir(b):
            ap.error(f"a build folder expected, got '{b}' (not a directory)")
    in_a, in_b = objects(a.build_a, pattern), set(objects(a.build_b, pattern))
    common = [o for o in in_a if o in in_b]
    if not common:
        ap.error(f"no *.cu.o object in both '{a.build_a}' and '{a.build_b}'"
                 + (f" matching --objects '{a.objects}'" if a.objects else ""))
    status = 0
    for rel in common:
        try:
            lines = compare(read_sass(os.path.join(a.build_a, rel), a.cuobjdump),
                            read_sass(os.path.join(a.build_b, rel), a.cuobjdump))
        except (SystemExit, OSError) as e:  # read_sass raises SystemExit with cuobjdump's error
            print(f"sass_same.py: disassembling {rel} failed: {e}", file=sys.stderr)
            return 2
        if lines:
            status = 1
            print(f"differs {rel}")
            print("\n".join(lines))
        elif a.all:
            print(f"same    {rel}")
    for rel in sorted(set(in_a) - in_b):
        print(f"only in A {rel}")
        status = 1
    for rel in sorted(in_b - set(in_a)):
        print(f"only in B {rel}")
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
