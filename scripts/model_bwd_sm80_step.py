#!/usr/bin/env python3
# In-order issue model of one step (one KV tile x one Q tile) of the sm80 backward main kernel at
# head_dim 128, replayed from its SASS (docs/perf/backward_sm80.md, "Ninth session"). No GPU needed.
#
# Each of the 8 warps replays the instructions its common step executes (interior tile, no softcap,
# non-deterministic): the loop's basic blocks walked with the branch outcomes in RULES below, which
# are tied to the SASS addresses of one build (CUDA 13.0, sm_90, bf16, d128 V0): re-derive them
# (the branch list printed by --branches) after any change to kernel.cuh. Per scheduler (warps w,
# w + 4) one instruction per cycle; register dependencies from the SASS operands; HMMA on the
# scheduler's tensor pipe (T_h cycles each, L_h latency); LDSM / LDS / STS / LDGSTS / REDG on one
# SM-wide shared/L1 pipe (4 / 1 / 1 / 4 / red_occ cycles, ~30 cycles latency, at most mio_q
# outstanding per scheduler); MUFU 8 cycles per scheduler; pair barriers (bar.sync R, 0x40) and
# CTA barriers; everything else 1 cycle, 5 cycles latency. Absolute cycles come out ~13 % below
# the measured step; the model is for ratios between builds.
#
# Usage: cuobjdump -sass -arch sm_90 instance_hdim128.cu.o > x.sass   (the bf16 kernel is first)
#        python3 scripts/model_bwd_sm80_step.py main=main.sass skew=branch.sass [--branches]
import argparse, collections, re, sys


def parse(path):
    ins, nfun = [], 0
    for line in open(path):
        if 'Function :' in line:
            nfun += 1
            if nfun > 1: break  # first function only (bf16)
        m = re.match(r'\s*/\*([0-9a-f]+)\*/\s+(.*?);', line)
        if m and nfun == 1: ins.append((int(m.group(1), 16), m.group(2).strip()))
    return ins


def opc(s): return re.sub(r'^@!?U?P\w+\s+', '', s).split()[0]


BRA = re.compile(r'(@!?U?P\w+\s+)?BRA\s+(?:!?U?P\w+,\s*)?(0x[0-9a-f]+)')


def walk(ins, start, end, rule, warp):  # the executed instruction sequence of one step
    idx = {a: i for i, (a, s) in enumerate(ins)}
    i, out = idx[start], []
    while True:
        a, s = ins[i]
        out.append((a, s))
        if a == end: return out
        m = BRA.match(s)
        if m:
            tgt = int(m.group(2), 16)
            if m.group(1) is None or rule(a, tgt, ins[i + 1][1], warp): i = idx[tgt]; continue
        i += 1


# Branch outcomes of the common step, per build: address -> taken (or a function of the warp).
def rule_main(a, tgt, nxt, warp):  # main a50ffe8
    fixed = {0x5900: True, 0x59f0: False, 0x5ac0: False, 0x6680: False, 0x10c00: False, 0x11430: False,
             0x12580: True, 0x135a0: True, 0x12350: warp >= 4}
    if a in fixed: return fixed[a]
    if 'ATOMG' in nxt: return True        # the RED, not the deterministic ATOMG
    if 0x12a00 <= a < 0x13580: return False  # rows inside q_len
    raise KeyError(hex(a))


def rule_skew(a, tgt, nxt, warp):  # wip/bwd-sm80-analysis (skewed dQ)
    B = warp >= 4
    fixed = {0x5850: True, 0x5960: False, 0x59f0: False, 0x65e0: False, 0xfee0: not B, 0x12080: False,
             0x120f0: B, 0x12a40: False, 0x13770: B, 0x13940: True, 0x14ad0: True, 0x14c60: False, 0x15a70: B}
    if a in fixed: return fixed[a]
    if 'ATOMG' in nxt: return True
    if 0x10a00 <= a < 0x11110 or 0x13950 <= a < 0x14ad0: return False
    raise KeyError(hex(a))


def rule_pre(a, tgt, nxt, warp):  # c0cb2f1, before the reorder (calibration: measured 1.078x main's time)
    fixed = {0x54b0: True, 0x5570: False, 0x55d0: False, 0x61a0: False, 0xf240: False, 0xf2d0: False,
             0x10c00: True, 0x11b20: True, 0x100d0: warp >= 4}
    if a in fixed: return fixed[a]
    if 'ATOMG' in nxt: return True
    if 0x11030 <= a < 0x11b20: return False
    raise KeyError(hex(a))


def rule_next2(a, tgt, nxt, warp):  # wip/bwd-sm80-next2 4a9c4a5 (calibration: measured 1.009x)
    fixed = {0x6300: True, 0x10ac0: False, 0x10b90: False, 0x12860: True, 0x13350: False}
    if a in fixed: return fixed[a]
    raise KeyError(hex(a))


def rule_v4(a, tgt, nxt, warp):  # wip/bwd-sm80-10 (skewed dQ + pair-interleaved dq_accum, v4 REDs)
    B = warp >= 4
    fixed = {0x5850: True, 0x5960: False, 0x59f0: False, 0x65e0: False, 0xfed0: not B, 0x12170: False,
             0x121e0: B, 0x12b30: False, 0x13860: B, 0x13a30: True, 0x14810: True, 0x149a0: False, 0x157b0: B}
    if a in fixed: return fixed[a]
    if 'ATOMG' in nxt: return True
    if 0x10a00 <= a < 0x11200 or 0x13a40 <= a < 0x14810: return False
    raise KeyError(hex(a))


# name: (loop start, back branch, rule, CTA barrier B(i) to start each warp's step at)
RULES = {'main': (0x56b0, 0x13730, rule_main, 0x10c20), 'skew': (0x5640, 0x15c50, rule_skew, 0x120b0),
         'pre': (0x5280, 0x11ca0, rule_pre, 0xf280), 'next2': (0x5b00, 0x13b40, rule_next2, 0x11180),
         'v4': (0x5640, 0x15990, rule_v4, 0x121a0)}

RE_REG = re.compile(r'\b(U?R\d+|U?P\d+)(\.64)?\b')
STORES = ('STS', 'STG', 'REDG', 'RED', 'LDGSTS', 'BAR', 'BRA', 'DEPBAR', 'LDGDEPBAR', 'ATOMG', 'MEMBAR',
          'NANOSLEEP', 'WARPSYNC', 'BSSY', 'BSYNC', 'CCTL', 'ERRBAR', 'CGAERRBAR', 'EXIT')


def regs(opnd, width=1):
    out = []
    for m in RE_REG.finditer(opnd):
        name = m.group(1); pre = name.rstrip('0123456789'); n = int(name[len(pre):])
        out += [f'{pre}{n + k}' for k in range(2 if m.group(2) else width)]
    return out


def decode(s):
    srcs, body = [], s
    m = re.match(r'(@!?U?P\w+)\s+(.*)', s)
    if m: srcs += regs(m.group(1).lstrip('@!')); body = m.group(2)
    parts = body.split(None, 1)
    op = parts[0]; base = op.split('.')[0]
    ops = [o.strip() for o in parts[1].split(',')] if len(parts) > 1 else []
    dests = []
    if base in STORES:
        for o in ops:
            w = (2 if '.64' in op else 4 if '.128' in op else 1) if base == 'STS' else (2 if 'x2' in op and base == 'REDG' else 1)
            srcs += regs(o, w)
    else:
        k = 0
        while k < len(ops) and re.fullmatch(r'!?U?P(\d+|T)', ops[k]):
            dests += regs(ops[k]); k += 1
            if base not in ('ISETP', 'FSETP', 'UISETP', 'PLOP3', 'LOP3', 'IADD3', 'UIADD3', 'LEA', 'ULEA', 'VIADDMNMX', 'IMAD'): break
        if k == 0 and ops:
            dw = 4 if base == 'HMMA' else (4 if op.endswith('.4') else 2 if op.endswith('.2') else 1) if base == 'LDSM' else \
                (2 if '.64' in op else 4 if '.128' in op else 1) if base == 'LDS' else 2 if ('WIDE' in op or base == 'CS2R') else 1
            dests += regs(ops[0], dw); k = 1
        for j, o in enumerate(ops[k:]):
            w = ([4, 2, 4][j] if j < 3 else 1) if base == 'HMMA' else (2 if 'WIDE' in op and j == 2 else 1)
            srcs += regs(o, w)
    return base, [d for d in dests if d not in ('RZ', 'PT', 'URZ', 'UPT')], srcs


class P:
    T_h, L_h, L_smem, L_alu, L_mufu, mufu_occ, f2fp_occ = 8, 34, 30, 5, 20, 8, 2
    ldsm_occ, lds_occ, sts_occ, ldgsts_occ, red_occ, bar_lat, mio_q, hmma_slack = 4, 1, 1, 4, 8, 20, 8, 12


def simulate(traces, p, nsteps=5):
    W = len(traces)
    prog = [[decode(s) + (a, s) for a, s in t] for t in traces]
    ready = [collections.defaultdict(int) for _ in range(W)]
    pc, step, tnext, blocked, done = [0] * W, [0] * W, [0] * W, [None] * W, [False] * W
    tensor, mufu, alu, mio = [0] * 4, [0] * 4, [0] * 4, [[] for _ in range(4)]
    smem, bars, ends, log, t = 0, {}, [[] for _ in range(W)], [], 0
    while not all(done):
        for sp in range(4):
            issued = False
            for w in sorted((w for w in range(W) if w % 4 == sp and not done[w]), key=lambda w: (tnext[w], w)):
                if blocked[w] is not None or t < tnext[w]: continue
                base, dests, srcs, a, s = prog[w][pc[w]]
                if max([ready[w][r] for r in srcs] + [0]) > t or issued: continue
                if base == 'HMMA':
                    if tensor[sp] > t + p.hmma_slack: continue
                    st = max(t, tensor[sp]); tensor[sp] = st + p.T_h; lat = st + p.L_h
                elif base in ('LDSM', 'LDS', 'STS', 'LDGSTS', 'REDG'):
                    mio[sp] = [x for x in mio[sp] if x > t]
                    if len(mio[sp]) >= p.mio_q: continue
                    occ = {'LDSM': p.ldsm_occ, 'LDS': p.lds_occ, 'STS': p.sts_occ, 'LDGSTS': p.ldgsts_occ, 'REDG': p.red_occ}[base]
                    st = max(t, smem); smem = st + occ; mio[sp].append(st); lat = st + occ + p.L_smem
                elif base == 'MUFU':
                    st = max(t, mufu[sp])
                    if st > t + 4: continue
                    mufu[sp] = st + p.mufu_occ; lat = st + p.L_mufu
                elif base == 'BAR':
                    pair = re.search(r'BAR\.SYNC\S*\s+R', s) is not None
                    key = (step[w], a) + ((w % 4,) if pair else ())
                    bars.setdefault(key, []).append(w); blocked[w] = key; issued = True
                    if len(bars[key]) == (2 if pair else W):
                        for v in bars[key]: blocked[v] = None; tnext[v] = t + p.bar_lat; pc[v] += 1
                    continue
                else:
                    st = t
                    if base == 'F2FP': st = max(t, alu[sp]); alu[sp] = st + p.f2fp_occ
                    lat = st + p.L_alu
                for d in dests: ready[w][d] = lat
                log.append((w, step[w], a, t, base))
                issued = True; tnext[w] = t + 1; pc[w] += 1
        for w in range(W):
            if not done[w] and blocked[w] is None and pc[w] >= len(prog[w]):
                ends[w].append(t); step[w] += 1; pc[w] = 0; done[w] = step[w] >= nsteps
        t += 1
    return ends[0][-1] - ends[0][-2], log


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('builds', nargs='+', help='NAME=FILE.sass, NAME in ' + ', '.join(RULES))
    ap.add_argument('--branches', action='store_true', help='list the loop branches of each build and stop')
    a = ap.parse_args()
    traces = {}
    for b in a.builds:
        name, path = b.split('=')
        start, end, rule, bar = RULES[name]
        ins = parse(path)
        if a.branches:
            print(name); [print('  ', hex(x), s) for x, s in ins if start <= x <= end and BRA.match(opc(s) and s)]; continue
        tr = []
        for w in range(8):
            t = walk(ins, start, end, rule, w)
            k = [i for i, (x, s) in enumerate(t) if x == bar][0]
            tr.append(t[k:] + t[:k])  # each warp's step starts at B(i)
        c = collections.Counter(opc(s).split('.')[0] for x, s in tr[0])
        print(f'{name}: {len(tr[0])} / {len(tr[4])} instructions per step (warps 0-3 / 4-7); warp 0:',
              {k: c[k] for k in ('HMMA', 'LDSM', 'LDS', 'STS', 'MUFU', 'BAR', 'LDGSTS', 'REDG')})
        traces[name] = tr
    if a.branches: return
    names = list(traces)
    for th in (6, 8):
        for ro in (2, 8):
            class Q(P): pass
            Q.T_h, Q.red_occ = th, ro
            r = {n: simulate(traces[n], Q)[0] for n in names}
            print(f'T_h {th} red_occ {ro}: ' + ', '.join(f'{n} {r[n]} cycles ({r[n] / r[names[0]]:.3f})' for n in names))


if __name__ == '__main__':
    main()
