// smem_desc_advance (src/cuda/primitives/sm90/smem_desc.h) moves a wgmma shared-memory
// descriptor by adding to its start-address field; the sm90 forward uses it instead of
// rebuilding each k step's descriptor from the address. Here: for every 16-byte aligned shared
// address an H100/H200 CTA can have (below 228 KB) and the offsets the kernels add, the advanced
// descriptor equals the one built from the moved address, for both descriptor kinds.
#include <gtest/gtest.h>

#include <cstdint>

#include "cuda/primitives/sm90/smem_desc.h"

namespace tessera {
namespace {

using cuda::sm90::make_smem_desc_sw128_kmajor;
using cuda::sm90::make_smem_desc_sw128_mnmajor;
using cuda::sm90::smem_desc_advance;

constexpr std::uint32_t kSmemLimit = 228 * 1024;  // per SM on sm_90; a CTA's addresses stay below it

TEST(SmemDesc, AdvanceEqualsRebuild) {
  // Offsets of the kernels' k steps and panels (32-byte k16 slices, 2048-byte MN-major steps,
  // 8 KB panels of 64 rows, 22 KB panels of 176 rows, 32 KB stages) and a few odd multiples of 16.
  const std::uint32_t offsets[] = {0, 16, 32, 64, 96, 2048, 4096, 6144, 8192, 16384, 22528, 24576, 32768, 45056, 65536, 400};
  long checked = 0;
  for (std::uint32_t addr = 0; addr < kSmemLimit; addr += 16)
    for (const std::uint32_t off : offsets) {
      if (addr + off >= kSmemLimit) continue;
      ASSERT_EQ(smem_desc_advance(make_smem_desc_sw128_kmajor(addr), off), make_smem_desc_sw128_kmajor(addr + off))
          << "K-major, address " << addr << " + " << off;
      for (const std::uint32_t panel : {8192u, 16384u, 22528u})
        ASSERT_EQ(smem_desc_advance(make_smem_desc_sw128_mnmajor(addr, panel), off),
                  make_smem_desc_sw128_mnmajor(addr + off, panel))
            << "MN-major, panel " << panel << ", address " << addr << " + " << off;
      ++checked;
    }
  EXPECT_GT(checked, 200000);
}

TEST(SmemDesc, AdvanceChangesOnlyTheStartAddress) {
  const std::uint64_t d = make_smem_desc_sw128_mnmajor(1024, 8192);
  const std::uint64_t e = smem_desc_advance(d, 2048);
  EXPECT_EQ(e & ~std::uint64_t{0x3FFF}, d & ~std::uint64_t{0x3FFF});  // every other field kept
  EXPECT_EQ(e & 0x3FFF, (1024u + 2048u) >> 4);
}

}  // namespace
}  // namespace tessera
