// The file seam. Every byte RangeKV puts on or takes from a file system goes through Env and
// File, so a caller can substitute its own implementation through EngineOptions::env (the
// project's tests pass a fault-injecting one, testing/fault_env.h, that fails chosen operations
// from a seed and reproduces exactly). DefaultEnv() is the POSIX one; EnvWrapper is the base for
// an Env that changes a few operations of another and forwards the rest.
//
// Thread-safety: File::ReadAt/WriteAt may be called concurrently from many threads on the same
// File (positional I/O, no shared offset). Sync/Allocate/Truncate may run concurrently with
// ReadAt/WriteAt. Env methods are thread-safe.
//
// Error contract: every method returns a Status; partial transfers are reported, never
// silently treated as complete (ReadAt/WriteAt return the byte count actually moved, which may
// be less than asked; a return of 0 from ReadAt means end of file).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rangekv/status.h"

namespace rangekv {

enum class OpenMode {
  kReadOnly,
  kReadWrite,
};

// Whether a file opens with O_DIRECT: FileOptions::direct for one file, EngineOptions::direct_io
// for the pack file.
enum class DirectIo : uint8_t {
  kOff,        // buffered I/O through the page cache
  kPreferred,  // O_DIRECT when the file system supports it, buffered otherwise (tmpfs)
};

struct FileOptions {
  OpenMode mode = OpenMode::kReadWrite;
  DirectIo direct = DirectIo::kOff;
  // Permission bits a file created with these options gets, exactly: the process umask does not
  // apply (a store's files hold KV derived from users' prompts). Ignored when opening.
  uint32_t permissions = 0600;
};

// What Env::Stat reports about a path.
struct PathInfo {
  bool directory = false;
  uint32_t owner_uid = 0;
  uint32_t permissions = 0;  // the permission bits (mode & 07777)
};

class File {
 public:
  virtual ~File() = default;

  // Reads up to `size` bytes at `offset` into `buf`. Returns the bytes read (short counts are
  // legal and must be handled by the caller; 0 = end of file). Never retries internally.
  virtual Result<uint64_t> ReadAt(uint64_t offset, void* buf, uint64_t size) = 0;
  // Writes up to `size` bytes; returns the bytes written (may be short).
  virtual Result<uint64_t> WriteAt(uint64_t offset, const void* buf, uint64_t size) = 0;
  // Makes all completed writes durable (fdatasync).
  virtual Status Sync() = 0;
  // Reserves [0, size) on the medium (fallocate; falls back to ftruncate when unsupported).
  virtual Status Allocate(uint64_t size) = 0;
  virtual Status Truncate(uint64_t size) = 0;
  virtual Result<uint64_t> Size() = 0;

  // True when the file was opened with O_DIRECT (offsets, sizes and buffers must then be
  // aligned to direct_alignment()).
  virtual bool direct() const = 0;
  virtual uint64_t direct_alignment() const = 0;
  // The OS descriptor, for engines that submit I/O themselves (io_uring, cuFile); -1 if none
  // (a fault-injecting File returns -1 so every byte goes through its ReadAt/WriteAt).
  virtual int fd() const = 0;
  virtual const std::string& path() const = 0;
};

// An exclusive advisory lock on a file (Env::LockFile), held until this object is destroyed or
// the process ends (the kernel drops it then, also after SIGKILL).
class FileLock {
 public:
  virtual ~FileLock() = default;
};

// A File that forwards every call to the one it owns, for wrappers that change a few (delays,
// gates, counters in tests). fd() is -1: every byte goes through the wrapper's ReadAt/WriteAt,
// also under io_uring and cuFile.
class FileWrapper : public File {
 public:
  explicit FileWrapper(std::unique_ptr<File> base) : base_(std::move(base)) {}

  Result<uint64_t> ReadAt(uint64_t offset, void* buf, uint64_t size) override {
    return base_->ReadAt(offset, buf, size);
  }
  Result<uint64_t> WriteAt(uint64_t offset, const void* buf, uint64_t size) override {
    return base_->WriteAt(offset, buf, size);
  }
  Status Sync() override { return base_->Sync(); }
  Status Allocate(uint64_t size) override { return base_->Allocate(size); }
  Status Truncate(uint64_t size) override { return base_->Truncate(size); }
  Result<uint64_t> Size() override { return base_->Size(); }
  bool direct() const override { return base_->direct(); }
  uint64_t direct_alignment() const override { return base_->direct_alignment(); }
  int fd() const override { return -1; }
  const std::string& path() const override { return base_->path(); }

 protected:
  File& base() const { return *base_; }

 private:
  std::unique_ptr<File> base_;
};

class Env {
 public:
  virtual ~Env() = default;

  // Opens an existing file (kNotFound if absent).
  virtual Result<std::unique_ptr<File>> OpenFile(const std::string& path,
                                                 const FileOptions& options) = 0;
  // Creates a new file (kAlreadyExists if present) and opens it read-write.
  virtual Result<std::unique_ptr<File>> CreateFile(const std::string& path,
                                                   const FileOptions& options) = 0;
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  virtual Status DeleteFile(const std::string& path) = 0;
  virtual bool FileExists(const std::string& path) = 0;
  // Creates a directory with permissions 0700 exactly (umask ignored); OK if it exists (its
  // permissions are then left as they are).
  virtual Status CreateDir(const std::string& path) = 0;
  // Makes directory entries (creations, renames, deletions) in `dir` durable.
  virtual Status SyncDir(const std::string& dir) = 0;
  // Reads a whole (small) file; fails with kResourceExhausted if it exceeds `max_bytes`.
  virtual Result<std::string> ReadSmallFile(const std::string& path, uint64_t max_bytes);
  // Writes `data` to `path` (create or replace contents), synced when `sync` is true.
  virtual Status WriteSmallFile(const std::string& path, const std::string& data, bool sync);
  // Owner and permission bits of a path (following symlinks); kNotFound if absent. The default
  // implementations of Stat and SetPermissions act on the POSIX file system at `path`; an Env
  // that is not backed by it overrides both.
  virtual Result<PathInfo> Stat(const std::string& path);
  // Sets a path's permission bits exactly (chmod).
  virtual Status SetPermissions(const std::string& path, uint32_t permissions);
  // Takes an exclusive lock on `path` (created with `permissions` when absent) without waiting
  // and writes `holder` into it, for whoever finds it taken. kLocked when another holder has it,
  // also another open in this process; the message quotes that holder's text. The default
  // implementations of LockFile and LockHolder act on the POSIX file system (open file
  // description locks, F_OFD_SETLK: per open, released by the kernel when the holder dies); an
  // Env that is not backed by it overrides both.
  virtual Result<std::unique_ptr<FileLock>> LockFile(const std::string& path,
                                                     const std::string& holder,
                                                     uint32_t permissions = 0600);
  // Who holds the lock on `path` now: its holder text ("" if it wrote none yet), or nullopt when
  // nobody does (or the file is absent). Takes nothing: a LockFile racing it is not disturbed.
  virtual Result<std::optional<std::string>> LockHolder(const std::string& path);
};

// The process's POSIX Env (a stateless singleton; safe to share).
Env* DefaultEnv();

// An Env that forwards every operation to `target` (borrowed; must outlive the wrapper).
// Derive from it and override only what the derived Env changes.
//
// ReadSmallFile / WriteSmallFile are not forwarded: Env composes them from OpenFile /
// CreateFile / Truncate on `this`, so a wrapper that changes how files open (fault injection,
// gates, counting) sees the small-file reads and writes too.
class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(Env* target) : target_(target) {}

  Env* target() const { return target_; }

  Result<std::unique_ptr<File>> OpenFile(const std::string& path,
                                         const FileOptions& options) override {
    return target_->OpenFile(path, options);
  }
  Result<std::unique_ptr<File>> CreateFile(const std::string& path,
                                           const FileOptions& options) override {
    return target_->CreateFile(path, options);
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    return target_->RenameFile(from, to);
  }
  Status DeleteFile(const std::string& path) override { return target_->DeleteFile(path); }
  bool FileExists(const std::string& path) override { return target_->FileExists(path); }
  Status CreateDir(const std::string& path) override { return target_->CreateDir(path); }
  Status SyncDir(const std::string& dir) override { return target_->SyncDir(dir); }
  Result<PathInfo> Stat(const std::string& path) override { return target_->Stat(path); }
  Status SetPermissions(const std::string& path, uint32_t permissions) override {
    return target_->SetPermissions(path, permissions);
  }
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path, const std::string& holder,
                                             uint32_t permissions = 0600) override {
    return target_->LockFile(path, holder, permissions);
  }
  Result<std::optional<std::string>> LockHolder(const std::string& path) override {
    return target_->LockHolder(path);
  }

 private:
  Env* target_;
};

}  // namespace rangekv
