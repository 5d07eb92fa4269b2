#!/usr/bin/env python3
"""Bit-for-bit comparison of trees' forward outputs for scripts/gpu-ab (--bits): a change that
keeps the arithmetic (a schedule, a layout, coordinates computed elsewhere) must give the same
bits as tree A. Each tree's Python module (TREE/build-ab/python) runs the shapes in a child
process of its own on the same inputs (seeded), writing O and LSE as raw bytes; the parent then
compares every tree's bytes with tree A's and prints one Markdown table.

  scripts/ab_bits.py [--shapes D,SEQ,CAUSAL[,CAP] ...] TREE_A TREE_B [TREE...]

A shape is head_dim, sequence length (16k tokens per call, as bench/profile_case.py) and 0 / 1
for causal, optionally a soft cap (a positive number); "r" as the sequence length is a ragged
causal call of 64 sequences over 16384 tokens. A tree whose child fails reads "error" in its
cells (its message on stderr)."""
import argparse
import os
import subprocess
import sys
import tempfile

LABELS = "ABCDEFGH"
DEFAULT_SHAPES = ["64,1024,1", "128,1024,1", "256,1024,1", "64,2048,1", "128,4096,1", "64,1024,0",
                  "128,16384,1", "64,r,1", "128,r,1"]


def parse_shape(text):
    """'D,SEQ,CAUSAL[,CAP]' -> (d, seq or 'r', causal, cap: 0.0 without); a ValueError names what
    is wrong."""
    parts = text.split(",")
    if len(parts) not in (3, 4):
        raise ValueError(f"shape '{text}': expected D,SEQ,CAUSAL or D,SEQ,CAUSAL,CAP "
                         "(e.g. 128,1024,1 or 128,1024,0,30)")
    d, seq, causal = parts[:3]
    cap = 0.0
    if len(parts) == 4:
        try:
            cap = float(parts[3])
        except ValueError:
            cap = -1.0
        if not 0.0 < cap < float("inf"):
            raise ValueError(f"shape '{text}': a soft cap above 0 expected, got '{parts[3]}'")
    if d not in ("64", "128", "256"):
        raise ValueError(f"shape '{text}': head_dim 64, 128 or 256 expected, got '{d}'")
    if seq != "r" and (not seq.isdigit() or not 1 <= int(seq) <= 16384):
        raise ValueError(f"shape '{text}': a sequence length of 1 to 16384 or 'r' expected, got '{seq}'")
    if causal not in ("0", "1"):
        raise ValueError(f"shape '{text}': causal 0 or 1 expected, got '{causal}'")
    return int(d), seq if seq == "r" else int(seq), causal == "1", cap


# Run in a child per tree (its module on PYTHONPATH): writes, per shape, O and LSE as raw bytes.
CHILD = r"""
import sys, torch, tessera
out_dir, shapes = sys.argv[1], sys.argv[2:]
for k, text in enumerate(shapes):
    d, seq, causal = text.split(",")[:3]
    d, causal = int(d), causal == "1"
    cap = float(text.split(",")[3]) if text.count(",") == 3 else 0.0
    heads = 2048 // d
    g = torch.Generator(device="cuda").manual_seed(1000 + k)
    if seq == "r":
        total = 16384
        cuts = torch.randperm(total - 1, generator=torch.Generator().manual_seed(k))[:63] + 1
        cu = torch.cat([torch.tensor([0]), cuts.sort().values, torch.tensor([total])]).to(torch.int32).cuda()
        q, kk, v = (torch.randn((total, heads, d), device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
        kw = {"softcap": cap} if cap > 0 else {}  # (a tree's API before the soft cap takes no such argument)
        o, lse = tessera.attention_ragged(q, kk, v, cu, cu, causal=causal, return_lse=True, **kw)
    else:
        seq = int(seq)
        shape = (max(1, 16384 // seq), seq, heads, d)
        q, kk, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
        kw = {"softcap": cap} if cap > 0 else {}
        o, lse = tessera.attention(q, kk, v, causal=causal, return_lse=True, **kw)
    torch.cuda.synchronize()
    with open(f"{out_dir}/{k}.o", "wb") as f:
        f.write(o.contiguous().view(torch.uint8).cpu().numpy().tobytes())
    with open(f"{out_dir}/{k}.lse", "wb") as f:
        f.write(lse.contiguous().view(torch.uint8).cpu().numpy().tobytes())
"""


def compare(a_dir, b_dir, k):
    """'same' when both files of shape k hold the same bytes, else what differs."""
    verdicts = []
    for part in ("o", "lse"):
        try:
            with open(os.path.join(a_dir, f"{k}.{part}"), "rb") as f:
                a = f.read()
            with open(os.path.join(b_dir, f"{k}.{part}"), "rb") as f:
                b = f.read()
        except OSError:
            return "error"
        if len(a) != len(b):
            verdicts.append(f"{part}: sizes {len(a)} / {len(b)}")
        elif a != b:
            diff = sum(x != y for x, y in zip(a, b))
            verdicts.append(f"{part}: {diff} of {len(a)} bytes differ")
    return "same" if not verdicts else "; ".join(verdicts)


def run(trees, shapes, runner=subprocess.run):
    """Prints the table; returns 0 when every tree matches A everywhere, 1 otherwise."""
    with tempfile.TemporaryDirectory() as tmp:
        dirs = []
        for i, tree in enumerate(trees):
            out = os.path.join(tmp, LABELS[i])
            os.makedirs(out)
            env = dict(os.environ, PYTHONPATH=os.path.join(tree, "build-ab", "python"))
            r = runner([sys.executable, "-c", CHILD, out] + shapes, env=env, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"ab_bits: tree {LABELS[i]} ({tree}) failed:\n{r.stderr[-2000:]}", file=sys.stderr)
            dirs.append(out)
        print("| shape | " + " | ".join(f"{LABELS[i]} vs A" for i in range(1, len(trees))) + " |")
        print("|---|" + "---|" * (len(trees) - 1))
        status = 0
        for k, text in enumerate(shapes):
            cells = [compare(dirs[0], dirs[i], k) for i in range(1, len(trees))]
            status |= any(c != "same" for c in cells)
            print(f"| {text} | " + " | ".join(cells) + " |")
        return status


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=DEFAULT_SHAPES, metavar="D,SEQ,CAUSAL[,CAP]")
    ap.add_argument("trees", nargs="+")
    a = ap.parse_args(argv)
    if len(a.trees) < 2 or len(a.trees) > len(LABELS):
        ap.error(f"trees: 2 to {len(LABELS)} expected, got {len(a.trees)}")
    try:
        for s in a.shapes:
            parse_shape(s)
    except ValueError as e:
        ap.error(str(e))
    return run(a.trees, a.shapes)


if __name__ == "__main__":
    sys.exit(main())
