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
