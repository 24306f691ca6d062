#include "kernels/kernel_test_cases.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "base/check.h"

namespace rangekv::testing {

const char* LayoutName(kernels::PagedLayout layout) {
  switch (layout) {
    case kernels::PagedLayout::kFlashAttnNhd:
      return "FlashAttnNhd";
    case kernels::PagedLayout::kFlashAttnHnd:
      return "FlashAttnHnd";
    case kernels::PagedLayout::kFlashInferNhd:
      return "FlashInferNhd";
    case kernels::PagedLayout::kFlashInferHnd:
      return "FlashInferHnd";
    case kernels::PagedLayout::kMla:
      return "Mla";
    case kernels::PagedLayout::kPackedNhd:
      return "PackedNhd";
    case kernels::PagedLayout::kPackedHnd:
      return "PackedHnd";
    case kernels::PagedLayout::kCpuBlock:
      return "CpuBlock";
  }
  return "Unknown";
}

std::string LayoutCase::Name() const {
  return std::string(LayoutName(layout)) + "_B" + std::to_string(shape.block_size) + "_e" +
         std::to_string(shape.elem_bytes) + "_H" + std::to_string(shape.num_heads) + "_D" +
         std::to_string(shape.head_size) + "_N" + std::to_string(shape.num_blocks) + "_n" +
         std::to_string(num_tokens);
}

uint32_t NumPlanes(kernels::PagedLayout layout) {
  return layout == kernels::PagedLayout::kMla ? 1 : 2;
}

uint64_t RowBytes(const LayoutCase& c) {
  return uint64_t{NumPlanes(c.layout)} * c.shape.num_heads * c.shape.head_size * c.shape.elem_bytes;
}

std::vector<LayoutCase> AllLayoutCases(uint64_t seed, uint32_t scale) {
  std::mt19937_64 rng(seed);
  auto pick = [&](std::initializer_list<uint32_t> v) { return *(v.begin() + rng() % v.size()); };
  std::vector<LayoutCase> cases;
  for (kernels::PagedLayout layout :
       {kernels::PagedLayout::kFlashAttnNhd, kernels::PagedLayout::kFlashAttnHnd,
        kernels::PagedLayout::kFlashInferNhd, kernels::PagedLayout::kFlashInferHnd,
        kernels::PagedLayout::kMla, kernels::PagedLayout::kPackedNhd,
        kernels::PagedLayout::kPackedHnd, kernels::PagedLayout::kCpuBlock}) {
    for (uint32_t block_size : {16u, 32u, 64u, 128u, 256u}) {
      for (uint32_t elem_bytes : {1u, 2u}) {
        LayoutCase c;
        c.layout = layout;
        c.shape.block_size = block_size;
        c.shape.elem_bytes = elem_bytes;
        if (layout == kernels::PagedLayout::kMla) {
          c.shape.num_heads = 1;
          c.shape.head_size = pick({576, 512, 72, 33});  // 33: odd bytes, narrow accesses
        } else {
          c.shape.num_heads = pick({1, 2, 3, 4, 8});
          c.shape.head_size = pick({128, 64, 40, 7});  // 40 x 1 byte and 7: not 16-aligned
        }
        // Large blocks: fewer of them, so a case stays a few MiB.
        c.shape.num_blocks = block_size >= 128 ? (2 + static_cast<uint32_t>(rng() % 5)) * scale
                                               : (4 + static_cast<uint32_t>(rng() % 13)) * scale;
        const uint32_t slots = c.shape.num_blocks * block_size;
        if (layout == kernels::PagedLayout::kCpuBlock) {
          // Whole blocks only; usually fewer than the layer holds.
          const uint32_t n = c.shape.num_blocks;
          c.num_tokens =
              std::max<uint32_t>(1, n - static_cast<uint32_t>(rng() % n) / 2) * block_size;
        } else {
          // Not a whole number of blocks, and usually fewer tokens than slots.
          c.num_tokens =
              std::max<uint32_t>(1, slots - static_cast<uint32_t>(rng() % slots) / 2 - 3);
        }
        c.seed = rng();
        cases.push_back(c);
      }
    }
  }
  return cases;
}

uint64_t OracleOffset(kernels::PagedLayout layout, const kernels::PagedShape& s, uint32_t plane,
                      uint32_t block, uint32_t token, uint32_t head, uint32_t byte) {
  const uint64_t N = s.num_blocks, B = s.block_size, H = s.num_heads;
  const uint64_t head_bytes = uint64_t{s.head_size} * s.elem_bytes;
  uint64_t vector_index = 0;  // index of the head vector in C order of the tensor shape
  switch (layout) {
    case kernels::PagedLayout::kFlashAttnNhd:  // [2, N, B, H, D]
      vector_index = ((plane * N + block) * B + token) * H + head;
      break;
    case kernels::PagedLayout::kFlashAttnHnd:  // [2, N, H, B, D]
      vector_index = ((plane * N + block) * H + head) * B + token;
      break;
    case kernels::PagedLayout::kFlashInferNhd:  // [N, 2, B, H, D]
      vector_index = ((block * 2 + plane) * B + token) * H + head;
      break;
    case kernels::PagedLayout::kFlashInferHnd:  // [N, 2, H, B, D]
      vector_index = ((block * 2 + plane) * H + head) * B + token;
      break;
    case kernels::PagedLayout::kMla:  // [N, B, latent]
      RANGEKV_CHECK(plane == 0 && head == 0);
      vector_index = block * B + token;
      break;
    case kernels::PagedLayout::kPackedNhd:  // [N, B, H, 2D]: (block, token, head, plane) of
                                            // D-vectors
      vector_index = ((block * B + token) * H + head) * 2 + plane;
      break;
    case kernels::PagedLayout::kPackedHnd:  // [N, H, B, 2D]
      vector_index = ((block * H + head) * B + token) * 2 + plane;
      break;
    case kernels::PagedLayout::kCpuBlock:  // opaque block of B rows of (K heads, V heads)
      vector_index = ((block * B + token) * 2 + plane) * H + head;
      break;
  }
  return vector_index * head_bytes + byte;
}

std::vector<int64_t> RandomSlotMapping(uint32_t num_slots, uint32_t n, uint32_t skip_percent,
                                       std::mt19937_64& rng) {
  RANGEKV_CHECK(n <= num_slots);
  std::vector<int64_t> all(num_slots);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(n);
  for (int64_t& s : all) {
    if (rng() % 100 < skip_percent) s = -1;
  }
  return all;
}

std::vector<int64_t> RandomBlockSlotMapping(uint32_t num_blocks, uint32_t block_size, uint32_t n,
                                            uint32_t skip_percent, std::mt19937_64& rng) {
  RANGEKV_CHECK(n % block_size == 0 && n / block_size <= num_blocks);
  std::vector<int64_t> blocks(num_blocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::vector<int64_t> slots(n);
  for (uint32_t j = 0; j < n / block_size; ++j) {
    const bool skip = rng() % 100 < skip_percent;
    for (uint32_t k = 0; k < block_size; ++k) {
      slots[j * block_size + k] = skip ? -1 : blocks[j] * block_size + k;
    }
  }
  return slots;
}

std::vector<int64_t> CaseSlotMapping(const LayoutCase& c, uint32_t skip_percent,
                                     std::mt19937_64& rng) {
  if (c.layout == kernels::PagedLayout::kCpuBlock) {
    return RandomBlockSlotMapping(c.shape.num_blocks, c.shape.block_size, c.num_tokens,
                                  skip_percent, rng);
  }
  return RandomSlotMapping(c.shape.num_blocks * c.shape.block_size, c.num_tokens, skip_percent,
                           rng);
}

void FillRandom(std::span<uint8_t> bytes, std::mt19937_64& rng) {
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(bytes.data() + i, &v, 8);
  }
  for (; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(rng());
}

namespace {

// Calls fn(paged_offset, row_offset) for every byte of token position `slot`.
template <typename Fn>
void ForEachByte(const LayoutCase& c, int64_t slot, Fn&& fn) {
  const kernels::PagedShape& s = c.shape;
  const uint32_t block = static_cast<uint32_t>(slot / s.block_size);
  const uint32_t token = static_cast<uint32_t>(slot % s.block_size);
  const uint32_t head_bytes = s.head_size * s.elem_bytes;
  uint64_t row_offset = 0;
  for (uint32_t p = 0; p < NumPlanes(c.layout); ++p) {
    for (uint32_t h = 0; h < s.num_heads; ++h) {
      for (uint32_t b = 0; b < head_bytes; ++b) {
        fn(OracleOffset(c.layout, s, p, block, token, h, b), row_offset++);
      }
    }
  }
}

}  // namespace

// Calls fn(paged_offset, stripe_offset, bytes) for every group of B tokens of a kCpuBlock case
// whose first slot is valid: the whole block moves, its destination named by that slot.
template <typename Fn>
void ForEachOpaqueBlock(const LayoutCase& c, std::span<const int64_t> slots, Fn&& fn) {
  const uint64_t B = c.shape.block_size;
  const uint64_t block_bytes = B * RowBytes(c);
  const int64_t num_slots = int64_t{c.shape.num_blocks} * c.shape.block_size;
  for (size_t t = 0; t + B <= slots.size(); t += B) {
    if (slots[t] < 0 || slots[t] >= num_slots) continue;
    fn(static_cast<uint64_t>(slots[t]) / B * block_bytes, t * RowBytes(c), block_bytes);
  }
}

std::vector<uint8_t> OracleScatter(const LayoutCase& c, std::vector<uint8_t> paged,
                                   std::span<const uint8_t> stripe,
                                   std::span<const int64_t> slots) {
  const uint64_t row = RowBytes(c);
  const int64_t num_slots = int64_t{c.shape.num_blocks} * c.shape.block_size;
  if (c.layout == kernels::PagedLayout::kCpuBlock) {
    ForEachOpaqueBlock(c, slots, [&](uint64_t paged_offset, uint64_t offset, uint64_t bytes) {
      for (uint64_t i = 0; i < bytes; ++i) paged[paged_offset + i] = stripe[offset + i];
    });
    return paged;
  }
  for (size_t t = 0; t < slots.size(); ++t) {
    if (slots[t] < 0 || slots[t] >= num_slots) continue;
    ForEachByte(c, slots[t], [&](uint64_t paged_offset, uint64_t row_offset) {
      paged[paged_offset] = stripe[t * row + row_offset];
    });
  }
  return paged;
}

std::vector<uint8_t> OracleGather(const LayoutCase& c, std::span<const uint8_t> paged,
                                  std::vector<uint8_t> stripe, std::span<const int64_t> slots) {
  const uint64_t row = RowBytes(c);
  const int64_t num_slots = int64_t{c.shape.num_blocks} * c.shape.block_size;
  if (c.layout == kernels::PagedLayout::kCpuBlock) {
    ForEachOpaqueBlock(c, slots, [&](uint64_t paged_offset, uint64_t offset, uint64_t bytes) {
      for (uint64_t i = 0; i < bytes; ++i) stripe[offset + i] = paged[paged_offset + i];
    });
    return stripe;
  }
  for (size_t t = 0; t < slots.size(); ++t) {
    if (slots[t] < 0 || slots[t] >= num_slots) continue;
    ForEachByte(c, slots[t], [&](uint64_t paged_offset, uint64_t row_offset) {
      stripe[t * row + row_offset] = paged[paged_offset];
    });
  }
  return stripe;
}

int64_t FirstDifference(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  if (a.size() != b.size()) return static_cast<int64_t>(std::min(a.size(), b.size()));
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace rangekv::testing
