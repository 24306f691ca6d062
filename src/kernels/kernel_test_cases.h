// Shared test vectors for the kernels: the layout x block size x element size cases, random
// slot mappings, and an independent oracle of where each byte of a token lands in each layout.
// Used by the CPU reference tests (CI) and by kernels_gpu_test (CUDA vs reference), so both
// check the same cases. Test-only (linked into tests, never into the library).
//
// The oracle computes byte offsets from the layouts' tensor shapes directly (C-contiguous
// index arithmetic), not from PagedKvView strides, so it also checks MakePagedKvView().
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kernels/paged_kv.h"

namespace rangekv::testing {

inline constexpr uint8_t kPoison = 0xCD;

struct LayoutCase {
  kernels::PagedLayout layout = kernels::PagedLayout::kFlashAttnNhd;
  kernels::PagedShape shape;
  uint32_t num_tokens = 0;  // stripe tokens; <= num_blocks * block_size
  uint64_t seed = 0;
  std::string Name() const;  // gtest-safe: letters, digits, '_'
};

// Every layout x block size {16, 32, 64, 128, 256} x element size {1, 2}, with head counts and
// head sizes
// drawn from `seed` (including head sizes whose bytes are not a multiple of 16, so narrow
// access paths run too). `scale` multiplies the number of blocks (1 for CI; larger on a GPU).
// kCpuBlock cases have a whole number of blocks of tokens.
std::vector<LayoutCase> AllLayoutCases(uint64_t seed, uint32_t scale = 1);

const char* LayoutName(kernels::PagedLayout layout);

// Byte offset, inside one layer's C-contiguous tensor of `layout`, of byte `byte` of the head
// vector (plane, block, token_in_block, head). For kCpuBlock (whose block interior is opaque)
// this is the engine's own convention inside a block: token-major rows of K heads then V heads.
uint64_t OracleOffset(kernels::PagedLayout layout, const kernels::PagedShape& shape, uint32_t plane,
                      uint32_t block, uint32_t token_in_block, uint32_t head, uint32_t byte);

// `n` distinct slots in [0, num_slots), in random order, about `skip_percent`% replaced by -1.
// REQUIRES: n <= num_slots.
std::vector<int64_t> RandomSlotMapping(uint32_t num_slots, uint32_t n, uint32_t skip_percent,
                                       std::mt19937_64& rng);

// `n` tokens (a multiple of block_size) in groups of block_size: each group maps to offsets
// 0..B-1 of a distinct random block; about `skip_percent`% of the groups are all -1.
// REQUIRES: n / block_size <= num_blocks.
std::vector<int64_t> RandomBlockSlotMapping(uint32_t num_blocks, uint32_t block_size, uint32_t n,
                                            uint32_t skip_percent, std::mt19937_64& rng);

// The mapping a case's launch uses: RandomBlockSlotMapping for kCpuBlock, else
// RandomSlotMapping over all slots.
std::vector<int64_t> CaseSlotMapping(const LayoutCase& c, uint32_t skip_percent,
                                     std::mt19937_64& rng);

void FillRandom(std::span<uint8_t> bytes, std::mt19937_64& rng);

// The layer tensor `paged` after scattering `stripe` through `slots` (oracle semantics; for
// kCpuBlock whole blocks, each group's destination named by its first slot).
std::vector<uint8_t> OracleScatter(const LayoutCase& c, std::vector<uint8_t> paged,
                                   std::span<const uint8_t> stripe, std::span<const int64_t> slots);

// The stripe `stripe` after gathering `slots` from the layer tensor `paged` (oracle semantics).
std::vector<uint8_t> OracleGather(const LayoutCase& c, std::span<const uint8_t> paged,
                                  std::vector<uint8_t> stripe, std::span<const int64_t> slots);

// Planes of a layout's stripe row (1 for MLA, else 2: K then V, kCpuBlock included) and the
// stripe row bytes of a case.
uint32_t NumPlanes(kernels::PagedLayout layout);
uint64_t RowBytes(const LayoutCase& c);

// Index of the first differing byte, or -1 when equal (for readable failure messages).
int64_t FirstDifference(std::span<const uint8_t> a, std::span<const uint8_t> b);

}  // namespace rangekv::testing
