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
        if os.environ.get("FAKE_LOG"):  # the lines as served
            open(os.environ["FAKE_LOG"], "a").write(line)
        words = shlex.split(line)
        env = dict(w.split("=", 1) for w in words if "=" in w)
        args = [w for w in words if "=" not in w]
        if "--hang" in args and SCALE != 1.0:
            time.sleep(30)
        if "--fail" in args:
            print("error: RuntimeError: no", flush=True)
            continue
        base = float(args[args.index("--ms") + 1]) + float(env.get("EXTRA", "0"))
        if "--drift" in args:  # 10 % slower at each call of any tree (a machine warming up)
            path = args[args.index("--drift") + 1]
            calls = int(open(path).read()) if os.path.exists(path) else 0
            open(path, "w").write(str(calls + 1))
            base *= 1 + 0.1 * calls
        if "--spike" in args and SCALE != 1.0:  # one call of this process (by its index) twice as slow
            SPIKE = globals().get("SPIKE", 0)
            base *= 2.0 if SPIKE == int(args[args.index("--spike") + 1]) else 1.0
            globals()["SPIKE"] = SPIKE + 1
        if "--vary" in args:  # 10 % slower at each call of this process
            VARY = globals().get("VARY", 0)
            base *= 1 + 0.1 * VARY
            globals()["VARY"] = VARY + 1
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
    assert rows[0] == "| case | A ms | B ms | B / A | A spread | B / A by round | B / A by medians |"
    assert rows[1] == "|---|---|---|---|---|---|---|"
    assert rows[2] == "| --ms 2 | 2.000 / 2.000 | 1.000 / 1.000 | 0.500 | 0.000 | 0.500-0.500 | 0.500 |"
    # the setting reached the case
    assert rows[3] == "| EXTRA=2 --ms 2 | 4.000 / 4.000 | 2.000 / 2.000 | 0.500 | 0.000 | 0.500-0.500 | 0.500 |"
    assert rows[4] == "| --fail --ms 1 | ? / ? | ? / ? | n/a | n/a | n/a | n/a |"
    assert rows[5] == "| --hang --ms 1 | 1.000 / 1.000 | ? / ? | n/a | 0.000 | n/a | n/a |"  # B's process hung: killed
    assert rows[6] == "| --ms 4 | 4.000 / 4.000 | 2.000 / 2.000 | 0.500 | 0.000 | 0.500-0.500 | 0.500 |"  # and restarted


def test_rounds(tmp_path):
    a, b = make_tree(tmp_path, "a", 1.0), make_tree(tmp_path, "b", 0.25)
    harness = os.path.join(tmp_path, "fake_profile_case.py")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "ab_cases.py"), "--rounds", "3", "--timeout", "5",
                        "--harness", harness, a, b, "--", "--vary --ms 2", "--ms 2", "--fail --ms 1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = r.stdout.strip().splitlines()
    # A spread: (2.4 - 2.0) / 2.2; within each round B / A is 0.25 however the machine drifts
    assert rows[2] == ("| --vary --ms 2 | 2.000 / 2.200 / 2.400 | 0.500 / 0.550 / 0.600 | 0.250 | 0.182 | 0.250-0.250 "
                       "| 0.250 |")
    assert rows[3] == "| --ms 2 | 2.000 / 2.000 / 2.000 | 0.500 / 0.500 / 0.500 | 0.250 | 0.000 | 0.250-0.250 | 0.250 |"
    assert rows[4] == "| --fail --ms 1 | ? / ? / ? | ? / ? / ? | n/a | n/a | n/a | n/a |"
    for bad in ("0", "21"):
        r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "ab_cases.py"), "--rounds", bad, a, b, "--",
                            "--ms 1"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and f"--rounds: 1 to 20 expected, got {bad}" in r.stderr, r.stderr


def test_rounds_rotate_the_tree_order(tmp_path):
    # Equal trees on a machine that slows at every call: in order A B, B A the drift cancels
    # (A: calls 0 and 3, B: 1 and 2); always A first would read B / A = 1.1.
    a, b = make_tree(tmp_path, "a", 1.0), make_tree(tmp_path, "b", 1.0)
    harness = os.path.join(tmp_path, "fake_profile_case.py")
    drift = str(tmp_path / "calls")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "ab_cases.py"), "--rounds", "2", "--timeout", "5",
                        "--harness", harness, a, b, "--", f"--drift {drift} --ms 1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = r.stdout.strip().splitlines()
    # Within a round the later tree reads 10 % slower: the per-round ratios straddle 1.
    assert rows[2] == f"| --drift {drift} --ms 1 | 1.000 / 1.300 | 1.100 / 1.200 | 1.000 | 0.261 | 0.923-1.100 | 1.000 |", rows[2]


def test_one_slow_round_moves_the_mean_not_the_median(tmp_path):
    # B is half of A's time but its second round is twice as slow (a clock drop in one round):
    # by means B / A reads 0.667, by medians 0.500.
    a, b = make_tree(tmp_path, "a", 1.0), make_tree(tmp_path, "b", 0.5)
    harness = os.path.join(tmp_path, "fake_profile_case.py")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "ab_cases.py"), "--rounds", "3", "--timeout", "5",
                        "--harness", harness, a, b, "--", "--spike 1 --ms 2"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = r.stdout.strip().splitlines()
    assert rows[2] == "| --spike 1 --ms 2 | 2.000 / 2.000 / 2.000 | 1.000 / 2.000 / 1.000 | 0.667 | 0.000 | 0.500-1.000 | 0.500 |", rows[2]


def test_gpu_ab_rejects_bad_rounds(tmp_path):
    a, b = make_tree(tmp_path, "a", 1.0), make_tree(tmp_path, "b", 1.0)
    for bad in ("0", "x", "21"):
        r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu-ab"), str(tmp_path / "out"), a, b, "--rounds", bad,
                            "--case", "--ms 1"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and f"--rounds: 1 to 20 expected, got '{bad}'" in r.stderr, r.stderr


def test_one_tree_times_its_cases(tmp_path):
    # One build, knobs compared as cases (scripts/gpu-ab OUTDIR TREE --case "NAME=value ARGS"):
    # each case's times and A's spread, no ratio columns.
    a = make_tree(tmp_path, "a", 1.0)
    r = run([a], ["--ms 1", "--ms 2"])
    assert r.returncode == 0, r.stderr
    rows = r.stdout.strip().splitlines()
    assert rows[0] == "| case | A ms | A spread |", rows[0]
    assert rows[1] == "|---|---|---|", rows[1]
    assert rows[2] == "| --ms 1 | 1.000 / 1.000 | 0.000 |", rows
    assert rows[3] == "| --ms 2 | 2.000 / 2.000 | 0.000 |", rows


def test_bad_arguments(tmp_path):
    a = make_tree(tmp_path, "a", 1.0)
    r = run([a] * 9, ["--ms 1"])
    assert r.returncode == 2 and "trees: 1 to 8 expected, got 9" in r.stderr
    r = run([a, a], [])
    assert r.returncode == 2 and "cases: at least one expected" in r.stderr
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "ab_cases.py"), a, a], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "expected the trees, then --" in r.stderr


TORCH_STUB = textwrap.dedent('''
    """A stand-in for torch with just what bench/profile_case.py's dense cases touch: events that
    report TESSERA_STUB_MS times this tree's scale, and a log of which tree served each case."""
    import os
    import types

    _TREE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    _SCALE = float(open(os.path.join(_TREE, "scale")).read())
    bfloat16, float16, float8_e4m3fn, int32 = "bf16", "f16", "e4m3", "i32"
    _calls = [0]  # attention calls so far (the tessera stub counts them): an event's time stamp


    class Generator:
        def __init__(self, device=None):
            with open(os.environ["STUB_LOG"], "a") as f:  # once per case
                f.write(os.path.basename(_TREE) + "\\n")

        def manual_seed(self, seed):
            return self


    class _T:
        def to(self, *args, **kwargs):
            return self


    def randn(*args, **kwargs):
        return _T()


    def randn_like(x):
        return _T()


    class _Event:
        def __init__(self, enable_timing=False):
            pass

        def record(self):
            self.at = _calls[0]

        def synchronize(self):
            pass

        def elapsed_time(self, other):  # TESSERA_STUB_MS per call in between, times the tree's scale
            return (other.at - self.at) * float(os.environ.get("TESSERA_STUB_MS", "1")) * _SCALE


    cuda = types.SimpleNamespace(Event=_Event)
''')

TESSERA_STUB = textwrap.dedent('''
    import os

    import torch


    def attention(q, k, v, causal=False, window=(-1, -1), return_lse=False):
        torch._calls[0] += 1
        if os.environ.get("STUB_FAIL") == "1":
            raise RuntimeError("stub failure\\nover two lines")
        if window != (-1, -1) and window[1] != 0:  # profile_case passes (LEFT, 0) or none
            raise ValueError(f"window: expected (LEFT, 0), got {window}")
        return (q, q) if return_lse else q


    def attention_fp8(q, k, v, causal=False):
        torch._calls[0] += 1
        return q
''')


def make_stub_tree(tmp_path, name, scale):
    tree = tmp_path / name
    for pkg, text in (("torch", TORCH_STUB), ("tessera", TESSERA_STUB)):
        (tree / "build-ab" / "python" / pkg).mkdir(parents=True)
        (tree / "build-ab" / "python" / pkg / "__init__.py").write_text(text)
    (tree / "scale").write_text(str(scale))
    return str(tree)


def test_real_harness_with_stub_modules(tmp_path):
    """bench/profile_case.py --serve itself (stub torch and tessera in each tree's build-ab/python):
    per-case settings and their undoing, failures, bad lines and argparse errors as one "?" each,
    recovery after them, and the order A, B per case and round."""
    a, b = make_stub_tree(tmp_path, "A", 1.0), make_stub_tree(tmp_path, "B", 0.5)
    log = tmp_path / "calls.log"
    env = dict(os.environ, STUB_LOG=str(log))
    cases = ["--d 128", "TESSERA_STUB_MS=4 --d 64", "--d 128", "STUB_FAIL=1 --d 128", "--d 128 --causal \"x",
             "--dtype fp9", "--d 256", "--d 64 --seq 1024 --window 128", "--window 128 --causal"]
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "ab_cases.py"), "--timeout", "60", a, b, "--",
                        *cases], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    rows = r.stdout.strip().splitlines()[2:]
    assert rows[0] == "| --d 128 | 1.000 / 1.000 | 0.500 / 0.500 | 0.500 | 0.000 | 0.500-0.500 | 0.500 |"
    assert rows[1] == "| TESSERA_STUB_MS=4 --d 64 | 4.000 / 4.000 | 2.000 / 2.000 | 0.500 | 0.000 | 0.500-0.500 | 0.500 |"
    assert rows[2] == "| --d 128 | 1.000 / 1.000 | 0.500 / 0.500 | 0.500 | 0.000 | 0.500-0.500 | 0.500 |"  # the setting was undone
    assert rows[3] == "| STUB_FAIL=1 --d 128 | ? / ? | ? / ? | n/a | n/a | n/a | n/a |"
    assert rows[4].endswith("| ? / ? | ? / ? | n/a | n/a | n/a | n/a |")  # unbalanced quote
    assert rows[5] == "| --dtype fp9 | ? / ? | ? / ? | n/a | n/a | n/a | n/a |"
    assert rows[6] == "| --d 256 | 1.000 / 1.000 | 0.500 / 0.500 | 0.500 | 0.000 | 0.500-0.500 | 0.500 |"
    assert rows[7] == "| --d 64 --seq 1024 --window 128 | 1.000 / 1.000 | 0.500 / 0.500 | 0.500 | 0.000 | 0.500-0.500 | 0.500 |"
    assert rows[8] == "| --window 128 --causal | ? / ? | ? / ? | n/a | n/a | n/a | n/a |"  # refused: the window is causal
    # Cases that reached torch: every tree in turn, round 2 starting at B.
    served = log.read_text().split()
    assert served == ["A", "B", "B", "A"] * 5 + ["A", "B", "B", "A"], served


def test_timing_reaches_the_cases(tmp_path):
    """ab_cases.py adds --timing (queued by default) to every case that does not set its own."""
    a = make_tree(tmp_path, "a", 1.0)
    harness = os.path.join(tmp_path, "fake_profile_case.py")
    for n, (timing, case, served) in enumerate(((None, "--ms 1", "--ms 1 --timing queued"),
                                 ("single", "--ms 1", "--ms 1 --timing single"),
                                 ("none", "--ms 1", "--ms 1"),
                                 (None, "--ms 1 --timing single", "--ms 1 --timing single"))):
        log = tmp_path / f"served-{n}.log"
        extra = [] if timing is None else ["--timing", timing]
        r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "ab_cases.py"), "--rounds", "1", "--timeout",
                            "5", *extra, "--harness", harness, a, "--", case], capture_output=True, text=True,
                           timeout=60, env=dict(os.environ, FAKE_LOG=str(log)))
        assert r.returncode == 0, r.stderr
        assert log.read_text().splitlines() == [served], (timing, log.read_text())
        assert r.stdout.strip().splitlines()[2].startswith(f"| {case} | 1.000 |")  # the table shows the case as given
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "ab_cases.py"), "--timing", "eager", a, "--",
                        "--ms 1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--timing" in r.stderr and "eager" in r.stderr, r.stderr
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu-ab"), str(tmp_path / "out"), a, "--timing", "eager",
                        "--case", "--ms 1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--timing: queued or single expected, got 'eager'" in r.stderr, r.stderr


def profile_case(tree, *args, ms="0.5"):
    env = dict(os.environ, PYTHONPATH=os.path.join(tree, "build-ab", "python"), STUB_LOG=os.devnull,
               TESSERA_STUB_MS=ms)
    return subprocess.run([sys.executable, os.path.join(ROOT, "bench", "profile_case.py"), *args], capture_output=True,
                          text=True, timeout=60, env=env)


def test_queued_samples(tmp_path):
    """profile_case.py --timing queued: N calls per sample, N from one call's time and --sample-ms,
    the time per call reported; single: one call per sample."""
    a = make_stub_tree(tmp_path, "A", 1.0)
    r = profile_case(a, "--d", "128", "--timing", "queued")
    assert r.returncode == 0, r.stderr
    assert "median 0.500 ms of 10 samples of 40 queued calls" in r.stdout, r.stdout  # 20 ms / 0.5 ms
    r = profile_case(a, "--d", "128", "--timing", "queued", "--sample-ms", "3", "--iters", "3", ms="2")
    assert "median 2.000 ms of 3 samples of 2 queued calls" in r.stdout, r.stdout  # ceil(3 / 2)
    r = profile_case(a, "--d", "128", "--timing", "queued", "--sample-ms", "1", ms="5")
    assert "median 5.000 ms of 10 samples of 1 queued calls" in r.stdout, r.stdout  # at least one call
    r = profile_case(a, "--d", "128")
    assert "median 0.500 ms of 10 (" in r.stdout, r.stdout  # single, the default
    for bad, what in ((["--sample-ms", "0"], "--sample-ms: a sample's length in ms, above 0 and at most 1000, expected, got 0.0"),
                      (["--iters", "0"], "--iters: 1 to 10000 samples expected, got 0")):
        r = profile_case(a, "--d", "128", "--timing", "queued", *bad)
        assert r.returncode == 2 and what in r.stderr, r.stderr
