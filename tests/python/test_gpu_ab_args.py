"""scripts/gpu-ab refuses a malformed --test before it builds anything: the words before the
target must be NAME=value settings, then at most one sanitizer word (memcheck or racecheck)."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(tmp_path, test):
    tree = tmp_path / "tree"
    tree.mkdir(exist_ok=True)
    return subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu-ab"), str(tmp_path / "out"), str(tree),
                           "--test", test, "--case", "--d 64"], capture_output=True, text=True, timeout=60)


def test_a_misspelt_sanitizer_word_is_a_usage_error(tmp_path):
    r = run(tmp_path, "@B memchek gpu_test_backward_cuda")
    assert r.returncode == 2
    assert "got 'memchek'" in r.stderr
    assert not (tmp_path / "tree" / "build-ab").exists()  # nothing built


def test_a_setting_after_the_sanitizer_word_is_a_usage_error(tmp_path):
    r = run(tmp_path, "racecheck A=1 gpu_test_forward_cuda")
    assert r.returncode == 2
    assert "got 'racecheck'" in r.stderr
