"""scripts/gtest_times.py (gpu-check's slowest-tests list) on synthetic GoogleTest XML reports."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "gtest_times.py")

REPORT = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="3" name="AllTests">
  <testsuite name="{suite}" tests="3">
    <testcase name="Fast" classname="{suite}" time="0.010" />
    <testcase name="Slow" classname="{suite}" time="{slow}" />
    <testcase name="Middle" classname="{suite}" time="1.5" />
  </testsuite>
</testsuites>
"""


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=60)


def test_slowest_first_across_reports(tmp_path):
    (tmp_path / "gpu_test_a.xml").write_text(REPORT.format(suite="A", slow="12.25"))
    (tmp_path / "gpu_test_b.xml").write_text(REPORT.format(suite="B", slow="3"))
    (tmp_path / "cut_short.xml").write_text("<testsuites><testsuite")  # a crashed run's report
    (tmp_path / "notes.txt").write_text("not a report")
    r = run(str(tmp_path), "3")
    assert r.returncode == 0, r.stderr
    lines = [l.split() for l in r.stdout.strip().splitlines()]
    assert lines == [["12.25", "gpu_test_a", "A.Slow"], ["3.00", "gpu_test_b", "B.Slow"], ["1.50", "gpu_test_a", "A.Middle"]]


def test_missing_folder_is_an_error(tmp_path):
    r = run(str(tmp_path / "absent"))
    assert r.returncode == 2 and "gtest_times.py DIR" in r.stderr
