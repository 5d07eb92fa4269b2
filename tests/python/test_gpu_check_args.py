"""scripts/gpu-check's arguments: a bad one is named with what was expected and what was given,
before anything is built or written."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "gpu-check")


def run(tmp_path, *args):
    out = tmp_path / "out"
    r = subprocess.run(["bash", SCRIPT, str(out), *args], capture_output=True, text=True, timeout=60)
    return r, out


def test_sanitizer_tool_must_be_known(tmp_path):
    r, out = run(tmp_path, "--sanitizer", "helgrind")
    assert r.returncode == 2
    assert "--sanitizer: memcheck, racecheck or memcheck,racecheck expected, got 'helgrind'" in r.stderr
    assert not out.exists()


def test_sanitizer_needs_a_value(tmp_path):
    r, out = run(tmp_path, "--sanitizer")
    assert r.returncode == 2
    assert "--sanitizer: a tool expected" in r.stderr
    assert not out.exists()


def test_filter_needs_a_value(tmp_path):
    r, out = run(tmp_path, "--filter")
    assert r.returncode == 2
    assert "--filter: a GoogleTest filter expected" in r.stderr
    assert not out.exists()


def test_each_tool_alone_is_accepted(tmp_path):
    # Parsing goes on past a good --sanitizer value and stops at the unknown option after it.
    for tool in ("memcheck", "racecheck", "memcheck,racecheck", "racecheck,memcheck"):
        r, out = run(tmp_path, "--sanitizer", tool, "--bogus")
        assert r.returncode == 2, tool
        assert "unknown option --bogus" in r.stderr, (tool, r.stderr)
        assert not out.exists()


def test_part_must_be_k_of_n(tmp_path):
    for bad in ("0/2", "3/2", "a/b", "1", "1/0", "-1/2", "1/2/3"):
        r, out = run(tmp_path, "--part", bad)
        assert r.returncode == 2, bad
        assert f"--part: K/N expected (whole numbers, 1 <= K <= N), got '{bad}'" in r.stderr, (bad, r.stderr)
        assert not out.exists()


def test_part_needs_a_value(tmp_path):
    r, out = run(tmp_path, "--part")
    assert r.returncode == 2
    assert "--part: K/N expected after it" in r.stderr
    assert not out.exists()


def test_good_parts_are_accepted(tmp_path):
    for good in ("1/1", "1/2", "2/2", "3/10"):
        r, out = run(tmp_path, "--part", good, "--bogus")
        assert r.returncode == 2, good
        assert "unknown option --bogus" in r.stderr, (good, r.stderr)
        assert not out.exists()


def shares(part, parts, runs):
    """The runs (1-based) that gpu-check's own mine() (taken from the script) gives part K of N."""
    lines = [l for l in open(SCRIPT).read().splitlines() if l.startswith("mine() {")]
    assert len(lines) == 1, "mine() is defined on one line in scripts/gpu-check"
    script = (f"part={part} parts={parts} sanitizer_run=0\n{lines[0]}\n"
              f"for i in $(seq {runs}); do mine && echo $i; done; true\n")
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return [int(x) for x in r.stdout.split()]


def test_parts_share_the_runs_out_once_each():
    assert shares(1, 1, 5) == [1, 2, 3, 4, 5]
    assert shares(1, 2, 15) == [1, 3, 5, 7, 9, 11, 13, 15]
    assert shares(2, 2, 15) == [2, 4, 6, 8, 10, 12, 14]
    every = sorted(sum((shares(k, 3, 16) for k in (1, 2, 3)), []))
    assert every == list(range(1, 17))
