"""scripts/ncu_tile_split.py on synthetic ncu source pages: the split of an instruction stream into
code run once per query tile and once per K/V tile, by execution counts, and its errors."""
import gzip
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "ncu_tile_split.py")

HEADER = ['"Address"', '"Source"', '"Warp Stall Sampling (All Samples)"', '"Instructions Executed"',
          '"stall_long_sb"', '"stall_wait"', '"stall_long_sb (Not Issued)"']


def page(rows, branch_target):
    """An ncu source page: log lines, the kernel-name line, the table. rows: (sass, samples, executed,
    long_sb, wait)."""
    lines = ["==PROF== Connected to process 1", '"Kernel Name","void k(int)",', ",".join(HEADER)]
    for i, (sass, samples, executed, long_sb, wait) in enumerate(rows):
        sass = sass.replace("TARGET", branch_target)
        lines.append(",".join(f'"{v}"' for v in (hex(0x1000 + 16 * i), sass, samples, executed, long_sb, wait, 0)))
    return "\n".join(lines) + "\n"


# 2 query tiles x 8 warps = 16 executions of the per-tile code in both profiles; the loop's
# instructions run 100 x 4 and 100 x 16 times as often (ratio 4).
def rows(kv_tiles, loop_samples):
    return [
        ("LDC R1, c[0x0][0x28]", 5, 16, 0, 5),                       # per tile
        ("@!P0 BRA TARGET", 40, 16, 40, 0),                          # per tile: the Q wait
        # (as ncu writes counts of 1000 and more: with thousands separators)
        ("HGMMA.64x128x16.F32.BF16 R24, gdesc[UR16], R24", loop_samples, f"{1600 * kv_tiles:,}", 0, loop_samples),
        ("MUFU.EX2 R2, R2", loop_samples // 2, f"{1600 * kv_tiles:,}", 0, loop_samples // 2),
        ("EXIT", 1, 16, 0, 1),                                       # per tile (per CTA here)
        ("BRA 0x2000", 0, 0, 0, 0),                                  # never executed
    ]


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=60)


def test_split_by_execution_counts(tmp_path):
    short = tmp_path / "short.csv"
    long_ = tmp_path / "long.csv.gz"
    short.write_text(page(rows(4, 100), "0x7f0000001000"))
    with gzip.open(long_, "wt") as f:  # gzip accepted; branch targets at other addresses
        f.write(page(rows(16, 400), "0x7f00aaaa1000"))
    r = run(str(short), str(long_), "--top", "2")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "long / short: 4.00" in out
    # per query tile: 5 + 40 + 1 = 46 samples in both; per K/V tile 150 and 600
    assert "| per query tile | 3 | 46 | 23.5% | 46 | 7.1% |" in out, out
    assert "| per K/V tile | 2 | 150 | 76.5% | 600 | 92.9% |" in out, out
    top = [l for l in out.splitlines() if l.startswith("  ")]
    assert len(top) == 2 and "BRA" in top[0] and "long_sb 40" in top[0] and "LDC" in top[1], out


def test_different_kernels_are_refused(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text(page(rows(4, 100), "0x7f0000001000"))
    other = rows(16, 400)
    other[0] = ("LDC R2, c[0x0][0x28]", 5, 16, 0, 5)
    b.write_text(page(other, "0x7f0000001000"))
    r = run(str(a), str(b))
    assert r.returncode != 0 and "not of the same kernel" in r.stderr


def test_lengths_too_close_and_missing_table(tmp_path):
    a, b, c = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "c.csv"
    a.write_text(page(rows(4, 100), "0x7f0000001000"))
    b.write_text(page(rows(5, 120), "0x7f0000001000"))
    r = run(str(a), str(b))
    assert r.returncode != 0 and "further apart" in r.stderr
    c.write_text("==PROF== nothing profiled\n")
    r = run(str(a), str(c))
    assert r.returncode != 0 and "no source-page table" in r.stderr


def test_the_ratio_comes_from_the_gemms_not_a_spin_loop(tmp_path):
    # A barrier's retry loop executed more often than the loop's GEMMs, with a ratio of its own
    # (2.0 here, where the GEMMs' is 4): the ratio must still be 4, and the spin loop "other".
    def with_spin(kv_tiles, loop_samples, spins):
        return rows(kv_tiles, loop_samples) + [("@!P0 BRA TARGET", 3, f"{spins:,}", 3, 0)]
    short = tmp_path / "short.csv"
    long_ = tmp_path / "long.csv"
    short.write_text(page(with_spin(4, 100, 50000), "0x7f0000001000"))
    long_.write_text(page(with_spin(16, 400, 100000), "0x7f00aaaa1000"))
    r = run(str(short), str(long_))
    assert r.returncode == 0, r.stderr
    assert "long / short: 4.00" in r.stdout, r.stdout
    assert "| other | 2 |" in r.stdout, r.stdout  # the never-executed branch and the spin loop


def test_loop_by_opcode(tmp_path):
    # The loop's instructions per warp-tile and samples per 1000 warp-tiles, the unit being the
    # HGMMA's count (6400 in the short profile): HGMMA 100 samples -> 15.6, MUFU 50 -> 7.8.
    short = tmp_path / "short.csv"
    long_ = tmp_path / "long.csv"
    short.write_text(page(rows(4, 100), "0x7f0000001000"))
    long_.write_text(page(rows(16, 400), "0x7f0000001000"))
    r = run(str(short), str(long_), "--ops")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "6400 warp-tiles" in out, out
    assert "| HGMMA | 1.0 | 16 | 66.7% | wait 16 |" in out, out
    assert "| MUFU | 1.0 | 8 | 33.3% | wait 8 |" in out, out
    assert "| all | 2.0 | 23 | | |" in out, out
    # without --ops, no such table
    assert "by opcode" not in run(str(short), str(long_)).stdout
