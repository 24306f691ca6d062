// Directory snapshot format constants (the DIRECTORY section of the metadata snapshot),
// mirroring docs/pack-format.md "Directory section". Constants only: the codec is
// Directory::Serialize / Directory::Deserialize in directory.cc. Every change to a value here
// is a format change and bumps kVersion.
//
// Layout (all integers little-endian, encoded field by field):
//   header (kHeaderBytes): u32 magic 'RKVD'  u16 version  u16 flags (0)
//                          u64 total_bytes (including the checksum)
//                          u64 owner_epoch  u32 pack_slots  u64 tokens_per_pack
//   pack_slots x u64 generation
//   u32 visible_count, visible_count x u32 slot            (LRU order, oldest first)
//   u32 namespace_count, then per namespace (ascending NamespaceId):
//     u64 ns.lo  u64 ns.hi  u32 node_count
//     node_count x { u32 parent (0: the root, i: the i-th node of this namespace, 1-based)
//                    u32 slot  u64 pack_offset  u32 label_len }   (kNodeFixedBytes)
//                  followed by label_len x i32 token
//                  (preorder: a parent precedes its children)
//   u64 checksum = XXH3-64(all preceding bytes, kChecksumSeed)
// Only visible packs are written: in-flight stores and leases die with the process.
#pragma once

#include <cstdint>

namespace rangekv::directory_format {

inline constexpr uint32_t kMagic = 0x44564B52;  // "RKVD" little-endian
inline constexpr uint16_t kVersion = 1;
inline constexpr uint64_t kChecksumSeed = 0x52616e67654b5644ull;  // "RangeKVD"

// A header field: byte offset and encoded size.
struct Field {
  uint32_t offset;
  uint32_t size;
  constexpr uint32_t end() const { return offset + size; }
};

inline constexpr Field kMagicField{0, 4};           // u32
inline constexpr Field kVersionField{4, 2};         // u16
inline constexpr Field kFlagsField{6, 2};           // u16, 0
inline constexpr Field kTotalBytesField{8, 8};      // u64
inline constexpr Field kOwnerEpochField{16, 8};     // u64
inline constexpr Field kPackSlotsField{24, 4};      // u32
inline constexpr Field kTokensPerPackField{28, 8};  // u64
inline constexpr uint32_t kHeaderBytes = 36;

inline constexpr uint32_t kGenerationBytes = 8;  // per slot
inline constexpr uint32_t kSlotIdBytes = 4;      // per visible pack
inline constexpr uint32_t kNamespaceHeaderBytes = 8 + 8 + 4;
inline constexpr uint32_t kNodeFixedBytes = 4 + 4 + 8 + 4;
inline constexpr uint32_t kTokenBytes = 4;
inline constexpr uint32_t kChecksumBytes = 8;

static_assert(kMagicField.end() == kVersionField.offset);
static_assert(kVersionField.end() == kFlagsField.offset);
static_assert(kFlagsField.end() == kTotalBytesField.offset);
static_assert(kTotalBytesField.end() == kOwnerEpochField.offset);
static_assert(kOwnerEpochField.end() == kPackSlotsField.offset);
static_assert(kPackSlotsField.end() == kTokensPerPackField.offset);
static_assert(kTokensPerPackField.end() == kHeaderBytes);

}  // namespace rangekv::directory_format
