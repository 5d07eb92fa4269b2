// wgmma.mma_async (sm_90a only): a warpgroup (4 consecutive warps, the first one's index a
// multiple of 4; 128 threads) computes D(64 x N, f32) = A(64 x 16) * B(16 x N) + D
// asynchronously, reading B (and A, unless A comes from registers) from shared memory through
// 64-bit matrix descriptors. In SASS: HGMMA.
//
// Protocol per batch of wgmmas:
//   wgmma_fence();                      // before the first wgmma, and whenever the
//                                       // accumulators or A registers were touched by other code
//   wgmma_ss<N, kBf16>(d, da, db, ...); // as many as needed (e.g. one per k16 step)
//   wgmma_commit();                     // close the batch into one group
//   wgmma_wait<0>();                    // wait until <= N groups pending
//   wgmma_fence_operand(d);             // keep the compiler from moving reads of d above
// Until the wait, the accumulators (and A registers) belong to the tensor core: do not read or
// write them. Shared memory written by ordinary stores needs fence_proxy_async_shared_cta()
// (fence.cuh) and a barrier before a wgmma reads it; TMA-loaded data needs only the mbarrier.
//
// Operands: bf16 x bf16 or f16 x f16 (kBf16), f32 accumulate. Both A and B are K-major here:
// A is stored as its 64 rows (M) of K contiguous elements, B as its N rows (columns of the
// math B) of K contiguous elements, i.e. B^T row-major. That is S = Q K^T with Q and K
// row-major (transpose flags 0). wgmma_rs, and wgmma_ss at N 64 and 128, also take an MN-major
// B (kBMnMajor, transpose flag 1): B stored as its K rows of N contiguous elements, i.e.
// row-major K x N; that is O += P V with V row-major (keys x head_dim), or a backward's dQ = dS K
// with K row-major; see make_smem_desc_sw128_mnmajor.
//
// Accumulator layout (m64nN, f32, N/2 registers per thread): thread t of the warpgroup, warp
// w = t / 32 owns rows 16w .. 16w+15; with lane = 4*g + q (g in 0..7, q in 0..3), for each
// n-tile j in 0 .. N/8-1:
//   d[4j+0], d[4j+1] = (row 16w + g,     cols 8j + 2q, 8j + 2q + 1)
//   d[4j+2], d[4j+3] = (row 16w + g + 8, cols 8j + 2q, 8j + 2q + 1)
// (mma.sync's m16n8 C layout, repeated over n-tiles, one 16-row slab per warp).
// A from registers (wgmma_rs), 4 registers of two 16-bit values each, lower k in the low half:
//   a[0] = (row 16w + g, k 2q, 2q+1)    a[1] = (row 16w + g + 8, k 2q, 2q+1)
//   a[2] = (row 16w + g, k 2q+8, 2q+9)  a[3] = (row 16w + g + 8, k 2q+8, 2q+9)
// (mma.sync's A layout per warp), so an accumulator converted to 16 bits feeds the next
// wgmma as A without going through shared memory.
//
// Shared-memory descriptor, 128-byte swizzle, K-major (make_smem_desc_sw128_kmajor): the
// operand tile is what a TMA load with SWIZZLE_128B and a box of (64 elements of K, R rows)
// writes: row r of 128 bytes at byte r * 128, its 16-byte chunk c at chunk c ^ (r % 8); the
// tile's base is 1024-byte aligned. Fields of the 64-bit descriptor:
//   bits  0-13  start address >> 4 (shared address of the first element used)
//   bits 16-29  leading-dimension byte offset >> 4: the distance between "K-adjacent"
//               core-matrix columns; unused by swizzled K-major layouts whose k16 slice
//               (32 bytes) lies inside one 128-byte row; set to 1 (16 bytes)
//   bits 32-45  stride-dimension byte offset >> 4: distance between consecutive groups of 8
//               rows (M or N) = 8 * 128 = 1024 bytes
//   bits 49-51  base offset: 0 (the tile is 1024-byte aligned)
//   bits 62-63  swizzle mode: 1 = 128-byte (2 = 64-byte, 3 = 32-byte, 0 = none)
// One wgmma consumes k16 = 32 bytes of each row; the k-th k16 slice of a 64-wide panel is
// addressed by advancing the start address by 32 * k bytes (k = 0..3): the hardware applies the
// swizzle XOR to the final address, which is why the base must be 1024-aligned. A K extent
// beyond 64 elements lives in further panels (each R * 128 bytes), one TMA box each.
#pragma once

#include <cstdint>

#include "cuda/primitives/sm90/smem_desc.h"

namespace tessera::cuda::sm90 {

// The descriptor builders (make_smem_desc_sw128_kmajor, smem_desc_advance,
// make_smem_desc_sw128_mnmajor) are plain integer code in smem_desc.h, shared with a CPU test.

// wgmma.fence: orders prior register accesses (accumulators, A fragments) and shared-memory
// accesses of this warpgroup before the wgmmas that follow.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

// Closes all wgmmas issued since the last commit into one group.
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

// Waits until at most N wgmma groups of this warpgroup are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes a small immediate");
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// A compiler-level fence on registers: the compiler may not move accesses to `r` across it.
// Apply to the accumulators after wgmma_wait (and to A fragments before reusing them).
__device__ __forceinline__ void wgmma_fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void wgmma_fence_operand(std::uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }
template <typename T, int K>
__device__ __forceinline__ void wgmma_fence_operand(T (&r)[K]) {
#pragma unroll
  for (int i = 0; i < K; ++i) wgmma_fence_operand(r[i]);
}

namespace detail {
#define TESSERA_WGMMA_D64 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define TESSERA_WGMMA_DREGS64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define TESSERA_WGMMA_D128 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define TESSERA_WGMMA_DREGS128 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define TESSERA_WGMMA_D256 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
    "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
    "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define TESSERA_WGMMA_DREGS256 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"

#define TESSERA_WGMMA_D32 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define TESSERA_WGMMA_DREGS32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"

// N = 32, both operands K-major (the sm90 backward's S^T / dP^T at head_dim 256, where each
// warpgroup computes 32 of the 64 query columns).
__device__ __forceinline__ void wgmma_ss_m64n32k16_bf16(float (&d)[16], std::uint64_t da, std::uint64_t db, std::uint32_t scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " TESSERA_WGMMA_DREGS32 ", %16, %17, p, 1, 1, 0, 0;\n}\n"
      : TESSERA_WGMMA_D32
      : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_ss_m64n32k16_f16(float (&d)[16], std::uint64_t da, std::uint64_t db, std::uint32_t scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 " TESSERA_WGMMA_DREGS32 ", %16, %17, p, 1, 1, 0, 0;\n}\n"
      : TESSERA_WGMMA_D32
      : "l"(da), "l"(db), "r"(scale_d));
}

template <int kTransB>
__device__ __forceinline__ void wgmma_ss_m64n64k16_bf16(float (&d)[32], std::uint64_t da, std::uint64_t db, std::uint32_t scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " TESSERA_WGMMA_DREGS64 ", %32, %33, p, 1, 1, 0, %35;\n}\n"
      : TESSERA_WGMMA_D64
      : "l"(da), "l"(db), "r"(scale_d), "n"(kTransB));
}

template <int kTransB>
__device__ __forceinline__ void wgmma_rs_m64n64k16_bf16(float (&d)[32], const std::uint32_t (&a)[4], std::uint64_t db,
                                     std::uint32_t scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " TESSERA_WGMMA_DREGS64 ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
      : TESSERA_WGMMA_D64
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(kTransB));
}

template <int kTransB>
__device__ __forceinline__ void wgmma_ss_m64n64k16_f16(float (&d)[32], std::uint64_t da, std::uint64_t db, std::uint32_t scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " TESSERA_WGMMA_DREGS64 ", %32, %33, p, 1, 1, 0, %35;\n}\n"
      : TESSERA_WGMMA_D64
      : "l"(da), "l"(db), "r"(scale_d), "n"(kTransB));
}

template <int kTransB>
__device__ __forceinline__ void wgmma_rs_m64n64k16_f16(float (&d)[32], const std::uint32_t (&a)[4], std::uint64_t db,
                                     std::uint32_t scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " TESSERA_WGMMA_DREGS64 ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
      : TESSERA_WGMMA_D64
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(kTransB));
}

template <int kTransB>
__device__ __forceinline__ void wgmma_ss_m64n128k16_bf16(float (&d)[64], std::uint64_t da, std::uint64_t db, std::uint32_t scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " TESSERA_WGMMA_DREGS128 ", %64, %65, p, 1, 1, 0, %67;\n}\n"
      : TESSERA_WGMMA_D128
      : "l"(da), "l"(db), "r"(scale_d), "n"(kTransB));
}

template <int kTransB>
__device__ __forceinline__ void wgmma_rs_m64n128k16_bf16(float (&d)[64], const std::uint32_t (&a)[4], std::uint64_t db,
                                     std::uint32_t scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " TESSERA_WGMMA_DREGS128 ", {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
      : TESSERA_WGMMA_D128
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(kTransB));
}

template <int kTransB>
__device__ __forceinline__ void wgmma_ss_m64n128k16_f16(float (&d)[64], std::uint64_t da, std::uint64_t db, std::uint32_t scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " TESSERA_WGMMA_DREGS128 ", %64, %65, p, 1, 1, 0, %67;\n}\n"
      : TESSERA_WGMMA_D128
      : "l"(da), "l"(db), "r"(scale_d), "n"(kTransB));
}

template <int kTransB>
__device__ __forceinline__ void wgmma_rs_m64n128k16_f16(float (&d)[64], const std::uint32_t (&a)[4], std::uint64_t db,
                                     std::uint32_t scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " TESSERA_WGMMA_DREGS128 ", {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
      : TESSERA_WGMMA_D128
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(kTransB));
}

__device__ __forceinline__ void wgmma_ss_m64n256k16_bf16(float (&d)[128], std::uint64_t da, std::uint64_t db, std::uint32_t scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " TESSERA_WGMMA_DREGS256 ", %128, %129, p, 1, 1, 0, 0;\n}\n"
      : TESSERA_WGMMA_D256
      : "l"(da), "l"(db), "r"(scale_d));
}

template <int kTransB>
__device__ __forceinline__ void wgmma_rs_m64n256k16_bf16(float (&d)[128], const std::uint32_t (&a)[4], std::uint64_t db,
                                     std::uint32_t scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " TESSERA_WGMMA_DREGS256 ", {%128, %129, %130, %131}, %132, p, 1, 1, %134;\n}\n"
      : TESSERA_WGMMA_D256
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(kTransB));
}

__device__ __forceinline__ void wgmma_ss_m64n256k16_f16(float (&d)[128], std::uint64_t da, std::uint64_t db, std::uint32_t scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " TESSERA_WGMMA_DREGS256 ", %128, %129, p, 1, 1, 0, 0;\n}\n"
      : TESSERA_WGMMA_D256
      : "l"(da), "l"(db), "r"(scale_d));
}

template <int kTransB>
__device__ __forceinline__ void wgmma_rs_m64n256k16_f16(float (&d)[128], const std::uint32_t (&a)[4], std::uint64_t db,
                                     std::uint32_t scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " TESSERA_WGMMA_DREGS256 ", {%128, %129, %130, %131}, %132, p, 1, 1, %134;\n}\n"
      : TESSERA_WGMMA_D256
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(kTransB));
}
#define TESSERA_WGMMA_D80 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
#define TESSERA_WGMMA_DREGS80 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39}"
#define TESSERA_WGMMA_D176 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
#define TESSERA_WGMMA_DREGS176 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87}"

__device__ __forceinline__ void wgmma_ss_m64n80k16_bf16(float (&d)[40], std::uint64_t da, std::uint64_t db, std::uint32_t scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %42, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16 " TESSERA_WGMMA_DREGS80 ", %40, %41, p, 1, 1, 0, 0;\n}\n"
      : TESSERA_WGMMA_D80
      : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_ss_m64n80k16_f16(float (&d)[40], std::uint64_t da, std::uint64_t db, std::uint32_t scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %42, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n80k16.f32.f16.f16 " TESSERA_WGMMA_DREGS80 ", %40, %41, p, 1, 1, 0, 0;\n}\n"
      : TESSERA_WGMMA_D80
      : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_ss_m64n176k16_bf16(float (&d)[88], std::uint64_t da, std::uint64_t db, std::uint32_t scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %90, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n176k16.f32.bf16.bf16 " TESSERA_WGMMA_DREGS176 ", %88, %89, p, 1, 1, 0, 0;\n}\n"
      : TESSERA_WGMMA_D176
      : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_ss_m64n176k16_f16(float (&d)[88], std::uint64_t da, std::uint64_t db, std::uint32_t scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %90, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n176k16.f32.f16.f16 " TESSERA_WGMMA_DREGS176 ", %88, %89, p, 1, 1, 0, 0;\n}\n"
      : TESSERA_WGMMA_D176
      : "l"(da), "l"(db), "r"(scale_d));
}

#define TESSERA_WGMMA_D192 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define TESSERA_WGMMA_DREGS192 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}"
// N 192: head_dim 64's wide K tiles (kernel_traits.cuh: P through shared memory).
__device__ __forceinline__ void wgmma_ss_m64n192k16_bf16(float (&d)[96], std::uint64_t da, std::uint64_t db, std::uint32_t scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 " TESSERA_WGMMA_DREGS192 ", %96, %97, p, 1, 1, 0, 0;\n}\n"
      : TESSERA_WGMMA_D192
      : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_ss_m64n192k16_f16(float (&d)[96], std::uint64_t da, std::uint64_t db, std::uint32_t scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k16.f32.f16.f16 " TESSERA_WGMMA_DREGS192 ", %96, %97, p, 1, 1, 0, 0;\n}\n"
      : TESSERA_WGMMA_D192
      : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_ss_m64n128k32_e4m3(float (&d)[64], std::uint64_t da, std::uint64_t db, std::uint32_t scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " TESSERA_WGMMA_DREGS128 ", %64, %65, p, 1, 1;\n}\n"
      : TESSERA_WGMMA_D128
      : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_rs_m64n128k32_e4m3(float (&d)[64], const std::uint32_t (&a)[4], std::uint64_t db,
                                                         std::uint32_t scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " TESSERA_WGMMA_DREGS128 ", {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
      : TESSERA_WGMMA_D128
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_rs_m64n256k32_e4m3(float (&d)[128], const std::uint32_t (&a)[4], std::uint64_t db,
                                                         std::uint32_t scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 " TESSERA_WGMMA_DREGS256 ", {%128, %129, %130, %131}, %132, p, 1, 1;\n}\n"
      : TESSERA_WGMMA_D256
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

#undef TESSERA_WGMMA_D32
#undef TESSERA_WGMMA_DREGS32
#undef TESSERA_WGMMA_D64
#undef TESSERA_WGMMA_D80
#undef TESSERA_WGMMA_DREGS80
#undef TESSERA_WGMMA_D176
#undef TESSERA_WGMMA_DREGS176
#undef TESSERA_WGMMA_D192
#undef TESSERA_WGMMA_DREGS192
#undef TESSERA_WGMMA_DREGS64
#undef TESSERA_WGMMA_D128
#undef TESSERA_WGMMA_DREGS128
#undef TESSERA_WGMMA_D256
#undef TESSERA_WGMMA_DREGS256

}  // namespace detail

// D(64 x N) = A * B (+ D when accumulate), A and B from shared memory (descriptors da, db).
// N in {32, 64, 80, 128, 176, 192, 256} (80, 176, 192: K tiles of the attention kernels; 32: the
// backward's S^T at head_dim 256); kBf16: true = bf16
// operands, false = f16. `accumulate` false ignores the
// prior contents of d (use it for the first k step instead of zeroing d). kBMnMajor (N 64 or
// 128): B is MN-major (make_smem_desc_sw128_mnmajor, as for wgmma_rs), e.g. K read with its rows
// as the K dimension in a backward's dQ = dS K.
template <int N, bool kBf16, bool kBMnMajor = false>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], std::uint64_t da, std::uint64_t db, bool accumulate) {
  const std::uint32_t scale_d = accumulate ? 1u : 0u;
  constexpr int kTransB = kBMnMajor ? 1 : 0;
  static_assert(!kBMnMajor || N == 64 || N == 128, "wgmma_ss: MN-major B for N in {64, 128} (add as needed)");
  static_assert(N == 32 || N == 64 || N == 80 || N == 128 || N == 176 || N == 192 || N == 256,
                "wgmma_ss: N in {32, 64, 80, 128, 176, 192, 256} (add instantiations as needed)");
  if constexpr (N == 32) {
    if constexpr (kBf16) detail::wgmma_ss_m64n32k16_bf16(d, da, db, scale_d);
    else detail::wgmma_ss_m64n32k16_f16(d, da, db, scale_d);
  } else if constexpr (N == 80) {
    if constexpr (kBf16) detail::wgmma_ss_m64n80k16_bf16(d, da, db, scale_d);
    else detail::wgmma_ss_m64n80k16_f16(d, da, db, scale_d);
  } else if constexpr (N == 176) {
    if constexpr (kBf16) detail::wgmma_ss_m64n176k16_bf16(d, da, db, scale_d);
    else detail::wgmma_ss_m64n176k16_f16(d, da, db, scale_d);
  } else if constexpr (N == 192) {
    if constexpr (kBf16) detail::wgmma_ss_m64n192k16_bf16(d, da, db, scale_d);
    else detail::wgmma_ss_m64n192k16_f16(d, da, db, scale_d);
  } else if constexpr (N == 64) {
    if constexpr (kBf16) detail::wgmma_ss_m64n64k16_bf16<kTransB>(d, da, db, scale_d);
    else detail::wgmma_ss_m64n64k16_f16<kTransB>(d, da, db, scale_d);
  } else if constexpr (N == 128) {
    if constexpr (kBf16) detail::wgmma_ss_m64n128k16_bf16<kTransB>(d, da, db, scale_d);
    else detail::wgmma_ss_m64n128k16_f16<kTransB>(d, da, db, scale_d);
  } else {
    if constexpr (kBf16) detail::wgmma_ss_m64n256k16_bf16(d, da, db, scale_d);
    else detail::wgmma_ss_m64n256k16_f16(d, da, db, scale_d);
  }
}

// Same with A from registers (layout above); the A registers must stay unmodified until the
// wgmma's group has been waited for.
template <int N, bool kBf16, bool kBMnMajor = false>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const std::uint32_t (&a)[4], std::uint64_t db,
                                         bool accumulate) {
  constexpr int kTransB = kBMnMajor ? 1 : 0;
  const std::uint32_t scale_d = accumulate ? 1u : 0u;
  static_assert(N == 64 || N == 128 || N == 256, "wgmma_rs: N in {64, 128, 256} (add instantiations as needed)");
  if constexpr (N == 64) {
    if constexpr (kBf16) detail::wgmma_rs_m64n64k16_bf16<kTransB>(d, a, db, scale_d);
    else detail::wgmma_rs_m64n64k16_f16<kTransB>(d, a, db, scale_d);
  } else if constexpr (N == 128) {
    if constexpr (kBf16) detail::wgmma_rs_m64n128k16_bf16<kTransB>(d, a, db, scale_d);
    else detail::wgmma_rs_m64n128k16_f16<kTransB>(d, a, db, scale_d);
  } else {
    if constexpr (kBf16) detail::wgmma_rs_m64n256k16_bf16<kTransB>(d, a, db, scale_d);
    else detail::wgmma_rs_m64n256k16_f16<kTransB>(d, a, db, scale_d);
  }
}

// FP8 (e4m3 x e4m3, f32 accumulate), k32 per instruction: both operands K-major (8-bit types
// have no transpose), so k step j of a 128-byte swizzled panel is at start + 32 * j as for
// 16-bit types. A from registers (wgmma_rs_e4m3): 4 registers of four 8-bit values, lower k in
// the lower byte: a[0] = (row 16w + g, k 4q .. 4q+3), a[1] = (row 16w + g + 8, same k),
// a[2] = (row 16w + g, k 16 + 4q .. 16 + 4q + 3), a[3] = (row 16w + g + 8, same k).
template <int N>
__device__ __forceinline__ void wgmma_ss_e4m3(float (&d)[N / 2], std::uint64_t da, std::uint64_t db, bool accumulate) {
  static_assert(N == 128, "wgmma_ss_e4m3: N = 128 (add instantiations as needed)");
  detail::wgmma_ss_m64n128k32_e4m3(d, da, db, accumulate ? 1u : 0u);
}

template <int N>
__device__ __forceinline__ void wgmma_rs_e4m3(float (&d)[N / 2], const std::uint32_t (&a)[4], std::uint64_t db,
                                              bool accumulate) {
  static_assert(N == 128 || N == 256, "wgmma_rs_e4m3: N in {128, 256} (add instantiations as needed)");
  if constexpr (N == 128) detail::wgmma_rs_m64n128k32_e4m3(d, a, db, accumulate ? 1u : 0u);
  else detail::wgmma_rs_m64n256k32_e4m3(d, a, db, accumulate ? 1u : 0u);
}

}  // namespace tessera::cuda::sm90
