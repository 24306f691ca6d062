// PackFile: one rank's preallocated pack file (format: docs/pack-format.md, format.h).
//
// A pack file is a 4 KiB header page, reserved zeros up to data_offset, then N pack slots of
// L*W bytes each. Create() makes a new file of its final size (File::Allocate, so a later
// write cannot fail for lack of space) and durably writes its header. Open() validates an
// existing file against what the caller expects and returns a distinct error for each way it
// can be unusable. Neither ever rewrites an existing file: a failed Open leaves the file
// byte-for-byte as it was (Open never writes at all), and Create refuses an existing path.
//
// What Open() reports, in the order it checks:
//   the path does not exist                             -> kNotFound (from the Env)
//   fewer than 8 bytes or wrong magic                   -> kInvalidArgument ("not a pack file")
//   format version not understood                       -> kWrongVersion
//   file shorter than the header page                   -> kTruncated
//   header checksum mismatch                            -> kCorruption
//   impossible header fields (absurd pack count, ...)   -> kCorruption
//   expectation.store_uuid given and different          -> kWrongStore
//   expectation.geometry given and different            -> kGeometryMismatch
//   expectation.namespace_id given and different        -> kNamespaceMismatch
//   file size < data_offset + N * pack_bytes            -> kTruncated
//
// Addressing and the slot -> (file, offset) mapping are PackLayout's (pack_layout.h); this
// class forwards to it so that rule stays in one place.
//
// Thread-safety: after Create/Open returns, a PackFile is immutable; its accessors may be
// called from any thread. The File it hands out supports concurrent positional I/O
// (env/env.h). Move-only: it owns the open file.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "pack/format.h"
#include "pack/pack_header.h"
#include "pack/pack_layout.h"
#include "rangekv/env.h"
#include "rangekv/geometry.h"
#include "rangekv/status.h"

namespace rangekv {

struct PackCreateOptions {
  DirectIo direct = DirectIo::kOff;
  // Nil (the default): a fresh random UUID. Tools and tests may fix one.
  StoreUuid store_uuid{};
  // Where slot 0 starts; must be a multiple of kIoAlignment (see format.h for the default).
  uint64_t data_offset = pack_format::kDefaultDataOffset;
  // Permission bits of the new file, exactly (FileOptions::permissions).
  uint32_t permissions = 0600;
};

struct PackOpenOptions {
  OpenMode mode = OpenMode::kReadWrite;
  DirectIo direct = DirectIo::kOff;
};

// What the caller knows about the file it is opening. Each unset field means "any"
// (inspect/fsck open with PackExpectation::Any() and read the identity from the header).
struct PackExpectation {
  std::optional<StoreUuid> store_uuid;
  std::optional<Geometry> geometry;
  std::optional<NamespaceId> namespace_id;
  static PackExpectation Any() { return {}; }
};

class PackFile {
 public:
  // Creates `path` (which must not exist) holding `pack_count` slots of `geometry`, fully
  // allocated, with a synced header and a synced directory entry.
  // Errors: kInvalidArgument (geometry fails ValidatePackGeometry, pack count not in
  // [1, kMaxPackCount], bad data offset, file would exceed kMaxFileBytes), kAlreadyExists,
  // kNoSpace / kIoError from the Env. On any error after the file was created, the partial
  // file is deleted (best effort; a leftover fails Open as "not a pack file" or kCorruption).
  static Result<PackFile> Create(Env* env, const std::string& path, const Geometry& geometry,
                                 const NamespaceId& namespace_id, uint64_t pack_count,
                                 const PackCreateOptions& options = {});

  // Opens and validates an existing pack file (see the file comment for each error).
  static Result<PackFile> Open(Env* env, const std::string& path,
                               const PackExpectation& expectation,
                               const PackOpenOptions& options = {});

  PackFile(PackFile&&) noexcept = default;
  PackFile& operator=(PackFile&&) noexcept = default;
  PackFile(const PackFile&) = delete;
  PackFile& operator=(const PackFile&) = delete;
  ~PackFile() = default;

  const PackHeader& header() const { return header_; }
  const StoreUuid& uuid() const { return header_.store_uuid; }
  const Geometry& geometry() const { return header_.geometry; }
  const NamespaceId& namespace_id() const { return header_.namespace_id; }
  uint64_t pack_count() const { return header_.pack_count; }
  uint64_t data_offset() const { return header_.data_offset; }
  uint64_t creation_time_unix_ns() const { return header_.creation_time_unix_ns; }
  // N * L * W.
  uint64_t capacity_bytes() const { return layout_.capacity_bytes(); }
  const PackLayout& layout() const { return layout_; }
  const std::string& path() const { return path_; }

  // The open file (file 0 of the store). Owned by this PackFile; valid while it lives.
  File* file() const { return file_.get(); }
  // The file a PackLocation / Span names; nullptr for an index this store does not have.
  File* file_at(uint32_t file_index) const { return file_index == 0 ? file_.get() : nullptr; }

  // See PackLayout::Locate / PackLayout::Address.
  Result<PackLocation> Locate(uint64_t slot) const { return layout_.Locate(slot); }
  uint64_t Address(uint64_t slot, uint32_t layer, uint64_t token_in_pack) const {
    return layout_.Address(slot, layer, token_in_pack);
  }

 private:
  PackFile(std::string path, PackHeader header, PackLayout layout, std::unique_ptr<File> file)
      : path_(std::move(path)), header_(header), layout_(layout), file_(std::move(file)) {}

  std::string path_;
  PackHeader header_;
  PackLayout layout_;
  std::unique_ptr<File> file_;
};

}  // namespace rangekv
