#include "kernels/kernel_test_cases.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "base/check.h"

namespace rangekv::kernels::testing {

const char* LayoutName(PagedLayout layout) {
  switch (layout) {
    case PagedLayout::kFlashAttnNhd:
      return "FlashAttnNhd";
    case PagedLayout::kFlashAttnHnd:
      return "FlashAttnHnd";
    case PagedLayout::kFlashInferNhd:
      return "FlashInferNhd";
    case PagedLayout::kFlashInferHnd:
      return "FlashInferHnd";
    case PagedLayout::kMla:
      return "Mla";
  }
  return "Unknown";
}

std::string LayoutCase::Name() const {
  return std::string(LayoutName(layout)) + "_B" + std::to_string(shape.block_size) + "_e" +
         std::to_string(shape.elem_bytes) + "_H" + std::to_string(shape.num_heads) + "_D" +
         std::to_string(shape.head_size) + "_N" + std::to_string(shape.num_blocks) + "_n" +
         std::to_string(num_tokens);
}

uint32_t NumPlanes(PagedLayout layout) { return layout == PagedLayout::kMla ? 1 : 2; }

uint64_t RowBytes(const LayoutCase& c) {
  return uint64_t{NumPlanes(c.layout)} * c.shape.num_heads * c.shape.head_size * c.shape.elem_bytes;
}

std::vector<LayoutCase> AllLayoutCases(uint64_t seed, uint32_t scale) {
  std::mt19937_64 rng(seed);
  auto pick = [&](std::initializer_list<uint32_t> v) { return *(v.begin() + rng() % v.size()); };
  std::vector<LayoutCase> cases;
  for (PagedLayout layout :
       {PagedLayout::kFlashAttnNhd, PagedLayout::kFlashAttnHnd, PagedLayout::kFlashInferNhd,
        PagedLayout::kFlashInferHnd, PagedLayout::kMla}) {
    for (uint32_t block_size : {16u, 32u, 64u}) {
      for (uint32_t elem_bytes : {1u, 2u}) {
        LayoutCase c;
        c.layout = layout;
        c.shape.block_size = block_size;
        c.shape.elem_bytes = elem_bytes;
        if (layout == PagedLayout::kMla) {
          c.shape.num_heads = 1;
          c.shape.head_size = pick({576, 512, 72, 33});  // 33: odd bytes, narrow accesses
        } else {
          c.shape.num_heads = pick({1, 2, 3, 4, 8});
          c.shape.head_size = pick({128, 64, 40, 7});  // 40 x 1 byte and 7: not 16-aligned
        }
        c.shape.num_blocks = (4 + static_cast<uint32_t>(rng() % 13)) * scale;
        const uint32_t slots = c.shape.num_blocks * block_size;
        // Not a whole number of blocks, and usually fewer tokens than slots.
        c.num_tokens = std::max<uint32_t>(1, slots - static_cast<uint32_t>(rng() % slots) / 2 - 3);
        c.seed = rng();
        cases.push_back(c);
      }
    }
  }
  return cases;
}

uint64_t OracleOffset(PagedLayout layout, const PagedShape& s, uint32_t plane, uint32_t block,
                      uint32_t token, uint32_t head, uint32_t byte) {
  const uint64_t N = s.num_blocks, B = s.block_size, H = s.num_heads;
  const uint64_t head_bytes = uint64_t{s.head_size} * s.elem_bytes;
  uint64_t vector_index = 0;  // index of the head vector in C order of the tensor shape
  switch (layout) {
    case PagedLayout::kFlashAttnNhd:  // [2, N, B, H, D]
      vector_index = ((plane * N + block) * B + token) * H + head;
      break;
    case PagedLayout::kFlashAttnHnd:  // [2, N, H, B, D]
      vector_index = ((plane * N + block) * H + head) * B + token;
      break;
    case PagedLayout::kFlashInferNhd:  // [N, 2, B, H, D]
      vector_index = ((block * 2 + plane) * B + token) * H + head;
      break;
    case PagedLayout::kFlashInferHnd:  // [N, 2, H, B, D]
      vector_index = ((block * 2 + plane) * H + head) * B + token;
      break;
    case PagedLayout::kMla:  // [N, B, latent]
      RANGEKV_CHECK(plane == 0 && head == 0);
      vector_index = block * B + token;
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
  const PagedShape& s = c.shape;
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

std::vector<uint8_t> OracleScatter(const LayoutCase& c, std::vector<uint8_t> paged,
                                   std::span<const uint8_t> stripe,
                                   std::span<const int64_t> slots) {
  const uint64_t row = RowBytes(c);
  const int64_t num_slots = int64_t{c.shape.num_blocks} * c.shape.block_size;
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

}  // namespace rangekv::kernels::testing
