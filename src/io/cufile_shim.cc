#include "io/cufile_shim.h"

#include <dlfcn.h>

namespace rangekv::cufile {

Library::~Library() {
  // RTLD_NODELETE keeps the code mapped: cuFile may still run its own teardown threads.
  if (handle_ != nullptr) ::dlclose(handle_);
}

Result<std::unique_ptr<Library>> Library::Load(const std::string& path) {
  const std::string name = path.empty() ? "libcufile.so.0" : path;
  ::dlerror();
  void* h = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (h == nullptr) {
    const char* why = ::dlerror();
    return NotSupported("cannot load " + name + ": " + (why != nullptr ? why : "dlopen failed"));
  }
  std::unique_ptr<Library> lib(new Library());
  lib->handle_ = h;
  lib->path_ = name;
  std::string missing;
  auto resolve = [&](auto*& fn, const char* symbol, bool required) {
    ::dlerror();
    void* p = ::dlsym(h, symbol);
    if (p == nullptr && required) missing += std::string(missing.empty() ? "" : ", ") + symbol;
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  Api& a = lib->api_;
  resolve(a.cuFileDriverOpen, "cuFileDriverOpen", true);
  resolve(a.cuFileDriverClose, "cuFileDriverClose_v2", false);
  if (a.cuFileDriverClose == nullptr) resolve(a.cuFileDriverClose, "cuFileDriverClose", true);
  resolve(a.cuFileHandleRegister, "cuFileHandleRegister", true);
  resolve(a.cuFileHandleDeregister, "cuFileHandleDeregister", true);
  resolve(a.cuFileBufRegister, "cuFileBufRegister", true);
  resolve(a.cuFileBufDeregister, "cuFileBufDeregister", true);
  resolve(a.cuFileRead, "cuFileRead", true);
  resolve(a.cuFileWrite, "cuFileWrite", true);
  resolve(a.cuFileDriverGetProperties, "cuFileDriverGetProperties", false);
  resolve(a.cuFileGetVersion, "cuFileGetVersion", false);
  if (!missing.empty()) return NotSupported(name + " lacks " + missing);
  return lib;
}

std::string ErrorName(const Error& e) {
  const char* name = nullptr;
  switch (e.err) {
    case 0:
      name = "CU_FILE_SUCCESS";
      break;
    case 5001:
      name = "CU_FILE_DRIVER_NOT_INITIALIZED";
      break;
    case 5004:
      name = "CU_FILE_DRIVER_VERSION_MISMATCH";
      break;
    case 5007:
      name = "CU_FILE_PLATFORM_NOT_SUPPORTED";
      break;
    case 5008:
      name = "CU_FILE_IO_NOT_SUPPORTED";
      break;
    case 5011:
      name = "CU_FILE_CUDA_DRIVER_ERROR";
      break;
    case 5019:
      name = "CU_FILE_INVALID_FILE_OPEN_FLAG";
      break;
    case 5020:
      name = "CU_FILE_DIO_NOT_SET";
      break;
    case 5025:
      name = "CU_FILE_PERMISSION_DENIED";
      break;
    case 5027:
      name = "CU_FILE_HANDLE_NOT_REGISTERED";
      break;
    case 5028:
      name = "CU_FILE_HANDLE_ALREADY_REGISTERED";
      break;
    case 5033:
      name = "CU_FILE_NVFS_SETUP_ERROR";
      break;
    case 5036:
      name = "CU_FILE_GPU_MEMORY_PINNING_FAILED";
      break;
    default:
      break;
  }
  std::string s = std::to_string(e.err);
  if (name != nullptr) s += std::string(" (") + name + ")";
  if (e.cu_err != 0) s += ", CUresult " + std::to_string(e.cu_err);
  return s;
}

}  // namespace rangekv::cufile
