// The subcommands of `tessera`. Each parses argv[2..] itself and returns the exit status.
#pragma once

namespace tessera::app {

int run_demo(int argc, char** argv);
int run_bench(int argc, char** argv);
int run_info(int argc, char** argv);

}  // namespace tessera::app
