"""bench/clock_under_load.py without a GPU: the steady-state window of a turn and the argument
checks (which run before torch is imported)."""
import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
sys.path.insert(0, BENCH)
import clock_under_load  # noqa: E402


def test_steady_keeps_the_samples_of_the_turns_last_half_only():
    samples = [(t, t * 10.0) for t in range(0, 11)]  # one per second over [0, 10]
    assert clock_under_load.steady(samples, 0.0, 10.0) == [50.0, 60.0, 70.0, 80.0, 90.0, 100.0]
    assert clock_under_load.steady(samples, 0.0, 10.0, fraction=0.2) == [80.0, 90.0, 100.0]
    # Samples of other turns (before start, after end) never count.
    assert clock_under_load.steady(samples, 2.0, 4.0) == [30.0, 40.0]


def test_median_of_no_samples_is_none_not_an_error():
    assert clock_under_load.median_or_none([]) is None
    assert clock_under_load.median_or_none([3.0, 1.0, 2.0]) == 2.0


@pytest.mark.parametrize("args, message", [
    (["--seconds", "0.1"], "--seconds: expected 0.5 to 30, got 0.1"),
    (["--cool", "-1"], "--cool: expected 0 to 30, got -1.0"),
    (["--queue", "0"], "--queue: expected a whole number >= 1, got 0"),
    (["--period", "5"], "--period: expected 20 to 1000 ms, got 5"),
    (["--shapes", "96,1024,0"], "expected d in 64/128/256"),
])
def test_bad_arguments_are_refused_naming_the_argument(args, message):
    run = subprocess.run([sys.executable, os.path.join(BENCH, "clock_under_load.py")] + args,
                         capture_output=True, text=True)
    assert run.returncode == 2
    assert message in run.stderr


def test_without_nvidia_smi_it_stops_with_a_message_before_torch():
    # The clock log needs nvidia-smi: refused up front (exit 2), naming what is missing.
    env = dict(os.environ, PATH=os.path.dirname(sys.executable))
    run = subprocess.run([sys.executable, os.path.join(BENCH, "clock_under_load.py")], capture_output=True, text=True,
                         env=env)
    if "nvidia-smi" in os.listdir(os.path.dirname(sys.executable)):
        pytest.skip("nvidia-smi sits beside the interpreter")
    assert run.returncode == 2
    assert "nvidia-smi: expected on PATH" in run.stderr
