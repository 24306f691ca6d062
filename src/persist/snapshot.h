// The metadata snapshot: what a clean shutdown writes so the next open can trust the index
// (format: snapshot_format.h and docs/pack-format.md "Metadata snapshot").
//
// A snapshot binds three things to one pack file: the directory's serialized state
// (Directory::Serialize(): namespaces, tree, visible packs with generations and LRU order, every
// slot's generation), the payload digests of every visible pack, and the identity of the pack
// file it describes (store UUID, geometry, namespace, pack count, data offset, creation time and
// exact file size). It also carries the store epoch of the session that wrote it and the largest
// generation that session's directory had issued, so the next epoch can be chosen above both.
//
// DecodeSnapshot parses untrusted bytes: it never reads past `bytes`, checks every length
// against the bytes that remain before allocating, and bounds every count by the identity
// section (pack count, layers, tokens per pack). Each way it can fail has its own
// SnapshotDefect (and status code), so recovery can log a distinct reason:
//   fewer bytes than the fixed parts, or total_bytes > size -> kTruncated     (truncated)
//   wrong magic                                             -> kCorruption    (bad_magic)
//   format version != kSnapshotVersion                      -> kWrongVersion  (wrong_version)
//   total_bytes above kMaxSnapshotBytes                     -> kCorruption    (too_large)
//   checksum mismatch (or total_bytes < size)               -> kCorruption    (checksum)
//   impossible structure behind a valid checksum            -> kCorruption    (malformed)
// CheckSnapshotBinding then compares the identity with the pack file actually opened.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "pack/pack_header.h"
#include "persist/payload_digests.h"
#include "rangekv/geometry.h"
#include "rangekv/status.h"

namespace rangekv::persist {

// Which pack file a snapshot describes.
struct SnapshotIdentity {
  StoreUuid store_uuid;
  NamespaceId namespace_id;
  Geometry geometry;
  uint64_t pack_count = 0;
  uint64_t data_offset = 0;
  uint64_t pack_file_bytes = 0;  // File::Size() of the pack file
  uint64_t pack_creation_time_unix_ns = 0;

  // The identity of an opened pack file whose size is `file_bytes`.
  static SnapshotIdentity ForPack(const PackHeader& header, uint64_t file_bytes);
  friend bool operator==(const SnapshotIdentity&, const SnapshotIdentity&) = default;
};

struct Snapshot {
  SnapshotIdentity identity;
  uint64_t store_epoch = 0;     // epoch of the session that saved (< 2^32 - 1)
  uint64_t max_generation = 0;  // largest slot generation the saved directory had issued
  uint64_t saved_time_unix_ns = 0;
  std::vector<uint8_t> directory;  // Directory::Serialize()
  uint64_t digest_block_tokens = 0;
  uint64_t digest_seed = kPayloadDigestSeed;
  std::vector<PackDigests> digests;  // ascending slot, at most one per slot
  friend bool operator==(const Snapshot&, const Snapshot&) = default;
};

enum class SnapshotDefect : uint8_t {
  kNone = 0,
  kTruncated,
  kBadMagic,
  kWrongVersion,
  kTooLarge,
  kChecksum,
  kMalformed,
};
std::string_view SnapshotDefectName(SnapshotDefect defect);  // "truncated", "checksum", ...

// Encodes a snapshot. REQUIRES: the fields obey what DecodeSnapshot checks (the encoder does
// not validate; tests use it to craft snapshots with valid checksums around bad fields).
std::vector<uint8_t> EncodeSnapshot(const Snapshot& snapshot);

// Parses and validates (see the file comment). On failure `defect` (when given) says which
// check failed; on success it is kNone.
Result<Snapshot> DecodeSnapshot(std::span<const uint8_t> bytes, SnapshotDefect* defect = nullptr);

// Why a decoded snapshot does not describe the pack file `actual`.
enum class BindingMismatch : uint8_t {
  kNone = 0,
  kStoreUuid,      // another store's snapshot                      kWrongStore
  kGeometry,       // another model shape / dtype / W               kGeometryMismatch
  kNamespace,      // another namespace                             kNamespaceMismatch
  kPackLayout,     // same UUID, other pack count / data offset / creation time  kWrongStore
  kPackFileBytes,  // the pack file's size changed (truncated or extended)      kTruncated
};
std::string_view BindingMismatchName(BindingMismatch mismatch);

// OK when `snapshot` describes `actual`; otherwise the status of the first mismatch in the
// order of the enum above, with both values in the message, and `mismatch` set.
Status CheckSnapshotBinding(const SnapshotIdentity& snapshot, const SnapshotIdentity& actual,
                            BindingMismatch* mismatch = nullptr);

}  // namespace rangekv::persist
