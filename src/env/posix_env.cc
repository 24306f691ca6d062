#include "env/posix_env.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "base/units.h"

// glibc 2.36 takes struct statx from <linux/stat.h> when the kernel headers are new enough
// (Debian 12's are); older headers lack the constant and the two fields.
#ifndef STATX_DIOALIGN
#define STATX_DIOALIGN 0x00002000U
#define RANGEKV_STATX_LACKS_DIO_FIELDS 1
#endif

namespace rangekv {
namespace {

constexpr uint64_t kMinDirectAlignment = 4096;
// One pread/pwrite never moves more than this (Linux caps a single call at 2 GiB - 4 KiB);
// larger requests return a short count, which callers handle as for any short transfer.
constexpr uint64_t kMaxBytesPerCall = 1 * kGiB;

Status PathErrno(int err, std::string_view call, const std::string& path) {
  std::string what(call);
  what += " ";
  what += path;
  if (err == ENOENT) return NotFound(what + ": " + std::strerror(err));
  if (err == EEXIST) return Status(StatusCode::kAlreadyExists, what + ": " + std::strerror(err));
  return ErrnoStatus(err, what);
}

class PosixFile final : public File {
 public:
  PosixFile(int fd, std::string path, bool direct, uint64_t alignment)
      : fd_(fd), path_(std::move(path)), direct_(direct), alignment_(alignment) {}
  ~PosixFile() override { ::close(fd_); }
  PosixFile(const PosixFile&) = delete;
  PosixFile& operator=(const PosixFile&) = delete;

  Result<uint64_t> ReadAt(uint64_t offset, void* buf, uint64_t size) override {
    const size_t n = static_cast<size_t>(std::min(size, kMaxBytesPerCall));
    for (;;) {
      const ssize_t r = ::pread(fd_, buf, n, static_cast<off_t>(offset));
      if (r >= 0) return static_cast<uint64_t>(r);
      if (errno == EINTR) continue;
      return PathErrno(errno, "pread", path_);
    }
  }

  Result<uint64_t> WriteAt(uint64_t offset, const void* buf, uint64_t size) override {
    const size_t n = static_cast<size_t>(std::min(size, kMaxBytesPerCall));
    for (;;) {
      const ssize_t r = ::pwrite(fd_, buf, n, static_cast<off_t>(offset));
      if (r >= 0) return static_cast<uint64_t>(r);
      if (errno == EINTR) continue;
      return PathErrno(errno, "pwrite", path_);
    }
  }

  Status Sync() override {
    if (::fdatasync(fd_) != 0) return PathErrno(errno, "fdatasync", path_);
    return OkStatus();
  }

  Status Allocate(uint64_t size) override {
    if (size == 0) return OkStatus();
    int err;
    do {
      err = ::fallocate(fd_, 0, 0, static_cast<off_t>(size)) == 0 ? 0 : errno;
    } while (err == EINTR);
    if (err == 0) return OkStatus();
    if (err != EOPNOTSUPP && err != ENOSYS) return PathErrno(err, "fallocate", path_);
    // No preallocation on this file system: at least make the size right (never shrink).
    RANGEKV_ASSIGN_OR_RETURN(const uint64_t current, Size());
    if (current >= size) return OkStatus();
    return Truncate(size);
  }

  Status Truncate(uint64_t size) override {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
      return PathErrno(errno, "ftruncate", path_);
    }
    return OkStatus();
  }

  Result<uint64_t> Size() override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return PathErrno(errno, "fstat", path_);
    return static_cast<uint64_t>(st.st_size);
  }

  bool direct() const override { return direct_; }
  uint64_t direct_alignment() const override { return alignment_; }
  int fd() const override { return fd_; }
  const std::string& path() const override { return path_; }

 private:
  const int fd_;
  const std::string path_;
  const bool direct_;
  const uint64_t alignment_;
};

int OpenFlags(OpenMode mode) { return mode == OpenMode::kReadOnly ? O_RDONLY : O_RDWR; }

// Opens with O_DIRECT when asked and supported; `create` adds O_CREAT|O_EXCL.
Result<std::unique_ptr<File>> Open(const std::string& path, const FileOptions& options,
                                   bool create) {
  int flags = OpenFlags(options.mode) | O_CLOEXEC;
  if (create) flags |= O_CREAT | O_EXCL;
  const mode_t perms = static_cast<mode_t>(options.permissions & 07777);
  bool direct = options.direct == DirectIo::kPreferred;
  int fd = -1;
  for (;;) {
    fd = ::open(path.c_str(), flags | (direct ? O_DIRECT : 0), perms);
    if (fd >= 0) break;
    const int err = errno;
    if (err == EINTR) continue;
    if (err == EINVAL && direct) {
      // The file system has no O_DIRECT. A failed O_CREAT|O_EXCL open may still have created
      // the file (the flag check happens after the inode is made on some file systems), so
      // reopen without O_EXCL in that case: the file is ours either way.
      direct = false;
      if (create && ::access(path.c_str(), F_OK) == 0) flags &= ~O_EXCL;
      continue;
    }
    return PathErrno(err, create ? "create" : "open", path);
  }
  // open() applied the umask; a created file gets exactly the bits asked for.
  if (create && ::fchmod(fd, perms) != 0) {
    const int err = errno;
    ::close(fd);
    return PathErrno(err, "fchmod", path);
  }
  const uint64_t alignment = ProbeDirectAlignment(fd);
  return std::unique_ptr<File>(new PosixFile(fd, path, direct, alignment));
}

}  // namespace

uint64_t ProbeDirectAlignment(int fd) {
  struct statx sx;
  std::memset(&sx, 0, sizeof(sx));
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) != 0) return kMinDirectAlignment;
  if ((sx.stx_mask & STATX_DIOALIGN) == 0) return kMinDirectAlignment;
  uint32_t mem_align;
  uint32_t offset_align;
#ifdef RANGEKV_STATX_LACKS_DIO_FIELDS
  // Kernel layout: stx_mnt_id (u64) at 0x90, then stx_dio_mem_align, stx_dio_offset_align.
  const auto* raw = reinterpret_cast<const unsigned char*>(&sx);
  std::memcpy(&mem_align, raw + 0x98, sizeof(mem_align));
  std::memcpy(&offset_align, raw + 0x9c, sizeof(offset_align));
#else
  mem_align = sx.stx_dio_mem_align;
  offset_align = sx.stx_dio_offset_align;
#endif
  return std::max<uint64_t>({kMinDirectAlignment, mem_align, offset_align});
}

std::unique_ptr<File> AdoptFileDescriptor(int fd, std::string path) {
  const int flags = ::fcntl(fd, F_GETFL);
  const bool direct = flags >= 0 && (flags & O_DIRECT) != 0;
  return std::unique_ptr<File>(
      new PosixFile(fd, std::move(path), direct, ProbeDirectAlignment(fd)));
}

Result<std::unique_ptr<File>> PosixEnv::OpenFile(const std::string& path,
                                                 const FileOptions& options) {
  return Open(path, options, /*create=*/false);
}

Result<std::unique_ptr<File>> PosixEnv::CreateFile(const std::string& path,
                                                   const FileOptions& options) {
  FileOptions rw = options;
  rw.mode = OpenMode::kReadWrite;
  return Open(path, rw, /*create=*/true);
}

Status PosixEnv::RenameFile(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    return PathErrno(errno, "rename", from + " -> " + to);
  return OkStatus();
}

Status PosixEnv::DeleteFile(const std::string& path) {
  if (::unlink(path.c_str()) != 0) return PathErrno(errno, "unlink", path);
  return OkStatus();
}

bool PosixEnv::FileExists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

Status PosixEnv::CreateDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) == 0) {
    // mkdir applied the umask; the new directory gets exactly 0700.
    if (::chmod(path.c_str(), 0700) != 0) return PathErrno(errno, "chmod", path);
    return OkStatus();
  }
  const int err = errno;
  struct stat st;
  if (err == EEXIST && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return OkStatus();
  return PathErrno(err, "mkdir", path);
}

Status PosixEnv::SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return PathErrno(errno, "open dir", dir);
  Status s;
  if (::fsync(fd) != 0) s = PathErrno(errno, "fsync dir", dir);
  ::close(fd);
  return s;
}

}  // namespace rangekv
