// CudaDevice: the device seam on a real GPU through the CUDA runtime, which is linked
// statically, so a binary that contains it starts on machines without a GPU or driver.
// Declared for MakeDevice() (device.cc), which is the only caller and the only code that knows
// whether this is compiled in; the definition exists only when RANGEKV_HAVE_CUDA.
//
//   - Device memory: cudaMalloc. Pinned host memory: an anonymous mapping registered with
//     cudaHostRegister (page-aligned, so O_DIRECT can read into it).
//   - Streams: cudaStreamCreateWithPriority(cudaStreamNonBlocking), so they never serialise
//     with the legacy default stream. Events: cudaEventCreateWithFlags.
//   - Host callbacks: cudaLaunchHostFunc.
//   - Flags: a cudaHostAllocMapped word; WaitFlag/WriteFlag are cuStreamWaitValue32 /
//     cuStreamWriteValue32 obtained through cudaGetDriverEntryPointByVersion (no link-time
//     dependency on libcuda); the capability is probed at creation.
//   - Kernels: kernels/cuda_kernels.h.
// Every call first makes the device's ordinal current on the calling thread.
#pragma once

#include <memory>

#include "device/device.h"

namespace rangekv {

// kNotSupported when the CUDA driver is missing or too old, or no device has this ordinal;
// another CUDA error maps to kInternal.
Result<std::unique_ptr<Device>> CreateCudaDevice(int ordinal);

}  // namespace rangekv
