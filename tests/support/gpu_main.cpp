// main() of every GPU test: skip (exit 77, reported by CTest as skipped) without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device: skipping GPU tests\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  // GTEST_OUTPUT=xml:DIR/ names the report after the executable, so the runs of one executable
  // under CTest (path variants, shards) would overwrite each other's; CTest passes each run's
  // test name (tests/CMakeLists.txt), which names the report instead.
  const std::string output = ::testing::GTEST_FLAG(output);
  const char* ctest_name = std::getenv("TESSERA_CTEST_NAME");
  if (ctest_name != nullptr && *ctest_name != '\0' && output.rfind("xml:", 0) == 0 && output.back() == '/')
    ::testing::GTEST_FLAG(output) = output + ctest_name + ".xml";
  return RUN_ALL_TESTS();
}
