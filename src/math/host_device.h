// Qualifiers that let one definition serve host code (g++) and CUDA device code (nvcc).
#pragma once

#if defined(__CUDACC__)
#define TESSERA_HD __host__ __device__ __forceinline__
#else
#define TESSERA_HD inline
#endif
