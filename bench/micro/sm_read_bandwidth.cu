// How much HBM read bandwidth k SMs can pull on their own (one CTA per SM, forced by shared
// memory), for several amounts of bytes in flight per SM. Decides whether a mixed batch can
// give decode a subset of the SMs (docs/perf/mixed_batch.md, "SM split").
//   nvcc -O3 -arch=sm_90 -o sm_read_bandwidth bench/micro/sm_read_bandwidth.cu && ./sm_read_bandwidth
#include <cstdio>
#include <cuda_runtime.h>

#include "read_loop.cuh"

template <int kUnroll>
__global__ void read_kernel(const int4* __restrict__ src, long long per_cta, int4* sink) {
  extern __shared__ int4 unused[];
  const int acc = read_loop<kUnroll>(src + blockIdx.x * per_cta, per_cta, [](const int4* q) { return __ldg(q); });
  if (acc == 0x7fffffff) sink[0] = make_int4(acc, 0, 0, 0);  // keeps the loads alive
  if (threadIdx.x == 0 && blockIdx.x == 0) unused[0] = make_int4(0, 0, 0, 0);
}

template <int kUnroll>
float run(const int4* src, long long total16, int ctas, int threads, int4* sink) {
  const int smem = 150 * 1024;  // one CTA per SM
  cudaFuncSetAttribute(read_kernel<kUnroll>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  long long per_cta = total16 / ctas;
  cudaEvent_t a, b;
  cudaEventCreate(&a); cudaEventCreate(&b);
  read_kernel<kUnroll><<<ctas, threads, smem>>>(src, per_cta, sink);
  cudaEventRecord(a);
  const int reps = 5;
  for (int r = 0; r < reps; ++r) read_kernel<kUnroll><<<ctas, threads, smem>>>(src, per_cta, sink);
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms; cudaEventElapsedTime(&ms, a, b);
  return (double)per_cta * ctas * 16 * reps / (ms * 1e-3) / 1e9;  // GB/s
}

int main() {
  const long long bytes = 2LL << 30;
  int4* src; int4* sink;
  cudaMalloc(&src, bytes); cudaMalloc(&sink, 16);
  cudaMemset(src, 1, bytes);
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int ks[] = {8, 16, 24, 33, 44, 56, 66, 80, 100, 132};
  printf("SMs %d; GB/s (per SM) by CTAs (1 per SM) and bytes in flight per SM\n", sms);
  printf("ctas | 32KB | 64KB | 128KB | 256KB\n");
  for (int k : ks) {
    if (k > sms) continue;
    float g4 = run<4>(src, bytes / 16, k, 512, sink);
    float g8 = run<8>(src, bytes / 16, k, 512, sink);
    float g16 = run<16>(src, bytes / 16, k, 512, sink);
    float g32 = run<16>(src, bytes / 16, k, 1024, sink);
    printf("%d | %.0f (%.1f) | %.0f (%.1f) | %.0f (%.1f) | %.0f (%.1f)\n", k, g4, g4 / k, g8, g8 / k,
           g16, g16 / k, g32, g32 / k);
  }
  cudaError_t e = cudaDeviceSynchronize();
  printf("status: %s\n", cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
