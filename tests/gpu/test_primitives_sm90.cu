// GPU unit tests of the sm90 instruction wrappers (src/cuda/primitives/sm90/) other than wgmma:
// TMA tensor maps and bulk tensor copies, bulk reductions, mbarrier phases, stmatrix, setmaxnreg
// in a warp-specialised kernel, named barriers (the wgmma forms: test_wgmma_sm90.cu). Built for
// sm_90a only (tests/CMakeLists.txt); every test skips on a device below compute capability 9.0.
//
// The kernels wait on mbarriers through wait_or_trap(), which traps after a long bound
// instead of hanging, so a broken protocol fails the test with a launch error.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda/common/types.cuh"
#include "cuda/primitives/sm80/special_registers.cuh"
#include "cuda/primitives/sm90/fence.cuh"
#include "cuda/primitives/sm90/fp8_convert.cuh"
#include "cuda/primitives/sm90/grid_dependency.cuh"
#include "cuda/primitives/sm90/mbarrier.cuh"
#include "cuda/primitives/sm90/named_barrier.cuh"
#include "cuda/primitives/sm90/setmaxnreg.cuh"
#include "cuda/primitives/sm90/stmatrix.cuh"
#include "cuda/primitives/sm90/tensor_map.h"
#include "cuda/primitives/sm90/tma.cuh"
#include "cuda/primitives/sm90/wgmma.cuh"
#include "gpu/gpu_support.h"
#include "gpu/sm90_primitive_test_support.cuh"

namespace tessera::testing {
namespace {

namespace sm80 = tessera::cuda::sm80;

// ---------------------------------------------------------------------------------------------
// TMA load of one 64 x 32 box (uint16) with 128-byte swizzle, completing on an mbarrier; the
// raw shared-memory bytes are copied out and checked against the documented placement, with
// zeros for the part of the box outside the tensor. The tile is poisoned first (kTilePoison,
// no source value and not zero), so that an element the copy left alone shows, zero-fill
// included (shared memory is not cleared between launches and may well hold zeros).

constexpr int kH = 96, kW = 192;  // the source tensor: 96 rows of 192 uint16
__host__ __device__ constexpr std::uint16_t src_value(int r, int c) { return static_cast<std::uint16_t>(r * kW + c + 1); }
constexpr std::uint16_t kTilePoison = 0xDEAD;  // > every src_value (at most 96 x 192 = 18432)

__global__ void tma_load_kernel(const __grid_constant__ CUtensorMap map, int c0, int c1, std::uint16_t* out) {
  __shared__ alignas(8) std::uint64_t bar;
  auto* tile = reinterpret_cast<std::uint16_t*>(smem_1024());
  const std::uint32_t b = sm90::smem_u32(&bar);
  for (int i = threadIdx.x; i < 64 * 32; i += blockDim.x) tile[i] = kTilePoison;
  sm90::fence_proxy_async_shared_cta();  // the poison is ordered before the copy engine's writes
  if (threadIdx.x == 0) {
    sm90::prefetch_tensor_map(&map);
    sm90::mbarrier_init(b, 1);
    sm90::fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    sm90::mbarrier_arrive_expect_tx(b, 64 * 32 * 2);
    sm90::tma_load_2d(sm90::smem_u32(tile), &map, b, c0, c1);
  }
  wait_or_trap(b, 0);
  for (int i = threadIdx.x; i < 64 * 32; i += blockDim.x) out[i] = tile[i];
}

void check_tma_load(int c0, int c1) {
  std::vector<std::uint16_t> src(kH * kW);
  for (int r = 0; r < kH; ++r)
    for (int c = 0; c < kW; ++c) src[r * kW + c] = src_value(r, c);
  DeviceBuffer<std::uint16_t> dsrc(src), out(64 * 32);
  const CUtensorMap map = sm90::make_tensor_map_2d(CU_TENSOR_MAP_DATA_TYPE_UINT16, dsrc.get(), kH, kW, kW * 2, 32, 64);
  tma_load_kernel<<<1, 128, 64 * 32 * 2 + 1024>>>(map, c0, c1, out.get());
  TESSERA_TEST_CUDA(cudaGetLastError());
  const auto got = out.read();
  int bad = 0;
  for (int r = 0; r < 32; ++r)
    for (int c = 0; c < 64; ++c) {
      const int gr = c1 + r, gc = c0 + c;
      const bool inside = gr >= 0 && gr < kH && gc >= 0 && gc < kW;
      const std::uint16_t want = inside ? src_value(gr, gc) : 0;
      if (got[swz128(r, c)] != want && ++bad <= 10)
        ADD_FAILURE() << "box (" << c0 << ", " << c1 << ") row " << r << " col " << c << ": got " << got[swz128(r, c)]
                      << ", want " << want;
    }
  EXPECT_EQ(bad, 0);
}

TEST(PrimitivesSm90, TmaLoad2dSwizzle128) {
  TESSERA_REQUIRE_SM90();
  check_tma_load(64, 32);
  check_tma_load(0, 0);
}

TEST(PrimitivesSm90, TmaLoadOutOfBoundsFillsZeros) {
  TESSERA_REQUIRE_SM90();
  check_tma_load(160, 80);  // 32 columns and 16 rows past the end
  check_tma_load(-16, -8);  // before the start
}

// ---------------------------------------------------------------------------------------------
// TMA store: the CTA writes a 64 x 32 tile with ordinary stores at the swizzled positions,
// fences the proxies, and one thread stores it twice (two bulk groups): once inside the tensor
// and once hanging over its end. The destination tensor (96 x 192) lies in a larger buffer
// (row stride 256, 112 rows) prefilled with 0xffff: nothing outside the boxes' in-bounds part
// may change.

constexpr int kStoreStride = 256, kStoreRows = 112;
__host__ __device__ constexpr std::uint16_t tile_value(int r, int c) { return static_cast<std::uint16_t>(0x4000 + r * 64 + c); }

__global__ void tma_store_kernel(const __grid_constant__ CUtensorMap map, int a0, int a1, int b0, int b1) {
  auto* tile = reinterpret_cast<std::uint16_t*>(smem_1024());
  for (int i = threadIdx.x; i < 64 * 32; i += blockDim.x) {
    const int r = i / 64, c = i % 64;
    tile[swz128(r, c)] = tile_value(r, c);
  }
  sm90::fence_proxy_async_shared_cta();
  __syncthreads();
  if (threadIdx.x == 0) {
    sm90::prefetch_tensor_map(&map);
    sm90::tma_store_2d(&map, sm90::smem_u32(tile), a0, a1);
    sm90::tma_store_commit();
    sm90::tma_store_2d(&map, sm90::smem_u32(tile), b0, b1);
    sm90::tma_store_commit();
    sm90::tma_store_wait_read<1>();
    sm90::tma_store_wait_read<0>();
    sm90::tma_store_wait<0>();
  }
}

TEST(PrimitivesSm90, TmaStore2dSwizzle128) {
  TESSERA_REQUIRE_SM90();
  DeviceBuffer<std::uint16_t> dst(kStoreRows * kStoreStride, 0xff);
  const CUtensorMap map =
      sm90::make_tensor_map_2d(CU_TENSOR_MAP_DATA_TYPE_UINT16, dst.get(), kH, kW, kStoreStride * 2, 32, 64);
  const int a0 = 32, a1 = 48, b0 = 160, b1 = 80;
  tma_store_kernel<<<1, 128, 64 * 32 * 2 + 1024>>>(map, a0, a1, b0, b1);
  TESSERA_TEST_CUDA(cudaGetLastError());
  const auto got = dst.read();
  int bad = 0;
  for (int r = 0; r < kStoreRows; ++r)
    for (int c = 0; c < kStoreStride; ++c) {
      std::uint16_t want = 0xffff;
      if (r < kH && c < kW) {
        if (r >= a1 && r < a1 + 32 && c >= a0 && c < a0 + 64) want = tile_value(r - a1, c - a0);
        if (r >= b1 && r < b1 + 32 && c >= b0 && c < b0 + 64) want = tile_value(r - b1, c - b0);
      }
      if (got[r * kStoreStride + c] != want && ++bad <= 10)
        ADD_FAILURE() << "row " << r << " col " << c << ": got " << got[r * kStoreStride + c] << ", want " << want;
    }
  EXPECT_EQ(bad, 0);
}

// ---------------------------------------------------------------------------------------------
// mbarrier phases seen by one thread: try_wait.parity before and after each phase completes.

__global__ void mbarrier_parity_kernel(int* flags) {
  __shared__ alignas(8) std::uint64_t bar;
  const std::uint32_t b = sm90::smem_u32(&bar);
  sm90::mbarrier_init(b, 2);
  sm90::fence_mbarrier_init();
  flags[0] = sm90::mbarrier_try_wait_parity(b, 0);  // phase 0 running: false
  flags[1] = sm90::mbarrier_try_wait_parity(b, 1);  // "preceding" phase: true
  sm90::mbarrier_arrive(b);
  flags[2] = sm90::mbarrier_try_wait_parity(b, 0);  // 1 of 2 arrivals: false
  sm90::mbarrier_arrive(b);
  flags[3] = sm90::mbarrier_try_wait_parity(b, 0);  // phase 0 done: true
  flags[4] = sm90::mbarrier_try_wait_parity(b, 1);  // phase 1 running: false
  sm90::mbarrier_arrive(b);
  sm90::mbarrier_arrive(b);
  flags[5] = sm90::mbarrier_try_wait_parity(b, 1);  // phase 1 done: true
  flags[6] = sm90::mbarrier_try_wait_parity(b, 0);  // phase 2 running: false
  sm90::mbarrier_expect_tx(b, 16);                  // tx pending: arrivals alone do not finish
  sm90::mbarrier_arrive(b);
  sm90::mbarrier_arrive(b);
  flags[7] = sm90::mbarrier_try_wait_parity(b, 0);  // false
  sm90::mbarrier_inval(b);
}

TEST(PrimitivesSm90, MbarrierParity) {
  TESSERA_REQUIRE_SM90();
  DeviceBuffer<int> flags(8);
  mbarrier_parity_kernel<<<1, 1>>>(flags.get());
  TESSERA_TEST_CUDA(cudaGetLastError());
  const auto f = flags.read();
  const int want[8] = {0, 1, 0, 1, 0, 1, 0, 0};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(f[i], want[i]) << "flag " << i;
}

// ---------------------------------------------------------------------------------------------
// A two-stage TMA ring over six rounds: one producer thread (warp 0) waits on "empty", expects
// tx and loads; 128 consumer threads (warps 1..4) wait on "full", copy the stage out and arrive
// on "empty". Both barriers of both stages flip phase three times.

constexpr int kRounds = 6, kStages = 2;

__global__ void tma_ring_kernel(const __grid_constant__ CUtensorMap map, std::uint16_t* out) {
  __shared__ alignas(8) std::uint64_t full[kStages], empty[kStages];
  auto* tiles = reinterpret_cast<std::uint16_t*>(smem_1024());
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      sm90::mbarrier_init(sm90::smem_u32(&full[s]), 1);
      sm90::mbarrier_init(sm90::smem_u32(&empty[s]), 128);
    }
    sm90::fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    if (threadIdx.x == 0) {
      for (int r = 0; r < kRounds; ++r) {
        const int s = r % kStages;
        const std::uint32_t phase = (r / kStages) & 1;
        wait_or_trap(sm90::smem_u32(&empty[s]), phase ^ 1);
        sm90::mbarrier_arrive_expect_tx(sm90::smem_u32(&full[s]), 64 * 32 * 2);
        sm90::tma_load_2d(sm90::smem_u32(tiles + s * 64 * 32), &map, sm90::smem_u32(&full[s]), 0, 32 * r);
      }
    }
  } else {
    const int c = threadIdx.x - 32;
    for (int r = 0; r < kRounds; ++r) {
      const int s = r % kStages;
      const std::uint32_t phase = (r / kStages) & 1;
      sm90::mbarrier_wait_parity(sm90::smem_u32(&full[s]), phase);
      for (int i = 0; i < 16; ++i) out[r * 2048 + c * 16 + i] = tiles[s * 64 * 32 + c * 16 + i];
      sm90::mbarrier_arrive(sm90::smem_u32(&empty[s]));
    }
  }
}

TEST(PrimitivesSm90, MbarrierTmaRingPhases) {
  TESSERA_REQUIRE_SM90();
  constexpr int rows = 32 * kRounds, cols = 64;
  std::vector<std::uint16_t> src(rows * cols);
  for (int i = 0; i < rows * cols; ++i) src[i] = static_cast<std::uint16_t>(i * 3 + 7);
  DeviceBuffer<std::uint16_t> dsrc(src), out(kRounds * 2048);
  const CUtensorMap map = sm90::make_tensor_map_2d(CU_TENSOR_MAP_DATA_TYPE_UINT16, dsrc.get(), rows, cols, cols * 2, 32, 64);
  tma_ring_kernel<<<1, 160, kStages * 64 * 32 * 2 + 1024>>>(map, out.get());
  TESSERA_TEST_CUDA(cudaGetLastError());
  const auto got = out.read();
  int bad = 0;
  for (int r = 0; r < kRounds; ++r)
    for (int rr = 0; rr < 32; ++rr)
      for (int c = 0; c < 64; ++c) {
        const std::uint16_t want = src[(32 * r + rr) * cols + c];
        if (got[r * 2048 + swz128(rr, c)] != want && ++bad <= 10)
          ADD_FAILURE() << "round " << r << " row " << rr << " col " << c;
      }
  EXPECT_EQ(bad, 0);
}

// ---------------------------------------------------------------------------------------------
// stmatrix x4 (and .trans): one warp stores four 8x8 matrices of f16 from the fragment layout
// (register i = matrix i; lane l holds row l / 4, columns 2 (l % 4), +1), lanes 8i .. 8i + 7
// addressing rows 0..7 of matrix i. So that the test sees whether each lane's address is used,
// matrix i goes to slot kSlot[i] of the buffer and its row r to row 7 - r of that slot, rows 32
// bytes apart (16 written, 16 left alone); everything else must keep its poison. Values are
// small integers, exact in f16; the raw shared memory is copied out and checked.

__host__ __device__ constexpr float st_value(int i, int r, int c) { return static_cast<float>(i * 64 + r * 8 + c); }
__host__ __device__ constexpr int st_slot(int i) { return i == 0 ? 2 : i == 1 ? 0 : i == 2 ? 3 : 1; }
constexpr int kStRowHalves = 16;                      // 32 bytes per stored row
constexpr int kStSlotHalves = 8 * kStRowHalves;       // one matrix
constexpr int kStHalves = 4 * kStSlotHalves;
constexpr std::uint16_t kStPoison = 0xFFFF;           // an f16 NaN no stored value equals
__host__ __device__ constexpr int st_offset(int i, int r, int c) { return st_slot(i) * kStSlotHalves + (7 - r) * kStRowHalves + c; }

template <bool kTrans>
__global__ void stmatrix_kernel(std::uint16_t* out) {
  __shared__ alignas(16) std::uint16_t tile[kStHalves];
  const int l = threadIdx.x;
  for (int i = l; i < kStHalves; i += 32) tile[i] = kStPoison;
  __syncwarp();
  std::uint32_t r[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) r[i] = Traits<__half>::pack2(st_value(i, l / 4, 2 * (l % 4)), st_value(i, l / 4, 2 * (l % 4) + 1));
  const std::uint32_t addr = sm90::smem_u32(tile) + static_cast<std::uint32_t>(st_offset(l / 8, l % 8, 0) * 2);
  if constexpr (kTrans) sm90::stmatrix_x4_trans(addr, r[0], r[1], r[2], r[3]);
  else sm90::stmatrix_x4(addr, r[0], r[1], r[2], r[3]);
  __syncwarp();
  for (int i = l; i < kStHalves; i += 32) out[i] = tile[i];
}

template <bool kTrans>
void check_stmatrix() {
  static_assert(st_slot(0) == 2 && st_slot(1) == 0 && st_slot(2) == 3 && st_slot(3) == 1, "a permutation of the slots");
  DeviceBuffer<std::uint16_t> out(kStHalves);
  stmatrix_kernel<kTrans><<<1, 32>>>(out.get());
  TESSERA_TEST_CUDA(cudaGetLastError());
  const std::vector<std::uint16_t> got = out.read();
  std::vector<std::uint16_t> want(kStHalves, kStPoison);
  for (int i = 0; i < 4; ++i)
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 8; ++c) {
        // Element (r, c) of stored matrix i: the fragment's (r, c), or (c, r) transposed.
        const __half_raw h = __half(kTrans ? st_value(i, c, r) : st_value(i, r, c));
        want[st_offset(i, r, c)] = h.x;
      }
  int bad = 0;
  for (int k = 0; k < kStHalves; ++k)
    if (got[k] != want[k] && ++bad <= 10)
      ADD_FAILURE() << "half " << k << " (slot " << k / kStSlotHalves << ", row " << (k % kStSlotHalves) / kStRowHalves
                    << ", col " << k % kStRowHalves << "): got 0x" << std::hex << got[k] << ", want 0x" << want[k];
  EXPECT_EQ(bad, 0);
}

TEST(PrimitivesSm90, Stmatrix) { TESSERA_REQUIRE_SM90(); check_stmatrix<false>(); }
TEST(PrimitivesSm90, StmatrixTrans) { TESSERA_REQUIRE_SM90(); check_stmatrix<true>(); }

// ---------------------------------------------------------------------------------------------
// Bulk reduce-add (cp.reduce.async.bulk .add.f32): every CTA adds its shared buffer of kRedFloats
// into the same global range at a 16-byte offset; the floats around the range must stay as
// they were. Small integers and halves: the sums are exact whatever the order of the adds.

constexpr int kRedFloats = 1012;  // 4048 bytes: a multiple of 16, not of a larger power of two
constexpr int kRedOffset = 4;     // floats: 16 bytes into the destination
constexpr int kRedCtas = 8;
__host__ __device__ constexpr float red_value(int cta, int i) { return static_cast<float>(cta + 1 + i % 7); }

__global__ void bulk_reduce_kernel(float* dst) {
  __shared__ alignas(128) float src[kRedFloats];
  for (int i = threadIdx.x; i < kRedFloats; i += blockDim.x) src[i] = red_value(blockIdx.x, i);
  sm90::fence_proxy_async_shared_cta();  // the copy engine reads what these stores wrote
  __syncthreads();
  if (threadIdx.x == 0) {
    sm90::bulk_reduce_add_f32(dst + kRedOffset, sm90::smem_u32(src), kRedFloats * 4);
    sm90::tma_store_commit();
    sm90::tma_store_wait<0>();
  }
}

TEST(PrimitivesSm90, BulkReduceAddF32) {
  TESSERA_REQUIRE_SM90();
  std::vector<float> init(kRedFloats + 2 * kRedOffset);
  for (std::size_t i = 0; i < init.size(); ++i) init[i] = 0.5f + static_cast<float>(i % 3);
  DeviceBuffer<float> dst(init);
  bulk_reduce_kernel<<<kRedCtas, 128>>>(dst.get());
  TESSERA_TEST_CUDA(cudaGetLastError());
  const std::vector<float> got = dst.read();
  int bad = 0;
  for (int i = 0; i < static_cast<int>(init.size()); ++i) {
    float want = init[i];
    if (i >= kRedOffset && i < kRedOffset + kRedFloats)
      for (int b = 0; b < kRedCtas; ++b) want += red_value(b, i - kRedOffset);
    if (got[i] != want && ++bad <= 10) ADD_FAILURE() << "dst[" << i << "]: got " << got[i] << ", want " << want;
  }
  EXPECT_EQ(bad, 0);
}

// ---------------------------------------------------------------------------------------------
// Warp specialisation with setmaxnreg: 384 threads, entry cap from __launch_bounds__(384, 1).
// Warpgroup 0 (producer) gives registers back and loads A (128 x 64) and B (64 x 64) by TMA;
// warpgroups 1 and 2 (consumers) take more registers, wait, and each computes 64 rows of
// C = A * B^T with wgmma m64n64k16 (bf16).

__global__ void __launch_bounds__(384, 1)
    setmaxnreg_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, float* c,
                      int* roles) {
  __shared__ alignas(8) std::uint64_t bar;
  unsigned char* a_tile = smem_1024();        // 128 rows x 128 bytes
  unsigned char* b_tile = a_tile + 128 * 128;  // 64 rows x 128 bytes
  const std::uint32_t b = sm90::smem_u32(&bar);
  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    sm90::mbarrier_init(b, 1);
    sm90::fence_mbarrier_init();
  }
  __syncthreads();
  if (wg == 0) {
    sm90::setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      sm90::prefetch_tensor_map(&map_a);
      sm90::prefetch_tensor_map(&map_b);
      sm90::mbarrier_arrive_expect_tx(b, 128 * 128 + 64 * 128);
      sm90::tma_load_2d(sm90::smem_u32(a_tile), &map_a, b, 0, 0);
      sm90::tma_load_2d(sm90::smem_u32(b_tile), &map_b, b, 0, 0);
    }
    roles[threadIdx.x] = 1;
  } else {
    sm90::setmaxnreg_inc<232>();
    const int t = threadIdx.x - 128 * wg, row0 = 64 * (wg - 1);
    wait_or_trap(b, 0);
    float d[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) d[i] = 0.0f;
    sm90::wgmma_fence();
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const std::uint64_t da = sm90::make_smem_desc_sw128_kmajor(sm90::smem_u32(a_tile + row0 * 128) + 32 * k);
      const std::uint64_t db = sm90::make_smem_desc_sw128_kmajor(sm90::smem_u32(b_tile) + 32 * k);
      sm90::wgmma_ss<64, true>(d, da, db, true);
    }
    sm90::wgmma_commit();
    sm90::wgmma_wait<0>();
    sm90::wgmma_fence_operand(d);
    store_accumulators<64>(d, c, t, row0);
    roles[threadIdx.x] = 2;
  }
}

TEST(PrimitivesSm90, SetmaxnregWarpSpecialised) {
  TESSERA_REQUIRE_SM90();
  const GemmCase g(128, 64);
  DeviceBuffer<__nv_bfloat16> da(to_type<__nv_bfloat16>(g.a)), db(to_type<__nv_bfloat16>(g.b));
  DeviceBuffer<float> dc(128 * 64);
  DeviceBuffer<int> roles(384, 0);
  const CUtensorMap map_a = sm90::make_tensor_map_2d(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, da.get(), 128, 64, 128, 128, 64);
  const CUtensorMap map_b = sm90::make_tensor_map_2d(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, db.get(), 64, 64, 128, 64, 64);
  setmaxnreg_kernel<<<1, 384, 128 * 128 + 64 * 128 + 1024>>>(map_a, map_b, dc.get(), roles.get());
  TESSERA_TEST_CUDA(cudaGetLastError());
  g.check(dc.read(), "bf16 warp-specialised");
  const auto r = roles.read();
  for (int i = 0; i < 384; ++i) EXPECT_EQ(r[i], i < 128 ? 1 : 2) << "thread " << i;
}

// ---------------------------------------------------------------------------------------------
// Named barriers: a producer warp (warp 0) fills a shared buffer each round and signals with
// bar.arrive(1, 160); four consumer warps bar.sync(1, 160), read, and release the buffer with
// bar.arrive(2, 160), on which the producer bar.sync's before the next round. The consumers
// also exchange values among themselves through barrier 3 with 128 threads (producer absent).
// kSyncRelease: the consumers release the buffer with bar.sync instead (same ordering). That
// twin exists for racecheck, which flags the bar.arrive release as a hazard (it does not treat
// bar.arrive as ordering the arriving threads' earlier reads) but not the bar.sync one;
// scripts/gpu-check runs both and docs/TESTING.md records the finding. The twin also takes
// barrier 3 in the compile-time-count form (named_barrier_sync<128>), the other twin in the
// register form.

constexpr int kNbRounds = 4;
__host__ __device__ constexpr int nb_value(int r, int i) { return r * 1000 + i; }

// Barrier 3 among the 128 consumer threads, in one of the two forms.
template <bool kImmediateCount>
__device__ void exchange_barrier() {
  if constexpr (kImmediateCount) sm90::named_barrier_sync<128>(3);
  else sm90::named_barrier_sync(3, 128);
}

template <bool kSyncRelease>
__global__ void named_barrier_kernel(int* out) {
  __shared__ int buf[128];
  __shared__ int ex[128];
  if (threadIdx.x < 32) {
    for (int r = 0; r < kNbRounds; ++r) {
      for (int i = threadIdx.x; i < 128; i += 32) buf[i] = nb_value(r, i);
      sm90::named_barrier_arrive(1, 160);
      sm90::named_barrier_sync(2, 160);  // consumers are done reading buf
    }
  } else {
    const int c = threadIdx.x - 32;
    for (int r = 0; r < kNbRounds; ++r) {
      sm90::named_barrier_sync(1, 160);
      const int v = buf[(c * 37) % 128];
      if constexpr (kSyncRelease) sm90::named_barrier_sync(2, 160);
      else sm90::named_barrier_arrive(2, 160);
      ex[c] = v;
      exchange_barrier<kSyncRelease>();
      out[r * 128 + c] = v + ex[(c + 64) % 128];
      exchange_barrier<kSyncRelease>();  // everyone read ex before it is rewritten
    }
  }
}

template <bool kSyncRelease>
void check_named_barriers() {
  DeviceBuffer<int> out(kNbRounds * 128);
  named_barrier_kernel<kSyncRelease><<<1, 160>>>(out.get());
  TESSERA_TEST_CUDA(cudaGetLastError());
  const auto got = out.read();
  for (int r = 0; r < kNbRounds; ++r)
    for (int c = 0; c < 128; ++c) {
      const int want = nb_value(r, (c * 37) % 128) + nb_value(r, (((c + 64) % 128) * 37) % 128);
      EXPECT_EQ(got[r * 128 + c], want) << "round " << r << " consumer " << c;
    }
}

TEST(PrimitivesSm90, NamedBarriersProducerConsumers) {
  TESSERA_REQUIRE_SM90();
  check_named_barriers<false>();
}

TEST(PrimitivesSm90, NamedBarriersSyncRelease) {
  TESSERA_REQUIRE_SM90();
  check_named_barriers<true>();
}

// ---------------------------------------------------------------------------------------------
// Higher ranks: a (2, 3, 4, 8, 64) uint16 tensor, box (1, 1, 2, 8, 64) (innermost last here;
// the map lists it first), loaded with the 3D, 4D and 5D forms. The box lands as 16 rows of
// 128 bytes (dimension 1 fastest after the row), swizzled like a 2D box of 16 rows.

constexpr std::uint16_t rank_value(int i) { return static_cast<std::uint16_t>(i * 5 + 3); }

template <int kRank>
__global__ void tma_load_rank_kernel(const __grid_constant__ CUtensorMap map, std::uint16_t* out) {
  __shared__ alignas(8) std::uint64_t bar;
  auto* tile = reinterpret_cast<std::uint16_t*>(smem_1024());
  const std::uint32_t b = sm90::smem_u32(&bar);
  if (threadIdx.x == 0) {
    sm90::mbarrier_init(b, 1);
    sm90::fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    sm90::mbarrier_arrive_expect_tx(b, 16 * 64 * 2);
    const std::uint32_t dst = sm90::smem_u32(tile);
    // Coordinates (innermost first): col 0, row 0, dim2 = 2 (box of 2: 2..3), dim3 = 1, dim4 = 1.
    if constexpr (kRank == 3) sm90::tma_load_3d(dst, &map, b, 0, 0, 2);
    else if constexpr (kRank == 4) sm90::tma_load_4d(dst, &map, b, 0, 0, 2, 1);
    else sm90::tma_load_5d(dst, &map, b, 0, 0, 2, 1, 1);
  }
  wait_or_trap(b, 0);
  for (int i = threadIdx.x; i < 16 * 64; i += blockDim.x) out[i] = tile[i];
}

template <int kRank>
void check_tma_load_rank() {
  const int n = 2 * 3 * 4 * 8 * 64;
  std::vector<std::uint16_t> src(n);
  for (int i = 0; i < n; ++i) src[i] = rank_value(i);
  DeviceBuffer<std::uint16_t> dsrc(src), out(16 * 64);
  // Ranks below 5 fold the outer dimensions into the last one listed.
  std::uint64_t dims[5] = {64, 8, 4, 3, 2};
  if (kRank == 3) dims[2] = 4 * 3 * 2;
  if (kRank == 4) dims[3] = 3 * 2;
  const std::uint64_t strides[4] = {128, 128 * 8, 128 * 8 * 4, 128 * 8 * 4 * 3};
  const std::uint32_t box[5] = {64, 8, 2, 1, 1};
  const CUtensorMap map = sm90::make_tensor_map_tiled(CU_TENSOR_MAP_DATA_TYPE_UINT16, kRank, dsrc.get(), dims, strides, box);
  tma_load_rank_kernel<kRank><<<1, 128, 16 * 64 * 2 + 1024>>>(map, out.get());
  TESSERA_TEST_CUDA(cudaGetLastError());
  const auto got = out.read();
  // Box element (d2 in 0..1, row, col) is source element ((outer * 4 + 2 + d2) * 8 + row) * 64
  // + col, where outer is the flat index of the dimensions beyond 2: (dim4, dim3) = (1, 1) ->
  // 1 * 3 + 1 for rank 5, dim3 = 1 (of the folded 6) for rank 4, none for rank 3.
  const int outer = kRank == 5 ? 1 * 3 + 1 : kRank == 4 ? 1 : 0;
  int bad = 0;
  for (int d2 = 0; d2 < 2; ++d2)
    for (int row = 0; row < 8; ++row)
      for (int col = 0; col < 64; ++col) {
        const int flat = (((outer * 4 + 2 + d2) * 8 + row) * 64) + col;
        const int r = d2 * 8 + row;
        if (got[swz128(r, col)] != src[flat] && ++bad <= 10)
          ADD_FAILURE() << "rank " << kRank << " d2 " << d2 << " row " << row << " col " << col;
      }
  EXPECT_EQ(bad, 0);
}

TEST(PrimitivesSm90, TmaLoadRanks3To5) {
  TESSERA_REQUIRE_SM90();
  check_tma_load_rank<3>();
  check_tma_load_rank<4>();
  check_tma_load_rank<5>();
}

// ---------------------------------------------------------------------------------------------
// Host side of the tensor maps: higher ranks encode, bad arguments are refused by name.

TEST(PrimitivesSm90, TensorMapRanksAndValidation) {
  TESSERA_REQUIRE_SM90();
  DeviceBuffer<std::uint16_t> buf(2 * 3 * 4 * 8 * 64, 0);
  const std::uint64_t dims[5] = {64, 8, 4, 3, 2};
  const std::uint64_t strides[4] = {128, 128 * 8, 128 * 8 * 4, 128 * 8 * 4 * 3};
  const std::uint32_t box[5] = {64, 8, 2, 1, 1};
  for (int rank = 2; rank <= 5; ++rank)
    EXPECT_NO_THROW(sm90::make_tensor_map_tiled(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, buf.get(), dims, strides, box))
        << "rank " << rank;
  const std::uint32_t wide[2] = {128, 8};  // 256 bytes > 128-byte swizzle span
  EXPECT_THROW(sm90::make_tensor_map_tiled(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, buf.get(), dims, strides, wide), Error);
  const std::uint64_t odd[1] = {100};  // not a multiple of 16
  EXPECT_THROW(sm90::make_tensor_map_tiled(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, buf.get(), dims, odd, box), Error);
}

// ---------------------------------------------------------------------------------------------
// cvt e4m3x2: pairs of floats against CUDA's host conversion (__nv_cvt_float_to_fp8, round to
// nearest even, saturating), byte by byte and in the documented order (hi in the upper byte):
// zeros, the saturation edge (448, the rounding point 464, beyond), infinities (saturated),
// subnormals and their ties, rounding ties among normals, and 20000 random values over e4m3's
// range and past it. NaN gives e4m3's NaN (S.1111.111) in either sign.

__global__ void cvt_e4m3x2_kernel(const float* in, std::uint16_t* out, int pairs) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < pairs) out[i] = sm90::cvt_e4m3x2(in[2 * i + 1], in[2 * i]);
}

TEST(PrimitivesSm90, CvtE4m3x2RoundsAndSaturates) {
  TESSERA_REQUIRE_SM90();
  std::vector<float> in = {0.0f, -0.0f, 1.0f, -1.0f, 448.0f, -448.0f, 449.0f, 463.9f, 464.0f, 464.1f, 1e30f, -1e30f,
                           INFINITY, -INFINITY, 0x1p-9f, -0x1p-9f, 0x1p-10f, 0x1.8p-9f, 0x1.4p-9f, 0x1.cp-9f, 0x1p-6f,
                           0x1.1p0f, 0x1.3p0f, -0x1.1p0f, 0x1.08p0f, 240.0f, 232.0f, 248.0f, 0x1p-11f, 0x1.000002p-10f};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> log2_mag(-12.0f, 10.0f);
  for (int i = 0; i < 20000; ++i) in.push_back((i % 2 ? -1.0f : 1.0f) * std::exp2(log2_mag(rng)));
  in.push_back(NAN);
  in.push_back(-NAN);
  if (in.size() % 2) in.push_back(3.0f);
  const int pairs = static_cast<int>(in.size() / 2);
  DeviceBuffer<float> d_in(in);
  DeviceBuffer<std::uint16_t> d_out(pairs);
  cvt_e4m3x2_kernel<<<(pairs + 255) / 256, 256>>>(d_in.get(), d_out.get(), pairs);
  TESSERA_TEST_CUDA(cudaGetLastError());
  const auto out = d_out.read();
  int mismatches = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::uint16_t pair = out[i / 2];
    const unsigned got = i % 2 ? pair >> 8 : pair & 0xffu;
    if (std::isnan(in[i])) {
      EXPECT_EQ(got & 0x7fu, 0x7fu) << "NaN at " << i;
      continue;
    }
    const unsigned want = __nv_cvt_float_to_fp8(in[i], __NV_SATFINITE, __NV_E4M3);
    if (got != want && ++mismatches <= 10)
      ADD_FAILURE() << "cvt_e4m3x2 of " << in[i] << " (input " << i << "): 0x" << std::hex << got << ", want 0x" << want;
  }
  EXPECT_EQ(mismatches, 0);
}

// ---------------------------------------------------------------------------------------------
// Programmatic dependent launch, on a stream of its own: the primary grid lets its dependent
// launch at its start, spins 200 us, stamps %globaltimer and writes; the dependent (launched
// with programmatic stream serialization) stamps %globaltimer as it starts, waits with
// griddepcontrol_wait and reads. Odd rounds launch the dependent plainly: its wait then returns
// at once, and it starts after the primary. Two tests read the rounds:
// - GridDependencyWaitSeesThePrimarysWrites: the dependent sees every write in every round (a
//   wait that returns early reads the previous round's values);
// - GridDependencyDependentStartsEarlyConcurrent: in at least one programmatic round the
//   dependent starts before the primary's writes, which shows that launch_dependents let it in
//   early (a no-op launch_dependents, or wrappers compiled to nothing, start it only after the
//   primary, and the wait would then have nothing to do). compute-sanitizer serialises kernels,
//   so no dependent can start early under it: gpu-check leaves *Concurrent* tests out there.

__global__ void pdl_primary_kernel(int* data, int n, int round, unsigned long long* write_time) {
  sm90::griddepcontrol_launch_dependents();
  const unsigned long long t0 = sm80::sreg_globaltimer();
  while (sm80::sreg_globaltimer() - t0 < 200000) {
  }
  if (threadIdx.x == 0) *write_time = sm80::sreg_globaltimer();
  for (int i = threadIdx.x; i < n; i += blockDim.x) data[i] = round * n + i + 1;
}

__global__ void pdl_dependent_kernel(const int* data, int n, int* seen, unsigned long long* start_time) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *start_time = sm80::sreg_globaltimer();
  sm90::griddepcontrol_wait();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) seen[i] = data[i];
}

struct PdlRound {
  bool programmatic;
  int wrong;                       // elements the dependent read that were not this round's writes
  std::string first_wrong;         // the first of them, for the failure message
  unsigned long long started;      // the dependent's start (%globaltimer, ns)
  unsigned long long written;      // the primary's writes
};

// Runs kRounds primary/dependent pairs, programmatic on even rounds, and reads what each saw.
std::vector<PdlRound> run_pdl_rounds() {
  constexpr int n = 4096, kRounds = 8;
  DeviceBuffer<int> data(n, 0), seen(n);
  DeviceBuffer<unsigned long long> write_time(1), start_time(1);
  cudaStream_t stream = nullptr;
  TESSERA_TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  auto launch_pair = [&](int round, bool programmatic) {
    pdl_primary_kernel<<<1, 128, 0, stream>>>(data.get(), n, round, write_time.get());
    TESSERA_TEST_CUDA(cudaGetLastError());
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(4);
    cfg.blockDim = dim3(128);
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = programmatic ? 1 : 0;
    TESSERA_TEST_CUDA(cudaLaunchKernelEx(&cfg, pdl_dependent_kernel, static_cast<const int*>(data.get()), n,
                                         seen.get(), start_time.get()));
    TESSERA_TEST_CUDA(cudaStreamSynchronize(stream));
  };
  launch_pair(-1, true);  // both kernels loaded before the rounds (lazy loading would delay the first)
  std::vector<PdlRound> rounds;
  for (int round = 0; round < kRounds; ++round) {
    PdlRound r{round % 2 == 0, 0, {}, 0, 0};
    launch_pair(round, r.programmatic);
    const auto got = seen.read();
    for (int i = 0; i < n; ++i)
      if (got[i] != round * n + i + 1 && r.wrong++ == 0)
        r.first_wrong = "element " + std::to_string(i) + ": " + std::to_string(got[i]) + ", want " +
                        std::to_string(round * n + i + 1);
    r.started = start_time.read()[0];
    r.written = write_time.read()[0];
    rounds.push_back(r);
  }
  TESSERA_TEST_CUDA(cudaStreamDestroy(stream));
  return rounds;
}

TEST(PrimitivesSm90, GridDependencyWaitSeesThePrimarysWrites) {
  TESSERA_REQUIRE_SM90();
  const auto rounds = run_pdl_rounds();
  for (std::size_t i = 0; i < rounds.size(); ++i)
    EXPECT_EQ(rounds[i].wrong, 0) << "round " << i << (rounds[i].programmatic ? " (programmatic)" : " (plain)")
                                  << ", first wrong " << rounds[i].first_wrong;
}

TEST(PrimitivesSm90, GridDependencyDependentStartsEarlyConcurrent) {
  TESSERA_REQUIRE_SM90();
  const auto rounds = run_pdl_rounds();
  int early_starts = 0, programmatic_rounds = 0;
  for (std::size_t i = 0; i < rounds.size(); ++i) {
    if (rounds[i].programmatic) {
      ++programmatic_rounds;
      early_starts += rounds[i].started < rounds[i].written ? 1 : 0;
    } else {
      EXPECT_GT(rounds[i].started, rounds[i].written) << "a plain launch started before the primary's writes, round " << i;
    }
  }
  EXPECT_GE(early_starts, 1) << "the dependent never started while the primary ran (of " << programmatic_rounds
                             << " programmatic rounds): launch_dependents had no effect";
}

}  // namespace
}  // namespace tessera::testing
