"""scripts/ab_bits.py (gpu-ab --bits: trees' forward outputs compared bit for bit), run with a fake
runner in place of the child processes (no GPU, no torch): the table's verdicts for equal,
differing, missing and resized outputs, the exit status, and the shape parser's errors."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import ab_bits  # noqa: E402


class FakeRunner:
    """Stands in for subprocess.run: writes per shape the bytes the tree's entry says."""

    def __init__(self, per_tree):
        self.per_tree = per_tree  # tree -> function (k) -> (o bytes, lse bytes) or None (fails)

    def __call__(self, cmd, env, capture_output, text):
        out_dir, shapes = cmd[3], cmd[4:]
        tree = os.path.dirname(os.path.dirname(env["PYTHONPATH"]))
        make = self.per_tree[tree]

        class R:
            returncode, stderr = 0, ""

        for k in range(len(shapes)):
            got = make(k)
            if got is None:
                R.returncode, R.stderr = 1, "RuntimeError: no device"
                break
            with open(os.path.join(out_dir, f"{k}.o"), "wb") as f:
                f.write(got[0])
            with open(os.path.join(out_dir, f"{k}.lse"), "wb") as f:
                f.write(got[1])
        return R


def table(capsys, per_tree, shapes):
    status = ab_bits.run(list(per_tree), shapes, runner=FakeRunner(per_tree))
    return status, capsys.readouterr().out.strip().splitlines()


def test_equal_trees_read_same_and_exit_zero(capsys):
    same = lambda k: (bytes([k, 1, 2, 3]), bytes([9, 9]))
    status, lines = table(capsys, {"/t/a": same, "/t/b": same, "/t/c": same}, ["64,1024,1", "128,r,1"])
    assert status == 0
    assert lines[0] == "| shape | B vs A | C vs A |"
    assert lines[2] == "| 64,1024,1 | same | same |"
    assert lines[3] == "| 128,r,1 | same | same |"


def test_a_flipped_byte_a_resized_output_and_a_failed_tree_are_reported(capsys):
    base = lambda k: (bytes(8), bytes(4))
    flipped = lambda k: (bytes(7) + b"\x01", bytes(4)) if k == 1 else base(k)
    resized = lambda k: (bytes(8), bytes(6))
    status, lines = table(capsys, {"/t/a": base, "/t/b": flipped, "/t/c": resized, "/t/d": lambda k: None},
                          ["64,1024,1", "128,1024,0"])
    assert status == 1
    assert lines[2] == "| 64,1024,1 | same | lse: sizes 4 / 6 | error |"
    assert lines[3] == "| 128,1024,0 | o: 1 of 8 bytes differ | lse: sizes 4 / 6 | error |"


@pytest.mark.parametrize("text, message", [
    ("64,1024", "expected D,SEQ,CAUSAL"),
    ("64,1024,1,30,2", "expected D,SEQ,CAUSAL"),
    ("64,1024,1,0", "a soft cap above 0"),
    ("64,1024,1,-3", "a soft cap above 0"),
    ("64,1024,1,cap", "a soft cap above 0"),
    ("64,1024,1,inf", "a soft cap above 0"),
    ("96,1024,1", "head_dim 64, 128 or 256"),
    ("64,0,1", "sequence length of 1 to 16384 or 'r'"),
    ("64,x,1", "sequence length of 1 to 16384 or 'r'"),
    ("64,1024,2", "causal 0 or 1"),
])
def test_bad_shapes_are_named(text, message):
    with pytest.raises(ValueError, match=message):
        ab_bits.parse_shape(text)


def test_a_shape_may_carry_a_soft_cap():
    assert ab_bits.parse_shape("128,1024,0,30") == (128, 1024, False, 30.0)
    assert ab_bits.parse_shape("64,r,1") == (64, "r", True, 0.0)


def test_command_line_needs_two_trees(capsys):
    with pytest.raises(SystemExit):
        ab_bits.main(["/t/a"])
    assert "trees: 2 to 8 expected, got 1" in capsys.readouterr().err


def test_trees_before_shapes_as_gpu_ab_passes_them(monkeypatch):
    calls = []
    monkeypatch.setattr(ab_bits, "run", lambda trees, shapes: calls.append((trees, shapes)) or 0)
    assert ab_bits.main(["/t/a", "/t/b", "--shapes", "64,1024,1", "128,r,1"]) == 0
    assert calls == [(["/t/a", "/t/b"], ["64,1024,1", "128,r,1"])]
