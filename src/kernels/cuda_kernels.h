// CUDA launchers of the engine's kernels (scatter, gather, span digest). Built only when CUDA
// is compiled in; included only by the CUDA device (src/device/cuda_device.cc) and GPU tests.
//
// Each launcher enqueues its work on `stream` and returns the launch status (cudaSuccess, or
// the error of the launch or of an enqueued memset); execution errors surface later at the
// stream's or an event's synchronisation. Arguments are passed by value into the kernel, so
// the caller's args struct may be reused as soon as the launcher returns; the memory it
// points to must stay valid until the launch's completion is proven.
//
// REQUIRES: the matching Validate*Args() returned OK (launchers do not re-validate) and every
// pointer (paged bases, stripe, slots, out, digests, span data) is device-accessible on the
// current device. The current device is the caller's to set (cudaSetDevice).
//
// Thread-safety: callable concurrently from any thread (the CUDA runtime serialises).
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/paged_kv.h"
#include "kernels/span_digest.h"

namespace rangekv::kernels {

cudaError_t LaunchScatter(const ScatterArgs& args, cudaStream_t stream);
cudaError_t LaunchGather(const GatherArgs& args, cudaStream_t stream);

// Zeroes args.digests (cudaMemsetAsync) and accumulates each span's digest into it.
cudaError_t LaunchSpanDigest(const DigestArgs& args, cudaStream_t stream);

}  // namespace rangekv::kernels
