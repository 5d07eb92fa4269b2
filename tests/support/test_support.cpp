#include "support/test_support.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "api/build_params.h"
#include "cpu/parallel.h"
#include "math/dtype_convert.h"
#include "math/mask.h"
#include "math/online_softmax.h"
#include "tessera/attention.h"

namespace tessera::testing {

namespace {

bool is_int(DType dtype) { return dtype == DType::i32; }

// Bytes of one poison element, so margins can be compared bitwise.
std::vector<unsigned char> poison_bytes(DType dtype) {
  std::vector<unsigned char> b(dtype_size(dtype));
  if (is_int(dtype)) {
    const std::int32_t v = std::numeric_limits<std::int32_t>::min();
    std::memcpy(b.data(), &v, 4);
  } else {
    math::store_from_float(b.data(), 0, dtype, NAN);
  }
  return b;
}

}  // namespace

HostTensor::HostTensor(DType dtype, std::vector<std::int64_t> shape, std::int64_t row_pad, std::int64_t margin)
    : dtype_(dtype), shape_(std::move(shape)), margin_(margin), elem_(static_cast<std::int64_t>(dtype_size(dtype))) {
  const int rank = static_cast<int>(shape_.size());
  strides_.assign(shape_.size(), 1);
  std::int64_t st = 1;
  for (int d = rank - 1; d >= 0; --d) {
    strides_[d] = st;
    st *= shape_[d];
    // Padding after each innermost row makes every outer stride non-contiguous.
    if (d == rank - 1) st += row_pad;
  }
  const std::int64_t n = numel();
  span_ = 0;
  if (n > 0) {
    span_ = 1;
    for (int d = 0; d < rank; ++d) span_ += (shape_[d] - 1) * strides_[d];
  }
  storage_.resize(static_cast<std::size_t>((span_ + 2 * margin_) * elem_));
  used_.assign(static_cast<std::size_t>(span_ + 2 * margin_), false);
  for (std::int64_t i = 0; i < n; ++i) used_[static_cast<std::size_t>(margin_ + offset_of_linear(i))] = true;
  poison();
}

Tensor HostTensor::view() const {
  return Tensor::from_arrays(base(), dtype_, static_cast<int>(shape_.size()), shape_.data(), strides_.data());
}

std::int64_t HostTensor::numel() const {
  std::int64_t n = 1;
  for (auto s : shape_) n *= s;
  return shape_.empty() ? 0 : n;
}

std::int64_t HostTensor::offset_of_linear(std::int64_t linear) const {
  std::int64_t off = 0;
  for (int d = static_cast<int>(shape_.size()) - 1; d >= 0; --d) {
    off += (linear % shape_[d]) * strides_[d];
    linear /= shape_[d];
  }
  return off;
}

float HostTensor::get(std::int64_t linear) const {
  return math::load_as_float(base(), offset_of_linear(linear), dtype_);
}

void HostTensor::set(std::int64_t linear, float v) {
  if (dtype_ == DType::e4m3)  // math::float_to_fp8 searches all codes: too slow for big inputs
    static_cast<std::uint8_t*>(base())[offset_of_linear(linear)] = encode_e4m3(v);
  else
    math::store_from_float(base(), offset_of_linear(linear), dtype_, v);
}

void HostTensor::set_int(std::int64_t linear, std::int32_t v) {
  static_cast<std::int32_t*>(base())[offset_of_linear(linear)] = v;
}

void HostTensor::fill_normal(std::mt19937_64& rng, float stddev, float mean) {
  std::normal_distribution<float> dist(mean, stddev);
  for (std::int64_t i = 0; i < numel(); ++i) set(i, dist(rng));
}

void HostTensor::fill_uniform(std::mt19937_64& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  for (std::int64_t i = 0; i < numel(); ++i) set(i, dist(rng));
}

void HostTensor::fill(float v) {
  for (std::int64_t i = 0; i < numel(); ++i) set(i, v);
}

void HostTensor::poison() {
  const auto p = poison_bytes(dtype_);
  for (std::size_t i = 0; i < storage_.size(); i += p.size()) std::memcpy(&storage_[i], p.data(), p.size());
}

std::int64_t HostTensor::count_nan() const {
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < numel(); ++i) {
    if (is_int(dtype_)) {
      count += static_cast<const std::int32_t*>(base())[offset_of_linear(i)] == std::numeric_limits<std::int32_t>::min();
    } else {
      count += std::isnan(get(i));
    }
  }
  return count;
}

bool HostTensor::margins_intact() const {
  const auto p = poison_bytes(dtype_);
  for (std::size_t e = 0; e < used_.size(); ++e) {
    if (used_[e]) continue;
    if (std::memcmp(&storage_[e * p.size()], p.data(), p.size()) != 0) return false;
  }
  return true;
}

HostTensor int_tensor(const std::vector<std::int32_t>& values) {
  HostTensor t(DType::i32, {static_cast<std::int64_t>(values.size())});
  for (std::size_t i = 0; i < values.size(); ++i) t.set_int(static_cast<std::int64_t>(i), values[i]);
  return t;
}

float poison_value(DType dtype) {
  return is_int(dtype) ? static_cast<float>(std::numeric_limits<std::int32_t>::min()) : NAN;
}

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
                       int nk, const std::vector<float>* saved_lse = nullptr) {
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
      float dot = 0.0f;
      for (int d = 0; d < p.head_dim; ++d) dot += q[static_cast<std::size_t>(i) * p.head_dim + d] * k[static_cast<std::size_t>(j) * p.head_dim + d];
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
    if (saved_lse != nullptr) {
      const float l = (*saved_lse)[static_cast<std::size_t>(i)];
      for (int j = kr.begin; j < kr.end && l != -INFINITY; ++j)
        r.p[static_cast<std::size_t>(i) * nk + j] = math::round_to(dt, std::exp(s[j] - l));
      r.lse[i] = l;
      continue;
    }
    float sum = 0.0f;
    for (int j = kr.begin; j < kr.end; ++j) sum += std::exp(s[j] - m);
    for (int j = kr.begin; j < kr.end; ++j)
      r.p[static_cast<std::size_t>(i) * nk + j] = math::round_to(dt, std::exp(s[j] - m) / sum);
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
  cpu::parallel_for(static_cast<std::int64_t>(p.batch) * p.heads_q, 0, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t bh = begin; bh < end; ++bh) {
      const int b = static_cast<int>(bh / p.heads_q), h = static_cast<int>(bh % p.heads_q);
      const int hk = h / p.group();
      const Rows r = rows_of(p, b);
      if (r.nq == 0) continue;
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
    }
  });
  return o;
}

std::vector<double> naive_same_precision_forward(const AttentionParams& p, std::vector<double>* lse) {
  if (p.dtype == DType::e4m3) return naive_fp8_forward(p, lse);
  const std::int64_t total_q = p.total_q;
  std::vector<double> o(static_cast<std::size_t>(total_q * p.heads_q * p.head_dim), 0.0);
  if (lse) lse->assign(static_cast<std::size_t>(total_q * p.heads_q), -INFINITY);
  // Each (b, h) writes its own rows only.
  cpu::parallel_for(static_cast<std::int64_t>(p.batch) * p.heads_q, 0, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t bh = begin; bh < end; ++bh) {
      const int b = static_cast<int>(bh / p.heads_q), h = static_cast<int>(bh % p.heads_q);
      const int hk = h / p.group();
      const Rows r = rows_of(p, b);
      if (r.nq == 0) continue;
      const auto q = load_rows(p, p.q, b, p.q_start(b), r.nq, h);
      const auto k = load_rows(p, p.k, b, p.k_start(b), r.nk, hk);
      const auto v = load_rows(p, p.v, b, p.k_start(b), r.nk, hk);
      const NaiveProbs pr = naive_probs(p, q, k, r.nq, r.nk);
      const auto oo = naive_pv(p, pr.p, v, r.nq, r.nk);
      for (int i = 0; i < r.nq; ++i) {
        for (int d = 0; d < p.head_dim; ++d)
          o[static_cast<std::size_t>(((r.q0 + i) * p.heads_q + h) * p.head_dim + d)] = oo[static_cast<std::size_t>(i) * p.head_dim + d];
        if (lse) (*lse)[static_cast<std::size_t>(h * total_q + r.q0 + i)] = pr.lse[i];
      }
    }
  });
  return o;
}

NaiveGrads naive_same_precision_backward(const BackwardParams& p) {
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
        std::vector<float> saved;
        if (p.lse.ptr != nullptr) {
          saved.resize(static_cast<std::size_t>(r.nq));
          for (int i = 0; i < r.nq; ++i)
            saved[static_cast<std::size_t>(i)] = p.lse.ptr[p.lse.offset(b, (p.ragged() ? p.q_start(b) : 0) + i, h)];
        }
        const NaiveProbs pr = naive_probs(p, q, k, r.nq, r.nk, saved.empty() ? nullptr : &saved);
        std::vector<float> dq(static_cast<std::size_t>(r.nq) * D, 0.0f);
        for (int i = 0; i < r.nq; ++i) {
          const float* doi = &dout[static_cast<std::size_t>(i) * D];
          std::vector<float> dp(static_cast<std::size_t>(r.nk), 0.0f);
          float rowdot = 0.0f;  // sum_j P dP: the softmax backward of a framework (uses P, not O)
          for (int j = 0; j < r.nk; ++j) {
            const float pij = pr.p[static_cast<std::size_t>(i) * r.nk + j];
            if (pij == 0.0f) continue;
            float acc = 0.0f;
            for (int d = 0; d < D; ++d) acc += doi[d] * v[static_cast<std::size_t>(j) * D + d];
            dp[j] = math::round_to(dt, acc);
            rowdot += pij * dp[j];
          }
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

// ---------------------------------------------------------------------------------------------
// Tolerances.

double max_abs_error(const std::vector<double>& a, const std::vector<double>& ref) {
  if (a.size() != ref.size()) return INFINITY;
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(ref[i])) return INFINITY;
    if (std::isinf(ref[i]) || std::isinf(a[i])) {
      if (a[i] != ref[i]) return INFINITY;
      continue;
    }
    worst = std::max(worst, std::fabs(a[i] - ref[i]));
  }
  return worst;
}

ErrorStats error_stats(const std::vector<double>& a, const std::vector<double>& ref) {
  ErrorStats st;
  st.max_abs = max_abs_error(a, ref);
  if (std::isinf(st.max_abs)) {
    st.rmse = INFINITY;
    return st;
  }
  double sum = 0.0;
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(ref[i])) continue;
    const double e = a[i] - ref[i];
    sum += e * e;
    ++n;
  }
  st.rmse = n ? std::sqrt(sum / static_cast<double>(n)) : 0.0;
  return st;
}

double rounding_floor(DType dtype, double scale) {
  double eps = 0.0;
  switch (dtype) {
    case DType::f32: eps = std::ldexp(1.0, -23); break;
    case DType::f16: eps = std::ldexp(1.0, -10); break;
    case DType::bf16: eps = std::ldexp(1.0, -7); break;
    case DType::e4m3: eps = std::ldexp(1.0, -3); break;
    case DType::e5m2: eps = std::ldexp(1.0, -2); break;
    case DType::i32: eps = 0.0; break;
  }
  // Two ulps for 16-bit outputs: the kernel's own output rounding plus one of accumulation-
  // order noise. fp32 outputs are not rounded to anything coarser than the accumulator, so
  // the order of summation over hundreds of keys shows directly: seen here, a tiled fp32
  // backward at 2.8e-6 against a naive one at 0.9e-6 (|dq| ~ 1) on the same inputs. Sixteen
  // ulps (~2e-6 relative) cover that and still fail any real defect by orders of magnitude.
  const double ulps = dtype == DType::f32 ? 16.0 : 2.0;
  return ulps * eps * std::max(1.0, scale);
}

double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v)
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  return m;
}

double tolerance(const std::vector<double>& naive, const std::vector<double>& oracle, DType dtype) {
  return 2.0 * max_abs_error(naive, oracle) + rounding_floor(dtype, max_abs(oracle));
}

// ---------------------------------------------------------------------------------------------
// Reading outputs back.

std::vector<double> gather_rows(const HostTensor& t, const StridedPtr& ptr, DType dtype, int batch,
                                const std::vector<std::int64_t>& row_starts, const std::vector<int>& row_lens,
                                int heads, int head_dim, bool ragged) {
  std::int64_t total = 0;
  for (int b = 0; b < batch; ++b) total = std::max(total, row_starts[b] + row_lens[b]);
  std::vector<double> out(static_cast<std::size_t>(total * heads * head_dim), NAN);
  // Offsets come from ptr relative to ptr.ptr, which lies inside t's storage.
  (void)t;
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < row_lens[b]; ++i)
      for (int h = 0; h < heads; ++h) {
        const std::int64_t base = ragged ? ptr.offset(0, row_starts[b] + i, h) : ptr.offset(b, i, h);
        for (int d = 0; d < head_dim; ++d)
          out[static_cast<std::size_t>(((row_starts[b] + i) * heads + h) * head_dim + d)] = math::load_as_float(ptr.ptr, base + d, dtype);
      }
  return out;
}

std::vector<double> gather_lse(const HostTensor& t, const LsePtr& ptr, int batch,
                               const std::vector<std::int64_t>& row_starts, const std::vector<int>& row_lens,
                               int heads, bool ragged) {
  std::int64_t total = 0;
  for (int b = 0; b < batch; ++b) total = std::max(total, row_starts[b] + row_lens[b]);
  std::vector<double> out(static_cast<std::size_t>(total * heads), NAN);
  (void)t;
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < row_lens[b]; ++i)
      for (int h = 0; h < heads; ++h)
        out[static_cast<std::size_t>(h * total + row_starts[b] + i)] =
            ptr.ptr[ragged ? ptr.offset(0, row_starts[b] + i, h) : ptr.offset(b, i, h)];
  return out;
}

void q_rows(const AttentionParams& p, std::vector<std::int64_t>* starts, std::vector<int>* lens) {
  starts->clear();
  lens->clear();
  for (int b = 0; b < p.batch; ++b) {
    starts->push_back(p.q_packed_start(b));
    lens->push_back(p.q_len(b));
  }
}

void k_rows(const AttentionParams& p, std::vector<std::int64_t>* starts, std::vector<int>* lens) {
  starts->clear();
  lens->clear();
  for (int b = 0; b < p.batch; ++b) {
    starts->push_back(p.k_packed_start(b));
    lens->push_back(p.k_len(b));
  }
}

std::mt19937_64 fresh_rng() {
  std::uint64_t seed = 0;
  if (const char* env = std::getenv("TESSERA_SEED"); env && *env) {
    seed = std::strtoull(env, nullptr, 10);
  } else {
    seed = static_cast<std::uint64_t>(std::chrono::high_resolution_clock::now().time_since_epoch().count());
  }
  std::printf("[ seed     ] TESSERA_SEED=%llu\n", static_cast<unsigned long long>(seed));
  return std::mt19937_64(seed);
}

}  // namespace tessera::testing

// ---------------------------------------------------------------------------------------------
// AttentionCase.

namespace tessera::testing {

namespace {

std::vector<std::int32_t> prefix_sums(const std::vector<int>& lens) {
  std::vector<std::int32_t> cu{0};
  for (int n : lens) cu.push_back(cu.back() + n);
  return cu;
}

}  // namespace

std::string CaseSpec::name() const {
  std::string s = std::string(dtype_name(dtype)) + " hq" + std::to_string(heads_q) + "/hkv" + std::to_string(heads_kv) +
                  " d" + std::to_string(head_dim);
  if (ragged()) {
    s += " ragged q[";
    for (int n : q_lens) s += std::to_string(n) + ",";
    s += "] k[";
    for (int n : k_lens) s += std::to_string(n) + ",";
    s += "]";
  } else {
    s += " b" + std::to_string(batch) + " sq" + std::to_string(seq_q) + " sk" + std::to_string(seq_k);
  }
  if (options.causal) s += " causal";
  if (options.window_left >= 0 || options.window_right >= 0)
    s += " window(" + std::to_string(options.window_left) + "," + std::to_string(options.window_right) + ")";
  if (options.softcap > 0.0f) s += " softcap" + std::to_string(options.softcap);
  if (row_pad > 0) s += " padded";
  if (fp8()) {
    s += " descale(";
    s += descale_q ? "q" : "-";
    s += descale_k ? "k" : "-";
    s += descale_v ? "v" : "-";
    s += ")";
  }
  return s;
}

AttentionCase::AttentionCase(const CaseSpec& s, std::mt19937_64& rng) : spec(s) {
  const std::int64_t hq = s.heads_q, hk = s.heads_kv, D = s.head_dim;
  std::vector<std::int64_t> qshape, kshape, lshape;
  if (s.ragged()) {
    const auto cq = prefix_sums(s.q_lens), ck = prefix_sums(s.k_lens);
    cu_q = int_tensor(cq);
    cu_k = int_tensor(ck);
    qshape = {cq.back(), hq, D};
    kshape = {ck.back(), hk, D};
    lshape = {hq, cq.back()};
  } else {
    qshape = {s.batch, s.seq_q, hq, D};
    kshape = {s.batch, s.seq_k, hk, D};
    lshape = {s.batch, hq, s.seq_q};
  }
  q = HostTensor(s.dtype, qshape, s.row_pad);
  k = HostTensor(s.dtype, kshape, s.row_pad);
  v = HostTensor(s.dtype, kshape, s.row_pad);
  out = HostTensor(s.fp8() ? DType::bf16 : s.dtype, qshape, s.row_pad);
  dout = HostTensor(s.dtype, qshape, s.row_pad);
  dq = HostTensor(s.dtype, qshape, s.row_pad);
  dk = HostTensor(s.dtype, kshape, s.row_pad);
  dv = HostTensor(s.dtype, kshape, s.row_pad);
  lse = HostTensor(DType::f32, lshape, s.row_pad);
  if (s.fp8()) {
    fill_fp8(rng);
    return;
  }
  q.fill_normal(rng, s.input_std);
  k.fill_normal(rng, s.input_std);
  v.fill_normal(rng);
  dout.fill_normal(rng);
}

void AttentionCase::fill_fp8(std::mt19937_64& rng) {
  const CaseSpec& s = spec;
  const int B = s.num_sequences(), hq = s.heads_q, hk = s.heads_kv, D = s.head_dim, group = hq / hk;
  const std::vector<std::int64_t> dshape{B, hk};
  std::uniform_real_distribution<float> amax_in_stds(4.0f, 8.0f);
  // Descales as a per-(sequence, kv head) quantiser would pick them: amax / 448.
  auto make_descale = [&](bool present, float stddev) {
    HostTensor t;
    if (!present) return t;
    t = HostTensor(DType::f32, dshape, s.row_pad);
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, amax_in_stds(rng) * stddev / 448.0f);
    return t;
  };
  descale_q = make_descale(s.descale_q, s.input_std);
  descale_k = make_descale(s.descale_k, s.input_std);
  descale_v = make_descale(s.descale_v, 1.0f);
  // Element (row, head, d) of a packed (rows, heads, D) enumeration: rows are the tensor's
  // leading dims flattened (b * seq + i for dense, the packed row for ragged).
  auto seq_of_row = [&](std::int64_t row, bool is_q) -> int {
    if (!s.ragged()) return static_cast<int>(row / (is_q ? s.seq_q : s.seq_k));
    const auto& lens = is_q ? s.q_lens : s.k_lens;
    std::int64_t start = 0;
    for (int b = 0; b < B; ++b) {
      start += lens[static_cast<std::size_t>(b)];
      if (row < start) return b;
    }
    return B - 1;
  };
  auto quantise = [&](HostTensor& t, const HostTensor& descale, int heads, int heads_per_kv, float stddev, bool is_q) {
    std::normal_distribution<float> dist(0.0f, stddev);
    const std::int64_t per_row = static_cast<std::int64_t>(heads) * D;
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      const std::int64_t row = i / per_row;
      const int h = static_cast<int>((i % per_row) / D);
      float x = dist(rng);
      if (descale.numel() > 0) x /= descale.get(static_cast<std::int64_t>(seq_of_row(row, is_q)) * hk + h / heads_per_kv);
      t.set(i, x);
    }
  };
  quantise(q, descale_q, hq, group, s.input_std, true);
  quantise(k, descale_k, hk, 1, s.input_std, false);
  quantise(v, descale_v, hk, 1, 1.0f, false);
}

Fp8Descale AttentionCase::descales() const {
  Fp8Descale d;
  if (descale_q.numel() > 0) d.q = descale_q.view();
  if (descale_k.numel() > 0) d.k = descale_k.view();
  if (descale_v.numel() > 0) d.v = descale_v.view();
  return d;
}

AttentionOptions AttentionCase::options() const {
  AttentionOptions o = spec.options;
  o.return_lse = true;
  return o;
}

void AttentionCase::forward(const ExecutionContext& ctx) {
  out.poison();
  lse.poison();
  if (spec.fp8() && spec.ragged())
    attention_forward_fp8_ragged(q.view(), k.view(), v.view(), cu_q.view(), cu_k.view(), descales(), out.view(),
                                 lse.view(), options(), ctx);
  else if (spec.fp8())
    attention_forward_fp8(q.view(), k.view(), v.view(), descales(), out.view(), lse.view(), options(), ctx);
  else if (spec.ragged())
    attention_forward_ragged(q.view(), k.view(), v.view(), cu_q.view(), cu_k.view(), out.view(), lse.view(), options(), ctx);
  else
    attention_forward(q.view(), k.view(), v.view(), out.view(), lse.view(), options(), ctx);
}

void AttentionCase::backward(const ExecutionContext& ctx) {
  dq.poison();
  dk.poison();
  dv.poison();
  if (spec.ragged())
    attention_backward_ragged(q.view(), k.view(), v.view(), cu_q.view(), cu_k.view(), out.view(), dout.view(),
                              lse.view(), dq.view(), dk.view(), dv.view(), options(), ctx);
  else
    attention_backward(q.view(), k.view(), v.view(), out.view(), dout.view(), lse.view(), dq.view(), dk.view(),
                       dv.view(), options(), ctx);
}

AttentionParams AttentionCase::forward_params() const {
  const Tensor none;
  if (spec.fp8())
    return api::build_forward_fp8_params(q.view(), k.view(), v.view(), spec.ragged() ? cu_q.view() : none,
                                         spec.ragged() ? cu_k.view() : none, descales(), out.view(), lse.view(),
                                         options(), {});
  return api::build_forward_params(q.view(), k.view(), v.view(), spec.ragged() ? cu_q.view() : none,
                                   spec.ragged() ? cu_k.view() : none, out.view(), lse.view(), options(), {});
}

BackwardParams AttentionCase::backward_params() const {
  const Tensor none;
  return api::build_backward_params(q.view(), k.view(), v.view(), spec.ragged() ? cu_q.view() : none,
                                    spec.ragged() ? cu_k.view() : none, out.view(), dout.view(), lse.view(),
                                    dq.view(), dk.view(), dv.view(), options(), {});
}

std::vector<double> AttentionCase::out_packed() const {
  const AttentionParams p = forward_params();
  std::vector<std::int64_t> st;
  std::vector<int> ln;
  q_rows(p, &st, &ln);
  return gather_rows(out, p.o, p.out_dtype(), p.batch, st, ln, p.heads_q, p.head_dim, p.ragged());
}

std::vector<double> AttentionCase::lse_packed() const {
  const AttentionParams p = forward_params();
  std::vector<std::int64_t> st;
  std::vector<int> ln;
  q_rows(p, &st, &ln);
  return gather_lse(lse, p.lse, p.batch, st, ln, p.heads_q, p.ragged());
}

std::vector<double> AttentionCase::dq_packed() const {
  const BackwardParams p = backward_params();
  std::vector<std::int64_t> st;
  std::vector<int> ln;
  q_rows(p, &st, &ln);
  return gather_rows(dq, p.dq, p.dtype, p.batch, st, ln, p.heads_q, p.head_dim, p.ragged());
}

std::vector<double> AttentionCase::dk_packed() const {
  const BackwardParams p = backward_params();
  std::vector<std::int64_t> st;
  std::vector<int> ln;
  k_rows(p, &st, &ln);
  return gather_rows(dk, p.dk, p.dtype, p.batch, st, ln, p.heads_kv, p.head_dim, p.ragged());
}

std::vector<double> AttentionCase::dv_packed() const {
  const BackwardParams p = backward_params();
  std::vector<std::int64_t> st;
  std::vector<int> ln;
  k_rows(p, &st, &ln);
  return gather_rows(dv, p.dv, p.dtype, p.batch, st, ln, p.heads_kv, p.head_dim, p.ragged());
}

AttentionOptions opts(bool causal, int left, int right, float softcap) {
  AttentionOptions o;
  o.causal = causal;
  o.window_left = left;
  o.window_right = right;
  o.softcap = softcap;
  return o;
}

CaseSpec dense(DType dt, int batch, int sq, int sk, int hq, int hkv, int d, AttentionOptions o, std::int64_t pad) {
  CaseSpec s;
  s.dtype = dt;
  s.batch = batch;
  s.seq_q = sq;
  s.seq_k = sk;
  s.heads_q = hq;
  s.heads_kv = hkv;
  s.head_dim = d;
  s.options = o;
  s.row_pad = pad;
  return s;
}

CaseSpec ragged(DType dt, std::vector<int> ql, std::vector<int> kl, int hq, int hkv, int d, AttentionOptions o,
                std::int64_t pad) {
  CaseSpec s = dense(dt, 0, 0, 0, hq, hkv, d, o, pad);
  s.q_lens = std::move(ql);
  s.k_lens = std::move(kl);
  return s;
}

CaseSpec dense_fp8(int batch, int sq, int sk, int hq, int hkv, int d, AttentionOptions o, std::int64_t pad) {
  return dense(DType::e4m3, batch, sq, sk, hq, hkv, d, o, pad);
}

CaseSpec ragged_fp8(std::vector<int> ql, std::vector<int> kl, int hq, int hkv, int d, AttentionOptions o,
                    std::int64_t pad) {
  return ragged(DType::e4m3, std::move(ql), std::move(kl), hq, hkv, d, o, pad);
}

CaseSpec without_descales(CaseSpec s, bool q, bool k, bool v) {
  s.descale_q = !q && s.descale_q;
  s.descale_k = !k && s.descale_k;
  s.descale_v = !v && s.descale_v;
  return s;
}

}  // namespace tessera::testing
