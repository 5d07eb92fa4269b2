// The double-precision oracle. Deliberately naive: S and P are materialised per (batch, head)
// so every formula of the semantics is visible in one place.
#include "cpu/reference.h"

#include <algorithm>
#include <cmath>

#include "cpu/parallel.h"
#include "math/dtype_convert.h"
#include "math/mask.h"

namespace tessera::cpu::reference {

namespace {

using Mat = std::vector<double>;  // row-major, rows x head_dim or rows x keys

struct Seq {
  std::int64_t q0, k0;  // packed row of the first query / key
  int nq, nk;
};

Seq seq_of(const AttentionParams& p, int b) {
  Seq s;
  s.nq = p.q_len(b);
  s.nk = p.k_len(b);
  s.q0 = p.q_packed_start(b);
  s.k0 = p.k_packed_start(b);
  return s;
}

// n rows of head h of sequence b, starting at the sequence's first row, as doubles, times
// `factor` (an FP8 descale; 1 otherwise) in double: the dequantised values exactly.
Mat load(const AttentionParams& p, const StridedPtr& t, int b, bool is_q, int n, int h, double factor = 1.0) {
  Mat out(static_cast<std::size_t>(n) * p.head_dim);
  const std::int64_t start = is_q ? p.q_start(b) : p.k_start(b);
  for (int i = 0; i < n; ++i) {
    const std::int64_t base = p.ragged() ? t.offset(0, start + i, h) : t.offset(b, i, h);
    for (int d = 0; d < p.head_dim; ++d)
      out[static_cast<std::size_t>(i) * p.head_dim + d] = factor * math::load_as_float(t.ptr, base + d, p.dtype);
  }
  return out;
}

// Softmax probabilities of one (b, h): P (nq x nk, 0 where masked), the row LSE, and the
// soft-cap derivative ds/ds_raw per entry (1 without a cap).
struct Probs {
  Mat p, dcap;
  std::vector<double> lse;
};

Probs probs(const AttentionParams& p, const Mat& q, const Mat& k, int nq, int nk) {
  const math::MaskSpec mask = math::MaskSpec::make(nq, nk, p.mask.causal, p.mask.window_left, p.mask.window_right);
  const double scale = p.mask.scale, cap = p.mask.softcap;
  Probs r;
  r.p.assign(static_cast<std::size_t>(nq) * nk, 0.0);
  r.dcap.assign(static_cast<std::size_t>(nq) * nk, 1.0);
  r.lse.assign(static_cast<std::size_t>(nq), -INFINITY);
  std::vector<double> s(static_cast<std::size_t>(nk));
  for (int i = 0; i < nq; ++i) {
    double m = -INFINITY;
    for (int j = 0; j < nk; ++j) {
      double dot = 0.0;
      for (int d = 0; d < p.head_dim; ++d)
        dot += q[static_cast<std::size_t>(i) * p.head_dim + d] * k[static_cast<std::size_t>(j) * p.head_dim + d];
      double v = scale * dot;
      if (cap > 0.0) {  // the cap comes before the mask
        const double t = std::tanh(v / cap);
        v = cap * t;
        r.dcap[static_cast<std::size_t>(i) * nk + j] = 1.0 - t * t;
      }
      s[j] = math::key_visible(mask, i, j) ? v : -INFINITY;
      m = std::max(m, s[j]);
    }
    if (m == -INFINITY) continue;  // no visible key: P row stays 0, LSE -inf
    double sum = 0.0;
    for (int j = 0; j < nk; ++j) sum += s[j] == -INFINITY ? 0.0 : std::exp(s[j] - m);
    for (int j = 0; j < nk; ++j)
      r.p[static_cast<std::size_t>(i) * nk + j] = s[j] == -INFINITY ? 0.0 : std::exp(s[j] - m) / sum;
    r.lse[i] = m + std::log(sum);
  }
  return r;
}

}  // namespace

ForwardResult forward(const AttentionParams& p) {
  const std::int64_t total_q = p.total_q;
  const int D = p.head_dim;
  ForwardResult res;
  res.o.assign(static_cast<std::size_t>(total_q * p.heads_q * D), 0.0);
  res.lse.assign(static_cast<std::size_t>(total_q * p.heads_q), -INFINITY);
  // Each (b, h) writes only its own rows of o and lse.
  parallel_for(static_cast<std::int64_t>(p.batch) * p.heads_q, p.num_threads, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t bh = lo; bh < hi; ++bh) {
      const int b = static_cast<int>(bh / p.heads_q), h = static_cast<int>(bh % p.heads_q);
      const int hk = h / p.group();
      const Seq s = seq_of(p, b);
      if (s.nq == 0) continue;
      // FP8: every input dequantised by its (sequence, kv head) factor; a query head uses its
      // kv head's. Absent factors (and every other dtype) read 1.
      const Mat q = load(p, p.q, b, true, s.nq, h, p.q_descale.at(b, hk));
      const Mat k = load(p, p.k, b, false, s.nk, hk, p.k_descale.at(b, hk));
      const Mat v = load(p, p.v, b, false, s.nk, hk, p.v_descale.at(b, hk));
      const Probs pr = probs(p, q, k, s.nq, s.nk);
      for (int i = 0; i < s.nq; ++i) {
        double* o = &res.o[static_cast<std::size_t>(((s.q0 + i) * p.heads_q + h) * D)];
        for (int j = 0; j < s.nk; ++j) {
          const double w = pr.p[static_cast<std::size_t>(i) * s.nk + j];
          for (int d = 0; d < D; ++d) o[d] += w * v[static_cast<std::size_t>(j) * D + d];
        }
        res.lse[static_cast<std::size_t>(h * total_q + s.q0 + i)] = pr.lse[i];
      }
    }
  });
  return res;
}

BackwardResult backward(const BackwardParams& p) {
  const std::int64_t total_q = p.total_q, total_k = p.total_k;
  const int D = p.head_dim;
  const double scale = p.mask.scale;
  BackwardResult res;
  res.dq.assign(static_cast<std::size_t>(total_q * p.heads_q * D), 0.0);
  res.dk.assign(static_cast<std::size_t>(total_k * p.heads_kv * D), 0.0);
  res.dv.assign(static_cast<std::size_t>(total_k * p.heads_kv * D), 0.0);
  // One task per (b, kv head): it owns that head's dk/dv and the dq of its query heads.
  parallel_for(static_cast<std::int64_t>(p.batch) * p.heads_kv, p.num_threads, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t bh = lo; bh < hi; ++bh) {
      const int b = static_cast<int>(bh / p.heads_kv), hk = static_cast<int>(bh % p.heads_kv);
      const Seq s = seq_of(p, b);
      if (s.nq == 0 || s.nk == 0) continue;
      const Mat k = load(p, p.k, b, false, s.nk, hk);
      const Mat v = load(p, p.v, b, false, s.nk, hk);
      for (int h = hk * p.group(); h < (hk + 1) * p.group(); ++h) {
        const Mat q = load(p, p.q, b, true, s.nq, h);
        const Mat dout = load(p, p.dout, b, true, s.nq, h);
        const Probs pr = probs(p, q, k, s.nq, s.nk);
        for (int i = 0; i < s.nq; ++i) {
          const double* doi = &dout[static_cast<std::size_t>(i) * D];
          // O_i recomputed in double, then D_i = <dO_i, O_i> = sum_j P_ij dP_ij.
          std::vector<double> o(static_cast<std::size_t>(D), 0.0), dp(static_cast<std::size_t>(s.nk), 0.0);
          for (int j = 0; j < s.nk; ++j) {
            const double w = pr.p[static_cast<std::size_t>(i) * s.nk + j];
            double acc = 0.0;
            for (int d = 0; d < D; ++d) {
              o[d] += w * v[static_cast<std::size_t>(j) * D + d];
              acc += doi[d] * v[static_cast<std::size_t>(j) * D + d];
            }
            dp[j] = acc;
          }
          double di = 0.0;
          for (int d = 0; d < D; ++d) di += doi[d] * o[d];
          double* dqi = &res.dq[static_cast<std::size_t>(((s.q0 + i) * p.heads_q + h) * D)];
          for (int j = 0; j < s.nk; ++j) {
            const std::size_t ij = static_cast<std::size_t>(i) * s.nk + j;
            const double pij = pr.p[ij];
            if (pij == 0.0) continue;  // masked (or underflowed) entries carry no gradient
            // d/ds_raw of the loss: softmax backward times the soft-cap chain rule factor.
            const double ds = pij * (dp[j] - di) * pr.dcap[ij];
            double* dkj = &res.dk[static_cast<std::size_t>(((s.k0 + j) * p.heads_kv + hk) * D)];
            double* dvj = &res.dv[static_cast<std::size_t>(((s.k0 + j) * p.heads_kv + hk) * D)];
            for (int d = 0; d < D; ++d) {
              dqi[d] += scale * ds * k[static_cast<std::size_t>(j) * D + d];
              dkj[d] += scale * ds * q[static_cast<std::size_t>(i) * D + d];
              dvj[d] += pij * doi[d];
            }
          }
        }
      }
    }
  });
  return res;
}

}  // namespace tessera::cpu::reference
