// Special registers (PTX ISA "Special Registers"), read where they are used: asm volatile keeps
// the read at its place (not hoisted to the kernel's start and kept live across a persistent
// kernel's units; at the register cap ptxas spilled such values). Valid on every architecture
// tessera builds for.
#pragma once

namespace tessera::cuda::sm80 {

__device__ __forceinline__ int sreg_ctaid_x() {
  int v;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(v));
  return v;
}
__device__ __forceinline__ int sreg_nctaid_x() {
  int v;
  asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(v));
  return v;
}
__device__ __forceinline__ int sreg_tid_x() {
  int v;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(v));
  return v;
}
// The SM the thread runs on (for timelines: not stable across a CTA's preemption).
__device__ __forceinline__ unsigned sreg_smid() {
  unsigned v;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(v));
  return v;
}
// Nanoseconds of the global timer (coarse steps on some parts; for timelines).
__device__ __forceinline__ unsigned long long sreg_globaltimer() {
  unsigned long long v;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(v));
  return v;
}

}  // namespace tessera::cuda::sm80
