// Shared-memory matrix descriptors of wgmma (sm_90a), as plain integer functions usable on the
// host too (tests/cpu/test_smem_desc.cpp checks smem_desc_advance against rebuilding the
// descriptor). The layouts they describe are documented in wgmma.cuh.
#pragma once

#include <cstdint>

#include "math/host_device.h"

namespace tessera::cuda::sm90 {

// Descriptor of a K-major, 128-byte-swizzled operand whose first used element is at shared
// address `smem_addr` (the layout is described in wgmma.cuh).
TESSERA_HD std::uint64_t make_smem_desc_sw128_kmajor(std::uint32_t smem_addr) {
  constexpr std::uint64_t kLeadingByteOffset = 16;   // unused for this layout
  constexpr std::uint64_t kStrideByteOffset = 1024;  // 8 rows x 128 bytes
  std::uint64_t desc = (smem_addr & 0x3FFFFu) >> 4;
  desc |= (kLeadingByteOffset >> 4) << 16;
  desc |= (kStrideByteOffset >> 4) << 32;
  desc |= std::uint64_t{1} << 62;  // 128-byte swizzle
  return desc;
}

// The descriptor of an operand `bytes` (a multiple of 16) further on in shared memory: only the
// start-address field (bits 0-13, address >> 4) changes, and it cannot carry into the next
// field because shared addresses stay below 256 KB. One 32-bit add with an immediate when
// `bytes` is a compile-time constant, instead of rebuilding the descriptor from the address.
TESSERA_HD std::uint64_t smem_desc_advance(std::uint64_t desc, std::uint32_t bytes) {
  const std::uint32_t lo = static_cast<std::uint32_t>(desc) + (bytes >> 4);
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}

// Descriptor of an MN-major, 128-byte-swizzled B operand (wgmma_rs / wgmma_ss with kBMnMajor): the
// tile is what TMA loads with SWIZZLE_128B and a box of (64 elements of N, R rows of K): K row
// k of 128 bytes at byte k * 128 (chunks XOR-swizzled by k % 8 as above), a further 64
// elements of N in the next panel, `panel_bytes` (= R * 128) later. In the canonical form
// ((8 elems, 8 chunks, panels) x (8 rows, row groups)) the leading-dimension byte offset is the
// step between N panels (panel_bytes) and the stride-dimension byte offset the step between
// groups of 8 K rows (1024). One wgmma consumes 16 K rows; step k is at start + 2048 * k.
TESSERA_HD std::uint64_t make_smem_desc_sw128_mnmajor(std::uint32_t smem_addr, std::uint32_t panel_bytes) {
  constexpr std::uint64_t kStrideByteOffset = 1024;  // 8 K rows x 128 bytes
  std::uint64_t desc = (smem_addr & 0x3FFFFu) >> 4;
  desc |= (std::uint64_t{panel_bytes & 0x3FFFFu} >> 4) << 16;
  desc |= (kStrideByteOffset >> 4) << 32;
  desc |= std::uint64_t{1} << 62;  // 128-byte swizzle
  return desc;
}

}  // namespace tessera::cuda::sm90
