// Does %globaltimer (the batch timeline's clock, src/cuda/batch/trace.h) tick at the rate of CUDA
// events? One thread spins until %globaltimer has advanced by N ns; events time the kernel. Also
// prints the SM clock over the spin (clock64 cycles per globaltimer ns).
//   nvcc -O3 -arch=sm_90 -o globaltimer_rate bench/micro/globaltimer_rate.cu && ./globaltimer_rate
#include <cstdio>
#include <cuda_runtime.h>

__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin(unsigned long long ns, unsigned long long* out) {
  const unsigned long long t0 = globaltimer();
  const long long c0 = clock64();
  unsigned long long t = t0;
  while (t - t0 < ns) t = globaltimer();
  out[0] = t - t0;
  out[1] = static_cast<unsigned long long>(clock64() - c0);
}

int main() {
  unsigned long long* out;
  cudaMalloc(&out, 2 * sizeof(unsigned long long));
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  spin<<<1, 1>>>(1000, out);  // warm-up
  for (unsigned long long ns : {100000ull, 500000ull, 1000000ull, 5000000ull}) {
    cudaEventRecord(a);
    spin<<<1, 1>>>(ns, out);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    unsigned long long h[2];
    cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost);
    std::printf("globaltimer %8llu ns  events %9.1f us  ratio %.4f  SM clock %.3f GHz\n", h[0], 1000.0 * ms,
                1e6 * ms / static_cast<double>(h[0]), static_cast<double>(h[1]) / static_cast<double>(h[0]));
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
