// The naive baselines of the tolerance rule (docs/TESTING.md): same-precision three-pass
// attention forward and backward, the FP8 baseline, and exact e4m3 rounding for test data.
// Declared in support/test_support.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "cpu/parallel.h"
#include "math/dtype_convert.h"
#include "math/mask.h"
#include "math/online_softmax.h"
#include "support/test_support.h"

namespace tessera::testing {

// ---------------------------------------------------------------------------------------------
// e4m3 rounding: values are k * 2^(e - 3) with k in [8, 16) for normals (e >= -6) and
// k * 2^-9 with k in [0, 8) for subnormals, so rounding is nearbyint at that quantum (ties to
// even k, i.e. to an even code), then saturation at 448.

float round_e4m3(float x) {
  if (std::isnan(x)) return x;
  const float a = std::fabs(x);
  if (a == 0.0f) return x;
  int e = 0;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): the binade's exponent is e - 1
  const float quantum = std::ldexp(1.0f, std::max(e - 1 - 3, -9));
  const float r = std::min(std::nearbyint(a / quantum) * quantum, 448.0f);
  return std::copysign(r, x);
}

std::uint8_t encode_e4m3(float x) {
  if (std::isnan(x)) return 0x7f;
  static const auto values = [] {  // codes 0 .. 0x7e: non-negative finite values, increasing
    std::vector<float> v(0x7f);
    for (int c = 0; c < 0x7f; ++c) v[static_cast<std::size_t>(c)] = math::fp8_to_float(static_cast<std::uint8_t>(c), 4);
    return v;
  }();
  const float r = std::fabs(round_e4m3(x));
  const auto code = static_cast<std::uint8_t>(std::lower_bound(values.begin(), values.end(), r) - values.begin());
  return static_cast<std::uint8_t>((std::signbit(x) ? 0x80 : 0) | code);
}

// ---------------------------------------------------------------------------------------------
// Same-precision naive attention.

namespace {

struct Rows {
  std::int64_t q0, k0;  // packed row of the sequence's first query / key
  int nq, nk;
};

Rows rows_of(const AttentionParams& p, int b) {
  Rows r;
  r.nq = p.q_len(b);
  r.nk = p.k_len(b);
  r.q0 = p.q_packed_start(b);
  r.k0 = p.k_packed_start(b);
  return r;
}

// Element (sequence b, row i of it, head h) of a (b, r, h, d) tensor.
std::int64_t elem(const AttentionParams& p, const StridedPtr& t, int b, std::int64_t seq_start, int i, int h) {
  return p.ragged() ? t.offset(0, seq_start + i, h) : t.offset(b, i, h);
}

std::vector<float> load_rows(const AttentionParams& p, const StridedPtr& t, int b, std::int64_t seq_start, int n,
                             int h) {
  std::vector<float> out(static_cast<std::size_t>(n) * p.head_dim);
  for (int i = 0; i < n; ++i) {
    const std::int64_t base = elem(p, t, b, seq_start, i, h);
    for (int d = 0; d < p.head_dim; ++d) out[static_cast<std::size_t>(i) * p.head_dim + d] = math::load_as_float(t.ptr, base + d, p.dtype);
  }
  return out;
}

// f(b, h, hk, rows) for every (sequence, query head) with query rows, in parallel; each call
// writes only the rows of its own (b, h).
template <typename F>
void for_each_sequence_head(const AttentionParams& p, F&& f) {
  cpu::parallel_for(static_cast<std::int64_t>(p.batch) * p.heads_q, 0, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t bh = begin; bh < end; ++bh) {
      const int b = static_cast<int>(bh / p.heads_q), h = static_cast<int>(bh % p.heads_q);
      const Rows r = rows_of(p, b);
      if (r.nq > 0) f(b, h, h / p.group(), r);
    }
  });
}

// a . b in fp32 in the variant's order (NaiveVariant in test_support.h).
float naive_dot(const float* a, const float* b, int n, NaiveVariant variant) {
  float acc = 0.0f;
  if (variant == NaiveVariant::kReverseDots) {
    for (int d = n - 1; d >= 0; --d) acc += a[d] * b[d];
  } else if (variant == NaiveVariant::kTwoLaneDots) {
    float odd = 0.0f;
    for (int d = 0; d < n; ++d) (d % 2 == 0 ? acc : odd) += a[d] * b[d];
    acc += odd;
  } else {
    for (int d = 0; d < n; ++d) acc += a[d] * b[d];
  }
  return acc;
}

// S (scaled, soft-capped, rounded; masked entries -inf), P rounded, per-row LSE, for one (b, h).
struct NaiveProbs {
  std::vector<float> s_tanh;  // tanh(s / c) before rounding, for the softcap derivative
  std::vector<float> p;
  std::vector<float> lse;
};

// With `saved_lse` (natural log, one per row), P = exp(s - lse) is recomputed from it as a
// backward from the saved LSE must; this carries the LSE's own fp32 rounding, which at large
// logits is the dominant error of every recomputing backward.
NaiveProbs naive_probs(const AttentionParams& p, const std::vector<float>& q, const std::vector<float>& k, int nq,
                       int nk, NaiveVariant variant, const std::vector<float>* saved_lse = nullptr) {
  const DType dt = p.dtype;
  const float cap = p.mask.softcap;
  const math::MaskSpec mask = math::MaskSpec::make(nq, nk, p.mask.causal, p.mask.window_left, p.mask.window_right);
  NaiveProbs r;
  r.p.assign(static_cast<std::size_t>(nq) * nk, 0.0f);
  r.s_tanh.assign(static_cast<std::size_t>(nq) * nk, 0.0f);
  r.lse.assign(static_cast<std::size_t>(nq), -INFINITY);
  std::vector<float> s(static_cast<std::size_t>(nk));
  for (int i = 0; i < nq; ++i) {
    const math::KeyRange kr = math::visible_keys(mask, i);
    float m = -INFINITY;
    for (int j = kr.begin; j < kr.end; ++j) {
      const float dot = naive_dot(&q[static_cast<std::size_t>(i) * p.head_dim], &k[static_cast<std::size_t>(j) * p.head_dim],
                                  p.head_dim, variant);
      float v = math::round_to(dt, dot * p.mask.scale);
      if (cap > 0.0f) {
        const float t = std::tanh(v / cap);
        r.s_tanh[static_cast<std::size_t>(i) * nk + j] = t;
        v = math::round_to(dt, cap * t);
      }
      s[j] = v;
      m = std::max(m, v);
    }
    if (kr.empty()) continue;
    // exp(x - y), or exp2(x log2 e - y log2 e) with both products rounded in fp32.
    const auto expd = [variant](float x, float y) {
      return variant == NaiveVariant::kExp2 ? std::exp2(x * math::kLog2e - y * math::kLog2e) : std::exp(x - y);
    };
    if (saved_lse != nullptr) {
      const float l = (*saved_lse)[static_cast<std::size_t>(i)];
      for (int j = kr.begin; j < kr.end && l != -INFINITY; ++j)
        r.p[static_cast<std::size_t>(i) * nk + j] = math::round_to(dt, expd(s[j], l));
      r.lse[i] = l;
      continue;
    }
    float sum = 0.0f;
    for (int j = kr.begin; j < kr.end; ++j) sum += expd(s[j], m);
    for (int j = kr.begin; j < kr.end; ++j)
      r.p[static_cast<std::size_t>(i) * nk + j] = math::round_to(dt, expd(s[j], m) / sum);
    r.lse[i] = m + std::log(sum);
  }
  return r;
}

// O = P V in float accumulation, rounded, into `o` (nq x head_dim).
std::vector<float> naive_pv(const AttentionParams& p, const std::vector<float>& prob, const std::vector<float>& v,
                            int nq, int nk) {
  std::vector<float> o(static_cast<std::size_t>(nq) * p.head_dim, 0.0f);
  for (int i = 0; i < nq; ++i) {
    float* oi = &o[static_cast<std::size_t>(i) * p.head_dim];
    for (int j = 0; j < nk; ++j) {
      const float w = prob[static_cast<std::size_t>(i) * nk + j];
      if (w == 0.0f) continue;
      const float* vj = &v[static_cast<std::size_t>(j) * p.head_dim];
      for (int d = 0; d < p.head_dim; ++d) oi[d] += w * vj[d];
    }
    for (int d = 0; d < p.head_dim; ++d) oi[d] = math::round_to(p.dtype, oi[d]);
  }
  return o;
}

}  // namespace

std::vector<double> naive_fp8_forward(const AttentionParams& p, std::vector<double>* lse) {
  const std::int64_t total_q = p.total_q;
  const int D = p.head_dim;
  const float cap = p.mask.softcap;
  std::vector<double> o(static_cast<std::size_t>(total_q * p.heads_q * D), 0.0);
  if (lse) lse->assign(static_cast<std::size_t>(total_q * p.heads_q), -INFINITY);
  for_each_sequence_head(p, [&](int b, int h, int hk, const Rows& r) {
    auto q = load_rows(p, p.q, b, p.q_start(b), r.nq, h);
    auto k = load_rows(p, p.k, b, p.k_start(b), r.nk, hk);
    const auto v = load_rows(p, p.v, b, p.k_start(b), r.nk, hk);  // stays fp8 (as stored)
    const float dq = p.q_descale.at(b, hk), dk = p.k_descale.at(b, hk), dv = p.v_descale.at(b, hk);
    for (float& x : q) x *= dq;  // dequantised in fp32
    for (float& x : k) x *= dk;
    const math::MaskSpec mask =
        math::MaskSpec::make(r.nq, r.nk, p.mask.causal, p.mask.window_left, p.mask.window_right);
    std::vector<float> s(static_cast<std::size_t>(r.nk)), acc(static_cast<std::size_t>(D));
    for (int i = 0; i < r.nq; ++i) {
      const math::KeyRange kr = math::visible_keys(mask, i);
      float m = -INFINITY;
      for (int j = kr.begin; j < kr.end; ++j) {
        float dot = 0.0f;
        for (int d = 0; d < D; ++d) dot += q[static_cast<std::size_t>(i) * D + d] * k[static_cast<std::size_t>(j) * D + d];
        float x = dot * p.mask.scale;
        if (cap > 0.0f) x = cap * std::tanh(x / cap);
        s[static_cast<std::size_t>(j)] = x;
        m = std::max(m, x);
      }
      double* oi = &o[static_cast<std::size_t>(((r.q0 + i) * p.heads_q + h) * D)];
      if (kr.empty()) continue;  // out 0, lse -inf
      float l = 0.0f;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int j = kr.begin; j < kr.end; ++j) {
        const float e = std::exp(s[static_cast<std::size_t>(j)] - m);
        l += e;
        const float p8 = round_e4m3(e * 256.0f);
        if (p8 == 0.0f) continue;
        const float* vj = &v[static_cast<std::size_t>(j) * D];
        for (int d = 0; d < D; ++d) acc[static_cast<std::size_t>(d)] += p8 * vj[d];
      }
      const float f = dv / (256.0f * l);
      for (int d = 0; d < D; ++d) oi[d] = math::round_to(DType::bf16, acc[static_cast<std::size_t>(d)] * f);
      if (lse) (*lse)[static_cast<std::size_t>(h * total_q + r.q0 + i)] = m + std::log(l);
    }
  });
  return o;
}

std::vector<double> naive_same_precision_forward(const AttentionParams& p, std::vector<double>* lse, NaiveVariant variant) {
  // kRowDotFromO is a backward variant; the fp8 baseline has one order only.
  if (variant == NaiveVariant::kRowDotFromO || (p.dtype == DType::e4m3 && variant != NaiveVariant::kSequential))
    throw std::invalid_argument("naive_same_precision_forward: variant must be kSequential, kReverseDots, kTwoLaneDots "
                                "or kExp2 (kSequential only for e4m3)");
  if (p.dtype == DType::e4m3) return naive_fp8_forward(p, lse);
  const std::int64_t total_q = p.total_q;
  std::vector<double> o(static_cast<std::size_t>(total_q * p.heads_q * p.head_dim), 0.0);
  if (lse) lse->assign(static_cast<std::size_t>(total_q * p.heads_q), -INFINITY);
  for_each_sequence_head(p, [&](int b, int h, int hk, const Rows& r) {
    const auto q = load_rows(p, p.q, b, p.q_start(b), r.nq, h);
    const auto k = load_rows(p, p.k, b, p.k_start(b), r.nk, hk);
    const auto v = load_rows(p, p.v, b, p.k_start(b), r.nk, hk);
    const NaiveProbs pr = naive_probs(p, q, k, r.nq, r.nk, variant);
    const auto oo = naive_pv(p, pr.p, v, r.nq, r.nk);
    for (int i = 0; i < r.nq; ++i) {
      for (int d = 0; d < p.head_dim; ++d)
        o[static_cast<std::size_t>(((r.q0 + i) * p.heads_q + h) * p.head_dim + d)] = oo[static_cast<std::size_t>(i) * p.head_dim + d];
      if (lse) (*lse)[static_cast<std::size_t>(h * total_q + r.q0 + i)] = pr.lse[i];
    }
  });
  return o;
}

NaiveGrads naive_same_precision_backward(const BackwardParams& p, NaiveVariant variant) {
  // P is recomputed against the saved LSE, which fixes the forward's scores: another dot order
  // or exponent base would pair them with an LSE they did not produce (errors ~1e4x at huge
  // logits), so the backward takes only the variants that keep them.
  if (variant != NaiveVariant::kSequential && variant != NaiveVariant::kRowDotFromO)
    throw std::invalid_argument("naive_same_precision_backward: variant must be kSequential or kRowDotFromO");
  const std::int64_t total_q = p.total_q, total_k = p.total_k;
  const int D = p.head_dim;
  const DType dt = p.dtype;
  NaiveGrads g;
  g.dq.assign(static_cast<std::size_t>(total_q * p.heads_q * D), 0.0);
  g.dk.assign(static_cast<std::size_t>(total_k * p.heads_kv * D), 0.0);
  g.dv.assign(static_cast<std::size_t>(total_k * p.heads_kv * D), 0.0);
  // One task per (b, kv head): it owns dk/dv of that head and dq of its query heads.
  cpu::parallel_for(static_cast<std::int64_t>(p.batch) * p.heads_kv, 0, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t bh = begin; bh < end; ++bh) {
      const int b = static_cast<int>(bh / p.heads_kv), hk = static_cast<int>(bh % p.heads_kv);
      const Rows r = rows_of(p, b);
      const auto k = load_rows(p, p.k, b, p.k_start(b), r.nk, hk);
      const auto v = load_rows(p, p.v, b, p.k_start(b), r.nk, hk);
      std::vector<float> dk(static_cast<std::size_t>(r.nk) * D, 0.0f), dv(dk.size(), 0.0f);
      for (int h = hk * p.group(); h < (hk + 1) * p.group() && r.nq > 0; ++h) {
        const auto q = load_rows(p, p.q, b, p.q_start(b), r.nq, h);
        const auto dout = load_rows(p, p.dout, b, p.q_start(b), r.nq, h);
        const bool rowdot_from_o = variant == NaiveVariant::kRowDotFromO;
        const auto out = rowdot_from_o ? load_rows(p, p.o, b, p.q_start(b), r.nq, h) : std::vector<float>();
        std::vector<float> saved;
        if (p.lse.ptr != nullptr) {
          saved.resize(static_cast<std::size_t>(r.nq));
          for (int i = 0; i < r.nq; ++i)
            saved[static_cast<std::size_t>(i)] = p.lse.ptr[p.lse.offset(b, (p.ragged() ? p.q_start(b) : 0) + i, h)];
        }
        const NaiveProbs pr = naive_probs(p, q, k, r.nq, r.nk, variant, saved.empty() ? nullptr : &saved);
        std::vector<float> dq(static_cast<std::size_t>(r.nq) * D, 0.0f);
        for (int i = 0; i < r.nq; ++i) {
          const float* doi = &dout[static_cast<std::size_t>(i) * D];
          std::vector<float> dp(static_cast<std::size_t>(r.nk), 0.0f);
          float rowdot = 0.0f;  // sum_j P dP: the softmax backward of a framework (uses P, not O)
          for (int j = 0; j < r.nk; ++j) {
            const float pij = pr.p[static_cast<std::size_t>(i) * r.nk + j];
            if (pij == 0.0f) continue;
            dp[j] = math::round_to(dt, naive_dot(doi, &v[static_cast<std::size_t>(j) * D], D, variant));
            rowdot += pij * dp[j];
          }
          if (rowdot_from_o) rowdot = naive_dot(doi, &out[static_cast<std::size_t>(i) * D], D, NaiveVariant::kSequential);
          rowdot = math::round_to(dt, rowdot);
          for (int j = 0; j < r.nk; ++j) {
            const float pij = pr.p[static_cast<std::size_t>(i) * r.nk + j];
            if (pij == 0.0f) continue;
            float ds = math::round_to(dt, pij * (dp[j] - rowdot));
            if (p.mask.softcap > 0.0f) {
              const float t = pr.s_tanh[static_cast<std::size_t>(i) * r.nk + j];
              ds = math::round_to(dt, ds * (1.0f - t * t));
            }
            const float w = ds * p.mask.scale;
            for (int d = 0; d < D; ++d) {
              dq[static_cast<std::size_t>(i) * D + d] += w * k[static_cast<std::size_t>(j) * D + d];
              dk[static_cast<std::size_t>(j) * D + d] += w * q[static_cast<std::size_t>(i) * D + d];
              dv[static_cast<std::size_t>(j) * D + d] += pij * doi[d];
            }
          }
        }
        for (int i = 0; i < r.nq; ++i)
          for (int d = 0; d < D; ++d)
            g.dq[static_cast<std::size_t>(((r.q0 + i) * p.heads_q + h) * D + d)] = math::round_to(dt, dq[static_cast<std::size_t>(i) * D + d]);
      }
      for (int j = 0; j < r.nk; ++j)
        for (int d = 0; d < D; ++d) {
          const std::size_t at = static_cast<std::size_t>(((r.k0 + j) * p.heads_kv + hk) * D + d);
          g.dk[at] = math::round_to(dt, dk[static_cast<std::size_t>(j) * D + d]);
          g.dv[at] = math::round_to(dt, dv[static_cast<std::size_t>(j) * D + d]);
        }
    }
  });
  return g;
}

}  // namespace tessera::testing
