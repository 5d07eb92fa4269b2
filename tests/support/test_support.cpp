#include "support/test_support.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "api/build_params.h"
#include "math/dtype_convert.h"
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
  // A baseline with a NaN (or a size or infinity mismatch) has error +inf, which would make the
  // bound +inf and EXPECT_LE(err, bound) pass whatever the kernel wrote, +inf included.
  const double naive_error = max_abs_error(naive, oracle);
  if (!std::isfinite(naive_error))
    throw std::logic_error("tolerance: the naive baseline's error against the oracle is not finite");
  return 2.0 * naive_error + rounding_floor(dtype, max_abs(oracle));
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

void AttentionCase::set_score_ramps(float q0, float k0_max) {
  const CaseSpec& s = spec;
  if (s.ragged() || s.seq_k < 2) throw std::invalid_argument("set_score_ramps: dense cases with seq_k >= 2");
  const std::int64_t D = s.head_dim, hq = s.heads_q, hk = s.heads_kv, group = hq / hk;
  auto stored = [&](const HostTensor& descale, std::int64_t b, std::int64_t kv_head, float x) {
    if (descale.numel() == 0) return x;
    const float y = x / descale.get(b * hk + kv_head);
    if (std::fabs(y) > 448.0f) throw std::invalid_argument("set_score_ramps: a value past e4m3's 448 after its descale");
    return y;
  };
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t i = 0; i < s.seq_q; ++i)
      for (std::int64_t h = 0; h < hq; ++h) q.set(((b * s.seq_q + i) * hq + h) * D, stored(descale_q, b, h / group, q0));
    for (std::int64_t j = 0; j < s.seq_k; ++j)
      for (std::int64_t h = 0; h < hk; ++h) {
        const float step = static_cast<float>(h % 2 == 0 ? j : s.seq_k - 1 - j) / static_cast<float>(s.seq_k - 1);
        k.set(((b * s.seq_k + j) * hk + h) * D, stored(descale_k, b, h, k0_max * step));
      }
  }
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
