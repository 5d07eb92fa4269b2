// Host side of the sm90 batch-prefill kernel: smem opt-in and the persistent launch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "cuda/common/check.h"
#include "cuda/sm90/batch/batch_prefill_sm90.h"
#include "cuda/sm90/batch/prefill_kernel.cuh"
#include "tessera/error.h"

namespace tessera::cuda::sm90 {

namespace {

template <typename T, int D>
void launch_typed(const batch::BatchArgs& args, long long max_units, int num_sms, cudaStream_t stream) {
  using Tr = batch_prefill::Traits<D>;
  auto kernel = batch_prefill::prefill_kernel<T, D>;
  TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes));
  const long long grid = std::max(1LL, std::min<long long>(max_units, num_sms));
  kernel<<<static_cast<unsigned>(grid), Tr::kThreads, Tr::kSmemBytes, stream>>>(args);
  TESSERA_CUDA_CHECK_LAUNCH();
}

// The slim policy: the same grid, the kernel's CTAs trigger their programmatic dependents at
// their start (the decode-only kernel the caller launches next with the programmatic attribute).
// A plain launch: it depends on the work before it in the stream (plan()'s copies) as usual.
template <typename T>
void launch_slim(const batch::BatchArgs& args, long long max_units, int num_sms, cudaStream_t stream) {
  using Tr = batch_prefill::Traits<128, true>;
  auto kernel = batch_prefill::prefill_kernel_slim<T, 128>;
  TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes));
  // The largest shared-memory carveout (228 KB on sm_90). Left to itself the driver sizes an
  // SM's L1 / shared split for this kernel alone (one CTA, register-bound: 100,432 B fits the
  // 100 KB configuration), and a split does not change while a CTA is resident, so the
  // decode-only CTA launched next (107,648 B) would find no room: the pair needs 208,080 B,
  // which only the 228 KB configuration holds (196 KB = 200,704 B). The programming guide's
  // advice for a kernel that should leave room for later kernels. Not yet run on a GPU: ncu's
  // "Shared Memory Configuration Size" of this kernel should read 233,472 B.
  TESSERA_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  // setmaxnreg 40 / 160 redistributes the CTA's pool of 384 x (registers at launch): with
  // fewer than kEntryRegs at launch the consumers' setmaxnreg.inc would wait forever (a hang).
  // ptxas gives exactly the __maxnreg__ cap today (120); refuse to launch if a build differs.
  static const int num_regs = [&] {
    cudaFuncAttributes fa = {};
    TESSERA_CUDA_CHECK(cudaFuncGetAttributes(&fa, kernel));
    return fa.numRegs;
  }();
  if (num_regs != Tr::kEntryRegs)
    throw Error(ErrorCode::unsupported, "TESSERA_CUDA_BATCH",
                "TESSERA_CUDA_BATCH=sm90-coresident: expected the slim prefill kernel built with " +
                    std::to_string(Tr::kEntryRegs) + " registers per thread (its setmaxnreg split needs them), got " +
                    std::to_string(num_regs));
  const long long grid = std::max(1LL, std::min<long long>(max_units, num_sms));
  kernel<<<static_cast<unsigned>(grid), Tr::kThreads, Tr::kSmemBytes, stream>>>(args);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool batch_prefill_applicable(int head_dim) { return head_dim == 64 || head_dim == 128; }

bool batch_prefill_slim_applicable(int head_dim) { return head_dim == 128; }

void launch_batch_prefill(const batch::BatchArgs& args, bool bf16, int head_dim, long long max_units, int num_sms,
                          void* stream, bool slim) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (slim && head_dim == 128)
    return bf16 ? launch_slim<__nv_bfloat16>(args, max_units, num_sms, s) : launch_slim<__half>(args, max_units, num_sms, s);
  switch (head_dim) {
    case 64: return bf16 ? launch_typed<__nv_bfloat16, 64>(args, max_units, num_sms, s)
                         : launch_typed<__half, 64>(args, max_units, num_sms, s);
    case 128: return bf16 ? launch_typed<__nv_bfloat16, 128>(args, max_units, num_sms, s)
                          : launch_typed<__half, 128>(args, max_units, num_sms, s);
    default: return;  // batch_prefill_applicable said no: the caller does not launch
  }
}

}  // namespace tessera::cuda::sm90
