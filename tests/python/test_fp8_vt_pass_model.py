"""A model of the FP8 forward's V^T pass (fp8_v_transpose_kernel in
src/cuda/sm90/forward/fp8_v_transpose.cu): every thread's loads, byte permutes, shared-memory
stores and reads and global stores, run on random bytes; then a model of the kernel's TMA load of
one K/V tile of the result (a box of 128 keys x head_dim rows, 128-byte swizzle) checked against
the V^T layout the P V product reads (test_fp8_transpose_model.py: vt_addr, phys), and the
shared-memory bank conflicts of each quarter-warp's 16-byte accesses. Runs without a GPU; keep
it in step with the kernel."""

import random

import pytest

from test_fp8_transpose_model import byte_perm, phys, vt_addr

THREADS = 256


def transpose_quad(a, b, c, d):
    ab01, cd01 = byte_perm(a, b, 0x5140), byte_perm(c, d, 0x5140)
    ab23, cd23 = byte_perm(a, b, 0x7362), byte_perm(c, d, 0x7362)
    return [byte_perm(ab01, cd01, 0x5410), byte_perm(ab01, cd01, 0x7632), byte_perm(ab23, cd23, 0x5410),
            byte_perm(ab23, cd23, 0x7632)]


def word(mem, addr):
    return int.from_bytes(bytes(mem[addr:addr + 4]), "little")


def run_pass(v, row, seq_k, d, pitch, key0, out, smem_log):
    """One CTA (one 128-key tile of one head); v is the head's bytes, row the key stride."""
    words, units = d // 4, (d // 4) * 8
    tile = bytearray(d * 128)
    for u0 in range(0, units, THREADS):
        for t in range(THREADS):
            u = u0 + t
            w, kb = u % words, u // words
            k16 = key0 + 16 * kb
            inp = [word(v, (k16 + k) * row + 4 * w) if k16 + k < seq_k else 0 for k in range(16)]
            rows = [[0] * 4 for _ in range(4)]
            for m in range(4):
                q = transpose_quad(inp[2 * m], inp[2 * m + 1], inp[2 * m + 8], inp[2 * m + 9])
                for j in range(4):
                    rows[j][m] = q[j]
            chunk = kb ^ (w % 8)
            for j in range(4):
                addr = (4 * w + j) * 128 + 16 * chunk
                smem_log.append(("store", u0, j, t, addr))
                tile[addr:addr + 16] = b"".join(x.to_bytes(4, "little") for x in rows[j])
    for i0 in range(0, d * 8, THREADS):
        for t in range(THREADS):
            i = i0 + t
            n, c = i // 8, i % 8
            addr = n * 128 + 16 * (c ^ ((n // 4) % 8))
            smem_log.append(("load", i0, 0, t, addr))
            out[n * pitch + key0 + 16 * c:n * pitch + key0 + 16 * c + 16] = tile[addr:addr + 16]


def tma_box_128b(vt, pitch, key0, d):
    """The tile's smem after a TMA load of box (128 keys, d rows) with 128-byte swizzle."""
    smem = bytearray(d * 128)
    for n in range(d):
        for chunk in range(8):
            dst = n * 128 + (chunk ^ (n % 8)) * 16
            smem[dst:dst + 16] = vt[n * pitch + key0 + 16 * chunk:n * pitch + key0 + 16 * chunk + 16]
    return smem


@pytest.mark.parametrize("d,seq_k", [(128, 128), (128, 300), (256, 17), (256, 129)])
def test_pass_then_tma_gives_the_p_v_layout(d, seq_k):
    rng = random.Random(d * 1000 + seq_k)
    row = d + 32  # a padded key stride
    v = bytearray(rng.randrange(256) for _ in range(seq_k * row))
    pitch = (seq_k + 127) // 128 * 128
    vt = bytearray([0xAA]) * (d * pitch)  # poison: every byte must be written
    log = []
    for key0 in range(0, pitch, 128):
        run_pass(v, row, seq_k, d, pitch, key0, vt, log)
    for key0 in range(0, pitch, 128):
        smem = tma_box_128b(vt, pitch, key0, d)
        for n in range(d):
            for l in range(128):
                key = key0 + phys(l)
                want = v[key * row + n] if key < seq_k else 0
                assert smem[vt_addr(n, l)] == want, (n, l, key)


def test_shared_accesses_are_conflict_free():
    """Each quarter-warp (8 lanes) of a 16-byte access covers all 32 banks once."""
    for d in (128, 256):
        log = []
        v = bytearray(128 * d)
        run_pass(v, d, 128, d, 128, 0, bytearray(d * 128), log)
        groups = {}
        for kind, it, j, t, addr in log:
            groups.setdefault((kind, it, j, t // 8), []).append(addr)
        for key, addrs in groups.items():
            banks = sorted((a // 4 + k) % 32 for a in addrs for k in range(4))
            assert banks == list(range(32)), (d, key, addrs)
