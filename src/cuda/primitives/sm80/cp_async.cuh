// cp.async (sm_80+): asynchronous global -> shared copies that bypass registers.
// We use the 16-byte .cg form for tiles (caches in L2, not L1: streamed tiles are read once per
// CTA). With src-size 0 the 16 destination bytes are zero-filled and nothing is read, which
// is how tiles that hang over a sequence's end are padded without touching memory past it.
//
// Completion: each thread's copies since its last commit form one group; wait_group<N> waits
// until at most N of the calling thread's groups are pending. Other threads' copies become
// visible only after a barrier (__syncthreads) that follows everyone's wait.
#pragma once

#include <cstdint>

namespace tessera::cuda::sm80 {

// Copies 16 bytes from global `src` to shared address `dst` (both 16-byte aligned) when
// `valid`; otherwise writes 16 zero bytes to `dst` and reads nothing (src must still be a
// valid-looking pointer; pass the tensor's base).
__device__ __forceinline__ void cp_async_16_zfill(std::uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

// An L2 eviction policy (createpolicy, sm_80+) that marks the lines a copy brings in as the first
// to evict: for data read exactly once (the decode's K/V stream), so that it does not push out
// lines other CTAs still reuse (e.g. a prefill kernel's K/V tiles running beside it).
__device__ __forceinline__ std::uint64_t l2_evict_first_policy() {
  std::uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

// cp_async_16_zfill with an L2 cache policy from l2_evict_first_policy (or another createpolicy).
__device__ __forceinline__ void cp_async_16_zfill_hint(std::uint32_t dst, const void* src, bool valid,
                                                      std::uint64_t policy) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes), "l"(policy)
               : "memory");
}

// 4-byte form for per-row scalars (the backward's LSE and D rows, which need not be 16-byte
// aligned): L1-allocating .ca is the only form for 4 bytes; zero-fill when !valid. (Moved here
// from the sm80 backward so that the sm90 backward shares it.)
__device__ __forceinline__ void cp_async_4_zfill(std::uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  static_assert(N >= 0 && N <= 7, "wait_group takes a small immediate");
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Completion tracked by an mbarrier instead of by groups: the hardware performs an arrive-on
// `bar` (shared::cta) for the executing thread once every cp.async that thread issued before
// this instruction has completed; the thread does not wait. With .noinc that arrival counts
// against the barrier's expected arrival count (mbarrier_init must include it), so a barrier
// initialised to N completes its phase when N threads' copies have all landed.
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(std::uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// Waits for every cp.async the thread has issued (committed or not).
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

}  // namespace tessera::cuda::sm80
