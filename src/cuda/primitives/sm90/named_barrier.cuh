// Named barriers (bar.sync / bar.arrive, sm_70+ semantics; used on sm_90 for warp
// specialisation). A CTA has 16 hardware barriers, ids 0..15; __syncthreads() uses id 0 with
// all threads, so kernels give their named barriers ids 1..15 (keep a table of ids per kernel).
//
// `thread_count` is the number of threads that take part, a multiple of 32 (warps take part as
// a whole: every thread of a participating warp executes the same bar.* instruction, with the
// same id and count). The barrier completes when thread_count threads have arrived, by
// bar.sync (arrive, then wait) or bar.arrive (arrive, do not wait). So a producer warp that
// only signals uses arrive and the consumers that must wait use sync, all naming the same id
// and the same total count (producers + consumers).
//
// Memory ordering: shared- and global-memory writes made before bar.arrive / bar.sync by any
// participant are visible to every participant that returns from bar.sync on that phase.
// (For data that the async proxy reads next, see fence.cuh.)
#pragma once

#include <cstdint>

namespace tessera::cuda::sm90 {

// Arrive at barrier `id` and wait until `thread_count` threads have arrived.
__device__ __forceinline__ void named_barrier_sync(std::uint32_t id, std::uint32_t thread_count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(thread_count) : "memory");
}

// The same with a compile-time thread count (an immediate operand: no register holds it).
template <std::uint32_t kThreadCount>
__device__ __forceinline__ void named_barrier_sync(std::uint32_t id) {
  static_assert(kThreadCount > 0 && kThreadCount % 32 == 0 && kThreadCount <= 1024,
                "named barrier: a positive multiple of 32 threads, at most 1024");
  asm volatile("bar.sync %0, %1;" ::"r"(id), "n"(kThreadCount) : "memory");
}

// Arrive at barrier `id` (expecting `thread_count` threads in all) without waiting.
__device__ __forceinline__ void named_barrier_arrive(std::uint32_t id, std::uint32_t thread_count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(thread_count) : "memory");
}

}  // namespace tessera::cuda::sm90
