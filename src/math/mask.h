// The mask predicates of tessera's semantics, written once for every backend.
//
// Query row i (of seq_q) sees key j (of seq_k) iff
//   i + d - left <= j <= i + d + right,   d = seq_k - seq_q (bottom-right alignment),
// where causal means right = min(right, 0) and a negative bound means unbounded.
#pragma once

#include "math/host_device.h"

namespace tessera::math {

struct MaskSpec {
  int seq_q = 0;
  int seq_k = 0;
  int left = -1;   // < 0: unbounded
  int right = -1;  // < 0: unbounded (causal is folded in as right = 0)

  // Build from user options; causal tightens the right bound to the diagonal.
  TESSERA_HD static MaskSpec make(int seq_q, int seq_k, bool causal, int window_left, int window_right) {
    MaskSpec m;
    m.seq_q = seq_q;
    m.seq_k = seq_k;
    m.left = window_left < 0 ? -1 : window_left;
    m.right = window_right < 0 ? -1 : window_right;
    if (causal) m.right = (m.right < 0 || m.right > 0) ? 0 : m.right;
    return m;
  }
  TESSERA_HD bool unmasked() const { return left < 0 && right < 0; }
};

// Half-open range [begin, end) of keys row i sees; empty when begin >= end.
struct KeyRange {
  int begin;
  int end;
  TESSERA_HD bool empty() const { return begin >= end; }
  TESSERA_HD int size() const { return end > begin ? end - begin : 0; }
};

TESSERA_HD KeyRange visible_keys(const MaskSpec& m, int i) {
  const long long diag = static_cast<long long>(i) + m.seq_k - m.seq_q;
  long long lo = 0, hi = m.seq_k;
  if (m.left >= 0 && diag - m.left > lo) lo = diag - m.left;
  if (m.right >= 0 && diag + m.right + 1 < hi) hi = diag + m.right + 1;
  if (hi < lo) hi = lo;
  if (lo > m.seq_k) lo = hi = m.seq_k;
  if (hi < 0) lo = hi = 0;
  return {static_cast<int>(lo), static_cast<int>(hi)};
}

// The same range in 32-bit arithmetic, equal to visible_keys for every i >= -1 with seq_q, seq_k >= 0
// (other inputs are outside its contract: i - seq_q could overflow); each difference is formed
// only where its exact value fits; tests/cpu/test_mask.cpp compares the two
// over the int range). For the sm90 forward's per-tile code, where the 64-bit compares
// lengthened the serial chain before a tile's first wgmma (~100 instructions per tile; ncu, d64
// causal 1k). The other kernels keep visible_keys: in the portable backward, whose inner loop
// calls it per element, ptxas hoisted this form's loop invariants and spilled (d64 26 -> 72
// bytes, nvcc 13.0). With a = i - seq_q, the row's diagonal key is diag = seq_k + a.
TESSERA_HD KeyRange visible_keys_narrow(const MaskSpec& m, int i) {
  const int a = i - m.seq_q;
  int lo = 0, hi = m.seq_k;
  // diag - left > 0  <=>  a > left - seq_k (both >= 0: no overflow). diag - left > seq_k (a >
  // left): the window starts past the last key, and lo = seq_k empties the range (hi <= seq_k);
  // otherwise left - a is in [0, seq_k).
  if (m.left >= 0 && a > m.left - m.seq_k) lo = a > m.left ? m.seq_k : m.seq_k - (m.left - a);
  // diag + right + 1 < seq_k  <=>  a < -right - 1; then a + right + 1 is in (-2^31, 0).
  if (m.right >= 0 && a < -m.right - 1) hi = m.seq_k + (a + m.right + 1);
  return {lo, hi > lo ? hi : lo};
}

TESSERA_HD bool key_visible(const MaskSpec& m, int i, int j) {
  const KeyRange r = visible_keys(m, i);
  return j >= r.begin && j < r.end;
}

// Keys visible to any row of [row_begin, row_end): a tile of rows may skip KV tiles outside.
// Rows' ranges move monotonically with i, so the union is spanned by the first and last row.
// kNarrow: through visible_keys_narrow (the same result).
template <bool kNarrow = false>
TESSERA_HD KeyRange visible_keys_of_rows(const MaskSpec& m, int row_begin, int row_end) {
  if (row_end <= row_begin) return {0, 0};
  // Both bounds are non-decreasing in i, so the first row's begin and the last row's end
  // bound the union (a superset when some rows are empty, which only costs masked work).
  const KeyRange first = kNarrow ? visible_keys_narrow(m, row_begin) : visible_keys(m, row_begin);
  const KeyRange last = kNarrow ? visible_keys_narrow(m, row_end - 1) : visible_keys(m, row_end - 1);
  return {first.begin, last.end > first.begin ? last.end : first.begin};
}

// True when every key of [col_begin, col_end) is visible to every row of [row_begin, row_end):
// such tiles need no per-element masking.
TESSERA_HD bool tile_fully_visible(const MaskSpec& m, int row_begin, int row_end, int col_begin, int col_end) {
  if (row_end <= row_begin || col_end <= col_begin) return true;
  const KeyRange first = visible_keys(m, row_begin);
  const KeyRange last = visible_keys(m, row_end - 1);
  // The intersection of all rows' ranges is [last.begin, first.end) because bounds grow with i.
  return last.begin <= col_begin && col_end <= first.end;
}

}  // namespace tessera::math
