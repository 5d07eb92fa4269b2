// CPU forward: FlashAttention-2 loop order on fp32 tiles.
//
// A work item is (batch, q head, q tile). It keeps its Q tile and O accumulator in fp32
// buffers, streams the K/V tiles its rows can see (the rest are skipped via the mask's row
// ranges), keeps a running max/sum per row in base 2 and divides by the sum once at the end.
// Buffers are laid out so every inner loop is a unit-stride axpy the compiler vectorises:
// K is stored transposed (head_dim x keys) for S = Q K^T, V row-major for O += P V.
//
// FP8 (e4m3) inputs are read exactly (a 256-entry table); their descales fold into the score
// scale (scale * dq * dk) and the output's final factor (dv / l), so P and the accumulators
// are fp32 as for every dtype, and out is written in p.out_dtype() (bf16).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cpu/parallel.h"
#include "math/dtype_convert.h"
#include "math/mask.h"
#include "math/online_softmax.h"

namespace tessera::cpu {

namespace {

constexpr int kTileQ = 32;
constexpr int kTileK = 64;

// e4m3 -> float, bitwise math::fp8_to_float, built once.
const float* e4m3_table() {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b) t[static_cast<std::size_t>(b)] = math::fp8_to_float(static_cast<std::uint8_t>(b), 4);
    return t;
  }();
  return table.data();
}

inline float load(const void* base, std::int64_t index, DType dt, const float* lut) {
  return dt == DType::e4m3 ? lut[static_cast<const std::uint8_t*>(base)[index]] : math::load_as_float(base, index, dt);
}

struct TileItem {
  int b;
  int row0;  // first query row of the tile, within sequence b
};

// Per-thread scratch, reused across work items.
struct Scratch {
  std::vector<float> q, kt, v, s, o;
  std::vector<math::OnlineSoftmaxRow> rows;
  std::vector<float> smax;  // running max of the natural-unit scores, for the LSE
  explicit Scratch(int D)
      : q(static_cast<std::size_t>(kTileQ) * D),
        kt(static_cast<std::size_t>(D) * kTileK),
        v(static_cast<std::size_t>(kTileK) * D),
        s(static_cast<std::size_t>(kTileQ) * kTileK),
        o(static_cast<std::size_t>(kTileQ) * D),
        rows(kTileQ),
        smax(kTileQ) {}
};

void run_tile(const AttentionParams& p, const TileItem& item, int h, Scratch& w) {
  const int D = p.head_dim;
  const int b = item.b;
  const int nq = p.q_len(b), nk = p.k_len(b);
  const int r0 = item.row0, r1 = std::min(nq, r0 + kTileQ), nr = r1 - r0;
  const int hk = h / p.group();
  const std::int64_t qs = p.q_start(b), ks = p.k_start(b);
  const bool ragged = p.ragged();
  const DType dt = p.dtype, out_dt = p.out_dtype();
  const float* lut = e4m3_table();
  const float cap = p.mask.softcap;
  // The scale is applied to each dot product rather than folded into Q: folding adds one
  // rounding per element of Q, which measurably loosens fp32 results against the oracle.
  // FP8 descales join it (exactly scale when they are absent, i.e. 1).
  const float scale = p.mask.scale * (p.q_descale.at(b, hk) * p.k_descale.at(b, hk));
  const float v_descale = p.v_descale.at(b, hk);

  for (int i = 0; i < nr; ++i) {
    const std::int64_t base = ragged ? p.q.offset(0, qs + r0 + i, h) : p.q.offset(b, r0 + i, h);
    float* qi = &w.q[static_cast<std::size_t>(i) * D];
    for (int d = 0; d < D; ++d) qi[d] = load(p.q.ptr, base + d, dt, lut);
  }
  std::fill(w.o.begin(), w.o.begin() + static_cast<std::ptrdiff_t>(nr) * D, 0.0f);
  for (int i = 0; i < nr; ++i) {
    w.rows[i] = math::OnlineSoftmaxRow{};
    w.smax[i] = -INFINITY;
  }

  const math::MaskSpec mask = math::MaskSpec::make(nq, nk, p.mask.causal, p.mask.window_left, p.mask.window_right);
  const math::KeyRange range = math::visible_keys_of_rows(mask, r0, r1);

  for (int c0 = range.begin; c0 < range.end; c0 += kTileK) {
    const int c1 = std::min(range.end, c0 + kTileK), nc = c1 - c0;
    // Convert the K/V tile to fp32 once; every row of the Q tile reuses it.
    for (int j = 0; j < nc; ++j) {
      const std::int64_t kb = ragged ? p.k.offset(0, ks + c0 + j, hk) : p.k.offset(b, c0 + j, hk);
      const std::int64_t vb = ragged ? p.v.offset(0, ks + c0 + j, hk) : p.v.offset(b, c0 + j, hk);
      float* vj = &w.v[static_cast<std::size_t>(j) * D];
      for (int d = 0; d < D; ++d) {
        w.kt[static_cast<std::size_t>(d) * kTileK + j] = load(p.k.ptr, kb + d, dt, lut);
        vj[d] = load(p.v.ptr, vb + d, dt, lut);
      }
    }
    const bool full = math::tile_fully_visible(mask, r0, r1, c0, c1);

    for (int i = 0; i < nr; ++i) {
      float* si = &w.s[static_cast<std::size_t>(i) * kTileK];
      const float* qi = &w.q[static_cast<std::size_t>(i) * D];
      std::fill(si, si + nc, 0.0f);
      for (int d = 0; d < D; ++d) {
        const float qd = qi[d];
        const float* kd = &w.kt[static_cast<std::size_t>(d) * kTileK];
        for (int j = 0; j < nc; ++j) si[j] += qd * kd[j];
      }
      // Natural-unit scores first, then base 2 (t = s * log2 e) for the online softmax.
      for (int j = 0; j < nc; ++j) si[j] = math::apply_softcap(si[j] * scale, cap);
      int jb = 0, je = nc;  // visible columns of this row within the tile
      if (!full) {
        const math::KeyRange kr = math::visible_keys(mask, r0 + i);
        jb = std::clamp(kr.begin - c0, 0, nc);
        je = std::clamp(kr.end - c0, jb, nc);
      }
      float smax = -INFINITY;
      for (int j = jb; j < je; ++j) smax = std::max(smax, si[j]);
      if (smax == -INFINITY) continue;  // nothing visible here: row state unchanged
      w.smax[i] = std::max(w.smax[i], smax);
      for (int j = jb; j < je; ++j) si[j] *= math::kLog2e;
      // Rounding is monotone, so the max of the t's is the max s times log2 e.
      const float tile_max = smax * math::kLog2e;

      math::OnlineSoftmaxRow& row = w.rows[i];
      const float alpha = row.enter_tile(tile_max);
      float* oi = &w.o[static_cast<std::size_t>(i) * D];
      if (alpha != 1.0f)
        for (int d = 0; d < D; ++d) oi[d] *= alpha;
      float sum = 0.0f;
      for (int j = jb; j < je; ++j) {
        const float pj = row.weight(si[j]);
        sum += pj;
        const float* vj = &w.v[static_cast<std::size_t>(j) * D];
        for (int d = 0; d < D; ++d) oi[d] += pj * vj[d];
      }
      row.add(sum);
    }
  }

  for (int i = 0; i < nr; ++i) {
    const math::OnlineSoftmaxRow& row = w.rows[i];
    const float inv = row.output_scale() * v_descale;
    const std::int64_t base = ragged ? p.o.offset(0, qs + r0 + i, h) : p.o.offset(b, r0 + i, h);
    const float* oi = &w.o[static_cast<std::size_t>(i) * D];
    for (int d = 0; d < D; ++d) math::store_from_float(p.o.ptr, base + d, out_dt, oi[d] * inv);
    // LSE = max s + ln(l): l sums exp2(t - max t) = exp(s - max s) up to rounding. Anchoring on
    // the natural-unit max instead of row.lse()'s (m + log2 l) * ln 2 saves two roundings at the
    // logits' magnitude, which the backward's P = exp(s - lse) would feel at |s| ~ 1e4.
    if (p.lse.ptr != nullptr)
      p.lse.ptr[ragged ? p.lse.offset(0, qs + r0 + i, h) : p.lse.offset(b, r0 + i, h)] =
          row.l > 0.0f ? w.smax[i] + std::log(row.l) : -INFINITY;
  }
}

}  // namespace

void attention_forward(const AttentionParams& p) {
  std::vector<TileItem> tiles;
  for (int b = 0; b < p.batch; ++b)
    for (int r = 0; r < p.q_len(b); r += kTileQ) tiles.push_back({b, r});
  const std::int64_t n = static_cast<std::int64_t>(tiles.size()) * p.heads_q;
  parallel_for(n, p.num_threads, [&](std::int64_t lo, std::int64_t hi) {
    Scratch scratch(p.head_dim);
    for (std::int64_t item = lo; item < hi; ++item)
      run_tile(p, tiles[static_cast<std::size_t>(item / p.heads_q)], static_cast<int>(item % p.heads_q), scratch);
  });
}

}  // namespace tessera::cpu
