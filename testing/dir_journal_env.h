// DirJournalEnv: a crash model for directory entries, what FaultInjectingEnv
// (testing/fault_env.h) does not model. Creations, renames and deletions in a directory are
// volatile until SyncDir(dir); Crash(keep_mask) undoes the pending ones whose bit is 0, newest
// first, so any subset of unsynced entry operations may survive a power loss (POSIX promises no
// order among them). Contents are not its concern: layer it over FaultInjectingEnv and call
// DropUnsyncedData() first.
//
// Thread-safety: for single-threaded tests.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "env/env.h"

namespace rangekv::testing {

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

}  // namespace rangekv::testing
