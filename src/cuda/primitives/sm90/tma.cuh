// TMA bulk tensor copies (cp.async.bulk.tensor, sm_90+): one thread asks the copy engine to
// move a whole box (tile) described by a tensor map (tensor_map.h) between global and shared
// memory; the data never passes through registers.
//
// Tensor map: pass the CUtensorMap by value as a `const __grid_constant__ CUtensorMap`
// kernel parameter and hand its address (&map) to these functions; the copy engine reads the
// descriptor from the kernel's parameter space. prefetch_tensor_map(&map) early in the kernel
// hides the descriptor fetch of the first copy.
//
// Coordinates are element indices, dimension 0 (innermost) first, signed 32-bit: a box may
// start before 0 or end past the tensor's extent; such elements load as zeros and are skipped
// by stores.
//
// Loads (global -> shared): the box lands at `dst` (shared address, 128-byte aligned; 1024
// for 128-byte swizzle, see tensor_map.h) and completes on the mbarrier `bar`
// (mbarrier.cuh): the copy performs complete_tx of the box's bytes on it. The issuing thread
// first does mbarrier_arrive_expect_tx(bar, total bytes of the loads on that phase); readers
// wait on the barrier's phase, after which the bytes are visible to ordinary loads and wgmma.
//
// Stores (shared -> global): the box is read from `src` (shared address, same alignment). If
// ordinary stores wrote src, every writing thread executes fence_proxy_async_shared_cta()
// (fence.cuh) and then a barrier precedes the store. The issuing thread groups its stores with
// tma_store_commit() and waits with tma_store_wait_read<N>() (src may be overwritten) or
// tma_store_wait<N>() (writes done and visible in global memory), N = groups left pending.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace tessera::cuda::sm90 {

__device__ __forceinline__ std::uint64_t tensor_map_addr(const CUtensorMap* map) {
  return reinterpret_cast<std::uint64_t>(map);
}

// prefetch.tensormap: brings the descriptor into the cache ahead of the first copy.
__device__ __forceinline__ void prefetch_tensor_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(tensor_map_addr(map)) : "memory");
}

// ----- loads: cp.async.bulk.tensor.Nd.shared::cluster.global.mbarrier::complete_tx::bytes -----
// (A CTA's own shared::cta address is a valid shared::cluster address of that CTA.)

__device__ __forceinline__ void tma_load_2d(std::uint32_t dst, const CUtensorMap* map, std::uint32_t bar, int c0,
                                            int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(tensor_map_addr(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

__device__ __forceinline__ void tma_load_3d(std::uint32_t dst, const CUtensorMap* map, std::uint32_t bar, int c0,
                                            int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::
          "r"(dst),
      "l"(tensor_map_addr(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

__device__ __forceinline__ void tma_load_4d(std::uint32_t dst, const CUtensorMap* map, std::uint32_t bar, int c0,
                                            int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(dst),
      "l"(tensor_map_addr(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

__device__ __forceinline__ void tma_load_5d(std::uint32_t dst, const CUtensorMap* map, std::uint32_t bar, int c0,
                                            int c1, int c2, int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, "
      "%6}], [%7];\n" ::"r"(dst),
      "l"(tensor_map_addr(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(bar)
      : "memory");
}

// ----- stores: cp.async.bulk.tensor.Nd.global.shared::cta.bulk_group -----

__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, std::uint32_t src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
                   tensor_map_addr(map)),
               "r"(c0), "r"(c1), "r"(src)
               : "memory");
}

__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, std::uint32_t src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];\n" ::"l"(
                   tensor_map_addr(map)),
               "r"(c0), "r"(c1), "r"(c2), "r"(src)
               : "memory");
}

__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, std::uint32_t src, int c0, int c1, int c2,
                                             int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(
                   tensor_map_addr(map)),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(src)
               : "memory");
}

__device__ __forceinline__ void tma_store_5d(const CUtensorMap* map, std::uint32_t src, int c0, int c1, int c2,
                                             int c3, int c4) {
  asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4, %5}], [%6];\n" ::"l"(
                   tensor_map_addr(map)),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(src)
               : "memory");
}

// ----- bulk reduction: cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 -----
// dst[i] += src[i] for `bytes` / 4 floats, performed by the copy engine (element-wise atomic
// adds at gpu scope; different CTAs may target the same dst). src: shared address, dst: global,
// both 16-byte aligned, bytes a multiple of 16. Like a TMA store: ordinary stores into src
// need fence_proxy_async_shared_cta() (and a barrier) first; commit and wait with the store
// functions below (wait_read before src is rewritten, wait for the adds to be performed). The
// wait orders the adds for the issuing thread only: other CTAs of the same kernel reading the
// sums need more (a kernel boundary, or a release/acquire pair).
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, std::uint32_t src, std::uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
               "r"(bytes)
               : "memory");
}

// Closes the calling thread's pending bulk stores (and bulk reductions) into one group.
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

// Waits until at most N of the calling thread's store groups still read their shared source.
template <int N>
__device__ __forceinline__ void tma_store_wait_read() {
  static_assert(N >= 0 && N <= 63, "wait_group takes a small immediate");
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

// Waits until at most N of the calling thread's store groups are pending (writes performed).
template <int N>
__device__ __forceinline__ void tma_store_wait() {
  static_assert(N >= 0 && N <= 63, "wait_group takes a small immediate");
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace tessera::cuda::sm90
