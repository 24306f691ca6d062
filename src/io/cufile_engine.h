// The `cufile` engine: spans run through cuFileRead/cuFileWrite (libcufile, loaded with dlopen;
// cufile_shim.h), on a pool of `workers` threads taking spans (or byte-split pieces) from the
// shared queue, like the posix engine: cuFile's calls are synchronous.
//
// Lifecycle of the vendor resources, each acquired once:
//   - the library is loaded and cuFileDriverOpen called in MakeCuFileEngine; the driver is
//     closed when the engine is destroyed (after every batch drained and every handle and
//     buffer was deregistered);
//   - RegisterFiles registers one cuFile handle per file descriptor (cuFileHandleRegister),
//     replacing the previous set; spans of files without a handle (fd() == -1, e.g. the
//     fault-injecting env) go through File::ReadAt/WriteAt with the contract's checks;
//   - RegisterBuffers registers each bank or staging buffer once (cuFileBufRegister); a span
//     inside a registered buffer passes that buffer's base and its offset, as cuFile requires.
// O_DIRECT reads with a partial last block also take the File path (the tail needs the bounce
// block); cuFile's own unaligned handling is not relied on.
//
// Mode: after the driver opened, cuFileDriverGetProperties (when the library has it) tells
// whether nvidia-fs is present (GDS) or cuFile serves every call through its POSIX path (compat,
// nvfs version 0.0). Describe() says which, with the library version.
//
// Fallback: MakeCuFileEngine returns kNotSupported with the reason (library missing, a symbol
// missing, driver open failing with its cuFile error) and RegisterFiles returns kNotSupported
// when cuFile refuses a handle (e.g. 5027 on volumes whose udev attributes it cannot read), so
// the caller can fall back to io_uring or posix and log why. cuFile needs a CUDA context: the
// engine layer only asks for it with a CUDA device (src/engine/engine_core.cc).
//
// Thread-safety: as IoEngine.
#pragma once

#include <memory>
#include <string>

#include "io/cufile_shim.h"
#include "io/io_engine.h"

namespace rangekv {

// Where the engine's cuFile comes from: a library path to dlopen ("" = libcufile.so.0), or a
// caller-owned function table (a fake for tests of the fallback and data paths; it must outlive
// the engine).
struct CuFileSource {
  std::string library;
  const cufile::Api* api = nullptr;
};

Result<std::unique_ptr<IoEngine>> MakeCuFileEngine(const IoEngineOptions& options,
                                                   const CuFileSource& source);

}  // namespace rangekv
