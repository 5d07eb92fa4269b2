// Fire-and-forget global reductions (RED): the backward's fp32 dQ accumulation. Unlike
// atomicAdd (ATOMG), RED returns nothing, so the warp does not wait on the round trip at the
// next reuse of the registers. (Moved here from the sm80 backward so that the sm90 backward
// shares it.)
#pragma once

namespace tessera::cuda::sm80 {

// dst[0..1] += (a, b) at gpu scope without returning the old values (sm_90 vector RED; two
// scalar atomics before sm_90). Like atomicAdd on f32 in global memory, it flushes subnormals.
// dst: 8-byte aligned.
__device__ __forceinline__ void red_add_f32x2(float* dst, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.relaxed.gpu.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(a), "f"(b));
#else
  atomicAdd(dst, a);
  atomicAdd(dst + 1, b);
#endif
}

// dst[0..3] += (a, b, c, d), one 16-byte vector RED on sm_90 (four scalar atomics before).
// dst: 16-byte aligned.
__device__ __forceinline__ void red_add_f32x4(float* dst, float a, float b, float c, float d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "f"(a), "f"(b), "f"(c),
               "f"(d));
#else
  atomicAdd(dst, a);
  atomicAdd(dst + 1, b);
  atomicAdd(dst + 2, c);
  atomicAdd(dst + 3, d);
#endif
}

}  // namespace tessera::cuda::sm80
