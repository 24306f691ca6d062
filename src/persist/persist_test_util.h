// Test helpers for src/persist: a small store (pack file + index) that writes real payload,
// records digests and restores with verification, and DirJournalEnv, a crash model for
// directory entries. Test-only (linked into persist tests).
//
// DirJournalEnv models what FaultInjectingEnv does not: directory entries. Creations, renames
// and deletions in a directory are volatile until SyncDir(dir); Crash(keep_mask) undoes the
// pending ones whose bit is 0, newest first, so any subset of unsynced entry operations may
// survive a power loss (POSIX promises no order among them). Contents are not its concern:
// layer it over FaultInjectingEnv and call DropUnsyncedData() first.
//
// Thread-safety: DirJournalEnv is for single-threaded tests.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "directory/directory.h"
#include "env/env.h"
#include "pack/pack_file.h"
#include "persist/persistence.h"

namespace rangekv::persist::testing {

class DirJournalEnv final : public EnvWrapper {
 public:
  explicit DirJournalEnv(Env* base) : EnvWrapper(base) {}

  // Unsynced directory-entry operations, oldest first ("create x", "rename a -> b", ...).
  std::vector<std::string> Pending() const;
  size_t pending() const { return ops_.size(); }
  // Undoes pending op i when bit i of keep_mask is 0; then forgets all pending ops.
  Status Crash(uint64_t keep_mask);

  // Journalled; every other Env method forwards to the wrapped Env.
  Result<std::unique_ptr<File>> CreateFile(const std::string& path,
                                           const FileOptions& options) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status DeleteFile(const std::string& path) override;
  Status SyncDir(const std::string& dir) override;

 private:
  struct Op {
    enum class Kind { kCreate, kRename, kDelete } kind;
    std::string a, b;                  // create/delete: a; rename: a -> b
    std::optional<std::string> saved;  // rename: b's old contents; delete: a's contents
  };
  std::vector<Op> ops_;
};

// A tiny geometry: L=2, s=32 bytes, W=4096, T=128 tokens, 8 KiB packs.
Geometry TinyGeometry();
NamespaceId TinyNamespace(uint64_t salt = 0);

// The expected payload byte k of path token position p (token value v) in layer l.
uint8_t PayloadByte(int32_t v, uint64_t p, uint32_t l, uint64_t k);

// One open store: pack file + OpenIndex result.
struct TinyStore {
  std::optional<PackFile> pack;
  OpenedIndex index;

  // Creates (`create` = true) or opens the pack file in `dir` and runs OpenIndex.
  static Result<TinyStore> Open(Env* env, const std::string& dir, bool create,
                                const PersistenceOptions& base_options = {},
                                uint32_t pack_count = 8, uint64_t salt = 0);

  // MarkDirty, Reserve, write every new pack's payload, record digests, Publish.
  Status Store(const NamespaceId& ns, std::span<const int32_t> tokens);
  // Looks up `tokens` and restores every record's bytes with digest verification and a
  // byte-for-byte comparison with PayloadByte. Returns the hit (0 on a miss).
  Result<uint64_t> Restore(const NamespaceId& ns, std::span<const int32_t> tokens);
  Status SaveClean();
};

std::vector<int32_t> Tokens(uint64_t n, int32_t first);

}  // namespace rangekv::persist::testing
