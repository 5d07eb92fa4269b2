#include "cuda/common/pinned_ring.h"

namespace tessera::cuda {

PinnedRing::~PinnedRing() {
  for (Slot& s : slots_) {
    if (s.done != nullptr) {
      if (s.pending) (void)cudaEventSynchronize(s.done);  // a copy may still read the buffer
      (void)cudaEventDestroy(s.done);
    }
    if (s.data != nullptr) (void)cudaFreeHost(s.data);
  }
}

void* PinnedRing::acquire(std::size_t bytes, cudaError_t* err) {
  *err = cudaSuccess;
  int device = 0;
  if ((*err = cudaGetDevice(&device)) != cudaSuccess) return nullptr;
  Slot& s = slots_[next_];
  if (s.pending) {
    if ((*err = cudaEventSynchronize(s.done)) != cudaSuccess) return nullptr;
    s.pending = false;
  }
  // An event records on streams of its own device only.
  if (s.done != nullptr && s.device != device) {
    (void)cudaEventDestroy(s.done);
    s.done = nullptr;
  }
  if (s.done == nullptr) {
    if ((*err = cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming)) != cudaSuccess) {
      s.done = nullptr;
      return nullptr;
    }
    s.device = device;
  }
  if (s.bytes < bytes) {
    if (s.data != nullptr) (void)cudaFreeHost(s.data);
    s.data = nullptr;
    s.bytes = 0;
    // Portable: the same buffer serves copies to any device.
    if ((*err = cudaHostAlloc(&s.data, bytes, cudaHostAllocPortable)) != cudaSuccess) {
      s.data = nullptr;
      return nullptr;
    }
    s.bytes = bytes;
  }
  current_ = next_;
  next_ = (next_ + 1) % kSlots;
  return s.data;
}

cudaError_t PinnedRing::release(cudaStream_t stream) {
  if (current_ < 0) return cudaSuccess;
  Slot& s = slots_[current_];
  current_ = -1;
  const cudaError_t err = cudaEventRecord(s.done, stream);
  s.pending = err == cudaSuccess;
  // Without the event nothing would say when the copies are done with the buffer: wait here.
  if (err != cudaSuccess) (void)cudaStreamSynchronize(stream);
  return err;
}

}  // namespace tessera::cuda
