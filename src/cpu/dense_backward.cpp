// CPU backward: recompute P from Q, K and the saved LSE, tile by tile (FA2 backward).
//
// Three passes, each writing outputs no other thread touches, so results do not depend on
// thread count or scheduling (the deterministic mode comes for free):
//   0. D = rowsum(dO * O) per (row, q head);
//   1. per (batch, kv head, kv tile): dV += P^T dO, dK += scale * dS^T Q over every q head of
//      the GQA group and every q tile that sees the kv tile;
//   2. per (batch, q head, q tile): dQ += scale * dS K over the visible kv tiles.
// S and P are recomputed in both 1 and 2; that is the price of having no atomics.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cpu/parallel.h"
#include "math/dtype_convert.h"
#include "math/mask.h"
#include "math/online_softmax.h"

namespace tessera::cpu {

namespace {

constexpr int kTileQ = 64;
constexpr int kTileK = 64;

struct TileItem {
  int b;
  int row0;  // first row of the tile within sequence b
};

std::int64_t packed_q_row(const BackwardParams& p, int b, int i) {
  return p.q_packed_start(b) + i;
}
std::int64_t q_elem(const BackwardParams& p, const StridedPtr& t, int b, int i, int h) {
  return p.ragged() ? t.offset(0, p.q_start(b) + i, h) : t.offset(b, i, h);
}
std::int64_t k_elem(const BackwardParams& p, const StridedPtr& t, int b, int j, int h) {
  return p.ragged() ? t.offset(0, p.k_start(b) + j, h) : t.offset(b, j, h);
}

// The q-side of one (q head, q tile): Q, dO, the LSE (natural log) and D, in fp32.
struct QTile {
  std::vector<float> q, dout, lse, dsum;
  explicit QTile(int D)
      : q(static_cast<std::size_t>(kTileQ) * D), dout(q.size()), lse(kTileQ), dsum(kTileQ) {}
};

// The kv-side of one kv tile: K and V row-major (for dQ and dV updates) and transposed
// (head_dim x keys, for S = Q K^T and dP = dO V^T as unit-stride axpys).
struct KTile {
  std::vector<float> k, kt, vt;
  explicit KTile(int D) : k(static_cast<std::size_t>(kTileK) * D), kt(k.size()), vt(k.size()) {}
};

// P and dS of a (q tile, kv tile) pair; rows without any visible key have P = dS = 0.
struct Scores {
  std::vector<float> pr, ds;
  Scores() : pr(static_cast<std::size_t>(kTileQ) * kTileK), ds(pr.size()) {}
};

void load_q_tile(const BackwardParams& p, const std::vector<float>& dsum, std::int64_t total_q, int b, int h, int r0,
                 int nr, QTile& t) {
  const int D = p.head_dim;
  for (int i = 0; i < nr; ++i) {
    const std::int64_t qb = q_elem(p, p.q, b, r0 + i, h), gb = q_elem(p, p.dout, b, r0 + i, h);
    for (int d = 0; d < D; ++d) {
      t.q[static_cast<std::size_t>(i) * D + d] = math::load_as_float(p.q.ptr, qb + d, p.dtype);
      t.dout[static_cast<std::size_t>(i) * D + d] = math::load_as_float(p.dout.ptr, gb + d, p.dtype);
    }
    const std::int64_t row = packed_q_row(p, b, r0 + i);
    const float lse = p.lse.ptr[p.ragged() ? p.lse.offset(0, row, h) : p.lse.offset(b, r0 + i, h)];
    t.lse[i] = lse;  // -inf: the row saw no key and is skipped
    t.dsum[i] = dsum[static_cast<std::size_t>(h * total_q + row)];
  }
}

void load_k_tile(const BackwardParams& p, int b, int hk, int c0, int nc, KTile& t) {
  const int D = p.head_dim;
  for (int j = 0; j < nc; ++j) {
    const std::int64_t kb = k_elem(p, p.k, b, c0 + j, hk), vb = k_elem(p, p.v, b, c0 + j, hk);
    for (int d = 0; d < D; ++d) {
      const float kv = math::load_as_float(p.k.ptr, kb + d, p.dtype);
      t.k[static_cast<std::size_t>(j) * D + d] = kv;
      t.kt[static_cast<std::size_t>(d) * kTileK + j] = kv;
      t.vt[static_cast<std::size_t>(d) * kTileK + j] = math::load_as_float(p.v.ptr, vb + d, p.dtype);
    }
  }
}

// Recomputes P = exp(s - lse) and dS = P * (dP - D) (times the soft-cap derivative) for rows
// [r0, r0 + nr) and keys [c0, c0 + nc) of one sequence.
void scores(const BackwardParams& p, const math::MaskSpec& mask, const QTile& qt, const KTile& kt, int r0, int nr,
            int c0, int nc, Scores& out) {
  const int D = p.head_dim;
  const float scale = p.mask.scale, cap = p.mask.softcap;
  const bool full = math::tile_fully_visible(mask, r0, r0 + nr, c0, c0 + nc);
  for (int i = 0; i < nr; ++i) {
    float* pi = &out.pr[static_cast<std::size_t>(i) * kTileK];
    float* dsi = &out.ds[static_cast<std::size_t>(i) * kTileK];
    std::fill(pi, pi + nc, 0.0f);
    std::fill(dsi, dsi + nc, 0.0f);
    if (qt.lse[i] == -INFINITY) continue;  // the row saw no key in the forward
    int jb = 0, je = nc;
    if (!full) {
      const math::KeyRange kr = math::visible_keys(mask, r0 + i);
      jb = std::clamp(kr.begin - c0, 0, nc);
      je = std::clamp(kr.end - c0, jb, nc);
      if (jb == je) continue;
    }
    // Raw dot products; pi is reused as the S buffer until it becomes P.
    const float* qi = &qt.q[static_cast<std::size_t>(i) * D];
    for (int d = 0; d < D; ++d) {
      const float qd = qi[d];
      const float* kd = &kt.kt[static_cast<std::size_t>(d) * kTileK];
      for (int j = 0; j < nc; ++j) pi[j] += qd * kd[j];
    }
    // dP = dO V^T into dsi.
    const float* gi = &qt.dout[static_cast<std::size_t>(i) * D];
    for (int d = 0; d < D; ++d) {
      const float gd = gi[d];
      const float* vd = &kt.vt[static_cast<std::size_t>(d) * kTileK];
      for (int j = 0; j < nc; ++j) dsi[j] += gd * vd[j];
    }
    const float lse = qt.lse[i], di = qt.dsum[i];
    for (int j = 0; j < nc; ++j) {
      if (j < jb || j >= je) {
        pi[j] = 0.0f;
        dsi[j] = 0.0f;
        continue;
      }
      float s = pi[j] * scale, dcap = 1.0f;
      if (cap > 0.0f) {
        const float t = std::tanh(s / cap);
        s = cap * t;
        dcap = 1.0f - t * t;
      }
      // exp(s - lse) in natural units: s - lse is exact when they are close, whereas going
      // through base 2 would round both at the logits' magnitude (1e-3 at |s| ~ 1e4).
      const float pij = std::exp(s - lse);
      pi[j] = pij;
      dsi[j] = pij * (dsi[j] - di) * dcap;
    }
  }
}

// Pass 0: D = <dO, O> per (q head, packed row), packed as [h * total_q + row].
std::vector<float> row_dots(const BackwardParams& p, std::int64_t total_q) {
  std::vector<float> dsum(static_cast<std::size_t>(total_q * p.heads_q), 0.0f);
  parallel_for(static_cast<std::int64_t>(p.batch) * p.heads_q, p.num_threads, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t bh = lo; bh < hi; ++bh) {
      const int b = static_cast<int>(bh / p.heads_q), h = static_cast<int>(bh % p.heads_q);
      for (int i = 0; i < p.q_len(b); ++i) {
        const std::int64_t ob = q_elem(p, p.o, b, i, h), gb = q_elem(p, p.dout, b, i, h);
        float acc = 0.0f;
        for (int d = 0; d < p.head_dim; ++d)
          acc += math::load_as_float(p.o.ptr, ob + d, p.dtype) * math::load_as_float(p.dout.ptr, gb + d, p.dtype);
        dsum[static_cast<std::size_t>(h * total_q + packed_q_row(p, b, i))] = acc;
      }
    }
  });
  return dsum;
}

math::MaskSpec mask_of(const BackwardParams& p, int b) {
  return math::MaskSpec::make(p.q_len(b), p.k_len(b), p.mask.causal, p.mask.window_left, p.mask.window_right);
}

// Pass 1: dK and dV of one kv tile, summed over the GQA group's q heads.
void dkdv_tile(const BackwardParams& p, const std::vector<float>& dsum, std::int64_t total_q, const TileItem& item,
               int hk, QTile& qt, KTile& kt, Scores& sc, std::vector<float>& dk, std::vector<float>& dv) {
  const int D = p.head_dim;
  const int b = item.b, c0 = item.row0, nq = p.q_len(b);
  const int nc = std::min(p.k_len(b), c0 + kTileK) - c0;
  const math::MaskSpec mask = mask_of(p, b);
  std::fill(dk.begin(), dk.end(), 0.0f);
  std::fill(dv.begin(), dv.end(), 0.0f);
  load_k_tile(p, b, hk, c0, nc, kt);
  for (int h = hk * p.group(); h < (hk + 1) * p.group(); ++h) {
    for (int r0 = 0; r0 < nq; r0 += kTileQ) {
      const int nr = std::min(nq, r0 + kTileQ) - r0;
      const math::KeyRange kr = math::visible_keys_of_rows(mask, r0, r0 + nr);
      if (kr.end <= c0 || kr.begin >= c0 + nc) continue;  // this q tile never sees the kv tile
      load_q_tile(p, dsum, total_q, b, h, r0, nr, qt);
      scores(p, mask, qt, kt, r0, nr, c0, nc, sc);
      for (int i = 0; i < nr; ++i) {
        const float* qi = &qt.q[static_cast<std::size_t>(i) * D];
        const float* gi = &qt.dout[static_cast<std::size_t>(i) * D];
        for (int j = 0; j < nc; ++j) {
          const float pij = sc.pr[static_cast<std::size_t>(i) * kTileK + j];
          const float dsij = sc.ds[static_cast<std::size_t>(i) * kTileK + j];
          if (pij == 0.0f && dsij == 0.0f) continue;
          float* dvj = &dv[static_cast<std::size_t>(j) * D];
          float* dkj = &dk[static_cast<std::size_t>(j) * D];
          for (int d = 0; d < D; ++d) {
            dvj[d] += pij * gi[d];
            dkj[d] += dsij * qi[d];
          }
        }
      }
    }
  }
  const float scale = p.mask.scale;
  for (int j = 0; j < nc; ++j) {
    const std::int64_t kb = k_elem(p, p.dk, b, c0 + j, hk), vb = k_elem(p, p.dv, b, c0 + j, hk);
    for (int d = 0; d < D; ++d) {
      math::store_from_float(p.dk.ptr, kb + d, p.dtype, dk[static_cast<std::size_t>(j) * D + d] * scale);
      math::store_from_float(p.dv.ptr, vb + d, p.dtype, dv[static_cast<std::size_t>(j) * D + d]);
    }
  }
}

// Pass 2: dQ of one (q head, q tile) over the kv tiles its rows see.
void dq_tile(const BackwardParams& p, const std::vector<float>& dsum, std::int64_t total_q, const TileItem& item,
             int h, QTile& qt, KTile& kt, Scores& sc, std::vector<float>& dq) {
  const int D = p.head_dim;
  const int b = item.b, r0 = item.row0;
  const int nr = std::min(p.q_len(b), r0 + kTileQ) - r0;
  const int hk = h / p.group();
  const math::MaskSpec mask = mask_of(p, b);
  std::fill(dq.begin(), dq.end(), 0.0f);
  load_q_tile(p, dsum, total_q, b, h, r0, nr, qt);
  const math::KeyRange kr = math::visible_keys_of_rows(mask, r0, r0 + nr);
  for (int c0 = kr.begin; c0 < kr.end; c0 += kTileK) {
    const int nc = std::min(kr.end, c0 + kTileK) - c0;
    load_k_tile(p, b, hk, c0, nc, kt);
    scores(p, mask, qt, kt, r0, nr, c0, nc, sc);
    for (int i = 0; i < nr; ++i) {
      float* dqi = &dq[static_cast<std::size_t>(i) * D];
      for (int j = 0; j < nc; ++j) {
        const float dsij = sc.ds[static_cast<std::size_t>(i) * kTileK + j];
        if (dsij == 0.0f) continue;
        const float* kj = &kt.k[static_cast<std::size_t>(j) * D];
        for (int d = 0; d < D; ++d) dqi[d] += dsij * kj[d];
      }
    }
  }
  const float scale = p.mask.scale;
  for (int i = 0; i < nr; ++i) {
    const std::int64_t qb = q_elem(p, p.dq, b, r0 + i, h);
    for (int d = 0; d < D; ++d)
      math::store_from_float(p.dq.ptr, qb + d, p.dtype, dq[static_cast<std::size_t>(i) * D + d] * scale);
  }
}

}  // namespace

void attention_backward(const BackwardParams& p) {
  const std::int64_t total_q = p.total_q;
  const std::vector<float> dsum = row_dots(p, total_q);
  const int D = p.head_dim;

  // Every kv tile is visited (even one no query sees) so that every dK/dV element is written.
  std::vector<TileItem> ktiles, qtiles;
  for (int b = 0; b < p.batch; ++b) {
    for (int c = 0; c < p.k_len(b); c += kTileK) ktiles.push_back({b, c});
    for (int r = 0; r < p.q_len(b); r += kTileQ) qtiles.push_back({b, r});
  }
  parallel_for(static_cast<std::int64_t>(ktiles.size()) * p.heads_kv, p.num_threads,
               [&](std::int64_t lo, std::int64_t hi) {
                 QTile qt(D);
                 KTile kt(D);
                 Scores sc;
                 std::vector<float> dk(static_cast<std::size_t>(kTileK) * D), dv(dk.size());
                 for (std::int64_t it = lo; it < hi; ++it)
                   dkdv_tile(p, dsum, total_q, ktiles[static_cast<std::size_t>(it / p.heads_kv)],
                             static_cast<int>(it % p.heads_kv), qt, kt, sc, dk, dv);
               });
  parallel_for(static_cast<std::int64_t>(qtiles.size()) * p.heads_q, p.num_threads,
               [&](std::int64_t lo, std::int64_t hi) {
                 QTile qt(D);
                 KTile kt(D);
                 Scores sc;
                 std::vector<float> dq(static_cast<std::size_t>(kTileQ) * D);
                 for (std::int64_t it = lo; it < hi; ++it)
                   dq_tile(p, dsum, total_q, qtiles[static_cast<std::size_t>(it / p.heads_q)],
                           static_cast<int>(it % p.heads_q), qt, kt, sc, dq);
               });
}

}  // namespace tessera::cpu
