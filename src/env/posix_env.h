// PosixEnv: the File seam (env.h) over POSIX system calls.
//
// Files use positional I/O only (pread/pwrite), so one File may be shared by many threads.
// Each ReadAt/WriteAt is one system call (EINTR is retried, nothing else): short counts are
// returned to the caller, never hidden.
//
// O_DIRECT: with DirectIo::kPreferred the file is opened with O_DIRECT; when the file system
// refuses it at open (EINVAL: e.g. tmpfs before Linux 6.6, some FUSE and network file systems)
// the file is reopened buffered and direct() reports false. direct_alignment() is the larger of
// 4096 and what statx(STATX_DIOALIGN) reports for the file (memory and offset alignment), so
// planners can round to one value for buffered and direct files alike. O_DIRECT transfers whose
// buffer, offset or length break that alignment fail with EINVAL from the kernel (kIoError).
//
// Error mapping: ENOENT -> kNotFound, EEXIST -> kAlreadyExists, ENOSPC/EDQUOT -> kNoSpace,
// every other errno -> kIoError; messages carry the path and the call.
//
// Thread-safety: PosixEnv is stateless; PosixFile follows env.h (concurrent positional I/O).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "rangekv/env.h"

namespace rangekv {

class PosixEnv final : public Env {
 public:
  PosixEnv() = default;

  Result<std::unique_ptr<File>> OpenFile(const std::string& path,
                                         const FileOptions& options) override;
  Result<std::unique_ptr<File>> CreateFile(const std::string& path,
                                           const FileOptions& options) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status DeleteFile(const std::string& path) override;
  bool FileExists(const std::string& path) override;
  Status CreateDir(const std::string& path) override;
  Status SyncDir(const std::string& dir) override;
};

// The O_DIRECT alignment to use for an open descriptor: max(4096, statx's
// stx_dio_offset_align, stx_dio_mem_align); 4096 when statx cannot tell (kernel < 6.1, or a
// file system that reports nothing).
uint64_t ProbeDirectAlignment(int fd);

// A File over a descriptor opened elsewhere (the store service passes a pack file's; see
// src/store/service_store.h), which it then owns and closes. direct() reports whether the
// descriptor has O_DIRECT (fcntl F_GETFL); `path` names it in messages.
std::unique_ptr<File> AdoptFileDescriptor(int fd, std::string path);

}  // namespace rangekv
