"""scripts/ncu-peer's argument checks (the profiling itself needs ncu and a GPU): a bad peer or a
missing case is refused with a message that says what was expected, before anything runs."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "ncu-peer")


def run(*args):
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, timeout=60)


def test_bad_peer_is_refused(tmp_path):
    r = run(str(tmp_path / "out"), str(tmp_path), "fa3", "--d 64")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "PEER must be cudnn or flash, got 'fa3'" in r.stderr
    assert not (tmp_path / "out").exists()


def test_a_case_is_required(tmp_path):
    r = run(str(tmp_path / "out"), str(tmp_path), "cudnn")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "at least one case expected" in r.stderr


def test_missing_tree_is_refused(tmp_path):
    r = run(str(tmp_path / "out"), str(tmp_path / "no-such-tree"), "cudnn", "--d 64")
    assert r.returncode == 2, (r.returncode, r.stderr)  # not 1, as for "ncu not found" further on
    assert "no-such-tree" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()
