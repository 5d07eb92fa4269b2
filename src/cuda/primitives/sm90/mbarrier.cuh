// mbarrier (sm_90 forms): a 64-bit object in shared memory that counts arrivals and, on
// Hopper, transaction bytes. It is the completion mechanism of TMA loads and the handshake
// of producer/consumer pipelines.
//
// State: a phase (parity 0, 1, 0, ...), a pending-arrival count and a pending tx-count. A
// phase completes when both the pending arrivals reach zero and the tx-count is zero; the
// barrier then flips to the next phase with its arrival count reset to the init count.
// - arrive: pending arrivals -= 1.
// - arrive_expect_tx(bytes): tx-count += bytes, then arrive (one instruction, so the phase
//   cannot complete between the two). A TMA load that names the barrier decrements tx-count
//   by the bytes it wrote (complete_tx) when they have landed.
// - try_wait.parity(p): true once the phase with parity p has completed, i.e. while the
//   current phase's parity differs from p. Right after init (phase 0 running),
//   try_wait.parity(1) is true and try_wait.parity(0) false: a producer that waits on an
//   "empty" barrier with parity (round & 1) ^ 1 therefore passes in round 0 at once.
//
// Usage: one thread inits, then fence_mbarrier_init() and a __syncthreads() before any other
// thread (or the copy engine) touches the barrier. A waiter keeps its own phase bit and flips
// it each time it wraps around its ring of stages. Addresses are 32-bit shared-state-space
// addresses (smem_u32 of an 8-byte aligned std::uint64_t in __shared__).
#pragma once

#include <cstdint>

namespace tessera::cuda::sm90 {

// Shared-memory address (state space .shared, 32 bits) of a generic pointer into smem.
__device__ __forceinline__ std::uint32_t smem_u32(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// mbarrier.init: phase 0, expecting `arrival_count` arrivals per phase (1 .. 2^20 - 1).
__device__ __forceinline__ void mbarrier_init(std::uint32_t bar, std::uint32_t arrival_count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrival_count) : "memory");
}

// Makes the initialisations done by this thread visible to the async proxy (TMA complete_tx)
// and, at cluster scope, to other CTAs. Follow it with a barrier for the CTA's other threads.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival (release semantics at CTA scope: this thread's prior writes are visible to the
// threads whose wait sees this phase complete). Returns the opaque state token (unused by
// parity waits; kept so callers may use mbarrier.test_wait later).
__device__ __forceinline__ std::uint64_t mbarrier_arrive(std::uint32_t bar) {
  std::uint64_t state;
  asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];\n" : "=l"(state) : "r"(bar) : "memory");
  return state;
}

// Adds `tx_bytes` to the expected transaction count of the current phase, then arrives once.
// The producer calls it (one thread) right before issuing the TMA loads that complete on this
// barrier, with tx_bytes = the sum of their box sizes in bytes (out-of-bounds fill included).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(std::uint32_t bar, std::uint32_t tx_bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(tx_bytes) : "memory");
}

// Adds `tx_bytes` to the expected transaction count without arriving.
__device__ __forceinline__ void mbarrier_expect_tx(std::uint32_t bar, std::uint32_t tx_bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(tx_bytes) : "memory");
}

// One bounded wait (the hardware may suspend the thread for a while): true when the phase with
// parity `parity` has completed. Acquire semantics at CTA scope when it returns true.
__device__ __forceinline__ bool mbarrier_try_wait_parity(std::uint32_t bar, std::uint32_t parity) {
  std::uint32_t done;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// Blocks until the phase with parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait_parity(std::uint32_t bar, std::uint32_t parity) {
  while (!mbarrier_try_wait_parity(bar, parity)) {
  }
}

// Ends the barrier's life (before its 8 bytes are reused for other data).
__device__ __forceinline__ void mbarrier_inval(std::uint32_t bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

}  // namespace tessera::cuda::sm90
