// One test per validation rule of the dense/ragged attention API: each asserts the error
// code, that the message names the argument, and that no output byte was written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "math/online_softmax.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

constexpr float kSentinel = 12345.0f;

// A dense problem with valid arguments; each test breaks exactly one of them.
struct Problem {
  int b = 2, sq = 5, sk = 7, hq = 4, hkv = 2, d = 64;
  std::vector<float> q, k, v, out, lse, dout, dq, dk, dv;
  AttentionOptions opt;
  Problem() {
    q.assign(b * sq * hq * d, 0.5f);
    k.assign(b * sk * hkv * d, 0.25f);
    v.assign(b * sk * hkv * d, 1.0f);
    dout.assign(q.size(), 1.0f);
    out.assign(q.size(), kSentinel);
    lse.assign(b * hq * sq, kSentinel);
    dq.assign(q.size(), kSentinel);
    dk.assign(k.size(), kSentinel);
    dv.assign(v.size(), kSentinel);
    opt.return_lse = true;
  }
  Tensor Q() { return Tensor(q.data(), DType::f32, {b, sq, hq, d}); }
  Tensor K() { return Tensor(k.data(), DType::f32, {b, sk, hkv, d}); }
  Tensor V() { return Tensor(v.data(), DType::f32, {b, sk, hkv, d}); }
  Tensor O() { return Tensor(out.data(), DType::f32, {b, sq, hq, d}); }
  Tensor L() { return Tensor(lse.data(), DType::f32, {b, hq, sq}); }
  bool outputs_untouched() const {
    for (const auto* vec : {&out, &lse, &dq, &dk, &dv})
      for (float x : *vec)
        if (x != kSentinel) return false;
    return true;
  }
};

template <typename P>  // Problem or Fp8Problem: anything with outputs_untouched()
void expect_error(const std::function<void()>& call, ErrorCode code, const std::string& argument, const P& p) {
  try {
    call();
    ADD_FAILURE() << "expected an error naming " << argument;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_EQ(e.argument(), argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(argument), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("expected"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("got"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(p.outputs_untouched());
}

TEST(Validation, ValidProblemRuns) {
  Problem p;
  attention_forward(p.Q(), p.K(), p.V(), p.O(), p.L(), p.opt);
  EXPECT_FALSE(p.outputs_untouched());
}

TEST(Validation, QRank) {
  Problem p;
  Tensor q3(p.q.data(), DType::f32, {p.b * p.sq, p.hq, p.d});
  expect_error([&] { attention_forward(q3, p.K(), p.V(), p.O(), p.L(), p.opt); }, ErrorCode::invalid_argument, "q", p);
}

TEST(Validation, ScalarTensorIsNotCalledAbsent) {
  // A 0-dim array (data, no dims) is a rank error, not an absent tensor.
  Problem p;
  Tensor scalar(p.q.data(), DType::f32, {});
  expect_error([&] { attention_forward(scalar, p.K(), p.V(), p.O(), p.L(), p.opt); }, ErrorCode::invalid_argument, "q", p);
  try {
    attention_forward(scalar, p.K(), p.V(), p.O(), p.L(), p.opt);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q: expected 4 dims (batch, seq_q, heads_q, head_dim), got 0 dims (a scalar)"),
              std::string::npos)
        << e.what();
  }
}

TEST(Validation, AbsentTensor) {
  Problem p;
  expect_error([&] { attention_forward(p.Q(), Tensor{}, p.V(), p.O(), p.L(), p.opt); }, ErrorCode::invalid_argument, "k", p);
}

TEST(Validation, NullDataWithElements) {
  Problem p;
  Tensor v(nullptr, DType::f32, {p.b, p.sk, p.hkv, p.d});
  expect_error([&] { attention_forward(p.Q(), p.K(), v, p.O(), p.L(), p.opt); }, ErrorCode::invalid_argument, "v", p);
}

TEST(Validation, SizesPast63BitsOfBytesAreRefused) {
  // (1, 2^30, 2^30, 16) elements: 2^64, which wrapped to 0 in a plain product, so a null q passed as
  // empty and the kernel read through it. Refused with or without data.
  Problem p;
  const std::int64_t big = std::int64_t{1} << 30;
  Tensor null_q(nullptr, DType::f32, {1, big, big, 16});
  expect_error([&] { attention_forward(null_q, p.K(), p.V(), p.O(), p.L(), p.opt); }, ErrorCode::invalid_argument, "q", p);
  Tensor huge_v(p.v.data(), DType::f32, {1, big, big / 4, 16});  // 2^62 elements, 2^64 bytes
  expect_error([&] { attention_forward(p.Q(), p.K(), huge_v, p.O(), p.L(), p.opt); }, ErrorCode::invalid_argument, "v", p);
  try {
    attention_forward(p.Q(), p.K(), huge_v, p.O(), p.L(), p.opt);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fewer than 2^63 bytes"), std::string::npos) << e.what();
  }
  EXPECT_EQ(null_q.numel(), std::numeric_limits<std::int64_t>::max());  // saturated, not wrapped
}

TEST(Validation, OutputsOfOneCallDoNotOverlap) {
  {
    Problem p;  // lse over out's first bytes
    Tensor lse(p.out.data(), DType::f32, {p.b, p.hq, p.sq});
    expect_error([&] { attention_forward(p.Q(), p.K(), p.V(), p.O(), lse, p.opt); }, ErrorCode::invalid_argument, "lse", p);
  }
  {
    Problem p;  // dv written over dk
    Tensor dq(p.dq.data(), DType::f32, {p.b, p.sq, p.hq, p.d}), dk(p.dk.data(), DType::f32, {p.b, p.sk, p.hkv, p.d});
    Tensor dout(p.dout.data(), DType::f32, {p.b, p.sq, p.hq, p.d});
    expect_error([&] { attention_backward(p.Q(), p.K(), p.V(), p.O(), dout, p.L(), dq, dk, dk, p.opt); },
                 ErrorCode::invalid_argument, "dv", p);
  }
  {
    std::vector<float> o(2 * 3 * 4 * 8, 1.f), l(2 * 3 * 4, 0.f), out(3 * 4 * 8, kSentinel);
    Tensor os(o.data(), DType::f32, {2, 3, 4, 8}), ls(l.data(), DType::f32, {2, 3, 4});
    Tensor ot(out.data(), DType::f32, {3, 4, 8}), olse(out.data() + 8, DType::f32, {3, 4});
    try {
      merge_states(os, ls, ot, olse);
      ADD_FAILURE() << "out_lse inside out was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), "out_lse") << e.what();
    }
    for (float x : out) EXPECT_EQ(x, kSentinel);
  }
}

TEST(Validation, PackedGradientsInOneBufferAreAccepted) {
  // q, k, v and dq, dk, dv as (batch, seq, 3, heads, head_dim) packed buffers (a fused QKV
  // projection): the gradients share one buffer without sharing an element. The result equals
  // the one with separate buffers.
  const int b = 2, s = 6, h = 2, d = 16;
  std::vector<float> qkv(b * s * 3 * h * d), dqkv(qkv.size(), kSentinel), dout(b * s * h * d);
  for (std::size_t i = 0; i < qkv.size(); ++i) qkv[i] = std::sin(0.37f * static_cast<float>(i));
  for (std::size_t i = 0; i < dout.size(); ++i) dout[i] = std::cos(0.11f * static_cast<float>(i));
  auto view = [&](std::vector<float>& buf, int which) {
    return Tensor(buf.data() + which * h * d, DType::f32, {b, s, h, d}, {s * 3 * h * d, 3 * h * d, d, 1});
  };
  std::vector<float> out(dout.size()), lse(b * h * s);
  Tensor o(out.data(), DType::f32, {b, s, h, d}), l(lse.data(), DType::f32, {b, h, s}), g(dout.data(), DType::f32, {b, s, h, d});
  AttentionOptions opt;
  opt.return_lse = true;
  opt.causal = true;
  attention_forward(view(qkv, 0), view(qkv, 1), view(qkv, 2), o, l, opt);
  ASSERT_NO_THROW(attention_backward(view(qkv, 0), view(qkv, 1), view(qkv, 2), o, g, l, view(dqkv, 0), view(dqkv, 1),
                                     view(dqkv, 2), opt));
  std::vector<float> dq(dout.size()), dk(dout.size()), dv(dout.size());
  auto plain = [&](std::vector<float>& buf) { return Tensor(buf.data(), DType::f32, {b, s, h, d}); };
  attention_backward(view(qkv, 0), view(qkv, 1), view(qkv, 2), o, g, l, plain(dq), plain(dk), plain(dv), opt);
  for (int i = 0; i < b * s; ++i)
    for (int j = 0; j < h * d; ++j) {
      ASSERT_EQ(dqkv[i * 3 * h * d + j], dq[i * h * d + j]);
      ASSERT_EQ(dqkv[i * 3 * h * d + h * d + j], dk[i * h * d + j]);
      ASSERT_EQ(dqkv[i * 3 * h * d + 2 * h * d + j], dv[i * h * d + j]);
    }
}

TEST(Validation, PackedGqaGradientsInOneBufferAreAccepted) {
  // A fused projection's layout with GQA: (batch, seq, heads_q + 2 heads_kv, head_dim), q's heads
  // first; dq, dk and dv share the head stride but not their head counts.
  const int b = 1, s = 5, hq = 4, hkv = 2, d = 8, w = hq + 2 * hkv;
  std::vector<float> qkv(b * s * w * d), dqkv(qkv.size(), kSentinel), dout(b * s * hq * d);
  for (std::size_t i = 0; i < qkv.size(); ++i) qkv[i] = std::sin(0.29f * static_cast<float>(i));
  for (std::size_t i = 0; i < dout.size(); ++i) dout[i] = std::cos(0.13f * static_cast<float>(i));
  auto view = [&](std::vector<float>& buf, int head0, int heads) {
    return Tensor(buf.data() + head0 * d, DType::f32, {b, s, heads, d}, {s * w * d, w * d, d, 1});
  };
  std::vector<float> out(dout.size()), lse(b * hq * s);
  Tensor o(out.data(), DType::f32, {b, s, hq, d}), l(lse.data(), DType::f32, {b, hq, s}), g(dout.data(), DType::f32, {b, s, hq, d});
  AttentionOptions opt;
  opt.return_lse = true;
  attention_forward(view(qkv, 0, hq), view(qkv, hq, hkv), view(qkv, hq + hkv, hkv), o, l, opt);
  EXPECT_NO_THROW(attention_backward(view(qkv, 0, hq), view(qkv, hq, hkv), view(qkv, hq + hkv, hkv), o, g, l,
                                     view(dqkv, 0, hq), view(dqkv, hq, hkv), view(dqkv, hq + hkv, hkv), opt));
  // The same buffer with dk one head too early (on dq's last head) is refused.
  try {
    attention_backward(view(qkv, 0, hq), view(qkv, hq, hkv), view(qkv, hq + hkv, hkv), o, g, l, view(dqkv, 0, hq),
                       view(dqkv, hq - 1, hkv), view(dqkv, hq + hkv, hkv), opt);
    ADD_FAILURE() << "dk over dq's last head was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "dk") << e.what();
  }
}

TEST(Validation, DtypesAgree) {
  Problem p;
  Tensor k = p.K();
  k.dtype = DType::bf16;
  expect_error([&] { attention_forward(p.Q(), k, p.V(), p.O(), p.L(), p.opt); }, ErrorCode::invalid_argument, "k", p);
}

TEST(Validation, StorageDtypeSupported) {
  Problem p;
  Tensor q = p.Q(), k = p.K(), v = p.V(), o = p.O();
  q.dtype = k.dtype = v.dtype = o.dtype = DType::i32;
  expect_error([&] { attention_forward(q, k, v, o, p.L(), p.opt); }, ErrorCode::invalid_argument, "q", p);
}

TEST(Validation, DevicesAgree) {
  Problem p;
  Tensor o = p.O();
  o.device = Device::cuda(0);
  expect_error([&] { attention_forward(p.Q(), p.K(), p.V(), o, p.L(), p.opt); }, ErrorCode::invalid_argument, "out", p);
}

TEST(Validation, HeadsDivisible) {
  Problem p;
  p.hkv = 3;
  p.k.assign(p.b * p.sk * 3 * p.d, 0.f);
  p.v.assign(p.k.size(), 0.f);
  expect_error([&] { attention_forward(p.Q(), p.K(), p.V(), p.O(), p.L(), p.opt); }, ErrorCode::invalid_argument, "heads_kv", p);
}

TEST(Validation, HeadDimSupported) {
  Problem p;
  p.d = 12;
  p.q.assign(p.b * p.sq * p.hq * 12, 0.f);
  p.k.assign(p.b * p.sk * p.hkv * 12, 0.f);
  p.v.assign(p.k.size(), 0.f);
  p.out.assign(p.q.size(), kSentinel);
  expect_error([&] { attention_forward(p.Q(), p.K(), p.V(), p.O(), p.L(), p.opt); }, ErrorCode::invalid_argument,
               "q.shape[-1] (head_dim)", p);
}

// A head_dim past 2^32 must not pass as its low 32 bits (2^32 + 32 read as 32): the fuzzing pass
// of the thirtieth session ran such a call as head_dim 32. No data is read: the shape is refused.
TEST(Validation, HeadDimPast32BitsIsRefused) {
  Problem p;
  const std::int64_t huge = (std::int64_t{1} << 32) + 32;
  const Tensor q(p.q.data(), DType::f32, {1, 1, 1, huge}), k(p.k.data(), DType::f32, {1, 1, 1, huge});
  const Tensor o(p.out.data(), DType::f32, {1, 1, 1, huge});
  expect_error([&] { attention_forward(q, k, k, o, Tensor{}, AttentionOptions{}); }, ErrorCode::invalid_argument,
               "q.shape[-1] (head_dim)", p);
}

TEST(Validation, HeadsPast32BitsAreRefused) {
  Problem p;
  const std::int64_t huge = (std::int64_t{1} << 32) + 1;
  // Stride 0 over the heads (never read: the shape is refused first).
  const Tensor q(p.q.data(), DType::f32, {1, 1, huge, 64}, {64, 64, 0, 1});
  const Tensor k(p.k.data(), DType::f32, {1, 1, 1, 64});
  const Tensor o(p.out.data(), DType::f32, {1, 1, huge, 64}, {64, 64, 0, 1});
  expect_error([&] { attention_forward(q, k, k, o, Tensor{}, AttentionOptions{}); }, ErrorCode::invalid_argument,
               "q.shape[-2] (heads_q)", p);
}

// Outputs written from many threads must not be broadcast views: stride 0 over the heads of
// out, or over the sequence of lse, or dq of the backward.
TEST(Validation, BroadcastOutputsAreRefused) {
  Problem p;
  const Tensor o(p.out.data(), DType::f32, {p.b, p.sq, p.hq, p.d}, {p.sq * p.hq * p.d, p.hq * p.d, 0, 1});
  expect_error([&] { attention_forward(p.Q(), p.K(), p.V(), o, p.L(), p.opt); }, ErrorCode::invalid_argument, "out", p);
  const Tensor l(p.lse.data(), DType::f32, {p.b, p.hq, p.sq}, {p.hq, 1, 0});
  expect_error([&] { attention_forward(p.Q(), p.K(), p.V(), p.O(), l, p.opt); }, ErrorCode::invalid_argument, "lse", p);
  // An overlapping (not stride-0) view: rows of the sequence one head_dim apart but heads 64 x 4 wide.
  const Tensor o2(p.out.data(), DType::f32, {p.b, p.sq, p.hq, p.d}, {p.sq * p.d + 1000, p.d, p.d, 1});
  expect_error([&] { attention_forward(p.Q(), p.K(), p.V(), o2, p.L(), p.opt); }, ErrorCode::invalid_argument, "out", p);
}

TEST(Validation, BroadcastGradientIsRefused) {
  Problem p;
  std::fill(p.out.begin(), p.out.end(), 0.0f);
  std::fill(p.lse.begin(), p.lse.end(), 0.0f);
  const Tensor dq(p.dq.data(), DType::f32, {p.b, p.sq, p.hq, p.d}, {0, p.hq * p.d, p.d, 1});
  const Tensor dk(p.dk.data(), DType::f32, {p.b, p.sk, p.hkv, p.d});
  const Tensor dv(p.dv.data(), DType::f32, {p.b, p.sk, p.hkv, p.d});
  const Tensor dout(p.dout.data(), DType::f32, {p.b, p.sq, p.hq, p.d});
  try {
    attention_backward(p.Q(), p.K(), p.V(), p.O(), dout, p.L(), dq, dk, dv, p.opt);
    ADD_FAILURE() << "no error for a broadcast dq";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "dq") << e.what();
  }
  for (float x : p.dq) ASSERT_EQ(x, kSentinel);
  for (float x : p.dk) ASSERT_EQ(x, kSentinel);
}

// A saved LSE of +inf or NaN (no LSE value) is refused on the host instead of giving NaN.
TEST(Validation, BackwardLseMustBeFiniteOrMinusInf) {
  Problem p;
  std::fill(p.out.begin(), p.out.end(), 0.0f);
  std::fill(p.lse.begin(), p.lse.end(), 0.0f);
  p.lse[1 * p.sq + 2] = -INFINITY;  // an empty row: fine
  const Tensor dq(p.dq.data(), DType::f32, {p.b, p.sq, p.hq, p.d}), dk(p.dk.data(), DType::f32, {p.b, p.sk, p.hkv, p.d}),
      dv(p.dv.data(), DType::f32, {p.b, p.sk, p.hkv, p.d}), dout(p.dout.data(), DType::f32, {p.b, p.sq, p.hq, p.d});
  for (float bad : {INFINITY, NAN}) {
    p.lse[(1 * p.hq + 3) * p.sq + 4] = bad;  // (batch 1, head 3, row 4)
    try {
      attention_backward(p.Q(), p.K(), p.V(), p.O(), dout, p.L(), dq, dk, dv, p.opt);
      ADD_FAILURE() << "no error for an lse of " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), "lse[1, 3, 4]") << e.what();
    }
    for (float x : p.dq) ASSERT_EQ(x, kSentinel);
  }
}

TEST(Validation, MergeLseStatesMustBeFiniteOrMinusInf) {
  std::vector<float> o(2 * 3 * 2 * 8, 1.0f), lse(2 * 3 * 2, 0.0f), out(3 * 2 * 8, kSentinel);
  lse[0] = -INFINITY;  // an empty state: fine
  const Tensor to(o.data(), DType::f32, {2, 3, 2, 8}), tl(lse.data(), DType::f32, {2, 3, 2}),
      tout(out.data(), DType::f32, {3, 2, 8});
  EXPECT_NO_THROW(merge_states(to, tl, tout, Tensor{}));
  std::fill(out.begin(), out.end(), kSentinel);
  for (float bad : {INFINITY, NAN}) {
    lse[(1 * 3 + 2) * 2 + 1] = bad;  // (state 1, token 2, head 1)
    try {
      merge_states(to, tl, tout, Tensor{});
      ADD_FAILURE() << "no error for an lse of " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), "lse_states[1, 2, 1]") << e.what();
    }
    for (float x : out) ASSERT_EQ(x, kSentinel);
  }
}

TEST(Validation, HeadDimOfKMatchesQ) {
  Problem p;
  Tensor k(p.k.data(), DType::f32, {p.b, p.sk, p.hkv / 2, p.d * 2});
  expect_error([&] { attention_forward(p.Q(), k, p.V(), p.O(), p.L(), p.opt); }, ErrorCode::invalid_argument, "k", p);
}

TEST(Validation, UnitStrideOnHeadDim) {
  Problem p;
  Tensor q(p.q.data(), DType::f32, {p.b, p.sq, p.hq, p.d / 2}, {p.sq * p.hq * p.d, p.hq * p.d, p.d, 2});
  Tensor o(p.out.data(), DType::f32, {p.b, p.sq, p.hq, p.d / 2});
  Tensor k(p.k.data(), DType::f32, {p.b, p.sk, p.hkv, p.d / 2});
  Tensor v(p.v.data(), DType::f32, {p.b, p.sk, p.hkv, p.d / 2});
  expect_error([&] { attention_forward(q, k, v, o, p.L(), p.opt); }, ErrorCode::invalid_argument, "q", p);
}

TEST(Validation, NegativeStride) {
  Problem p;
  Tensor k(p.k.data(), DType::f32, {p.b, p.sk, p.hkv, p.d}, {0, -p.hkv * p.d, p.d, 1});
  expect_error([&] { attention_forward(p.Q(), k, p.V(), p.O(), p.L(), p.opt); }, ErrorCode::invalid_argument, "k", p);
}

TEST(Validation, BatchAgrees) {
  Problem p;
  Tensor k(p.k.data(), DType::f32, {1, p.sk * 2, p.hkv, p.d});
  Tensor v(p.v.data(), DType::f32, {1, p.sk * 2, p.hkv, p.d});
  expect_error([&] { attention_forward(p.Q(), k, v, p.O(), p.L(), p.opt); }, ErrorCode::invalid_argument, "k", p);
}

TEST(Validation, VShapeMatchesK) {
  Problem p;
  Tensor v(p.v.data(), DType::f32, {p.b, p.sk - 1, p.hkv, p.d});
  expect_error([&] { attention_forward(p.Q(), p.K(), v, p.O(), p.L(), p.opt); }, ErrorCode::invalid_argument, "v", p);
}

TEST(Validation, OutShapeMatchesQ) {
  Problem p;
  Tensor o(p.out.data(), DType::f32, {p.b, p.sq - 1, p.hq, p.d});
  expect_error([&] { attention_forward(p.Q(), p.K(), p.V(), o, p.L(), p.opt); }, ErrorCode::invalid_argument, "out", p);
}

TEST(Validation, LseRequiredWhenRequested) {
  Problem p;
  expect_error([&] { attention_forward(p.Q(), p.K(), p.V(), p.O(), Tensor{}, p.opt); }, ErrorCode::invalid_argument, "lse", p);
}

TEST(Validation, LseShape) {
  Problem p;
  Tensor l(p.lse.data(), DType::f32, {p.b, p.sq, p.hq});
  expect_error([&] { attention_forward(p.Q(), p.K(), p.V(), p.O(), l, p.opt); }, ErrorCode::invalid_argument, "lse", p);
}

TEST(Validation, LseDtype) {
  Problem p;
  Tensor l = p.L();
  l.dtype = DType::f16;
  expect_error([&] { attention_forward(p.Q(), p.K(), p.V(), p.O(), l, p.opt); }, ErrorCode::invalid_argument, "lse", p);
}

TEST(Validation, Scale) {
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
    Problem p;
    p.opt.scale = bad;
    expect_error([&] { attention_forward(p.Q(), p.K(), p.V(), p.O(), p.L(), p.opt); }, ErrorCode::invalid_argument,
                 "options.scale", p);
  }
}

TEST(Validation, Softcap) {
  // Negative, not finite, and caps whose folded factors (math::softcap_foldable) overflow: c *
  // log2(e) past FLT_MAX, scale / c or ln(2) / c past it for a denormal c (1e-39: scale 1 /
  // sqrt(head_dim) < ln 2, so only ln(2) / c overflows, the backward's factor).
  for (float bad : {-2.0f, std::numeric_limits<float>::infinity(), std::nanf(""), 3e38f, 1e-45f, 1e-39f}) {
    Problem p;
    p.opt.softcap = bad;
    expect_error([&] { attention_forward(p.Q(), p.K(), p.V(), p.O(), p.L(), p.opt); }, ErrorCode::invalid_argument,
                 "options.softcap", p);
  }
  EXPECT_TRUE(math::softcap_foldable(0.125f, 0.0f));
  EXPECT_TRUE(math::softcap_foldable(0.125f, 1e38f));
  EXPECT_TRUE(math::softcap_foldable(0.125f, 1e-30f));
  EXPECT_FALSE(math::softcap_foldable(0.125f, 2.4e38f));
  EXPECT_FALSE(math::softcap_foldable(0.125f, 1e-40f));
  EXPECT_FALSE(math::softcap_foldable(0.125f, 2e-39f));  // ln(2) / c overflows, scale / c does not
  // The message gives the cap as it is (a denormal one too), not rounded to 6 decimals.
  Problem p;
  p.opt.softcap = 1e-45f;
  try {
    attention_forward(p.Q(), p.K(), p.V(), p.O(), p.L(), p.opt);
    ADD_FAILURE() << "a cap of 1e-45 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("got 1.40129846e-45 (scale"), std::string::npos) << e.what();
  }
}

TEST(Validation, Window) {
  Problem p;
  p.opt.window_left = -5;
  expect_error([&] { attention_forward(p.Q(), p.K(), p.V(), p.O(), p.L(), p.opt); }, ErrorCode::invalid_argument,
               "options.window_left", p);
  Problem p2;
  p2.opt.window_right = -2;
  expect_error([&] { attention_forward(p2.Q(), p2.K(), p2.V(), p2.O(), p2.L(), p2.opt); }, ErrorCode::invalid_argument,
               "options.window_right", p2);
}

TEST(Validation, NumThreads) {
  Problem p;
  ExecutionContext ctx;
  ctx.num_threads = -1;
  expect_error([&] { attention_forward(p.Q(), p.K(), p.V(), p.O(), p.L(), p.opt, ctx); }, ErrorCode::invalid_argument,
               "ctx.num_threads", p);
}

// Ragged: q (total_q, hq, d) with cu_seqlens.
struct Ragged : Problem {
  std::vector<std::int32_t> cuq{0, 3, 5, 10}, cuk{0, 4, 4, 7};
  Tensor Qr() { return Tensor(q.data(), DType::f32, {10, hq, d}); }
  Tensor Kr() { return Tensor(k.data(), DType::f32, {7, hkv, d}); }
  Tensor Vr() { return Tensor(v.data(), DType::f32, {7, hkv, d}); }
  Tensor Or() { return Tensor(out.data(), DType::f32, {10, hq, d}); }
  Tensor Lr() { return Tensor(lse.data(), DType::f32, {hq, 10}); }
  Tensor CQ() { return Tensor(cuq.data(), DType::i32, {static_cast<std::int64_t>(cuq.size())}); }
  Tensor CK() { return Tensor(cuk.data(), DType::i32, {static_cast<std::int64_t>(cuk.size())}); }
  void call() { attention_forward_ragged(Qr(), Kr(), Vr(), CQ(), CK(), Or(), Lr(), opt); }
};

TEST(Validation, RaggedValidRuns) {
  Ragged r;
  r.call();
  EXPECT_FALSE(r.outputs_untouched());
}

TEST(Validation, CuSeqlensStartsAtZero) {
  Ragged r;
  r.cuq[0] = 1;
  expect_error([&] { r.call(); }, ErrorCode::invalid_argument, "cu_seqlens_q[0]", r);
}

TEST(Validation, CuSeqlensNonDecreasing) {
  Ragged r;
  r.cuk[2] = 2;
  expect_error([&] { r.call(); }, ErrorCode::invalid_argument, "cu_seqlens_k[2]", r);
}

TEST(Validation, CuSeqlensMatchesTotal) {
  Ragged r;
  r.cuq[3] = 9;
  expect_error([&] { r.call(); }, ErrorCode::invalid_argument, "cu_seqlens_q[3]", r);
}

TEST(Validation, CuSeqlensSameBatch) {
  Ragged r;
  r.cuk = {0, 7};
  expect_error([&] { r.call(); }, ErrorCode::invalid_argument, "cu_seqlens_k", r);
}

TEST(Validation, CuSeqlensOfMoreThan2To31EntriesIsRefused) {
  // 2^31 + 1 entries would make the batch an int past 2^31 - 1 (it wrapped to INT_MIN and the
  // check read cu_seqlens_q[INT_MIN]); refused on the size alone, before any entry is read.
  Ragged r;
  const std::int64_t n = (std::int64_t{1} << 31) + 1;
  Tensor cq(r.cuq.data(), DType::i32, {n}), ck(r.cuk.data(), DType::i32, {n});
  expect_error([&] { attention_forward_ragged(r.Qr(), r.Kr(), r.Vr(), cq, ck, r.Or(), r.Lr(), r.opt); },
               ErrorCode::invalid_argument, "cu_seqlens_q", r);
}

TEST(Validation, CuSeqlensDtype) {
  Ragged r;
  std::vector<float> f(4, 0.f);
  Tensor cq(f.data(), DType::f32, {4});
  expect_error([&] { attention_forward_ragged(r.Qr(), r.Kr(), r.Vr(), cq, r.CK(), r.Or(), r.Lr(), r.opt); },
               ErrorCode::invalid_argument, "cu_seqlens_q", r);
}

TEST(Validation, RaggedLseShape) {
  Ragged r;
  Tensor l(r.lse.data(), DType::f32, {10, r.hq});
  expect_error([&] { attention_forward_ragged(r.Qr(), r.Kr(), r.Vr(), r.CQ(), r.CK(), r.Or(), l, r.opt); },
               ErrorCode::invalid_argument, "lse", r);
}

TEST(Validation, BackwardGradShape) {
  Problem p;
  Tensor dout(p.dout.data(), DType::f32, {p.b, p.sq, p.hq, p.d});
  Tensor dq(p.dq.data(), DType::f32, {p.b, p.sq, p.hq, p.d});
  Tensor dk(p.dk.data(), DType::f32, {p.b, p.sk, p.hkv, p.d});
  Tensor dv_bad(p.dv.data(), DType::f32, {p.b, p.sk - 1, p.hkv, p.d});
  std::vector<float> o(p.q.size(), 0.1f), l(p.lse.size(), 0.0f);
  Tensor O(o.data(), DType::f32, {p.b, p.sq, p.hq, p.d});
  Tensor L(l.data(), DType::f32, {p.b, p.hq, p.sq});
  expect_error([&] { attention_backward(p.Q(), p.K(), p.V(), O, dout, L, dq, dk, dv_bad, p.opt); },
               ErrorCode::invalid_argument, "dv", p);
}

TEST(Validation, BackwardNeedsLse) {
  Problem p;
  Tensor dout(p.dout.data(), DType::f32, {p.b, p.sq, p.hq, p.d});
  Tensor dq(p.dq.data(), DType::f32, {p.b, p.sq, p.hq, p.d});
  Tensor dk(p.dk.data(), DType::f32, {p.b, p.sk, p.hkv, p.d});
  Tensor dv(p.dv.data(), DType::f32, {p.b, p.sk, p.hkv, p.d});
  std::vector<float> o(p.q.size(), 0.1f);
  Tensor O(o.data(), DType::f32, {p.b, p.sq, p.hq, p.d});
  expect_error([&] { attention_backward(p.Q(), p.K(), p.V(), O, dout, Tensor{}, dq, dk, dv, p.opt); },
               ErrorCode::invalid_argument, "lse", p);
}

TEST(Validation, MergeStatesShapes) {
  std::vector<float> o(2 * 3 * 4 * 8, 1.f), l(2 * 3 * 4, 0.f), out(3 * 4 * 8, kSentinel);
  Tensor os(o.data(), DType::f32, {2, 3, 4, 8});
  Tensor ls(l.data(), DType::f32, {2, 3, 5});
  Tensor ot(out.data(), DType::f32, {3, 4, 8});
  try {
    merge_states(os, ls, ot, Tensor{});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "lse_states");
  }
  for (float x : out) EXPECT_EQ(x, kSentinel);
}

// ---------------------------------------------------------------------------------------------
// FP8 forward: e4m3 q/k/v, bf16 out, fp32 descales (batch, heads_kv).

constexpr std::uint16_t kSentinelBf16 = 0x7777;
constexpr std::uint8_t kOneE4m3 = 0x38;  // 1.0

struct Fp8Problem {
  int b = 2, sq = 5, sk = 7, hq = 4, hkv = 2, d = 64;
  std::vector<std::uint8_t> q, k, v;
  std::vector<std::uint16_t> out;
  std::vector<float> lse, dq, dk, dv;
  AttentionOptions opt;
  Fp8Problem() {
    q.assign(b * sq * hq * d, kOneE4m3);
    k.assign(b * sk * hkv * d, kOneE4m3);
    v.assign(b * sk * hkv * d, kOneE4m3);
    out.assign(q.size(), kSentinelBf16);
    lse.assign(b * hq * sq, kSentinel);
    dq.assign(b * hkv, 0.5f);
    dk.assign(b * hkv, 0.25f);
    dv.assign(b * hkv, 2.0f);
    opt.return_lse = true;
  }
  Tensor Q() { return Tensor(q.data(), DType::e4m3, {b, sq, hq, d}); }
  Tensor K() { return Tensor(k.data(), DType::e4m3, {b, sk, hkv, d}); }
  Tensor V() { return Tensor(v.data(), DType::e4m3, {b, sk, hkv, d}); }
  Tensor O() { return Tensor(out.data(), DType::bf16, {b, sq, hq, d}); }
  Tensor L() { return Tensor(lse.data(), DType::f32, {b, hq, sq}); }
  Fp8Descale S() {
    return {Tensor(dq.data(), DType::f32, {b, hkv}), Tensor(dk.data(), DType::f32, {b, hkv}),
            Tensor(dv.data(), DType::f32, {b, hkv})};
  }
  void call(const Fp8Descale& s) { attention_forward_fp8(Q(), K(), V(), s, O(), L(), opt); }
  bool outputs_untouched() const {
    for (std::uint16_t x : out)
      if (x != kSentinelBf16) return false;
    for (float x : lse)
      if (x != kSentinel) return false;
    return true;
  }
};

std::string message_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Validation, Fp8ValidProblemRuns) {
  Fp8Problem p;
  p.call(p.S());
  EXPECT_FALSE(p.outputs_untouched());
  // Every key is the same, so out = v * descale.v = 2 exactly; LSE = s + ln 7 with
  // s = scale * (q dq) . (k dk) = 64 * 0.5 * 0.25 / 8 = 1.
  for (std::uint16_t x : p.out) EXPECT_EQ(x, 0x4000);  // bf16 2.0
  for (float x : p.lse) EXPECT_NEAR(x, 1.0 + std::log(7.0), 1e-6);
}

TEST(Validation, Fp8AbsentDescalesRun) {
  Fp8Problem p;
  p.call(Fp8Descale{});
  for (std::uint16_t x : p.out) EXPECT_EQ(x, 0x3f80);  // bf16 1.0
}

TEST(Validation, ForwardRefusesFp8) {
  Fp8Problem p;
  expect_error([&] { attention_forward(p.Q(), p.K(), p.V(), p.O(), p.L(), p.opt); }, ErrorCode::invalid_argument,
               "q", p);
  EXPECT_NE(message_of([&] { attention_forward(p.Q(), p.K(), p.V(), p.O(), p.L(), p.opt); }).find("attention_forward_fp8"),
            std::string::npos);
}

TEST(Validation, BackwardRefusesFp8) {
  Fp8Problem p;
  std::vector<std::uint8_t> o(p.q.size(), kOneE4m3), dout(p.q.size(), kOneE4m3);
  std::vector<std::uint8_t> dq(p.q.size(), 0x55), dk(p.k.size(), 0x55), dv(p.v.size(), 0x55);
  const Tensor O(o.data(), DType::e4m3, {p.b, p.sq, p.hq, p.d}), dO(dout.data(), DType::e4m3, {p.b, p.sq, p.hq, p.d});
  const Tensor dQ(dq.data(), DType::e4m3, {p.b, p.sq, p.hq, p.d}), dK(dk.data(), DType::e4m3, {p.b, p.sk, p.hkv, p.d}),
      dV(dv.data(), DType::e4m3, {p.b, p.sk, p.hkv, p.d});
  expect_error([&] { attention_backward(p.Q(), p.K(), p.V(), O, dO, p.L(), dQ, dK, dV, p.opt); },
               ErrorCode::unsupported, "q", p);
  EXPECT_NE(message_of([&] { attention_backward(p.Q(), p.K(), p.V(), O, dO, p.L(), dQ, dK, dV, p.opt); }).find("fp8"),
            std::string::npos);
  for (auto* g : {&dq, &dk, &dv})
    for (std::uint8_t x : *g) EXPECT_EQ(x, 0x55);
}

TEST(Validation, Fp8InputDtype) {
  Fp8Problem p;
  std::vector<std::uint16_t> qb(p.q.size(), 0x3f80);
  const Tensor q(qb.data(), DType::bf16, {p.b, p.sq, p.hq, p.d});
  expect_error([&] { attention_forward_fp8(q, p.K(), p.V(), p.S(), p.O(), p.L(), p.opt); },
               ErrorCode::invalid_argument, "q", p);
}

TEST(Validation, Fp8DtypesAgree) {
  Fp8Problem p;
  Tensor v = p.V();
  v.dtype = DType::e5m2;
  expect_error([&] { attention_forward_fp8(p.Q(), p.K(), v, p.S(), p.O(), p.L(), p.opt); },
               ErrorCode::invalid_argument, "v", p);
}

TEST(Validation, Fp8OutIsBf16) {
  Fp8Problem p;
  Tensor o = p.O();
  o.dtype = DType::f16;
  expect_error([&] { attention_forward_fp8(p.Q(), p.K(), p.V(), p.S(), o, p.L(), p.opt); },
               ErrorCode::invalid_argument, "out", p);
}

TEST(Validation, Fp8DescaleShape) {
  Fp8Problem p;
  Fp8Descale s = p.S();
  s.q = Tensor(p.dq.data(), DType::f32, {p.hkv, p.b - 1});
  expect_error([&] { p.call(s); }, ErrorCode::invalid_argument, "descale.q", p);
  const std::string msg = message_of([&] { p.call(s); });
  EXPECT_NE(msg.find("expected fp32 of shape (batch=2, heads_kv=2)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(2, 1)"), std::string::npos) << msg;
}

TEST(Validation, Fp8DescaleRank) {
  Fp8Problem p;
  Fp8Descale s = p.S();
  s.k = Tensor(p.dk.data(), DType::f32, {p.b * p.hkv});
  expect_error([&] { p.call(s); }, ErrorCode::invalid_argument, "descale.k", p);
}

TEST(Validation, Fp8DescaleDtype) {
  Fp8Problem p;
  Fp8Descale s = p.S();
  s.v.dtype = DType::f16;
  expect_error([&] { p.call(s); }, ErrorCode::invalid_argument, "descale.v", p);
}

TEST(Validation, Fp8DescaleNullData) {
  Fp8Problem p;
  Fp8Descale s = p.S();
  s.q = Tensor(nullptr, DType::f32, {p.b, p.hkv});  // not absent: a shape without data
  expect_error([&] { p.call(s); }, ErrorCode::invalid_argument, "descale.q", p);
}

TEST(Validation, Fp8DescaleDevice) {
  Fp8Problem p;
  Fp8Descale s = p.S();
  s.k.device = Device::cuda(0);
  expect_error([&] { p.call(s); }, ErrorCode::invalid_argument, "descale.k", p);
}

TEST(Validation, Fp8DescaleNegativeStride) {
  Fp8Problem p;
  Fp8Descale s = p.S();
  s.v = Tensor(p.dv.data() + 2, DType::f32, {p.b, p.hkv}, {-2, 1});
  expect_error([&] { p.call(s); }, ErrorCode::invalid_argument, "descale.v", p);
}

TEST(Validation, Fp8DescaleFiniteAndNotNegative) {
  for (float bad : {std::numeric_limits<float>::infinity(), std::nanf(""), -0.5f}) {
    Fp8Problem p;
    p.dk[2] = bad;  // (sequence 1, kv head 0)
    expect_error([&] { p.call(p.S()); }, ErrorCode::invalid_argument, "descale.k[1, 0]", p);
  }
}

TEST(Validation, Fp8DescaleProductMustBeFinite) {
  // Each factor finite, their product with the scale not: the kernels fold scale * dq * dk into one
  // fp32 factor, which would be inf (NaN outputs).
  Fp8Problem p;
  p.dq[2] = 1e20f;
  p.dk[2] = 1e20f;  // (sequence 1, kv head 0)
  expect_error([&] { p.call(p.S()); }, ErrorCode::invalid_argument, "descale.k[1, 0]", p);
  Fp8Problem fine;  // the same factors in different heads are fine
  fine.dq[2] = 1e20f;
  fine.dk[3] = 1e20f;
  EXPECT_NO_THROW(fine.call(fine.S()));
}

// The usual rules hold for the fp8 entry too (one example: the LSE's shape).
TEST(Validation, Fp8LseShape) {
  Fp8Problem p;
  const Tensor l(p.lse.data(), DType::f32, {p.b, p.sq, p.hq});
  expect_error([&] { attention_forward_fp8(p.Q(), p.K(), p.V(), p.S(), p.O(), l, p.opt); },
               ErrorCode::invalid_argument, "lse", p);
}

// Ragged: the descales' batch is the number of sequences of cu_seqlens.
struct Fp8Ragged : Fp8Problem {
  std::vector<std::int32_t> cuq{0, 3, 5, 10}, cuk{0, 4, 4, 7};
  std::vector<float> ds3;
  Fp8Ragged() { ds3.assign(3 * hkv, 0.5f); }
  Tensor Qr() { return Tensor(q.data(), DType::e4m3, {10, hq, d}); }
  Tensor Kr() { return Tensor(k.data(), DType::e4m3, {7, hkv, d}); }
  Tensor Vr() { return Tensor(v.data(), DType::e4m3, {7, hkv, d}); }
  Tensor Or() { return Tensor(out.data(), DType::bf16, {10, hq, d}); }
  Tensor Lr() { return Tensor(lse.data(), DType::f32, {hq, 10}); }
  Tensor CQ() { return Tensor(cuq.data(), DType::i32, {static_cast<std::int64_t>(cuq.size())}); }
  Tensor CK() { return Tensor(cuk.data(), DType::i32, {static_cast<std::int64_t>(cuk.size())}); }
  Tensor D3() { return Tensor(ds3.data(), DType::f32, {3, hkv}); }
  void call(const Fp8Descale& s) { attention_forward_fp8_ragged(Qr(), Kr(), Vr(), CQ(), CK(), s, Or(), Lr(), opt); }
};

TEST(Validation, Fp8RaggedValidRuns) {
  Fp8Ragged r;
  r.call({r.D3(), r.D3(), r.D3()});
  EXPECT_FALSE(r.outputs_untouched());
}

TEST(Validation, Fp8RaggedDescaleBatch) {
  Fp8Ragged r;
  const Tensor two(r.ds3.data(), DType::f32, {2, r.hkv});  // the dense problem's batch, not 3 sequences
  expect_error([&] { r.call({r.D3(), two, r.D3()}); }, ErrorCode::invalid_argument, "descale.k", r);
}

TEST(Validation, Fp8RaggedNeedsCuSeqlens) {
  Fp8Ragged r;
  expect_error([&] {
    attention_forward_fp8_ragged(r.Qr(), r.Kr(), r.Vr(), Tensor{}, r.CK(), {}, r.Or(), r.Lr(), r.opt);
  }, ErrorCode::invalid_argument, "cu_seqlens_q", r);
}

// The soft cap's check (options.softcap, validate.cpp) sits in the code every dense entry point
// shares; this checks that each of them reaches it: a cap whose folded factors overflow (1e-39:
// ln(2) / c past FLT_MAX, the backward's factor) and a negative one, with nothing written. The
// same calls with caps of 0 and 30 must run (the check comes before the gradients' own, so
// this shows the other arguments are valid and the error is the cap's alone).
TEST(Validation, SoftcapCheckedByEveryDenseEntry) {
  for (float cap : {1e-39f, -1.0f, 0.0f, 30.0f}) {
    SCOPED_TRACE(cap);
    const bool good = cap == 0.0f || cap == 30.0f;
    // Runs call() and expects it to run (good) or to fail naming options.softcap with p untouched.
    auto check = [&](const std::function<void()>& call, const auto& p) {
      if (good) {
        EXPECT_NO_THROW(call());
        EXPECT_FALSE(p.outputs_untouched());
      } else {
        expect_error(call, ErrorCode::invalid_argument, "options.softcap", p);
      }
    };
    Ragged r;
    r.opt.softcap = cap;
    check([&] { r.call(); }, r);

    Problem p;
    p.opt.softcap = cap;
    Tensor dout(p.dout.data(), DType::f32, {p.b, p.sq, p.hq, p.d});
    Tensor dq(p.dq.data(), DType::f32, {p.b, p.sq, p.hq, p.d});
    Tensor dk(p.dk.data(), DType::f32, {p.b, p.sk, p.hkv, p.d});
    Tensor dv(p.dv.data(), DType::f32, {p.b, p.sk, p.hkv, p.d});
    std::vector<float> o(p.q.size(), 0.1f), l(p.lse.size(), 0.0f);
    Tensor O(o.data(), DType::f32, {p.b, p.sq, p.hq, p.d});
    Tensor L(l.data(), DType::f32, {p.b, p.hq, p.sq});
    check([&] { attention_backward(p.Q(), p.K(), p.V(), O, dout, L, dq, dk, dv, p.opt); }, p);

    Ragged rb;
    rb.opt.softcap = cap;
    Tensor dout_r(rb.dout.data(), DType::f32, {10, rb.hq, rb.d});
    Tensor dq_r(rb.dq.data(), DType::f32, {10, rb.hq, rb.d});
    Tensor dk_r(rb.dk.data(), DType::f32, {7, rb.hkv, rb.d});
    Tensor dv_r(rb.dv.data(), DType::f32, {7, rb.hkv, rb.d});
    std::vector<float> o_r(10 * rb.hq * rb.d, 0.1f), l_r(rb.hq * 10, 0.0f);
    Tensor O_r(o_r.data(), DType::f32, {10, rb.hq, rb.d});
    Tensor L_r(l_r.data(), DType::f32, {rb.hq, 10});
    check([&] {
      attention_backward_ragged(rb.Qr(), rb.Kr(), rb.Vr(), rb.CQ(), rb.CK(), O_r, dout_r, L_r, dq_r, dk_r, dv_r, rb.opt);
    }, rb);

    Fp8Problem f;
    f.opt.softcap = cap;
    check([&] { f.call(f.S()); }, f);

    Fp8Ragged fr;
    fr.opt.softcap = cap;
    check([&] { fr.call({fr.D3(), fr.D3(), fr.D3()}); }, fr);
  }
}

#if !defined(TESSERA_WITH_CUDA)
TEST(Validation, CudaTensorsWithoutCudaBuild) {
  Problem p;
  Tensor q = p.Q(), k = p.K(), v = p.V(), o = p.O(), l = p.L();
  for (Tensor* t : {&q, &k, &v, &o, &l}) t->device = Device::cuda(0);
  expect_error([&] { attention_forward(q, k, v, o, l, p.opt); }, ErrorCode::unsupported, "device", p);
}
#endif

}  // namespace
}  // namespace tessera
