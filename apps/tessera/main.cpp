// `tessera`: the command-line front end. Subcommands: demo, bench, info.
#include <cstring>
#include <exception>
#include <iostream>
#include <string>

#include "commands.h"
#include "common.h"
#include "tessera/error.h"

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int, char**);
};

const Command kCommands[] = {
    {"demo", "serving simulation: chunked prefill + decode over a paged KV cache, checked against the fp64 oracle",
     tessera::app::run_demo},
    {"bench", "run benchmark suites and print a table (time, GFLOP/s or GB/s, fraction of a measured ceiling)",
     tessera::app::run_bench},
    {"info", "version, backends built, devices found", tessera::app::run_info},
};

void print_usage(std::ostream& os) {
  os << "usage: tessera <command> [options]\n\n"
        "tessera " << tessera::version() << ": attention kernels (dense, paged, batch prefill/decode) for CPU and CUDA.\n\n"
        "commands:\n";
  for (const Command& c : kCommands) os << "  " << c.name << std::string(8 - std::strlen(c.name), ' ') << c.summary << "\n";
  os << "\n'tessera <command> --help' describes a command's options.\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(std::cerr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "-h" || name == "--help" || name == "help") {
    print_usage(std::cout);
    return 0;
  }
  if (name == "--version" || name == "version") {
    std::cout << "tessera " << tessera::version() << "\n";
    return 0;
  }
  for (const Command& c : kCommands) {
    if (name != c.name) continue;
    try {
      return c.run(argc, argv);
    } catch (const tessera::app::UsageError& e) {
      std::cerr << "tessera " << name << ": " << e.what() << "\n(see 'tessera " << name << " --help')\n";
      return 2;
    } catch (const tessera::Error& e) {
      std::cerr << "tessera " << name << ": error [" << tessera::error_code_name(e.code()) << "]: " << e.what() << "\n";
      return 1;
    } catch (const std::exception& e) {
      std::cerr << "tessera " << name << ": error: " << e.what() << "\n";
      return 1;
    }
  }
  std::cerr << "tessera: unknown command '" << name << "'\n\n";
  print_usage(std::cerr);
  return 2;
}
