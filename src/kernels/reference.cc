#include "kernels/reference.h"

#include <cstring>

namespace rangekv::kernels {

namespace {

// Whether all heads of one plane of one token are one contiguous run of plane_token_bytes(),
// so a token-plane moves with one memcpy (NHD layouts and MLA).
bool HeadsContiguous(const PagedKvView& v) {
  return v.num_heads == 1 || v.head_stride_bytes == static_cast<int64_t>(v.head_bytes);
}

// Calls fn(paged_head_address, row_offset, bytes) for every contiguous piece of token
// position (block, token_in_block) of the view, in stripe-row order.
template <typename Fn>
void ForEachPiece(const PagedKvView& v, uint32_t block, uint32_t token_in_block, Fn&& fn) {
  const uint64_t plane_bytes = v.plane_token_bytes();
  for (uint32_t p = 0; p < v.num_planes; ++p) {
    if (HeadsContiguous(v)) {
      fn(v.HeadAddress(p, block, token_in_block, 0), p * plane_bytes, plane_bytes);
      continue;
    }
    for (uint32_t h = 0; h < v.num_heads; ++h) {
      fn(v.HeadAddress(p, block, token_in_block, h), p * plane_bytes + uint64_t{h} * v.head_bytes,
         uint64_t{v.head_bytes});
    }
  }
}

// Calls fn(paged_block, stripe_offset, bytes) for every block group of an opaque view whose
// first token lies in [token_begin, token_end) and whose first slot is valid.
template <typename Fn>
void ForEachBlock(const PagedKvView& v, const int64_t* slots, uint32_t token_begin,
                  uint32_t token_end, Fn&& fn) {
  const uint64_t block_bytes = uint64_t{v.block_size} * v.token_bytes();
  const int64_t num_slots = v.num_slots();
  const uint32_t first_group = (token_begin + v.block_size - 1) / v.block_size;
  for (uint64_t t = uint64_t{first_group} * v.block_size; t < token_end; t += v.block_size) {
    const int64_t slot = slots[t];
    if (slot < 0 || slot >= num_slots) continue;
    const uint32_t block = static_cast<uint32_t>(slot / v.block_size);
    fn(v.HeadAddress(0, block, 0, 0), t * v.token_bytes(), block_bytes);
  }
}

}  // namespace

void ScatterReference(const ScatterArgs& a, uint32_t token_begin, uint32_t token_end) {
  const PagedKvView& v = a.dst;
  if (v.opaque_blocks != 0) {
    ForEachBlock(v, a.slots, token_begin, token_end,
                 [&](uint8_t* paged, uint64_t offset, uint64_t bytes) {
                   std::memcpy(paged, a.stripe + offset, bytes);
                 });
    return;
  }
  const uint64_t row_bytes = v.token_bytes();
  const int64_t num_slots = v.num_slots();
  for (uint32_t t = token_begin; t < token_end; ++t) {
    const int64_t slot = a.slots[t];
    if (slot < 0 || slot >= num_slots) continue;
    const uint32_t block = static_cast<uint32_t>(slot / v.block_size);
    const uint32_t token_in_block = static_cast<uint32_t>(slot % v.block_size);
    const uint8_t* row = a.stripe + uint64_t{t} * row_bytes;
    ForEachPiece(v, block, token_in_block, [&](uint8_t* paged, uint64_t offset, uint64_t bytes) {
      std::memcpy(paged, row + offset, bytes);
    });
  }
}

void GatherReference(const GatherArgs& a, uint32_t token_begin, uint32_t token_end) {
  for (uint32_t g = 0; g < a.num_layers; ++g) {
    const PagedKvView& v = a.src[g];
    const uint64_t row_bytes = v.token_bytes();
    const int64_t num_slots = v.num_slots();
    uint8_t* layer_out = a.out + uint64_t{g} * a.out_layer_stride_bytes;
    if (v.opaque_blocks != 0) {
      ForEachBlock(v, a.slots, token_begin, token_end,
                   [&](const uint8_t* paged, uint64_t offset, uint64_t bytes) {
                     std::memcpy(layer_out + offset, paged, bytes);
                   });
      continue;
    }
    for (uint32_t t = token_begin; t < token_end; ++t) {
      const int64_t slot = a.slots[t];
      if (slot < 0 || slot >= num_slots) continue;
      const uint32_t block = static_cast<uint32_t>(slot / v.block_size);
      const uint32_t token_in_block = static_cast<uint32_t>(slot % v.block_size);
      uint8_t* row = layer_out + uint64_t{t} * row_bytes;
      ForEachPiece(v, block, token_in_block,
                   [&](const uint8_t* paged, uint64_t offset, uint64_t bytes) {
                     std::memcpy(row + offset, paged, bytes);
                   });
    }
  }
}

void DigestReference(const DigestArgs& a) {
  for (uint32_t i = 0; i < a.num_spans; ++i) {
    a.digests[i] = SpanDigest(a.spans[i].data, a.spans[i].bytes, a.seed);
  }
}

}  // namespace rangekv::kernels
