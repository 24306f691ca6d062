// The pack file header page: its in-memory form and the codec between it and the 4096 bytes
// on disk (layout in format.h and docs/pack-format.md).
//
// DecodePackHeader parses untrusted bytes: it never reads past `bytes`, never allocates from
// a field, and bounds every size before use. Each failure has its own code:
//   fewer than 8 bytes, or wrong magic  -> kInvalidArgument ("not a RangeKV pack file")
//   format version != kFormatVersion    -> kWrongVersion
//   fewer than kHeaderPageBytes bytes   -> kTruncated
//   checksum mismatch                   -> kCorruption
//   impossible field values (checksum ok but geometry inconsistent, zero or absurd pack
//   count, misaligned data offset, nil UUID, file size overflow) -> kCorruption
//
// EncodePackHeader writes whatever it is given (tests use it to craft headers with valid
// checksums around invalid fields); PackFile::Create validates before encoding.
//
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "pack/format.h"
#include "rangekv/geometry.h"
#include "rangekv/status.h"

namespace rangekv {

// The store's identity: 128 random bits chosen when the pack file is created. A snapshot or
// ticket bound to another UUID belongs to another store.
struct StoreUuid {
  uint64_t lo = 0;
  uint64_t hi = 0;
  bool is_nil() const { return lo == 0 && hi == 0; }
  std::string ToHex() const;  // 32 lowercase hex digits, hi first
  // A random (RFC 4122 version 4) UUID from the OS entropy source; never nil.
  static StoreUuid Generate();
  friend bool operator==(const StoreUuid&, const StoreUuid&) = default;
};

struct PackHeader {
  uint32_t format_version = pack_format::kFormatVersion;
  uint32_t header_bytes = pack_format::kHeaderPageBytes;
  StoreUuid store_uuid;
  Geometry geometry;
  NamespaceId namespace_id;
  uint64_t pack_count = 0;
  uint64_t data_offset = pack_format::kDefaultDataOffset;
  uint64_t creation_time_unix_ns = 0;
  friend bool operator==(const PackHeader&, const PackHeader&) = default;
};

// Fills `page` with the encoded header: magic, fields, checksum, zeroed reserved bytes.
void EncodePackHeader(const PackHeader& header,
                      std::span<uint8_t, pack_format::kHeaderPageBytes> page);

// Parses and validates a header page (see the file comment for the error of each failure).
// `bytes` may be longer than a page; only the first kHeaderPageBytes are looked at.
Result<PackHeader> DecodePackHeader(std::span<const uint8_t> bytes);

}  // namespace rangekv
