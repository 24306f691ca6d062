// The RAII types of device.h and MakeDevice(): the one place that knows whether CUDA was
// compiled in.
#include "device/device.h"

#include <utility>

#include "base/log.h"
#include "device/host_device.h"
#include "rangekv/build_info.h"
#if RANGEKV_HAVE_CUDA
#include "device/cuda_device.h"
#endif

namespace rangekv {

std::string_view DeviceKindName(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kHost:
      return "host";
    case DeviceKind::kCuda:
      return "cuda";
    case DeviceKind::kAuto:
      return "auto";
  }
  return "unknown";
}

// ---- RAII types ----

namespace device_internal {

OwnedRange::OwnedRange(OwnedRange&& o) noexcept
    : owner_(std::exchange(o.owner_, nullptr)),
      data_(std::exchange(o.data_, nullptr)),
      size_bytes_(std::exchange(o.size_bytes_, 0)),
      release_(o.release_) {}

OwnedRange& OwnedRange::operator=(OwnedRange&& o) noexcept {
  if (this != &o) {
    reset();
    owner_ = std::exchange(o.owner_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    size_bytes_ = std::exchange(o.size_bytes_, 0);
    release_ = o.release_;
  }
  return *this;
}

void OwnedRange::reset() {
  if (data_ != nullptr) {
    switch (release_) {
      case Release::kDeviceMemory:
        owner_->FreeDevice(data_, size_bytes_);
        break;
      case Release::kPinnedHost:
        owner_->FreePinnedHost(static_cast<uint8_t*>(data_), size_bytes_);
        break;
      case Release::kHostRegistration:
        owner_->UnregisterHostMemory(data_, size_bytes_);
        break;
    }
  }
  owner_ = nullptr;
  data_ = nullptr;
  size_bytes_ = 0;
}

}  // namespace device_internal

// ---- Stream ----

Status Stream::VerifiedScatter(const kernels::VerifiedScatterArgs& args) {
  RANGEKV_RETURN_IF_ERROR(kernels::ValidateVerifiedScatterArgs(args));
  RANGEKV_RETURN_IF_ERROR(Digest(args.digest));
  kernels::ScatterArgs gated = args.scatter;
  gated.skip_if_set = args.digest.mismatch;
  return Scatter(gated);
}

Status Stream::GatherDigest(const kernels::DigestedGatherArgs& args) {
  RANGEKV_RETURN_IF_ERROR(kernels::ValidateDigestedGatherArgs(args));
  RANGEKV_RETURN_IF_ERROR(Gather(args.gather));
  return Digest(args.digest);
}

// ---- factory ----

bool CudaCompiledIn() {
#if RANGEKV_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

namespace {

Result<std::unique_ptr<Device>> MakeCuda(int ordinal) {
#if RANGEKV_HAVE_CUDA
  return CreateCudaDevice(ordinal);
#else
  (void)ordinal;
  return NotSupported("CUDA device requested, but this build has no CUDA kernels: " +
                      std::string(kCudaKernelsRemedy));
#endif
}

}  // namespace

Result<std::unique_ptr<Device>> MakeDevice(const DeviceOptions& options) {
  switch (options.kind) {
    case DeviceKind::kHost:
      return CreateHostDevice(options.host);
    case DeviceKind::kCuda:
      return MakeCuda(options.ordinal);
    case DeviceKind::kAuto: {
      Result<std::unique_ptr<Device>> cuda = MakeCuda(options.ordinal);
      if (cuda.ok()) return cuda;
      Log(LogLevel::kInfo, "device: using the host device (" + cuda.status().ToString() + ")");
      return CreateHostDevice(options.host);
    }
  }
  return InvalidArgument("unknown device kind");
}

}  // namespace rangekv
