// The naive CUDA baseline (cuBLAS + softmax kernel, S and P materialised) against the fp64
// oracle under the tolerance rule, on dense shapes with odd sizes, GQA, masks and softcap;
// plus its workspace contract.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "api/build_params.h"
#include "cpu/reference.h"
#include "cuda/naive/naive_attention.h"
#include "gpu/gpu_support.h"
#include "support/test_support.h"
#include "tessera/error.h"

namespace tessera::testing {
namespace {

struct NaiveRun {
  AttentionCase host;
  DeviceTensor q, k, v, out, lse;
  NaiveRun(const CaseSpec& spec, std::mt19937_64& rng)
      : host(spec, rng), q(host.q), k(host.k), v(host.v), out(host.out), lse(host.lse) {}

  AttentionParams device_params() const {
    return api::build_forward_params(q.view(), k.view(), v.view(), Tensor{}, Tensor{}, out.view(), lse.view(),
                                     host.options(), {});
  }
  void run() {
    out.poison(host.out);
    lse.poison(host.lse);
    const AttentionParams p = device_params();
    const std::size_t bytes = cuda::naive::naive_workspace_bytes(p);
    void* ws = nullptr;
    if (bytes > 0) TESSERA_TEST_CUDA(cudaMalloc(&ws, bytes));
    cuda::naive::naive_attention_forward(p, ws, bytes);
    TESSERA_TEST_CUDA(cudaDeviceSynchronize());
    if (ws != nullptr) TESSERA_TEST_CUDA(cudaFree(ws));
    out.download(host.out);
    lse.download(host.lse);
  }
};

std::vector<CaseSpec> cases() {
  const DType f16 = DType::f16, bf16 = DType::bf16;
  return {
      dense(bf16, 2, 113, 113, 4, 4, 64, opts(false)),                 // one batched GEMM over (b, h)
      dense(f16, 1, 17, 1023, 8, 1, 128, opts(true)),                  // GQA 8: per (b, kv head) GEMMs
      dense(bf16, 2, 113, 17, 2, 2, 256, opts(true), 8),               // padded rows, top rows see no key
      dense(f16, 1, 1023, 1023, 2, 2, 64, opts(false, 128, 16)),       // window
      dense(bf16, 3, 1, 1, 4, 1, 128, opts(false, -1, -1, 3.0f)),     // seq 1, softcap
      dense(f16, 1, 300, 200, 4, 2, 128, opts(false, -1, 32, 2.0f), 8),  // right window, softcap, GQA 2
      dense(bf16, 1, 40, 0, 2, 1, 64, opts(false)),                    // no keys: O = 0, LSE = -inf
  };
}

class CudaNaive : public ::testing::TestWithParam<CaseSpec> {};

TEST_P(CudaNaive, MatchesOracleWithinRule) {
  const CaseSpec spec = GetParam();
  SCOPED_TRACE(spec.name());
  auto rng = fresh_rng();
  NaiveRun r(spec, rng);
  r.run();
  EXPECT_EQ(r.host.out.count_nan(), 0);
  EXPECT_EQ(r.host.lse.count_nan(), 0);
  EXPECT_TRUE(r.host.out.margins_intact());
  EXPECT_TRUE(r.host.lse.margins_intact());
  const AttentionParams p = r.host.forward_params();
  const auto oracle = cpu::reference::forward(p);
  std::vector<double> naive_lse;
  const auto naive = naive_same_precision_forward(p, &naive_lse);
  EXPECT_LE(max_abs_error(r.host.out_packed(), oracle.o), tolerance(naive, oracle.o, p.dtype))
      << "same-precision naive error " << max_abs_error(naive, oracle.o);
  EXPECT_LE(max_abs_error(r.host.lse_packed(), oracle.lse), tolerance(naive_lse, oracle.lse, DType::f32))
      << "same-precision naive error " << max_abs_error(naive_lse, oracle.lse);
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaNaive, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<CaseSpec>& info) { return "case" + std::to_string(info.index); });

TEST(CudaNaiveWorkspace, SizeAndRefusals) {
  auto rng = fresh_rng();
  NaiveRun r(dense(DType::bf16, 2, 100, 300, 4, 2, 64, opts(false)), rng);
  const AttentionParams p = r.device_params();
  const std::size_t bytes = cuda::naive::naive_workspace_bytes(p);
  EXPECT_GE(bytes, 2u * 2u * 2u * 4u * 100u * 300u);  // S and P, 2 bytes each
  try {
    cuda::naive::naive_attention_forward(p, nullptr, bytes - 1);
    ADD_FAILURE() << "expected workspace_too_small";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::workspace_too_small) << e.what();
  }
  // The size a 32k-token, 32-head problem would need is reported, not allocated.
  AttentionParams big = p;
  big.batch = 1;
  big.heads_q = 32;
  big.heads_kv = 32;
  big.seq_q = big.seq_k = 32768;
  EXPECT_EQ(cuda::naive::naive_workspace_bytes(big), 2ull * 32 * 32768ull * 32768ull * 2);
}

}  // namespace
}  // namespace tessera::testing
