#include "testing/payload_free_env.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "persist/store_access.h"

namespace rangekv::testing {

namespace {

class PayloadFreeFile final : public File {
 public:
  PayloadFreeFile(std::string path, std::shared_ptr<PayloadFreeEnv::FileState> state)
      : path_(std::move(path)), state_(std::move(state)) {}

  Result<uint64_t> ReadAt(uint64_t offset, void* buf, uint64_t size) override {
    MutexLock l(state_->mu);
    if (offset >= state_->size) return uint64_t{0};
    const uint64_t n = std::min(size, state_->size - offset);
    if (offset < PayloadFreeEnv::kKeptBytes) {
      const uint64_t kept = std::min(n, PayloadFreeEnv::kKeptBytes - offset);
      for (uint64_t i = 0; i < kept; ++i) {
        static_cast<uint8_t*>(buf)[i] =
            offset + i < state_->head.size() ? state_->head[offset + i] : 0;
      }
    }
    return n;  // payload beyond the kept head: the buffer is left untouched
  }
  Result<uint64_t> WriteAt(uint64_t offset, const void* buf, uint64_t size) override {
    MutexLock l(state_->mu);
    if (offset < PayloadFreeEnv::kKeptBytes) {
      const uint64_t kept = std::min(size, PayloadFreeEnv::kKeptBytes - offset);
      if (state_->head.size() < offset + kept) state_->head.resize(offset + kept, 0);
      std::memcpy(state_->head.data() + offset, buf, kept);
    }
    state_->size = std::max(state_->size, offset + size);
    return size;
  }
  Status Sync() override { return OkStatus(); }
  Status Allocate(uint64_t size) override {
    MutexLock l(state_->mu);
    state_->size = std::max(state_->size, size);
    return OkStatus();
  }
  Status Truncate(uint64_t size) override {
    MutexLock l(state_->mu);
    state_->size = size;
    if (state_->head.size() > size) state_->head.resize(size);
    return OkStatus();
  }
  Result<uint64_t> Size() override {
    MutexLock l(state_->mu);
    return state_->size;
  }
  bool direct() const override { return false; }
  uint64_t direct_alignment() const override { return 4096; }
  int fd() const override { return -1; }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  std::shared_ptr<PayloadFreeEnv::FileState> state_;
};

}  // namespace

Result<std::unique_ptr<File>> PayloadFreeEnv::OpenFile(const std::string& path,
                                                       const FileOptions&) {
  MutexLock l(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return NotFound(path);
  return std::unique_ptr<File>(new PayloadFreeFile(path, it->second));
}

Result<std::unique_ptr<File>> PayloadFreeEnv::CreateFile(const std::string& path,
                                                         const FileOptions&) {
  MutexLock l(mu_);
  if (files_.count(path) != 0) return Status(StatusCode::kAlreadyExists, path);
  auto state = std::make_shared<FileState>();
  files_[path] = state;
  return std::unique_ptr<File>(new PayloadFreeFile(path, state));
}

Status PayloadFreeEnv::RenameFile(const std::string& from, const std::string& to) {
  MutexLock l(mu_);
  auto it = files_.find(from);
  if (it == files_.end()) return NotFound(from);
  files_[to] = it->second;
  files_.erase(from);
  return OkStatus();
}

Status PayloadFreeEnv::DeleteFile(const std::string& path) {
  MutexLock l(mu_);
  return files_.erase(path) != 0 ? OkStatus() : NotFound(path);
}

bool PayloadFreeEnv::FileExists(const std::string& path) {
  MutexLock l(mu_);
  return files_.count(path) != 0;
}

Result<PathInfo> PayloadFreeEnv::Stat(const std::string& path) {
  PathInfo info;
  info.directory = !FileExists(path);
  info.owner_uid = persist::EffectiveUid();
  info.permissions = info.directory ? 0700 : 0600;
  return info;
}

namespace {
class MemoryLock final : public FileLock {
 public:
  MemoryLock(Mutex* mu, std::shared_ptr<std::map<std::string, std::string>> locks, std::string path)
      : mu_(mu), locks_(std::move(locks)), path_(std::move(path)) {}
  ~MemoryLock() override {
    MutexLock l(*mu_);
    locks_->erase(path_);
  }

 private:
  Mutex* mu_;
  std::shared_ptr<std::map<std::string, std::string>> locks_;
  std::string path_;
};
}  // namespace

Result<std::unique_ptr<FileLock>> PayloadFreeEnv::LockFile(const std::string& path,
                                                           const std::string& holder, uint32_t) {
  MutexLock l(mu_);
  auto [it, added] = locks_->emplace(path, holder);
  if (!added) return Status(StatusCode::kLocked, path + " is held by " + it->second);
  return std::unique_ptr<FileLock>(std::make_unique<MemoryLock>(&mu_, locks_, path));
}

Result<std::optional<std::string>> PayloadFreeEnv::LockHolder(const std::string& path) {
  MutexLock l(mu_);
  auto it = locks_->find(path);
  if (it == locks_->end()) return std::optional<std::string>();
  return std::optional<std::string>(it->second);
}

}  // namespace rangekv::testing
