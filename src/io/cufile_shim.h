// cuFile (GPUDirect Storage) without cufile.h: the handful of types and entry points the cufile
// engine calls, declared here ABI-exact for x86-64, and a
// loader that fills a table of function pointers from libcufile.so.0 with dlopen/dlsym.
//
// Nothing here links libcufile: a machine without it builds and runs, and the engine that wants
// cuFile learns why it cannot have it (kNotSupported with the dlopen/dlsym error). Where the real
// header exists at build time, cufile_abi_check.cc static-asserts that these declarations match
// it (sizes, offsets, signatures).
//
// Thread-safety: CuFileApi is a plain table; cuFile's own entry points are thread-safe.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "rangekv/status.h"

namespace rangekv::cufile {

// CUfileError_t: {CUfileOpError err; CUresult cu_err;}, returned by value.
struct Error {
  int err = 0;
  int cu_err = 0;
};

inline constexpr int kSuccess = 0;             // CU_FILE_SUCCESS
inline constexpr int kOpBaseError = 5000;      // CUFILEOP_BASE_ERR
inline constexpr int kHandleTypeOpaqueFd = 1;  // CU_FILE_HANDLE_TYPE_OPAQUE_FD

// CUfileDescr_t.
struct Descr {
  int type = 0;
  union {
    int fd;
    void* handle;
  } handle{};
  const void* fs_ops = nullptr;  // const CUfileFSOps_t*; always null here
};

using Handle = void*;  // CUfileHandle_t

// CUfileDrvProps_t.
struct DrvProps {
  struct {
    unsigned int major_version;
    unsigned int minor_version;
    size_t poll_thresh_size;
    size_t max_direct_io_size;
    unsigned int dstatusflags;
    unsigned int dcontrolflags;
  } nvfs;
  unsigned int fflags;
  unsigned int max_device_cache_size;
  unsigned int per_buffer_cache_size;
  unsigned int max_device_pinned_mem_size;
  unsigned int max_batch_io_size;
  unsigned int max_batch_io_timeout_msecs;
};

// The entry points used, by their cufile.h names. Optional ones may be null.
struct Api {
  Error (*cuFileDriverOpen)() = nullptr;
  Error (*cuFileDriverClose)() = nullptr;  // the header maps it to cuFileDriverClose_v2
  Error (*cuFileHandleRegister)(Handle* fh, Descr* descr) = nullptr;
  void (*cuFileHandleDeregister)(Handle fh) = nullptr;
  Error (*cuFileBufRegister)(const void* base, size_t length, int flags) = nullptr;
  Error (*cuFileBufDeregister)(const void* base) = nullptr;
  ssize_t (*cuFileRead)(Handle fh, void* base, size_t size, off_t file_offset,
                        off_t buf_offset) = nullptr;
  ssize_t (*cuFileWrite)(Handle fh, const void* base, size_t size, off_t file_offset,
                         off_t buf_offset) = nullptr;
  Error (*cuFileDriverGetProperties)(DrvProps* props) = nullptr;  // optional
  Error (*cuFileGetVersion)(int* version) = nullptr;              // optional
};

// A loaded library: the table plus the dlopen handle (closed on destruction, after which the
// table must not be used).
class Library {
 public:
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  const Api& api() const { return api_; }
  const std::string& path() const { return path_; }

  // dlopen(`path`) (default "libcufile.so.0", found by the dynamic loader) and resolve every
  // required symbol. kNotSupported naming the library and dlerror() when it cannot.
  static Result<std::unique_ptr<Library>> Load(const std::string& path);

 private:
  Library() = default;
  void* handle_ = nullptr;
  std::string path_;
  Api api_;
};

// "5033 (CU_FILE_NVFS_SETUP_ERROR)": a name for the codes the fallback reasons mention.
std::string ErrorName(const Error& e);

}  // namespace rangekv::cufile
