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
    for bad in ("0/2", "3/2", "a/b", "1", "1/0", "-1/2", "1/2/3", "01/2", "1/99999999999999999999", "1/1000"):
        r, out = run(tmp_path, "--part", bad)
        assert r.returncode == 2, bad
        assert f"--part: K/N expected (whole numbers, 1 <= K <= N <= 999), got '{bad}'" in r.stderr, (bad, r.stderr)
        assert "integer expression" not in r.stderr, (bad, r.stderr)
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



# The GPU test binaries gpu-check's sanitizer passes name, plus one they reach only by the glob.
STUB_TESTS = ("gpu_test_backward_cuda", "gpu_test_batch_attention_cuda", "gpu_test_batch_graph_cuda",
              "gpu_test_forward_cuda", "gpu_test_forward_fp8_cuda", "gpu_test_forward_launches_cuda",
              "gpu_test_primitives_sm90", "gpu_test_wgmma_sm90", "gpu_test_softmax_fragment")


def stubbed_run(tmp_path, name, *args):
    """gpu-check with stub cmake, ninja, nvidia-smi and compute-sanitizer on PATH and stub test
    binaries in TESSERA_GPU_BUILD: returns (summary, the sanitizer's invocations in order)."""
    stub = tmp_path / "stub"
    build = tmp_path / "build"
    if not stub.exists():
        stub.mkdir()
        for tool in ("cmake", "ninja", "nvidia-smi"):
            (stub / tool).write_text("#!/bin/sh\nexit 0\n")
        (stub / "compute-sanitizer").write_text(
            '#!/bin/sh\necho "INVOKED $*"\necho "[  PASSED  ] 1 test."\n'
            'echo "========= RACECHECK SUMMARY: 0 hazards displayed"\nexit 0\n')
        (build / "tests").mkdir(parents=True)
        (build / "bin").mkdir()
        for t in STUB_TESTS:
            (build / "tests" / t).write_text("#!/bin/sh\nexit 0\n")
        for f in list(stub.iterdir()) + list((build / "tests").iterdir()):
            f.chmod(0o755)
    out = tmp_path / name
    env = dict(os.environ, PATH=f"{stub}:{os.environ['PATH']}", TESSERA_GPU_BUILD=str(build))
    r = subprocess.run(["bash", SCRIPT, str(out), "--no-tests", "--no-bench", *args], capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    runs = [l for l in (out / "sanitizer.log").read_text().splitlines() if l.startswith("INVOKED ")]
    return (out / "summary.txt").read_text(), runs


def test_parts_run_every_sanitizer_run_once(tmp_path):
    # Against the script's own call sites: the parts' runs are disjoint, in order, and together
    # the whole pass's.
    _, whole = stubbed_run(tmp_path, "all")
    assert len(whole) > 10 and len(set(whole)) == len(whole)
    for parts in (2, 3):
        shares = [stubbed_run(tmp_path, f"p{k}of{parts}", "--part", f"{k}/{parts}")[1] for k in range(1, parts + 1)]
        # Each share in the whole pass's order; no run in two shares; none left out. (A unit may
        # hold more than one invocation: the bar.arrive probe's two tests count as one run.)
        for k, share in enumerate(shares):
            positions = [whole.index(x) for x in share]
            assert positions == sorted(positions) and share, (k + 1, parts)
        assert sorted(sum(shares, [])) == sorted(whole), parts
        # Interleaved, not in blocks: the first share starts with the whole pass's first run,
        # the second with its second unit.
        assert shares[0][0] == whole[0] and shares[1][0] == whole[1], parts
    summary, first = stubbed_run(tmp_path, "p1of2again", "--part", "1/2", "--sanitizer", "memcheck")
    n_memcheck = len(stubbed_run(tmp_path, "memcheck", "--sanitizer", "memcheck")[1])
    assert f"1/2: ran {len(first)} of the {n_memcheck} sanitizer runs" in summary, summary
