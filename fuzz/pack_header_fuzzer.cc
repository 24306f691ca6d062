// Fuzzes DecodePackHeader (pack/pack_header.h): the pack file's header page is read at every
// open and by `rangekv inspect` / `fsck`, and may be truncated, corrupted or foreign.
//
// Each input is decoded three ways, so that the field checks behind the checksum are reached:
//   1. as given;
//   2. with magic and version set right and the header checksum recomputed;
//   3. as edits to a valid sample header: (u8 offset into the checksummed fields, u8 value)
//      pairs written over it, then the checksum is recomputed.
// Properties checked:
// - decoding never crashes or reads out of bounds;
// - a decoded header re-encodes to the same checksummed fields, decodes again to the same
//   value, and yields a valid PackLayout (every size it passed is usable without overflow).
// Run: pack_header_fuzzer -max_total_time=30 CORPUS_DIR
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "base/digest.h"
#include "pack/format.h"
#include "pack/pack_header.h"
#include "pack/pack_layout.h"

namespace {

namespace pf = rangekv::pack_format;
using rangekv::PackHeader;

std::vector<uint8_t> Sample() {
  PackHeader h;
  h.store_uuid = {0x0123456789abcdefull, 0x4000fedcba987654ull};
  rangekv::Geometry& g = h.geometry;
  g.layers = 32;
  g.kv_heads_per_rank = 8;
  g.head_size = 128;
  g.dtype_bytes = 2;
  g.block_size = 16;
  g.token_bytes = 4096;
  g.stripe_bytes = 32u << 20;
  g.tokens_per_stripe = 8192;
  g.pack_bytes = 32ull << 25;
  h.namespace_id = {7, 8};
  h.pack_count = 16;
  h.creation_time_unix_ns = 1;
  std::vector<uint8_t> page(pf::kHeaderPageBytes);
  rangekv::EncodePackHeader(h, std::span<uint8_t, pf::kHeaderPageBytes>(page.data(), page.size()));
  return page;
}

void Seal(std::vector<uint8_t>* page) {
  const uint64_t sum = rangekv::Hash64(page->data(), pf::kChecksumCoveredBytes, pf::kChecksumSeed);
  for (int i = 0; i < 8; ++i)
    (*page)[pf::kChecksumField.offset + i] = static_cast<uint8_t>(sum >> (8 * i));
}

void Check(std::span<const uint8_t> bytes) {
  rangekv::Result<PackHeader> h = rangekv::DecodePackHeader(bytes);
  if (!h.ok()) return;
  std::array<uint8_t, pf::kHeaderPageBytes> page{};
  rangekv::EncodePackHeader(*h, page);
  if (std::memcmp(page.data(), bytes.data(), pf::kReservedBegin) != 0) std::abort();
  rangekv::Result<PackHeader> again = rangekv::DecodePackHeader(page);
  if (!again.ok() || !(*again == *h)) std::abort();
  if (!rangekv::PackLayout::Make(h->geometry, h->pack_count, h->data_offset).ok()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Check(std::span(data, size));
  if (size >= pf::kHeaderPageBytes) {
    std::vector<uint8_t> b(data, data + pf::kHeaderPageBytes);
    std::memcpy(b.data(), pf::kMagic, sizeof(pf::kMagic));
    for (int i = 0; i < 4; ++i)
      b[pf::kVersionField.offset + i] = static_cast<uint8_t>(pf::kFormatVersion >> (8 * i));
    Seal(&b);
    Check(b);
  }
  std::vector<uint8_t> b = Sample();
  for (size_t i = 0; i + 2 <= size; i += 2) b[data[i] % pf::kChecksumCoveredBytes] = data[i + 1];
  Seal(&b);
  Check(b);
  return 0;
}
