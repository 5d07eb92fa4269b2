// Host entry of the sm80 forward: params -> kernel arguments, pick the (dtype, head dim)
// instance, launch on the caller's stream on the tensors' device. Kernels live in the
// instance files; this file only names them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/common/check.h"
#include "cuda/common/device_scope.h"
#include "cuda/sm80/forward/forward.h"
#include "cuda/sm80/forward/kernel_traits.cuh"
#include "math/online_softmax.h"
#include "tessera/error.h"

namespace tessera::cuda::sm80 {
namespace {

template <typename T>
void launch_for_head_dim(const FwdArgs& a, const AttentionParams& p) {
  switch (p.head_dim) {
    case 64: return launch_forward<T, 64>(a, p.batch, p.heads_q, p.stream);
    case 128: return launch_forward<T, 128>(a, p.batch, p.heads_q, p.stream);
    case 256: return launch_forward<T, 256>(a, p.batch, p.heads_q, p.stream);
    default: break;
  }
  throw Error(ErrorCode::unsupported, "q", "sm80 forward: head_dim: expected 64, 128 or 256, got " +
                                               std::to_string(p.head_dim));
}

}  // namespace

bool forward_head_dim_compiled(int head_dim) { return head_dim == 64 || head_dim == 128 || head_dim == 256; }

int forward_smem_bytes(int head_dim) {
  switch (head_dim) {
    case 64: return FwdTraits<64>::kSmemBytes;
    case 128: return FwdTraits<128>::kSmemBytes;
    case 256: return FwdTraits<256>::kSmemBytes;
    default: return 0;
  }
}

void run_forward(const AttentionParams& p) {
  if (p.batch == 0 || p.seq_q == 0 || p.heads_q == 0) return;  // nothing to write
  FwdArgs a;
  a.q = p.q.ptr;
  a.k = p.k.ptr;
  a.v = p.v.ptr;
  a.o = p.o.ptr;
  a.q_batch = p.q.batch, a.q_row = p.q.row, a.q_head = p.q.head;
  a.k_batch = p.k.batch, a.k_row = p.k.row, a.k_head = p.k.head;
  a.v_batch = p.v.batch, a.v_row = p.v.row, a.v_head = p.v.head;
  a.o_batch = p.o.batch, a.o_row = p.o.row, a.o_head = p.o.head;
  a.lse = p.lse.ptr;
  a.lse_batch = p.lse.batch, a.lse_head = p.lse.head;
  a.cu_seqlens_q = p.cu_seqlens_q;
  a.cu_seqlens_k = p.cu_seqlens_k;
  if (p.ragged()) {  // ragged tensors carry no batch stride
    a.q_batch = a.k_batch = a.v_batch = a.o_batch = a.lse_batch = 0;
  }
  a.seq_q = p.seq_q;
  a.seq_k = p.seq_k;
  a.total_q = p.total_q;
  a.group = p.heads_q / p.heads_kv;
  a.scale = p.mask.scale;
  a.scale_log2 = p.mask.scale * math::kLog2e;
  a.softcap = p.mask.softcap;
  a.causal = p.mask.causal;
  a.window_left = p.mask.window_left;
  a.window_right = p.mask.window_right;

  DeviceScope scope(p.device.index);
  if (p.dtype == DType::bf16) return launch_for_head_dim<__nv_bfloat16>(a, p);
  if (p.dtype == DType::f16) return launch_for_head_dim<__half>(a, p);
  throw Error(ErrorCode::unsupported, "q",
              std::string("sm80 forward: dtype: expected f16 or bf16, got ") + dtype_name(p.dtype));
}

}  // namespace tessera::cuda::sm80
