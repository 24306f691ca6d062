#include "pack/pack_header.h"

#include <cstdio>
#include <cstring>
#include <random>

#include "base/coding.h"
#include "base/digest.h"
#include "pack/pack_layout.h"

namespace rangekv {
namespace {

using pack_format::Field;

// Fixed offsets inside the 4096-byte page, through the one byte codec (base/coding.h).
void PutU32(uint8_t* page, Field f, uint32_t v) { coding::StoreU32(page + f.offset, v); }
void PutU64(uint8_t* page, Field f, uint64_t v) { coding::StoreU64(page + f.offset, v); }
void PutU128(uint8_t* page, Field f, uint64_t lo, uint64_t hi) {
  coding::StoreU64(page + f.offset, lo);
  coding::StoreU64(page + f.offset + 8, hi);
}
uint32_t GetU32(const uint8_t* page, Field f) { return coding::LoadU32(page + f.offset); }
uint64_t GetU64(const uint8_t* page, Field f) { return coding::LoadU64(page + f.offset); }
uint64_t GetU64At(const uint8_t* page, uint32_t offset) { return coding::LoadU64(page + offset); }

uint64_t HeaderChecksum(const uint8_t* page) {
  return Hash64(page, pack_format::kChecksumCoveredBytes, pack_format::kChecksumSeed);
}

}  // namespace

std::string StoreUuid::ToHex() const {
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return buf;
}

StoreUuid StoreUuid::Generate() {
  // std::random_device reads the OS entropy source (getrandom) on Linux.
  std::random_device rd;
  auto word = [&rd] { return (uint64_t{rd()} << 32) | rd(); };
  StoreUuid u{word(), word()};
  // RFC 4122 layout as ToHex prints it (hi = bytes 0-7, most significant first): version 4
  // in the high nibble of byte 6, variant 0b10 in the top bits of byte 8 (lo's top byte).
  u.hi = (u.hi & ~(uint64_t{0xf} << 12)) | (uint64_t{4} << 12);
  u.lo = (u.lo & ~(uint64_t{0xc0} << 56)) | (uint64_t{0x80} << 56);
  return u;  // never nil: the version bits are set
}

void EncodePackHeader(const PackHeader& h, std::span<uint8_t, pack_format::kHeaderPageBytes> out) {
  using namespace pack_format;
  uint8_t* page = out.data();
  std::memset(page, 0, kHeaderPageBytes);
  std::memcpy(page + kMagicField.offset, kMagic, kMagicField.size);
  PutU32(page, kVersionField, h.format_version);
  PutU32(page, kHeaderBytesField, h.header_bytes);
  PutU128(page, kStoreUuidField, h.store_uuid.lo, h.store_uuid.hi);
  const Geometry& g = h.geometry;
  PutU32(page, kLayersField, g.layers);
  PutU32(page, kDtypeBytesField, g.dtype_bytes);
  PutU32(page, kKvHeadsPerRankField, g.kv_heads_per_rank);
  PutU32(page, kHeadSizeField, g.head_size);
  PutU32(page, kMlaLatentField, g.mla_latent_size);
  PutU32(page, kBlockSizeField, g.block_size);
  PutU64(page, kTokenBytesField, g.token_bytes);
  PutU64(page, kStripeBytesField, g.stripe_bytes);
  PutU64(page, kTokensPerStripeField, g.tokens_per_stripe);
  PutU64(page, kPackBytesField, g.pack_bytes);
  PutU128(page, kNamespaceField, h.namespace_id.lo, h.namespace_id.hi);
  PutU64(page, kPackCountField, h.pack_count);
  PutU64(page, kDataOffsetField, h.data_offset);
  PutU64(page, kCreationTimeField, h.creation_time_unix_ns);
  PutU64(page, kChecksumField, HeaderChecksum(page));
}

Result<PackHeader> DecodePackHeader(std::span<const uint8_t> bytes) {
  using namespace pack_format;
  if (bytes.size() < kMagicField.end() ||
      std::memcmp(bytes.data() + kMagicField.offset, kMagic, kMagicField.size) != 0) {
    return InvalidArgument("not a RangeKV pack file (magic \"RANGEKVP\" missing)");
  }
  if (bytes.size() < kVersionField.end()) {
    return Status(StatusCode::kTruncated, "pack header: file ends inside the version field");
  }
  const uint8_t* page = bytes.data();
  PackHeader h;
  h.format_version = GetU32(page, kVersionField);
  if (h.format_version != kFormatVersion) {
    return Status(StatusCode::kWrongVersion, "pack file format version " +
                                                 std::to_string(h.format_version) +
                                                 " is not understood (this build reads version " +
                                                 std::to_string(kFormatVersion) + ")");
  }
  if (bytes.size() < kHeaderPageBytes) {
    return Status(StatusCode::kTruncated, "pack header: " + std::to_string(bytes.size()) +
                                              " bytes, shorter than the " +
                                              std::to_string(kHeaderPageBytes) + "-byte header");
  }
  const uint64_t stored_sum = GetU64(page, kChecksumField);
  const uint64_t actual_sum = HeaderChecksum(page);
  if (stored_sum != actual_sum) {
    return Corruption("pack header checksum mismatch (stored " + std::to_string(stored_sum) +
                      ", computed " + std::to_string(actual_sum) + ")");
  }

  h.header_bytes = GetU32(page, kHeaderBytesField);
  h.store_uuid.lo = GetU64At(page, kStoreUuidField.offset);
  h.store_uuid.hi = GetU64At(page, kStoreUuidField.offset + 8);
  Geometry& g = h.geometry;
  g.layers = GetU32(page, kLayersField);
  g.dtype_bytes = GetU32(page, kDtypeBytesField);
  g.kv_heads_per_rank = GetU32(page, kKvHeadsPerRankField);
  g.head_size = GetU32(page, kHeadSizeField);
  g.mla_latent_size = GetU32(page, kMlaLatentField);
  g.block_size = GetU32(page, kBlockSizeField);
  g.token_bytes = GetU64(page, kTokenBytesField);
  g.stripe_bytes = GetU64(page, kStripeBytesField);
  g.tokens_per_stripe = GetU64(page, kTokensPerStripeField);
  g.pack_bytes = GetU64(page, kPackBytesField);
  h.namespace_id.lo = GetU64At(page, kNamespaceField.offset);
  h.namespace_id.hi = GetU64At(page, kNamespaceField.offset + 8);
  h.pack_count = GetU64(page, kPackCountField);
  h.data_offset = GetU64(page, kDataOffsetField);
  h.creation_time_unix_ns = GetU64(page, kCreationTimeField);

  // The checksum matched, so these are values someone wrote on purpose; they must still be
  // possible before anything is sized from them.
  if (h.header_bytes != kHeaderPageBytes) {
    return Corruption("pack header: header size " + std::to_string(h.header_bytes) +
                      " != " + std::to_string(kHeaderPageBytes));
  }
  if (h.store_uuid.is_nil()) return Corruption("pack header: nil store UUID");
  auto layout = PackLayout::Make(g, h.pack_count, h.data_offset);
  if (!layout.ok()) {
    return Corruption("pack header: impossible fields: " + layout.status().message());
  }
  return h;
}

}  // namespace rangekv
