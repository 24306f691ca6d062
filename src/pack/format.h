// Pack file format constants, mirroring docs/pack-format.md. Constants only: no code that
// reads or writes bytes lives here (that is pack_header.cc), so the document and this header
// can be compared line by line. Every change to a value here is a format change and bumps
// kFormatVersion (see "Versioning" in docs/pack-format.md).
//
// File layout:
//   [0, kHeaderPageBytes)             header page (fields below, then reserved zeros)
//   [kHeaderPageBytes, data_offset)   reserved, zeros
//   [data_offset + i*pack_bytes, +pack_bytes)   pack slot i, for i in [0, pack_count)
// Inside a slot, layer l's stripe is [l*W, (l+1)*W) and token t of that stripe is at t*s.
//
// All integers are little-endian and encoded field by field (never by copying a struct).
#pragma once

#include <cstdint>

#include "base/units.h"
#include "rangekv/geometry.h"

namespace rangekv::pack_format {

// "RANGEKVP" as 8 ASCII bytes at offset 0.
inline constexpr char kMagic[8] = {'R', 'A', 'N', 'G', 'E', 'K', 'V', 'P'};
// The version this build writes and the only one it reads.
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr uint64_t kHeaderPageBytes = 4096;

// A header field: byte offset inside the header page and encoded size.
struct Field {
  uint32_t offset;
  uint32_t size;
  constexpr uint32_t end() const { return offset + size; }
};

// Offsets 0 (magic) and 8 (version) are frozen for every future version: a reader must be
// able to tell "not a pack file" from "a pack file of a version I do not understand".
inline constexpr Field kMagicField{0, 8};
inline constexpr Field kVersionField{8, 4};           // u32
inline constexpr Field kHeaderBytesField{12, 4};      // u32, == kHeaderPageBytes
inline constexpr Field kStoreUuidField{16, 16};       // u64 lo, then u64 hi
inline constexpr Field kLayersField{32, 4};           // u32 L
inline constexpr Field kDtypeBytesField{36, 4};       // u32
inline constexpr Field kKvHeadsPerRankField{40, 4};   // u32 (0 for MLA)
inline constexpr Field kHeadSizeField{44, 4};         // u32 (0 for MLA)
inline constexpr Field kMlaLatentField{48, 4};        // u32 (0 unless MLA)
inline constexpr Field kBlockSizeField{52, 4};        // u32 paged-KV block size, tokens
inline constexpr Field kTokenBytesField{56, 8};       // u64 s
inline constexpr Field kStripeBytesField{64, 8};      // u64 W
inline constexpr Field kTokensPerStripeField{72, 8};  // u64 T = floor(W / s)
inline constexpr Field kPackBytesField{80, 8};        // u64 L*W
inline constexpr Field kNamespaceField{88, 16};       // u64 lo, then u64 hi
inline constexpr Field kPackCountField{104, 8};       // u64 N
inline constexpr Field kDataOffsetField{112, 8};      // u64 byte offset of slot 0
inline constexpr Field kCreationTimeField{120, 8};    // u64 unix time, ns
inline constexpr Field kChecksumField{128, 8};        // u64 XXH3-64 of [0, 128), seed 0
// Bytes [kReservedBegin, kHeaderPageBytes) are written as zeros and not interpreted.
inline constexpr uint32_t kReservedBegin = kChecksumField.end();
// The checksum covers every field before it.
inline constexpr uint32_t kChecksumCoveredBytes = kChecksumField.offset;
inline constexpr uint64_t kChecksumSeed = 0;

// Where slot 0 starts in files this build creates. 2 MiB rather than the 4 KiB minimum: with
// the default W (a multiple of 2 MiB) every stripe then starts on a 2 MiB boundary, which
// matches transparent huge pages of the page cache and tmpfs, RAID chunk and SSD erase-unit
// granularity and file-system extent alignment; the price is under 2 MiB per pack file of at
// least tens of MiB. Readers accept any data_offset that is a multiple of kIoAlignment in
// [kHeaderPageBytes, kMaxDataOffset], so this choice can change without a version bump.
inline constexpr uint64_t kDefaultDataOffset = 2 * kMiB;
inline constexpr uint64_t kDataOffsetAlignment = kIoAlignment;  // what a reader requires
inline constexpr uint64_t kMaxDataOffset = 1 * kGiB;

// Bounds on values read from disk (and accepted by Create). They are far beyond any real
// model or drive, and exist so that a corrupted field can never drive an allocation, a loop
// or an overflow.
inline constexpr uint32_t kMaxLayers = 4096;
inline constexpr uint32_t kMaxDtypeBytes = 16;
inline constexpr uint64_t kMaxStripeBytes = 1 * kGiB;
inline constexpr uint64_t kMaxPackCount = uint64_t{1} << 20;
inline constexpr uint64_t kMaxFileBytes = uint64_t{1} << 52;  // 4 PiB, well below INT64_MAX

// ---- static checks tying the layout together ---------------------------------------------
static_assert(sizeof(kMagic) == kMagicField.size);
static_assert(kMagicField.offset == 0 && kVersionField.offset == 8, "frozen forever");
static_assert(kMagicField.end() == kVersionField.offset);
static_assert(kVersionField.end() == kHeaderBytesField.offset);
static_assert(kHeaderBytesField.end() == kStoreUuidField.offset);
static_assert(kStoreUuidField.end() == kLayersField.offset);
static_assert(kLayersField.end() == kDtypeBytesField.offset);
static_assert(kDtypeBytesField.end() == kKvHeadsPerRankField.offset);
static_assert(kKvHeadsPerRankField.end() == kHeadSizeField.offset);
static_assert(kHeadSizeField.end() == kMlaLatentField.offset);
static_assert(kMlaLatentField.end() == kBlockSizeField.offset);
static_assert(kBlockSizeField.end() == kTokenBytesField.offset);
static_assert(kTokenBytesField.end() == kStripeBytesField.offset);
static_assert(kStripeBytesField.end() == kTokensPerStripeField.offset);
static_assert(kTokensPerStripeField.end() == kPackBytesField.offset);
static_assert(kPackBytesField.end() == kNamespaceField.offset);
static_assert(kNamespaceField.end() == kPackCountField.offset);
static_assert(kPackCountField.end() == kDataOffsetField.offset);
static_assert(kDataOffsetField.end() == kCreationTimeField.offset);
static_assert(kCreationTimeField.end() == kChecksumField.offset);
static_assert(kChecksumField.end() == kReservedBegin);
static_assert(kReservedBegin <= kHeaderPageBytes);
// 8-byte fields are 8-byte aligned inside the page (keeps the table readable, costs nothing).
static_assert(kStoreUuidField.offset % 8 == 0 && kTokenBytesField.offset % 8 == 0 &&
              kNamespaceField.offset % 8 == 0 && kChecksumField.offset % 8 == 0);
// The header page is one I/O unit, so it can be read and written with O_DIRECT.
static_assert(kHeaderPageBytes == kIoAlignment);
static_assert(kDefaultDataOffset >= kHeaderPageBytes);
static_assert(kDefaultDataOffset % kDataOffsetAlignment == 0);
static_assert(kMaxDataOffset % kDataOffsetAlignment == 0);
// W is a multiple of kIoAlignment (DeriveGeometry enforces it), so with an aligned
// data_offset every slot and every stripe starts on an I/O-aligned offset.
static_assert(kDefaultStripeBytes % kIoAlignment == 0);
static_assert(kDefaultStripeBytes % kDefaultDataOffset == 0,
              "default stripes start on data-offset (2 MiB) boundaries");
static_assert(kMaxPackCount <= (uint64_t{1} << 32), "pack slots are u32 in PackRecord");
// Even the largest bounded geometry and count cannot overflow an off_t (the code still uses
// checked arithmetic, and kMaxFileBytes is the bound actually enforced).
static_assert(kMaxStripeBytes * kMaxLayers * kMaxPackCount + kMaxDataOffset <= uint64_t{INT64_MAX});
static_assert(kMaxFileBytes <= uint64_t{INT64_MAX});

}  // namespace rangekv::pack_format
