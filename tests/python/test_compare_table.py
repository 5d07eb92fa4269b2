"""bench/compare.py: the ceilings line takes both CSVs' ceiling rows, and a GB/s row shows its
fraction of tessera's read-only ceiling (the peers' read_sum where tessera's CSV has none)."""
import csv
import io
import os
import sys
from contextlib import redirect_stdout

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import compare  # noqa: E402

FIELDS = ["suite", "backend", "dtype", "head_dim", "seq", "batch", "heads", "causal", "ms", "tflops", "gbps"]


def write(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, 0) for k in FIELDS})


def row(suite, backend, gbps=0, tflops=0, seq=32768, batch=8, ms=1.0):
    return dict(suite=suite, backend=backend, dtype="bf16", head_dim=128, seq=seq, batch=batch, heads=32, causal=0,
                ms=ms, tflops=tflops, gbps=gbps)


def table(tmp_path, ours, peers):
    write(tmp_path / "t.csv", ours)
    write(tmp_path / "p.csv", peers)
    out = io.StringIO()
    with redirect_stdout(out):
        compare.main(str(tmp_path / "t.csv"), str(tmp_path / "p.csv"))
    return out.getvalue()


def test_decode_row_shows_its_fraction_of_tesseras_read_ceiling(tmp_path):
    ours = [row("ceiling", "tessera_cuda_read_sum", gbps=4400), row("decode", "tessera_cuda", gbps=4180)]
    peers = [row("ceiling", "read_sum", gbps=4200), row("decode", "torch_cudnn", gbps=4000)]
    text = table(tmp_path, ours, peers)
    assert "tessera_cuda_read_sum 4400 GB/s" in text and "read_sum 4200 GB/s" in text
    assert "| 4180.0 (95 % of read) | - | 1.04x (4000) |" in text
    assert "| ceiling |" not in text  # ceilings stay out of the table


def test_peers_read_sum_when_tessera_has_none(tmp_path):
    text = table(tmp_path, [row("decode", "tessera_cuda", gbps=4000)], [row("ceiling", "read_sum", gbps=4000)])
    assert "| 4000.0 (100 % of read) |" in text


def test_flop_rows_unchanged(tmp_path):
    ours = [row("ceiling", "tessera_cuda_read_sum", gbps=4400), row("forward", "tessera_cuda", tflops=600.0)]
    peers = [row("forward", "torch_cudnn", tflops=500.0)]
    text = table(tmp_path, ours, peers)
    assert "| 600.0 | - | 1.20x (500) |" in text
