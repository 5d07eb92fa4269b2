"""scripts/ab_cases.py (gpu-ab's timed cases through one warm process per tree), run with a fake
harness (--harness) that answers from its arguments and its tree (the working directory): the
table's cells, ratios,
environment settings per case, and a case that fails or hangs reading "?" without stopping the
others."""
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FAKE = textwrap.dedent('''
    import os, shlex, sys, time
    SCALE = float(open("scale").read())  # the tree is the working directory
    for line in sys.stdin:
        words = shlex.split(line)
        env = dict(w.split("=", 1) for w in words if "=" in w)
        args = [w for w in words if "=" not in w]
        if "--hang" in args and SCALE != 1.0:
            time.sleep(30)
        if "--fail" in args:
            print("error: RuntimeError: no", flush=True)
            continue
        base = float(args[args.index("--ms") + 1]) + float(env.get("EXTRA", "0"))
        print("noise line", flush=True)
        print(f"forward: median {base * SCALE:.3f} ms of 10", flush=True)
''')


def make_tree(tmp_path, name, scale):
    tree = tmp_path / name
    tree.mkdir()
    (tree / "scale").write_text(str(scale))
    (tmp_path / "fake_profile_case.py").write_text(FAKE)
    return str(tree)


def run(trees, cases, timeout=5):
    harness = os.path.join(os.path.dirname(trees[0]), "fake_profile_case.py")
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "ab_cases.py"), "--timeout", str(timeout),
                           "--harness", harness, *trees, "--", *cases], capture_output=True, text=True, timeout=120)


def test_table_rows(tmp_path):
    a, b = make_tree(tmp_path, "a", 1.0), make_tree(tmp_path, "b", 0.5)
    r = run([a, b], ["--ms 2", "EXTRA=2 --ms 2", "--fail --ms 1", "--hang --ms 1", "--ms 4"], timeout=3)
    assert r.returncode == 0, r.stderr
    rows = r.stdout.strip().splitlines()
    assert rows[0] == "| case | A ms | B ms | B / A |"
    assert rows[2] == "| --ms 2 | 2.000 / 2.000 | 1.000 / 1.000 | 0.500 |"
    assert rows[3] == "| EXTRA=2 --ms 2 | 4.000 / 4.000 | 2.000 / 2.000 | 0.500 |"  # the setting reached the case
    assert rows[4] == "| --fail --ms 1 | ? / ? | ? / ? | n/a |"
    assert rows[5] == "| --hang --ms 1 | 1.000 / 1.000 | ? / ? | n/a |"  # B's process hung: killed
    assert rows[6] == "| --ms 4 | 4.000 / 4.000 | 2.000 / 2.000 | 0.500 |"  # and restarted


def test_bad_arguments(tmp_path):
    a = make_tree(tmp_path, "a", 1.0)
    r = run([a], ["--ms 1"])
    assert r.returncode == 2 and "trees: 2 to 8 expected, got 1" in r.stderr
    r = run([a, a], [])
    assert r.returncode == 2 and "cases: at least one expected" in r.stderr
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "ab_cases.py"), a, a], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "expected the trees, then --" in r.stderr
