// `tessera bench`: runs registered suites (see bench_registry.h) and prints one table.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_registry.h"
#include "commands.h"
#include "common.h"

namespace tessera::app {
namespace bench {

std::vector<Suite>& suites() {
  static std::vector<Suite> s;
  return s;
}
std::vector<CeilingProvider>& ceiling_providers() {
  static std::vector<CeilingProvider> p;
  return p;
}

}  // namespace bench

namespace {

const char* kind_name(DeviceKind k) { return k == DeviceKind::cpu ? "cpu" : "cuda"; }

std::vector<bench::Suite> sorted_suites() {
  std::vector<bench::Suite> all = bench::suites();
  std::sort(all.begin(), all.end(), [](const bench::Suite& a, const bench::Suite& b) { return a.name < b.name; });
  return all;
}

// "forward" matches "cpu.forward" on a CPU run; a full name matches itself.
bool matches(const bench::Suite& s, const std::string& want, DeviceKind device) {
  if (s.name == want) return true;
  return s.device == device && s.name == std::string(kind_name(device)) + "." + want;
}

// CSV columns shared with bench/peers.py and bench/compare.py.
constexpr const char* kCsvHeader = "suite,backend,dtype,head_dim,seq,batch,heads,causal,ms,tflops,gbps\n";

void write_csv_row(std::FILE* f, const std::string& kind, const std::string& backend, const std::string& dtype,
                   int head_dim, int seq, int batch, int heads, bool causal, double ms, double tflops, double gbps) {
  if (!f) return;
  std::fprintf(f, "%s,%s,%s,%d,%d,%d,%d,%d,%.6g,%.6g,%.6g\n", kind.c_str(), backend.c_str(), dtype.c_str(), head_dim,
               seq, batch, heads, causal ? 1 : 0, ms, tflops, gbps);
  std::fflush(f);
}

void print_row(const std::string& suite, const bench::Row& r, const bench::Ceilings& c) {
  std::string rate = "-", frac = "-";
  char buf[64];
  if (r.seconds > 0 && r.flops > 0) {
    const double v = r.flops / r.seconds;
    std::snprintf(buf, sizeof buf, "%s GFLOP/s", format_count(v / 1e9).c_str());
    rate = buf;
    if (c.flops > 0) {
      std::snprintf(buf, sizeof buf, "%.0f%% flops", 100.0 * v / c.flops);
      frac = buf;
    }
  } else if (r.seconds > 0 && r.bytes > 0) {
    const double v = r.bytes / r.seconds;
    std::snprintf(buf, sizeof buf, "%s GB/s", format_count(v / 1e9).c_str());
    rate = buf;
    if (c.read_bytes > 0) {
      std::snprintf(buf, sizeof buf, "%.0f%% read bw", 100.0 * v / c.read_bytes);
      frac = buf;
    }
  }
  std::printf("%-13s %-26s %-36s %10s %15s %14s  %s\n", suite.c_str(), r.name.c_str(), r.shape.c_str(),
              format_seconds(r.seconds).c_str(), rate.c_str(), frac.c_str(), r.note.c_str());
  std::fflush(stdout);
}

}  // namespace

int run_bench(int argc, char** argv) {
  std::vector<std::string> wanted;
  bool list = false, quick = false;
  std::string device_arg = "auto", csv_path;
  bench::Context ctx;
  ArgParser args("tessera bench [--suite NAME ...] [--list] [--device cpu|cuda] [options]",
                 "Runs benchmark suites and prints a table: case, shape, median time, GFLOP/s or GB/s, and the\n"
                 "fraction of a ceiling measured on the same device in the same run (peak-ish compute rate and\n"
                 "memory read bandwidth). FLOPs: forward 4*b*h*sq*sk*d, halved for causal with sq == sk;\n"
                 "backward 2.5x forward; mixed batches count exactly the (query, key) pairs the mask lets through.");
  args.add_list("suite", &wanted, "suite to run (repeat or comma-separate; 'forward' means '<device>.forward'); "
                                  "default: every suite of the device");
  args.add_flag("list", &list, "list the suites and exit");
  args.add_string("device", &device_arg, "auto (CUDA when available, else CPU), cpu or cuda");
  args.add_int("threads", &ctx.threads, "CPU threads; 0 = all cores");
  args.add_double("min-time", &ctx.min_time, "seconds of timed runs per case, after one warm-up run");
  args.add_flag("quick", &quick, "fewer and smaller cases");
  std::string timing = "eager";
  int queue = 10;
  args.add_string("timing", &timing,
                  "dense CUDA attention rows: eager (each call alone between two events, its host time included) or "
                  "queued (--queue calls back to back per sample: the kernels' own time, as bench/peers.py --timing "
                  "queued) or stream (those samples one after the other, synchronised after the last only: no idle "
                  "GPU between samples, as bench/peers.py --timing stream)");
  args.add_int("queue", &queue, "calls per sample under --timing queued or stream");
  args.add_string("csv", &csv_path, "also write rows to this CSV file (columns of bench/peers.py, for bench/compare.py)");
  args.add_epilog("Record figures you quote in bench/RESULTS.md with date, machine, commit, exact command and the\n"
                  "peers measured in the same run.\n");
  if (!args.parse(argc, argv, 2)) return 0;
  ctx.quick = quick;
  if (timing != "eager" && timing != "queued" && timing != "stream")
    throw UsageError("--timing: expected eager, queued or stream, got '" + timing + "'");
  if (queue < 1) throw UsageError("--queue: expected a whole number >= 1, got " + std::to_string(queue));
  // --queue sizes the queued samples; under eager timing it would be silently ignored.
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (timing == "eager" && (a == "--queue" || a.rfind("--queue=", 0) == 0))
      throw UsageError("--queue: expected only with --timing queued or stream, got --queue " + std::to_string(queue) +
                       " with --timing eager");
  }
  ctx.queue = timing == "eager" ? 0 : queue;
  ctx.train = timing == "stream";

  if (list) {
    for (const bench::Suite& s : sorted_suites())
      std::printf("%-16s %-5s %s\n", s.name.c_str(), kind_name(s.device), s.description.c_str());
    return 0;
  }

  if (device_arg == "auto") {
    ctx.device = cuda_available() ? Device::cuda(0) : Device::cpu();
  } else if (device_arg == "cpu") {
    ctx.device = Device::cpu();
  } else if (device_arg == "cuda") {
    if (!built_with_cuda()) throw UsageError("--device cuda: this build has no CUDA backend");
    if (!cuda_available()) throw UsageError("--device cuda: no CUDA device found");
    ctx.device = Device::cuda(0);
  } else {
    throw UsageError("--device: expected auto, cpu or cuda, got '" + device_arg + "'");
  }

  std::vector<bench::Suite> selected;
  const auto all = sorted_suites();
  if (wanted.empty()) {
    for (const auto& s : all)
      if (s.device == ctx.device.kind) selected.push_back(s);
  } else {
    for (const std::string& w : wanted) {
      auto it = std::find_if(all.begin(), all.end(), [&](const bench::Suite& s) { return matches(s, w, ctx.device.kind); });
      if (it == all.end()) throw UsageError("unknown suite '" + w + "' for device " + kind_name(ctx.device.kind) +
                                            " (see 'tessera bench --list')");
      if (it->device != ctx.device.kind)
        throw UsageError("suite '" + it->name + "' runs on " + kind_name(it->device) + ", not on " +
                         kind_name(ctx.device.kind) + " (use --device)");
      selected.push_back(*it);
    }
  }
  if (selected.empty()) {
    std::cout << "no suites registered for device " << kind_name(ctx.device.kind) << "\n";
    return 1;
  }

  std::cout << "tessera " << version() << " bench on " << device_name(ctx.device);
  if (ctx.device.kind == DeviceKind::cpu) std::cout << " (" << query_device(ctx.device).num_sms << " threads)";
  std::cout << "\n";

  std::FILE* csv = nullptr;
  if (!csv_path.empty()) {
    csv = std::fopen(csv_path.c_str(), "w");
    if (!csv) throw std::runtime_error("--csv: cannot open '" + csv_path + "' for writing");
    std::fputs(kCsvHeader, csv);
  }
  const std::string backend = std::string("tessera_") + kind_name(ctx.device.kind);

  bench::Ceilings ceilings;
  for (const auto& p : bench::ceiling_providers()) {
    if (p.device != ctx.device.kind) continue;
    ceilings = p.measure(ctx);
    break;
  }
  if (ceilings.flops > 0) {
    std::printf("ceiling: %.1f GFLOP/s (%s)\n", ceilings.flops / 1e9, ceilings.flops_what.c_str());
    write_csv_row(csv, "ceiling", backend + "_flops", "fp32", 0, 0, 1, 1, false, 0, ceilings.flops / 1e12, 0);
  }
  if (ceilings.read_bytes > 0) {
    std::printf("ceiling: %.1f GB/s (%s)\n", ceilings.read_bytes / 1e9, ceilings.read_what.c_str());
    write_csv_row(csv, "ceiling", backend + "_read_sum", "fp32", 0, 0, 1, 1, false, 0, 0, ceilings.read_bytes / 1e9);
  }
  std::printf("\n%-13s %-26s %-36s %10s %15s %14s  %s\n", "suite", "case", "shape", "median", "rate", "of ceiling",
              "note");
  std::fflush(stdout);
  for (const bench::Suite& s : selected) {
    // Rows are printed as the cases finish, so long runs show progress.
    s.run(ctx, [&](const bench::Row& r) {
      print_row(s.name, r, ceilings);
      if (r.seconds > 0 && !r.kind.empty())
        write_csv_row(csv, r.kind, r.backend.empty() ? backend : r.backend, dtype_name(r.dtype), r.head_dim, r.seq, r.batch, r.heads, r.causal,
                      r.seconds * 1e3, r.flops / r.seconds / 1e12, r.bytes / r.seconds / 1e9);
    });
  }
  if (csv) std::fclose(csv);
  return 0;
}

}  // namespace tessera::app
