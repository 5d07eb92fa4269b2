// Does an L2-heavy kernel on the other SMs slow k SMs that stream from HBM? The SM split of a
// mixed batch (docs/perf/mixed_batch.md, "Twelfth session") runs the decode (HBM reads, each
// byte once) on k SMs beside the sm90 prefill, which re-reads its K/V tiles from L2 at ~2.5
// TB/s; its decode side got ~50 GB/s per SM whatever its bytes in flight. This separates the
// two: k "streamer" CTAs (one per SM, 256 KB of loads in flight per SM as in
// sm_read_bandwidth.cu) read 1 GiB of HBM while n - k "hammer" CTAs (one per SM) re-read a
// 16 MiB buffer that stays in L2, at a rate set by their threads per CTA.
//   nvcc -O3 -arch=sm_90 -o l2_contention bench/micro/l2_contention.cu && ./l2_contention
#include <cuda_runtime.h>

#include <cstdio>

#include "read_loop.cuh"

constexpr int kUnroll = 16;

// Streamer: CTA x reads its contiguous share of src once (16-byte loads, kUnroll in flight per
// thread).
__global__ void stream_kernel(const int4* __restrict__ src, long long per_cta, int4* sink) {
  extern __shared__ int4 unused[];
  // Evict-first loads, as the decode's copies.
  const int acc = read_loop<kUnroll>(src + blockIdx.x * per_cta, per_cta, [](const int4* q) { return __ldcs(q); });
  if (acc == 0x7fffffff) sink[0] = make_int4(acc, 0, 0, 0);  // keeps the loads alive
  if (threadIdx.x == 0 && blockIdx.x == 0) unused[0] = make_int4(0, 0, 0, 0);
}

// Hammer: every CTA sweeps the whole L2-resident buffer `passes` times (all CTAs read the same
// lines, as prefill CTAs of one request read the same K/V tiles).
__global__ void hammer_kernel(const int4* __restrict__ buf, long long n16, int passes, int4* sink) {
  extern __shared__ int4 unused[];
  int acc = 0;
  for (int pass = 0; pass < passes; ++pass) {
    const long long start = (static_cast<long long>(blockIdx.x) * 4096 + pass * 977) % n16;  // spread the CTAs
    for (long long base = threadIdx.x; base < n16; base += (long long)blockDim.x * 8) {
      int4 v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        long long i = base + (long long)u * blockDim.x + start;
        if (i >= n16) i -= n16;
        v[u] = __ldcg(buf + i);
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
  }
  if (acc == 0x7fffffff) sink[0] = make_int4(acc, 0, 0, 0);
  if (threadIdx.x == 0 && blockIdx.x == 0) unused[0] = make_int4(0, 0, 0, 0);
}

int main() {
  const long long stream_bytes = 1LL << 30, l2_bytes = 16LL << 20;
  int4 *src, *buf, *sink;
  cudaMalloc(&src, stream_bytes);
  cudaMalloc(&buf, l2_bytes);
  cudaMalloc(&sink, 16);
  cudaMemset(src, 1, stream_bytes);
  cudaMemset(buf, 2, l2_bytes);
  int sms;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int smem = 150 * 1024;  // one CTA per SM for both kernels
  cudaFuncSetAttribute(stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(hammer_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaStream_t s_stream, s_hammer;
  cudaStreamCreateWithFlags(&s_stream, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&s_hammer, cudaStreamNonBlocking);
  cudaEvent_t a0, a1, h0, h1;
  cudaEventCreate(&a0), cudaEventCreate(&a1), cudaEventCreate(&h0), cudaEventCreate(&h1);

  printf("SMs %d; streamer: k CTAs x 1024 threads (256 KB in flight per SM) over 1 GiB; hammer: the other SMs\n", sms);
  printf("re-read 16 MiB (L2) with T threads per CTA. GB/s (per SM)\n");
  printf("k | hammer T | streamer alone | streamer with hammer | hammer L2 GB/s (per SM)\n");
  for (int k : {40, 51, 66}) {
    const long long per_cta = stream_bytes / 16 / k;
    // Alone (twice: warm-up, then timed).
    float alone_ms = 0;
    for (int r = 0; r < 2; ++r) {
      cudaEventRecord(a0, s_stream);
      stream_kernel<<<k, 1024, smem, s_stream>>>(src, per_cta, sink);
      cudaEventRecord(a1, s_stream);
      cudaEventSynchronize(a1);
      cudaEventElapsedTime(&alone_ms, a0, a1);
    }
    const double alone = per_cta * k * 16.0 / (alone_ms * 1e-3) / 1e9;
    for (int threads : {128, 256, 512, 1024}) {
      // The hammer runs long enough to cover the streamer (passes calibrated from a short run).
      const int hammer_ctas = sms - k;
      cudaEventRecord(h0, s_hammer);
      hammer_kernel<<<hammer_ctas, threads, smem, s_hammer>>>(buf, l2_bytes / 16, 4, sink);
      cudaEventRecord(h1, s_hammer);
      cudaEventSynchronize(h1);
      float cal_ms;
      cudaEventElapsedTime(&cal_ms, h0, h1);
      const int passes = static_cast<int>(4 * 3 * alone_ms / cal_ms) + 4;  // ~3x the streamer's time
      cudaEventRecord(h0, s_hammer);
      hammer_kernel<<<hammer_ctas, threads, smem, s_hammer>>>(buf, l2_bytes / 16, passes, sink);
      cudaEventRecord(h1, s_hammer);
      // Start the streamer once the hammer has begun (it is launched first and takes its SMs).
      cudaEventRecord(a0, s_stream);
      stream_kernel<<<k, 1024, smem, s_stream>>>(src, per_cta, sink);
      cudaEventRecord(a1, s_stream);
      cudaEventSynchronize(a1);
      cudaEventSynchronize(h1);
      float with_ms, h_ms;
      cudaEventElapsedTime(&with_ms, a0, a1);
      cudaEventElapsedTime(&h_ms, h0, h1);
      const double with = per_cta * k * 16.0 / (with_ms * 1e-3) / 1e9;
      const double ham = static_cast<double>(l2_bytes) * passes * hammer_ctas / (h_ms * 1e-3) / 1e9;
      printf("%d | %d | %.0f (%.1f) | %.0f (%.1f) | %.0f (%.1f)\n", k, threads, alone, alone / k, with, with / k, ham,
             ham / hammer_ctas);
    }
  }
  const cudaError_t e = cudaDeviceSynchronize();
  printf("status: %s\n", cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
