// Public dense/ragged attention and merge_states: validate every argument, build typed
// params, dispatch. Nothing is written before validation has passed.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "api/build_params.h"
#include "api/validate.h"
#include "dispatch/dispatch.h"
#include "tessera/attention.h"

namespace tessera {
namespace api {
namespace {

using validate::fail;
using validate::str;

constexpr auto kStorageTypes = {DType::f32, DType::f16, DType::bf16};

StridedPtr strided(const Tensor& t, bool ragged) {
  StridedPtr s;
  s.ptr = t.data;
  if (ragged) {
    s.batch = 0;
    s.row = t.stride[0];
    s.head = t.stride[1];
  } else {
    s.batch = t.stride[0];
    s.row = t.stride[1];
    s.head = t.stride[2];
  }
  return s;
}

void check_options(const AttentionOptions& o, int head_dim, MaskOptions* mask) {
  if (o.scale.has_value() && !(std::isfinite(*o.scale) && *o.scale > 0.0f))
    fail(ErrorCode::invalid_argument, "options.scale", "a finite value > 0", std::to_string(*o.scale));
  if (!(std::isfinite(o.softcap) && o.softcap >= 0.0f))
    fail(ErrorCode::invalid_argument, "options.softcap", "a finite value >= 0 (0 = off)", std::to_string(o.softcap));
  if (o.window_left < -1)
    fail(ErrorCode::invalid_argument, "options.window_left", ">= 0, or -1 for unbounded", str(o.window_left));
  if (o.window_right < -1)
    fail(ErrorCode::invalid_argument, "options.window_right", ">= 0, or -1 for unbounded", str(o.window_right));
  mask->scale = o.scale.value_or(1.0f / std::sqrt(static_cast<float>(head_dim)));
  validate::softcap_foldable(mask->scale, o.softcap, "options.softcap");
  mask->softcap = o.softcap;
  mask->causal = o.causal;
  mask->window_left = o.window_left;
  mask->window_right = o.window_right;
}

// Checks a cu_seqlens tensor; returns its batch size. For host-visible arrays, also every
// element (starts at 0, never decreases, ends at `total`) and the largest length.
int check_cu_seqlens(const Tensor& cu, const char* name, const Tensor& q, std::int64_t total, int* max_len) {
  validate::rank(cu, name, 1, "(batch + 1)");
  validate::dtype_is(cu, name, DType::i32);
  validate::same_device(cu, name, q, "q");
  validate::unit_stride(cu, name, 0, "its only dim");
  if (cu.shape[0] < 1) fail(ErrorCode::invalid_argument, name, "at least 1 entry (batch + 1)", "shape " + cu.shape_string());
  // The batch is an int: more entries would wrap it (and index the table out of range).
  if (cu.shape[0] - 1 > std::numeric_limits<int>::max())
    fail(ErrorCode::invalid_argument, name, "at most 2^31 entries (a batch of at most 2^31 - 1)",
         "shape " + cu.shape_string());
  const int batch = static_cast<int>(cu.shape[0] - 1);
  *max_len = static_cast<int>(std::min<std::int64_t>(total, std::numeric_limits<int>::max()));
  if (cu.device.kind != DeviceKind::cpu) return batch;  // device-resident: contents unchecked
  const auto* c = cu.ptr<const std::int32_t>();
  if (c[0] != 0) fail(ErrorCode::invalid_argument, std::string(name) + "[0]", "0", str(c[0]));
  int longest = 0;
  for (int b = 0; b < batch; ++b) {
    if (c[b + 1] < c[b])
      fail(ErrorCode::invalid_argument, std::string(name) + "[" + str(b + 1) + "]",
           "a non-decreasing sequence (>= " + str(c[b]) + ")", str(c[b + 1]));
    longest = std::max(longest, c[b + 1] - c[b]);
  }
  if (c[batch] != total)
    fail(ErrorCode::invalid_argument, std::string(name) + "[" + str(batch) + "]",
         "the total token count " + str(total) + " of the packed tensor", str(c[batch]));
  *max_len = longest;
  return batch;
}

void check_same_shape(const Tensor& t, const char* name, const Tensor& ref, const char* ref_name) {
  bool same = t.rank == ref.rank;
  for (int d = 0; same && d < t.rank; ++d) same = t.shape[d] == ref.shape[d];
  if (!same)
    fail(ErrorCode::invalid_argument, name, "shape " + ref.shape_string() + " (as " + ref_name + ")",
         "shape " + t.shape_string());
}

void check_int_range(std::int64_t v, const char* name) {
  if (v > std::numeric_limits<int>::max())
    fail(ErrorCode::invalid_argument, name, "at most 2^31 - 1", str(v));
}

// Which public function the params are built for: the dtype rules differ.
enum class Entry { forward, forward_fp8, backward };

// Storage dtypes of q/k/v/out. attention_forward(_ragged) and attention_backward(_ragged)
// take fp32/fp16/bf16 and say where fp8 goes instead; the fp8 forward takes e4m3 in, bf16 out.
void check_dtypes(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, Entry entry) {
  const bool fp8_in = q.dtype == DType::e4m3 || q.dtype == DType::e5m2;
  if (entry == Entry::forward && fp8_in)
    fail(ErrorCode::invalid_argument, "q",
         "dtype one of {fp32, fp16, bf16} (fp8_e4m3 inputs with their descales go through attention_forward_fp8)",
         std::string("dtype ") + dtype_name(q.dtype));
  if (entry == Entry::backward && fp8_in)
    fail(ErrorCode::unsupported, "q", "dtype one of {fp32, fp16, bf16} (there is no fp8 backward)",
         std::string("dtype ") + dtype_name(q.dtype));
  if (entry == Entry::forward_fp8) {
    if (q.dtype != DType::e4m3)
      fail(ErrorCode::invalid_argument, "q",
           "dtype fp8_e4m3 (other dtypes go through attention_forward)", std::string("dtype ") + dtype_name(q.dtype));
    validate::same_dtype(k, "k", q, "q");
    validate::same_dtype(v, "v", q, "q");
    if (out.dtype != DType::bf16)
      fail(ErrorCode::invalid_argument, "out", "dtype bf16 (the output of the fp8 forward)",
           std::string("dtype ") + dtype_name(out.dtype));
    return;
  }
  validate::dtype_in(q, "q", kStorageTypes);
  validate::same_dtype(k, "k", q, "q");
  validate::same_dtype(v, "v", q, "q");
  validate::same_dtype(out, "out", q, "q");
}

std::string shape_and_dtype(const Tensor& t) {
  return std::string("dtype ") + dtype_name(t.dtype) + ", " + str(t.rank) + " dims " + t.shape_string();
}

// One descale tensor: absent (rank 0, no data) means 1; otherwise fp32 (batch, heads_kv) on
// q's device with non-negative strides, and finite, non-negative values where the host can read
// them (a dequantisation factor is amax / 448 >= 0; 0 is an all-zero head).
DescalePtr check_descale(const Tensor& t, const char* name, const Tensor& q, int batch, int heads_kv) {
  DescalePtr d;
  if (t.rank == 0 && t.data == nullptr) return d;
  if (t.rank != 2 || t.dtype != DType::f32 || t.shape[0] != batch || t.shape[1] != heads_kv)
    fail(ErrorCode::invalid_argument, name,
         "fp32 of shape (batch=" + str(batch) + ", heads_kv=" + str(heads_kv) + "), or an absent tensor for 1.0",
         shape_and_dtype(t));
  validate::present(t, name);
  validate::same_device(t, name, q, "q");
  validate::non_negative_strides(t, name);
  d.ptr = t.ptr<const float>();
  d.batch = t.stride[0];
  d.head = t.stride[1];
  if (t.device.kind == DeviceKind::cpu)
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < heads_kv; ++h)
        if (!std::isfinite(d.at(b, h)) || d.at(b, h) < 0.0f)
          fail(ErrorCode::invalid_argument, std::string(name) + "[" + str(b) + ", " + str(h) + "]",
               "a finite factor >= 0", std::to_string(d.at(b, h)));
  return d;
}

// Host-resident q and k descales: the kernels fold scale * dq * dk into one fp32 factor of the
// scores (log2 e times it, SEMANTICS.md), which must be finite; each factor alone may be. Device-
// resident factors are trusted, as their values.
void check_descale_products(const AttentionParams& p, const Tensor& q_descale, const Tensor& k_descale) {
  const bool q_host = q_descale.rank == 0 || q_descale.device.kind == DeviceKind::cpu;
  const bool k_host = k_descale.rank == 0 || k_descale.device.kind == DeviceKind::cpu;
  if (!q_host || !k_host || (p.q_descale.ptr == nullptr && p.k_descale.ptr == nullptr)) return;
  const float scale_log2 = p.mask.scale * 1.44269504088896341f;
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_kv; ++h) {
      const float dq = p.q_descale.at(b, h), dk = p.k_descale.at(b, h);  // 1 where absent
      if (!std::isfinite(scale_log2 * (dq * dk)))
        fail(ErrorCode::invalid_argument, "descale.k[" + str(b) + ", " + str(h) + "]",
             "a factor whose product with descale.q (" + std::to_string(dq) + ") and the scale (" +
                 std::to_string(p.mask.scale) + ") is a finite fp32 value",
             std::to_string(dk));
    }
}

// A saved LSE in host memory: every value finite or -inf (an empty row). +inf and NaN are no
// LSE values and would turn into NaN outputs; device-resident ones are trusted (a scan would
// cost a pass over them), as the fp8 descales.
void check_lse_values(const Tensor& lse, const char* name) {
  std::int64_t idx[kMaxRank] = {};
  for (int d = 0; d < lse.rank; ++d)
    if (lse.shape[d] == 0) return;
  const float* base = lse.ptr<const float>();
  for (;;) {
    std::int64_t off = 0;
    for (int d = 0; d < lse.rank; ++d) off += idx[d] * lse.stride[d];
    const float x = base[off];
    if (std::isnan(x) || x == INFINITY) {
      std::string at;
      for (int d = 0; d < lse.rank; ++d) at += (d ? ", " : "") + str(idx[d]);
      fail(ErrorCode::invalid_argument, std::string(name) + "[" + at + "]", "a finite value or -inf (an empty row)",
           std::isnan(x) ? "nan" : "inf");
    }
    int d = lse.rank - 1;
    while (d >= 0 && ++idx[d] == lse.shape[d]) idx[d--] = 0;
    if (d < 0) return;
  }
}

AttentionParams build_params(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens_q,
                             const Tensor& cu_seqlens_k, const Fp8Descale* descale, const Tensor& out,
                             const Tensor& lse, const AttentionOptions& options, const ExecutionContext& ctx,
                             Entry entry) {
  const bool ragged = cu_seqlens_q.present() || cu_seqlens_k.present();
  const int r = ragged ? 3 : 4;
  const char* q_dims = ragged ? "(total_q, heads_q, head_dim)" : "(batch, seq_q, heads_q, head_dim)";
  const char* k_dims = ragged ? "(total_k, heads_kv, head_dim)" : "(batch, seq_k, heads_kv, head_dim)";
  validate::rank(q, "q", r, q_dims);
  validate::rank(k, "k", r, k_dims);
  validate::rank(v, "v", r, k_dims);
  validate::rank(out, "out", r, q_dims);
  check_dtypes(q, k, v, out, entry);
  validate::same_device(k, "k", q, "q");
  validate::same_device(v, "v", q, "q");
  validate::same_device(out, "out", q, "q");
  for (auto [t, name] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}}) {
    validate::non_negative_strides(*t, name);
    validate::unit_stride(*t, name, r - 1, "head_dim");
  }
  const int hd = r - 1, hh = r - 2;
  const std::int64_t head_dim = q.shape[hd];
  // (64-bit: a size past 2^32 cut to int could pass as a supported one.)
  validate::head_dim_supported(head_dim, "q.shape[-1] (head_dim)");
  validate::dim_equals(k, "k", hd, head_dim, "head_dim, as q");
  validate::dim_equals(v, "v", hd, head_dim, "head_dim, as q");
  check_same_shape(v, "v", k, "k");
  check_same_shape(out, "out", q, "q");
  if (q.shape[hh] < 1) fail(ErrorCode::invalid_argument, "q", "at least one head", "shape " + q.shape_string());
  check_int_range(q.shape[hh], "q.shape[-2] (heads_q)");
  check_int_range(k.shape[hh], "k.shape[-2] (heads_kv)");
  validate::heads_divisible(q.shape[hh], k.shape[hh]);

  AttentionParams p;
  p.dtype = q.dtype;
  p.device = q.device;
  p.heads_q = static_cast<int>(q.shape[hh]);
  p.heads_kv = static_cast<int>(k.shape[hh]);
  p.head_dim = static_cast<int>(head_dim);
  if (ragged) {
    if (!cu_seqlens_q.present()) fail(ErrorCode::invalid_argument, "cu_seqlens_q", "a tensor (with cu_seqlens_k)", "absent");
    if (!cu_seqlens_k.present()) fail(ErrorCode::invalid_argument, "cu_seqlens_k", "a tensor (with cu_seqlens_q)", "absent");
    check_int_range(q.shape[0], "q.shape[0] (total_q)");
    check_int_range(k.shape[0], "k.shape[0] (total_k)");
    p.batch = check_cu_seqlens(cu_seqlens_q, "cu_seqlens_q", q, q.shape[0], &p.seq_q);
    const int batch_k = check_cu_seqlens(cu_seqlens_k, "cu_seqlens_k", q, k.shape[0], &p.seq_k);
    if (batch_k != p.batch)
      fail(ErrorCode::invalid_argument, "cu_seqlens_k", str(p.batch + 1) + " entries (as cu_seqlens_q)", str(batch_k + 1));
    p.cu_seqlens_q = cu_seqlens_q.ptr<const std::int32_t>();
    p.cu_seqlens_k = cu_seqlens_k.ptr<const std::int32_t>();
    p.total_q = q.shape[0];
    p.total_k = k.shape[0];
  } else {
    validate::dim_equals(k, "k", 0, q.shape[0], "batch, as q");
    check_int_range(q.shape[1], "q.shape[1] (seq_q)");
    check_int_range(k.shape[1], "k.shape[1] (seq_k)");
    check_int_range(q.shape[0], "q.shape[0] (batch)");
    p.batch = static_cast<int>(q.shape[0]);
    p.seq_q = static_cast<int>(q.shape[1]);
    p.seq_k = static_cast<int>(k.shape[1]);
    p.total_q = q.shape[0] * q.shape[1];
    p.total_k = k.shape[0] * k.shape[1];
  }
  if (entry != Entry::backward) validate::no_internal_overlap(out, "out");  // (the backward reads it)
  p.q = strided(q, ragged);
  p.k = strided(k, ragged);
  p.v = strided(v, ragged);
  p.o = strided(out, ragged);

  if (options.return_lse) {
    if (ragged) {
      validate::rank(lse, "lse", 2, "(heads_q, total_q)");
      validate::dim_equals(lse, "lse", 0, p.heads_q, "heads_q");
      validate::dim_equals(lse, "lse", 1, p.total_q, "total_q");
    } else {
      validate::rank(lse, "lse", 3, "(batch, heads_q, seq_q)");
      validate::dim_equals(lse, "lse", 0, p.batch, "batch");
      validate::dim_equals(lse, "lse", 1, p.heads_q, "heads_q");
      validate::dim_equals(lse, "lse", 2, p.seq_q, "seq_q");
    }
    validate::dtype_is(lse, "lse", DType::f32);
    validate::same_device(lse, "lse", q, "q");
    validate::non_negative_strides(lse, "lse");
    validate::unit_stride(lse, "lse", lse.rank - 1, "the token dim");
    if (entry != Entry::backward) {
      validate::no_internal_overlap(lse, "lse");
      validate::disjoint(lse, "lse", out, "out");  // both written
    }
    p.lse.ptr = lse.ptr<float>();
    p.lse.batch = ragged ? 0 : lse.stride[0];
    p.lse.head = ragged ? lse.stride[0] : lse.stride[1];
  }
  if (descale != nullptr) {
    p.q_descale = check_descale(descale->q, "descale.q", q, p.batch, p.heads_kv);
    p.k_descale = check_descale(descale->k, "descale.k", q, p.batch, p.heads_kv);
    p.v_descale = check_descale(descale->v, "descale.v", q, p.batch, p.heads_kv);
  }
  check_options(options, p.head_dim, &p.mask);
  if (descale != nullptr) check_descale_products(p, descale->q, descale->k);
  validate::execution_context(ctx);
  p.deterministic = options.deterministic;
  p.stream = ctx.stream;
  p.num_threads = ctx.num_threads;
  return p;
}

}  // namespace

AttentionParams build_forward_params(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens_q,
                                     const Tensor& cu_seqlens_k, const Tensor& out, const Tensor& lse,
                                     const AttentionOptions& options, const ExecutionContext& ctx) {
  return build_params(q, k, v, cu_seqlens_q, cu_seqlens_k, nullptr, out, lse, options, ctx, Entry::forward);
}

AttentionParams build_forward_fp8_params(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens_q,
                                         const Tensor& cu_seqlens_k, const Fp8Descale& descale, const Tensor& out,
                                         const Tensor& lse, const AttentionOptions& options,
                                         const ExecutionContext& ctx) {
  return build_params(q, k, v, cu_seqlens_q, cu_seqlens_k, &descale, out, lse, options, ctx, Entry::forward_fp8);
}

BackwardParams build_backward_params(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens_q,
                                     const Tensor& cu_seqlens_k, const Tensor& out, const Tensor& dout,
                                     const Tensor& lse, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                     const AttentionOptions& options, const ExecutionContext& ctx) {
  AttentionOptions with_lse = options;
  with_lse.return_lse = true;  // the saved LSE is a required input here; same shape rules
  BackwardParams p;
  static_cast<AttentionParams&>(p) =
      build_params(q, k, v, cu_seqlens_q, cu_seqlens_k, nullptr, out, lse, with_lse, ctx, Entry::backward);
  const bool ragged = p.ragged();
  const int r = ragged ? 3 : 4;
  struct Grad { const Tensor* t; const char* name; const Tensor* ref; const char* ref_name; };
  const Grad grads[] = {{&dout, "dout", &q, "q"}, {&dq, "dq", &q, "q"}, {&dk, "dk", &k, "k"}, {&dv, "dv", &v, "v"}};
  for (const auto& [t, name, ref, ref_name] : grads) {
    validate::rank(*t, name, r, ref_name[0] == 'q' ? "(as q)" : "(as k and v)");
    check_same_shape(*t, name, *ref, ref_name);
    validate::same_dtype(*t, name, q, "q");
    validate::same_device(*t, name, q, "q");
    validate::non_negative_strides(*t, name);
    validate::unit_stride(*t, name, r - 1, "head_dim");
    if (t != &dout) validate::no_internal_overlap(*t, name);  // the gradients are written
  }
  // The gradients are written at once: no byte of one may be another's (q, k, v packed in one
  // buffer, with the gradients likewise, is fine: disjoint() then checks element by element).
  validate::disjoint(dk, "dk", dq, "dq");
  validate::disjoint(dv, "dv", dq, "dq");
  validate::disjoint(dv, "dv", dk, "dk");
  p.dout = strided(dout, ragged);
  p.dq = strided(dq, ragged);
  p.dk = strided(dk, ragged);
  p.dv = strided(dv, ragged);
  return p;
}

MergeParams build_merge_params(const Tensor& o_states, const Tensor& lse_states, const Tensor& out,
                               const Tensor& out_lse, const ExecutionContext& ctx) {
  validate::rank(o_states, "o_states", 4, "(num_states, tokens, heads, head_dim)");
  validate::rank(lse_states, "lse_states", 3, "(num_states, tokens, heads)");
  validate::rank(out, "out", 3, "(tokens, heads, head_dim)");
  validate::dtype_in(o_states, "o_states", kStorageTypes);
  validate::dtype_is(lse_states, "lse_states", DType::f32);
  validate::dtype_in(out, "out", kStorageTypes);
  validate::same_device(lse_states, "lse_states", o_states, "o_states");
  validate::same_device(out, "out", o_states, "o_states");
  for (int d = 0; d < 3; ++d) {
    static const char* what[] = {"num_states, as o_states", "tokens, as o_states", "heads, as o_states"};
    validate::dim_equals(lse_states, "lse_states", d, o_states.shape[d], what[d]);
  }
  for (int d = 0; d < 3; ++d) {
    static const char* what[] = {"tokens, as o_states", "heads, as o_states", "head_dim, as o_states"};
    validate::dim_equals(out, "out", d, o_states.shape[d + 1], what[d]);
  }
  validate::non_negative_strides(o_states, "o_states");
  validate::non_negative_strides(lse_states, "lse_states");
  validate::non_negative_strides(out, "out");
  validate::no_internal_overlap(out, "out");
  validate::unit_stride(o_states, "o_states", 3, "head_dim");
  validate::unit_stride(out, "out", 2, "head_dim");
  if (out_lse.present()) {
    validate::rank(out_lse, "out_lse", 2, "(tokens, heads)");
    validate::dtype_is(out_lse, "out_lse", DType::f32);
    validate::same_device(out_lse, "out_lse", o_states, "o_states");
    validate::dim_equals(out_lse, "out_lse", 0, o_states.shape[1], "tokens, as o_states");
    validate::dim_equals(out_lse, "out_lse", 1, o_states.shape[2], "heads, as o_states");
    validate::non_negative_strides(out_lse, "out_lse");
    validate::no_internal_overlap(out_lse, "out_lse");
    validate::disjoint(out_lse, "out_lse", out, "out");  // both written
  }
  validate::execution_context(ctx);
  check_int_range(o_states.shape[0], "o_states.shape[0] (num_states)");
  check_int_range(o_states.shape[2], "o_states.shape[2] (heads)");
  check_int_range(o_states.shape[3], "o_states.shape[3] (head_dim)");

  MergeParams p;
  p.dtype = o_states.dtype;
  p.out_dtype = out.dtype;
  p.device = o_states.device;
  p.num_states = static_cast<int>(o_states.shape[0]);
  p.tokens = o_states.shape[1];
  p.heads = static_cast<int>(o_states.shape[2]);
  p.head_dim = static_cast<int>(o_states.shape[3]);
  p.o_states = o_states.data;
  p.o_state_stride = o_states.stride[0];
  p.o_token_stride = o_states.stride[1];
  p.o_head_stride = o_states.stride[2];
  p.lse_states = lse_states.ptr<const float>();
  p.lse_state_stride = lse_states.stride[0];
  p.lse_token_stride = lse_states.stride[1];
  p.lse_head_stride = lse_states.stride[2];
  p.out = out.data;
  p.out_token_stride = out.stride[0];
  p.out_head_stride = out.stride[1];
  if (out_lse.present()) {
    p.out_lse = out_lse.ptr<float>();
    p.out_lse_token_stride = out_lse.stride[0];
    p.out_lse_head_stride = out_lse.stride[1];
  }
  check_saved_lse(lse_states, "lse_states");
  p.stream = ctx.stream;
  p.num_threads = ctx.num_threads;
  return p;
}

void check_saved_lse(const Tensor& lse, const char* name) {
  if (lse.present() && lse.device.kind == DeviceKind::cpu) check_lse_values(lse, name);
}

}  // namespace api

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                       const AttentionOptions& options, const ExecutionContext& ctx) {
  validate::FunctionScope scope("attention_forward");
  dispatch::attention_forward(api::build_forward_params(q, k, v, Tensor{}, Tensor{}, out, lse, options, ctx));
}

void attention_forward_ragged(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens_q,
                              const Tensor& cu_seqlens_k, const Tensor& out, const Tensor& lse,
                              const AttentionOptions& options, const ExecutionContext& ctx) {
  validate::FunctionScope scope("attention_forward_ragged");
  if (!cu_seqlens_q.present())
    validate::fail(ErrorCode::invalid_argument, "cu_seqlens_q", "an int32 tensor of batch + 1 offsets", "absent");
  dispatch::attention_forward(
      api::build_forward_params(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, options, ctx));
}

void attention_forward_fp8(const Tensor& q, const Tensor& k, const Tensor& v, const Fp8Descale& descale,
                           const Tensor& out, const Tensor& lse, const AttentionOptions& options,
                           const ExecutionContext& ctx) {
  validate::FunctionScope scope("attention_forward_fp8");
  dispatch::attention_forward(
      api::build_forward_fp8_params(q, k, v, Tensor{}, Tensor{}, descale, out, lse, options, ctx));
}

void attention_forward_fp8_ragged(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens_q,
                                  const Tensor& cu_seqlens_k, const Fp8Descale& descale, const Tensor& out,
                                  const Tensor& lse, const AttentionOptions& options, const ExecutionContext& ctx) {
  validate::FunctionScope scope("attention_forward_fp8_ragged");
  if (!cu_seqlens_q.present())
    validate::fail(ErrorCode::invalid_argument, "cu_seqlens_q", "an int32 tensor of batch + 1 offsets", "absent");
  dispatch::attention_forward(
      api::build_forward_fp8_params(q, k, v, cu_seqlens_q, cu_seqlens_k, descale, out, lse, options, ctx));
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                        const Tensor& lse, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const AttentionOptions& options, const ExecutionContext& ctx) {
  validate::FunctionScope scope("attention_backward");
  const BackwardParams params =
      api::build_backward_params(q, k, v, Tensor{}, Tensor{}, out, dout, lse, dq, dk, dv, options, ctx);
  api::check_saved_lse(lse, "lse");  // (host-resident: scanned)
  dispatch::attention_backward(params);
}

void attention_backward_ragged(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens_q,
                               const Tensor& cu_seqlens_k, const Tensor& out, const Tensor& dout, const Tensor& lse,
                               const Tensor& dq, const Tensor& dk, const Tensor& dv, const AttentionOptions& options,
                               const ExecutionContext& ctx) {
  validate::FunctionScope scope("attention_backward_ragged");
  if (!cu_seqlens_q.present())
    validate::fail(ErrorCode::invalid_argument, "cu_seqlens_q", "an int32 tensor of batch + 1 offsets", "absent");
  const BackwardParams params =
      api::build_backward_params(q, k, v, cu_seqlens_q, cu_seqlens_k, out, dout, lse, dq, dk, dv, options, ctx);
  api::check_saved_lse(lse, "lse");  // (host-resident: scanned)
  dispatch::attention_backward(params);
}

void merge_states(const Tensor& o_states, const Tensor& lse_states, const Tensor& out, const Tensor& out_lse,
                  const ExecutionContext& ctx) {
  validate::FunctionScope scope("merge_states");
  dispatch::merge_states(api::build_merge_params(o_states, lse_states, out, out_lse, ctx));
}

}  // namespace tessera
