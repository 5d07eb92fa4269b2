// Query blocks of a ragged batch numbered without a per-sequence bound. When the longest
// sequence is not known on the host (cu_seqlens in device memory), a grid of
// (blocks of the longest sequence) x sequences must assume total rows per sequence: batch times
// too many CTAs, nearly all of them empty. Instead, sequence s (rows cu[s] .. cu[s + 1]) owns
// the virtual blocks [first(s), first(s) + ceil(len_s / B)), first(s) = floor((cu[s] +
// s (B - 1)) / B): the ranges are disjoint and increasing (first(s + 1) >= first(s) +
// ceil(len_s / B), as floor(x + y) >= floor(x) + floor(y)), leave at most one gap block after
// a sequence (an empty sequence may own no block at all; gap blocks cost a CTA that exits at
// once), and end at first(batch) = floor((total + batch (B - 1)) / B) <= total / B + batch.
// (floor(cu[s] / B) + s works too; this one is up to batch / B blocks shorter.) A kernel maps
// its virtual block back by a binary search over cu (log2(batch) reads).
// tests/cpu/test_ragged_tiles.cpp checks the mapping.
#pragma once

#include <cstdint>

#include "math/host_device.h"

namespace tessera::math {

TESSERA_HD std::int64_t ragged_first_block(std::int64_t cu_s, int s, int block_rows) {
  return (cu_s + static_cast<std::int64_t>(s) * (block_rows - 1)) / block_rows;
}

// Virtual query blocks of B rows for `batch` sequences packed into total_rows rows.
TESSERA_HD std::int64_t ragged_virtual_blocks(std::int64_t total_rows, int batch, int block_rows) {
  return ragged_first_block(total_rows, batch, block_rows);
}

struct RaggedBlock {
  int seq = 0;          // the sequence the virtual block falls in
  int block = 0;        // block index within the sequence
  bool active = false;  // false: past the sequence's last row (a gap block, nothing to do)
};

// Virtual block v (0 <= v < ragged_virtual_blocks) of cu (batch + 1 prefix sums, cu[0] = 0).
// Robust to a violated contract (cu[0] > 0): blocks before first(0) are inactive.
TESSERA_HD RaggedBlock ragged_block(const std::int32_t* cu, int batch, int block_rows, std::int64_t v) {
  int lo = 0, hi = batch - 1;  // the last s with first(s) <= v (ties: empty sequences before s)
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (ragged_first_block(cu[mid], mid, block_rows) <= v) lo = mid;
    else hi = mid - 1;
  }
  RaggedBlock r;
  r.seq = lo;
  const std::int64_t block = v - ragged_first_block(cu[lo], lo, block_rows);
  r.block = static_cast<int>(block);
  r.active = batch > 0 && block >= 0 && block * block_rows < cu[lo + 1] - cu[lo];
  return r;
}

}  // namespace tessera::math
