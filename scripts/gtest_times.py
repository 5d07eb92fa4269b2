#!/usr/bin/env python3
"""The slowest GoogleTest cases of a folder of GoogleTest XML reports (GTEST_OUTPUT=xml:DIR/), one
line each: seconds, executable, test. scripts/gpu-check appends them to tests.log so that the
suites' device time can be read per test.

  scripts/gtest_times.py DIR [N]      (N slowest, default 20)"""
import os
import sys
import xml.etree.ElementTree as ET


def slowest(folder, n):
    rows = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".xml"):
            continue
        try:
            root = ET.parse(os.path.join(folder, name)).getroot()
        except ET.ParseError:
            continue  # a report cut short (a test that crashed or timed out)
        for case in root.iter("testcase"):
            try:
                t = float(case.get("time", "0").rstrip("s"))
            except ValueError:
                continue
            rows.append((t, name[:-4], f"{case.get('classname', '')}.{case.get('name', '')}"))
    rows.sort(key=lambda r: -r[0])
    return rows[:n]


def main(argv):
    if len(argv) < 2 or not os.path.isdir(argv[1]):
        print(__doc__.splitlines()[-1].strip(), file=sys.stderr)
        return 2
    n = int(argv[2]) if len(argv) > 2 else 20
    for t, exe, test in slowest(argv[1], n):
        print(f"{t:8.2f}  {exe}  {test}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
