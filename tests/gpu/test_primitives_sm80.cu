// GPU unit tests of the sm80 instruction wrappers (src/cuda/primitives/sm80/): each test runs
// one warp and checks the documented fragment layouts against host expectations, so the
// kernels built on top can trust the comments in the wrappers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda/common/types.cuh"
#include "cuda/primitives/sm80/acquire_release.cuh"
#include "cuda/primitives/sm80/cp_async.cuh"
#include "cuda/primitives/sm80/ldmatrix.cuh"
#include "cuda/primitives/sm80/mma.cuh"
#include "cuda/primitives/sm80/special_registers.cuh"
#include "cuda/primitives/sm80/warp.cuh"
#include "gpu/gpu_support.h"

namespace tessera::testing {
namespace {

using cuda::Traits;
namespace sm80 = tessera::cuda::sm80;

// ---------------------------------------------------------------------------------------------
// mma.sync m16n8k16: fragments built by the documented ownership rule from row-major A (16x16)
// and B (16x8, k rows), result scattered back by the documented C rule.

template <typename T>
__global__ void mma_kernel(const float* a, const float* b, const float* c, float* d) {
  const int lane = threadIdx.x, g = lane >> 2, q = lane & 3;
  auto A = [&](int r, int k) { return a[r * 16 + k]; };
  auto B = [&](int k, int n) { return b[k * 8 + n]; };
  std::uint32_t af[4], bf[2];
  af[0] = Traits<T>::pack2(A(g, 2 * q), A(g, 2 * q + 1));
  af[1] = Traits<T>::pack2(A(g + 8, 2 * q), A(g + 8, 2 * q + 1));
  af[2] = Traits<T>::pack2(A(g, 2 * q + 8), A(g, 2 * q + 9));
  af[3] = Traits<T>::pack2(A(g + 8, 2 * q + 8), A(g + 8, 2 * q + 9));
  bf[0] = Traits<T>::pack2(B(2 * q, g), B(2 * q + 1, g));
  bf[1] = Traits<T>::pack2(B(2 * q + 8, g), B(2 * q + 9, g));
  float acc[4] = {c[g * 8 + 2 * q], c[g * 8 + 2 * q + 1], c[(g + 8) * 8 + 2 * q], c[(g + 8) * 8 + 2 * q + 1]};
  sm80::mma_m16n8k16<Traits<T>::is_bf16>(acc, af, bf);
  d[g * 8 + 2 * q] = acc[0];
  d[g * 8 + 2 * q + 1] = acc[1];
  d[(g + 8) * 8 + 2 * q] = acc[2];
  d[(g + 8) * 8 + 2 * q + 1] = acc[3];
}

template <typename T>
void check_mma() {
  // Small integers and halves are exact in f16 and bf16, and every partial sum is exact in
  // fp32, so the product must match the host bit for bit.
  std::vector<float> a(256), b(128), c(128);
  for (int i = 0; i < 256; ++i) a[i] = static_cast<float>((i * 7) % 13 - 6) * 0.5f;
  for (int i = 0; i < 128; ++i) b[i] = static_cast<float>((i * 5) % 11 - 5);
  for (int i = 0; i < 128; ++i) c[i] = static_cast<float>(i % 9) - 4.0f;
  DeviceBuffer<float> da(a), db(b), dc(c), dd(128);
  mma_kernel<T><<<1, 32>>>(da.get(), db.get(), dc.get(), dd.get());
  TESSERA_TEST_CUDA(cudaGetLastError());
  const auto d = dd.read();
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      float want = c[r * 8 + n];
      for (int k = 0; k < 16; ++k) want += a[r * 16 + k] * b[k * 8 + n];
      EXPECT_EQ(d[r * 8 + n], want) << "row " << r << " col " << n;
    }
}

TEST(PrimitivesSm80, MmaF16) { check_mma<__half>(); }
TEST(PrimitivesSm80, MmaBf16) { check_mma<__nv_bfloat16>(); }

// ---------------------------------------------------------------------------------------------
// ldmatrix: four 8x8 matrices of 16-bit values v = 256 * matrix + 8 * row + col, rows stored
// 16 bytes apart in a scrambled order (row slot = (5 * row_index + 3) % 32) so that each
// lane's address really selects the row.

__host__ __device__ constexpr int row_slot(int i) { return (5 * i + 3) % 32; }

template <int kCount, bool kTrans>
__global__ void ldmatrix_kernel(std::uint32_t* out) {
  __shared__ __align__(16) std::uint16_t tile[32 * 8];
  const int lane = threadIdx.x;
  for (int i = lane; i < 32 * 8; i += 32) {
    const int row_index = i / 8, col = i % 8;  // row_index = 8 * matrix + row
    tile[row_slot(row_index) * 8 + col] = static_cast<std::uint16_t>(256 * (row_index / 8) + 8 * (row_index % 8) + col);
  }
  __syncthreads();
  // Lane l addresses row l % 8 of matrix l / 8 (lanes beyond kCount matrices still pass a
  // valid address, as the wrapper documents).
  const std::uint32_t addr = sm80::smem_u32(&tile[row_slot(lane) * 8]);
  std::uint32_t r[4] = {0, 0, 0, 0};
  if constexpr (kCount == 1) {
    if constexpr (kTrans) sm80::ldmatrix_x1_trans(r[0], addr); else sm80::ldmatrix_x1(r[0], addr);
  } else if constexpr (kCount == 2) {
    if constexpr (kTrans) sm80::ldmatrix_x2_trans(r[0], r[1], addr); else sm80::ldmatrix_x2(r[0], r[1], addr);
  } else {
    if constexpr (kTrans) sm80::ldmatrix_x4_trans(r, addr); else sm80::ldmatrix_x4(r, addr);
  }
  for (int i = 0; i < kCount; ++i) out[lane * 4 + i] = r[i];
}

template <int kCount, bool kTrans>
void check_ldmatrix() {
  DeviceBuffer<std::uint32_t> out(32 * 4);
  ldmatrix_kernel<kCount, kTrans><<<1, 32>>>(out.get());
  TESSERA_TEST_CUDA(cudaGetLastError());
  const auto got = out.read();
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, q = lane % 4;
    for (int m = 0; m < kCount; ++m) {
      // Non-trans: row g, cols 2q, 2q+1. Trans: col g, rows 2q, 2q+1. Low half first.
      const auto val = [&](int row, int col) { return static_cast<std::uint32_t>(256 * m + 8 * row + col); };
      const std::uint32_t lo = kTrans ? val(2 * q, g) : val(g, 2 * q);
      const std::uint32_t hi = kTrans ? val(2 * q + 1, g) : val(g, 2 * q + 1);
      EXPECT_EQ(got[lane * 4 + m], lo | (hi << 16)) << "lane " << lane << " matrix " << m;
    }
  }
}

TEST(PrimitivesSm80, LdmatrixX1) { check_ldmatrix<1, false>(); }
TEST(PrimitivesSm80, LdmatrixX2) { check_ldmatrix<2, false>(); }
TEST(PrimitivesSm80, LdmatrixX4) { check_ldmatrix<4, false>(); }
TEST(PrimitivesSm80, LdmatrixX1Trans) { check_ldmatrix<1, true>(); }
TEST(PrimitivesSm80, LdmatrixX2Trans) { check_ldmatrix<2, true>(); }
TEST(PrimitivesSm80, LdmatrixX4Trans) { check_ldmatrix<4, true>(); }

// ---------------------------------------------------------------------------------------------
// cp.async 16 bytes with zero-fill, two commit groups, wait_group<1> then <0>.

__global__ void cp_async_kernel(const uint4* src, uint4* out_first, uint4* out_all) {
  __shared__ uint4 s[64];
  const int lane = threadIdx.x;
  // Prefill with a pattern the copies must overwrite (zero-fill included).
  s[lane] = make_uint4(0xabababab, 0xabababab, 0xabababab, 0xabababab);
  s[lane + 32] = s[lane];
  __syncthreads();
  // Group 1: chunks 0..31, every third one out of range (zero-filled, source never read:
  // its pointer is the base, which holds a different value).
  const bool valid = lane % 3 != 0;
  sm80::cp_async_16_zfill(sm80::smem_u32(&s[lane]), valid ? &src[lane] : src, valid);
  sm80::cp_async_commit();
  // Group 2: chunks 32..63, all valid.
  sm80::cp_async_16_zfill(sm80::smem_u32(&s[lane + 32]), &src[lane + 32], true);
  sm80::cp_async_commit();
  sm80::cp_async_wait<1>();  // group 1 done (group 2 may still be in flight)
  __syncthreads();
  out_first[lane] = s[lane];
  sm80::cp_async_wait<0>();
  __syncthreads();
  out_all[lane] = s[lane];
  out_all[lane + 32] = s[lane + 32];
}

TEST(PrimitivesSm80, CpAsyncZeroFill) {
  std::vector<uint4> src(64);
  for (unsigned i = 0; i < 64; ++i) src[i] = make_uint4(4 * i + 1, 4 * i + 2, 4 * i + 3, 4 * i + 4);
  DeviceBuffer<uint4> dsrc(src), first(32), all(64);
  cp_async_kernel<<<1, 32>>>(dsrc.get(), first.get(), all.get());
  TESSERA_TEST_CUDA(cudaGetLastError());
  const auto f = first.read(), a = all.read();
  auto same = [](uint4 x, uint4 y) { return x.x == y.x && x.y == y.y && x.z == y.z && x.w == y.w; };
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int i = 0; i < 32; ++i) {
    const uint4 want = i % 3 != 0 ? src[i] : zero;
    EXPECT_TRUE(same(f[i], want)) << "chunk " << i << " after wait_group 1";
    EXPECT_TRUE(same(a[i], want)) << "chunk " << i;
    EXPECT_TRUE(same(a[i + 32], src[i + 32])) << "chunk " << i + 32;
  }
}

// ---------------------------------------------------------------------------------------------
// Quad reductions: each lane gets the max / sum of its quad (lanes 4g..4g+3) and only of it.

__global__ void quad_kernel(const float* in, float* mx, float* sum) {
  const int lane = threadIdx.x;
  mx[lane] = sm80::quad_max(in[lane]);
  sum[lane] = sm80::quad_sum(in[lane]);
}

TEST(PrimitivesSm80, QuadReductions) {
  std::vector<float> in(32);
  for (int i = 0; i < 32; ++i) in[i] = static_cast<float>((i * 11) % 17) - 8.0f;
  in[5] = -INFINITY;  // -inf takes part like any value
  DeviceBuffer<float> din(in), dmx(32), dsum(32);
  quad_kernel<<<1, 32>>>(din.get(), dmx.get(), dsum.get());
  TESSERA_TEST_CUDA(cudaGetLastError());
  const auto mx = dmx.read(), sum = dsum.read();
  for (int lane = 0; lane < 32; ++lane) {
    const int b = lane & ~3;
    float m = in[b], s = 0.0f;
    for (int j = b; j < b + 4; ++j) {
      m = std::max(m, in[j]);
      s += in[j];
    }
    EXPECT_EQ(mx[lane], m) << "lane " << lane;
    if (std::isinf(s)) EXPECT_EQ(sum[lane], s) << "lane " << lane;
    else EXPECT_FLOAT_EQ(sum[lane], s) << "lane " << lane;
  }
}

// ---------------------------------------------------------------------------------------------
// Special registers: tid.x, ctaid.x, nctaid.x as the built-in variables give them, %smid below
// the device's multiprocessor count, %globaltimer moving forward across a spin.

__global__ void special_registers_kernel(int* ids, unsigned* smid, unsigned long long* timer) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  ids[3 * i] = sm80::sreg_tid_x() - static_cast<int>(threadIdx.x);
  ids[3 * i + 1] = sm80::sreg_ctaid_x() - static_cast<int>(blockIdx.x);
  ids[3 * i + 2] = sm80::sreg_nctaid_x() - static_cast<int>(gridDim.x);
  smid[i] = sm80::sreg_smid();
  const unsigned long long t0 = sm80::sreg_globaltimer();
  unsigned long long t1 = t0;
  while (t1 - t0 < 2000) t1 = sm80::sreg_globaltimer();  // 2 us
  timer[2 * i] = t0;
  timer[2 * i + 1] = t1;
}

TEST(PrimitivesSm80, SpecialRegisters) {
  constexpr int kBlocks = 3, kThreads = 64, n = kBlocks * kThreads;
  DeviceBuffer<int> ids(3 * n);
  DeviceBuffer<unsigned> smid(n);
  DeviceBuffer<unsigned long long> timer(2 * n);
  special_registers_kernel<<<kBlocks, kThreads>>>(ids.get(), smid.get(), timer.get());
  TESSERA_TEST_CUDA(cudaGetLastError());
  int sms = 0;
  TESSERA_TEST_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const auto id = ids.read();
  const auto sm = smid.read();
  const auto t = timer.read();
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(id[3 * i], 0) << "tid.x, thread " << i;
    EXPECT_EQ(id[3 * i + 1], 0) << "ctaid.x, thread " << i;
    EXPECT_EQ(id[3 * i + 2], 0) << "nctaid.x, thread " << i;
    EXPECT_LT(sm[i], static_cast<unsigned>(sms)) << "smid, thread " << i;
    EXPECT_GE(t[2 * i + 1] - t[2 * i], 2000u) << "globaltimer, thread " << i;
    EXPECT_LT(t[2 * i + 1] - t[2 * i], 1000000000u) << "globaltimer, thread " << i;
  }
}

// ---------------------------------------------------------------------------------------------
// Acquire / release turns between CTAs (the backward's deterministic dQ turns): CTA i waits
// until the counter reads i (acquire loads), reads what CTA i - 1 wrote before passing the turn,
// writes its own link of the chain and passes the turn (release add). Every link must be one
// more than the one before, and the counter must end at the number of CTAs. Each CTA reads its
// predecessor's link once before it waits (the poison, -1, now in its SM's L1), so a load without
// acquire semantics could return that stale line after the turn comes. A turn not seen within
// 2 s ends the CTA with a flag instead of hanging the test.

__global__ void acquire_release_kernel(int* counter, int* chain, int* early, int* timed_out) {
  if (threadIdx.x != 0) return;
  const int i = blockIdx.x;
  early[i] = i == 0 ? 0 : chain[i - 1];
  const unsigned long long t0 = sm80::sreg_globaltimer();
  while (sm80::ld_acquire_gpu(counter) != i) {
    if (sm80::sreg_globaltimer() - t0 > 2000000000ull) {
      atomicExch(timed_out, 1);
      return;
    }
  }
  chain[i] = (i == 0 ? 0 : chain[i - 1]) + 1;
  sm80::red_release_gpu_add(counter, 1);
}

TEST(PrimitivesSm80, AcquireReleaseTurns) {
  int sms = 0;
  TESSERA_TEST_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int n = sms;  // one CTA of 32 threads an SM: all resident at once, so every turn can come
  DeviceBuffer<int> counter(1, 0), chain(n), early(n), timed_out(1, 0);  // chain: -1 (0xff bytes)
  acquire_release_kernel<<<n, 32>>>(counter.get(), chain.get(), early.get(), timed_out.get());
  TESSERA_TEST_CUDA(cudaGetLastError());
  ASSERT_EQ(timed_out.read()[0], 0) << "a CTA waited 2 s for its turn";
  EXPECT_EQ(counter.read()[0], n);
  const auto c = chain.read();
  for (int i = 0; i < n; ++i) EXPECT_EQ(c[i], i + 1) << "link " << i;
}

}  // namespace
}  // namespace tessera::testing
