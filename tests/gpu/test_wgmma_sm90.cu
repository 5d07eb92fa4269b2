// GPU unit tests of the sm90 wgmma wrappers (src/cuda/primitives/sm90/wgmma.cuh, smem_desc.h):
// SS and RS (A from registers) forms with K- or MN-major B, bf16/f16 and e4m3, the forward's
// weights through shared memory into P V, and wgmma.wait_group 1; every result is exact and
// compared bit for bit. Same GoogleTest suite as test_primitives_sm90.cu (PrimitivesSm90). Built
// for sm_90a only (tests/CMakeLists.txt); every test skips on a device below compute capability 9.0.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/common/softmax_fragment.cuh"
#include "cuda/common/types.cuh"
#include "cuda/primitives/sm90/fence.cuh"
#include "cuda/primitives/sm90/mbarrier.cuh"
#include "cuda/primitives/sm90/tensor_map.h"
#include "cuda/primitives/sm90/tma.cuh"
#include "cuda/primitives/sm90/wgmma.cuh"
#include "cuda/sm90/common/weights_smem.cuh"
#include "gpu/gpu_support.h"
#include "gpu/sm90_primitive_test_support.cuh"

namespace tessera::testing {
namespace {

// ---------------------------------------------------------------------------------------------
// wgmma m64nNk16 over K = 64 (four k16 steps, descriptors advanced by 32 bytes), A (64 x 64)
// and B (N x 64), both K-major. Small integers and halves: every product and partial sum is
// exact in fp32, so the result must match the host bit for bit.

template <typename T>
constexpr CUtensorMapDataType map_type() {
  return Traits<T>::is_bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

// A and B by TMA (128-byte swizzle) into shared memory; one warpgroup.
template <typename T, int N>
__global__ void wgmma_ss_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                                float* c) {
  __shared__ alignas(8) std::uint64_t bar;
  unsigned char* a_tile = smem_1024();
  unsigned char* b_tile = a_tile + 64 * 128;  // 8192: still 1024-aligned
  const std::uint32_t b = sm90::smem_u32(&bar);
  if (threadIdx.x == 0) {
    sm90::mbarrier_init(b, 1);
    sm90::fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    sm90::mbarrier_arrive_expect_tx(b, 64 * 128 + N * 128);
    sm90::tma_load_2d(sm90::smem_u32(a_tile), &map_a, b, 0, 0);
    sm90::tma_load_2d(sm90::smem_u32(b_tile), &map_b, b, 0, 0);
  }
  wait_or_trap(b, 0);
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = 1000.0f;  // must be ignored: the first step does not accumulate
  sm90::wgmma_fence();
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const std::uint64_t da = sm90::make_smem_desc_sw128_kmajor(sm90::smem_u32(a_tile) + 32 * k);
    const std::uint64_t db = sm90::make_smem_desc_sw128_kmajor(sm90::smem_u32(b_tile) + 32 * k);
    sm90::wgmma_ss<N, Traits<T>::is_bf16>(d, da, db, k > 0);
  }
  sm90::wgmma_commit();
  sm90::wgmma_wait<0>();
  sm90::wgmma_fence_operand(d);
  store_accumulators<N>(d, c, threadIdx.x, 0);
}

template <typename T, int N>
void check_wgmma_ss() {
  const GemmCase g(64, N);
  DeviceBuffer<T> da(to_type<T>(g.a)), db(to_type<T>(g.b));
  DeviceBuffer<float> dc(64 * N);
  const CUtensorMap map_a = sm90::make_tensor_map_2d(map_type<T>(), da.get(), 64, 64, 128, 64, 64);
  const CUtensorMap map_b = sm90::make_tensor_map_2d(map_type<T>(), db.get(), N, 64, 128, N, 64);
  wgmma_ss_kernel<T, N><<<1, 128, 64 * 128 + N * 128 + 1024>>>(map_a, map_b, dc.get());
  TESSERA_TEST_CUDA(cudaGetLastError());
  g.check(dc.read(), Traits<T>::name);
}

TEST(PrimitivesSm90, WgmmaSsM64N32Bf16) { TESSERA_REQUIRE_SM90(); check_wgmma_ss<__nv_bfloat16, 32>(); }
TEST(PrimitivesSm90, WgmmaSsM64N32F16) { TESSERA_REQUIRE_SM90(); check_wgmma_ss<__half, 32>(); }
TEST(PrimitivesSm90, WgmmaSsM64N64Bf16) { TESSERA_REQUIRE_SM90(); check_wgmma_ss<__nv_bfloat16, 64>(); }
TEST(PrimitivesSm90, WgmmaSsM64N64F16) { TESSERA_REQUIRE_SM90(); check_wgmma_ss<__half, 64>(); }
TEST(PrimitivesSm90, WgmmaSsM64N128F16) { TESSERA_REQUIRE_SM90(); check_wgmma_ss<__half, 128>(); }
TEST(PrimitivesSm90, WgmmaSsM64N192Bf16) { TESSERA_REQUIRE_SM90(); check_wgmma_ss<__nv_bfloat16, 192>(); }
TEST(PrimitivesSm90, WgmmaSsM64N192F16) { TESSERA_REQUIRE_SM90(); check_wgmma_ss<__half, 192>(); }
TEST(PrimitivesSm90, WgmmaSsM64N256Bf16) { TESSERA_REQUIRE_SM90(); check_wgmma_ss<__nv_bfloat16, 256>(); }

// SS with an MN-major B: A (64 x 64) written K-major at the swizzled positions, B as its 64 K rows
// of N contiguous elements in 128-byte-swizzled panels of 64 columns (as TMA would load K of a
// backward's dQ = dS K, or V), descriptor make_smem_desc_sw128_mnmajor, k16 step = 2048 bytes.
template <typename T, int N>
__global__ void wgmma_ss_mn_kernel(const float* asrc, const float* bsrc, float* c) {
  unsigned char* a_tile = smem_1024();
  unsigned char* b_tile = a_tile + 64 * 128;
  auto* a16 = reinterpret_cast<T*>(a_tile);
  auto* b16 = reinterpret_cast<T*>(b_tile);
  constexpr int kPanelBytes = 64 * 128;
  for (int i = threadIdx.x; i < 64 * 64; i += blockDim.x) {
    const int m = i / 64, k = i % 64;
    if constexpr (Traits<T>::is_bf16) a16[swz128(m, k)] = __float2bfloat16(asrc[i]);
    else a16[swz128(m, k)] = __float2half(asrc[i]);
  }
  for (int i = threadIdx.x; i < N * 64; i += blockDim.x) {
    const int n = i / 64, k = i % 64;  // bsrc is N x K row-major (GemmCase::b)
    const int at = (n / 64) * (kPanelBytes / 2) + swz128(k, n % 64);
    if constexpr (Traits<T>::is_bf16) b16[at] = __float2bfloat16(bsrc[i]);
    else b16[at] = __float2half(bsrc[i]);
  }
  sm90::fence_proxy_async_shared_cta();
  __syncthreads();
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = 3.0f;  // ignored (the first step does not accumulate)
  sm90::wgmma_fence();
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const std::uint64_t da = sm90::make_smem_desc_sw128_kmajor(sm90::smem_u32(a_tile) + 32 * k);
    const std::uint64_t db = sm90::make_smem_desc_sw128_mnmajor(sm90::smem_u32(b_tile) + 2048 * k, kPanelBytes);
    sm90::wgmma_ss<N, Traits<T>::is_bf16, true>(d, da, db, k > 0);
  }
  sm90::wgmma_commit();
  sm90::wgmma_wait<0>();
  sm90::wgmma_fence_operand(d);
  store_accumulators<N>(d, c, threadIdx.x, 0);
}

template <typename T, int N>
void check_wgmma_ss_mn() {
  const GemmCase g(64, N);
  DeviceBuffer<float> da(g.a), db(g.b), dc(64 * N);
  wgmma_ss_mn_kernel<T, N><<<1, 128, 64 * 128 + N * 128 + 1024>>>(da.get(), db.get(), dc.get());
  TESSERA_TEST_CUDA(cudaGetLastError());
  g.check(dc.read(), Traits<T>::name);
}

TEST(PrimitivesSm90, WgmmaSsMnMajorBM64N64Bf16) { TESSERA_REQUIRE_SM90(); check_wgmma_ss_mn<__nv_bfloat16, 64>(); }
TEST(PrimitivesSm90, WgmmaSsMnMajorBM64N64F16) { TESSERA_REQUIRE_SM90(); check_wgmma_ss_mn<__half, 64>(); }
TEST(PrimitivesSm90, WgmmaSsMnMajorBM64N128Bf16) { TESSERA_REQUIRE_SM90(); check_wgmma_ss_mn<__nv_bfloat16, 128>(); }
TEST(PrimitivesSm90, WgmmaSsMnMajorBM64N128F16) { TESSERA_REQUIRE_SM90(); check_wgmma_ss_mn<__half, 128>(); }

// P through shared memory (the sm90 forward's wide head_dim 64 instance): each thread holds a
// 64 x 192 P in the accumulator layout (fp32), pack_weights makes the 16-bit A fragments,
// store_weights_smem (src/cuda/sm90/common/weights_smem.cuh) stores them by stmatrix into a K-major
// 128-byte swizzled buffer, and O = P V runs as the forward runs it: 12 k16 steps with A from
// that buffer (panel kt / 4, + 32 (kt % 4) bytes) and V MN-major (192 keys x 64 columns, 2048 bytes
// per step). Small integers: exact in 16 bits and in the fp32 sums, so the result is compared exactly.
constexpr int kPKeys = 192;
float p_value(int m, int k) { return static_cast<float>((m * 3 + k * 5) % 9 - 4); }
float v_value(int k, int d) { return static_cast<float>((k * 7 + d * 3) % 7 - 3); }

template <typename T>
__global__ void p_smem_pv_kernel(const float* psrc, const float* vsrc, float* c) {
  unsigned char* p_tile = smem_1024();
  unsigned char* v_tile = p_tile + 64 * kPKeys * 2;  // 24576: still 1024-aligned
  auto* v16 = reinterpret_cast<T*>(v_tile);
  for (int i = threadIdx.x; i < kPKeys * 64; i += blockDim.x) {
    const int k = i / 64, d = i % 64;  // vsrc: 192 keys x 64 columns, row-major (as TMA loads V)
    if constexpr (Traits<T>::is_bf16) v16[swz128(k, d)] = __float2bfloat16(vsrc[i]);
    else v16[swz128(k, d)] = __float2half(vsrc[i]);
  }
  const int t = threadIdx.x, warp = t / 32, lane = t % 32, g = lane / 4, q = lane % 4;
  float s[kPKeys / 8][4];
#pragma unroll
  for (int j = 0; j < kPKeys / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = psrc[(16 * warp + g + 8 * (e >> 1)) * kPKeys + 8 * j + 2 * q + (e & 1)];
  std::uint32_t p[kPKeys / 16][4];
  cuda::pack_weights<T, kPKeys>(s, p);
  sm90::store_weights_smem<kPKeys>(sm90::smem_u32(p_tile), p, warp, lane);
  sm90::fence_proxy_async_shared_cta();
  __syncthreads();
  float o[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) o[i] = 5.0f;  // ignored (the first step does not accumulate)
  sm90::wgmma_fence();
  const std::uint64_t dp = sm90::make_smem_desc_sw128_kmajor(sm90::smem_u32(p_tile));
  const std::uint64_t dv = sm90::make_smem_desc_sw128_mnmajor(sm90::smem_u32(v_tile), kPKeys * 128);
#pragma unroll
  for (int kt = 0; kt < kPKeys / 16; ++kt)
    sm90::wgmma_ss<64, Traits<T>::is_bf16, true>(o, sm90::smem_desc_advance(dp, (kt / 4) * 64 * 128 + 32u * (kt % 4)),
                                                 sm90::smem_desc_advance(dv, 2048u * kt), kt > 0);
  sm90::wgmma_commit();
  sm90::wgmma_wait<0>();
  sm90::wgmma_fence_operand(o);
  store_accumulators<64>(o, c, t, 0);
}

template <typename T>
void check_p_smem_pv() {
  std::vector<float> pm(64 * kPKeys), vm(kPKeys * 64), want(64 * 64, 0.0f);
  for (int m = 0; m < 64; ++m)
    for (int k = 0; k < kPKeys; ++k) pm[m * kPKeys + k] = p_value(m, k);
  for (int k = 0; k < kPKeys; ++k)
    for (int d = 0; d < 64; ++d) vm[k * 64 + d] = v_value(k, d);
  for (int m = 0; m < 64; ++m)
    for (int d = 0; d < 64; ++d)
      for (int k = 0; k < kPKeys; ++k) want[m * 64 + d] += pm[m * kPKeys + k] * vm[k * 64 + d];
  DeviceBuffer<float> dp(pm), dv(vm), dc(64 * 64);
  constexpr int kSmem = 2 * 64 * kPKeys * 2 + 1024;  // P and V, 24 KB each: past the 48 KB default
  TESSERA_TEST_CUDA(cudaFuncSetAttribute(p_smem_pv_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  p_smem_pv_kernel<T><<<1, 128, kSmem>>>(dp.get(), dv.get(), dc.get());
  TESSERA_TEST_CUDA(cudaGetLastError());
  const std::vector<float> got = dc.read();
  int bad = 0;
  for (int i = 0; i < 64 * 64; ++i)
    if (got[i] != want[i] && ++bad <= 10)
      ADD_FAILURE() << Traits<T>::name << " row " << i / 64 << " col " << i % 64 << ": got " << got[i] << ", want " << want[i];
  EXPECT_EQ(bad, 0) << Traits<T>::name;
}

TEST(PrimitivesSm90, WeightsThroughSharedMemoryPvBf16) { TESSERA_REQUIRE_SM90(); check_p_smem_pv<__nv_bfloat16>(); }
TEST(PrimitivesSm90, WeightsThroughSharedMemoryPvF16) { TESSERA_REQUIRE_SM90(); check_p_smem_pv<__half>(); }

// The four k16 A fragments (documented register layout) of a 64 x 64 row-major float A, for
// thread t of the warpgroup.
template <typename T>
__device__ void load_a_fragments(const float* a, int t, std::uint32_t (&af)[4][4]) {
  const int w = t / 32, g = (t % 32) / 4, q = t % 4;
  auto A = [&](int r, int k) { return a[r * 64 + k]; };
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int r = 16 * w + g, k0 = 16 * k + 2 * q;
    af[k][0] = Traits<T>::pack2(A(r, k0), A(r, k0 + 1));
    af[k][1] = Traits<T>::pack2(A(r + 8, k0), A(r + 8, k0 + 1));
    af[k][2] = Traits<T>::pack2(A(r, k0 + 8), A(r, k0 + 9));
    af[k][3] = Traits<T>::pack2(A(r + 8, k0 + 8), A(r + 8, k0 + 9));
  }
}

// A from registers (built from global memory by the documented fragment rule), B written into
// shared memory by ordinary stores at the swizzled positions, then fence.proxy.async.
// kBMnMajor false: B written K-major at the swizzled positions (as TMA would), K-major descriptor.
// kBMnMajor true (the P V case: V row-major, keys x head_dim): B written as its 64 K rows of N
// contiguous elements, 64 of N per 128-byte-swizzled panel of 64 rows (8 KB), panels N/64
// apart; descriptor make_smem_desc_sw128_mnmajor, transpose flag set, k16 step = 2048 bytes.
template <typename T, int N, bool kBMnMajor>
__global__ void wgmma_rs_kernel(const float* a, const float* bsrc, float* c) {
  unsigned char* b_tile = smem_1024();
  auto* b16 = reinterpret_cast<T*>(b_tile);
  constexpr int kPanelBytes = 64 * 128;
  for (int i = threadIdx.x; i < N * 64; i += blockDim.x) {
    const int n = i / 64, k = i % 64;  // bsrc is N x K row-major (GemmCase::b)
    const int at = kBMnMajor ? (n / 64) * (kPanelBytes / 2) + swz128(k, n % 64) : swz128(n, k);
    if constexpr (Traits<T>::is_bf16) b16[at] = __float2bfloat16(bsrc[i]);
    else b16[at] = __float2half(bsrc[i]);
  }
  sm90::fence_proxy_async_shared_cta();
  __syncthreads();
  const int t = threadIdx.x;
  std::uint32_t af[4][4];
  load_a_fragments<T>(a, t, af);
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = -7.0f;  // ignored (first step does not accumulate)
  sm90::wgmma_fence();
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const std::uint32_t base = sm90::smem_u32(b_tile);
    const std::uint64_t db = kBMnMajor ? sm90::make_smem_desc_sw128_mnmajor(base + 2048 * k, kPanelBytes)
                                       : sm90::make_smem_desc_sw128_kmajor(base + 32 * k);
    sm90::wgmma_rs<N, Traits<T>::is_bf16, kBMnMajor>(d, af[k], db, k > 0);
  }
  sm90::wgmma_commit();
  sm90::wgmma_wait<0>();
  sm90::wgmma_fence_operand(d);
  store_accumulators<N>(d, c, t, 0);
}

template <typename T, int N, bool kBMnMajor = false>
void check_wgmma_rs() {
  const GemmCase g(64, N);
  DeviceBuffer<float> da(g.a), db(g.b), dc(64 * N);
  wgmma_rs_kernel<T, N, kBMnMajor><<<1, 128, N * 128 + 1024>>>(da.get(), db.get(), dc.get());
  TESSERA_TEST_CUDA(cudaGetLastError());
  g.check(dc.read(), Traits<T>::name);
}

TEST(PrimitivesSm90, WgmmaRsM64N64Bf16) { TESSERA_REQUIRE_SM90(); check_wgmma_rs<__nv_bfloat16, 64>(); }
TEST(PrimitivesSm90, WgmmaRsM64N64F16) { TESSERA_REQUIRE_SM90(); check_wgmma_rs<__half, 64>(); }
TEST(PrimitivesSm90, WgmmaRsM64N128Bf16) { TESSERA_REQUIRE_SM90(); check_wgmma_rs<__nv_bfloat16, 128>(); }
TEST(PrimitivesSm90, WgmmaRsMnMajorBM64N64Bf16) { TESSERA_REQUIRE_SM90(); check_wgmma_rs<__nv_bfloat16, 64, true>(); }
TEST(PrimitivesSm90, WgmmaRsMnMajorBM64N128F16) { TESSERA_REQUIRE_SM90(); check_wgmma_rs<__half, 128, true>(); }
TEST(PrimitivesSm90, WgmmaRsMnMajorBM64N256Bf16) { TESSERA_REQUIRE_SM90(); check_wgmma_rs<__nv_bfloat16, 256, true>(); }

// ---------------------------------------------------------------------------------------------
// FP8 (e4m3) wgmma, k32: A (64 x 128) and B (N x 128), both K-major in one 128-byte swizzled
// panel each (byte (r, k) at r * 128 + ((k / 16) ^ (r % 8)) * 16 + k % 16), four k32 steps
// 32 bytes apart. Values are small integers and halves, exact in e4m3 and in every fp32 sum.

struct Fp8GemmCase {
  int n;
  std::vector<float> a, b, c;  // a: 64 x 128, b: n x 128 (row-major), c = a b^T: 64 x n
  explicit Fp8GemmCase(int n_) : n(n_), a(64 * 128), b(n_ * 128), c(64 * n_) {
    for (int m = 0; m < 64; ++m)
      for (int k = 0; k < 128; ++k) a[m * 128 + k] = a_value(m, k);
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < 128; ++k) b[j * 128 + k] = b_value(j, k);
    for (int m = 0; m < 64; ++m)
      for (int j = 0; j < n; ++j) {
        float acc = 0.0f;
        for (int k = 0; k < 128; ++k) acc += a[m * 128 + k] * b[j * 128 + k];
        c[m * n + j] = acc;
      }
  }
  void check(const std::vector<float>& got, const char* what) const {
    int bad = 0;
    for (int i = 0; i < 64 * n; ++i)
      if (got[i] != c[i] && ++bad <= 10)
        ADD_FAILURE() << what << " row " << i / n << " col " << i % n << ": got " << got[i] << ", want " << c[i];
    EXPECT_EQ(bad, 0) << what;
  }
};

__device__ __forceinline__ int swz128_bytes(int r, int k) { return r * 128 + (((k / 16) ^ (r % 8)) * 16) + k % 16; }

__device__ __forceinline__ unsigned char to_e4m3(float x) {
  return static_cast<unsigned char>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

// kRegA: A from registers (documented k32 fragment), else from shared memory.
template <int N, bool kRegA>
__global__ void wgmma_e4m3_kernel(const float* a, const float* bsrc, float* c) {
  unsigned char* b_tile = smem_1024();
  unsigned char* a_tile = b_tile + N * 128;
  for (int i = threadIdx.x; i < N * 128; i += blockDim.x) b_tile[swz128_bytes(i / 128, i % 128)] = to_e4m3(bsrc[i]);
  for (int i = threadIdx.x; i < 64 * 128; i += blockDim.x) a_tile[swz128_bytes(i / 128, i % 128)] = to_e4m3(a[i]);
  sm90::fence_proxy_async_shared_cta();
  __syncthreads();
  const int t = threadIdx.x, w = t / 32, g = (t % 32) / 4, q = t % 4;
  auto pack = [&](int r, int k0) {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(to_e4m3(a[r * 128 + k0 + i])) << (8 * i);
    return v;
  };
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = -7.0f;  // ignored (first step does not accumulate)
  std::uint32_t af[4][4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int r = 16 * w + g, k0 = 32 * k + 4 * q;
    af[k][0] = pack(r, k0);
    af[k][1] = pack(r + 8, k0);
    af[k][2] = pack(r, k0 + 16);
    af[k][3] = pack(r + 8, k0 + 16);
  }
  sm90::wgmma_fence();
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const std::uint64_t db = sm90::make_smem_desc_sw128_kmajor(sm90::smem_u32(b_tile) + 32 * k);
    if constexpr (kRegA) {
      sm90::wgmma_rs_e4m3<N>(d, af[k], db, k > 0);
    } else {
      const std::uint64_t da = sm90::make_smem_desc_sw128_kmajor(sm90::smem_u32(a_tile) + 32 * k);
      sm90::wgmma_ss_e4m3<N>(d, da, db, k > 0);
    }
  }
  sm90::wgmma_commit();
  sm90::wgmma_wait<0>();
  sm90::wgmma_fence_operand(d);
  store_accumulators<N>(d, c, t, 0);
}

template <int N, bool kRegA>
void check_wgmma_e4m3() {
  const Fp8GemmCase g(N);
  DeviceBuffer<float> da(g.a), db(g.b), dc(64 * N);
  const int smem = N * 128 + 64 * 128 + 1024;
  auto* kernel = &wgmma_e4m3_kernel<N, kRegA>;
  TESSERA_TEST_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<1, 128, smem>>>(da.get(), db.get(), dc.get());
  TESSERA_TEST_CUDA(cudaGetLastError());
  g.check(dc.read(), kRegA ? "e4m3 rs" : "e4m3 ss");
}

TEST(PrimitivesSm90, WgmmaSsE4m3M64N128K32) { TESSERA_REQUIRE_SM90(); check_wgmma_e4m3<128, false>(); }
TEST(PrimitivesSm90, WgmmaRsE4m3M64N128K32) { TESSERA_REQUIRE_SM90(); check_wgmma_e4m3<128, true>(); }
TEST(PrimitivesSm90, WgmmaRsE4m3M64N256K32) { TESSERA_REQUIRE_SM90(); check_wgmma_e4m3<256, true>(); }

// ---------------------------------------------------------------------------------------------
// wgmma.wait_group 1 (the forward's and backward's overlap: S_i waited for while P_{i-1} V_{i-1}
// may still run): two commit groups, the first (C1 = A * B1^T) read after wait_group 1, the second
// (C2 = A * B2^T, issued after it and twice as long) after wait_group 0. A wait that let more
// than one group stay pending would read C1 while its wgmmas still run: accumulators still at
// their -7 poison or partial sums. (A wait stronger than asked passes; no test can tell it from
// timing alone.)

template <typename T>
__global__ void wgmma_wait_one_kernel(const float* a, const float* b1src, const float* b2src, float* c1, float* c2) {
  unsigned char* b1_tile = smem_1024();            // 64 rows x 128 bytes
  unsigned char* b2_tile = b1_tile + 64 * 128;     // 128 rows x 128 bytes (1024-aligned)
  auto* b1 = reinterpret_cast<T*>(b1_tile);
  auto* b2 = reinterpret_cast<T*>(b2_tile);
  for (int i = threadIdx.x; i < 128 * 64; i += blockDim.x) {
    const int n = i / 64, k = i % 64;
    const auto elem = [](float x) {
      if constexpr (Traits<T>::is_bf16) return __float2bfloat16(x);
      else return __float2half(x);
    };
    if (n < 64) b1[swz128(n, k)] = elem(b1src[i]);
    b2[swz128(n, k)] = elem(b2src[i]);
  }
  sm90::fence_proxy_async_shared_cta();
  __syncthreads();
  const int t = threadIdx.x;
  std::uint32_t af[4][4];
  load_a_fragments<T>(a, t, af);
  float d1[32], d2[64];
#pragma unroll
  for (int i = 0; i < 32; ++i) d1[i] = -7.0f;
#pragma unroll
  for (int i = 0; i < 64; ++i) d2[i] = -7.0f;
  sm90::wgmma_fence();
#pragma unroll
  for (int k = 0; k < 4; ++k)
    sm90::wgmma_rs<64, Traits<T>::is_bf16, false>(d1, af[k], sm90::make_smem_desc_sw128_kmajor(sm90::smem_u32(b1_tile) + 32 * k), k > 0);
  sm90::wgmma_commit();
#pragma unroll
  for (int k = 0; k < 4; ++k)
    sm90::wgmma_rs<128, Traits<T>::is_bf16, false>(d2, af[k], sm90::make_smem_desc_sw128_kmajor(sm90::smem_u32(b2_tile) + 32 * k), k > 0);
  sm90::wgmma_commit();
  sm90::wgmma_wait<1>();
  sm90::wgmma_fence_operand(d1);
  store_accumulators<64>(d1, c1, t, 0);
  sm90::wgmma_wait<0>();
  sm90::wgmma_fence_operand(d2);
  store_accumulators<128>(d2, c2, t, 0);
}

template <typename T>
void check_wgmma_wait_one() {
  const GemmCase g1(64, 64), g2(64, 128);  // the same A (a_value), B1 = the first 64 rows of B2
  DeviceBuffer<float> da(g1.a), db1(g1.b), db2(g2.b), dc1(64 * 64), dc2(64 * 128);
  wgmma_wait_one_kernel<T><<<1, 128, (64 + 128) * 128 + 1024>>>(da.get(), db1.get(), db2.get(), dc1.get(), dc2.get());
  TESSERA_TEST_CUDA(cudaGetLastError());
  g1.check(dc1.read(), "group 1 after wait_group 1");
  g2.check(dc2.read(), "group 2 after wait_group 0");
}

TEST(PrimitivesSm90, WgmmaWaitGroupOneLeavesTheLaterGroup) {
  TESSERA_REQUIRE_SM90();
  check_wgmma_wait_one<__nv_bfloat16>();
  check_wgmma_wait_one<__half>();
}

}  // namespace
}  // namespace tessera::testing
