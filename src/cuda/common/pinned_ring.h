// PinnedRing: a few pinned host buffers, taken in turn, for host-to-device copies that must not
// block the caller. Host-only.
//
// Why: cudaMemcpyAsync from pageable memory first stages the bytes through a driver buffer and
// may wait for the stream to drain; from pinned memory it only enqueues. A buffer is reused only
// after the copies that last read it have run (an event recorded after them), so a caller can
// run up to kSlots - 1 fills ahead of its stream before acquire() waits.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace tessera::cuda {

class PinnedRing {
 public:
  static constexpr int kSlots = 3;
  PinnedRing() = default;
  ~PinnedRing();
  PinnedRing(const PinnedRing&) = delete;
  PinnedRing& operator=(const PinnedRing&) = delete;

  // A pinned buffer of at least `bytes` for copies on the current device, once the copies that
  // last read it have completed. nullptr (and the CUDA error in *err) when none can be had: the
  // caller then copies from pageable memory.
  void* acquire(std::size_t bytes, cudaError_t* err);
  // After the copies from the buffer acquire() returned were enqueued on `stream`: marks the
  // point after which the buffer may be rewritten.
  cudaError_t release(cudaStream_t stream);

 private:
  struct Slot {
    void* data = nullptr;
    std::size_t bytes = 0;
    cudaEvent_t done = nullptr;  // recorded after the slot's last copies
    int device = -1;             // the device the event belongs to
    bool pending = false;        // `done` was recorded and not yet waited for
  };
  Slot slots_[kSlots];
  int current_ = -1;  // the slot acquire() returned
  int next_ = 0;
};

}  // namespace tessera::cuda
