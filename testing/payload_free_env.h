// PayloadFreeEnv: a file seam that keeps only file headers. With the count-only device
// (testing/count_only_device.h) the whole pipeline runs at the paper's full 6 GiB geometry with
// no payload bytes, so its work-unit counters can be asserted at full size.
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "rangekv/env.h"

namespace rangekv::testing {

// An in-memory Env that keeps the first kKeptBytes of each file (headers) and drops payload:
// writes beyond succeed and store nothing, reads beyond succeed and leave the buffer untouched.
class PayloadFreeEnv final : public Env {
 public:
  static constexpr uint64_t kKeptBytes = 64 * 1024;

  Result<std::unique_ptr<File>> OpenFile(const std::string& path,
                                         const FileOptions& options) override;
  Result<std::unique_ptr<File>> CreateFile(const std::string& path,
                                           const FileOptions& options) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status DeleteFile(const std::string& path) override;
  bool FileExists(const std::string& path) override;
  Status CreateDir(const std::string&) override { return OkStatus(); }
  Status SyncDir(const std::string&) override { return OkStatus(); }
  // In memory: the store directory and its files always read as this user's, owner-only.
  Result<PathInfo> Stat(const std::string& path) override;
  Status SetPermissions(const std::string&, uint32_t) override { return OkStatus(); }
  // In memory too: a lock is a name in a set while its FileLock lives.
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path, const std::string& holder,
                                             uint32_t permissions) override;
  Result<std::optional<std::string>> LockHolder(const std::string& path) override;

  struct FileState {
    Mutex mu;
    uint64_t size GUARDED_BY(mu) = 0;
    std::vector<uint8_t> head GUARDED_BY(mu);
  };

 private:
  Mutex mu_;
  std::map<std::string, std::shared_ptr<FileState>> files_ GUARDED_BY(mu_);
  std::shared_ptr<std::map<std::string, std::string>> locks_ =
      std::make_shared<std::map<std::string, std::string>>();  // path -> holder, under mu_
};

}  // namespace rangekv::testing
