// Multi-threading for the CPU backend: a static split of an index range over worker threads.
#pragma once

#include <cstdint>
#include <functional>

namespace tessera::cpu {

// Threads to use: `requested` if > 0, else every hardware thread.
int resolve_threads(int requested);

// Calls body(begin, end) on disjoint chunks covering [0, n), from up to `num_threads` threads
// (0 = all cores), and returns when all are done. Exceptions thrown by body are rethrown.
// Chunk boundaries depend on (n, threads) only; which thread runs a chunk may vary,
// so bodies must write disjoint outputs (results are then deterministic). Where the system
// refuses to start a thread, the work runs on those it started (at least the calling one).
void parallel_for(std::int64_t n, int num_threads, const std::function<void(std::int64_t, std::int64_t)>& body);

}  // namespace tessera::cpu
