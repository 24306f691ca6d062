#include "pack/pack_layout.h"

#include <string>

#include "base/check.h"
#include "base/units.h"
#include "pack/format.h"

namespace rangekv {
namespace {

Status Bad(const std::string& why) { return InvalidArgument("pack geometry: " + why); }

}  // namespace

Status ValidatePackGeometry(const Geometry& g) {
  using namespace pack_format;
  if (g.layers == 0 || g.layers > kMaxLayers) {
    return Bad("layers " + std::to_string(g.layers) + " not in [1, " + std::to_string(kMaxLayers) +
               "]");
  }
  if (g.dtype_bytes == 0 || g.dtype_bytes > kMaxDtypeBytes) {
    return Bad("dtype bytes " + std::to_string(g.dtype_bytes) + " not in [1, " +
               std::to_string(kMaxDtypeBytes) + "]");
  }
  if (g.block_size == 0) return Bad("block size is 0");
  std::optional<uint64_t> expect_s;
  if (g.mla_latent_size != 0) {
    if (g.kv_heads_per_rank != 0 || g.head_size != 0) {
      return Bad("MLA geometry with kv heads or head size set");
    }
    expect_s = CheckedMul(g.mla_latent_size, g.dtype_bytes);
  } else {
    if (g.kv_heads_per_rank == 0 || g.head_size == 0) return Bad("zero kv heads or head size");
    auto per_head = CheckedMul(g.head_size, g.dtype_bytes);
    auto k_bytes = per_head ? CheckedMul(*per_head, g.kv_heads_per_rank) : std::nullopt;
    expect_s = k_bytes ? CheckedMul(*k_bytes, 2) : std::nullopt;
  }
  if (!expect_s || *expect_s != g.token_bytes) {
    return Bad("token bytes " + std::to_string(g.token_bytes) +
               " disagree with heads x head size x dtype (or MLA latent)");
  }
  if (g.stripe_bytes == 0 || g.stripe_bytes > kMaxStripeBytes ||
      !IsAligned(g.stripe_bytes, kIoAlignment)) {
    return Bad("stripe bytes " + std::to_string(g.stripe_bytes) + " not a multiple of " +
               std::to_string(kIoAlignment) + " in (0, " + std::to_string(kMaxStripeBytes) + "]");
  }
  if (g.token_bytes == 0 || g.token_bytes > g.stripe_bytes) {
    return Bad("token bytes " + std::to_string(g.token_bytes) + " not in (0, W]");
  }
  // T is W/s, or for a block-opaque paged layout W/s rounded down to whole blocks (the header
  // does not name the layout; the namespace does).
  const uint64_t full = g.stripe_bytes / g.token_bytes;
  const uint64_t whole_blocks = full - full % g.block_size;
  if (g.tokens_per_stripe != full && (g.tokens_per_stripe != whole_blocks || whole_blocks == 0)) {
    return Bad("tokens per stripe " + std::to_string(g.tokens_per_stripe) +
               " is neither W/s nor W/s rounded down to a multiple of the block size");
  }
  // Bounded above: W <= 1 GiB and L <= 4096 cannot overflow.
  if (g.pack_bytes != g.stripe_bytes * g.layers) {
    return Bad("pack bytes " + std::to_string(g.pack_bytes) + " != L*W");
  }
  return OkStatus();
}

Result<PackLayout> PackLayout::Make(const Geometry& geometry, uint64_t pack_count,
                                    uint64_t data_offset) {
  using namespace pack_format;
  RANGEKV_RETURN_IF_ERROR(ValidatePackGeometry(geometry));
  if (pack_count == 0 || pack_count > kMaxPackCount) {
    return InvalidArgument("pack count " + std::to_string(pack_count) + " not in [1, " +
                           std::to_string(kMaxPackCount) + "]");
  }
  if (data_offset < kHeaderPageBytes || data_offset > kMaxDataOffset ||
      !IsAligned(data_offset, kDataOffsetAlignment)) {
    return InvalidArgument("data offset " + std::to_string(data_offset) + " is not a multiple of " +
                           std::to_string(kDataOffsetAlignment) + " in [" +
                           std::to_string(kHeaderPageBytes) + ", " +
                           std::to_string(kMaxDataOffset) + "]");
  }
  auto capacity = CheckedMul(pack_count, geometry.pack_bytes);
  auto file_bytes = capacity ? CheckedAdd(*capacity, data_offset) : std::nullopt;
  if (!file_bytes || *file_bytes > kMaxFileBytes) {
    return InvalidArgument("pack file of " + std::to_string(pack_count) + " packs of " +
                           std::to_string(geometry.pack_bytes) + " bytes exceeds " +
                           std::to_string(kMaxFileBytes) + " bytes");
  }
  return PackLayout(geometry, pack_count, data_offset, *capacity);
}

Result<PackLocation> PackLayout::Locate(uint64_t slot) const {
  if (slot >= pack_count_) {
    return OutOfRange("pack slot " + std::to_string(slot) + " >= pack count " +
                      std::to_string(pack_count_) + " (bytes would lie beyond the file end " +
                      std::to_string(file_bytes()) + ")");
  }
  return LocateUnchecked(slot);
}

PackLocation PackLayout::LocateUnchecked(uint64_t slot) const {
  // The single slot -> (file, offset) rule. One file today; see the header.
  return PackLocation{0, data_offset_ + slot * geometry_.pack_bytes};
}

uint64_t PackLayout::Address(uint64_t slot, uint32_t layer, uint64_t token_in_pack) const {
  RANGEKV_DCHECK(slot < pack_count_);
  RANGEKV_DCHECK(layer < geometry_.layers);
  RANGEKV_DCHECK(token_in_pack <= geometry_.tokens_per_stripe);
  // With the invariants, every term is bounded by file_bytes() <= kMaxFileBytes.
  return LocateUnchecked(slot).slot_offset + uint64_t{layer} * geometry_.stripe_bytes +
         token_in_pack * geometry_.token_bytes;
}

}  // namespace rangekv
