#!/usr/bin/env python3
"""Checks the lane mapping of the sm90 batch prefill's whole-line K/V gather
(src/cuda/sm90/batch/prefill_kernel.cuh, producer warpgroup) for both tile sizes, fat (128 keys,
8 passes) and slim (64 keys, 4 passes), at head_dim 64 and 128:

  - every (row, 16-byte chunk) of the BN-row tile is written exactly once, at the offset
    sw128_offset<BN>(row, chunk) the consumers' descriptors expect;
  - the row address a lane receives by shuffle at pass i is the one its source lane looked up
    for that same row (source lane 4 i + l / 8 owns row 4 w + l / 8 + 16 i);
  - a lane looks its row up only where that row lies in the tile (own_in_tile), and every such
    lookup is read by some pass (no wasted page-table load, no row without one);
  - each warp LDGSTS reads 4 rows x 128 contiguous bytes (4 whole lines).

  python3 scripts/check_kv_gather_map.py      (exit status 0 when every check holds)
"""
import sys


def sw128_offset(R, r, ch):
    return (ch >> 3) * (R * 128) + r * 128 + (((ch & 7) ^ (r & 7)) << 4)


def check(BN, D):
    panels, chunks = D // 64, D // 8
    written = {}
    used_lookups = set()
    errors = []
    for t in range(128):  # producer thread
        lane, warp = t % 32, t // 32
        kv_ch = lane % 8
        kv_row0 = 4 * warp + lane // 8
        kv_dst0 = kv_row0 * 128 + ((kv_ch ^ (kv_row0 & 7)) << 4)
        for p in range(BN // 16):
            src_lane = 4 * p + lane // 8
            src_t = 32 * warp + src_lane
            own_row = 4 * warp + src_lane % 4 + 16 * (src_lane // 4)  # the source lane's own row
            own_in_tile = BN == 128 or src_lane < BN // 4
            row = kv_row0 + 16 * p
            if not own_in_tile:
                errors.append(f"BN {BN}: lane {lane} reads lane {src_lane}, which skipped its lookup")
            if own_row != row:
                errors.append(f"BN {BN}: thread {t} pass {p} copies row {row} with lane {src_lane}'s row {own_row}")
            used_lookups.add(src_t)
            for panel in range(panels):
                dst = kv_dst0 + p * 2048 + panel * BN * 128
                chunk = panel * 8 + kv_ch
                want = sw128_offset(BN, row, chunk)
                if dst != want:
                    errors.append(f"BN {BN} D {D}: row {row} chunk {chunk} at {dst}, expected {want}")
                written[(row, chunk)] = written.get((row, chunk), 0) + 1
    for r in range(BN):
        for c in range(chunks):
            if written.get((r, c), 0) != 1:
                errors.append(f"BN {BN} D {D}: row {r} chunk {c} written {written.get((r, c), 0)} times")
    lookups = {t for t in range(128) if BN == 128 or t % 32 < BN // 4}
    if lookups != used_lookups:
        errors.append(f"BN {BN}: lookups made {len(lookups)}, read {len(used_lookups)}")
    # one warp instruction (pass p, panel): 4 rows x 8 chunks of one panel = 4 whole 128-byte lines
    for warp in range(4):
        for p in range(BN // 16):
            rows = {4 * warp + lane // 8 + 16 * p for lane in range(32)}
            chs = {lane % 8 for lane in range(32)}
            if len(rows) != 4 or chs != set(range(8)):
                errors.append(f"BN {BN}: warp {warp} pass {p} is not 4 whole lines")
    return errors


def main():
    errors = []
    for BN in (128, 64):
        for D in (64, 128):
            e = check(BN, D)
            print(f"BN {BN:3d} D {D:3d}: {'ok' if not e else f'{len(e)} errors'}")
            errors += e
    for e in errors[:20]:
        print(e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
