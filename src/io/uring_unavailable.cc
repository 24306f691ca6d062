// Built instead of uring_engine.cc when liburing is absent at build time.
#include "io/io_internal.h"

namespace rangekv::io_internal {

Result<std::unique_ptr<IoEngine>> MakeUringEngine(const IoEngineOptions&) {
  return NotSupported("rangekv was built without liburing; the uring engine is not compiled in");
}

}  // namespace rangekv::io_internal
