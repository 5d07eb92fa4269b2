// tessera: batch attention over a paged KV cache with plan() and run().
//
// One batch may mix prefill chunks (q_len > 1) and decode tokens (q_len = 1). plan() runs on
// the host: from per-request (q_len, kv_len) and the device's facts it builds the work list
// (query tiles, KV split points, merge index) and stores it in a caller-provided workspace.
// run() allocates nothing and does no host synchronisation, so on CUDA it can be captured in a
// graph and replayed after a new plan() into the same workspace (a run being captured enqueues
// every kernel any plan may need; an eager run leaves out those its plan gives no work, such as
// the merge when no request is split; so the last kernel of an eager run may be an attention
// kernel that lets programmatic dependents start early: a caller's kernel launched as one must
// wait for its primary grid (griddepcontrol.wait) before reading out or lse, as PDL requires).
// Besides the plan it uses the
// workspace as scratch (split rows' partial results; on CUDA a work counter it leaves at 0), so
// one run() per workspace may be in flight at a time: runs on one stream, or graph replays on
// one stream, are fine; runs of one workspace on two streams at once are not.
//
// Queries are packed: q (total_q, heads_q, head_dim) with request b's rows at
// [qo_offset(b), qo_offset(b) + q_len(b)). Causal masking is bottom-right per request.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "tessera/options.h"
#include "tessera/paged_kv.h"
#include "tessera/tensor.h"

namespace tessera {

// What planning needs to know about the device the batch will run on.
struct DeviceFacts {
  Device device = Device::cpu();
  int num_sms = 1;  // CUDA multiprocessors, or CPU worker threads
};
// Reads the facts of a device (the CUDA runtime for cuda devices, the core count for cpu).
DeviceFacts query_device(const Device& device);

// How long sequences are split along KV. Splitting never changes results beyond rounding.
struct SplitPolicy {
  enum class Mode : std::uint8_t {
    automatic,  // split so that work items fill the device
    disabled,   // one chunk per request (output independent of the batch's composition)
    fixed,      // chunks of exactly kv_chunk_tokens (independent of the batch, too)
  };
  Mode mode = Mode::automatic;
  int kv_chunk_tokens = 0;  // for Mode::fixed; > 0
};

struct BatchConfig {
  int heads_q = 0;  // 1..65536 (limits: docs/SEMANTICS.md, "BatchAttention: plan / run")
  int heads_kv = 0;
  int head_dim = 0;
  DType dtype = DType::bf16;  // of q, the cache and out
  KVLayout layout = KVLayout::NHD;
  int page_size = 0;
  AttentionOptions options;  // scale, causal, window, softcap, return_lse
  SplitPolicy split;
  int max_requests = 0;  // capacity the workspace is sized for
  int max_q_tokens = 0;  // capacity: largest sum of q_len over a batch
};

struct Workspace {
  void* data = nullptr;
  std::size_t bytes = 0;
  Device device = Device::cpu();  // where run() executes; must match the tensors
};

class BatchAttention {
 public:
  explicit BatchAttention(const BatchConfig& config);
  ~BatchAttention();
  BatchAttention(BatchAttention&&) noexcept;
  BatchAttention& operator=(BatchAttention&&) noexcept;

  const BatchConfig& config() const;

  // Bytes of workspace plan() and run() need for this configuration on this device.
  static std::size_t workspace_size(const BatchConfig& config, const DeviceFacts& facts);

  // q_lens[b] >= 0 query tokens and kv_lens[b] >= 0 cached tokens of request b (the KV
  // length includes this step's tokens). On CUDA the plan is copied into the workspace on
  // ctx.stream, in stream order (after the run() calls enqueued before it), from pinned host
  // buffers that the BatchAttention keeps (three, used in turn): plan() waits only when the
  // copy of the plan three calls back has not run yet, i.e. when the host is that far ahead of
  // the stream. The first calls allocate them (cudaHostAlloc). A plan() that throws before it
  // starts copying keeps the last plan; one whose copy fails leaves none (run() throws
  // plan_mismatch until the next plan()).
  void plan(std::span<const std::int32_t> q_lens, std::span<const std::int32_t> kv_lens,
            const DeviceFacts& facts, const Workspace& workspace, const ExecutionContext& ctx = {});

  // out like q; lse (heads_q, total_q) fp32 when config.options.return_lse. The workspace must
  // hold the last plan() as written: on the CPU, run() checks the plan arrays (a hash) and throws
  // plan_mismatch if they changed; on CUDA it trusts them (a check would cost a device read).
  void run(const Tensor& q, const PagedKVCache& cache, const PageTable& table, const Tensor& out,
           const Tensor& lse, const Workspace& workspace, const ExecutionContext& ctx = {}) const;

  // Facts of the current plan (for tests, benchmarks and the demo).
  int planned_batch() const;
  std::int64_t planned_q_tokens() const;
  int planned_work_items() const;
  int planned_splits(int request) const;  // KV chunks of request `request`

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tessera
