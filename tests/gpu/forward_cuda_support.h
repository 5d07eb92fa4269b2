// Shared by the CUDA forward's GPU suites (test_forward_cuda.cpp: the oracle grid, long rows,
// streams, graphs, dispatch, refusals; test_forward_launches_cuda.cpp: the sm90 launch shapes and
// their knobs): a host case mirrored on the device and the checks against the fp64 oracle under
// the tolerance rule.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "api/build_params.h"
#include "cpu/reference.h"
#include "gpu/gpu_support.h"
#include "support/test_support.h"
#include "tessera/attention.h"
#include "tessera/error.h"

namespace tessera::testing {

// A host AttentionCase mirrored on the GPU: run() poisons out/lse on both sides, calls the
// public API with device views and downloads the outputs into the host case.
struct GpuCase {
  AttentionCase host;
  DeviceTensor q, k, v, out, lse, cu_q, cu_k;

  GpuCase(const CaseSpec& spec, std::mt19937_64& rng)
      : host(spec, rng), q(host.q), k(host.k), v(host.v), out(host.out), lse(host.lse) {
    if (spec.ragged()) {
      cu_q = DeviceTensor(host.cu_q);
      cu_k = DeviceTensor(host.cu_k);
    }
  }

  void run(const AttentionOptions& o, bool with_lse = true, void* stream = nullptr) {
    out.poison(host.out);
    lse.poison(host.lse);
    ExecutionContext ctx;
    ctx.stream = stream;
    AttentionOptions oo = o;
    oo.return_lse = with_lse;
    const Tensor l = with_lse ? lse.view() : Tensor{};
    if (host.spec.ragged())
      attention_forward_ragged(q.view(), k.view(), v.view(), cu_q.view(), cu_k.view(), out.view(), l, oo, ctx);
    else
      attention_forward(q.view(), k.view(), v.view(), out.view(), l, oo, ctx);
    TESSERA_TEST_CUDA(cudaDeviceSynchronize());
    out.download(host.out);
    lse.download(host.lse);
  }
  void run() { run(host.options()); }

  // The inputs on the device, margins included, are still what was uploaded.
  void expect_inputs_untouched() const {
    for (auto [d, h] : {std::pair{&q, &host.q}, {&k, &host.k}, {&v, &host.v}}) {
      HostTensor copy = *h;
      d->download(copy);
      EXPECT_TRUE(copy.bytes() == h->bytes()) << "an input changed on the device";
    }
  }
};

inline void expect_matches_oracle(const AttentionCase& c, const AttentionParams& p) {
  const auto oracle = cpu::reference::forward(p);
  std::vector<double> naive_lse;
  const auto naive = naive_same_precision_forward(p, &naive_lse);
  std::vector<std::int64_t> st;
  std::vector<int> ln;
  q_rows(p, &st, &ln);
  const auto got = gather_rows(c.out, p.o, p.dtype, p.batch, st, ln, p.heads_q, p.head_dim, p.ragged());
  const auto got_lse = gather_lse(c.lse, p.lse, p.batch, st, ln, p.heads_q, p.ragged());
  EXPECT_LE(max_abs_error(got, oracle.o), tolerance(naive, oracle.o, p.dtype))
      << "naive error " << max_abs_error(naive, oracle.o);
  // LSE is fp32 whatever the inputs; max_abs_error also requires -inf exactly where expected.
  EXPECT_LE(max_abs_error(got_lse, oracle.lse), tolerance(naive_lse, oracle.lse, DType::f32))
      << "naive error " << max_abs_error(naive_lse, oracle.lse);
}

// Every output element written (no NaN, margins intact) and within the rule against the oracle.
inline void expect_written_within_rule(const AttentionCase& c) {
  EXPECT_EQ(c.out.count_nan(), 0);
  EXPECT_EQ(c.lse.count_nan(), 0);
  EXPECT_TRUE(c.out.margins_intact());
  EXPECT_TRUE(c.lse.margins_intact());
  expect_matches_oracle(c, c.forward_params());
}

// Each case run on fresh random inputs (outputs poisoned, inputs in NaN margins) and checked as
// above, its inputs left as they were; label is added to each case's trace (e.g. the knob
// setting it ran under).
template <std::size_t N>
inline void expect_cases_written_within_rule(const CaseSpec (&cases)[N], std::mt19937_64& rng,
                                             const std::string& label = "") {
  for (const CaseSpec& spec : cases) {
    SCOPED_TRACE(spec.name() + label);
    GpuCase g(spec, rng);
    g.run();
    g.expect_inputs_untouched();
    expect_written_within_rule(g.host);
  }
}

// Whether this process's forward calls run the sm90 kernels: a compute capability 9.0 device
// and no TESSERA_CUDA_FORWARD=portable (the build's own sm90 kernels are checked by the caller).
inline bool sm90_forward_runs() {
  int device = 0, major = 0, minor = 0;
  TESSERA_TEST_CUDA(cudaGetDevice(&device));
  TESSERA_TEST_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  TESSERA_TEST_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  const char* forced = std::getenv("TESSERA_CUDA_FORWARD");
  return major == 9 && minor == 0 && !(forced != nullptr && std::string(forced) == "portable");
}

// A graph of one forward call replays to the eager call's bits, three times.
inline void expect_graph_replays_match_the_eager_call(const CaseSpec& spec) {
  auto rng = fresh_rng();
  GpuCase g(spec, rng);
  g.run();
  // The eager call writes every element (the replays are compared with its bytes: an unwritten
  // LSE would compare equal to an unwritten replay's).
  EXPECT_EQ(g.host.out.count_nan(), 0);
  EXPECT_EQ(g.host.lse.count_nan(), 0);
  EXPECT_TRUE(g.host.out.margins_intact());
  EXPECT_TRUE(g.host.lse.margins_intact());
  const auto o_eager = g.host.out.bytes(), l_eager = g.host.lse.bytes();
  CapturedGraph graph([&](void* stream) {
    ExecutionContext ctx;
    ctx.stream = stream;
    attention_forward(g.q.view(), g.k.view(), g.v.view(), g.out.view(), g.lse.view(), g.host.options(), ctx);
  });
  for (int replay = 0; replay < 3; ++replay) {
    SCOPED_TRACE("replay " + std::to_string(replay));
    expect_replay_writes(graph, g, o_eager, l_eager);
  }
}

// A forward knob set to a value it refuses: the sm90 launcher reads its knobs on every call it takes
// (the portable path never reads them), so a head_dim 128 call fails with an error that names the
// variable and what it expected, and writes nothing.
inline void expect_sm90_knob_refused(const char* var, const char* value, const std::string& expected) {
#if defined(TESSERA_HAS_SM90_KERNELS)
  if (!sm90_forward_runs()) return;
  ScopedEnv bad(var, value);
  auto rng = fresh_rng();
  GpuCase g(dense(DType::bf16, 1, 64, 64, 2, 1, 128, opts(false)), rng);
  try {
    g.run();
    ADD_FAILURE() << var << "=" << value << " was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::string(var) + ": " + expected), std::string::npos) << e.what();
  }
  HostTensor out = g.host.out;
  g.out.download(out);
  EXPECT_EQ(out.count_nan(), out.numel());  // nothing written: the poison stays
  EXPECT_TRUE(out.margins_intact());
#else
  (void)var, (void)value, (void)expected;
#endif
}

}  // namespace tessera::testing
