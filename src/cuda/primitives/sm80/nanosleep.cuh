// nanosleep (sm_70+) with a compile-time duration, also a compiler memory barrier: the "memory"
// clobber keeps the compiler from moving memory accesses across it, which __nanosleep() does
// not promise. Used where the instruction's place in the schedule is the point (see
// kv_tile_schedule.cuh's end_softmax_block), not the sleep.
#pragma once

#include <cstdint>

namespace tessera::cuda::sm80 {

// Sleeps for a duration in [0, 2 kNanoseconds] (the PTX ISA's bound; at most 1 ms may be asked).
template <std::uint32_t kNanoseconds>
__device__ __forceinline__ void nanosleep_ordered() {
  static_assert(kNanoseconds <= 1000000u, "nanosleep: at most 1 ms");
  asm volatile("nanosleep.u32 %0;" ::"n"(kNanoseconds) : "memory");
}

}  // namespace tessera::cuda::sm80
