// BatchAttention on CUDA under graph capture: a CUDA graph captured around run() is replayed
// after new plan() calls into the same workspace with other lengths and other kinds of batch
// (mixed, decode-only, prefill-only), checked against the fp64 oracle (batch_cuda_support.h).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <tuple>
#include <vector>

#include "gpu/batch_cuda_support.h"
#include "gpu/gpu_support.h"
#include "plan/batch_plan.h"
#include "support/test_support.h"
#include "tessera/batch.h"

namespace tessera::testing {
namespace {

// A CUDA graph captured around run() stays valid after a new plan() into the same workspace:
// the grids depend only on the workspace's capacities, the kernels read the plan's counts
// from device memory. Tensors are capacity-sized buffers seen through views of each batch's
// size; the second batch has other lengths, more requests, more work items and splits.
TEST(BatchCuda, GraphReplayAfterReplan) {
  auto rng = fresh_rng();
  constexpr int kMaxRequests = 12, kMaxQ = 160;
  Spec a = spec(DType::bf16, 8, 2, 128, 16, KVLayout::NHD, opts(true), kAuto);
  a.q_lens = {1, 20, 1};
  a.kv_lens = {50, 20, 0};
  Spec b = a;
  b.q_lens = {1, 1, 70, 1, 5, 1, 0, 33, 1, 1};
  b.kv_lens = {9000, 1, 300, 0, 4000, 65, 7, 33, 20000, 129};
  // Decode-shaped items only, and prefill-shaped items only, in the same layout: under
  // the default path (sm90-split) and sm90-coresident the launch sequence depends on which kinds the plan holds
  // (launch.cu), so a graph captured with one kind must still run a plan of the other.
  Spec dec = a;
  dec.q_lens = {1, 1, 1, 1};
  dec.kv_lens = {3000, 17, 0, 700};
  Spec pre = a;
  pre.q_lens = {20, 64, 9};
  pre.kv_lens = {20, 900, 4000};
  const Problem pa(a, rng), pb(b, rng), pc(dec, rng), pe(pre, rng);

  // Capacity buffers: q/out (kMaxQ, hq, d), lse (hq, kMaxQ), page table arrays, one cache.
  const int hq = a.heads_q, d = a.head_dim;
  HostTensor q_cap(a.dtype, {kMaxQ, hq, d}), out_cap(a.dtype, {kMaxQ, hq, d}), lse_cap(DType::f32, {hq, kMaxQ});
  // One cache holding all problems' pages: b's pages follow a's, then c's, then e's.
  const std::int64_t pages_a = pa.ck.shape()[0], pages_b = pb.ck.shape()[0], pages_c = pc.ck.shape()[0],
                     pages_e = pe.ck.shape()[0];
  const std::int64_t pages = pages_a + pages_b + pages_c + pages_e;
  const std::int64_t ps = a.page_size;
  HostTensor ck(a.dtype, {pages, ps, a.heads_kv, d}), cv(a.dtype, {pages, ps, a.heads_kv, d});
  auto copy_pages = [&](const HostTensor& from, HostTensor& to, std::int64_t first_page) {
    const std::int64_t n = from.numel();
    const std::int64_t per_page = ps * a.heads_kv * d;
    for (std::int64_t i = 0; i < n; ++i) to.set(first_page * per_page + i, from.get(i));
  };
  copy_pages(pa.ck, ck, 0);
  copy_pages(pa.cv, cv, 0);
  copy_pages(pb.ck, ck, pages_a);
  copy_pages(pb.cv, cv, pages_a);
  copy_pages(pc.ck, ck, pages_a + pages_b);
  copy_pages(pc.cv, cv, pages_a + pages_b);
  copy_pages(pe.ck, ck, pages_a + pages_b + pages_c);
  copy_pages(pe.cv, cv, pages_a + pages_b + pages_c);
  std::vector<std::int32_t> cap_i32(static_cast<std::size_t>(pages + kMaxRequests + 1), 0);
  HostTensor indptr_cap = int_tensor(std::vector<std::int32_t>(kMaxRequests + 1, 0));
  HostTensor indices_cap = int_tensor(cap_i32);
  HostTensor last_cap = int_tensor(std::vector<std::int32_t>(kMaxRequests, 0));
  DeviceTensor dq(q_cap), dout(out_cap), dlse(lse_cap), dck(ck), dcv(cv), dindptr(indptr_cap), dindices(indices_cap),
      dlast(last_cap);

  // Loads problem p (its pages shifted by page_offset) into the capacity buffers.
  auto load = [&](const Problem& p, std::int64_t page_offset) {
    for (std::int64_t i = 0; i < p.q.numel(); ++i) q_cap.set(i, p.q.get(i));  // same packing (no row padding)
    for (std::size_t i = 0; i < p.table.kv_indptr.size(); ++i) indptr_cap.set_int(static_cast<std::int64_t>(i), p.table.kv_indptr[i]);
    for (std::size_t i = 0; i < p.table.kv_indices.size(); ++i)
      indices_cap.set_int(static_cast<std::int64_t>(i), static_cast<std::int32_t>(p.table.kv_indices[i] + page_offset));
    for (std::size_t i = 0; i < p.table.kv_last_page_len.size(); ++i)
      last_cap.set_int(static_cast<std::int64_t>(i), p.table.kv_last_page_len[i]);
    dq.upload(q_cap);
    dindptr.upload(indptr_cap);
    dindices.upload(indices_cap);
    dlast.upload(last_cap);
    dout.poison(out_cap);
    dlse.poison(lse_cap);
  };
  // Views of a batch's size over the capacity buffers.
  auto views = [&](const Problem& p) {
    const std::int64_t total_q = p.cu_q.back();
    const int batch = static_cast<int>(p.spec.q_lens.size());
    Tensor q = dq.view(), out = dout.view(), lse = dlse.view();
    q.shape[0] = total_q;
    out.shape[0] = total_q;
    lse.shape[1] = total_q;  // head stride stays kMaxQ
    Tensor indptr = dindptr.view(), indices = dindices.view(), last = dlast.view();
    indptr.shape[0] = batch + 1;
    indices.shape[0] = static_cast<std::int64_t>(p.table.kv_indices.size());
    last.shape[0] = batch;
    return std::make_tuple(q, out, lse, PageTable{indptr, indices, last});
  };
  // Reads the capacity outputs back and packs the batch's rows like the oracle.
  auto result = [&](const Problem& p) {
    dout.download(out_cap);
    dlse.download(lse_cap);
    Outputs o;
    o.out = HostTensor(a.dtype, {p.cu_q.back(), hq, d});
    o.lse = HostTensor(DType::f32, {hq, p.cu_q.back()});
    for (std::int64_t i = 0; i < o.out.numel(); ++i) o.out.set(i, out_cap.get(i));
    for (int h = 0; h < hq; ++h)
      for (std::int64_t t = 0; t < p.cu_q.back(); ++t) o.lse.set(h * p.cu_q.back() + t, lse_cap.get(h * kMaxQ + t));
    pack(p.spec, p.cu_q, o);
    EXPECT_EQ(o.out.count_nan(), 0) << "out not fully written";
    EXPECT_EQ(o.lse.count_nan(), 0) << "lse not fully written";
    return o;
  };

  BatchConfig c = pa.config(kMaxRequests, kMaxQ);
  const DeviceFacts facts = cuda_facts();
  DeviceBytes ws(BatchAttention::workspace_size(c, facts));
  const Workspace w{ws.data, ws.bytes, Device::cuda(0)};
  BatchAttention ba(c);
  Stream stream;
  const ExecutionContext ctx{stream.s, 0};
  const PagedKVCache cache{dck.view(), dcv.view(), KVLayout::NHD};
  auto plan = [&](const Problem& p) {
    const std::vector<std::int32_t> ql(p.spec.q_lens.begin(), p.spec.q_lens.end()),
        kl(p.spec.kv_lens.begin(), p.spec.kv_lens.end());
    ba.plan(ql, kl, facts, w, ctx);
  };

  // Batch a: plain run, then capture the same run into a graph.
  plan(pa);
  load(pa, 0);
  auto [qa, outa, lsea, ta] = views(pa);
  ba.run(qa, cache, ta, outa, lsea, w, ctx);
  TESSERA_TEST_CUDA(cudaStreamSynchronize(stream.s));
  const Oracle oa = oracle(pa);
  expect_close(result(pa), oa, "eager a");

  load(pa, 0);  // poisons the outputs again
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  // Captures run() over p's views into graph / exec, then launches the graph once.
  auto capture_and_launch = [&](const Problem& p) {
    auto [q, out, lse, t] = views(p);
    TESSERA_TEST_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeThreadLocal));
    ba.run(q, cache, t, out, lse, w, ctx);
    TESSERA_TEST_CUDA(cudaStreamEndCapture(stream.s, &graph));
    TESSERA_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    TESSERA_TEST_CUDA(cudaGraphLaunch(exec, stream.s));
    TESSERA_TEST_CUDA(cudaStreamSynchronize(stream.s));
  };
  capture_and_launch(pa);
  expect_close(result(pa), oa, "graph a");
  {
    // A small fixed number of kernels a run() (issue #4): at most two attention kernels (on
    // compute capability 9.0 by default the sm90 prefill beside the decode-only kernel; the
    // fused kernel on the portable path) and the merge; no other graph node.
    std::size_t nodes = 0;
    TESSERA_TEST_CUDA(cudaGraphGetNodes(graph, nullptr, &nodes));
    std::vector<cudaGraphNode_t> all(nodes);
    TESSERA_TEST_CUDA(cudaGraphGetNodes(graph, all.data(), &nodes));
    int kernels = 0;
    for (cudaGraphNode_t n : all) {
      cudaGraphNodeType type;
      TESSERA_TEST_CUDA(cudaGraphNodeGetType(n, &type));
      if (type == cudaGraphNodeTypeKernel) ++kernels;
    }
    EXPECT_GE(kernels, 2) << "an attention kernel and the merge";
    EXPECT_LE(kernels, 3) << nodes << " graph nodes";
    EXPECT_EQ(static_cast<int>(nodes), kernels) << "run() enqueues kernels only";
  }

  // Batch b planned into the same workspace; the graph (captured with a's views) replays b.
  plan(pb);
  load(pb, pages_a);
  TESSERA_TEST_CUDA(cudaGraphLaunch(exec, stream.s));
  TESSERA_TEST_CUDA(cudaStreamSynchronize(stream.s));
  expect_close(result(pb), oracle(pb), "graph b after replan");
  EXPECT_GT(ba.planned_work_items(), 0);

  // And back to a: a replay gives a's result again.
  plan(pa);
  load(pa, 0);
  TESSERA_TEST_CUDA(cudaGraphLaunch(exec, stream.s));
  TESSERA_TEST_CUDA(cudaStreamSynchronize(stream.s));
  expect_close(result(pa), oa, "graph a after b");

  // The decode-item claim counter in the plan header (default sm90-split and sm90-coresident paths)
  // is back to 0 after every run, so replays need no host write (attention_kernel.cuh,
  // claim_decode_units).
  const plan::WorkspaceLayout layout = plan::workspace_layout(plan::make_plan_config(c, facts), ws.bytes);
  auto claim_counter = [&] {
    plan::PlanHeader h;
    TESSERA_TEST_CUDA(cudaMemcpy(&h, static_cast<const unsigned char*>(ws.data) + layout.header, sizeof h,
                                 cudaMemcpyDeviceToHost));
    return h.decode_claim;
  };
  EXPECT_EQ(claim_counter(), 0u) << "after graph a after b";

  // Three more replays of the graph captured with a (mixed), re-planned in between with a
  // decode-only, a prefill-only and the mixed batch b; results and the counter every time.
  const Oracle oc = oracle(pc), oe = oracle(pe), ob = oracle(pb);
  // Each entry: re-plan and load a problem (its pages at an offset in the shared cache), replay
  // the instantiated graph, check the result and the counter.
  using Replay = std::tuple<const Problem*, std::int64_t, const Oracle*, const char*>;
  auto replay_each = [&](std::initializer_list<Replay> replays) {
    for (const auto& [prob, offset, orc, what] : replays) {
      plan(*prob);
      load(*prob, offset);
      TESSERA_TEST_CUDA(cudaGraphLaunch(exec, stream.s));
      TESSERA_TEST_CUDA(cudaStreamSynchronize(stream.s));
      expect_close(result(*prob), *orc, what);
      EXPECT_EQ(claim_counter(), 0u) << what;
    }
  };
  replay_each({{&pc, pages_a + pages_b, &oc, "graph a replaying c (decode only)"},
               {&pe, pages_a + pages_b + pages_c, &oe, "graph a replaying e (prefill only)"},
               {&pb, pages_a, &ob, "graph a replaying b again"}});
  TESSERA_TEST_CUDA(cudaGraphExecDestroy(exec));
  TESSERA_TEST_CUDA(cudaGraphDestroy(graph));

  // A graph captured with a decode-only plan (default sm90-split and sm90-coresident: the plain
  // decode grid, then the prefill kernel with nothing to do) replays a mixed and a prefill-only
  // plan correctly.
  plan(pc);
  load(pc, pages_a + pages_b);
  capture_and_launch(pc);
  expect_close(result(pc), oc, "graph c");
  replay_each({{&pb, pages_a, &ob, "graph c replaying b (mixed)"},
               {&pe, pages_a + pages_b + pages_c, &oe, "graph c replaying e (prefill only)"}});
  TESSERA_TEST_CUDA(cudaGraphExecDestroy(exec));
  TESSERA_TEST_CUDA(cudaGraphDestroy(graph));

  // Likewise a graph captured with a prefill-only plan (an eager run of it leaves out the decode
  // kernel; a captured one keeps it) replays a mixed and a decode-only plan correctly. (Graph a
  // above covers the merge: a's plan splits no row, so an eager run of it leaves the merge out,
  // and its replays of b, whose long requests split, need it.)
  plan(pe);
  load(pe, pages_a + pages_b + pages_c);
  capture_and_launch(pe);
  expect_close(result(pe), oe, "graph e");
  replay_each({{&pb, pages_a, &ob, "graph e replaying b (mixed)"},
               {&pc, pages_a + pages_b, &oc, "graph e replaying c (decode only)"}});
  TESSERA_TEST_CUDA(cudaGraphExecDestroy(exec));
  TESSERA_TEST_CUDA(cudaGraphDestroy(graph));
}

}  // namespace
}  // namespace tessera::testing
