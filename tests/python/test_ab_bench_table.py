"""scripts/ab_bench_table.py (gpu-ab's bench table) on synthetic `tessera bench --csv` files: times
per round, ratios, A's spread, the mean rate in the row's unit, repeated shapes numbered, a tree
whose run failed, and bad arguments."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "ab_bench_table.py")
HEAD = "suite,backend,dtype,head_dim,seq,batch,heads,causal,ms,tflops,gbps\n"
CEILING = "ceiling,tessera_cuda_flops,fp32,0,0,1,1,0,0,676.0,0\n"


def write(out, label, rnd, lines):
    with open(os.path.join(out, "bench_%s_%s_0.csv" % (label, rnd)), "w") as f:
        f.write(HEAD + CEILING + "".join(lines))


def run(out, *args):
    return subprocess.run([sys.executable, SCRIPT, str(out), *args], capture_output=True, text=True, timeout=60)


def test_table(tmp_path):
    fp8 = "forward,tessera_cuda,fp8_e4m3,128,16384,1,16,0,%s,%s,0\n"
    dec = "decode,tessera_cuda,bf16,128,32768,8,32,0,%s,0,%s\n"
    write(tmp_path, "A", 1, [fp8 % (2.4, 916), fp8 % (1.2, 900), dec % (0.5, 4100)])
    write(tmp_path, "A", 2, [fp8 % (2.6, 846), fp8 % (1.2, 900), dec % (0.5, 4100)])
    write(tmp_path, "B", 1, [fp8 % (2.25, 977), fp8 % (1.1, 1000), dec % (0.55, 3700)])
    write(tmp_path, "B", 2, [fp8 % (2.25, 977), fp8 % (1.1, 1000)])  # B's second run lost its decode row
    r = run(tmp_path, "0", "cuda.x", "2", "A", "B")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0] == ("| bench cuda.x: suite backend dtype d seq batch heads causal | A ms | B ms | B / A "
                        "| B / A by medians | A spread | A rate | B rate |")
    assert lines[1] == "|---|---|---|---|---|---|---|---|"
    assert lines[2] == ("| forward tessera_cuda fp8_e4m3 128 16384 1 16 0 | 2.4 / 2.6 | 2.25 / 2.25 | 0.900 | 0.900 "
                        "| 0.080 | 881 TFLOP/s | 977 TFLOP/s |")
    assert lines[3] == ("| forward tessera_cuda fp8_e4m3 128 16384 1 16 0 #2 | 1.2 / 1.2 | 1.1 / 1.1 | 0.917 | 0.917 "
                        "| 0.000 | 900 TFLOP/s | 1000 TFLOP/s |")
    assert lines[4] == ("| decode tessera_cuda bf16 128 32768 8 32 0 | 0.5 / 0.5 | 0.55 / ? | n/a | n/a | 0.000 "
                        "| 4100 GB/s | 3700 GB/s |")


def test_one_slow_round_moves_the_mean_not_the_median(tmp_path):
    row = "mixed_vs_separate,tessera_mixed,bf16,128,4096,136,32,1,%s,300,0\n"
    for rnd, (a, b) in enumerate([(1.0, 0.9), (1.0, 1.8), (1.0, 0.9)], 1):  # B's second round twice as slow
        write(tmp_path, "A", rnd, [row % a])
        write(tmp_path, "B", rnd, [row % b])
    r = run(tmp_path, "0", "cuda.x", "3", "A", "B")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[2] == ("| mixed_vs_separate tessera_mixed bf16 128 4096 136 32 1 | 1 / 1 / 1 | 0.9 / 1.8 / 0.9 | 1.200 "
                        "| 0.900 | 0.000 | 300 TFLOP/s | 300 TFLOP/s |"), lines[2]


def test_bad_arguments(tmp_path):
    r = run(tmp_path, "0", "cuda.x")
    assert r.returncode == 2 and "usage:" in r.stderr
    r = run(tmp_path, "0", "cuda.x", "two", "A", "B")
    assert r.returncode == 2 and "ROUNDS: a whole number expected, got 'two'" in r.stderr
