#include "rangekv/env.h"

#include <sys/stat.h>

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

}  // namespace rangekv
