// Metadata snapshot format constants, mirroring docs/pack-format.md "Metadata snapshot".
// Constants only: the codec is snapshot.cc. Every change to a value here is a format change
// and bumps kSnapshotVersion.
//
// File layout (all integers little-endian, encoded field by field):
//   [0, 32)                        preamble
//   section IDENTITY               16-byte section header + kIdentityBodyBytes
//   section DIRECTORY              16-byte section header + Directory::Serialize() bytes
//   section DIGESTS                16-byte section header + digest tables
//   [total_bytes - 8, total_bytes) checksum: XXH3-64 of every preceding byte
// The sections appear exactly once each, in this order.
#pragma once

#include <cstdint>

#include "base/units.h"
#include "pack/format.h"

namespace rangekv::snapshot_format {

// "RANGEKVS" as 8 ASCII bytes at offset 0.
inline constexpr char kMagic[8] = {'R', 'A', 'N', 'G', 'E', 'K', 'V', 'S'};
inline constexpr uint32_t kSnapshotVersion = 1;

// A byte range inside a fixed-size structure.
struct Field {
  uint32_t offset;
  uint32_t size;
  constexpr uint32_t end() const { return offset + size; }
};

// ---- preamble -------------------------------------------------------------------------------
// Offsets 0 (magic) and 8 (version) are frozen for every future version.
inline constexpr Field kMagicField{0, 8};
inline constexpr Field kVersionField{8, 4};         // u32
inline constexpr Field kPreambleBytesField{12, 4};  // u32, == kPreambleBytes
inline constexpr Field kTotalBytesField{16, 8};     // u64 whole file, checksum included
inline constexpr Field kSectionCountField{24, 4};   // u32, == kSectionCount
inline constexpr Field kFlagsField{28, 4};          // u32, 0
inline constexpr uint32_t kPreambleBytes = 32;

// ---- sections -------------------------------------------------------------------------------
// Section header: u32 tag, u32 flags (0), u64 body_bytes; the body follows.
inline constexpr uint32_t kSectionHeaderBytes = 16;
inline constexpr uint32_t kTagIdentity = 0x544E4449;   // "IDNT" little-endian
inline constexpr uint32_t kTagDirectory = 0x59524944;  // "DIRY"
inline constexpr uint32_t kTagDigests = 0x54534744;    // "DGST"
inline constexpr uint32_t kSectionCount = 3;

// IDENTITY body: what binds the snapshot to one pack file, plus epochs.
inline constexpr Field kIdStoreUuid{0, 16};          // u64 lo, u64 hi
inline constexpr Field kIdNamespace{16, 16};         // u64 lo, u64 hi
inline constexpr Field kIdLayers{32, 4};             // u32 L
inline constexpr Field kIdDtypeBytes{36, 4};         // u32
inline constexpr Field kIdKvHeadsPerRank{40, 4};     // u32
inline constexpr Field kIdHeadSize{44, 4};           // u32
inline constexpr Field kIdMlaLatent{48, 4};          // u32
inline constexpr Field kIdBlockSize{52, 4};          // u32
inline constexpr Field kIdTokenBytes{56, 8};         // u64 s
inline constexpr Field kIdStripeBytes{64, 8};        // u64 W
inline constexpr Field kIdTokensPerStripe{72, 8};    // u64 T
inline constexpr Field kIdPackBytes{80, 8};          // u64 L*W
inline constexpr Field kIdPackCount{88, 8};          // u64 N
inline constexpr Field kIdDataOffset{96, 8};         // u64
inline constexpr Field kIdPackFileBytes{104, 8};     // u64 size of the pack file at save
inline constexpr Field kIdPackCreationTime{112, 8};  // u64 the pack header's creation time, ns
inline constexpr Field kIdStoreEpoch{120, 8};        // u64 epoch of the session that saved
inline constexpr Field kIdMaxGeneration{128, 8};     // u64 largest slot generation ever issued
inline constexpr Field kIdSavedTime{136, 8};         // u64 unix time of the save, ns
inline constexpr uint32_t kIdentityBodyBytes = 144;

// DIGESTS body: u32 digest_block_tokens, u32 table_count, u64 digest_seed, then table_count
// tables, each a 32-byte header { u32 slot, u32 layers, u64 generation, u64 stored_tokens,
// u32 blocks_per_layer, u32 reserved (0) } followed by layers x blocks_per_layer u64 digests,
// layer-major (all blocks of layer 0, then layer 1, ...).
inline constexpr uint32_t kDigestsFixedBytes = 16;
inline constexpr uint32_t kDigestTableHeaderBytes = 32;

// ---- trailer --------------------------------------------------------------------------------
inline constexpr uint32_t kChecksumBytes = 8;
inline constexpr uint64_t kChecksumSeed = 0x52616E67654B5653ull;  // "RangeKVS"

// ---- bounds on values read from disk --------------------------------------------------------
// A snapshot is KiB to MiB in practice (the directory's labels plus 8 bytes per digest block;
// 8 KiB of digests per 1 GiB pack at the default block). The bound keeps a corrupted length
// from driving an allocation; sections are further bounded by the remaining bytes.
inline constexpr uint64_t kMaxSnapshotBytes = 1 * kGiB;
inline constexpr uint64_t kMinSnapshotBytes = kPreambleBytes + 3 * kSectionHeaderBytes +
                                              kIdentityBodyBytes + kDigestsFixedBytes +
                                              kChecksumBytes;
// Epochs are < 2^32 so that generation floors (epoch << 32) fit in a u64.
inline constexpr uint64_t kMaxStoreEpoch = (uint64_t{1} << 32) - 2;

static_assert(sizeof(kMagic) == kMagicField.size);
static_assert(kMagicField.end() == kVersionField.offset);
static_assert(kVersionField.end() == kPreambleBytesField.offset);
static_assert(kPreambleBytesField.end() == kTotalBytesField.offset);
static_assert(kTotalBytesField.end() == kSectionCountField.offset);
static_assert(kSectionCountField.end() == kFlagsField.offset);
static_assert(kFlagsField.end() == kPreambleBytes);
static_assert(kIdStoreUuid.end() == kIdNamespace.offset);
static_assert(kIdNamespace.end() == kIdLayers.offset);
static_assert(kIdLayers.end() == kIdDtypeBytes.offset);
static_assert(kIdDtypeBytes.end() == kIdKvHeadsPerRank.offset);
static_assert(kIdKvHeadsPerRank.end() == kIdHeadSize.offset);
static_assert(kIdHeadSize.end() == kIdMlaLatent.offset);
static_assert(kIdMlaLatent.end() == kIdBlockSize.offset);
static_assert(kIdBlockSize.end() == kIdTokenBytes.offset);
static_assert(kIdTokenBytes.end() == kIdStripeBytes.offset);
static_assert(kIdStripeBytes.end() == kIdTokensPerStripe.offset);
static_assert(kIdTokensPerStripe.end() == kIdPackBytes.offset);
static_assert(kIdPackBytes.end() == kIdPackCount.offset);
static_assert(kIdPackCount.end() == kIdDataOffset.offset);
static_assert(kIdDataOffset.end() == kIdPackFileBytes.offset);
static_assert(kIdPackFileBytes.end() == kIdPackCreationTime.offset);
static_assert(kIdPackCreationTime.end() == kIdStoreEpoch.offset);
static_assert(kIdStoreEpoch.end() == kIdMaxGeneration.offset);
static_assert(kIdMaxGeneration.end() == kIdSavedTime.offset);
static_assert(kIdSavedTime.end() == kIdentityBodyBytes);
// Every section starts 8-byte aligned when the bodies before it are multiples of 8.
static_assert(kPreambleBytes % 8 == 0 && kSectionHeaderBytes % 8 == 0 &&
              kIdentityBodyBytes % 8 == 0 && kDigestTableHeaderBytes % 8 == 0);
// Digest tables of the largest pack file fit the bound only for modest block counts; the
// decoder checks every table against the bytes actually present, so this is not assumed.
static_assert(pack_format::kMaxPackCount <= (uint64_t{1} << 32), "slots are u32");
static_assert(kMaxStoreEpoch < (uint64_t{1} << 32));

}  // namespace rangekv::snapshot_format
