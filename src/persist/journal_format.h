// Publication journal format constants, mirroring docs/pack-format.md "Publication journal".
// Constants only: the codec is journal.cc. Every change to a value here is a format change and
// bumps kJournalVersion.
//
// File (journal.rkv in the store directory), all integers little-endian, field by field:
//   [0, kFileHeaderBytes)   file header: magic "RANGEKVJ", u32 version, u32 header_bytes,
//                           u64 store_uuid lo, u64 store_uuid hi, u64 base_epoch (the store
//                           epoch of the snapshot it extends), u64 XXH3-64 of the 40 bytes
//                           before it (seed kHeaderChecksumSeed)
//   records, back to back, each:
//     u32 payload_bytes  u16 type  u16 flags (0)  u64 sequence (1, 2, ... without gaps)
//     payload_bytes of payload
//     u64 XXH3-64 (seed kRecordChecksumSeed) of the record's header and payload
// A reader keeps records up to the last intact one: the first short, checksum-failing,
// out-of-sequence or malformed record ends the journal (its tail is dropped with a reason).
#pragma once

#include <cstdint>

namespace rangekv::journal_format {

// "RANGEKVJ" as 8 ASCII bytes at offset 0.
inline constexpr char kMagic[8] = {'R', 'A', 'N', 'G', 'E', 'K', 'V', 'J'};
inline constexpr uint32_t kJournalVersion = 1;

struct Field {
  uint32_t offset;
  uint32_t size;
  constexpr uint32_t end() const { return offset + size; }
};

// ---- file header ----------------------------------------------------------------------------
inline constexpr Field kMagicField{0, 8};
inline constexpr Field kVersionField{8, 4};          // u32
inline constexpr Field kHeaderBytesField{12, 4};     // u32, == kFileHeaderBytes
inline constexpr Field kStoreUuidField{16, 16};      // u64 lo, u64 hi
inline constexpr Field kBaseEpochField{32, 8};       // u64
inline constexpr Field kHeaderChecksumField{40, 8};  // u64
inline constexpr uint32_t kFileHeaderBytes = 48;
inline constexpr uint64_t kHeaderChecksumSeed = 0x52616E67654B564Aull;  // "RangeKVJ"

// ---- records --------------------------------------------------------------------------------
inline constexpr uint32_t kRecordHeaderBytes =
    16;  // u32 payload_bytes, u16 type, u16 flags, u64 seq
inline constexpr uint32_t kRecordChecksumBytes = 8;
inline constexpr uint64_t kRecordChecksumSeed = 0x4A726E6C52656364ull;  // "JrnlRecd"

enum RecordType : uint16_t {
  // A pack made visible. Payload:
  //   u64 ns.lo  u64 ns.hi  u32 slot  u32 layers  u64 generation
  //   u64 path_tokens (P: the pack holds path tokens [P - stored_tokens, P))
  //   u64 stored_tokens  u32 digest_block_tokens  u32 blocks_per_layer
  //   P x i32 path token   layers x blocks_per_layer x u64 payload digest (layer-major)
  kPublish = 1,
  // A pack removed from the index (eviction or invalidation). Payload: u32 slot, u32 0,
  // u64 generation.
  kRemove = 2,
  // A new session (store epoch) starts appending. Payload: u64 epoch, u64 generation_floor.
  kEpoch = 3,
};
inline constexpr uint32_t kPublishFixedBytes = 56;
inline constexpr uint32_t kRemoveBytes = 16;
inline constexpr uint32_t kEpochBytes = 16;

// ---- bounds on values read from disk --------------------------------------------------------
// A record is at most a path of tokens plus its digests: the bound keeps a corrupted length
// from driving an allocation; the journal itself is bounded by the checkpoint (see journal.h).
inline constexpr uint32_t kMaxRecordPayloadBytes = 64u << 20;
inline constexpr uint64_t kMaxJournalBytes = uint64_t{1} << 30;
inline constexpr uint64_t kMaxPathTokens = uint64_t{1} << 24;

static_assert(kMagicField.end() == kVersionField.offset);
static_assert(kVersionField.end() == kHeaderBytesField.offset);
static_assert(kHeaderBytesField.end() == kStoreUuidField.offset);
static_assert(kStoreUuidField.end() == kBaseEpochField.offset);
static_assert(kBaseEpochField.end() == kHeaderChecksumField.offset);
static_assert(kHeaderChecksumField.end() == kFileHeaderBytes);
static_assert(kPublishFixedBytes == 8 + 8 + 4 + 4 + 8 + 8 + 8 + 4 + 4);

}  // namespace rangekv::journal_format
