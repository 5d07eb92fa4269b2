// tessera Python bindings: paged KV cache (page table helpers, PagePool, append, copy) and
// BatchAttention (plan/run over a caller-provided workspace array).
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <tuple>
#include <vector>

#include "common.h"

namespace tessera::py {
namespace {

using I32 = std::vector<std::int32_t>;
using HostTableTuple = std::tuple<I32, I32, I32, int>;

HostTableTuple to_tuple(const HostPageTable& t) {
  return {t.kv_indptr, t.kv_indices, t.kv_last_page_len, t.page_size};
}

// `role`: Role::output where the call writes the pages (append_paged_kv, copy_pages).
PagedKVCache make_cache(nb::handle k_pages, nb::handle v_pages, const std::string& layout, ArgArrays& arrays,
                        Role role) {
  PagedKVCache c;
  c.k_pages = to_tensor(k_pages, "k_pages", arrays, false, role);
  c.v_pages = to_tensor(v_pages, "v_pages", arrays, false, role);
  c.layout = parse_layout(layout, "layout");
  return c;
}

PageTable make_table(nb::handle indptr, nb::handle indices, nb::handle last_len, ArgArrays& arrays) {
  PageTable t;
  t.kv_indptr = to_index(indptr, "kv_indptr", arrays);
  t.kv_indices = to_index(indices, "kv_indices", arrays);
  t.kv_last_page_len = to_index(last_len, "kv_last_page_len", arrays);
  return t;
}

Device make_device(const std::string& kind, int index) {
  if (kind == "cpu") return Device::cpu();
  if (kind == "cuda") return Device::cuda(index);
  throw nb::value_error(("device: expected 'cpu' or 'cuda', got '" + kind + "'").c_str());
}

// A workspace is any contiguous, writable array; its bytes are what counts.
template <class A>
Workspace workspace_of(const A& a) {
  std::size_t n = 1;
  std::int64_t expect = 1;
  for (int d = static_cast<int>(a.ndim()) - 1; d >= 0; --d) {
    if (a.shape(d) != 1 && a.stride_ptr() && a.stride(d) != expect)
      throw nb::value_error("workspace: expected a contiguous array, got a strided view");
    expect *= static_cast<std::int64_t>(a.shape(d));
    n *= a.shape(d);
  }
  Workspace w;
  w.data = const_cast<void*>(static_cast<const void*>(a.data()));
  w.bytes = n * (a.dtype().bits / 8) * a.dtype().lanes;
  switch (a.device_type()) {
    case nb::device::cpu::value:
    case nb::device::cuda_host::value: w.device = Device::cpu(); break;
    case nb::device::cuda::value:
    case nb::device::cuda_managed::value: w.device = Device::cuda(a.device_id()); break;
    default: throw nb::value_error("workspace: expected an array on the cpu or a cuda device");
  }
  return w;
}

Workspace make_workspace(nb::handle obj, ArgArrays& arrays) {
  if (nb::isinstance<nb::tuple>(obj) && nb::len(obj) == 4) {  // (data_ptr, bytes, device type, device id)
    nb::tuple t = nb::borrow<nb::tuple>(obj);
    Workspace w;
    w.data = reinterpret_cast<void*>(nb::cast<std::uintptr_t>(t[0]));
    w.bytes = nb::cast<std::size_t>(t[1]);
    w.device = nb::cast<int>(t[2]) == nb::device::cuda::value ? Device::cuda(nb::cast<int>(t[3])) : Device::cpu();
    return w;
  }
  nb::ndarray<> a;  // writable: plan() writes the work list into it
  if (!nb::try_cast<nb::ndarray<>>(obj, a, false)) {
    Array ro;
    if (nb::try_cast<Array>(obj, ro, false)) read_only_error("workspace");
    throw nb::type_error(
        ("workspace: expected a contiguous array (numpy, torch, cupy), got " + py_type_name(obj)).c_str());
  }
  const Workspace w = workspace_of(a);
  arrays.held_writable.push_back(std::move(a));
  return w;
}

DeviceFacts make_facts(const std::string& kind, int index, int num_sms) {
  DeviceFacts f;
  f.device = make_device(kind, index);
  f.num_sms = num_sms;
  return f;
}

}  // namespace

void bind_paged(nb::module_& m) {
  m.def(
      "block_table_to_page_table",
      [](nb::handle block_table, const I32& kv_lens, int page_size) {
        ArgArrays arrays;
        const Tensor bt = to_index(block_table, "block_table", arrays);
        return to_tuple(block_table_to_page_table(bt, kv_lens, page_size));
      },
      nb::arg("block_table").none(), nb::arg("kv_lens"), nb::arg("page_size"));

  m.def(
      "append_paged_kv",
      [](nb::handle k_pages, nb::handle v_pages, const std::string& layout, nb::handle indptr, nb::handle indices,
         nb::handle last_len, nb::handle append_indptr, nb::handle new_k, nb::handle new_v, std::uintptr_t stream,
         int num_threads) {
        ArgArrays arrays;
        const PagedKVCache cache = make_cache(k_pages, v_pages, layout, arrays, Role::output);
        const PageTable table = make_table(indptr, indices, last_len, arrays);
        const Tensor ai = to_index(append_indptr, "append_indptr", arrays);
        const Tensor nk = to_tensor(new_k, "new_k", arrays), nv = to_tensor(new_v, "new_v", arrays);
        const ExecutionContext ctx = make_ctx(stream, num_threads);
        nb::gil_scoped_release release;
        append_paged_kv(cache, table, ai, nk, nv, ctx);
      },
      nb::arg("k_pages").none(), nb::arg("v_pages").none(), nb::arg("layout"), nb::arg("kv_indptr").none(),
      nb::arg("kv_indices").none(), nb::arg("kv_last_page_len").none(), nb::arg("append_indptr").none(),
      nb::arg("new_k").none(), nb::arg("new_v").none(), nb::arg("stream") = 0, nb::arg("num_threads") = 0);

  m.def(
      "copy_pages",
      [](nb::handle k_pages, nb::handle v_pages, const std::string& layout, nb::handle src, nb::handle dst,
         std::uintptr_t stream, int num_threads) {
        ArgArrays arrays;
        const PagedKVCache cache = make_cache(k_pages, v_pages, layout, arrays, Role::output);
        const Tensor ts = to_index(src, "src_pages", arrays), td = to_index(dst, "dst_pages", arrays);
        const ExecutionContext ctx = make_ctx(stream, num_threads);
        nb::gil_scoped_release release;
        copy_pages(cache, ts, td, ctx);
      },
      nb::arg("k_pages").none(), nb::arg("v_pages").none(), nb::arg("layout"), nb::arg("src_pages").none(),
      nb::arg("dst_pages").none(), nb::arg("stream") = 0, nb::arg("num_threads") = 0);

  m.def(
      "query_device",
      [](const std::string& kind, int index) {
        const DeviceFacts f = query_device(make_device(kind, index));
        return f.num_sms;
      },
      nb::arg("kind"), nb::arg("index") = 0, "Number of SMs (CUDA) or worker threads (cpu) the planner assumes.");

  nb::class_<PagePool>(m, "PagePool")
      .def(nb::init<int, int>(), nb::arg("num_pages"), nb::arg("page_size"))
      .def_prop_ro("num_pages", &PagePool::num_pages)
      .def_prop_ro("page_size", &PagePool::page_size)
      .def_prop_ro("free_pages", &PagePool::free_pages)
      .def("create_sequence", &PagePool::create_sequence)
      .def("append_tokens", &PagePool::append_tokens, nb::arg("seq"), nb::arg("num_tokens"))
      .def("free_sequence", &PagePool::free_sequence, nb::arg("seq"))
      .def("has_sequence", &PagePool::has_sequence, nb::arg("seq"))
      .def("length", &PagePool::length, nb::arg("seq"))
      .def("pages", [](const PagePool& p, int seq) { return I32(p.pages(seq)); }, nb::arg("seq"))
      .def("pages_needed", &PagePool::pages_needed, nb::arg("seq"), nb::arg("num_tokens"))
      .def(
          "page_table", [](const PagePool& p, const std::vector<int>& seqs) { return to_tuple(p.page_table(seqs)); },
          nb::arg("seqs"));

  nb::class_<BatchAttention>(m, "BatchAttention")
      .def(
          "__init__",
          [](BatchAttention* self, int heads_q, int heads_kv, int head_dim, const std::string& dtype,
             const std::string& layout, int page_size, nb::handle scale, bool causal, int window_left,
             int window_right, double softcap, bool return_lse, const std::string& split, int kv_chunk_tokens,
             int max_requests, int max_q_tokens) {
            BatchConfig c;
            c.heads_q = heads_q;
            c.heads_kv = heads_kv;
            c.head_dim = head_dim;
            c.dtype = parse_dtype(dtype, "dtype");
            c.layout = parse_layout(layout, "layout");
            c.page_size = page_size;
            c.options = make_options(scale, causal, window_left, window_right, softcap, return_lse, false);
            if (split == "auto" || split == "automatic") c.split.mode = SplitPolicy::Mode::automatic;
            else if (split == "disabled" || split == "none") c.split.mode = SplitPolicy::Mode::disabled;
            else if (split == "fixed") c.split.mode = SplitPolicy::Mode::fixed;
            else throw nb::value_error(("split: expected 'auto', 'disabled' or 'fixed', got '" + split + "'").c_str());
            c.split.kv_chunk_tokens = kv_chunk_tokens;
            c.max_requests = max_requests;
            c.max_q_tokens = max_q_tokens;
            new (self) BatchAttention(c);
          },
          nb::arg("heads_q"), nb::arg("heads_kv"), nb::arg("head_dim"), nb::arg("dtype"), nb::arg("layout"),
          nb::arg("page_size"), nb::arg("scale").none(), nb::arg("causal"), nb::arg("window_left"),
          nb::arg("window_right"), nb::arg("softcap"), nb::arg("return_lse"), nb::arg("split"),
          nb::arg("kv_chunk_tokens"), nb::arg("max_requests"), nb::arg("max_q_tokens"))
      .def(
          "workspace_size",
          [](const BatchAttention& b, const std::string& kind, int index, int num_sms) {
            return BatchAttention::workspace_size(b.config(), make_facts(kind, index, num_sms));
          },
          nb::arg("kind"), nb::arg("index"), nb::arg("num_sms"))
      .def(
          "plan",
          [](BatchAttention& b, const I32& q_lens, const I32& kv_lens, const std::string& kind, int index, int num_sms,
             nb::handle workspace, std::uintptr_t stream) {
            ArgArrays arrays;
            const Workspace w = make_workspace(workspace, arrays);
            const DeviceFacts f = make_facts(kind, index, num_sms);
            b.plan(q_lens, kv_lens, f, w, make_ctx(stream, 0));
          },
          nb::arg("q_lens"), nb::arg("kv_lens"), nb::arg("kind"), nb::arg("index"), nb::arg("num_sms"),
          nb::arg("workspace").none(), nb::arg("stream") = 0)
      .def(
          "run",
          [](const BatchAttention& b, nb::handle q, nb::handle k_pages, nb::handle v_pages, const std::string& layout,
             nb::handle indptr, nb::handle indices, nb::handle last_len, nb::handle out, nb::handle lse,
             nb::handle workspace, std::uintptr_t stream, int num_threads) {
            ArgArrays arrays;
            const Tensor tq = to_tensor(q, "q", arrays);
            const PagedKVCache cache = make_cache(k_pages, v_pages, layout, arrays, Role::input);
            const PageTable table = make_table(indptr, indices, last_len, arrays);
            const Tensor to = to_output(out, "out", arrays), tl = to_output(lse, "lse", arrays, true);
            const Workspace w = make_workspace(workspace, arrays);
            const ExecutionContext ctx = make_ctx(stream, num_threads);
            nb::gil_scoped_release release;
            b.run(tq, cache, table, to, tl, w, ctx);
          },
          nb::arg("q").none(), nb::arg("k_pages").none(), nb::arg("v_pages").none(), nb::arg("layout"),
          nb::arg("kv_indptr").none(), nb::arg("kv_indices").none(), nb::arg("kv_last_page_len").none(),
          nb::arg("out").none(), nb::arg("lse").none(), nb::arg("workspace").none(), nb::arg("stream") = 0,
          nb::arg("num_threads") = 0)
      .def_prop_ro("planned_batch", &BatchAttention::planned_batch)
      .def_prop_ro("planned_q_tokens", &BatchAttention::planned_q_tokens)
      .def_prop_ro("planned_work_items", &BatchAttention::planned_work_items)
      .def("planned_splits", &BatchAttention::planned_splits, nb::arg("request"));
}

}  // namespace tessera::py
