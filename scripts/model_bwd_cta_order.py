#!/usr/bin/env python3
"""Makespan model of the sm80 backward main kernel's CTA dispatch (tenth session, "wave tail and
CTA order"). The block scheduler is modelled as handing CTAs out in linear order (blockIdx.x
fastest) to the first free SM, one CTA per SM (d128 V0: 255 registers, 256 threads). A CTA of KV
tile j costs F + t * (interior steps + c_diag * diagonal steps); the pre/post kernels add P.

  python3 scripts/model_bwd_cta_order.py            # the bench shapes: 16k tokens, 16 heads, d128
  python3 scripts/model_bwd_cta_order.py --fit      # fit t, F, P, c_diag to the tenth session's times

No GPU: a model, calibrated on bench/RESULTS.md (tenth session, call 4, portable path).
"""
import argparse
import heapq

SMS = 132
BR, BC = 64, 128
# tenth session call 4 (portable, quick bench): (seq, causal) -> ms
MEASURED = {(16384, 0): 18.246, (16384, 1): 9.247, (4096, 0): 4.939, (4096, 1): 2.886,
            (1024, 0): 1.560, (1024, 1): 1.152}


def cta_steps(seq, causal, j):
    """(interior, diagonal) query-tile steps of KV tile j (seq_q == seq_k, bottom-right causal)."""
    n_qt = seq // BR
    if not causal:
        return n_qt, 0
    first = (j * BC) // BR                 # first query tile that sees key j * BC
    diag = BC // BR                        # query tiles crossing the diagonal of this KV tile
    return n_qt - first - diag, diag


def ctas(seq, causal, order):
    """CTA list in dispatch order: (b, h, j). head_major: j fastest, then h, then b (main's grid
    (kv_tiles, heads, batch)); tile_major: h fastest, then b, then j (grid (heads, batch, kv_tiles))."""
    batch, heads, tiles = 16384 // seq, 16, seq // BC
    if order == "head_major":
        return [(b, h, j) for b in range(batch) for h in range(heads) for j in range(tiles)]
    # grouped tile-major (order = group size G, int): groups of G consecutive (b, h) pairs in
    # turn, KV tile slowest within a group; G >= batch * heads is plain tile-major.
    bh = [(b, h) for b in range(batch) for h in range(heads)]
    G = order
    out = []
    for g0 in range(0, len(bh), G):
        grp = bh[g0:g0 + G]
        out += [(b, h, j) for j in range(tiles) for (b, h) in grp]
    return out


def makespan(costs, sms=SMS, jitter=0.0, seed=0):
    import random
    rng = random.Random(seed)
    if jitter:
        costs = [c * (1.0 + rng.gauss(0.0, jitter)) for c in costs]
    free = [0.0] * sms
    heapq.heapify(free)
    end = 0.0
    for c in costs:
        t0 = heapq.heappop(free)
        heapq.heappush(free, t0 + c)
        end = max(end, t0 + c)
    return end


def kernel_ms(seq, causal, order, t, F, cd, split_tail=0, jitter=0.0, seeds=1):
    costs = []
    for (b, h, j) in ctas(seq, causal, order):
        ni, nd = cta_steps(seq, causal, j)
        costs.append(F + t * (ni + cd * nd))
    if split_tail:  # the last `split_tail[0]` CTAs split into `split_tail[1]` query ranges each
        m, k = split_tail
        head, tail = costs[:-m], costs[-m:]
        costs = head + [F + (c - F) / k for c in tail for _ in range(k)]
    ms = sum(makespan(costs, jitter=jitter, seed=k) for k in range(seeds)) / seeds
    return ms / 1000.0, sum(costs) / SMS / 1000.0


def pieces_ms(seq, T, k, t, F, concurrent, F_piece=None, jitter=0.0, seeds=1, bw=4.0e6, launch_us=5.0):
    """Non-causal tail pieces (the tenth session's design): the main launch takes KV tiles
    [0, kv_tiles - T) of every (sequence, head) pair (grid x shortened), a second instance takes the
    last T tiles of every pair, each split into k query ranges (fp32 dK/dV partials, a reduction
    kernel sums them in piece order). concurrent: the pieces are dispatched as soon as every main
    CTA has started (PDL with griddepcontrol.launch_dependents at the main kernel's start), i.e.
    list scheduling over main + pieces; else the pieces launch after main completes. The partials'
    reduction (read k x, write 1x in bf16) and its launch are added; F_piece defaults to F."""
    F_piece = F if F_piece is None else F_piece
    batch, heads, tiles = 16384 // seq, 16, seq // BC
    n_qt = seq // BR
    pairs = batch * heads
    main = [F + t * n_qt] * ((tiles - T) * pairs)
    pieces = [F_piece + t * ((r + 1) * n_qt // k - r * n_qt // k) for _ in range(T * pairs) for r in range(k)]
    red = launch_us + (k * T * pairs * BC * 128 * 4 * 2 + T * pairs * BC * 128 * 2 * 2) / bw if T else 0.0
    out = 0.0
    for s in range(seeds):
        if concurrent or not pieces:
            out += makespan(main + pieces, jitter=jitter, seed=s)
        else:
            out += makespan(main, jitter=jitter, seed=s) + launch_us + makespan(pieces, jitter=jitter, seed=s + 100)
    return (out / seeds + red) / 1000.0


def fit():
    best = None
    for t in [x / 1000 for x in range(4200, 4500, 20)]:
        for F in range(0, 40, 2):
            for P in [x / 1000 for x in range(60, 300, 20)]:
                for cd in [1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0]:
                    err = 0.0
                    for (s, c), ms in MEASURED.items():
                        m, _ = kernel_ms(s, c, "head_major", t, F, cd)
                        err += ((m + P - ms) / ms) ** 2
                    if best is None or err < best[0]:
                        best = (err, t, F, P, cd)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--t", type=float, default=4.34, help="us per interior step")
    ap.add_argument("--F", type=float, default=20.0, help="us per CTA (prologue, epilogue)")
    ap.add_argument("--P", type=float, default=0.12, help="ms of pre/post kernels and gaps")
    ap.add_argument("--cd", type=float, default=1.5, help="cost of a diagonal step / interior")
    ap.add_argument("--jitter", type=float, default=0.0, help="relative sd of each CTA's cost")
    ap.add_argument("--seeds", type=int, default=1)
    a = ap.parse_args()
    if a.fit:
        err, a.t, a.F, a.P, a.cd = fit()
        print(f"fit: t {a.t:.3f} us/step, F {a.F} us/CTA, P {a.P:.3f} ms, c_diag {a.cd} (rms {(err / 6) ** 0.5:.4f})")
    print(f"t {a.t} us, F {a.F} us, P {a.P} ms, c_diag {a.cd}; {SMS} SMs, 1 CTA/SM")
    j = dict(jitter=a.jitter, seeds=a.seeds)
    print("seq causal | measured | model head_major (ideal) | grouped tile-major G: time ratio to head_major")
    for (s, c), ms in MEASURED.items():
        hm, ideal = kernel_ms(s, c, "head_major", a.t, a.F, a.cd, **j)
        row = f"{s:5d} {c} | {ms:6.3f} | {hm + a.P:6.3f} ({ideal + a.P:6.3f}) |"
        for G in (2, 4, 6, 8, 16, 32, 64, 256):
            if G > 16 * 16384 // s:
                continue
            tm, _ = kernel_ms(s, c, G, a.t, a.F, a.cd, **j)
            row += f" G{G} {(tm + a.P) / (hm + a.P):.3f}"
        print(row)
    print("non-causal tail splits (last m CTAs into k query ranges; partial dK/dV reduce not costed):")
    for s in (16384, 4096, 1024):
        base, ideal = kernel_ms(s, 0, "head_major", a.t, a.F, a.cd, **j)
        row = [f"{s:5d}: none {base + a.P:6.3f} ideal {ideal + a.P:6.3f}"]
        for m, k in [(68, 2), (68, 3), (200, 3), (68, 4), (68, 5), (200, 5), (68, 7)]:
            x, _ = kernel_ms(s, 0, "head_major", a.t, a.F, a.cd, (m, k), **j)
            row.append(f"{m}x{k} {(x + a.P) / (base + a.P):.3f}")
        print(" | ".join(row))
    print("tail pieces (last T KV tiles of every pair in k query ranges; reduction costed; ratio to main):")
    for s in (16384, 4096, 1024):
        base = pieces_ms(s, 0, 1, a.t, a.F, True, **j) + a.P
        for conc in (True, False):
            for Fp in (a.F, a.F + 10):
                res = sorted(((pieces_ms(s, T, k, a.t, a.F, conc, Fp, **j) + a.P) / base, T, k)
                             for T in range(1, min(16, s // BC) + 1) for k in range(2, 9))
                best = ", ".join(f"T{T} k{k} {r:.3f}" for r, T, k in res[:3])
                print(f"{s:5d} {'concurrent' if conc else 'serial    '} F_piece {Fp:4.0f}: {best}")


if __name__ == "__main__":
    main()
