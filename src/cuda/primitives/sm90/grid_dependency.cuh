// Programmatic dependent launch (griddepcontrol, sm_90). A grid launched with the programmatic
// stream serialization attribute may become resident before the grid ahead of it on the stream
// has completed; these two instructions say when it may start and when it must wait. Both
// compile to nothing below sm_90, so kernels built for every architecture call them unguarded.
// That is safe only because a launch is made programmatic only when the kernel's code was built
// for sm_90 or later: code built as compute_80 PTX and JIT-compiled on an sm_90 device has no
// wait, so the launchers of kernels built for several architectures (the portable backward's,
// the batch attention and merge kernels') check the kernel's binary and PTX versions first; the
// sm90 kernels are built for sm_90a only.
#pragma once

namespace tessera::cuda::sm90 {

// Waits until the prerequisite grid (the one this grid was launched as a dependent of) has
// completed and its memory writes are visible; returns at once after a plain launch. The
// "memory" clobber keeps the compiler from moving global accesses above it.
__device__ __forceinline__ void griddepcontrol_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets this grid's programmatic dependents be scheduled once every CTA of this grid has executed
// it (or exited). It only signals: it orders no memory (no "memory" clobber either: the compiler
// may move memory accesses across it), so a dependent that reads this grid's results must
// griddepcontrol_wait() first. A no-op without dependents.
__device__ __forceinline__ void griddepcontrol_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

}  // namespace tessera::cuda::sm90
