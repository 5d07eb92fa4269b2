#include "cpu/parallel.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::cpu {

int resolve_threads(int requested) {
  if (requested > 0) return requested;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

void parallel_for(std::int64_t n, int num_threads, const std::function<void(std::int64_t, std::int64_t)>& body) {
  if (n <= 0) return;
  const std::int64_t threads = std::min<std::int64_t>(resolve_threads(num_threads), n);
  if (threads <= 1) {
    body(0, n);
    return;
  }
  // Many more chunks than threads, claimed dynamically, keeps uneven (causal) work balanced.
  const std::int64_t chunks = std::min<std::int64_t>(n, threads * 8);
  std::atomic<std::int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    for (;;) {
      const std::int64_t c = next.fetch_add(1);
      if (c >= chunks) return;
      const std::int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
      try {
        body(begin, end);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads - 1));
  for (std::int64_t t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(worker);
    } catch (...) {
      // No more threads (a process or memory limit: std::system_error, or std::bad_alloc for
      // the thread's state): the ones started and this one claim every chunk, so the work
      // completes on fewer threads with the same chunks and results.
      break;
    }
  }
  worker();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace tessera::cpu
