// BuildInfo: what this build of the library contains, so that a user can tell a build with the
// CUDA kernels from one without them (both run: without them only the host device exists).
// Engine::DescribeBackends() names the kernels at Open ("cuda_kernels=sm_80,...|none"), the
// CLI prints them under `rangekv --version`, Python under rangekv.build_info().
//
// Thread-safety: immutable values, set at compile time.
#pragma once

#include <string_view>

namespace rangekv {

struct BuildInfo {
  std::string_view version;  // the library's version, "0.1.0"
  // The GPU targets the CUDA kernels were compiled for, comma-separated: machine code as
  // "sm_NN", PTX (compiled by the driver on newer GPUs) as "compute_NN". Empty when the build
  // had no CUDA compiler (or RANGEKV_CUDA=OFF).
  std::string_view cuda_kernels;
  std::string_view cuda_compiler_version;  // nvcc's version, "13.0.88"; empty without CUDA

  bool has_cuda_kernels() const { return !cuda_kernels.empty(); }
};

// This build's values.
const BuildInfo& GetBuildInfo();

// How a build without CUDA kernels gets them, for error messages: the one place that says it.
inline constexpr std::string_view kCudaKernelsRemedy =
    "reinstall rangekv where the CUDA toolkit's nvcc is (on PATH, in CUDACXX or in "
    "/usr/local/cuda/bin) and without RANGEKV_CUDA=OFF: `pip install .` then builds them";

}  // namespace rangekv
