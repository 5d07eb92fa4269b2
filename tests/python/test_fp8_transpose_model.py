"""A model of the FP8 V transpose of the sm90 forward (transpose_v_tile in
src/cuda/sm90/forward/fp8_operands.cuh): every lane's addresses and byte permutes, run on random bytes
and compared with the layout the P V product needs, plus the shared-memory bank conflicts of
each warp instruction. Runs without a GPU; keep it in step with the kernel.

Layouts (head_dim D, 128 keys per tile):
- V as TMA writes it: byte (key r, column n) at panel (n // 128) * 16384 + r * 128 +
  (((n % 128) // 16) ^ (r % 8)) * 16 + n % 16.
- V^T: byte (column n, logical key l) at n * 128 + ((l // 16) ^ (n % 8)) * 16 + l % 16, where
  logical key l holds physical key phys(l): the permutation under which a thread's accumulator
  registers feed the k32 A fragment of P directly (pack_weights_e4m3).
"""

import random

import pytest

BLOCK_N = 128
PANEL_BYTES = BLOCK_N * 128
TRANSPOSE_WARPS = 3


def phys(l):
    """Physical key of logical key l: logical 4q + i -> {2q, 2q+1, 2q+8, 2q+9}[i], per 16."""
    base, within = 32 * (l // 32), l % 32
    hi, qq, i = within // 16, (within % 16) // 4, within % 4
    return base + 16 * hi + 2 * qq + (0, 1, 8, 9)[i]


def v_addr(r, n):
    return (n // 128) * PANEL_BYTES + r * 128 + (((n % 128) // 16) ^ (r % 8)) * 16 + n % 16


def vt_addr(n, l):
    return n * 128 + ((l // 16) ^ (n % 8)) * 16 + l % 16


def byte_perm(a, b, s):
    """CUDA __byte_perm: result byte k is byte (s >> 4k) & 7 of the 8 bytes {b:a}."""
    x = a | (b << 32)
    return sum(((x >> (8 * ((s >> (4 * k)) & 7))) & 0xFF) << (8 * k) for k in range(4))


def ldmatrix_x4_trans(mem, addrs):
    """ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: lane 8m + r gives the address of row r of
    matrix m (16 bytes, 8 halves); lane l receives, per matrix, halves (2q, c) and (2q + 1, c) of
    it (q = l % 4, c = l // 4), the first in the low 16 bits."""
    def half(a, col):
        return int.from_bytes(mem[a + 2 * col:a + 2 * col + 2], "little")
    return [[half(addrs[8 * m + 2 * (l % 4)], l // 4) | (half(addrs[8 * m + 2 * (l % 4) + 1], l // 4) << 16)
             for m in range(4)] for l in range(32)]


def stmatrix_x4(mem, addrs, regs):
    """stmatrix.sync.aligned.m8n8.x4.shared.b16: lane 8m + r gives the address of row r of matrix
    m; lane l's register m holds halves (c, 2q) and (c, 2q + 1) of matrix m: 4 bytes at row c,
    byte 4q."""
    for l in range(32):
        for m in range(4):
            a = addrs[8 * m + l // 4] + 4 * (l % 4)
            mem[a:a + 4] = regs[l][m].to_bytes(4, "little")


def kernel_transpose(head_dim, v, mutation=None):
    """The kernel's transpose_v_tile, lane by lane. A group is 16 keys x 32 columns (512 bytes):
    one ldmatrix.x4.trans (matrices: keys kb..kb+7 / kb+8..kb+15 x columns d0..d0+15 /
    d0+16..d0+31), two byte permutes per pair of matrices, one stmatrix.x4 (V^T rows d0 + 2c
    and d0 + 2c + 1, and the same 16 columns further). Returns V^T and, per warp instruction,
    the 16-byte rows the lanes addressed (loads, stores). mutation: a deliberate mistake, to show
    the checks catch it."""
    vt = bytearray(head_dim * 128)
    loads, stores = [], []
    units = 2 * (head_dim // 32)  # a warp's unit: 32 columns x 64 keys, four groups
    for warp in range(TRANSPOSE_WARPS):
        for g in (4 * u + i for u in range(warp, units, TRANSPOSE_WARPS) for i in range(4)):
            kb, d0 = 64 * ((g // 4) % 2) + 16 * (g % 4), 32 * (g // 8)
            ld, st = [], []
            for lane in range(32):
                m, j = lane >> 3, lane & 7
                key = kb + 8 * (m & 1) + j
                chunk = (d0 % 128) // 16 + (m >> 1)
                ld.append((d0 // 128) * PANEL_BYTES + key * 128 + ((chunk ^ (key % 8)) * 16))
                # The upper half of the store matrices' rows takes the odd V^T row first (the
                # lane's selectors swapped to match), so that a matrix's 8 rows cover all 8
                # swizzle residues: conflict-free.
                odd = (m & 1) ^ (j >= 4 and mutation != "store_rows")
                row = d0 + 16 * (m >> 1) + 2 * j + odd
                st.append(row * 128 + (((kb // 16) ^ (row % 8)) * 16))
            regs = ldmatrix_x4_trans(v, ld)
            out = []
            for lane, r in enumerate(regs):
                upper = lane >= 16 and mutation not in ("selector", "store_rows")
                even, odd = (0x6420, 0x7531) if mutation != "pairing" else (0x5410, 0x7632)
                sa, sb = (odd, even) if upper else (even, odd)
                out.append([byte_perm(r[0], r[1], sa), byte_perm(r[0], r[1], sb),
                            byte_perm(r[2], r[3], sa), byte_perm(r[2], r[3], sb)])
            stmatrix_x4(vt, st, out)
            loads += [ld[8 * m:8 * m + 8] for m in range(4)]
            stores += [st[8 * m:8 * m + 8] for m in range(4)]
    return vt, loads, stores


def wavefronts(rows):
    """Shared-memory wavefronts of one 8-row phase of ldmatrix / stmatrix (8 rows of 16 bytes):
    the most distinct 4-byte words any bank serves."""
    banks = {}
    for a in rows:
        for word in range(a // 4, a // 4 + 4):
            banks.setdefault(word % 32, set()).add(word)
    return max(len(x) for x in banks.values())


@pytest.mark.parametrize("head_dim", [128, 256])
def test_transpose_matches_layout(head_dim):
    rng = random.Random(head_dim)
    v = bytearray(rng.getrandbits(8) for _ in range(head_dim // 128 * PANEL_BYTES))
    vt, _, _ = kernel_transpose(head_dim, v)
    assert layout_ok(head_dim, v, vt)


@pytest.mark.parametrize("head_dim", [128, 256])
def test_transpose_bank_conflicts(head_dim):
    v = bytearray(head_dim // 128 * PANEL_BYTES)
    _, loads, stores = kernel_transpose(head_dim, v)
    # Every 8-row phase of both instructions is one wavefront (128 bytes): the minimum.
    assert max(wavefronts(a) for a in loads) == 1
    assert max(wavefronts(a) for a in stores) == 1
    # Every V byte is read exactly once and every V^T byte written exactly once.
    read = [a + k for ins in loads for a in ins for k in range(16)]
    written = [a + k for ins in stores for a in ins for k in range(16)]
    assert sorted(read) == list(range(len(v)))
    assert sorted(written) == list(range(head_dim * 128))


def layout_ok(head_dim, v, vt):
    return all(vt[vt_addr(n, l)] == v[v_addr(phys(l), n)] for n in range(head_dim) for l in range(BLOCK_N))


def test_checks_catch_mistakes():
    """Not vacuous: unswapped selectors in the upper lanes, or the wrong byte pairing, break the
    layout; storing every matrix's rows in plain order keeps it but takes 2 wavefronts."""
    rng = random.Random(1)
    v = bytearray(rng.getrandbits(8) for _ in range(PANEL_BYTES))
    for mutation in ("selector", "pairing"):
        vt, _, _ = kernel_transpose(128, v, mutation)
        assert not layout_ok(128, v, vt), mutation
    vt, _, stores = kernel_transpose(128, v, "store_rows")
    assert layout_ok(128, v, vt) and max(wavefronts(a) for a in stores) == 2
