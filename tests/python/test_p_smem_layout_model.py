"""A model of how the sm90 forward's wide head_dim 64 instance passes P through shared memory
(FwdTraits::kPInSmem; store_weights_smem and issue_pv in src/cuda/sm90/forward/kernel.cuh):
every lane's stmatrix addresses, run on distinct 16-bit values, then the P V wgmma's reads of its
K-major, 128-byte swizzled A operand through the descriptors issue_pv builds, compared element by
element with the P each thread's accumulator registers hold; plus the bank conflicts of each
stmatrix. Runs without a GPU; keep it in step with the kernel.

Layouts (a warpgroup's 64 query rows, BLOCK_N keys):
- Registers (pack_weights, the wgmma A fragment per k16 step kt): thread 32 w + 4 g + q holds
  a[0] = (row 16 w + g, keys 16 kt + 2 q, + 1), a[1] = (row + 8, same keys),
  a[2] = (row, keys 16 kt + 8 + 2 q, + 1), a[3] = (row + 8, those keys); the lower key in the
  low 16 bits.
- Shared memory (what a TMA load with SWIZZLE_128B and 64-element boxes writes, as for Q): key k
  of row m at panel (k // 64) * 64 * 128 + m * 128 + ((((k % 64) * 2) // 16) ^ (m % 8)) * 16 +
  (k * 2) % 16.
- The wgmma's read of k16 step kt (descriptor start = base + (kt // 4) * 8192 + 32 * (kt % 4),
  128-byte swizzle, 1024-byte stride between 8-row groups): element (m, k) of the step at
  start-relative offset (m // 8) * 1024 + (m % 8) * 128 + 2 * k before the swizzle, which XORs
  address bits [4:6] with bits [7:9] (the hardware's 128-byte pattern on a 1024-aligned tile).
"""

import pytest

PANEL_BYTES = 64 * 128


def stored_addr(m, k):
    return (k // 64) * PANEL_BYTES + m * 128 + ((((k % 64) * 2) // 16) ^ (m % 8)) * 16 + (k * 2) % 16


def swizzle128(addr):
    return addr ^ (((addr >> 7) & 7) << 4)


def wgmma_read_addr(kt, m, kk):
    """Byte the P V wgmma reads for row m, key kk (0..15) of k16 step kt (base 0, 1024-aligned)."""
    start = (kt // 4) * PANEL_BYTES + 32 * (kt % 4)
    return swizzle128(start + (m // 8) * 1024 + (m % 8) * 128 + 2 * kk)


def store_weights_smem(block_n, regs_of, swizzle=True):
    """store_weights_smem for the 4 warps of a warpgroup: returns memory {byte address: (row, key)}
    and, per warp and stmatrix, the 16-byte row addresses of its 4 matrices (for the conflicts)."""
    mem = {}
    phases = []
    for warp in range(4):
        for kt in range(block_n // 16):
            addrs = []
            for lane in range(32):
                mat, r = lane >> 3, lane & 7
                row_addr = (16 * warp + 8 * (mat & 1) + r) * 128
                chunk = 2 * kt + (mat >> 1)
                addrs.append(row_addr + (chunk // 8) * PANEL_BYTES + (((chunk % 8) ^ (r if swizzle else 0)) << 4))
            phases.append(addrs)
            # stmatrix.x4: lane l's register i holds halves (row l // 4, cols 2 (l % 4), + 1) of matrix
            # i, written to the address lane 8 i + l // 4 gave, at byte 4 (l % 4).
            for lane in range(32):
                g, q = lane // 4, lane % 4
                for i in range(4):
                    lo, hi = regs_of(warp, g, q, kt, i)
                    a = addrs[8 * i + g] + 4 * q
                    for b, val in ((a, lo), (a + 2, hi)):
                        assert b not in mem, f"byte {b} written twice"
                        mem[b] = val
    return mem, phases


def fragment(warp, g, q, kt, i):
    """The (row, key) pairs register a[i] of k16 step kt holds for lane 4 g + q of the warp."""
    row = 16 * warp + g + 8 * (i & 1)
    key = 16 * kt + 8 * (i >> 1) + 2 * q
    return (row, key), (row, key + 1)


@pytest.mark.parametrize("block_n", [64, 128, 192])
def test_wgmma_reads_what_the_registers_held(block_n):
    mem, _ = store_weights_smem(block_n, fragment)
    assert len(mem) == 64 * block_n  # every element written once (one entry per 16-bit element)
    for kt in range(block_n // 16):
        for m in range(64):
            for kk in range(16):
                a = wgmma_read_addr(kt, m, kk)
                assert mem.get(a) == (m, 16 * kt + kk), (kt, m, kk, a, mem.get(a))
                assert a == stored_addr(m, 16 * kt + kk)
    assert max(mem) < 64 * block_n * 2, "P stays inside the warpgroup's buffer"


@pytest.mark.parametrize("block_n", [128, 192])
def test_stmatrix_rows_are_conflict_free(block_n):
    # One wavefront per 8 x 8 matrix: its 8 rows (16 bytes each) cover all 32 banks.
    _, phases = store_weights_smem(block_n, fragment)
    for addrs in phases:
        for mat in range(4):
            banks = set()
            for r in range(8):
                a = addrs[8 * mat + r]
                assert a % 16 == 0
                banks.update(((a // 4) + w) % 32 for w in range(4))
            assert len(banks) == 32, (mat, [addrs[8 * mat + r] for r in range(8)])


@pytest.mark.parametrize("mistake", ["no swizzle", "rows 8-15 in matrices 2, 3"])
def test_model_fails_on_a_mistake(mistake):
    # The checks can fail: a store without the swizzle XOR, or with the matrices' row halves swapped
    # (registers a[1] and a[2] exchanged), puts elements where the wgmma does not read them.
    if mistake == "no swizzle":
        mem, phases = store_weights_smem(128, fragment, swizzle=False)
    else:
        mem, phases = store_weights_smem(128, lambda w, g, q, kt, i: fragment(w, g, q, kt, (0, 2, 1, 3)[i]))
    wrong = sum(mem.get(wgmma_read_addr(kt, m, kk)) != (m, 16 * kt + kk)
                for kt in range(8) for m in range(64) for kk in range(16))
    assert wrong > 0
