// The naive three-pass baseline (see naive_attention.h).
#include "cuda/naive/naive_attention.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/common/check.h"
#include "cuda/common/types.cuh"
#include "math/mask.h"
#include "tessera/error.h"

namespace tessera::cuda::naive {
namespace {

void check_cublas(cublasStatus_t st, const char* expr) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw Error(ErrorCode::backend_failure, "",
                std::string("cuBLAS error: ") + expr + " failed with status " + std::to_string(static_cast<int>(st)));
}
#define NAIVE_CUBLAS(expr) check_cublas((expr), #expr)

// One handle per device, created on first use and kept for the process (cuBLAS handles are
// expensive to create; the baseline is timed in loops).
cublasHandle_t handle_for(int device) {
  static std::mutex mu;
  static std::vector<cublasHandle_t> handles;
  std::lock_guard<std::mutex> lock(mu);
  if (device >= static_cast<int>(handles.size())) handles.resize(device + 1, nullptr);
  if (handles[device] == nullptr) NAIVE_CUBLAS(cublasCreate(&handles[device]));
  return handles[device];
}

std::size_t align_up(std::size_t n) { return (n + 255) / 256 * 256; }

std::size_t matrix_elems(const AttentionParams& p) {
  return static_cast<std::size_t>(p.batch) * p.heads_q * p.seq_q * p.seq_k;
}

struct SoftmaxArgs {
  const void* s;  // [batch][heads_q][seq_q][seq_k]
  void* p;
  float* lse;     // may be null
  std::int64_t lse_batch, lse_head;
  int heads_q, seq_q, seq_k;
  float softcap;
  math::MaskSpec mask;
};

__device__ float block_reduce(float v, bool is_max, float* red) {
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, w) : v + w;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();  // `red` may still be read from the previous reduction
  if (lane == 0) red[warp] = v;
  __syncthreads();
  const int n = blockDim.x >> 5;
  v = lane < n ? red[lane] : (is_max ? -INFINITY : 0.0f);
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, w) : v + w;
  }
  return v;
}

// One block per row (b, h, i): the framework's fp32 softmax over a row stored in the dtype.
template <typename T>
__global__ void __launch_bounds__(256) softmax_kernel(const SoftmaxArgs a) {
  __shared__ float red[32];
  const std::int64_t row = blockIdx.x;
  const int i = static_cast<int>(row % a.seq_q);
  const std::int64_t bh = row / a.seq_q;
  const T* s = static_cast<const T*>(a.s) + row * a.seq_k;
  T* p = static_cast<T*>(a.p) + row * a.seq_k;
  const math::KeyRange kr = math::visible_keys(a.mask, i);
  auto score = [&](int j) {
    float x = static_cast<float>(s[j]);
    return a.softcap > 0.0f ? a.softcap * tanhf(x / a.softcap) : x;
  };
  float m = -INFINITY;
  for (int j = kr.begin + threadIdx.x; j < kr.end; j += blockDim.x) m = fmaxf(m, score(j));
  m = block_reduce(m, true, red);
  float l = 0.0f;
  if (m != -INFINITY)
    for (int j = kr.begin + threadIdx.x; j < kr.end; j += blockDim.x) l += expf(score(j) - m);
  l = block_reduce(l, false, red);
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int j = threadIdx.x; j < a.seq_k; j += blockDim.x) {
    const float v = (j >= kr.begin && j < kr.end && l > 0.0f) ? expf(score(j) - m) * inv : 0.0f;
    p[j] = static_cast<T>(v);
  }
  if (a.lse != nullptr && threadIdx.x == 0) {
    const std::int64_t b = bh / a.heads_q;
    const int h = static_cast<int>(bh % a.heads_q);
    a.lse[b * a.lse_batch + h * a.lse_head + i] = l > 0.0f ? m + logf(l) : -INFINITY;
  }
}

// seq_k == 0: O = 0 and LSE = -inf for every row.
template <typename T>
__global__ void empty_rows_kernel(StridedPtr o, LsePtr lse, int heads, int seq_q, int head_dim, std::int64_t rows) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  if (r >= rows) return;
  const int h = static_cast<int>(r % heads);
  const std::int64_t bi = r / heads;
  const std::int64_t b = bi / seq_q;
  const int i = static_cast<int>(bi % seq_q);
  T* out = static_cast<T*>(o.ptr) + b * o.batch + i * o.row + h * o.head;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) out[d] = static_cast<T>(0.0f);
  if (lse.ptr != nullptr && threadIdx.x == 0) lse.ptr[b * lse.batch + h * lse.head + i] = -INFINITY;
}

template <typename T>
void run(const AttentionParams& p, void* workspace) {
  const auto stream = static_cast<cudaStream_t>(p.stream);
  const cudaDataType_t dt = Traits<T>::is_bf16 ? CUDA_R_16BF : CUDA_R_16F;
  const std::int64_t rows = static_cast<std::int64_t>(p.batch) * p.seq_q * p.heads_q;
  if (p.seq_k == 0) {
    const dim3 block(32, 8);
    empty_rows_kernel<T><<<static_cast<unsigned>((rows + 7) / 8), block, 0, stream>>>(p.o, p.lse, p.heads_q, p.seq_q,
                                                                                      p.head_dim, rows);
    TESSERA_CUDA_CHECK_LAUNCH();
    return;
  }
  const std::size_t n = matrix_elems(p);
  T* S = static_cast<T*>(workspace);
  T* P = reinterpret_cast<T*>(static_cast<unsigned char*>(workspace) + align_up(n * sizeof(T)));
  cublasHandle_t h = handle_for(p.device.index);
  NAIVE_CUBLAS(cublasSetStream(h, stream));
  const int group = p.group();
  const long long sq = p.seq_q, sk = p.seq_k, d = p.head_dim;
  const float alpha_s = p.mask.scale, one = 1.0f, zero = 0.0f;
  const auto* q = static_cast<const T*>(p.q.ptr);
  const auto* k = static_cast<const T*>(p.k.ptr);
  const auto* v = static_cast<const T*>(p.v.ptr);
  auto* o = static_cast<T*>(p.o.ptr);

  // Row-major X (rows, d) with row stride r is column-major (d, rows) with ld r, so
  //   S^T (sk x sq, col-major, ld sk)  = K^T(op) * Q   and   O^T (d x sq, ld o.row) = V^T * P^T.
  // Batched calls, as a framework's batched matmul over (b, h) would run:
  // - flat (no GQA, each tensor's batch stride heads x head stride, e.g. (b, h, s, d) storage):
  //   one call over every (b, h);
  // - else one call per (b, member r of a query-head group) over the kv heads: query head
  //   hk group + r (stride group x head) against kv head hk (stride head), its S and P matrices
  //   group apart. (b, s, h, d) storage without GQA: one call per batch over its heads.
  const bool flat = group == 1 && p.q.batch == p.heads_q * p.q.head && p.k.batch == p.heads_kv * p.k.head &&
                    p.v.batch == p.heads_kv * p.v.head && p.o.batch == p.heads_q * p.o.head;
  const int outer = flat ? 1 : p.batch * group;
  const int count = flat ? p.batch * p.heads_q : p.heads_kv;
  const long long q_stride = flat ? p.q.head : group * p.q.head;
  const long long o_stride = flat ? p.o.head : group * p.o.head;
  const long long mat_stride = (flat ? 1 : group) * sq * sk;
  for (int c = 0; c < outer; ++c) {
    const int b = flat ? 0 : c / group, r = flat ? 0 : c % group;
    const T* qc = q + p.q.offset(b, 0, r);
    const T* kc = k + p.k.offset(b, 0, 0);
    const std::int64_t mat0 = (static_cast<std::int64_t>(b) * p.heads_q + r) * sq * sk;
    NAIVE_CUBLAS(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(sk), static_cast<int>(sq),
                                            static_cast<int>(d), &alpha_s, kc, dt, static_cast<int>(p.k.row),
                                            p.k.head, qc, dt, static_cast<int>(p.q.row), q_stride, &zero, S + mat0,
                                            dt, static_cast<int>(sk), mat_stride, count, CUBLAS_COMPUTE_32F,
                                            CUBLAS_GEMM_DEFAULT));
  }

  SoftmaxArgs sa{S, P, p.lse.ptr, p.lse.batch, p.lse.head, p.heads_q, p.seq_q, p.seq_k, p.mask.softcap,
                 math::MaskSpec::make(p.seq_q, p.seq_k, p.mask.causal, p.mask.window_left, p.mask.window_right)};
  if (rows > 0) {
    softmax_kernel<T><<<static_cast<unsigned>(rows), 256, 0, stream>>>(sa);
    TESSERA_CUDA_CHECK_LAUNCH();
  }

  for (int c = 0; c < outer; ++c) {
    const int b = flat ? 0 : c / group, r = flat ? 0 : c % group;
    const T* vc = v + p.v.offset(b, 0, 0);
    T* oc = o + p.o.offset(b, 0, r);
    const std::int64_t mat0 = (static_cast<std::int64_t>(b) * p.heads_q + r) * sq * sk;
    NAIVE_CUBLAS(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(d), static_cast<int>(sq),
                                            static_cast<int>(sk), &one, vc, dt, static_cast<int>(p.v.row), p.v.head,
                                            P + mat0, dt, static_cast<int>(sk), mat_stride, &zero, oc, dt,
                                            static_cast<int>(p.o.row), o_stride, count, CUBLAS_COMPUTE_32F,
                                            CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace

std::size_t naive_workspace_bytes(const AttentionParams& p) {
  const std::size_t n = matrix_elems(p);
  const std::size_t elem = p.dtype == DType::f32 ? 4 : 2;
  return 2 * align_up(n * elem);
}

void naive_attention_forward(const AttentionParams& p, void* workspace, std::size_t bytes) {
  if (p.ragged())
    throw Error(ErrorCode::unsupported, "cu_seqlens_q", "naive baseline: expected dense tensors, got ragged ones");
  if (p.dtype != DType::f16 && p.dtype != DType::bf16)
    throw Error(ErrorCode::unsupported, "q",
                std::string("naive baseline: dtype: expected f16 or bf16, got ") + dtype_name(p.dtype));
  const std::size_t need = naive_workspace_bytes(p);
  if (bytes < need || (need > 0 && workspace == nullptr))
    throw Error(ErrorCode::workspace_too_small, "workspace",
                "naive baseline: workspace: expected at least " + std::to_string(need) + " bytes, got " +
                    std::to_string(bytes));
  // cuBLAS takes 32-bit leading dimensions and counts.
  const long long big = 2147483647LL;
  if (p.q.row > big || p.k.row > big || p.v.row > big || p.o.row > big ||
      static_cast<long long>(p.batch) * p.heads_q > big)
    throw Error(ErrorCode::unsupported, "q", "naive baseline: strides and batch x heads must fit in int32");
  if (p.batch == 0 || p.seq_q == 0 || p.heads_q == 0) return;
  int previous = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&previous));
  if (previous != p.device.index) TESSERA_CUDA_CHECK(cudaSetDevice(p.device.index));
  try {
    if (p.dtype == DType::bf16)
      run<__nv_bfloat16>(p, workspace);
    else
      run<__half>(p, workspace);
  } catch (...) {
    if (previous != p.device.index) (void)cudaSetDevice(previous);
    throw;
  }
  if (previous != p.device.index) TESSERA_CUDA_CHECK(cudaSetDevice(previous));
}

}  // namespace tessera::cuda::naive
