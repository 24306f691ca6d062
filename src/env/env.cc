#include "rangekv/env.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

#include "env/posix_env.h"

namespace rangekv {

Result<std::string> Env::ReadSmallFile(const std::string& path, uint64_t max_bytes) {
  RANGEKV_ASSIGN_OR_RETURN(std::unique_ptr<File> file,
                           OpenFile(path, FileOptions{
                                              .mode = OpenMode::kReadOnly,
                                              .direct = DirectIo::kOff,
                                          }));
  RANGEKV_ASSIGN_OR_RETURN(const uint64_t size, file->Size());
  if (size > max_bytes) {
    return ResourceExhausted(path + " is " + std::to_string(size) + " bytes, more than the " +
                             std::to_string(max_bytes) + " allowed");
  }
  std::string data(size, '\0');
  uint64_t done = 0;
  while (done < size) {
    RANGEKV_ASSIGN_OR_RETURN(const uint64_t n, file->ReadAt(done, data.data() + done, size - done));
    if (n == 0) {
      // The file shrank between Size() and the read: report it rather than return zeros.
      return Status(StatusCode::kShortTransfer, path + ": read " + std::to_string(done) + " of " +
                                                    std::to_string(size) + " bytes");
    }
    done += n;
  }
  return data;
}

Status Env::WriteSmallFile(const std::string& path, const std::string& data, bool sync) {
  const FileOptions options{.mode = OpenMode::kReadWrite, .direct = DirectIo::kOff};
  Result<std::unique_ptr<File>> opened = CreateFile(path, options);
  if (!opened.ok() && opened.status().code() == StatusCode::kAlreadyExists) {
    opened = OpenFile(path, options);
    if (opened.ok()) RANGEKV_RETURN_IF_ERROR((*opened)->Truncate(0));
  }
  if (!opened.ok()) return opened.status();
  File& file = **opened;
  uint64_t done = 0;
  while (done < data.size()) {
    RANGEKV_ASSIGN_OR_RETURN(const uint64_t n,
                             file.WriteAt(done, data.data() + done, data.size() - done));
    if (n == 0) {
      return Status(StatusCode::kShortTransfer, path + ": wrote " + std::to_string(done) + " of " +
                                                    std::to_string(data.size()) + " bytes");
    }
    done += n;
  }
  if (sync) RANGEKV_RETURN_IF_ERROR(file.Sync());
  return OkStatus();
}

Env* DefaultEnv() {
  static PosixEnv* env = new PosixEnv();  // never destroyed: usable from static destructors
  return env;
}

Result<PathInfo> Env::Stat(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return NotFound("stat " + path);
    return ErrnoStatus(err, "stat " + path);
  }
  PathInfo info;
  info.directory = S_ISDIR(st.st_mode);
  info.owner_uid = st.st_uid;
  info.permissions = st.st_mode & 07777;
  return info;
}

Status Env::SetPermissions(const std::string& path, uint32_t permissions) {
  if (::chmod(path.c_str(), static_cast<mode_t>(permissions & 07777)) != 0) {
    return ErrnoStatus(errno, "chmod " + path);
  }
  return OkStatus();
}

namespace {

// Holder texts are short; a longer file is someone else's and is quoted cut.
constexpr size_t kMaxHolderBytes = 512;

// An open file description lock (F_OFD_SETLK) over the whole file: unlike a POSIX record lock it
// belongs to this open, so a second open in the same process conflicts too, and closing another
// descriptor of the file does not drop it. flock(2) would do the same; OFD locks add F_OFD_GETLK,
// which lets LockHolder ask without taking the lock (a probing `rangekv fsck` must never make an
// opening engine fail).
class PosixFileLock final : public FileLock {
 public:
  explicit PosixFileLock(int fd) : fd_(fd) {}
  ~PosixFileLock() override { ::close(fd_); }  // the lock goes with its open file description

 private:
  int fd_;
};

std::string ReadHolder(int fd) {
  char buf[kMaxHolderBytes];
  const ssize_t n = ::pread(fd, buf, sizeof(buf), 0);
  std::string out = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  while (!out.empty() && (out.back() == '\n' || out.back() == '\0')) out.pop_back();
  return out;
}

struct flock WholeFile(short type) {
  struct flock l {};
  l.l_type = type;
  l.l_whence = SEEK_SET;
  l.l_start = 0;
  l.l_len = 0;  // to the end, however long
  l.l_pid = 0;  // required by F_OFD_*
  return l;
}

}  // namespace

Result<std::unique_ptr<FileLock>> Env::LockFile(const std::string& path, const std::string& holder,
                                                uint32_t permissions) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
                        static_cast<mode_t>(permissions & 0777));
  if (fd < 0) return ErrnoStatus(errno, "lock " + path);
  struct flock l = WholeFile(F_WRLCK);
  if (::fcntl(fd, F_OFD_SETLK, &l) != 0) {
    const int err = errno;
    if (err == EAGAIN || err == EACCES) {
      const std::string who = ReadHolder(fd);
      ::close(fd);
      return Status(StatusCode::kLocked,
                    path + " is held by " + (who.empty() ? std::string("another process") : who));
    }
    ::close(fd);
    return ErrnoStatus(err, "lock " + path);
  }
  auto lock = std::make_unique<PosixFileLock>(fd);
  // What a second opener quotes. Written after the lock is ours: one that reads it in between
  // finds the previous holder's text or none, never a half-written one of ours (pwrite at 0 of
  // a few bytes, after a truncate).
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, holder.data(), holder.size(), 0) != static_cast<ssize_t>(holder.size())) {
    return ErrnoStatus(errno, "lock " + path + ": writing its holder");
  }
  return std::unique_ptr<FileLock>(std::move(lock));
}

Result<std::optional<std::string>> Env::LockHolder(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return std::optional<std::string>();
    return ErrnoStatus(err, "lock " + path);
  }
  // A write lock is what a holder takes; asking whether one could be taken reports it.
  struct flock l = WholeFile(F_WRLCK);
  if (::fcntl(fd, F_OFD_GETLK, &l) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "lock " + path);
  }
  std::optional<std::string> out;
  if (l.l_type != F_UNLCK) out = ReadHolder(fd);
  ::close(fd);
  return out;
}

}  // namespace rangekv
