// TMA tensor maps (host side, sm_90+): the 128-byte descriptor (CUtensorMap) that tells the
// copy engine a tensor's address, shape, strides, the box (tile) one copy moves and how the box
// is laid out in shared memory (swizzle).
//
// The encoder, cuTensorMapEncodeTiled, is a driver API function. We look it up at run time
// through the runtime (cudaGetDriverEntryPointByVersion), so nothing links libcuda at build
// time and a machine without a driver still loads the library; the lookup happens once per
// process. Header-only: <cuda.h> is used for the types only.
//
// Conventions (those of the driver):
// - Dimension 0 is the innermost (contiguous) one. dims[i] are element counts;
//   strides_bytes[i] is the byte stride of dimension i+1 (rank-1 entries: dimension 0 has unit
//   stride), each a multiple of 16 and below 2^40; the global address is 16-byte aligned.
// - box[i] is the tile extent in dimension i, 1..256. box[0] * element size must be a multiple
//   of 16 bytes and, with 128-byte swizzle, at most 128 bytes (so 64 bf16/f16 elements).
// - The box lands in shared memory densely, dimension 0 fastest: for a 2D box of (box[0],
//   box[1]) 16-bit elements, row r starts at byte r * box[0] * 2. With SWIZZLE_128B the
//   16-byte chunk c of row r is stored at chunk c ^ (r % 8) of that row (rows of 128 bytes;
//   the pattern repeats every 8 rows = 1024 bytes, so the shared-memory tile must be 1024-byte
//   aligned for this formula, and the wgmma descriptors of wgmma.cuh, to hold).
// - Elements of the box outside the tensor read as zero (OOB fill NONE means zero fill, not
//   NaN) and are not written by stores; the copy still counts the whole box in its bytes.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <string>

#include "tessera/error.h"

namespace tessera::cuda::sm90 {

// Bytes per element of a tensor-map data type (the ones tessera uses and their kin).
inline int tensor_map_element_bytes(CUtensorMapDataType type) {
  switch (type) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8: return 1;
    case CU_TENSOR_MAP_DATA_TYPE_UINT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16: return 2;
    case CU_TENSOR_MAP_DATA_TYPE_UINT32:
    case CU_TENSOR_MAP_DATA_TYPE_INT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ: return 4;
    case CU_TENSOR_MAP_DATA_TYPE_UINT64:
    case CU_TENSOR_MAP_DATA_TYPE_INT64:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64: return 8;
    default: return 0;
  }
}

// The driver's encoder, looked up once (thread-safe static initialisation). Throws
// Error(backend_failure) when the driver does not provide it.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found);
    if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || p == nullptr)
      throw Error(ErrorCode::backend_failure, "",
                  std::string("cuTensorMapEncodeTiled: driver entry point not available (") +
                      cudaGetErrorString(err) + ", query result " + std::to_string(static_cast<int>(found)) + ")");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// Encodes a tiled tensor map of rank 1..5 (see the conventions above). Checks the documented
// limits first and names the offending argument; throws Error(backend_failure) with the
// driver's result code when the driver still refuses.
inline CUtensorMap make_tensor_map_tiled(CUtensorMapDataType type, int rank, const void* global,
                                         const std::uint64_t* dims, const std::uint64_t* strides_bytes,
                                         const std::uint32_t* box,
                                         CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B,
                                         CUtensorMapL2promotion l2 = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
  auto bad = [](const std::string& arg, const std::string& expected, const std::string& got) {
    throw Error(ErrorCode::invalid_argument, arg, arg + ": expected " + expected + ", got " + got);
  };
  const int elem = tensor_map_element_bytes(type);
  if (elem == 0) bad("type", "a known CUtensorMapDataType", std::to_string(static_cast<int>(type)));
  if (rank < 1 || rank > 5) bad("rank", "1..5", std::to_string(rank));
  if (reinterpret_cast<std::uintptr_t>(global) % 16 != 0) bad("global", "a 16-byte aligned address", "misaligned");
  for (int i = 0; i < rank; ++i) {
    if (dims[i] < 1 || dims[i] > (std::uint64_t{1} << 32))
      bad("dims[" + std::to_string(i) + "]", "1..2^32", std::to_string(dims[i]));
    if (box[i] < 1 || box[i] > 256) bad("box[" + std::to_string(i) + "]", "1..256", std::to_string(box[i]));
  }
  for (int i = 0; i + 1 < rank; ++i)
    if (strides_bytes[i] % 16 != 0 || strides_bytes[i] >= (std::uint64_t{1} << 40))
      bad("strides_bytes[" + std::to_string(i) + "]", "a multiple of 16 below 2^40", std::to_string(strides_bytes[i]));
  const std::uint64_t inner_bytes = std::uint64_t{box[0]} * elem;
  if (inner_bytes % 16 != 0) bad("box[0]", "a multiple of 16 bytes", std::to_string(inner_bytes) + " bytes");
  const std::uint64_t swizzle_span = swizzle == CU_TENSOR_MAP_SWIZZLE_128B  ? 128
                                     : swizzle == CU_TENSOR_MAP_SWIZZLE_64B ? 64
                                     : swizzle == CU_TENSOR_MAP_SWIZZLE_32B ? 32
                                                                            : 0;
  if (swizzle_span != 0 && inner_bytes > swizzle_span)
    bad("box[0]", "at most " + std::to_string(swizzle_span) + " bytes with this swizzle",
        std::to_string(inner_bytes) + " bytes");

  cuuint64_t d[5];
  cuuint64_t s[4];
  cuuint32_t b[5];
  cuuint32_t e[5];
  for (int i = 0; i < rank; ++i) {
    d[i] = dims[i];
    b[i] = box[i];
    e[i] = 1;  // element strides: every element of the box (no sub-sampling)
  }
  for (int i = 0; i + 1 < rank; ++i) s[i] = strides_bytes[i];

  CUtensorMap map;
  const CUresult res = tensor_map_encoder()(&map, type, static_cast<cuuint32_t>(rank), const_cast<void*>(global), d, s,
                                            b, e, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, l2,
                                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (res != CUDA_SUCCESS)
    throw Error(ErrorCode::backend_failure, "",
                "cuTensorMapEncodeTiled failed with CUresult " + std::to_string(static_cast<int>(res)));
  return map;
}

// 2D convenience: a row-major matrix of `rows` x `cols` elements, `row_stride_bytes` apart,
// copied in boxes of box_rows x box_cols (box_cols contiguous).
inline CUtensorMap make_tensor_map_2d(CUtensorMapDataType type, const void* global, std::uint64_t rows,
                                      std::uint64_t cols, std::uint64_t row_stride_bytes, std::uint32_t box_rows,
                                      std::uint32_t box_cols,
                                      CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B) {
  const std::uint64_t dims[2] = {cols, rows};
  const std::uint64_t strides[1] = {row_stride_bytes};
  const std::uint32_t box[2] = {box_cols, box_rows};
  return make_tensor_map_tiled(type, 2, global, dims, strides, box, swizzle);
}

}  // namespace tessera::cuda::sm90
