// GetBuildInfo (include/rangekv/build_info.h). The values come from the build:
// src/device/CMakeLists.txt defines RANGEKV_VERSION, RANGEKV_CUDA_KERNELS and
// RANGEKV_CUDA_COMPILER_VERSION (both empty without CUDA) for this file only, so a change of
// CUDA architectures recompiles one file.
#include "rangekv/build_info.h"

#if !defined(RANGEKV_VERSION) || !defined(RANGEKV_CUDA_KERNELS) || \
    !defined(RANGEKV_CUDA_COMPILER_VERSION)
#error "the build defines RANGEKV_VERSION, RANGEKV_CUDA_KERNELS and RANGEKV_CUDA_COMPILER_VERSION"
#endif

namespace rangekv {

const BuildInfo& GetBuildInfo() {
  static constexpr BuildInfo kInfo{.version = RANGEKV_VERSION,
                                   .cuda_kernels = RANGEKV_CUDA_KERNELS,
                                   .cuda_compiler_version = RANGEKV_CUDA_COMPILER_VERSION};
  return kInfo;
}

}  // namespace rangekv
