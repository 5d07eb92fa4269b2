// Proxy fences (sm_90+). Shared memory is reached through two "proxies": the generic proxy
// (ordinary ld/st, stmatrix, ...) and the async proxy (the TMA copy engine, cp.async.bulk,
// and wgmma reading its operands through matrix descriptors). Writes made through one proxy
// are not ordered with accesses through the other unless a proxy fence lies between them.
//
// The rule a kernel follows: a thread that wrote shared memory with ordinary stores which
// the copy engine (TMA store) or the tensor cores (wgmma A/B from smem) read next executes
// fence_proxy_async_shared_cta() after its stores, and only then the barrier (__syncthreads,
// a named barrier or an mbarrier arrive) after which another thread issues the async read.
// The opposite direction (TMA load -> ordinary loads) needs no fence: waiting on the mbarrier
// that the load completes on makes its bytes visible.
#pragma once

namespace tessera::cuda::sm90 {

// fence.proxy.async.shared::cta: orders this thread's prior generic-proxy accesses to the
// CTA's shared memory with its subsequent async-proxy accesses (and, through a barrier,
// with other threads' async-proxy accesses).
__device__ __forceinline__ void fence_proxy_async_shared_cta() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

}  // namespace tessera::cuda::sm90
